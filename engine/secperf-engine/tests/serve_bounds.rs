//! What a server lets in (issue 41): data connections only from the control
//! connection's peer or an address the spec declared, and only as many as the
//! test opens; UDP answered only to them; the server's memory bounded per test
//! and across its tests; a connections test's helper processes clamped. On
//! loopback 127.0.0.2 stands for another host of the testbed: the client
//! sockets bind it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;
use socket2::{Domain, Socket, Type};

const OTHER: &str = "127.0.0.2";

/// A control connection from 127.0.0.1 set up with `spec`: the connection
/// (the test lives while it is open) and the reply.
fn setup(server: SocketAddr, spec: serde_json::Value) -> (TcpStream, serde_json::Value) {
    let mut spec = spec;
    spec["server"] = server.to_string().into();
    let mut c = TcpStream::connect(server).expect("control connect");
    let line = serde_json::json!({"op": "setup", "spec": spec}).to_string() + "\n";
    c.write_all(line.as_bytes()).expect("send setup");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    BufReader::new(&c)
        .read_line(&mut reply)
        .expect("setup reply");
    let v: serde_json::Value = serde_json::from_str(&reply).expect("a JSON reply");
    (c, v)
}

fn data_addr(server: SocketAddr, reply: &serde_json::Value) -> SocketAddr {
    assert_eq!(reply["ok"], true, "{}", reply);
    let port = reply["data_port"].as_u64().expect("data_port") as u16;
    SocketAddr::new(server.ip(), port)
}

/// A TCP connection to `to` from `from` (an address of this host); Err if
/// the server reset it before the connect returned.
fn try_connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{}:0", from).parse().unwrap();
    s.bind(&local.into()).expect("bind the client socket");
    s.connect_timeout(&to.into(), Duration::from_secs(2))?;
    Ok(s.into())
}

/// A connection the test expects to be let in.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    try_connect_from(from, to).expect("connect")
}

/// Whether a connection the server may refuse was closed at once: reset
/// before the connect returned, or closed within `within`.
fn refused(from: &str, to: SocketAddr, first: &[u8], within: Duration) -> bool {
    match try_connect_from(from, to) {
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(mut s) => {
            let _ = s.write_all(first);
            closed(&mut s, within)
        }
    }
}

/// Sends one request byte and says whether a response byte came back within
/// `within`: false if the server closed the connection (EOF or RST) or said
/// nothing.
fn answered(s: &mut TcpStream, within: Duration) -> bool {
    let _ = s.write_all(b"q");
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(1))
}

/// Whether the server closed `s` (EOF or RST) within `within`.
fn closed(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
        ),
    }
}

fn rr_tcp() -> serde_json::Value {
    serde_json::json!({"kind":"rr","protocol":"tcp","duration":5,"warmup":0})
}

#[test]
fn the_second_data_connection_of_a_one_connection_test_is_closed() {
    let srv = TestServer::start("127.0.0.1:0");
    let (_ctl, reply) = setup(srv.addr, rr_tcp());
    let data = data_addr(srv.addr, &reply);
    let mut first = connect_from("127.0.0.1", data);
    assert!(
        answered(&mut first, Duration::from_secs(2)),
        "the test's connection is served"
    );
    assert!(
        refused("127.0.0.1", data, b"q", Duration::from_secs(2)),
        "a second connection of an rr test (it opens one) was not closed"
    );
    assert!(answered(&mut first, Duration::from_secs(2)), "still served");
}

#[test]
fn a_data_connection_from_another_address_than_the_control_peer_is_refused_unless_declared() {
    let srv = TestServer::start("127.0.0.1:0");
    let (_ctl, reply) = setup(srv.addr, rr_tcp());
    let data = data_addr(srv.addr, &reply);
    assert!(
        refused(OTHER, data, b"q", Duration::from_secs(2)),
        "a connection from {} was not closed",
        OTHER
    );
    // The test's own connection, opened after, is still its one.
    let mut mine = connect_from("127.0.0.1", data);
    assert!(answered(&mut mine, Duration::from_secs(2)));
    // The same address declared as a spec's `bind` is served.
    let (r, _) = common::run(
        srv.addr,
        &format!(
            r#"{{"kind":"rr","protocol":"tcp","duration":0.3,"warmup":0.1,"bind":"{}"}}"#,
            OTHER
        ),
    );
    let r = r.expect("an rr test whose data comes from its bind address runs");
    assert!(r.transactions > 0);
    let (r, _) = common::run(
        srv.addr,
        &format!(
            r#"{{"kind":"rr","protocol":"udp","duration":0.3,"warmup":0.1,"bind":"{}"}}"#,
            OTHER
        ),
    );
    assert!(r.expect("and over UDP").transactions > 0);
}

