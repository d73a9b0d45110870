//! Consolidation on the in-memory cluster, the fake cloud and a fake clock: the `Consolidatable`
//! condition controller, multi-node and single-node consolidation deciding on real scheduling
//! simulations, and the 15 s validation of their commands.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use core_domain::instance_type::InstanceType;
use core_domain::labels::LabelPolicy;
use core_domain::scheduler::PreferencePolicy;
use core_svc::apis::nodeclaim::CONDITION_CONSOLIDATABLE;
use core_svc::apis::{DisruptionReason, NodeClaim, NodePool, condition};
use core_svc::clock::{Clock, FakeClock};
use core_svc::cloudprovider::FakeCloudProvider;
use core_svc::cloudprovider::fake;
use core_svc::cluster::{Cluster, ClusterExt, DeleteOptions, InMemoryCluster};
use core_svc::controllers::consolidatable::ConsolidatableController;
use core_svc::controllers::disruption::consolidation::{ConsolidationOptions, option_names};
use core_svc::controllers::disruption::multi::MultiNodeConsolidation;
use core_svc::controllers::disruption::simulate::{SimulationSources, Simulator};
use core_svc::controllers::disruption::single::SingleNodeConsolidation;
use core_svc::controllers::disruption::{
    Command, Method, MethodInput, MethodOutcome, Rejected, RejectionKind,
};
use core_svc::controllers::provisioning::input::Catalogue;
use core_svc::controllers::{Context, Controller, Requeue, Settings};
use core_svc::disruption::budgets::budget_mapping;
use core_svc::disruption::{CandidateSelector, DisruptionClass, Observed};
use core_svc::events::MemoryEvents;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

mod common;

use common::Harness;

const POOL: &str = "default";
const ZONE: &str = "test-zone-1";

/// `small` (2 CPU, 2 GiB: 0.4 on-demand, 0.28 spot), `medium` (4, 4: 0.8 / 0.56) and `large`
/// (8, 8: 1.6 / 1.12), 110 pods each.
fn catalogue() -> Vec<Arc<InstanceType>> {
    [("small", 2), ("medium", 4), ("large", 8)]
        .into_iter()
        .map(|(name, size)| Arc::new(fake::instance_type(name, size, size, 110, "amd64")))
        .collect()
}

/// 20 spot types cheaper than `large` as spot (sized like `large`, so any of them holds what
/// `large` holds), priced 0.10, 0.11, ...
fn cheap_spot_types(count: usize) -> Vec<Arc<InstanceType>> {
    (0..count)
        .map(|i| {
            let base = fake::instance_type(&format!("cheap-{i:02}"), 8, 8, 110, "amd64");
            let offerings = base
                .offerings()
                .iter()
                .cloned()
                .map(|mut offering| {
                    offering.price = 0.10 + 0.01 * i as f64;
                    offering
                })
                .collect();
            Arc::new(InstanceType::new(
                base.name(),
                base.requirements().clone(),
                offerings,
                base.capacity().clone(),
                base.overhead().clone(),
            ))
        })
        .collect()
}

struct World {
    cluster: Arc<InMemoryCluster>,
    clock: FakeClock,
    #[allow(dead_code, reason = "kept for the end-to-end tests' event checks")]
    events: Arc<MemoryEvents>,
    consolidatable: ConsolidatableController<InMemoryCluster, FakeCloudProvider>,
    catalogue: Vec<Arc<InstanceType>>,
}

