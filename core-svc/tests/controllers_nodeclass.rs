//! The node class controller on the in-memory cluster and the fake cloud: what each answer of
//! ResolveNodeClass publishes, when it is asked again, and node class hash versioning.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use core_svc::apis::nodeclaim::CONDITION_DRIFTED;
use core_svc::apis::{ConditionStatus, NodeClaim, NodeClassReference};
use core_svc::cloudprovider::{
    CloudProviderError, FakeCloudProvider, NodeClassCondition, NodeClassKind, ResolvedNodeClass,
    Rpc,
};
use core_svc::cluster::{Cluster, InMemoryCluster};
use core_svc::controllers::nodeclass::NodeClassController;
use core_svc::controllers::{Controller, Requeue};
use core_svc::events::EventType;
use kube::core::DynamicObject;
use serde_json::{Value, json};

mod common;

use common::Harness;

const HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
const HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

struct Env {
    harness: Harness,
    controller: NodeClassController<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for Env {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

impl Env {
    /// A cluster with the EC2NodeClass `default` (its status holding an instance profile) and
    /// a fake cloud that serves EC2NodeClass.
    async fn new() -> Self {
        let harness = Harness::with_cloud(FakeCloudProvider::new().with_identity(
            "aws",
            vec![NodeClassKind {
                group: "karpenter.k8s.aws".into(),
                version: "v1".into(),
                kind: "EC2NodeClass".into(),
            }],
        ));
        let ctx = harness.context();
        let cluster = &harness.cluster;
        cluster.create_node_class(&node_class()).await.unwrap();
        cluster
            .merge_patch_node_class_status(
                &reference(),
                &json!({ "status": { "instanceProfile": "KarpenterNodeProfile" } }),
            )
            .await
            .unwrap();
        Self {
            harness,
            controller: NodeClassController::new(ctx),
        }
    }

    async fn node_class(&self) -> DynamicObject {
        self.cluster
            .get_node_class(&reference())
            .await
            .unwrap()
            .unwrap()
    }

    async fn status(&self) -> Value {
        self.node_class().await.data["status"].clone()
    }

    async fn condition(&self, type_: &str) -> Value {
        self.status().await["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
            .unwrap_or(Value::Null)
    }

    async fn annotation(&self, key: &str) -> Option<String> {
        self.node_class()
            .await
            .metadata
            .annotations
            .unwrap_or_default()
            .get(key)
            .cloned()
    }

    fn resolves(&self) -> usize {
        self.cloud.calls_of(Rpc::ResolveNodeClass).len()
    }
}

fn reference() -> NodeClassReference {
    NodeClassReference {
        group: "karpenter.k8s.aws".into(),
        kind: "EC2NodeClass".into(),
        name: "default".into(),
    }
}

fn node_class() -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default" },
        "spec": { "role": "KarpenterNodeRole", "amiSelectorTerms": [{ "alias": "al2023@latest" }] },
    }))
    .unwrap()
}

fn own(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> NodeClassCondition {
    NodeClassCondition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message: message.into(),
    }
}

fn resolved(conditions: Vec<NodeClassCondition>) -> ResolvedNodeClass {
    ResolvedNodeClass {
        status: serde_json::from_value(json!({
            "amis": [{ "id": "ami-0123", "name": "al2023" }],
            "subnets": [{ "id": "subnet-1", "zone": "us-east-1a" }],
        }))
        .unwrap(),
        conditions,
        static_hash: Some("1234567890".into()),
        static_hash_version: "v6".into(),
        resolve_again_after: Duration::from_secs(120),
    }
}

fn all_ready() -> ResolvedNodeClass {
    resolved(vec![
        own("AMIsReady", ConditionStatus::True, "", ""),
        own("SubnetsReady", ConditionStatus::True, "", ""),
    ])
}

