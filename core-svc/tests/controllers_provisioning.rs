//! The provisioner on the in-memory cluster, the fake cloud and a fake clock: batching, the
//! NodeClaims it creates, existing and in-flight capacity, limits, node class readiness, plugin
//! failures and nominations.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::time::Duration;

use core_svc::apis::NodeClaim;
use core_svc::apis::NodePool;
use core_svc::apis::nodepool::{
    ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION,
};
use core_svc::cloudprovider::fake::Call;
use core_svc::cloudprovider::{CloudProviderError, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, DeleteOptions, InMemoryCluster};
use core_svc::controllers::provisioning::nominations::Target;
use core_svc::controllers::provisioning::{Provisioner, ProvisionerOptions};
use core_svc::controllers::{Context, Controller, Requeue};
use core_svc::events::EventType;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

mod common;

use common::{Harness, merged};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const NODEPOOL: &str = "karpenter.sh/nodepool";

struct World {
    harness: Harness,
    context: Context<InMemoryCluster, FakeCloudProvider>,
    provisioner: Provisioner<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for World {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

impl World {
    /// A cluster with a ready node class `default` (carrying hash annotations) and no
    /// NodePool yet.
    async fn new() -> Self {
        let harness = Harness::new();
        let context = harness.context();
        let world = World {
            provisioner: provisioner(context.clone()),
            context,
            harness,
        };
        world.create_node_class("default", "True").await;
        world
    }

    /// A fresh provisioner on the same cluster, as after a restart of core.
    fn restart(&mut self) {
        self.provisioner = provisioner(self.context.clone());
    }

    async fn create_node_class(&self, name: &str, ready: &str) {
        let node_class = common::node_class(
            name,
            json!({ "metadata": { "annotations": {
                "test.karpenter.sh/testnodeclass-hash": "1234",
                "test.karpenter.sh/testnodeclass-hash-version": "v1",
            } } }),
        );
        self.cluster.create_node_class(&node_class).await.unwrap();
        let reference = core_svc::apis::NodeClassReference {
            group: "test.karpenter.sh".into(),
            kind: "TestNodeClass".into(),
            name: name.into(),
        };
        self.cluster
            .merge_patch_node_class_status(
                &reference,
                &json!({ "status": { "conditions": [{
                    "type": "Ready", "status": ready, "reason": if ready == "True" { "Ready" } else { "SubnetsNotFound" },
                    "lastTransitionTime": "2025-03-01T12:00:00Z",
                }] } }),
            )
            .await
            .unwrap();
    }

    async fn create_node_pool(&self, name: &str, extra_spec: Value) -> NodePool {
        let spec = json!({ "template": {
            "metadata": { "labels": { "team": "shop" }, "annotations": { "owner": "shop-team" } },
            "spec": {
                "requirements": [{ "key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"] }],
            },
        } });
        let pool = common::node_pool(name, json!({ "spec": merged(spec, extra_spec) }));
        self.cluster.create(&pool).await.unwrap()
    }

    /// A pod of the deployment `app` requesting `cpu`, which the kube-scheduler marked
    /// unschedulable.
    async fn create_pending_pod(&self, name: &str, cpu: &str) -> Pod {
        self.create_pending_pod_with(name, json!({ "cpu": cpu }))
            .await
    }

    async fn create_pending_pod_with(&self, name: &str, requests: Value) -> Pod {
        let pod = common::replica_set_pod(
            "default",
            name,
            "web-5d8f",
            json!({
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{
                    "name": "app", "image": "nginx", "resources": { "requests": requests },
                }] },
            }),
        );
        self.cluster.create(&pod).await.unwrap();
        self.cluster
            .merge_patch_status::<Pod>(
                Some("default"),
                name,
                &json!({ "status": { "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/0 nodes are available",
                }] } }),
            )
            .await
            .unwrap()
    }

    async fn pass(&self) -> Requeue {
        self.provisioner.reconcile().await.unwrap()
    }

    fn advance(&self, duration: Duration) {
        self.clock.advance(duration);
    }

    /// Runs passes, moving the clock to each requested time, until a batch was decided:
    /// every decision records an event for each pod it saw (nominated or not placed), and
    /// passes inside an open window record none.
    async fn run_batch(&self) {
        let recorded = self.events.all().len();
        for _ in 0..20 {
            match self.pass().await {
                Requeue::After(wait) if self.events.all().len() == recorded => {
                    self.advance(wait);
                }
                _ => return,
            }
        }
        panic!("no batch was decided");
    }

    async fn node_claims(&self) -> Vec<NodeClaim> {
        let claims = self.cluster.snapshot().await.unwrap().node_claims;
        claims.iter().map(|claim| (**claim).clone()).collect()
    }

    async fn uid(&self, pod: &str) -> String {
        let pod: Pod = self
            .cluster
            .get(Some("default"), pod)
            .await
            .unwrap()
            .unwrap();
        pod.metadata.uid.unwrap()
    }
}

