//! Calibration in cluster mode: one coordinator (`lbf-gag calibrate`, [`coordinator`]) orders
//! the agents on every host (`lbf-node calibrate --builder`, [`agent`]) to measure, one step
//! at a time so that no two measurements disturb each other: each host's CPU and its loopback
//! table, then a ping-pong between every pair of hosts (or one representative pair per
//! network the user names), and writes one cluster file (`docs/targets.md`) from what they
//! report.
//!
//! ```text
//! coordinator ==TLS (lbf.proto: CalibrationOrder)==> agent a: listen (key k) -> port p
//! coordinator ==TLS==> agent b: ping-pong with a:p presenting k -> measured sizes
//!                      agent b --TCP ping-pong--> agent a
//! ```
//!
//! The agents authenticate to the coordinator as nodes do to a job's builder (its
//! certificate, their tokens), and a ping-pong server serves only the peer that presents the
//! one-time key the coordinator gave both.

pub mod agent;
pub mod coordinator;

use lbf_calibrate::pingpong::{Measured, Plan};
use lbf_proto::{MeasuredSizes, PingPongOrder};
use std::time::Duration;

/// The ping-pong order for `plan` against `peer` (empty for a loopback one) with `key`.
fn order_of(plan: &Plan, peer: String, key: Vec<u8>) -> PingPongOrder {
    PingPongOrder {
        peer,
        key,
        max_bytes: plan.max_bytes,
        min_reps: plan.min_reps,
        max_reps: plan.max_reps,
        budget_ns: plan.budget.as_nanos() as u64,
    }
}

/// The plan an order gives, checked as a command line's would be.
fn plan_of(order: &PingPongOrder) -> Result<Plan, String> {
    Plan::new(
        order.max_bytes,
        order.min_reps,
        order.max_reps,
        Duration::from_nanos(order.budget_ns).as_secs_f64(),
    )
}

/// Measured sizes as a report carries them.
fn sizes_of(measured: &[Measured]) -> MeasuredSizes {
    MeasuredSizes {
        bytes: measured.iter().map(|m| m.bytes).collect(),
        seconds: measured.iter().map(|m| m.seconds).collect(),
        reps: measured.iter().map(|m| m.reps).collect(),
    }
}

/// The measured sizes a report carries, or what is wrong with them.
fn measured_of(sizes: &MeasuredSizes) -> Result<Vec<Measured>, String> {
    let n = sizes.bytes.len();
    if sizes.seconds.len() != n || sizes.reps.len() != n {
        return Err(format!(
            "columns of different lengths: {n} sizes, {} times, {} counts",
            sizes.seconds.len(),
            sizes.reps.len()
        ));
    }
    if n == 0 {
        return Err("no size measured".into());
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (bytes, seconds, reps) = (sizes.bytes[i], sizes.seconds[i], sizes.reps[i]);
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(format!("{bytes} B: one-way time {seconds} is not a time"));
        }
        if out.last().is_some_and(|m: &Measured| m.bytes >= bytes) {
            return Err(format!("sizes out of order at {bytes} B"));
        }
        out.push(Measured {
            bytes,
            seconds,
            reps,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_and_sizes_round_trip_through_orders_and_reports() {
        let plan = Plan::new(1 << 20, 3, 50, 0.25).unwrap();
        let order = order_of(&plan, "10.0.0.2:7300".into(), vec![7; 32]);
        let back = plan_of(&order).unwrap();
        assert_eq!(
            (back.max_bytes, back.min_reps, back.max_reps, back.budget),
            (plan.max_bytes, plan.min_reps, plan.max_reps, plan.budget)
        );
        let measured = vec![
            Measured {
                bytes: 0,
                seconds: 1e-5,
                reps: 9,
            },
            Measured {
                bytes: 1,
                seconds: 1.1e-5,
                reps: 8,
            },
        ];
        assert_eq!(measured_of(&sizes_of(&measured)).unwrap(), measured);
    }

    #[test]
    fn bad_orders_and_reports_are_named() {
        let mut order = order_of(&Plan::default(), String::new(), Vec::new());
        order.min_reps = 0;
        assert!(plan_of(&order).unwrap_err().contains("min-reps"));
        let short = MeasuredSizes {
            bytes: vec![0, 1],
            seconds: vec![1e-5],
            reps: vec![1, 1],
        };
        assert!(measured_of(&short)
            .unwrap_err()
            .contains("different lengths"));
        let backwards = MeasuredSizes {
            bytes: vec![2, 1],
            seconds: vec![1e-5, 1e-5],
            reps: vec![1, 1],
        };
        assert!(measured_of(&backwards)
            .unwrap_err()
            .contains("out of order"));
        let nan = MeasuredSizes {
            bytes: vec![0],
            seconds: vec![f64::NAN],
            reps: vec![1],
        };
        assert!(measured_of(&nan).unwrap_err().contains("not a time"));
        assert!(measured_of(&MeasuredSizes::default()).is_err());
    }
}
