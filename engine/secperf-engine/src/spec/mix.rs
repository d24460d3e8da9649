//! Kind `mix`: document 001's NSTL load of HTTP and FTP virtual clients. Its
//! spec is its own: many servers, no engine server.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::spec::common::{threads_of, CpuGroup, KindSpec, Names, Protocol};
use crate::spec::resolved::Resolved;
use crate::wire::ftp::Mode;

/// Most virtual clients one process runs (machines of its event loops).
pub const MAX_CLIENTS: usize = 10_000;
pub const HTTP_PORT: u16 = 5380;
pub const FTP_PORT: u16 = 5321;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixServer {
    pub address: IpAddr,
    /// Relative share of the fetches (the paper's Table 2).
    #[serde(default = "one")]
    pub hit: f64,
    /// Share of this server's fetches over HTTP (the paper's Table 1).
    #[serde(default = "one")]
    pub http_share: f64,
}

fn one() -> f64 {
    1.0
}

/// A mix spec: its own shape (many servers, no engine server). Defaults are
/// filled in as it is read.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    /// The server hosts (testbed addresses unless `--allow-any-target`); `hit`: relative weight
    /// of the server in each draw; `http_share`: its share of HTTP (else FTP)
    /// Value: list of `{address, hit = 1, http_share = 1}`
    pub servers: Vec<MixServer>,
    /// The ids of the virtual clients this process runs (each seeds its own draws).
    /// Value: list of integers
    pub clients: Vec<u64>,
    /// Fetches per virtual client, one after another.
    /// Value: integer, default 100
    #[serde(default = "hundred")]
    pub requests: u64,
    /// With the id, seeds the draws (the same seed and id draw the same sequence)
    /// Value: string, default `""`
    #[serde(default)]
    pub seed: String,
    /// Idle timeout of every step of a fetch, seconds.
    /// Value: seconds, default 10
    #[serde(default = "ten")]
    pub timeout: f64,
    /// Pause between a client's fetches.
    /// Value: seconds, default 0
    #[serde(default)]
    pub think: f64,
    /// Nginx's port on every server host.
    /// Value: integer, default 5380
    #[serde(default = "http_port")]
    pub http_port: u16,
    /// Vsftpd's port on every server host.
    /// Value: integer, default 5321
    #[serde(default = "ftp_port")]
    pub ftp_port: u16,
    /// PASV (EPSV over IPv6) and a connection to the control connection's peer on the port the
    /// reply names (not the reply's address, as curl and ftplib by default); or PORT (EPRT)
    /// with a listener on the control connection's local address.
    /// Value: `"passive"` | `"active"`
    #[serde(default)]
    pub ftp_mode: Mode,
    /// An HTTP fetch takes HTML or GIF at even odds (the other when one list is empty), then a
    /// size from the list; the path is `/files/SIZE.bin` (HTTP) and `files/SIZE.bin` (FTP), the
    /// layout secperf's nginx and vsftpd serve.
    /// Value: lists of sizes in bytes
    #[serde(default)]
    pub html_files: Vec<u64>,
    /// An HTTP fetch takes HTML or GIF at even odds (the other when one list is empty), then a
    /// size from the list; the path is `/files/SIZE.bin` (HTTP) and `files/SIZE.bin` (FTP), the
    /// layout secperf's nginx and vsftpd serve.
    /// Value: lists of sizes in bytes
    #[serde(default)]
    pub gif_files: Vec<u64>,
    /// An HTTP fetch takes HTML or GIF at even odds (the other when one list is empty), then a
    /// size from the list; the path is `/files/SIZE.bin` (HTTP) and `files/SIZE.bin` (FTP), the
    /// layout secperf's nginx and vsftpd serve.
    /// Value: lists of sizes in bytes
    #[serde(default)]
    pub ftp_files: Vec<u64>,
    /// A SOCKS5 proxy (the circuit-level kind) every connection goes through.
    /// Value: `"ADDR:PORT"`, optional
    #[serde(default)]
    pub socks: Option<SocketAddr>,
    /// Hosts whose CPU is read at the run's start and end.
    /// Value: as for every kind
    #[serde(default)]
    pub cpu_groups: Vec<CpuGroup>,
    /// Event-loop threads that share the virtual clients (default one per
    /// CPU this process may use).
    /// Value: int 1..=64, default one per CPU the process may use, never more than `parallel`
    /// (mix: its virtual clients)
    #[serde(default)]
    pub threads: Option<u64>,
    /// The spec as given (the `start` record echoes it).
    #[serde(skip)]
    pub given: Value,
}

