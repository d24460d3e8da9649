//! Socket set-up shared by the kinds: buffers, connect with a timeout,
//! binding data sockets, and blocking I/O helpers that wake up now and then
//! to look at the test's flags (no extra syscall per message).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::rt::guard::Admission;
use crate::rt::shared::Shared;
use crate::wire::record::SocketBufs;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a blocked data call wakes up to look at stop/abort.
pub const WAKE: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// The options of a test's data sockets, as its spec gives them.
#[derive(Clone, Copy, Debug, Default)]
pub struct SockOpts {
    /// SO_SNDBUF and SO_RCVBUF (the spec's `socket_buffer`).
    pub buffer: Option<u64>,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// Client side: the data sockets' source address (the spec's `bind`).
    pub bind: Option<IpAddr>,
}

pub fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn apply_buffers(s: &Socket, o: &SockOpts) -> io::Result<()> {
    if let Some(b) = o.buffer {
        s.set_send_buffer_size(b as usize)?;
        s.set_recv_buffer_size(b as usize)?;
    }
    Ok(())
}

pub fn granted(s: SockRef<'_>) -> SocketBufs {
    SocketBufs {
        sndbuf: s.send_buffer_size().unwrap_or(0) as u64,
        rcvbuf: s.recv_buffer_size().unwrap_or(0) as u64,
    }
}

/// What the kernel grants a client socket to `peer` with these options
/// (reported in `start`).
pub fn probe_granted(peer: SocketAddr, protocol: Protocol, o: &SockOpts) -> SocketBufs {
    let ty = match protocol {
        Protocol::Tcp => Type::STREAM,
        Protocol::Udp => Type::DGRAM,
    };
    match Socket::new(Domain::for_address(peer), ty, None) {
        Ok(s) => {
            let _ = apply_buffers(&s, o);
            granted(SockRef::from(&s))
        }
        Err(_) => SocketBufs::default(),
    }
}

fn local_bind(o: &SockOpts, peer: SocketAddr, port: Option<u16>) -> Option<SocketAddr> {
    match (o.bind, port) {
        (None, None) => None,
        (ip, port) => {
            let ip = ip.unwrap_or(if peer.is_ipv4() {
                IpAddr::from([0u8; 4])
            } else {
                IpAddr::from([0u16; 8])
            });
            Some(SocketAddr::new(ip, port.unwrap_or(0)))
        }
    }
}

fn bind_err(addr: SocketAddr) -> impl FnOnce(io::Error) -> EngineError {
    EngineError::io(format!(
        "cannot bind the client's data socket to {}: check `bind` is an address of this host and `client_port` is free",
        addr
    ))
}

/// A data TCP connection to `peer`, with the test's buffers and options.
pub fn tcp_connect(o: &SockOpts, peer: SocketAddr, client_port: Option<u16>) -> Result<TcpStream> {
    let setup =
        EngineError::io("cannot create a TCP socket: check the process's file limit (ulimit -n)");
    let s = Socket::new(Domain::for_address(peer), Type::STREAM, None).map_err(setup)?;
    let opts = || -> io::Result<()> {
        apply_buffers(&s, o)?;
        s.set_tcp_nodelay(o.nodelay)?;
        Ok(())
    };
    opts().map_err(EngineError::io(
        "cannot set socket options on a data socket",
    ))?;
    if let Some(local) = local_bind(o, peer, client_port) {
        if client_port.is_some() {
            let _ = s.set_reuse_address(true);
        }
        s.bind(&local.into()).map_err(bind_err(local))?;
    }
    s.connect_timeout(&peer.into(), CONNECT_TIMEOUT)
        .map_err(|source| EngineError::Connect {
            what: "server's data port",
            addr: peer,
            source,
            fix: "check that nothing between the hosts drops the data port (`data_port` fixes it for ACLs)",
        })?;
    Ok(s.into())
}

