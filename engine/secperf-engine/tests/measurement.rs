//! A test that measured nothing trustworthy ends in an error record, never in
//! a result made of defaults.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, UdpSocket};
use std::thread::JoinHandle;

use serde_json::{json, Value};

/// A server that speaks the control protocol but answers `finish` without
/// the latency report a real server sends (as an older or broken server
/// would). Its data socket only swallows the probes.
fn server_without_latency_report() -> (std::net::SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind control");
    let addr = listener.local_addr().expect("control addr");
    let handle = std::thread::spawn(move || {
        let data = UdpSocket::bind("127.0.0.1:0").expect("bind data");
        let port = data.local_addr().expect("data addr").port();
        let (conn, _) = listener.accept().expect("accept");
        let mut out = conn.try_clone().expect("clone");
        for line in BufReader::new(conn).lines() {
            let Ok(line) = line else { break };
            let req: Value = serde_json::from_str(&line).expect("request is JSON");
            let reply = match req["op"].as_str() {
                Some("setup") => json!({"ok": true, "data_port": port,
                                         "socket": {"sndbuf": 0, "rcvbuf": 0}}),
                Some("snapshot") => json!({"ok": true}),
                // A finish reply with counters but no `latency`.
                Some("finish") => json!({"ok": true}),
                other => panic!("unexpected op {:?}", other),
            };
            let mut text = reply.to_string();
            text.push('\n');
            if out.write_all(text.as_bytes()).is_err() {
                break;
            }
        }
    });
    (addr, handle)
}

#[test]
fn a_missing_server_latency_report_is_an_error_not_full_loss() {
    let (addr, server) = server_without_latency_report();
    let (r, recs) = common::run(
        addr,
        r#"{"kind":"latency","rate_pps":500,"duration":0.3,"warmup":0.1,"interval":0}"#,
    );
    let e = r.expect_err("a latency test without the server's report must fail");
    assert_eq!(e.kind(), "measurement");
    assert!(e.to_string().contains("no latency report"), "{}", e);
    assert!(
        recs.iter().all(|r| r["type"] != "result"),
        "no result record: {:?}",
        recs
    );
    server.join().expect("fake server");
}
