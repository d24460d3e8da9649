//! The control protocol: newline-delimited JSON on the control TCP
//! connection, one request and one reply at a time. The replies' payloads
//! (a side's counters, the latency kind's side report) are plain data here.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::wire::record::{CpuTimes, SideTotals, SocketBufs};

// A latency `finish` reply carries delay histograms.
const MAX_LINE: usize = 16 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    Setup { spec: Value },
    Snapshot,
    Finish,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SetupReply {
    pub ok: bool,
    pub data_port: u16,
    pub socket: SocketBufs,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct CountersReply {
    pub ok: bool,
    #[serde(flatten)]
    pub counters: Counters,
    /// A data-path failure on the server side (finish only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Kind-specific server state (connections: held, validated, FINs seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
    /// Kind latency: the server's own measurements (finish only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<SideReport>,
}

/// One side's counters at one moment; the `snapshot`/`finish` reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    pub bytes: u64,
    pub messages: u64,
    pub transactions: u64,
    pub connections: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub lost: u64,
    pub retransmits: u64,
    pub cpu_user_s: f64,
    pub cpu_system_s: f64,
    /// When this snapshot was taken, ns since the side's test epoch.
    pub t_ns: u64,
    /// When the last byte arrived, ns since the same epoch (0: none yet).
    pub t_last_byte_ns: u64,
}

impl Counters {
    pub fn cpu(&self) -> CpuTimes {
        CpuTimes {
            user_s: self.cpu_user_s,
            system_s: self.cpu_system_s,
        }
    }

    pub fn totals(&self) -> SideTotals {
        SideTotals {
            bytes: self.bytes,
            messages: self.messages,
            transactions: self.transactions,
            connections: self.connections,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            messages_sent: self.messages_sent,
            messages_received: self.messages_received,
            lost: self.lost,
        }
    }
}

// ------------------------------------------------------------ kind latency

/// What one side of a latency test measured: the direction it sent and the
/// one it received (the server's goes to the client in its `finish` reply).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SideReport {
    pub tx: TxReport,
    pub rx: RxReport,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TxReport {
    pub sent: u64,
    pub send_failed: u64,
    pub dropped_stamps: u64,
    pub window_ns: u64,
    /// Latency under load: the whole stream's sender (None: socket probes).
    #[serde(default)]
    pub load: Option<LoadTx>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RxReport {
    pub received: u64,
    pub reordered: u64,
    pub unmatched: u64,
    pub unstamped: u64,
    #[serde(default)]
    pub load_received: u64,
    /// Where the load frames were counted: "kernel (socket filter)", or
    /// "user space (…why)".
    #[serde(default)]
    pub load_counter: String,
    /// (value ns, count) of every non-empty bucket of the delay histogram.
    pub hist: Vec<[u64; 2]>,
}

/// What one direction's load sender did (latency under load).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadTx {
    /// Frames (load and probes) sent in the measured window.
    pub sent: u64,
    /// First to last measured frame, plus one slot.
    pub window_ns: u64,
    /// Slots the schedule gave up because the sender fell more than
    /// its bucket behind (the CPU could not keep up), in the measured window.
    pub forfeited: u64,
    /// Frames the kernel refused (ENOBUFS and alike), in the measured window.
    pub send_errors: u64,
    /// Probes whose kernel TX stamp never came back (not in the delays).
    pub tx_stamps_missing: u64,
    pub probes_sent: u64,
    pub batch: usize,
    pub note: String,
    /// The sender's own ceiling, frames/s: unpaced to a blackhole before
    /// the load (None: not measured, `ceiling_note` says why).
    #[serde(default)]
    pub ceiling_pps: Option<f64>,
    #[serde(default)]
    pub ceiling_note: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorReply {
    pub ok: bool,
    pub kind: String,
    pub field: Option<String>,
    pub message: String,
}

impl ErrorReply {
    pub fn from_error(e: &EngineError) -> ErrorReply {
        ErrorReply {
            ok: false,
            kind: e.kind().to_string(),
            field: e.field().map(str::to_string),
            message: e.to_string(),
        }
    }
}

/// Outcome of waiting for one line.
pub enum Recv {
    Line(Value),
    Eof,
    TimedOut,
}

/// A control connection with its own line buffer (so a read timeout never
/// loses part of a line).
pub struct LineConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl LineConn {
    pub fn new(stream: TcpStream) -> LineConn {
        // Control messages are small and must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        LineConn {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    pub fn send<T: Serialize>(&mut self, msg: &T) -> io::Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
        line.push(b'\n');
        self.stream.write_all(&line)
    }

    /// Waits up to `timeout` for one complete line.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Recv> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let v = serde_json::from_slice(&line).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("bad control line: {}", e),
                    )
                })?;
                return Ok(Recv::Line(v));
            }
            if self.buf.len() > MAX_LINE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "control line longer than 1 MiB",
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Recv::TimedOut);
            }
            self.stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(Recv::Eof),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Client side: one request, one reply; `ok:false` becomes a Server error.
    pub fn call<T: for<'de> Deserialize<'de>>(
        &mut self,
        req: &Request,
        timeout: Duration,
    ) -> Result<T> {
        let what = match req {
            Request::Setup { .. } => "setup",
            Request::Snapshot => "snapshot",
            Request::Finish => "finish",
        };
        self.send(req).map_err(EngineError::io(format!(
            "cannot send `{}` to the server: check that the server is still running",
            what
        )))?;
        let reply = match self.recv(timeout).map_err(EngineError::io(format!(
            "no valid reply to `{}` from the server: check the server's stderr",
            what
        )))? {
            Recv::Line(v) => v,
            Recv::Eof => {
                return Err(EngineError::Server {
                    field: None,
                    message: format!(
                        "the server closed the control connection during `{}`: check the server's stderr and that it still runs",
                        what
                    ),
                })
            }
            Recv::TimedOut => {
                return Err(EngineError::Server {
                    field: None,
                    message: format!(
                        "no reply to `{}` within {:.0} s: check that the server is alive and the path between the hosts",
                        what,
                        timeout.as_secs_f64()
                    ),
                })
            }
        };
        if reply.get("ok").and_then(Value::as_bool) != Some(true) {
            let e: ErrorReply = serde_json::from_value(reply.clone()).unwrap_or(ErrorReply {
                ok: false,
                kind: "server".into(),
                field: None,
                message: format!("unexpected reply {}", reply),
            });
            return Err(match e.kind.as_str() {
                "spec" => EngineError::Spec {
                    field: e.field,
                    message: format!("the server refused the spec: {}", e.message),
                },
                "target" => EngineError::Target {
                    field: e.field.unwrap_or_else(|| "server".into()),
                    message: e.message,
                },
                _ => EngineError::Server {
                    field: e.field,
                    message: e.message,
                },
            });
        }
        serde_json::from_value(reply).map_err(|e| EngineError::Server {
            field: None,
            message: format!(
                "malformed reply to `{}` ({}): run the same engine version on both sides",
                what, e
            ),
        })
    }
}
