//! What calibration prints and writes: the measured points beside the fitted table, and TOML
//! files whose keys are those of a target's `[network]` (`local`, `remote`) or a cluster
//! file's `[[host]]` (`cores`, `speed`), each measurement kept as a comment.

use crate::cpu::{CpuReport, BENCHMARKS};
use crate::fit::{errors, fewest_points, TOLERANCE};
use crate::pingpong::Measured;
use std::fmt::Write;

/// A network calibration: what was measured and the table that reproduces it.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkTable {
    /// `local` or `remote`: the key the table is written under.
    pub key: &'static str,
    /// How it was measured, for the file's first comment (the command line).
    pub how: String,
    /// The measured sizes.
    pub measured: Vec<Measured>,
    /// The fewest measured points that reproduce every measured size within 2 %.
    pub table: Vec<(f64, f64)>,
    /// What each measured size's count ([`Measured::reps`]) counts.
    pub counted: Counted,
}

/// What a measured size's count is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Round trips of a ping-pong (`lbf-node calibrate`).
    RoundTrips,
    /// Messages of a traced run (`lbf-gag fit-network`).
    Messages,
}

impl Counted {
    /// The listing's column heading.
    fn column(self) -> &'static str {
        match self {
            Counted::RoundTrips => "reps",
            Counted::Messages => "msgs",
        }
    }

    /// The file's words for it.
    fn words(self) -> &'static str {
        match self {
            Counted::RoundTrips => "round trips",
            Counted::Messages => "messages",
        }
    }
}

impl NetworkTable {
    /// Fits the table to `measured`, whose counts are round trips.
    pub fn fit(key: &'static str, how: String, measured: Vec<Measured>) -> Self {
        Self::fit_counting(key, how, measured, Counted::RoundTrips)
    }

    /// Fits the table to `measured`, whose counts are `counted`.
    pub fn fit_counting(
        key: &'static str,
        how: String,
        measured: Vec<Measured>,
        counted: Counted,
    ) -> Self {
        let points: Vec<(f64, f64)> = measured
            .iter()
            .map(|m| (m.bytes as f64, m.seconds))
            .collect();
        let table = fewest_points(&points, TOLERANCE);
        NetworkTable {
            key,
            how,
            measured,
            table,
            counted,
        }
    }

    /// The measured points beside the fitted table's value and error at each.
    pub fn listing(&self) -> String {
        let points: Vec<(f64, f64)> = self
            .measured
            .iter()
            .map(|m| (m.bytes as f64, m.seconds))
            .collect();
        let errs = errors(&self.table, &points);
        let mut s = format!(
            "{:>10}  {:>13}  {:>6}  {:>13}  {:>7}  in table\n",
            "bytes",
            "one-way (s)",
            self.counted.column(),
            "fitted (s)",
            "error"
        );
        for (m, e) in self.measured.iter().zip(errs) {
            let kept = self.table.iter().any(|p| p.0 == m.bytes as f64);
            let _ = writeln!(
                s,
                "{:>10}  {:>13.6e}  {:>6}  {:>13.6e}  {:>6.2}%  {}",
                m.bytes,
                m.seconds,
                m.reps,
                m.seconds * (1.0 + e),
                e * 100.0,
                if kept { "*" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "{} = {}  ({} points reproduce all {} sizes within {} %)",
            self.key,
            points_toml(&self.table),
            self.table.len(),
            self.measured.len(),
            TOLERANCE * 100.0
        );
        s
    }

    /// The file: the table under its key, the measurements as comments.
    pub fn toml(&self) -> String {
        let mut s = format!(
            "# {}\n# measured [bytes, one-way seconds, {}]:\n",
            self.how,
            self.counted.words()
        );
        for m in &self.measured {
            let _ = writeln!(s, "#   [{}, {:e}, {}]", m.bytes, m.seconds, m.reps);
        }
        let _ = writeln!(s, "{} = {}", self.key, points_toml(&self.table));
        s
    }
}

/// `[[bytes, seconds], ...]` as TOML.
pub fn points_toml(points: &[(f64, f64)]) -> String {
    let items: Vec<String> = points
        .iter()
        .map(|(b, s)| format!("[{b}, {s:e}]"))
        .collect();
    format!("[{}]", items.join(", "))
}

/// A CPU calibration's report, printed.
pub fn cpu_listing(r: &CpuReport, reference: &str) -> String {
    let mut s = format!("{:>8}  {:>14}  relative to {reference}\n", "", "ops/s");
    for (name, rate) in BENCHMARKS.iter().zip(r.rates) {
        let _ = writeln!(s, "{name:>8}  {rate:>14.4e}");
    }
    let quota = match r.quota {
        Some(q) => format!(", cgroup cpu.max allows {q} CPUs"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "cores = {}  ({} CPUs in the affinity{quota})\nspeed = {:.4}  (the reference's seconds \
         of work per second, measured for {:.1} s)",
        r.cores, r.cpus, r.speed, r.seconds
    );
    s
}

/// The host file: `cores` and `speed` as a cluster file's `[[host]]` has them, and the rates
/// under `[measured]` (what `--reference` reads).
pub fn cpu_toml(r: &CpuReport, how: &str) -> String {
    let mut s = format!(
        "# {how}\ncores = {}\nspeed = {:.4}\n\n[measured]  # ops per wall-clock second\n",
        r.cores, r.speed
    );
    for (name, rate) in BENCHMARKS.iter().zip(r.rates) {
        let _ = writeln!(s, "{name} = {rate:e}");
    }
    s
}

/// The rates of a host file written by [`cpu_toml`], to rate another host against.
pub fn reference_rates(text: &str) -> Result<[f64; 4], String> {
    let value: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
    let measured = value
        .get("measured")
        .and_then(|m| m.as_table())
        .ok_or("no [measured] table: give a file written by lbf-node calibrate --cpu")?;
    let mut rates = [0.0; 4];
    for (rate, name) in rates.iter_mut().zip(BENCHMARKS) {
        *rate = measured
            .get(name)
            .and_then(|v| v.as_float())
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| format!("[measured] {name} is missing or not a positive number"))?;
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_file_reads_back_as_a_reference() {
        let r = CpuReport {
            cpus: 2,
            quota: Some(0.5),
            cores: 1,
            rates: [1e9, 2e9, 3e9, 4e9],
            speed: 0.5,
            seconds: 4.0,
        };
        let text = cpu_toml(&r, "test");
        assert!(text.contains("cores = 1\nspeed = 0.5000\n"), "{text}");
        assert_eq!(reference_rates(&text).unwrap(), [1e9, 2e9, 3e9, 4e9]);
        assert!(reference_rates("cores = 1")
            .unwrap_err()
            .contains("[measured]"));
    }

    #[test]
    fn a_network_file_is_a_network_table() {
        let m = |bytes, seconds| Measured {
            bytes,
            seconds,
            reps: 5,
        };
        let t = NetworkTable::fit(
            "remote",
            "test".into(),
            vec![m(0, 1e-5), m(1, 1e-5), m(1000, 2e-5), m(2000, 3e-5)],
        );
        assert_eq!(t.table, vec![(0.0, 1e-5), (1000.0, 2e-5)]);
        let text = t.toml();
        assert!(
            text.ends_with("remote = [[0, 1e-5], [1000, 2e-5]]\n"),
            "{text}"
        );
        assert!(t.listing().contains("2 points reproduce all 4 sizes"));
    }
}