#[test]
fn ten_connections_beyond_the_tests_count_are_refused() {
    let srv = TestServer::start("127.0.0.1:0");
    // A stream of two connections (parallel 1, both directions).
    let spec = serde_json::json!({"kind":"stream","direction":"both","parallel":1,
                                  "duration":5,"warmup":0,"message":1024});
    let (_ctl, reply) = setup(srv.addr, spec);
    let data = data_addr(srv.addr, &reply);
    let mut mine: Vec<TcpStream> = (0..2).map(|_| connect_from("127.0.0.1", data)).collect();
    mine[0].write_all(b"S").unwrap();
    mine[1].write_all(b"R").unwrap();
    for i in 0..10 {
        // Asking to be sent to would start a sender on any connection let in.
        assert!(
            refused("127.0.0.1", data, b"R", Duration::from_secs(2)),
            "connection {} beyond the test's 2 was not closed",
            i + 3
        );
    }
    // The test's receive stream still flows.
    let mut b = [0u8; 1024];
    mine[1]
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert!(matches!(mine[1].read(&mut b), Ok(n) if n > 0));
}

#[test]
fn a_udp_request_from_an_undeclared_source_gets_no_byte() {
    let srv = TestServer::start("127.0.0.1:0");
    let spec = serde_json::json!({"kind":"rr","protocol":"udp","request":1,"response":1000,
                                  "duration":5,"warmup":0});
    let (_ctl, reply) = setup(srv.addr, spec);
    let data = data_addr(srv.addr, &reply);
    let got = |from: &str| -> usize {
        let s = UdpSocket::bind((from, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut n = 0;
        let mut buf = [0u8; 2048];
        for _ in 0..5 {
            s.send_to(b"x", data).unwrap();
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if let Ok(k) = s.recv(&mut buf) {
                n += k;
            }
        }
        n
    };
    assert_eq!(got(OTHER), 0, "a datagram from {} was answered", OTHER);
    assert!(got("127.0.0.1") >= 1000, "the control peer is answered");
}

#[test]
fn a_connections_test_closes_a_connection_from_another_source() {
    let srv = TestServer::start("127.0.0.1:0");
    let spec = serde_json::json!({"kind":"connections","connections":2,"hold":5,"duration":5});
    let (_ctl, reply) = setup(srv.addr, spec);
    let data = data_addr(srv.addr, &reply);
    assert!(refused(OTHER, data, b"V", Duration::from_secs(2)));
    let mut mine = connect_from("127.0.0.1", data);
    mine.write_all(b"V").unwrap();
    mine.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(mine.read(&mut b), Ok(1)) && b[0] == b'v');
}

#[test]
fn declared_peers_are_served_and_must_lie_in_the_testbed() {
    let srv = TestServer::start("127.0.0.1:0");
    // What a NAT between the hosts would make of the client's sources.
    let spec = serde_json::json!({"kind":"connections","connections":2,"hold":5,"duration":5,
                                  "peers":["127.0.0.2/31"]});
    let (_ctl, reply) = setup(srv.addr, spec);
    let data = data_addr(srv.addr, &reply);
    let mut translated = connect_from(OTHER, data);
    translated.write_all(b"V").unwrap();
    translated
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(translated.read(&mut b), Ok(1)) && b[0] == b'v');
    // A declared source is one the server answers: outside the testbed it is refused.
    let spec = serde_json::json!({"kind":"latency","duration":1,"peers":["192.0.2.0/24"]});
    let (_ctl, reply) = setup(srv.addr, spec);
    assert_eq!(reply["ok"], false, "{}", reply);
    assert_eq!(reply["kind"], "target", "{}", reply);
    assert_eq!(reply["field"], "peers[0]", "{}", reply);
}

