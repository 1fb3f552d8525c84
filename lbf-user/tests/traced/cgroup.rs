//! CPU cgroups of this machine, for slower "hosts": a quota of CPU time per period makes a
//! process in the cgroup run at that share of a CPU.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A cgroup with the `cpu` controller, removed on drop (a cgroup with processes or children
/// left cannot be; drop children first). Under cgroup v2 at `/sys/fs/cgroup`, under v1 at
/// `/sys/fs/cgroup/cpu` (this machine kind mounts v1's).
pub(crate) struct Cgroup(PathBuf);

/// Whether the cgroup v2 file `file` lists the `cpu` controller.
fn lists_cpu(file: &Path) -> bool {
    std::fs::read_to_string(file).is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
}

impl Cgroup {
    /// A cgroup whose CPU quota is `quota_us` of every 100 ms period, named after `name` and
    /// this process.
    pub(crate) fn new(name: &str, quota_us: u32) -> Self {
        let group = Cgroup::under(None, &format!("lbf-{name}-{}", std::process::id()));
        group.limit(quota_us, 100_000);
        group
    }

    /// A cgroup `name` without a quota, below `parent` (or the root); under v2 its parent
    /// hands it the `cpu` controller.
    pub(crate) fn under(parent: Option<&Cgroup>, name: &str) -> Self {
        let v2 = Path::new("/sys/fs/cgroup");
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let base = if lists_cpu(&v2.join("cgroup.controllers")) {
            let base = parent.map_or(v2, |p| p.path());
            if !lists_cpu(&base.join("cgroup.subtree_control")) {
                std::fs::write(base.join("cgroup.subtree_control"), "+cpu")
                    .expect("enabling the cpu controller");
            }
            base.to_path_buf()
        } else if v1.join("cpu.cfs_quota_us").exists() {
            parent.map_or(v1.to_path_buf(), |p| p.path().to_path_buf())
        } else {
            panic!(
                "no cgroup file system with the cpu controller (v2 at /sys/fs/cgroup, v1 at \
                 /sys/fs/cgroup/cpu)"
            );
        };
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).expect("making the cgroup");
        Cgroup(dir)
    }

    /// Whether this is a cgroup v2 group.
    fn v2(&self) -> bool {
        self.0.join("cgroup.controllers").exists()
    }

    /// Limits the group to `quota_us` of CPU time every `period_us`: `cpu.max` under v2,
    /// `cpu.cfs_period_us` and `cpu.cfs_quota_us` under v1.
    pub(crate) fn limit(&self, quota_us: u32, period_us: u32) {
        if self.v2() {
            std::fs::write(self.0.join("cpu.max"), format!("{quota_us} {period_us}"))
                .expect("cpu.max");
        } else {
            std::fs::write(self.0.join("cpu.cfs_period_us"), period_us.to_string())
                .expect("cpu.cfs_period_us");
            std::fs::write(self.0.join("cpu.cfs_quota_us"), quota_us.to_string())
                .expect("cpu.cfs_quota_us");
        }
    }

    /// Gives the group the largest CPU weight (`cpu.weight` 10000 under v2, `cpu.shares`
    /// 262144 under v1): against other work on the machine it gets what its quota allows,
    /// as a host of its own would.
    pub(crate) fn favour(&self) {
        let (file, value) = if self.v2() {
            ("cpu.weight", "10000")
        } else {
            ("cpu.shares", "262144")
        };
        std::fs::write(self.0.join(file), value).unwrap_or_else(|e| panic!("{file}: {e}"));
    }

    /// Its directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// A shell command that joins this cgroup, then runs `command`.
    pub(crate) fn run(&self, command: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!(
            "echo $$ > {}/cgroup.procs && exec {command}",
            self.0.display()
        ));
        c
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Where [`cgroup_speed`] measures this machine, at the same time as the cgroup.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reference {
    /// On the other CPU, both ways round: this machine as a process of it runs while every
    /// CPU is busy, for emulated hosts whose runs keep both CPUs busy. This VM's CPUs run 8 to
    /// 20 % slower per CPU-second while the other is busy (a spinning loop, both ways), so
    /// beside a group throttled most of the time this machine reads fast: a 25 % quota
    /// read 0.21 to 0.24 against it.
    OtherCpu,
    /// On the same CPU, outside the group, which must outweigh an ordinary process (see
    /// [`Cgroup::favour`]): that calibration runs whenever the quota leaves the CPU, the two
    /// measure the whole CPU over the same interval under the same neighbour, and the group's
    /// speed is its share of their sum. What the quota itself gives: 0.247 to 0.255 for a
    /// 25 % quota in six runs.
    SameCpu,
}

