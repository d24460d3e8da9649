//! The few libc calls std and socket2 do not offer, each behind a safe function.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use crate::wire::record::CpuTimes;

fn timeval_s(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

fn rusage(who: libc::c_int) -> CpuTimes {
    // Safety: rusage is plain old data, so all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: getrusage only writes into the struct we own; `who` is one of
    // the RUSAGE_* constants.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return CpuTimes::default();
    }
    CpuTimes {
        user_s: timeval_s(ru.ru_utime),
        system_s: timeval_s(ru.ru_stime),
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> CpuTimes {
    rusage(libc::RUSAGE_THREAD)
}

/// CPU time of this whole process (all threads, live and exited).
pub fn process_cpu() -> CpuTimes {
    rusage(libc::RUSAGE_SELF)
}

/// Kernel thread id of the calling thread.
pub fn gettid() -> i32 {
    // Safety: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every network namespace).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Clock ticks per second of /proc times.
pub fn clk_tck() -> f64 {
    // Safety: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as f64
    } else {
        100.0
    }
}

/// `tcpi_total_retrans` of a TCP socket, or None if TCP_INFO is not readable.
pub fn tcp_total_retrans(fd: RawFd) -> Option<u64> {
    // Safety: tcp_info is plain old data, so all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // Safety: the kernel writes at most `len` bytes into `info`, which we own;
    // a bad fd only yields an error return.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    Some(info.tcpi_total_retrans as u64)
}

/// Sets SO_RCVLOWAT: a blocked read or poll wakes once this many bytes are
/// queued, or at EOF, an error or the read timeout. (TCP silently caps it at
/// half the receive buffer's maximum; the spec checks given values first.)
/// Bytes in a TCP socket's send queue that the peer has not acknowledged yet
/// (SIOCOUTQ); None if the socket cannot say.
pub fn unsent_bytes(fd: RawFd) -> Option<u64> {
    let mut n: libc::c_int = 0;
    // Safety: SIOCOUTQ (= TIOCOUTQ) writes one int into `n`, which we own; a
    // bad fd only yields an error return.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if rc != 0 || n < 0 {
        return None;
    }
    Some(n as u64)
}

pub fn set_rcvlowat(fd: RawFd, bytes: usize) -> std::io::Result<()> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // Safety: the kernel reads `len` bytes from `want`, an int we own; a bad
    // fd only yields an error return.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&want as *const libc::c_int).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets IP_BIND_ADDRESS_NO_PORT: a socket bound to an address with port 0
/// gets its port at connect(), from the whole 4-tuple (so one source address
/// serves ~64 k connections to each destination, not ~64 k in all).
pub fn set_bind_address_no_port(fd: RawFd) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // Safety: the kernel reads `len` bytes from `one`, an int we own; a bad fd
    // only yields an error return.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The descriptor a helper process finds its parent's socket on.
pub const HANDED_FD: RawFd = 3;

/// Starts `cmd` with `fd` (a socket of ours) as its descriptor HANDED_FD.
pub fn spawn_with_fd(cmd: &mut Command, fd: RawFd) -> std::io::Result<Child> {
    // Safety: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: dup2 and fcntl are. It touches no
    // memory of the parent's but the integer `fd`, copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 clears close-on-exec on the copy; on the same number it does
            // nothing, so the flag is cleared by hand.
            let rc = if fd == HANDED_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, HANDED_FD)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// In a helper process: the listener its parent handed it as HANDED_FD.
pub fn handed_listener() -> std::io::Result<TcpListener> {
    // Safety: fstat only writes into the struct we own; it tells whether the
    // descriptor is open before anything takes ownership of it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(HANDED_FD, &mut st) } != 0 {
        return Err(std::io::Error::other(
            "no socket on descriptor 3: this command is started by secperf-engine itself",
        ));
    }
    // Safety: descriptor 3 is open (checked above) and ours alone: our parent
    // dup2'ed its listener onto it for us, and nothing else in this process
    // uses or closes it.
    Ok(unsafe { TcpListener::from_raw_fd(HANDED_FD) })
}

/// This process's resident memory in bytes (/proc/self/statm), if readable.
pub fn rss_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // Safety: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(4096) as u64)
}

/// Raises RLIMIT_NOFILE to at least `want` descriptors where the process may
/// (its hard limit, or as root up to fs.nr_open), else as far as it can;
/// returns the soft limit now in force.
pub fn raise_nofile_to(want: u64) -> u64 {
    let now = raise_nofile();
    if now >= want {
        return now;
    }
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20);
    let target = want.min(ceiling);
    let lim = libc::rlimit {
        rlim_cur: target as libc::rlim_t,
        rlim_max: target as libc::rlim_t,
    };
    // Safety: setrlimit only reads the struct we pass, which lives on our stack.
    // Raising the hard limit needs CAP_SYS_RESOURCE; without it this fails and
    // the limit stays as it was.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        return target;
    }
    now
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

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn rcvlowat_reaches_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        super::set_rcvlowat(s.as_raw_fd(), 65536).unwrap();
        let mut got: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // Safety: the kernel writes at most `len` bytes into `got`, an int we own.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut got as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((rc, got), (0, 65536));
    }
}
