//! The hash and drift controllers together, on the in-memory cluster and the fake cloud: what
//! drifts a fleet, what does not, and how a hash version change (our upgrade, or adopting a
//! fleet upstream Karpenter launched) re-stamps NodeClaims instead of rolling them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use core_svc::apis::nodeclaim::{CONDITION_DRIFTED, CONDITION_LAUNCHED};
use core_svc::apis::nodepool::{
    ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION,
};
use core_svc::apis::{
    Condition, ConditionStatus, NodeClaim, NodeClassReference, NodePool, condition,
};
use core_svc::clock::Clock;
use core_svc::cloudprovider::fake::Call;
use core_svc::cloudprovider::{CloudProviderError, DriftReason, FakeCloudProvider, Rpc};
use core_svc::cluster::{Cluster, InMemoryCluster};
use core_svc::controllers::drift::{DriftController, RENEW_SPACING};
use core_svc::controllers::hash::HashController;
use core_svc::controllers::{Controller, Requeue, Settings};
use core_svc::events::EventType;
use serde_json::{Value, json};

mod common;

use common::{Harness, node_class};

const POOL: &str = "default";
/// What upstream Karpenter (v1.x) stamps as its NodePool hash version.
const UPSTREAM_HASH_VERSION: &str = "v3";

struct Env {
    harness: Harness,
    hash: HashController<InMemoryCluster, FakeCloudProvider>,
    drift: DriftController<InMemoryCluster, FakeCloudProvider>,
}

impl std::ops::Deref for Env {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

impl Env {
    async fn new() -> Self {
        let harness = Harness::new();
        let ctx = harness.context();
        harness
            .cluster
            .create_node_class(&node_class("default", json!({ "spec": {} })))
            .await
            .unwrap();
        Self {
            harness,
            hash: HashController::new(ctx.clone()),
            drift: DriftController::new(ctx),
        }
    }

    /// One pass of the hash controller, then one of drift, as the runner would order them
    /// after a change.
    async fn reconcile(&self) -> Requeue {
        self.hash.reconcile().await.unwrap();
        self.drift.reconcile().await.unwrap()
    }

    async fn node_pool(&self) -> NodePool {
        self.cluster
            .get::<NodePool>(None, POOL)
            .await
            .unwrap()
            .unwrap()
    }

    async fn node_claim(&self, name: &str) -> NodeClaim {
        self.cluster
            .get::<NodeClaim>(None, name)
            .await
            .unwrap()
            .unwrap()
    }

    async fn drifted(&self, name: &str) -> Option<Condition> {
        let node_claim = self.node_claim(name).await;
        condition::find(
            &node_claim.status.unwrap_or_default().conditions,
            CONDITION_DRIFTED,
        )
        .cloned()
    }

    async fn patch_node_pool(&self, patch: Value) {
        self.cluster
            .merge_patch::<NodePool>(None, POOL, &patch)
            .await
            .unwrap();
    }

    /// A launched NodeClaim of the NodePool, stamped as the provisioner stamps new ones.
    async fn launch(&self, name: &str, annotations: Value) -> NodeClaim {
        let node_claim = common::node_claim(
            name,
            json!({ "metadata": {
                "labels": {
                    "karpenter.sh/nodepool": POOL,
                    "team": "a",
                    "node.kubernetes.io/instance-type": "default-instance-type",
                    "topology.kubernetes.io/zone": "test-zone-1",
                    "karpenter.sh/capacity-type": "spot",
                },
                "annotations": annotations,
            } }),
        );
        self.cluster.create(&node_claim).await.unwrap();
        let status = json!({ "status": {
            "providerID": provider_id(name),
            "conditions": [{
                "type": CONDITION_LAUNCHED,
                "status": "True",
                "lastTransitionTime": self.clock.now().to_string(),
            }],
        } });
        self.cluster
            .merge_patch_status::<NodeClaim>(None, name, &status)
            .await
            .unwrap()
    }

    /// A NodeClaim stamped with the NodePool's current hash and our version.
    async fn launch_current(&self, name: &str) -> NodeClaim {
        let hash = self.node_pool().await.static_hash();
        self.launch(name, stamp(&hash, NODEPOOL_HASH_VERSION)).await
    }

    async fn mark_drifted(&self, name: &str, reason: &str) {
        let mut node_claim = self.node_claim(name).await;
        let status = node_claim.status.get_or_insert_with(Default::default);
        core_svc::controllers::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_DRIFTED,
            ConditionStatus::True,
            reason,
            "drifted before",
            self.clock.now(),
        );
        self.cluster.replace_status(&node_claim).await.unwrap();
    }
}

