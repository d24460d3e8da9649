//! Loopback tests of kinds `http` (against a tiny in-test HTTP responder),
//! `connections`, crr's `rate`/`timeout`, and `mix` with many virtual clients.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::TestServer;
use secperf_engine::spec::{CrrSpec, HttpSpec};
use secperf_engine::{Record, Spec};
use serde_json::Value;

/// Serves /ok (1000 bytes), /missing (404), /short (claims 1000, sends 500
/// and closes); honours Connection: keep-alive. Its listen queue holds a
/// thousand connections: std's 128 overflowed under the mix's thousand
/// clients (SYN cookies, dropped ACKs) and, once in a CI run, reset one.
fn http_responder() -> SocketAddr {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("responder socket");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    s.bind(&any.into()).expect("bind responder");
    s.listen(1024).expect("listen");
    let l: TcpListener = s.into();
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve_http(s));
        }
    });
    addr
}

fn serve_http(mut s: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let keep = head.to_ascii_lowercase().contains("connection: keep-alive");
        let conn = if keep { "keep-alive" } else { "close" };
        // /files/N.bin: N bytes (the mix's files).
        let file = path
            .strip_prefix("/files/")
            .and_then(|p| p.strip_suffix(".bin"))
            .and_then(|n| n.parse::<usize>().ok());
        let (status, claimed, body) = match (path.as_str(), file) {
            (_, Some(n)) => ("200 OK", n, vec![b'f'; n]),
            ("/ok", _) => ("200 OK", 1000, vec![b'x'; 1000]),
            ("/short", _) => ("200 OK", 1000, vec![b'x'; 500]),
            _ => ("404 Not Found", 4, b"nope".to_vec()),
        };
        let head = format!(
            "HTTP/1.1 {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            status, claimed, conn
        );
        if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
            return;
        }
        if !keep || path == "/short" {
            return; // close: the client sees EOF (short body: mid-body)
        }
    }
}

fn run(server: SocketAddr, spec_json: &str) -> Value {
    run_all(server, spec_json).pop().expect("records")
}

/// Every record of a run (start, intervals, result), checked as `run` does.
fn run_all(server: SocketAddr, spec_json: &str) -> Vec<Value> {
    let mut v: Value = serde_json::from_str(spec_json).expect("spec JSON");
    v["server"] = Value::String(server.to_string());
    let spec = Spec::from_value(v).expect("valid spec");
    let mut records: Vec<Record> = Vec::new();
    if let Err(e) = secperf_engine::run(spec, false, Instant::now(), &mut records) {
        panic!("test failed: {} ({})", e, e.kind());
    }
    let values: Vec<Value> = records
        .iter()
        .map(|r| serde_json::from_str(&r.to_line()).expect("record is JSON"))
        .collect();
    assert_eq!(values.first().unwrap()["type"], "start");
    let last = values.last().unwrap();
    assert_eq!(last["type"], "result", "{:?}", last);
    values
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {:?}", v))
}

#[test]
fn http_rate_gives_exact_fetch_and_byte_counts() {
    let addr = http_responder();
    let r = run(
        addr,
        r#"{"kind":"http","urls":["/ok"],"rate":50,"parallel":4,"duration":1,"warmup":0.2,"interval":0}"#,
    );
    assert_eq!(u(&r["fetches"]), 50, "{}", r);
    assert_eq!(u(&r["bytes"]), 50_000);
    assert_eq!(u(&r["failed"]), 0);
    assert_eq!(u(&r["connections"]), 50, "one connection per fetch");
    // warm-up fetches are in the totals, not in the window
    assert_eq!(u(&r["totals"]["client"]["fetches"]), 60);
    assert!(r["latency_us"]["total"]["p50"].as_f64().unwrap() > 0.0);
    assert!(r["latency_us"]["connect"]["count"].as_u64().unwrap() == 50);
}

