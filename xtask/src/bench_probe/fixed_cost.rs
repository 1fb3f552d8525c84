//! The tracer's fixed cost: an MPI program that only starts and ends (`mpi_empty.c`, 4
//! ranks), with each library, untraced and under `lbf-trace` as a user runs it (`lbf-trace --
//! mpirun ...`: the libraries it probes are its own choice), whole command timed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;

use crate::{cmd::run_cmd, stats::median};

/// The launchers' command for 4 ranks of `program`, per library.
fn launch(mpi: &str, program: &Path) -> Vec<String> {
    let mut cmd: Vec<String> = match mpi {
        "openmpi" => [
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "4",
        ]
        .map(String::from)
        .to_vec(),
        _ => ["mpirun.mpich", "-n", "4"].map(String::from).to_vec(),
    };
    cmd.push(program.display().to_string());
    cmd
}

/// Builds `mpi_empty.c` with each library's compiler into `out`; the binaries by library.
pub(super) fn build(root: &Path, out: &Path) -> Result<Vec<(&'static str, PathBuf)>> {
    ["mpich", "openmpi"]
        .into_iter()
        .map(|mpi| {
            let bin = out.join(format!("mpi_empty.{mpi}"));
            run_cmd(&[
                format!("mpicc.{mpi}"),
                "-O2".into(),
                "-o".into(),
                bin.display().to_string(),
                root.join("tests/workloads/probe/mpi_empty.c")
                    .display()
                    .to_string(),
            ])?;
            Ok((mpi, bin))
        })
        .collect()
}

/// Fewest runs of each configuration: a run of the empty program varies by some 20 ms here,
/// more than the differences to be told apart.
const MIN_RUNS: usize = 15;

/// Prints, per library, the fastest and the median of `runs` (at least [`MIN_RUNS`])
/// interleaved runs untraced and traced, and their differences: lbf-trace's start-up and
/// teardown.
pub(super) fn measure(lbf_trace: &Path, programs: &[(&str, PathBuf)], runs: usize) -> Result<()> {
    let runs = runs.max(MIN_RUNS);
    println!("\nfixed cost: an empty 4-rank MPI program, whole command, {runs} runs each");
    for (mpi, program) in programs {
        let untraced = launch(mpi, program);
        let mut traced = vec![lbf_trace.display().to_string(), "--".into()];
        traced.extend(untraced.iter().cloned());
        let (mut plain, mut with) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            for (cmd, times) in [(&untraced, &mut plain), (&traced, &mut with)] {
                let start = Instant::now();
                run_cmd(cmd)?;
                times.push(start.elapsed().as_secs_f64());
            }
        }
        let (p, t) = (super::fastest(&plain), super::fastest(&with));
        let (mp, mt) = (median(&plain), median(&with));
        println!(
            "  {mpi:<8} fastest: untraced {:6.1} ms, under lbf-trace {:6.1} ms: {:+6.1} ms; \
             median: {:6.1} ms, {:6.1} ms: {:+6.1} ms (target: within 50 ms)",
            p * 1e3,
            t * 1e3,
            (t - p) * 1e3,
            mp * 1e3,
            mt * 1e3,
            (mt - mp) * 1e3
        );
    }
    Ok(())
}
