//! The disruption controller with the real lifecycle and termination controllers alongside, a
//! small kubelet, ReplicaSet controller and kube-scheduler written here, on the in-memory
//! cluster, the fake cloud and a fake clock: drift replacement before termination, budgets,
//! do-not-disrupt, budget schedules, rollback of failed replacements, restarts, emptiness, and
//! the drain before deletion with its timeout.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use core_svc::apis::NodeClaim;
use core_svc::clock::{Clock, FakeClock};
use core_svc::cloudprovider::fake::instance_type;
use core_svc::cloudprovider::{CloudProviderError, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, ClusterObject, InMemoryCluster};
use core_svc::controllers::Controller;
use core_svc::controllers::disruption::DisruptionController;
use core_svc::controllers::disruption::annotations::{
    ANNOTATION_DRAIN_STARTED_AT, ANNOTATION_DRAIN_TIMEOUT, ANNOTATION_REPLACES,
    COMMAND_ANNOTATIONS, LEGACY_COMMAND_ANNOTATIONS,
};
use core_svc::controllers::lifecycle::LifecycleController;
use core_svc::controllers::provisioning::Provisioner;
use core_svc::controllers::provisioning::nominations::{SharedNominations, nomination_window};
use core_svc::controllers::termination::TerminationController;
use core_svc::events::{Event, MemoryEvents};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::DynamicObject;
use serde_json::{Value, json};

mod common;

use common::{Harness, start};

type Disruption = DisruptionController<InMemoryCluster, FakeCloudProvider>;

const FINALIZER: &str = "karpenter.sh/termination";
const DISRUPTED: &str = "karpenter.sh/disrupted";
const POOL: &str = "default";
const INSTANCE_TYPE: &str = "default-instance-type";
const ZONE: &str = "test-zone-1";

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// A cluster of NodePool `default` with the ports, the controllers and a tiny kube.
struct World {
    cluster: Arc<InMemoryCluster>,
    cloud: Arc<FakeCloudProvider>,
    clock: FakeClock,
    events: Arc<MemoryEvents>,
    harness_ctx: core_svc::controllers::Context<InMemoryCluster, FakeCloudProvider>,
    disruption: Disruption,
    lifecycle: LifecycleController<InMemoryCluster, FakeCloudProvider>,
    termination: TerminationController<InMemoryCluster, FakeCloudProvider>,
    /// Every NodePool's largest number of nodes seen tainted or deleting at once.
    max_disrupting: usize,
    /// Each Node's first tainted / deleting instant, and its replacement's initialization.
    first_disrupted: BTreeMap<String, Timestamp>,
    recreated: usize,
}

