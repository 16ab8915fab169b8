//! Compiles `proto/jobwire/v1/*.proto` with protox (pure Rust, no system protoc) and
//! generates the tonic servers and clients. The encoded descriptor set is written to
//! `OUT_DIR/jobwire_descriptor.bin` for gRPC server reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = [
        "proto/jobwire/v1/job.proto",
        "proto/jobwire/v1/job_service.proto",
        "proto/jobwire/v1/worker_service.proto",
        "proto/jobwire/v1/dead_letter_service.proto",
    ];
    let fds = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("jobwire_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
