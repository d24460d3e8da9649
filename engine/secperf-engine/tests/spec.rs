//! Spec parsing and validation: each bad field is an error naming it.

use secperf_engine::spec::{CrrSpec, Direction, Protocol, RrSpec, Spec, StreamSpec};

fn stream(json: &str) -> StreamSpec {
    match Spec::parse(json).expect("a valid spec") {
        Spec::Stream(s) => s,
        other => panic!("not a stream spec: {:?}", other),
    }
}

fn rr(json: &str) -> RrSpec {
    match Spec::parse(json).expect("a valid spec") {
        Spec::Rr(s) => s,
        other => panic!("not an rr spec: {:?}", other),
    }
}

fn crr(json: &str) -> CrrSpec {
    match Spec::parse(json).expect("a valid spec") {
        Spec::Crr(s) => s,
        other => panic!("not a crr spec: {:?}", other),
    }
}

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
    let s = stream(&format!(r#"{{"kind":"stream",{}}}"#, S));
    assert_eq!(Spec::Stream(s.clone()).kind(), "stream");
    assert_eq!(s.common.protocol, Protocol::Tcp);
    assert_eq!(s.common.duration, 10.0);
    assert_eq!(s.warmup, 1.0);
    assert_eq!(s.message, 131072);
    assert_eq!(s.direction, Direction::Send);
    assert!(!s.nodelay);
    let u = stream(&format!(r#"{{"kind":"stream","protocol":"udp",{}}}"#, S));
    assert_eq!(u.message, 1024);
    let r = rr(&format!(r#"{{"kind":"rr",{}}}"#, S));
    assert!(r.nodelay);
    assert_eq!((r.request, r.response, r.inflight), (1, 1, 1));
    let v = Spec::Rr(r).to_value();
    assert!(v.get("message").is_none() && v.get("udp_timeout").is_none());
    assert_eq!(v["inflight"], 1);
    assert_eq!(v["kind"], "rr");
    // The resolved spec parses back to the same thing (the server does this).
    let back = Spec::from_value(v.clone()).unwrap();
    assert_eq!(back.to_value(), v);
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
    let lowat = |extra: &str| stream(&format!(r#"{{"kind":"stream",{}{}}}"#, S, extra)).rcvlowat;
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
fn crr_closes_server_first_by_default_and_connections_fin() {
    use secperf_engine::spec::{Close, CloseOrder};
    let c = crr(&format!(r#"{{"kind":"crr",{}}}"#, S));
    assert_eq!(
        c.close,
        CloseOrder::ServerFirst,
        "netperf's order by default"
    );
    assert_eq!(Spec::Crr(c).to_value()["close"], "server-first");
    // `fin`, the old name of the client's orderly close, still reads.
    for (given, want) in [
        ("fin", CloseOrder::ClientFirst),
        ("client-first", CloseOrder::ClientFirst),
        ("server-first", CloseOrder::ServerFirst),
        ("reset", CloseOrder::Reset),
    ] {
        let r = crr(&format!(r#"{{"kind":"crr",{},"close":"{}"}}"#, S, given));
        assert_eq!(r.close, want, "{}", given);
        // The server receives the resolved spec: the close survives the trip.
        let back = Spec::from_value(Spec::Crr(r).to_value()).unwrap();
        assert!(
            matches!(back, Spec::Crr(CrrSpec { close, .. }) if close == want),
            "{}",
            given
        );
    }
    let k = Spec::parse(&format!(
        r#"{{"kind":"connections",{},"close":"reset"}}"#,
        S
    ))
    .unwrap();
    let Spec::Connections(k) = k else {
        panic!("a connections spec")
    };
    assert_eq!(k.close, Close::Reset);
    // The connections kind's close is how the server answers a FIN: no order.
    let (_, field, _) = err(&format!(
        r#"{{"kind":"connections",{},"close":"server-first"}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("close"));
    let (_, field, _) = err(&format!(r#"{{"kind":"crr",{},"close":"linger"}}"#, S));
    assert_eq!(field.as_deref(), Some("close"));
    let (_, field, msg) = err(&format!(r#"{{"kind":"rr",{},"close":"fin"}}"#, S));
    assert_eq!(field.as_deref(), Some("close"));
    assert!(msg.contains("does not apply"));
    let rr = Spec::parse(&format!(r#"{{"kind":"rr",{}}}"#, S)).unwrap();
    assert!(rr.to_value().get("close").is_none());
}

#[test]
fn renamed_fields_take_their_old_names_too() {
    // `message`, `request` and `response` are the names; the old ones still parse.
    let new = stream(&format!(r#"{{"kind":"stream",{},"message":4096}}"#, S));
    let old = stream(&format!(r#"{{"kind":"stream",{},"message_size":4096}}"#, S));
    assert_eq!((new.message, old.message), (4096, 4096));
    // The resolved spec (the `start` record's, the server's) has the new name only.
    let v = Spec::Stream(old).to_value();
    assert_eq!(v["message"], 4096);
    assert!(v.get("message_size").is_none(), "{}", v);
    let r = rr(&format!(
        r#"{{"kind":"rr",{},"request":32,"response_size":256}}"#,
        S
    ));
    assert_eq!((r.request, r.response), (32, 256));
    let c = crr(&format!(
        r#"{{"kind":"crr",{},"request_size":10,"response":100}}"#,
        S
    ));
    assert_eq!((c.request, c.response), (10, 100));
    // An error names the field as the spec wrote it.
    let (_, field, msg) = err(&format!(r#"{{"kind":"stream",{},"message":0}}"#, S));
    assert_eq!(field.as_deref(), Some("message"));
    assert!(msg.starts_with("message must be at least 1"), "{}", msg);
    let (_, field, _) = err(&format!(r#"{{"kind":"rr",{},"request_size":0}}"#, S));
    assert_eq!(field.as_deref(), Some("request_size"));
    // Both names at once is ambiguous.
    let (_, field, msg) = err(&format!(
        r#"{{"kind":"stream",{},"message":1,"message_size":2}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("message_size"));
    assert!(msg.contains("old name of `message`"), "{}", msg);
    // The old name is refused where the field does not apply, like the new one.
    let (_, field, msg) = err(&format!(r#"{{"kind":"rr",{},"message_size":5}}"#, S));
    assert_eq!(field.as_deref(), Some("message_size"));
    assert!(msg.contains("does not apply to kind rr"), "{}", msg);
    // The list of fields a kind takes shows the new names only.
    let (_, _, msg) = err(&format!(r#"{{"kind":"rr",{},"reqest":5}}"#, S));
    assert!(msg.contains("request, response"), "{}", msg);
    assert!(!msg.contains("request_size"), "{}", msg);
}

#[test]
fn the_spec_of_every_kind_is_its_own_struct() {
    for (json, kind) in [
        (r#"{"kind":"stream","server":"127.0.0.1:1"}"#, "stream"),
        (r#"{"kind":"rr","server":"127.0.0.1:1"}"#, "rr"),
        (r#"{"kind":"crr","server":"127.0.0.1:1"}"#, "crr"),
        (r#"{"kind":"latency","server":"127.0.0.1:1"}"#, "latency"),
        (r#"{"kind":"http","server":"127.0.0.1:1"}"#, "http"),
        (
            r#"{"kind":"connections","server":"127.0.0.1:1"}"#,
            "connections",
        ),
        (
            r#"{"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":1000}"#,
            "flood",
        ),
        (
            r#"{"kind":"mix","servers":[{"address":"198.18.2.2"}],"clients":[1],"html_files":[10]}"#,
            "mix",
        ),
    ] {
        let s = Spec::parse(json).unwrap_or_else(|e| panic!("{}: {}", json, e));
        assert_eq!(s.kind(), kind);
        assert_eq!(s.to_value()["kind"], kind, "the resolved spec is tagged");
    }
    // A kind's field in another kind's spec names the field and the kind.
    let (_, field, msg) =
        err(r#"{"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":1000,"urls":["/"]}"#);
    assert_eq!(field.as_deref(), Some("urls"));
    assert!(msg.contains("does not apply to kind flood"), "{}", msg);
    let (_, field, _) = err(
        r#"{"kind":"mix","servers":[{"address":"198.18.2.2"}],"clients":[1],"html_files":[10],"duration":5}"#,
    );
    assert_eq!(field.as_deref(), Some("duration"));
    let (_, field, msg) = err(&format!(r#"{{"kind":"bulk",{}}}"#, S));
    assert_eq!(field.as_deref(), Some("kind"));
    assert!(msg.contains("\"mix\""), "{}", msg);
}

#[test]
fn busy_poll_is_off_by_default_and_bounded() {
    let c = crr(&format!(r#"{{"kind":"crr",{}}}"#, S));
    assert_eq!(c.busy_poll_us, 0);
    let c = crr(&format!(r#"{{"kind":"crr","busy_poll_us":50,{}}}"#, S));
    assert_eq!(c.busy_poll_us, 50);
    let (_, field, msg) = err(&format!(
        r#"{{"kind":"http","urls":["/"],"busy_poll_us":20000,{}}}"#,
        S
    ));
    assert_eq!(field.as_deref(), Some("busy_poll_us"));
    assert!(msg.contains("0..=10000"), "{}", msg);
    let (_, field, _) = err(&format!(r#"{{"kind":"rr","busy_poll_us":50,{}}}"#, S));
    assert_eq!(
        field.as_deref(),
        Some("busy_poll_us"),
        "rr has no event loop"
    );
}
