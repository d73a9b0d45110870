//! The NodeClaim lifecycle controller on the in-memory cluster, the fake cloud and a fake clock:
//! finalizer, launch, registration, initialization, liveness, and the never-launched deletion.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::time::Duration;

use core_svc::apis::NodeClaim;
use core_svc::apis::condition::ConditionStatus;
use core_svc::cloudprovider::fake::Call;
use core_svc::cloudprovider::{CloudProviderError, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, DeleteOptions, InMemoryCluster};
use core_svc::controllers::lifecycle::LifecycleController;
use core_svc::controllers::nodeclaim::{condition_status, has_termination_finalizer, request_of};
use core_svc::controllers::{Controller, Requeue};
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

mod common;

use common::{Harness, merged};

const NAME: &str = "default-abcde";

struct World {
    harness: Harness,
    controller: LifecycleController<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for World {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

impl World {
    async fn new() -> Self {
        let harness = Harness::new();
        let controller = LifecycleController::new(harness.context());
        let world = World {
            harness,
            controller,
        };
        world.create_node_class().await;
        world
    }

    async fn create_node_class(&self) {
        let node_class = common::node_class("default", json!({}));
        self.cluster.create_node_class(&node_class).await.unwrap();
    }

    /// The NodeClaim `NAME`; `extra_spec` is merged into its spec.
    async fn create_node_claim(&self, extra_spec: Value) -> NodeClaim {
        let spec = json!({
            "requirements": [
                { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["default-instance-type"] },
            ],
            "resources": { "requests": { "cpu": "1" } },
        });
        let node_claim = common::node_claim(
            NAME,
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand" },
                },
                "spec": merged(spec, extra_spec),
            }),
        );
        self.cluster.create(&node_claim).await.unwrap()
    }

    async fn reconcile(&self) -> Requeue {
        self.controller.reconcile().await.unwrap()
    }

    async fn node_claim(&self) -> Option<NodeClaim> {
        self.cluster.get::<NodeClaim>(None, NAME).await.unwrap()
    }

    async fn node(&self, name: &str) -> Node {
        self.cluster.get::<Node>(None, name).await.unwrap().unwrap()
    }

    async fn provider_id(&self) -> String {
        self.node_claim()
            .await
            .unwrap()
            .status
            .unwrap_or_default()
            .provider_id
    }

    /// A kubelet joining with `provider_id`, with the unregistered taint and a taint of its own.
    async fn join_node(&self, name: &str, provider_id: &str) -> Node {
        let node = common::node(
            name,
            json!({
                "metadata": { "labels": { "kubernetes.io/hostname": name } },
                "spec": {
                    "providerID": provider_id,
                    "taints": [
                        { "key": "karpenter.sh/unregistered", "effect": "NoExecute" },
                        { "key": "example.com/kubelet", "effect": "NoSchedule" },
                    ],
                },
            }),
        );
        self.cluster.create(&node).await.unwrap()
    }

    async fn set_node_ready(&self, name: &str) {
        let patch = json!({ "status": {
            "conditions": [{ "type": "Ready", "status": "True" }],
            "allocatable": { "cpu": "3900m", "memory": "4Gi", "pods": "5" },
        } });
        self.cluster
            .merge_patch_status::<Node>(None, name, &patch)
            .await
            .unwrap();
    }

    async fn set_node_taints(&self, name: &str, taints: Value) {
        let patch = json!({ "spec": { "taints": taints } });
        self.cluster
            .merge_patch::<Node>(None, name, &patch)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn given_a_new_node_claim_when_reconciled_then_it_gets_the_termination_finalizer() {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;

    world.reconcile().await;

    assert!(has_termination_finalizer(
        &world.node_claim().await.unwrap()
    ));
}

#[tokio::test]
async fn given_a_node_claim_of_another_provider_when_reconciled_then_it_is_left_alone() {
    let world = World::new().await;
    world
        .create_node_claim(json!({
            "nodeClassRef": { "group": "other.example.com", "kind": "OtherNodeClass", "name": "default" },
        }))
        .await;

    world.reconcile().await;

    assert!(!has_termination_finalizer(
        &world.node_claim().await.unwrap()
    ));
    assert!(world.cloud.calls().is_empty());
}

#[tokio::test]
async fn given_a_missing_node_class_when_reconciled_then_the_launch_waits_with_an_event() {
    let world = World::new().await;
    world
        .create_node_claim(json!({
            "nodeClassRef": { "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "missing" },
        }))
        .await;

    world.reconcile().await;
    world.reconcile().await;

    let node_claim = world.node_claim().await.unwrap();
    assert!(
        has_termination_finalizer(&node_claim),
        "the finalizer comes first"
    );
    assert_eq!(
        condition_status(&node_claim, "Launched"),
        Some(ConditionStatus::Unknown)
    );
    assert!(world.cloud.create_calls().is_empty());
    assert_eq!(
        world.events.with_reason("NodeClassNotFound").len(),
        1,
        "once, not every pass"
    );
}

#[tokio::test]
async fn given_a_new_node_claim_when_launched_then_labels_and_status_are_copied_and_launched_is_true()
 {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;

    world.reconcile().await;

    let node_claim = world.node_claim().await.unwrap();
    let requests = world.cloud.create_calls();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0], {
        // What was sent is the NodeClaim as it stood, in the port's types.
        let mut expected = request_of(&node_claim).unwrap();
        expected.labels = requests[0].labels.clone();
        expected
    });
    let labels = node_claim.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["node.kubernetes.io/instance-type"],
        "default-instance-type"
    );
    assert_eq!(labels["kubernetes.io/arch"], "amd64", "a launched label");
    assert_eq!(
        labels["karpenter.sh/capacity-type"], "on-demand",
        "the NodeClaim's own label wins over the launch's"
    );
    let status = node_claim.status.clone().unwrap();
    assert!(status.provider_id.starts_with("fake:///"));
    assert_eq!(status.image_id, "fake-image-1");
    assert_eq!(status.capacity["cpu"].0, "4");
    assert_eq!(status.allocatable["cpu"].0, "3900m");
    assert_eq!(
        condition_status(&node_claim, "Launched"),
        Some(ConditionStatus::True)
    );
    let launched = world.events.with_reason("NodeClaimLaunched");
    assert_eq!(launched.len(), 1);
    let fields = &launched[0].fields;
    assert_eq!(fields["nodeClaim"], NAME);
    assert_eq!(fields["nodePool"], "default");
    assert_eq!(fields["instanceType"], "default-instance-type");
    assert_eq!(fields["providerID"], status.provider_id);
    assert_eq!(fields["imageID"], "fake-image-1");

    world.reconcile().await;
    assert_eq!(
        world.cloud.create_calls().len(),
        1,
        "a launched NodeClaim is not launched again"
    );
}

