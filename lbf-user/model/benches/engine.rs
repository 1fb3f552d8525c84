//! Criterion benchmarks of the offline pipeline's two halves on a synthetic 64-process trace:
//! the engine with four targets at once, and trace-line parsing. `cargo xtask bench` measures
//! the same at ten million events, with peak memory.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use lbf_model::engine::Engine;
use lbf_model::trace::{synthetic, Summary, TraceReader, TraceWriter};

mod common;

const EVENTS: u64 = 200_000;

fn engine(c: &mut Criterion) {
    let events: Vec<_> = synthetic::events(common::config(EVENTS)).collect();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.sample_size(10);
    group.bench_function("synthetic 64 procs, 4 targets", |b| {
        b.iter_batched(
            || Engine::new(common::PROCS as usize, common::targets()).expect("valid targets"),
            |mut engine| {
                for (i, e) in events.iter().enumerate() {
                    engine.push(*e, i as u64 + 1).expect("consistent trace");
                }
                engine.finish().expect("complete trace")
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn read_jsonl(c: &mut Criterion) {
    let mut writer =
        TraceWriter::new(Vec::new(), &synthetic::header(&common::config(EVENTS))).expect("write");
    let mut lines = 1;
    for e in synthetic::events(common::config(EVENTS)) {
        writer.write_event(&e).expect("write");
        lines += 1;
    }
    let text = writer
        .finish(&Summary {
            measured_seconds: 1.0,
            lost_events: 0,
            ..Default::default()
        })
        .expect("write");
    let mut group = c.benchmark_group("trace");
    group.throughput(Throughput::Elements(lines));
    group.sample_size(10);
    group.bench_function("read jsonl", |b| {
        b.iter(|| TraceReader::new(text.as_slice()).expect("header").count())
    });
    group.finish();
}

criterion_group!(benches, engine, read_jsonl);
criterion_main!(benches);
