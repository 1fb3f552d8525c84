//! Network namespaces as "hosts": a pair joined by a veth link ([`NetnsPair`]), the pieces
//! any such network is made of (a device ready; shaping one is `super::shaping`), and how an
//! MPI job spans them ([`netns_ssh`], [`across`]).

use std::process::Command;

use std::path::{Path, PathBuf};

use super::mpi::Mpi;
use super::shaping::shape;
use super::tracer::wait_for;

/// Two network namespaces joined by a veth pair, `10.231.N.1` and `10.231.N.2`, removed on
/// drop. Names carry this process's PID so that parallel test runs do not collide.
pub(crate) struct NetnsPair {
    /// The namespaces' names.
    pub names: [String; 2],
    /// Their addresses.
    pub addrs: [String; 2],
    /// The veth ends, one in each namespace.
    pub veths: [String; 2],
}

/// Runs `ip ARGS`, which must succeed.
pub(crate) fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("running ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl NetnsPair {
    /// Creates the pair; `n` (0-255) tells pairs of one process apart.
    pub(crate) fn new(n: u8) -> Self {
        let pid = std::process::id();
        let names = [format!("lbf{pid}-{n}a"), format!("lbf{pid}-{n}b")];
        let veth = [format!("lv{pid}{n}a"), format!("lv{pid}{n}b")];
        let addrs = [format!("10.231.{n}.1"), format!("10.231.{n}.2")];
        let pair = NetnsPair {
            names: names.clone(),
            addrs: addrs.clone(),
            veths: veth.clone(),
        };
        for name in &names {
            ip(&["netns", "add", name]);
        }
        ip(&[
            "link", "add", &veth[0], "netns", &names[0], "type", "veth", "peer", "name", &veth[1],
            "netns", &names[1],
        ]);
        for i in 0..2 {
            ip(&[
                "-n",
                &names[i],
                "addr",
                "add",
                &format!("{}/24", addrs[i]),
                "dev",
                &veth[i],
            ]);
            ip(&["-n", &names[i], "link", "set", &veth[i], "up"]);
            ip(&["-n", &names[i], "link", "set", "lo", "up"]);
        }
        for i in 0..2 {
            wait_ready(&names[i], &veth[i]);
        }
        pair
    }

    /// Its network, as a CIDR block (`10.231.N.0/24`).
    pub(crate) fn net(&self) -> String {
        let prefix = self.addrs[0].rsplit_once('.').expect("an address").0;
        format!("{prefix}.0/24")
    }

    /// Writes an `ssh` for mpirun into `dir` that runs the command in the namespace of the
    /// pair that has the host's address (see [`netns_ssh`]).
    pub(crate) fn ssh(&self, dir: &Path) -> PathBuf {
        let hosts: Vec<SshHost> = (0..2)
            .map(|i| SshHost {
                addr: &self.addrs[i],
                ns: &self.names[i],
                prelude: String::new(),
            })
            .collect();
        netns_ssh(dir, &hosts, Enter::IpNetnsExec)
    }

    /// Shapes both directions of the link with a token bucket (`tc qdisc ... tbf`) of `rate`
    /// (tc's units, e.g. `100mbit`) and `burst` bytes, replacing any shaping before.
    pub(crate) fn shape(&self, rate: &str, burst: u32) {
        for i in 0..2 {
            shape(&self.names[i], &self.veths[i], rate, burst);
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Waits until device `dev` of namespace `ns` is up and its addresses are usable. The ends of
/// a veth pair report their carrier a moment later, and their IPv6 link-local addresses stay
/// tentative for a second or two (duplicate address detection); until both are done, UCX
/// (under MPICH) finds no usable interface.
pub(crate) fn wait_ready(ns: &str, dev: &str) {
    wait_for(|| {
        let show = |what: &[&str]| {
            Command::new("ip")
                .args(["-n", ns, "-o"])
                .args(what)
                .args(["dev", dev])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .map_err(|e| e.to_string())
        };
        let (link, addrs) = (show(&["link", "show"])?, show(&["addr", "show"])?);
        if link.contains("state UP") && !addrs.contains("tentative") {
            Ok(())
        } else {
            Err(format!("{dev} is not ready: {link}{addrs}"))
        }
    });
}

/// A "host" an MPI job's `ssh` reaches: its address, its network namespace, and shell lines
/// run before the command enters it (joining a cgroup, exporting variables).
pub(crate) struct SshHost<'a> {
    /// The address mpirun names it by.
    pub addr: &'a str,
    /// Its network namespace.
    pub ns: &'a str,
    /// Shell lines run first, in the host's shell (`$$` is the process that becomes the
    /// command).
    pub prelude: String,
}

/// How a command enters a host's network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enter {
    /// `ip netns exec`, which also mounts a `/sys` of the namespace (its network devices,
    /// which UCX reads under MPICH) and so hides this machine's cgroups.
    IpNetnsExec,
    /// `nsenter --net`: the network namespace alone, so the command sees this machine's
    /// files, cgroups included.
    Nsenter,
}

/// Writes an `ssh` for mpirun into `dir` that runs the command in the network namespace of
/// the host with its address (entered as `enter` says), after the host's prelude: how an
/// MPI job spans namespaces.
pub(crate) fn netns_ssh(dir: &Path, hosts: &[SshHost], enter: Enter) -> PathBuf {
    let path = dir.join(format!("netns-ssh-{}", std::process::id()));
    let cases: String = hosts
        .iter()
        .map(|h| {
            let prelude: String = h.prelude.lines().map(|l| format!("    {l}\n")).collect();
            format!("  {})\n{prelude}    ns={} ;;\n", h.addr, h.ns)
        })
        .collect();
    std::fs::write(
        &path,
        format!(
            r#"#!/bin/sh
# Usage (as ssh): netns-ssh [options] HOST COMMAND...
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
host=$1; shift
case "$host" in
{cases}  *) echo "netns-ssh: no network namespace has $host" >&2; exit 1 ;;
esac
exec {enter} sh -c "$*"
"#,
            enter = match enter {
                Enter::IpNetnsExec => "ip netns exec \"$ns\"",
                Enter::Nsenter => "nsenter --net=/run/netns/\"$ns\"",
            }
        ),
    )
    .expect("writing netns-ssh");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success(), "chmod +x {}", path.display());
    path
}

