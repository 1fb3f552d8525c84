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
# The trace reader and the target parser under libFuzzer, briefly, from the corpus kept in
# lbf-user/model/fuzz/corpus (new inputs go to a scratch folder): a crash or hang fails the
# run. Long runs: cd lbf-user/model && cargo +nightly fuzz run -O trace_reader (see the README).
fuzz_scratch=$(mktemp -d)
trap 'rm -rf "$fuzz_scratch"' EXIT
for target in trace_reader target_parser; do
    mkdir -p "$fuzz_scratch/$target"
    (cd lbf-user/model && cargo +nightly fuzz run -O "$target" "$fuzz_scratch/$target" \
        "fuzz/corpus/$target" -- -runs=100000 -max_len=8192 -timeout=10 2>&1 | tail -n 3)
done
# Accuracy checks that other work on the machine kept from being made, in every attempt, write
# a line here (tests/machine: not_checked); the count closes the run.
unchecked=target/tmp/unchecked-accuracy.txt
rm -f "$unchecked"
# cargo-nextest runs each test in a process of its own, one at a time, and kills one that
# hangs (.config/nextest.toml says why and how); it does not run doc tests, cargo test does
# (first, so that nextest's summary is the runner's closing line).
cargo test --workspace --locked --doc
cargo nextest run --workspace --locked
if [ -s "$unchecked" ]; then
    echo "accuracy checks not made (the machine was busy in every attempt): $(wc -l < "$unchecked")"
    cat "$unchecked"
else
    echo "accuracy checks not made (the machine was busy in every attempt): 0"
fi
