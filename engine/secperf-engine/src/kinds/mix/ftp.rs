//! One FTP GET, as the NSTL clients did it: a new control connection,
//! anonymous login, `TYPE I`, a passive (`PASV`/`EPSV`) or active
//! (`PORT`/`EPRT`) data connection, `RETR`, the transfer to its end, `QUIT`
//! (answered within 200 ms or not at all, never counted).
//!
//! In passive mode the data connection goes to the control connection's peer
//! on the port the reply names, not to the address in the reply (curl's and
//! Python's ftplib's default): a transparent proxy answers with its own
//! address, and the testbed only routes what the client already reaches.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use socket2::SockRef;

use crate::kinds::mix::link::{send, Link, Step};
use crate::rt::evloop::{self, Got, Io, Want};
use crate::wire::ftp::{self as ftp_wire, FtpFail, Mode};
use crate::wire::http::Fail;

/// How long QUIT's answer is waited for.
const QUIT_WAIT: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ph {
    /// Opening the control connection.
    Control,
    Greeting,
    User,
    Pass,
    Type,
    Passive,
    /// Opening the passive data connection.
    DataLink,
    Port,
    Retr,
    /// Active mode: waiting for the server's data connection.
    Accept,
    Transfer,
    Complete,
    Quit,
    QuitReply,
}

/// The control connection: what is left to send, what came and is not a reply yet.
struct Ctl {
    s: TcpStream,
    out: Vec<u8>,
    off: usize,
    pending: Vec<u8>,
}

pub struct FtpGet {
    peer: SocketAddr,
    via: Option<SocketAddr>,
    path: String,
    mode: Mode,
    timeout: Duration,
    ph: Ph,
    link: Option<Link>,
    ctl: Option<Ctl>,
    listener: Option<TcpListener>,
    data: Option<TcpStream>,
    bytes: u64,
    /// The outcome once known (QUIT is still said after it).
    outcome: Option<Result<u64, FtpFail>>,
    /// The step waiting now is QUIT's: its deadline is short.
    pub quitting: bool,
}

impl FtpGet {
    pub fn new(
        peer: SocketAddr,
        via: Option<SocketAddr>,
        path: String,
        mode: Mode,
        timeout: Duration,
    ) -> FtpGet {
        FtpGet {
            peer,
            via,
            path,
            mode,
            timeout,
            ph: Ph::Control,
            link: Some(Link::new(peer, via, timeout)),
            ctl: None,
            listener: None,
            data: None,
            bytes: 0,
            outcome: None,
            quitting: false,
        }
    }

    /// How a step that ran out of time fails.
    pub fn timed_out(&self) -> FtpFail {
        match (self.ph, &self.link) {
            (Ph::Control | Ph::DataLink, Some(l)) if l.connecting() => FtpFail::Connect,
            _ => FtpFail::Timeout,
        }
    }

    /// The deadline of the step under way passed: the fetch fails, or (while
    /// QUIT is said) ends with what it had.
    pub fn expire(&mut self) -> Result<u64, FtpFail> {
        match self.outcome.take() {
            Some(done) if self.quitting => done,
            _ => Err(self.timed_out()),
        }
    }

    fn command(&mut self, line: &str, next: Ph) {
        if let Some(c) = self.ctl.as_mut() {
            c.out.clear();
            c.out.extend_from_slice(line.as_bytes());
            c.out.extend_from_slice(b"\r\n");
            c.off = 0;
        }
        self.ph = next;
    }

    /// Sends what is queued on the control connection, then reads a reply.
    fn reply(&mut self, moved: &mut bool) -> Step<(u16, String)> {
        let Some(c) = self.ctl.as_mut() else {
            return Step::Ready(Err(FtpFail::Short));
        };
        match send(&c.s, &c.out, &mut c.off, moved) {
            Step::Ready(Ok(())) => {}
            Step::Ready(Err(e)) => return Step::Ready(Err(e)),
            Step::Wait(w) => return Step::Wait(w),
        }
        let mut chunk = [0u8; 2048];
        loop {
            match ftp_wire::take_reply(&mut c.pending) {
                Ok(Some(r)) => return Step::Ready(Ok(r)),
                Ok(None) => {}
                Err(e) => return Step::Ready(Err(e)),
            }
            match evloop::read(&c.s, &mut chunk) {
                Ok(Got::Data(n)) => {
                    c.pending.extend_from_slice(&chunk[..n]);
                    *moved = true;
                }
                Ok(Got::Wait) => return Step::Wait(Want::Read),
                Ok(Got::Eof) => return Step::Ready(Err(FtpFail::Short)),
                Err(e) => return Step::Ready(Err(FtpFail::after(Fail::from_io(&e)))),
            }
        }
    }

    /// The whole dialogue; Ready with the bytes moved, once QUIT is said.
    pub fn poll(&mut self, io: &mut Io<'_>, scratch: &mut [u8], moved: &mut bool) -> Step<u64> {
        loop {
            if let Some(w) = self.advance(io, scratch, moved) {
                return w;
            }
        }
    }

