//! Target files: TOML describing nodes, their processes, and the network.

use super::cluster::Cluster;
use super::procedures::ProcedureFile;
use super::table::comm_table;
use super::{preset, validate, ConfigError};
use crate::event::ProcId;
use crate::target::{CommTable, Network, Node, Scheduler, Target};
use serde::Deserialize;
use std::path::Path;

/// A target file as written; unknown keys are errors so that typos do not pass silently.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    name: Option<String>,
    #[serde(default)]
    spin: f64,
    scheduler: Option<SchedulerFile>,
    #[serde(default)]
    bind_to_cores: bool,
    node: Vec<NodeFile>,
    network: Option<NetworkFile>,
    #[serde(default)]
    procedure: Vec<ProcedureFile>,
}

/// The `[scheduler]` table: the scheduler-aware node model ([`Scheduler`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulerFile {
    /// Seconds; [`Scheduler::DEFAULT_SLICE`] if absent.
    slice: Option<f64>,
    /// `"spin"` or `"yield"`.
    wait: String,
}

impl SchedulerFile {
    /// The scheduler this table describes, or what is wrong with it.
    fn scheduler(&self) -> Result<Scheduler, String> {
        Ok(Scheduler {
            slice: self.slice.unwrap_or(Scheduler::DEFAULT_SLICE),
            wait: self.wait.parse().map_err(|e| format!("[scheduler] {e}"))?,
        })
    }
}

/// One `[[node]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    procs: Vec<ProcId>,
    /// A host of the cluster file, whose cores, speed and tables the node takes.
    host: Option<String>,
    cores: Option<u32>,
    speed: Option<f64>,
}

/// The `[network]` table: a preset, tables, or a preset with a table overriding one of its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkFile {
    preset: Option<String>,
    local: Option<Vec<Vec<f64>>>,
    remote: Option<Vec<Vec<f64>>>,
}

/// Reads the target file at `path` for a trace of `num_procs` processes. The target is named
/// by the file's `name`, or else by the file's stem (`two-nodes.toml` gives `two-nodes`).
pub fn load_target(path: &Path, num_procs: usize) -> Result<Target, ConfigError> {
    load_target_on(path, num_procs, None).map(|(target, _)| target)
}

/// [`load_target`] for a target whose nodes may name hosts of `cluster`
/// ([`parse_target_on`]); also returns the cluster's notes on what the model leaves out.
pub fn load_target_on(
    path: &Path,
    num_procs: usize,
    cluster: Option<&Cluster>,
) -> Result<(Target, Vec<String>), ConfigError> {
    let (text, source) = read(path)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_target_on(&text, &stem, num_procs, cluster).map_err(|e| ConfigError { source, ..e })
}

/// How many processes the target file at `path` places: one more than the largest process
/// id its nodes list (a placement of any other number is invalid). A capture that learns its
/// processes as it runs (sockets, PVM) can then expect that many (`lbf-trace`).
pub fn procs_placed(path: &Path) -> Result<usize, ConfigError> {
    let (text, source) = read(path)?;
    let file: TargetFile =
        toml::from_str(&text).map_err(|e| ConfigError::new(&source, e.to_string()))?;
    let largest = file.node.iter().flat_map(|n| &n.procs).max();
    Ok(largest.map_or(0, |&id| id as usize + 1))
}

/// The text of the target file at `path`, and the path as errors name it.
fn read(path: &Path) -> Result<(String, String), ConfigError> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(&source, format!("cannot read the target file: {e}")))?;
    Ok((text, source))
}

/// Parses target-file text for a trace of `num_procs` processes; `default_name` names the
/// target when the text does not. Errors carry `source` "target" (see [`load_target`]).
pub fn parse_target(
    text: &str,
    default_name: &str,
    num_procs: usize,
) -> Result<Target, ConfigError> {
    parse_target_on(text, default_name, num_procs, None).map(|(target, _)| target)
}

