//! Any text as a target file, for a trace of 1 to 256 processes (the first byte): the parser
//! either gives a target the engine accepts or names an error; never panics or hangs.
#![no_main]

use lbf_model::config::parse_target;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let num_procs = usize::from(n) + 1;
    if let Ok(target) = parse_target(text, "fuzz", num_procs) {
        assert!(target.placement(num_procs).is_ok(), "an accepted target the engine refuses");
    }
});
