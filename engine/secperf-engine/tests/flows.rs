//! Loopback tests of kind `flows`: the server is the binary (`run` with role
//! server, ended by SIGINT), the client runs in this process.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use secperf_engine::{Record, Spec};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_secperf-engine");

/// A port free for both TCP and UDP on 127.0.0.1 (as the kernel gave it).
fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind("127.0.0.1:0").expect("bind");
        let p = t.local_addr().expect("addr").port();
        if UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

struct FlowsServer {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl FlowsServer {
    /// Starts the server and waits (with a deadline) for its `start` record.
    fn start(spec: Value) -> FlowsServer {
        let mut child = Command::new(BIN)
            .args(["run", "--spec", &spec.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the flows server");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
                let v: Value = serde_json::from_str(&l).expect("a record is JSON");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the server writes a record");
        assert_eq!(first["type"], "start", "{}", first);
        FlowsServer { child, lines }
    }

    /// SIGINT, then its `result` record (within a deadline).
    fn stop(mut self) -> Value {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(v) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if v["type"] == "result" {
                let st = self.child.wait().expect("wait");
                assert!(st.success(), "{:?}", st);
                return v;
            }
        }
        let _ = self.child.kill();
        panic!("the flows server wrote no result after SIGINT");
    }
}

/// Runs a client spec in this process: (result or error, records).
fn client(spec: Value) -> (Result<Value, String>, Vec<Value>) {
    let spec = Spec::from_value(spec).expect("a valid client spec");
    let mut records: Vec<Record> = Vec::new();
    let r = secperf_engine::run(spec, false, Instant::now(), &mut records);
    let values: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_str(&r.to_line()).expect("JSON"))
        .collect();
    let res = values.iter().find(|v| v["type"] == "result").cloned();
    match r {
        Ok(()) => (Ok(res.expect("a result record")), values),
        Err(e) => (Err(e.to_string()), values),
    }
}

fn flow<'a>(res: &'a Value, name: &str) -> &'a Value {
    res["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .find(|f| f["name"] == name)
        .expect("the flow is in the result")
}

fn n(v: &Value) -> u64 {
    v.as_u64().expect("a count")
}

