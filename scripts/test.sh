#!/usr/bin/env bash
# Runs every test of lbf on this machine, setting it up first (idempotent, quick when done).
# Needs root: the tests load real eBPF programs and trace real MPI programs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --all-targets --locked
# Lints and docs first: a warning fails the run (the workspace's lints: Cargo.toml).
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# cargo-nextest runs each test in a process of its own, one at a time, and kills one that
# hangs (.config/nextest.toml says why and how); it does not run doc tests, cargo test does.
cargo nextest run --workspace --locked
cargo test --workspace --locked --doc
