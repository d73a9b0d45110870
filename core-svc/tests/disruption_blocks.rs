//! The disruption building blocks from the outside: the sentences `explain` writes for an
//! operator (each names what to act on), and candidate selection agreeing with the eviction API
//! of the in-memory cluster about PodDisruptionBudgets. Both take the budgets' arithmetic from
//! `core_svc::pdb`; the agreement cases pin the eviction API's answers so that a change to the
//! shared arithmetic, or to either side's use of it, shows.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeSet;
use std::sync::Arc;

use core_svc::apis::{NodeClaim, NodePool};
use core_svc::clock::FakeClock;
use core_svc::cluster::SlimPod;
use core_svc::cluster::{Cluster, ClusterError, InMemoryCluster, Preconditions, Snapshot};
use core_svc::disruption::{
    Blocked, BlockedReason, CandidateSelector, DisruptionClass, DisruptionReason, ExplainInputs,
    Explanation, Limit, Observation, Observed, explain,
};
use core_svc::pdb;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

mod common;

use common::{ec2_node_class_ref, merged};

/// Monday 2025-03-03, noon UTC: inside the business-hours budget window.
fn monday_noon() -> Timestamp {
    "2025-03-03T12:00:00Z".parse().unwrap()
}

/// Saturday 2025-03-01, noon UTC: outside it.
fn saturday_noon() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

/// NodePool `default`: no drift during business hours (09:00-17:00 UTC on weekdays), one node
/// at a time otherwise.
fn node_pool(patch: Value) -> NodePool {
    common::node_pool(
        "default",
        merged(
            json!({ "spec": {
                "disruption": {
                    "consolidateAfter": "10m",
                    "budgets": [
                        { "nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"] },
                        { "nodes": "1" },
                    ],
                },
                "template": { "spec": { "nodeClassRef": ec2_node_class_ref() } },
            } }),
            patch,
        ),
    )
}

/// The NodeClaim of `node`: drifted since 08:00 on Saturday, consolidatable.
fn node_claim(node: &str, patch: Value) -> NodeClaim {
    common::node_claim(
        &format!("{node}-claim"),
        merged(
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default" },
                    "creationTimestamp": "2025-03-01T00:00:00Z",
                },
                "spec": { "nodeClassRef": ec2_node_class_ref() },
                "status": {
                    "providerID": format!("fake:///{node}"),
                    "nodeName": node,
                    "conditions": [
                        { "type": "Initialized", "status": "True", "lastTransitionTime": "2025-03-01T00:02:00Z" },
                        { "type": "Drifted", "status": "True", "lastTransitionTime": "2025-03-01T08:00:00Z" },
                        { "type": "Consolidatable", "status": "True", "lastTransitionTime": "2025-03-01T00:12:00Z" },
                    ],
                },
            }),
            patch,
        ),
    )
}

fn node(name: &str, patch: Value) -> Node {
    common::node(
        name,
        merged(
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true" },
                },
                "spec": { "providerID": format!("fake:///{name}") },
                "status": { "conditions": [{ "type": "Ready", "status": "True" }] },
            }),
            patch,
        ),
    )
}

/// A Ready pod of the ReplicaSet `app` (`app: <app>`), bound to `node`, as a snapshot holds it.
fn pod(name: &str, app: &str, node: &str, patch: Value) -> SlimPod {
    kube_pod(name, app, node, patch).into()
}

/// The same pod, as it is created.
fn kube_pod(name: &str, app: &str, node: &str, patch: Value) -> Pod {
    common::pod(
        name,
        merged(
            json!({
                "metadata": {
                    "labels": { "app": app },
                    "ownerReferences": [{
                        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                        "uid": format!("{app}-uid"), "controller": true,
                    }],
                },
                "spec": { "nodeName": node, "containers": [{ "name": "app", "image": "nginx" }] },
                "status": {
                    "phase": "Running",
                    "startTime": "2025-03-03T10:00:00Z",
                    "conditions": [{ "type": "Ready", "status": "True" }],
                },
            }),
            patch,
        ),
    )
}

