//! Offsets of the kernel data the kernel side reads, from the running kernel's BTF, so that
//! the object follows the kernel's layouts (see `lbf_common::maps::KernelOffsets`).

use anyhow::Result;
use lbf_common::maps::KernelOffsets;

use super::btf::Btf;

/// Reads the offset of every field the kernel side uses. Fails, naming the file, when the
/// kernel's BTF cannot be read (the kernel side needs it anyway) or a required field is
/// missing; `sum_exec_runtime`, the thread group's count of live threads and the way to the
/// steal clock are optional (the kernel side has fallbacks).
pub(crate) fn offsets() -> Result<KernelOffsets> {
    let btf = Btf::of_kernel()?;
    let (task_signal, signal_live) = btf
        .signal_live_offsets()
        .unwrap_or((KernelOffsets::ABSENT, KernelOffsets::ABSENT));
    let [task_cfs_rq, cfs_rq_rq, rq_cpu, percpu_runqueues, percpu_steal] = btf
        .steal_clock_offsets()
        .unwrap_or([KernelOffsets::ABSENT; 5]);
    Ok(KernelOffsets {
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
    })
}
