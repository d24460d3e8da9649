//! One FTP GET on the wire, as the NSTL clients did it: a new control
//! connection, anonymous login, `TYPE I`, a passive (`PASV`/`EPSV`) or active
//! (`PORT`/`EPRT`) data connection, `RETR`, the transfer to its end, `QUIT`.
//! Every step waits at most `timeout` (an idle timeout, as a socket timeout
//! in a real client: a slow transfer that keeps moving is not cut off).
//!
//! In passive mode the data connection goes to the control connection's
//! peer on the port the reply names, not to the address in the reply (curl's
//! and Python's ftplib's default): a transparent proxy answers with its own
//! address, and the testbed only routes what the client already reaches.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::wire::http::{self as http_wire, Fail};

/// Who opens the data connection: the client (passive) or the server (active).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Passive,
    Active,
}

/// Why an FTP fetch failed, in the mix workload's kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FtpFail {
    /// The control or data connection could not be opened.
    Connect,
    /// A step waited longer than the timeout.
    Timeout,
    /// The connection broke or the file came short.
    Short,
    /// The server (or the proxy) refused: a 4xx or 5xx reply, or an unexpected one.
    Refused,
}

impl FtpFail {
    fn after(f: Fail) -> FtpFail {
        match f {
            Fail::Timeout => FtpFail::Timeout,
            Fail::ConnectRefused | Fail::ConnectTimeout | Fail::Unreachable => FtpFail::Connect,
            _ => FtpFail::Short,
        }
    }
}

type R<T> = std::result::Result<T, FtpFail>;

/// Opens a connection to `to`, directly or through a SOCKS5 proxy (`via`); a
/// proxy that refuses by its rules is a refusal, anything else a connect failure.
pub fn open(to: SocketAddr, via: Option<SocketAddr>, timeout: Duration) -> R<TcpStream> {
    let r = match via {
        Some(proxy) => crate::wire::socks::connect(proxy, to, timeout),
        None => http_wire::connect_bounded(to, timeout),
    };
    r.map_err(|f| match f {
        Fail::BadStatus => FtpFail::Refused,
        _ => FtpFail::Connect,
    })
}

struct Control {
    s: TcpStream,
    pending: Vec<u8>,
    timeout: Duration,
}

impl Control {
    fn step(&self) -> Instant {
        Instant::now() + self.timeout
    }

    fn send(&self, line: &str) -> R<()> {
        let mut msg = Vec::with_capacity(line.len() + 2);
        msg.extend_from_slice(line.as_bytes());
        msg.extend_from_slice(b"\r\n");
        http_wire::write_all_bounded(&self.s, &msg, self.step()).map_err(FtpFail::after)
    }

    /// One line of the control connection, without its CRLF.
    fn line(&mut self) -> R<String> {
        let deadline = self.step();
        loop {
            if let Some(p) = self.pending.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.pending[..p]).into_owned();
                self.pending.drain(..p + 2);
                return Ok(line);
            }
            if self.pending.len() > 8192 {
                return Err(FtpFail::Refused); // not an FTP server
            }
            let mut chunk = [0u8; 2048];
            let n = http_wire::read_some_bounded(&self.s, &mut chunk, deadline)
                .map_err(FtpFail::after)?;
            if n == 0 {
                return Err(FtpFail::Short);
            }
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }

    /// One reply (multi-line ones to their last line): its code and last line.
    fn reply(&mut self) -> R<(u16, String)> {
        let first = self.line()?;
        let code = reply_code(&first).ok_or(FtpFail::Refused)?;
        let mut last = first;
        if last.as_bytes().get(3) == Some(&b'-') {
            let end = format!("{} ", code);
            while !last.starts_with(&end) {
                last = self.line()?;
            }
        }
        Ok((code, last))
    }

    /// A reply that must have one of `want` as its code; 4xx/5xx and others are refusals.
    fn expect(&mut self, want: &[u16]) -> R<(u16, String)> {
        let (code, text) = self.reply()?;
        if want.contains(&code) {
            Ok((code, text))
        } else {
            Err(FtpFail::Refused)
        }
    }

    fn command(&mut self, line: &str, want: &[u16]) -> R<(u16, String)> {
        self.send(line)?;
        self.expect(want)
    }
}

fn reply_code(line: &str) -> Option<u16> {
    let b = line.as_bytes();
    if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    if b.len() > 3 && b[3] != b' ' && b[3] != b'-' {
        return None;
    }
    line[..3].parse().ok()
}

/// The port of a `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` reply.
pub fn pasv_port(text: &str) -> Option<u16> {
    let inner = text.get(3..)?;
    let digits: Vec<u16> = inner
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<u16>>>()?;
    if digits.len() < 6 {
        return None;
    }
    let p = &digits[digits.len() - 6..];
    if p.iter().any(|&v| v > 255) {
        return None;
    }
    Some(p[4] * 256 + p[5])
}

/// The port of a `229 Entering Extended Passive Mode (|||port|)` reply.
pub fn epsv_port(text: &str) -> Option<u16> {
    let start = text.find("(|||")? + 4;
    let rest = &text[start..];
    rest[..rest.find('|')?].parse().ok()
}

