//! The termination controller drains and finalizes deleted NodeClaims and Nodes (ordered
//! drain, PodDisruptionBudgets, terminationGracePeriod, instance deletion, finalizers), and the
//! expiration controller deletes NodeClaims past their expireAfter; on the in-memory cluster,
//! the fake cloud and a fake clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::time::Duration;

use core_svc::apis::NodeClaim;
use core_svc::cloudprovider::fake::Call;
use core_svc::cloudprovider::{CloudProviderError, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, DeleteOptions, InMemoryCluster};
use core_svc::controllers::expiration::ExpirationController;
use core_svc::controllers::termination::TerminationController;
use core_svc::controllers::{Controller, Requeue};
use core_svc::events::{Event, EventType};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

mod common;

use common::{Harness, merged, start};

const FINALIZER: &str = "karpenter.sh/termination";
const PROVIDER_ID: &str = "fake:///test-zone-1/i-00000001";
const CLAIM: &str = "default-abcde";
const NODE: &str = "node-a";

fn at(offset: Duration) -> Timestamp {
    start().checked_add(offset).unwrap()
}

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

struct World {
    harness: Harness,
    termination: TerminationController<InMemoryCluster, FakeCloudProvider>,
    expiration: ExpirationController<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for World {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

fn world() -> World {
    let harness = Harness::new();
    let ctx = harness.context();
    World {
        termination: TerminationController::new(ctx.clone()),
        expiration: ExpirationController::new(ctx),
        harness,
    }
}

impl World {
    /// A launched, registered NodeClaim `CLAIM` whose Ready Node `NODE` runs on instance
    /// `PROVIDER_ID`; `spec` is merged into the NodeClaim's spec.
    async fn launched(&self, spec: Value) {
        let claim = common::node_claim(
            CLAIM,
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default" },
                    "finalizers": [FINALIZER],
                },
                "spec": spec,
            }),
        );
        self.cluster.create(&claim).await.unwrap();
        let condition =
            |type_: &str| json!({ "type": type_, "status": "True", "lastTransitionTime": start() });
        self.cluster
            .merge_patch_status::<NodeClaim>(
                None,
                CLAIM,
                &json!({ "status": {
                    "providerID": PROVIDER_ID,
                    "nodeName": NODE,
                    "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")],
                } }),
            )
            .await
            .unwrap();
        self.cloud
            .insert_instance(common::running_instance(Some(CLAIM), PROVIDER_ID));
        let node = common::node(
            NODE,
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default" },
                    "finalizers": [FINALIZER],
                },
                "spec": { "providerID": PROVIDER_ID },
            }),
        );
        self.cluster.create(&node).await.unwrap();
        self.set_node_ready(true).await;
    }

    async fn set_node_ready(&self, ready: bool) {
        let status = if ready { "True" } else { "False" };
        self.cluster
            .merge_patch_status::<Node>(
                None,
                NODE,
                &json!({ "status": { "conditions": [{ "type": "Ready", "status": status }] } }),
            )
            .await
            .unwrap();
    }

    /// A Ready pod `default/name` of its own ReplicaSet `name` on `NODE`; `extra` is merged in.
    async fn running_pod(&self, name: &str, extra: Value) {
        let pod = common::replica_set_pod("default", name, name, extra);
        self.cluster.create(&pod).await.unwrap();
        self.cluster.bind_pod("default", name, NODE).unwrap();
        self.cluster.set_pod_ready("default", name, true).unwrap();
    }

    async fn pdb(&self, name: &str, spec: Value) {
        self.cluster
            .create(&common::pdb("default", name, spec))
            .await
            .unwrap();
    }

    async fn delete_claim(&self) {
        self.cluster
            .delete::<NodeClaim>(None, CLAIM, DeleteOptions::default())
            .await
            .unwrap();
    }

    async fn reconcile(&self) -> Requeue {
        self.termination.reconcile().await.unwrap()
    }

    async fn claim(&self) -> Option<NodeClaim> {
        self.cluster.get::<NodeClaim>(None, CLAIM).await.unwrap()
    }

    async fn node(&self) -> Option<Node> {
        self.cluster.get::<Node>(None, NODE).await.unwrap()
    }

    async fn pod(&self, name: &str) -> Option<Pod> {
        self.cluster
            .get::<Pod>(Some("default"), name)
            .await
            .unwrap()
    }

    async fn is_terminating(&self, pod: &str) -> bool {
        self.pod(pod)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    }

    async fn condition(&self, type_: &str) -> Option<String> {
        let claim = self.claim().await?;
        let status = claim.status?;
        status
            .conditions
            .iter()
            .find(|condition| condition.type_ == type_)
            .map(|condition| format!("{:?}", condition.status))
    }

    fn delete_calls(&self) -> usize {
        self.cloud.calls_of(Rpc::Delete).len()
    }

    fn evicted(&self) -> Vec<String> {
        self.events
            .with_reason("PodEvicted")
            .iter()
            .map(|event| event.fields["pod"].clone())
            .collect()
    }

    fn reasons(&self, reasons: &[&str]) -> Vec<String> {
        self.events
            .all()
            .into_iter()
            .filter(|event| reasons.contains(&event.reason.as_str()))
            .map(|event| event.reason.as_str().to_owned())
            .collect()
    }

    /// The drain is over and the minimum drain time passed: the next pass deletes the instance.
    async fn assert_fully_finalized(&self) {
        assert!(self.claim().await.is_none(), "the NodeClaim is gone");
        assert!(self.node().await.is_none(), "the Node is gone");
        assert!(self.cloud.instances().is_empty(), "the instance is gone");
    }
}

