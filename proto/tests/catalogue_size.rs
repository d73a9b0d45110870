//! The whole AWS catalogue through GetInstanceTypes: about 1,400 instance types, each with
//! every label upstream Karpenter sets and an offering per zone and capacity type, must reach
//! a client that keeps gRPC's default 4 MiB message limit. The sizes are printed (run with
//! `--nocapture`) so they can be tracked.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "tests: a panic is a failed assertion; sizes are reported"
)]

use std::collections::HashMap;

use prost::Message as _;
use provider_sdk::chunk::{RECOMMENDED_CHUNK_BYTES, chunk_instance_types};
use provider_sdk::serve::{Listener, serve};
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::identity_service_server::IdentityService;
use provider_sdk::v1::{
    GetInstanceTypesRequest, GetInstanceTypesResponse, InstanceType, Offering, Overhead,
    Requirement,
};
use provider_sdk::{Endpoint, InstanceTypeStream, connect::connect};
use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

const TYPES: usize = 1_400;
const ZONES: [&str; 6] = [
    "us-east-1a",
    "us-east-1b",
    "us-east-1c",
    "us-east-1d",
    "us-east-1e",
    "us-east-1f",
];
/// gRPC's default limit on a received message, which a client that sets nothing keeps.
const DEFAULT_GRPC_LIMIT: usize = 4 * 1024 * 1024;

fn requirement(key: &str, values: &[&str]) -> Requirement {
    Requirement::in_values(key, values)
}

