//! [`EmptyProbes`]: lbf's do-nothing entry and return programs attached like its MPI probes,
//! the baseline against which `cargo xtask bench-probe` measures what lbf's own kernel-side
//! work (filtering, stamping, copying) adds to the bare cost of a uprobe and a uretprobe.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::{
    symbols,
    tracer::{object_loader, program, AttachMode, OBJECT},
};

/// An empty uprobe + uretprobe on some functions, attached for all processes until dropped.
pub struct EmptyProbes {
    /// Holds the programs and their links.
    _ebpf: Ebpf,
}

impl EmptyProbes {
    /// Attaches the empty entry and return programs of lbf's eBPF object to `functions` of the
    /// object file at `path` (names from its dynamic symbol table), one uprobe_multi link per
    /// direction as [`super::Tracer`] attaches its MPI probes. Needs root and uprobe_multi
    /// links (Linux 6.6 and later).
    pub fn attach(path: &Path, functions: &[&str]) -> Result<Self> {
        ensure!(
            AttachMode::detect()? == AttachMode::Multi,
            "the empty-probe baseline needs uprobe_multi links (Linux 6.6 or later)"
        );
        let offsets = symbols::dynamic_function_offsets(path, functions)?;
        let points = functions
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let offset = offsets
                    .get(*name)
                    .with_context(|| format!("{} defines no function {name}", path.display()))?;
                Ok(UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(*offset),
                    cookie: Some(i as u64),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let target = path
            .canonicalize()
            .with_context(|| format!("object file {}", path.display()))?;
        let mut ebpf = object_loader()
            .load(OBJECT)
            .context("loading lbf's eBPF object into the kernel")?;
        for name in ["empty_exit", "empty_enter"] {
            let prog: &mut UProbe = program(&mut ebpf, name)?;
            prog.load()
                .with_context(|| format!("verifying eBPF program {name}"))?;
            prog.attach(&points, &target, UProbeScope::AllProcesses)
                .with_context(|| format!("attaching {name} to {}", target.display()))?;
        }
        Ok(Self { _ebpf: ebpf })
    }
}