impl World {
    /// The world with NodePool `default`, whose spec gets `pool_spec` merged in.
    async fn new(pool_spec: Value) -> Self {
        let harness = Harness::new();
        harness
            .cloud
            .set_instance_types(vec![Arc::new(instance_type(
                INSTANCE_TYPE,
                4,
                8,
                10,
                "amd64",
            ))]);
        let ctx = harness.context();
        let world = World {
            disruption: DisruptionController::new(ctx.clone()),
            lifecycle: LifecycleController::new(ctx.clone()),
            termination: TerminationController::new(ctx.clone()),
            harness_ctx: ctx,
            cluster: harness.cluster,
            cloud: harness.cloud,
            clock: harness.clock,
            events: harness.events,
            max_disrupting: 0,
            first_disrupted: BTreeMap::new(),
            recreated: 0,
        };
        let node_class: DynamicObject = common::node_class("default", json!({}));
        world.cluster.create_node_class(&node_class).await.unwrap();
        world
            .cluster
            .merge_patch_node_class_status(
                &node_class_ref(),
                &json!({ "status": { "conditions": [
                    { "type": "Ready", "status": "True", "lastTransitionTime": start(), "reason": "Ready" },
                ] } }),
            )
            .await
            .unwrap();
        let pool = common::node_pool(
            POOL,
            json!({ "spec": common::merged(
                json!({ "template": { "spec": { "requirements": [
                    { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
                ] } } }),
                pool_spec,
            ) }),
        );
        world.cluster.create(&pool).await.unwrap();
        world
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A launched, registered, initialized node `node-<suffix>` of NodeClaim
    /// `default-<suffix>`, with `pods` (name, CPU) of their own ReplicaSets bound and Ready;
    /// `claim_status` merged into the NodeClaim's status (conditions are added to the
    /// lifecycle's three).
    async fn node(&self, suffix: &str, pods: &[(&str, &str)], extra_conditions: Value) {
        self.node_with_spec(suffix, pods, extra_conditions, json!({}))
            .await;
    }

    /// [`World::node`] with `claim_spec` merged into the NodeClaim's spec.
    async fn node_with_spec(
        &self,
        suffix: &str,
        pods: &[(&str, &str)],
        extra_conditions: Value,
        claim_spec: Value,
    ) {
        let claim_name = format!("default-{suffix}");
        let node_name = format!("node-{suffix}");
        let provider_id = format!("fake:///{ZONE}/i-{suffix}");
        let labels = json!({
            "karpenter.sh/nodepool": POOL,
            "node.kubernetes.io/instance-type": INSTANCE_TYPE,
            "topology.kubernetes.io/zone": ZONE,
            "karpenter.sh/capacity-type": "on-demand",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        });
        let claim = common::node_claim(
            &claim_name,
            json!({
                "metadata": { "labels": labels, "finalizers": [FINALIZER] },
                "spec": common::merged(
                    json!({ "requirements": [
                        { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE] },
                    ] }),
                    claim_spec,
                ),
            }),
        );
        self.cluster.create(&claim).await.unwrap();
        let condition =
            |type_: &str| json!({ "type": type_, "status": "True", "lastTransitionTime": start() });
        let mut conditions = vec![
            condition("Launched"),
            condition("Registered"),
            condition("Initialized"),
        ];
        if let Value::Array(extra) = extra_conditions {
            conditions.extend(extra);
        }
        let allocatable = json!({ "cpu": "3900m", "memory": "8Gi", "pods": "10" });
        self.cluster
            .merge_patch_status::<NodeClaim>(
                None,
                &claim_name,
                &json!({ "status": {
                    "providerID": provider_id,
                    "nodeName": node_name,
                    "capacity": { "cpu": "4", "memory": "8Gi", "pods": "10" },
                    "allocatable": allocatable,
                    "conditions": conditions,
                } }),
            )
            .await
            .unwrap();
        self.cloud
            .insert_instance(common::running_instance(Some(&claim_name), &provider_id));
        let mut node_labels = labels.clone();
        node_labels["karpenter.sh/initialized"] = json!("true");
        node_labels["karpenter.sh/registered"] = json!("true");
        node_labels["kubernetes.io/hostname"] = json!(node_name);
        let node = common::node(
            &node_name,
            json!({
                "metadata": { "labels": node_labels, "finalizers": [FINALIZER] },
                "spec": { "providerID": provider_id },
            }),
        );
        self.cluster.create(&node).await.unwrap();
        self.set_ready(&node_name, &allocatable).await;
        for (pod, cpu) in pods {
            self.pod(pod, cpu, json!({})).await;
            self.cluster.bind_pod("default", pod, &node_name).unwrap();
            self.cluster.set_pod_ready("default", pod, true).unwrap();
        }
    }

    async fn set_ready(&self, node: &str, allocatable: &Value) {
        common::set_node_ready(&self.cluster, node, allocatable).await;
    }

    /// A pending pod `default/name` of its own ReplicaSet requesting `cpu`.
    async fn pod(&self, name: &str, cpu: &str, extra: Value) {
        let base = name.split("-r").next().unwrap_or(name);
        let pod = common::replica_set_pod(
            "default",
            name,
            base,
            common::merged(
                json!({ "spec": { "containers": [{ "name": "app", "image": "nginx",
                    "resources": { "requests": { "cpu": cpu } } }] } }),
                extra,
            ),
        );
        self.cluster.create(&pod).await.unwrap();
    }

    /// Sets `Drifted=True` on the NodeClaim `default-<suffix>` at `at`.
    async fn drift(&self, suffix: &str, at: Timestamp) {
        let name = format!("default-{suffix}");
        let claim = self.claim(&name).await.unwrap();
        let mut conditions = claim.status.unwrap().conditions;
        conditions.retain(|c| c.type_ != "Drifted");
        let mut value = serde_json::to_value(&conditions).unwrap();
        value.as_array_mut().unwrap().push(
            json!({ "type": "Drifted", "status": "True", "lastTransitionTime": at, "reason": "NodeClassDrift" }),
        );
        self.cluster
            .merge_patch_status::<NodeClaim>(
                None,
                &name,
                &json!({ "status": { "conditions": value } }),
            )
            .await
            .unwrap();
    }

    async fn claim(&self, name: &str) -> Option<NodeClaim> {
        self.cluster.get::<NodeClaim>(None, name).await.unwrap()
    }

    async fn claims(&self) -> Vec<NodeClaim> {
        crate::common::owned(&self.cluster.snapshot().await.unwrap().node_claims)
    }

    async fn nodes(&self) -> Vec<Node> {
        crate::common::owned(&self.cluster.snapshot().await.unwrap().nodes)
    }

    async fn pods(&self) -> Vec<core_svc::cluster::SlimPod> {
        crate::common::owned(&self.cluster.snapshot().await.unwrap().pods)
    }

    /// One round: disruption, lifecycle (twice: it moves one stage per pass), the kubelet,
    /// termination, the kubelet stopping evicted pods, the ReplicaSets and the scheduler;
    /// invariants checked after every step; then the clock moves by `step`.
    async fn tick(&mut self, step: Duration) {
        self.disruption.reconcile().await.unwrap();
        self.observe().await;
        self.lifecycle.reconcile().await.unwrap();
        self.lifecycle.reconcile().await.unwrap();
        self.kubelet().await;
        self.lifecycle.reconcile().await.unwrap();
        self.observe().await;
        self.termination.reconcile().await.unwrap();
        self.observe().await;
        self.stop_evicted_pods().await;
        self.schedule().await;
        self.clock.advance(step);
    }

    async fn ticks(&mut self, count: usize, step: Duration) {
        for _ in 0..count {
            self.tick(step).await;
        }
    }

    /// Records how many nodes are tainted or deleting, and when each first was.
    async fn observe(&mut self) {
        let now = self.now();
        let disrupting: Vec<String> = self
            .nodes()
            .await
            .into_iter()
            .filter(is_disrupting)
            .filter_map(|node| node.metadata.name)
            .collect();
        self.max_disrupting = self.max_disrupting.max(disrupting.len());
        for node in disrupting {
            self.first_disrupted.entry(node).or_insert(now);
        }
    }

    /// Joins a Node for each launched NodeClaim without one, Ready at once.
    async fn kubelet(&self) {
        common::join_launched_nodes(
            &self.cluster,
            |_| json!({ "cpu": "3900m", "memory": "8Gi", "pods": "10" }),
        )
        .await;
    }

    /// The kubelet stops every pod being deleted; its ReplicaSet creates a new pending one.
    async fn stop_evicted_pods(&mut self) {
        for pod in self.pods().await {
            if pod.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let name = pod.metadata.name.clone().unwrap();
            self.cluster
                .finish_pod_termination("default", &name)
                .unwrap();
            let base = name.split("-r").next().unwrap().to_owned();
            let cpu = pod.spec.as_ref().unwrap().containers[0]
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu"))
                .map(|q| q.0.clone())
                .unwrap();
            self.recreated += 1;
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            self.pod(
                &format!("{base}-r{}", self.recreated),
                &cpu,
                json!({ "metadata": { "annotations": annotations } }),
            )
            .await;
        }
    }

    /// Binds each pending pod to the first node (by name) that is Ready, untainted and has CPU
    /// room, and makes it Ready.
    async fn schedule(&self) {
        common::schedule_pending(&self.cluster).await;
    }

    fn events(&self, reason: &str) -> Vec<Event> {
        self.events.with_reason(reason)
    }

    /// A new disruption controller, as after a restart of core.
    fn restart(&mut self) {
        self.disruption = DisruptionController::new(self.harness_ctx.clone());
    }
}

fn node_class_ref() -> core_svc::apis::NodeClassReference {
    serde_json::from_value(
        json!({ "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default" }),
    )
    .unwrap()
}

fn is_tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key == DISRUPTED && t.effect == "NoSchedule")
}

fn is_disrupting(node: &Node) -> bool {
    is_tainted(node) || node.metadata.deletion_timestamp.is_some()
}

fn is_initialized(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|status| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Initialized" && format!("{:?}", c.status) == "True")
    })
}

fn names<K: kube::Resource>(objects: &[K]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|object| object.meta().name.clone())
        .collect()
}

fn replacements(claims: &[NodeClaim]) -> Vec<&NodeClaim> {
    claims
        .iter()
        .filter(|claim| {
            claim
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANNOTATION_REPLACES))
        })
        .collect()
}