impl World {
    /// A NodePool `default` with `disruption` (merged over `consolidateAfter: 0s`, budgets of
    /// 100 %) and capacity type `capacity_types`, over `catalogue`.
    async fn new(
        disruption: Value,
        capacity_types: &[&str],
        catalogue: Vec<Arc<InstanceType>>,
    ) -> Self {
        let harness = Harness::new();
        harness.cloud.set_instance_types(catalogue.clone());
        let context: Context<InMemoryCluster, FakeCloudProvider> = harness.context();
        let Harness {
            cluster,
            clock,
            events,
            ..
        } = harness;
        cluster
            .create_node_class(&common::node_class("default", json!({ "spec": {} })))
            .await
            .unwrap();
        let disruption = common::merged(
            json!({ "consolidateAfter": "0s", "budgets": [{ "nodes": "100%" }] }),
            disruption,
        );
        let pool = common::node_pool(
            POOL,
            json!({ "spec": {
                "disruption": disruption,
                "template": { "spec": { "requirements": [{
                    "key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types,
                }] } },
            } }),
        );
        cluster.create(&pool).await.unwrap();
        Self {
            consolidatable: ConsolidatableController::new(context),
            cluster,
            clock,
            events,
            catalogue,
        }
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// An initialized node `name` of `instance_type` and `capacity_type` in [`ZONE`], with its
    /// NodeClaim, as the lifecycle controller leaves them.
    async fn add_node(&self, name: &str, instance_type: &str, capacity_type: &str) {
        let size: i64 = match instance_type {
            "small" => 2,
            "medium" => 4,
            _ => 8,
        };
        let labels = json!({
            "karpenter.sh/nodepool": POOL,
            "node.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/zone": ZONE,
            "karpenter.sh/capacity-type": capacity_type,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        });
        let provider_id = format!("fake:///{ZONE}/{name}");
        let allocatable = json!({
            "cpu": format!("{}m", size * 1000 - 100),
            "memory": format!("{}Mi", size * 1024 - 10),
            "pods": "110",
        });
        let claim = common::node_claim(name, json!({ "metadata": { "labels": labels } }));
        self.cluster.create(&claim).await.unwrap();
        let now = self.now().to_string();
        let condition = |type_: &str| json!({ "type": type_, "status": "True", "reason": type_, "lastTransitionTime": now });
        self.cluster
            .merge_patch_status::<NodeClaim>(
                None,
                name,
                &json!({ "status": {
                    "providerID": provider_id,
                    "nodeName": name,
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")],
                } }),
            )
            .await
            .unwrap();
        let mut node_labels = labels.clone();
        node_labels["karpenter.sh/initialized"] = json!("true");
        node_labels["karpenter.sh/registered"] = json!("true");
        node_labels["kubernetes.io/hostname"] = json!(name);
        let node = common::node(
            name,
            json!({
                "metadata": { "labels": node_labels },
                "spec": { "providerID": provider_id },
            }),
        );
        self.cluster.create(&node).await.unwrap();
        self.cluster
            .merge_patch_status::<Node>(
                None,
                name,
                &json!({ "status": {
                    "allocatable": allocatable,
                    "capacity": allocatable,
                    "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": now }],
                } }),
            )
            .await
            .unwrap();
    }

    /// A running pod of the deployment `app` on `node`, requesting `cpu`.
    async fn add_pod(&self, name: &str, node: &str, cpu: &str) {
        let pod = common::replica_set_pod(
            "default",
            name,
            "app",
            json!({ "spec": { "containers": [{
                "name": "app", "image": "nginx", "resources": { "requests": { "cpu": cpu } },
            }] } }),
        );
        self.cluster.create(&pod).await.unwrap();
        self.cluster.bind_pod("default", name, node).unwrap();
        self.cluster.set_pod_ready("default", name, true).unwrap();
    }

    /// The deployment scaled down: the pod is gone.
    async fn remove_pod(&self, name: &str) {
        self.cluster
            .delete::<k8s_openapi::api::core::v1::Pod>(
                Some("default"),
                name,
                DeleteOptions::grace_period(0),
            )
            .await
            .unwrap();
    }

    async fn node_claim(&self, name: &str) -> NodeClaim {
        self.cluster
            .get::<NodeClaim>(None, name)
            .await
            .unwrap()
            .unwrap()
    }

    async fn is_consolidatable(&self, name: &str) -> bool {
        let claim = self.node_claim(name).await;
        condition::is_true(
            &claim.status.unwrap_or_default().conditions,
            CONDITION_CONSOLIDATABLE,
        )
    }

    /// A world of `capacity_type` with one consolidatable node `a` of `size`, running the pod
    /// `p1` (1 CPU).
    async fn one_busy_node(
        capacity_type: &str,
        catalogue: Vec<Arc<InstanceType>>,
        size: &str,
    ) -> Self {
        let world = World::new(json!({}), &[capacity_type], catalogue).await;
        world.add_node("a", size, capacity_type).await;
        world.add_pod("p1", "a", "1").await;
        world.mark_consolidatable().await;
        world
    }

    async fn mark_consolidatable(&self) -> Requeue {
        self.consolidatable.reconcile().await.unwrap()
    }

    /// Runs `body` on a method input built from the cluster now, as the disruption controller
    /// builds it.
    async fn with_input<R>(&self, body: impl FnOnce(&MethodInput<'_>) -> R) -> R {
        let snapshot = self.cluster.snapshot().await.unwrap();
        let now = self.now();
        let nominated = BTreeSet::new();
        let selector = CandidateSelector::new(&snapshot, now, &nominated);
        let candidates = selector.candidates(DisruptionClass::Graceful);
        let budgets = budget_mapping(&snapshot, DisruptionReason::Underutilized, now);
        let catalogue: Catalogue = self.catalogue.clone().into();
        let pool: &NodePool = snapshot.node_pool(POOL).unwrap();
        let node_pools = vec![(pool, catalogue.clone())];
        let catalogues = HashMap::from([(POOL.to_owned(), catalogue)]);
        let label_policy = LabelPolicy::core();
        let leaving = BTreeSet::new();
        let simulator = Simulator::new(SimulationSources {
            snapshot: &snapshot,
            node_pools: &node_pools,
            catalogues: &catalogues,
            label_policy: &label_policy,
            preference_policy: PreferencePolicy::Respect,
            leaving: &leaving,
            memo: None,
            now,
        });
        let settings = Settings::default();
        let input = MethodInput {
            snapshot: &snapshot,
            now,
            candidates: &candidates,
            budgets: &budgets,
            simulator: &simulator,
            catalogues: &catalogues,
            settings: &settings,
        };
        body(&input)
    }

    async fn decide(&self, method: &dyn Method) -> MethodOutcome {
        self.with_input(|input| method.compute(input)).await
    }

    async fn validate(&self, method: &dyn Method, command: &Command) -> Result<Command, Rejected> {
        self.with_input(|input| method.validate(command, input))
            .await
    }
}

fn multi() -> MultiNodeConsolidation {
    MultiNodeConsolidation::new(ConsolidationOptions::default())
}

fn single() -> SingleNodeConsolidation {
    SingleNodeConsolidation::new(ConsolidationOptions::default())
}

fn spot_to_spot() -> SingleNodeConsolidation {
    SingleNodeConsolidation::new(ConsolidationOptions { spot_to_spot: true })
}

fn only_command(outcome: &MethodOutcome) -> &Command {
    assert_eq!(outcome.commands.len(), 1, "{outcome:#?}");
    assert!(outcome.needs_validation);
    &outcome.commands[0]
}

/// Asserts that a reason observed about `node` contains `text`.
#[track_caller]
fn assert_observed(outcome: &MethodOutcome, node: &str, text: &str) {
    let reasons = observed_reasons(outcome, node);
    assert!(
        reasons.iter().any(|r| r.contains(text)),
        "no reason observed about {node} contains {text:?}: {reasons:?}"
    );
}

