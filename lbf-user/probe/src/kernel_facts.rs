//! What the tracer must know of the running kernel's build: the offsets of the kernel data the
//! kernel side reads, so that the object follows the kernel's layouts (see
//! `lbf_common::maps::KernelOffsets`), and the type ids of the tracepoints its lifecycle hooks
//! attach to; from the kernel's BTF, kept across runs of one build.

use anyhow::Result;
use lbf_common::maps::KernelOffsets;

use super::btf::Btf;
use super::facts_cache::FactsCache;

/// What the tracer needs of the running kernel's BTF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelFacts {
    /// The offsets of the fields the kernel side reads.
    pub offsets: KernelOffsets,
    /// The type ids of the `btf_trace_*` typedefs of `btf::LIFECYCLE_TRACEPOINTS`, in order.
    pub tracepoints: [u32; 4],
}

/// The facts of the running kernel: kept from an earlier run on this kernel build
/// ([`FactsCache`]), else read from its BTF ([`from_btf`], some 7 ms) and kept for the next.
pub(crate) fn facts() -> Result<KernelFacts> {
    let cache = FactsCache::of_running_kernel();
    if let Some(kept) = cache.as_ref().and_then(FactsCache::load) {
        return Ok(kept);
    }
    let facts = from_btf()?;
    if let Some(cache) = &cache {
        // Best effort: without a cache the next run reads the BTF again.
        let _ = cache.store(&facts);
    }
    Ok(facts)
}

/// Reads the facts from the kernel's BTF. Fails, naming the file, when the BTF cannot be
/// read (the kernel side needs it anyway) or a required field or tracepoint is missing;
/// `sum_exec_runtime`, the thread group's count of live threads and the way to the steal
/// clock are optional (the kernel side has fallbacks).
pub(crate) fn from_btf() -> Result<KernelFacts> {
    let btf = Btf::of_kernel()?;
    let (task_signal, signal_live) = btf
        .signal_live_offsets()
        .unwrap_or((KernelOffsets::ABSENT, KernelOffsets::ABSENT));
    let [task_cfs_rq, cfs_rq_rq, rq_cpu, percpu_runqueues, percpu_steal] = btf
        .steal_clock_offsets()
        .unwrap_or([KernelOffsets::ABSENT; 5]);
    let offsets = KernelOffsets {
        binprm_filename: btf.binprm_filename_offset()?,
        task_signal,
        signal_live,
        task_pid: btf.task_pid_offset()?,
        task_sum_exec_runtime: btf
            .sum_exec_runtime_offset()
            .unwrap_or(KernelOffsets::ABSENT),
        task_mm: btf.task_mm_offset()?,
        mm_start_code: btf.mm_start_code_offset()?,
        task_cfs_rq,
        cfs_rq_rq,
        rq_cpu,
        percpu_runqueues,
        percpu_steal,
    };
    Ok(KernelFacts {
        offsets,
        tracepoints: btf.tracepoint_ids()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The facts a run keeps are those of the BTF, and the next run takes them from the
    /// cache (here in a folder of the test's own).
    #[test]
    fn kept_facts_are_the_btf_s() {
        let dir = std::env::temp_dir().join(format!("lbf-facts-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // SAFETY: this test runs in a process of its own (nextest), before any other thread
        // reads the environment.
        unsafe { std::env::set_var("LBF_CACHE_DIR", &dir) };
        let fresh = from_btf().unwrap();
        assert_eq!(facts().unwrap(), fresh, "read from the BTF, then kept");
        let cache = FactsCache::of_running_kernel().expect("a build id");
        assert_eq!(cache.load(), Some(fresh), "kept");
        assert_eq!(facts().unwrap(), fresh, "taken from the cache");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