    /// One phase; Some when the fetch waits or ends.
    fn advance(
        &mut self,
        io: &mut Io<'_>,
        scratch: &mut [u8],
        moved: &mut bool,
    ) -> Option<Step<u64>> {
        macro_rules! ready {
            ($step:expr) => {
                match $step {
                    Step::Wait(w) => return Some(Step::Wait(w)),
                    Step::Ready(Ok(v)) => v,
                    Step::Ready(Err(e)) => return self.fail(e),
                }
            };
        }
        // A reply whose code must be one of `want`; any other is a refusal.
        macro_rules! expect {
            ($want:expr) => {{
                let (code, text) = ready!(self.reply(moved));
                if !$want.contains(&code) {
                    return self.fail(FtpFail::Refused);
                }
                (code, text)
            }};
        }
        match self.ph {
            Ph::Control => {
                let link = self.link.as_mut()?;
                let s = ready!(link.poll(io, moved));
                self.link = None;
                self.ctl = Some(Ctl {
                    s,
                    out: Vec::new(),
                    off: 0,
                    pending: Vec::with_capacity(512),
                });
                self.ph = Ph::Greeting;
            }
            Ph::Greeting => {
                expect!([220]);
                self.command("USER anonymous", Ph::User);
            }
            Ph::User => {
                let (code, _) = expect!([230, 331]);
                if code == 331 {
                    self.command("PASS secperf@", Ph::Pass);
                } else {
                    self.command("TYPE I", Ph::Type);
                }
            }
            Ph::Pass => {
                expect!([230]);
                self.command("TYPE I", Ph::Type);
            }
            Ph::Type => {
                expect!([200]);
                match self.mode {
                    Mode::Passive if self.peer.is_ipv4() => self.command("PASV", Ph::Passive),
                    Mode::Passive => self.command("EPSV", Ph::Passive),
                    Mode::Active => {
                        let local: IpAddr = match self.ctl.as_ref().map(|c| c.s.local_addr()) {
                            Some(Ok(a)) => a.ip(),
                            _ => return self.fail(FtpFail::Connect),
                        };
                        let Ok(l) = TcpListener::bind(SocketAddr::new(local, 0)) else {
                            return self.fail(FtpFail::Connect);
                        };
                        let (Ok(at), Ok(())) =
                            (l.local_addr(), io.adopt(SockRef::from(&l), self.timeout))
                        else {
                            return self.fail(FtpFail::Connect);
                        };
                        self.listener = Some(l);
                        self.command(&ftp_wire::port_command(at), Ph::Port);
                    }
                }
            }
            Ph::Passive => {
                let (_, text) = expect!([227, 229]);
                let port = if self.peer.is_ipv4() {
                    ftp_wire::pasv_port(&text)
                } else {
                    ftp_wire::epsv_port(&text)
                };
                let Some(port) = port else {
                    return self.fail(FtpFail::Refused);
                };
                let to = SocketAddr::new(self.peer.ip(), port);
                self.link = Some(Link::new(to, self.via, self.timeout));
                self.ph = Ph::DataLink;
            }
            Ph::DataLink => {
                let link = self.link.as_mut()?;
                let s = ready!(link.poll(io, moved));
                self.link = None;
                self.data = Some(s);
                let retr = format!("RETR {}", self.path);
                self.command(&retr, Ph::Retr);
            }
            Ph::Port => {
                expect!([200]);
                let retr = format!("RETR {}", self.path);
                self.command(&retr, Ph::Retr);
            }
            Ph::Retr => {
                expect!([125, 150]);
                self.ph = if self.data.is_some() {
                    Ph::Transfer
                } else {
                    Ph::Accept
                };
            }
            Ph::Accept => {
                let l = self.listener.as_ref()?;
                match l.accept() {
                    Ok((s, _)) => {
                        if io.adopt(SockRef::from(&s), self.timeout).is_err() {
                            return self.fail(FtpFail::Connect);
                        }
                        *moved = true;
                        self.listener = None;
                        self.data = Some(s);
                        self.ph = Ph::Transfer;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Some(Step::Wait(Want::Read))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return self.fail(FtpFail::Connect),
                }
            }
            Ph::Transfer => {
                let d = self.data.as_ref()?;
                match evloop::read(d, scratch) {
                    Ok(Got::Data(n)) => {
                        self.bytes += n as u64;
                        *moved = true;
                    }
                    Ok(Got::Wait) => return Some(Step::Wait(Want::Read)),
                    Ok(Got::Eof) => {
                        self.data = None;
                        self.ph = Ph::Complete;
                    }
                    Err(e) => return self.fail(FtpFail::after(Fail::from_io(&e))),
                }
            }
            Ph::Complete => {
                // 226/250: the transfer is complete; 426 and the like: it was cut short.
                let (code, _) = ready!(self.reply(moved));
                if !(code == 226 || code == 250) {
                    let f = if code >= 400 && self.bytes > 0 {
                        FtpFail::Short
                    } else {
                        FtpFail::Refused
                    };
                    return self.fail(f);
                }
                self.outcome = Some(Ok(self.bytes));
                self.quit();
            }
            Ph::Quit | Ph::QuitReply => {
                let r = self.reply(moved);
                if let Step::Wait(w) = r {
                    return Some(Step::Wait(w));
                }
                // QUIT's answer, whatever it is, is not counted.
                return Some(Step::Ready(
                    self.outcome.take().unwrap_or(Err(FtpFail::Short)),
                ));
            }
        }
        None
    }

    /// Says QUIT if the session is in order (the fetch done, or refused).
    fn quit(&mut self) {
        self.data = None;
        self.listener = None;
        self.link = None;
        if self.ctl.is_none() {
            self.ph = Ph::QuitReply;
            return;
        }
        self.quitting = true;
        self.command("QUIT", Ph::Quit);
    }

    /// The fetch failed with `f`: a refusal still says QUIT (None: go on with
    /// it); anything else ends the fetch now.
    fn fail(&mut self, f: FtpFail) -> Option<Step<u64>> {
        if f == FtpFail::Refused && self.ctl.is_some() && !self.quitting {
            self.outcome = Some(Err(f));
            self.quit();
            return None;
        }
        self.ctl = None;
        self.data = None;
        self.listener = None;
        Some(Step::Ready(Err(f)))
    }

    /// How long the step under way may wait.
    pub fn step_timeout(&self) -> Duration {
        if self.quitting {
            QUIT_WAIT.min(self.timeout)
        } else {
            self.timeout
        }
    }
}