fn observed_reasons(outcome: &MethodOutcome, node: &str) -> Vec<String> {
    outcome
        .observations
        .iter()
        .filter(|observation| observation.node == node)
        .map(|observation| match &observation.what {
            Observed::Other { reason } | Observed::ReplacementFailed { reason } => reason.clone(),
            Observed::PodsWouldNotSchedule { pods, reason } => {
                format!("{}: {reason}", pods.join(","))
            }
        })
        .collect()
}

// ----- the Consolidatable condition -----

#[tokio::test]
async fn given_consolidate_after_when_it_has_not_elapsed_then_the_node_is_not_consolidatable() {
    let world = World::new(
        json!({ "consolidateAfter": "10m" }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    world.add_node("a", "medium", "on-demand").await;
    world.add_pod("p1", "a", "1").await;

    let requeue = world.mark_consolidatable().await;
    assert!(!world.is_consolidatable("a").await);
    assert_eq!(
        requeue,
        Requeue::After(Duration::from_secs(600)),
        "exactly when it becomes so"
    );
    assert!(world.decide(&single()).await.commands.is_empty());

    world.clock.advance(Duration::from_secs(599));
    world.mark_consolidatable().await;
    assert!(!world.is_consolidatable("a").await);

    world.clock.advance(Duration::from_secs(1));
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);
}

#[tokio::test]
async fn given_a_consolidatable_node_when_a_pod_lands_on_it_then_consolidate_after_starts_again() {
    let world = World::new(
        json!({ "consolidateAfter": "1m" }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    world.add_node("a", "medium", "on-demand").await;
    world.clock.advance(Duration::from_secs(60));
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);

    world.clock.advance(Duration::from_secs(30));
    let event_at = world.now();
    world.add_pod("p1", "a", "1").await;
    let requeue = world.mark_consolidatable().await;
    let claim = world.node_claim("a").await;
    assert_eq!(
        claim
            .status
            .as_ref()
            .unwrap()
            .last_pod_event_time
            .as_ref()
            .map(|t| t.0),
        Some(event_at)
    );
    assert!(!world.is_consolidatable("a").await);
    assert_eq!(requeue, Requeue::After(Duration::from_secs(60)));

    world.clock.advance(Duration::from_secs(60));
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);
}

#[tokio::test]
async fn given_a_restart_then_the_first_pass_records_no_pod_event() {
    let world = World::new(
        json!({ "consolidateAfter": "1m" }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    world.add_node("a", "medium", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.clock.advance(Duration::from_secs(120));

    // A controller that has never seen the node (core just started) sees its pods as they are.
    world.mark_consolidatable().await;
    let claim = world.node_claim("a").await;
    assert_eq!(claim.status.as_ref().unwrap().last_pod_event_time, None);
    assert!(
        world.is_consolidatable("a").await,
        "two minutes after initialization"
    );
}

#[tokio::test]
async fn given_consolidate_after_never_then_the_condition_is_removed() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    world.add_node("a", "medium", "on-demand").await;
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);

    world
        .cluster
        .merge_patch::<NodePool>(
            None,
            POOL,
            &json!({ "spec": { "disruption": { "consolidateAfter": "Never" } } }),
        )
        .await
        .unwrap();
    let requeue = world.mark_consolidatable().await;
    assert!(!world.is_consolidatable("a").await);
    assert_eq!(requeue, Requeue::OnChange);
}

// ----- deciding -----

#[tokio::test]
async fn given_a_scaled_down_deployment_when_pods_fit_elsewhere_then_nodes_are_deleted() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    for node in ["a", "b", "c"] {
        world.add_node(node, "medium", "on-demand").await;
    }
    for (pod, node) in [
        ("p1", "a"),
        ("p2", "a"),
        ("p3", "b"),
        ("p4", "b"),
        ("p5", "c"),
        ("p6", "c"),
    ] {
        world.add_pod(pod, node, "1").await;
    }
    world.mark_consolidatable().await;
    assert!(
        world.decide(&multi()).await.commands.is_empty(),
        "6 CPU on three 3.9 CPU nodes: nothing to remove"
    );

    // The deployment scales down to 3 replicas.
    for pod in ["p2", "p4", "p6"] {
        world.remove_pod(pod).await;
    }
    world.mark_consolidatable().await;
    let outcome = world.decide(&multi()).await;
    let command = only_command(&outcome);
    assert_eq!(command.reason, DisruptionReason::Underutilized);
    assert_eq!(
        command.candidates,
        ["a", "b"],
        "two of three go, ties by name"
    );
    assert!(
        command.replacements.is_empty(),
        "a delete: the pods fit on c"
    );
}

#[tokio::test]
async fn given_one_node_whose_pods_fit_on_another_then_single_node_consolidation_deletes_it() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    world.add_node("a", "medium", "on-demand").await;
    world.add_node("b", "medium", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.add_pod("p2", "b", "2").await;
    world.mark_consolidatable().await;

    let outcome = world.decide(&single()).await;
    let command = only_command(&outcome);
    assert_eq!(command.candidates, ["a"]);
    assert!(command.replacements.is_empty());
}

#[tokio::test]
async fn given_a_node_replaceable_by_a_strictly_cheaper_one_then_it_is_replaced() {
    let world = World::one_busy_node("on-demand", catalogue(), "large").await;

    let outcome = world.decide(&single()).await;
    let command = only_command(&outcome);
    assert_eq!(command.candidates, ["a"]);
    let [replacement] = command.replacements.as_slice() else {
        panic!("one replacement: {command:?}");
    };
    assert_eq!(
        option_names(replacement),
        ["small", "medium"],
        "only types cheaper than large (1.6), cheapest first"
    );
}

/// Upstream v1.14 (kubernetes-sigs/karpenter#3006, `consolidation_test.go` "should not
/// consolidate pods onto a destination node that is under its consolidateAfter window"): the
/// only way to consolidate `a` (the cheapest type, nothing cheaper replaces it) is to move its
/// pod to `b`, which just received a pod; that waits until `b`'s `consolidateAfter` has passed.
#[tokio::test]
async fn given_a_destination_within_its_consolidate_after_then_no_pod_moves_there_until_it_passes()
{
    let world = World::new(
        json!({ "consolidateAfter": "1m" }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    world.add_node("a", "small", "on-demand").await;
    world.add_node("b", "small", "on-demand").await;
    world.add_pod("p1", "a", "500m").await;
    world.add_pod("p2", "b", "500m").await;
    world.clock.advance(Duration::from_secs(60));
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await && world.is_consolidatable("b").await);

    // A pod lands on b: b is within its consolidateAfter again, a is not.
    world.clock.advance(Duration::from_secs(30));
    world.add_pod("p3", "b", "500m").await;
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);
    assert!(!world.is_consolidatable("b").await);

    let outcome = world.decide(&single()).await;
    assert!(outcome.commands.is_empty(), "{outcome:#?}");
    assert!(world.decide(&multi()).await.commands.is_empty());

    // Drift and expiration may still send pods there: only consolidation waits.
    let drift_placements = world
        .with_input(|input| input.simulator.simulate(&["a"]).placements)
        .await;
    assert_eq!(
        drift_placements,
        [("default/p1".to_owned(), "b".to_owned())]
    );

    // Once b's window has passed, a's pod moves there and a is deleted.
    world.clock.advance(Duration::from_secs(60));
    world.mark_consolidatable().await;
    let outcome = world.decide(&single()).await;
    let command = only_command(&outcome);
    assert_eq!(command.candidates, ["a"]);
    assert!(
        command.replacements.is_empty(),
        "a delete: the pod fits on b"
    );
}

#[tokio::test]
async fn given_nothing_cheaper_then_no_replacement_and_the_reason_is_observed() {
    let world = World::one_busy_node("on-demand", catalogue(), "small").await;

    let outcome = world.decide(&single()).await;
    assert!(outcome.commands.is_empty(), "{outcome:#?}");
    assert_observed(&outcome, "a", "can't replace with a cheaper node");
    assert!(world.decide(&multi()).await.commands.is_empty());
}

#[tokio::test]
async fn given_pods_that_fit_nowhere_then_no_command_and_the_pods_are_named() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    world.add_node("a", "large", "on-demand").await;
    // Only a large holds 7 CPU, and the NodePool's CPU limit leaves no room for a second one.
    world.add_pod("huge", "a", "7").await;
    world
        .cluster
        .merge_patch::<NodePool>(None, POOL, &json!({ "spec": { "limits": { "cpu": "8" } } }))
        .await
        .unwrap();
    world.mark_consolidatable().await;

    let outcome = world.decide(&single()).await;
    assert!(outcome.commands.is_empty(), "{outcome:#?}");
    let reasons = observed_reasons(&outcome, "a");
    assert!(
        reasons.iter().any(|r| r.starts_with("default/huge")),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn given_when_empty_then_nodes_with_pods_are_never_consolidated() {
    let world = World::new(
        json!({ "consolidationPolicy": "WhenEmpty" }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    world.add_node("a", "large", "on-demand").await;
    world.add_node("b", "large", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.add_pod("p2", "b", "1").await;
    world.mark_consolidatable().await;
    assert!(world.is_consolidatable("a").await);

    assert!(world.decide(&multi()).await.commands.is_empty());
    assert!(world.decide(&single()).await.commands.is_empty());
}

#[tokio::test]
async fn given_empty_nodes_then_consolidation_leaves_them_to_emptiness() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    world.add_node("a", "large", "on-demand").await;
    world.add_node("b", "large", "on-demand").await;
    world.mark_consolidatable().await;
    assert!(world.decide(&multi()).await.commands.is_empty());
    assert!(world.decide(&single()).await.commands.is_empty());
}

/// Eight medium nodes with one 1-CPU pod each: every node has room for two more pods.
async fn eight_nodes_one_pod_each(world: &World) {
    for i in 0..8 {
        let node = format!("n{i}");
        world.add_node(&node, "medium", "on-demand").await;
        world.add_pod(&format!("p{i}"), &node, "1").await;
    }
    world.mark_consolidatable().await;
}

#[tokio::test]
async fn given_many_underutilized_nodes_then_multi_node_deletes_the_largest_prefix() {
    let small_and_medium = catalogue().into_iter().take(2).collect();
    let world = World::new(json!({}), &["on-demand"], small_and_medium).await;
    eight_nodes_one_pod_each(&world).await;

    let outcome = world.decide(&multi()).await;
    let command = only_command(&outcome);
    // Deleting k nodes moves k pods onto the 8 - k others, two each: k <= 5. Six or seven
    // would need one new medium (no cheaper than the mediums removed) or two.
    assert_eq!(command.candidates, ["n0", "n1", "n2", "n3", "n4"]);
    assert!(command.replacements.is_empty(), "{command:?}");
}

#[tokio::test]
async fn given_many_underutilized_nodes_then_multi_node_replaces_the_largest_prefix() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    eight_nodes_one_pod_each(&world).await;

    let outcome = world.decide(&multi()).await;
    let command = only_command(&outcome);
    // Seven go: two of their pods fit on n7, the other five on one new large node (7 pods),
    // 1.6 against 7 x 0.8. All eight would need two new nodes.
    assert_eq!(
        command.candidates,
        ["n0", "n1", "n2", "n3", "n4", "n5", "n6"]
    );
    let [replacement] = command.replacements.as_slice() else {
        panic!("{command:?}");
    };
    assert_eq!(option_names(replacement), ["large"]);
}

#[tokio::test]
async fn given_budgets_then_multi_node_takes_only_what_they_allow() {
    let world = World::new(
        json!({ "budgets": [{ "nodes": "2" }] }),
        &["on-demand"],
        catalogue(),
    )
    .await;
    for i in 0..8 {
        let node = format!("n{i}");
        world.add_node(&node, "medium", "on-demand").await;
        world.add_pod(&format!("p{i}"), &node, "1").await;
    }
    world.mark_consolidatable().await;

    let outcome = world.decide(&multi()).await;
    assert_eq!(only_command(&outcome).candidates, ["n0", "n1"]);
}

#[tokio::test]
async fn given_spot_nodes_then_spot_to_spot_is_off_by_default() {
    let mut types = catalogue();
    types.extend(cheap_spot_types(20));
    let world = World::one_busy_node("spot", types, "large").await;

    let outcome = world.decide(&single()).await;
    assert!(outcome.commands.is_empty(), "{outcome:#?}");
    assert_observed(&outcome, "a", "spot-to-spot consolidation is disabled");
}

#[tokio::test]
async fn given_spot_to_spot_then_a_single_node_needs_fifteen_cheaper_types_and_gets_fifteen() {
    // small and medium spot are cheaper than large spot: 2 options only.
    let world = World::one_busy_node("spot", catalogue(), "large").await;
    let outcome = world.decide(&spot_to_spot()).await;
    assert!(outcome.commands.is_empty(), "{outcome:#?}");
    let reasons = observed_reasons(&outcome, "a");
    assert!(
        reasons.iter().any(
            |r| r.contains("requires 15 cheaper instance type options") && r.ends_with("got 2")
        ),
        "{reasons:?}"
    );

    let mut types = catalogue();
    types.extend(cheap_spot_types(20));
    let world = World::one_busy_node("spot", types, "large").await;
    let outcome = world.decide(&spot_to_spot()).await;
    let command = only_command(&outcome);
    let [replacement] = command.replacements.as_slice() else {
        panic!("{command:?}");
    };
    let names = option_names(replacement);
    assert_eq!(names.len(), 15, "{names:?}");
    assert_eq!(names[0], "cheap-00", "the cheapest first");
    let capacity = replacement
        .requirements
        .get("karpenter.sh/capacity-type")
        .unwrap();
    assert_eq!(capacity.values().collect::<Vec<_>>(), ["spot"]);
}

// ----- validation -----

async fn decided_single_delete(world: &World) -> Command {
    world.add_node("a", "medium", "on-demand").await;
    world.add_node("b", "medium", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.add_pod("p2", "b", "2").await;
    world.mark_consolidatable().await;
    let outcome = world.decide(&single()).await;
    only_command(&outcome).clone()
}

#[tokio::test]
async fn given_nothing_changed_in_the_window_then_the_command_validates() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    let command = decided_single_delete(&world).await;
    world.clock.advance(Duration::from_secs(15));
    world.mark_consolidatable().await;
    assert_eq!(world.validate(&single(), &command).await, Ok(command));
}

#[tokio::test]
async fn given_pods_filling_the_target_in_the_window_then_the_command_is_abandoned_for_scheduling()
{
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    let command = decided_single_delete(&world).await;
    world.clock.advance(Duration::from_secs(5));
    world.add_pod("late", "b", "1500m").await;
    world.clock.advance(Duration::from_secs(10));

    let rejected = world.validate(&single(), &command).await.unwrap_err();
    assert_eq!(rejected.kind, RejectionKind::Scheduling, "{rejected}");
}

#[tokio::test]
async fn given_a_pod_landing_on_the_candidate_in_the_window_then_the_command_is_abandoned_for_churn()
 {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    let command = decided_single_delete(&world).await;
    world.clock.advance(Duration::from_secs(5));
    world.add_pod("late", "a", "100m").await;
    world.mark_consolidatable().await;
    world.clock.advance(Duration::from_secs(10));

    let rejected = world.validate(&single(), &command).await.unwrap_err();
    assert_eq!(rejected.kind, RejectionKind::Churn, "{rejected}");
}

#[tokio::test]
async fn given_do_not_disrupt_in_the_window_then_the_command_is_abandoned_for_churn() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    let command = decided_single_delete(&world).await;
    world
        .cluster
        .merge_patch::<Node>(
            None,
            "a",
            &json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        )
        .await
        .unwrap();
    world.clock.advance(Duration::from_secs(15));

    let rejected = world.validate(&single(), &command).await.unwrap_err();
    assert_eq!(rejected.kind, RejectionKind::Churn, "{rejected}");
}

#[tokio::test]
async fn given_a_budget_closing_in_the_window_then_the_command_is_abandoned_for_budget() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    let command = decided_single_delete(&world).await;
    world
        .cluster
        .merge_patch::<NodePool>(
            None,
            POOL,
            &json!({ "spec": { "disruption": { "budgets": [{ "nodes": "0" }] } } }),
        )
        .await
        .unwrap();
    world.clock.advance(Duration::from_secs(15));

    let rejected = world.validate(&single(), &command).await.unwrap_err();
    assert_eq!(rejected.kind, RejectionKind::Budget, "{rejected}");
}

#[tokio::test]
async fn given_a_replacement_whose_types_are_no_longer_offered_then_it_is_abandoned_for_scheduling()
{
    let world = World::one_busy_node("on-demand", catalogue(), "large").await;
    let outcome = world.decide(&single()).await;
    let command = only_command(&outcome).clone();

    // The pod grows out of `small` (the replacement's cheapest option) meanwhile.
    world.remove_pod("p1").await;
    world.add_pod("p1", "a", "3").await;
    world.clock.advance(Duration::from_secs(15));
    let rejected = world.validate(&single(), &command).await.unwrap_err();
    assert_eq!(rejected.kind, RejectionKind::Scheduling, "{rejected}");
    assert!(rejected.message.contains("small"), "{rejected}");
}

#[tokio::test]
async fn given_an_unconsolidatable_first_candidate_then_single_node_tries_the_next() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    // b saves the most per pod moved (1.6) and goes first, but its 6-CPU pod needs a large
    // again; a's pod fits on b.
    world.add_node("a", "medium", "on-demand").await;
    world.add_node("b", "large", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.add_pod("big", "b", "6").await;
    world.mark_consolidatable().await;

    let outcome = world.decide(&single()).await;
    let command = only_command(&outcome);
    assert_eq!(command.candidates, ["a"]);
    assert!(command.replacements.is_empty());
    assert_observed(&outcome, "b", "can't replace with a cheaper node");
}

#[tokio::test]
async fn given_a_work_limit_then_single_node_takes_turns_across_passes() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    // Three small nodes, each full enough that its pod fits nowhere else, none cheaper.
    for node in ["a", "b", "c"] {
        world.add_node(node, "small", "on-demand").await;
        world.add_pod(&format!("{node}-pod"), node, "1").await;
    }
    world.mark_consolidatable().await;
    // One simulation per pass: each costs the 3 nodes of the cluster, its pod, and one.
    let method = single().with_work_limit(5);

    let mut turns = Vec::new();
    for _ in 0..5 {
        let outcome = world.decide(&method).await;
        assert!(outcome.commands.is_empty());
        let tried: Vec<&str> = outcome
            .observations
            .iter()
            .map(|observation| observation.node.as_str())
            .collect();
        turns.push(tried.join(","));
    }
    assert_eq!(turns, ["a", "b", "c", "a", "b"]);
}