fn provider_id(name: &str) -> String {
    format!("fake:///test-zone-1/{name}")
}

fn node_pool() -> NodePool {
    common::node_pool(
        POOL,
        json!({ "spec": {
            "template": { "metadata": { "labels": { "team": "a" } } },
            "limits": { "cpu": "100" },
        } }),
    )
}

fn stamp(hash: &str, version: &str) -> Value {
    json!({ ANNOTATION_NODEPOOL_HASH: hash, ANNOTATION_NODEPOOL_HASH_VERSION: version })
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

async fn env_with_pool() -> Env {
    let env = Env::new().await;
    env.cluster.create(&node_pool()).await.unwrap();
    env
}

#[tokio::test]
async fn given_a_node_pool_when_hashed_then_it_carries_its_template_hash_and_our_version() {
    let env = env_with_pool().await;

    env.hash.reconcile().await.unwrap();

    let pool = env.node_pool().await;
    assert_eq!(
        annotation(&pool.metadata, ANNOTATION_NODEPOOL_HASH),
        Some(pool.static_hash().as_str())
    );
    assert_eq!(
        annotation(&pool.metadata, ANNOTATION_NODEPOOL_HASH_VERSION),
        Some(NODEPOOL_HASH_VERSION)
    );
}

#[tokio::test]
async fn given_a_node_pool_label_change_when_reconciled_then_its_node_claims_drift_as_node_pool_drifted()
 {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.launch_current("default-b").await;
    env.reconcile().await;
    assert_eq!(
        env.drifted("default-a").await,
        None,
        "in step before the change"
    );

    env.patch_node_pool(
        json!({ "spec": { "template": { "metadata": { "labels": { "team": "b" } } } } }),
    )
    .await;
    let requeue = env.reconcile().await;

    for name in ["default-a", "default-b"] {
        let drifted = env.drifted(name).await.unwrap();
        assert_eq!(drifted.status, ConditionStatus::True, "{name}");
        assert_eq!(drifted.reason.as_deref(), Some("NodePoolDrifted"), "{name}");
        let pool_hash = env.node_pool().await.static_hash();
        assert!(
            drifted.message.as_deref().unwrap().contains(&pool_hash),
            "the message names the hashes: {:?}",
            drifted.message
        );
    }
    let events = env.events.with_reason("NodeClaimDrifted");
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].fields,
        BTreeMap::from([
            ("nodeClaim".to_owned(), "default-a".to_owned()),
            ("nodePool".to_owned(), POOL.to_owned()),
            ("reason".to_owned(), "NodePoolDrifted".to_owned()),
        ])
    );
    assert_eq!(
        requeue,
        Requeue::After(Settings::default().drift_period - RENEW_SPACING),
        "drift is re-evaluated every drift period (renewed a little early)"
    );
}

#[tokio::test]
async fn given_limits_weight_and_disruption_changes_when_reconciled_then_nothing_drifts() {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.reconcile().await;
    let hash_before = env.node_pool().await.static_hash();

    env.patch_node_pool(json!({ "spec": {
        "limits": { "cpu": "1000", "memory": "1Ti" },
        "weight": 50,
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "10m",
            "budgets": [{ "nodes": "1" }],
        },
    } }))
    .await;
    env.reconcile().await;

    assert_eq!(env.node_pool().await.static_hash(), hash_before);
    assert_eq!(env.drifted("default-a").await, None);
    assert!(env.events.with_reason("NodeClaimDrifted").is_empty());
}

