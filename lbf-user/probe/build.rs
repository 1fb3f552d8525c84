//! Builds lbf's eBPF object and puts it in OUT_DIR, where `tracer` embeds it with
//! `aya::include_bytes_aligned!`: the lbf binaries carry their kernel side, no loose files.
//! The build itself is shared with `cargo xtask build-ebpf`.

use std::{env, fs, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    // lbf-user/probe: the workspace root is two levels up.
    let root = manifest
        .ancestors()
        .nth(2)
        .expect("lbf-probe sits in lbf-user/ in the workspace")
        .to_path_buf();
    // Whatever changes the object: the eBPF crate, the record ABI, and this build.
    let ebpf = lbf_build::crate_dir(&root);
    for input in [
        ebpf.join("src"),
        ebpf.join("Cargo.toml"),
        ebpf.join(".cargo/config.toml"),
        ebpf.join("rust-toolchain.toml"),
        root.join("lbf-common/src"),
        root.join("lbf-common/Cargo.toml"),
        root.join("xtask/build/src"),
    ] {
        println!("cargo:rerun-if-changed={}", input.display());
    }
    let object = match lbf_build::build(&root) {
        Ok(object) => object,
        Err(e) => {
            // A panic shows the message plainly in cargo's output.
            panic!("lbf-probe needs its eBPF object: {e}");
        }
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("lbf.bpf.o");
    fs::copy(&object, &out)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", object.display(), out.display()));
}