#[tokio::test]
async fn a_cluster_with_a_cordoned_target_is_not_a_place_to_go() {
    let world = World::new(json!({}), &["on-demand"], catalogue()).await;
    world.add_node("a", "medium", "on-demand").await;
    world.add_node("b", "medium", "on-demand").await;
    world.add_pod("p1", "a", "1").await;
    world.add_pod("p2", "b", "1").await;
    world.mark_consolidatable().await;
    let node_b: Node = world.cluster.get(None, "b").await.unwrap().unwrap();
    world
        .cluster
        .add_node_taint(
            &node_b,
            &k8s_openapi::api::core::v1::Taint {
                key: "example.com/maintenance".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let outcome = world.decide(&single()).await;
    // a's pod cannot go to b: it is replaced by a cheaper small node instead.
    let command = only_command(&outcome);
    assert_eq!(command.candidates, ["a"]);
    assert_eq!(option_names(&command.replacements[0]), ["small"]);
}

// ----- end to end: the disruption controller with the lifecycle and termination controllers
// and a small kubelet, ReplicaSet controller and kube-scheduler written here -----

mod end_to_end {
    use std::collections::BTreeMap;

    use core_svc::controllers::disruption::DisruptionController;
    use core_svc::controllers::lifecycle::LifecycleController;
    use core_svc::controllers::termination::TerminationController;
    use core_svc::events::Event;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    const FINALIZER: &str = "karpenter.sh/termination";
    const DISRUPTED: &str = "karpenter.sh/disrupted";

    type Ctx = Context<InMemoryCluster, FakeCloudProvider>;

    /// A NodePool `default` (on-demand, `consolidateAfter: 0s`, budgets 100 %) over
    /// [`catalogue`], run by the real controllers.
    pub(super) struct Fleet {
        cluster: Arc<InMemoryCluster>,
        cloud: Arc<FakeCloudProvider>,
        clock: FakeClock,
        events: Arc<MemoryEvents>,
        consolidatable: ConsolidatableController<InMemoryCluster, FakeCloudProvider>,
        disruption: DisruptionController<InMemoryCluster, FakeCloudProvider>,
        lifecycle: LifecycleController<InMemoryCluster, FakeCloudProvider>,
        termination: TerminationController<InMemoryCluster, FakeCloudProvider>,
        /// Each Node's first instant tainted or deleting.
        pub(super) first_disrupted: BTreeMap<String, Timestamp>,
        /// Each NodeClaim's first instant seen initialized.
        pub(super) first_initialized: BTreeMap<String, Timestamp>,
        recreated: usize,
    }

    impl Fleet {
        pub(super) async fn new() -> Self {
            let harness = Harness::new();
            harness.cloud.set_instance_types(catalogue());
            let ctx: Ctx = harness.context();
            let fleet = Self {
                consolidatable: ConsolidatableController::new(ctx.clone()),
                disruption: DisruptionController::new(ctx.clone()),
                lifecycle: LifecycleController::new(ctx.clone()),
                termination: TerminationController::new(ctx),
                cluster: harness.cluster,
                cloud: harness.cloud,
                clock: harness.clock,
                events: harness.events,
                first_disrupted: BTreeMap::new(),
                first_initialized: BTreeMap::new(),
                recreated: 0,
            };
            let node_class = common::node_class("default", json!({}));
            fleet.cluster.create_node_class(&node_class).await.unwrap();
            let reference = serde_json::from_value(
                json!({ "group": "test.karpenter.sh", "kind": "TestNodeClass", "name": "default" }),
            )
            .unwrap();
            fleet
                .cluster
                .merge_patch_node_class_status(
                    &reference,
                    &json!({ "status": { "conditions": [{
                        "type": "Ready", "status": "True", "reason": "Ready",
                        "lastTransitionTime": common::start(),
                    }] } }),
                )
                .await
                .unwrap();
            let pool = common::node_pool(
                POOL,
                json!({ "spec": {
                    "disruption": { "consolidateAfter": "0s", "budgets": [{ "nodes": "100%" }] },
                    "template": { "spec": { "requirements": [{
                        "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"],
                    }] } },
                } }),
            );
            fleet.cluster.create(&pool).await.unwrap();
            fleet
        }

        fn now(&self) -> Timestamp {
            self.clock.now()
        }

        /// A running node `name` of `instance_type` (and its NodeClaim and instance) with
        /// `pods` (name, CPU) bound and Ready.
        pub(super) async fn node(&self, name: &str, instance_type: &str, pods: &[(&str, &str)]) {
            let size: i64 = match instance_type {
                "small" => 2,
                "medium" => 4,
                _ => 8,
            };
            let labels = json!({
                "karpenter.sh/nodepool": POOL,
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": ZONE,
                "karpenter.sh/capacity-type": "on-demand",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
            });
            let provider_id = format!("fake:///{ZONE}/i-{name}");
            let allocatable = allocatable(size);
            let claim = common::node_claim(
                name,
                json!({ "metadata": { "labels": labels, "finalizers": [FINALIZER] } }),
            );
            self.cluster.create(&claim).await.unwrap();
            let condition = |type_: &str| json!({ "type": type_, "status": "True", "reason": type_, "lastTransitionTime": common::start() });
            self.cluster
                .merge_patch_status::<NodeClaim>(
                    None,
                    name,
                    &json!({ "status": {
                        "providerID": provider_id,
                        "nodeName": name,
                        "capacity": allocatable,
                        "allocatable": allocatable,
                        "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")],
                    } }),
                )
                .await
                .unwrap();
            self.cloud
                .insert_instance(common::running_instance(Some(name), &provider_id));
            let mut node_labels = labels.clone();
            node_labels["karpenter.sh/initialized"] = json!("true");
            node_labels["karpenter.sh/registered"] = json!("true");
            node_labels["kubernetes.io/hostname"] = json!(name);
            let node = common::node(
                name,
                json!({
                    "metadata": { "labels": node_labels, "finalizers": [FINALIZER] },
                    "spec": { "providerID": provider_id },
                }),
            );
            self.cluster.create(&node).await.unwrap();
            self.set_ready(name, &allocatable).await;
            for (pod, cpu) in pods {
                self.pod(pod, cpu).await;
                self.cluster.bind_pod("default", pod, name).unwrap();
                self.cluster.set_pod_ready("default", pod, true).unwrap();
            }
        }

        async fn set_ready(&self, node: &str, allocatable: &Value) {
            common::set_node_ready(&self.cluster, node, allocatable).await;
        }

        /// A pending pod `default/name` of the ReplicaSet named before its `-r<n>` suffix.
        pub(super) async fn pod(&self, name: &str, cpu: &str) {
            let replica_set = name.split("-r").next().unwrap_or(name);
            let pod = common::replica_set_pod(
                "default",
                name,
                replica_set,
                json!({ "spec": { "containers": [{
                    "name": "app", "image": "nginx", "resources": { "requests": { "cpu": cpu } },
                }] } }),
            );
            self.cluster.create(&pod).await.unwrap();
        }

        /// The ReplicaSet scaled down: its pod deleted at once.
        pub(super) async fn scale_down(&self, pod: &str) {
            self.cluster
                .delete::<Pod>(Some("default"), pod, DeleteOptions::grace_period(0))
                .await
                .unwrap();
        }

        pub(super) async fn claims(&self) -> Vec<NodeClaim> {
            crate::common::owned(&self.cluster.snapshot().await.unwrap().node_claims)
        }

        pub(super) async fn nodes(&self) -> Vec<Node> {
            crate::common::owned(&self.cluster.snapshot().await.unwrap().nodes)
        }

        pub(super) async fn pods(&self) -> Vec<core_svc::cluster::SlimPod> {
            crate::common::owned(&self.cluster.snapshot().await.unwrap().pods)
        }

        pub(super) fn events(&self, reason: &str) -> Vec<Event> {
            self.events.with_reason(reason)
        }

        /// One pass of each controller in the order the runner would run them after a change,
        /// the kubelet, the ReplicaSets and the scheduler in between; then the clock moves on.
        pub(super) async fn tick(&mut self, step: Duration) {
            self.consolidatable.reconcile().await.unwrap();
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

        pub(super) async fn ticks(&mut self, count: usize, step: Duration) {
            for _ in 0..count {
                self.tick(step).await;
            }
        }

        async fn observe(&mut self) {
            let now = self.now();
            for node in self.nodes().await {
                if is_tainted(&node) || node.metadata.deletion_timestamp.is_some() {
                    let name = node.metadata.name.clone().unwrap();
                    self.first_disrupted.entry(name).or_insert(now);
                }
            }
            for claim in self.claims().await {
                let initialized = claim
                    .status
                    .as_ref()
                    .is_some_and(|status| condition::is_true(&status.conditions, "Initialized"));
                if initialized {
                    let name = claim.metadata.name.clone().unwrap();
                    self.first_initialized.entry(name).or_insert(now);
                }
            }
        }

        /// Joins a Node, Ready at once, for each launched NodeClaim without one.
        async fn kubelet(&self) {
            common::join_launched_nodes(&self.cluster, |claim| {
                serde_json::to_value(&claim.status.as_ref().unwrap().allocatable).unwrap()
            })
            .await;
        }

        /// The kubelet stops every pod being deleted; its ReplicaSet creates a pending one.
        async fn stop_evicted_pods(&mut self) {
            for pod in self.pods().await {
                if pod.metadata.deletion_timestamp.is_none() {
                    continue;
                }
                let name = pod.metadata.name.clone().unwrap();
                self.cluster
                    .finish_pod_termination("default", &name)
                    .unwrap();
                let replica_set = name.split("-r").next().unwrap().to_owned();
                self.recreated += 1;
                let cpu = format!("{}m", common::milli_cpu(&pod));
                self.pod(&format!("{replica_set}-r{}", self.recreated), &cpu)
                    .await;
            }
        }

        /// Binds each pending pod to the first Ready, untainted node (by name) with CPU room.
        async fn schedule(&self) {
            common::schedule_pending(&self.cluster).await;
        }
    }

    fn allocatable(size: i64) -> Value {
        json!({
            "cpu": format!("{}m", size * 1000 - 100),
            "memory": format!("{}Mi", size * 1024 - 10),
            "pods": "110",
        })
    }

    pub(super) fn is_tainted(node: &Node) -> bool {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| t.key == DISRUPTED && t.effect == "NoSchedule")
    }

    fn names<K: kube::Resource>(objects: &[K]) -> Vec<String> {
        objects
            .iter()
            .filter_map(|object| object.meta().name.clone())
            .collect()
    }

    fn node_of(pod: &core_svc::cluster::SlimPod) -> Option<&str> {
        pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref())
    }

    #[tokio::test]
    async fn given_a_deployment_scaled_down_when_consolidation_runs_then_the_pods_end_on_fewer_nodes()
     {
        let mut fleet = Fleet::new().await;
        fleet
            .node("a", "medium", &[("web", "1500m"), ("api", "1500m")])
            .await;
        fleet
            .node("b", "medium", &[("cart", "1500m"), ("auth", "1500m")])
            .await;
        fleet.ticks(6, Duration::from_secs(5)).await;
        assert!(
            fleet.events("DisruptionStarted").is_empty(),
            "6 CPU on two 3.9 CPU nodes: a large would cost as much as both"
        );

        fleet.scale_down("api").await;
        fleet.scale_down("auth").await;
        let scaled_down = fleet.now();
        fleet.ticks(20, Duration::from_secs(5)).await;

        let started = fleet.events("DisruptionStarted");
        assert_eq!(started.len(), 1, "{started:#?}");
        assert_eq!(started[0].fields["reason"], "Underutilized");
        assert_eq!(started[0].fields["candidates"], "a");
        assert_eq!(started[0].fields["replacements"], "0");
        assert_eq!(names(&fleet.claims().await), ["b"]);
        assert_eq!(names(&fleet.nodes().await), ["b"]);
        let pods = fleet.pods().await;
        assert_eq!(pods.len(), 2);
        assert!(
            pods.iter().all(|pod| node_of(pod) == Some("b")),
            "{pods:#?}"
        );
        // Decided on the first pass after the scale-down, started after the validation delay.
        let validated_at = scaled_down + Duration::from_secs(15);
        assert_eq!(started[0].time, validated_at);
        assert!(fleet.first_disrupted["a"] >= validated_at);
    }

    #[tokio::test]
    async fn given_a_node_replaceable_by_a_cheaper_one_then_the_replacement_is_up_before_the_node_goes()
     {
        let mut fleet = Fleet::new().await;
        fleet.node("a", "large", &[("web", "1")]).await;
        fleet.ticks(30, Duration::from_secs(5)).await;

        let started = fleet.events("DisruptionStarted");
        assert_eq!(started.len(), 1, "{started:#?}");
        assert_eq!(started[0].fields["candidates"], "a");
        assert_eq!(started[0].fields["replacements"], "1");
        let claims = fleet.claims().await;
        assert_eq!(
            claims.len(),
            1,
            "only the replacement is left: {:?}",
            names(&claims)
        );
        let replacement = claims[0].metadata.name.clone().unwrap();
        let labels = claims[0].metadata.labels.clone().unwrap();
        assert_eq!(
            labels["node.kubernetes.io/instance-type"], "small",
            "the cheapest option"
        );
        let initialized = fleet.first_initialized[&replacement];
        let disrupted = fleet.first_disrupted["a"];
        assert!(
            initialized <= disrupted,
            "replacement initialized at {initialized}, the node tainted at {disrupted}"
        );
        let pods = fleet.pods().await;
        assert_eq!(pods.len(), 1);
        assert_eq!(
            node_of(&pods[0]),
            Some(format!("node-{replacement}").as_str())
        );
    }

    #[tokio::test]
    async fn given_nothing_cheaper_then_the_node_stays_and_says_why() {
        let mut fleet = Fleet::new().await;
        fleet.node("a", "small", &[("web", "1")]).await;
        fleet.ticks(10, Duration::from_secs(5)).await;

        assert!(fleet.events("DisruptionStarted").is_empty());
        assert_eq!(names(&fleet.claims().await), ["a"]);
        let blocked = fleet.events("DisruptionBlocked");
        assert!(
            blocked
                .iter()
                .any(|e| e.object.name == "a" && e.message.contains("cheaper")),
            "{blocked:#?}"
        );
    }

    #[tokio::test]
    async fn given_a_change_during_the_validation_window_then_the_command_is_abandoned() {
        let mut fleet = Fleet::new().await;
        fleet.node("a", "medium", &[("web", "1")]).await;
        fleet.node("b", "medium", &[("api", "2")]).await;
        // Decided: delete a (its pod fits on b). Held for 15 s.
        fleet.tick(Duration::from_secs(5)).await;
        assert!(
            fleet.events("DisruptionStarted").is_empty(),
            "held for validation"
        );

        // Meanwhile b fills up.
        fleet.pod("batch", "1500m").await;
        fleet.cluster.bind_pod("default", "batch", "b").unwrap();
        fleet
            .cluster
            .set_pod_ready("default", "batch", true)
            .unwrap();
        fleet.ticks(3, Duration::from_secs(5)).await;

        let abandoned = fleet.events("DisruptionAbandoned");
        assert!(!abandoned.is_empty(), "{:#?}", fleet.events.all());
        assert!(
            abandoned[0].fields["reason"].starts_with("scheduling"),
            "{:?}",
            abandoned[0]
        );
        assert!(fleet.events("DisruptionStarted").is_empty());
        assert_eq!(names(&fleet.claims().await), ["a", "b"]);
        assert!(fleet.nodes().await.iter().all(|node| !is_tainted(node)));
    }
}
