//! The fewest table points that reproduce measured one-way times.
//!
//! A table is read as the engine reads it ([`CommTable::seconds`]): linear between points,
//! the first point's value below it, extrapolated from the last two past the last. The points
//! are chosen among the measured ones, so every table point is a measurement; the search is
//! exact (a shortest path over pairs of consecutive points), and measurements number a few
//! dozen.

use lbf_model::target::CommTable;

/// Relative error every measured size must stay within: 2 %.
pub const TOLERANCE: f64 = 0.02;

/// A table's last two points in the search: how many points it has, and the point before
/// the two (`None`: the two are all).
#[derive(Clone, Copy, Debug)]
struct Step {
    count: usize,
    before: Option<usize>,
}

/// The fewest of `measured` (`(bytes, seconds)`, sorted by bytes, bytes distinct) that, read
/// as a table, give every measured size's time within `tolerance` (relative). An empty input
/// gives an empty table.
pub fn fewest_points(measured: &[(f64, f64)], tolerance: f64) -> Vec<(f64, f64)> {
    let n = measured.len();
    let ok = |fit: f64, y: f64| (fit - y).abs() <= tolerance * y;
    // Point s may come first: every smaller size reads its value.
    let may_start = |s: usize| measured[..s].iter().all(|p| ok(measured[s].1, p.1));
    let line = |i: usize, j: usize, x: f64| {
        let ((x0, y0), (x1, y1)) = (measured[i], measured[j]);
        (y0 + (y1 - y0) * (x - x0) / (x1 - x0)).max(0.0)
    };
    // Points strictly between i and j lie on the line through them.
    let spans =
        |i: usize, j: usize| (i + 1..j).all(|k| ok(line(i, j, measured[k].0), measured[k].1));
    // Points past j lie on the line through i and j, extrapolated.
    let may_end =
        |i: usize, j: usize| (j + 1..n).all(|k| ok(line(i, j, measured[k].0), measured[k].1));
    if let Some(s) =
        (0..n).find(|&s| may_start(s) && measured[s + 1..].iter().all(|p| ok(measured[s].1, p.1)))
    {
        return vec![measured[s]];
    }
    // best[i * n + j]: the fewest points of a table whose last two points are i < j.
    let mut best: Vec<Option<Step>> = vec![None; n * n];
    for i in (0..n).filter(|&i| may_start(i)) {
        for j in (i + 1..n).filter(|&j| spans(i, j)) {
            best[i * n + j] = Some(Step {
                count: 2,
                before: None,
            });
        }
    }
    // Pairs in order of their second point: a pair's parents end where it starts.
    let mut answer: Option<(usize, usize, usize)> = None;
    for j in 1..n {
        for i in 0..j {
            let Some(Step { count, .. }) = best[i * n + j] else {
                continue;
            };
            if may_end(i, j) && answer.is_none_or(|(c, _, _)| count < c) {
                answer = Some((count, i, j));
            }
            for k in (j + 1..n).filter(|&k| spans(j, k)) {
                let next = &mut best[j * n + k];
                if next.is_none_or(|s| count + 1 < s.count) {
                    *next = Some(Step {
                        count: count + 1,
                        before: Some(i),
                    });
                }
            }
        }
    }
    let Some((_, mut i, mut j)) = answer else {
        // Every pair of consecutive measurements spans nothing, so this is unreachable for a
        // non-empty input; all points reproduce themselves.
        return measured.to_vec();
    };
    let mut chosen = vec![measured[j]];
    loop {
        chosen.push(measured[i]);
        match best[i * n + j] {
            Some(Step {
                before: Some(h), ..
            }) => (i, j) = (h, i),
            _ => break,
        }
    }
    chosen.reverse();
    chosen
}

/// The relative error of `table` at each measured size.
pub fn errors(table: &[(f64, f64)], measured: &[(f64, f64)]) -> Vec<f64> {
    let table = CommTable::new(table.to_vec()).expect("fitted points are measured points");
    measured
        .iter()
        .map(|&(b, y)| {
            let fit = table.seconds(b as u64);
            if y == 0.0 {
                fit
            } else {
                (fit - y) / y
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(measured: &[(f64, f64)], expected_len: usize) -> Vec<(f64, f64)> {
        let table = fewest_points(measured, TOLERANCE);
        for (e, p) in errors(&table, measured).iter().zip(measured) {
            assert!(
                e.abs() <= TOLERANCE + 1e-12,
                "{p:?}: error {e} with {table:?}"
            );
        }
        assert_eq!(table.len(), expected_len, "{table:?}");
        table
    }

    #[test]
    fn a_line_takes_two_points_and_a_constant_one() {
        let line: Vec<(f64, f64)> = (0..20)
            .map(|k| (f64::from(1u32 << k), 5e-5 + f64::from(1u32 << k) / 1.25e8))
            .collect();
        let mut with_zero = vec![(0.0, 5e-5)];
        with_zero.extend(&line);
        // The small sizes ride on the first point (flat below it), the rest is one line.
        check(&with_zero, 2);
        let flat: Vec<(f64, f64)> = (0..5)
            .map(|k| (f64::from(k), 1e-6 * (1.0 + 0.001 * f64::from(k))))
            .collect();
        check(&flat, 1);
        assert!(fewest_points(&[], TOLERANCE).is_empty());
    }

    #[test]
    fn a_knee_needs_a_point_and_extrapolation_saves_the_last() {
        // Latency-bound up to 4 KiB, then a slope; a second slope from 1 MiB on.
        let y = |b: f64| {
            if b <= 4096.0 {
                3e-5
            } else if b <= 1048576.0 {
                3e-5 + (b - 4096.0) / 1e9
            } else {
                3e-5 + (1048576.0 - 4096.0) / 1e9 + (b - 1048576.0) / 1e8
            }
        };
        let measured: Vec<(f64, f64)> = std::iter::once(0.0)
            .chain((0..25).map(|k| f64::from(1u32 << k)))
            .map(|b| (b, y(b)))
            .collect();
        // Flat up to the knee, a point at the second knee, the second slope extrapolated.
        let t = check(&measured, 3);
        assert_eq!(t[0].0, 4096.0);
        assert_eq!(t[1].0, 1048576.0);
    }
}
