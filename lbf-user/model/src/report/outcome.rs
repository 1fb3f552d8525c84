//! Predictions side by side with the measured run: table, JSON lines, warnings.

use crate::engine::Prediction;
use crate::source::Source;
use crate::trace::{Gap, Summary};
use serde::Serialize;
use std::fmt::Write;

/// One target's result as `--json` prints it.
#[derive(Serialize)]
struct Row<'a> {
    target: &'a str,
    /// Where the trace's capture took its events, when the trace says.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Source>,
    predicted_seconds: f64,
    /// Whether the trace ended with its summary line (a completed capture).
    complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_seconds: Option<f64>,
    /// Measured over predicted: above 1 means the target would run faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_events: Option<u64>,
    /// Where the lost events are, when the capture knows.
    #[serde(skip_serializing_if = "<[Gap]>::is_empty")]
    gaps: &'a [Gap],
    /// How far the start-up model moved the processes' start, when it did.
    #[serde(skip_serializing_if = "is_zero")]
    startup_shift_seconds: f64,
}

/// For serde: a start-up taken as measured is not written.
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn row<'a>(p: &'a Prediction, summary: Option<&'a Summary>, source: Option<Source>) -> Row<'a> {
    Row {
        target: &p.target,
        source,
        predicted_seconds: p.predicted_seconds,
        complete: summary.is_some(),
        measured_seconds: summary.map(|s| s.measured_seconds),
        speedup: summary.and_then(|s| speedup(s.measured_seconds, p.predicted_seconds)),
        lost_events: summary.map(|s| s.lost_events),
        gaps: summary.map_or(&[], |s| &s.gaps),
        startup_shift_seconds: p.startup_shift_seconds,
    }
}

/// Measured over predicted, when both are positive.
fn speedup(measured: f64, predicted: f64) -> Option<f64> {
    (measured > 0.0 && predicted > 0.0).then(|| measured / predicted)
}

/// Adds the measured teardown of `summary` (if any) to every prediction: the engine models a
/// run up to the end of its modelled work; what follows (library and launcher teardown) is
/// taken as measured, like the start-up before each process's start time.
pub fn add_teardown(predictions: &mut [Prediction], summary: Option<&Summary>) {
    let teardown = summary.map_or(0.0, |s| s.teardown_seconds);
    for p in predictions {
        p.predicted_seconds += teardown;
    }
}

/// One JSON object per prediction, each on its own line (newline-terminated), with
/// `target`, `source` when the trace says where its events come from (`source`: `mpi`,
/// `pvm` or `sockets`), `predicted_seconds`, `complete`, and, when the trace has a summary,
/// `measured_seconds`, `speedup` and `lost_events`, and `gaps` (`p`, `from_seconds`,
/// `records`) where the capture knows which processes lost records.
pub fn json_lines(
    predictions: &[Prediction],
    summary: Option<&Summary>,
    source: Option<Source>,
) -> String {
    let mut out = String::new();
    for p in predictions {
        let line = serde_json::to_string(&row(p, summary, source)).expect("rows serialize");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A table of the predictions, and the measured run and speed-ups when the trace has a summary.
pub fn table(predictions: &[Prediction], summary: Option<&Summary>) -> String {
    let measured = summary.map(|s| s.measured_seconds);
    let width = predictions
        .iter()
        .map(|p| p.target.len())
        .chain([12])
        .max()
        .unwrap_or(12);
    let mut out = String::new();
    let _ = write!(out, "{:<width$}  {:>12}", "target", "predicted");
    if measured.is_some() {
        out.push_str("  speed-up");
    }
    out.push('\n');
    for p in predictions {
        let _ = write!(
            out,
            "{:<width$}  {:>12}",
            p.target,
            seconds(p.predicted_seconds)
        );
        if let Some(m) = measured {
            let ratio = speedup(m, p.predicted_seconds).map_or("-".into(), |s| format!("{s:.2}x"));
            let _ = write!(out, "  {ratio:>8}");
        }
        out.push('\n');
    }
    if let Some(m) = measured {
        let _ = writeln!(out, "{:<width$}  {:>12}", "(measured)", seconds(m));
    }
    let moved: Vec<String> = predictions
        .iter()
        .filter(|p| p.startup_shift_seconds != 0.0)
        .map(|p| {
            let sign = if p.startup_shift_seconds > 0.0 {
                '+'
            } else {
                '-'
            };
            format!(
                "{} {sign}{}",
                p.target,
                seconds(p.startup_shift_seconds.abs())
            )
        })
        .collect();
    if !moved.is_empty() {
        let _ = writeln!(
            out,
            "(start-up predicted from the processes' start-up CPU, against the measured run's: {})",
            moved.join("; ")
        );
    }
    if let Some(lost) = summary.map(|s| s.lost_events).filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "(the capture lost {lost} events: these predictions may be wrong, see the warnings)"
        );
    }
    out
}

