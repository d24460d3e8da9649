//! The target guard covers every address a spec can make the engine send to,
//! and a server holds at most MAX_TESTS control connections at once. (The
//! data sockets' peer check needs addresses no test may send to: it is tested
//! inside an empty network namespace, tests/netns/test_engine_guard.py.)

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::TestServer;
use secperf_engine::{Spec, MAX_TESTS};

fn spec(json: serde_json::Value) -> Spec {
    Spec::from_value(json).expect("a valid spec")
}

#[test]
fn every_address_a_spec_sends_to_is_guarded() {
    for (field, json) in [
        (
            "destinations[1]",
            serde_json::json!({"kind":"latency","server":"127.0.0.1:5201",
                               "destinations":["198.18.2.2","192.0.2.1"]}),
        ),
        (
            "socks",
            serde_json::json!({"kind":"mix","servers":[{"address":"198.18.2.2"}],
                               "clients":[1],"html_files":[1000],"socks":"192.0.2.9:1080"}),
        ),
        (
            "servers[0].address",
            serde_json::json!({"kind":"mix","servers":[{"address":"10.1.1.1"}],
                               "clients":[1],"html_files":[1000]}),
        ),
        (
            "server",
            serde_json::json!({"kind":"rr","server":"8.8.8.8:5201"}),
        ),
    ] {
        let s = spec(json);
        let e = s.check_targets(false).unwrap_err();
        assert_eq!(e.kind(), "target", "{}", field);
        assert_eq!(e.field(), Some(field));
        s.check_targets(true).expect("--allow-any-target allows it");
    }
    let ok = spec(
        serde_json::json!({"kind":"latency","server":"198.18.2.2:5201",
                                     "destinations":["198.18.2.3","127.0.0.1"]}),
    );
    ok.check_targets(false)
        .expect("testbed and loopback destinations pass");
}

#[test]
fn a_flood_outside_the_testbed_has_no_override() {
    let s = spec(
        serde_json::json!({"kind":"flood","flood":"udp","target":"1.1.1.1",
                                    "rate_pps":1000}),
    );
    let e = s.check_targets(true).unwrap_err();
    assert_eq!(e.field(), Some("target"));
    assert!(e.to_string().contains("no override"), "{}", e);
}

#[test]
fn one_test_too_many_is_refused_with_an_error_reply() {
    let srv = TestServer::start("127.0.0.1:0");
    // MAX_TESTS idle control connections hold every slot (each waits for its setup).
    let held: Vec<TcpStream> = (0..MAX_TESTS)
        .map(|_| TcpStream::connect(srv.addr).expect("connect"))
        .collect();
    // The accept loop takes them in order; the next one is refused at once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        let extra = TcpStream::connect(srv.addr).expect("connect");
        extra
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut line = String::new();
        let _ = BufReader::new(&extra).read_line(&mut line);
        if !line.is_empty() {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "the extra connection was never refused"
        );
    };
    let v: serde_json::Value = serde_json::from_str(&refused).expect("a JSON reply");
    assert_eq!(v["ok"], false, "{}", refused);
    assert!(
        v["message"].as_str().unwrap_or("").contains("already runs"),
        "{}",
        refused
    );
    // A slot frees when a connection ends: a test runs again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (r, _) = common::run(
            srv.addr,
            r#"{"kind":"rr","protocol":"tcp","duration":0.3,"warmup":0.1}"#,
        );
        match r {
            Ok(r) => {
                assert!(r.totals.client.bytes_sent > 0);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no slot freed: {}", e),
        }
        std::thread::sleep(Duration::from_millis(50)); // the handlers see EOF and end
    }
}
