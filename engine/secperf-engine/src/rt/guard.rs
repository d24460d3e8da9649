//! What a server lets in: who may use a test's data sockets and how many
//! connections a test may open there (`Admission`, the accept guard every
//! kind's server uses), and how much memory the tests of one server may hold
//! together (`Budget`) and how many helper processes (`HelperSlots`).
//!
//! A test's data sockets serve the control connection's peer and the
//! addresses its spec declares (`bind`, `sources`, `peers`, each inside the
//! testbed ranges unless the server runs with --allow-any-target: the server
//! answers them; spec/serving.rs): any other source is a
//! stranger (or a spoofed datagram) and gets nothing, not a byte back, not a
//! thread, not a buffer. A TCP connection beyond the test's own count is
//! closed at once (an RST: SO_LINGER 0).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::SockRef;

use crate::error::{EngineError, Result};

/// Most memory one test's server side may hold (its buffers, as the spec
/// sizes them: `Spec::server_memory`); a spec past it is refused.
pub const MAX_TEST_MEMORY: u64 = 1 << 30;
/// Most memory the concurrent tests of one server may hold together; a
/// `setup` past it is refused until a test ends.
pub const MAX_SERVER_MEMORY: u64 = 2 << 30;
/// Most helper processes one test may start on either side (a `connections`
/// test beyond one process's descriptors).
pub const MAX_HELPERS: u64 = 64;
/// Most helper processes one server runs for all its tests together.
pub const MAX_SERVER_HELPERS: usize = 256;

/// A stated size in words: "1 GiB", "640 MiB", "12 KiB".
pub fn size_words(n: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if n >= GIB && n.is_multiple_of(GIB) {
        format!("{} GiB", n / GIB)
    } else if n >= MIB {
        format!("{} MiB", n.div_ceil(MIB))
    } else {
        format!("{} KiB", n.div_ceil(1024))
    }
}

/// An address, or a prefix of them (`198.18.5.0/24`): a source a test's
/// data sockets serve. Read and written as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    net: IpAddr,
    len: u8,
}

impl Prefix {
    /// Its first and last addresses.
    pub fn ends(&self) -> (IpAddr, IpAddr) {
        match self.net {
            IpAddr::V4(a) => {
                let host = u32::MAX.checked_shr(u32::from(self.len)).unwrap_or(0);
                let first = u32::from(a) & !host;
                (
                    IpAddr::from(first.to_be_bytes()),
                    IpAddr::from((first | host).to_be_bytes()),
                )
            }
            IpAddr::V6(a) => {
                let host = u128::MAX.checked_shr(u32::from(self.len)).unwrap_or(0);
                let first = u128::from(a) & !host;
                (
                    IpAddr::from(first.to_be_bytes()),
                    IpAddr::from((first | host).to_be_bytes()),
                )
            }
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (first, last) = self.ends();
        match (ip.to_canonical(), first, last) {
            (IpAddr::V4(x), IpAddr::V4(f), IpAddr::V4(l)) => f <= x && x <= l,
            (IpAddr::V6(x), IpAddr::V6(f), IpAddr::V6(l)) => f <= x && x <= l,
            _ => false,
        }
    }

    pub fn is_ipv6(&self) -> bool {
        self.net.is_ipv6()
    }
}

impl From<IpAddr> for Prefix {
    fn from(ip: IpAddr) -> Prefix {
        let ip = ip.to_canonical();
        Prefix {
            net: ip,
            len: if ip.is_ipv4() { 32 } else { 128 },
        }
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Prefix, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{:?} is not an address or ADDR/LEN", s))?;
        let net = net.to_canonical();
        let most = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => most,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&l| l <= most)
                .ok_or_else(|| format!("{:?}: the prefix length must be 0..={}", s, most))?,
        };
        Ok(Prefix { net, len })
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let most = if self.net.is_ipv4() { 32 } else { 128 };
        if self.len == most {
            write!(f, "{}", self.net)
        } else {
            write!(f, "{}/{}", self.ends().0, self.len)
        }
    }
}