fn hundred() -> u64 {
    100
}
fn ten() -> f64 {
    10.0
}
fn http_port() -> u16 {
    HTTP_PORT
}
fn ftp_port() -> u16 {
    FTP_PORT
}

fn bad(field: &str, msg: String) -> EngineError {
    EngineError::spec(field, msg)
}

impl KindSpec for MixSpec {
    const NAME: &'static str = "mix";
    const PROTOCOL: Option<Protocol> = None;
    type Raw = MixSpec;

    fn protocol(&self) -> Option<Protocol> {
        None
    }

    fn resolve(raw: MixSpec, _: &Names) -> Result<MixSpec> {
        raw.check()?;
        Ok(raw)
    }
}

impl MixSpec {
    /// The event-loop threads the virtual clients share.
    pub fn threads(&self) -> usize {
        threads_of(self.threads, self.clients.len()).unwrap_or(1)
    }

    fn check(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(bad(
                "servers",
                "a mix needs at least one server: give [{\"address\": \"198.18.2.2\", \"hit\": 1, \"http_share\": 0.9}]".into(),
            ));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if !(s.hit.is_finite() && s.hit >= 0.0) {
                return Err(bad(
                    &format!("servers[{}].hit", i),
                    format!("hit must be a weight ≥ 0 (got {})", s.hit),
                ));
            }
            if !(0.0..=1.0).contains(&s.http_share) {
                return Err(bad(
                    &format!("servers[{}].http_share", i),
                    format!("http_share is a share of 0..1 (got {})", s.http_share),
                ));
            }
        }
        if self.servers.iter().map(|s| s.hit).sum::<f64>() <= 0.0 {
            return Err(bad(
                "servers",
                "every server's hit is 0: give at least one a positive weight".into(),
            ));
        }
        if self.clients.is_empty() || self.clients.len() > MAX_CLIENTS {
            return Err(bad(
                "clients",
                format!(
                    "clients lists the ids of this process's virtual clients: give 1 to {} ids (got {})",
                    MAX_CLIENTS,
                    self.clients.len()
                ),
            ));
        }
        if !(1..=1_000_000).contains(&self.requests) {
            return Err(bad(
                "requests",
                format!(
                    "requests per virtual client must be 1..=1000000 (got {})",
                    self.requests
                ),
            ));
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 600.0) {
            return Err(bad(
                "timeout",
                format!(
                    "timeout must be > 0 and ≤ 600 seconds (got {}): give e.g. 10",
                    self.timeout
                ),
            ));
        }
        if !(self.think.is_finite() && (0.0..=3600.0).contains(&self.think)) {
            return Err(bad(
                "think",
                format!(
                    "think must be 0..=3600 seconds (got {}): 0 is none",
                    self.think
                ),
            ));
        }
        let any_http = self
            .servers
            .iter()
            .any(|s| s.hit > 0.0 && s.http_share > 0.0);
        let any_ftp = self
            .servers
            .iter()
            .any(|s| s.hit > 0.0 && s.http_share < 1.0);
        if any_http && self.html_files.is_empty() && self.gif_files.is_empty() {
            return Err(bad(
                "html_files",
                "some fetches are HTTP but html_files and gif_files are both empty: give sizes in bytes".into(),
            ));
        }
        if any_ftp && self.ftp_files.is_empty() {
            return Err(bad(
                "ftp_files",
                "some fetches are FTP but ftp_files is empty: give sizes in bytes".into(),
            ));
        }
        for (field, list) in [
            ("html_files", &self.html_files),
            ("gif_files", &self.gif_files),
            ("ftp_files", &self.ftp_files),
        ] {
            if let Some(v) = list.iter().find(|&&v| v == 0 || v > 1 << 32) {
                return Err(bad(
                    field,
                    format!("file size {} is not 1 byte to 4 GiB", v),
                ));
            }
        }
        if self.socks.is_some() && self.ftp_mode == Mode::Active {
            return Err(bad(
                "ftp_mode",
                "active FTP through a SOCKS proxy needs its BIND command, which the engine does not speak: use passive".into(),
            ));
        }
        for g in &self.cpu_groups {
            g.check()?;
        }
        threads_of(self.threads, self.clients.len())?;
        Ok(())
    }
}

impl Resolved for MixSpec {
    /// Its timeouts bound it, not a time.
    fn total_seconds(&self) -> f64 {
        0.0
    }

    /// Every server and the SOCKS proxy.
    fn targets(&self) -> Vec<(String, IpAddr)> {
        let mut out: Vec<(String, IpAddr)> = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("servers[{}].address", i), m.address))
            .collect();
        out.extend(self.socks.map(|a| ("socks".to_string(), a.ip())));
        out
    }
}
