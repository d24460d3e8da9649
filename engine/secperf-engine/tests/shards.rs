//! A connections test spread over helper processes on both sides: each
//! process holds at most `per_process` connections (what a descriptor limit
//! the engine cannot raise imposes), and the counts add up. Its own test
//! binary: it sets the environment the helpers are found by.

mod common;

use std::time::Instant;

use common::TestServer;
use secperf_engine::{Record, Spec};
use serde_json::Value;

#[test]
fn connections_shared_by_helper_processes_add_up() {
    // The engine runs as a library here: the helpers are the built binary.
    std::env::set_var("SECPERF_ENGINE_EXE", env!("CARGO_BIN_EXE_secperf-engine"));
    let srv = TestServer::start("127.0.0.1:0");
    let spec = format!(
        r#"{{"kind":"connections","server":"{}","connections":450,"per_process":150,"hold":0.2,"duration":20,"close_rate":2000,"sources":["127.0.0.2","127.0.0.3","127.0.0.4"]}}"#,
        srv.addr
    );
    let spec = Spec::parse(&spec).expect("a connections spec");
    let mut records: Vec<Record> = Vec::new();
    secperf_engine::run(spec, false, Instant::now(), &mut records).expect("the test runs");
    let r: Value = serde_json::from_str(&records.last().unwrap().to_line()).unwrap();
    assert_eq!(r["type"], "result", "{}", r);
    assert_eq!(r["processes"], 3, "{}", r);
    assert_eq!(r["server"]["processes"], 3, "{}", r);
    assert_eq!(r["established"], 450, "{}", r);
    assert_eq!(r["validated"], 450, "{}", r);
    assert_eq!(r["server"]["accepted"], 450, "{}", r);
    assert_eq!(r["server"]["validated"], 450, "{}", r);
    assert_eq!(r["server"]["held"], 450, "{}", r);
    assert_eq!(r["stopped_by"], "target");
    assert_eq!(r["teardown"]["closed"], 450);
    assert_eq!(r["teardown"]["fins"], 450, "{}", r);
    let rate = r["teardown_rate"].as_f64().unwrap();
    assert!(rate > 0.0, "{}", r);
}
