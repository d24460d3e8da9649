//! Counting the load frames of latency under load in the kernel: a socket
//! filter (eBPF, `SO_ATTACH_BPF`) on the receiving probe socket counts each
//! load frame in a per-CPU array, measured and not apart, and drops it there;
//! probes pass to the socket as before. A load frame then costs the receiver
//! what an nft drop rule costs (trafgen's frames die in one): no socket queue,
//! no wake-up, no copy, no timestamp or address control messages; reading
//! every frame in user space cost the senders about a third of their rate on
//! two CPUs (docs/performance.md).
//!
//! The program reads the load word's last byte (the UDP payload's byte 7: bit
//! 0x20 load, 0x40 measured, 0x80 follow-up; wire::probe) at UDP offset 15
//! (a UDP socket's filter sees the packet from its UDP header on). Where the
//! kernel refuses it (no bpf(), no CAP_BPF), `attach` says why and the
//! receiver counts in user space.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const SO_ATTACH_BPF: libc::c_int = 50;

/// Map slots: unmeasured and measured load frames.
const UNMEASURED: u32 = 0;
const MEASURED: u32 = 1;

/// UDP header (8) + the load word's byte 7.
const LOAD_BYTE_AT: i32 = 15;
const KIND_MASK: i32 = 0xe0;
const LOAD_UNMEASURED: i32 = 0x20;
const LOAD_MEASURED: i32 = 0x60;

/// One eBPF instruction (struct bpf_insn).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8, // dst in the low nibble, src in the high one
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// The filter, for the map `map_fd`: count load frames (by kind) and drop
/// them; return the whole packet for anything else.
pub fn program(map_fd: i32) -> Vec<Insn> {
    vec![
        insn(0xbf, 6, 1, 0, 0),                      // 0: r6 = r1 (ctx, for ld_abs)
        insn(0x30, 0, 0, 0, LOAD_BYTE_AT),           // 1: r0 = *(u8 *)skb[15]
        insn(0xbf, 7, 0, 0, 0),                      // 2: r7 = r0
        insn(0x57, 7, 0, 0, KIND_MASK),              // 3: r7 &= 0xe0
        insn(0xb7, 1, 0, 0, UNMEASURED as i32),      // 4: r1 = 0
        insn(0x15, 7, 0, 3, LOAD_UNMEASURED),        // 5: if r7 == 0x20 goto 9
        insn(0xb7, 1, 0, 0, MEASURED as i32),        // 6: r1 = 1
        insn(0x15, 7, 0, 1, LOAD_MEASURED),          // 7: if r7 == 0x60 goto 9
        insn(0x05, 0, 0, 12, 0),                     // 8: goto 21 (not a load frame)
        insn(0x63, 10, 1, -4, 0),                    // 9: *(u32 *)(r10 - 4) = r1
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // 10: r1 = map (two slots)
        insn(0x00, 0, 0, 0, 0),                      // 11
        insn(0xbf, 2, 10, 0, 0),                     // 12: r2 = r10
        insn(0x07, 2, 0, 0, -4),                     // 13: r2 += -4
        insn(0x85, 0, 0, 0, 1),                      // 14: call bpf_map_lookup_elem
        insn(0x15, 0, 0, 3, 0),                      // 15: if r0 == 0 goto 19
        insn(0x79, 1, 0, 0, 0),                      // 16: r1 = *(u64 *)(r0 + 0)
        insn(0x07, 1, 0, 0, 1),                      // 17: r1 += 1 (this CPU's slot)
        insn(0x7b, 0, 1, 0, 0),                      // 18: *(u64 *)(r0 + 0) = r1
        insn(0xb7, 0, 0, 0, 0),                      // 19: r0 = 0: drop
        insn(0x95, 0, 0, 0, 0),                      // 20: exit
        insn(0xb4, 0, 0, 0, -1),                     // 21: w0 = 0xffffffff: keep it all
        insn(0x95, 0, 0, 0, 0),                      // 22: exit
    ]
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<i32> {
    // Safety: `attr` is a live, zero-padded buffer of the size passed; the
    // kernel reads (and for lookups writes through pointers in it to) buffers
    // the caller keeps alive across the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

/// CPUs the kernel may run (a per-CPU map's value holds one slot each).
fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut n = 0;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            n = n.max(b + 1).max(a + 1);
        }
    }
    n.max(1)
}

