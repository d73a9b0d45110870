//! The candidates' unit tests: which nodes may be disrupted, and the `Blocked` reason of each
//! node that may not.

use std::sync::Arc;

use super::*;
use crate::cluster::SlimPod as Pod;
use crate::objects::DISRUPTED_TAINT_KEY;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn now() -> Timestamp {
    at("2025-03-01T12:00:00Z")
}

fn node_pool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name },
        "spec": { "template": { "spec": {
            "requirements": [],
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
        } } },
    }))
    .unwrap()
}

fn node_claim(name: &str, pool: &str, extra_spec: Value) -> NodeClaim {
    let mut spec = json!({
        "requirements": [],
        "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
    });
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": format!("{name}-claim"),
            "labels": { LABEL_NODEPOOL: pool },
            "creationTimestamp": "2025-03-01T00:00:00Z",
        },
        "spec": spec,
        "status": {
            "providerID": format!("fake:///{name}"),
            "nodeName": name,
            "conditions": [
                { "type": "Initialized", "status": "True", "lastTransitionTime": "2025-03-01T00:01:00Z" },
            ],
        },
    }))
    .unwrap()
}

fn node(name: &str, pool: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { LABEL_NODEPOOL: pool, LABEL_NODE_INITIALIZED: "true" },
        },
        "spec": { "providerID": format!("fake:///{name}") },
        "status": { "conditions": [ { "type": "Ready", "status": "True" } ] },
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "ownerReferences": [
                { "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true },
            ],
        },
        "spec": { "nodeName": node, "containers": [] },
        "status": {
            "phase": "Running",
            "startTime": "2025-03-01T06:00:00Z",
            "conditions": [ { "type": "Ready", "status": "True" } ],
        },
    }))
    .unwrap()
}

fn pdb(name: &str, selector: Value, budget: Value) -> PodDisruptionBudget {
    let mut spec = json!({ "selector": { "matchLabels": selector } });
    if let (Value::Object(spec), Value::Object(budget)) = (&mut spec, budget) {
        spec.extend(budget);
    }
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": spec,
    }))
    .unwrap()
}

/// One NodePool `default`, nodes `a` (two pods of app web) and `b` (one pod of app db).
fn snapshot() -> Snapshot {
    let mut snapshot = Snapshot {
        node_pools: vec![Arc::new(node_pool("default"))],
        node_claims: vec![
            Arc::new(node_claim("a", "default", json!({}))),
            Arc::new(node_claim("b", "default", json!({}))),
        ],
        nodes: vec![
            Arc::new(node("a", "default")),
            Arc::new(node("b", "default")),
        ],
        pods: vec![
            Arc::new(pod("web-1", "a", json!({"app": "web"}))),
            Arc::new(pod("web-2", "a", json!({"app": "web"}))),
            Arc::new(pod("db-1", "b", json!({"app": "db"}))),
        ],
        ..Snapshot::default()
    };
    snapshot.sort();
    snapshot
}

fn verdict(snapshot: &Snapshot, node: &str, class: DisruptionClass) -> Result<(), Blocked> {
    let nominated = BTreeSet::new();
    CandidateSelector::new(snapshot, now(), &nominated)
        .candidate(node, class)
        .map(|_| ())
}

/// The pod `name` of `snapshot`, for a test to change.
fn pod_mut<'s>(snapshot: &'s mut Snapshot, name: &str) -> &'s mut Pod {
    snapshot
        .pods
        .iter_mut()
        .map(Arc::make_mut)
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .unwrap()
}

