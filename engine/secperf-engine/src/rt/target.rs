//! Which addresses the engine may send traffic to: the testbed ranges
//! (198.18.0.0/15, 2001:2::/48) and loopback, unless the user says otherwise.

use std::net::IpAddr;

use crate::error::{EngineError, Result};

pub fn allowed(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback() || (o[0] == 198 && (o[1] & 0xfe) == 18)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback() || (s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0)
        }
    }
}

/// Refuses `ip` (named by `field`) unless it is allowed or `allow_any` is set.
pub fn check(field: &str, ip: IpAddr, allow_any: bool) -> Result<()> {
    if allow_any || allowed(ip) {
        return Ok(());
    }
    Err(EngineError::Target {
        field: field.to_string(),
        message: format!(
            "{} {} is outside the testbed ranges 198.18.0.0/15, 2001:2::/48 and loopback: \
             use a testbed address, or pass --allow-any-target if you own that network",
            field, ip
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        for ok in [
            "198.18.0.1",
            "198.19.255.254",
            "127.0.0.1",
            "::1",
            "2001:2::5",
            "2001:2:0:ffff::1",
            "::ffff:198.18.1.1",
        ] {
            assert!(allowed(ok.parse().unwrap()), "{}", ok);
        }
        for bad in [
            "198.20.0.1",
            "198.17.255.255",
            "10.0.0.1",
            "8.8.8.8",
            "2001:2:1::1",
            "2001:db8::1",
            "0.0.0.0",
        ] {
            assert!(!allowed(bad.parse().unwrap()), "{}", bad);
        }
    }
}