/// A data UDP socket connected to `peer`.
pub fn udp_connect(o: &SockOpts, peer: SocketAddr, client_port: Option<u16>) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(peer), Type::DGRAM, None).map_err(EngineError::io(
        "cannot create a UDP socket: check the process's file limit (ulimit -n)",
    ))?;
    apply_buffers(&s, o).map_err(EngineError::io(
        "cannot set socket buffers on a data socket",
    ))?;
    let local = local_bind(o, peer, client_port).unwrap_or_else(|| {
        SocketAddr::new(
            if peer.is_ipv4() {
                IpAddr::from([0u8; 4])
            } else {
                IpAddr::from([0u16; 8])
            },
            0,
        )
    });
    s.bind(&local.into()).map_err(bind_err(local))?;
    s.connect(&peer.into())
        .map_err(|source| EngineError::Connect {
            what: "server's data port",
            addr: peer,
            source,
            fix: "check the route to the server",
        })?;
    Ok(s.into())
}

/// Where the server binds a test's data socket.
#[derive(Clone, Copy, Debug)]
pub struct PortPolicy {
    pub fixed: Option<u16>,
    pub range: Option<(u16, u16)>,
}

fn candidates(p: PortPolicy) -> Vec<u16> {
    match (p.fixed, p.range) {
        (Some(port), _) => vec![port],
        (None, Some((lo, hi))) => (lo..=hi).collect(),
        (None, None) => vec![0],
    }
}

fn bind_any<T>(
    ip: IpAddr,
    p: PortPolicy,
    mut f: impl FnMut(SocketAddr) -> io::Result<T>,
) -> Result<T> {
    let mut last = None;
    for port in candidates(p) {
        match f(SocketAddr::new(ip, port)) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::other("empty port range"));
    Err(EngineError::Server {
        field: Some("data_port".into()),
        message: format!(
            "cannot bind a data socket on {} (ports {:?}): {}; pick another data_port or widen --data-ports",
            ip,
            candidates(p).first().zip(candidates(p).last()),
            e
        ),
    })
}

/// Server side: a TCP listener for one test's data connections, its port, and
/// the socket buffers the kernel granted.
pub fn tcp_listen(
    o: &SockOpts,
    ip: IpAddr,
    p: PortPolicy,
) -> Result<(TcpListener, u16, SocketBufs)> {
    let (listener, bufs) = tcp_bind(o, ip, p)?;
    let port = listener
        .local_addr()
        .map_err(EngineError::io("cannot read the data listener's address"))?
        .port();
    Ok((listener, port, bufs))
}

/// The listener itself, bound from the port policy.
fn tcp_bind(o: &SockOpts, ip: IpAddr, p: PortPolicy) -> Result<(TcpListener, SocketBufs)> {
    bind_any(ip, p, |addr| {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        apply_buffers(&s, o)?;
        s.set_tcp_nodelay(o.nodelay)?;
        s.bind(&addr.into())?;
        s.listen(1024)?;
        // accept() wakes up to look at the test's flags. Linux copies both
        // timeouts into every accepted socket, so a kind that wants WAKE on
        // its data sockets (crr's server) need not set them per connection.
        s.set_read_timeout(Some(WAKE))?;
        s.set_write_timeout(Some(WAKE))?;
        let g = granted(SockRef::from(&s));
        Ok((s.into(), g))
    })
}

/// Server side: the UDP socket of one test.
pub fn udp_bind(o: &SockOpts, ip: IpAddr, p: PortPolicy) -> Result<(UdpSocket, SocketBufs)> {
    bind_any(ip, p, |addr| {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        apply_buffers(&s, o)?;
        s.bind(&addr.into())?;
        let g = granted(SockRef::from(&s));
        Ok((s.into(), g))
    })
}

