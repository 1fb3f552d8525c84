//! `cargo xtask engine-diff`: do two builds of `lbf-gag` predict the same, to the last bit?
//!
//! A change to the engine that is meant to make it faster, not different, must leave every
//! prediction bit-for-bit as it was. This command writes random traces, each with four random
//! target files, runs `lbf-gag predict --json --timeline` of both builds on each, and compares
//! their output (predictions in shortest round-trip form), their errors and exit status, and
//! the timelines they write, as sets of events: when a node's runnable set changes, the
//! slices it closes come in the order of the node's internal structures, which is no part of
//! the prediction. It prints the first cases that differ and fails if any does.
//!
//! The traces are valid programs by construction (each process's events in an order a run
//! could have produced, every receive after its send in one global order), with messages sent
//! eagerly and by rendezvous (receives posted ahead or not, the sender's `send_end` after the
//! receive in that order), streamed in a random interleaving of the processes, with start
//! times; a few are broken on purpose (a send left out: a deadlock or a bad `send_end`; an
//! exit left out: a truncated trace) so that errors are compared too. Targets mix shared and single-process nodes (listed in random order), cores, speeds,
//! spin, and networks from free to tables whose least delay is as small as 1e-18 s, so that
//! processes running ahead cross their horizon (see docs/engine.md).

use anyhow::{bail, Context, Result};
use lbf_model::trace::synthetic::SplitMix64 as Rng;
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Options of `cargo xtask engine-diff`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The reference build's lbf-gag.
    #[arg(long)]
    old: PathBuf,
    /// The build under test's lbf-gag.
    #[arg(long)]
    new: PathBuf,
    /// Random traces to compare on.
    #[arg(long, default_value_t = 1000)]
    cases: u64,
    /// Seed of the first case; case `i` uses `seed + i`, so a failing case can be rerun alone
    /// with `--seed S --cases 1`.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the cases are written (kept, for rerunning a failure by hand); default: a
    /// directory under the system's temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs the comparison.