/// Loads the socket filter; with `log` the verifier's log goes into the error.
fn load(insns: &[Insn], log: bool) -> io::Result<i32> {
    let license = b"GPL\0";
    let mut buf = vec![0u8; if log { 65536 } else { 0 }];
    // prog_type | insn_cnt, insns, license, log_level | log_size, log_buf, ...
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_PROG_TYPE_SOCKET_FILTER) | ((insns.len() as u64) << 32);
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    if log {
        attr[3] = 1 | ((buf.len() as u64) << 32);
        attr[4] = buf.as_mut_ptr() as u64;
    }
    bpf(BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let said = String::from_utf8_lossy(&buf);
        let said = said.trim_end_matches('\0').trim();
        if said.is_empty() {
            e
        } else {
            io::Error::new(e.kind(), format!("{} (verifier: {})", e, said))
        }
    })
}

/// The counter attached to one socket.
pub struct LoadCounter {
    map: OwnedFd,
    _prog: OwnedFd,
    cpus: usize,
}

impl LoadCounter {
    /// Loads the filter and attaches it to `sock`; Err says why it could not.
    pub fn attach(sock: RawFd) -> io::Result<LoadCounter> {
        // union bpf_attr as u64 words: map_type, key_size | value_size,
        // max_entries | map_flags, ...
        let mut attr = [0u64; 16];
        attr[0] = u64::from(BPF_MAP_TYPE_PERCPU_ARRAY) | (4u64 << 32);
        attr[1] = 8 | (2u64 << 32);
        let map = bpf(BPF_MAP_CREATE, &mut attr)?;
        // Safety: a fresh descriptor the kernel gave us, owned from here on.
        let map = unsafe { OwnedFd::from_raw_fd(map) };
        let insns = program(map.as_raw_fd());
        // A refusal is asked again with the verifier's log, for its words.
        let prog = load(&insns, false).map_err(|e| load(&insns, true).err().unwrap_or(e))?;
        // Safety: as above.
        let prog = unsafe { OwnedFd::from_raw_fd(prog) };
        let fd = prog.as_raw_fd();
        // Safety: `fd` lives across the call and its size is passed with it.
        let rc = unsafe {
            libc::setsockopt(
                sock,
                libc::SOL_SOCKET,
                SO_ATTACH_BPF,
                (&fd as *const i32).cast(),
                size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LoadCounter {
            map,
            _prog: prog,
            cpus: possible_cpus(),
        })
    }

    fn read(&self, key: u32) -> u64 {
        let mut values = vec![0u64; self.cpus];
        let k = key;
        let mut attr = [0u64; 4];
        attr[0] = self.map.as_raw_fd() as u32 as u64;
        attr[1] = &k as *const u32 as u64;
        attr[2] = values.as_mut_ptr() as u64;
        match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
            Ok(_) => values.iter().sum(),
            Err(_) => 0,
        }
    }

    /// (load frames counted outside the measured window, inside it).
    pub fn counts(&self) -> (u64, u64) {
        (self.read(UNMEASURED), self.read(MEASURED))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_where_the_comments_say() {
        let p = program(3);
        let target = |at: usize| (at as i64 + 1 + i64::from(p[at].off)) as usize;
        assert_eq!(target(5), 9);
        assert_eq!(target(7), 9);
        assert_eq!(target(8), 21);
        assert_eq!(target(15), 19);
        assert_eq!(p[10].imm, 3);
        assert_eq!(p[10].regs, (BPF_PSEUDO_MAP_FD << 4) | 1);
        assert_eq!(p.len(), 23);
        assert_eq!(size_of::<Insn>(), 8);
    }

    #[test]
    fn possible_cpus_counts_at_least_one() {
        assert!(possible_cpus() >= 1);
    }
}