fn pdb(name: &str, app: Value, spec: Value) -> PodDisruptionBudget {
    common::pdb(
        "default",
        name,
        merged(json!({ "selector": { "matchLabels": app } }), spec),
    )
}

/// Three nodes of NodePool `default`: `node-a` (two `web` pods), `node-b` (one `db` pod),
/// `node-c` (empty).
fn cluster() -> Snapshot {
    Snapshot {
        node_pools: vec![Arc::new(node_pool(json!({})))],
        node_claims: ["node-a", "node-b", "node-c"]
            .iter()
            .map(|name| node_claim(name, json!({})))
            .map(Arc::new)
            .collect(),
        nodes: ["node-a", "node-b", "node-c"]
            .iter()
            .map(|name| node(name, json!({})))
            .map(Arc::new)
            .collect(),
        pods: vec![
            Arc::new(pod("web-1", "web", "node-a", json!({}))),
            Arc::new(pod("web-2", "web", "node-a", json!({}))),
            Arc::new(pod("db-0", "db", "node-b", json!({}))),
        ],
        ..Snapshot::default()
    }
}

fn sorted(mut snapshot: Snapshot) -> Snapshot {
    snapshot.sort();
    snapshot
}

fn find_pod<'a>(snapshot: &'a mut Snapshot, name: &str) -> &'a mut SlimPod {
    snapshot
        .pods
        .iter_mut()
        .map(Arc::make_mut)
        .find(|pod| pod.metadata.name.as_deref() == Some(name))
        .unwrap()
}

fn explained(
    snapshot: &Snapshot,
    node: &str,
    reason: Option<DisruptionReason>,
    now: Timestamp,
    observations: &[Observation],
) -> Option<Explanation> {
    let nominated = BTreeSet::new();
    explain(
        node,
        snapshot,
        now,
        &ExplainInputs {
            reason,
            nominated: &nominated,
            observations,
        },
    )
}

fn message(explanation: &Option<Explanation>) -> &str {
    &explanation.as_ref().expect("an explanation").message
}

fn assert_mentions(text: &str, facts: &[&str]) {
    for fact in facts {
        assert!(text.contains(fact), "{text:?} should mention {fact:?}");
    }
}

#[test]
fn given_a_pod_with_do_not_disrupt_when_explaining_drift_then_the_pod_and_annotation_are_named() {
    let mut snapshot = cluster();
    find_pod(&mut snapshot, "db-0")
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    let snapshot = sorted(snapshot);
    let explanation = explained(&snapshot, "node-b", None, saturday_noon(), &[]);
    assert_eq!(
        explanation.as_ref().unwrap().disruption,
        DisruptionReason::Drifted
    );
    assert!(matches!(
        explanation.as_ref().unwrap().reason,
        BlockedReason::Candidate(Blocked::DoNotDisruptPod { .. })
    ));
    assert_mentions(
        message(&explanation),
        &[
            "Node node-b is drifted but is not being replaced",
            "pod default/db-0",
            "karpenter.sh/do-not-disrupt: \"true\"",
            "remove the annotation",
        ],
    );
}

#[test]
fn given_a_do_not_disrupt_duration_then_the_end_of_the_protection_is_named() {
    let mut snapshot = cluster();
    find_pod(&mut snapshot, "db-0")
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "4h".into());
    let snapshot = sorted(snapshot);
    let explanation = explained(
        &snapshot,
        "node-b",
        Some(DisruptionReason::Underutilized),
        monday_noon(),
        &[],
    );
    assert_mentions(
        message(&explanation),
        &[
            "Node node-b is not being consolidated",
            "pod default/db-0",
            "\"4h\"",
            "until 2025-03-03 14:00:00 UTC",
        ],
    );
}

#[test]
fn given_a_pdb_allowing_nothing_then_the_budget_and_its_counts_are_named() {
    let mut snapshot = cluster();
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({ "app": "web" }),
        json!({ "minAvailable": 2 }),
    ))];
    let snapshot = sorted(snapshot);
    let explanation = explained(
        &snapshot,
        "node-a",
        Some(DisruptionReason::Drifted),
        saturday_noon(),
        &[],
    );
    assert_mentions(
        message(&explanation),
        &[
            "PodDisruptionBudget default/web-pdb",
            "allows 0 disruptions",
            "2 of 2 expected pods healthy, 2 must stay healthy",
            "pod default/web-1",
        ],
    );
}

