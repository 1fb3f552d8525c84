//! Shared by the capture integration tests: builds the MPI workloads of `tests/workloads/mpi`
//! with each MPI's compiler wrapper (cached by modification time), runs them under the eBPF
//! tracer feeding a [`Capture`], and parses the programs' own `LBF-CHECK` lines.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use lbf::capture::procfs::ProcFs;
use lbf::capture::{Capture, CaptureSink, EventLog, Library, Summary};
use lbf::probe::{self, HeldChild, Tracer, TracerOptions};

/// One traced run at a time: the machine has 2 cores and the CPU checks need them.
static TRACING: Mutex<()> = Mutex::new(());

/// An installed MPI implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    fn suffix(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// The shell command that runs `np` ranks of `program args`.
    fn launch(self, np: u32, program: &Path, args: &str) -> String {
        let program = program.display();
        match self {
            Mpi::OpenMpi => format!(
                "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                 mpirun.openmpi --oversubscribe --bind-to none -np {np} {program} {args}"
            ),
            Mpi::Mpich => format!("mpirun.mpich -n {np} {program} {args}"),
        }
    }
}

/// Whether this process may load eBPF programs; the tests skip (and say so) otherwise.
pub fn can_trace() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: tracing needs root");
    }
    root
}

fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/mpi")
}

fn modified(path: &Path) -> std::time::SystemTime {
    path.metadata()
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workload `name` built with `mpi`'s `mpicc`, rebuilt when its source or the shared
/// header is newer than the binary.
pub fn workload(mpi: Mpi, name: &str) -> PathBuf {
    let src = workloads_dir().join(format!("{name}.c"));
    let header = workloads_dir().join("lbf_check.h");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("mpi-workloads")
        .join(mpi.suffix());
    std::fs::create_dir_all(&out_dir).expect("creating the workload build directory");
    let bin = out_dir.join(name);
    let fresh = bin.exists() && modified(&bin) > modified(&src).max(modified(&header));
    if !fresh {
        let cc = format!("mpicc.{}", mpi.suffix());
        let status = Command::new(&cc)
            .args(["-O1", "-g", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        assert!(status.success(), "{cc} failed on {}", src.display());
    }
    bin
}

/// One rank's `LBF-CHECK` line: what the program itself counted and measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    pub rank: u32,
    pub sends: u64,
    pub send_bytes: u64,
    pub recvs: u64,
    pub recv_bytes: u64,
    pub colls: u64,
    pub cpu_ns: u64,
    pub work_ns: u64,
    pub wall_ns: u64,
}

/// The `LBF-CHECK` lines of `output`, by rank.
pub fn parse_checks(output: &str) -> Vec<Check> {
    let mut checks: Vec<Check> = output
        .lines()
        .filter_map(|l| l.strip_prefix("LBF-CHECK "))
        .map(|fields| {
            let mut c = Check::default();
            for kv in fields.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("key=value");
                let v: u64 = v.parse().expect("a number");
                match k {
                    "rank" => c.rank = v as u32,
                    "sends" => c.sends = v,
                    "send_bytes" => c.send_bytes = v,
                    "recvs" => c.recvs = v,
                    "recv_bytes" => c.recv_bytes = v,
                    "colls" => c.colls = v,
                    "cpu_ns" => c.cpu_ns = v,
                    "work_ns" => c.work_ns = v,
                    "wall_ns" => c.wall_ns = v,
                    other => panic!("unknown LBF-CHECK field {other}"),
                }
            }
            c
        })
        .collect();
    checks.sort_by_key(|c| c.rank);
    checks
}

/// What a traced run produced.
pub struct Traced {
    pub log: EventLog,
    pub summary: Summary,
    pub checks: Vec<Check>,
}

/// Runs workload `name` with `np` ranks and `args` under the tracer.
pub fn trace(mpi: Mpi, name: &str, np: u32, args: &str) -> Traced {
    let bin = workload(mpi, name);
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile(&format!("{name}-{}.out", mpi.suffix()));
    let command = format!("{} > {}", mpi.launch(np, &bin, args), out.display());
    let mut tracer = Tracer::load(&TracerOptions {
        ringbuf_bytes: TracerOptions::DEFAULT_RINGBUF_BYTES,
    })
    .expect("loading the eBPF tracer");
    for path in probe::installed_mpi_libraries().expect("finding MPI libraries") {
        if let Some(lib) = Library::from_path(&path.to_string_lossy()) {
            tracer
                .attach_mpi_library(&path, &lib.fn_reads())
                .expect("attaching");
        }
    }
    let mut reader = tracer.records().expect("ring buffer");
    let mut child =
        HeldChild::spawn(&["sh".into(), "-c".into(), command.clone()]).expect("spawning");
    tracer.trace_pid(child.pid()).expect("tracing the command");
    child.release().expect("starting the command");
    let capture = Capture::new(Box::new(ProcFs::new()), "localhost");
    let mut feed = CaptureSink::new(capture, EventLog::default());
    let stop = std::sync::atomic::AtomicBool::new(false);
    probe::run(&mut tracer, &mut reader, &mut feed, &stop).expect("capturing");
    let status = child.wait().expect("waiting for the command");
    let output = std::fs::read_to_string(&out).expect("reading the program's output");
    assert_eq!(status, 0, "`{command}` failed:\n{output}");
    let (log, summary) = feed.into_parts();
    Traced {
        log,
        summary: summary.expect("finished"),
        checks: parse_checks(&output),
    }
}

fn tempfile(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}
