//! Cluster files: one description of the machines a prediction is for, measured or written by
//! hand (`lbf-node calibrate`, `lbf-gag fit-network`), which targets use by host name
//! (`[[node]] host = "b"`) and `lbf-gag predict --cluster FILE` predicts on as a whole.
//!
//! ```toml
//! [[host]]
//! name = "a"
//! cores = 4
//! speed = 1.0
//! local = [[0, 5e-7], [1048576, 2e-4]]    # optional: within this host
//! [[network]]                              # a segment: its hosts reach each other through it
//! name = "lan1"
//! hosts = ["a", "b"]
//! table = [[0, 5e-5], [1048576, 9e-3]]    # one-way time by size between two of its hosts
//! capacity = 125e6                         # optional, bytes/s in all; not modelled (below)
//! ```
//!
//! The engine has one table within a node and one between nodes per target
//! ([`Network`]). A target on a cluster takes the local table of its hosts and the table of
//! the segment joining them; where its hosts' tables differ it takes the slowest (the largest
//! time for 1 MiB) and says so in a note, and a segment's `capacity` is checked but not
//! modelled (messages do not share it, as the engine ignores contention), which a note says too.

use super::table::comm_table;
use super::{validate, ConfigError};
use crate::target::{CommTable, Network, Node, Target, MAX_NODES};
use serde::Deserialize;
use std::path::Path;

/// A cluster file as written; unknown keys are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[serde(default)]
    host: Vec<HostFile>,
    #[serde(default)]
    network: Vec<SegmentFile>,
}

/// One `[[host]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    name: String,
    #[serde(default = "one_core")]
    cores: u32,
    #[serde(default = "unit_speed")]
    speed: f64,
    local: Option<Vec<Vec<f64>>>,
}

fn one_core() -> u32 {
    1
}

fn unit_speed() -> f64 {
    1.0
}

/// One `[[network]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentFile {
    name: String,
    hosts: Vec<String>,
    table: Vec<Vec<f64>>,
    capacity: Option<f64>,
}

/// A host of a cluster: a node a target can name.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Its name, as `[[node]] host = ...` gives it.
    pub name: String,
    /// Its cores (the CPUs its processes may use).
    pub cores: u32,
    /// Its speed relative to the reference host (`lbf-node calibrate --cpu`).
    pub speed: f64,
    /// One-way times within the host (empty: free).
    pub local: CommTable,
}

/// A network segment: its hosts reach each other through it.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Its name, for messages.
    pub name: String,
    /// Its hosts, as indices into [`Cluster::hosts`].
    pub hosts: Vec<usize>,
    /// One-way times between two of its hosts.
    pub table: CommTable,
    /// Bytes per second it carries in all, if given (checked, not modelled).
    pub capacity: Option<f64>,
}

/// A cluster file, checked: host names unique, segments naming only its hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// The name targets and reports know it by (the file's stem).
    pub name: String,
    /// The hosts, in file order.
    pub hosts: Vec<Host>,
    /// The segments, in file order.
    pub segments: Vec<Segment>,
}

/// Reads the cluster file at `path`; it is named by the file's stem.
pub fn load_cluster(path: &Path) -> Result<Cluster, ConfigError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&source, format!("cannot read the cluster file: {e}")))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_cluster(&text, &stem).map_err(|message| ConfigError { source, message })
}

