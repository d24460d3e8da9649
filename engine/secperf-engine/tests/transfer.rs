//! Stream `bytes`: a ttcp-style fixed transfer over loopback, and its spec checks.

mod common;

use common::{ok, run, TestServer};
use secperf_engine::Spec;

const S: &str = r#""server":"127.0.0.1:5201""#;

fn refused(extra: &str) -> (Option<String>, String) {
    let json = format!(r#"{{"kind":"stream",{},{}}}"#, S, extra);
    let e = Spec::parse(&json).expect_err("spec should be refused");
    (e.field().map(str::to_string), e.to_string())
}

#[test]
fn fixed_transfer_moves_exactly_n_bytes_each_way_and_payload() {
    let srv = TestServer::start("127.0.0.1:0");
    // Not a multiple of the message: the last message is cut to fit.
    let n: u64 = 3 * 1024 * 1024 + 12345;
    for (direction, payload) in [("send", "text"), ("receive", "random")] {
        let (r, recs) = ok(
            srv.addr,
            &format!(
                r#"{{"kind":"stream","bytes":{},"duration":20,"interval":0,"direction":"{}","payload":"{}","message_size":65536}}"#,
                n, direction, payload
            ),
        );
        assert_eq!(recs[0]["spec"]["bytes"], n);
        assert_eq!(recs[0]["spec"]["warmup"], 0.0);
        assert_eq!(r.receiver.bytes, n, "{direction}");
        assert_eq!(r.bytes, n);
        let (sent, got) = if direction == "send" {
            (r.totals.client.bytes_sent, r.totals.server.bytes_received)
        } else {
            (r.totals.server.bytes_sent, r.totals.client.bytes_received)
        };
        assert_eq!((sent, got), (n, n), "{direction}");
        let t = r.transfer.expect("a fixed transfer reports itself");
        assert_eq!(t.bytes, n);
        assert!(t.seconds > 0.0 && t.seconds < 20.0, "{:?}", t);
        assert!((t.seconds - r.duration_s).abs() < 1e-9);
        let kib = n as f64 / 1024.0 / t.seconds;
        assert!((t.kib_per_second - kib).abs() < 1e-6 * kib, "{:?}", t);
        assert!((r.bits_per_second - n as f64 * 8.0 / t.seconds).abs() < 1e-3 * r.bits_per_second);
        let line = recs.last().unwrap();
        assert_eq!(line["transfer"]["bytes"], n);
        assert!(line["transfer"]["kib_per_second"].as_f64().unwrap() > 0.0);
        assert_eq!(
            line["window_bytes"], n,
            "the CPU window holds the whole transfer"
        );
    }
}

#[test]
fn fixed_transfer_paced_takes_the_time_its_rate_gives() {
    let srv = TestServer::start("127.0.0.1:0");
    // 250 kB at 4 Mbit/s: 0.5 s, however fast loopback is.
    let (r, _) = ok(
        srv.addr,
        r#"{"kind":"stream","bytes":250000,"rate_bps":4000000,"message_size":10000,"duration":10,"interval":0.1}"#,
    );
    let t = r.transfer.unwrap();
    assert!((0.45..0.8).contains(&t.seconds), "{:?}", t);
}

#[test]
fn fixed_transfer_past_its_limit_is_an_error_not_a_figure() {
    let srv = TestServer::start("127.0.0.1:0");
    // 1 MB at 1 Mbit/s needs 8 s; the limit is 0.5 s.
    let (r, recs) = run(
        srv.addr,
        r#"{"kind":"stream","bytes":1000000,"rate_bps":1000000,"message_size":1000,"duration":0.5,"interval":0}"#,
    );
    let e = r.expect_err("a transfer past its limit fails");
    assert_eq!(e.kind(), "measurement");
    assert!(e.to_string().contains("did not finish within"), "{}", e);
    assert!(!recs.iter().any(|r| r["type"] == "result"));
}

#[test]
fn fixed_transfer_spec_refusals_name_the_field() {
    let (f, m) = refused(r#""bytes":0"#);
    assert_eq!(f.as_deref(), Some("bytes"));
    assert!(m.contains("1..="), "{m}");
    let (f, m) = refused(r#""bytes":1000,"warmup":1"#);
    assert_eq!(f.as_deref(), Some("warmup"));
    assert!(m.contains("remove warmup"), "{m}");
    let (f, _) = refused(r#""bytes":1000,"direction":"both""#);
    assert_eq!(f.as_deref(), Some("direction"));
    let (f, _) = refused(r#""bytes":1000,"parallel":2"#);
    assert_eq!(f.as_deref(), Some("parallel"));
    let (f, m) = refused(r#""bytes":1000,"protocol":"udp""#);
    assert_eq!(f.as_deref(), Some("bytes"));
    assert!(m.contains("does not apply"), "{m}");
    // warmup 0 is fine, and the resolved spec parses back to itself (the server does this).
    let s = Spec::parse(&format!(
        r#"{{"kind":"stream",{},"bytes":1000,"warmup":0}}"#,
        S
    ))
    .unwrap();
    let Spec::Stream(ref stream) = s else {
        panic!("a stream spec")
    };
    assert_eq!((stream.bytes, stream.warmup), (Some(1000), 0.0));
    let back = Spec::from_value(s.to_value()).unwrap();
    assert_eq!(back.to_value(), s.to_value());
}
