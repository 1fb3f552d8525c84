//! `lbf-trace` end to end with the real kernel side and real MPI: lifecycle records, MPI call
//! records with Open MPI and MPICH, exact CPU time, attaching with -p, a call in flight at
//! the end, `MPI_Init` notices no one reads, and the clear errors.
//! Needs root (the CI runs as root), Open MPI and MPICH (scripts/setup.sh installs them).

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

const LBF_TRACE: &str = env!("CARGO_BIN_EXE_lbf-trace");
const OMPI_ROOT: [(&str, &str); 2] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
];
/// Messages rank 0 sends to rank 1 in the probe workload.
const SENDS: usize = 25;

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lbf-probe-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds tests/workloads/probe/mpi_probe.c with `mpicc` into `dir`.
fn build_workload(mpicc: &str, dir: &Path) -> PathBuf {
    build_program("mpi_probe", mpicc, dir)
}

/// Builds tests/workloads/probe/`name`.c with `mpicc` into `dir`.
fn build_program(name: &str, mpicc: &str, dir: &Path) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/workloads/probe/{name}.c"));
    let exe = dir.join(format!("{name}_{mpicc}"));
    let out = Command::new(mpicc)
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output();
    let out = out.unwrap_or_else(|e| panic!("running {mpicc} (run scripts/setup.sh): {e}"));
    assert!(
        out.status.success(),
        "{mpicc} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs lbf-trace with `args`, dumping raw records into `dump`.
fn lbf_trace(args: &[&str], dump: &Path, env: &[(&str, &str)]) -> Output {
    let out = Command::new(LBF_TRACE)
        .arg("--raw-dump")
        .arg(dump)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "lbf-trace stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The records of a raw dump, and its final `lost` line.
fn read_dump(dump: &Path) -> (Vec<Value>, Value) {
    let text = fs::read_to_string(dump).unwrap();
    let mut records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lost = records.pop().expect("a lost line");
    assert!(
        lost.get("lost").is_some(),
        "last line is the loss report: {lost}"
    );
    (records, lost["lost"].clone())
}

/// Number of records of `kind` for function `name` from process `tgid` (any if None).
fn count(records: &[Value], kind: &str, name: &str, tgid: Option<u64>) -> usize {
    records
        .iter()
        .filter(|r| r["kind"] == kind && r["fn"] == name)
        .filter(|r| tgid.is_none_or(|t| r["tgid"] == t))
        .count()
}

/// `LBF_PROBE key=value ...` lines of the workload, one per rank, keyed by rank.
fn rank_lines(stdout: &[u8]) -> HashMap<u64, HashMap<String, u64>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("LBF_PROBE "))
        .map(|l| {
            let kv: HashMap<String, u64> = l
                .split_whitespace()
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
                .collect();
            (kv["rank"], kv)
        })
        .collect()
}