#[tokio::test]
async fn given_insufficient_capacity_when_launching_then_the_node_claim_is_deleted() {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;
    world.cloud.fail_next(
        Rpc::Create,
        CloudProviderError::InsufficientCapacity("no default-instance-type left".into()),
    );

    world.reconcile().await;

    let node_claim = world.node_claim().await.unwrap();
    assert!(
        node_claim.metadata.deletion_timestamp.is_some(),
        "deleted; the finalizer holds it"
    );
    let failed = world.events.with_reason("LaunchFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].fields["reason"], "InsufficientCapacity");

    // Deleted before it ever launched: the plugin is asked by name, then the finalizer goes.
    world.reconcile().await;
    assert!(world.node_claim().await.is_none());
    assert_eq!(
        world.cloud.calls_of(Rpc::Delete),
        vec![Call::Delete {
            provider_id: String::new(),
            node_claim_name: NAME.into()
        }]
    );
}

#[tokio::test]
async fn given_the_plugin_unavailable_when_launching_then_the_node_claim_stays_and_is_retried() {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;
    world.cloud.fail_next(
        Rpc::Create,
        CloudProviderError::Unavailable("connection refused".into()),
    );

    let requeue = world.reconcile().await;

    let node_claim = world.node_claim().await.unwrap();
    assert!(node_claim.metadata.deletion_timestamp.is_none());
    assert_ne!(
        condition_status(&node_claim, "Launched"),
        Some(ConditionStatus::True)
    );
    assert_eq!(world.events.with_reason("PluginUnavailable").len(), 1);
    assert!(
        requeue <= Requeue::After(Duration::from_secs(5)) && requeue != Requeue::OnChange,
        "{requeue:?}"
    );

    world.reconcile().await;
    assert_eq!(
        condition_status(&world.node_claim().await.unwrap(), "Launched"),
        Some(ConditionStatus::True)
    );
}

#[tokio::test]
async fn given_a_launch_that_never_succeeds_when_the_launch_timeout_passes_then_it_is_deleted() {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;
    for _ in 0..3 {
        world
            .cloud
            .fail_next(Rpc::Create, CloudProviderError::Unavailable("down".into()));
    }

    world.reconcile().await;
    world.clock.advance(Duration::from_secs(4 * 60 + 59));
    world.reconcile().await;
    assert!(
        world
            .node_claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    world.clock.advance(Duration::from_secs(1));
    world.reconcile().await;
    assert!(
        world
            .node_claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let deleted = world.events.with_reason("NodeClaimDeleted");
    assert_eq!(deleted[0].fields["reason"], "LaunchTimeout");
}

#[tokio::test]
async fn given_a_node_with_the_provider_id_when_reconciled_then_it_is_registered_and_synced() {
    let world = World::new().await;
    world
        .create_node_claim(json!({
            "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
        }))
        .await;
    world.reconcile().await;
    let provider_id = world.provider_id().await;
    world.join_node("node-1", &provider_id).await;

    world.reconcile().await;

    let node_claim = world.node_claim().await.unwrap();
    assert_eq!(
        condition_status(&node_claim, "Registered"),
        Some(ConditionStatus::True)
    );
    assert_eq!(node_claim.status.as_ref().unwrap().node_name, "node-1");
    let node = world.node("node-1").await;
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["karpenter.sh/nodepool"], "default");
    assert_eq!(labels["karpenter.sh/registered"], "true");
    assert_eq!(
        labels["node.kubernetes.io/instance-type"],
        "default-instance-type"
    );
    assert_eq!(labels["kubernetes.io/hostname"], "node-1", "the Node's own");
    assert!(has_termination_finalizer(&node));
    let owner = &node.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(owner.kind, "NodeClaim");
    assert_eq!(owner.uid, node_claim.metadata.uid.clone().unwrap());
    let taints: Vec<(String, String)> = node
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .map(|taint| (taint.key, taint.effect))
        .collect();
    assert_eq!(
        taints,
        vec![
            ("example.com/kubelet".to_owned(), "NoSchedule".to_owned()),
            ("dedicated".to_owned(), "NoSchedule".to_owned()),
        ],
        "the unregistered taint is gone, the Node's own kept, the NodeClaim's added"
    );
    let registered = world.events.with_reason("NodeRegistered");
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].fields["node"], "node-1");
}

