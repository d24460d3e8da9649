//! A virtual client of the mix: `requests` fetches one after the other,
//! `think` seconds apart, each drawn (a server by its `hit` weight, HTTP with
//! that server's `http_share`, else FTP, a file from the protocol's size set),
//! as a machine of the event loop. HTTP is one GET on a new connection
//! (`Connection: close`, the server closes first and keeps the TIME_WAIT);
//! FTP is the ftp module's session.

use std::marker::PhantomData;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::kinds::mix::ftp::FtpGet;
use crate::kinds::mix::link::{send, Link, Step};
use crate::kinds::mix::rng::Rng;
use crate::rt::evloop::{self, Flags, Got, Io, Machine, Want};
use crate::spec::MixSpec;
use crate::wire::ftp::FtpFail;
use crate::wire::http::{self as http_wire, Fail, Progress, Response, ResponseReader};

/// One fetch: [protocol is HTTP, failure or null, bytes, start, end].
pub type Row = (bool, Option<FtpFail>, u64, f64, f64);

pub fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn http_fail(f: Fail) -> FtpFail {
    match f {
        Fail::ConnectRefused | Fail::ConnectTimeout | Fail::Unreachable => FtpFail::Connect,
        Fail::Timeout => FtpFail::Timeout,
        Fail::BadStatus => FtpFail::Refused,
        _ => FtpFail::Short,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HttpPh {
    Link,
    Send,
    Receive,
    /// After the response: waiting for the server's FIN, so that the server,
    /// not the client, keeps the TIME_WAIT.
    AwaitClose,
}

/// One HTTP GET on a new connection (through the SOCKS proxy if any).
struct HttpGet {
    ph: HttpPh,
    link: Link,
    s: Option<TcpStream>,
    req: Vec<u8>,
    off: usize,
    reader: ResponseReader,
    resp: Option<Response>,
}

impl HttpGet {
    fn new(peer: SocketAddr, via: Option<SocketAddr>, path: &str, timeout: Duration) -> HttpGet {
        let host = match peer {
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
            SocketAddr::V4(a) => a.to_string(),
        };
        HttpGet {
            ph: HttpPh::Link,
            link: Link::new(peer, via, timeout),
            s: None,
            req: http_wire::request(path, &host, false),
            off: 0,
            reader: ResponseReader::default(),
            resp: None,
        }
    }

    /// The fetch's outcome from its response: a 2xx, the body's bytes.
    fn outcome(resp: Response) -> Result<u64, FtpFail> {
        resp.judged().map(|r| r.body).map_err(http_fail)
    }

    fn expire(&mut self) -> Result<u64, FtpFail> {
        match (self.ph, self.resp) {
            // A close the server did not finish in time: the fetch is done.
            (HttpPh::AwaitClose, Some(resp)) => HttpGet::outcome(resp),
            (HttpPh::Link, _) if self.link.connecting() => Err(FtpFail::Connect),
            _ => Err(FtpFail::Timeout),
        }
    }

    fn poll(&mut self, io: &mut Io<'_>, scratch: &mut [u8], moved: &mut bool) -> Step<u64> {
        loop {
            match self.ph {
                HttpPh::Link => match self.link.poll(io, moved) {
                    Step::Ready(Ok(s)) => {
                        self.s = Some(s);
                        self.ph = HttpPh::Send;
                    }
                    Step::Ready(Err(e)) => return Step::Ready(Err(e)),
                    Step::Wait(w) => return Step::Wait(w),
                },
                HttpPh::Send => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Short));
                    };
                    match send(s, &self.req, &mut self.off, moved) {
                        Step::Ready(Ok(())) => {
                            self.reader.start(true);
                            self.ph = HttpPh::Receive;
                        }
                        Step::Ready(Err(e)) => return Step::Ready(Err(e)),
                        Step::Wait(w) => return Step::Wait(w),
                    }
                }
                HttpPh::Receive => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Short));
                    };
                    match evloop::read(s, scratch) {
                        Ok(Got::Data(n)) => {
                            *moved = true;
                            match self.reader.feed(&scratch[..n]) {
                                Ok(Progress::More) => {}
                                Ok(Progress::Done(resp)) => {
                                    self.resp = Some(resp);
                                    self.ph = HttpPh::AwaitClose;
                                }
                                Err(f) => return Step::Ready(Err(http_fail(f))),
                            }
                        }
                        Ok(Got::Wait) => return Step::Wait(Want::Read),
                        Ok(Got::Eof) => {
                            return Step::Ready(
                                self.reader
                                    .eof()
                                    .map_err(|_| FtpFail::Short)
                                    .and_then(HttpGet::outcome),
                            )
                        }
                        Err(e) => return Step::Ready(Err(http_fail(Fail::from_io(&e)))),
                    }
                }
                HttpPh::AwaitClose => {
                    let Some(s) = self.s.as_ref() else {
                        return Step::Ready(Err(FtpFail::Short));
                    };
                    match evloop::read(s, scratch) {
                        Ok(Got::Wait) => return Step::Wait(Want::Read),
                        Ok(Got::Data(_)) => *moved = true,
                        Ok(Got::Eof) | Err(_) => {
                            let resp = self.resp.unwrap_or_default();
                            return Step::Ready(HttpGet::outcome(resp));
                        }
                    }
                }
            }
        }
    }
}

