//! A third-party plugin written in Python from the proto alone (examples/python-plugin), driven
//! by core-svc and by the Rust SDK's client: the API works across languages.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::process::Command;

use integration_tests::{run_ok, start_python_plugin, workspace_binary};
use provider_sdk::Endpoint;
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::{
    CreateRequest, DeleteRequest, DeletionState, GetInstanceTypesRequest, NodeClaim, NodeClaimSpec,
    Requirement,
};
use tokio_stream::StreamExt as _;

#[test]
fn core_svc_handshakes_with_a_python_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let answer = run_ok(
        Command::new(workspace_binary("core-svc"))
            .args(["plugin-info", "--plugin-endpoint"])
            .arg(format!("unix://{}", socket.display())),
    );
    assert_eq!(
        answer.trim(),
        "plugin example.python.plugin 0.1.0 (API 1.0); node classes: example.dev/v1 ExampleNodeClass; optional RPCs: Get, IsDrifted; labels: 2 in domains [example.dev]; ready: yes"
    );
}

fn node_claim(name: &str, instance_types: &[&str]) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        spec: Some(NodeClaimSpec {
            requirements: vec![Requirement::in_values(
                "node.kubernetes.io/instance-type",
                instance_types,
            )],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_rust_client_drives_a_python_plugin_through_its_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let channel = provider_sdk::connect::connect(&Endpoint::Unix(socket), None).unwrap();
    let mut cloud = CloudProviderServiceClient::new(channel);

    let mut stream = cloud
        .get_instance_types(GetInstanceTypesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut names = Vec::new();
    while let Some(chunk) = stream.next().await {
        names.extend(chunk.unwrap().instance_types.into_iter().map(|t| t.name));
    }
    assert_eq!(names, ["small", "medium", "large"]);

    let create = || CreateRequest {
        node_claim: Some(node_claim("default-abcde", &["large", "medium"])),
        node_class: None,
    };
    let first = cloud
        .create(create())
        .await
        .unwrap()
        .into_inner()
        .node_claim
        .unwrap();
    assert_eq!(
        first.labels["node.kubernetes.io/instance-type"], "medium",
        "the cheapest allowed type"
    );
    let retried = cloud
        .create(create())
        .await
        .unwrap()
        .into_inner()
        .node_claim
        .unwrap();
    let provider_id = first.status.as_ref().unwrap().provider_id.clone();
    assert_eq!(
        retried.status.unwrap().provider_id,
        provider_id,
        "Create is idempotent by name"
    );

    let invalid = cloud
        .create(CreateRequest {
            node_claim: Some(node_claim("", &["small"])),
            node_class: None,
        })
        .await;
    assert_eq!(invalid.unwrap_err().code(), tonic::Code::InvalidArgument);

    for _ in 0..2 {
        let deleted = cloud
            .delete(DeleteRequest {
                provider_id: provider_id.clone(),
                node_claim_name: "default-abcde".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            deleted.state(),
            DeletionState::Gone,
            "deleting what is gone is not an error"
        );
    }
}

/// What the API asks of every plugin, asked of the Python one: requirements honoured, an
/// overhead between capacity and allocatable, foreign node classes refused, an unknown
/// instance NOT_FOUND (never "not drifted"), and an ErrorInfo on every error.
#[tokio::test]
async fn the_python_plugin_keeps_the_api_s_promises() {
    use provider_sdk::status::{error_reason, has_error_info};
    use provider_sdk::v1::{
        ErrorReason, IsDriftedRequest, NodeClaimStatus, Operator, ResolveNodeClassRequest,
    };

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let channel = provider_sdk::connect::connect(&Endpoint::Unix(socket), None).unwrap();
    let mut cloud = CloudProviderServiceClient::new(channel);

    // Zone: only zone b allowed.
    let mut zoned = node_claim("default-zoned", &["small"]);
    zoned
        .spec
        .as_mut()
        .unwrap()
        .requirements
        .push(Requirement::in_values(
            "topology.kubernetes.io/zone",
            ["example-zone-b"],
        ));
    let launched = cloud
        .create(CreateRequest {
            node_claim: Some(zoned),
            node_class: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(launched.state(), provider_sdk::v1::LaunchState::Launched);
    let launched = launched.node_claim.unwrap();
    assert_eq!(
        launched.labels["topology.kubernetes.io/zone"],
        "example-zone-b"
    );
    let status = launched.status.clone().unwrap();
    assert_eq!(status.capacity["cpu"], "2");
    assert_eq!(
        status.allocatable["cpu"], "1900m",
        "capacity less the overhead"
    );

    // Capacity type and architecture the cloud does not have: insufficient capacity.
    for (key, value) in [
        ("karpenter.sh/capacity-type", "spot"),
        ("kubernetes.io/arch", "arm64"),
    ] {
        let mut claim = node_claim("default-spot", &["small"]);
        claim
            .spec
            .as_mut()
            .unwrap()
            .requirements
            .push(Requirement::in_values(key, [value]));
        let error = cloud
            .create(CreateRequest {
                node_claim: Some(claim),
                node_class: None,
            })
            .await
            .unwrap_err();
        assert_eq!(error.code(), tonic::Code::ResourceExhausted, "{key}");
        assert_eq!(
            error_reason(&error),
            Some(ErrorReason::InsufficientCapacity),
            "{key}"
        );
    }

    // No instance-type requirement: refused, naming the field.
    let mut untyped = node_claim("default-untyped", &["small"]);
    untyped.spec.as_mut().unwrap().requirements[0].operator = Operator::Exists as i32;
    let error = cloud
        .create(CreateRequest {
            node_claim: Some(untyped),
            node_class: None,
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert_eq!(error_reason(&error), Some(ErrorReason::InvalidField));

    // A node class of another kind.
    let foreign = provider_sdk::json::json_to_struct(&serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": { "name": "x" },
    }));
    let error = cloud
        .create(CreateRequest {
            node_claim: Some(node_claim("default-foreign", &["small"])),
            node_class: foreign,
        })
        .await
        .unwrap_err();
    assert_eq!(
        error_reason(&error),
        Some(ErrorReason::NodeClassKindUnsupported)
    );

    // IsDrifted: the launched instance is not drifted; an unknown one is NOT_FOUND.
    let drifted = cloud
        .is_drifted(IsDriftedRequest {
            node_claim: Some(launched),
            ..IsDriftedRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(drifted.reason, "");
    let unknown = NodeClaim {
        name: "someone-else".into(),
        status: Some(NodeClaimStatus {
            provider_id: "example://example-zone-a/unknown".into(),
            ..NodeClaimStatus::default()
        }),
        ..NodeClaim::default()
    };
    let error = cloud
        .is_drifted(IsDriftedRequest {
            node_claim: Some(unknown),
            ..IsDriftedRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    assert_eq!(error_reason(&error), Some(ErrorReason::InstanceNotFound));

    // An RPC the plugin leaves out answers UNIMPLEMENTED (the SDK-less default), which is
    // not an error core needs details for; every other error above carried an ErrorInfo.
    let unimplemented = cloud
        .resolve_node_class(ResolveNodeClassRequest::default())
        .await
        .unwrap_err();
    assert_eq!(unimplemented.code(), tonic::Code::Unimplemented);
    assert!(!has_error_info(&unimplemented));
}
