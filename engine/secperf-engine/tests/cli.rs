//! The binary: error records as the last line, exit codes, time bounds,
//! `serve` start-up and clean SIGTERM exit.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_secperf-engine");

fn last_record(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("some stdout");
    serde_json::from_str(last).expect("last line is JSON")
}

fn run(spec: &str) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["run", "--spec", spec])
        .output()
        .expect("run binary");
    (out, t.elapsed())
}

#[test]
fn bad_spec_is_exit_2_with_error_record() {
    let (out, _) = run(r#"{"kind":"stream","server":"127.0.0.1:5201","bogus":1}"#);
    assert_eq!(out.status.code(), Some(2));
    let r = last_record(&out);
    assert_eq!(r["type"], "error");
    assert_eq!(r["kind"], "spec");
    assert_eq!(r["field"], "bogus");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

#[test]
fn http_beyond_the_descriptors_it_may_open_is_refused_before_any_connect() {
    // Without CAP_SYS_RESOURCE (dropped from the bounding set) the engine cannot
    // raise a hard limit of 500, so 1000 connections cannot all be open at once.
    let out = Command::new("setpriv")
        .args([
            "--bounding-set",
            "-sys_resource",
            "prlimit",
            "--nofile=500:500",
            BIN,
        ])
        .args(["run", "--spec"])
        .arg(r#"{"kind":"http","server":"127.0.0.1:9","parallel":1000}"#)
        .output()
        .expect("run setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(2), "{:?}", out);
    let r = last_record(&out);
    assert_eq!(r["kind"], "spec");
    assert_eq!(r["field"], "parallel");
    let msg = r["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("1064 descriptors") && msg.contains("may open 500"),
        "{}",
        msg
    );
    // nothing ran: the refusal is the only record
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn spec_from_missing_file_is_spec_error() {
    let (out, _) = run("@/nonexistent/spec.json");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(last_record(&out)["kind"], "spec");
}

#[test]
fn nothing_listening_fails_fast() {
    // A port on loopback where nothing listens: bound (so no other test's listener can
    // take it while this one runs) but never listening, so a connect is refused.
    let reserved =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    reserved
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    let port = reserved.local_addr().unwrap().as_socket().unwrap().port();
    let (out, took) = run(&format!(
        r#"{{"kind":"rr","server":"127.0.0.1:{}","duration":1}}"#,
        port
    ));
    assert_eq!(out.status.code(), Some(3));
    let r = last_record(&out);
    assert_eq!(r["type"], "error");
    assert_eq!(r["kind"], "connect");
    assert!(took < Duration::from_secs(5), "took {:?}", took);
}

#[test]
fn unreachable_server_fails_within_5s() {
    // A testbed address nobody holds here: no route, or no answer until the connect timeout.
    let (out, took) = run(r#"{"kind":"stream","server":"198.18.255.254:5201","duration":1}"#);
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(last_record(&out)["type"], "error");
    assert!(took < Duration::from_secs(5), "took {:?}", took);
}

#[test]
fn target_outside_ranges_is_refused() {
    let (out, _) = run(r#"{"kind":"stream","server":"8.8.8.8:5201","duration":1}"#);
    assert_eq!(out.status.code(), Some(4));
    let r = last_record(&out);
    assert_eq!(r["kind"], "target");
    assert!(r["message"]
        .as_str()
        .unwrap()
        .contains("--allow-any-target"));
}

#[test]
fn serve_port_in_use_is_an_error() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr.to_string()])
        .output()
        .expect("serve");
    assert_ne!(out.status.code(), Some(0));
    let r = last_record(&out);
    assert_eq!(r["type"], "error");
    assert!(r["message"].as_str().unwrap().contains("cannot listen"));
}

#[test]
fn serve_runs_a_test_and_exits_0_on_sigterm() {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-ports",
            "40000-40100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["type"], "listening");
    let listen = first["listen"].as_str().unwrap().to_string();
    let (out, _) = run(&format!(
        r#"{{"kind":"rr","server":"{}","duration":0.2,"warmup":0,"interval":0}}"#,
        listen
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let start: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let data_port: u16 = start["data"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (40000..=40100).contains(&data_port),
        "data port {}",
        data_port
    );
    assert_eq!(last_record(&out)["type"], "result");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let t = Instant::now();
    let code = child.wait().unwrap();
    assert_eq!(code.code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn version_prints_json() {
    let out = Command::new(BIN).arg("version").output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], 2);
}
