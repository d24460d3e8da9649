//! A finished latency test's figures: each direction from its sender's and
//! its receiver's reports, their sum, and whether they can stand as a result.

use hdrhistogram::Histogram;

use crate::error::{EngineError, Result};
use crate::kinds::latency::probes::{new_delay_histogram, UNSTAMPED_AFTER_NS};
use crate::rt::shared::summarize;
use crate::spec::LatencySpec;
use crate::wire::control::{RxReport, SideReport, TxReport};
use crate::wire::record::{DirectionResult, Directions, LinearHistogram, LoadResult};

/// The largest share of a direction's matched probes that may be unstamped
/// before the test fails: beyond it, the probes left out of the histogram
/// could bias it.
pub const MAX_UNSTAMPED_SHARE: f64 = 0.01;

/// A linear histogram of `h` (ns) from its min to its p99.9 in 100–250
/// buckets of a 1-2-5 width of at least 10 ns.
pub fn linear(h: &Histogram<u64>) -> LinearHistogram {
    let mut out = LinearHistogram {
        unit: "us",
        ..Default::default()
    };
    if h.is_empty() {
        return out;
    }
    let lo = h.lowest_equivalent(h.min());
    let hi = h.median_equivalent(h.value_at_quantile(0.999));
    let raw = ((hi.saturating_sub(lo)) as f64 / 250.0).max(10.0);
    let mag = 10f64.powf(raw.log10().floor());
    let width = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|w| *w >= raw)
        .unwrap_or(10.0 * mag) as u64;
    let first = lo / width * width;
    let n = ((hi - first) / width + 1) as usize;
    out.counts = vec![0; n];
    for v in h.iter_recorded() {
        let val = h.median_equivalent(v.value_iterated_to());
        let idx = (val.saturating_sub(first) / width) as usize;
        if idx < n {
            out.counts[idx] += v.count_at_value();
        } else {
            out.overflow += v.count_at_value();
        }
    }
    out.bucket_us = width as f64 / 1000.0;
    out.first_us = first as f64 / 1000.0;
    out
}

fn load_result(spec: &LatencySpec, tx: &TxReport, rx: &RxReport) -> Option<LoadResult> {
    let l = tx.load.as_ref()?;
    let secs = l.window_ns as f64 / 1e9;
    let received = rx.load_received + rx.received;
    let lost = l.sent.saturating_sub(received);
    let achieved = if secs > 0.0 {
        l.sent as f64 / secs
    } else {
        0.0
    };
    Some(LoadResult {
        sender: "packet",
        asked_pps: spec.rate_pps,
        probe_every: spec.probe_every.unwrap_or(0),
        frame_size: spec.frame_size,
        sent: l.sent,
        received,
        lost,
        loss_ratio: (l.sent > 0).then(|| lost as f64 / l.sent as f64),
        achieved_pps: achieved,
        received_pps: if secs > 0.0 {
            received as f64 / secs
        } else {
            0.0
        },
        rate_error_pct: (achieved - spec.rate_pps) / spec.rate_pps * 100.0,
        forfeited: l.forfeited,
        send_errors: l.send_errors,
        tx_stamps_missing: l.tx_stamps_missing,
        probes_sent: l.probes_sent,
        batch: l.batch,
        note: l.note.clone(),
        counted_by: rx.load_counter.clone(),
        ceiling_pps: l.ceiling_pps,
        ceiling_note: l.ceiling_note.clone(),
    })
}

fn sum_load(a: &Option<LoadResult>, b: &Option<LoadResult>) -> Option<LoadResult> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let sent = a.sent + b.sent;
    let lost = a.lost + b.lost;
    let asked = a.asked_pps + b.asked_pps;
    let achieved = a.achieved_pps + b.achieved_pps;
    Some(LoadResult {
        sender: a.sender,
        asked_pps: asked,
        probe_every: a.probe_every,
        frame_size: a.frame_size,
        sent,
        received: a.received + b.received,
        lost,
        loss_ratio: (sent > 0).then(|| lost as f64 / sent as f64),
        achieved_pps: achieved,
        received_pps: a.received_pps + b.received_pps,
        rate_error_pct: (achieved - asked) / asked * 100.0,
        forfeited: a.forfeited + b.forfeited,
        send_errors: a.send_errors + b.send_errors,
        tx_stamps_missing: a.tx_stamps_missing + b.tx_stamps_missing,
        probes_sent: a.probes_sent + b.probes_sent,
        batch: a.batch.max(b.batch),
        note: a.note.clone(),
        counted_by: a.counted_by.clone(),
        ceiling_pps: a.ceiling_pps.zip(b.ceiling_pps).map(|(x, y)| x + y),
        ceiling_note: a.ceiling_note.clone(),
    })
}

fn direction(tx: &TxReport, rx: &RxReport, rate_pps: f64) -> (DirectionResult, Histogram<u64>) {
    let mut h = new_delay_histogram();
    for [v, c] in &rx.hist {
        h.saturating_record_n(*v, *c);
    }
    let lost = tx.sent.saturating_sub(rx.received);
    let d = DirectionResult {
        sent: tx.sent,
        received: rx.received,
        lost,
        loss_ratio: (tx.sent > 0).then(|| lost as f64 / tx.sent as f64),
        reordered: rx.reordered,
        unmatched_stamps: rx.unmatched + tx.dropped_stamps,
        unstamped: rx.unstamped,
        send_failed: tx.send_failed,
        rate_pps,
        achieved_pps: if tx.window_ns > 0 {
            tx.sent as f64 / (tx.window_ns as f64 / 1e9)
        } else {
            0.0
        },
        delay_us: summarize(&h),
        histogram: linear(&h),
        load: None,
    };
    (d, h)
}