fn drifted() -> Value {
    json!([{ "type": "Drifted", "status": "True", "lastTransitionTime": start(), "reason": "NodeClassDrift" }])
}

fn consolidatable() -> Value {
    json!([{ "type": "Consolidatable", "status": "True", "lastTransitionTime": start() }])
}

#[tokio::test]
async fn given_a_drifted_node_when_disruption_runs_then_its_replacement_is_initialized_before_it_is_tainted_and_deleted()
 {
    let mut world = World::new(json!({})).await;
    world
        .node("a", &[("web", "1"), ("api", "1")], drifted())
        .await;

    world.disruption.reconcile().await.unwrap();

    let claims = world.claims().await;
    let replacement = replacements(&claims);
    assert_eq!(replacement.len(), 1, "one replacement NodeClaim is created");
    assert_eq!(
        replacement[0].metadata.annotations.as_ref().unwrap()[ANNOTATION_REPLACES],
        "default-a"
    );
    let node = world
        .cluster
        .get::<Node>(None, "node-a")
        .await
        .unwrap()
        .unwrap();
    assert!(
        !is_tainted(&node),
        "not tainted while the replacement is not up"
    );
    assert!(
        !world.claim_deleting("default-a").await,
        "not deleted while the replacement is not up"
    );
    let started = world.events("DisruptionStarted");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].fields["reason"], "Drifted");
    assert_eq!(started[0].fields["candidates"], "default-a");
    assert_eq!(started[0].fields["replacements"], "1");

    // Until the replacement is initialized, the old node stays untouched.
    let replacement_name = replacement[0].metadata.name.clone().unwrap();
    let mut initialized_at = None;
    for _ in 0..30 {
        world.tick(secs(5)).await;
        let claim = world.claim(&replacement_name).await.unwrap();
        if initialized_at.is_none() && is_initialized(&claim) {
            initialized_at = Some(world.now());
        }
    }
    let initialized_at = initialized_at.expect("the replacement initializes");
    let tainted_at = world.first_disrupted["node-a"];
    assert!(
        initialized_at <= tainted_at,
        "replacement initialized at {initialized_at}, old node tainted at {tainted_at}"
    );
    assert!(
        world.claim("default-a").await.is_none(),
        "the old NodeClaim is gone"
    );
    assert!(!names(&world.nodes().await).contains("node-a"));
    let pods = world.pods().await;
    assert_eq!(pods.len(), 2, "both pods run again");
    assert!(pods.iter().all(|pod| {
        pod.spec.as_ref().unwrap().node_name.as_deref() == Some(&format!("node-{replacement_name}"))
    }));
    let replacement = world.claim(&replacement_name).await.unwrap();
    let replacement_node = world
        .cluster
        .get::<Node>(None, &format!("node-{replacement_name}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        disruption_annotations(replacement.metadata.annotations.as_ref()),
        Vec::<String>::new(),
        "the finished command leaves nothing on its replacement"
    );
    assert_eq!(
        disruption_annotations(replacement_node.metadata.annotations.as_ref()),
        Vec::<String>::new(),
        "nor on the replacement's Node, where registration copied them"
    );
}

/// The disruption command annotation keys among `annotations`, under either name.
fn disruption_annotations(annotations: Option<&BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .into_iter()
        .flatten()
        .map(|(key, _)| key.clone())
        .filter(|key| {
            COMMAND_ANNOTATIONS.contains(&key.as_str())
                || LEGACY_COMMAND_ANNOTATIONS.contains(&key.as_str())
        })
        .collect()
}

#[tokio::test]
async fn given_a_drifted_node_just_nominated_for_a_pending_pod_when_disruption_runs_then_it_waits_for_the_nomination_window()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("web", "1")], drifted()).await;
    let ctx = world.harness_ctx.clone();
    let window = nomination_window(ctx.settings.batch_max);
    let shared = SharedNominations::new(window);
    let provisioner = Provisioner::new(ctx.clone()).with_nominations(shared.clone());
    world.disruption = DisruptionController::new(ctx).with_nominations(shared);
    world.pod("queued", "1", json!({})).await;
    world
        .cluster
        .merge_patch_status::<Pod>(
            Some("default"),
            "queued",
            &json!({ "status": { "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            }] } }),
        )
        .await
        .unwrap();

    // The batch opens on the pod and closes once idle; node-a has room, so the pod is
    // nominated to it.
    for _ in 0..5 {
        provisioner.reconcile().await.unwrap();
        if !world.events("Nominated").is_empty() {
            break;
        }
        world.clock.advance(secs(1));
    }
    let nominated = world.events("Nominated");
    assert_eq!(nominated.len(), 1, "{nominated:?}");
    assert_eq!(nominated[0].fields["nodeClaim"], "default-a");
    let nominated_at = world.now();

    world.disruption.reconcile().await.unwrap();

    assert!(
        world.events("DisruptionStarted").is_empty(),
        "a node just nominated is no candidate"
    );
    let blocked = world.events("DisruptionBlocked");
    assert!(
        blocked
            .iter()
            .any(|e| e.object.name == "node-a" && e.message.contains("nominated")),
        "{blocked:?}"
    );

    // The kube-scheduler binds the pod; once the window has passed, drift goes ahead.
    world.schedule().await;
    world.clock.advance(window - secs(1));
    world.disruption.reconcile().await.unwrap();
    assert!(
        world.events("DisruptionStarted").is_empty(),
        "still within the window"
    );
    world.clock.advance(secs(1));
    assert_eq!(
        world.now().duration_since(nominated_at),
        jiff::SignedDuration::try_from(window).unwrap()
    );
    world.disruption.reconcile().await.unwrap();

    let started = world.events("DisruptionStarted");
    assert_eq!(started.len(), 1, "the window is over");
    assert_eq!(started[0].fields["candidates"], "default-a");
}

#[tokio::test]
async fn given_several_drifted_nodes_when_upgrading_then_no_more_nodes_than_the_budget_disrupt_at_once()
 {
    let mut world = World::new(
        json!({ "disruption": { "consolidateAfter": "0s", "budgets": [{ "nodes": "2" }] } }),
    )
    .await;
    for (i, suffix) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        world
            .node(suffix, &[(&format!("app{i}"), "3")], drifted())
            .await;
    }

    world.ticks(120, secs(5)).await;

    let claims = world.claims().await;
    let old: Vec<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|s| format!("default-{s}"))
        .filter(|name| {
            claims
                .iter()
                .any(|c| c.metadata.name.as_ref() == Some(name))
        })
        .collect();
    assert!(
        old.is_empty(),
        "every drifted NodeClaim replaced, left: {old:?}"
    );
    assert_eq!(world.claims().await.len(), 5, "five replacements");
    assert_eq!(
        world.max_disrupting, 2,
        "up to the budget's 2 nodes disrupt at once, never more"
    );
    assert_eq!(world.pods().await.len(), 5, "no pod lost");
}