fn provisioner(
    context: Context<InMemoryCluster, FakeCloudProvider>,
) -> Provisioner<InMemoryCluster, FakeCloudProvider> {
    Provisioner::with_options(context, ProvisionerOptions::default())
}

fn requirement<'a>(claim: &'a NodeClaim, key: &str) -> &'a [String] {
    &claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == key)
        .unwrap_or_else(|| panic!("no requirement on {key}"))
        .values
}

fn instance_type_calls(world: &World) -> Vec<String> {
    world
        .cloud
        .calls_of(Rpc::GetInstanceTypes)
        .into_iter()
        .map(|call| match call {
            Call::InstanceTypes { node_pool } => node_pool,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn secs(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds)
}

#[tokio::test]
async fn given_pods_arriving_within_the_idle_window_then_they_are_scheduled_in_one_run() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;

    world.create_pending_pod("web-1", "1").await;
    assert_eq!(world.pass().await, Requeue::After(secs(1.0)));
    world.advance(secs(0.6));
    world.create_pending_pod("web-2", "1").await;
    assert_eq!(
        world.pass().await,
        Requeue::After(secs(1.0)),
        "a new pod extends the window"
    );
    world.advance(secs(0.6));
    assert_eq!(world.pass().await, Requeue::After(secs(0.4)));
    assert!(
        world.node_claims().await.is_empty(),
        "nothing while the window is open"
    );
    assert!(instance_type_calls(&world).is_empty());

    world.advance(secs(0.4));
    world.pass().await;

    assert_eq!(
        instance_type_calls(&world),
        ["default"],
        "one scheduling run"
    );
    let claims = world.node_claims().await;
    assert_eq!(claims.len(), 1, "both pods on one node");
    assert_eq!(claims[0].spec.resources.requests["cpu"].0, "2");
    let claim = claims[0].metadata.name.clone().unwrap();
    for pod in ["web-1", "web-2"] {
        assert_eq!(
            world.provisioner.nomination(&world.uid(pod).await),
            Some(Target::NodeClaim(claim.clone()))
        );
    }
}

#[tokio::test]
async fn given_a_pending_deployment_then_its_node_claim_has_the_template_hashes_and_requirements() {
    let world = World::new().await;
    let pool = world.create_node_pool("default", json!({})).await;
    for i in 0..3 {
        world.create_pending_pod(&format!("web-{i}"), "1").await;
    }

    world.run_batch().await;

    let claims = world.node_claims().await;
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    let name = claim.metadata.name.as_deref().unwrap();
    assert!(name.starts_with("default-"), "{name}");
    let labels = claim.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[NODEPOOL], "default");
    assert_eq!(labels["team"], "shop");
    assert_eq!(labels["test.karpenter.sh/testnodeclass"], "default");
    let annotations = claim.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[ANNOTATION_NODEPOOL_HASH], pool.static_hash());
    assert_eq!(
        annotations[ANNOTATION_NODEPOOL_HASH_VERSION],
        NODEPOOL_HASH_VERSION
    );
    assert_eq!(annotations["test.karpenter.sh/testnodeclass-hash"], "1234");
    assert_eq!(
        annotations["test.karpenter.sh/testnodeclass-hash-version"],
        "v1"
    );
    assert_eq!(annotations["owner"], "shop-team");
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("NodePool", "default")
    );
    assert_eq!(Some(&owner.uid), pool.metadata.uid.as_ref());

    assert_eq!(requirement(claim, CAPACITY_TYPE), ["on-demand"]);
    assert_eq!(requirement(claim, NODEPOOL), ["default"]);
    assert_eq!(
        requirement(claim, INSTANCE_TYPE),
        ["default-instance-type", "arm-instance-type"],
        "the types that fit 3 CPUs and 3 pods, cheapest first"
    );
    assert_eq!(claim.spec.resources.requests["cpu"].0, "3");
    assert_eq!(claim.spec.resources.requests["pods"].0, "3");
    assert_eq!(claim.spec.expire_after.as_str(), "720h");

    let created = world.events.with_reason("NodeClaimCreated");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].fields["nodeClaim"], name);
    assert_eq!(created[0].fields["nodePool"], "default");
    assert_eq!(world.events.with_reason("Nominated").len(), 3);
    assert!(world.events.with_reason("FailedScheduling").is_empty());
}