/// Parses cluster-file text, naming the cluster `name`; errors name the entry at fault.
pub fn parse_cluster(text: &str, name: &str) -> Result<Cluster, String> {
    let file: ClusterFile = toml::from_str(text).map_err(|e| e.to_string())?;
    if file.host.is_empty() {
        return Err("no [[host]]: a cluster file lists its hosts".into());
    }
    if file.host.len() > MAX_NODES as usize {
        return Err(format!(
            "{} hosts is more than lbf models (at most {MAX_NODES})",
            file.host.len()
        ));
    }
    let mut hosts: Vec<Host> = Vec::with_capacity(file.host.len());
    for (i, h) in file.host.into_iter().enumerate() {
        let at = format!("[[host]] {} (\"{}\")", i + 1, h.name);
        if let Some(j) = hosts.iter().position(|o| o.name == h.name) {
            return Err(format!("{at}: host {} has the same name", j + 1));
        }
        if h.cores == 0 {
            return Err(format!("{at}: 0 cores; a host has at least 1"));
        }
        if !(h.speed.is_finite() && h.speed > 0.0) {
            return Err(format!("{at}: speed {} is not a positive number", h.speed));
        }
        let local = match &h.local {
            Some(points) => comm_table(points, &format!("{at} local"))?,
            None => CommTable::default(),
        };
        hosts.push(Host {
            name: h.name,
            cores: h.cores,
            speed: h.speed,
            local,
        });
    }
    let mut segments = Vec::with_capacity(file.network.len());
    for (i, s) in file.network.into_iter().enumerate() {
        let at = format!("[[network]] {} (\"{}\")", i + 1, s.name);
        let mut members = Vec::with_capacity(s.hosts.len().min(hosts.len()));
        for h in &s.hosts {
            let index = hosts
                .iter()
                .position(|o| &o.name == h)
                .ok_or_else(|| format!("{at}: host \"{h}\" is not a [[host]] of the file"))?;
            if members.contains(&index) {
                return Err(format!("{at}: lists host \"{h}\" twice"));
            }
            members.push(index);
        }
        if members.len() < 2 {
            return Err(format!(
                "{at}: {} hosts; a segment joins at least 2",
                members.len()
            ));
        }
        if s.table.is_empty() {
            return Err(format!(
                "{at}: an empty table; give at least one [bytes, seconds] point"
            ));
        }
        let table = comm_table(&s.table, &format!("{at} table"))?;
        if let Some(c) = s.capacity {
            if !(c.is_finite() && c > 0.0) {
                return Err(format!(
                    "{at}: capacity {c} is not a positive number of bytes per second"
                ));
            }
        }
        segments.push(Segment {
            name: s.name,
            hosts: members,
            table,
            capacity: s.capacity,
        });
    }
    Ok(Cluster {
        name: name.to_string(),
        hosts,
        segments,
    })
}

/// A table's time for 1 MiB: how "slow" compares tables.
fn mib_seconds(table: &CommTable) -> f64 {
    table.seconds(1 << 20)
}

