//! The command-line options that describe targets, shared by `lbf-gag predict` and
//! `lbf-trace` so that both accept exactly the same target files, short form and presets.

use std::path::PathBuf;

use super::PRESETS;
use super::{
    load_cluster, load_target_on, preset, procs_placed, short_form, ConfigError, Layout,
    NetworkPreset, ShortForm,
};
use crate::target::{Scheduler, Target, Wait};

/// Targets given on the command line: files (`--target`, repeatable) and one short form
/// (`--nodes` with `--cores`, `--layout`, `--speed`, `--spin`, `--network`). Flatten it into a
/// clap command.
#[derive(clap::Args, Clone, Debug)]
pub struct TargetArgs {
    /// A target file (TOML, see docs/targets.md); repeat for several targets.
    #[arg(long, value_name = "FILE")]
    pub target: Vec<PathBuf>,

    /// A cluster file (TOML, see docs/targets.md): the hosts and networks target files name
    /// (`[[node]] host = "b"`). Given without --target or --nodes, the whole cluster is the
    /// target: every host a node, processes in blocks by its cores.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,

    /// Short form: put all processes on this many identical nodes.
    #[arg(long, value_name = "N", help_heading = "Short-form target")]
    pub nodes: Option<u32>,

    /// Short form: cores per node.
    #[arg(
        long,
        default_value_t = 1,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    pub cores: u32,

    /// Short form: how processes are spread over the nodes.
    #[arg(
        long,
        value_enum,
        default_value_t = Layout::Block,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    pub layout: Layout,

    /// Short form: relative speed of every node (2.0 runs the same work in half the time).
    #[arg(
        long,
        default_value_t = 1.0,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    pub speed: f64,

    /// Short form: how much a waiting process loads its node, 0 to 1. MPI libraries poll while
    /// they wait, taking CPU from working processes on an oversubscribed node: 0 (the default,
    /// the paper's model) ignores that, 1 counts a waiting process like a computing one.
    #[arg(
        long,
        default_value_t = 0.0,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    pub spin: f64,

    /// Short form: model the operating system's scheduler on oversubscribed nodes. Cores are
    /// handed out in time slices (--slice) instead of shared continuously, and a waiting
    /// process either keeps its core, polling, until its slice ends (`spin`: MPICH; Open MPI
    /// with no more ranks than cores) or gives it up at once (`yield`: Open MPI with more
    /// ranks than cores). A message handed between two processes sharing a core then waits
    /// for the scheduler, as it does. Replaces --spin. See docs/engine.md.
    #[arg(
        long,
        value_name = "WAIT",
        value_enum,
        requires = "nodes",
        conflicts_with = "spin",
        help_heading = "Short-form target"
    )]
    pub scheduler: Option<Wait>,

    /// Short form: with --scheduler, the length of a time slice in seconds (Linux preempts at
    /// its timer tick: 0.004 with CONFIG_HZ=250, 0.001 with 1000).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = Scheduler::DEFAULT_SLICE,
        requires = "scheduler",
        help_heading = "Short-form target"
    )]
    pub slice: f64,

    /// Short form: bind each process to one core of its node, as `mpirun --bind-to core` or
    /// `taskset` do: a node's processes are dealt out to its cores in turn (rank i on core
    /// i % cores), and each core is shared by its own processes only. Linux behaves much like
    /// this unbound when every rank stays runnable (MPI ranks polling while they wait): it
    /// then moves none between cores. See docs/engine.md.
    #[arg(long, requires = "nodes", help_heading = "Short-form target")]
    pub bind_to_cores: bool,

    /// Short form: network preset (zero, shm, gige, 10gige, ib-edr, ib-hdr).
    #[arg(
        long,
        long_help = network_help(),
        value_name = "PRESET",
        default_value = "zero",
        value_parser = parse_preset,
        requires = "nodes",
        help_heading = "Short-form target"
    )]
    pub network: &'static NetworkPreset,
}

impl TargetArgs {
    /// Whether no target was given.
    pub fn is_empty(&self) -> bool {
        self.target.is_empty() && self.nodes.is_none() && self.cluster.is_none()
    }

    /// How many processes the target files place, if any is given (the short form places
    /// any number); an error if they disagree.
    pub fn procs_placed(&self) -> Result<Option<usize>, ConfigError> {
        let mut placed: Option<(usize, &PathBuf)> = None;
        for path in &self.target {
            let n = procs_placed(path)?;
            match placed {
                Some((m, first)) if m != n => {
                    return Err(ConfigError::new(
                        "--target",
                        format!(
                            "{} places {m} processes and {} places {n}: targets of one trace \
                             place the same processes",
                            first.display(),
                            path.display()
                        ),
                    ))
                }
                Some(_) => {}
                None => placed = Some((n, path)),
            }
        }
        Ok(placed.map(|(n, _)| n))
    }

    /// The targets for a trace of `num_procs` processes: the files in order, then the short
    /// form; or the cluster file's whole cluster when it comes alone. What the cluster's
    /// figures lose in the engine's model is printed on stderr as notes.
    pub fn resolve(&self, num_procs: usize) -> Result<Vec<Target>, ConfigError> {
        let cluster = self.cluster.as_deref().map(load_cluster).transpose()?;
        let mut notes = Vec::new();
        let mut targets = Vec::with_capacity(self.target.len() + 1);
        for path in &self.target {
            let (target, n) = load_target_on(path, num_procs, cluster.as_ref())?;
            targets.push(target);
            notes.extend(n);
        }
        if let (Some(cluster), true) = (&cluster, self.target.is_empty() && self.nodes.is_none()) {
            let (target, n) = cluster.target(num_procs)?;
            targets.push(target);
            notes.extend(n);
        }
        notes.dedup();
        for note in notes {
            eprintln!("note: {note}");
        }
        if let Some(nodes) = self.nodes {
            let form = ShortForm {
                nodes,
                cores: self.cores,
                layout: self.layout,
                speed: self.speed,
                network: self.network,
                spin: self.spin,
                scheduler: self.scheduler.map(|wait| Scheduler {
                    slice: self.slice,
                    wait,
                }),
                bind_to_cores: self.bind_to_cores,
            };
            targets.push(short_form(&form, num_procs)?);
        }
        Ok(targets)
    }
}

/// The long help of --network: every preset and what it models.
fn network_help() -> String {
    let mut help = String::from("Short form: network preset. The presets:");
    for p in PRESETS {
        help.push_str(&format!("\n  {:<7} {}", p.name, p.about));
    }
    help
}

/// clap's parser for a `--network` option: a preset's name, or an error listing them.
pub fn parse_preset(name: &str) -> Result<&'static NetworkPreset, String> {
    preset(name).map_err(|e| e.message)
}
