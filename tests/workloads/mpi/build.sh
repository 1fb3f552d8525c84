#!/usr/bin/env bash
# Builds every MPI workload in this folder with one MPI's compiler wrappers (C: mpicc.MPI;
# Fortran, *.f90, fixed-form *.f and preprocessed *.F90: mpif90.MPI; a *.F90 also with
# -DMPI_F08, as NAME-MPI_F08).
# Usage: build.sh openmpi|mpich OUT_DIR   (binaries land in OUT_DIR/<name>)
set -euo pipefail
shopt -s nullglob
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
for f in "$src"/*.F90; do
    name=$(basename "$f" .F90)
    "mpif90.$mpi" -O1 -g -Wall -o "$out/$name" "$f"
    "mpif90.$mpi" -O1 -g -Wall -DMPI_F08 -o "$out/$name-MPI_F08" "$f"
done