fn set_annotation<K: kube::Resource>(object: &mut K, key: &str, value: &str) {
    object
        .meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

#[test]
fn given_an_ordinary_managed_node_then_it_is_a_candidate_with_its_pods() {
    let snapshot = snapshot();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let candidate = selector.candidate("a", DisruptionClass::Graceful).unwrap();
    assert_eq!(candidate.name, "a");
    assert_eq!(candidate.node_pool_name(), "default");
    assert_eq!(candidate.pods.len(), 2);
    assert_eq!(candidate.reschedulable_pods.len(), 2);
    assert!(!candidate.is_empty());
    assert!(candidate.ignored_pod_block.is_none());
    let remaining = cost::lifetime_remaining(candidate.node_claim, now());
    assert!((candidate.disruption_cost - 2.0 * remaining).abs() < 1e-12);
}

#[test]
fn given_unknown_unmanaged_or_uninitialized_nodes_then_they_are_blocked_as_such() {
    let mut snapshot = snapshot();
    assert_eq!(
        verdict(&snapshot, "zzz", DisruptionClass::Graceful),
        Err(Blocked::NodeNotFound)
    );
    snapshot.nodes.push(Arc::new(node("lonely", "default")));
    snapshot.sort();
    assert_eq!(
        verdict(&snapshot, "lonely", DisruptionClass::Graceful),
        Err(Blocked::Unmanaged)
    );
    let node = snapshot
        .nodes
        .iter_mut()
        .map(Arc::make_mut)
        .find(|n| node_name(n) == "a")
        .unwrap();
    node.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_NODE_INITIALIZED);
    let claim = Arc::make_mut(&mut snapshot.node_claims[0]);
    claim.status.as_mut().unwrap().conditions.clear();
    assert_eq!(
        verdict(&snapshot, "a", DisruptionClass::Graceful),
        Err(Blocked::NotInitialized)
    );
}

#[test]
fn given_a_tainted_or_deleting_node_then_it_is_already_disrupting() {
    let mut tainted = snapshot();
    Arc::make_mut(&mut tainted.nodes[0])
        .spec
        .as_mut()
        .unwrap()
        .taints = Some(vec![crate::objects::disrupted_taint()]);
    assert_eq!(
        verdict(&tainted, "a", DisruptionClass::Graceful),
        Err(Blocked::AlreadyDisrupting(Disrupting::Tainted))
    );
    let mut deleting = snapshot();
    Arc::make_mut(&mut deleting.node_claims[0])
        .metadata
        .deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert_eq!(
        verdict(&deleting, "a", DisruptionClass::Graceful),
        Err(Blocked::AlreadyDisrupting(Disrupting::NodeClaimDeleting))
    );
    let mut node_deleting = snapshot();
    Arc::make_mut(&mut node_deleting.nodes[0])
        .metadata
        .deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert_eq!(
        verdict(&node_deleting, "a", DisruptionClass::Graceful),
        Err(Blocked::AlreadyDisrupting(Disrupting::NodeDeleting))
    );
}

#[test]
fn given_a_nominated_node_then_it_is_blocked() {
    let snapshot = snapshot();
    let nominated = BTreeSet::from(["a".to_owned()]);
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    assert_eq!(
        selector.candidate("a", DisruptionClass::Graceful).err(),
        Some(Blocked::Nominated)
    );
    assert!(selector.candidate("b", DisruptionClass::Graceful).is_ok());
}

#[test]
fn given_do_not_disrupt_on_the_node_or_its_claim_then_it_is_blocked() {
    fn on_node(snapshot: &mut Snapshot) -> &mut ObjectMeta {
        &mut Arc::make_mut(&mut snapshot.nodes[0]).metadata
    }
    fn on_claim(snapshot: &mut Snapshot) -> &mut ObjectMeta {
        &mut Arc::make_mut(&mut snapshot.node_claims[0]).metadata
    }
    /// Where the annotation goes, its value, the class asked for and the verdict.
    type Case = (
        fn(&mut Snapshot) -> &mut ObjectMeta,
        &'static str,
        DisruptionClass,
        Result<(), Blocked>,
    );
    let cases: [Case; 3] = [
        (
            on_node,
            "true",
            DisruptionClass::Eventual,
            Err(Blocked::DoNotDisruptNode {
                on: AnnotatedObject::Node,
            }),
        ),
        (
            on_claim,
            "true",
            DisruptionClass::Graceful,
            Err(Blocked::DoNotDisruptNode {
                on: AnnotatedObject::NodeClaim,
            }),
        ),
        (on_node, "false", DisruptionClass::Graceful, Ok(())),
    ];
    for (object, value, class, expected) in cases {
        let mut snapshot = snapshot();
        object(&mut snapshot)
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOTATION_DO_NOT_DISRUPT.to_owned(), value.to_owned());
        assert_eq!(verdict(&snapshot, "a", class), expected, "{value}");
    }
}