/// Checks the MPI records of one run of the probe workload against what its ranks printed.
/// `from_start`: traced from the start (else attached after `MPI_Init` and `MPI_Comm_rank`).
fn check_mpi_run(
    records: &[Value],
    lost: &Value,
    ranks: &HashMap<u64, HashMap<String, u64>>,
    from_start: bool,
) {
    assert_eq!(ranks.len(), 2, "two ranks reported");
    assert_eq!(lost["ringbuf_full"], 0);
    assert_eq!(lost["exit_without_entry"], 0);
    check_calls_are_the_ranks_own(records, ranks);
    check_exits_carry_their_entry_args(records);
    for (rank, kv) in ranks {
        let pid = kv["pid"];
        let sends = if *rank == 0 { SENDS } else { 0 };
        assert_eq!(
            count(records, "CallEntry", "PMPI_Send", Some(pid)),
            sends,
            "rank {rank}"
        );
        assert_eq!(
            count(records, "CallExit", "PMPI_Send", Some(pid)),
            sends,
            "rank {rank}"
        );
        let recvs = if *rank == 1 { SENDS } else { 0 };
        assert_eq!(
            count(records, "CallEntry", "PMPI_Recv", Some(pid)),
            recvs,
            "rank {rank}"
        );
        for f in [
            "PMPI_Init",
            "PMPI_Comm_rank",
            "PMPI_Barrier",
            "PMPI_Finalize",
        ] {
            let entries = count(records, "CallEntry", f, Some(pid));
            let exits = count(records, "CallExit", f, Some(pid));
            if from_start || !matches!(f, "PMPI_Init" | "PMPI_Comm_rank") {
                assert_eq!((entries, exits), (1, 1), "{f} rank {rank}");
            } else {
                // Attached during or after the call: at most the exit, or both.
                assert!(
                    entries <= exits && exits <= 1,
                    "{f} rank {rank}: {entries} {exits}"
                );
            }
        }
        // CPU: the thread's clock at Finalize entry versus the one the rank read just before.
        let fin = records
            .iter()
            .find(|r| r["kind"] == "CallEntry" && r["fn"] == "PMPI_Finalize" && r["tgid"] == pid)
            .unwrap();
        assert_eq!(fin["tid"], kv["tid"], "Finalize called by the main thread");
        let traced = fin["cpu_ns"].as_u64().unwrap() as f64;
        let own = kv["thread_cpu_ns"] as f64;
        let err = (traced - own).abs() / own;
        eprintln!("rank {rank}: traced cpu {traced} ns, own clock {own} ns, error {err:.4}");
        assert!(
            err < 0.05,
            "rank {rank}: CPU {traced} vs own {own} ({:.1} %)",
            err * 100.0
        );
        // Barrier's exit record carries the return value 0 (MPI_SUCCESS).
        let exit = records
            .iter()
            .find(|r| r["kind"] == "CallExit" && r["fn"] == "PMPI_Barrier" && r["tgid"] == pid)
            .unwrap();
        assert_eq!(exit["args"][0].as_u64().unwrap() as u32, 0);
    }
}

/// The kernel-side process filter: every call record comes from a rank of this run, although
/// the probes fire in every process using the library (other tests run MPI programs at once).
fn check_calls_are_the_ranks_own(records: &[Value], ranks: &HashMap<u64, HashMap<String, u64>>) {
    let pids: Vec<u64> = ranks.values().map(|kv| kv["pid"]).collect();
    for r in records {
        if r["kind"] == "CallEntry" || r["kind"] == "CallExit" {
            let tgid = r["tgid"].as_u64().unwrap();
            assert!(pids.contains(&tgid), "call record of untraced {tgid}: {r}");
        }
    }
}