impl Cluster {
    /// The index of the host named `name`, or an error listing the hosts there are.
    pub fn host(&self, name: &str) -> Result<usize, String> {
        self.hosts
            .iter()
            .position(|h| h.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.hosts.iter().map(|h| h.name.as_str()).collect();
                format!(
                    "host \"{name}\" is not in cluster {} (its hosts: {})",
                    self.name,
                    names.join(", ")
                )
            })
    }

    /// The first segment (in file order) that has both hosts `a` and `b`, which differ.
    pub fn segment_between(&self, a: usize, b: usize) -> Result<&Segment, String> {
        self.segments
            .iter()
            .find(|s| s.hosts.contains(&a) && s.hosts.contains(&b))
            .ok_or_else(|| {
                format!(
                    "hosts \"{}\" and \"{}\" are on no common [[network]] of cluster {}: add \
                     a segment that has both",
                    self.hosts[a].name, self.hosts[b].name, self.name
                )
            })
    }

    /// The network of a target whose nodes are `hosts` (indices, distinct), and notes on what
    /// the engine's model leaves out of it (see the module's documentation).
    pub fn network_for(&self, hosts: &[usize]) -> Result<(Network, Vec<String>), String> {
        let mut notes = Vec::new();
        let locals: Vec<(String, &CommTable)> = hosts
            .iter()
            .map(|&h| {
                (
                    format!("host \"{}\"", self.hosts[h].name),
                    &self.hosts[h].local,
                )
            })
            .collect();
        let local = slowest(&locals, "tables within a host", &mut notes);
        let mut segments: Vec<&Segment> = Vec::new();
        for (i, &a) in hosts.iter().enumerate() {
            for &b in &hosts[i + 1..] {
                let s = self.segment_between(a, b)?;
                if !segments.iter().any(|o| std::ptr::eq(*o, s)) {
                    segments.push(s);
                }
            }
        }
        let remotes: Vec<(String, &CommTable)> = segments
            .iter()
            .map(|s| (format!("[[network]] \"{}\"", s.name), &s.table))
            .collect();
        let remote = slowest(&remotes, "tables between hosts", &mut notes);
        for s in segments.iter().filter(|s| s.capacity.is_some()) {
            notes.push(format!(
                "cluster {}: [[network]] \"{}\" has a capacity, which is not modelled: each \
                 message takes the table's time whatever else crosses the segment",
                self.name, s.name
            ));
        }
        Ok((Network { local, remote }, notes))
    }

    /// The whole cluster as one target for a trace of `num_procs` processes: every host a
    /// node, the processes in blocks of consecutive ids, each host's share in proportion to
    /// its cores (as `mpirun` fills slots), named after the cluster.
    pub fn target(&self, num_procs: usize) -> Result<(Target, Vec<String>), ConfigError> {
        let fail = |m: String| ConfigError::new(format!("--cluster {}", self.name), m);
        let total: u64 = self.hosts.iter().map(|h| u64::from(h.cores)).sum();
        let mut nodes: Vec<Node> = self
            .hosts
            .iter()
            .map(|h| Node::idle(h.cores, h.speed))
            .collect();
        let mut first_core = Vec::with_capacity(self.hosts.len());
        let mut sum = 0;
        for h in &self.hosts {
            first_core.push(sum);
            sum += u64::from(h.cores);
        }
        for p in 0..num_procs {
            let core = p as u64 * total / num_procs as u64;
            let host = first_core.partition_point(|&c| c <= core) - 1;
            nodes[host].procs.push(p as u32);
        }
        let all: Vec<usize> = (0..self.hosts.len()).collect();
        let (network, notes) = self.network_for(&all).map_err(fail)?;
        let target = Target {
            name: self.name.clone(),
            nodes,
            network,
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        };
        validate(&target, num_procs).map_err(fail)?;
        Ok((target, notes))
    }
}

