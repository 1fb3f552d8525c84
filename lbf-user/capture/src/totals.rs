//! A capture's totals as a table: what `lbf-trace` prints when asked for neither a trace file
//! nor predictions, so that a plain `lbf-trace -- CMD` says what it saw.

use std::fmt::Write;

use super::Summary;

impl Summary {
    /// One row per process: its name and host, the messages it sent and received and their
    /// bytes, the collectives it entered, the CPU seconds its events carry and how many of
    /// those it spent waiting inside calls, and the CPU outside the model (start-up,
    /// teardown); then the totals and the measured time.
    pub fn totals_table(&self) -> String {
        let width = self
            .procs
            .iter()
            .map(|p| p.name.len() + p.host.len() + 1)
            .chain([7])
            .max()
            .unwrap_or(7);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<width$}  {:>7} {:>10}  {:>7} {:>10}  {:>6}  {:>8} {:>8} {:>8}",
            "process", "sends", "bytes", "recvs", "bytes", "colls", "CPU s", "in waits", "untimed"
        );
        let mut total = super::ProcStats::default();
        for (p, s) in self.procs.iter().zip(&self.stats) {
            let name = if p.host.is_empty() {
                p.name.clone()
            } else {
                format!("{}@{}", p.name, p.host)
            };
            row(&mut out, &name, width, s);
            total.add(s);
        }
        if self.procs.len() > 1 {
            row(&mut out, "total", width, &total);
        }
        let _ = writeln!(
            out,
            "measured {:.3} s from the first process's start to the last one's exit",
            self.measured_seconds
        );
        out
    }
}

/// Appends the row of process `name` with totals `s`.
fn row(out: &mut String, name: &str, width: usize, s: &super::ProcStats) {
    let secs = |ns: u64| ns as f64 * 1e-9;
    let _ = writeln!(
        out,
        "{name:<width$}  {:>7} {:>10}  {:>7} {:>10}  {:>6}  {:>8.3} {:>8.3} {:>8.3}",
        s.sends,
        bytes(s.send_bytes),
        s.recvs,
        bytes(s.recv_bytes),
        s.collectives,
        secs(s.cpu_ns),
        secs(s.wait_ns),
        secs(s.untimed_cpu_ns),
    );
}

/// `n` bytes in B, KiB, MiB or GiB, three significant digits or so.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcStats;
    use lbf_model::event::ProcInfo;

    #[test]
    fn bytes_are_scaled_to_their_unit() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(13_587_200), "13.0 MiB");
        assert_eq!(bytes(5 << 40), "5120.0 GiB");
    }

    #[test]
    fn the_table_has_a_row_per_process_and_their_totals() {
        let proc = |id, name: &str| ProcInfo {
            id,
            name: name.into(),
            host: "n1".into(),
            start_ns: 0,
            ..Default::default()
        };
        let stats = |sends, cpu_ns| ProcStats {
            sends,
            send_bytes: sends * 1024,
            recvs: sends,
            recv_bytes: sends * 1024,
            collectives: 1,
            cpu_ns,
            wait_ns: cpu_ns / 4,
            untimed_cpu_ns: 1_000_000,
        };
        let summary = Summary {
            procs: vec![proc(0, "rank0"), proc(1, "rank1")],
            stats: vec![stats(10, 2_000_000_000), stats(30, 1_000_000_000)],
            measured_seconds: 2.5,
            ..Summary::default()
        };
        let table = summary.totals_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[1].starts_with("rank0@n1") && lines[1].contains("10.0 KiB"));
        let total: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            total,
            ["total", "40", "40.0", "KiB", "40", "40.0", "KiB", "2", "3.000", "0.750", "0.002"],
            "{table}"
        );
        assert!(lines[4].contains("measured 2.500 s"), "{table}");
    }
}
