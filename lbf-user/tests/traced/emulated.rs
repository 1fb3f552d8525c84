//! A heterogeneous cluster emulated on this machine: each host a network namespace on a
//! bridge (in a namespace of its own, the "switch", where mpirun runs), every link shaped by
//! a token bucket, and each of a host's cores a CPU cgroup whose quota is the core's speed.
//! An MPI job's processes join their host's cgroup through the job's `ssh`, and its ranks
//! their core's through the core binder (`bind` in the cluster's directory), which deals a host's ranks out to its cores in turn as
//! `mpirun --bind-to core` would, and as `lbf-gag advise --bind-to-cores` models.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::cgroup::Cgroup;
use super::mpi::Mpi;
use super::netns::{across, ip, netns_ssh, wait_ready, Enter, SshHost};
use super::shaping::shape;

/// CPU time a core's quota gives per period, in microseconds: the period is this over the
/// speed. The smallest quota the kernel takes, so that the period is as short as it can be:
/// a core at speed s runs 1 ms in every 1/s ms, and a message that reaches a rank whose core
/// has spent its quota waits at most the rest of that period.
const QUOTA_US: u32 = 1000;

/// One host to emulate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostSpec {
    /// Its name (in the cluster file and the advice).
    pub name: &'static str,
    /// Its cores.
    pub cores: u32,
    /// Each core's speed, as a share of one of this machine's CPUs.
    pub speed: f64,
}

impl HostSpec {
    /// Host `name` of `cores` cores of `speed` each.
    pub(crate) const fn new(name: &'static str, cores: u32, speed: f64) -> Self {
        HostSpec { name, cores, speed }
    }
}

/// An emulated host.
pub(crate) struct EmulatedHost {
    /// What it emulates.
    pub spec: HostSpec,
    /// Its network namespace.
    pub ns: String,
    /// Its address on the cluster's network.
    pub addr: String,
    /// Its cores' cgroups (dropped before the host's).
    cores: Vec<Cgroup>,
    /// The cgroup of the job's other processes on the host (Open MPI's daemon): cgroup v2
    /// keeps processes out of a group whose children have controllers.
    daemons: Cgroup,
    /// The host's cgroup, parent of its cores' and its daemons'.
    group: Cgroup,
}

impl EmulatedHost {
    /// The cgroup of its core `i`.
    pub(crate) fn core(&self, i: usize) -> &Cgroup {
        &self.cores[i]
    }
}

/// The emulated cluster, torn down on drop.
pub(crate) struct EmulatedCluster {
    /// Its hosts.
    pub hosts: Vec<EmulatedHost>,
    /// The switch's namespace, where mpirun runs.
    pub switch: String,
    /// The network, as a CIDR block.
    pub net: String,
    /// Where its scripts live.
    dir: PathBuf,
    /// The `ssh` mpirun starts ranks with.
    ssh: PathBuf,
    /// The core binder ranks start through.
    bind: PathBuf,
}

