//! What both benchmarks measure: a synthetic trace of 64 processes and four targets for it.

use lbf_model::config::{preset, short_form, Layout, ShortForm};
use lbf_model::target::Target;
use lbf_model::trace::synthetic;

/// Processes of the benchmark trace.
pub(crate) const PROCS: u32 = 64;

/// The benchmark trace with at least `events` events.
pub(crate) fn config(events: u64) -> synthetic::Config {
    synthetic::Config {
        procs: PROCS,
        events,
        seed: 42,
    }
}

/// The 64 processes on 64, 16, 8 and 1 nodes, over networks from slow to local.
pub(crate) fn targets() -> Vec<Target> {
    [
        (64, 1, "gige"),
        (16, 4, "10gige"),
        (8, 8, "ib-hdr"),
        (1, 16, "shm"),
    ]
    .into_iter()
    .map(|(nodes, cores, network)| {
        let network = preset(network).expect("a known preset");
        let form = ShortForm {
            nodes,
            cores,
            layout: Layout::Block,
            speed: 1.0,
            network,
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
        };
        short_form(&form, PROCS as usize).expect("a valid short form")
    })
    .collect()
}
