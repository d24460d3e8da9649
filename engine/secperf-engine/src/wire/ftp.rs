//! The FTP dialogue's words, as the NSTL clients spoke it (the mix kind's
//! machine drives it): replies read from the control connection's bytes,
//! the ports of `PASV`/`EPSV` replies, the `PORT`/`EPRT` commands, and the
//! kinds of failure. No I/O here.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::wire::http::Fail;

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
    /// A failure of the HTTP/TCP layer, in these kinds.
    pub fn after(f: Fail) -> FtpFail {
        match f {
            Fail::Timeout => FtpFail::Timeout,
            Fail::ConnectRefused | Fail::ConnectTimeout | Fail::Unreachable => FtpFail::Connect,
            _ => FtpFail::Short,
        }
    }
}

/// Longest control-connection text a reply may take before it is refused
/// (not an FTP server).
pub const MAX_REPLY: usize = 8192;

/// Takes one whole reply (a multi-line one to its last line) off the front of
/// `pending`: its code and last line; None while it is incomplete.
pub fn take_reply(pending: &mut Vec<u8>) -> Result<Option<(u16, String)>, FtpFail> {
    let mut at = 0;
    let mut code = None;
    loop {
        let Some(p) = pending[at..].windows(2).position(|w| w == b"\r\n") else {
            if pending.len() > MAX_REPLY {
                return Err(FtpFail::Refused);
            }
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&pending[at..at + p]).into_owned();
        at += p + 2;
        let c = match code {
            None => {
                let c = reply_code(&line).ok_or(FtpFail::Refused)?;
                code = Some(c);
                if line.as_bytes().get(3) != Some(&b'-') {
                    pending.drain(..at);
                    return Ok(Some((c, line)));
                }
                continue;
            }
            Some(c) => c,
        };
        if line.starts_with(&format!("{} ", c)) {
            pending.drain(..at);
            return Ok(Some((c, line)));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_replies_are_taken() {
        let mut p = b"220 ready\r\n230-welcome\r\n  more\r\n230 done\r\n150 ope".to_vec();
        assert_eq!(take_reply(&mut p).unwrap(), Some((220, "220 ready".into())));
        assert_eq!(take_reply(&mut p).unwrap(), Some((230, "230 done".into())));
        assert_eq!(take_reply(&mut p).unwrap(), None);
        p.extend_from_slice(b"ning\r\n");
        assert_eq!(
            take_reply(&mut p).unwrap(),
            Some((150, "150 opening".into()))
        );
        assert!(p.is_empty());
        let mut bad = b"HTTP/1.1 200 OK\r\n".to_vec();
        assert_eq!(take_reply(&mut bad), Err(FtpFail::Refused));
    }

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