/// The slowest of `tables` (each with what it belongs to); a note in `notes` when they differ.
fn slowest(tables: &[(String, &CommTable)], what: &str, notes: &mut Vec<String>) -> CommTable {
    let Some((name, table)) = tables
        .iter()
        .max_by(|a, b| mib_seconds(a.1).total_cmp(&mib_seconds(b.1)))
    else {
        return CommTable::default();
    };
    if tables.iter().any(|(_, t)| t != table) {
        let all: Vec<&str> = tables.iter().map(|(n, _)| n.as_str()).collect();
        notes.push(format!(
            "the {what} of {} differ, and the engine has one per target: using the slowest, \
             {name}'s",
            all.join(", ")
        ));
    }
    (*table).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_LANS: &str = r#"
        [[host]]
        name = "a"
        cores = 4
        speed = 1.0
        local = [[0, 5e-7], [1048576, 2e-4]]
        [[host]]
        name = "b"
        cores = 2
        speed = 0.5
        local = [[0, 5e-7], [1048576, 2e-4]]
        [[host]]
        name = "c"
        [[network]]
        name = "lan1"
        hosts = ["a", "b"]
        table = [[0, 5e-5], [1048576, 9e-3]]
        capacity = 125e6
        [[network]]
        name = "lan2"
        hosts = ["b", "c"]
        table = [[0, 5e-5], [1048576, 9e-2]]
    "#;

    fn err(text: &str) -> String {
        parse_cluster(text, "c").unwrap_err()
    }

    #[test]
    fn reads_hosts_and_segments() {
        let c = parse_cluster(TWO_LANS, "lab").unwrap();
        assert_eq!(c.hosts.len(), 3);
        assert_eq!(c.hosts[1].cores, 2);
        assert_eq!(c.hosts[1].speed, 0.5);
        assert_eq!(c.hosts[2].cores, 1);
        assert_eq!(c.hosts[2].local, CommTable::default());
        assert_eq!(c.segments[1].hosts, vec![1, 2]);
        assert_eq!(c.segments[0].capacity, Some(125e6));
        assert_eq!(c.segment_between(0, 1).unwrap().name, "lan1");
        let e = c.segment_between(0, 2).unwrap_err();
        assert!(
            e.contains("\"a\" and \"c\" are on no common [[network]]"),
            "{e}"
        );
    }

    #[test]
    fn a_network_takes_the_slowest_table_and_says_so() {
        let c = parse_cluster(TWO_LANS, "lab").unwrap();
        let (net, notes) = c.network_for(&[0, 1]).unwrap();
        assert_eq!(net.remote.seconds(1 << 20), 9e-3);
        assert_eq!(net.local.seconds(1 << 20), 2e-4);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("capacity"), "{notes:?}");
        let (net, notes) = c.network_for(&[1, 2]).unwrap();
        assert_eq!(net.remote.seconds(1 << 20), 9e-2);
        assert!(
            notes[0].contains("within a host") && notes[0].contains("host \"b\"'s"),
            "{notes:?}"
        );
        assert!(c.network_for(&[0, 1, 2]).unwrap_err().contains("no common"));
    }

    #[test]
    fn the_whole_cluster_places_processes_by_cores() {
        let text = "[[host]]\nname = \"a\"\ncores = 3\n[[host]]\nname = \"b\"\n\
                    [[network]]\nname = \"n\"\nhosts = [\"a\", \"b\"]\ntable = [[0, 1e-5]]\n";
        let c = parse_cluster(text, "lab").unwrap();
        let (t, notes) = c.target(8).unwrap();
        assert!(notes.is_empty());
        assert_eq!(t.name, "lab");
        assert_eq!(t.nodes[0].procs, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(t.nodes[1].procs, vec![6, 7]);
        assert_eq!(t.nodes[0].cores, 3);
        assert_eq!(t.network.remote.seconds(0), 1e-5);
    }

    #[test]
    fn errors_name_the_entry() {
        let e = err("[[host]]\nname = \"a\"\n[[host]]\nname = \"a\"\n");
        assert!(
            e.contains("[[host]] 2 (\"a\"): host 1 has the same name"),
            "{e}"
        );
        let e = err("[[host]]\nname = \"a\"\ncores = 0\n");
        assert!(e.contains("[[host]] 1 (\"a\"): 0 cores"), "{e}");
        let e = err("[[host]]\nname = \"a\"\nspeed = 0.0\n");
        assert!(e.contains("speed 0"), "{e}");
        let e = err(
            "[[host]]\nname = \"a\"\n[[network]]\nname = \"n\"\nhosts = [\"a\", \"z\"]\n\
             table = [[0, 1e-5]]\n",
        );
        assert!(
            e.contains("[[network]] 1 (\"n\"): host \"z\" is not a [[host]]"),
            "{e}"
        );
        let e = err(
            "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[network]]\nname = \"n\"\n\
             hosts = [\"a\", \"b\"]\ntable = [[0, 1e-5, 3]]\n",
        );
        assert!(
            e.contains("[[network]] 1 (\"n\") table: point 1 has 3 numbers"),
            "{e}"
        );
        let e = err("[[host]]\nname = \"a\"\nlocal = [[0, -1.0]]\n");
        assert!(e.contains("[[host]] 1 (\"a\") local: point 0"), "{e}");
        let e = err(
            "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[network]]\nname = \"n\"\n\
             hosts = [\"a\", \"b\"]\ntable = [[0, 1e-5]]\ncapacity = -1.0\n",
        );
        assert!(e.contains("capacity -1"), "{e}");
        assert!(err("").contains("no [[host]]"));
        assert!(err("[[host]]\nname = \"a\"\nkores = 2\n").contains("kores"));
        let many = vec![vec![0.0, 0.0]; MAX_TABLE_POINTS + 1];
        let e = comm_table(&many, "t").unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    use super::super::table::MAX_TABLE_POINTS;
}
