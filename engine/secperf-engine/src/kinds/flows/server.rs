//! The server side of a flows test: a socket on every (protocol, address,
//! port) its flows declare, one epoll thread that accepts and answers
//! datagrams, and a pool of threads that serve the TCP connections (request
//! in, response out, then the server's FIN first, as crr's default).
//!
//! The safety rule: a connection or datagram from a source outside `allow`
//! gets nothing (a connection is reset at once, a datagram dropped unread in
//! effect: counted, never answered), and at most `parallel` connections are
//! served at once (beyond that the listeners wait, the kernel's queue holds
//! the rest until the clients' deadlines).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::error::{EngineError, Result};
use crate::rt::evloop::Poller;
use crate::spec::{FlowSpec, FlowsSpec, Listen, Protocol, ID_BYTES};

/// What one socket of the server counted.
#[derive(Default)]
pub struct Counts {
    /// Connections accepted from allowed sources (TCP), datagrams taken (UDP).
    pub taken: AtomicU64,
    /// Answered in full.
    pub answered: AtomicU64,
    /// From a source outside `allow`: reset or dropped, never answered.
    pub refused_sources: AtomicU64,
    /// Requests of the wrong size or with an id no flow here has.
    pub bad_requests: AtomicU64,
    pub bytes: AtomicU64,
}

/// One bound socket and the flows it answers.
pub struct Sock {
    pub listen: Listen,
    pub counts: Counts,
    tcp: Option<TcpListener>,
    udp: Option<UdpSocket>,
}

impl Sock {
    pub fn name(&self) -> String {
        format!(
            "{} {}",
            self.listen.protocol.name(),
            SocketAddr::new(self.listen.address, self.listen.port)
        )
    }
}

/// Binds every socket the spec declares (before the `start` record).
pub fn bind(spec: &FlowsSpec) -> Result<Vec<Sock>> {
    let mut out = Vec::new();
    for l in spec.listens()? {
        let addr = SocketAddr::new(l.address, l.port);
        let names: Vec<&str> = l
            .flows
            .iter()
            .map(|&i| spec.flows[i].name.as_str())
            .collect();
        let fail = EngineError::io(format!(
            "cannot listen on {} {} (flows {}): add the address to this host, or stop what holds the port",
            l.protocol.name(),
            addr,
            names.join(", ")
        ));
        let bound = (|| -> io::Result<(Option<TcpListener>, Option<UdpSocket>)> {
            let ty = match l.protocol {
                Protocol::Tcp => Type::STREAM,
                Protocol::Udp => Type::DGRAM,
            };
            let s = Socket::new(Domain::for_address(addr), ty, None)?;
            s.set_reuse_address(true)?;
            if addr.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.bind(&addr.into())?;
            s.set_nonblocking(true)?;
            Ok(match l.protocol {
                Protocol::Tcp => {
                    s.listen(1024)?;
                    (Some(s.into()), None)
                }
                Protocol::Udp => (None, Some(s.into())),
            })
        })();
        let (tcp, udp) = bound.map_err(fail)?;
        out.push(Sock {
            listen: l,
            counts: Counts::default(),
            tcp,
            udp,
        });
    }
    Ok(out)
}

/// The flow a request on `sock` belongs to: the only size there, else the
/// id its first bytes carry.
fn flow_of<'a>(
    spec: &'a FlowsSpec,
    sock: &Sock,
    head: Option<[u8; ID_BYTES]>,
) -> Option<&'a FlowSpec> {
    let flows = &sock.listen.flows;
    let first = &spec.flows[flows[0]];
    let same = flows.iter().all(|&i| {
        (spec.flows[i].request, spec.flows[i].response) == (first.request, first.response)
    });
    if same {
        return Some(first);
    }
    let id = u16::from_le_bytes(head?);
    flows.iter().map(|&i| &spec.flows[i]).find(|f| f.id == id)
}

fn needs_id(spec: &FlowsSpec, sock: &Sock) -> bool {
    flow_of(spec, sock, None).is_none()
}

