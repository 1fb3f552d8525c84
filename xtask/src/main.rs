//! `cargo xtask`: project chores (see `cargo xtask --help`).
fn main() {}
