//! Builds lbf's eBPF object (the `lbf-ebpf` crate) for `bpfel-unknown-none`.
//!
//! One implementation for two callers: `cargo xtask build-ebpf`, and `lbf-probe`'s build
//! script (a build dependency), so that every build of the probe crate embeds a fresh
//! object. Only `std` here. The eBPF crate builds with the nightly toolchain
//! (`-Z build-std=core`, see `lbf-ebpf/.cargo/config.toml`) and links with `bpf-linker`; both
//! are installed by `scripts/setup.sh`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// Toolchain the eBPF crate builds with.
const TOOLCHAIN: &str = "nightly";

/// Environment a parent cargo sets for build scripts that must not leak into the nested
/// build (it would compile with the wrong compiler, flags, target or target directory).
const INHERITED_ENV: &[&str] = &[
    "RUSTC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOC",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTUP_TOOLCHAIN",
];

/// Where the eBPF crate lives, given the workspace root.
pub fn crate_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("lbf-ebpf")
}

/// Builds the object in release mode (into `lbf-ebpf/target`, apart from the workspace's
/// target directory) and returns its path. The error names the missing tool and says to run
/// `scripts/setup.sh` when the nightly toolchain, its `rust-src` or `bpf-linker` is missing.
pub fn build(workspace_root: &Path) -> Result<PathBuf, String> {
    let setup_hint = "run `sudo scripts/setup.sh` (it installs the nightly toolchain's rust-src \
                      and bpf-linker)";
    match Command::new("bpf-linker").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "bpf-linker is installed but does not run ({}): {setup_hint}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
        Err(e) => return Err(format!("bpf-linker not found on PATH ({e}): {setup_hint}")),
    }
    let dir = crate_dir(workspace_root);
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        TOOLCHAIN,
        "cargo",
        "build",
        "--release",
        "--target-dir",
    ])
    .arg(dir.join("target"))
    .current_dir(&dir);
    for key in INHERITED_ENV {
        cmd.env_remove(key);
    }
    let status = cmd.status().map_err(|e| {
        format!(
            "cannot run `rustup` to build {}: {e}: {setup_hint}",
            dir.display()
        )
    })?;
    if !status.success() {
        return Err(format!(
            "building the eBPF object in {} with `rustup run {TOOLCHAIN} cargo build --release` \
             failed ({status}); if the toolchain, rust-src or bpf-linker is missing, {setup_hint}",
            dir.display()
        ));
    }
    let object = dir.join("target/bpfel-unknown-none/release/lbf");
    if !object.is_file() {
        return Err(format!(
            "the eBPF build succeeded but {} is missing",
            object.display()
        ));
    }
    Ok(object)
}
