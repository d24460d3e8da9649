//! Kind `stream`: bulk transfer, or with `bytes` a fixed (ttcp-style) transfer.

use std::net::IpAddr;

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::rt::guard::size_words;
use crate::spec::common::{
    self, bind_of, interval_of, parallel_of, server_kind_raw, size, socket_buffer_of,
    sysctl_numbers, warmup_of, Common, Direction, KindSpec, Names, Payload, Protocol, TCP_MAX,
};
use crate::spec::resolved::Resolved;
use crate::spec::serving::{self, need, Declared, Need, DATAGRAM};

/// Streams of messages this large or larger wake their receiver once per
/// message by default (`rcvlowat` = message size); smaller ones on any data.
/// docs/performance.md has the measurements behind the choice.
pub const RCVLOWAT_FROM: usize = 128 << 10;
/// The default low-water mark stays below half of the smallest usual
/// `net.ipv4.tcp_rmem` maximum (the kernel caps it there).
pub const RCVLOWAT_DEFAULT_MAX: usize = 2 << 20;
/// Most bytes one fixed transfer may move (1 TiB).
pub const TRANSFER_MAX: u64 = 1 << 40;

server_kind_raw! {
    /// A stream spec as given.
    struct Raw {
        /// Run but excluded from the result.
        /// Value: float, default 1, 0 ≤ w ≤ 600
        warmup: Option<f64>,
        /// Interval record period.
        /// Value: float, default 1; 0 = no interval records; else ≥ 0.01
        interval: Option<f64>,
        /// Client-side source address for data connections.
        /// Value: address, optional, same family as `server`
        bind: Option<IpAddr>,
        /// Fixed server data port (for ACLs that match ports); default: the server picks one
        /// (from its `--data-ports` range if given, else ephemeral)
        /// Value: u16, optional
        data_port: Option<u16>,
        /// Fixed client source port; stream connection *i* (0-based, senders first) uses
        /// `client_port + i`.
        /// Value: u16, optional
        client_port: Option<u16>,
        /// SO_SNDBUF and SO_RCVBUF on both sides; above `net.core.{w,r}mem_max` (on either
        /// host: the server checks its own) is an error; the granted sizes are reported.
        /// Value: bytes ≥ 1024, optional
        socket_buffer: Option<u64>,
        /// TCP_NODELAY.
        /// Value: bool, default true for rr/crr, false for stream
        nodelay: Option<bool>,
        /// Value: `"send"` (client→server) | `"receive"` | `"both"`, default send
        direction: Option<Direction>,
        /// Size of each write (TCP receivers read max(message, 128 KiB, `rcvlowat`) at a time)
        /// Value: bytes ≥ 1, default 131072 (tcp), 1024 (udp); UDP ≤ 65507, TCP ≤ 64 MiB
        #[serde(alias = "message_size")]
        message: Option<u64>,
        /// SO_RCVLOWAT of every receiving data socket (both sides): a blocked read wakes once
        /// this much is queued (or at EOF, or after its 250 ms timeout) instead of at every
        /// arriving packet. Each wake-up of a sleeping reader costs the sending CPU an
        /// inter-processor interrupt; for large messages that, not copying, limits the rate
        /// (docs/performance.md, "The receiver's wake-ups"). 1 = the kernel's default. A given
        /// value above `socket_buffer`, or above half of `net.ipv4.tcp_rmem`'s maximum (where
        /// the kernel would cap it), is an error; paced streams default to 1 so that interval
        /// figures are not lumped into message-sized steps.
        /// Value: bytes 1 ..= 64 MiB; default `message` (at most 2 MiB, and at most
        /// `socket_buffer` if given) when `message` ≥ 128 KiB and `rate_bps` is absent, else 1
        rcvlowat: Option<u64>,
        /// Stream: streams (threads); crr: connections under way at once (each a loop: connect,
        /// request, response, close, again), machines of the event loop.
        /// Value: int 1..=128 (stream), 1..=1024 (crr), default 1
        parallel: Option<u64>,
        /// Text is compressible English-like text.
        /// Value: `"random"` | `"zeros"` | `"text"`, default random
        payload: Option<Payload>,
        /// Pace the sender(s) to this total rate (token bucket against an absolute schedule, so
        /// it does not drift; bucket = max(10 ms, 2 messages)); the total is split evenly over
        /// all sending streams (`both`: 2 × `parallel`); absent = as fast as possible (for UDP
        /// an unpaced blast)
        /// Value: u64 ≥ 1, optional
        rate_bps: Option<u64>,
        /// A **fixed transfer** (ttcp's): exactly this many bytes on one connection in one
        /// direction (`direction` `send` or `receive`, `parallel` 1; the last message is cut to
        /// fit), timed from before the connection opens to the last byte's arrival at the
        /// receiver. `warmup` is then 0 (any other value is an error: the whole transfer is
        /// measured) and `duration` is the time limit: a transfer not done by then is a
        /// `measurement` error, never a partial figure. The sender's thread ends once the peer
        /// has acknowledged every byte (SIOCOUTQ = 0), so the end needs no polling of the
        /// server; the result has `transfer`.
        /// Value: u64 1 ..= 2^40, optional
        bytes: Option<u64>,
    }
}