#[test]
fn given_a_pod_under_two_pdbs_then_both_are_named_with_the_fix() {
    let mut snapshot = cluster();
    snapshot.pdbs = vec![
        Arc::new(pdb(
            "db-pdb",
            json!({ "app": "db" }),
            json!({ "maxUnavailable": 1 }),
        )),
        Arc::new(pdb(
            "everything",
            json!({}),
            json!({ "maxUnavailable": "50%" }),
        )),
    ];
    let snapshot = sorted(snapshot);
    let explanation = explained(
        &snapshot,
        "node-b",
        Some(DisruptionReason::Drifted),
        saturday_noon(),
        &[],
    );
    assert_mentions(
        message(&explanation),
        &[
            "pod default/db-0",
            "2 PodDisruptionBudgets (default/db-pdb, default/everything)",
            "disjoint",
        ],
    );
}

#[test]
fn given_the_business_hours_budget_then_drift_names_it_and_when_it_ends() {
    let snapshot = sorted(cluster());
    let explanation = explained(&snapshot, "node-c", None, monday_noon(), &[]);
    match &explanation.as_ref().unwrap().reason {
        BlockedReason::Budget {
            node_pool,
            reason,
            limit: Limit::Budget(active),
            ..
        } => {
            assert_eq!(node_pool, "default");
            assert_eq!(*reason, DisruptionReason::Drifted);
            assert_eq!(active.index, 0);
            assert_eq!(
                active.active_until,
                Some("2025-03-03T17:00:00Z".parse().unwrap())
            );
        }
        other => panic!("{other:?}"),
    }
    assert_mentions(
        message(&explanation),
        &[
            "NodePool default's disruption budget #0",
            "nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h, reasons: [Drifted]",
            "allows no Drifted disruptions",
            "active until 2025-03-03 17:00:00 UTC",
            "none of its 3 nodes is disrupting",
        ],
    );
    assert_eq!(
        explained(&snapshot, "node-c", None, saturday_noon(), &[]),
        None,
        "on Saturday nothing holds an empty drifted node back"
    );
}

#[test]
fn given_the_budget_is_used_up_by_disrupting_nodes_then_they_are_named() {
    let mut snapshot = cluster();
    snapshot.nodes.push(Arc::new(node(
        "node-d",
        json!({ "spec": { "taints": [{ "key": "karpenter.sh/disrupted", "effect": "NoSchedule" }] } }),
    )));
    snapshot
        .node_claims
        .push(Arc::new(node_claim("node-d", json!({}))));
    let snapshot = sorted(snapshot);
    let explanation = explained(
        &snapshot,
        "node-c",
        Some(DisruptionReason::Empty),
        monday_noon(),
        &[],
    );
    assert_mentions(
        message(&explanation),
        &[
            "Node node-c is empty but is not being removed",
            "budget #1 (nodes: \"1\")",
            "allows 1 of its 4 nodes to be disrupted at once",
            "1 already are (node-d)",
        ],
    );
    let tainted = explained(
        &snapshot,
        "node-d",
        Some(DisruptionReason::Empty),
        monday_noon(),
        &[],
    );
    assert_eq!(
        message(&tainted),
        "Node node-d is already being disrupted: it carries the karpenter.sh/disrupted:NoSchedule taint."
    );
}