#[test]
fn given_a_missing_node_pool_or_label_then_it_is_blocked() {
    let mut missing = snapshot();
    missing.node_pools.clear();
    assert_eq!(
        verdict(&missing, "a", DisruptionClass::Graceful),
        Err(Blocked::NodePoolMissing {
            node_pool: "default".into()
        })
    );
    let mut unlabelled = snapshot();
    Arc::make_mut(&mut unlabelled.nodes[0])
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_NODEPOOL);
    Arc::make_mut(&mut unlabelled.node_claims[0])
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .clear();
    assert_eq!(
        verdict(&unlabelled, "a", DisruptionClass::Graceful),
        Err(Blocked::NoNodePoolLabel)
    );
}

#[test]
fn given_a_pod_with_do_not_disrupt_then_the_node_is_blocked_naming_it() {
    let mut snapshot = snapshot();
    let pod = pod_mut(&mut snapshot, "web-2");
    set_annotation(pod, ANNOTATION_DO_NOT_DISRUPT, "true");
    assert_eq!(
        verdict(&snapshot, "a", DisruptionClass::Graceful),
        Err(Blocked::DoNotDisruptPod {
            pod: "default/web-2".into(),
            annotation: DoNotDisrupt::Always
        })
    );
    assert_eq!(verdict(&snapshot, "b", DisruptionClass::Graceful), Ok(()));
}

#[test]
fn given_a_do_not_disrupt_duration_then_it_blocks_only_until_it_elapses() {
    let mut snapshot = snapshot();
    let pod = pod_mut(&mut snapshot, "db-1");
    set_annotation(pod, ANNOTATION_DO_NOT_DISRUPT, "7h");
    assert!(matches!(
        verdict(&snapshot, "b", DisruptionClass::Graceful),
        Err(Blocked::DoNotDisruptPod {
            annotation: DoNotDisrupt::Until { .. },
            ..
        })
    ));
    let pod = pod_mut(&mut snapshot, "db-1");
    set_annotation(pod, ANNOTATION_DO_NOT_DISRUPT, "6h");
    assert_eq!(
        verdict(&snapshot, "b", DisruptionClass::Graceful),
        Ok(()),
        "started 06:00, 6h later is now"
    );
}

#[test]
fn given_a_finished_pod_with_do_not_disrupt_then_it_does_not_block() {
    let mut snapshot = snapshot();
    let pod = pod_mut(&mut snapshot, "db-1");
    set_annotation(pod, ANNOTATION_DO_NOT_DISRUPT, "true");
    pod.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let candidate = selector.candidate("b", DisruptionClass::Graceful).unwrap();
    assert!(candidate.is_empty(), "a finished pod needs no new place");
}

#[test]
fn given_a_pdb_allowing_nothing_then_the_node_is_blocked_naming_pod_and_budget() {
    let mut snapshot = snapshot();
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({"app": "web"}),
        json!({"minAvailable": 2}),
    ))];
    snapshot.sort();
    match verdict(&snapshot, "a", DisruptionClass::Graceful) {
        Err(Blocked::PdbBlocks { pod, pdb }) => {
            assert_eq!(pod, "default/web-1");
            assert_eq!(pdb.pdb, "default/web-pdb");
            assert_eq!(pdb.disruptions_allowed, 0);
            assert_eq!(pdb.current_healthy, 2);
            assert_eq!(pdb.desired_healthy, 2);
        }
        other => panic!("{other:?}"),
    }
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({"app": "web"}),
        json!({"minAvailable": 1}),
    ))];
    assert_eq!(verdict(&snapshot, "a", DisruptionClass::Graceful), Ok(()));
}