/// A resolved stream spec.
#[derive(Clone, Debug, Serialize)]
pub struct StreamSpec {
    #[serde(flatten)]
    pub common: Common,
    pub warmup: f64,
    pub interval: f64,
    pub bind: Option<IpAddr>,
    pub data_port: Option<u16>,
    pub client_port: Option<u16>,
    pub socket_buffer: Option<u64>,
    pub nodelay: bool,
    pub direction: Direction,
    /// Bytes of each write.
    pub message: usize,
    /// TCP receivers: SO_RCVLOWAT, the bytes queued before a blocked read
    /// wakes (1 = the kernel's default, wake on any data).
    pub rcvlowat: usize,
    pub parallel: usize,
    pub payload: Payload,
    /// Pacing: the total rate of all senders, bits/s (None: as fast as possible).
    pub rate_bps: Option<u64>,
    /// A ttcp-style fixed transfer of this many bytes (`duration` is then
    /// its time limit, and there is no warm-up).
    pub bytes: Option<u64>,
}

impl KindSpec for StreamSpec {
    const NAME: &'static str = "stream";
    const PROTOCOL: Option<Protocol> = Some(Protocol::Tcp);
    const PROTOCOL_ONLY: &'static [(&'static str, Protocol)] = &[
        ("nodelay", Protocol::Tcp),
        ("rcvlowat", Protocol::Tcp),
        ("bytes", Protocol::Tcp),
    ];
    type Raw = Raw;

    fn protocol(&self) -> Option<Protocol> {
        Some(self.common.protocol)
    }

    fn resolve(raw: Raw, names: &Names) -> Result<StreamSpec> {
        let protocol = raw.protocol.unwrap_or(Protocol::Tcp);
        let common = Common::resolve(raw.server, protocol, raw.duration, raw.cpu_groups)?;
        let warmup = warmup_of(raw.warmup)?;
        let interval = interval_of(raw.interval)?;
        let warmup = fixed_transfer(raw.bytes, raw.warmup, raw.direction, raw.parallel, warmup)?;
        let bind = bind_of(raw.bind, common.server)?;
        let socket_buffer = socket_buffer_of(raw.socket_buffer)?;
        let parallel = parallel_of(raw.parallel, 128)?;
        let default_msg = match protocol {
            Protocol::Tcp => 131072,
            Protocol::Udp => 1024,
        };
        let message = size(names.of("message"), raw.message, default_msg, protocol)?;
        let rcvlowat = rcvlowat_of(raw.rcvlowat, raw.rate_bps, raw.socket_buffer, message)?;
        if raw.rate_bps == Some(0) {
            return Err(EngineError::spec(
                "rate_bps",
                "rate_bps 0 sends nothing: give a rate in bits/s such as 100000000, or leave it out for no pacing",
            ));
        }
        Ok(StreamSpec {
            common,
            warmup,
            interval,
            bind,
            data_port: raw.data_port,
            client_port: raw.client_port,
            socket_buffer,
            nodelay: raw.nodelay.unwrap_or(false),
            direction: raw.direction.unwrap_or(Direction::Send),
            message,
            rcvlowat,
            parallel,
            payload: raw.payload.unwrap_or(Payload::Random),
            rate_bps: raw.rate_bps,
            bytes: raw.bytes,
        })
    }
}

