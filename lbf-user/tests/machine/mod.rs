//! How much CPU the machine used while a test's job ran, to tell whether other work competed
//! with it: a prediction is for the machine as the run had it, and a busy shared machine
//! (builds next to the tests) makes any run slower than predicted. Shared by the capture
//! tests' harness (`traced`) and the cluster tests (`cluster_support`), with the lookups of
//! processes in `/proc` they need.

/// Share of the machine's CPU that other work may use during a run whose time is checked
/// against a prediction, before the check is skipped (and says so).
pub(crate) const BUSY_MACHINE: f64 = 0.10;

/// CPU seconds of this process and of its waited-for descendants.
pub(crate) fn own_cpu_seconds() -> f64 {
    let usage = |who| {
        // SAFETY: getrusage fills the zeroed struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut ru) };
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
        t(ru.ru_utime) + t(ru.ru_stime)
    };
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

/// CPU seconds the machine has used since boot (all CPUs, idle and I/O wait excluded).
pub(crate) fn machine_cpu_seconds() -> f64 {
    // user nice system idle iowait irq softirq steal ...
    cpu_line_seconds()
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum()
}

/// CPU seconds the hypervisor took from this machine's CPUs (steal time, all CPUs) since boot.
pub(crate) fn steal_seconds() -> f64 {
    cpu_line_seconds().get(7).copied().unwrap_or(0.0)
}

/// The fields of `/proc/stat`'s `cpu` line (all CPUs: user nice system idle iowait irq softirq
/// steal ...), in seconds.
fn cpu_line_seconds() -> Vec<f64> {
    let stat = std::fs::read_to_string("/proc/stat").expect("reading /proc/stat");
    let line = stat.lines().next().expect("the cpu line");
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    line.split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse::<f64>().ok())
        .map(|t| t / tick)
        .collect()
}

/// The machine's cores.
pub(crate) fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// Runs the calling thread, and what it starts from now on, at the highest priority: other
/// work on a shared machine then barely competes with the run whose time is predicted.
pub(crate) fn raise_priority() {
    // SAFETY: plain setpriority on the calling thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
}

/// CPU seconds process `pid` has used, with its waited-for children (0 once it is gone).
pub(crate) fn process_cpu_seconds(pid: u32) -> f64 {
    // Fields 14-17 of the line: utime stime cutime cstime, in clock ticks.
    let ticks: f64 = stat_fields(pid)
        .unwrap_or_default()
        .iter()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The share of the machine's CPU (all cores over `wall` seconds) that went to other work:
/// the CPU seconds the machine used (`machine`) less those the test accounts for as its own
/// (`ours`: itself, the job, its helpers).
pub(crate) fn others_share(machine: f64, ours: f64, wall: f64) -> f64 {
    (machine - ours).max(0.0) / (cores() * wall)
}

/// The machine's, this process's and some helper processes' CPU clocks at the start of a run.
pub(crate) struct CpuWatch {
    machine: f64,
    own: f64,
    /// lbf's daemons: (PID, CPU seconds at the start).
    daemons: Vec<(u32, f64)>,
    /// Hosts of the job's processes: (PID, CPU seconds at the start).
    hosts: Vec<(u32, f64)>,
    start: std::time::Instant,
}

/// Each of `pids` with its CPU seconds now.
fn cpu_now(pids: &[u32]) -> Vec<(u32, f64)> {
    pids.iter().map(|&p| (p, process_cpu_seconds(p))).collect()
}

/// The CPU seconds `watched` used since their readings.
fn cpu_since(watched: &[(u32, f64)]) -> f64 {
    watched
        .iter()
        .map(|&(p, before)| (process_cpu_seconds(p) - before).max(0.0))
        .sum()
}

impl CpuWatch {
    /// Starts watching; `daemons` (lbf's node daemons and builder) and `hosts` (a remote
    /// shell's server, whose children are the job's processes on its host and are counted in
    /// its CPU once reaped) are running processes of the test whose CPU is not competing
    /// work.
    pub(crate) fn start(daemons: &[u32], hosts: &[u32]) -> CpuWatch {
        CpuWatch {
            machine: machine_cpu_seconds(),
            own: own_cpu_seconds(),
            daemons: cpu_now(daemons),
            hosts: cpu_now(hosts),
            start: std::time::Instant::now(),
        }
    }

    /// The shares of the machine's CPU since the start: [`others_share`], the test's own CPU
    /// being this process's, its waited-for descendants', the daemons' and hosts', and
    /// `unwaited` seconds of the job's processes that none of those waits for (PVM tasks are
    /// pvmd's children); and lbf's daemons' own share. Call it while they still run.
    pub(crate) fn shares(&self, unwaited: f64) -> Shares {
        let daemons = cpu_since(&self.daemons);
        let wall = self.start.elapsed().as_secs_f64();
        Shares {
            others: others_share(
                machine_cpu_seconds() - self.machine,
                own_cpu_seconds() - self.own + daemons + cpu_since(&self.hosts) + unwaited,
                wall,
            ),
            lbf: daemons / (cores() * wall),
        }
    }
}

/// Who used the machine's CPU besides a job, each as a share of all its cores over the run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shares {
    /// Work that is not the test's: a machine busier than [`BUSY_MACHINE`] did not run the
    /// configuration predicted.
    pub others: f64,
    /// lbf's node daemons and builder: they ran on the job's cores, so the job, if it kept
    /// every core busy, waited for up to this share of its time, which no prediction of the
    /// job alone includes.
    pub lbf: f64,
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces and
/// parentheses): state, parent, ...; `None` once the process is gone.
pub(crate) fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(String::from).collect())
}

/// Process `pid`'s parent.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Process `pid`'s command name.
pub(crate) fn comm(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// The processes in `/proc` now.
pub(crate) fn process_ids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("listing /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether a test's requirement `what` (root, an MPI, PVM, ...) is met. Missing, the test is
/// skipped, saying so (`SKIPPED: ...` on its output); with `CI=true` a missing requirement
/// fails the test instead, naming it, so that nothing passes by not running.
pub(crate) fn require(what: &str, met: bool) -> bool {
    if !met {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{what} is missing (CI=true: a test does not pass by skipping)"
        );
        eprintln!("SKIPPED: {what} is missing");
    }
    met
}

/// Whether this process may load eBPF programs: root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Records that an accuracy check was not made, because other work took the machine in every
/// attempt (`why`): one line in `target/tmp/unchecked-accuracy.txt`, which `scripts/test.sh`
/// counts at the end of the run.
pub(crate) fn not_checked(why: &str) {
    use std::io::Write;
    eprintln!("NOT CHECKED: {why}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("unchecked-accuracy.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{}: {why}", std::thread::current().name().unwrap_or("?"));
    }
}
