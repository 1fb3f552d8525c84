//! The field offsets the kernel side needs (`task_struct.pid`, `.se.sum_exec_runtime` and
//! `.signal`, `.mm`, `signal_struct.live`, `mm_struct.start_code`, `linux_binprm.filename`,
//! and the way to a CPU's steal clock), read from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`). A minimal reader of the BTF type section: just enough to walk
//! structs and their members, and to find variables in the per-CPU section.

use std::{collections::HashMap, fs};

use anyhow::{bail, ensure, Context, Result};

/// The kernel's BTF.
const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// The structs whose members are looked up: the kernel has some ten thousand, and keeping
/// only these makes the parse a scan without allocations (it runs at every start).
const WANTED: [&str; 8] = [
    "task_struct",
    "sched_entity",
    "signal_struct",
    "linux_binprm",
    "mm_struct",
    "cfs_rq",
    "rq",
    "kvm_steal_time",
];

/// The tracepoints the lifecycle hooks attach to (BTF tracepoint programs of the object, named
/// after them): loading such a program names its tracepoint by the type id of the kernel's
/// `btf_trace_<tracepoint>` typedef.
pub(crate) const LIFECYCLE_TRACEPOINTS: [&str; 4] = [
    "sched_switch",
    "task_newtask",
    "sched_process_exec",
    "sched_process_exit",
];

/// The per-CPU variables whose places in the per-CPU section are looked up.
const WANTED_PER_CPU: [&str; 2] = ["runqueues", "steal_time"];

/// The kernel's per-CPU section.
const PER_CPU_SECTION: &[u8] = b".data..percpu";

/// A struct member: `(name, byte offset, type id)`.
type Member = (String, u32, u32);

/// Members of the [`WANTED`] structs by struct name, and of the anonymous structs they hold
/// (`mm_struct` keeps most of its fields in one) by type id.
pub(crate) struct Btf {
    structs: HashMap<&'static str, Vec<Member>>,
    anonymous: HashMap<u32, Vec<Member>>,
    /// Offsets of the [`WANTED_PER_CPU`] variables in the per-CPU section.
    per_cpu: HashMap<&'static str, u32>,
    /// Type ids of the `btf_trace_*` typedefs of the [`LIFECYCLE_TRACEPOINTS`].
    tracepoints: HashMap<&'static str, u32>,
}

impl Btf {
    /// The running kernel's BTF; an error naming the file if it cannot be read.
    pub(crate) fn of_kernel() -> Result<Self> {
        let data =
            fs::read(VMLINUX).with_context(|| format!("reading the kernel's BTF {VMLINUX}"))?;
        Self::parse(&data).with_context(|| format!("parsing {VMLINUX}"))
    }

    /// The type ids of the [`LIFECYCLE_TRACEPOINTS`]' `btf_trace_*` typedefs, in that order;
    /// an error naming one the kernel does not have.
    pub(crate) fn tracepoint_ids(&self) -> Result<[u32; 4]> {
        let mut ids = [0; 4];
        for (id, tp) in ids.iter_mut().zip(LIFECYCLE_TRACEPOINTS) {
            *id = *self
                .tracepoints
                .get(tp)
                .with_context(|| format!("the kernel's BTF has no tracepoint {tp}"))?;
        }
        Ok(ids)
    }

    /// Byte offset of `task_struct.pid` (a task's thread id).
    pub(crate) fn task_pid_offset(&self) -> Result<u32> {
        self.member_offset("task_struct", "pid")
    }

    /// Byte offset of `task_struct.mm` (a task's address space).
    pub(crate) fn task_mm_offset(&self) -> Result<u32> {
        self.member_offset("task_struct", "mm")
    }

    /// Byte offset of `mm_struct.start_code`, which `end_code` follows (the kernel side reads
    /// both at once): the executable's text.
    pub(crate) fn mm_start_code_offset(&self) -> Result<u32> {
        let start = self.member_offset("mm_struct", "start_code")?;
        let end = self.member_offset("mm_struct", "end_code")?;
        ensure!(
            end == start + 8,
            "the kernel's mm_struct has end_code at {end}, not right after start_code ({start}): \
             lbf's kernel side reads both at once"
        );
        Ok(start)
    }

    /// Byte offset of `linux_binprm.filename` (the file an exec runs).
    pub(crate) fn binprm_filename_offset(&self) -> Result<u32> {
        self.member_offset("linux_binprm", "filename")
    }