#[test]
fn given_an_invalid_budget_then_the_whole_node_pool_is_stopped_and_the_budget_named() {
    let mut snapshot = cluster();
    snapshot.node_pools = vec![Arc::new(node_pool(
        json!({ "spec": { "disruption": { "budgets": [
        { "nodes": "1" },
        { "nodes": "1", "schedule": "0 9 * * 7", "duration": "1h" },
    ] } } }),
    ))];
    let snapshot = sorted(snapshot);
    for reason in [DisruptionReason::Empty, DisruptionReason::Drifted] {
        let explanation = explained(&snapshot, "node-c", Some(reason), saturday_noon(), &[]);
        assert!(matches!(
            explanation.as_ref().unwrap().reason,
            BlockedReason::Budget {
                limit: Limit::Invalid(_),
                ..
            }
        ));
        assert_mentions(
            message(&explanation),
            &[
                "NodePool default has an invalid disruption budget #1",
                "schedule \"0 9 * * 7\"",
                "day-of-week",
                "for any reason",
            ],
        );
    }
}

#[test]
fn given_a_failed_replacement_then_it_is_the_reason_with_its_time() {
    let snapshot = sorted(cluster());
    let observations = [
        Observation {
            node: "node-a".into(),
            at: "2025-03-01T11:58:00Z".parse().unwrap(),
            what: Observed::ReplacementFailed {
                reason: "insufficient capacity for m5.large in us-east-1a".into(),
            },
        },
        Observation {
            node: "node-a".into(),
            at: "2025-03-01T11:50:00Z".parse().unwrap(),
            what: Observed::Other {
                reason: "an older attempt".into(),
            },
        },
    ];
    let explanation = explained(&snapshot, "node-a", None, saturday_noon(), &observations);
    assert_mentions(
        message(&explanation),
        &[
            "launching its replacement failed at 2025-03-01 11:58:00 UTC",
            "insufficient capacity for m5.large in us-east-1a",
        ],
    );
    assert_eq!(
        explained(&snapshot, "node-b", None, saturday_noon(), &observations),
        None,
        "observations of other nodes do not count"
    );
}

#[test]
fn given_consolidation_settings_then_they_are_named() {
    let consolidation = Some(DisruptionReason::Underutilized);
    let mut never = cluster();
    never.node_pools = vec![Arc::new(node_pool(
        json!({ "spec": { "disruption": { "consolidateAfter": "Never" } } }),
    ))];
    let never = sorted(never);
    assert_mentions(
        message(&explained(
            &never,
            "node-a",
            consolidation,
            saturday_noon(),
            &[],
        )),
        &["NodePool default has consolidateAfter: Never"],
    );
    let mut when_empty = cluster();
    when_empty.node_pools = vec![Arc::new(node_pool(
        json!({ "spec": { "disruption": { "consolidationPolicy": "WhenEmpty" } } }),
    ))];
    let when_empty = sorted(when_empty);
    assert_mentions(
        message(&explained(
            &when_empty,
            "node-a",
            consolidation,
            saturday_noon(),
            &[],
        )),
        &["consolidationPolicy: WhenEmpty"],
    );
    let mut recent = cluster();
    recent.node_claims[0] = Arc::new(node_claim(
        "node-a",
        json!({ "status": {
            "lastPodEventTime": "2025-03-01T11:55:00Z",
            "conditions": [
                { "type": "Initialized", "status": "True", "lastTransitionTime": "2025-03-01T00:02:00Z" },
            ],
        } }),
    ));
    let recent = sorted(recent);
    assert_mentions(
        message(&explained(
            &recent,
            "node-a",
            consolidation,
            saturday_noon(),
            &[],
        )),
        &[
            "consolidateAfter: 10m",
            "becomes consolidatable at 2025-03-01 12:05:00 UTC",
        ],
    );
}

#[test]
fn given_node_level_blocks_then_they_are_named() {
    let snapshot = sorted(cluster());
    assert_eq!(
        message(&explained(&snapshot, "node-z", None, saturday_noon(), &[])),
        "Node node-z does not exist."
    );
    let mut annotated = cluster();
    Arc::make_mut(&mut annotated.nodes[2])
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    let annotated = sorted(annotated);
    assert_mentions(
        message(&explained(&annotated, "node-c", None, saturday_noon(), &[])),
        &["the Node carries the annotation karpenter.sh/do-not-disrupt: \"true\""],
    );
    let nominated = BTreeSet::from(["node-c".to_owned()]);
    let explanation = explain(
        "node-c",
        &snapshot,
        saturday_noon(),
        &ExplainInputs {
            reason: None,
            nominated: &nominated,
            observations: &[],
        },
    );
    assert_mentions(message(&explanation), &["nominated it for pending pods"]);
}

