#!/usr/bin/env bash
# Runs every test of lbf on this machine, setting it up first (idempotent, quick when done).
# Needs root: the tests load real eBPF programs and trace real MPI programs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --all-targets --locked
# One test at a time: the integration tests compare predicted and measured run times, which
# any concurrent test would skew.
cargo test --workspace --locked -- --test-threads=1