fn field<'a>(event: &'a Event, key: &str) -> &'a str {
    event
        .fields
        .get(key)
        .map(String::as_str)
        .unwrap_or_default()
}

// --- ordered drain ------------------------------------------------------------------------

#[tokio::test]
async fn given_a_deleted_node_claim_then_its_node_is_tainted_and_drained_tier_by_tier() {
    let world = world();
    world.launched(json!({})).await;
    let critical = |class: &str| json!({ "spec": { "priorityClassName": class } });
    let daemon_set = json!({ "metadata": { "ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
        "uid": "00000000-0000-4000-8000-000000000002", "controller": true,
    }] } });
    world.running_pod("web", json!({})).await;
    world.running_pod("logs", daemon_set.clone()).await;
    world
        .running_pod("dns", critical("system-cluster-critical"))
        .await;
    world
        .running_pod("cni", merged(daemon_set, critical("system-node-critical")))
        .await;
    // Pods the drain neither evicts nor waits for.
    world
        .running_pod(
            "tolerant",
            json!({ "spec": { "tolerations": [{ "key": "karpenter.sh/disrupted", "operator": "Exists" }] } }),
        )
        .await;
    world
        .running_pod(
            "static",
            json!({ "metadata": { "annotations": { "kubernetes.io/config.mirror": "x" } } }),
        )
        .await;
    world.running_pod("done", json!({})).await;
    world
        .cluster
        .set_pod_phase("default", "done", "Succeeded")
        .unwrap();

    world.delete_claim().await;
    assert_eq!(world.reconcile().await, Requeue::After(secs(1)));

    let node = world.node().await.unwrap();
    assert!(
        node.metadata.deletion_timestamp.is_some(),
        "the Node is deleted too"
    );
    let taints = node.spec.unwrap().taints.unwrap();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule")
    );
    assert_eq!(
        node.metadata.labels.unwrap()["node.kubernetes.io/exclude-from-external-load-balancers"],
        "karpenter"
    );
    assert_eq!(world.evicted(), ["default/web"]);
    let evicted = &world.events.with_reason("PodEvicted")[0];
    assert_eq!(field(evicted, "node"), NODE);
    assert_eq!(field(evicted, "nodeClaim"), CLAIM);
    assert_eq!(world.condition("Drained").await.as_deref(), Some("Unknown"));

    // The next tier waits until the evicted pod is gone, not merely terminating.
    world.reconcile().await;
    assert_eq!(world.evicted(), ["default/web"]);

    for (gone, next) in [("web", "logs"), ("logs", "dns"), ("dns", "cni")] {
        world
            .cluster
            .finish_pod_termination("default", gone)
            .unwrap();
        world.reconcile().await;
        assert_eq!(
            world.evicted().last().map(String::as_str),
            Some(format!("default/{next}").as_str())
        );
    }
    world
        .cluster
        .finish_pod_termination("default", "cni")
        .unwrap();

    // Drained, but the drain lasts at least 5 s from its start.
    assert_eq!(world.reconcile().await, Requeue::After(secs(5)));
    assert_eq!(world.condition("Drained").await.as_deref(), Some("Unknown"));
    assert_eq!(world.delete_calls(), 0);

    world.clock.advance(secs(5));
    assert_eq!(world.reconcile().await, Requeue::OnChange);
    world.assert_fully_finalized().await;
    assert_eq!(
        world.evicted(),
        ["default/web", "default/logs", "default/dns", "default/cni"]
    );
    for skipped in ["tolerant", "static", "done"] {
        assert!(
            !world.is_terminating(skipped).await,
            "{skipped} was left alone"
        );
    }
    assert_eq!(
        world.reasons(&["InstanceTerminated", "NodeDeleted", "NodeClaimDeleted"]),
        ["InstanceTerminated", "NodeDeleted", "NodeClaimDeleted"]
    );
    let deleted = &world.events.with_reason("NodeClaimDeleted")[0];
    assert_eq!(field(deleted, "nodePool"), "default");
    assert_eq!(field(deleted, "providerID"), PROVIDER_ID);
}

