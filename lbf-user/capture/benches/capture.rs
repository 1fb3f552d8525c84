//! Criterion benchmark of the MPI capture (`lbf_capture::mpi::Capture`): raw records of a two-rank
//! MPICH ping-pong (blocking `MPI_Send` and `MPI_Recv` with statuses) turned into matched
//! events, as `lbf-trace` does for every record it reads. On a node whose cores the ranks keep
//! busy, this is CPU taken from them: on `ring 20000 0` (2 ranks, 2 cores) the capture's work
//! was half of what lbf-trace added to the empty probes' run (docs/probe-overhead.md,
//! session 10).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use lbf_capture::mpi::inspect::{InspectError, LaunchRank, ProcessInspector};
use lbf_capture::mpi::library::Abi;
use lbf_capture::mpi::mpich::{self, Mpich};
use lbf_capture::mpi::Capture;
use lbf_capture::EventSink;
use lbf_common::{mpi, Record, RecordKind, ARG_WORDS};
use lbf_model::event::{Event, ProcInfo};

/// Round trips: each is two sends and two receives, eight records.
const ROUND_TRIPS: u64 = 25_000;
/// MPICH's `MPI_BYTE`.
const BYTE: u64 = 0x4c00_010d;
/// Where the receives' status lives (any user address above the first page).
const STATUS: u64 = 0x1000;

/// Both ranks are MPICH processes 100 and 101, world ranks 0 and 1.
struct Ranks;

impl ProcessInspector for Ranks {
    fn abi(&mut self, tgid: u32) -> Result<Abi, InspectError> {
        match tgid {
            100 | 101 => Ok(Abi::Mpich(Mpich)),
            _ => Err(InspectError {
                tgid,
                reason: "not a rank".into(),
            }),
        }
    }
    fn launch_rank(&mut self, tgid: u32) -> Option<LaunchRank> {
        Some(LaunchRank {
            rank: tgid.checked_sub(100)?,
            size: Some(2),
        })
    }
}

/// Counts what the capture hands out.
#[derive(Default)]
struct Count(u64);

impl EventSink for Count {
    fn process(&mut self, _info: &ProcInfo) {}
    fn event(&mut self, _event: &Event) {
        self.0 += 1;
    }
}

/// Feeds a capture the records of a run, stamped 1 µs apart, each written into one reused
/// record as `lbf-trace`'s reader writes them (so that they are in the cache, as there).
struct Feed<'a> {
    capture: &'a mut Capture,
    sink: &'a mut Count,
    record: Box<Record>,
    ts: u64,
}

impl Feed<'_> {
    fn push(&mut self, kind: RecordKind, rank: u32, fn_id: u16, args: &[u64], mem: &[u8]) {
        let r = &mut *self.record;
        r.kind = kind as u16;
        r.fn_id = fn_id;
        r.mem_len = mem.len() as u16;
        r.tgid = 100 + rank;
        r.tid = 100 + rank;
        r.ts_ns = self.ts;
        r.cpu_ns = self.ts / 2;
        r.args = [0; ARG_WORDS];
        r.args[..args.len()].copy_from_slice(args);
        r.mem[..mem.len()].copy_from_slice(mem);
        self.ts += 1_000;
        self.capture.record(r, self.sink);
    }

    fn call(&mut self, rank: u32, fn_id: u16, args: &[u64], exit_mem: &[u8]) {
        self.push(RecordKind::CallEntry, rank, fn_id, args, &[]);
        self.push(RecordKind::CallExit, rank, fn_id, &[0], exit_mem);
    }

    fn send(&mut self, from: u32, to: u32, bytes: u64) {
        let args = [0, bytes, BYTE, to as u64, 7, mpich::COMM_WORLD];
        self.call(from, mpi::SEND, &args, &[]);
    }

    fn recv(&mut self, at: u32, from: u32, bytes: u32) {
        let args = [
            0,
            bytes as u64,
            BYTE,
            from as u64,
            7,
            mpich::COMM_WORLD,
            STATUS,
        ];
        // MPICH's MPI_Status: count, count high bits and cancelled, source, tag, error.
        let mut status = [0u8; 20];
        for (i, v) in [bytes as i32, 0, from as i32, 7, 0].into_iter().enumerate() {
            status[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        self.call(at, mpi::RECV, &args, &status);
    }

    /// `ROUND_TRIPS` 1 KiB round trips between the two ranks, with their `MPI_Init` and
    /// `MPI_Finalize`.
    fn ping_pong(&mut self) {
        for rank in 0..2 {
            self.call(rank, mpi::INIT, &[], &[]);
        }
        for _ in 0..ROUND_TRIPS {
            self.send(0, 1, 1024);
            self.recv(1, 0, 1024);
            self.send(1, 0, 1024);
            self.recv(0, 1, 1024);
        }
        for rank in 0..2 {
            self.call(rank, mpi::FINALIZE, &[], &[]);
        }
    }
}

/// Records of one run: `ROUND_TRIPS` round trips, 8 records each, and 8 for the start and end.
const RECORDS: u64 = 8 * ROUND_TRIPS + 8;

fn capture(c: &mut Criterion) {
    let mut group = c.benchmark_group("capture");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(20);
    group.bench_function("MPICH ping-pong, records to events", |b| {
        b.iter_batched(
            || {
                // SAFETY: Record is plain old data, for which all zeros is a valid value.
                let record = Box::new(unsafe { std::mem::zeroed::<Record>() });
                (Capture::new(Box::new(Ranks), "host"), record)
            },
            |(mut capture, record)| {
                let mut sink = Count::default();
                Feed {
                    capture: &mut capture,
                    sink: &mut sink,
                    record,
                    ts: 1_000,
                }
                .ping_pong();
                let summary = capture.finish(&mut sink);
                assert_eq!(summary.unmatched_recvs, 0, "every receive matched");
                assert!(sink.0 >= 4 * ROUND_TRIPS, "{} events", sink.0);
                sink.0
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, capture);
criterion_main!(benches);
