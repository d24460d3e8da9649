//! One HTTP/1.1 GET on the wire, with a deadline on every step and each
//! failure sorted into a kind (what http_load reports as errors).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

/// Why a fetch (or a held connection) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    ConnectRefused,
    ConnectTimeout,
    Unreachable,
    Timeout,
    Reset,
    BadStatus,
    ShortBody,
    BadResponse,
    Other,
}

impl Fail {
    pub const ALL: [Fail; 9] = [
        Fail::ConnectRefused,
        Fail::ConnectTimeout,
        Fail::Unreachable,
        Fail::Timeout,
        Fail::Reset,
        Fail::BadStatus,
        Fail::ShortBody,
        Fail::BadResponse,
        Fail::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fail::ConnectRefused => "connect_refused",
            Fail::ConnectTimeout => "connect_timeout",
            Fail::Unreachable => "unreachable",
            Fail::Timeout => "timeout",
            Fail::Reset => "reset",
            Fail::BadStatus => "bad_status",
            Fail::ShortBody => "short_body",
            Fail::BadResponse => "bad_response",
            Fail::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        Fail::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    /// Sorts an I/O error after the connection was up.
    pub fn from_io(e: &io::Error) -> Fail {
        use io::ErrorKind::*;
        match e.kind() {
            WouldBlock | TimedOut => Fail::Timeout,
            ConnectionReset | ConnectionAborted | BrokenPipe => Fail::Reset,
            UnexpectedEof => Fail::ShortBody,
            _ => Fail::Other,
        }
    }

    /// Sorts an error of connect().
    pub fn from_connect(e: &io::Error) -> Fail {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Fail::ConnectRefused,
            Some(libc::ETIMEDOUT) | Some(libc::EAGAIN) | Some(libc::EINPROGRESS) => {
                Fail::ConnectTimeout
            }
            Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => Fail::Unreachable,
            _ if e.kind() == io::ErrorKind::TimedOut => Fail::ConnectTimeout,
            _ => Fail::Other,
        }
    }
}

/// Time left to `deadline`, or a Timeout failure.
pub fn left(deadline: Instant) -> Result<Duration, Fail> {
    let now = Instant::now();
    if now >= deadline {
        return Err(Fail::Timeout);
    }
    Ok((deadline - now).max(Duration::from_millis(1)))
}

/// A TCP connection with a deadline; nodelay on (requests are small).
pub fn connect(peer: SocketAddr, deadline: Instant) -> Result<TcpStream, Fail> {
    let s = Socket::new(Domain::for_address(peer), Type::STREAM, None).map_err(|_| Fail::Other)?;
    let wait = left(deadline).map_err(|_| Fail::ConnectTimeout)?;
    s.connect_timeout(&peer.into(), wait)
        .map_err(|e| Fail::from_connect(&e))?;
    let _ = s.set_tcp_nodelay(true);
    Ok(s.into())
}

/// A TCP connection for one fetch's fast path: both socket timeouts set to
/// `timeout` before a blocking connect (which SO_SNDTIMEO bounds), so the reads
/// and writes after it need no setsockopt each (the `*_bounded` functions):
/// 5 system calls to connect instead of 7, one per read or write instead of two.
pub fn connect_bounded(peer: SocketAddr, timeout: Duration) -> Result<TcpStream, Fail> {
    let s = Socket::new(Domain::for_address(peer), Type::STREAM, None).map_err(|_| Fail::Other)?;
    let wait = timeout.max(Duration::from_millis(1));
    s.set_write_timeout(Some(wait)).map_err(|_| Fail::Other)?;
    s.set_read_timeout(Some(wait)).map_err(|_| Fail::Other)?;
    loop {
        match s.connect(&peer.into()) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Fail::from_connect(&e)),
        }
    }
    let _ = s.set_tcp_nodelay(true);
    Ok(s.into())
}

/// read_some on a socket from connect_bounded: its timeout bounds each wait, the
/// deadline is checked before each read (a read begun just before it may wait one
/// more socket timeout).
pub fn read_some_bounded(s: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, Fail> {
    loop {
        left(deadline)?;
        match (&*s).read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Fail::from_io(&e)),
        }
    }
}

/// write_all on a socket from connect_bounded (see read_some_bounded).
pub fn write_all_bounded(s: &TcpStream, mut buf: &[u8], deadline: Instant) -> Result<(), Fail> {
    while !buf.is_empty() {
        left(deadline)?;
        match (&*s).write(buf) {
            Ok(0) => return Err(Fail::Reset),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Fail::from_io(&e)),
        }
    }
    Ok(())
}

/// Reads some bytes before `deadline` (0 = EOF).
pub fn read_some(s: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, Fail> {
    loop {
        s.set_read_timeout(Some(left(deadline)?))
            .map_err(|_| Fail::Other)?;
        match (&*s).read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // The socket timeout may end a little early: look at the deadline again.
                left(deadline)?;
            }
            Err(e) => return Err(Fail::from_io(&e)),
        }
    }
}

