//! The flood kind against a UDP socket on loopback (needs root for the raw
//! socket; skipped with a note otherwise): rate, count bound, refusals.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use secperf_engine::{EngineError, FloodResult, Record, Spec};

/// Whether this test can open raw sockets; says why it is skipped if not.
fn root_or_skip() -> bool {
    // Safety: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() == 0 };
    if !root {
        eprintln!("skipped: the flood needs a raw socket (root)");
    }
    root
}

/// A receiver counting datagrams on a loopback port until stopped.
struct Counter {
    port: u16,
    got: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Counter {
    fn start() -> Counter {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s2 = socket2::SockRef::from(&sock);
        let _ = s2.set_recv_buffer_size(4 << 20);
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let got = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, st) = (got.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !st.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    g.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Counter {
            port,
            got,
            stop,
            handle: Some(handle),
        }
    }

    /// Count once no datagram has arrived for 200 ms (bounded by 5 s).
    fn finish(mut self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut last = self.got.load(Ordering::Relaxed);
        let mut quiet_since = Instant::now();
        while Instant::now() < deadline && quiet_since.elapsed() < Duration::from_millis(200) {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.got.load(Ordering::Relaxed);
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.got.load(Ordering::Relaxed)
    }
}

fn spec(json: serde_json::Value) -> Spec {
    Spec::from_value(json).expect("valid flood spec")
}

/// Runs a flood; its typed result comes from its `result` record.
fn flood(spec: &Spec, records: &mut Vec<Record>) -> Result<FloodResult, EngineError> {
    secperf_engine::run(spec.clone(), false, Instant::now(), records)?;
    Ok(records
        .iter()
        .find_map(|r| match r {
            Record::FloodResult(res) => Some((**res).clone()),
            _ => None,
        })
        .expect("a flood that ends well has a result record"))
}

#[test]
fn rate_within_2pct_at_10kpps_and_every_packet_arrives() {
    if !root_or_skip() {
        return;
    }
    let c = Counter::start();
    let s = spec(serde_json::json!({
        "kind": "flood", "flood": "udp", "target": "127.0.0.1",
        "ports": c.port.to_string(), "rate_pps": 10000, "duration": 2
    }));
    let mut recs: Vec<Record> = Vec::new();
    let r = flood(&s, &mut recs).expect("flood runs");
    let got = c.finish();
    assert!(
        r.rate_error_pct.abs() < 2.0,
        "rate error {:.2} % (achieved {:.0} pps)",
        r.rate_error_pct,
        r.rate_pps
    );
    // The sender's count against the clock, and the receiver's count:
    // loopback loses nothing, and the kernel accepted every checksum.
    let expect = 20000.0;
    assert!(
        ((r.packets as f64) - expect).abs() / expect < 0.02,
        "sent {}",
        r.packets
    );
    assert_eq!(got, r.packets, "received {} of {} sent", got, r.packets);
    // Loopback has no Ethernet: `auto` fell back to the raw socket and says why.
    assert_eq!(r.sender, "raw");
    assert!(r.sender_note.contains("local"), "{}", r.sender_note);
    assert_eq!(r.per_second.len(), 2);
    let intervals = recs
        .iter()
        .filter(|x| matches!(x, Record::FloodInterval(_)))
        .count();
    assert_eq!(intervals, 2);
    let line = recs.last().unwrap().to_line();
    assert!(line.starts_with("{\"type\":\"result\""), "{}", line);
}

#[test]
fn packet_sender_on_loopback_is_refused_and_raw_runs_as_asked() {
    if !root_or_skip() {
        return;
    }
    let c = Counter::start();
    let with = |sender: &str| {
        spec(serde_json::json!({
            "kind": "flood", "flood": "udp", "target": "127.0.0.1", "sender": sender,
            "ports": c.port.to_string(), "rate_pps": 5000, "count": 500, "duration": 2
        }))
    };
    // Asked for explicitly, the packet sender fails loudly instead of falling back.
    let e = flood(&with("packet"), &mut Vec::new()).unwrap_err();
    assert_eq!((e.kind(), e.field()), ("spec", Some("sender")));
    assert!(e.to_string().contains("sender \"packet\""), "{}", e);
    let mut recs: Vec<Record> = Vec::new();
    let r = flood(&with("raw"), &mut recs).expect("raw flood runs");
    assert_eq!((r.sender, r.packets), ("raw", 500));
    assert!(r.sender_note.contains("as asked"), "{}", r.sender_note);
    let start = recs[0].to_line();
    assert!(start.contains("\"sender\":\"raw\""), "{}", start);
    assert_eq!(c.finish(), 500);
    let e = Spec::from_value(serde_json::json!({"kind":"flood","flood":"udp",
        "target":"198.18.2.2","rate_pps":1000,"sender":"ring"}))
    .unwrap_err();
    assert_eq!(e.field(), Some("sender"));
}

#[test]
fn count_bound_is_respected() {
    if !root_or_skip() {
        return;
    }
    let c = Counter::start();
    let s = spec(serde_json::json!({
        "kind": "flood", "flood": "udp", "target": "127.0.0.1",
        "ports": c.port.to_string(), "rate_pps": 50000, "count": 777, "duration": 5
    }));
    let t = Instant::now();
    let r = flood(&s, &mut Vec::new()).expect("flood runs");
    assert_eq!(r.packets, 777);
    assert_eq!(r.stopped_by, "count");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "count should stop it early"
    );
    assert_eq!(c.finish(), 777);
}

#[test]
fn target_outside_ranges_is_refused_with_an_error_record() {
    for (field, json) in [
        (
            "target",
            serde_json::json!({"kind":"flood","flood":"syn","target":"8.8.8.8","rate_pps":1000}),
        ),
        (
            "sources",
            serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2",
                               "sources":"10.0.0.0/24","rate_pps":1000}),
        ),
    ] {
        let s = spec(json);
        let e = flood(&s, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), "target");
        assert_eq!(e.field(), Some(field));
        assert_eq!(e.exit_code(), 4);
    }
    // Through the binary: the error record is the last line, exit code 4.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_secperf-engine"))
        .args([
            "run",
            "--allow-any-target",
            "--spec",
            r#"{"kind":"flood","flood":"udp","target":"1.1.1.1","rate_pps":1000}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "no override for floods");
    let text = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["kind"], "target");
}

