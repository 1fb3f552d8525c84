//! Compiles `lbf.proto` with protox (pure Rust), so building needs no `protoc` installed.

fn main() {
    println!("cargo:rerun-if-changed=lbf.proto");
    let descriptors = protox::compile(["lbf.proto"], ["."]).unwrap_or_else(|e| {
        // A panic shows the parser's message, with the line, plainly in cargo's output.
        panic!("proto/lbf.proto does not compile: {e}")
    });
    prost_build::Config::new()
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("generating Rust from proto/lbf.proto: {e}"));
}