pub(crate) fn run(args: &Args) -> Result<()> {
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("lbf-engine-diff-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (mut differ, mut errors) = (Vec::new(), 0u64);
    for seed in args.seed..args.seed + args.cases {
        let case = dir.join(format!("case-{seed}"));
        std::fs::create_dir_all(&case)?;
        let (trace, targets, timeline_target) = write_case(&case, seed)?;
        let old = predict(&args.old, &case, "old", &trace, &targets, timeline_target)?;
        let new = predict(&args.new, &case, "new", &trace, &targets, timeline_target)?;
        if !old.ok {
            errors += 1;
        }
        if old != new {
            differ.push((seed, old, new));
        } else {
            std::fs::remove_dir_all(&case)?;
        }
    }
    println!(
        "engine-diff: {} cases ({} of them errors in both builds, as generated), {} differ",
        args.cases,
        errors,
        differ.len()
    );
    for (seed, old, new) in differ.iter().take(5) {
        println!(
            "\ncase {seed} ({}):\n  old: {}\n  new: {}",
            dir.join(format!("case-{seed}")).display(),
            old.summary(),
            new.summary()
        );
    }
    if !differ.is_empty() {
        bail!("{} of {} cases differ", differ.len(), args.cases);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// What one build made of one case.
#[derive(PartialEq)]
struct Outcome {
    ok: bool,
    stdout: String,
    stderr: String,
    /// The timeline's events (one per line), sorted.
    timeline: Option<Vec<String>>,
}

impl Outcome {
    /// A short description for a report.
    fn summary(&self) -> String {
        let timeline = self.timeline.as_ref().map_or(0, Vec::len);
        format!(
            "exit ok {}, stdout {:?}, stderr {:?}, timeline of {timeline} events",
            self.ok,
            self.stdout.trim(),
            self.stderr.trim()
        )
    }
}

/// Runs `lbf-gag predict` of one build on one case.
fn predict(
    gag: &Path,
    case: &Path,
    build: &str,
    trace: &Path,
    targets: &[PathBuf],
    timeline_target: usize,
) -> Result<Outcome> {
    let timeline = case.join(format!("timeline-{build}.json"));
    let mut cmd = Command::new(gag);
    cmd.arg("predict").arg(trace).arg("--json");
    for t in targets {
        cmd.arg("--target").arg(t);
    }
    cmd.arg("--timeline")
        .arg(&timeline)
        .arg("--timeline-target")
        .arg(format!("t{timeline_target}"));
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {}", gag.display()))?;
    // Paths differ between the builds' runs only in the timeline's name.
    let stderr = String::from_utf8_lossy(&out.stderr).replace(&format!("-{build}.json"), "");
    Ok(Outcome {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        timeline: std::fs::read_to_string(&timeline).ok().map(|text| {
            let mut events: Vec<String> = text
                .lines()
                .map(|l| l.trim_end_matches(',').to_string())
                .collect();
            events.sort_unstable();
            events
        }),
    })
}

/// CPU nanoseconds before an event: often typical, sometimes none, tiny or long, and often
/// one round value, so that events tie.
fn cpu(rng: &mut Rng) -> u64 {
    match rng.below(20) {
        0..=1 => 0,
        2..=3 => rng.below(1_000),
        4 => 1_000_000_000 + rng.below(1_000_000_000),
        5..=9 => 100_000,
        _ => 10_000 + rng.below(1_000_000),
    }
}

/// A message or collective payload in bytes.
fn bytes(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => rng.pick(&[0, 8, 1024, 65_536]),
        1 => rng.below(4_000_000),
        _ => rng.below(100_000),
    }
}

/// Writes case `seed`'s trace and four target files into `dir`; returns their paths and the
/// target whose timeline is compared.
fn write_case(dir: &Path, seed: u64) -> Result<(PathBuf, Vec<PathBuf>, usize)> {
    let mut rng = Rng::new(seed);
    let most = if rng.chance(20) { 30 } else { 10 };
    let procs = 2 + rng.index(most);
    let streams = program(&mut rng, procs);
    let trace = dir.join("case.trace.jsonl");
    std::fs::write(&trace, trace_text(&mut rng, &streams))?;
    let mut targets = Vec::new();
    for t in 0..4 {
        let path = dir.join(format!("t{t}.toml"));
        std::fs::write(&path, target_text(&mut rng, t, procs))?;
        targets.push(path);
    }
    Ok((trace, targets, rng.index(4)))
}

/// The events of a random valid program of `procs` processes, per process, as JSON objects
/// without their process field; occasionally broken (a send or an exit left out).
fn program(rng: &mut Rng, procs: usize) -> Vec<Vec<serde_json::Value>> {
    let mut s: Vec<Vec<serde_json::Value>> = vec![Vec::new(); procs];
    let (mut next_msg, mut next_coll) = (0u64, 0u64);
    let mut in_flight: Vec<InFlight> = Vec::new();
    let most = if rng.chance(20) { 400 } else { 60 };
    let actions = 5 + rng.below(most);
    for _ in 0..actions {
        match rng.below(10) {
            0..=1 => {
                let p = rng.index(procs);
                s[p].push(json!({"k": "keepalive", "cpu_ns": cpu(rng)}));
            }
            2..=4 => {
                let from = rng.index(procs);
                let to = (from + 1 + rng.index(procs - 1)) % procs;
                let (msg, b) = (next_msg, bytes(rng));
                next_msg += 1;
                if rng.chance(30) {
                    // The receiver posts its receive now, before it waits for it.
                    s[to].push(json!({"k": "recv_post", "cpu_ns": cpu(rng), "msg": msg}));
                }
                let rendezvous = rng.chance(30);
                s[from].push(
                    json!({"k": "send", "cpu_ns": cpu(rng), "msg": msg, "bytes": b,
                    "rendezvous": rendezvous}),
                );
                in_flight.push(InFlight {
                    msg,
                    from,
                    to,
                    rendezvous,
                });
            }
            5..=7 if !in_flight.is_empty() => {
                let m = in_flight.swap_remove(rng.index(in_flight.len()));
                receive(rng, &mut s, m);
            }
            8 => {
                // A collective of a random subset of the processes.
                let members: Vec<usize> = (0..procs).filter(|_| rng.chance(70)).collect();
                let op = rng.pick(&["barrier", "bcast", "reduce", "allreduce"]);
                let coll = next_coll;
                next_coll += 1;
                for &p in &members {
                    s[p].push(json!({"k": "coll_start", "cpu_ns": cpu(rng), "coll": coll,
                        "op": op, "size": members.len(), "bytes": bytes(rng)}));
                }
                for &p in &members {
                    let spin = rng.below(5_000);
                    s[p].push(json!({"k": "coll_end", "cpu_ns": spin, "coll": coll}));
                }
            }
            _ => {}
        }
    }
    while let Some(m) = in_flight.pop() {
        receive(rng, &mut s, m);
    }
    for stream in &mut s {
        stream.push(json!({"k": "exit", "cpu_ns": cpu(rng)}));
    }
    if rng.chance(3) {
        // A deadlock: a receive waits for a message never sent (unless nobody sent one).
        let p = rng.index(procs);
        if let Some(i) = s[p].iter().position(|e| e["k"] == "send") {
            s[p].remove(i);
        }
    } else if rng.chance(2) {
        s[rng.index(procs)].pop();
    }
    s
}

/// A message sent and not yet received.
struct InFlight {
    msg: u64,
    from: usize,
    to: usize,
    rendezvous: bool,
}

/// A blocking receive of `m` and, if it was sent by rendezvous, its sender's `send_end`
/// after it: the sender waits no longer than the receiver, so no wait is circular.
fn receive(rng: &mut Rng, s: &mut [Vec<serde_json::Value>], m: InFlight) {
    s[m.to].push(json!({"k": "recv_start", "cpu_ns": cpu(rng)}));
    s[m.to].push(json!({"k": "recv_end", "cpu_ns": rng.below(5_000), "msg": m.msg}));
    if m.rendezvous {
        s[m.from].push(json!({"k": "send_end", "cpu_ns": rng.below(5_000), "msg": m.msg}));
    }
}

/// The trace file: a header with start times, then the streams in a random interleaving.
fn trace_text(rng: &mut Rng, streams: &[Vec<serde_json::Value>]) -> String {
    let procs: Vec<_> = (0..streams.len())
        .map(|id| {
            let mut p = json!({"id": id, "name": format!("rank{id}")});
            if rng.chance(30) {
                p["start_ns"] = json!(rng.below(3_000_000));
            }
            p
        })
        .collect();
    let mut out = json!({"format": "lbf-trace", "version": 2, "procs": procs}).to_string();
    out.push('\n');
    let mut next = vec![0; streams.len()];
    let mut left: Vec<usize> = (0..streams.len()).collect();
    while !left.is_empty() {
        let i = rng.index(left.len());
        let p = left[i];
        // A burst of one process's events, as a capture delivers them.
        for _ in 0..1 + rng.below(4) {
            let Some(event) = streams[p].get(next[p]) else {
                break;
            };
            let mut event = event.clone();
            event["p"] = json!(p);
            out.push_str(&event.to_string());
            out.push('\n');
            next[p] += 1;
        }
        if next[p] == streams[p].len() {
            left.swap_remove(i);
        }
    }
    out.push_str(&json!({"summary": {"measured_seconds": 1.0, "lost_events": 0}}).to_string());
    out.push('\n');
    out
}

/// A random target file named `t{index}` for `procs` processes.
fn target_text(rng: &mut Rng, index: usize, procs: usize) -> String {
    let mut out = format!("name = \"t{index}\"\n");
    if rng.chance(40) {
        let any = rng.unit();
        let spin = rng.pick(&[0.5, 1.0, any]);
        let _ = writeln!(out, "spin = {spin:?}");
    }
    // Often one process per node (running ahead), often a few per node, sometimes one node.
    let nodes = match rng.below(4) {
        0 => procs,
        1 => 1,
        _ => 1 + rng.index(procs),
    };
    let mut members = vec![Vec::new(); nodes];
    for p in 0..procs {
        // The first `nodes` processes make sure that no node is empty.
        let n = if p < nodes { p } else { rng.index(nodes) };
        members[n].push(p);
    }
    for mut list in members {
        // Shuffled: ties must not depend on the order a node lists its processes in.
        for i in (1..list.len()).rev() {
            list.swap(i, rng.index(i + 1));
        }
        let _ = writeln!(out, "[[node]]\nprocs = {list:?}");
        if rng.chance(50) {
            let _ = writeln!(out, "cores = {}", 1 + rng.below(4));
        }
        if rng.chance(30) {
            let any = 0.1 + 3.0 * rng.unit();
            let speed = rng.pick(&[0.5, 2.0, 1.3, any]);
            let _ = writeln!(out, "speed = {speed:?}");
        }
    }
    match rng.below(4) {
        0 => {}
        1 => {
            let preset = rng.pick(&["zero", "shm", "gige", "10gige", "ib-edr", "ib-hdr"]);
            let _ = writeln!(out, "[network]\npreset = \"{preset}\"");
        }
        _ => {
            let _ = writeln!(out, "[network]");
            for side in ["local", "remote"] {
                let _ = writeln!(out, "{side} = {}", table(rng));
            }
        }
    }
    out
}

/// A communication table: 0 to 3 points, delays from 1e-18 s to milliseconds.
fn table(rng: &mut Rng) -> String {
    let points: Vec<String> = (0..rng.below(4))
        .map(|i| {
            let size = i * 100_000 + rng.below(100_000);
            let scale = rng.pick(&[1e-18, 1e-12, 1e-9, 1e-6, 1e-4, 1e-3]);
            let seconds = if rng.chance(10) {
                0.0
            } else {
                scale * (1.0 + 9.0 * rng.unit())
            };
            format!("[{size}, {seconds:?}]")
        })
        .collect();
    format!("[{}]", points.join(", "))
}