/// What [`cgroup_speed`] measured: the speed relative to this machine, the cores the
/// cgroup's host file gives, and the runs' listings.
pub(crate) struct CgroupSpeed {
    /// The cgroup's speed over this machine's, both measured at once.
    pub speed: f64,
    /// The cores of the cgroup's host file.
    pub cores: u32,
    /// What the calibrations printed: the cgroup's, then this machine's, for each run.
    pub listing: String,
}

/// `lbf-node calibrate --cpu --seconds SECONDS` in `group` (host file `file`) while the same
/// command measures this machine where `reference` says (host file `reference`), twice (the
/// group on CPU 0, then on CPU 1); the speed is the mean of the two runs'. At the same time
/// because this VM's speed drifts by more than 5 % within seconds: four references a few
/// seconds apart on an idle machine read 0.79 to 0.94 of calibrate's built-in one, and after
/// a minute of load a 25 % cgroup read 0.18 to 0.27 against a reference taken just before.
/// On each CPU because the two virtual CPUs need not be equally fast at a given moment (the
/// hypervisor takes time from one more than the other): measured one way only, four hosts
/// once read 17 to 21 % below their quotas together, which reordered placements in the advice
/// test.
pub(crate) fn cgroup_speed(
    group: &Cgroup,
    seconds: u32,
    file: &Path,
    reference: &Path,
    this_machine: Reference,
) -> CgroupSpeed {
    let (mut speeds, mut listing, mut cores) = (Vec::new(), String::new(), 0);
    for group_cpu in [0, 1] {
        let this_cpu = match this_machine {
            Reference::OtherCpu => 1 - group_cpu,
            Reference::SameCpu => group_cpu,
        };
        let (speed, this_speed, host_cores, text) =
            side_by_side(group, seconds, file, reference, group_cpu, this_cpu);
        speeds.push(match this_machine {
            Reference::OtherCpu => speed / this_speed,
            Reference::SameCpu => speed / (speed + this_speed),
        });
        cores = host_cores;
        listing += &text;
    }
    CgroupSpeed {
        speed: speeds.iter().sum::<f64>() / speeds.len() as f64,
        cores,
        listing,
    }
}

/// One run of [`cgroup_speed`]: `group` on CPU `group_cpu`, this machine on CPU `this_cpu`;
/// the speeds of both host files, the cgroup's cores and what both calibrations printed.
fn side_by_side(
    group: &Cgroup,
    seconds: u32,
    file: &Path,
    reference: &Path,
    group_cpu: u32,
    this_cpu: u32,
) -> (f64, f64, u32, String) {
    let node = env!("CARGO_BIN_EXE_lbf-node");
    let seconds = seconds.to_string();
    let this_machine = Command::new("taskset")
        .args(["-c", &this_cpu.to_string(), node, "calibrate", "--cpu"])
        .args(["--seconds", &seconds, "-o"])
        .arg(reference)
        .stdout(Stdio::piped())
        .spawn()
        .expect("lbf-node calibrate --cpu for this machine");
    let listing = super::run(&mut group.run(&format!(
        "taskset -c {group_cpu} {node} calibrate --cpu --seconds {seconds} -o {}",
        file.display()
    )));
    let this_machine = this_machine
        .wait_with_output()
        .expect("this machine's calibration");
    assert!(
        this_machine.status.success(),
        "this machine's calibration failed"
    );
    let ((speed, cores), (this_speed, _)) = (host_figures(file), host_figures(reference));
    (
        speed,
        this_speed,
        cores,
        listing + &String::from_utf8_lossy(&this_machine.stdout),
    )
}

/// The `speed` and `cores` a host file of `lbf-node calibrate --cpu` gives.
pub(crate) fn host_figures(file: &Path) -> (f64, u32) {
    let text = std::fs::read_to_string(file).expect("the host file");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    (
        value("speed").parse().expect("a speed"),
        value("cores").parse().expect("cores"),
    )
}
