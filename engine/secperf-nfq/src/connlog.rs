//! The connection log: one JSON line per new connection, each connection once.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::error::{NfqError, Result};
use crate::packet::FiveTuple;
use crate::timefmt::rfc3339;

/// One line of the connection log (field names are part of the log's format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// When the daemon saw the connection's first packet (RFC 3339, UTC).
    pub time: String,
    pub family: u8,
    pub proto: String,
    pub src: String,
    pub sport: Option<u16>,
    pub dst: String,
    pub dport: Option<u16>,
    /// The queue the packet came from.
    pub queue: u16,
}

impl LogLine {
    pub fn new(t: SystemTime, tuple: &FiveTuple, queue: u16) -> LogLine {
        LogLine {
            time: rfc3339(t),
            family: tuple.family(),
            proto: tuple.proto_name(),
            src: tuple.src.to_string(),
            sport: tuple.sport,
            dst: tuple.dst.to_string(),
            dport: tuple.dport,
            queue,
        }
    }

    /// The line as written: compact JSON, no trailing newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a LogLine always serialises")
    }
}

/// Connections already logged, so that a flow whose packets keep the NEW state
/// (a one-way UDP stream: conntrack calls it NEW until a reply is seen, so
/// every packet is queued) is logged once. Bounded: the oldest entry goes first.
#[derive(Debug)]
pub struct SeenSet {
    set: HashSet<FiveTuple>,
    order: VecDeque<FiveTuple>,
    cap: usize,
}

impl SeenSet {
    pub fn new(cap: usize) -> SeenSet {
        SeenSet {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// True the first time a tuple is offered (it is then remembered).
    pub fn first_time(&mut self, tuple: &FiveTuple) -> bool {
        if self.set.contains(tuple) {
            return false;
        }
        if self.order.len() == self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(*tuple);
        self.order.push_back(*tuple);
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The log file, appended to and flushed line by line (a killed daemon loses nothing written).
pub struct ConnLog {
    path: PathBuf,
    out: BufWriter<File>,
    pub written: u64,
}

impl ConnLog {
    pub fn open(path: &Path) -> Result<ConnLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| NfqError::Log {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(ConnLog {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
            written: 0,
        })
    }

    pub fn write(&mut self, line: &LogLine) -> Result<()> {
        let err = |source| NfqError::Log {
            path: self.path.clone(),
            source,
        };
        writeln!(self.out, "{}", line.to_json()).map_err(err)?;
        self.out.flush().map_err(|source| NfqError::Log {
            path: self.path.clone(),
            source,
        })?;
        self.written += 1;
        Ok(())
    }
}