#[tokio::test]
async fn given_a_pod_with_do_not_disrupt_when_drift_runs_then_its_node_is_held_until_the_annotation_goes()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("batch", "1")], drifted()).await;
    world.set_do_not_disrupt("batch", Some("true")).await;

    world.ticks(10, secs(10)).await;

    assert!(
        replacements(&world.claims().await).is_empty(),
        "nothing launched"
    );
    assert!(world.first_disrupted.is_empty(), "node untouched");
    let blocked = world.events("DisruptionBlocked");
    assert_eq!(
        blocked.len(),
        1,
        "reported once within 5 minutes: {blocked:?}"
    );
    assert_eq!(blocked[0].object.name, "node-a");
    assert_eq!(blocked[0].fields["pod"], "default/batch");
    assert!(
        blocked[0].message.contains("default/batch"),
        "{}",
        blocked[0].message
    );

    world.set_do_not_disrupt("batch", None).await;
    world.ticks(30, secs(5)).await;

    assert!(
        world.claim("default-a").await.is_none(),
        "replaced once released"
    );
}

#[tokio::test]
async fn given_a_zero_budget_during_a_schedule_window_when_drifted_then_drift_waits_for_the_window_to_end()
 {
    // 12:00 UTC start; the window opens daily at 11:00 for 2 hours.
    let mut world = World::new(
        json!({ "disruption": { "consolidateAfter": "0s", "budgets": [
        { "nodes": "0", "schedule": "0 11 * * *", "duration": "2h", "reasons": ["Drifted"] },
    ] } }),
    )
    .await;
    world.node("a", &[("web", "1")], drifted()).await;

    world.ticks(6, secs(10 * 60)).await;

    assert!(
        replacements(&world.claims().await).is_empty(),
        "nothing during the window"
    );
    assert!(world.claim("default-a").await.is_some());
    let blocked = world.events("DisruptionBlocked");
    assert!(!blocked.is_empty());
    assert!(
        blocked[0].message.contains("allows no Drifted disruptions"),
        "{}",
        blocked[0].message
    );
    assert!(
        blocked[0].message.contains("13:00:00"),
        "names the end: {}",
        blocked[0].message
    );

    // 13:00 passed.
    world.ticks(30, secs(10)).await;
    assert!(
        world.claim("default-a").await.is_none(),
        "replaced after the window"
    );
}

#[tokio::test]
async fn given_insufficient_capacity_for_the_replacement_when_drifted_then_it_rolls_back_and_retries_later()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("web", "1")], drifted()).await;
    world.cloud.fail_next(
        Rpc::Create,
        CloudProviderError::InsufficientCapacity("no capacity in test-zone-1".into()),
    );

    world.disruption.reconcile().await.unwrap();
    let first = replacements(&world.claims().await)[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // The lifecycle launches, fails, deletes the replacement; the next pass rolls back.
    world.ticks(4, secs(5)).await;

    let abandoned = world.events("DisruptionAbandoned");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    assert!(
        abandoned[0].fields["reason"].contains(&first),
        "{:?}",
        abandoned[0]
    );
    assert_eq!(abandoned[0].fields["disruptionReason"], "Drifted");
    let blocked = world.events("DisruptionBlocked");
    assert!(
        blocked
            .iter()
            .any(|e| e.object.name == "node-a"
                && e.message.contains("launching its replacement failed")),
        "{blocked:?}"
    );
    let node = world
        .cluster
        .get::<Node>(None, "node-a")
        .await
        .unwrap()
        .unwrap();
    assert!(!is_tainted(&node));
    assert!(!world.claim_deleting("default-a").await);
    assert!(
        world
            .claims()
            .await
            .iter()
            .all(|c| c.metadata.name.as_deref() != Some(first.as_str())),
        "the failed replacement is gone"
    );

    // Retried once the retry delay has passed, and this time it works.
    world.ticks(40, secs(5)).await;
    assert!(
        world.claim("default-a").await.is_none(),
        "replaced on retry"
    );
    assert_eq!(world.events("DisruptionStarted").len(), 2);
}

#[tokio::test]
async fn given_a_restart_mid_command_when_a_new_controller_runs_then_the_upgrade_completes_without_stale_taints_or_orphans()
 {
    let mut world = World::new(json!({})).await;
    // Neither node has room for the other's pod: the drifted one needs a replacement.
    world.node("a", &[("web", "3")], drifted()).await;
    world.node("b", &[("api", "3")], json!([])).await;

    world.disruption.reconcile().await.unwrap();
    assert_eq!(replacements(&world.claims().await).len(), 1);
    // A crash elsewhere left a stale taint on a node no command stands behind.
    world
        .cluster
        .merge_patch::<Node>(
            None,
            "node-b",
            &json!({ "spec": { "taints": [{ "key": DISRUPTED, "effect": "NoSchedule" }] } }),
        )
        .await
        .unwrap();

    world.restart();
    world.ticks(30, secs(5)).await;

    world
        .node_a_was_replaced_without_stale_taints_or_orphans()
        .await;
}

impl World {
    /// After nodes `a` (drifted) and `b`, and a command replacing `a`: `a`'s NodeClaim is
    /// gone, `b` and one replacement are left, no Node is tainted, the command started once
    /// and was never abandoned, and no instance is orphaned.
    async fn node_a_was_replaced_without_stale_taints_or_orphans(&self) {
        let nodes = self.nodes().await;
        assert!(nodes.iter().all(|node| !is_tainted(node)), "no taint left");
        assert!(
            self.claim("default-a").await.is_none(),
            "the upgrade completed"
        );
        let claims = self.claims().await;
        assert_eq!(
            claims.len(),
            2,
            "node b and one replacement: {:?}",
            names(&claims)
        );
        assert_eq!(
            self.events("DisruptionStarted").len(),
            1,
            "not started twice"
        );
        assert!(self.events("DisruptionAbandoned").is_empty());
        let instances = self.cloud.instances();
        assert_eq!(instances.len(), 2, "no orphaned instance");
    }
}