#[tokio::test]
async fn given_a_daemon_set_then_its_overhead_is_part_of_the_node_claim() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    let daemon_set: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": { "namespace": "kube-system", "name": "agent" },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "template": {
                "metadata": { "labels": { "app": "agent" } },
                "spec": { "containers": [{ "name": "agent", "image": "agent",
                    "resources": { "requests": { "cpu": "500m" } } }] },
            },
        },
    }))
    .unwrap();
    world.cluster.create(&daemon_set).await.unwrap();
    world.create_pending_pod("web-1", "1500m").await;

    world.run_batch().await;

    let claims = world.node_claims().await;
    assert_eq!(claims[0].spec.resources.requests["cpu"].0, "2");
    assert_eq!(
        requirement(&claims[0], INSTANCE_TYPE)[0],
        "default-instance-type",
        "2 CPUs do not fit the small type's 1.9"
    );
}

#[tokio::test]
async fn given_pods_that_fit_on_an_existing_node_then_nothing_is_created() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    let node = common::node(
        "static-1",
        json!({
            "metadata": { "labels": { "kubernetes.io/hostname": "static-1" } },
            "status": { "allocatable": { "cpu": "4", "memory": "8Gi", "pods": "110" } },
        }),
    );
    world.cluster.create(&node).await.unwrap();
    world.create_pending_pod("web-1", "1").await;

    world.run_batch().await;

    assert!(world.node_claims().await.is_empty());
    assert_eq!(
        world.provisioner.nomination(&world.uid("web-1").await),
        Some(Target::Node("static-1".into()))
    );
    let nominated = world.events.with_reason("Nominated");
    assert_eq!(nominated[0].fields["node"], "static-1");
}

#[tokio::test]
async fn given_node_pool_limits_then_no_more_is_created_than_they_allow() {
    let world = World::new().await;
    world
        .create_node_pool("default", json!({ "limits": { "cpu": "6" } }))
        .await;
    for i in 0..3 {
        world.create_pending_pod(&format!("web-{i}"), "3").await;
    }

    world.run_batch().await;

    assert_eq!(
        world.node_claims().await.len(),
        1,
        "a second 4-CPU node exceeds 6 CPUs"
    );
    let failed = world.events.with_reason("FailedScheduling");
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|e| e.type_ == EventType::Warning));
    assert!(
        failed[0].fields["reason"].contains("limit"),
        "{}",
        failed[0].fields["reason"]
    );

    // The pods left out are tried again later; the NodeClaim already created (not launched,
    // so counted at its largest option) still uses the limit.
    world.advance(Duration::from_secs(10));
    world.run_batch().await;
    assert_eq!(world.node_claims().await.len(), 1);
    assert_eq!(world.events.with_reason("FailedScheduling").len(), 4);
}

#[tokio::test]
async fn given_a_node_pool_whose_node_class_is_not_ready_then_it_is_skipped() {
    let world = World::new().await;
    world.create_node_class("broken", "False").await;
    world
        .create_node_pool(
            "preferred",
            json!({ "weight": 100, "template": { "spec": { "nodeClassRef": { "name": "broken" } } } }),
        )
        .await;
    world
        .create_node_pool("fallback", json!({ "weight": 1 }))
        .await;
    world.create_pending_pod("web-1", "1").await;

    world.run_batch().await;

    assert_eq!(instance_type_calls(&world), ["fallback"]);
    let claims = world.node_claims().await;
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0].metadata.labels.as_ref().unwrap()[NODEPOOL],
        "fallback"
    );
}

#[tokio::test]
async fn given_only_node_pools_with_unready_node_classes_then_nothing_is_created() {
    let world = World::new().await;
    world.create_node_class("broken", "False").await;
    world
        .create_node_pool(
            "default",
            json!({ "template": { "spec": { "nodeClassRef": { "name": "broken" } } } }),
        )
        .await;
    world.create_pending_pod("web-1", "1").await;

    world.pass().await;
    world.advance(secs(1.0));
    world.pass().await;

    assert!(world.node_claims().await.is_empty());
    assert!(instance_type_calls(&world).is_empty());
    assert_eq!(world.events.with_reason("FailedScheduling").len(), 1);
}