#[test]
fn http_with_a_busy_poll_counts_every_fetch_on_one_connection_and_on_several() {
    // With busy_poll_us even one connection runs on the epoll set (non-blocking).
    let addr = http_responder();
    for parallel in [1, 3] {
        let r = run(
            addr,
            &format!(
                r#"{{"kind":"http","urls":["/ok"],"rate":40,"parallel":{},"keepalive":{},"busy_poll_us":50,"duration":1,"warmup":0.2,"interval":0}}"#,
                parallel,
                parallel == 1
            ),
        );
        assert_eq!(u(&r["fetches"]), 40, "{}", r);
        assert_eq!(u(&r["bytes"]), 40_000);
        assert_eq!(u(&r["failed"]), 0);
        assert_eq!(u(&r["totals"]["client"]["fetches"]), 48);
    }
}

#[test]
fn http_interval_records_count_each_fetch_once_and_the_open_connections() {
    let addr = http_responder();
    // 40 fetches a second, kept alive on 3 connections (each carries ~20 a second:
    // the responder's two writes meet the client's delayed ACK): 0.25 s of warm-up
    // in one interval, then four of 0.25 s each.
    let all = run_all(
        addr,
        r#"{"kind":"http","urls":["/ok"],"rate":40,"parallel":3,"keepalive":true,"duration":1,"warmup":0.25,"interval":0.25}"#,
    );
    let iv: Vec<&Value> = all.iter().filter(|r| r["type"] == "interval").collect();
    assert_eq!(iv.len(), 5, "{:?}", iv);
    assert_eq!(iv[0]["warmup"], true);
    assert!(iv[1..].iter().all(|r| r["warmup"] == false));
    let ends: Vec<f64> = iv.iter().map(|r| r["t_end"].as_f64().unwrap()).collect();
    assert_eq!(ends, vec![0.25, 0.5, 0.75, 1.0, 1.25]);
    let result = all.last().unwrap();
    // every fetch that ended in the window is in one interval (by the time it
    // ended); those still under way at its end (at most one a connection) in none
    let total: u64 = iv.iter().map(|r| u(&r["fetches"])).sum();
    let all_fetches = u(&result["totals"]["client"]["fetches"]);
    assert!(
        total <= all_fetches && total + 3 >= all_fetches,
        "{} of {}: {:?}",
        total,
        all_fetches,
        iv
    );
    for r in &iv[1..] {
        let n = u(&r["fetches"]);
        assert!((7..=13).contains(&n), "about 10 a period: {}", r);
        assert_eq!(u(&r["bytes"]), n * 1000);
        assert_eq!(r["rate"].as_f64().unwrap(), n as f64 / 0.25);
        // the connections stay open through the window: 3, kept alive
        let open = r["open"].as_f64().unwrap();
        assert!((2.5..=3.0).contains(&open), "{}", r);
    }
}

#[test]
fn http_counts_bad_status_and_short_body() {
    let addr = http_responder();
    let r = run(
        addr,
        r#"{"kind":"http","urls":["/ok","/missing","/short"],"rate":30,"parallel":3,"duration":1,"warmup":0,"interval":0,"timeout":2}"#,
    );
    assert_eq!(u(&r["started"]), 30, "{}", r);
    assert_eq!(u(&r["fetches"]), 10);
    assert_eq!(u(&r["errors"]["bad_status"]), 10);
    assert_eq!(u(&r["errors"]["short_body"]), 10);
    assert_eq!(u(&r["failed"]), 20);
    assert_eq!(u(&r["bytes"]), 10_000);
}

#[test]
fn http_parallel_keepalive_reuses_connections() {
    let addr = http_responder();
    let r = run(
        addr,
        r#"{"kind":"http","urls":["/ok"],"parallel":2,"keepalive":true,"duration":0.5,"warmup":0,"interval":0}"#,
    );
    let fetches = u(&r["fetches"]);
    assert!(fetches > 20, "{}", r);
    assert!(u(&r["connections"]) <= 4, "{}", r);
    assert_eq!(u(&r["bytes"]), fetches * 1000);
    assert_eq!(u(&r["failed"]), 0);
}

