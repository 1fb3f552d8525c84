//! Throughput and memory of the offline pipeline, run by `cargo xtask bench` in separate
//! processes so that each run's peak memory is its own.
//!
//! `cargo bench -p lbf-user --bench throughput -- engine EVENTS` pushes a synthetic trace of
//! 64 processes through one engine with four targets, timing the engine alone (with
//! `LBF_BENCH_TARGET=I` in the environment, target `I` alone, for profiling);
//! `... -- jsonl LINES` writes a synthetic trace file and times reading it back;
//! `... -- advise EVENTS` times the placement search's scoring: batches of candidate
//! placements of the trace's 64 processes on 8 hosts of 8 cores, each batch one pass of the
//! engine. Each prints readable lines and one `RESULT` line of `key=value` pairs for xtask
//! to collect.

use lbf_model::engine::Engine;
use lbf_model::trace::{synthetic, TraceReader, TraceWriter};
use std::time::{Duration, Instant};

mod common;

fn main() {
    // cargo passes `--bench`; everything else is ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let count = |i: usize| -> u64 {
        args.get(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1_000_000)
    };
    match args.first().map(String::as_str) {
        Some("engine") => engine(count(1)),
        Some("jsonl") => jsonl(count(1)),
        Some("advise") => advise(count(1)),
        _ => eprintln!(
            "usage: throughput engine EVENTS | throughput jsonl LINES | throughput advise EVENTS"
        ),
    }
}

/// Events generated at a time, into a buffer reused between timed pushes.
const CHUNK: usize = 8_192;

/// Four targets at once: 64 processes on 64, 16, 8 and 1 nodes. Only the engine is timed
/// (`push` and `finish`): the synthetic trace is generated in chunks of [`CHUNK`] events into
/// one reused buffer between timed stretches, so generation costs no time and, the buffer's
/// size being fixed, no memory that grows with the trace.
fn engine(events: u64) {
    let mut targets = common::targets();
    if let Ok(only) = std::env::var("LBF_BENCH_TARGET") {
        let i: usize = only.parse().expect("LBF_BENCH_TARGET is a target's index");
        targets = vec![targets.swap_remove(i)];
    }
    let n_targets = targets.len() as u64;
    let mut engine = Engine::new(common::PROCS as usize, targets).expect("valid targets");
    let mut source = synthetic::events(common::config(events));
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut timed = Duration::ZERO;
    let mut pushed = 0u64;
    let mut max_queued = 0;
    loop {
        chunk.clear();
        chunk.extend(source.by_ref().take(CHUNK));
        if chunk.is_empty() {
            break;
        }
        let start = Instant::now();
        for &event in &chunk {
            pushed += 1;
            engine
                .push(event, pushed)
                .expect("a synthetic trace is consistent");
        }
        timed += start.elapsed();
        max_queued = max_queued.max(engine.queued_events());
    }
    let start = Instant::now();
    let predictions = engine.finish().expect("a synthetic trace completes");
    let seconds = (timed + start.elapsed()).as_secs_f64();
    for p in &predictions {
        // Shortest round-trip form: two runs predict the same iff they print the same.
        println!("  {:<24} predicted {} s", p.target, p.predicted_seconds);
    }
    let rate = pushed as f64 / seconds;
    let peak = peak_rss_kib();
    println!(
        "engine (push + finish, trace generation not timed): {pushed} events x {n_targets} \
         targets in {seconds:.2} s: {:.2} M events/s, {:.2} M target-events/s; at most \
         {max_queued} queued; peak RSS {} MiB",
        rate / 1e6,
        rate * n_targets as f64 / 1e6,
        peak / 1024
    );
    println!(
        "RESULT kind=engine events={pushed} targets={n_targets} seconds={seconds:.3} \
         events_per_s={rate:.0} max_queued={max_queued} peak_rss_kib={peak}"
    );
}

/// Candidate placements scored per pass of the placement search.
const BATCH: usize = 32;

/// Scores batches of [`BATCH`] random placements of a synthetic trace's processes on 8
/// hosts of 8 cores (the trace held in memory, as `lbf-gag advise` holds it), for about
/// 10 s or 3 batches, whichever is more.
fn advise(events: u64) {
    use lbf_model::advise::search::{score, Host, Machine};
    use lbf_model::config::preset;
    use lbf_model::trace::synthetic::SplitMix64;

    let cfg = common::config(events);
    let procs = synthetic::header(&cfg).procs;
    let trace: Vec<_> = synthetic::events(cfg).collect();
    let machine = Machine {
        hosts: (0..8)
            .map(|h| Host {
                name: format!("h{h}"),
                cores: 8,
                speed: 1.0 + f64::from(h % 2),
            })
            .collect(),
        network: preset("10gige").expect("a preset").network(),
        spin: 0.0,
        bind_to_cores: false,
    };
    let mut rng = SplitMix64::new(7);
    let (start, mut scored, mut batches) = (Instant::now(), 0usize, 0);
    while batches < 3 || start.elapsed() < Duration::from_secs(10) {
        let placements: Vec<Vec<usize>> = (0..BATCH)
            .map(|_| {
                (0..procs.len())
                    .map(|_| (rng.next_u64() % 8) as usize)
                    .collect()
            })
            .collect();
        let times = score(&procs, &trace, &machine, &placements).expect("a consistent trace");
        std::hint::black_box(times);
        scored += BATCH;
        batches += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    let rate = scored as f64 / seconds;
    println!(
        "advise: {scored} candidates ({batches} passes of {BATCH}) on a {} event trace in \
         {seconds:.2} s: {rate:.1} candidates/s",
        trace.len()
    );
    println!(
        "RESULT kind=advise events={} candidates={scored} seconds={seconds:.3} \
         candidates_per_s={rate:.2}",
        trace.len()
    );
}

/// Writes a synthetic trace to a temporary file and reads it back.
fn jsonl(lines: u64) {
    let path = std::env::temp_dir().join(format!("lbf-bench-{}.trace.jsonl", std::process::id()));
    let cfg = common::config(lines);
    let start = Instant::now();
    let mut writer = TraceWriter::create(&path, &synthetic::header(&cfg)).expect("create file");
    let mut written = 0u64;
    for event in synthetic::events(cfg) {
        writer.write_event(&event).expect("write");
        written += 1;
    }
    drop(writer.finish(&lbf_model::trace::Summary {
        measured_seconds: 1.0,
        lost_events: 0,
        ..Default::default()
    }));
    let write_s = start.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);

    let start = Instant::now();
    let mut reader = TraceReader::open(&path).expect("open trace");
    let mut read = 0u64;
    while let Some(e) = reader.next_event().expect("a valid trace") {
        std::hint::black_box(e);
        read += 1;
    }
    let read_s = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let (wrate, rrate) = (written as f64 / write_s, read as f64 / read_s);
    println!(
        "jsonl: {read} lines, {:.0} MB: write {:.2} M lines/s, read {:.2} M lines/s ({:.0} MB/s)",
        bytes as f64 / 1e6,
        wrate / 1e6,
        rrate / 1e6,
        bytes as f64 / read_s / 1e6
    );
    println!(
        "RESULT kind=jsonl lines={read} bytes={bytes} write_lines_per_s={wrate:.0} \
         read_lines_per_s={rrate:.0} peak_rss_kib={}",
        peak_rss_kib()
    );
}

/// The process's peak resident set size (VmHWM) in KiB, 0 where /proc is unavailable.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
