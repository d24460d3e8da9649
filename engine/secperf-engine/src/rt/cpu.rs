//! CPU accounting: per-thread CPU of a test's threads, whole-machine CPU
//! from /proc/stat, and the host description.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::rt::sys;
use crate::wire::record::{CpuTimes, Host, HostCpu, MachineCpu};

/// One test thread's CPU: read live from /proc while it runs (tick
/// resolution), exact from getrusage(RUSAGE_THREAD) once it has ended.
pub struct CpuSlot {
    tid: i32,
    done: Mutex<Option<CpuTimes>>,
}

impl CpuSlot {
    /// Registers the calling thread.
    pub fn for_current_thread() -> CpuSlot {
        CpuSlot {
            tid: sys::gettid(),
            done: Mutex::new(None),
        }
    }

    /// Called by the thread itself as it ends.
    pub fn finish(&self) {
        let t = sys::thread_cpu();
        if let Ok(mut g) = self.done.lock() {
            *g = Some(t);
        }
    }

    pub fn read(&self) -> CpuTimes {
        if let Ok(g) = self.done.lock() {
            if let Some(t) = *g {
                return t;
            }
        }
        match task_cpu(self.tid) {
            Some(t) => t,
            // The thread ended between the two looks: its final figure is there now.
            None => self.done.lock().ok().and_then(|g| *g).unwrap_or_default(),
        }
    }
}

/// utime and stime of one thread of this process from /proc.
fn task_cpu(tid: i32) -> Option<CpuTimes> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{}/stat", tid)).ok()?;
    parse_stat_times(&text)
}

/// Fields 14 and 15 (utime, stime) of a /proc/*/stat line; the command name
/// in parentheses may hold spaces, so fields are counted after the last ')'.
pub fn parse_stat_times(text: &str) -> Option<CpuTimes> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut it = rest.split_whitespace().skip(11);
    let utime: f64 = it.next()?.parse().ok()?;
    let stime: f64 = it.next()?.parse().ok()?;
    let hz = sys::clk_tck();
    Some(CpuTimes {
        user_s: utime / hz,
        system_s: stime / hz,
    })
}

pub fn sum(slots: &[std::sync::Arc<CpuSlot>]) -> CpuTimes {
    let mut total = CpuTimes::default();
    for s in slots {
        let t = s.read();
        total.user_s += t.user_s;
        total.system_s += t.system_s;
    }
    total
}

/// One reading of /proc/stat's aggregate line, in ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStat {
    pub total: u64,
    pub idle: u64,
    pub irq: u64,
    pub softirq: u64,
    pub cpus: usize,
}

impl ProcStat {
    /// The machine's counters now; an unreadable /proc/stat is an error, never 0 CPU.
    pub fn read() -> Result<ProcStat> {
        let text = std::fs::read_to_string("/proc/stat").map_err(EngineError::io(
            "cannot read /proc/stat for the machine's CPU",
        ))?;
        ProcStat::parse(&text).ok_or_else(|| {
            EngineError::Internal(
                "/proc/stat has no aggregate `cpu` line: the machine's CPU cannot be measured"
                    .into(),
            )
        })
    }

    /// busy = total − idle − iowait − steal; guest time is already in user.
    pub fn parse(text: &str) -> Option<ProcStat> {
        let mut out = ProcStat::default();
        let mut found = false;
        for line in text.lines() {
            let mut f = line.split_whitespace();
            match f.next() {
                Some("cpu") => {
                    let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
                    if v.len() < 8 {
                        return None;
                    }
                    // user nice system idle iowait irq softirq steal
                    out.total = v[..8].iter().sum();
                    out.idle = v[3] + v[4] + v[7];
                    out.irq = v[5];
                    out.softirq = v[6];
                    found = true;
                }
                Some(name) if name.starts_with("cpu") => out.cpus += 1,
                _ => {}
            }
        }
        found.then_some(out)
    }

