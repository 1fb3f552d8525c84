//! A placement as files to run it with: an Open MPI hostfile and rankfile, an MPICH
//! machinefile, and a target file to predict it with (`lbf-gag predict --target`).

use std::fmt::Write;

use super::search::Machine;
use crate::target::CommTable;

/// Open MPI's hostfile: each host used, with as many slots as processes placed on it (`mpirun
/// --hostfile FILE` then fills them in order; give the rankfile to pin each rank).
pub fn open_mpi_hostfile(machine: &Machine, placement: &[usize]) -> String {
    let mut out = String::new();
    for (h, host) in machine.hosts.iter().enumerate() {
        let n = placement.iter().filter(|&&p| p == h).count();
        if n > 0 {
            let _ = writeln!(out, "{} slots={n}", host.name);
        }
    }
    out
}

/// Open MPI's rankfile: `rank R=HOST slot=S`, the processes of a host on its cores in turn
/// (`mpirun --rankfile FILE`).
pub fn open_mpi_rankfile(machine: &Machine, placement: &[usize]) -> String {
    let mut used = vec![0u32; machine.hosts.len()];
    let mut out = String::new();
    for (rank, &h) in placement.iter().enumerate() {
        let host = &machine.hosts[h];
        let slot = used[h] % host.cores.max(1);
        used[h] += 1;
        let _ = writeln!(out, "rank {rank}={} slot={slot}", host.name);
    }
    out
}

/// MPICH's machinefile: one line per run of consecutive ranks on one host, `HOST:COUNT`, in
/// rank order (`mpirun.mpich -f FILE` places ranks in that order).
pub fn mpich_machinefile(machine: &Machine, placement: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < placement.len() {
        let h = placement[i];
        let run = placement[i..].iter().take_while(|&&p| p == h).count();
        let _ = writeln!(out, "{}:{run}", machine.hosts[h].name);
        i += run;
    }
    out
}

/// The target file of `placement` on `machine`, named `name` (see docs/targets.md).
pub fn target_toml(machine: &Machine, placement: &[usize], name: &str) -> String {
    let mut out = format!("name = {name:?}\n");
    if machine.spin != 0.0 {
        let _ = writeln!(out, "spin = {}", machine.spin);
    }
    for (h, host) in machine.hosts.iter().enumerate() {
        let procs: Vec<usize> = (0..placement.len())
            .filter(|&p| placement[p] == h)
            .collect();
        if procs.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "\n[[node]]  # {}\nprocs = {procs:?}\ncores = {}\nspeed = {}\n",
            host.name, host.cores, host.speed
        );
    }
    out.push_str("\n[network]\n");
    for (key, table) in [
        ("local", &machine.network.local),
        ("remote", &machine.network.remote),
    ] {
        let _ = writeln!(out, "{key} = {}", points(table));
    }
    out
}

/// A table's points as TOML: `[[bytes, seconds], ...]`.
fn points(table: &CommTable) -> String {
    let points: Vec<String> = table
        .points()
        .iter()
        .map(|(b, s)| format!("[{b}, {s:e}]"))
        .collect();
    format!("[{}]", points.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::search::Host;
    use crate::config::parse_target;
    use crate::target::Network;

    fn machine() -> Machine {
        let host = |name: &str, cores| Host {
            name: name.into(),
            cores,
            speed: 1.5,
        };
        Machine {
            hosts: vec![host("a", 2), host("b", 4), host("c", 1)],
            network: Network {
                local: CommTable::new(vec![(0.0, 5e-7)]).unwrap(),
                remote: CommTable::new(vec![(0.0, 5e-5), (1048576.0, 9e-3)]).unwrap(),
            },
            spin: 1.0,
            bind_to_cores: false,
        }
    }

    #[test]
    fn host_files_for_each_launcher() {
        let p = [1, 1, 0, 1, 0];
        let m = machine();
        assert_eq!(open_mpi_hostfile(&m, &p), "a slots=2\nb slots=3\n");
        assert_eq!(
            open_mpi_rankfile(&m, &p),
            "rank 0=b slot=0\nrank 1=b slot=1\nrank 2=a slot=0\nrank 3=b slot=2\nrank 4=a slot=1\n"
        );
        assert_eq!(mpich_machinefile(&m, &p), "b:2\na:1\nb:1\na:1\n");
    }

    /// The target file reads back as the same placement, hosts and network.
    #[test]
    fn the_target_file_reads_back() {
        let p = vec![1, 1, 0, 1, 0];
        let m = machine();
        let text = target_toml(&m, &p, "advised");
        let t = parse_target(&text, "advised", 5).unwrap();
        assert_eq!(t, m.target(&p, "advised"), "{text}");
    }
}
