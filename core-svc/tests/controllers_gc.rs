//! Garbage collection on the in-memory cluster, the fake cloud and a fake clock: NodeClaims
//! whose instance vanished, instances whose NodeClaim vanished, and nothing at all when the
//! listing cannot be trusted.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::time::{Duration, SystemTime};

use core_svc::apis::NodeClaim;
use core_svc::clock::Clock;
use core_svc::cloudprovider::fake::Call;
use core_svc::cloudprovider::{CloudInstance, CloudProviderError, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, InMemoryCluster};
use core_svc::controllers::gc::GarbageCollectionController;
use core_svc::controllers::{Controller, Requeue};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

mod common;

use common::Harness;

struct World {
    harness: Harness,
    controller: GarbageCollectionController<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for World {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

impl World {
    fn new() -> Self {
        let harness = Harness::new();
        let controller = GarbageCollectionController::new(harness.context());
        World {
            harness,
            controller,
        }
    }

    fn now(&self) -> SystemTime {
        SystemTime::from(self.clock.now())
    }

    /// An instance in the cloud launched for `node_claim` now.
    fn instance(&self, provider_id: &str, node_claim: &str) {
        self.cloud.insert_instance(CloudInstance {
            creation_time: Some(self.now()),
            ..common::running_instance(Some(node_claim), provider_id)
        });
    }

    /// A NodeClaim launched as `provider_id` and registered.
    async fn registered_node_claim(&self, name: &str, provider_id: &str) {
        let node_claim = common::node_claim(
            name,
            json!({ "metadata": {
                "labels": { "karpenter.sh/nodepool": "default" },
                "finalizers": ["karpenter.sh/termination"],
            } }),
        );
        let mut created = self.cluster.create(&node_claim).await.unwrap();
        created.status = Some(
            serde_json::from_value(json!({
                "providerID": provider_id,
                "nodeName": format!("node-{name}"),
                "conditions": [
                    { "type": "Launched", "status": "True", "lastTransitionTime": self.clock.now().to_string() },
                    { "type": "Registered", "status": "True", "lastTransitionTime": self.clock.now().to_string() },
                ],
            }))
            .unwrap(),
        );
        self.cluster.replace_status(&created).await.unwrap();
    }

    async fn node(&self, name: &str, provider_id: &str, ready: bool) {
        let node = common::node(name, json!({ "spec": { "providerID": provider_id } }));
        self.cluster.create(&node).await.unwrap();
        let status = if ready { "True" } else { "Unknown" };
        let patch = json!({ "status": { "conditions": [{ "type": "Ready", "status": status }] } });
        self.cluster
            .merge_patch_status::<Node>(None, name, &patch)
            .await
            .unwrap();
    }

    async fn is_deleting(&self, name: &str) -> bool {
        self.cluster
            .get::<NodeClaim>(None, name)
            .await
            .unwrap()
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    }

    async fn reconcile(&self) -> Requeue {
        self.controller.reconcile().await.unwrap()
    }
}

#[tokio::test]
async fn given_a_registered_node_claim_whose_instance_vanished_when_collected_then_it_is_deleted() {
    let world = World::new();
    world.instance("fake:///z/i-1", "vanished");
    world
        .registered_node_claim("vanished", "fake:///z/i-1")
        .await;
    world.node("node-vanished", "fake:///z/i-1", false).await;
    world.instance("fake:///z/i-2", "alive");
    world.registered_node_claim("alive", "fake:///z/i-2").await;
    world.cloud.remove_instance("fake:///z/i-1");

    let requeue = world.reconcile().await;

    assert!(world.is_deleting("vanished").await);
    assert!(!world.is_deleting("alive").await);
    let deleted = world.events.with_reason("NodeClaimDeleted");
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].fields["nodeClaim"], "vanished");
    assert_eq!(deleted[0].fields["reason"], "garbage_collected");
    assert_eq!(deleted[0].fields["providerID"], "fake:///z/i-1");
    assert_eq!(requeue, Requeue::After(Duration::from_secs(120)));
}

#[tokio::test]
async fn given_a_vanished_instance_whose_node_is_still_ready_when_collected_then_it_is_kept() {
    let world = World::new();
    world.registered_node_claim("ready", "fake:///z/i-1").await;
    world.node("node-ready", "fake:///z/i-1", true).await;

    world.reconcile().await;

    assert!(!world.is_deleting("ready").await);
}

#[tokio::test]
async fn given_list_fails_when_collecting_then_nothing_is_deleted() {
    let world = World::new();
    world
        .registered_node_claim("unknown", "fake:///z/i-1")
        .await;
    world
        .cloud
        .fail_next(Rpc::List, CloudProviderError::Unavailable("timeout".into()));

    let requeue = world.reconcile().await;

    assert!(!world.is_deleting("unknown").await, "unknown is not gone");
    assert_eq!(world.events.with_reason("PluginUnavailable").len(), 1);
    assert_eq!(requeue, Requeue::After(Duration::from_secs(120)));

    world.reconcile().await;
    assert!(
        world.is_deleting("unknown").await,
        "the next complete listing decides"
    );
}

#[tokio::test]
async fn given_a_plugin_without_list_when_collecting_then_there_is_no_garbage_collection() {
    let world = World::new();
    world
        .registered_node_claim("unknown", "fake:///z/i-1")
        .await;
    world.cloud.set_unsupported(Rpc::List);

    let requeue = world.reconcile().await;

    assert!(!world.is_deleting("unknown").await);
    assert_eq!(requeue, Requeue::OnChange);
    assert!(
        world.events.all().is_empty(),
        "unsupported is not a failure"
    );
}

#[tokio::test]
async fn given_an_orphaned_instance_when_collecting_then_it_is_terminated_only_after_the_grace_period()
 {
    let world = World::new();
    world.instance("fake:///z/i-9", "ghost");
    world.instance("fake:///z/i-1", "alive");
    world.registered_node_claim("alive", "fake:///z/i-1").await;

    world.clock.advance(Duration::from_secs(4 * 60 + 59));
    let requeue = world.reconcile().await;
    assert_eq!(
        world.cloud.instances().len(),
        2,
        "a Create may be in flight"
    );
    assert_eq!(requeue, Requeue::After(Duration::from_secs(1)));

    world.clock.advance(Duration::from_secs(1));
    world.reconcile().await;

    let left: Vec<String> = world
        .cloud
        .instances()
        .into_iter()
        .map(|instance| instance.provider_id)
        .collect();
    assert_eq!(left, vec!["fake:///z/i-1".to_owned()]);
    assert_eq!(
        world.cloud.calls_of(Rpc::Delete),
        vec![Call::Delete {
            provider_id: "fake:///z/i-9".into(),
            node_claim_name: "ghost".into()
        }]
    );
    let terminated = world.events.with_reason("InstanceTerminated");
    assert_eq!(terminated.len(), 1);
    assert_eq!(terminated[0].fields["reason"], "orphaned");
    assert_eq!(terminated[0].fields["providerID"], "fake:///z/i-9");
}
