//! Helper processes of a connections test. One process holds at most as many
//! connections as its descriptor limit allows (RLIMIT_NOFILE: an unprivileged
//! process, or one without CAP_SYS_RESOURCE, cannot raise it past its hard
//! limit, 20,000 on some hosts); beyond that, each side shares the test's
//! connections among helper processes of the same engine binary, started
//! with its hidden `worker` command. A helper reads its job (JSON) from its
//! command line, reports JSON lines on its stdout, takes commands as lines on
//! its stdin, and ends when its stdin closes (so it never outlives us).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::rt::sys;

/// The engine binary helpers run: $SECPERF_ENGINE_EXE (tests, which run the
/// engine as a library), else this process's own executable.
fn engine_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SECPERF_ENGINE_EXE") {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe().map_err(EngineError::io(
        "cannot find the engine's own executable to start a helper process",
    ))
}

/// One helper process and the lines it has reported.
pub struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// The last `report N` asked of it.
    asked: u64,
}

impl Helper {
    /// Starts a helper on `job`; `handed`: a socket it gets as descriptor 3.
    pub fn start(job: &Value, handed: Option<RawFd>) -> Result<Helper> {
        let exe = engine_exe()?;
        let mut cmd = Command::new(&exe);
        cmd.arg("worker")
            .arg("--job")
            .arg(job.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let spawned = match handed {
            Some(fd) => sys::spawn_with_fd(&mut cmd, fd),
            None => cmd.spawn(),
        };
        let mut child = spawned.map_err(EngineError::io(format!(
            "cannot start a helper process ({}): check the process limit (ulimit -u)",
            exe.display()
        )))?;
        let stdin = child.stdin.take();
        let out = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name("conn-helper".into())
            .spawn(move || {
                let Some(out) = out else { return };
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
            .map_err(EngineError::io("cannot start a helper's reader thread"))?;
        Ok(Helper {
            child,
            stdin,
            lines,
            asked: 0,
        })
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let fail = EngineError::io("a helper process is gone (its stdin closed): see its stderr");
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            EngineError::Internal("a helper's stdin was closed: report this bug".into())
        })?;
        stdin
            .write_all(format!("{}\n", line).as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(fail)
    }

    /// The next line the helper reports, within `within`; its error record
    /// (or its end) is an error.
    pub fn recv(&mut self, within: Duration) -> Result<Value> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(EngineError::Measurement(format!(
                        "a helper process said nothing within {:.0} s: the host may be overloaded",
                        within.as_secs_f64()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(EngineError::Measurement(
                        "a helper process ended before its job was done: see its error above"
                            .into(),
                    ))
                }
            };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v.get("type").and_then(Value::as_str) == Some("error") {
                let msg = v.get("message").and_then(Value::as_str).unwrap_or("failed");
                return Err(EngineError::Measurement(format!(
                    "a helper process failed: {}",
                    msg
                )));
            }
            return Ok(v);
        }
    }

    /// Its state as it is now: asks `report N` and waits (within `within`) for
    /// the line with `"seq"` N; None if it does not answer in time.
    pub fn ask(&mut self, within: Duration) -> Option<Value> {
        self.asked += 1;
        let seq = self.asked;
        self.send(&format!("report {}", seq)).ok()?;
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.recv(left).ok()?;
            if v.get("seq")
                .and_then(Value::as_u64)
                .is_some_and(|s| s >= seq)
            {
                return Some(v);
            }
        }
    }

    /// The last line reported so far, if any (the others are dropped).
    pub fn latest(&mut self) -> Option<Value> {
        let mut last = None;
        while let Ok(line) = self.lines.try_recv() {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                last = Some(v);
            }
        }
        last
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Its stdin closes: it ends and drops its connections.
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many processes share `n` connections at most `per_process` each.
pub fn processes(n: u64, per_process: u64) -> u64 {
    n.div_ceil(per_process.max(1)).max(1)
}

/// The `i`-th of `parts` shares of `n` (the first ones one larger).
pub fn share(n: u64, parts: u64, i: u64) -> u64 {
    n / parts + u64::from(i < n % parts)
}
