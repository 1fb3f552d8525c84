#!/usr/bin/env bash
# Builds every PVM workload in this folder. Usage: build.sh OUT_DIR
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for c in "$src"/*.c; do
    gcc -O1 -g -Wall -Wextra -o "$out/$(basename "$c" .c)" "$c" -lgpvm3 -lpvm3
done
