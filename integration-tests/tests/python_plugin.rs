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
        "plugin example.python.plugin 0.2.0 (API 1.0); node classes: example.dev/v1 ExampleNodeClass; optional RPCs: ResolveNodeClass, Get, List, IsDrifted, GetRepairPolicies, ConvertNodeClass, WatchInterruptions; labels: 2 in domains [example.dev]; ready: yes"
    );
}

/// `core-svc convert` with a third-party plugin converting its own older node class: the
/// Provisioner's inline provider and a v1alpha1 `ExampleNodeClass` both become v1, the NodePool
/// names the class made from its Provisioner, and the plugin's warning is printed.
#[test]
fn core_svc_convert_uses_a_python_plugins_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let manifests = dir.path().join("old.yaml");
    std::fs::write(
        &manifests,
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: inline}\n\
         spec:\n  provider: {imageName: example-image-2}\n\
         ---\n\
         apiVersion: example.dev/v1alpha1\nkind: ExampleNodeClass\nmetadata: {name: old}\n\
         spec: {imageName: img-1999}\n",
    )
    .unwrap();
    let output = Command::new(workspace_binary("core-svc"))
        .args(["convert", "-o", "json", "--plugin-endpoint"])
        .arg(format!("unix://{}", socket.display()))
        .arg("-f")
        .arg(&manifests)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = items
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("NodePool", "inline"),
            ("ExampleNodeClass", "inline"),
            ("ExampleNodeClass", "old")
        ]
    );
    assert_eq!(items[1]["apiVersion"], "example.dev/v1");
    assert_eq!(
        items[0]["spec"]["template"]["spec"]["nodeClassRef"],
        serde_json::json!({"group": "example.dev", "kind": "ExampleNodeClass", "name": "inline"})
    );
    assert_eq!(items[1]["spec"]["image"], "example-image-2");
    assert_eq!(items[2]["spec"]["image"], "img-1999");
    assert!(
        stderr.contains("ExampleNodeClass/old: spec.imageName: image img-1999 does not exist"),
        "{stderr}"
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
    assert_eq!(names, ["small", "medium", "medium-arm", "large"]);

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

/// The grpcurl recipe's request shape: IsDrifted of the NodeClaim as kubectl prints it
/// (`node_claim_object`), with the node class now selecting another image. (Every promise of
/// the API is checked by the conformance suite, `tests/conformance.rs`.)
#[tokio::test]
async fn the_python_plugin_explains_drift_of_a_node_claim_as_kubectl_prints_it() {
    use provider_sdk::v1::IsDriftedRequest;

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let channel = provider_sdk::connect::connect(&Endpoint::Unix(socket), None).unwrap();
    let mut cloud = CloudProviderServiceClient::new(channel);

    let node_class = |image: &str| {
        provider_sdk::json::json_to_struct(&serde_json::json!({
            "apiVersion": "example.dev/v1", "kind": "ExampleNodeClass",
            "metadata": {"name": "default"}, "spec": {"image": image},
        }))
    };
    let launched = cloud
        .create(CreateRequest {
            node_claim: Some(node_claim("default-drift", &["small"])),
            node_class: node_class("example-image-1"),
        })
        .await
        .unwrap()
        .into_inner()
        .node_claim
        .unwrap();
    let provider_id = launched.status.unwrap().provider_id;
    let as_kubectl_prints_it = serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-drift"},
        "status": {"providerID": provider_id},
    });
    let ask = |image: &str| IsDriftedRequest {
        node_claim: None,
        node_class: node_class(image),
        node_claim_object: provider_sdk::json::json_to_struct(&as_kubectl_prints_it),
    };
    let same = cloud
        .is_drifted(ask("example-image-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(same.reason, "");
    let drifted = cloud
        .is_drifted(ask("example-image-2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(drifted.reason, "ImageDrift");
    assert_eq!(
        drifted.message,
        "instance runs example-image-1; the node class now selects example-image-2"
    );
}