#[test]
fn http_refused_connections_are_counted() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l); // nothing listens there now
    let r = run(
        addr,
        r#"{"kind":"http","rate":20,"duration":0.5,"warmup":0,"interval":0}"#,
    );
    assert_eq!(u(&r["started"]), 10);
    assert_eq!(u(&r["errors"]["connect_refused"]), 10, "{}", r);
    assert_eq!(u(&r["fetches"]), 0);
}

#[test]
fn connections_held_validated_and_torn_down() {
    let srv = TestServer::start("127.0.0.1:0");
    let r = run(
        srv.addr,
        r#"{"kind":"connections","connections":300,"hold":0.2,"duration":10}"#,
    );
    assert_eq!(u(&r["established"]), 300, "{}", r);
    assert_eq!(u(&r["validated"]), 300);
    assert_eq!(u(&r["server"]["accepted"]), 300);
    assert_eq!(u(&r["server"]["validated"]), 300);
    assert_eq!(u(&r["server"]["held"]), 300, "{}", r);
    assert_eq!(u(&r["failed"]), 0);
    assert!(r["first_failure_at"].is_null());
    assert_eq!(u(&r["teardown"]["fins"]), 300);
    assert_eq!(u(&r["teardown"]["missing"]), 0);
    assert!(r["teardown_rate"].as_f64().unwrap() > 0.0);
    assert!(u(&r["nofile"]) >= 1024);
}

#[test]
fn connections_open_and_close_rates_are_paced() {
    let srv = TestServer::start("127.0.0.1:0");
    let r = run(
        srv.addr,
        r#"{"kind":"connections","connections":200,"rate":400,"close_rate":400,"hold":0,"duration":10}"#,
    );
    assert_eq!(u(&r["established"]), 200, "{}", r);
    let open = r["open_rate"].as_f64().unwrap();
    assert!((open - 400.0).abs() / 400.0 < 0.1, "open rate {}", open);
    let tear = r["teardown_rate"].as_f64().unwrap();
    // seen by the server: a loaded machine may bunch FINs, so a wide band
    assert!((tear - 400.0).abs() / 400.0 < 0.3, "teardown rate {}", tear);
    assert_eq!(u(&r["teardown"]["fins"]), 200);
}

#[test]
fn crr_rate_is_held_and_failures_counted() {
    let srv = TestServer::start("127.0.0.1:0");
    let mut v: Value = serde_json::from_str(
        r#"{"kind":"crr","rate":200,"parallel":2,"timeout":1,"duration":1,"warmup":0.2,"interval":0}"#,
    )
    .unwrap();
    v["server"] = Value::String(srv.addr.to_string());
    let spec = Spec::from_value(v).unwrap();
    let mut recs: Vec<Record> = Vec::new();
    secperf_engine::run(spec, false, Instant::now(), &mut recs).expect("crr runs");
    let r = common::result_of(&recs).expect("a result record");
    let tx = r.transactions as f64;
    assert!((tx - 200.0).abs() <= 10.0, "transactions {}", tx);
    let loss = r.loss.expect("crr with a rate reports failures");
    assert_eq!(loss.lost, 0);
    assert_eq!(r.totals.client.connections, r.totals.server.connections);
}

#[test]
fn http_many_connections_on_few_threads_count_every_fetch() {
    let addr = http_responder();
    for keepalive in [false, true] {
        let r = run(
            addr,
            &format!(
                r#"{{"kind":"http","urls":["/ok"],"rate":1500,"parallel":300,"threads":2,"keepalive":{},"duration":1,"warmup":0.2,"interval":0,"timeout":5}}"#,
                keepalive
            ),
        );
        assert_eq!(u(&r["fetches"]), 1500, "keepalive {}: {}", keepalive, r);
        assert_eq!(u(&r["failed"]), 0, "{}", r);
        assert_eq!(u(&r["bytes"]), 1_500_000);
        assert_eq!(u(&r["totals"]["client"]["fetches"]), 1800);
        assert_eq!(
            r["spec"].get("threads"),
            None,
            "the spec is in start, not result"
        );
    }
}

