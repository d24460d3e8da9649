//! Kind `stream`: bulk transfer in one or both directions, `parallel`
//! streams each on its own thread on both sides. The hot loops are one
//! blocking write()/read() per message from a preallocated buffer.
//!
//! Data-connection preamble (TCP): the client writes one byte, `S` (the
//! client sends on this connection) or `R` (the server sends). UDP: a client
//! receiving socket sends `HELLO` datagrams until data arrives; the server
//! sends to each socket it has heard a hello from.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{EngineError, Result};
use crate::kinds::base::{ClientStart, Kind, RunOptions, ServerEnv, ServerSetup};
use crate::kinds::timed::{self, secs, Plan, Snap, Timed, Window};
use crate::rt::net::{self, would_block, SockOpts};
use crate::rt::pacing::Pacer;
use crate::rt::payload;
use crate::rt::shared::{Role, Shared, ThreadStats};
use crate::rt::sys;
use crate::spec::{Direction, KindSpec, Protocol, Resolved, StreamSpec};
use crate::wire::control::Counters;
use crate::wire::record::{Interval, Loss, ResultRecord, Sink, Transfer};

pub const HELLO: &[u8; 16] = b"secperf-hello-v1";
const ROLE_CLIENT_SENDS: u8 = b'S';
const ROLE_SERVER_SENDS: u8 = b'R';
/// TCP reads take at least this much at once (iperf3 reads a whole block).
const MIN_READ: usize = 128 << 10;
const UDP_QUIET: Duration = Duration::from_millis(200);
const TCP_QUIET: Duration = Duration::from_secs(2);
const UDP_WAKE: Duration = Duration::from_millis(50);

/// Pacing rate of one sending stream: `rate_bps` is the total over all senders.
fn per_stream_rate(spec: &StreamSpec) -> Option<f64> {
    let streams = spec.parallel
        * if spec.direction == Direction::Both {
            2
        } else {
            1
        };
    spec.rate_bps.map(|r| r as f64 / streams as f64)
}

fn data_err(what: &str) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| {
        EngineError::io(format!(
            "stream {} failed (check that the server still runs and nothing in the path resets or blocks the connection)",
            what
        ))(e)
    }
}

/// Sends messages of `buf` until the test stops, then shuts the write side down.
pub fn tcp_send(
    s: &TcpStream,
    spec: &StreamSpec,
    buf: &[u8],
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let mut pacer = per_stream_rate(spec).map(|r| Pacer::new(r, buf.len()));
    let mut w = s;
    let (mut sent, mut msgs) = (0u64, 0u64);
    'run: while !sh.stopped() {
        // A fixed transfer sends exactly `bytes`: the last message is cut to fit.
        let len = match spec.bytes {
            Some(total) if sent >= total => break,
            Some(total) => buf.len().min((total - sent) as usize),
            None => buf.len(),
        };
        if let Some(p) = pacer.as_mut() {
            if !p.wait(len, || sh.stopped()) {
                break;
            }
        }
        let mut off = 0;
        while off < len {
            match w.write(&buf[off..len]) {
                Ok(0) => return Err(data_err("send")(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    off += n;
                    sent += n as u64;
                }
                Err(e) if would_block(&e) => {
                    if sh.stopped() {
                        break 'run;
                    }
                }
                Err(e) => {
                    st.bytes_sent.store(sent, Relaxed);
                    return Err(data_err("send")(e));
                }
            }
        }
        msgs += 1;
        st.bytes_sent.store(sent, Relaxed);
        st.messages_sent.store(msgs, Relaxed);
    }
    st.bytes_sent.store(sent, Relaxed);
    st.messages_sent.store(msgs, Relaxed);
    let _ = s.shutdown(Shutdown::Write);
    if spec.bytes.is_some() {
        delivered(s, sh);
    }
    Ok(())
}

