#!/usr/bin/env bash
# Builds every MPI workload in this folder with one MPI's compiler wrappers (C: mpicc.MPI;
# Fortran, *.f90 and fixed-form *.f: mpif90.MPI).
# Usage: build.sh openmpi|mpich OUT_DIR   (binaries land in OUT_DIR/<name>)
set -euo pipefail
mpi=${1:?usage: build.sh openmpi|mpich OUT_DIR}
out=${2:?usage: build.sh openmpi|mpich OUT_DIR}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for c in "$src"/*.c; do
    name=$(basename "$c" .c)
    "mpicc.$mpi" -O1 -g -Wall -Wextra -o "$out/$name" "$c"
done
for f in "$src"/*.f90 "$src"/*.f; do
    name=$(basename "$f"); name=${name%.*}
    "mpif90.$mpi" -O1 -g -Wall -o "$out/$name" "$f"
done
