//! Spec parsing and validation: each bad field is an error naming it.

use secperf_engine::spec::{Direction, Kind, Protocol, Spec};

fn err(json: &str) -> (String, Option<String>, String) {
    let e = Spec::parse(json).expect_err("spec should be refused");
    (
        e.kind().to_string(),
        e.field().map(str::to_string),
        e.to_string(),
    )
}

const S: &str = r#""server":"127.0.0.1:5201""#;

#[test]
fn defaults_are_filled_in() {
    let s = Spec::parse(&format!(r#"{{"kind":"stream",{}}}"#, S)).unwrap();
    assert_eq!(s.kind, Kind::Stream);
    assert_eq!(s.protocol, Protocol::Tcp);
    assert_eq!(s.duration, 10.0);
    assert_eq!(s.warmup, 1.0);
    assert_eq!(s.message_size, 131072);
    assert_eq!(s.direction, Direction::Send);
    assert!(!s.nodelay);
    let u = Spec::parse(&format!(r#"{{"kind":"stream","protocol":"udp",{}}}"#, S)).unwrap();
    assert_eq!(u.message_size, 1024);
    let rr = Spec::parse(&format!(r#"{{"kind":"rr",{}}}"#, S)).unwrap();
    assert!(rr.nodelay);
    assert_eq!((rr.request_size, rr.response_size, rr.inflight), (1, 1, 1));
    let v = rr.to_value();
    assert!(v.get("message_size").is_none() && v.get("udp_timeout").is_none());
    assert_eq!(v["inflight"], 1);
    // The resolved spec parses back to the same thing (the server does this).
    let back = Spec::from_value(v).unwrap();
    assert_eq!(back.to_value(), rr.to_value());
}

#[test]
fn unknown_field_is_named() {
    let (kind, field, msg) = err(&format!(r#"{{"kind":"rr",{},"mesage_size":5}}"#, S));
    assert_eq!(kind, "spec");
    assert_eq!(field.as_deref(), Some("mesage_size"));
    assert!(msg.contains("remove it"), "{}", msg);
}

#[test]
fn message_size_zero() {
    let (_, field, msg) = err(&format!(r#"{{"kind":"stream",{},"message_size":0}}"#, S));
    assert_eq!(field.as_deref(), Some("message_size"));
    assert!(msg.contains("at least 1"), "{}", msg);
}

#[test]
fn duration_zero_and_negative_and_too_long() {
    for d in ["0", "-1", "3601"] {
        let (_, field, _) = err(&format!(r#"{{"kind":"stream",{},"duration":{}}}"#, S, d));
        assert_eq!(field.as_deref(), Some("duration"), "duration {}", d);
    }
}

#[test]
fn udp_message_above_max() {
    let (_, field, msg) = err(&format!(
        r#"{{"kind":"stream","protocol":"udp",{},"message_size":65508}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("message_size"));
    assert!(msg.contains("65507"));
}

#[test]
fn crr_over_udp_refused() {
    let (_, field, _) = err(&format!(r#"{{"kind":"crr","protocol":"udp",{}}}"#, S));
    assert_eq!(field.as_deref(), Some("protocol"));
}

#[test]
fn misplaced_and_malformed_fields() {
    let (_, field, msg) = err(&format!(r#"{{"kind":"rr",{},"direction":"send"}}"#, S));
    assert_eq!(field.as_deref(), Some("direction"));
    assert!(msg.contains("does not apply"));
    let (_, field, _) = err(&format!(r#"{{"kind":"rr",{},"inflight":"many"}}"#, S));
    assert_eq!(field.as_deref(), Some("inflight"));
    let (_, field, _) = err(r#"{"kind":"rr","server":"localhost"}"#);
    assert_eq!(field.as_deref(), Some("server"));
    let (_, field, _) = err(r#"{"server":"127.0.0.1:1"}"#);
    assert_eq!(field.as_deref(), Some("kind"));
    let (_, field, _) = err(&format!(r#"{{"kind":"bulk",{}}}"#, S));
    assert_eq!(field.as_deref(), Some("kind"));
    let (_, field, _) = err(&format!(r#"{{"kind":"stream",{},"parallel":0}}"#, S));
    assert_eq!(field.as_deref(), Some("parallel"));
    let (_, field, _) = err(&format!(
        r#"{{"kind":"rr",{},"inflight":64,"request_size":1024}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("inflight"));
    let (kind, field, _) = err("[1,2]");
    assert_eq!((kind.as_str(), field), ("spec", None));
}

#[test]
fn socket_buffer_above_host_max() {
    let max: u64 = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let s = Spec::parse(&format!(
        r#"{{"kind":"stream",{},"socket_buffer":{}}}"#,
        S,
        max + 1
    ))
    .unwrap();
    let e = s.check_local_limits().expect_err("above wmem_max");
    assert_eq!(e.field(), Some("socket_buffer"));
    assert!(e.to_string().contains("sysctl"), "{}", e);
}

#[test]
fn rcvlowat_defaults_to_the_message_for_large_unpaced_tcp_messages() {
    let lowat = |extra: &str| {
        Spec::parse(&format!(r#"{{"kind":"stream",{}{}}}"#, S, extra))
            .unwrap()
            .rcvlowat
    };
    assert_eq!(lowat(""), 131072);
    assert_eq!(lowat(r#","message_size":524288"#), 524288);
    // Capped so the default always stays below the kernel's own cap.
    assert_eq!(lowat(r#","message_size":67108864"#), 2 << 20);
    // Small messages and paced streams wake on any data.
    assert_eq!(lowat(r#","message_size":16384"#), 1);
    assert_eq!(lowat(r#","rate_bps":1000000"#), 1);
    assert_eq!(lowat(r#","rcvlowat":4096"#), 4096);
    // A fixed socket buffer caps the default where the kernel would.
    assert_eq!(lowat(r#","socket_buffer":65536"#), 65536);
    // The resolved spec shows it for TCP streams only.
    let s = Spec::parse(&format!(r#"{{"kind":"stream",{}}}"#, S)).unwrap();
    assert_eq!(s.to_value()["rcvlowat"], 131072);
    let u = Spec::parse(&format!(r#"{{"kind":"stream","protocol":"udp",{}}}"#, S)).unwrap();
    assert!(u.to_value().get("rcvlowat").is_none());
}

#[test]
fn rcvlowat_bad_values_name_the_field() {
    let (_, field, msg) = err(&format!(r#"{{"kind":"stream",{},"rcvlowat":0}}"#, S));
    assert_eq!(field.as_deref(), Some("rcvlowat"));
    assert!(msg.contains("at least 1"), "{}", msg);
    let (_, field, _) = err(&format!(r#"{{"kind":"rr",{},"rcvlowat":4096}}"#, S));
    assert_eq!(field.as_deref(), Some("rcvlowat"));
    let (_, field, _) = err(&format!(
        r#"{{"kind":"stream","protocol":"udp",{},"rcvlowat":4096}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("rcvlowat"));
    // Above a fixed socket buffer, or above half of tcp_rmem's maximum: the
    // kernel would cap it silently, so the engine refuses it.
    let s = Spec::parse(&format!(
        r#"{{"kind":"stream",{},"socket_buffer":65536,"rcvlowat":131072}}"#,
        S
    ))
    .unwrap();
    let e = s.check_local_limits().expect_err("above socket_buffer");
    assert_eq!(e.field(), Some("rcvlowat"));
    let rmem: Vec<u64> = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let rmem_max = rmem[2];
    let s = Spec::parse(&format!(
        r#"{{"kind":"stream",{},"rcvlowat":{}}}"#,
        S,
        (rmem_max / 2 + 1).min(64 << 20)
    ))
    .unwrap();
    if rmem_max / 2 < 64 << 20 {
        let e = s.check_local_limits().expect_err("above tcp_rmem max / 2");
        assert_eq!(e.field(), Some("rcvlowat"));
        // The suggested sysctl keeps the host's own minimum and default.
        let keep = format!("tcp_rmem=\"{} {} ", rmem[0], rmem[1]);
        assert!(e.to_string().contains(&keep), "{}", e);
    }
}

#[test]
fn close_defaults_to_fin_and_takes_reset_on_crr_and_connections_only() {
    use secperf_engine::spec::Close;
    let c = Spec::parse(&format!(r#"{{"kind":"crr",{}}}"#, S)).unwrap();
    assert_eq!(c.close, Close::Fin, "an orderly close by default");
    assert_eq!(c.to_value()["close"], "fin");
    let r = Spec::parse(&format!(r#"{{"kind":"crr",{},"close":"reset"}}"#, S)).unwrap();
    assert_eq!(r.close, Close::Reset);
    // The server receives the resolved spec: the close survives the trip.
    assert_eq!(Spec::from_value(r.to_value()).unwrap().close, Close::Reset);
    let k = Spec::parse(&format!(
        r#"{{"kind":"connections",{},"close":"reset"}}"#,
        S
    ))
    .unwrap();
    assert_eq!(k.close, Close::Reset);
    let (_, field, _) = err(&format!(r#"{{"kind":"crr",{},"close":"linger"}}"#, S));
    assert_eq!(field.as_deref(), Some("close"));
    let (_, field, msg) = err(&format!(r#"{{"kind":"rr",{},"close":"fin"}}"#, S));
    assert_eq!(field.as_deref(), Some("close"));
    assert!(msg.contains("does not apply"));
    let rr = Spec::parse(&format!(r#"{{"kind":"rr",{}}}"#, S)).unwrap();
    assert!(rr.to_value().get("close").is_none());
}
