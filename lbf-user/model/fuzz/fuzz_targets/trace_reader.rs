//! Any bytes as a trace file: the reader either reads them or names an error, never panics or
//! hangs, and what it reads is what the format allows.
#![no_main]

use lbf_model::trace::TraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = TraceReader::new(data) else {
        return;
    };
    let procs = reader.header().procs.len();
    let mut last_line = 1;
    while let Ok(Some(e)) = reader.next_event() {
        assert!((e.event.proc as usize) < procs, "an event of a process not in the header");
        assert!(e.line > last_line, "lines go forward");
        last_line = e.line;
    }
});