/// mpirun's arguments (before the program) that start ranks through `ssh` (see
/// [`netns_ssh`]) and keep the job's traffic on the network `net` (a CIDR block), over TCP
/// also between ranks of one host. Open MPI's shared memory would hold a 4 KiB to 64 KiB
/// message until the receiving rank runs, where TCP leaves it in the kernel: on a host
/// emulated by CPU quotas, whose ranks stop for most of every period, that couples ranks as
/// no real host's do; and one tracer sees every namespace as one host, so it would take
/// every message of the job for one between ranks of a host (see
/// `lbf_capture::mpi::eager`), sent by rendezvous above 4 KiB.
pub(crate) fn across(mpi: Mpi, net: &str, ssh: &Path) -> Vec<String> {
    let ssh = ssh.display().to_string();
    let words: Vec<&str> = match mpi {
        // Each "host" would bind its ranks to its first cores, the same cores of this machine.
        // Without binding, the daemons' runtime-control component (rtc hwloc) only shares
        // the topology through a segment it maps at an address it guesses free: once in CI
        // every daemon of a job segfaulted there (in hwloc_shmem_topology_write), three runs
        // in a row. It is left out.
        Mpi::OpenMpi => vec![
            "--bind-to",
            "none",
            "--mca",
            "rtc",
            "^hwloc",
            "--mca",
            "plm_rsh_agent",
            &ssh,
            "--mca",
            "pml",
            "ob1",
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            net,
            "--mca",
            "oob_tcp_if_include",
            net,
        ],
        Mpi::Mpich => vec![
            "-launcher",
            "ssh",
            "-launcher-exec",
            &ssh,
            "-genv",
            "MPIR_CVAR_NOLOCAL",
            "1",
            "-genv",
            "UCX_TLS",
            "tcp,self",
        ],
    };
    words.into_iter().map(String::from).collect()
}
