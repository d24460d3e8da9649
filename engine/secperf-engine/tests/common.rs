//! Helpers shared by the integration tests: an in-process server and a
//! client run collecting its records.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use secperf_engine::{EngineError, Record, ResultRecord, ServeOptions, Server, Spec};

pub struct TestServer {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(listen: &str) -> TestServer {
        let server = Server::bind(ServeOptions {
            listen: listen.parse().expect("listen address"),
            data_ports: None,
            allow_any_target: false,
        })
        .expect("bind test server");
        let addr = server.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut sink: Vec<Record> = Vec::new();
            server.run(&flag, &mut sink).expect("serve");
        });
        TestServer {
            addr,
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Runs `spec_json` (with `server` filled in) and returns result + records.
pub fn run(
    server: SocketAddr,
    spec_json: &str,
) -> (Result<ResultRecord, EngineError>, Vec<serde_json::Value>) {
    let mut v: serde_json::Value = serde_json::from_str(spec_json).expect("test spec is JSON");
    v["server"] = serde_json::Value::String(server.to_string());
    let spec = Spec::from_value(v).expect("valid spec");
    let mut records: Vec<Record> = Vec::new();
    let r = secperf_engine::run(spec, false, Instant::now(), &mut records)
        .map(|()| result_of(&records).expect("a test that ends well has a result record"));
    let values = records
        .iter()
        .map(|r| serde_json::from_str(&r.to_line()).expect("record is JSON"))
        .collect();
    (r, values)
}

/// The typed `result` record among `records` (kinds stream, rr, crr, latency).
pub fn result_of(records: &[Record]) -> Option<ResultRecord> {
    records.iter().find_map(|r| match r {
        Record::Result(res) => Some((**res).clone()),
        _ => None,
    })
}

pub fn ok(server: SocketAddr, spec_json: &str) -> (ResultRecord, Vec<serde_json::Value>) {
    let (r, recs) = run(server, spec_json);
    match r {
        Ok(res) => (res, recs),
        Err(e) => panic!("test failed: {} ({})", e, e.kind()),
    }
}