#[tokio::test]
async fn given_a_restart_while_the_replacement_launches_when_it_fails_then_the_new_controller_rolls_back()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("web", "1")], drifted()).await;
    world.cloud.fail_next(
        Rpc::Create,
        CloudProviderError::InsufficientCapacity("none".into()),
    );
    world.disruption.reconcile().await.unwrap();

    world.restart();
    world.ticks(4, secs(5)).await;

    assert_eq!(world.events("DisruptionAbandoned").len(), 1);
    let claims = world.claims().await;
    assert!(replacements(&claims).is_empty(), "no replacement left");
    assert!(
        claims
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("default-a"))
    );
}

#[tokio::test]
async fn given_empty_consolidatable_nodes_when_emptiness_runs_then_they_are_deleted_after_validation()
 {
    let world = World::new(json!({ "disruption": {
        "consolidateAfter": "30s", "budgets": [{ "nodes": "100%" }],
    } }))
    .await;
    world.node("a", &[], consolidatable()).await;
    world.node("b", &[], consolidatable()).await;
    world.node("c", &[("web", "1")], json!([])).await;

    world.disruption.reconcile().await.unwrap();
    assert!(
        world.events("DisruptionStarted").is_empty(),
        "held for validation"
    );
    world.clock.advance(secs(10));
    world.disruption.reconcile().await.unwrap();
    assert!(
        world.events("DisruptionStarted").is_empty(),
        "still within 15 s"
    );

    world.clock.advance(secs(5));
    world.disruption.reconcile().await.unwrap();
    let started = world.events("DisruptionStarted");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].fields["reason"], "Empty");
    assert_eq!(started[0].fields["decision"], "delete");
    assert_eq!(started[0].fields["candidates"], "default-a,default-b");
    for name in ["default-a", "default-b"] {
        assert!(
            world
                .claim(name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
    }
    assert!(!world.claim_deleting("default-c").await);
}

#[tokio::test]
async fn given_an_empty_node_that_gets_a_pod_during_validation_when_validated_then_it_is_abandoned()
{
    let world = World::new(json!({ "disruption": { "consolidateAfter": "30s" } })).await;
    world.node("a", &[], consolidatable()).await;
    world.disruption.reconcile().await.unwrap();

    world.pod("late", "1", json!({})).await;
    world.cluster.bind_pod("default", "late", "node-a").unwrap();
    world
        .cluster
        .set_pod_ready("default", "late", true)
        .unwrap();
    world.clock.advance(secs(15));
    world.disruption.reconcile().await.unwrap();

    assert!(world.events("DisruptionStarted").is_empty());
    let abandoned = world.events("DisruptionAbandoned");
    assert_eq!(abandoned.len(), 1);
    assert!(
        abandoned[0].fields["reason"].starts_with("churn"),
        "{:?}",
        abandoned[0]
    );
    assert!(!world.claim_deleting("default-a").await);
}

#[tokio::test]
async fn given_consolidate_after_never_when_nodes_are_empty_then_emptiness_does_nothing() {
    let mut world = World::new(json!({ "disruption": { "consolidateAfter": "Never" } })).await;
    // Even with the condition left over from before the change.
    world.node("a", &[], consolidatable()).await;

    world.ticks(5, secs(20)).await;

    assert!(world.events("DisruptionStarted").is_empty());
    assert!(!world.claim_deleting("default-a").await);
}

#[tokio::test]
async fn given_a_stuck_replacement_when_the_command_times_out_then_it_is_rolled_back() {
    let world = World::new(json!({})).await;
    world.node("a", &[("web", "1")], drifted()).await;
    world.disruption.reconcile().await.unwrap();
    // No lifecycle runs: the replacement never launches.
    world.clock.advance(secs(10 * 60));
    world.disruption.reconcile().await.unwrap();

    let abandoned = world.events("DisruptionAbandoned");
    assert_eq!(abandoned.len(), 1);
    assert!(
        abandoned[0].fields["reason"].contains("timed out"),
        "{:?}",
        abandoned[0]
    );
    let claims = world.claims().await;
    assert_eq!(
        names(&claims),
        BTreeSet::from(["default-a".to_owned()]),
        "the uninitialized replacement is deleted"
    );
}

#[tokio::test]
async fn given_two_drifted_nodes_and_a_budget_of_one_when_drift_runs_then_the_oldest_drift_goes_first()
 {
    let mut world = World::new(
        json!({ "disruption": { "consolidateAfter": "0s", "budgets": [{ "nodes": "1" }] } }),
    )
    .await;
    world.node("a", &[("web", "3")], json!([])).await;
    world.node("b", &[("api", "3")], json!([])).await;
    world.drift("a", start()).await;
    world
        .drift(
            "b",
            start()
                .checked_sub(jiff::SignedDuration::from_hours(1))
                .unwrap(),
        )
        .await;

    world.tick(secs(5)).await;

    let started = world.events("DisruptionStarted");
    assert_eq!(started.len(), 1, "one at a time under a budget of 1");
    assert_eq!(started[0].fields["candidates"], "default-b");
    let blocked = world.events("DisruptionBlocked");
    assert!(
        blocked
            .iter()
            .any(|e| e.object.name == "node-a" && e.message.contains("budget")),
        "{blocked:?}"
    );
    world.ticks(40, secs(5)).await;
    assert!(world.claim("default-a").await.is_none());
    assert!(world.claim("default-b").await.is_none());
    assert_eq!(world.max_disrupting, 1);
}

// --- draining before deleting ------------------------------------------------------------------

/// A PodDisruptionBudget `default/web-pdb` over the `web` pods allowing `max_unavailable`.
fn web_pdb(max_unavailable: i32) -> PodDisruptionBudget {
    common::pdb(
        "default",
        "web-pdb",
        json!({ "maxUnavailable": max_unavailable, "selector": { "matchLabels": { "app": "web" } } }),
    )
}

fn annotation(claim: &NodeClaim, key: &str) -> Option<String> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .cloned()
}

fn has_disruption_condition(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|status| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "DisruptionReason")
    })
}

impl World {
    /// Sets the `karpenter.sh/do-not-disrupt` annotation of pod `default/{pod}`, or removes it.
    async fn set_do_not_disrupt(&self, pod: &str, value: Option<&str>) {
        self.cluster
            .merge_patch::<Pod>(
                Some("default"),
                pod,
                &json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": value } } }),
            )
            .await
            .unwrap();
    }

    /// Whether NodeClaim `name`, which must exist, is being deleted.
    async fn claim_deleting(&self, name: &str) -> bool {
        let claim = self.claim(name).await;
        let claim = claim.unwrap_or_else(|| panic!("NodeClaim {name} is gone"));
        claim.metadata.deletion_timestamp.is_some()
    }

