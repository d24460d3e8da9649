//! Loopback tests of kind `http` over TLS: a tiny rustls responder with a
//! certificate made by the `openssl` CLI for each test (a CA, a server
//! key and certificate for 127.0.0.1), and the engine's client trusting
//! that CA, or another one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use secperf_engine::{Record, Spec};
use serde_json::Value;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {:?}: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a server certificate for 127.0.0.1 signed by it, in a fresh directory.
fn pki(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("https-{}", name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    for ca in ["ca", "other-ca"] {
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=secperf test {}", ca),
                "-keyout",
                &format!("{}.key", ca),
                "-out",
                &format!("{}.pem", ca),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
    }
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
    );
    dir
}

/// Serves /ok (1000 bytes) over TLS; honours Connection: keep-alive.
fn https_responder(dir: &Path) -> SocketAddr {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = Arc::new(
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").expect("bind responder");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                if let Ok(c) = ServerConnection::new(config) {
                    serve(StreamOwned::new(c, s));
                }
            });
        }
    });
    addr
}

fn serve(mut s: StreamOwned<ServerConnection, TcpStream>) {
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
        let keep = head.to_ascii_lowercase().contains("connection: keep-alive");
        let conn = if keep { "keep-alive" } else { "close" };
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: {}\r\n\r\n{}",
            conn,
            "x".repeat(1000)
        );
        if s.write_all(resp.as_bytes()).is_err() || s.flush().is_err() {
            return;
        }
        if !keep {
            s.conn.send_close_notify();
            let _ = s.flush();
            return;
        }
    }
}

fn run(server: SocketAddr, dir: &Path, ca: &str, spec_json: &str) -> Value {
    let mut v: Value = serde_json::from_str(spec_json).expect("spec JSON");
    v["server"] = Value::String(server.to_string());
    v["tls"] = Value::Bool(true);
    v["ca_file"] = Value::String(dir.join(ca).to_string_lossy().into_owned());
    let spec = Spec::from_value(v).expect("valid spec");
    let mut records: Vec<Record> = Vec::new();
    if let Err(e) = secperf_engine::run(spec, false, Instant::now(), &mut records) {
        panic!("test failed: {} ({})", e, e.kind());
    }
    let last: Value = serde_json::from_str(&records.last().unwrap().to_line()).unwrap();
    assert_eq!(last["type"], "result", "{:?}", last);
    last
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {:?}", v))
}

#[test]
fn https_new_handshake_per_fetch_counts_and_times_handshakes() {
    let dir = pki("per-fetch");
    let addr = https_responder(&dir);
    for (version, resumption) in [("1.3", true), ("1.2", true), ("1.3", false)] {
        let r = run(
            addr,
            &dir,
            "ca.pem",
            &format!(
                r#"{{"kind":"http","urls":["/ok"],"rate":40,"parallel":4,"duration":1,"warmup":0,"interval":0,
                   "tls_version":"{}","resumption":{}}}"#,
                version, resumption
            ),
        );
        assert_eq!(u(&r["fetches"]), 40, "{} {}", version, r);
        assert_eq!(u(&r["failed"]), 0, "{}", r);
        assert_eq!(u(&r["bytes"]), 40_000);
        assert_eq!(u(&r["handshakes"]), 40, "a handshake per connection: {}", r);
        assert_eq!(u(&r["latency_us"]["handshake"]["count"]), 40);
        assert!(r["latency_us"]["handshake"]["p50"].as_f64().unwrap() > 0.0);
        assert_eq!(r["tls"], true);
        if resumption {
            // The first connections cannot resume; the later ones do.
            assert!(u(&r["resumed"]) >= 30, "{} resumption on: {}", version, r);
        } else {
            assert_eq!(u(&r["resumed"]), 0, "resumption off: {}", r);
        }
    }
}

#[test]
fn https_keepalive_handshakes_once_per_connection() {
    let dir = pki("keepalive");
    let addr = https_responder(&dir);
    let r = run(
        addr,
        &dir,
        "ca.pem",
        r#"{"kind":"http","urls":["/ok"],"parallel":2,"keepalive":true,"duration":0.5,"warmup":0,"interval":0,
            "cipher":"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256","tls_version":"1.2","groups":["secp256r1"]}"#,
    );
    let fetches = u(&r["fetches"]);
    assert!(fetches > 20, "{}", r);
    assert!(u(&r["handshakes"]) <= 4, "{}", r);
    assert_eq!(u(&r["bytes"]), fetches * 1000);
    assert_eq!(u(&r["failed"]), 0);
}

#[test]
fn https_untrusted_certificate_is_a_tls_failure() {
    let dir = pki("untrusted");
    let addr = https_responder(&dir);
    let r = run(
        addr,
        &dir,
        "other-ca.pem",
        r#"{"kind":"http","urls":["/ok"],"rate":20,"parallel":2,"duration":0.5,"warmup":0,"interval":0}"#,
    );
    assert_eq!(u(&r["fetches"]), 0, "{}", r);
    assert_eq!(u(&r["errors"]["tls"]), 10, "{}", r);
    assert_eq!(u(&r["handshakes"]), 0);
}

#[test]
fn tls_settings_are_checked() {
    let bad = |json: &str, field: &str| {
        let mut v: Value = serde_json::from_str(json).unwrap();
        v["server"] = Value::String("127.0.0.1:443".into());
        let e = Spec::from_value(v).expect_err(json).to_string();
        assert!(e.contains(field), "{} -> {}", json, e);
    };
    bad(
        r#"{"kind":"http","cipher":"TLS13_AES_128_GCM_SHA256"}"#,
        "tls = true",
    );
    bad(r#"{"kind":"http","tls":true}"#, "ca_file");
    bad(
        r#"{"kind":"http","tls":true,"ca_file":"/x","tls_version":"1.1"}"#,
        "1.1",
    );
    bad(
        r#"{"kind":"http","tls":true,"ca_file":"/x","cipher":"RC4"}"#,
        "TLS13_AES_128_GCM_SHA256",
    );
    bad(
        r#"{"kind":"http","tls":true,"ca_file":"/x","tls_version":"1.2","cipher":"TLS13_AES_128_GCM_SHA256"}"#,
        "TLS 1.3 suite",
    );
    bad(
        r#"{"kind":"http","tls":true,"ca_file":"/x","groups":["ffdhe9"]}"#,
        "X25519",
    );
}