/// [`parse_target`] for a target whose nodes may name hosts of `cluster`: a node with
/// `host = "b"` takes host b's cores and speed (unless it gives its own), and without a
/// `[network]` table the target takes the cluster's tables for its hosts
/// ([`Cluster::network_for`], whose notes are returned). With host names, every node names
/// a host, each a different one.
pub fn parse_target_on(
    text: &str,
    default_name: &str,
    num_procs: usize,
    cluster: Option<&Cluster>,
) -> Result<(Target, Vec<String>), ConfigError> {
    let fail = |message: String| ConfigError::new("target", message);
    let file: TargetFile = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
    let hosts = node_hosts(&file.node, cluster).map_err(fail)?;
    let (network, notes) = match (file.network, &hosts, cluster) {
        (Some(net), _, _) => (network(net).map_err(fail)?, Vec::new()),
        (None, Some(hosts), Some(cluster)) => cluster.network_for(hosts).map_err(fail)?,
        (None, _, _) => (Network::default(), Vec::new()),
    };
    let nodes = file
        .node
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let host = hosts.as_ref().zip(cluster).map(|(h, c)| &c.hosts[h[i]]);
            Node {
                procs: n.procs,
                cores: n.cores.or(host.map(|h| h.cores)).unwrap_or(1),
                speed: n.speed.or(host.map(|h| h.speed)).unwrap_or(1.0),
            }
        })
        .collect();
    let name = file.name.unwrap_or_else(|| default_name.to_string());
    let procedures = file
        .procedure
        .into_iter()
        .map(|p| p.change(num_procs))
        .collect::<Result<_, _>>()
        .map_err(fail)?;
    let target = Target {
        name,
        nodes,
        network,
        spin: file.spin,
        scheduler: file
            .scheduler
            .as_ref()
            .map(SchedulerFile::scheduler)
            .transpose()
            .map_err(fail)?,
        bind_to_cores: file.bind_to_cores,
        procedures,
    };
    validate(&target, num_procs).map_err(fail)?;
    Ok((target, notes))
}

/// The cluster hosts of the nodes, in node order, if any node names one: then every node
/// names a different host of `cluster`.
fn node_hosts(nodes: &[NodeFile], cluster: Option<&Cluster>) -> Result<Option<Vec<usize>>, String> {
    let Some(named) = nodes.iter().position(|n| n.host.is_some()) else {
        return Ok(None);
    };
    let Some(cluster) = cluster else {
        return Err(format!(
            "node {named} is on host \"{}\", but no cluster file says what that host is: give \
             one (--cluster FILE)",
            nodes[named].host.as_deref().unwrap_or_default()
        ));
    };
    let mut hosts: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let Some(name) = &n.host else {
            return Err(format!(
                "node {i} names no host, and node {named} does: with a cluster, every node is \
                 on a host (the network between nodes is the cluster's)"
            ));
        };
        let host = cluster.host(name).map_err(|e| format!("node {i}: {e}"))?;
        if let Some(j) = hosts.iter().position(|&h| h == host) {
            return Err(format!(
                "nodes {j} and {i} are both on host \"{name}\": put their processes in one \
                 [[node]]"
            ));
        }
        hosts.push(host);
    }
    Ok(Some(hosts))
}

