//! Compiles `proto/jobwire/v1/*.proto` with protox (pure Rust, no system protoc) and
//! generates the tonic servers and clients. The encoded descriptor set is written to
//! `OUT_DIR/jobwire_descriptor.bin` for gRPC server reflection. Also sets `JOBWIRE_GIT_SHA`
//! (from that env var, else `git rev-parse`, else "unknown") for the build-info metric.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-env-changed=JOBWIRE_GIT_SHA");
    if std::path::Path::new(".git/HEAD").exists() {
        println!("cargo:rerun-if-changed=.git/HEAD");
    }
    let sha = std::env::var("JOBWIRE_GIT_SHA")
        .ok()
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=JOBWIRE_GIT_SHA={sha}");
    let files = [
        "proto/jobwire/v1/job.proto",
        "proto/jobwire/v1/job_service.proto",
        "proto/jobwire/v1/worker_service.proto",
        "proto/jobwire/v1/dead_letter_service.proto",
        "proto/jobwire/v1/queue_service.proto",
        "proto/jobwire/v1/group_service.proto",
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
        // Decode errors answer INVALID_ARGUMENT (src/api/codec.rs), not tonic-prost's INTERNAL.
        .codec_path("crate::api::codec::ProtoCodec")
        .compile_fds(fds)?;
    Ok(())
}
