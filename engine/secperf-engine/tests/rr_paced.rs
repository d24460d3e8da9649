//! Open-loop rr (`rate`): requests on a schedule whatever the replies, over loopback.

mod common;

use common::{ok, TestServer};
use secperf_engine::spec::{RrSpec, Spec};

fn spec(extra: &str) -> String {
    format!(r#"{{"duration":0.6,"warmup":0.2,"interval":0,{}}}"#, extra)
}

fn rr(json: &str) -> RrSpec {
    match Spec::parse(json).expect("a valid spec") {
        Spec::Rr(s) => s,
        other => panic!("not an rr spec: {:?}", other),
    }
}

const S: &str = r#""server":"127.0.0.1:5201""#;

#[test]
fn tcp_paced_rate_is_kept_and_every_request_answered() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, recs) = ok(srv.addr, &spec(r#""kind":"rr","rate":2000"#));
    assert_eq!(recs[0]["spec"]["rate"], 2000.0);
    assert_eq!(
        recs[0]["spec"]["inflight"], 64,
        "open loop: up to 64 outstanding"
    );
    // 2000/s over a 0.6 s window: about 1200, the schedule's, not the path's rate
    let tps = r.transactions_per_second;
    assert!((tps - 2000.0).abs() < 200.0, "tps {}", tps);
    assert_eq!(r.totals.client.transactions, r.totals.server.transactions);
    assert!(r.latency_us.count > 0 && r.latency_us.p50 > 0.0);
}

#[test]
fn tcp_paced_below_the_closed_loop_rate_sends_on_schedule_not_on_replies() {
    let srv = TestServer::start("127.0.0.1:0");
    // Closed loop on loopback runs at tens of thousands a second; 50/s is the schedule.
    let (closed, _) = ok(srv.addr, &spec(r#""kind":"rr""#));
    let (paced, _) = ok(srv.addr, &spec(r#""kind":"rr","rate":50,"inflight":1"#));
    assert!(closed.transactions_per_second > 1000.0);
    assert!(
        (paced.transactions_per_second - 50.0).abs() < 15.0,
        "tps {}",
        paced.transactions_per_second
    );
}

#[test]
fn udp_paced_counts_no_loss_on_loopback() {
    let srv = TestServer::start("127.0.0.1:0");
    let (r, _) = ok(
        srv.addr,
        &spec(r#""kind":"rr","protocol":"udp","rate":1000,"request":8,"response":8"#),
    );
    let tps = r.transactions_per_second;
    assert!((tps - 1000.0).abs() < 150.0, "tps {}", tps);
    assert_eq!(r.loss.unwrap().lost, 0);
    assert!(r.totals.client.transactions <= r.totals.server.transactions);
}

#[test]
fn paced_spec_defaults_and_refusals() {
    let r = rr(&format!(r#"{{"kind":"rr","rate":100,{}}}"#, S));
    assert_eq!((r.rate, r.inflight), (Some(100.0), 64));
    // no buffer limit on the outstanding bytes: the receiver drains them
    let r = rr(&format!(
        r#"{{"kind":"rr","rate":100,"inflight":128,"request":1024,{}}}"#,
        S
    ));
    assert_eq!(r.inflight, 128);
    let e = Spec::parse(&format!(r#"{{"kind":"rr","rate":0,{}}}"#, S)).expect_err("rate 0");
    assert_eq!(e.field(), Some("rate"));
    // one-byte UDP requests carry 256 sequence numbers: no more outstanding than that
    let e = Spec::parse(&format!(
        r#"{{"kind":"rr","protocol":"udp","rate":100,"inflight":300,{}}}"#,
        S
    ))
    .expect_err("too many outstanding for 1-byte sequence numbers");
    assert_eq!(e.field(), Some("inflight"));
    assert!(e.to_string().contains("sequence numbers"), "{}", e);
}
