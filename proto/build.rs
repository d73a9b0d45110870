//! Compiles the plugin API with `protox` (pure Rust: no system `protoc`), generates the tonic
//! client and server from the resulting descriptor set, and writes that descriptor set (with
//! its imports) to `OUT_DIR` for server reflection.

use std::path::PathBuf;

use prost::Message as _;

const PROTOS: &[&str] = &[
    "karpenter/cloudprovider/v1/identity.proto",
    "karpenter/cloudprovider/v1/types.proto",
    "karpenter/cloudprovider/v1/cloudprovider.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }

    // protox keeps source info (the proto comments), so reflection can serve them and
    // `grpcurl describe` prints every RPC's documentation.
    let descriptor_set = protox::compile(PROTOS, ["."])?;
    std::fs::write(
        out_dir.join("cloudprovider_v1_descriptor.bin"),
        descriptor_set.encode_to_vec(),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Optional RPCs a plugin leaves out answer UNIMPLEMENTED, which the API defines as
        // "not supported": plugin authors implement only what they support.
        .generate_default_stubs(true)
        .compile_fds(descriptor_set)?;
    Ok(())
}