impl Serialize for Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Prefix, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The sources a test's data sockets serve: the control connection's peer
/// and the addresses (or prefixes) its spec declared.
#[derive(Clone, Debug)]
pub struct Peers {
    allowed: Vec<Prefix>,
}

impl Peers {
    pub fn new(peer: IpAddr, declared: impl IntoIterator<Item = Prefix>) -> Peers {
        let mut allowed = vec![Prefix::from(peer)];
        for p in declared {
            if !allowed.contains(&p) {
                allowed.push(p);
            }
        }
        Peers { allowed }
    }

    /// Whether `ip` is the peer or one of the declared addresses.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.allowed.iter().any(|p| p.contains(ip))
    }

    /// Every address served (the peer first), e.g. for a helper process.
    pub fn addresses(&self) -> &[Prefix] {
        &self.allowed
    }

    /// Whether an accepted connection comes from a peer; one that does not
    /// is set to close with an RST when the caller drops it, at once.
    pub fn admit(&self, s: &TcpStream) -> bool {
        let ok = s.peer_addr().is_ok_and(|from| self.contains(from.ip()));
        if !ok {
            refuse(s);
        }
        ok
    }
}

/// Sets `s` to close with an RST (SO_LINGER 0) when dropped: no FIN
/// exchange, no TIME_WAIT, nothing more read from or written to it.
pub fn refuse(s: &TcpStream) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// One test's accept guard: its peers, how many data connections it may
/// open (None: the kind bounds them itself, e.g. crr's one at a time per
/// accepting thread), and what it turned away.
#[derive(Debug)]
pub struct Admission {
    peers: Peers,
    limit: Option<u64>,
    accepted: AtomicU64,
    strangers: AtomicU64,
    excess: AtomicU64,
    datagrams: AtomicU64,
}

impl Admission {
    pub fn new(peers: Peers, limit: Option<u64>) -> Arc<Admission> {
        Arc::new(Admission {
            peers,
            limit,
            accepted: AtomicU64::new(0),
            strangers: AtomicU64::new(0),
            excess: AtomicU64::new(0),
            datagrams: AtomicU64::new(0),
        })
    }

    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// Whether an accepted connection may stay: from a peer, and within the
    /// test's count. A refused one is set to close with an RST (SO_LINGER 0)
    /// when the caller drops it, which it must do at once.
    pub fn admit(&self, s: &TcpStream) -> bool {
        let ok = match s.peer_addr() {
            Ok(from) if self.peers.contains(from.ip()) => {
                let n = self.accepted.fetch_add(1, SeqCst);
                if self.limit.is_some_and(|l| n >= l) {
                    self.accepted.fetch_sub(1, SeqCst);
                    self.excess.fetch_add(1, Relaxed);
                    false
                } else {
                    true
                }
            }
            _ => {
                self.strangers.fetch_add(1, Relaxed);
                false
            }
        };
        if !ok {
            refuse(s);
        }
        ok
    }

    /// Whether a UDP data socket may count, answer or send to `from`; a
    /// datagram from anyone else is counted here and dropped unread.
    pub fn answers(&self, from: SocketAddr) -> bool {
        if self.peers.contains(from.ip()) {
            return true;
        }
        self.datagrams.fetch_add(1, Relaxed);
        false
    }

    /// What was turned away, for the server's log: None if nothing was.
    pub fn refused(&self) -> Option<String> {
        let (s, e, d) = (
            self.strangers.load(Relaxed),
            self.excess.load(Relaxed),
            self.datagrams.load(Relaxed),
        );
        (s + e + d > 0).then(|| {
            format!(
                "refused {} data connections from other sources, {} beyond the test's {}, \
                 dropped {} datagrams from other sources",
                s,
                e,
                self.limit.map_or("count".to_string(), |l| l.to_string()),
                d
            )
        })
    }
}

/// The memory the concurrent tests of one server hold together.
#[derive(Debug)]
pub struct Budget {
    total: u64,
    held: AtomicU64,
}