    async fn node_tainted(&self, name: &str) -> bool {
        self.cluster
            .get::<Node>(None, name)
            .await
            .unwrap()
            .is_some_and(|node| is_tainted(&node))
    }

    /// Ticks by `step` until node `name` is tainted (at most `limit` ticks); answers the
    /// instant of the tick whose disruption pass tainted it.
    async fn tick_until_tainted(&mut self, name: &str, step: Duration, limit: usize) -> Timestamp {
        for _ in 0..limit {
            let at = self.now();
            self.tick(step).await;
            if self.node_tainted(name).await {
                return at;
            }
        }
        panic!("{name} was never tainted");
    }

    /// Node `node-a` of NodeClaim `default-a` with pods `web` and `api`, drifted; a pass starts
    /// its replacement; then a PodDisruptionBudget allowing no `web` pod to go is created (a
    /// drifted node under such a budget is no candidate, so it comes after the start, as a
    /// user's change mid-upgrade); ticks of 5 s until the node is tainted. Answers the instant
    /// of the tainting pass.
    async fn drift_into_a_blocked_drain(&mut self) -> Timestamp {
        self.node("a", &[("web", "1"), ("api", "1")], drifted())
            .await;
        self.disruption.reconcile().await.unwrap();
        assert_eq!(replacements(&self.claims().await).len(), 1);
        self.cluster.create(&web_pdb(0)).await.unwrap();
        self.tick_until_tainted("node-a", secs(5), 30).await
    }
}

#[tokio::test]
async fn given_a_drifted_node_whose_pod_a_pdb_holds_when_the_drain_times_out_then_the_command_is_abandoned_and_retried_once_the_pdb_allows()
 {
    let mut world = World::new(json!({})).await;

    let tainted_at = world.drift_into_a_blocked_drain().await;

    // Tainted only once the replacement is initialized, and drained before any delete.
    let claims = world.claims().await;
    let replacement = replacements(&claims)[0].clone();
    let replacement_name = replacement.metadata.name.clone().unwrap();
    assert!(is_initialized(&replacement));
    let candidate = world.claim("default-a").await.unwrap();
    assert!(
        candidate.metadata.deletion_timestamp.is_none(),
        "not deleted while it drains"
    );
    assert!(has_disruption_condition(&candidate));
    assert_eq!(
        annotation(&candidate, ANNOTATION_DRAIN_STARTED_AT),
        Some(tainted_at.to_string())
    );
    assert_eq!(
        annotation(&candidate, ANNOTATION_DRAIN_TIMEOUT).as_deref(),
        Some("60s"),
        "two pods of 30 s each"
    );
    let draining = world.events("DisruptionDraining");
    assert_eq!(draining.len(), 1);
    assert_eq!(draining[0].fields["timeout"], "60s");
    let evicted = world.events("PodEvicted");
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert_eq!(evicted[0].fields["pod"], "default/api");
    assert_eq!(evicted[0].fields["nodeClaim"], "default-a");
    let blocked = world.events("EvictionBlocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0].fields["pod"], "default/web");
    assert_eq!(blocked[0].fields["podDisruptionBudget"], "default/web-pdb");

    // Held until the drain timeout: the sum of the pods' grace periods.
    let deadline = tainted_at
        .checked_add(jiff::SignedDuration::from_secs(60))
        .unwrap();
    while world.now() < deadline {
        world.tick(secs(5)).await;
        if world.now() < deadline {
            assert!(
                world.events("DisruptionAbandoned").is_empty(),
                "at {}",
                world.now()
            );
        }
    }
    assert!(world.node_tainted("node-a").await);
    assert!(world.events("DisruptionAbandoned").is_empty());
    assert_eq!(
        world.events("EvictionBlocked").len(),
        1,
        "repeated blocks are not recorded again within the window"
    );

    world.tick(secs(5)).await;

    let abandoned = world.events("DisruptionAbandoned");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    let why = &abandoned[0].fields["reason"];
    assert!(why.starts_with("drain timed out"), "{why}");
    for expected in ["default-a", "1m", "default/web", "default/web-pdb"] {
        assert!(why.contains(expected), "{expected:?} in {why}");
    }
    assert!(!world.node_tainted("node-a").await, "the taint is removed");
    let candidate = world.claim("default-a").await.unwrap();
    assert!(
        candidate.metadata.deletion_timestamp.is_none(),
        "not deleted"
    );
    assert!(!has_disruption_condition(&candidate));
    assert_eq!(annotation(&candidate, ANNOTATION_DRAIN_STARTED_AT), None);
    let kept = world.claim(&replacement_name).await.unwrap();
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "the initialized replacement stays: it runs the evicted pod"
    );
    assert_eq!(annotation(&kept, ANNOTATION_REPLACES), None);

    // The node explains itself while it waits for the retry.
    world.tick(secs(5)).await;
    let explained = world.events("DisruptionBlocked");
    let explained: Vec<&Event> = explained
        .iter()
        .filter(|e| e.object.name == "node-a")
        .collect();
    assert_eq!(explained.len(), 1, "{explained:?}");
    assert!(
        explained[0].message.contains("drain timed out")
            && explained[0].message.contains("default/web-pdb"),
        "{}",
        explained[0].message
    );
    assert_eq!(world.events("DisruptionStarted").len(), 1, "held back");

    // Once the budget allows it, the node goes.
    world
        .cluster
        .merge_patch::<PodDisruptionBudget>(
            Some("default"),
            "web-pdb",
            &json!({ "spec": { "maxUnavailable": 1 } }),
        )
        .await
        .unwrap();
    world.ticks(40, secs(5)).await;

    assert!(
        world.claim("default-a").await.is_none(),
        "replaced on retry"
    );
    assert!(!names(&world.nodes().await).contains("node-a"));
    assert_eq!(world.events("DisruptionStarted").len(), 2);
    let pods = world.pods().await;
    assert_eq!(pods.len(), 2, "no pod lost");
    assert!(
        pods.iter()
            .all(|pod| pod.spec.as_ref().unwrap().node_name.is_some())
    );
}

/// Whether node `name` carries `node.kubernetes.io/exclude-from-external-load-balancers` as core
/// writes it.
async fn excluded_from_load_balancers(world: &World, name: &str) -> bool {
    world
        .cluster
        .get::<Node>(None, name)
        .await
        .unwrap()
        .and_then(|node| node.metadata.labels)
        .is_some_and(|labels| {
            labels
                .get("node.kubernetes.io/exclude-from-external-load-balancers")
                .is_some_and(|value| value == "karpenter")
        })
}

