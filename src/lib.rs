pub mod pb {
    tonic::include_proto!("jobwire.v1");
}