/// One test's share of a `Budget`, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Budget {
    pub fn new(total: u64) -> Arc<Budget> {
        Arc::new(Budget {
            total,
            held: AtomicU64::new(0),
        })
    }

    /// Reserves `bytes` for one test, or says why not.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Result<Reservation> {
        let mut held = self.held.load(SeqCst);
        loop {
            if held.saturating_add(bytes) > self.total {
                return Err(EngineError::Server {
                    field: None,
                    message: format!(
                        "this server's tests already hold {} of the {} its tests may hold together, \
                         and this one needs {}: wait for a test to end, or start another \
                         `secperf-engine serve`",
                        size_words(held),
                        size_words(self.total),
                        size_words(bytes)
                    ),
                });
            }
            match self
                .held
                .compare_exchange(held, held + bytes, SeqCst, SeqCst)
            {
                Ok(_) => {
                    return Ok(Reservation {
                        budget: self.clone(),
                        bytes,
                    })
                }
                Err(now) => held = now,
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, SeqCst);
    }
}

/// Helper processes running for this process's tests.
static HELPERS: AtomicUsize = AtomicUsize::new(0);

/// Slots for a test's helper processes, given back when dropped.
#[derive(Debug, Default)]
pub struct HelperSlots(usize);

impl HelperSlots {
    /// Takes `n` slots of the server's MAX_SERVER_HELPERS, or says why not.
    pub fn take(n: usize) -> Result<HelperSlots> {
        let mut now = HELPERS.load(SeqCst);
        loop {
            if now + n > MAX_SERVER_HELPERS {
                return Err(EngineError::Server {
                    field: Some("per_process".into()),
                    message: format!(
                        "this test needs {} helper processes and the server's tests already run {} \
                         of the {} it allows together: wait for a test to end, or raise per_process",
                        n, now, MAX_SERVER_HELPERS
                    ),
                });
            }
            match HELPERS.compare_exchange(now, now + n, SeqCst, SeqCst) {
                Ok(_) => return Ok(HelperSlots(n)),
                Err(v) => now = v,
            }
        }
    }
}

impl Drop for HelperSlots {
    fn drop(&mut self) {
        HELPERS.fetch_sub(self.0, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_match_canonically() {
        let p = Peers::new(
            "::ffff:198.18.1.2".parse().unwrap(),
            [
                "198.18.1.3".parse().unwrap(),
                "198.18.5.0/24".parse().unwrap(),
            ],
        );
        assert!(p.contains("198.18.1.2".parse().unwrap()));
        assert!(p.contains("::ffff:198.18.1.3".parse().unwrap()));
        assert!(!p.contains("198.18.1.4".parse().unwrap()));
        assert!(p.contains("198.18.5.255".parse().unwrap()));
        assert!(!p.contains("198.18.6.0".parse().unwrap()));
    }

    #[test]
    fn prefixes_read_and_write_as_text() {
        let p: Prefix = "2001:2:0:5::7/64".parse().unwrap();
        assert_eq!(p.to_string(), "2001:2:0:5::/64");
        assert_eq!(
            p.ends().1,
            "2001:2:0:5:ffff:ffff:ffff:ffff".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            "198.18.1.1".parse::<Prefix>().unwrap().to_string(),
            "198.18.1.1"
        );
        assert!("198.18.1.1/33".parse::<Prefix>().is_err());
        assert!("0.0.0.0/0"
            .parse::<Prefix>()
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn a_budget_refuses_past_its_total_and_frees_on_drop() {
        let b = Budget::new(100);
        let a = b.reserve(60).unwrap();
        assert!(b.reserve(50).is_err());
        drop(a);
        let _c = b.reserve(100).unwrap();
        assert!(b.reserve(1).is_err());
    }

    #[test]
    fn sizes_read_as_words() {
        assert_eq!(size_words(1 << 30), "1 GiB");
        assert_eq!(size_words(3 << 20), "3 MiB");
        assert_eq!(size_words(100), "1 KiB");
    }
}
