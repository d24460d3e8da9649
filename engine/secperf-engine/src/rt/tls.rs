//! TLS for the engine's clients (rustls with the `ring` provider): the
//! settings a spec gives (versions, one cipher suite, key-exchange groups,
//! session resumption, the CA to trust), checked when the spec is resolved,
//! the client configuration built from them once per test, and the
//! non-blocking moves of one connection (handshake, send, receive) for the
//! event loop's machines. Nothing here knows a kind.

use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;

use rustls::client::Resumption;
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, ProtocolVersion, RootCertStore};
use serde::Serialize;

/// TLS settings as resolved from a spec: names already checked against
/// what the provider offers.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TlsOptions {
    /// "1.2", "1.3", or both (the default).
    pub versions: Vec<String>,
    /// One cipher suite by its IANA name (None: the provider's list).
    pub cipher: Option<String>,
    /// Key-exchange groups, in order of preference (empty: the provider's list).
    pub groups: Vec<String>,
    /// Session resumption (tickets and session ids) on or off.
    pub resumption: bool,
    /// PEM file of the CA(s) to trust.
    pub ca_file: String,
    /// Name the certificate must carry and SNI (None: the server's address, no SNI).
    pub server_name: Option<String>,
}

/// The cipher suites the provider offers, by name.
pub fn cipher_names() -> Vec<String> {
    ring::default_provider()
        .cipher_suites
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// The key-exchange groups the provider offers, by name.
pub fn group_names() -> Vec<String> {
    ring::default_provider()
        .kx_groups
        .iter()
        .map(|g| format!("{:?}", g.name()))
        .collect()
}

/// The protocol version ("1.2" or "1.3") of a cipher suite the provider offers.
pub fn cipher_version(name: &str) -> Option<&'static str> {
    ring::default_provider()
        .cipher_suites
        .iter()
        .find(|s| format!("{:?}", s.suite()) == name)
        .map(|s| match s.version().version {
            ProtocolVersion::TLSv1_3 => "1.3",
            _ => "1.2",
        })
}

/// An error building the configuration: what went wrong, with the fix.
#[derive(Debug)]
pub struct TlsSetupError(pub String);

/// The client configuration of one test, shared by its connections (and so
/// is the session cache, when resumption is on).
pub struct Client {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl Client {
    pub fn new(o: &TlsOptions, server: IpAddr) -> Result<Client, TlsSetupError> {
        let mut provider = ring::default_provider();
        if let Some(c) = &o.cipher {
            provider
                .cipher_suites
                .retain(|s| format!("{:?}", s.suite()) == *c);
        }
        if !o.groups.is_empty() {
            let all = provider.kx_groups.clone();
            provider.kx_groups = o
                .groups
                .iter()
                .filter_map(|g| {
                    all.iter()
                        .find(|k| format!("{:?}", k.name()) == *g)
                        .copied()
                })
                .collect();
        }
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = o
            .versions
            .iter()
            .filter_map(|v| match v.as_str() {
                "1.2" => Some(&rustls::version::TLS12),
                "1.3" => Some(&rustls::version::TLS13),
                _ => None,
            })
            .collect();
        let pem = std::fs::read(&o.ca_file).map_err(|e| {
            TlsSetupError(format!(
                "cannot read ca_file {}: {} (give the PEM file of the CA that signed the server's certificate)",
                o.ca_file, e
            ))
        })?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert
                .map_err(|e| TlsSetupError(format!("ca_file {} is not PEM: {:?}", o.ca_file, e)))?;
            roots.add(cert).map_err(|e| {
                TlsSetupError(format!(
                    "ca_file {}: a certificate is refused: {}",
                    o.ca_file, e
                ))
            })?;
        }
        if roots.is_empty() {
            return Err(TlsSetupError(format!(
                "ca_file {} holds no certificate: give a PEM file with \"BEGIN CERTIFICATE\"",
                o.ca_file
            )));
        }
        let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&versions)
            .map_err(|e| {
                TlsSetupError(format!(
                    "tls_version, cipher and groups do not fit together: {} (pick a cipher of the version)",
                    e
                ))
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.resumption = if o.resumption {
            Resumption::in_memory_sessions(4096)
        } else {
            Resumption::disabled()
        };
        let name = match &o.server_name {
            Some(n) => ServerName::try_from(n.clone()).map_err(|_| {
                TlsSetupError(format!(
                    "server_name {:?} is not a DNS name or an address",
                    n
                ))
            })?,
            None => ServerName::IpAddress(server.into()),
        };
        Ok(Client {
            config: Arc::new(config),
            name,
        })
    }

    /// A new session (no I/O yet).
    pub fn session(&self) -> io::Result<ClientConnection> {
        ClientConnection::new(self.config.clone(), self.name.clone()).map_err(io::Error::other)
    }
}

/// What a non-blocking move came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Finished (handshake done, everything sent).
    Done,
    /// Needs the socket readable.
    Read,
    /// Needs the socket writable.
    Write,
}

