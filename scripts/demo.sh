#!/usr/bin/env bash
# The main job on a bundled example: trace a 4-rank MPI halo exchange with eBPF and predict its
# run time on a few other machines. Sets the machine up first (idempotent). Needs root.
#   sudo scripts/demo.sh [openmpi|mpich]
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=${1:-openmpi}
bash scripts/setup.sh
cargo build --release --locked --bins
out=target/demo
mkdir -p "$out"
bash tests/workloads/mpi/build.sh "$mpi" "$out/$mpi" >/dev/null
# spin: how much a waiting rank loads an oversubscribed core (docs/targets.md).
case "$mpi" in
    openmpi) launch=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to none -np 4); spin=0 ;;
    mpich) launch=(mpirun.mpich -n 4); spin=1 ;;
    *) echo "demo: unknown MPI '$mpi'; use openmpi or mpich" >&2; exit 2 ;;
esac
trace=$out/halo-$mpi.trace.jsonl
echo "demo: tracing a 4-rank halo exchange ($mpi) on this $(nproc)-core machine"
target/release/lbf-trace -o "$trace" -- "${launch[@]}" "$out/$mpi/halo" 40 10 | grep -v '^LBF-CHECK' || true
echo
echo "demo: predicted run time of the same program elsewhere (lbf-gag predict $trace ...)"
target/release/lbf-gag predict "$trace" \
    --target examples/targets/four-nodes.toml \
    --target examples/targets/fast-network.toml \
    --target examples/targets/two-nodes.toml \
    --target examples/targets/one-core.toml \
    --nodes 1 --cores "$(nproc)" --spin "$spin"
echo
echo "The row above (measured) is this machine as a target: compare the two."
echo "The predicted schedule of a target, for ui.perfetto.dev:"
echo "  target/release/lbf-gag predict $trace --target examples/targets/two-nodes.toml --timeline $out/two-nodes.json"