impl EmulatedCluster {
    /// Emulates `hosts` on a network whose every link carries `rate` (tc's units) with a
    /// token bucket of `burst` bytes (each host's link both ways: a message between two hosts
    /// crosses two buckets), scripts in `dir`.
    pub(crate) fn new(hosts: &[HostSpec], rate: &str, burst: u32, dir: &Path) -> Self {
        remove_stale();
        let pid = std::process::id();
        let switch = format!("lbf{pid}-sw");
        ip(&["netns", "add", &switch]);
        let mut cluster = EmulatedCluster {
            hosts: Vec::new(),
            switch: switch.clone(),
            net: "10.232.0.0/24".to_string(),
            dir: dir.to_path_buf(),
            ssh: PathBuf::new(),
            bind: dir.join("bind"),
        };
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&[
            "-n",
            &switch,
            "addr",
            "add",
            "10.232.0.254/24",
            "dev",
            "br0",
        ]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        ip(&["-n", &switch, "link", "set", "lo", "up"]);
        for (i, spec) in hosts.iter().enumerate() {
            let ns = format!("lbf{pid}-{}", spec.name);
            let port = format!("p{i}");
            let group = Cgroup::under(None, &ns);
            group.favour();
            let period = (f64::from(QUOTA_US) / spec.speed).round() as u32;
            let cores = (0..spec.cores)
                .map(|c| {
                    let core = Cgroup::under(Some(&group), &format!("core{c}"));
                    core.limit(QUOTA_US, period);
                    core
                })
                .collect();
            let daemons = Cgroup::under(Some(&group), "daemons");
            let addr = format!("10.232.0.{}", i + 1);
            ip(&["netns", "add", &ns]);
            cluster.hosts.push(EmulatedHost {
                spec: *spec,
                ns: ns.clone(),
                addr: addr.clone(),
                cores,
                daemons,
                group,
            });
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &switch,
            ]);
            ip(&["-n", &switch, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &switch, "link", "set", &port, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            shape(&ns, "eth0", rate, burst);
            shape(&switch, &port, rate, burst);
        }
        for h in &cluster.hosts {
            wait_ready(&h.ns, "eth0");
        }
        wait_ready(&switch, "br0");
        let ssh_hosts: Vec<SshHost> = cluster
            .hosts
            .iter()
            .map(|h| SshHost {
                addr: &h.addr,
                ns: &h.ns,
                prelude: format!(
                    "echo $$ > {daemons}/cgroup.procs\n\
                     export LBF_HOST_CGROUP={group} LBF_HOST_CORES={cores}",
                    daemons = h.daemons.path().display(),
                    group = h.group.path().display(),
                    cores = h.spec.cores,
                ),
            })
            .collect();
        cluster.ssh = netns_ssh(dir, &ssh_hosts, Enter::Nsenter);
        std::fs::write(
            &cluster.bind,
            "#!/bin/sh\n\
             # Usage: bind PROGRAM ARGS...: joins the cgroup of core (local rank mod cores) of\n\
             # the host (set by the job's ssh), then runs PROGRAM.\n\
             core=$(( ${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-0}} % ${LBF_HOST_CORES:-1} ))\n\
             echo $$ > \"$LBF_HOST_CGROUP/core$core/cgroup.procs\" || exit 1\n\
             exec \"$@\"\n",
        )
        .expect("writing the core binder");
        let status = Command::new("chmod")
            .arg("+x")
            .arg(&cluster.bind)
            .status()
            .expect("chmod");
        assert!(status.success(), "chmod +x {}", cluster.bind.display());
        cluster
    }

    /// The shell command that runs `program args` with Open MPI, rank `i` on host
    /// `placement[i]` (by index) and on its core there; killed after `limit` seconds.
    pub(crate) fn job(
        &self,
        placement: &[usize],
        program: &Path,
        args: &str,
        limit: u32,
    ) -> String {
        let hostfile = self.dir.join(format!(
            "hostfile-{}",
            placement
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>()
                .join("")
        ));
        let lines: String = placement
            .iter()
            .map(|&h| format!("{}\n", self.hosts[h].addr))
            .collect();
        std::fs::write(&hostfile, lines).expect("writing a hostfile");
        format!(
            "timeout -k 5 {limit} nsenter --net=/run/netns/{} env OMPI_ALLOW_RUN_AS_ROOT=1 \
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np {} --hostfile {} --mca rmaps \
             seq {} {} {} {args}",
            self.switch,
            placement.len(),
            hostfile.display(),
            across(Mpi::OpenMpi, &self.net, &self.ssh).join(" "),
            self.bind.display(),
            program.display()
        )
    }
}

/// Removes the namespaces and cgroups (`lbfPID-...`) that a test killed before its drop
/// (nextest's timeout) left: those of processes that no longer exist.
fn remove_stale() {
    let dead = |name: &str| {
        name.strip_prefix("lbf")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    };
    let listing = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for ns in listing.lines().filter_map(|l| l.split_whitespace().next()) {
        if dead(ns) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/cpu"] {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for group in entries
            .flatten()
            .filter(|e| dead(&e.file_name().to_string_lossy()))
        {
            if let Ok(children) = std::fs::read_dir(group.path()) {
                for child in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
            let _ = std::fs::remove_dir(group.path());
        }
    }
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", &h.ns]).status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch])
            .status();
        // The hosts' cgroups go with `hosts`, each core's before its host's.
    }
}
