//! Generates the gRPC client stubs and messages from the repository's `proto/` at build time
//! with protox (a pure-Rust protobuf compiler: no system protoc) and tonic-prost-build, as the
//! server's build.rs does, but clients only.
//!
//! Why not `buf generate` with committed output like the other SDKs: there is no released
//! `protoc-gen-tonic`/`protoc-gen-prost` pair for tonic 0.14 + prost 0.14 (the community
//! neoeinstein plugins stop at tonic 0.12), and generating in build.rs keeps the stubs and the
//! tonic version in lock-step through Cargo.lock. The proto files are found by globbing
//! `proto/jobwire/v1`, so adding a file needs no edit here.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let dir = root.join("jobwire/v1");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "proto"))
        .collect();
    files.sort();
    let rel: Vec<&Path> = files
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap_or(p))
        .collect();
    let fds = protox::compile(&rel, [&root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
