//! The weighted schedule of a flows test: a stride scheduler. Each flow has a
//! pass that grows by 1/weight each time it is chosen; the next attempt goes
//! to the flow with the smallest pass (ties to the lower index). Over any run
//! of consecutive attempts each flow's count is within a few attempts of its
//! weight's share, and the same weights give the same order every time.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Pass(f64, usize);

impl Eq for Pass {}

impl PartialOrd for Pass {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pass {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The schedule over the flows that have a weight (`choices` maps its picks
/// back to their indexes in the spec).
pub struct Stride {
    heap: BinaryHeap<Reverse<Pass>>,
    strides: Vec<f64>,
    choices: Vec<usize>,
}

impl Stride {
    /// `weighted`: (flow index, weight > 0) pairs.
    pub fn new(weighted: &[(usize, f64)]) -> Stride {
        let strides: Vec<f64> = weighted.iter().map(|(_, w)| 1.0 / w).collect();
        let heap = strides
            .iter()
            .enumerate()
            .map(|(i, s)| Reverse(Pass(s / 2.0, i)))
            .collect();
        Stride {
            heap,
            strides,
            choices: weighted.iter().map(|(i, _)| *i).collect(),
        }
    }

    /// The flow (its index in the spec) the next attempt goes to; None when
    /// no flow has a weight (every flow a probe on its own rate).
    pub fn next(&mut self) -> Option<usize> {
        let Reverse(Pass(p, i)) = self.heap.pop()?;
        self.heap.push(Reverse(Pass(p + self.strides[i], i)));
        Some(self.choices[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_weights_in_any_window() {
        let w = [(0, 5.0), (1, 3.0), (2, 1.0), (3, 0.5)];
        let mut s = Stride::new(&w);
        let picks: Vec<usize> = (0..20_000).filter_map(|_| s.next()).collect();
        let total: f64 = w.iter().map(|x| x.1).sum();
        for (a, b) in [(0, 20_000), (1234, 9876), (17, 4017)] {
            let n = (b - a) as f64;
            for (i, wi) in w {
                let got = picks[a..b].iter().filter(|&&p| p == i).count() as f64;
                assert!(
                    (got - n * wi / total).abs() <= 2.0,
                    "flow {} got {}",
                    i,
                    got
                );
            }
        }
    }

    #[test]
    fn the_same_weights_give_the_same_order() {
        let w = [(3, 2.0), (7, 1.0)];
        let (mut a, mut b) = (Stride::new(&w), Stride::new(&w));
        let x: Vec<usize> = (0..100).filter_map(|_| a.next()).collect();
        let y: Vec<usize> = (0..100).filter_map(|_| b.next()).collect();
        assert_eq!(x.len(), 100);
        assert_eq!(Stride::new(&[]).next(), None);
        assert_eq!(x, y);
        assert!(x.iter().all(|i| *i == 3 || *i == 7));
    }
}