#[tokio::test]
async fn given_a_do_not_disrupt_pod_then_the_drain_waits_for_it_without_evicting_it() {
    let world = world();
    world.launched(json!({})).await;
    world
        .running_pod(
            "precious",
            json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        )
        .await;
    world.delete_claim().await;
    world.reconcile().await;
    world.clock.advance(secs(3600));
    world.reconcile().await;
    assert!(!world.is_terminating("precious").await);
    assert!(world.evicted().is_empty());
    assert_eq!(world.delete_calls(), 0);
    assert!(world.claim().await.is_some());

    // The workload goes on its own: the drain completes.
    world
        .cluster
        .delete::<Pod>(Some("default"), "precious", DeleteOptions::grace_period(0))
        .await
        .unwrap();
    world.reconcile().await;
    world.assert_fully_finalized().await;
}

// --- PodDisruptionBudgets -----------------------------------------------------------------

#[tokio::test]
async fn given_a_pdb_allowing_no_disruption_then_the_drain_waits_until_it_is_relaxed() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    world
        .pdb(
            "web-pdb",
            json!({ "maxUnavailable": 0, "selector": { "matchLabels": { "app": "web" } } }),
        )
        .await;

    world.delete_claim().await;
    assert_eq!(world.reconcile().await, Requeue::After(secs(10)));
    let blocked = world.events.with_reason("EvictionBlocked");
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].object.name, "web");
    assert_eq!(blocked[0].type_, EventType::Normal);
    assert_eq!(field(&blocked[0], "podDisruptionBudget"), "default/web-pdb");
    assert_eq!(field(&blocked[0], "pod"), "default/web");
    assert!(
        blocked[0].message.contains("web-pdb"),
        "{}",
        blocked[0].message
    );

    for _ in 0..3 {
        world.clock.advance(secs(10));
        world.reconcile().await;
    }
    assert!(!world.is_terminating("web").await);
    assert_eq!(
        world.events.with_reason("EvictionBlocked").len(),
        1,
        "retries within the dedupe window record nothing new"
    );
    assert_eq!(world.delete_calls(), 0, "the instance is not touched");
    assert!(world.cloud.instances().len() == 1);
    let claim = world.claim().await.unwrap();
    assert_eq!(claim.metadata.finalizers.unwrap(), [FINALIZER]);
    assert_eq!(
        world.node().await.unwrap().metadata.finalizers.unwrap(),
        [FINALIZER]
    );

    world
        .cluster
        .merge_patch::<PodDisruptionBudget>(
            Some("default"),
            "web-pdb",
            &json!({ "spec": { "maxUnavailable": 1 } }),
        )
        .await
        .unwrap();
    world.reconcile().await;
    assert!(world.is_terminating("web").await);
    assert_eq!(world.evicted(), ["default/web"]);
    world
        .cluster
        .finish_pod_termination("default", "web")
        .unwrap();
    world.reconcile().await;
    world.assert_fully_finalized().await;
}