#[tokio::test]
async fn given_the_plugin_failing_on_instance_types_then_nothing_is_created_and_it_retries() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world.cloud.fail_next(
        Rpc::GetInstanceTypes,
        CloudProviderError::Unavailable("connection refused".into()),
    );
    world.create_pending_pod("web-1", "1").await;

    world.pass().await;
    world.advance(secs(1.0));
    let requeue = world.pass().await;

    assert!(world.node_claims().await.is_empty());
    let unavailable = world.events.with_reason("PluginUnavailable");
    assert_eq!(unavailable.len(), 1);
    assert_eq!(unavailable[0].object.kind, "NodePool");
    assert_eq!(unavailable[0].fields["nodePool"], "default");
    assert_eq!(
        requeue,
        Requeue::After(Duration::from_secs(10)),
        "retried later"
    );

    world.advance(Duration::from_secs(10));
    world.run_batch().await;

    assert_eq!(instance_type_calls(&world).len(), 2);
    assert_eq!(world.node_claims().await.len(), 1);
}

#[tokio::test]
async fn given_a_failure_other_than_unavailable_then_the_node_pool_gets_its_own_event() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world.cloud.fail_node_pool(
        "default",
        CloudProviderError::NodeClassNotReady("no subnets".into()),
    );
    world.create_pending_pod("web-1", "1").await;

    world.run_batch().await;

    assert!(world.node_claims().await.is_empty());
    let failed = world.events.with_reason("GetInstanceTypesFailed");
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].message.contains("no subnets"),
        "{}",
        failed[0].message
    );
}

#[tokio::test]
async fn given_nominated_pods_then_later_passes_create_no_second_node_claim() {
    let mut world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world.create_pending_pod("web-1", "1").await;
    world.run_batch().await;
    assert_eq!(world.node_claims().await.len(), 1);

    // The NodeClaim is still launching and the pod still pending, well past every window.
    let recorded = world.events.all().len();
    for _ in 0..6 {
        world.advance(Duration::from_secs(15));
        assert_eq!(world.pass().await, Requeue::OnChange);
    }
    assert_eq!(world.node_claims().await.len(), 1);
    assert_eq!(world.events.all().len(), recorded, "no new batch");

    // A restart forgets the nomination, but the launching NodeClaim is in-flight capacity.
    world.restart();
    world.run_batch().await;
    assert_eq!(world.node_claims().await.len(), 1);
    let claim = world.node_claims().await[0].metadata.name.clone().unwrap();
    assert_eq!(
        world.provisioner.nomination(&world.uid("web-1").await),
        Some(Target::NodeClaim(claim))
    );
}

#[tokio::test]
async fn given_a_new_pod_next_to_nominated_ones_then_their_requests_stay_reserved() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world.create_pending_pod("web-1", "3").await;
    world.run_batch().await;
    assert_eq!(world.node_claims().await.len(), 1);

    world.advance(Duration::from_secs(30));
    world.create_pending_pod("web-2", "3").await;
    world.run_batch().await;

    assert_eq!(
        world.node_claims().await.len(),
        2,
        "the first NodeClaim's 3.9 CPUs hold web-1's 3"
    );
}

#[tokio::test]
async fn given_the_nominated_node_claim_deleted_then_its_pods_are_scheduled_again() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world.create_pending_pod("web-1", "1").await;
    world.run_batch().await;
    let first = world.node_claims().await[0].metadata.name.clone().unwrap();
    world.pass().await;

    world
        .cluster
        .delete::<NodeClaim>(None, &first, DeleteOptions::default())
        .await
        .unwrap();
    world.run_batch().await;

    let claims = world.node_claims().await;
    assert_eq!(claims.len(), 1);
    assert_ne!(claims[0].metadata.name.as_deref(), Some(first.as_str()));
}

#[tokio::test]
async fn given_a_pod_whose_quantity_does_not_parse_then_it_is_ignored_with_an_event() {
    let world = World::new().await;
    world.create_node_pool("default", json!({})).await;
    world
        .create_pending_pod_with("broken", json!({ "cpu": "one" }))
        .await;
    world.create_pending_pod("web-1", "1").await;

    world.run_batch().await;

    assert_eq!(
        world.node_claims().await.len(),
        1,
        "the valid pod is served"
    );
    let failed = world.events.with_reason("FailedScheduling");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].object.name, "broken");
    assert_eq!(
        failed[0].fields["field"],
        "spec.containers[0].resources.requests.cpu"
    );
}