#[tokio::test]
async fn given_a_requirement_the_labels_fail_when_reconciled_then_requirements_drifted_names_it() {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;

    env.patch_node_pool(json!({ "spec": { "template": { "spec": { "requirements": [
        { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
    ] } } } }))
    .await;
    env.reconcile().await;

    let drifted = env.drifted("default-a").await.unwrap();
    assert_eq!(drifted.reason.as_deref(), Some("RequirementsDrifted"));
    assert!(
        drifted
            .message
            .as_deref()
            .unwrap()
            .contains("karpenter.sh/capacity-type=spot does not satisfy the requirement karpenter.sh/capacity-type In [on-demand]"),
        "{:?}",
        drifted.message
    );
}

#[tokio::test]
async fn given_a_hash_version_change_when_reconciled_then_node_claims_are_restamped_not_drifted_and_drifted_ones_stay_drifted()
 {
    let env = env_with_pool().await;
    // Stamped by an older core whose hashing differed: every hash differs from today's.
    env.patch_node_pool(json!({ "metadata": { "annotations": stamp("old-hash", "rs-v0") } }))
        .await;
    env.launch("default-clean", stamp("old-hash", "rs-v0"))
        .await;
    env.launch("default-drifted", stamp("older-hash", "rs-v0"))
        .await;
    env.mark_drifted("default-drifted", "NodePoolDrifted").await;

    env.reconcile().await;

    let pool = env.node_pool().await;
    let hash = pool.static_hash();
    assert_eq!(
        annotation(&pool.metadata, ANNOTATION_NODEPOOL_HASH_VERSION),
        Some(NODEPOOL_HASH_VERSION)
    );
    let clean = env.node_claim("default-clean").await;
    assert_eq!(
        annotation(&clean.metadata, ANNOTATION_NODEPOOL_HASH),
        Some(hash.as_str())
    );
    assert_eq!(
        annotation(&clean.metadata, ANNOTATION_NODEPOOL_HASH_VERSION),
        Some(NODEPOOL_HASH_VERSION)
    );
    assert_eq!(
        env.drifted("default-clean").await,
        None,
        "re-stamped, not rolled"
    );

    let drifted = env.node_claim("default-drifted").await;
    assert_eq!(
        annotation(&drifted.metadata, ANNOTATION_NODEPOOL_HASH),
        Some("older-hash"),
        "an already drifted NodeClaim keeps its hash"
    );
    assert_eq!(
        annotation(&drifted.metadata, ANNOTATION_NODEPOOL_HASH_VERSION),
        Some(NODEPOOL_HASH_VERSION)
    );
    let condition = env.drifted("default-drifted").await.unwrap();
    assert_eq!(condition.status, ConditionStatus::True, "stays drifted");
    assert_eq!(condition.reason.as_deref(), Some("NodePoolDrifted"));
}

#[tokio::test]
async fn given_a_fleet_launched_by_upstream_karpenter_when_adopted_then_it_is_restamped_and_nothing_rolls()
 {
    let env = env_with_pool().await;
    // Upstream's decimal hashstructure hash, which ours never reproduces.
    let upstream = stamp("6043272643189525838", UPSTREAM_HASH_VERSION);
    env.patch_node_pool(json!({ "metadata": { "annotations": upstream } }))
        .await;
    for name in ["default-a", "default-b", "default-c"] {
        env.launch(name, upstream.clone()).await;
    }

    env.reconcile().await;
    // And again, as the runner keeps doing: still nothing drifts.
    env.clock.advance(Duration::from_secs(300));
    env.reconcile().await;

    let hash = env.node_pool().await.static_hash();
    for name in ["default-a", "default-b", "default-c"] {
        let node_claim = env.node_claim(name).await;
        assert_eq!(
            annotation(&node_claim.metadata, ANNOTATION_NODEPOOL_HASH),
            Some(hash.as_str()),
            "{name}"
        );
        assert_eq!(
            annotation(&node_claim.metadata, ANNOTATION_NODEPOOL_HASH_VERSION),
            Some(NODEPOOL_HASH_VERSION),
            "{name}"
        );
        assert_eq!(env.drifted(name).await, None, "{name}");
    }
    assert!(env.events.with_reason("NodeClaimDrifted").is_empty());

    // Once adopted, a real template change drifts them as usual.
    env.patch_node_pool(json!({ "spec": { "template": { "spec": { "taints": [
        { "key": "dedicated", "value": "x", "effect": "NoSchedule" },
    ] } } } }))
    .await;
    env.reconcile().await;
    assert_eq!(
        env.drifted("default-a").await.unwrap().reason.as_deref(),
        Some("NodePoolDrifted")
    );
}

#[tokio::test]
async fn given_the_plugin_reports_ami_drift_when_reconciled_then_it_is_recorded_with_its_message_and_cleared_later()
 {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    // The plugin has the instance: core acts on no drift answer about one Get does not find.
    env.cloud.insert_instance(common::running_instance(
        Some("default-a"),
        &provider_id("default-a"),
    ));
    env.cloud.set_drifted(
        &provider_id("default-a"),
        Some(DriftReason {
            reason: "AMIDrift".into(),
            message: "image ami-1 is not among the node class's images (ami-2)".into(),
        }),
    );

    env.reconcile().await;

    let drifted = env.drifted("default-a").await.unwrap();
    assert_eq!(drifted.reason.as_deref(), Some("AMIDrift"));
    assert_eq!(
        drifted.message.as_deref(),
        Some("image ami-1 is not among the node class's images (ami-2)")
    );
    let calls = env.cloud.calls_of(Rpc::IsDrifted);
    assert_eq!(
        calls,
        vec![Call::IsDrifted {
            node_claim_name: "default-a".into(),
            provider_id: provider_id("default-a"),
        }]
    );
    assert_eq!(
        env.events.with_reason("NodeClaimDrifted")[0].fields["reason"],
        "AMIDrift"
    );

    env.cloud.set_drifted(&provider_id("default-a"), None);
    env.clock.advance(Settings::default().drift_period);
    env.reconcile().await;

    assert_eq!(env.drifted("default-a").await, None);
    let cleared = env.events.with_reason("DriftCleared");
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0].fields["nodeClaim"], "default-a");
}