/// The disruption route drains through the same path as termination (whose label
/// `controllers_termination`'s `given_a_deleted_node_claim_then_its_node_is_tainted_and_drained_tier_by_tier`
/// checks): a node
/// drained for drift stops receiving load-balancer traffic while its pods are evicted, and is
/// given back to the load balancers when the drain is abandoned.
#[tokio::test]
async fn given_a_drifted_node_drained_before_its_deletion_when_it_drains_then_it_is_tainted_and_out_of_load_balancers_until_the_drain_is_abandoned()
 {
    let mut world = World::new(json!({})).await;

    world.drift_into_a_blocked_drain().await;

    assert!(world.node_tainted("node-a").await);
    assert!(
        excluded_from_load_balancers(&world, "node-a").await,
        "labelled in the pass that taints it, before any eviction completes"
    );
    assert_eq!(world.events("PodEvicted").len(), 1);
    assert!(
        !world.claim_deleting("default-a").await,
        "still draining: the disruption controller's drain, not termination's"
    );

    // The PodDisruptionBudget holds `web` past the drain timeout: the command is abandoned
    // and the node goes back into service, taint and label removed.
    for _ in 0..30 {
        if !world.events("DisruptionAbandoned").is_empty() {
            break;
        }
        assert!(excluded_from_load_balancers(&world, "node-a").await);
        world.tick(secs(5)).await;
    }
    assert_eq!(world.events("DisruptionAbandoned").len(), 1);
    assert!(!world.node_tainted("node-a").await);
    assert!(!excluded_from_load_balancers(&world, "node-a").await);
}

#[tokio::test]
async fn given_a_drifted_node_with_a_termination_grace_period_when_its_replacement_is_up_then_it_is_deleted_at_once()
 {
    let mut world = World::new(json!({})).await;
    world
        .node_with_spec(
            "a",
            &[("web", "1"), ("api", "1")],
            drifted(),
            json!({ "terminationGracePeriod": "1h" }),
        )
        .await;
    world.disruption.reconcile().await.unwrap();
    world.cluster.create(&web_pdb(0)).await.unwrap();

    for _ in 0..30 {
        world.tick(secs(5)).await;
        if let Some(node) = world.cluster.get::<Node>(None, "node-a").await.unwrap()
            && is_tainted(&node)
        {
            let claim = world.claim("default-a").await.unwrap();
            assert!(
                claim.metadata.deletion_timestamp.is_some(),
                "tainted and deleted in one pass: termination drains it"
            );
            assert_eq!(annotation(&claim, ANNOTATION_DRAIN_STARTED_AT), None);
        }
    }

    assert!(world.first_disrupted.contains_key("node-a"));
    assert!(world.events("DisruptionDraining").is_empty());
    assert!(world.events("DisruptionAbandoned").is_empty());
    let blocked = world.events("EvictionBlocked");
    assert!(
        blocked.iter().any(|e| e.fields["pod"] == "default/web"),
        "the termination controller drains it: {blocked:?}"
    );
}

#[tokio::test]
async fn given_a_restart_mid_drain_when_a_new_controller_runs_then_the_drain_keeps_its_start_and_timeout()
 {
    let mut world = World::new(json!({})).await;
    let tainted_at = world.drift_into_a_blocked_drain().await;
    let before = world.claim("default-a").await.unwrap();
    let started = annotation(&before, ANNOTATION_DRAIN_STARTED_AT).unwrap();
    assert_eq!(started, tainted_at.to_string());

    world.ticks(6, secs(5)).await;
    world.restart();
    world.ticks(2, secs(5)).await;

    let after = world.claim("default-a").await.unwrap();
    assert_eq!(
        annotation(&after, ANNOTATION_DRAIN_STARTED_AT),
        Some(started),
        "the drain's start survives the restart"
    );
    assert_eq!(
        annotation(&after, ANNOTATION_DRAIN_TIMEOUT).as_deref(),
        Some("60s")
    );
    assert!(
        world.node_tainted("node-a").await,
        "not a stale taint to the new controller"
    );
    assert!(after.metadata.deletion_timestamp.is_none());
    assert!(world.events("DisruptionAbandoned").is_empty());

    // The new controller abandons it at the original deadline, not a new one.
    world.abandons_at_the_original_deadline(tainted_at).await;
}

/// The Pod `default/name`.
async fn pod_named(world: &World, name: &str) -> core_svc::cluster::SlimPod {
    world
        .cluster
        .get::<Pod>(Some("default"), name)
        .await
        .unwrap()
        .unwrap()
        .into()
}

#[tokio::test]
async fn given_a_do_not_disrupt_duration_when_quiet_polls_are_skipped_then_drift_acts_at_the_first_poll_after_it_ends()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("batch", "1")], drifted()).await;
    world.set_do_not_disrupt("batch", Some("95s")).await;
    let t0 = world.now();
    let until =
        match core_svc::disruption::do_not_disrupt::evaluate(&pod_named(&world, "batch").await, t0)
        {
            core_svc::disruption::DoNotDisrupt::Until { until, .. } => until,
            other => panic!("the pod is protected for 95 s: {other:?}"),
        };

    world.tick(secs(10)).await;
    // Blocked (and reported) at t0: nothing can change before the report's minimum spacing.
    assert_eq!(
        world.disruption.skips_polls_until(),
        Some(t0 + secs(60)),
        "polls are skipped until the first time threshold"
    );
    let mut replaced_at = None;
    for _ in 0..30 {
        world.tick(secs(10)).await;
        if let Some(replacement) = replacements(&world.claims().await).first() {
            replaced_at = replacement
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0);
            break;
        }
    }
    // Polls run every 10 s from t0: the first at or after the protection's end acts.
    let first_poll_after = (0..)
        .map(|n| t0 + secs(10 * n))
        .find(|poll| *poll >= until)
        .unwrap();
    assert_eq!(replaced_at, Some(first_poll_after));
    assert_eq!(
        world.events("DisruptionBlocked").len(),
        1,
        "reported once, as without skipping"
    );
}