    pub fn since(&self, earlier: &ProcStat) -> MachineCpu {
        let hz = sys::clk_tck();
        let ticks = |a: u64, b: u64| a.saturating_sub(b) as f64 / hz;
        let total = ticks(self.total, earlier.total);
        let idle = ticks(self.idle, earlier.idle);
        MachineCpu {
            busy_s: (total - idle).max(0.0),
            total_s: total,
            softirq_s: ticks(self.softirq, earlier.softirq),
            irq_s: ticks(self.irq, earlier.irq),
            cpus: self.cpus,
            // set by CpuProbe::window, which knows when the two readings were taken
            window_s: 0.0,
        }
    }
}

/// A testbed host's CPU counter: a cgroup that secperf made for the host and
/// put every process it starts there into. `path` is the counter file:
/// cgroup v1 `cpuacct.usage` (ns) or cgroup v2 `cpu.stat` (`usage_usec`).
/// `fd`, when given, is that file opened by the caller and inherited: inside
/// `ip netns exec` /sys is remounted for the namespace and the path is not
/// visible, but /proc/self/fd/N still reaches the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuGroup {
    pub host: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i32>,
}

impl CpuGroup {
    /// Refuses a path that is not a cgroup CPU counter (the spec names it).
    pub fn check(&self) -> Result<()> {
        let ok_name = self.path.ends_with("/cpuacct.usage") || self.path.ends_with("/cpu.stat");
        if !self.path.starts_with("/sys/fs/cgroup/") || !ok_name || self.path.contains("/../") {
            return Err(EngineError::spec(
                "cpu_groups",
                format!(
                    "cpu_groups: {:?} for host {:?} is not a cgroup CPU counter: give a \
                     /sys/fs/cgroup/.../cpuacct.usage (v1) or .../cpu.stat (v2) file",
                    self.path, self.host
                ),
            ));
        }
        if matches!(self.fd, Some(fd) if fd < 0) {
            return Err(EngineError::spec(
                "cpu_groups",
                format!(
                    "cpu_groups: fd {:?} of host {:?} is not a file descriptor",
                    self.fd, self.host
                ),
            ));
        }
        if self.host.is_empty() {
            return Err(EngineError::spec(
                "cpu_groups",
                "cpu_groups: every entry needs a host name",
            ));
        }
        Ok(())
    }

    /// CPU seconds the group has used since it was made.
    pub fn read(&self) -> Result<f64> {
        let file = match self.fd {
            Some(fd) => format!("/proc/self/fd/{}", fd),
            None => self.path.clone(),
        };
        let text = std::fs::read_to_string(&file).map_err(EngineError::io(format!(
            "cannot read the CPU counter of host {} ({} as {})",
            self.host, self.path, file
        )))?;
        parse_group_usage(&self.path, &text).ok_or_else(|| {
            EngineError::Internal(format!(
                "the CPU counter of host {} ({}) holds no usage figure: {:?}",
                self.host,
                self.path,
                text.chars().take(80).collect::<String>()
            ))
        })
    }
}

/// Seconds from a cgroup counter's text: `cpuacct.usage` is one number of
/// nanoseconds, `cpu.stat` has a `usage_usec N` line.
pub fn parse_group_usage(path: &str, text: &str) -> Option<f64> {
    if path.ends_with("cpu.stat") {
        let line = text.lines().find(|l| l.starts_with("usage_usec "))?;
        let usec: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(usec as f64 / 1e6)
    } else {
        let ns: u64 = text.trim().parse().ok()?;
        Some(ns as f64 / 1e9)
    }
}

/// The machine's and every testbed host's CPU counters at one instant.
#[derive(Clone, Debug, Default)]
pub struct CpuReading {
    stat: ProcStat,
    groups: Vec<f64>,
    at: Option<std::time::Instant>,
}

/// Reads the counters of a test's CPU window: at the warm-up boundary and at
/// the end of the measured window, the same instants as the traffic counters.
#[derive(Clone, Debug, Default)]
pub struct CpuProbe {
    groups: Vec<CpuGroup>,
}

impl CpuProbe {
    pub fn new(groups: &[CpuGroup]) -> CpuProbe {
        CpuProbe {
            groups: groups.to_vec(),
        }
    }

    pub fn read(&self) -> Result<CpuReading> {
        // /proc/stat last: the groups' reads are the slower part.
        let groups = self
            .groups
            .iter()
            .map(CpuGroup::read)
            .collect::<Result<Vec<f64>>>()?;
        Ok(CpuReading {
            stat: ProcStat::read()?,
            groups,
            at: Some(std::time::Instant::now()),
        })
    }