/// Shared by the epoll thread and the connection threads.
pub struct State {
    pub spec: FlowsSpec,
    pub socks: Vec<Sock>,
    allow: Vec<IpAddr>,
    busy: AtomicUsize,
    pub stop: AtomicBool,
    pub busy_max: AtomicUsize,
}

impl State {
    pub fn new(spec: FlowsSpec, socks: Vec<Sock>) -> State {
        let allow = spec.allow.iter().map(|a| a.to_canonical()).collect();
        State {
            spec,
            socks,
            allow,
            busy: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            busy_max: AtomicUsize::new(0),
        }
    }

    fn allowed(&self, from: &SocketAddr) -> bool {
        self.allow.contains(&from.ip().to_canonical())
    }
}

/// The epoll thread: accepts while fewer than `parallel` connections are
/// served, answers datagrams, until `stop`. Connections go to `conns`.
pub fn poll_loop(st: &State, conns: mpsc::Sender<(TcpStream, usize)>) -> Result<()> {
    let mut poller = Poller::new().map_err(EngineError::io("cannot create an epoll set"))?;
    for (i, s) in st.socks.iter().enumerate() {
        let r = match (&s.tcp, &s.udp) {
            (Some(l), _) => poller.add(l, i),
            (_, Some(u)) => poller.add(u, i),
            _ => Ok(()),
        };
        r.map_err(EngineError::io("cannot watch a listening socket"))?;
    }
    let mut ready = Vec::new();
    // Sockets that may hold more than we took (an edge not drained).
    let mut pending: Vec<bool> = vec![true; st.socks.len()];
    let mut dgram = vec![0u8; 65536];
    let mut resp: Vec<u8> = Vec::new();
    while !st.stop.load(Relaxed) {
        let wait = if pending.iter().any(|p| *p) {
            Duration::from_millis(5)
        } else {
            Duration::from_millis(100)
        };
        poller
            .wait(&mut ready, Some(wait))
            .map_err(EngineError::io("epoll_wait failed"))?;
        for &i in &ready {
            if let Some(p) = pending.get_mut(i) {
                *p = true;
            }
        }
        for (i, s) in st.socks.iter().enumerate() {
            if !pending[i] {
                continue;
            }
            pending[i] = match (&s.tcp, &s.udp) {
                (Some(l), _) => accept_some(st, i, l, &conns),
                (_, Some(u)) => answer_some(st, s, u, &mut dgram, &mut resp),
                _ => false,
            };
        }
    }
    Ok(())
}

/// Accepts until the listener is empty (false) or the server is full (true).
fn accept_some(
    st: &State,
    i: usize,
    l: &TcpListener,
    conns: &mpsc::Sender<(TcpStream, usize)>,
) -> bool {
    let counts = &st.socks[i].counts;
    loop {
        if st.busy.load(Relaxed) >= st.spec.parallel {
            return true;
        }
        let (s, from) = match l.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false, // ECONNABORTED, EMFILE: the next edge retries
        };
        if !st.allowed(&from) {
            counts.refused_sources.fetch_add(1, Relaxed);
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            continue; // dropped: an RST, nothing read or written
        }
        counts.taken.fetch_add(1, Relaxed);
        let n = st.busy.fetch_add(1, Relaxed) + 1;
        st.busy_max.fetch_max(n, Relaxed);
        if conns.send((s, i)).is_err() {
            st.busy.fetch_sub(1, Relaxed);
            return false;
        }
    }
}

/// Answers every datagram queued on `u` (from allowed sources, of the right size).
fn answer_some(st: &State, s: &Sock, u: &UdpSocket, dgram: &mut [u8], resp: &mut Vec<u8>) -> bool {
    loop {
        let (n, from) = match u.recv_from(dgram) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => continue, // an ICMP error queued by an earlier send
        };
        if !st.allowed(&from) {
            s.counts.refused_sources.fetch_add(1, Relaxed);
            continue;
        }
        s.counts.taken.fetch_add(1, Relaxed);
        let head = (n >= ID_BYTES).then(|| [dgram[0], dgram[1]]);
        let Some(f) = flow_of(&st.spec, s, head).filter(|f| f.request == n) else {
            s.counts.bad_requests.fetch_add(1, Relaxed);
            continue;
        };
        resp.clear();
        resp.resize(f.response, b'r');
        if u.send_to(resp, from).is_ok() {
            s.counts.answered.fetch_add(1, Relaxed);
            s.counts.bytes.fetch_add((n + f.response) as u64, Relaxed);
        }
    }
}