enum Job {
    Http(HttpGet),
    Ftp(FtpGet),
}

/// The fetch under way.
struct Fetch {
    http: bool,
    size: u64,
    start: f64,
    job: Job,
}

/// What one thread's virtual clients share.
pub struct Cx<'a> {
    pub spec: &'a MixSpec,
    pub total_hit: f64,
    pub scratch: Vec<u8>,
    pub rows: Vec<Row>,
}

impl Flags for Cx<'_> {
    fn stopped(&self) -> bool {
        false
    }
    fn aborted(&self) -> bool {
        false
    }
}

/// One virtual client.
pub struct Vc<'a> {
    rng: Rng,
    done: u64,
    think_until: Option<Instant>,
    cur: Option<Fetch>,
    deadline: Option<Instant>,
    _cx: PhantomData<fn(&'a ())>,
}

impl Vc<'_> {
    pub fn new(spec: &MixSpec, id: u64) -> Self {
        Vc {
            rng: Rng::new(&spec.seed, id),
            done: 0,
            think_until: None,
            cur: None,
            deadline: None,
            _cx: PhantomData,
        }
    }

    /// Draws the next fetch and starts it.
    fn draw(&mut self, cx: &Cx<'_>) -> Fetch {
        let spec = cx.spec;
        let timeout = Duration::from_secs_f64(spec.timeout);
        let mut r = self.rng.unit() * cx.total_hit;
        let mut server = &spec.servers[0];
        for s in spec.servers.iter().filter(|s| s.hit > 0.0) {
            server = s;
            if r < s.hit {
                break;
            }
            r -= s.hit;
        }
        let http = self.rng.unit() < server.http_share;
        let size = if http {
            let html = self.rng.unit() < 0.5;
            let set = match (html, spec.html_files.is_empty(), spec.gif_files.is_empty()) {
                (_, true, _) => &spec.gif_files,
                (_, _, true) => &spec.html_files,
                (true, _, _) => &spec.html_files,
                (false, _, _) => &spec.gif_files,
            };
            *self.rng.pick(set)
        } else {
            *self.rng.pick(&spec.ftp_files)
        };
        let job = if http {
            let peer = SocketAddr::new(server.address, spec.http_port);
            Job::Http(HttpGet::new(
                peer,
                spec.socks,
                &format!("/files/{}.bin", size),
                timeout,
            ))
        } else {
            let peer = SocketAddr::new(server.address, spec.ftp_port);
            Job::Ftp(FtpGet::new(
                peer,
                spec.socks,
                format!("files/{}.bin", size),
                spec.ftp_mode,
                timeout,
            ))
        };
        Fetch {
            http,
            size,
            start: wall(),
            job,
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>, r: Result<u64, FtpFail>) {
        let Some(f) = self.cur.take() else { return };
        let r = r.and_then(|n| {
            if n == f.size {
                Ok(n)
            } else {
                Err(FtpFail::Short)
            }
        });
        let end = wall();
        cx.rows.push(match r {
            Ok(n) => (f.http, None, n, f.start, end),
            Err(e) => (f.http, Some(e), 0, f.start, end),
        });
        self.done += 1;
        self.deadline = None;
    }
}

impl<'a> Machine for Vc<'a> {
    type Cx = Cx<'a>;

    fn step(&mut self, io: &mut Io<'_>, cx: &mut Cx<'a>) -> Want {
        loop {
            if self.cur.is_none() {
                if self.done >= cx.spec.requests {
                    return Want::Done;
                }
                if self.done > 0 && cx.spec.think > 0.0 {
                    let t = *self.think_until.get_or_insert_with(|| {
                        Instant::now() + Duration::from_secs_f64(cx.spec.think)
                    });
                    if Instant::now() < t {
                        return Want::Until(t);
                    }
                }
                self.think_until = None;
                self.cur = Some(self.draw(cx));
                self.deadline = Some(Instant::now() + Duration::from_secs_f64(cx.spec.timeout));
            }
            let Some(f) = self.cur.as_mut() else { continue };
            let mut moved = false;
            let step = match &mut f.job {
                Job::Http(h) => h.poll(io, &mut cx.scratch, &mut moved),
                Job::Ftp(g) => g.poll(io, &mut cx.scratch, &mut moved),
            };
            match step {
                Step::Wait(w) => {
                    if moved {
                        let wait = match &f.job {
                            Job::Ftp(g) => g.step_timeout(),
                            Job::Http(_) => Duration::from_secs_f64(cx.spec.timeout),
                        };
                        self.deadline = Some(Instant::now() + wait);
                    }
                    return w;
                }
                Step::Ready(r) => self.finish(cx, r),
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn expire(&mut self, cx: &mut Cx<'a>) {
        let r = match self.cur.as_mut().map(|f| &mut f.job) {
            Some(Job::Http(h)) => h.expire(),
            Some(Job::Ftp(g)) => g.expire(),
            None => return,
        };
        self.finish(cx, r);
    }
}
