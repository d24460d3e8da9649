//! What the mix's fetches are made of: a step that may wait (`Step`), a
//! connection being opened, directly or through a SOCKS5 proxy (`Link`), and
//! the sending and reading of a few bytes on a socket of the event loop.
//! Every step of a fetch waits at most the spec's `timeout` (an idle timeout,
//! as a socket timeout in a real client: a slow transfer that keeps moving is
//! not cut off): each machine moves its deadline on whenever bytes move.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::rt::evloop::{self, Dial, Got, Io, Want};
use crate::wire::ftp::FtpFail;
use crate::wire::http::Fail;
use crate::wire::socks;

/// Where a sub-machine stands: waiting (for what), or finished.
pub enum Step<T> {
    Wait(Want),
    Ready(Result<T, FtpFail>),
}

/// Sends `out[*off..]`; Ready once all of it is written.
pub fn send(s: &TcpStream, out: &[u8], off: &mut usize, moved: &mut bool) -> Step<()> {
    while *off < out.len() {
        match evloop::write(s, &out[*off..]) {
            Ok(Some(n)) => {
                *off += n;
                *moved = true;
            }
            Ok(None) => return Step::Wait(Want::Write),
            Err(e) => return Step::Ready(Err(FtpFail::after(Fail::from_io(&e)))),
        }
    }
    Step::Ready(Ok(()))
}

/// Reads until `buf[..]` is full; the end of stream first is `eof`'s failure.
fn recv_exact(
    s: &TcpStream,
    buf: &mut [u8],
    got: &mut usize,
    moved: &mut bool,
    eof: FtpFail,
) -> Step<()> {
    while *got < buf.len() {
        match evloop::read(s, &mut buf[*got..]) {
            Ok(Got::Data(n)) => {
                *got += n;
                *moved = true;
            }
            Ok(Got::Wait) => return Step::Wait(Want::Read),
            Ok(Got::Eof) => return Step::Ready(Err(eof)),
            Err(e) => return Step::Ready(Err(FtpFail::after(Fail::from_io(&e)))),
        }
    }
    Step::Ready(Ok(()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ph {
    Start,
    Connecting,
    Greet,
    Method,
    Request,
    Head,
    NameLen,
    Rest,
}

/// A connection being opened to `to`, through the SOCKS5 proxy `via` if any.
/// A proxy that refuses by its rules is a refusal; anything else a connect
/// failure.
pub struct Link {
    to: SocketAddr,
    via: Option<SocketAddr>,
    timeout: Duration,
    ph: Ph,
    s: Option<TcpStream>,
    out: Vec<u8>,
    buf: [u8; 260],
    off: usize,
    need: usize,
}

/// How a failed step of the SOCKS dialogue counts.
fn socks_fail(f: Fail) -> FtpFail {
    match f {
        Fail::BadStatus => FtpFail::Refused,
        _ => FtpFail::Connect,
    }
}

impl Link {
    pub fn new(to: SocketAddr, via: Option<SocketAddr>, timeout: Duration) -> Link {
        Link {
            to,
            via,
            timeout,
            ph: Ph::Start,
            s: None,
            out: Vec::new(),
            buf: [0; 260],
            off: 0,
            need: 0,
        }
    }

    /// True while the TCP connect itself is under way (its timeout is a connect failure).
    pub fn connecting(&self) -> bool {
        matches!(self.ph, Ph::Start | Ph::Connecting)
    }

    pub fn poll(&mut self, io: &mut Io<'_>, moved: &mut bool) -> Step<TcpStream> {
        loop {
            match self.ph {
                Ph::Start => {
                    let d = Dial::to(self.via.unwrap_or(self.to), self.timeout);
                    match io.connect(&d) {
                        Ok(s) => {
                            self.s = Some(s);
                            self.ph = Ph::Connecting;
                            *moved = true;
                        }
                        Err(_) => return Step::Ready(Err(FtpFail::Connect)),
                    }
                }
                Ph::Connecting => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Connect));
                    };
                    match evloop::connected(s) {
                        Ok(true) => {}
                        Ok(false) => return Step::Wait(Want::Write),
                        Err(_) => return Step::Ready(Err(FtpFail::Connect)),
                    }
                    *moved = true;
                    if self.via.is_none() {
                        return self.done();
                    }
                    self.out = socks::GREETING.to_vec();
                    self.off = 0;
                    self.ph = Ph::Greet;
                }
                Ph::Greet | Ph::Request => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Connect));
                    };
                    match send(s, &self.out, &mut self.off, moved) {
                        Step::Ready(Ok(())) => {}
                        Step::Ready(Err(_)) => return Step::Ready(Err(FtpFail::Connect)),
                        Step::Wait(w) => return Step::Wait(w),
                    }
                    (self.ph, self.need) = if self.ph == Ph::Greet {
                        (Ph::Method, 2)
                    } else {
                        (Ph::Head, 4)
                    };
                    self.off = 0;
                }
                Ph::Method | Ph::Head | Ph::NameLen | Ph::Rest => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Connect));
                    };
                    let need = self.need;
                    match recv_exact(
                        s,
                        &mut self.buf[..need],
                        &mut self.off,
                        moved,
                        FtpFail::Connect,
                    ) {
                        Step::Ready(Ok(())) => {}
                        Step::Ready(Err(_)) => return Step::Ready(Err(FtpFail::Connect)),
                        Step::Wait(w) => return Step::Wait(w),
                    }
                    if let Some(w) = self.next_reply_part() {
                        return w;
                    }
                }
            }
        }
    }

    /// After a part of the proxy's answers: what to read or send next, or the end.
    fn next_reply_part(&mut self) -> Option<Step<TcpStream>> {
        let fail = |f: Fail| Some(Step::Ready(Err(socks_fail(f))));
        match self.ph {
            Ph::Method => {
                if self.buf[..2] != socks::METHOD_OK {
                    // The proxy wants authentication we do not offer.
                    return fail(Fail::BadStatus);
                }
                self.out = socks::request(self.to);
                (self.ph, self.off) = (Ph::Request, 0);
            }
            Ph::Head => {
                let head = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
                if head[0] != 5 {
                    return fail(Fail::BadResponse);
                }
                if head[1] != 0 {
                    return fail(socks::reply_fail(head[1]));
                }
                if head[3] == 3 {
                    (self.ph, self.need, self.off) = (Ph::NameLen, 1, 0);
                } else {
                    let Some(rest) = socks::reply_rest(&head, None) else {
                        return fail(Fail::BadResponse);
                    };
                    (self.ph, self.need, self.off) = (Ph::Rest, rest, 0);
                }
            }
            Ph::NameLen => {
                // The name itself and the port: its length and two more.
                (self.ph, self.need, self.off) = (Ph::Rest, self.buf[0] as usize + 2, 0);
            }
            Ph::Rest => return Some(self.done()),
            _ => {}
        }
        None
    }

    fn done(&mut self) -> Step<TcpStream> {
        match self.s.take() {
            Some(s) => Step::Ready(Ok(s)),
            None => Step::Ready(Err(FtpFail::Connect)),
        }
    }
}