#[tokio::test]
async fn given_a_registered_node_when_ready_without_startup_taints_then_it_is_initialized() {
    let world = World::new().await;
    world
        .create_node_claim(json!({
            "startupTaints": [{ "key": "example.com/agent-not-ready", "effect": "NoSchedule" }],
        }))
        .await;
    world.reconcile().await;
    let provider_id = world.provider_id().await;
    world.join_node("node-1", &provider_id).await;
    world.reconcile().await;
    world.set_node_ready("node-1").await;

    world.reconcile().await;
    assert_ne!(
        condition_status(&world.node_claim().await.unwrap(), "Initialized"),
        Some(ConditionStatus::True),
        "the startup taint the registration put on is still there"
    );

    // The agent DaemonSet removes its startup taint.
    world
        .set_node_taints(
            "node-1",
            json!([{ "key": "example.com/kubelet", "effect": "NoSchedule" }]),
        )
        .await;
    world.reconcile().await;

    assert_eq!(
        condition_status(&world.node_claim().await.unwrap(), "Initialized"),
        Some(ConditionStatus::True)
    );
    let node = world.node("node-1").await;
    assert_eq!(
        node.metadata.labels.unwrap()["karpenter.sh/initialized"],
        "true"
    );
    assert_eq!(world.events.with_reason("NodeInitialized").len(), 1);
}

