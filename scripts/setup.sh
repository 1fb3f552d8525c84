#!/usr/bin/env bash
# Idempotent machine set-up for lbf: everything a fresh Debian 12 machine of this
# project's kind needs to build the eBPF object, run the tracer and run the tests.
# Quick when already done: every step checks before it acts.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "must run as root (it installs apt packages); try: sudo $0"
        exit 1
    fi
}

apt_packages=(
    openmpi-bin libopenmpi-dev      # Open MPI 4.1: mpicc.openmpi, mpirun.openmpi
    mpich libmpich-dev              # MPICH 4.0: mpicc.mpich, mpirun.mpich
    pvm pvm-dev                     # PVM 3.4 (sockets/PVM capture)
    gfortran                        # the Fortran MPI workloads (mpif90.openmpi, mpif90.mpich)
    hpcc                            # HPC Challenge (Open MPI): a third-party MPI program
    iproute2                        # network namespaces for multi-host tests
    sockperf                        # a third-party TCP ping-pong the calibration tests compare with
    gcc make pkg-config
)

install_apt() {
    local missing=()
    for p in "${apt_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "apt packages present"
        return
    fi
    log "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_rust_src() {
    if rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
        log "nightly rust-src present"
    else
        log "adding rust-src to the nightly toolchain"
        rustup component add rust-src --toolchain nightly
    fi
}

# bpf-linker must link against an LLVM of the nightly rustc's major version; Debian 12
# has none, so link it against the nightly toolchain's own libLLVM through a shim prefix.
install_bpf_linker() {
    if command -v bpf-linker >/dev/null 2>&1 && bpf-linker --version >/dev/null 2>&1; then
        log "bpf-linker present"
        return
    fi
    local sysroot so major shim
    sysroot=$(rustc +nightly --print sysroot)
    so=$(basename "$(ls "$sysroot"/lib/libLLVM.so.* | head -n1)")
    major=$(rustc +nightly -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
    shim=${HOME}/.cache/bpf-linker-llvm
    mkdir -p "$shim/lib"
    ln -sf "$sysroot/lib/$so" "$shim/lib/libLLVM.so"
    ln -sf "$sysroot/lib/$so" "$shim/lib/$so"
    log "building bpf-linker against $so (LLVM $major); takes about 80 s"
    LLVM_PREFIX=$shim cargo +nightly install --locked bpf-linker --no-default-features --features "llvm-$major"
}

# A cargo subcommand `cargo NAME`, built once (crate cargo-NAME) unless present; TIME says
# how long building it takes.
install_cargo_subcommand() {
    local name=$1 time=$2
    if cargo "$name" --version >/dev/null 2>&1; then
        log "cargo-$name present"
    else
        log "building cargo-$name; takes $time"
        cargo install --locked "cargo-$name"
    fi
}

need_root
install_apt
install_rust_src
install_bpf_linker
# The test runner (scripts/test.sh): on this machine kind already.
install_cargo_subcommand nextest "a few minutes"
# The fuzzer driver (scripts/test.sh runs the parsers' fuzz targets briefly).
install_cargo_subcommand fuzz "a minute or two"
log "done"