pub fn write_all(s: &TcpStream, mut buf: &[u8], deadline: Instant) -> Result<(), Fail> {
    while !buf.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))
            .map_err(|_| Fail::Other)?;
        match (&*s).write(buf) {
            Ok(0) => return Err(Fail::Reset),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                left(deadline)?;
            }
            Err(e) => return Err(Fail::from_io(&e)),
        }
    }
    Ok(())
}

/// What one response held.
#[derive(Clone, Copy, Debug, Default)]
pub struct Response {
    pub body: u64,
    pub header_bytes: u64,
    /// The server will keep the connection open.
    pub reusable: bool,
    /// Since the request was written: first byte, last byte.
    pub first_byte: Duration,
}

pub fn request(path: &str, host: &str, keepalive: bool) -> Vec<u8> {
    let conn = if keepalive { "keep-alive" } else { "close" };
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: secperf-engine\r\nAccept: */*\r\nConnection: {}\r\n\r\n",
        path, host, conn
    )
    .into_bytes()
}

fn find_header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Parses the status line and the headers we need: (status, content-length, keep-alive).
pub fn parse_head(head: &[u8]) -> Option<(u16, Option<u64>, bool)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let status: u16 = parts.next()?.parse().ok()?;
    let mut length = None;
    let mut keep = version == "HTTP/1.1";
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse().ok()?);
        } else if name.eq_ignore_ascii_case("connection") {
            keep = value.eq_ignore_ascii_case("keep-alive");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return None; // chunked bodies are not read: a static file server sends a length
        }
    }
    Some((status, length, keep))
}

/// Reads one response on `s` (a socket from connect_bounded; the request
/// already written at `sent`). The body must be as long as Content-Length says.
pub fn read_response_bounded(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    sent: Instant,
    deadline: Instant,
) -> Result<Response, Fail> {
    read_response_with(s, buf, sent, deadline, read_some_bounded)
}

type ReadSome = fn(&TcpStream, &mut [u8], Instant) -> Result<usize, Fail>;

/// read_response_with's scratch space: the longest head it accepts, and its read size.
const SCRATCH: usize = 64 * 1024;

fn read_response_with(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    sent: Instant,
    deadline: Instant,
    read_some: ReadSome,
) -> Result<Response, Fail> {
    // `buf` is scratch space, sized once and reused: the bytes are read straight
    // into it (no zeroed chunk per response, no copy), the head searched as it grows.
    if buf.len() < SCRATCH {
        buf.resize(SCRATCH, 0);
    }
    let mut filled = 0;
    let mut first = None;
    let head_end = loop {
        if filled == buf.len() {
            return Err(Fail::BadResponse); // a head longer than the scratch space
        }
        let n = read_some(s, &mut buf[filled..], deadline)?;
        if n == 0 {
            return Err(if filled == 0 {
                Fail::Reset
            } else {
                Fail::BadResponse
            });
        }
        first.get_or_insert_with(|| sent.elapsed());
        let from = filled.saturating_sub(3);
        filled += n;
        if let Some(end) = find_header_end(&buf[from..filled]) {
            break from + end;
        }
    };
    let (status, length, keep) = parse_head(&buf[..head_end]).ok_or(Fail::BadResponse)?;
    let length = length.ok_or(Fail::BadResponse)?;
    let mut body = (filled - head_end) as u64;
    while body < length {
        let n = read_some(s, &mut buf[..], deadline)?;
        if n == 0 {
            return Err(Fail::ShortBody);
        }
        body += n as u64;
    }
    if body > length {
        return Err(Fail::BadResponse);
    }
    if !(200..300).contains(&status) {
        return Err(Fail::BadStatus);
    }
    Ok(Response {
        body,
        header_bytes: head_end as u64,
        reusable: keep,
        first_byte: first.unwrap_or_default(),
    })
}

/// After a `Connection: close` response (on a socket from connect_bounded):
/// wait for the server's FIN so that the server, not the client, keeps the
/// TIME_WAIT (as with http_load).
pub fn await_close_bounded(s: &TcpStream, deadline: Instant) {
    let mut b = [0u8; 512];
    while let Ok(n) = read_some_bounded(s, &mut b, deadline) {
        if n == 0 {
            break;
        }
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`; EOF first is a Reset
/// (nothing came) or a ShortBody (part came).
pub fn read_exact(s: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), Fail> {
    let mut off = 0;
    while off < buf.len() {
        let n = read_some(s, &mut buf[off..], deadline)?;
        if n == 0 {
            return Err(if off == 0 {
                Fail::Reset
            } else {
                Fail::ShortBody
            });
        }
        off += n;
    }
    Ok(())
}