/// Accepts one connection, or None after WAKE (so the caller can look at flags).
pub fn accept(l: &TcpListener) -> io::Result<Option<TcpStream>> {
    match l.accept() {
        Ok((s, _)) => {
            // Accepted sockets inherit the listener's timeouts (WAKE both ways).
            Ok(Some(s))
        }
        Err(e) if would_block(&e) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads exactly `buf.len()` bytes. Ok(false) on EOF before the first byte.
/// Gives up (Ok(false)) when the test aborts.
pub fn read_full(s: &mut &TcpStream, buf: &mut [u8], shared: &Shared) -> io::Result<bool> {
    let mut off = 0;
    while off < buf.len() {
        match s.read(&mut buf[off..]) {
            Ok(0) => {
                if off == 0 {
                    return Ok(false);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed mid-message",
                ));
            }
            Ok(n) => off += n,
            Err(e) if would_block(&e) => {
                if shared.aborted() {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes all of `buf`. Ok(false) if the test aborted first.
pub fn write_full(s: &mut &TcpStream, buf: &[u8], shared: &Shared) -> io::Result<bool> {
    let mut off = 0;
    while off < buf.len() {
        match s.write(&buf[off..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket wrote nothing",
                ))
            }
            Ok(n) => off += n,
            Err(e) if would_block(&e) => {
                if shared.aborted() {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

pub fn set_wake_timeouts(s: &TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(WAKE))?;
    s.set_write_timeout(Some(WAKE))
}

/// Accepts until the test stops, handing each connection `admit` lets in to
/// `handle` (any other is closed at once with an RST, before a byte is read);
/// then takes whatever is still queued so no connected client goes unserved.
pub fn accept_loop(
    l: &TcpListener,
    shared: &Shared,
    admit: &Admission,
    mut handle: impl FnMut(TcpStream) -> Result<()>,
) -> Result<()> {
    let fail =
        || EngineError::io("accept failed on a data listener: check the file limit (ulimit -n)");
    while !shared.stopped() {
        if let Some(s) = accept(l).map_err(fail())? {
            if admit.admit(&s) {
                handle(s)?;
            }
        }
    }
    if shared.aborted() {
        return Ok(());
    }
    l.set_nonblocking(true).map_err(fail())?;
    while let Ok((s, _)) = l.accept() {
        if !admit.admit(&s) {
            continue;
        }
        s.set_nonblocking(false).map_err(fail())?;
        handle(s)?;
    }
    Ok(())
}

/// Most bytes a server reads a request into at once: a request it only
/// counts needs no buffer of its own size.
pub const SCRATCH: usize = 64 << 10;

/// Reads and discards exactly `n` bytes through `scratch`. Ok(false) on EOF
/// before the first byte, or when the test aborts (as `read_full`).
pub fn read_discard(
    s: &mut &TcpStream,
    n: usize,
    scratch: &mut [u8],
    shared: &Shared,
) -> io::Result<bool> {
    let mut left = n;
    let mut first = true;
    while left > 0 {
        let k = left.min(scratch.len());
        match read_full(s, &mut scratch[..k], shared) {
            Ok(true) => left -= k,
            Ok(false) if first => return Ok(false),
            Ok(false) if shared.aborted() => return Ok(false),
            Ok(false) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed mid-message",
                ))
            }
            Err(e) => return Err(e),
        }
        first = false;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// crr's server leans on it: an accepted socket has the listener's timeouts.
    #[test]
    fn an_accepted_socket_has_the_listeners_wake_timeouts() {
        let o = SockOpts {
            buffer: None,
            nodelay: true,
            bind: None,
        };
        let p = PortPolicy {
            fixed: None,
            range: None,
        };
        let (l, port, _) = tcp_listen(&o, "127.0.0.1".parse().unwrap(), p).unwrap();
        let _c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        // The kernel keeps them in clock ticks: WAKE reads back rounded up to one.
        let listener = SockRef::from(&l);
        let wake = listener
            .read_timeout()
            .unwrap()
            .expect("the listener's timeout");
        assert!(
            wake >= WAKE && wake < WAKE + Duration::from_millis(20),
            "{:?}",
            wake
        );
        assert_eq!(listener.write_timeout().unwrap(), Some(wake));
        assert_eq!(s.read_timeout().unwrap(), Some(wake));
        assert_eq!(s.write_timeout().unwrap(), Some(wake));
        assert!(s.nodelay().unwrap());
    }
}