#[tokio::test]
async fn given_a_node_class_when_resolved_then_status_ready_and_the_hash_annotations_are_published()
{
    let env = Env::new().await;
    env.cloud.set_resolved_node_class(all_ready());

    let requeue = env.controller.reconcile().await.unwrap();

    let status = env.status().await;
    assert_eq!(
        status["amis"],
        json!([{ "id": "ami-0123", "name": "al2023" }])
    );
    assert_eq!(status["subnets"][0]["id"], "subnet-1");
    assert_eq!(
        status["instanceProfile"], "KarpenterNodeProfile",
        "fields the plugin did not return are kept"
    );
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["AMIsReady", "SubnetsReady", "Ready"]);
    let ready = env.condition("Ready").await;
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["observedGeneration"], 1);
    assert_eq!(env.annotation(HASH).await.as_deref(), Some("1234567890"));
    assert_eq!(env.annotation(HASH_VERSION).await.as_deref(), Some("v6"));
    assert_eq!(
        requeue,
        Requeue::After(Duration::from_secs(120)),
        "resolved again when the plugin asked"
    );
}

#[tokio::test]
async fn given_a_condition_that_fails_when_resolved_then_ready_is_false_with_its_reason_and_message()
 {
    let env = Env::new().await;
    env.cloud.set_resolved_node_class(resolved(vec![
        own("AMIsReady", ConditionStatus::True, "", ""),
        own(
            "SubnetsReady",
            ConditionStatus::False,
            "SubnetsNotFound",
            "no subnet matches subnetSelectorTerms[0] (tag karpenter.sh/discovery=demo)",
        ),
    ]));

    env.controller.reconcile().await.unwrap();

    let ready = env.condition("Ready").await;
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "SubnetsNotFound");
    assert_eq!(
        ready["message"],
        "no subnet matches subnetSelectorTerms[0] (tag karpenter.sh/discovery=demo)"
    );
    assert_eq!(env.condition("SubnetsReady").await["status"], "False");
}

#[tokio::test]
async fn given_an_unchanged_node_class_then_it_is_resolved_again_only_when_due_or_changed() {
    let env = Env::new().await;
    env.cloud.set_resolved_node_class(all_ready());
    env.controller.reconcile().await.unwrap();
    let ready_since = env.condition("Ready").await["lastTransitionTime"].clone();

    env.clock.advance(Duration::from_secs(60));
    let requeue = env.controller.reconcile().await.unwrap();
    assert_eq!(env.resolves(), 1, "not due yet");
    assert_eq!(requeue, Requeue::After(Duration::from_secs(60)));

    env.clock.advance(Duration::from_secs(60));
    env.controller.reconcile().await.unwrap();
    assert_eq!(env.resolves(), 2, "due after resolve_again_after");
    assert_eq!(
        env.condition("Ready").await["lastTransitionTime"],
        ready_since,
        "Ready did not change, so neither did its transition time"
    );

    env.cluster
        .merge_patch_node_class(&reference(), &json!({ "spec": { "role": "OtherRole" } }))
        .await
        .unwrap();
    env.controller.reconcile().await.unwrap();
    assert_eq!(env.resolves(), 3, "a spec change is resolved at once");
    assert_eq!(env.condition("Ready").await["observedGeneration"], 2);
}

#[tokio::test]
async fn given_a_plugin_without_resolve_node_class_then_the_node_class_is_ready_without_a_hash() {
    let env = Env::new().await;
    env.cloud.set_unsupported(Rpc::ResolveNodeClass);

    env.controller.reconcile().await.unwrap();

    assert_eq!(env.condition("Ready").await["status"], "True");
    assert_eq!(env.annotation(HASH).await, None);
    assert_eq!(env.annotation(HASH_VERSION).await, None);
    assert_eq!(
        env.status().await["instanceProfile"],
        "KarpenterNodeProfile"
    );
}

#[tokio::test]
async fn given_a_node_class_the_plugin_cannot_read_then_ready_is_false_with_the_message() {
    let env = Env::new().await;
    env.cloud.fail_next(
        Rpc::ResolveNodeClass,
        CloudProviderError::InvalidRequest("spec.role: must be set".into()),
    );

    env.controller.reconcile().await.unwrap();

    let ready = env.condition("Ready").await;
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "spec.role: must be set");
    assert_eq!(env.annotation(HASH).await, None);
}