/// A duration with a unit that keeps about four significant digits.
fn seconds(s: f64) -> String {
    match s {
        0.0 => "0 s".to_string(),
        s if s < 1e-3 => format!("{:.3} us", s * 1e6),
        s if s < 1.0 => format!("{:.3} ms", s * 1e3),
        s => format!("{s:.3} s"),
    }
}

/// What the user should know before trusting the numbers: a capture cut short (no summary),
/// or one that lost events.
pub fn warnings(summary: Option<&Summary>) -> Vec<String> {
    match summary {
        None => vec![
            "the trace has no summary line, so the capture was cut short: there is no measured \
             time to compare with, and the predictions cover only the captured part of the run"
                .to_string(),
        ],
        Some(s) if s.lost_events > 0 => {
            let mut w = vec![format!(
                "the capture lost {} events; the predictions may be wrong (capture again with \
                 a larger --ringbuf-size or fewer probes if the ring buffer was full, with the \
                 right --procs if more processes took part than it said)",
                s.lost_events
            )];
            w.extend(gap_lines(&s.gaps));
            w
        }
        Some(_) => Vec::new(),
    }
}

/// One line per gap in the capture's records (see [`Summary::gaps`]), the first
/// [`GAPS_LISTED`] of them and how many more.
pub fn gap_lines(gaps: &[Gap]) -> Vec<String> {
    let mut lines: Vec<String> = gaps.iter().take(GAPS_LISTED).map(Gap::to_string).collect();
    if gaps.len() > GAPS_LISTED {
        lines.push(format!(
            "and {} more processes lost records",
            gaps.len() - GAPS_LISTED
        ));
    }
    lines
}

/// Why a trace whose capture lost records may be inconsistent (a receive whose send was
/// lost, a deadlock): the loss, named as the likely cause with its gaps, and how to avoid it;
/// `None` if the capture lost nothing.
pub fn loss_as_cause(summary: &Summary) -> Option<String> {
    if summary.lost_events == 0 {
        return None;
    }
    let gaps = &summary.gaps;
    let mut whose: Vec<String> = gaps
        .iter()
        .take(GAPS_LISTED)
        .map(|g| {
            format!(
                "process {}: {} from {:.3} s",
                g.p, g.records, g.from_seconds
            )
        })
        .collect();
    if gaps.len() > GAPS_LISTED {
        whose.push(format!("{} more processes", gaps.len() - GAPS_LISTED));
    }
    let whose = if whose.is_empty() {
        String::new()
    } else {
        format!(" ({})", whose.join("; "))
    };
    Some(format!(
        "the capture lost {} records{whose}, so the trace is incomplete, which is the likely \
         cause; capture again with a larger --ringbuf-size, on a less busy machine, or with \
         --nice so that lbf-trace's reader keeps up",
        summary.lost_events
    ))
}

