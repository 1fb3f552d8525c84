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

/// What [`speed_beside_this_machine`] measured: the speed relative to this machine, the
/// cores the cgroup's host file gives, and the runs' listings.
pub(crate) struct SideBySide {
    /// The cgroup's speed over this machine's, both measured at once.
    pub speed: f64,
    /// The cores of the cgroup's host file.
    pub cores: u32,
    /// What the calibrations printed: this machine's, then the cgroup's, for each CPU.
    pub listing: String,
}

/// `lbf-node calibrate --cpu --seconds SECONDS` in `group` on one CPU (host file `file`)
/// while the same command measures this machine on the other (host file `reference`), then
/// the other way round; the speed is the mean of the two ratios. Side by side because this
/// VM's speed drifts by more than 5 % within seconds: four references a few seconds apart on
/// an idle machine read 0.79 to 0.94 of calibrate's built-in one, and after a minute of load
/// a 25 % cgroup read 0.18 to 0.27 against a reference taken just before. Both ways round
/// because the two virtual CPUs need not be equally fast at a given moment (the hypervisor
/// takes time from one more than the other): measured one way only, four hosts once read 17
/// to 21 % below their quotas together, which reordered placements in the advice test.
pub(crate) fn speed_beside_this_machine(
    group: &Cgroup,
    seconds: u32,
    file: &Path,
    reference: &Path,
) -> SideBySide {
    let (mut speeds, mut listing, mut cores) = (Vec::new(), String::new(), 0);
    for (host_cpu, this_cpu) in [(0, 1), (1, 0)] {
        let (speed, host_cores, text) =
            side_by_side(group, seconds, file, reference, host_cpu, this_cpu);
        speeds.push(speed);
        cores = host_cores;
        listing += &text;
    }
    SideBySide {
        speed: speeds.iter().sum::<f64>() / speeds.len() as f64,
        cores,
        listing,
    }
}

/// One measurement of [`speed_beside_this_machine`]: `group` on CPU `host_cpu`, this machine
/// on CPU `this_cpu`; the ratio, the cgroup's cores and what both printed.
fn side_by_side(
    group: &Cgroup,
    seconds: u32,
    file: &Path,
    reference: &Path,
    host_cpu: u32,
    this_cpu: u32,
) -> (f64, u32, String) {
    let node = env!("CARGO_BIN_EXE_lbf-node");
    let seconds = seconds.to_string();
    let this_machine = Command::new("taskset")
        .args([
            "-c",
            &this_cpu.to_string(),
            node,
            "calibrate",
            "--cpu",
            "--seconds",
            &seconds,
            "-o",
        ])
        .arg(reference)
        .stdout(Stdio::piped())
        .spawn()
        .expect("lbf-node calibrate --cpu for this machine");
    let listing = super::run(&mut group.run(&format!(
        "taskset -c {host_cpu} {node} calibrate --cpu --seconds {seconds} -o {}",
        file.display()
    )));
    let this_machine = this_machine
        .wait_with_output()
        .expect("this machine's calibration");
    assert!(
        this_machine.status.success(),
        "this machine's calibration failed"
    );
    let ((speed, cores), (reference_speed, _)) = (host_figures(file), host_figures(reference));
    (
        speed / reference_speed,
        cores,
        String::from_utf8_lossy(&this_machine.stdout).into_owned() + &listing,
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