#[test]
fn a_spec_past_the_per_test_memory_cap_is_refused_at_spec_time() {
    let e = secperf_engine::Spec::parse(
        r#"{"kind":"stream","server":"127.0.0.1:5201","parallel":128,"message":67108864}"#,
    )
    .unwrap_err();
    assert_eq!(e.kind(), "spec");
    assert_eq!(e.field(), Some("message"));
    assert!(e.to_string().contains("1 GiB"), "{}", e);
    let e = secperf_engine::Spec::parse(
        r#"{"kind":"crr","server":"127.0.0.1:5201","parallel":64,"request":67108864,"response":67108864}"#,
    );
    assert!(
        e.is_ok(),
        "a crr server reads requests through a bounded scratch"
    );
    // The largest response alone passes.
    secperf_engine::Spec::parse(
        r#"{"kind":"rr","server":"127.0.0.1:5201","request":67108864,"response":67108864}"#,
    )
    .expect("one 64 MiB request and response");
}

#[test]
fn a_connections_spec_needing_too_many_helpers_is_refused() {
    let e = secperf_engine::Spec::parse(
        r#"{"kind":"connections","server":"127.0.0.1:5201","connections":1000000,"per_process":100}"#,
    )
    .unwrap_err();
    assert_eq!(e.kind(), "spec");
    assert_eq!(e.field(), Some("per_process"));
    assert!(
        e.to_string().contains("64"),
        "the message names the limit: {}",
        e
    );
    secperf_engine::Spec::parse(
        r#"{"kind":"connections","server":"127.0.0.1:5201","connections":1000000,"per_process":20000}"#,
    )
    .expect("49 helpers pass");
}

#[test]
fn the_servers_tests_together_hold_at_most_its_total() {
    let srv = TestServer::start("127.0.0.1:0");
    // 12 receiving streams of 64 MiB messages: 768 MiB each, under the per-test cap.
    let big = serde_json::json!({"kind":"stream","parallel":12,"message":67108864,
                                 "duration":5,"warmup":0});
    let (first, r1) = setup(srv.addr, big.clone());
    assert_eq!(r1["ok"], true, "{}", r1);
    let (_second, r2) = setup(srv.addr, big.clone());
    assert_eq!(r2["ok"], true, "{}", r2);
    let (_third, r3) = setup(srv.addr, big.clone());
    assert_eq!(r3["ok"], false, "a third 768 MiB test fit: {}", r3);
    assert_eq!(r3["kind"], "server", "{}", r3);
    assert!(
        r3["message"].as_str().unwrap_or("").contains("2 GiB"),
        "{}",
        r3
    );
    // A test that ends gives its share back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_c, r) = setup(srv.addr, big.clone());
        if r["ok"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "no share came back: {}", r);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// VmRSS of process `pid` in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid)).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_servers_memory_stays_bounded_under_a_burst_of_connects_to_a_64_mib_response() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_secperf-engine"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start serve");
    let out = child.stdout.take().unwrap();
    let served = Served(child);
    let pid = served.0.id();
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    let listening: serde_json::Value = serde_json::from_str(&line).expect("listening");
    let server: SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
    let spec = serde_json::json!({"kind":"rr","protocol":"tcp","response":67108864,
                                  "duration":10,"warmup":0});
    let (_ctl, reply) = setup(server, spec);
    let data = data_addr(server, &reply);
    // The test's one response is made at setup.
    std::thread::sleep(Duration::from_millis(500));
    let before = rss(pid);
    // A burst of connects, each asking for a response.
    let mut burst = Vec::new();
    for _ in 0..12 {
        // The guard may reset one before its connect returns.
        if let Ok(mut s) = try_connect_from("127.0.0.1", data) {
            let _ = s.write_all(b"q");
            burst.push(s);
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = rss(pid);
    let grown = after.saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the server grew by {} MiB under 12 connects to a 64 MiB-response test ({} → {} MiB)",
        grown >> 20,
        before >> 20,
        after >> 20
    );
}