/// Each exit repeats the arguments its entry kept for the thread (`args[1..8]` = the entry's
/// `args[0..7]`): the return probe found the entry's saved arguments under the same tid and
/// function (the attach cookie).
fn check_exits_carry_their_entry_args(records: &[Value]) {
    let mut open: HashMap<(u64, String), &Value> = HashMap::new();
    let mut exits = 0;
    for r in records {
        let key = || (r["tid"].as_u64().unwrap(), r["fn"].to_string());
        if r["kind"] == "CallEntry" {
            open.insert(key(), r);
        } else if r["kind"] == "CallExit" {
            let Some(entry) = open.remove(&key()) else {
                continue; // entered before an attach (-p): no entry record
            };
            let args = |v: &Value| -> Vec<u64> {
                v["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_u64().unwrap())
                    .collect()
            };
            assert_eq!(
                args(r)[1..8],
                args(entry)[0..7],
                "exit {r} of entry {entry}"
            );
            exits += 1;
        }
    }
    assert!(exits > 0, "no exit with its entry");
}

#[test]
fn lifecycle_records_and_exit_status_of_a_command() {
    let dir = scratch("lifecycle");
    let dump = dir.join("raw.jsonl");
    let out = lbf_trace(
        &["--", "sh", "-c", "/bin/sleep 0.1; /bin/true; exit 3"],
        &dump,
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's exit status is lbf-trace's"
    );
    let (records, lost) = read_dump(&dump);
    assert_eq!(lost["ringbuf_full"], 0);
    let kinds = |k: &str| {
        records
            .iter()
            .filter(|r| r["kind"] == k)
            .collect::<Vec<_>>()
    };
    let exec_names: Vec<String> = kinds("Exec")
        .iter()
        .map(|r| {
            let hex = r["mem"].as_str().unwrap();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            String::from_utf8_lossy(&bytes)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    for name in ["sleep", "true"] {
        assert!(
            exec_names.iter().any(|n| n.ends_with(name)),
            "{name} in {exec_names:?}"
        );
    }
    let forks = kinds("Fork");
    assert!(forks.len() >= 2, "sh forked sleep and true: {forks:?}");
    // Every forked child and the shell itself exit, each exactly once.
    let shell = forks[0]["tgid"].as_u64().unwrap();
    let mut expected: Vec<u64> = forks
        .iter()
        .map(|f| f["args"][0].as_u64().unwrap())
        .collect();
    expected.push(shell);
    expected.sort();
    let mut exits: Vec<u64> = kinds("Exit")
        .iter()
        .map(|r| r["tgid"].as_u64().unwrap())
        .collect();
    exits.sort();
    assert_eq!(exits, expected);
    fs::remove_dir_all(dir).ok();
}

#[test]
fn open_mpi_calls_and_cpu_time() {
    let dir = scratch("ompi");
    let exe = build_workload("mpicc.openmpi", &dir);
    let dump = dir.join("raw.jsonl");
    let sends = SENDS.to_string();
    let args = [
        "--",
        "mpirun.openmpi",
        "-np",
        "2",
        "--oversubscribe",
        exe.to_str().unwrap(),
        &sends,
    ];
    let out = lbf_trace(&args, &dump, &OMPI_ROOT);
    assert!(out.status.success(), "mpirun failed: {out:?}");
    let (records, lost) = read_dump(&dump);
    check_mpi_run(&records, &lost, &rank_lines(&out.stdout), true);
    fs::remove_dir_all(dir).ok();
}

#[test]
fn mpich_calls_and_cpu_time() {
    let dir = scratch("mpich");
    let exe = build_workload("mpicc.mpich", &dir);
    let dump = dir.join("raw.jsonl");
    let sends = SENDS.to_string();
    let args = [
        "--",
        "mpirun.mpich",
        "-n",
        "2",
        exe.to_str().unwrap(),
        &sends,
    ];
    let out = lbf_trace(&args, &dump, &[]);
    assert!(out.status.success(), "mpirun failed: {out:?}");
    let (records, lost) = read_dump(&dump);
    check_mpi_run(&records, &lost, &rank_lines(&out.stdout), true);
    fs::remove_dir_all(dir).ok();
}

/// 20,000 `MPI_Comm_rank` calls through a 16 KiB ring buffer: their records (one 128-byte
/// item per call) wrap around its end again and again, items straddling it. The reader may
/// fall behind (it needs more time per call than the program, certainly as a debug build),
/// so records may be lost: every call read must read back whole (its entry, and its exit with
/// the entry's arguments and the rank), and every call not read must be counted lost. The
/// program sleeps 1 ms after every 64 calls (`call_loop`'s `paced` mode), so that the reader
/// gets the CPU to read around the ring many times however busy the machine is.
#[test]
fn calls_read_back_whole_through_a_ring_buffer_that_wraps() {
    const CALLS: usize = 20_000;
    const RING: usize = 16384;
    let dir = scratch("small-ring");
    let exe = build_program("call_loop", "mpicc.mpich", &dir);
    let dump = dir.join("raw.jsonl");
    let (calls, ring) = (CALLS.to_string(), RING.to_string());
    let args = [
        "--ringbuf-size",
        &ring,
        "--",
        "mpirun.mpich",
        "-n",
        "1",
        exe.to_str().unwrap(),
        &calls,
        "paced",
    ];
    let out = lbf_trace(&args, &dump, &[]);
    assert!(out.status.success(), "mpirun failed: {out:?}");
    let (records, lost) = read_dump(&dump);
    let entries = count(&records, "CallEntry", "PMPI_Comm_rank", None);
    assert_eq!(count(&records, "CallExit", "PMPI_Comm_rank", None), entries);
    assert!(
        entries * 128 > 4 * RING,
        "{entries} calls read: the ring wrapped too few times"
    );
    // The loop's calls and the one before it, each read or lost (an entry and an exit).
    let lost = lost["ringbuf_full"].as_u64().unwrap() as usize;
    assert!(
        entries + lost / 2 > CALLS,
        "{entries} calls read, {lost} records lost"
    );
    check_exits_carry_their_entry_args(&records);
    let ranks = records
        .iter()
        .filter(|r| r["kind"] == "CallExit" && r["fn"] == "PMPI_Comm_rank")
        .filter(|r| r["mem"] == "00000000")
        .count();
    assert_eq!(ranks, entries, "every exit carries rank 0");
    fs::remove_dir_all(dir).ok();
}

#[test]
fn attach_to_running_mpich_ranks() {
    let dir = scratch("attach");
    let exe = build_workload("mpicc.mpich", &dir);
    // Ranks burn 5 s of CPU before sending: time to find them and attach (attaching waits
    // for the kernel while other tests' probes are being removed).
    let job = Command::new("mpirun.mpich")
        .args(["-n", "2"])
        .arg(&exe)
        .args([&SENDS.to_string(), "5000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    for _ in 0..50 {
        thread::sleep(Duration::from_millis(100));
        let out = Command::new("pgrep")
            .arg("-f")
            .arg(exe.to_str().unwrap())
            .output()
            .unwrap();
        pids = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        // mpirun's own command line names the program too: keep processes running it.
        pids.retain(|p| fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe));
        if pids.len() == 2 {
            break;
        }
    }
    assert_eq!(pids.len(), 2, "found both ranks: {pids:?}");
    // Wait until both ranks have mapped the MPI library (their MPI_Init is under way).
    let mapped = |pid: &String| {
        fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libmpich"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !pids.iter().all(mapped) {
        assert!(
            std::time::Instant::now() < deadline,
            "the ranks {pids:?} mapped no MPICH within a minute"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let dump = dir.join("raw.jsonl");
    let mut trace = Command::new(LBF_TRACE)
        .arg("--raw-dump")
        .arg(&dump)
        .args(["-v", "-p", &pids.join(",")])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its stderr, read on: the line saying the probes are attached goes to `attached`.
    let (attached, on_attach) = std::sync::mpsc::channel();
    let stderr = BufReader::new(trace.stderr.take().unwrap());
    let stderr = thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("probes attached") {
                attached.send(()).ok();
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    // An untraced run of the same program while the probes are attached: the kernel-side
    // filter must keep its calls out.
    on_attach
        .recv_timeout(Duration::from_secs(120))
        .expect("lbf-trace said its probes are attached");
    let untraced = Command::new("mpirun.mpich")
        .args(["-n", "2"])
        .arg(&exe)
        .args(["3", "0"])
        .output()
        .unwrap();
    assert!(untraced.status.success());
    assert!(
        trace.try_wait().unwrap().is_none(),
        "the untraced run ended after the traced job: the test did not exercise the filter"
    );
    let status = trace.wait().unwrap();
    eprintln!("lbf-trace stderr:\n{}", stderr.join().unwrap());
    assert!(status.success(), "lbf-trace -p failed");
    let job = job.wait_with_output().unwrap();
    assert!(job.status.success());
    let (records, lost) = read_dump(&dump);
    let untraced_pids: Vec<u64> = rank_lines(&untraced.stdout)
        .values()
        .map(|kv| kv["pid"])
        .collect();
    assert_eq!(
        untraced_pids.len(),
        2,
        "the untraced run's two ranks reported"
    );
    for pid in untraced_pids {
        assert!(
            !records.iter().any(|r| r["tgid"] == pid),
            "records of untraced process {pid}"
        );
    }
    check_mpi_run(&records, &lost, &rank_lines(&job.stdout), false);
    fs::remove_dir_all(dir).ok();
}

/// A call still in flight when the capture stops keeps its entry record. The kernel side
/// keeps the entry record of a call without user memory at entry (`MPI_Recv`) in the
/// thread's state until the return; at the end of a capture user space reads it from the
/// states of the traced threads.
#[test]
fn a_call_in_flight_when_the_capture_stops_keeps_its_entry() {
    let dir = scratch("in-flight");
    let exe = build_program("mpi_wait", "mpicc.mpich", &dir);
    let dump = dir.join("raw.jsonl");
    // Rank 0 sends only after 120 s: rank 1 is inside MPI_Recv when lbf-trace is stopped.
    let mut trace = Command::new(LBF_TRACE)
        .arg("--raw-dump")
        .arg(&dump)
        .args(["--", "mpirun.mpich", "-n", "2"])
        .arg(&exe)
        .arg("120")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(trace.stdout.take().unwrap());
    let waiting = stdout
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("LBF_WAIT"))
        .expect("rank 1 reached its receive");
    let kv: HashMap<&str, u64> = waiting
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    // Rank 1 calls MPI_Recv right after the line, and MPICH polls inside it: once its
    // thread has run 100 ms more, it is in the call.
    let tid = kv["tid"];
    let ran_ns = || {
        fs::read_to_string(format!("/proc/{}/task/{tid}/schedstat", kv["pid"]))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .expect("rank 1's thread is running")
    };
    let (before, deadline) = (ran_ns(), Instant::now() + Duration::from_secs(60));
    while ran_ns() < before + 100_000_000 {
        assert!(
            Instant::now() < deadline,
            "rank 1 did not run 100 ms in a minute"
        );
        thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: a plain kill(2) of the child started above.
    assert_eq!(unsafe { libc::kill(trace.id() as i32, libc::SIGINT) }, 0);
    let out = trace.wait_with_output().unwrap();
    eprintln!(
        "lbf-trace stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (records, lost) = read_dump(&dump);
    assert_eq!(lost["ringbuf_full"], 0);
    let recv: Vec<&Value> = records.iter().filter(|r| r["fn"] == "PMPI_Recv").collect();
    assert_eq!(recv.len(), 1, "one record of the receive: {recv:?}");
    let entry = recv[0];
    assert_eq!(entry["kind"], "CallEntry");
    assert_eq!(entry["tgid"], kv["pid"]);
    assert_eq!(entry["tid"], kv["tid"]);
    assert!(entry["cpu_ns"].as_u64().unwrap() > 0, "{entry}");
    fs::remove_dir_all(dir).ok();
}

#[test]
fn clear_errors_for_a_dead_pid_and_an_mpi_capture_without_mpi() {
    let dir = scratch("errors");
    let dump = dir.join("raw.jsonl");
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id().to_string();
    child.wait().unwrap();
    let out = lbf_trace(&["-p", &dead], &dump, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no process with PID {dead}")),
        "{err}"
    );

    // Without --source, a process without MPI is captured by its sockets.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let out = lbf_trace(&["--source", "mpi", "-p", &pid], &dump, &[]);
    sleeper.kill().ok();
    sleeper.wait().ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has an MPI library mapped"), "{err}");
    fs::remove_dir_all(dir).ok();
}

/// `MPI_Init` notices beyond the room of their ring buffer are counted, not dropped unseen:
/// with `--raw-dump` alone nothing reads them (no capture, so no inspection), so of 2000
/// entries of a stand-in `PMPI_Init` the first 1023 fill the 16 KiB ring (16 bytes each with
/// the ring's header; the kernel takes at most one byte less than the ring's size) and the
/// others are counted in the dump's `lost` line.
#[test]
fn mpi_init_notices_beyond_their_ring_are_counted() {
    const ENTRIES: u64 = 2000;
    let dir = scratch("init-notices");
    let source = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/workloads/probe/{name}.c"))
    };
    let lib = dir.join("libfakempi.so");
    let exe = dir.join("init_loop");
    let cc = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("cc").args(args).output().expect("running cc");
        assert!(out.status.success(), "cc failed: {out:?}");
    };
    cc(&[
        "-O1".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        source("fake_mpi").as_os_str(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        "-O1".as_ref(),
        "-o".as_ref(),
        exe.as_os_str(),
        source("init_loop").as_os_str(),
        lib.as_os_str(),
        rpath.as_ref(),
    ]);
    let dump = dir.join("raw.jsonl");
    let entries = ENTRIES.to_string();
    let args = [
        "--source",
        "mpi",
        "--mpi-lib",
        lib.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        &entries,
    ];
    let out = lbf_trace(&args, &dump, &[]);
    assert!(out.status.success(), "{out:?}");
    let (records, lost) = read_dump(&dump);
    assert_eq!(
        count(&records, "CallEntry", "PMPI_Init", None) as u64,
        ENTRIES
    );
    let room = u64::from(lbf_common::maps::INIT_NOTICES_BYTES) / 16 - 1;
    assert_eq!(lost["init_notices_lost"], ENTRIES - room, "{lost}");
    fs::remove_dir_all(dir).ok();
}