#[tokio::test]
async fn given_a_pod_under_two_pdbs_then_eviction_is_refused_with_a_warning_until_one_goes() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    let selector = json!({ "maxUnavailable": 1, "selector": { "matchLabels": { "app": "web" } } });
    world.pdb("first", selector.clone()).await;
    world.pdb("second", selector).await;

    world.delete_claim().await;
    world.reconcile().await;
    let blocked = world.events.with_reason("EvictionBlocked");
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].type_, EventType::Warning);
    assert!(field(&blocked[0], "podDisruptionBudget").contains("first"));
    assert!(!world.is_terminating("web").await);

    world
        .cluster
        .delete::<PodDisruptionBudget>(Some("default"), "second", DeleteOptions::default())
        .await
        .unwrap();
    world.reconcile().await;
    assert!(world.is_terminating("web").await);
}

// --- terminationGracePeriod ---------------------------------------------------------------

#[tokio::test]
async fn given_a_termination_grace_period_then_a_blocked_pod_is_deleted_in_time_for_its_grace_period()
 {
    let world = world();
    world
        .launched(json!({ "terminationGracePeriod": "10m" }))
        .await;
    world
        .running_pod(
            "web",
            json!({ "spec": { "terminationGracePeriodSeconds": 60 } }),
        )
        .await;
    world
        .pdb(
            "web-pdb",
            json!({ "maxUnavailable": 0, "selector": { "matchLabels": { "app": "web" } } }),
        )
        .await;

    world.delete_claim().await;
    world.reconcile().await;
    let deadline = at(secs(600));
    let claim = world.claim().await.unwrap();
    assert_eq!(
        claim.metadata.annotations.unwrap()["karpenter.sh/nodeclaim-termination-timestamp"],
        deadline.to_string()
    );
    assert_eq!(world.events.with_reason("EvictionBlocked").len(), 1);

    world.clock.set(at(secs(539)));
    world.reconcile().await;
    assert!(
        !world.is_terminating("web").await,
        "not before deadline - 60 s"
    );

    world.clock.set(at(secs(540)));
    world.reconcile().await;
    let pod = world.pod("web").await.unwrap();
    assert_eq!(
        pod.metadata.deletion_timestamp.unwrap().0,
        deadline,
        "deleted, not evicted, with its whole grace period ending at the deadline"
    );
    assert!(world.evicted().is_empty());
    let deleted = world.events.with_reason("PodDeleted");
    assert_eq!(deleted.len(), 1);
    assert_eq!(field(&deleted[0], "gracePeriodSeconds"), "60");
    assert_eq!(world.delete_calls(), 0);

    world
        .cluster
        .finish_pod_termination("default", "web")
        .unwrap();
    world.reconcile().await;
    world.assert_fully_finalized().await;
}

#[tokio::test]
async fn given_a_termination_grace_period_when_it_runs_out_then_the_instance_goes_with_pods_left() {
    let world = world();
    world
        .launched(json!({ "terminationGracePeriod": "2m" }))
        .await;
    world
        .running_pod(
            "precious",
            json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        )
        .await;
    world.delete_claim().await;
    world.reconcile().await;
    assert!(!world.is_terminating("precious").await);

    world.clock.set(at(secs(90)));
    world.reconcile().await;
    assert!(
        world.is_terminating("precious").await,
        "do-not-disrupt does not hold past the deadline - 30 s"
    );

    // The kubelet never confirms: at the deadline the drain is over regardless.
    world.clock.set(at(secs(119)));
    world.reconcile().await;
    assert_eq!(world.delete_calls(), 0);
    world.clock.set(at(secs(120)));
    world.reconcile().await;
    world.assert_fully_finalized().await;
    assert!(world.pod("precious").await.is_some());
}