/// `http_responder`'s service, counting each connection's peer address.
fn counting_http_responder() -> (SocketAddr, Arc<Mutex<HashMap<IpAddr, usize>>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind responder");
    let addr = l.local_addr().expect("addr");
    let peers = Arc::new(Mutex::new(HashMap::new()));
    let seen = peers.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            if let Ok(p) = s.peer_addr() {
                *seen.lock().unwrap().entry(p.ip()).or_insert(0) += 1;
            }
            std::thread::spawn(move || serve_http(s));
        }
    });
    (addr, peers)
}

#[test]
fn http_connections_spread_over_their_sources_and_open_in_the_ramp_up() {
    let (addr, peers) = counting_http_responder();
    // 300 kept-alive connections at 300 fetches/s, the first 300 fetches (the
    // connections' opens) spread over a 0.9 s ramp-up: 330 fetches due before the
    // 1 s warm-up ends (k / 300 would give 300), 450 in the 1.5 s window.
    let r = run(
        addr,
        r#"{"kind":"http","urls":["/ok"],"rate":300,"parallel":300,"keepalive":true,
            "ramp_up":0.9,"duration":1.5,"warmup":1.0,"interval":0,"timeout":5,
            "sources":["127.0.0.2","127.0.0.3","127.0.0.4"]}"#,
    );
    assert_eq!(u(&r["failed"]), 0, "{}", r);
    assert_eq!(u(&r["fetches"]), 450, "{}", r);
    assert_eq!(u(&r["totals"]["client"]["fetches"]), 780, "{}", r);
    assert_eq!(u(&r["totals"]["client"]["connections"]), 300, "{}", r);
    assert_eq!(u(&r["connections"]), 0, "all opened in the ramp-up: {}", r);
    let per = peers.lock().unwrap().clone();
    for s in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        assert_eq!(
            per.get(&s.parse::<IpAddr>().unwrap()),
            Some(&100),
            "{:?}",
            per
        );
    }
}

#[test]
fn connections_spread_over_their_sources() {
    let srv = TestServer::start("127.0.0.1:0");
    let sources = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let spec = format!(
        r#"{{"kind":"connections","connections":300,"hold":1.5,"duration":10,"sources":{}}}"#,
        serde_json::to_string(&sources).unwrap()
    );
    let addr = srv.addr;
    let t = std::thread::spawn(move || run(addr, &spec));
    // While they are held: established connections from each source to the server.
    let port_hex = |a: &str| a.rsplit(':').next().unwrap().to_string();
    let mut per: Vec<usize> = vec![0; sources.len()];
    let deadline = Instant::now() + std::time::Duration::from_secs(8);
    while per.iter().sum::<usize>() < 300 && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
        per = sources
            .iter()
            .map(|s| {
                let ip: std::net::Ipv4Addr = s.parse().unwrap();
                let want = format!("{:08X}", u32::from_le_bytes(ip.octets()));
                text.lines()
                    .skip(1)
                    .map(|l| l.split_whitespace().collect::<Vec<&str>>())
                    .filter(|f| f.len() > 3 && f[3] == "01" && f[1].starts_with(&want))
                    .filter(|f| port_hex(f[2]) != "0000")
                    .count()
            })
            .collect();
    }
    let r = t.join().unwrap();
    assert_eq!(u(&r["established"]), 300, "{}", r);
    assert_eq!(u(&r["validated"]), 300);
    assert_eq!(u(&r["sources"]), 3);
    assert_eq!(r["stopped_by"], "target");
    assert_eq!(r["limit_found"], false);
    assert_eq!(per, vec![100, 100, 100], "round-robin over the sources");
    // The engine's own memory per held connection is small and stated.
    let per_conn = r["memory"]["client_bytes_per_connection"].as_f64().unwrap();
    assert!(per_conn < 4096.0, "{} bytes per connection", per_conn);
}

