//! crr with a `rate` (new connections/s, one absolute schedule shared by
//! the `parallel` loops, so it does not drift) and/or a `timeout`: a connect
//! or transaction that fails or misses its deadline is counted in `lost`
//! and the loop goes on (RFC 3511 §5.3 counts failures at a rate, it does
//! not stop at the first). The connection ends as `close` says (see the crr module);
//! an orderly close must complete (the server's FIN read) before the same
//! deadline, or the connection counts as lost.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;

use crate::error::Result;
use crate::rt::payload;
use crate::rt::shared::{Shared, Tally, ThreadStats};
use crate::spec::{Close, CrrSpec};
use crate::wire::http::{self as http_wire, Fail};

/// The schedule the loops of one test share.
pub struct Schedule {
    pub t0: Instant,
    pub next: AtomicU64,
}

impl Schedule {
    pub fn new() -> Arc<Schedule> {
        Arc::new(Schedule {
            t0: Instant::now(),
            next: AtomicU64::new(0),
        })
    }
}

/// Sleeps until `due`, in slices so a stop is seen; false if stopped first.
fn sleep_until(due: Instant, sh: &Shared) -> bool {
    loop {
        if sh.stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(50)));
    }
}

/// `fin`: shutdown(Write) and read the server's EOF before `deadline`.
fn close(s: &TcpStream, close: Close, deadline: Instant) -> Result<(), Fail> {
    if close == Close::Reset {
        return Ok(());
    }
    s.shutdown(Shutdown::Write).map_err(|e| Fail::from_io(&e))?;
    let mut b = [0u8; 64];
    match http_wire::read_some(s, &mut b, deadline)? {
        0 => Ok(()),
        _ => Err(Fail::BadResponse),
    }
}

pub fn client_loop(
    spec: &CrrSpec,
    data: SocketAddr,
    sched: &Schedule,
    sh: &Shared,
    st: &ThreadStats,
) -> Result<()> {
    let req = payload::make(spec.payload, spec.request, 5);
    let mut resp = vec![0u8; spec.response];
    let mut t = Tally::default();
    let timeout = Duration::from_secs_f64(spec.timeout.unwrap_or(2.0));
    let (mut connections, mut failed) = (0u64, 0u64);
    while !sh.stopped() {
        if let Some(rate) = spec.rate {
            let k = sched.next.fetch_add(1, Relaxed);
            let due = sched.t0 + Duration::from_secs_f64(k as f64 / rate);
            if !sleep_until(due, sh) {
                break;
            }
        }
        let t0 = Instant::now();
        let deadline = t0 + timeout;
        let s = match http_wire::connect(data, deadline) {
            Ok(s) => s,
            Err(_) => {
                failed += 1;
                st.lost.store(failed, Relaxed);
                continue;
            }
        };
        connections += 1;
        st.connections.store(connections, Relaxed);
        let r = http_wire::write_all(&s, &req, deadline)
            .and_then(|_| http_wire::read_exact(&s, &mut resp, deadline));
        let rtt = t0.elapsed();
        let r = r.and_then(|_| close(&s, spec.close, deadline));
        if r.is_err() || spec.close == Close::Reset {
            // A failed connection is reset whatever `close` says: nothing waits on it.
            let _ = SockRef::from(&s).set_linger(Some(Duration::ZERO));
        }
        drop(s);
        match r {
            Ok(()) => {
                sh.record_rtt(rtt);
                t.sent(req.len());
                t.received(resp.len());
                t.transactions += 1;
                t.publish(st);
            }
            Err(_) => {
                failed += 1;
                st.lost.store(failed, Relaxed);
            }
        }
    }
    t.publish(st);
    Ok(())
}