// --- instance deletion --------------------------------------------------------------------

#[tokio::test]
async fn given_a_drained_node_then_the_finalizers_go_only_once_the_plugin_says_gone() {
    let world = world();
    world.launched(json!({})).await;
    world.cloud.set_gradual_termination(true);
    world.delete_claim().await;
    world.reconcile().await;
    world.clock.advance(secs(5));

    assert_eq!(world.reconcile().await, Requeue::After(secs(5)));
    assert_eq!(world.condition("Drained").await.as_deref(), Some("True"));
    assert_eq!(
        world.condition("InstanceTerminating").await.as_deref(),
        Some("True")
    );
    assert!(world.claim().await.is_some());
    assert!(world.node().await.is_some());
    assert!(world.events.with_reason("InstanceTerminated").is_empty());

    world.clock.advance(secs(5));
    assert_eq!(world.reconcile().await, Requeue::OnChange);
    world.assert_fully_finalized().await;
    assert_eq!(world.delete_calls(), 2);
    assert_eq!(
        world.cloud.calls_of(Rpc::Delete)[0],
        Call::Delete {
            provider_id: PROVIDER_ID.into(),
            node_claim_name: CLAIM.into(),
        }
    );
    assert_eq!(world.events.with_reason("InstanceTerminated").len(), 1);
}

#[tokio::test]
async fn given_the_plugin_unavailable_then_the_finalizers_stay_until_it_answers() {
    let world = world();
    world.launched(json!({})).await;
    world.delete_claim().await;
    world.reconcile().await;
    world.clock.advance(secs(5));

    for error in [
        CloudProviderError::Unavailable("connection refused".into()),
        CloudProviderError::InvalidResponse("state: 9".into()),
        CloudProviderError::Other {
            kind: core_svc::cloudprovider::FailureKind::Internal,
            message: "boom".into(),
        },
    ] {
        world.cloud.fail_next(Rpc::Delete, error.clone());
        assert_eq!(world.reconcile().await, Requeue::After(secs(5)), "{error}");
        assert!(world.claim().await.is_some(), "{error}");
        assert!(world.node().await.is_some(), "{error}");
        assert_eq!(world.cloud.instances().len(), 1);
    }
    let unavailable = world.events.with_reason("PluginUnavailable");
    assert_eq!(unavailable.len(), 2, "Unavailable and InvalidResponse");
    assert_eq!(unavailable[0].type_, EventType::Warning);
    assert_eq!(field(&unavailable[0], "nodeClaim"), CLAIM);
    assert!(world.events.with_reason("InstanceTerminated").is_empty());

    world.reconcile().await;
    world.assert_fully_finalized().await;
}

#[tokio::test]
async fn given_a_not_ready_node_whose_instance_is_gone_then_nothing_is_drained() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    world.set_node_ready(false).await;
    world.cloud.remove_instance(PROVIDER_ID);

    world.delete_claim().await;
    world.reconcile().await;
    assert!(world.evicted().is_empty());
    assert!(!world.is_terminating("web").await);
    assert_eq!(world.cloud.calls_of(Rpc::Get).len(), 1);
    assert!(world.claim().await.is_none());
    assert!(world.node().await.is_none());
}

#[tokio::test]
async fn given_a_not_ready_node_and_a_plugin_without_get_then_it_is_drained_as_usual() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    world.set_node_ready(false).await;
    world.cloud.set_unsupported(Rpc::Get);

    world.delete_claim().await;
    world.reconcile().await;
    assert_eq!(world.evicted(), ["default/web"]);
    assert!(world.events.with_reason("PluginUnavailable").is_empty());
}