#[tokio::test]
async fn given_a_node_that_never_registers_when_15_minutes_pass_then_the_node_claim_is_deleted() {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;
    world.reconcile().await;
    assert!(!world.provider_id().await.is_empty());

    world.clock.advance(Duration::from_secs(14 * 60));
    let requeue = world.reconcile().await;
    assert!(
        world
            .node_claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none(),
        "not at 14 minutes"
    );
    assert_eq!(requeue, Requeue::After(Duration::from_secs(60)));

    world.clock.advance(Duration::from_secs(60));
    world.reconcile().await;
    let node_claim = world.node_claim().await.unwrap();
    assert!(node_claim.metadata.deletion_timestamp.is_some());
    assert!(
        has_termination_finalizer(&node_claim),
        "launched: termination removes the instance and the finalizer"
    );
    let deleted = world.events.with_reason("NodeClaimDeleted");
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].fields["reason"], "RegistrationTimeout");
    assert!(
        world.cloud.calls_of(Rpc::Delete).is_empty(),
        "the instance is termination's business"
    );
}

#[tokio::test]
async fn given_a_deleted_node_claim_whose_create_answer_was_lost_then_its_instance_is_deleted_first()
 {
    let world = World::new().await;
    world.create_node_claim(json!({})).await;
    world.reconcile().await;
    // The launch happened in the cloud, but its answer never reached the NodeClaim: forget it.
    let launched = world.node_claim().await.unwrap();
    let mut status = launched.clone();
    status.status = Some(Default::default());
    world.cluster.replace_status(&status).await.unwrap();
    assert_eq!(world.cloud.instances().len(), 1);
    world.cloud.set_gradual_termination(true);
    world
        .cluster
        .delete::<NodeClaim>(None, NAME, DeleteOptions::default())
        .await
        .unwrap();

    let requeue = world.reconcile().await;
    assert!(
        world.node_claim().await.is_some(),
        "the instance is still terminating"
    );
    assert_eq!(requeue, Requeue::After(Duration::from_secs(5)));

    world.reconcile().await;
    assert!(world.node_claim().await.is_none());
    assert!(world.cloud.instances().is_empty());
    assert!(
        world
            .cloud
            .calls_of(Rpc::Delete)
            .iter()
            .all(|call| matches!(call, Call::Delete { provider_id, node_claim_name } if provider_id.is_empty() && node_claim_name == NAME))
    );
}

/// Insufficient capacity drops the NodePool's cached catalogue: the provisioner's next pass
/// asks the plugin, which now reports those offerings unavailable, instead of planning the
/// same launch again on a catalogue cached for minutes.
#[tokio::test]
async fn given_insufficient_capacity_then_the_node_pools_cached_catalogue_is_dropped() {
    use core_svc::apis::NodePool;
    use core_svc::controllers::provisioning::catalogue::CatalogueCache;
    use core_svc::controllers::provisioning::selection::UsableNodePool;

    let harness = Harness::new();
    let catalogues = std::sync::Arc::new(CatalogueCache::new(Duration::from_secs(180)));
    let world = World {
        controller: LifecycleController::new(harness.context())
            .with_catalogues(std::sync::Arc::clone(&catalogues)),
        harness,
    };
    world.create_node_class().await;
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "default", "uid": "pool-uid", "generation": 1 },
        "spec": { "template": { "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        } } },
    }))
    .unwrap();
    let usable = UsableNodePool {
        pool: &pool,
        node_class: None,
    };
    catalogues
        .get(&*world.cloud, &usable, jiff::Timestamp::UNIX_EPOCH)
        .await
        .unwrap();
    assert!(catalogues.all().contains_key("default"));

    world.create_node_claim(json!({})).await;
    world.cloud.fail_next(
        Rpc::Create,
        CloudProviderError::InsufficientCapacity("no default-instance-type left".into()),
    );
    world.reconcile().await;

    assert!(
        !catalogues.all().contains_key("default"),
        "the next pass fetches the plugin's fresh catalogue"
    );
}