/// The `PORT` or `EPRT` command announcing `addr`.
pub fn port_command(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => {
            let o = a.ip().octets();
            format!(
                "PORT {},{},{},{},{},{}",
                o[0],
                o[1],
                o[2],
                o[3],
                a.port() >> 8,
                a.port() & 0xff
            )
        }
        SocketAddr::V6(a) => format!("EPRT |2|{}|{}|", a.ip(), a.port()),
    }
}

/// Waits for one connection on `l` until `deadline`.
fn accept(l: &TcpListener, deadline: Instant, timeout: Duration) -> R<TcpStream> {
    loop {
        let wait = http_wire::left(deadline).map_err(|_| FtpFail::Timeout)?;
        let mut pfd = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        // Safety: pfd is one valid pollfd on our stack; nfds is 1.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(FtpFail::Connect);
        }
        if n == 0 {
            continue; // the deadline check above ends it
        }
        return match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|_| FtpFail::Connect)?;
                s.set_read_timeout(Some(timeout))
                    .map_err(|_| FtpFail::Connect)?;
                Ok(s)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => Err(FtpFail::Connect),
        };
    }
}

/// What one fetch moved.
#[derive(Clone, Copy, Debug, Default)]
pub struct Got {
    pub bytes: u64,
}

/// Fetches `path` from the FTP server at `peer`; `expect` is the file's size.
pub fn get(
    peer: SocketAddr,
    via: Option<SocketAddr>,
    path: &str,
    expect: u64,
    mode: Mode,
    timeout: Duration,
) -> R<Got> {
    let s = open(peer, via, timeout)?;
    let mut c = Control {
        s,
        pending: Vec::with_capacity(1024),
        timeout,
    };
    let r = transfer(&mut c, peer, via, path, mode);
    // QUIT politely when the session is still in order; never count its answer.
    if matches!(r, Ok(_) | Err(FtpFail::Refused)) {
        let quick = Duration::from_millis(200).min(timeout);
        c.timeout = quick;
        if c.send("QUIT").is_ok() {
            let _ = c.reply();
        }
    }
    let got = r?;
    if got.bytes != expect {
        return Err(FtpFail::Short);
    }
    Ok(got)
}

enum Data {
    Open(TcpStream),
    Listen(TcpListener),
}

fn transfer(
    c: &mut Control,
    peer: SocketAddr,
    via: Option<SocketAddr>,
    path: &str,
    mode: Mode,
) -> R<Got> {
    c.expect(&[220])?;
    let (code, _) = c.command("USER anonymous", &[230, 331])?;
    if code == 331 {
        c.command("PASS secperf@", &[230])?;
    }
    c.command("TYPE I", &[200])?;
    let data = match mode {
        Mode::Passive => {
            let port = if peer.is_ipv4() {
                let (_, text) = c.command("PASV", &[227])?;
                pasv_port(&text)
            } else {
                let (_, text) = c.command("EPSV", &[229])?;
                epsv_port(&text)
            }
            .ok_or(FtpFail::Refused)?;
            let to = SocketAddr::new(peer.ip(), port);
            Data::Open(open(to, via, c.timeout)?)
        }
        Mode::Active => {
            let local: IpAddr = c.s.local_addr().map_err(|_| FtpFail::Connect)?.ip();
            let l = TcpListener::bind(SocketAddr::new(local, 0)).map_err(|_| FtpFail::Connect)?;
            l.set_nonblocking(true).map_err(|_| FtpFail::Connect)?;
            let at = l.local_addr().map_err(|_| FtpFail::Connect)?;
            c.command(&port_command(at), &[200])?;
            Data::Listen(l)
        }
    };
    c.command(&format!("RETR {}", path), &[125, 150])?;
    let d = match data {
        Data::Open(s) => s,
        Data::Listen(l) => accept(&l, c.step(), c.timeout)?,
    };
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 65536];
    loop {
        let n = http_wire::read_some_bounded(&d, &mut buf, c.step()).map_err(FtpFail::after)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    drop(d);
    // 226/250: the transfer is complete; 426 and the like: it was cut short.
    let (code, _) = c.reply()?;
    if !(code == 226 || code == 250) {
        return Err(if code >= 400 && bytes > 0 {
            FtpFail::Short
        } else {
            FtpFail::Refused
        });
    }
    Ok(Got { bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        assert_eq!(reply_code("220 ready"), Some(220));
        assert_eq!(reply_code("230-welcome"), Some(230));
        assert_eq!(reply_code("2x0 no"), None);
        assert_eq!(reply_code("2200 no"), None);
        assert_eq!(
            pasv_port("227 Entering Passive Mode (198,18,2,2,21,6)."),
            Some(21 * 256 + 6)
        );
        assert_eq!(
            pasv_port("227 Entering Passive Mode 198,18,2,2,21,6"),
            Some(5382)
        );
        assert_eq!(pasv_port("227 nothing"), None);
        assert_eq!(pasv_port("227 (1,2,3,4,5,300)"), None);
        assert_eq!(
            epsv_port("229 Entering Extended Passive Mode (|||5391|)"),
            Some(5391)
        );
        assert_eq!(
            port_command("198.18.1.2:5391".parse().unwrap()),
            "PORT 198,18,1,2,21,15"
        );
        assert_eq!(
            port_command("[2001:2::1]:80".parse().unwrap()),
            "EPRT |2|2001:2::1|80|"
        );
    }
}
