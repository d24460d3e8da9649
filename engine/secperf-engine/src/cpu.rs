//! CPU accounting: per-thread CPU of a test's threads, whole-machine CPU
//! from /proc/stat, and the host description.

use std::sync::Mutex;

use crate::record::{CpuTimes, Host, MachineCpu};
use crate::sys;

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

/// One reading of the aggregate line of /proc/stat, in ticks.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStat {
    pub total: u64,
    pub idle: u64,
    pub cpus: usize,
}

impl ProcStat {
    pub fn read() -> ProcStat {
        std::fs::read_to_string("/proc/stat")
            .map(|s| ProcStat::parse(&s))
            .unwrap_or_default()
    }

    /// busy = total − idle − iowait − steal; guest time is already in user.
    pub fn parse(text: &str) -> ProcStat {
        let mut out = ProcStat::default();
        for line in text.lines() {
            let mut f = line.split_whitespace();
            match f.next() {
                Some("cpu") => {
                    let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
                    let get = |i: usize| v.get(i).copied().unwrap_or(0);
                    // user nice system idle iowait irq softirq steal
                    out.total = (0..8).map(get).sum();
                    out.idle = get(3) + get(4) + get(7);
                }
                Some(name) if name.starts_with("cpu") => out.cpus += 1,
                _ => {}
            }
        }
        out
    }

    pub fn since(&self, earlier: &ProcStat) -> MachineCpu {
        let hz = sys::clk_tck();
        let total = self.total.saturating_sub(earlier.total) as f64 / hz;
        let idle = self.idle.saturating_sub(earlier.idle) as f64 / hz;
        MachineCpu {
            busy_s: (total - idle).max(0.0),
            total_s: total,
            cpus: self.cpus,
        }
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
        let a = ProcStat::parse("cpu  100 0 100 1000 10 0 0 5 0 0\ncpu0 1\ncpu1 1\n");
        let b = ProcStat::parse("cpu  200 0 200 1100 20 0 0 15 0 0\ncpu0 1\ncpu1 1\n");
        assert_eq!(a.cpus, 2);
        let m = b.since(&a);
        let hz = sys::clk_tck();
        assert!((m.total_s - 320.0 / hz).abs() < 1e-9);
        assert!((m.busy_s - 200.0 / hz).abs() < 1e-9);
    }
}