    /// The window's machine CPU and each host's CPU seconds.
    pub fn window(&self, start: &CpuReading, end: &CpuReading) -> (MachineCpu, HostCpu) {
        let hosts = self
            .groups
            .iter()
            .zip(start.groups.iter().zip(&end.groups))
            .map(|(g, (a, b))| (g.host.clone(), (b - a).max(0.0)))
            .collect();
        let mut machine = end.stat.since(&start.stat);
        machine.window_s = match (start.at, end.at) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        (machine, hosts)
    }
}

pub fn host() -> Host {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    Host {
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_skip_command_with_spaces() {
        let line = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        let t = parse_stat_times(line).expect("parsed");
        let hz = sys::clk_tck();
        assert!((t.user_s - 250.0 / hz).abs() < 1e-9);
        assert!((t.system_s - 50.0 / hz).abs() < 1e-9);
    }

    #[test]
    fn proc_stat_busy_excludes_idle_iowait_steal() {
        let a = ProcStat::parse("cpu  100 0 100 1000 10 0 0 5 0 0\ncpu0 1\ncpu1 1\n").unwrap();
        let b = ProcStat::parse("cpu  200 0 200 1100 20 3 40 15 0 0\ncpu0 1\ncpu1 1\n").unwrap();
        assert_eq!(a.cpus, 2);
        let m = b.since(&a);
        let hz = sys::clk_tck();
        assert!((m.total_s - 363.0 / hz).abs() < 1e-9);
        assert!((m.busy_s - 243.0 / hz).abs() < 1e-9);
        assert!((m.softirq_s - 40.0 / hz).abs() < 1e-9);
        assert!((m.irq_s - 3.0 / hz).abs() < 1e-9);
    }

    #[test]
    fn proc_stat_without_cpu_line_is_none_not_zero() {
        assert!(ProcStat::parse("intr 1 2 3\n").is_none());
        assert!(ProcStat::parse("cpu 1 2 3\n").is_none());
    }

    #[test]
    fn group_usage_v1_and_v2() {
        let v1 = parse_group_usage("/sys/fs/cgroup/cpuacct/x/cpuacct.usage", "2500000000\n");
        assert_eq!(v1, Some(2.5));
        let v2 = parse_group_usage(
            "/sys/fs/cgroup/x/cpu.stat",
            "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
        );
        assert_eq!(v2, Some(1.5));
        assert_eq!(
            parse_group_usage("/sys/fs/cgroup/x/cpu.stat", "user_usec 1\n"),
            None
        );
    }

    #[test]
    fn group_paths_are_checked() {
        let g = |p: &str| CpuGroup {
            host: "client".into(),
            path: p.into(),
            fd: None,
        };
        assert!(g("/sys/fs/cgroup/cpuacct/sp1-client/cpuacct.usage")
            .check()
            .is_ok());
        assert!(g("/sys/fs/cgroup/unified/sp1-client/cpu.stat")
            .check()
            .is_ok());
        assert!(g("/etc/passwd").check().is_err());
        assert!(g("/sys/fs/cgroup/x/../../../etc/cpu.stat").check().is_err());
    }

    #[test]
    fn probe_reads_a_group_over_a_window() {
        let dir = std::env::temp_dir().join(format!("secperf-cpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cpuacct.usage");
        std::fs::write(&file, "1000000000\n").unwrap();
        // Not under /sys/fs/cgroup: the probe reads what it is given (check() guards specs).
        let probe = CpuProbe::new(&[CpuGroup {
            host: "dut".into(),
            path: file.to_string_lossy().into_owned(),
            fd: None,
        }]);
        let a = probe.read().unwrap();
        std::fs::write(&file, "1750000000\n").unwrap();
        let b = probe.read().unwrap();
        let (_, hosts) = probe.window(&a, &b);
        assert!((hosts["dut"] - 0.75).abs() < 1e-9);
        std::fs::remove_file(&file).unwrap();
        let missing = probe.read();
        assert!(
            missing.is_err(),
            "a counter that cannot be read is an error, not 0 CPU"
        );
        let _ = std::fs::remove_dir(&dir);
    }
}
