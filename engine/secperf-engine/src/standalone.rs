//! Entry point for `run`: kinds with their own client flow and result shape
//! (`http`, `connections`) go to their module, the rest to `client::run`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::Result;
use crate::record::{Record, Sink, FORMAT, VERSION};
use crate::spec::{Kind, Spec};
use crate::{client, connections, cpu, http, sys};

/// Runs one test of any kind; every record goes to `sink`.
pub fn run_spec(
    spec: &Spec,
    allow_any_target: bool,
    began: Instant,
    sink: &mut dyn Sink,
) -> Result<()> {
    match spec.kind {
        Kind::Http => http::run(spec, allow_any_target, began, sink).map(|_| ()),
        Kind::Connections => connections::run(spec, allow_any_target, began, sink).map(|_| ()),
        _ => client::run(spec, allow_any_target, began, sink).map(|_| ()),
    }
}

/// The `start` record of a standalone kind (same fields as the others'
/// where they mean something).
pub fn start_record(spec: &Spec, began: Instant, data: &str) -> Record {
    let realtime_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Record::Json(json!({
        "type": "start",
        "t": began.elapsed().as_secs_f64(),
        "format": FORMAT,
        "engine": "secperf-engine",
        "version": VERSION,
        "spec": spec.to_value(),
        "clock": {"realtime_ns": realtime_ns as u64, "monotonic_ns": sys::monotonic_ns()},
        "local": Value::Null,
        "data": data,
        "host": serde_json::to_value(cpu::host()).unwrap_or(Value::Null),
    }))
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft limit now in force.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit/setrlimit only read/write the struct we pass, which lives on our stack.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}