    /// Byte offsets of `task_struct.signal` and of `signal_struct.live` (the thread group's
    /// count of threads not yet exiting).
    pub(crate) fn signal_live_offsets(&self) -> Result<(u32, u32)> {
        let signal = self.member_offset("task_struct", "signal")?;
        let live = self.member_offset("signal_struct", "live")?;
        Ok((signal, live))
    }

    /// Byte offset of `task_struct.se.sum_exec_runtime`.
    pub(crate) fn sum_exec_runtime_offset(&self) -> Result<u32> {
        let se = self.member_offset("task_struct", "se")?;
        let sum = self.member_offset("sched_entity", "sum_exec_runtime")?;
        Ok(se + sum)
    }

    /// Offsets that lead from a task to its CPU's steal clock: `task_struct.se.cfs_rq`,
    /// `cfs_rq.rq`, `rq.cpu`, and the places in the per-CPU section of `runqueues` and of
    /// `steal_time.steal` (see `lbf_common::maps::KernelOffsets::task_cfs_rq`). An error on
    /// a kernel without group scheduling (no `cfs_rq.rq`) or that is no KVM guest.
    pub(crate) fn steal_clock_offsets(&self) -> Result<[u32; 5]> {
        let se = self.member_offset("task_struct", "se")?;
        let cfs_rq = self.member_offset("sched_entity", "cfs_rq")?;
        let steal = self.member_offset("kvm_steal_time", "steal")?;
        let per_cpu = |var: &str| {
            self.per_cpu
                .get(var)
                .copied()
                .with_context(|| format!("no per-CPU variable {var} in the kernel's BTF"))
        };
        Ok([
            se + cfs_rq,
            self.member_offset("cfs_rq", "rq")?,
            self.member_offset("rq", "cpu")?,
            per_cpu("runqueues")?,
            per_cpu("steal_time")? + steal,
        ])
    }

    /// Reads the structs of a little-endian BTF blob.
    fn parse(data: &[u8]) -> Result<Self> {
        let u32_at = |off: usize| -> Result<u32> {
            let b = data.get(off..off + 4).context("BTF truncated")?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        ensure!(
            data.len() >= 24 && data[0..2] == [0x9f, 0xeb],
            "not little-endian BTF"
        );
        let hdr_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let str_off = u32_at(16)? as usize;
        let types = hdr_len + type_off;
        let strings = hdr_len + str_off;
        let name = |off: u32| -> &[u8] {
            let start = strings + off as usize;
            let bytes = data.get(start..).unwrap_or(&[]);
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(0);
            &bytes[..end]
        };
        let members_at = |pos: usize, vlen: usize, bitfield_offsets: bool| -> Result<Vec<Member>> {
            (0..vlen)
                .map(|i| {
                    let m = pos + i * 12;
                    let bits = u32_at(m + 8)?;
                    let bits = if bitfield_offsets {
                        bits & 0xff_ffff
                    } else {
                        bits
                    };
                    let member = String::from_utf8_lossy(name(u32_at(m)?)).into_owned();
                    Ok((member, bits / 8, u32_at(m + 4)?))
                })
                .collect()
        };
        let mut structs = HashMap::new();
        // Where each anonymous struct or union is, by type id, until the wanted ones are known.
        let mut unnamed = HashMap::new();
        // The wanted per-CPU variables by type id, and where the per-CPU section lists its
        // variables (`vlen` entries of type id, offset, size).
        let mut per_cpu_vars = HashMap::new();
        let mut per_cpu_section = None;
        let mut tracepoints = HashMap::new();
        let mut pos = types;
        let mut id = 0u32;
        while pos < types + type_len {
            id += 1;
            let (name_off, info) = (u32_at(pos)?, u32_at(pos + 4)?);
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let bitfield_offsets = info >> 31 == 1;
            pos += 12;
            let extra = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => vlen * 12,
                KIND_ENUM | KIND_FUNC_PROTO => vlen * 8,
                _ => 0,
            };
            let wanted = (kind == KIND_STRUCT)
                .then(|| WANTED.iter().find(|w| w.as_bytes() == name(name_off)))
                .flatten();
            if let Some(&strukt) = wanted {
                let members = members_at(pos, vlen, bitfield_offsets)?;
                structs.entry(strukt).or_insert(members);
            } else if matches!(kind, KIND_STRUCT | KIND_UNION) && name_off == 0 {
                unnamed.insert(id, (pos, vlen, bitfield_offsets));
            } else if kind == KIND_VAR {
                if let Some(&var) = WANTED_PER_CPU
                    .iter()
                    .find(|w| w.as_bytes() == name(name_off))
                {
                    per_cpu_vars.insert(id, var);
                }
            } else if kind == KIND_DATASEC && name(name_off) == PER_CPU_SECTION {
                per_cpu_section = Some((pos, vlen));
            } else if kind == KIND_TYPEDEF {
                if let Some(tp) = name(name_off)
                    .strip_prefix(b"btf_trace_")
                    .and_then(|n| LIFECYCLE_TRACEPOINTS.iter().find(|t| t.as_bytes() == n))
                {
                    tracepoints.insert(*tp, id);
                }
            }
            pos += extra;
        }
        let mut per_cpu = HashMap::new();
        if let Some((pos, vlen)) = per_cpu_section {
            for i in 0..vlen {
                let entry = pos + i * 12;
                if let Some(&var) = per_cpu_vars.get(&u32_at(entry)?) {
                    per_cpu.insert(var, u32_at(entry + 4)?);
                }
            }
        }
        let mut anonymous = HashMap::new();
        for members in structs.values() {
            for (member, _, ty) in members {
                if let (true, Some(&(pos, vlen, bits))) = (member.is_empty(), unnamed.get(ty)) {
                    anonymous.insert(*ty, members_at(pos, vlen, bits)?);
                }
            }
        }
        Ok(Self {
            structs,
            anonymous,
            per_cpu,
            tracepoints,
        })
    }