#[test]
fn given_percentages_then_they_round_up_as_the_disruption_controller_does() {
    let pods: Vec<Pod> = (0..3)
        .map(|i| pod(&format!("w{i}"), "a", json!({"app": "web"})))
        .collect();
    let allowance = |budget: Value| pdb_allowance(&pdb("p", json!({"app": "web"}), budget), &pods);
    // maxUnavailable 34% of 3 = 1.02, up to 2: desired 1, two may go.
    let max = allowance(json!({"maxUnavailable": "34%"}));
    assert_eq!(
        (
            max.expected_pods,
            max.desired_healthy,
            max.disruptions_allowed
        ),
        (3, 1, 2)
    );
    // minAvailable 34% of 3 = 1.02, up to 2: one may go.
    let min = allowance(json!({"minAvailable": "34%"}));
    assert_eq!((min.desired_healthy, min.disruptions_allowed), (2, 1));
    let zero = allowance(json!({"maxUnavailable": 0}));
    assert_eq!(zero.disruptions_allowed, 0);
    assert!(zero.fully_blocking);
    assert!(allowance(json!({"minAvailable": "100%"})).fully_blocking);
    assert!(!allowance(json!({"minAvailable": "99%"})).fully_blocking);
    let garbage = allowance(json!({"minAvailable": "lots"}));
    assert_eq!(
        garbage.disruptions_allowed, 0,
        "a budget we cannot compute protects all"
    );
}

