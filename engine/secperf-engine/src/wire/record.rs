//! The NDJSON records the engine writes (see docs/engine-protocol.md), and
//! the sinks they go to. Kind-specific payloads (the flood's records, the
//! latency kind's directions) are plain data here: they are built by their
//! kind, and this module names no kind.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use crate::error::EngineError;

/// Format of the records (docs/engine-protocol.md): 2 since the spec fields
/// `message`, `request` and `response` (were `message_size`, `request_size`,
/// `response_size`) in the resolved spec of the `start` record.
pub const FORMAT: u32 = 2;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct SocketBufs {
    pub sndbuf: u64,
    pub rcvbuf: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuTimes {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTimes {
    pub fn minus(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            system_s: (self.system_s - earlier.system_s).max(0.0),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Listening {
    pub t: f64,
    pub listen: String,
    pub version: &'static str,
    pub pid: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct Clock {
    pub realtime_ns: u128,
    pub monotonic_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Host {
    pub hostname: String,
    pub kernel: String,
    pub cpus: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Start {
    pub t: f64,
    pub format: u32,
    pub engine: &'static str,
    pub version: &'static str,
    pub spec: Value,
    pub clock: Clock,
    pub local: Option<String>,
    pub data: String,
    pub socket: SocketBufs,
    pub server_socket: SocketBufs,
    pub host: Host,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct IntervalLatency {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Interval {
    pub t: f64,
    pub t_start: f64,
    pub t_end: f64,
    pub warmup: bool,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub messages: u64,
    pub transactions: u64,
    pub rate: f64,
    pub latency_us: Option<IntervalLatency>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Flow {
    pub bytes: u64,
    pub messages: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Loss {
    pub lost: u64,
    /// lost over what was sent (or tried); null when nothing was: a 0 would
    /// claim that nothing was lost of traffic that never existed.
    pub ratio: Option<f64>,
}

impl Loss {
    pub fn of(lost: u64, out_of: u64) -> Loss {
        Loss {
            lost,
            ratio: (out_of > 0).then(|| lost as f64 / out_of as f64),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SideCpu {
    pub client: CpuTimes,
    pub server: CpuTimes,
}

/// The whole machine's CPU over a test's window, from /proc/stat (ticks).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MachineCpu {
    pub busy_s: f64,
    pub total_s: f64,
    /// Time the kernel spent in softirq (forwarding, netfilter, veth) and
    /// hard interrupts, wherever it ran. Without CONFIG_IRQ_TIME_ACCOUNTING
    /// it is also inside the figure of the process it interrupted.
    pub softirq_s: f64,
    pub irq_s: f64,
    pub cpus: usize,
    /// Wall-clock length of the window (monotonic clock): on a VM whose vCPUs
    /// are descheduled, `total_s / cpus` falls short of it.
    pub window_s: f64,
}

/// CPU seconds of each testbed host over a test's window (its cgroup), by host name.
pub type HostCpu = std::collections::BTreeMap<String, f64>;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SideTotals {
    /// bytes_sent + bytes_received
    pub bytes: u64,
    /// messages_sent + messages_received
    pub messages: u64,
    pub transactions: u64,
    pub connections: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub lost: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Totals {
    pub client: SideTotals,
    pub server: SideTotals,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResultRecord {
    pub t: f64,
    pub kind: &'static str,
    pub protocol: &'static str,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub messages: u64,
    pub sender: Flow,
    pub receiver: Flow,
    pub loss: Option<Loss>,
    pub retransmits: Option<u64>,
    pub transactions: u64,
    pub transactions_per_second: f64,
    pub latency_us: LatencySummary,
    pub cpu: SideCpu,
    pub machine_cpu: MachineCpu,
    /// Each testbed host's CPU over the same window as machine_cpu.
    pub host_cpu: HostCpu,
    /// Stream: bytes received within the CPU window (the service demand's
    /// unit; `bytes` also counts what drained after it).
    pub window_bytes: Option<u64>,
    pub totals: Totals,
    /// crr: how each connection ended, `fin` or `reset` (the spec's `close`).
    pub close: Option<&'static str>,
    pub socket: SocketBufs,
    pub server_socket: SocketBufs,
    /// Kind latency: `c2s`, `s2c` and `combined`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub directions: Option<Directions>,
    /// Stream with `bytes`: the fixed transfer, as ttcp reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Transfer>,
}

/// A ttcp-style fixed transfer: `bytes` moved in `seconds`, from before the
/// connection opened to the last byte's arrival at the receiver;
/// `kib_per_second` = bytes / 1024 / seconds (ttcp's "KB/sec").
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Transfer {
    pub bytes: u64,
    pub seconds: f64,
    pub kib_per_second: f64,
}

// ------------------------------------------------------------ kind latency

/// A linear view of a delay histogram (kind latency).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LinearHistogram {
    pub unit: &'static str,
    pub bucket_us: f64,
    pub first_us: f64,
    pub counts: Vec<u64>,
    /// Delays beyond the last bucket (above about p99.9).
    pub overflow: u64,
}

/// One direction of a latency test (or both: `combined`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DirectionResult {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    /// lost / sent; null when nothing was sent.
    pub loss_ratio: Option<f64>,
    pub reordered: u64,
    /// Stamps that found no probe (their probe was lost) or were never sent.
    pub unmatched_stamps: u64,
    /// Measured probes without a kernel TX or RX stamp: counted, not in the delays.
    pub unstamped: u64,
    /// Probes the sending kernel refused (ENOBUFS and alike): not sent.
    pub send_failed: u64,
    pub rate_pps: f64,
    pub achieved_pps: f64,
    pub delay_us: LatencySummary,
    pub histogram: LinearHistogram,
    /// Latency under load: the whole stream of frames, probes included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadResult>,
}

/// The achieved load of one direction (or both): frames sent and received
/// in the measured window, beside the delays of the probes among them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadResult {
    pub sender: &'static str,
    /// Frames/s asked (load and probes together).
    pub asked_pps: f64,
    /// One frame in this many is a timestamped probe.
    pub probe_every: u64,
    pub frame_size: usize,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: Option<f64>,
    /// Frames sent / the sender's measured window.
    pub achieved_pps: f64,
    /// Frames received / the same window.
    pub received_pps: f64,
    /// achieved against asked, in %.
    pub rate_error_pct: f64,
    pub forfeited: u64,
    pub send_errors: u64,
    pub tx_stamps_missing: u64,
    pub probes_sent: u64,
    pub batch: usize,
    pub note: String,
    /// Where the receiver counted the load frames: "kernel (socket filter)", or
    /// "user space (…why)".
    pub counted_by: String,
    /// The sender's own ceiling, frames/s (both senders' summed in
    /// `combined`): unpaced to a blackhole before the load; null when not
    /// measured (`ceiling_note` says why).
    pub ceiling_pps: Option<f64>,
    pub ceiling_note: String,
}

/// The three views of a finished latency test.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Directions {
    pub c2s: DirectionResult,
    pub s2c: DirectionResult,
    pub combined: DirectionResult,
}

// ------------------------------------------------------------ kind flood

#[derive(Clone, Debug, Serialize)]
pub struct FloodStart {
    pub t: f64,
    pub format: u32,
    pub engine: &'static str,
    pub version: &'static str,
    pub spec: Value,
    pub clock: Clock,
    /// The source address (or range) packets carry.
    pub local: String,
    pub data: String,
    pub packet_size: usize,
    pub batch: usize,
    /// "packet" (AF_PACKET frames) or "raw" (IP_HDRINCL socket).
    pub sender: &'static str,
    /// Why that sender, and on which link.
    pub sender_note: String,
    pub host: Host,
}

#[derive(Clone, Debug, Serialize)]
pub struct FloodInterval {
    pub t: f64,
    pub t_start: f64,
    pub t_end: f64,
    pub warmup: bool,
    pub packets: u64,
    pub bytes: u64,
    /// packets/s in this interval
    pub rate: f64,
    pub bits_per_second: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FloodResult {
    pub t: f64,
    pub kind: &'static str,
    pub flood: &'static str,
    pub target: String,
    pub packets: u64,
    /// IP bytes (headers included) of the packets sent.
    pub bytes: u64,
    pub packet_size: usize,
    pub asked_pps: u64,
    pub rate_pps: f64,
    pub rate_error_pct: f64,
    pub bits_per_second: f64,
    pub duration_s: f64,
    /// Why it stopped: "duration", "count" or "signal" (SIGINT).
    pub stopped_by: &'static str,
    /// Packets sent in each whole second from the start (last one partial).
    pub per_second: Vec<u64>,
    /// Packets the schedule gave up because the sender fell more than one
    /// bucket behind (the CPU could not keep up).
    pub forfeited: u64,
    /// Packets the kernel refused (ENOBUFS, EPERM from a local filter).
    pub send_errors: u64,
    pub batch: usize,
    pub sender: &'static str,
    pub sender_note: String,
    pub cpu: CpuTimes,
    pub machine_cpu: MachineCpu,
    pub host_cpu: HostCpu,
}

// ------------------------------------------------------------ errors, all records

#[derive(Clone, Debug, Serialize)]
pub struct ErrorRecord {
    pub t: f64,
    pub kind: &'static str,
    pub field: Option<String>,
    pub message: String,
}

impl ErrorRecord {
    pub fn from_error(t: f64, e: &EngineError) -> ErrorRecord {
        ErrorRecord {
            t,
            kind: e.kind(),
            field: e.field().map(str::to_string),
            message: e.to_string(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Record {
    Listening(Listening),
    Start(Box<Start>),
    Interval(Interval),
    Result(Box<ResultRecord>),
    Error(ErrorRecord),
    /// A record built as JSON by a kind with its own result shape (http,
    /// connections); it carries its own `type`.
    #[serde(skip)]
    Json(Value),
    /// The flood kind's records carry the same `type` names as the others.
    #[serde(rename = "start")]
    FloodStart(Box<FloodStart>),
    #[serde(rename = "interval")]
    FloodInterval(FloodInterval),
    #[serde(rename = "result")]
    FloodResult(Box<FloodResult>),
}

impl Record {
    pub fn to_line(&self) -> String {
        if let Record::Json(v) = self {
            return v.to_string();
        }
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"type\":\"error\",\"t\":0.0,\"kind\":\"internal\",\"field\":null,\"message\":\"cannot serialize a record ({}): report this bug\"}}",
                e
            )
        })
    }
}

/// Where records go: stdout for the binary, a Vec in tests.
pub trait Sink {
    fn emit(&mut self, record: Record);
}

impl Sink for Vec<Record> {
    fn emit(&mut self, record: Record) {
        self.push(record);
    }
}

/// One record a line on stdout, flushed at once so a caller can poll.
#[derive(Default)]
pub struct StdoutSink;

impl Sink for StdoutSink {
    fn emit(&mut self, record: Record) {
        let mut out = std::io::stdout().lock();
        // A closed stdout leaves nobody to tell; the exit code still says it.
        let _ = writeln!(out, "{}", record.to_line());
        let _ = out.flush();
    }
}