#[tokio::test]
async fn given_a_node_claim_that_never_launched_then_termination_leaves_it_alone() {
    let world = world();
    let claim = common::node_claim(
        "unlaunched",
        json!({ "metadata": { "finalizers": [FINALIZER] } }),
    );
    world.cluster.create(&claim).await.unwrap();
    world
        .cluster
        .delete::<NodeClaim>(None, "unlaunched", DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(world.reconcile().await, Requeue::OnChange);
    assert!(world.cloud.calls().is_empty());
    let claim = world
        .cluster
        .get::<NodeClaim>(None, "unlaunched")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.metadata.finalizers.unwrap(), [FINALIZER]);
}

// --- kubectl delete node ------------------------------------------------------------------

#[tokio::test]
async fn given_kubectl_delete_node_then_its_node_claim_is_deleted_and_both_are_finalized() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    world
        .cluster
        .delete::<Node>(None, NODE, DeleteOptions::default())
        .await
        .unwrap();

    world.reconcile().await;
    let claim = world.claim().await.unwrap();
    assert!(claim.metadata.deletion_timestamp.is_some());
    assert_eq!(world.evicted(), ["default/web"]);

    world
        .cluster
        .finish_pod_termination("default", "web")
        .unwrap();
    world.clock.advance(secs(5));
    world.reconcile().await;
    world.assert_fully_finalized().await;
}

#[tokio::test]
async fn given_a_deleted_node_without_node_claim_then_it_is_drained_and_released() {
    let world = world();
    world.launched(json!({})).await;
    world.running_pod("web", json!({})).await;
    // The NodeClaim vanished around core (finalizer removed by hand).
    world
        .cluster
        .merge_patch::<NodeClaim>(None, CLAIM, &json!({ "metadata": { "finalizers": null } }))
        .await
        .unwrap();
    world
        .cluster
        .delete::<NodeClaim>(None, CLAIM, DeleteOptions::default())
        .await
        .unwrap();
    world
        .cluster
        .delete::<Node>(None, NODE, DeleteOptions::default())
        .await
        .unwrap();

    world.reconcile().await;
    assert_eq!(world.evicted(), ["default/web"]);
    assert!(world.node().await.is_some());
    world
        .cluster
        .finish_pod_termination("default", "web")
        .unwrap();
    world.reconcile().await;
    assert!(world.node().await.is_none());
    assert_eq!(
        world.delete_calls(),
        0,
        "stray instances are garbage collection's"
    );
}

// --- expiration ---------------------------------------------------------------------------

#[tokio::test]
async fn given_a_node_claim_past_its_expire_after_then_it_is_deleted_and_terminated() {
    let world = world();
    world.launched(json!({ "expireAfter": "1h" })).await;

    world.clock.advance(secs(59 * 60));
    assert_eq!(
        world.expiration.reconcile().await.unwrap(),
        Requeue::After(secs(60))
    );
    assert!(
        world
            .claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    world.clock.advance(secs(60));
    assert_eq!(
        world.expiration.reconcile().await.unwrap(),
        Requeue::OnChange
    );
    assert!(
        world
            .claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let expired = world.events.with_reason("NodeClaimDeleted");
    assert_eq!(expired.len(), 1);
    assert_eq!(field(&expired[0], "reason"), "Expired");
    assert_eq!(field(&expired[0], "nodeClaim"), CLAIM);
    assert_eq!(field(&expired[0], "nodePool"), "default");

    world.reconcile().await;
    world.clock.advance(secs(5));
    world.reconcile().await;
    world.assert_fully_finalized().await;
}

#[tokio::test]
async fn given_expire_after_never_then_the_node_claim_is_kept() {
    let world = world();
    world.launched(json!({ "expireAfter": "Never" })).await;
    world.clock.advance(secs(365 * 24 * 3600));
    assert_eq!(
        world.expiration.reconcile().await.unwrap(),
        Requeue::OnChange
    );
    assert!(
        world
            .claim()
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
}