#[tokio::test]
async fn given_nothing_the_plugin_judges_changed_then_it_is_asked_again_only_when_the_node_claim_its_node_class_or_the_period_moves()
 {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.launch_current("default-b").await;
    let asked = || env.cloud.calls_of(Rpc::IsDrifted).len();

    let requeue = env.reconcile().await;
    assert_eq!(asked(), 2, "each NodeClaim is asked about once");
    assert_eq!(
        requeue,
        Requeue::After(Settings::default().drift_period - RENEW_SPACING),
        "back when the answers are due for renewal, a little before they expire"
    );

    // A change elsewhere in the cluster (a pass runs on every change) asks nothing again.
    env.clock.advance(Duration::from_secs(60));
    env.patch_node_pool(json!({"spec": {"weight": 7}})).await;
    let requeue = env.reconcile().await;
    assert_eq!(asked(), 2);
    assert_eq!(
        requeue,
        Requeue::After(Settings::default().drift_period - RENEW_SPACING - Duration::from_secs(60))
    );

    // The NodeClaim changed: it alone is asked about again.
    env.cluster
        .merge_patch::<NodeClaim>(
            None,
            "default-a",
            &json!({"metadata": {"annotations": {"touched": "yes"}}}),
        )
        .await
        .unwrap();
    env.reconcile().await;
    assert_eq!(asked(), 3);

    // Its node class changed (e.g. new images resolved): every NodeClaim of it is asked.
    env.cluster
        .merge_patch_node_class(
            &NodeClassReference {
                group: "test.karpenter.sh".into(),
                kind: "TestNodeClass".into(),
                name: "default".into(),
            },
            &json!({"metadata": {"annotations": {"touched": "yes"}}}),
        )
        .await
        .unwrap();
    env.reconcile().await;
    assert_eq!(asked(), 5);

    // The period passed: asked again, whatever changed.
    env.clock.advance(Settings::default().drift_period);
    env.reconcile().await;
    assert_eq!(asked(), 7);
}

#[tokio::test]
async fn given_answers_expiring_close_together_then_one_pass_renews_them_all_and_none_is_used_past_its_period()
 {
    let env = env_with_pool().await;
    let period = Settings::default().drift_period;
    let asked = || env.cloud.calls_of(Rpc::IsDrifted).len();
    env.launch_current("default-a").await;
    env.reconcile().await;
    env.clock.advance(Duration::from_secs(3));
    env.launch_current("default-b").await;
    let requeue = env.reconcile().await;
    assert_eq!(asked(), 2);
    let wait = period - RENEW_SPACING - Duration::from_secs(3);
    assert_eq!(requeue, Requeue::After(wait), "a's answer is due first");

    // A spacing before a's answer expires, b's, 3 s younger, expires within twice the
    // spacing: both are asked about, before either expired, and they expire together from now
    // on.
    env.clock.advance(wait);
    let requeue = env.reconcile().await;
    assert_eq!(asked(), 4, "b renewed with a, 3 s early");
    assert_eq!(requeue, Requeue::After(period - RENEW_SPACING));

    // A pass in between (a change elsewhere) asks about nothing.
    env.clock.advance(Duration::from_secs(1));
    let requeue = env.reconcile().await;
    assert_eq!(asked(), 4);
    assert_eq!(
        requeue,
        Requeue::After(period - RENEW_SPACING - Duration::from_secs(1))
    );
}