#[tokio::test]
async fn given_the_plugin_unavailable_then_status_and_hash_are_left_alone_and_retried() {
    let env = Env::new().await;
    env.cloud.set_resolved_node_class(all_ready());
    env.controller.reconcile().await.unwrap();
    let status = env.status().await;
    env.cloud.set_resolved_node_class(resolved(vec![own(
        "AMIsReady",
        ConditionStatus::False,
        "AMINotFound",
        "no image",
    )]));
    env.cloud.fail_next(
        Rpc::ResolveNodeClass,
        CloudProviderError::Unavailable("connection refused".into()),
    );
    env.clock.advance(Duration::from_secs(120));

    let requeue = env.controller.reconcile().await.unwrap();

    assert_eq!(env.status().await, status);
    assert_eq!(env.annotation(HASH).await.as_deref(), Some("1234567890"));
    let warnings = env.events.with_reason("PluginUnavailable");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_, EventType::Warning);
    assert!(
        requeue < Requeue::After(Duration::from_secs(120)),
        "{requeue:?}"
    );

    env.controller.reconcile().await.unwrap();
    assert_eq!(env.resolves(), 3, "retried on the next pass");
    assert_eq!(env.condition("Ready").await["status"], "False");
}

fn node_claim(name: &str, node_class: &str, annotations: Value, drifted: bool) -> NodeClaim {
    let mut status = json!({});
    if drifted {
        status = json!({ "conditions": [{
            "type": CONDITION_DRIFTED, "status": "True", "reason": "NodeClassDrift",
            "lastTransitionTime": "2025-03-01T11:00:00Z",
        }] });
    }
    common::node_claim(
        name,
        json!({
            "metadata": {
                "labels": { "karpenter.sh/nodepool": "default" },
                "annotations": annotations,
            },
            "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class },
            },
            "status": status,
        }),
    )
}

async fn create_node_claim(cluster: &InMemoryCluster, node_claim: &NodeClaim) {
    let created = cluster.create(node_claim).await.unwrap();
    if let Some(status) = &node_claim.status {
        let mut with_status = created;
        with_status.status = Some(status.clone());
        cluster.replace_status(&with_status).await.unwrap();
    }
}

fn annotations_of(node_claim: &NodeClaim) -> (Option<&str>, Option<&str>) {
    let annotations = node_claim.metadata.annotations.as_ref().unwrap();
    (
        annotations.get(HASH).map(String::as_str),
        annotations.get(HASH_VERSION).map(String::as_str),
    )
}

#[tokio::test]
async fn given_a_node_class_hash_version_change_then_its_node_claims_are_restamped_and_drifted_ones_keep_their_hash()
 {
    let env = Env::new().await;
    let old = json!({ HASH: "old", HASH_VERSION: "v5" });
    env.cluster
        .merge_patch_node_class(&reference(), &json!({ "metadata": { "annotations": old } }))
        .await
        .unwrap();
    create_node_claim(
        &env.cluster,
        &node_claim("clean", "default", old.clone(), false),
    )
    .await;
    create_node_claim(
        &env.cluster,
        &node_claim("drifted", "default", old.clone(), true),
    )
    .await;
    create_node_claim(&env.cluster, &node_claim("other", "other", old, false)).await;
    env.cloud.set_resolved_node_class(all_ready());

    env.controller.reconcile().await.unwrap();

    let get = |name: &'static str| {
        let cluster = Arc::clone(&env.cluster);
        async move { cluster.get::<NodeClaim>(None, name).await.unwrap().unwrap() }
    };
    assert_eq!(
        annotations_of(&get("clean").await),
        (Some("1234567890"), Some("v6"))
    );
    assert_eq!(
        annotations_of(&get("drifted").await),
        (Some("old"), Some("v6")),
        "already drifted: the version moves, the hash stays"
    );
    assert_eq!(
        annotations_of(&get("other").await),
        (Some("old"), Some("v5")),
        "launched from another node class"
    );
    assert_eq!(env.annotation(HASH_VERSION).await.as_deref(), Some("v6"));
}

#[tokio::test]
async fn given_a_node_class_of_a_kind_the_plugin_does_not_serve_then_it_is_left_alone() {
    let env = Env::new().await;
    let mut other = node_class();
    other.types.as_mut().unwrap().kind = "KWOKNodeClass".into();
    env.cluster.create_node_class(&other).await.unwrap();
    env.cloud.set_resolved_node_class(all_ready());

    env.controller.reconcile().await.unwrap();

    assert_eq!(env.resolves(), 1, "only the EC2NodeClass");
    let kwok = env
        .cluster
        .get_node_class(&NodeClassReference {
            kind: "KWOKNodeClass".into(),
            ..reference()
        })
        .await
        .unwrap()
        .unwrap();
    assert!(kwok.data.get("status").is_none_or(Value::is_null));
}