#[test]
fn given_termination_grace_period_then_drift_goes_ahead_despite_the_pods() {
    let mut snapshot = cluster();
    snapshot.node_claims[1] = Arc::new(node_claim(
        "node-b",
        json!({ "spec": { "terminationGracePeriod": "30m" } }),
    ));
    find_pod(&mut snapshot, "db-0")
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    let snapshot = sorted(snapshot);
    assert_eq!(
        explained(
            &snapshot,
            "node-b",
            Some(DisruptionReason::Drifted),
            saturday_noon(),
            &[]
        ),
        None
    );
    assert!(
        explained(
            &snapshot,
            "node-b",
            Some(DisruptionReason::Underutilized),
            saturday_noon(),
            &[]
        )
        .is_some(),
        "consolidation still honours the pod"
    );
}

// --- agreement with the eviction API ---------------------------------------------------------

/// What the eviction API said about `default/web-0`, reduced to what the predictions say.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    BlockedBy(String),
    SeveralBudgets,
}

/// What the eviction API and its predictions said about `default/web-0`.
#[derive(Debug)]
struct Verdicts {
    /// The candidate selector's verdict for the node.
    selector: Verdict,
    /// [`pdb::PdbAllowance::admits_eviction`] of the one budget selecting `web-0`.
    shared: Verdict,
    /// The in-memory cluster's eviction API.
    eviction: Verdict,
}

/// Three `web` pods on `node-a` in an in-memory cluster, `unready` of them not Ready, with
/// `budgets`: the predictions (from the pods alone: the budgets' status is dropped) and the
/// eviction API's verdict for `web-0`. Also checks that the status the cluster derives for each
/// budget is the shared arithmetic's.
async fn verdicts(budgets: &[(&str, Value)], unready: &[&str]) -> Verdicts {
    let clock = FakeClock::new(saturday_noon());
    let cluster = InMemoryCluster::new(Arc::new(clock), 11);
    for name in ["web-0", "web-1", "web-2"] {
        let mut created = kube_pod(name, "web", "node-a", json!({}));
        created.spec.as_mut().unwrap().node_name = None;
        created.status = None;
        cluster.create(&created).await.unwrap();
        cluster.bind_pod("default", name, "node-a").unwrap();
        cluster
            .set_pod_ready("default", name, !unready.contains(&name))
            .unwrap();
    }
    for (name, spec) in budgets {
        cluster
            .create(&pdb(name, json!({ "app": "web" }), spec.clone()))
            .await
            .unwrap();
    }
    let mut snapshot = cluster.snapshot().await.unwrap();
    for budget in snapshot.pdbs.iter_mut().map(Arc::make_mut) {
        let status = budget.status.take().unwrap();
        let allowance = pdb::allowance(
            budget,
            pdb::selector(budget).as_ref(),
            snapshot.pods.iter().map(AsRef::as_ref),
        );
        assert_eq!(
            (
                status.expected_pods,
                status.current_healthy,
                status.desired_healthy,
                status.disruptions_allowed
            ),
            (
                allowance.expected_pods,
                allowance.current_healthy,
                allowance.desired_healthy,
                allowance.disruptions_allowed
            ),
            "derived status of {:?}",
            budget.metadata.name
        );
    }
    let web_0 = snapshot
        .pods
        .iter()
        .find(|pod| pod.metadata.name.as_deref() == Some("web-0"))
        .unwrap();
    let selecting: Vec<&PodDisruptionBudget> = snapshot
        .pdbs
        .iter()
        .map(AsRef::as_ref)
        .filter(|budget| pdb::selects(budget, pdb::selector(budget).as_ref(), web_0))
        .collect();
    let shared = match selecting.as_slice() {
        [] => Verdict::Allowed,
        [budget] => {
            let allowance = pdb::pdb_allowance(budget, snapshot.pods());
            if allowance.admits_eviction(web_0) {
                Verdict::Allowed
            } else {
                Verdict::BlockedBy(allowance.pdb)
            }
        }
        _ => Verdict::SeveralBudgets,
    };
    snapshot.node_pools = vec![Arc::new(node_pool(json!({})))];
    snapshot.node_claims = vec![Arc::new(node_claim("node-a", json!({})))];
    snapshot.nodes = vec![Arc::new(node("node-a", json!({})))];
    snapshot.sort();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, saturday_noon(), &nominated);
    let selector_verdict = match selector.candidate("node-a", DisruptionClass::Graceful) {
        Ok(_) => Verdict::Allowed,
        Err(Blocked::PdbBlocks { pod, pdb }) => {
            assert_eq!(pod, "default/web-0", "the first healthy pod decides here");
            Verdict::BlockedBy(pdb.pdb)
        }
        Err(Blocked::MultiplePdbs { .. }) => Verdict::SeveralBudgets,
        Err(other) => panic!("{other:?}"),
    };
    let eviction = match cluster
        .evict("default", "web-0", &Preconditions::default())
        .await
    {
        Ok(()) => Verdict::Allowed,
        Err(ClusterError::TooManyRequests { budget, .. }) => {
            Verdict::BlockedBy(format!("default/{budget}"))
        }
        Err(ClusterError::MultipleDisruptionBudgets { .. }) => Verdict::SeveralBudgets,
        Err(other) => panic!("{other:?}"),
    };
    Verdicts {
        selector: selector_verdict,
        shared,
        eviction,
    }
}