/// The network a `[network]` table describes: the preset's, with any given table replacing
/// the preset's own.
fn network(net: NetworkFile) -> Result<Network, String> {
    let base = match &net.preset {
        Some(name) => preset(name)
            .map_err(|e| format!("[network] preset: {}", e.message))?
            .network(),
        None => Network::default(),
    };
    let table = |points: Option<Vec<Vec<f64>>>, which: &str, default: CommTable| match points {
        None => Ok(default),
        Some(points) => comm_table(&points, &format!("[network] {which}")),
    };
    Ok(Network {
        local: table(net.local, "local", base.local)?,
        remote: table(net.remote, "remote", base.remote)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_point_is_two_numbers() {
        let text = "[[node]]\nprocs = [0]\n[network]\nremote = [[0, 1e-5, 7], [1000, 2e-5]]\n";
        let e = parse_target(text, "t", 1).unwrap_err().to_string();
        assert!(
            e.contains("[network] remote: point 1 has 3 numbers; each point is [bytes, seconds]"),
            "{e}"
        );
    }

    const TWO_NODES: &str = r#"
        name = "two-nodes"
        [[node]]
        procs = [0, 1]
        cores = 2
        speed = 1.5
        [[node]]
        procs = [2]
        [network]
        local  = [[0, 1e-6], [1048576, 2e-4]]
        remote = [[0, 5e-5], [65536, 6e-4], [1048576, 9e-3]]
    "#;

    fn err(text: &str, procs: usize) -> String {
        parse_target(text, "stem", procs).unwrap_err().to_string()
    }

    #[test]
    fn reads_the_documented_example() {
        let t = parse_target(TWO_NODES, "stem", 3).unwrap();
        assert_eq!(t.name, "two-nodes");
        assert_eq!(
            t.nodes[0],
            Node {
                procs: vec![0, 1],
                cores: 2,
                speed: 1.5
            }
        );
        assert_eq!(t.nodes[1], Node::new(vec![2]));
        assert_eq!(t.network.local.points(), &[(0.0, 1e-6), (1048576.0, 2e-4)]);
        assert_eq!(t.network.remote.seconds(65536), 6e-4);
    }

    #[test]
    fn bind_to_cores_binds_or_not() {
        let text = "bind_to_cores = true\n[[node]]\nprocs = [0, 1]\ncores = 2\n";
        assert!(parse_target(text, "b", 2).unwrap().bind_to_cores);
        let text = "[[node]]\nprocs = [0, 1]\ncores = 2\n";
        assert!(!parse_target(text, "b", 2).unwrap().bind_to_cores);
        let e = err("bind_to_cores = \"core\"\n[[node]]\nprocs = [0]\n", 1);
        assert!(e.contains("bind_to_cores"), "{e}");
    }

    #[test]
    fn the_scheduler_table_selects_time_slices() {
        let t = parse_target(
            "[scheduler]\nwait = \"spin\"\n[[node]]\nprocs = [0]\n",
            "s",
            1,
        );
        let want = Scheduler {
            slice: Scheduler::DEFAULT_SLICE,
            wait: crate::target::Wait::Spin,
        };
        assert_eq!(t.unwrap().scheduler, Some(want));
        let text = "[scheduler]\nwait = \"yield\"\nslice = 0.001\n[[node]]\nprocs = [0]\n";
        let t = parse_target(text, "s", 1).unwrap();
        assert_eq!(t.scheduler.unwrap().slice, 0.001);
        let e = err("[scheduler]\nwait = \"poll\"\n[[node]]\nprocs = [0]\n", 1);
        assert!(e.contains("unknown wait \"poll\""), "{e}");
        let e = err(
            "spin = 1\n[scheduler]\nwait = \"spin\"\n[[node]]\nprocs = [0]\n",
            1,
        );
        assert!(e.contains("leave spin out"), "{e}");
        let e = err(
            "[scheduler]\nwait = \"spin\"\nslice = 0\n[[node]]\nprocs = [0]\n",
            1,
        );
        assert!(e.contains("slice is 0 s"), "{e}");
    }

    #[test]
    fn name_defaults_and_network_is_free_by_default() {
        let t = parse_target("[[node]]\nprocs = [0]\n", "stem", 1).unwrap();
        assert_eq!(t.name, "stem");
        assert_eq!(t.network, Network::default());
    }

    #[test]
    fn preset_with_a_table_overriding_one_side() {
        let text = "[[node]]\nprocs=[0]\n[network]\npreset = \"gige\"\nlocal = [[0, 0.0]]\n";
        let t = parse_target(text, "stem", 1).unwrap();
        assert_eq!(t.network.local.seconds(1000), 0.0);
        assert_eq!(t.network.remote, preset("gige").unwrap().network().remote);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = err("[[node]]\nprocs = [0]\nspead = 2.0\n", 1);
        assert!(e.contains("spead"), "{e}");
        let e = err("nmae = \"x\"\n[[node]]\nprocs = [0]\n", 1);
        assert!(e.contains("nmae"), "{e}");
        let e = err("[[node]]\nprocs = [0]\n[network]\nremot = []\n", 1);
        assert!(e.contains("remot"), "{e}");
    }

    #[test]
    fn placement_errors_name_the_process() {
        let e = err("[[node]]\nprocs = [0]\n", 3);
        assert!(e.contains("processes 1, 2 are on no node"), "{e}");
        let e = err("[[node]]\nprocs = [0, 1]\n[[node]]\nprocs = [1]\n", 2);
        assert!(e.contains("process 1 is on node 0 and on node 1"), "{e}");
        let e = err("[[node]]\nprocs = [0, 5]\n", 1);
        assert!(
            e.contains("lists process 5") && e.contains("only 1 processes"),
            "{e}"
        );
    }

    #[test]
    fn nodes_and_tables_are_checked() {
        assert!(err("[[node]]\nprocs = [0]\ncores = 0\n", 1).contains("node 0 has 0 cores"));
        assert!(err("[[node]]\nprocs = [0]\nspeed = -1.0\n", 1).contains("speed -1"));
        let e = err(
            "[[node]]\nprocs = [0]\n[network]\nremote = [[1, 1e-6], [1, 2e-6]]\n",
            1,
        );
        assert!(
            e.contains("[network] remote") && e.contains("1 bytes twice"),
            "{e}"
        );
        let e = err(
            "[[node]]\nprocs = [0]\n[network]\npreset = \"carrier-pigeon\"\n",
            1,
        );
        assert!(e.contains("no such preset"), "{e}");
        assert!(err("name = \"no nodes\"\n", 1).contains("node"));
    }

    #[test]
    fn load_target_names_the_file() {
        let dir = std::env::temp_dir().join(format!("lbf-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pair.toml");
        std::fs::write(&path, "[[node]]\nprocs = [0, 1]\n").unwrap();
        assert_eq!(load_target(&path, 2).unwrap().name, "pair");
        let e = load_target(&path, 3).unwrap_err().to_string();
        assert!(
            e.starts_with(&path.display().to_string()) && e.contains("process 2 is on no node"),
            "{e}"
        );
        let missing = load_target(&dir.join("absent.toml"), 1)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("absent.toml: cannot read"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A target file says how many processes a capture is to expect; the command line's
    /// target files must agree.
    #[test]
    fn target_files_tell_how_many_processes_they_place() {
        use crate::config::TargetArgs;
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            targets: TargetArgs,
        }
        let dir = std::env::temp_dir().join(format!("lbf-placed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (three, four) = (dir.join("three.toml"), dir.join("four.toml"));
        std::fs::write(&three, TWO_NODES).unwrap();
        std::fs::write(
            &four,
            "[[node]]\nprocs = [3, 0]\n[[node]]\nprocs = [1, 2]\n",
        )
        .unwrap();
        assert_eq!(procs_placed(&three).unwrap(), 3);
        assert_eq!(procs_placed(&four).unwrap(), 4);
        let args = |files: &[&Path]| {
            let mut argv = vec!["lbf".to_string()];
            for f in files {
                argv.extend(["--target".to_string(), f.display().to_string()]);
            }
            Cli::parse_from(argv).targets.procs_placed()
        };
        assert_eq!(args(&[]).unwrap(), None);
        assert_eq!(args(&[&four, &four]).unwrap(), Some(4));
        let e = args(&[&three, &four]).unwrap_err().to_string();
        assert!(
            e.contains("places 3 processes") && e.contains("places 4"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nodes_on_cluster_hosts_take_their_figures() {
        let cluster = crate::config::parse_cluster(
            "[[host]]\nname = \"a\"\ncores = 2\nspeed = 0.5\nlocal = [[0, 1e-6]]\n\
             [[host]]\nname = \"b\"\nlocal = [[0, 1e-6]]\n\
             [[network]]\nname = \"n\"\nhosts = [\"a\", \"b\"]\ntable = [[0, 5e-5]]\n",
            "lab",
        )
        .unwrap();
        let on = |text: &str| parse_target_on(text, "t", 3, Some(&cluster));
        let (t, notes) =
            on("[[node]]\nprocs = [0, 1]\nhost = \"a\"\n[[node]]\nprocs = [2]\nhost = \"b\"\ncores = 3\n")
                .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((t.nodes[0].cores, t.nodes[0].speed), (2, 0.5));
        assert_eq!((t.nodes[1].cores, t.nodes[1].speed), (3, 1.0));
        assert_eq!(t.network.remote.seconds(100), 5e-5);
        assert_eq!(t.network.local.seconds(100), 1e-6);
        let e = on("[[node]]\nprocs = [0, 1, 2]\nhost = \"z\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node 0: host \"z\" is not in cluster lab (its hosts: a, b)"),
            "{e}"
        );
        let e = on("[[node]]\nprocs = [0]\nhost = \"a\"\n[[node]]\nprocs = [1, 2]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("node 1 names no host"), "{e}");
        let e = on("[[node]]\nprocs = [0]\nhost = \"a\"\n[[node]]\nprocs = [1, 2]\nhost = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes 0 and 1 are both on host \"a\""), "{e}");
        let e = err("[[node]]\nprocs = [0]\nhost = \"a\"\n", 1);
        assert!(
            e.contains("no cluster file") && e.contains("--cluster"),
            "{e}"
        );
    }
}
