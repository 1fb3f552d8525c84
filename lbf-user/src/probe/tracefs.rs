//! Offsets of the kernel data the kernel side reads: classic tracepoint fields from tracefs
//! `format` files and `task_struct` fields from BTF, so the object follows the running
//! kernel's layouts.

use std::{fs, path::Path};

use anyhow::{bail, Context, Result};
use lbf_common::maps::KernelOffsets;

use super::btf::Btf;

/// Where tracefs is mounted (`scripts/setup.sh` mounts it).
const TRACEFS: &str = "/sys/kernel/tracing/events";

/// Reads the offsets of every field the kernel side uses. Fails, naming the file, when
/// tracefs is not mounted, the kernel's BTF cannot be read (the kernel side needs it anyway)
/// or a required field is missing; `group_dead` and `sum_exec_runtime` are optional (the
/// kernel side has fallbacks).
pub fn offsets() -> Result<KernelOffsets> {
    let exec = format_of("sched", "sched_process_exec")?;
    let exit = format_of("sched", "sched_process_exit")?;
    let btf = Btf::of_kernel()?;
    Ok(KernelOffsets {
        exec_filename: required(&exec, "filename")?,
        exit_group_dead: field_offset(&exit.1, "group_dead").unwrap_or(KernelOffsets::ABSENT),
        task_pid: btf.task_pid_offset()?,
        task_sum_exec_runtime: btf
            .sum_exec_runtime_offset()
            .unwrap_or(KernelOffsets::ABSENT),
    })
}

/// `(path, contents)` of one tracepoint's format file.
fn format_of(category: &str, name: &str) -> Result<(String, String)> {
    let path = Path::new(TRACEFS).join(category).join(name).join("format");
    let text = fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is tracefs mounted? `mount -t tracefs tracefs /sys/kernel/tracing`, \
             which scripts/setup.sh does)",
            path.display()
        )
    })?;
    Ok((path.display().to_string(), text))
}

/// The offset of `field`, or an error naming the format file.
fn required(format: &(String, String), field: &str) -> Result<u32> {
    match field_offset(&format.1, field) {
        Some(off) => Ok(off),
        None => bail!("field `{field}` not found in {}", format.0),
    }
}

/// Parses `field:<type> <name>;\toffset:<n>;...` lines for `name` (array suffixes allowed).
pub fn field_offset(format: &str, name: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let ident = decl.split_whitespace().last()?;
        let ident = ident.split('[').next()?;
        if ident != name {
            return None;
        }
        let off = rest.trim().strip_prefix("offset:")?.split(';').next()?;
        off.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch\nformat:\n\
        \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n";

    #[test]
    fn finds_plain_array_and_data_loc_fields() {
        assert_eq!(field_offset(SWITCH, "prev_pid"), Some(24));
        assert_eq!(field_offset(SWITCH, "prev_comm"), Some(8));
        assert_eq!(field_offset(SWITCH, "filename"), Some(8));
        assert_eq!(field_offset(SWITCH, "next_pid"), None);
    }
}