/// One budget named `web-pdb` with `spec`.
fn web_pdb(spec: Value) -> Vec<(&'static str, Value)> {
    vec![("web-pdb", spec)]
}

/// The budgets, the pods that are not Ready, what the eviction API says.
type Case = (Vec<(&'static str, Value)>, Vec<&'static str>, Verdict);

#[tokio::test]
async fn given_pdbs_then_candidate_selection_agrees_with_the_eviction_api() {
    let blocked = || Verdict::BlockedBy("default/web-pdb".into());
    let cases: Vec<Case> = vec![
        (vec![], vec![], Verdict::Allowed),
        (
            web_pdb(json!({ "minAvailable": 2 })),
            vec![],
            Verdict::Allowed,
        ),
        (web_pdb(json!({ "minAvailable": 3 })), vec![], blocked()),
        (web_pdb(json!({ "minAvailable": "67%" })), vec![], blocked()),
        (
            web_pdb(json!({ "minAvailable": "66%" })),
            vec![],
            Verdict::Allowed,
        ),
        (
            web_pdb(json!({ "maxUnavailable": "34%" })),
            vec![],
            Verdict::Allowed,
        ),
        (web_pdb(json!({ "maxUnavailable": 0 })), vec![], blocked()),
        (
            web_pdb(json!({ "maxUnavailable": "0%" })),
            vec![],
            blocked(),
        ),
        (
            web_pdb(json!({ "minAvailable": "100%" })),
            vec![],
            blocked(),
        ),
        (
            web_pdb(json!({ "maxUnavailable": 1 })),
            vec!["web-2"],
            blocked(),
        ),
        (
            web_pdb(json!({ "maxUnavailable": 2 })),
            vec!["web-2"],
            Verdict::Allowed,
        ),
        (
            vec![
                ("web-pdb", json!({ "maxUnavailable": 3 })),
                ("other-pdb", json!({ "maxUnavailable": 3 })),
            ],
            vec![],
            Verdict::SeveralBudgets,
        ),
    ];
    for (budgets, unready, expected) in cases {
        let verdicts = verdicts(&budgets, &unready).await;
        assert_eq!(
            verdicts.eviction, expected,
            "eviction API, {budgets:?} {unready:?}"
        );
        assert_eq!(
            verdicts.shared, verdicts.eviction,
            "shared arithmetic vs eviction, {budgets:?} {unready:?}"
        );
        assert_eq!(
            verdicts.selector, verdicts.eviction,
            "selector vs eviction, {budgets:?} {unready:?}"
        );
    }
}