#[tokio::test]
async fn given_the_plugin_unavailable_when_reconciled_then_drift_is_left_as_it_was() {
    let env = env_with_pool().await;
    env.launch_current("default-drifted").await;
    env.launch_current("default-clean").await;
    env.mark_drifted("default-drifted", "AMIDrift").await;
    let before = env.drifted("default-drifted").await;
    for _ in 0..2 {
        env.cloud.fail_next(
            Rpc::IsDrifted,
            CloudProviderError::Unavailable("connection refused".into()),
        );
    }

    let requeue = env.reconcile().await;

    assert_eq!(env.drifted("default-drifted").await, before, "not cleared");
    assert_eq!(env.drifted("default-clean").await, None, "not drifted");
    let warnings = env.events.with_reason("PluginUnavailable");
    assert_eq!(warnings.len(), 1, "one warning per pass");
    assert_eq!(warnings[0].type_, EventType::Warning);
    assert!(
        requeue < Requeue::After(Settings::default().drift_period),
        "retried sooner: {requeue:?}"
    );
}

#[tokio::test]
async fn given_the_plugin_without_is_drifted_when_reconciled_then_provider_drift_is_cleared() {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.mark_drifted("default-a", "AMIDrift").await;
    env.cloud.set_unsupported(Rpc::IsDrifted);

    env.reconcile().await;

    assert_eq!(env.drifted("default-a").await, None);
    assert!(env.events.with_reason("PluginUnavailable").is_empty());
}

#[tokio::test]
async fn given_a_node_claim_not_launched_when_reconciled_then_drifted_is_removed_without_asking_the_plugin()
 {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.mark_drifted("default-a", "AMIDrift").await;
    env.cluster
        .merge_patch_status::<NodeClaim>(
            None,
            "default-a",
            &json!({ "status": { "conditions": [
                { "type": "Launched", "status": "Unknown", "lastTransitionTime": "2025-03-01T12:00:00Z" },
                { "type": "Drifted", "status": "True", "reason": "AMIDrift", "lastTransitionTime": "2025-03-01T12:00:00Z" },
            ] } }),
        )
        .await
        .unwrap();

    env.drift.reconcile().await.unwrap();

    assert_eq!(env.drifted("default-a").await, None);
    assert!(env.cloud.calls_of(Rpc::IsDrifted).is_empty());
}

#[tokio::test]
async fn given_an_old_node_claim_whose_instance_type_is_gone_then_it_drifts_as_instance_type_not_found()
 {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    let settings = Settings::default();
    env.cloud.set_instance_types(
        core_svc::cloudprovider::fake::default_instance_types()
            .into_iter()
            .filter(|t| t.name() != "default-instance-type")
            .collect(),
    );

    env.reconcile().await;
    assert_eq!(
        env.drifted("default-a").await,
        None,
        "younger than {:?}: not checked",
        settings.instance_type_drift_min_age
    );
    assert!(env.cloud.calls_of(Rpc::GetInstanceTypes).is_empty());

    env.clock.advance(settings.instance_type_drift_min_age);
    env.reconcile().await;

    let drifted = env.drifted("default-a").await.unwrap();
    assert_eq!(drifted.reason.as_deref(), Some("InstanceTypeNotFound"));
    assert_eq!(
        drifted.message.as_deref(),
        Some("instance type default-instance-type is no longer offered for NodePool default")
    );

    // Within the check period the catalogue is not asked again, and the verdict stands.
    env.clock.advance(settings.drift_period);
    env.reconcile().await;
    assert_eq!(env.cloud.calls_of(Rpc::GetInstanceTypes).len(), 1);
    assert!(env.drifted("default-a").await.is_some());
}

#[tokio::test]
async fn given_an_empty_catalogue_or_a_failing_one_then_instance_type_drift_decides_nothing() {
    let env = env_with_pool().await;
    env.launch_current("default-a").await;
    env.clock
        .advance(Settings::default().instance_type_drift_min_age);
    env.cloud.set_instance_types(vec![]);

    env.reconcile().await;
    assert_eq!(env.drifted("default-a").await, None);

    env.cloud
        .fail_node_pool(POOL, CloudProviderError::Unavailable("timeout".into()));
    env.reconcile().await;
    assert_eq!(env.drifted("default-a").await, None);
    assert_eq!(env.events.with_reason("PluginUnavailable").len(), 1);
}
