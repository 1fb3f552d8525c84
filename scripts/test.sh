#!/usr/bin/env bash
# Runs every test of lbf on this machine, setting it up first (idempotent, quick when done).
# Needs root: the tests load real eBPF programs and trace real MPI programs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads=2