/// How many gaps [`gap_lines`] names one by one.
pub const GAPS_LISTED: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn predictions() -> Vec<Prediction> {
        vec![
            Prediction {
                target: "two-nodes".into(),
                predicted_seconds: 7.0,
                startup_shift_seconds: 0.0,
            },
            Prediction {
                target: "4x2 block gige".into(),
                predicted_seconds: 0.0125,
                startup_shift_seconds: 0.0,
            },
        ]
    }

    const SUMMARY: Summary = Summary {
        measured_seconds: 14.0,
        lost_events: 0,
        teardown_seconds: 0.0,
        gaps: Vec::new(),
    };

    #[test]
    fn table_with_measured_run() {
        let text = table(&predictions(), Some(&SUMMARY));
        let expected = "\
target             predicted  speed-up
two-nodes            7.000 s     2.00x
4x2 block gige     12.500 ms  1120.00x
(measured)          14.000 s
";
        assert_eq!(text, expected);
    }

    #[test]
    fn table_without_summary_has_no_speedup() {
        let text = table(&predictions()[..1], None);
        assert_eq!(
            text,
            "target           predicted\ntwo-nodes          7.000 s\n"
        );
    }

    /// A target whose start-up the start-up model moved says by how much, in the table and
    /// in its JSON line; one it did not move says nothing.
    #[test]
    fn a_moved_start_up_is_shown() {
        let mut p = predictions();
        p[1].startup_shift_seconds = -0.0425;
        let text = table(&p, Some(&SUMMARY));
        assert!(
            text.ends_with(
                "(start-up predicted from the processes' start-up CPU, against the measured \
                 run's: 4x2 block gige -42.500 ms)\n"
            ),
            "{text}"
        );
        let rows: Vec<serde_json::Value> = json_lines(&p, None, None)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows[0].get("startup_shift_seconds"), None);
        assert_eq!(rows[1]["startup_shift_seconds"], -0.0425);
    }

    #[test]
    fn small_and_zero_durations() {
        assert_eq!(seconds(0.0), "0 s");
        assert_eq!(seconds(2.5e-6), "2.500 us");
    }

    #[test]
    fn json_lines_carry_the_summary_when_known() {
        let text = json_lines(&predictions(), Some(&SUMMARY), Some(Source::Mpi));
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["target"], "two-nodes");
        assert_eq!(rows[0]["source"], "mpi");
        assert_eq!(rows[0]["predicted_seconds"], 7.0);
        assert_eq!(rows[0]["measured_seconds"], 14.0);
        assert_eq!(rows[0]["speedup"], 2.0);
        assert_eq!(rows[0]["lost_events"], 0);
        assert_eq!(rows[0]["complete"], true);

        let bare: serde_json::Value =
            serde_json::from_str(json_lines(&predictions()[..1], None, None).trim()).unwrap();
        assert_eq!(
            bare,
            serde_json::json!({"target":"two-nodes","predicted_seconds":7.0,"complete":false})
        );
    }

    #[test]
    fn warnings_for_truncated_and_lossy_captures() {
        assert!(warnings(Some(&SUMMARY)).is_empty());
        assert!(warnings(None)[0].contains("no summary line"));
        let lossy = Summary {
            lost_events: 12,
            ..SUMMARY
        };
        assert!(warnings(Some(&lossy))[0].contains("lost 12 events"));
    }

    /// Where the capture knows which processes lost records, the warnings, the table and the
    /// JSON lines say so next to the numbers.
    #[test]
    fn gaps_are_named_with_the_predictions() {
        let gaps: Vec<Gap> = (0..10)
            .map(|p| Gap {
                p,
                from_seconds: 0.25,
                records: 100 + u64::from(p),
            })
            .collect();
        let lossy = Summary {
            lost_events: 1045,
            gaps,
            ..SUMMARY
        };
        let w = warnings(Some(&lossy));
        assert_eq!(w.len(), 1 + GAPS_LISTED + 1, "{w:?}");
        assert_eq!(w[1], "process 0 lost 100 records from 0.250 s into the run");
        assert_eq!(w[GAPS_LISTED + 1], "and 2 more processes lost records");
        let text = table(&predictions(), Some(&lossy));
        assert!(
            text.ends_with("(the capture lost 1045 events: these predictions may be wrong, see the warnings)\n"),
            "{text}"
        );
        let row: serde_json::Value =
            serde_json::from_str(json_lines(&predictions()[..1], Some(&lossy), None).trim())
                .unwrap();
        assert_eq!(
            row["gaps"][3],
            serde_json::json!({"p": 3, "from_seconds": 0.25, "records": 103})
        );
    }
}
