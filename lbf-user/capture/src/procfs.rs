//! What every capture asks of `/proc` about a process, whatever its source.

use std::fs;

/// Whether process `pid` has ended: gone from `/proc`, or a zombie (it has run its exit).
pub fn has_ended(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the parenthesised command name, which may itself contain ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some('Z' | 'X'))
}