/// Why a TLS move failed: the peer closed, the transport failed, or TLS refused.
#[derive(Debug)]
pub enum TlsFail {
    Eof,
    Io(io::Error),
    Tls,
}

fn blocked(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted
}

/// Writes what TLS has queued; `Write` if the socket is full.
pub fn flush(c: &mut ClientConnection, mut s: &TcpStream) -> Result<Step, TlsFail> {
    while c.wants_write() {
        match c.write_tls(&mut s) {
            Ok(_) => {}
            Err(e) if blocked(&e) => return Ok(Step::Write),
            Err(e) => return Err(TlsFail::Io(e)),
        }
    }
    Ok(Step::Done)
}

/// Reads TLS records from the socket and processes them: `Ok(None)` when
/// some were read, `Ok(Some(Read))` when the socket has nothing.
fn pull(c: &mut ClientConnection, mut s: &TcpStream) -> Result<Option<Step>, TlsFail> {
    match c.read_tls(&mut s) {
        Ok(0) => Err(TlsFail::Eof),
        Ok(_) => {
            c.process_new_packets().map_err(|_| {
                // Tell the peer why, if it still listens.
                let _ = flush(c, s);
                TlsFail::Tls
            })?;
            Ok(None)
        }
        Err(e) if blocked(&e) => Ok(Some(Step::Read)),
        Err(e) => Err(TlsFail::Io(e)),
    }
}

/// Moves the handshake on as far as the socket lets it.
pub fn handshake(c: &mut ClientConnection, s: &TcpStream) -> Result<Step, TlsFail> {
    loop {
        if flush(c, s)? == Step::Write {
            return Ok(Step::Write);
        }
        if !c.is_handshaking() {
            return Ok(Step::Done);
        }
        if let Some(w) = pull(c, s)? {
            return Ok(w);
        }
    }
}

/// Whether the session was resumed (an abbreviated handshake).
pub fn resumed(c: &ClientConnection) -> bool {
    c.handshake_kind() == Some(HandshakeKind::Resumed)
}

/// Queues `data` (plaintext) to be sent.
pub fn queue(c: &mut ClientConnection, data: &[u8]) -> io::Result<()> {
    c.writer().write_all(data)
}

/// What one receive gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    Data(usize),
    Wait,
    /// The peer closed (with or without close_notify).
    Eof,
}

/// Reads plaintext into `buf`: what TLS holds first, then from the socket.
pub fn read(c: &mut ClientConnection, s: &TcpStream, buf: &mut [u8]) -> Result<Recv, TlsFail> {
    loop {
        match c.reader().read(buf) {
            Ok(0) => return Ok(Recv::Eof),
            Ok(n) => return Ok(Recv::Data(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Recv::Eof),
            Err(e) => return Err(TlsFail::Io(e)),
        }
        // Whatever TLS wants to say meanwhile (a key update's answer).
        if c.wants_write() {
            flush(c, s)?;
        }
        match pull(c, s) {
            Ok(None) => {}
            Ok(Some(_)) => return Ok(Recv::Wait),
            Err(TlsFail::Eof) => return Ok(Recv::Eof),
            Err(e) => return Err(e),
        }
    }
}