#[test]
fn weights_are_honoured_within_one_percent() {
    let (pt, pu) = (free_port(), free_port());
    let server = FlowsServer::start(json!({
        "kind": "flows", "role": "server", "duration": 1, "warmup": 0.2, "parallel": 8,
        "allow": ["127.0.0.1"],
        "flows": [
            {"id": 0, "name": "web", "protocol": "tcp", "listen": "127.0.0.1", "port": pt, "request": 64, "response": 200},
            {"id": 1, "name": "api", "protocol": "tcp", "listen": "127.0.0.1", "port": pt, "request": 16, "response": 8},
            {"id": 2, "name": "dns", "protocol": "udp", "listen": "127.0.0.1", "port": pu, "request": 40, "response": 90},
        ],
    }));
    let weights = [("web", 5.0), ("api", 3.0), ("dns", 2.0)];
    let (res, records) = client(json!({
        "kind": "flows", "duration": 1, "warmup": 0.2, "interval": 0.5, "parallel": 4,
        "flows": [
            {"id": 0, "name": "web", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pt, "request": 64, "response": 200, "weight": 5},
            {"id": 1, "name": "api", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pt, "request": 16, "response": 8, "weight": 3},
            {"id": 2, "name": "dns", "protocol": "udp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pu, "request": 40, "response": 90, "weight": 2},
        ],
    }));
    let srv = server.stop();
    let res = res.expect("the test ran");
    let attempts = n(&res["attempts"]);
    assert!(attempts >= 200, "too few attempts to judge shares: {}", res);
    assert_eq!(n(&res["failed"]), 0, "{}", res);
    for (name, w) in weights {
        let f = flow(&res, name);
        let want = w / 10.0;
        let share = f["share"].as_f64().expect("share");
        assert!((f["weight_share"].as_f64().unwrap() - want).abs() < 1e-9);
        // Within 1 % of its weight's share, and within a few attempts of exact
        // (the attempts under way when the window opens and closes).
        assert!(
            (share - want).abs() <= 0.01 * want,
            "{}: {} vs {}",
            name,
            share,
            want
        );
        let exact = want * attempts as f64;
        assert!(
            (n(&f["attempts"]) as f64 - exact).abs() <= 4.0 + 2.0,
            "{}: {} attempts, {} expected",
            name,
            f["attempts"],
            exact
        );
        assert_eq!(f["ok"], f["attempts"]);
        assert!(f["connect_us"]["p50"].as_f64().is_some() || name == "dns");
    }
    // Bytes: each success is its request and response.
    let web = flow(&res, "web");
    assert_eq!(n(&web["bytes"]), n(&web["ok"]) * 264);
    // Interval records, warm-up first, and the server answered every attempt.
    let intervals: Vec<&Value> = records.iter().filter(|v| v["type"] == "interval").collect();
    assert!(intervals.len() >= 3, "{:?}", intervals);
    assert_eq!(intervals[0]["warmup"], true);
    assert!(n(&srv["answered"]) >= n(&res["totals"]["client"]["ok"]));
    assert_eq!(n(&srv["refused_sources"]), 0);
}

#[test]
fn a_flow_to_a_closed_port_counts_failures_without_failing() {
    let (pt, closed_t, closed_u) = (free_port(), free_port(), free_port());
    let server = FlowsServer::start(json!({
        "kind": "flows", "role": "server", "duration": 0.6, "warmup": 0, "parallel": 4,
        "allow": ["127.0.0.1"],
        "flows": [{"name": "ok", "protocol": "tcp", "listen": "127.0.0.1", "port": pt}],
    }));
    let (res, _) = client(json!({
        "kind": "flows", "duration": 0.6, "warmup": 0, "interval": 0, "parallel": 2, "timeout": 0.3,
        "flows": [
            {"name": "ok", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pt},
            {"name": "shut", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": closed_t},
            {"name": "shut-udp", "protocol": "udp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": closed_u, "rate": 5},
        ],
    }));
    server.stop();
    let res = res.expect("failures are counted, not fatal");
    let (ok, shut, udp) = (flow(&res, "ok"), flow(&res, "shut"), flow(&res, "shut-udp"));
    assert!(n(&ok["ok"]) > 0, "{}", res);
    assert_eq!(n(&shut["ok"]), 0);
    assert!(n(&shut["failures"]["refused"]) > 0, "{}", shut);
    assert_eq!(shut["failed"], shut["attempts"]);
    // The probe on its own rate: 5/s for 0.6 s, outside the weighted shares.
    assert!((2..=4).contains(&n(&udp["attempts"])), "{}", udp);
    assert_eq!(n(&udp["ok"]), 0);
    assert!(udp["share"].is_null());
    assert_eq!(n(&res["failed"]), n(&shut["failed"]) + n(&udp["failed"]));
}

#[test]
fn an_undeclared_source_gets_no_answer() {
    let (pt, pu) = (free_port(), free_port());
    // The server answers 127.0.0.2 only.
    let server = FlowsServer::start(json!({
        "kind": "flows", "role": "server", "duration": 0.6, "warmup": 0, "parallel": 4,
        "allow": ["127.0.0.2"],
        "flows": [
            {"name": "t", "protocol": "tcp", "listen": "127.0.0.1", "port": pt},
            {"name": "u", "protocol": "udp", "listen": "127.0.0.1", "port": pu, "request": 8, "response": 512},
        ],
    }));
    let (res, _) = client(json!({
        "kind": "flows", "duration": 0.6, "warmup": 0, "interval": 0, "parallel": 2, "timeout": 0.2,
        "flows": [
            {"name": "u-stranger", "protocol": "udp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pu, "request": 8, "response": 512},
            {"name": "t-stranger", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pt},
            {"name": "u-declared", "protocol": "udp", "src": "127.0.0.2", "dst": "127.0.0.1", "dport": pu, "request": 8, "response": 512},
        ],
    }));
    let srv = server.stop();
    let res = res.expect("the test ran");
    let stranger = flow(&res, "u-stranger");
    assert!(n(&stranger["attempts"]) > 0);
    assert_eq!(n(&stranger["ok"]), 0, "{}", stranger);
    assert_eq!(stranger["failures"]["timeout"], stranger["attempts"]);
    let t = flow(&res, "t-stranger");
    assert_eq!(n(&t["ok"]), 0, "{}", t);
    assert!(n(&flow(&res, "u-declared")["ok"]) > 0, "{}", res);
    assert!(n(&srv["refused_sources"]) > 0, "{}", srv);
    let udp = srv["listens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["protocol"] == "udp")
        .unwrap();
    // Every datagram answered came from the declared source.
    assert_eq!(
        n(&udp["answered"]),
        n(&flow(&res, "u-declared")["ok"]),
        "{}",
        srv
    );
}

#[test]
fn the_guard_and_the_spec_refuse_what_they_should() {
    let bad = |v: Value| Spec::from_value(v).map(|_| ()).unwrap_err().to_string();
    let one = json!([{"protocol": "tcp", "listen": "127.0.0.1", "port": 9}]);
    assert!(bad(json!({"kind": "flows", "role": "server", "flows": one})).contains("allow"));
    let both = json!([{"protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": 9, "weight": 1, "rate": 1}]);
    assert!(bad(json!({"kind": "flows", "flows": both})).contains("weight and rate"));
    // Only probes (each on its own rate) is a spec: the weighted loops have nothing to do.
    let probes =
        json!([{"protocol": "udp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": 9, "rate": 2}]);
    assert!(Spec::from_value(json!({"kind": "flows", "flows": probes})).is_ok());
    // An address outside the testbed ranges: refused before any packet.
    for (field, f) in [
        (
            "flows[0].dst",
            json!({"protocol": "udp", "src": "127.0.0.1", "dst": "8.8.8.8", "dport": 53}),
        ),
        (
            "flows[0].src",
            json!({"protocol": "udp", "src": "10.0.0.1", "dst": "127.0.0.1", "dport": 53}),
        ),
    ] {
        let spec =
            Spec::from_value(json!({"kind": "flows", "duration": 0.1, "flows": [f]})).unwrap();
        let mut records: Vec<Record> = Vec::new();
        let e = secperf_engine::run(spec, false, Instant::now(), &mut records).unwrap_err();
        assert_eq!(e.kind(), "target");
        assert_eq!(e.field(), Some(field));
        assert!(records.is_empty());
    }
    let spec = Spec::from_value(
        json!({"kind": "flows", "role": "server", "allow": ["192.0.2.1"], "flows": one}),
    )
    .unwrap();
    let e = secperf_engine::run(spec, false, Instant::now(), &mut Vec::new()).unwrap_err();
    assert_eq!(e.field(), Some("allow[0]"));
}

#[test]
fn an_icmp_flow_is_an_echo_the_kernel_answers() {
    let (res, _) = client(json!({
        "kind": "flows", "duration": 0.3, "warmup": 0, "interval": 0, "parallel": 1, "timeout": 0.3,
        "flows": [
            {"name": "ping", "protocol": "icmp", "src": "127.0.0.1", "dst": "127.0.0.1", "request": 56},
            {"name": "ping6", "protocol": "icmp", "src": "::1", "dst": "::1", "request": 100},
        ],
    }));
    let res = res.expect("the test ran");
    for (name, size) in [("ping", 56), ("ping6", 100)] {
        let f = flow(&res, name);
        assert!(n(&f["ok"]) > 0, "{}", f);
        assert_eq!(f["ok"], f["attempts"]);
        assert_eq!(n(&f["bytes"]), n(&f["ok"]) * 2 * size);
    }
    // No server answers echoes: an icmp flow in a server spec is refused.
    let e = Spec::from_value(
        json!({"kind": "flows", "role": "server", "allow": ["127.0.0.1"],
        "flows": [{"protocol": "icmp", "listen": "127.0.0.1", "port": 1}]}),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(e.to_string().contains("kernel answers"), "{}", e);
}

#[test]
fn the_server_serves_at_most_parallel_connections_at_once() {
    let pt = free_port();
    let server = FlowsServer::start(json!({
        "kind": "flows", "role": "server", "duration": 0.4, "warmup": 0, "parallel": 1,
        "allow": ["127.0.0.1"],
        "flows": [{"name": "one", "protocol": "tcp", "listen": "127.0.0.1", "port": pt}],
    }));
    let (res, _) = client(json!({
        "kind": "flows", "duration": 0.4, "warmup": 0, "interval": 0, "parallel": 4, "timeout": 1,
        "flows": [{"name": "one", "protocol": "tcp", "src": "127.0.0.1", "dst": "127.0.0.1", "dport": pt}],
    }));
    let srv = server.stop();
    let res = res.expect("the test ran");
    // Four loops, one connection served at a time: the others wait in the queue.
    assert_eq!(n(&srv["busy_max"]), 1, "{}", srv);
    assert!(n(&res["ok"]) > 0, "{}", res);
}