/// Client side, after `finish`: both directions and their sum, from this
/// side's report (`local`) and the server's.
pub fn directions(spec: &LatencySpec, local: &SideReport, server: &SideReport) -> Directions {
    let probe_pps = spec.rate_pps / spec.probe_every.unwrap_or(1) as f64;
    let (mut c2s, mut h) = direction(&local.tx, &server.rx, probe_pps);
    let (mut s2c, h2) = direction(&server.tx, &local.rx, probe_pps);
    c2s.load = load_result(spec, &local.tx, &server.rx);
    s2c.load = load_result(spec, &server.tx, &local.rx);
    let _ = h.add(&h2);
    let sent = c2s.sent + s2c.sent;
    let lost = c2s.lost + s2c.lost;
    let combined = DirectionResult {
        sent,
        received: c2s.received + s2c.received,
        lost,
        loss_ratio: (sent > 0).then(|| lost as f64 / sent as f64),
        reordered: c2s.reordered + s2c.reordered,
        unmatched_stamps: c2s.unmatched_stamps + s2c.unmatched_stamps,
        unstamped: c2s.unstamped + s2c.unstamped,
        send_failed: c2s.send_failed + s2c.send_failed,
        rate_pps: 2.0 * probe_pps,
        achieved_pps: c2s.achieved_pps + s2c.achieved_pps,
        delay_us: summarize(&h),
        histogram: linear(&h),
        load: sum_load(&c2s.load, &s2c.load),
    };
    Directions { c2s, s2c, combined }
}

/// A finished test's figures stand only if probes moved in the measured
/// window and (nearly) every matched probe had kernel stamps at both ends.
pub fn check(d: &Directions) -> Result<()> {
    if d.combined.sent == 0 {
        return Err(EngineError::Measurement(
            "the latency test moved no traffic: no probe was sent in the measured window (check `rate_pps` and that the warm-up ends before the duration)".into(),
        ));
    }
    for (name, dir) in [("c2s", &d.c2s), ("s2c", &d.s2c)] {
        if let Some(l) = &dir.load {
            // A server that heard from no client sends nothing (sent 0), as with
            // socket probes; a stream that ran without a probe has no delays.
            if l.sent > 0 && l.probes_sent == 0 {
                return Err(EngineError::Measurement(format!(
                    "the {} load sent no probe in the measured window: its delays do not exist (check probe_every and the rate)",
                    name
                )));
            }
            if l.tx_stamps_missing as f64 > MAX_UNSTAMPED_SHARE * l.probes_sent as f64 {
                return Err(EngineError::Measurement(format!(
                    "{} of {} {} probes inside the load got no kernel TX stamp back: their delays are left out, and that many could bias the rest; lower `rate_pps`, or run on a less loaded machine",
                    l.tx_stamps_missing, l.probes_sent, name
                )));
            }
        }
        let matched = dir.delay_us.count + dir.unstamped;
        if dir.unstamped > 0 && dir.unstamped as f64 > MAX_UNSTAMPED_SHARE * matched as f64 {
            return Err(EngineError::Measurement(format!(
                "{} of {} {} probes ({:.1} %) had no kernel timestamp at one end (TX stamp later than {} ms, or none on receipt): their delays are left out, and that many could bias the rest; lower `rate_pps`, or run on a less loaded machine",
                dir.unstamped,
                matched,
                name,
                100.0 * dir.unstamped as f64 / matched as f64,
                UNSTAMPED_AFTER_NS / 1_000_000,
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(sent: u64, delays: u64, unstamped: u64) -> DirectionResult {
        let mut d = DirectionResult {
            sent,
            received: sent,
            unstamped,
            loss_ratio: (sent > 0).then_some(0.0),
            ..Default::default()
        };
        d.delay_us.count = delays;
        d
    }

    #[test]
    fn check_fails_on_no_traffic_and_on_too_many_unstamped() {
        let ok = Directions {
            c2s: dir(1000, 995, 5),
            s2c: dir(1000, 1000, 0),
            combined: dir(2000, 1995, 5),
        };
        assert!(check(&ok).is_ok());
        let many = Directions {
            s2c: dir(1000, 980, 20),
            ..ok.clone()
        };
        let e = check(&many).unwrap_err();
        assert_eq!(e.kind(), "measurement");
        assert!(e.to_string().contains("20 of 1000 s2c probes"), "{}", e);
        let none = Directions {
            c2s: dir(0, 0, 0),
            s2c: dir(0, 0, 0),
            combined: dir(0, 0, 0),
        };
        assert!(check(&none)
            .unwrap_err()
            .to_string()
            .contains("moved no traffic"));
    }

    #[test]
    fn nothing_sent_has_no_loss_ratio() {
        let (d, _) = direction(&TxReport::default(), &RxReport::default(), 1000.0);
        assert_eq!(d.loss_ratio, None);
        let v = serde_json::to_value(&d).unwrap();
        assert!(v["loss_ratio"].is_null());
        let tx = TxReport {
            sent: 4,
            ..Default::default()
        };
        let rx = RxReport {
            received: 3,
            ..Default::default()
        };
        assert_eq!(direction(&tx, &rx, 1000.0).0.loss_ratio, Some(0.25));
    }

    #[test]
    fn linear_histogram_sums_to_count() {
        let mut h = new_delay_histogram();
        for i in 0..10_000u64 {
            h.record(20_000 + (i * 37) % 5_000).unwrap();
        }
        h.record(900_000).unwrap();
        let l = linear(&h);
        assert!((100..=260).contains(&l.counts.len()), "{}", l.counts.len());
        assert_eq!(l.counts.iter().sum::<u64>() + l.overflow, h.len());
        assert!(l.first_us <= 20.0 && l.bucket_us >= 0.01);
        assert!(l.overflow >= 1);
    }
}