#[test]
fn flood_spec_bounds() {
    let bad = |json: serde_json::Value| Spec::from_value(json).unwrap_err();
    let e =
        bad(serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":0}));
    assert_eq!(e.field(), Some("rate_pps"));
    let e = bad(serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2"}));
    assert_eq!(e.field(), Some("rate_pps"), "no unpaced mode");
    let e = bad(
        serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":20000000}),
    );
    assert_eq!(e.field(), Some("rate_pps"));
    let e = bad(
        serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":1000,"count":0}),
    );
    assert_eq!(e.field(), Some("count"));
    let e = bad(
        serde_json::json!({"kind":"flood","flood":"udp","target":"198.18.2.2","rate_pps":1000,"server":"198.18.2.2:1"}),
    );
    assert_eq!(e.field(), Some("server"));
    let e = bad(serde_json::json!({"kind":"stream","server":"198.18.2.2:1","rate_pps":1000}));
    assert_eq!(e.field(), Some("rate_pps"));
    let e = bad(
        serde_json::json!({"kind":"flood","flood":"icmp","target":"198.18.2.2","rate_pps":1000,"ports":"9"}),
    );
    assert_eq!(e.field(), Some("ports"));
    let ok = Spec::from_value(serde_json::json!(
        {"kind":"flood","flood":"syn","target":"198.18.2.2","rate_pps":1000,"duration":3}))
    .unwrap();
    let v = ok.to_value();
    assert_eq!(v["count"], 3000, "count defaults to rate × duration");
    assert_eq!(v["ports"], "9");
    assert!(v.get("server").is_none() && v.get("protocol").is_none());
}

#[test]
fn sigint_ends_the_flood_early_with_its_result() {
    if !root_or_skip() {
        return;
    }
    let c = Counter::start();
    let spec = serde_json::json!({
        "kind": "flood", "flood": "udp", "target": "127.0.0.1",
        "ports": c.port.to_string(), "rate_pps": 5000, "duration": 20
    });
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_secperf-engine"))
        .args(["run", "--spec", &spec.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("engine starts");
    std::thread::sleep(Duration::from_millis(700));
    let t = Instant::now();
    // Safety: kill() only sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().expect("engine ends");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "SIGINT should end it at once"
    );
    assert!(out.status.success(), "exit status {:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    let last: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a record")).unwrap();
    assert_eq!(last["type"], "result", "{}", text);
    assert_eq!(last["stopped_by"], "signal");
    let dur = last["duration_s"].as_f64().unwrap();
    assert!((0.5..3.0).contains(&dur), "duration_s {}", dur);
    // the rate is over the time it really ran, not the 20 s asked
    let rate = last["rate_pps"].as_f64().unwrap();
    assert!((rate - 5000.0).abs() / 5000.0 < 0.05, "rate {}", rate);
    assert_eq!(c.finish(), last["packets"].as_u64().unwrap());
}
