//! Validation of the fields of kinds `http` and `connections` (and crr's
//! `rate`/`timeout`), kept apart so spec.rs only calls it.

use crate::error::{EngineError, Result};
use crate::spec::Kind;

pub struct Extra {
    pub urls: Vec<String>,
    pub rate: Option<f64>,
    pub timeout: Option<f64>,
    pub connections: u64,
    pub hold: f64,
    pub close_rate: Option<f64>,
}

/// Most connections one `connections` test may open (each is a file descriptor on both sides).
pub const MAX_CONNECTIONS: u64 = 1_000_000;

fn positive_rate(field: &str, v: Option<f64>) -> Result<Option<f64>> {
    match v {
        Some(r) if !(r.is_finite() && r > 0.0 && r <= 10_000_000.0) => Err(EngineError::spec(
            field,
            format!(
                "{} must be > 0 and ≤ 1e7 per second (got {}): give e.g. 1000, or leave it out for as fast as possible",
                field, r
            ),
        )),
        v => Ok(v),
    }
}

pub fn resolve(
    urls: &Option<Vec<String>>,
    rate: Option<f64>,
    timeout: Option<f64>,
    connections: Option<u64>,
    hold: Option<f64>,
    close_rate: Option<f64>,
    kind: Kind,
) -> Result<Extra> {
    let urls = urls.clone().unwrap_or_else(|| vec!["/".to_string()]);
    if urls.is_empty() {
        return Err(EngineError::spec(
            "urls",
            "urls is empty: give at least one path such as \"/index.html\"",
        ));
    }
    for u in &urls {
        if !u.starts_with('/') || u.len() > 2048 || u.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(EngineError::spec(
                "urls",
                format!(
                    "url {:?} is not a path: give paths on the server such as \"/files/a.html\" (no host, no spaces)",
                    u
                ),
            ));
        }
    }
    let rate = positive_rate("rate", rate)?;
    let close_rate = positive_rate("close_rate", close_rate)?;
    let timeout = match timeout {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 120.0) => {
            return Err(EngineError::spec(
                "timeout",
                format!(
                    "timeout must be > 0 and ≤ 120 seconds (got {}): give e.g. 5",
                    t
                ),
            ))
        }
        Some(t) => Some(t),
        // crr keeps its old behaviour (fatal after repeated failures) unless a timeout is given.
        None if matches!(kind, Kind::Http | Kind::Connections) => Some(5.0),
        None => None,
    };
    let connections = connections.unwrap_or(1000);
    if !(1..=MAX_CONNECTIONS).contains(&connections) {
        return Err(EngineError::spec(
            "connections",
            format!(
                "connections must be 1..={} (got {}): give e.g. 10000",
                MAX_CONNECTIONS, connections
            ),
        ));
    }
    let hold = hold.unwrap_or(1.0);
    if !(hold.is_finite() && (0.0..=600.0).contains(&hold)) {
        return Err(EngineError::spec(
            "hold",
            format!("hold must be 0..=600 seconds (got {}): give e.g. 1", hold),
        ));
    }
    Ok(Extra {
        urls,
        rate,
        timeout,
        connections,
        hold,
        close_rate,
    })
}