/// A connection thread: serves what the epoll thread hands it until `stop`.
pub fn conn_loop(st: &State, conns: &Mutex<mpsc::Receiver<(TcpStream, usize)>>) {
    let mut buf = vec![0u8; 65536];
    let mut resp = Vec::new();
    loop {
        let got = {
            let rx = conns.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv_timeout(Duration::from_millis(100))
        };
        match got {
            Ok((s, i)) => {
                serve_one(st, &st.socks[i], s, &mut buf, &mut resp);
                st.busy.fetch_sub(1, Relaxed);
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !st.stop.load(Relaxed) => {}
            Err(_) => return,
        }
    }
}

/// One connection: the request (its flow from the socket, else its id), the
/// response, then our close (the FIN follows the response).
fn serve_one(st: &State, sock: &Sock, mut s: TcpStream, buf: &mut [u8], resp: &mut Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs_f64(2.0 * st.spec.timeout);
    let _ = s.set_nonblocking(false);
    let read_exact = |s: &mut TcpStream, out: &mut [u8]| -> io::Result<()> {
        let mut got = 0;
        while got < out.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            s.set_read_timeout(Some(left))?;
            match s.read(&mut out[got..])? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => got += n,
            }
        }
        Ok(())
    };
    let mut head = [0u8; ID_BYTES];
    let (f, read) = if needs_id(&st.spec, sock) {
        if read_exact(&mut s, &mut head).is_err() {
            sock.counts.bad_requests.fetch_add(1, Relaxed);
            return;
        }
        (flow_of(&st.spec, sock, Some(head)), ID_BYTES)
    } else {
        (flow_of(&st.spec, sock, None), 0)
    };
    let Some(f) = f else {
        sock.counts.bad_requests.fetch_add(1, Relaxed);
        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        return;
    };
    let mut rest = f.request - read;
    while rest > 0 {
        let n = rest.min(buf.len());
        if read_exact(&mut s, &mut buf[..n]).is_err() {
            sock.counts.bad_requests.fetch_add(1, Relaxed);
            return;
        }
        rest -= n;
    }
    resp.clear();
    resp.resize(f.response, b'r');
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || s.set_write_timeout(Some(left)).is_err() {
        return;
    }
    if s.write_all(resp).is_ok() {
        sock.counts.answered.fetch_add(1, Relaxed);
        sock.counts
            .bytes
            .fetch_add((f.request + f.response) as u64, Relaxed);
    }
}

/// Starts the server's threads; returns their handles.
pub fn start(st: &Arc<State>) -> Result<Vec<std::thread::JoinHandle<Result<()>>>> {
    let (tx, rx) = mpsc::channel();
    let rx = Arc::new(Mutex::new(rx));
    let mut handles = Vec::new();
    let workers = st.spec.parallel.clamp(1, 64);
    let spawn_err = |e| {
        EngineError::io("cannot start a flows server thread: raise the thread limit (ulimit -u)")(e)
    };
    for i in 0..workers {
        let (mine, rx) = (st.clone(), rx.clone());
        let h = std::thread::Builder::new()
            .name(format!("flows-conn-{}", i))
            .spawn(move || {
                conn_loop(&mine, &rx);
                Ok(())
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                st.stop.store(true, Relaxed);
                return Err(spawn_err(e));
            }
        }
    }
    let st2 = st.clone();
    let h = std::thread::Builder::new()
        .name("flows-poll".into())
        .spawn(move || poll_loop(&st2, tx));
    match h {
        Ok(h) => handles.push(h),
        Err(e) => {
            st.stop.store(true, Relaxed);
            return Err(spawn_err(e));
        }
    }
    Ok(handles)
}