    /// Byte offset of member `member`: a direct member, or one of an anonymous struct or
    /// union that is a direct member.
    fn member_offset(&self, strukt: &str, member: &str) -> Result<u32> {
        let Some(members) = self.structs.get(strukt) else {
            bail!("struct {strukt} not in the kernel's BTF");
        };
        let direct = members.iter().find(|(n, _, _)| n == member);
        let nested = || {
            members.iter().find_map(|(n, off, ty)| {
                let inner = self.anonymous.get(ty).filter(|_| n.is_empty())?;
                let (_, at, _) = inner.iter().find(|(m, _, _)| m == member)?;
                Some((String::new(), off + at, 0))
            })
        };
        direct
            .cloned()
            .or_else(nested)
            .map(|(_, off, _)| off)
            .with_context(|| format!("struct {strukt} has no member {member}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every offset the kernel side uses is found in this kernel's BTF (which the kernel side
    /// needs, so a machine without it cannot run lbf at all), including the way to the steal
    /// clock of this KVM guest.
    #[test]
    fn finds_task_offsets_in_the_kernel_s_btf() {
        let btf = Btf::of_kernel().unwrap();
        let off = btf.sum_exec_runtime_offset().unwrap();
        assert!(off > 0 && off.is_multiple_of(8), "offset {off}");
        let pid = btf.task_pid_offset().unwrap();
        assert!(
            pid > 0 && pid.is_multiple_of(4) && pid != off,
            "offset {pid}"
        );
        let filename = btf.binprm_filename_offset().unwrap();
        assert!(filename.is_multiple_of(8), "offset {filename}");
        let start = btf.mm_start_code_offset().unwrap();
        assert!(start > 0 && start.is_multiple_of(8), "offset {start}");
        let (signal, live) = btf.signal_live_offsets().unwrap();
        assert!(signal > 0 && signal.is_multiple_of(8), "offset {signal}");
        assert!(live.is_multiple_of(4), "offset {live}");
        let [cfs_rq, rq, cpu, runqueues, steal] = btf.steal_clock_offsets().unwrap();
        assert!(cfs_rq > off && cfs_rq.is_multiple_of(8), "offset {cfs_rq}");
        assert!(rq.is_multiple_of(8) && cpu.is_multiple_of(4), "{rq} {cpu}");
        assert!(
            runqueues != steal && steal.is_multiple_of(8),
            "{runqueues} {steal}"
        );
    }

    /// The tracepoints' type ids are those aya's own BTF parser finds.
    #[test]
    fn finds_the_lifecycle_tracepoints_as_aya_does() {
        let ours = Btf::of_kernel().unwrap().tracepoint_ids().unwrap();
        let aya = aya::Btf::from_sys_fs().unwrap();
        for (id, tp) in ours.iter().zip(LIFECYCLE_TRACEPOINTS) {
            let theirs = aya
                .id_by_type_name_kind(&format!("btf_trace_{tp}"), aya_obj::btf::BtfKind::Typedef)
                .unwrap();
            assert_eq!(*id, theirs, "{tp}");
        }
    }
}