/// A fixed transfer's sender ends once the peer has acknowledged every byte
/// (nothing left in the socket's send queue), so that "the sender is done"
/// means "the receiver has it all": on a slow link the send buffer holds
/// minutes of data after the last write returns. Gives up when the test is
/// stopped (the time limit) or the socket fails.
fn delivered(s: &TcpStream, sh: &Shared) {
    let fd = s.as_raw_fd();
    while !sh.stopped() {
        match sys::unsent_bytes(fd) {
            Some(0) | None => return,
            Some(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Receives until EOF (the time of EOF is the last byte's time).
///
/// With `rcvlowat` > 1 the read sleeps until that much is queued rather than
/// waking on every arriving packet: on a busy path each wake-up of a sleeping
/// reader costs the sender an inter-processor interrupt, and for large
/// messages those wake-ups, not the copying, limited the rate
/// (docs/performance.md). The read buffer holds at least that much.
pub fn tcp_receive(s: &TcpStream, spec: &StreamSpec, sh: &Shared, st: &ThreadStats) -> Result<()> {
    if spec.rcvlowat > 1 {
        sys::set_rcvlowat(s.as_raw_fd(), spec.rcvlowat)
            .map_err(data_err("socket setup (SO_RCVLOWAT)"))?;
    }
    let mut buf = vec![0u8; spec.message.max(MIN_READ).max(spec.rcvlowat)];
    let msg = spec.message as u64;
    let mut r = s;
    let mut total = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => {
                st.last_recv_ns.store(sh.now_ns(), Relaxed);
                return Ok(());
            }
            Ok(n) => {
                let before = total;
                total += n as u64;
                st.bytes_received.store(total, Relaxed);
                st.messages_received.store(total / msg, Relaxed);
                // A clock read per MiB, so a stream cut short still has a last-byte time.
                if before >> 20 != total >> 20 {
                    st.last_recv_ns.store(sh.now_ns(), Relaxed);
                }
            }
            Err(e) if would_block(&e) => {
                if sh.quiet_end(0, TCP_QUIET) {
                    return Ok(());
                }
            }
            Err(e) => return Err(data_err("receive")(e)),
        }
    }
}

fn udp_send_loop(
    spec: &StreamSpec,
    buf: &[u8],
    sh: &Shared,
    st: &ThreadStats,
    mut send: impl FnMut(&[u8]) -> std::io::Result<usize>,
) -> Result<()> {
    let mut pacer = per_stream_rate(spec).map(|r| Pacer::new(r, buf.len()));
    let (mut sent, mut msgs) = (0u64, 0u64);
    while !sh.stopped() {
        if let Some(p) = pacer.as_mut() {
            if !p.wait(buf.len(), || sh.stopped()) {
                break;
            }
        }
        match send(buf) {
            Ok(n) => {
                sent += n as u64;
                msgs += 1;
                st.bytes_sent.store(sent, Relaxed);
                st.messages_sent.store(msgs, Relaxed);
            }
            // Full queues and ICMP errors are loss, not failure.
            Err(e)
                if would_block(&e)
                    || e.kind() == std::io::ErrorKind::ConnectionRefused
                    || e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(data_err("UDP send")(e)),
        }
    }
    Ok(())
}

/// Counts one datagram; returns its arrival time.
fn count_datagram(n: usize, sh: &Shared, st: &ThreadStats, bytes: &mut u64, msgs: &mut u64) -> u64 {
    *bytes += n as u64;
    *msgs += 1;
    let now = sh.now_ns();
    st.bytes_received.store(*bytes, Relaxed);
    st.messages_received.store(*msgs, Relaxed);
    st.last_recv_ns.store(now, Relaxed);
    now
}

// ---------------------------------------------------------------- server

/// The one message every sender of the server's side sends (empty when the
/// client only sends): made once per test, not once per connection.
fn sender_message(spec: &StreamSpec) -> Arc<[u8]> {
    if spec.direction.client_receives() {
        payload::make(spec.payload, spec.message, 2000).into()
    } else {
        Arc::from(Vec::new())
    }
}

/// The data sockets' options.
fn sock(spec: &StreamSpec) -> SockOpts {
    SockOpts {
        buffer: spec.socket_buffer,
        nodelay: spec.nodelay,
        bind: spec.bind,
    }
}

fn serve_tcp(spec: &StreamSpec, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
    let ports = env.ports(spec.data_port);
    let (listener, data_port, socket) = net::tcp_listen(&sock(spec), env.ip, ports)?;
    let spec = spec.clone();
    let admit = env.admit.clone();
    // The server's senders share one message (spec::budget counts it once).
    let out = sender_message(&spec);
    sh.spawn("stream-accept", Role::Active, move |sh, st| {
        net::accept_loop(&listener, sh, &admit, |s| {
            st.connections.fetch_add(1, Relaxed);
            let (spec, out) = (spec.clone(), out.clone());
            sh.spawn("stream-conn", Role::Passive, move |sh, st| {
                net::set_wake_timeouts(&s).map_err(data_err("socket setup"))?;
                let mut role = [0u8; 1];
                if !net::read_full(&mut &s, &mut role, sh).map_err(data_err("preamble"))? {
                    return Ok(());
                }
                match role[0] {
                    ROLE_CLIENT_SENDS => tcp_receive(&s, &spec, sh, st),
                    ROLE_SERVER_SENDS => {
                        sh.add_sender_socket(&s);
                        tcp_send(&s, &spec, &out, sh, st)
                    }
                    other => Err(EngineError::Internal(format!(
                        "unknown data-connection role byte {}: run the same engine version on both sides",
                        other
                    ))),
                }
            })
        })
    })?;
    Ok(ServerSetup { data_port, socket })
}

fn serve_udp(spec: &StreamSpec, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
    let (sock, socket) = net::udp_bind(&sock(spec), env.ip, env.ports(spec.data_port))?;
    let data_port = sock
        .local_addr()
        .map_err(EngineError::io("cannot read the data socket's address"))?
        .port();
    sock.set_read_timeout(Some(UDP_WAKE))
        .map_err(EngineError::io("cannot set a timeout on the data socket"))?;
    let sock = Arc::new(sock);
    let peers: Arc<Mutex<Vec<SocketAddr>>> = Arc::new(Mutex::new(Vec::new()));
    let out = sender_message(spec);
    let receivers = if spec.direction == Direction::Receive {
        1
    } else {
        spec.parallel
    };
    for _ in 0..receivers {
        let (sock, peers, spec, env) = (sock.clone(), peers.clone(), spec.clone(), env.clone());
        let out = out.clone();
        sh.spawn("stream-udp-rx", Role::Passive, move |sh, st| {
            let mut buf = vec![0u8; 65536];
            let (mut bytes, mut msgs, mut last) = (0u64, 0u64, 0u64);
            loop {
                match sock.recv_from(&mut buf) {
                    // A spoofed source: neither counted nor ever sent to.
                    Ok((_, from)) if !env.answers(from) => {}
                    Ok((n, from)) => {
                        if n == HELLO.len() && &buf[..n] == HELLO {
                            add_peer(&spec, &out, sh, &sock, &peers, from)?;
                            continue;
                        }
                        last = count_datagram(n, sh, st, &mut bytes, &mut msgs);
                    }
                    Err(e)
                        if would_block(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused =>
                    {
                        if sh.quiet_end(last, UDP_QUIET) {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(data_err("UDP receive")(e)),
                }
            }
        })?;
    }
    Ok(ServerSetup { data_port, socket })
}

/// A client socket said hello: start sending to it (once, up to `parallel`).
fn add_peer(
    spec: &StreamSpec,
    out: &Arc<[u8]>,
    sh: &Arc<Shared>,
    sock: &Arc<UdpSocket>,
    peers: &Mutex<Vec<SocketAddr>>,
    from: SocketAddr,
) -> Result<()> {
    if !spec.direction.client_receives() || sh.stopped() {
        return Ok(());
    }
    let mut g = peers.lock().unwrap_or_else(|p| p.into_inner());
    if g.contains(&from) || g.len() >= spec.parallel {
        return Ok(());
    }
    g.push(from);
    let (sock, spec, out) = (sock.clone(), spec.clone(), out.clone());
    sh.spawn("stream-udp-tx", Role::Passive, move |sh, st| {
        udp_send_loop(&spec, &out, sh, st, |b| sock.send_to(b, from))
    })
}

// ---------------------------------------------------------------- client

fn start(spec: &StreamSpec, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
    let mut roles = Vec::new();
    if spec.direction.client_sends() {
        roles.extend(std::iter::repeat_n(true, spec.parallel));
    }
    if spec.direction.client_receives() {
        roles.extend(std::iter::repeat_n(false, spec.parallel));
    }
    let port = |i: usize| spec.client_port.map(|p| p.wrapping_add(i as u16));
    let opts = sock(spec);
    match spec.common.protocol {
        Protocol::Tcp => {
            // Connect everything first, so the streams start together.
            let mut conns = Vec::with_capacity(roles.len());
            for (i, &sends) in roles.iter().enumerate() {
                let s = net::tcp_connect(&opts, data, port(i))?;
                net::set_wake_timeouts(&s).map_err(data_err("socket setup"))?;
                let role = if sends {
                    ROLE_CLIENT_SENDS
                } else {
                    ROLE_SERVER_SENDS
                };
                (&s).write_all(&[role]).map_err(data_err("preamble"))?;
                if sends {
                    sh.add_sender_socket(&s);
                }
                conns.push((s, sends));
            }
            let local = conns.first().and_then(|(s, _)| s.local_addr().ok());
            for (i, (s, sends)) in conns.into_iter().enumerate() {
                let spec = spec.clone();
                if sends {
                    sh.spawn("stream-tx", Role::Active, move |sh, st| {
                        let buf = payload::make(spec.payload, spec.message, i as u64);
                        tcp_send(&s, &spec, &buf, sh, st)
                    })?;
                } else {
                    sh.spawn("stream-rx", Role::Passive, move |sh, st| {
                        tcp_receive(&s, &spec, sh, st)
                    })?;
                }
            }
            Ok(ClientStart { local })
        }
        Protocol::Udp => {
            let mut socks = Vec::with_capacity(roles.len());
            for i in 0..roles.len() {
                socks.push(net::udp_connect(&opts, data, port(i))?);
            }
            let local = socks.first().and_then(|s| s.local_addr().ok());
            for (i, (s, sends)) in socks.into_iter().zip(roles).enumerate() {
                let spec = spec.clone();
                if sends {
                    sh.spawn("stream-udp-tx", Role::Active, move |sh, st| {
                        let buf = payload::make(spec.payload, spec.message, i as u64);
                        udp_send_loop(&spec, &buf, sh, st, |b| s.send(b))
                    })?;
                } else {
                    sh.spawn("stream-udp-rx", Role::Passive, move |sh, st| {
                        udp_client_receive(&s, sh, st)
                    })?;
                }
            }
            Ok(ClientStart { local })
        }
    }
}

/// Says hello until data flows, then counts datagrams until quiet after drain.
fn udp_client_receive(s: &UdpSocket, sh: &Shared, st: &ThreadStats) -> Result<()> {
    s.set_read_timeout(Some(UDP_WAKE))
        .map_err(EngineError::io("cannot set a timeout on a data socket"))?;
    let mut buf = vec![0u8; 65536];
    let (mut bytes, mut msgs, mut last) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut hello_at: Option<Instant> = None;
    loop {
        if msgs == 0
            && !sh.stopped()
            && hello_at.is_none_or(|t| t.elapsed() >= Duration::from_millis(100))
        {
            if started.elapsed() > Duration::from_secs(3) {
                return Err(EngineError::Server {
                    field: None,
                    message: "no UDP data from the server within 3 s of saying hello: check that the path lets UDP through in both directions".into(),
                });
            }
            let _ = s.send(HELLO);
            hello_at = Some(Instant::now());
        }
        match s.recv(&mut buf) {
            Ok(n) => last = count_datagram(n, sh, st, &mut bytes, &mut msgs),
            Err(e) if would_block(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => {
                if sh.quiet_end(last, UDP_QUIET) {
                    return Ok(());
                }
            }
            Err(e) => return Err(data_err("UDP receive")(e)),
        }
    }
}

// ---------------------------------------------------------------- the kind

/// Kind `stream`, one test on one side.
pub struct Stream {
    spec: StreamSpec,
}

impl Stream {
    pub fn new(spec: StreamSpec) -> Stream {
        Stream { spec }
    }
}

impl Kind for Stream {
    fn serve(&self, env: &ServerEnv, sh: &Arc<Shared>) -> Result<ServerSetup> {
        match self.spec.common.protocol {
            Protocol::Tcp => serve_tcp(&self.spec, env, sh),
            Protocol::Udp => serve_udp(&self.spec, env, sh),
        }
    }

    fn run(&self, opts: &RunOptions, sink: &mut dyn Sink) -> Result<()> {
        self.spec.check_local_limits()?;
        timed::run(self, opts, sink)
    }
}

impl Timed for Stream {
    fn plan(&self) -> Plan<'_> {
        let s = &self.spec;
        Plan {
            kind: StreamSpec::NAME,
            spec: s.to_value(),
            common: &s.common,
            warmup: s.warmup,
            interval: s.interval,
            sock: sock(s),
            transfer: s.bytes.map(|n| (n, s.direction.client_sends())),
            server_intervals: s.direction.client_sends(),
        }
    }

    fn start(&self, data: SocketAddr, sh: &Arc<Shared>) -> Result<ClientStart> {
        start(&self.spec, data, sh)
    }

    /// The bytes and messages the receivers got (for `both`, the sum).
    fn interval(&self, a: &Snap, b: &Snap, _: &Shared, rec: &mut Interval) {
        let mut add = |x: &Counters, y: &Counters| {
            rec.bytes += y.bytes_received.saturating_sub(x.bytes_received);
            rec.messages += y.messages_received.saturating_sub(x.messages_received);
        };
        if self.spec.direction.client_sends() {
            if let (Some(x), Some(y)) = (&a.server, &b.server) {
                add(x, y);
            }
        }
        if self.spec.direction.client_receives() {
            add(&a.local, &b.local);
        }
    }

    fn result(&self, w: &Window, _: &Shared, res: &mut ResultRecord) -> Result<()> {
        let spec = &self.spec;
        let (server_warm, server_final) = (w.server_warm, w.server_final());
        let (warm, end, local_final) = (&w.warm, &w.end, w.local_final);
        if spec.common.protocol == Protocol::Tcp {
            res.retransmits = Some(w.retransmits());
        }
        // Each receiving side: bytes since the warm-up snapshot over
        // its own time from that snapshot to the last byte.
        let mut sides = Vec::new();
        if spec.direction.client_sends() {
            sides.push((server_warm, server_final, warm.local, local_final));
        }
        if spec.direction.client_receives() {
            sides.push((warm.local, local_final, server_warm, server_final));
        }
        let mut lost = 0u64;
        let mut sent_msgs = 0u64;
        // Received within the CPU window: up to the end snapshot, which has
        // the server's counters whenever the client sends.
        let mut in_window = 0u64;
        if spec.direction.client_sends() {
            let at_end = end.server.unwrap_or(server_final).bytes_received;
            in_window += at_end.saturating_sub(server_warm.bytes_received);
        }
        if spec.direction.client_receives() {
            in_window += end
                .local
                .bytes_received
                .saturating_sub(warm.local.bytes_received);
        }
        res.window_bytes = Some(in_window);
        for (rw, rf, sw, sf) in sides {
            let bytes = rf.bytes_received.saturating_sub(rw.bytes_received);
            let msgs = rf.messages_received.saturating_sub(rw.messages_received);
            let elapsed = if rf.t_last_byte_ns > rw.t_ns {
                secs(rf.t_last_byte_ns - rw.t_ns)
            } else {
                spec.common.duration
            };
            res.bytes += bytes;
            res.messages += msgs;
            res.bits_per_second += bytes as f64 * 8.0 / elapsed;
            res.duration_s = res.duration_s.max(elapsed);
            res.receiver.bytes += bytes;
            res.receiver.messages += msgs;
            let s_msgs = sf.messages_sent.saturating_sub(sw.messages_sent);
            res.sender.bytes += sf.bytes_sent.saturating_sub(sw.bytes_sent);
            res.sender.messages += s_msgs;
            sent_msgs += s_msgs;
            lost += s_msgs.saturating_sub(msgs);
        }
        if let Some(total) = spec.bytes {
            if res.receiver.bytes != total {
                return Err(EngineError::Measurement(format!(
                    "the fixed transfer was cut short: {} of {} bytes arrived (check that nothing in the path resets the connection)",
                    res.receiver.bytes, total
                )));
            }
            res.transfer = Some(Transfer {
                bytes: total,
                seconds: res.duration_s,
                kib_per_second: total as f64 / 1024.0 / res.duration_s.max(1e-9),
            });
        }
        if spec.common.protocol == Protocol::Udp {
            if sent_msgs == 0 {
                return Err(EngineError::Measurement(format!(
                    "the UDP stream moved no traffic: no datagram of {} bytes was sent in the measured window (the kernel refused every send; a message larger than the path MTU needs a socket_buffer of about twice its size)",
                    spec.message
                )));
            }
            res.loss = Some(Loss::of(lost, sent_msgs));
        }
        Ok(())
    }
}
