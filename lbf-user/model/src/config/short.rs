//! The command line's short form for common placements: `--nodes 4 --cores 2 --layout block`.

use super::{validate, ConfigError, NetworkPreset};
use crate::target::{Node, Scheduler, Target, MAX_NODES};

/// How the short form spreads processes over nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// Consecutive ids share a node (0-3 on node 0, 4-7 on node 1, ...): neighbours talk locally.
    Block,
    /// Ids are dealt out in turn (0, 4, 8, ... on node 0 of 4).
    RoundRobin,
}

/// A placement of all of a trace's processes on `nodes` identical nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShortForm {
    /// Number of nodes.
    pub nodes: u32,
    /// Cores per node.
    pub cores: u32,
    /// How processes are spread.
    pub layout: Layout,
    /// Relative speed of every node.
    pub speed: f64,
    /// The network.
    pub network: &'static NetworkPreset,
    /// Load of a waiting process on its node, 0 to 1 (see [`Target::spin`]).
    pub spin: f64,
    /// The scheduler-aware node model, if asked for (see [`Target::scheduler`]).
    pub scheduler: Option<Scheduler>,
    /// Whether each process is bound to one core (see [`Target::bind_to_cores`]).
    pub bind_to_cores: bool,
}

/// The target `form` describes for a trace of `num_procs` processes, named after the form,
/// e.g. `4x2 block gige`.
pub fn short_form(form: &ShortForm, num_procs: usize) -> Result<Target, ConfigError> {
    if form.nodes == 0 {
        return Err(ConfigError::new(
            "--nodes",
            "0 nodes cannot run anything; give at least 1",
        ));
    }
    if form.nodes > MAX_NODES {
        return Err(ConfigError::new(
            "--nodes",
            format!(
                "{} nodes is more than lbf models (at most {MAX_NODES})",
                form.nodes
            ),
        ));
    }
    let nodes = form.nodes as usize;
    let mut procs = vec![Vec::new(); nodes];
    for p in 0..num_procs {
        let node = match form.layout {
            Layout::Block => p * nodes / num_procs,
            Layout::RoundRobin => p % nodes,
        };
        procs[node].push(p as u32);
    }
    let layout = match form.layout {
        Layout::Block => "block",
        Layout::RoundRobin => "round-robin",
    };
    let speed = if form.speed == 1.0 {
        String::new()
    } else {
        format!(" speed {}", form.speed)
    };
    let spin = if form.spin == 0.0 {
        String::new()
    } else {
        format!(" spin {}", form.spin)
    };
    let scheduler = match form.scheduler {
        None => String::new(),
        Some(s) if s.slice == Scheduler::DEFAULT_SLICE => format!(" scheduler {}", s.wait),
        Some(s) => format!(" scheduler {} slice {}", s.wait, s.slice),
    };
    let bound = if form.bind_to_cores {
        " bound to cores"
    } else {
        ""
    };
    let target = Target {
        name: format!(
            "{}x{} {layout} {}{speed}{spin}{scheduler}{bound}",
            form.nodes, form.cores, form.network.name
        ),
        nodes: procs
            .into_iter()
            .map(|procs| Node {
                procs,
                cores: form.cores,
                speed: form.speed,
            })
            .collect(),
        network: form.network.network(),
        spin: form.spin,
        scheduler: form.scheduler,
        bind_to_cores: form.bind_to_cores,
        procedures: Vec::new(),
    };
    validate(&target, num_procs)
        .map_err(|m| ConfigError::new("--nodes/--cores/--speed/--spin/--scheduler", m))?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::preset;

    fn form(nodes: u32, cores: u32, layout: Layout) -> ShortForm {
        ShortForm {
            nodes,
            cores,
            layout,
            speed: 1.0,
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            network: preset("gige").unwrap(),
        }
    }

    fn placement(t: &Target) -> Vec<Vec<u32>> {
        t.nodes.iter().map(|n| n.procs.clone()).collect()
    }

    #[test]
    fn block_keeps_neighbours_together() {
        let t = short_form(&form(2, 2, Layout::Block), 5).unwrap();
        assert_eq!(placement(&t), vec![vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(t.name, "2x2 block gige");
        assert_eq!(t.nodes[0].cores, 2);
        assert_eq!(t.network, preset("gige").unwrap().network());
    }

    #[test]
    fn round_robin_deals_in_turn() {
        let t = short_form(&form(2, 1, Layout::RoundRobin), 5).unwrap();
        assert_eq!(placement(&t), vec![vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(t.name, "2x1 round-robin gige");
    }

    #[test]
    fn speed_shows_in_the_name() {
        let t = short_form(
            &ShortForm {
                speed: 2.0,
                ..form(1, 1, Layout::Block)
            },
            1,
        )
        .unwrap();
        assert_eq!(t.name, "1x1 block gige speed 2");
        assert_eq!(t.nodes[0].speed, 2.0);
    }

    #[test]
    fn bad_forms_are_refused() {
        let zero = short_form(&form(0, 1, Layout::Block), 4)
            .unwrap_err()
            .to_string();
        assert!(zero.starts_with("--nodes: 0 nodes"), "{zero}");
        let cores = short_form(&form(1, 0, Layout::Block), 4)
            .unwrap_err()
            .to_string();
        assert!(cores.contains("0 cores"), "{cores}");
        let slow = ShortForm {
            speed: 0.0,
            ..form(1, 1, Layout::Block)
        };
        assert!(short_form(&slow, 4)
            .unwrap_err()
            .to_string()
            .contains("speed 0"));
    }
}