#[test]
fn mix_with_a_thousand_virtual_clients_accounts_for_every_fetch() {
    let addr = http_responder();
    let spec = format!(
        r#"{{"kind":"mix","servers":[{{"address":"127.0.0.1","hit":1,"http_share":1}}],"http_port":{},"clients":{},"requests":3,"html_files":[1024,2048],"gif_files":[512],"timeout":10,"threads":2}}"#,
        addr.port(),
        serde_json::to_string(&(0..1000).collect::<Vec<u64>>()).unwrap()
    );
    let spec = Spec::parse(&spec).expect("a mix spec");
    let mut records: Vec<Record> = Vec::new();
    secperf_engine::run(spec, false, Instant::now(), &mut records).expect("the mix runs");
    let r: Value = serde_json::from_str(&records.last().unwrap().to_line()).unwrap();
    assert_eq!(r["type"], "result");
    assert_eq!(u(&r["virtual_clients"]), 1000);
    assert_eq!(u(&r["attempted"]), 3000, "{}", r["failures"]);
    assert_eq!(u(&r["transactions"]), 3000, "{}", r["failures"]);
    let fetches = r["fetches"].as_array().unwrap();
    assert_eq!(fetches.len(), 3000);
    assert!(fetches.iter().all(|f| f[0] == "http" && f[1].is_null()));
    let bytes: u64 = fetches.iter().map(|f| u(&f[2])).sum();
    assert_eq!(u(&r["bytes"]), bytes);
}

#[test]
fn spec_fields_apply_to_their_kinds() {
    let bad = [
        r#"{"kind":"http","server":"127.0.0.1:80","data_port":5300}"#,
        r#"{"kind":"connections","server":"127.0.0.1:5201","warmup":1}"#,
        r#"{"kind":"http","server":"127.0.0.1:80","protocol":"udp"}"#,
        r#"{"kind":"rr","server":"127.0.0.1:5201","rate":0}"#,
        r#"{"kind":"http","server":"127.0.0.1:80","urls":["http://x/"]}"#,
        r#"{"kind":"connections","server":"127.0.0.1:5201","connections":0}"#,
        // beyond one address's ports, without more sources
        r#"{"kind":"http","server":"127.0.0.1:80","parallel":70000}"#,
        // a ramp-up shapes a rate schedule, within the warm-up
        r#"{"kind":"http","server":"127.0.0.1:80","ramp_up":1}"#,
        r#"{"kind":"http","server":"127.0.0.1:80","rate":10,"warmup":1,"ramp_up":2}"#,
        r#"{"kind":"http","server":"127.0.0.1:80","bind":"127.0.0.2","sources":["127.0.0.3"]}"#,
    ];
    for b in bad {
        assert!(Spec::parse(b).is_err(), "accepted {}", b);
    }
    let s = Spec::parse(r#"{"kind":"http","server":"127.0.0.1:80","parallel":500}"#).unwrap();
    let Spec::Http(HttpSpec { timeout, urls, .. }) = s else {
        panic!("an http spec")
    };
    assert_eq!(timeout, Some(5.0));
    assert_eq!(urls, vec!["/".to_string()]);
    let many = r#"{"kind":"http","server":"127.0.0.1:80","parallel":70000,"sources":["127.0.0.2","127.0.0.3"]}"#;
    assert!(Spec::parse(many).is_ok(), "two sources hold 70000");
    let c = Spec::parse(r#"{"kind":"crr","server":"127.0.0.1:5201"}"#).unwrap();
    let Spec::Crr(CrrSpec { timeout, .. }) = c else {
        panic!("a crr spec")
    };
    assert_eq!(timeout, None, "crr keeps failing fast without a timeout");
}