impl StreamSpec {
    /// Refuses an `rcvlowat` the kernel would silently cap: above half of
    /// `net.ipv4.tcp_rmem`'s maximum, or above a fixed `socket_buffer`. (The
    /// server gets the resolved spec, so given and default values alike.)
    fn check_rcvlowat_limit(&self) -> Result<()> {
        if self.rcvlowat <= 1 || self.common.protocol != Protocol::Tcp {
            return Ok(());
        }
        let want = self.rcvlowat as u64;
        if let Some(buf) = self.socket_buffer {
            if want > buf {
                return Err(EngineError::spec(
                    "rcvlowat",
                    format!(
                        "rcvlowat {} is above socket_buffer {}: the kernel would cap it there; use at most {}",
                        want, buf, buf
                    ),
                ));
            }
            return Ok(());
        }
        if let Some(&[min, default, max]) = sysctl_numbers("net/ipv4/tcp_rmem").as_deref() {
            if want > max / 2 {
                return Err(EngineError::spec(
                    "rcvlowat",
                    format!(
                        "rcvlowat {} (the default is the message size, at most 2 MiB) is above half of net.ipv4.tcp_rmem's maximum ({}) on this host, where the kernel caps it: \
                         give rcvlowat of at most {} or raise the maximum (sysctl -w net.ipv4.tcp_rmem=\"{} {} {}\")",
                        want, max, max / 2, min, default, want * 2
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `rcvlowat`: given, 1 ..= TCP_MAX; by default the message size for
/// unpaced streams of large messages (one wake-up per message instead of one
/// per arriving packet), else 1. A paced stream keeps 1 so that its interval
/// figures are not lumped into message-sized steps. The default stays within
/// what the kernel keeps (a fixed `socket_buffer` caps it), so the resolved
/// spec shows the value in force.
fn rcvlowat_of(
    given: Option<u64>,
    rate_bps: Option<u64>,
    socket_buffer: Option<u64>,
    message: usize,
) -> Result<usize> {
    match given {
        Some(0) => Err(EngineError::spec(
            "rcvlowat",
            "rcvlowat must be at least 1 byte (got 0): give 1 to wake the receiver on any data, or leave it out",
        )),
        Some(v) if v > TCP_MAX as u64 => Err(EngineError::spec(
            "rcvlowat",
            format!(
                "rcvlowat {} is above 64 MiB ({} bytes): use at most {}, or leave it out",
                v, TCP_MAX, TCP_MAX
            ),
        )),
        Some(v) => Ok(v as usize),
        None if message >= RCVLOWAT_FROM && rate_bps.is_none() => {
            let fixed = socket_buffer.map_or(usize::MAX, |b| b as usize);
            Ok(message.min(RCVLOWAT_DEFAULT_MAX).min(fixed))
        }
        None => Ok(1),
    }
}

/// A fixed transfer (`bytes`): one connection in one direction, timed from its
/// start to the last byte's arrival, so a warm-up has no meaning (0, and any
/// other value is refused). Returns the warm-up to use.
fn fixed_transfer(
    bytes: Option<u64>,
    raw_warmup: Option<f64>,
    direction: Option<Direction>,
    parallel: Option<u64>,
    warmup: f64,
) -> Result<f64> {
    let Some(n) = bytes else {
        return Ok(warmup);
    };
    if !(1..=TRANSFER_MAX).contains(&n) {
        return Err(EngineError::spec(
            "bytes",
            format!(
                "bytes must be 1..={} (got {}): give e.g. 67108864 (64 MiB)",
                TRANSFER_MAX, n
            ),
        ));
    }
    if raw_warmup.is_some_and(|w| w != 0.0) {
        return Err(EngineError::spec(
            "warmup",
            "a fixed transfer (bytes) is timed from its first byte to its last: remove warmup or give 0",
        ));
    }
    if direction == Some(Direction::Both) {
        return Err(EngineError::spec(
            "direction",
            "a fixed transfer (bytes) goes one way, as ttcp's: give direction \"send\" or \"receive\"",
        ));
    }
    if parallel.is_some_and(|p| p != 1) {
        return Err(EngineError::spec(
            "parallel",
            "a fixed transfer (bytes) is one connection, as ttcp's: remove parallel or give 1",
        ));
    }
    Ok(0.0)
}

/// TCP stream receivers read at least this much at once (kinds/stream.rs).
const MIN_READ: u64 = 128 << 10;

impl Resolved for StreamSpec {
    fn total_seconds(&self) -> f64 {
        self.warmup + self.common.duration
    }

    fn targets(&self) -> Vec<(String, IpAddr)> {
        self.common.server_target()
    }

    /// A socket buffer or an `rcvlowat` this host's sysctls would silently cap.
    fn check_local_limits(&self) -> Result<()> {
        self.check_rcvlowat_limit()?;
        common::check_socket_buffer(self.socket_buffer)
    }

    fn declared_sources(&self) -> Vec<Declared> {
        serving::bind(&self.bind)
    }

    /// `parallel` per direction (TCP).
    fn data_connections(&self) -> Option<u64> {
        let dirs = if self.direction == Direction::Both {
            2
        } else {
            1
        };
        (self.common.protocol == Protocol::Tcp).then_some(self.parallel as u64 * dirs)
    }

    /// A read buffer per receiving stream, one shared message.
    fn server_need(&self) -> Need {
        let msg = self.message as u64;
        let (receivers, read) = match self.common.protocol {
            Protocol::Tcp => (
                if self.direction.client_sends() {
                    self.parallel as u64
                } else {
                    0
                },
                msg.max(MIN_READ).max(self.rcvlowat as u64),
            ),
            Protocol::Udp => (
                if self.direction == Direction::Receive {
                    1
                } else {
                    self.parallel as u64
                },
                DATAGRAM,
            ),
        };
        // The senders share one message.
        let send = if self.direction.client_receives() {
            msg
        } else {
            0
        };
        need(
            receivers * read + send,
            "message",
            format!(
                "{} receiving streams × {} read buffer + {} shared send buffer",
                receivers,
                size_words(read),
                size_words(send)
            ),
        )
    }
}