#[test]
fn given_unhealthy_pods_then_healthy_counts_drop_and_always_allow_lets_them_go() {
    let mut snapshot = snapshot();
    for pod in snapshot
        .pods
        .iter_mut()
        .map(Arc::make_mut)
        .filter(|p| p.metadata.name.as_deref() == Some("web-1"))
    {
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    }
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({"app": "web"}),
        json!({"maxUnavailable": 1}),
    ))];
    assert!(
        matches!(
            verdict(&snapshot, "a", DisruptionClass::Graceful),
            Err(Blocked::PdbBlocks { .. })
        ),
        "one pod already unavailable: the budget is spent"
    );
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({"app": "web"}),
        json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
    ))];
    match verdict(&snapshot, "a", DisruptionClass::Graceful) {
        Err(Blocked::PdbBlocks { pod, .. }) => {
            assert_eq!(
                pod, "default/web-2",
                "web-1 is unhealthy and may go; web-2 may not"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn given_a_status_allowing_less_then_the_status_wins() {
    let mut snapshot = snapshot();
    let mut budget = pdb("web-pdb", json!({"app": "web"}), json!({"minAvailable": 1}));
    budget.metadata.generation = Some(3);
    budget.status = Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
        observed_generation: Some(3),
        disruptions_allowed: 0,
        ..Default::default()
    });
    snapshot.pdbs = vec![Arc::new(budget.clone())];
    assert!(matches!(
        verdict(&snapshot, "a", DisruptionClass::Graceful),
        Err(Blocked::PdbBlocks { .. })
    ));
    budget.metadata.generation = Some(4);
    snapshot.pdbs = vec![Arc::new(budget)];
    assert_eq!(
        verdict(&snapshot, "a", DisruptionClass::Graceful),
        Ok(()),
        "a status of an older generation is stale"
    );
}

#[test]
fn given_a_pod_under_two_pdbs_then_it_blocks_even_if_both_allow() {
    let mut snapshot = snapshot();
    snapshot.pdbs = vec![
        Arc::new(pdb(
            "one",
            json!({"app": "db"}),
            json!({"maxUnavailable": 5}),
        )),
        Arc::new(pdb("all", json!({}), json!({"maxUnavailable": 5}))),
    ];
    snapshot.sort();
    assert_eq!(
        verdict(&snapshot, "b", DisruptionClass::Graceful),
        Err(Blocked::MultiplePdbs {
            pod: "default/db-1".into(),
            pdbs: vec!["default/all".into(), "default/one".into()]
        })
    );
}

#[test]
fn given_a_copy_of_a_pod_from_elsewhere_then_its_budgets_are_matched_on_its_own_labels() {
    let mut snapshot = snapshot();
    snapshot.pdbs = vec![Arc::new(pdb(
        "db-pdb",
        json!({"app": "db"}),
        json!({"maxUnavailable": 1}),
    ))];
    snapshot.sort();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let known = snapshot.pod("default", "db-1").unwrap();
    let names = |pdbs: Vec<&PdbAllowance>| -> Vec<String> {
        pdbs.into_iter().map(|pdb| pdb.pdb.clone()).collect()
    };
    assert_eq!(names(selector.pdbs_of(known)), vec!["default/db-pdb"]);

    // A copy (not the snapshot's object) is matched afresh: the same answer for the same
    // labels, and its own answer once its labels differ.
    let mut copy = known.clone();
    assert_eq!(names(selector.pdbs_of(&copy)), vec!["default/db-pdb"]);
    copy.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    assert!(selector.pdbs_of(&copy).is_empty());
}

#[test]
fn given_pods_the_drain_does_not_evict_then_their_budgets_do_not_block() {
    let mut snapshot = snapshot();
    snapshot.pdbs = vec![Arc::new(pdb(
        "db-pdb",
        json!({"app": "db"}),
        json!({"maxUnavailable": 0}),
    ))];
    let pod = pod_mut(&mut snapshot, "db-1");
    pod.spec.as_mut().unwrap().tolerations = Some(vec![k8s_openapi::api::core::v1::Toleration {
        key: Some(DISRUPTED_TAINT_KEY.into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }]);
    assert_eq!(verdict(&snapshot, "b", DisruptionClass::Graceful), Ok(()));
    let pod = pod_mut(&mut snapshot, "db-1");
    pod.spec.as_mut().unwrap().tolerations = None;
    pod.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    assert_eq!(verdict(&snapshot, "b", DisruptionClass::Graceful), Ok(()));
}

#[test]
fn given_termination_grace_period_then_drift_ignores_pod_blocks_but_consolidation_does_not() {
    let mut snapshot = snapshot();
    snapshot.node_claims[1] = Arc::new(node_claim(
        "b",
        "default",
        json!({"terminationGracePeriod": "1h"}),
    ));
    let pod = pod_mut(&mut snapshot, "db-1");
    set_annotation(pod, ANNOTATION_DO_NOT_DISRUPT, "true");
    snapshot.pdbs = vec![Arc::new(pdb(
        "web-pdb",
        json!({"app": "web"}),
        json!({"maxUnavailable": 0}),
    ))];
    snapshot.sort();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let drift = selector.candidate("b", DisruptionClass::Eventual).unwrap();
    assert!(matches!(
        drift.ignored_pod_block,
        Some(Blocked::DoNotDisruptPod { .. })
    ));
    assert!(matches!(
        selector.candidate("b", DisruptionClass::Graceful),
        Err(Blocked::DoNotDisruptPod { .. })
    ));
    assert!(
        matches!(
            selector.candidate("a", DisruptionClass::Eventual),
            Err(Blocked::PdbBlocks { .. })
        ),
        "without a terminationGracePeriod drift waits for the budget"
    );
    let mut node_level = snapshot.clone();
    set_annotation(
        Arc::make_mut(&mut node_level.nodes[1]),
        ANNOTATION_DO_NOT_DISRUPT,
        "true",
    );
    assert!(
        matches!(
            verdict(&node_level, "b", DisruptionClass::Eventual),
            Err(Blocked::DoNotDisruptNode { .. })
        ),
        "the exception covers pods only"
    );
}

#[test]
fn given_daemon_set_mirror_and_stateful_pods_then_reschedulable_pods_follow_upstream() {
    let mut snapshot = snapshot();
    let mut daemon = pod("ds", "b", json!({}));
    daemon.metadata.owner_references = Some(vec![serde_json::from_value(json!(
        { "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true }
    )).unwrap()]);
    let mut mirror = pod("static", "b", json!({}));
    set_annotation(&mut mirror, "kubernetes.io/config.mirror", "x");
    let mut stateful = pod("sts-0", "b", json!({}));
    stateful.metadata.owner_references = Some(vec![serde_json::from_value(json!(
        { "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sts", "uid": "s", "controller": true }
    )).unwrap()]);
    stateful.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let mut terminating = pod("gone", "b", json!({}));
    terminating.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    snapshot
        .pods
        .extend([daemon, mirror, stateful, terminating].map(Arc::new));
    snapshot.sort();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let candidate = selector.candidate("b", DisruptionClass::Graceful).unwrap();
    let names: Vec<&str> = candidate
        .reschedulable_pods
        .iter()
        .map(|pod| pod.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, vec!["db-1", "sts-0"]);
    assert_eq!(candidate.pods.len(), 5);
}

#[test]
fn given_several_candidates_then_they_come_cheapest_first_ties_by_name() {
    let mut snapshot = snapshot();
    snapshot
        .node_claims
        .push(Arc::new(node_claim("c", "default", json!({}))));
    snapshot.nodes.push(Arc::new(node("c", "default")));
    snapshot.pods.push(Arc::new(pod("x", "c", json!({}))));
    snapshot.sort();
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    let order: Vec<&str> = selector
        .candidates(DisruptionClass::Graceful)
        .iter()
        .map(|candidate| candidate.name)
        .collect();
    assert_eq!(order, vec!["b", "c", "a"]);
    let all = selector.evaluate_all(DisruptionClass::Graceful);
    assert_eq!(all.len(), 3);
}

/// What a verdict says, comparable: the candidate's name, pods and costs, or the block.
fn summary(verdict: Result<Candidate<'_>, Blocked>) -> Result<String, Blocked> {
    verdict.map(|candidate| {
        let pods: Vec<&str> = candidate
            .pods
            .iter()
            .filter_map(|pod| pod.metadata.name.as_deref())
            .collect();
        format!(
            "{} {pods:?} {} {} {:?}",
            candidate.name,
            candidate.disruption_cost,
            candidate.reschedule_disruption_cost,
            candidate.ignored_pod_block
        )
    })
}

#[test]
fn given_a_selector_then_each_verdict_is_worked_out_once_and_a_new_snapshot_is_judged_afresh() {
    let mut snapshot = snapshot();
    snapshot.node_claims[1] = Arc::new(node_claim(
        "b",
        "default",
        json!({"terminationGracePeriod": "1h"}),
    ));
    set_annotation(
        pod_mut(&mut snapshot, "db-1"),
        ANNOTATION_DO_NOT_DISRUPT,
        "true",
    );
    snapshot.sort();
    let nominated = BTreeSet::new();
    let classes = [DisruptionClass::Graceful, DisruptionClass::Eventual];
    let fresh = |snapshot: &Snapshot, node: &str, class| {
        summary(CandidateSelector::new(snapshot, now(), &nominated).candidate(node, class))
    };
    // Whichever class is asked first, and however often, one selector answers as fresh ones.
    for first in classes {
        let selector = CandidateSelector::new(&snapshot, now(), &nominated);
        for class in [
            first,
            first,
            DisruptionClass::Graceful,
            DisruptionClass::Eventual,
        ] {
            for node in ["a", "b", "missing"] {
                assert_eq!(
                    summary(selector.candidate(node, class)),
                    fresh(&snapshot, node, class),
                    "{node} for {class:?} after {first:?}"
                );
            }
        }
        let listed: Vec<_> = selector
            .evaluate_all(DisruptionClass::Graceful)
            .into_iter()
            .map(|(name, verdict)| (name, summary(verdict)))
            .collect();
        assert_eq!(
            listed,
            [
                ("a", fresh(&snapshot, "a", DisruptionClass::Graceful)),
                ("b", fresh(&snapshot, "b", DisruptionClass::Graceful)),
            ]
        );
    }
    assert!(fresh(&snapshot, "a", DisruptionClass::Graceful).is_ok());

    // A new snapshot is a new selector: the verdicts of the old one do not carry over.
    let selector = CandidateSelector::new(&snapshot, now(), &nominated);
    assert!(selector.candidate("a", DisruptionClass::Graceful).is_ok());
    let mut tainted = snapshot.clone();
    Arc::make_mut(&mut tainted.nodes[0])
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(crate::objects::disrupted_taint());
    let after = CandidateSelector::new(&tainted, now(), &nominated);
    assert_eq!(
        summary(after.candidate("a", DisruptionClass::Graceful)),
        Err(Blocked::AlreadyDisrupting(Disrupting::Tainted))
    );
    assert!(selector.candidate("a", DisruptionClass::Graceful).is_ok());
}

#[test]
fn given_any_pod_order_then_each_pod_has_the_budgets_that_select_it() {
    // Workloads interleaved, the same labels in two namespaces, a pod without labels and one
    // with an empty set: the budgets found for each pod and every allowance are what matching
    // each budget against every pod gives, whichever order the pods come in.
    let in_namespace = |mut pod: Pod, namespace: &str| {
        pod.metadata.namespace = Some(namespace.into());
        pod
    };
    let mut unlabelled = pod("bare-1", "b", json!({}));
    unlabelled.metadata.labels = None;
    let pods = vec![
        pod("web-1", "a", json!({"app": "web"})),
        pod("db-1", "b", json!({"app": "db"})),
        pod("web-2", "a", json!({"app": "web"})),
        in_namespace(pod("web-3", "b", json!({"app": "web"})), "other"),
        pod("web-4", "b", json!({"app": "web", "tier": "front"})),
        unlabelled,
        pod("empty-1", "a", json!({})),
        pod("db-2", "a", json!({"app": "db"})),
        in_namespace(pod("db-3", "a", json!({"app": "db"})), "other"),
    ];
    let mut elsewhere = pdb(
        "other-web",
        json!({"app": "web"}),
        json!({"maxUnavailable": 1}),
    );
    elsewhere.metadata.namespace = Some("other".into());
    let pdbs = vec![
        Arc::new(pdb(
            "web",
            json!({"app": "web"}),
            json!({"minAvailable": 2}),
        )),
        Arc::new(pdb(
            "front",
            json!({"tier": "front"}),
            json!({"maxUnavailable": "50%"}),
        )),
        Arc::new(pdb("all", json!({}), json!({"maxUnavailable": 1}))),
        Arc::new(elsewhere),
    ];
    let nominated = BTreeSet::new();
    for turn in 0..pods.len() {
        // Each rotation of the list, forwards and backwards: every pod comes first once, and
        // the runs of equal labels are broken up differently each time.
        for backwards in [false, true] {
            let mut order: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
            order.rotate_left(turn);
            if backwards {
                order.reverse();
            }
            let snapshot = Snapshot {
                pods: order,
                pdbs: pdbs.clone(),
                ..snapshot()
            };
            let selector = CandidateSelector::new(&snapshot, now(), &nominated);
            let allowances: Vec<PdbAllowance> = selector.pdb_allowances().cloned().collect();
            let expected: Vec<PdbAllowance> = snapshot
                .pdbs
                .iter()
                .map(|pdb| pdb::pdb_allowance(pdb, snapshot.pods()))
                .collect();
            assert_eq!(
                allowances, expected,
                "rotated {turn}, backwards {backwards}"
            );
            for pod in snapshot.pods() {
                let found: Vec<PdbAllowance> = selector.pdbs_of(pod).into_iter().cloned().collect();
                let selecting: Vec<PdbAllowance> = snapshot
                    .pdbs
                    .iter()
                    .zip(&expected)
                    .filter(|(pdb, _)| pdb::selects(pdb, pdb::selector(pdb).as_ref(), pod))
                    .map(|(_, allowance)| allowance.clone())
                    .collect();
                assert_eq!(
                    found, selecting,
                    "{:?}, rotated {turn}, backwards {backwards}",
                    pod.metadata.name
                );
            }
        }
    }
}