fn quantities(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// A type shaped like the richest real ones: a GPU type with local NVMe, all labels set.
fn instance_type(i: usize) -> InstanceType {
    let family = format!("g{}dn", 4 + i % 5);
    let name = format!("{family}.{}xlarge-{i}", 1 + i % 48);
    let cpu = (2 + i % 190).to_string();
    let memory = format!("{}", 4096 * (1 + i % 96));
    let labels: Vec<(&str, String)> = vec![
        ("karpenter.k8s.aws/instance-category", "g".into()),
        ("karpenter.k8s.aws/instance-family", family.clone()),
        (
            "karpenter.k8s.aws/instance-generation",
            (4 + i % 5).to_string(),
        ),
        (
            "karpenter.k8s.aws/instance-size",
            format!("{}xlarge", 1 + i % 48),
        ),
        ("karpenter.k8s.aws/instance-cpu", cpu.clone()),
        (
            "karpenter.k8s.aws/instance-cpu-manufacturer",
            "intel".into(),
        ),
        (
            "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
            "3100".into(),
        ),
        ("karpenter.k8s.aws/instance-memory", memory.clone()),
        ("karpenter.k8s.aws/instance-ebs-bandwidth", "19000".into()),
        (
            "karpenter.k8s.aws/instance-network-bandwidth",
            "100000".into(),
        ),
        ("karpenter.k8s.aws/instance-hypervisor", "nitro".into()),
        (
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "true".into(),
        ),
        ("karpenter.k8s.aws/instance-gpu-name", "t4".into()),
        (
            "karpenter.k8s.aws/instance-gpu-manufacturer",
            "nvidia".into(),
        ),
        ("karpenter.k8s.aws/instance-gpu-count", "4".into()),
        ("karpenter.k8s.aws/instance-gpu-memory", "16384".into()),
        ("karpenter.k8s.aws/instance-local-nvme", "900".into()),
        ("karpenter.k8s.aws/instance-capability-flex", "false".into()),
    ];
    let mut requirements = vec![
        requirement("node.kubernetes.io/instance-type", &[&name]),
        requirement("kubernetes.io/arch", &["amd64"]),
        requirement("kubernetes.io/os", &["linux"]),
        requirement("topology.kubernetes.io/zone", &ZONES),
        requirement("karpenter.sh/capacity-type", &["spot", "on-demand"]),
        requirement(
            "topology.k8s.aws/zone-id",
            &[
                "use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6",
            ],
        ),
    ];
    requirements.extend(labels.iter().map(|(k, v)| requirement(k, &[v])));
    let offerings = ZONES
        .iter()
        .enumerate()
        .flat_map(|(z, zone)| {
            ["spot", "on-demand"]
                .into_iter()
                .map(move |capacity_type| Offering {
                    zone: (*zone).to_owned(),
                    capacity_type: capacity_type.to_owned(),
                    price: Some(0.1234567 * (i + z + 1) as f64),
                    currency: "USD".to_owned(),
                    availability: provider_sdk::v1::Availability::Available as i32,
                    requirements: vec![requirement(
                        "topology.k8s.aws/zone-id",
                        &[&format!("use1-az{}", z + 1)],
                    )],
                    reservation_capacity: None,
                })
        })
        .collect();
    InstanceType {
        name,
        requirements,
        offerings,
        capacity: quantities(&[
            ("cpu", cpu),
            ("memory", format!("{memory}Mi")),
            ("pods", "737".into()),
            ("ephemeral-storage", "20Gi".into()),
            ("nvidia.com/gpu", "4".into()),
        ]),
        overhead: Some(Overhead {
            kube_reserved: quantities(&[
                ("cpu", "390m".into()),
                ("memory", "8455Mi".into()),
                ("ephemeral-storage", "1Gi".into()),
            ]),
            system_reserved: HashMap::new(),
            eviction_threshold: quantities(&[
                ("memory", "100Mi".into()),
                ("nodefs.available", "10%".into()),
            ]),
        }),
        burstable_cpu: false,
    }
}

fn catalogue() -> Vec<InstanceType> {
    (0..TYPES).map(instance_type).collect()
}

#[test]
fn the_catalogue_splits_into_chunks_far_below_the_default_limit() {
    let catalogue = catalogue();
    let whole = GetInstanceTypesResponse {
        instance_types: catalogue.clone(),
    }
    .encoded_len();
    let chunks = chunk_instance_types(catalogue, RECOMMENDED_CHUNK_BYTES);
    let largest = chunks
        .iter()
        .map(|c| c.encoded_len())
        .max()
        .unwrap_or_default();
    eprintln!(
        "{TYPES} instance types, {} offerings each: {whole} bytes in one message; streamed as {} chunks, the largest {largest} bytes",
        ZONES.len() * 2,
        chunks.len()
    );
    assert!(largest <= RECOMMENDED_CHUNK_BYTES);
    assert!(largest < DEFAULT_GRPC_LIMIT / 4);
    assert_eq!(
        chunks.iter().map(|c| c.instance_types.len()).sum::<usize>(),
        TYPES
    );
}

struct Catalogue;

#[tonic::async_trait]
impl IdentityService for Catalogue {}

#[tonic::async_trait]
impl CloudProviderService for Catalogue {
    async fn get_instance_types(
        &self,
        _: Request<GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let chunks = chunk_instance_types(catalogue(), RECOMMENDED_CHUNK_BYTES);
        Ok(Response::new(Box::pin(tokio_stream::iter(
            chunks.into_iter().map(Ok),
        ))))
    }
}

#[tokio::test]
async fn a_client_with_default_limits_receives_the_whole_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Endpoint::Unix(dir.path().join("plugin.sock"));
    let listener = Listener::bind(&endpoint).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, None, Catalogue, Catalogue, async {
        let _ = stopped.await;
    }));

    // No max_decoding_message_size: the 4 MiB default.
    let mut client = CloudProviderServiceClient::new(connect(&endpoint, None).unwrap());
    let mut stream = client
        .get_instance_types(GetInstanceTypesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut received = Vec::new();
    while let Some(chunk) = stream.next().await {
        received.extend(chunk.unwrap().instance_types);
    }
    assert_eq!(received, catalogue());

    drop(stop);
    server.await.unwrap().unwrap();
}