#[tokio::test]
async fn given_a_quiet_controller_when_the_cluster_changes_then_the_next_poll_runs_in_full() {
    let world = World::new(json!({ "disruption": {
        "consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s", "budgets": [{ "nodes": "100%" }],
    } }))
    .await;
    // Empty, but not Consolidatable yet: nothing to do.
    world.node("a", &[], json!([])).await;
    world.disruption.reconcile().await.unwrap();
    let quiet = world.disruption.skips_polls_until();
    assert!(
        quiet.is_some_and(|until| until > world.now() + secs(10)),
        "{quiet:?}"
    );

    world.clock.advance(secs(5));
    let claim = world.claim("default-a").await.unwrap();
    let mut conditions = serde_json::to_value(claim.status.unwrap().conditions).unwrap();
    conditions.as_array_mut().unwrap().push(
        json!({ "type": "Consolidatable", "status": "True", "lastTransitionTime": world.now() }),
    );
    world
        .cluster
        .merge_patch_status::<NodeClaim>(
            None,
            "default-a",
            &json!({ "status": { "conditions": conditions } }),
        )
        .await
        .unwrap();
    world.clock.advance(secs(5));
    world.disruption.reconcile().await.unwrap();
    assert_eq!(
        world.disruption.skips_polls_until(),
        None,
        "decided: held for validation"
    );

    world.clock.advance(secs(15));
    world.disruption.reconcile().await.unwrap();
    let started = world.events("DisruptionStarted");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].fields["reason"], "Empty");
}

impl World {
    /// Ticks of 5 s past the 60 s drain timeout of the drain tainted at `tainted_at` (the one
    /// [`World::drift_into_a_blocked_drain`] starts): the command is abandoned once, the node
    /// untainted, and the drain was never started again.
    async fn abandons_at_the_original_deadline(&mut self, tainted_at: Timestamp) {
        let deadline = tainted_at
            .checked_add(jiff::SignedDuration::from_secs(60))
            .unwrap();
        while self.now() <= deadline {
            self.tick(secs(5)).await;
        }
        assert_eq!(self.events("DisruptionAbandoned").len(), 1);
        assert!(!self.node_tainted("node-a").await);
        assert_eq!(self.events("DisruptionDraining").len(), 1, "not restarted");
    }

    /// Rewrites every command annotation on NodeClaims and Nodes under the name the previous
    /// version wrote, as a cluster that version left mid-command would be; answers how many
    /// objects carried one.
    async fn written_by_the_previous_version(&self) -> usize {
        self.rename_back(&self.claims().await).await + self.rename_back(&self.nodes().await).await
    }

    /// Puts the command annotations of `objects` back under their old names; how many objects
    /// carried one.
    async fn rename_back<K: ClusterObject>(&self, objects: &[K]) -> usize {
        let mut renamed = 0;
        for object in objects {
            let annotations = object.meta().annotations.as_ref();
            let mut patch = serde_json::Map::new();
            for (new, old) in COMMAND_ANNOTATIONS.iter().zip(LEGACY_COMMAND_ANNOTATIONS) {
                if let Some(value) = annotations.and_then(|a| a.get(*new)) {
                    patch.insert((*new).to_owned(), Value::Null);
                    patch.insert(old.to_owned(), Value::String(value.clone()));
                }
            }
            if patch.is_empty() {
                continue;
            }
            let name = object.meta().name.as_deref().unwrap();
            let patch = json!({ "metadata": { "annotations": patch } });
            self.cluster
                .merge_patch::<K>(None, name, &patch)
                .await
                .unwrap();
            renamed += 1;
        }
        renamed
    }

    /// The legacy command annotation keys left on any NodeClaim or Node.
    async fn legacy_annotations_left(&self) -> Vec<String> {
        let claims = self.claims().await;
        let nodes = self.nodes().await;
        claims
            .iter()
            .map(|claim| &claim.metadata)
            .chain(nodes.iter().map(|node| &node.metadata))
            .flat_map(|meta| meta.annotations.iter().flatten())
            .filter(|(key, _)| LEGACY_COMMAND_ANNOTATIONS.contains(&key.as_str()))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

#[tokio::test]
async fn given_a_command_the_previous_version_started_when_the_new_controller_runs_then_it_completes_without_stale_taints_or_orphans()
 {
    let mut world = World::new(json!({})).await;
    world.node("a", &[("web", "3")], drifted()).await;
    world.node("b", &[("api", "3")], json!([])).await;
    world.disruption.reconcile().await.unwrap();
    assert_eq!(replacements(&world.claims().await).len(), 1);
    assert!(
        world.written_by_the_previous_version().await >= 2,
        "the candidate and its replacement carry the command"
    );

    world.restart();
    world.disruption.reconcile().await.unwrap();
    assert_eq!(
        world.legacy_annotations_left().await,
        Vec::<String>::new(),
        "one pass moves every old name"
    );
    let candidate = world.claim("default-a").await.unwrap();
    assert!(
        annotation(
            &candidate,
            core_svc::controllers::disruption::annotations::ANNOTATION_COMMAND
        )
        .is_some(),
        "under its new name"
    );
    world.ticks(30, secs(5)).await;

    world
        .node_a_was_replaced_without_stale_taints_or_orphans()
        .await;
    for claim in &world.claims().await {
        assert_eq!(
            disruption_annotations(claim.metadata.annotations.as_ref()),
            Vec::<String>::new(),
            "the finished command leaves nothing on {:?}",
            claim.metadata.name
        );
    }
    for node in world.nodes().await {
        assert_eq!(
            disruption_annotations(node.metadata.annotations.as_ref()),
            Vec::<String>::new(),
            "nor on {:?}",
            node.metadata.name
        );
    }
}

#[tokio::test]
async fn given_a_drain_the_previous_version_started_when_the_new_controller_runs_then_it_keeps_its_start_and_timeout()
 {
    let mut world = World::new(json!({})).await;
    let tainted_at = world.drift_into_a_blocked_drain().await;
    world.ticks(2, secs(5)).await;
    world.written_by_the_previous_version().await;
    let before = world.claim("default-a").await.unwrap();
    assert_eq!(annotation(&before, ANNOTATION_DRAIN_STARTED_AT), None);

    world.restart();
    world.ticks(2, secs(5)).await;

    let after = world.claim("default-a").await.unwrap();
    assert_eq!(
        annotation(&after, ANNOTATION_DRAIN_STARTED_AT),
        Some(tainted_at.to_string()),
        "the drain's start survives, under its new name"
    );
    assert_eq!(
        annotation(&after, ANNOTATION_DRAIN_TIMEOUT).as_deref(),
        Some("60s")
    );
    assert_eq!(world.legacy_annotations_left().await, Vec::<String>::new());
    assert!(
        world.node_tainted("node-a").await,
        "not a stale taint to the new controller"
    );
    assert!(world.events("DisruptionAbandoned").is_empty());

    // Abandoned at the deadline the previous version set, then nothing is left behind.
    world.abandons_at_the_original_deadline(tainted_at).await;
    let candidate = world.claim("default-a").await.unwrap();
    assert_eq!(
        disruption_annotations(candidate.metadata.annotations.as_ref()),
        Vec::<String>::new()
    );
}
