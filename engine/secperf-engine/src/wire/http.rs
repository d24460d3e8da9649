//! One HTTP/1.1 GET on the wire: the request, and a reader that takes the
//! response's bytes as they arrive (the head, then the body, whose length
//! Content-Length gives); each failure sorted into a kind (what http_load
//! reports as errors). No I/O here: the kinds' event-loop machines read and
//! feed.

use std::io;

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
    /// The TLS handshake or a TLS record failed (certificate, alert, protocol).
    Tls,
    Other,
}

impl Fail {
    pub const ALL: [Fail; 10] = [
        Fail::ConnectRefused,
        Fail::ConnectTimeout,
        Fail::Unreachable,
        Fail::Timeout,
        Fail::Reset,
        Fail::BadStatus,
        Fail::ShortBody,
        Fail::BadResponse,
        Fail::Tls,
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
            Fail::Tls => "tls",
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

/// What one response held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: u64,
    pub header_bytes: u64,
    /// The server will keep the connection open.
    pub reusable: bool,
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

/// The longest head a reader accepts.
pub const MAX_HEAD: usize = 64 * 1024;

/// Where a response stands after some of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More bytes are needed.
    More,
    /// The whole response (its status not yet judged: see `Response::judged`).
    Done(Response),
}

/// Reads one response from the bytes fed to it: the head (copied only when it
/// spans reads), then the body, counted.
#[derive(Debug, Default)]
pub struct ResponseReader {
    head: Vec<u8>,
    /// (status, length: None = to the end of stream, keep-alive, head bytes)
    parsed: Option<(u16, Option<u64>, bool, u64)>,
    body: u64,
    /// A body without Content-Length runs to the end of stream (else: BadResponse).
    eof_body: bool,
}

impl ResponseReader {
    /// A reader for the next response; `eof_body`: accept a body without
    /// Content-Length, delimited by the end of stream.
    pub fn start(&mut self, eof_body: bool) {
        self.head.clear();
        self.parsed = None;
        self.body = 0;
        self.eof_body = eof_body;
    }

    /// True once any byte of the head has come.
    pub fn begun(&self) -> bool {
        self.parsed.is_some() || !self.head.is_empty()
    }

    /// Takes the next bytes of the response.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Progress, Fail> {
        let mut rest = bytes;
        if self.parsed.is_none() {
            let end = if self.head.is_empty() {
                match find_header_end(bytes) {
                    Some(end) => {
                        self.parsed = Some(self.head_of(&bytes[..end])?);
                        Some(end)
                    }
                    None => None,
                }
            } else {
                let from = self.head.len().saturating_sub(3);
                let was = self.head.len();
                self.head.extend_from_slice(bytes);
                match find_header_end(&self.head[from..]) {
                    Some(e) => {
                        let end = from + e;
                        let head = std::mem::take(&mut self.head);
                        self.parsed = Some(self.head_of(&head[..end])?);
                        Some(end - was)
                    }
                    None => None,
                }
            };
            match end {
                Some(end) => rest = &bytes[end..],
                None => {
                    if self.head.is_empty() {
                        self.head.extend_from_slice(bytes);
                    }
                    if self.head.len() > MAX_HEAD {
                        return Err(Fail::BadResponse);
                    }
                    return Ok(Progress::More);
                }
            }
        }
        let Some((status, length, reusable, header_bytes)) = self.parsed else {
            return Ok(Progress::More);
        };
        self.body += rest.len() as u64;
        match length {
            Some(len) if self.body > len => Err(Fail::BadResponse),
            Some(len) if self.body == len => Ok(Progress::Done(Response {
                status,
                body: self.body,
                header_bytes,
                reusable,
            })),
            _ => Ok(Progress::More),
        }
    }

    /// The end of stream came before the response was whole: a body to the
    /// end of stream ends here; else the kind of failure.
    pub fn eof(&self) -> Result<Response, Fail> {
        match self.parsed {
            None if self.head.is_empty() => Err(Fail::Reset),
            None => Err(Fail::BadResponse),
            Some((status, None, _, header_bytes)) => Ok(Response {
                status,
                body: self.body,
                header_bytes,
                reusable: false,
            }),
            Some(_) => Err(Fail::ShortBody),
        }
    }

    fn head_of(&self, head: &[u8]) -> Result<(u16, Option<u64>, bool, u64), Fail> {
        let (status, length, keep) = parse_head(head).ok_or(Fail::BadResponse)?;
        if length.is_none() && !self.eof_body {
            return Err(Fail::BadResponse);
        }
        // A body to the end of stream cannot leave the connection reusable.
        Ok((status, length, keep && length.is_some(), head.len() as u64))
    }
}

impl Response {
    /// The response as a fetch's outcome: a 2xx, or BadStatus.
    pub fn judged(self) -> Result<Response, Fail> {
        if (200..300).contains(&self.status) {
            Ok(self)
        } else {
            Err(Fail::BadStatus)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello";

    #[test]
    fn a_response_in_one_piece_or_byte_by_byte() {
        let mut r = ResponseReader::default();
        r.start(false);
        let Ok(Progress::Done(resp)) = r.feed(R) else {
            panic!("one piece")
        };
        assert_eq!(resp.body, 5);
        assert!(resp.reusable);
        assert_eq!(resp.header_bytes as usize, R.len() - 5);
        r.start(false);
        let mut last = Progress::More;
        for (i, b) in R.iter().enumerate() {
            last = r.feed(std::slice::from_ref(b)).unwrap();
            if i + 1 < R.len() {
                assert_eq!(last, Progress::More, "byte {}", i);
            }
        }
        assert_eq!(last, Progress::Done(resp));
    }

    #[test]
    fn failures_are_sorted() {
        let mut r = ResponseReader::default();
        r.start(false);
        assert_eq!(r.eof(), Err(Fail::Reset));
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap();
        assert_eq!(r.eof(), Err(Fail::BadResponse));
        r.start(false);
        r.feed(b"HTTP/1.1 404 No\r\nContent-Length: 9\r\n\r\nnot")
            .unwrap();
        assert_eq!(r.eof(), Err(Fail::ShortBody));
        r.start(false);
        let Ok(Progress::Done(resp)) = r.feed(b"HTTP/1.1 404 No\r\nContent-Length: 0\r\n\r\n")
        else {
            panic!("a whole 404")
        };
        assert_eq!(resp.judged(), Err(Fail::BadStatus));
        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy"),
            Err(Fail::BadResponse)
        );
        r.start(false);
        assert_eq!(
            r.feed(b"HTTP/1.0 200 OK\r\n\r\nbody"),
            Err(Fail::BadResponse),
            "no length"
        );
        r.start(true);
        assert_eq!(r.feed(b"HTTP/1.0 200 OK\r\n\r\nbody"), Ok(Progress::More));
        let resp = r.eof().unwrap();
        assert_eq!((resp.body, resp.reusable), (4, false));
    }
}
