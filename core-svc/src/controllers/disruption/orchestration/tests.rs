//! The orchestration's unit tests: commands started, advanced, drained, rolled back and
//! resumed from annotations over an in-memory cluster.

use std::sync::Arc;

use core_domain::requirements::Requirements;
use core_domain::resources::ResourceList;

use super::*;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::cluster::SlimPod;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{DisruptionReason, NodeClaim};
use serde_json::{Value, json};

use crate::cluster::Snapshot;
use crate::controllers::disruption::Command;
use crate::controllers::disruption::annotations as command_keys;
use crate::controllers::disruption::fixtures::{condition, managed, now, pool, snapshot};
use crate::controllers::testing;
use crate::disruption::{Observation, Observed};
use core_domain::scheduler::PlannedNodeClaim;

fn planned(pool: &str) -> PlannedNodeClaim {
    PlannedNodeClaim {
        node_pool: pool.to_owned(),
        requirements: Requirements::new(),
        instance_types: Arc::from(Vec::new()),
        pods: Vec::new(),
        requests: ResourceList::new(),
    }
}

fn command(candidates: &[&str], replacements: usize) -> Command {
    Command::new(
        DisruptionReason::Drifted,
        candidates.iter().map(|c| (*c).to_owned()).collect(),
        (0..replacements).map(|_| planned("default")).collect(),
        now(),
    )
}

/// A replacement NodeClaim `name` of `command` with `conditions`.
fn replacement(name: &str, command: &Command, conditions: Vec<Value>) -> NodeClaim {
    let names = replacement_names(command, now()).join(",");
    testing::node_claim(
        name,
        json!({
            "metadata": { "annotations": {
                ANNOTATION_REPLACES: command.candidates.join(","),
                ANNOTATION_REASON: "Drifted",
                ANNOTATION_STARTED_AT: now().to_string(),
                ANNOTATION_REPLACEMENTS: names,
            } },
            "status": { "conditions": conditions },
        }),
    )
}

/// The candidates of `command` annotated as its own, as `start` leaves them.
fn annotated(mut claim: NodeClaim, command: &Command) -> NodeClaim {
    let patch = candidate_patch(command, now());
    let annotations = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (key, value) in patch["metadata"]["annotations"].as_object().unwrap() {
        annotations.insert(key.clone(), value.as_str().unwrap().to_owned());
    }
    claim
}

fn deleting(mut claim: NodeClaim) -> NodeClaim {
    claim.metadata.deletion_timestamp = Some(Time(now()));
    claim
}

fn initialized() -> Value {
    condition("Initialized", now())
}

fn world(claims: Vec<NodeClaim>) -> Snapshot {
    let (candidate, node) = managed("a", "default", vec![]);
    let mut snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![(candidate, node)],
        vec![],
    );
    for claim in claims {
        snapshot
            .node_claims
            .retain(|c| c.metadata.name != claim.metadata.name);
        snapshot.node_claims.push(Arc::new(claim));
    }
    snapshot.sort();
    snapshot
}

fn names_of(command: &Command) -> Vec<String> {
    replacement_names(command, now())
}

#[test]
fn the_timeout_is_80ms_per_command_between_10_minutes_and_an_hour() {
    assert_eq!(command_timeout(0), Duration::from_secs(600));
    assert_eq!(command_timeout(10_000), Duration::from_secs(800));
    assert_eq!(command_timeout(1_000_000), Duration::from_secs(3600));
}

#[test]
fn replacement_names_are_stable_distinct_and_look_generated() {
    let two = command(&["claim-a"], 2);
    let names = names_of(&two);
    assert_eq!(
        names,
        names_of(&two),
        "the same command names the same replacements"
    );
    assert_ne!(names[0], names[1]);
    for name in &names {
        let suffix = name.strip_prefix("default-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)), "{name}");
    }
    let later = replacement_names(
        &two,
        now()
            .checked_add(jiff::SignedDuration::from_secs(1))
            .unwrap(),
    );
    assert_ne!(names, later, "a later start names other replacements");
}

#[test]
fn the_replacement_object_carries_the_command() {
    let command = command(&["claim-b", "claim-a"], 1);
    let name = &names_of(&command)[0];
    let object = replacement_object(
        name,
        &command.replacements[0],
        &pool("default", Value::Null),
        None,
        &command,
        now(),
    );
    assert_eq!(object.metadata.name.as_deref(), Some(name.as_str()));
    assert!(object.metadata.generate_name.is_none());
    let annotations = object.metadata.annotations.unwrap();
    assert_eq!(annotations[ANNOTATION_REPLACES], "claim-a,claim-b");
    assert_eq!(annotations[ANNOTATION_REASON], "Drifted");
    assert_eq!(annotations[ANNOTATION_STARTED_AT], now().to_string());
    assert_eq!(&annotations[ANNOTATION_REPLACEMENTS], name);
    assert!(annotations.contains_key(karpenter_api::nodepool::ANNOTATION_NODEPOOL_HASH));
}

#[test]
fn in_flight_commands_are_recovered_from_candidates_and_replacements() {
    let command = command(&["claim-a"], 2);
    let names = names_of(&command);
    let (candidate, _) = managed("a", "default", vec![]);
    let snapshot = world(vec![
        annotated(candidate, &command),
        replacement(&names[0], &command, vec![initialized()]),
    ]);

    let found = in_flight(&snapshot);

    assert_eq!(found.len(), 1);
    let found = &found[0];
    assert_eq!(found.reason, Some(DisruptionReason::Drifted));
    assert_eq!(found.candidates, ["claim-a"]);
    assert_eq!(found.started_at, Some(now()));
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(found.expected_replacements, expected);
    assert_eq!(found.replacements.len(), 1);
    assert!(found.replacements[0].initialized);
    assert!(found.involves("claim-a") && found.involves(&names[0]));
}

#[test]
fn a_command_whose_candidates_are_gone_is_not_in_flight() {
    let command = command(&["claim-gone"], 1);
    let names = names_of(&command);
    let snapshot = world(vec![replacement(&names[0], &command, vec![initialized()])]);
    assert!(in_flight(&snapshot).is_empty());
}

fn progress_of(claims: Vec<NodeClaim>, at: Timestamp) -> Progress {
    let snapshot = world(claims);
    let found = in_flight(&snapshot);
    progress(&found[0], &snapshot, at, command_timeout(1))
}

#[test]
fn progress_follows_the_replacements() {
    let command = command(&["claim-a"], 1);
    let name = &names_of(&command)[0];
    let candidate = || annotated(managed("a", "default", vec![]).0, &command);

    let waiting = progress_of(
        vec![candidate(), replacement(name, &command, vec![])],
        now(),
    );
    assert_eq!(waiting, Progress::Waiting);

    let ready = progress_of(
        vec![
            candidate(),
            replacement(name, &command, vec![initialized()]),
        ],
        now(),
    );
    assert_eq!(ready, Progress::Ready);

    let late = now()
        .checked_add(jiff::SignedDuration::from_mins(11))
        .unwrap();
    let ready_late = progress_of(
        vec![
            candidate(),
            replacement(name, &command, vec![initialized()]),
        ],
        late,
    );
    assert_eq!(ready_late, Progress::Ready, "done is done, however late");

    let finished = progress_of(
        vec![
            deleting(candidate()),
            replacement(name, &command, vec![initialized()]),
        ],
        now(),
    );
    assert_eq!(finished, Progress::Finished);
}

#[test]
fn progress_fails_on_a_deleted_missing_or_late_replacement() {
    let command = command(&["claim-a"], 1);
    let name = &names_of(&command)[0];
    let candidate = || annotated(managed("a", "default", vec![]).0, &command);

    let Progress::Failed(deleted) = progress_of(
        vec![candidate(), deleting(replacement(name, &command, vec![]))],
        now(),
    ) else {
        panic!("a deleted replacement fails the command");
    };
    assert!(
        deleted.contains(name) && deleted.contains("before it initialized"),
        "{deleted}"
    );

    let Progress::Failed(missing) = progress_of(vec![candidate()], now()) else {
        panic!("a missing replacement fails the command");
    };
    assert!(
        missing.contains(name) && missing.contains("disappeared"),
        "{missing}"
    );

    let late = now()
        .checked_add(jiff::SignedDuration::from_mins(10))
        .unwrap();
    let Progress::Failed(timed_out) =
        progress_of(vec![candidate(), replacement(name, &command, vec![])], late)
    else {
        panic!("a late command fails");
    };
    assert!(timed_out.contains("timed out after 10m"), "{timed_out}");
}

#[test]
fn stale_marks_are_those_no_command_stands_behind() {
    let tainted = |suffix: &str| {
        let (claim, mut node) = managed(suffix, "default", vec![]);
        node.spec.get_or_insert_with(Default::default).taints =
            Some(vec![crate::objects::disrupted_taint()]);
        (claim, node)
    };
    let command = command(&["claim-b"], 1);
    let (b_claim, b_node) = tainted("b");
    let (c_claim, mut c_node) = tainted("c");
    c_node.metadata.deletion_timestamp = Some(Time(now()));
    let (d_claim, d_node) = managed("d", "default", vec![condition("DisruptionReason", now())]);
    let (e_claim, e_node) = tainted("e");
    let snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![
            tainted("a"),
            (annotated(b_claim, &command), b_node),
            (c_claim, c_node),
            (d_claim, d_node),
            (deleting(e_claim), e_node),
        ],
        vec![],
    );
    let in_flight = in_flight(&snapshot);

    let marks = stale_marks(&snapshot, &in_flight);

    assert_eq!(
        marks,
        [
            StaleMark::Taint {
                node: "node-a".into()
            },
            StaleMark::Condition {
                node_claim: "claim-d".into()
            },
        ]
    );
}

#[test]
fn given_a_finished_command_then_its_annotations_on_replacements_and_their_nodes_are_stale() {
    // Registration copies the replacement's annotations to its Node.
    let replacing = |suffix: &str, command: &Command| {
        let (claim, mut node) = managed(suffix, "default", vec![]);
        let annotations = replacement(suffix, command, vec![])
            .metadata
            .annotations
            .unwrap();
        node.metadata.annotations = Some(annotations.clone());
        (
            testing::patched(
                &claim,
                json!({ "metadata": { "annotations": annotations } }),
            ),
            node,
        )
    };
    let finished = command(&["claim-gone"], 1);
    let running = command(&["claim-b"], 1);
    let (b_claim, b_node) = managed("b", "default", vec![]);
    let snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![
            replacing("r", &finished),
            (annotated(b_claim, &running), b_node),
            replacing("s", &running),
        ],
        vec![],
    );
    let in_flight = in_flight(&snapshot);
    assert_eq!(in_flight.len(), 1, "only the command with a candidate left");

    let marks = stale_marks(&snapshot, &in_flight);

    assert_eq!(
        marks,
        [
            StaleMark::Annotations {
                node_claim: "claim-r".into()
            },
            StaleMark::NodeAnnotations {
                node: "node-r".into()
            },
        ],
        "the running command's candidate and replacement keep theirs"
    );
}

#[test]
fn the_candidate_patch_names_the_command_and_its_replacements() {
    let command = command(&["claim-a", "claim-b"], 1);
    let patch = candidate_patch(&command, now());
    let annotations = &patch["metadata"]["annotations"];
    assert_eq!(annotations[ANNOTATION_COMMAND], "claim-a,claim-b");
    assert_eq!(annotations[ANNOTATION_REPLACEMENTS], names_of(&command)[0]);
    assert_eq!(annotations[ANNOTATION_REASON], "Drifted");
}

// --- the drain before the delete ------------------------------------------------------

use crate::controllers::disruption::fixtures::pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

fn pod_with(name: &str, patch: Value) -> SlimPod {
    testing::patched(&pod(name, Some("node-a"), "1"), patch).into()
}

#[test]
fn the_drain_timeout_sums_the_grace_periods_of_the_pods_the_drain_waits_for() {
    let plain = pod_with("plain", json!({}));
    let long = pod_with(
        "long",
        json!({ "spec": { "terminationGracePeriodSeconds": 120 } }),
    );
    let done = pod_with("done", json!({ "status": { "phase": "Succeeded" } }));
    let tolerating = pod_with(
        "tolerating",
        json!({ "spec": { "tolerations": [{ "operator": "Exists" }] } }),
    );
    assert_eq!(
        drain_timeout([&plain, &long, &done, &tolerating], now()),
        Duration::from_secs(150),
        "Kubernetes' 30 s for the pod without its own, nothing for those not waited for"
    );
    let instant = pod_with(
        "instant",
        json!({ "spec": { "terminationGracePeriodSeconds": 0 } }),
    );
    assert_eq!(drain_timeout([&instant], now()), MIN_DRAIN_TIMEOUT);
    assert_eq!(drain_timeout([], now()), MIN_DRAIN_TIMEOUT);
}

#[test]
fn the_drain_clock_is_read_back_from_its_annotations_and_stripped_with_the_command() {
    let clock = DrainClock {
        started_at: now(),
        timeout: Duration::from_secs(90),
    };
    let candidates = vec!["claim-a".to_owned()];
    let patch = drain_patch(&candidates, DisruptionReason::Drifted, Some(now()), clock);
    let (claim, _) = managed("a", "default", vec![]);
    let claim = testing::patched(&claim, patch.clone());
    assert_eq!(drain_clock(&claim), Some(clock));
    assert_eq!(
        clock.deadline(),
        now()
            .checked_add(jiff::SignedDuration::from_secs(90))
            .unwrap()
    );
    let annotations = &patch["metadata"]["annotations"];
    assert_eq!(annotations[ANNOTATION_COMMAND], "claim-a");
    assert_eq!(annotations[ANNOTATION_REASON], "Drifted");
    assert_eq!(annotations[ANNOTATION_DRAIN_TIMEOUT], "90s");

    let garbled = testing::patched(
        &claim,
        json!({ "metadata": { "annotations": { ANNOTATION_DRAIN_TIMEOUT: "soon" } } }),
    );
    assert_eq!(
        drain_clock(&garbled),
        None,
        "an unreadable clock starts again"
    );

    let mut stripped = claim.clone();
    let annotations = stripped.metadata.annotations.as_mut().unwrap();
    for (key, value) in command_keys::strip_patch()["metadata"]["annotations"]
        .as_object()
        .unwrap()
    {
        assert!(value.is_null(), "a merge patch removes {key}");
        annotations.remove(key);
    }
    assert_eq!(drain_clock(&stripped), None);
    assert!(annotation(&stripped, ANNOTATION_COMMAND).is_none());
}

/// Node `node-a` of `claim-a` (`claim_patch` merged in) with pods `web` and `api`, and a
/// budget allowing no `web` pod to go.
fn draining_world(claim_patch: Value) -> Snapshot {
    let (claim, node) = managed("a", "default", vec![]);
    let claim = testing::patched(&claim, claim_patch);
    let mut snapshot = snapshot(
        vec![pool("default", Value::Null)],
        vec![(claim, node)],
        vec![
            pod("web", Some("node-a"), "1"),
            pod("api", Some("node-a"), "1"),
        ],
    );
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "namespace": "default", "name": "web-pdb" },
        "spec": { "maxUnavailable": 0, "selector": { "matchLabels": { "app": "web" } } },
    }))
    .unwrap();
    snapshot.pdbs.push(Arc::new(pdb));
    snapshot
}

fn step_of(snapshot: &Snapshot, at: Timestamp) -> CandidateStep<'_> {
    let claim = snapshot.node_claim("claim-a").unwrap();
    candidate_step(claim, snapshot, &snapshot.pods_by_node(), at)
}

fn clocked(started_seconds_ago: i64) -> Value {
    json!({ "metadata": { "annotations": {
            ANNOTATION_DRAIN_STARTED_AT: testing::at(-started_seconds_ago).to_string(),
            ANNOTATION_DRAIN_TIMEOUT: "60s",
        } } })
}

#[test]
fn a_candidate_without_a_grace_period_drains_before_it_is_deleted() {
    let fresh = draining_world(json!({}));
    let CandidateStep::StartDrain { timeout, nodes } = step_of(&fresh, now()) else {
        panic!("a node with pods starts draining");
    };
    assert_eq!(timeout, Duration::from_secs(60), "two pods of 30 s");
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].plan.evict.len(), 2, "the termination drain's plan");

    let midway = draining_world(clocked(30));
    assert!(matches!(
        step_of(&midway, now()),
        CandidateStep::Drain { clock, .. } if clock.timeout == Duration::from_secs(60)
    ));

    let mut late = draining_world(clocked(60));
    // api was evicted and is still stopping; web's budget refused it.
    for pod in late.pods.iter_mut().map(Arc::make_mut) {
        if pod.metadata.name.as_deref() == Some("api") {
            pod.metadata.deletion_timestamp = Some(Time(testing::at(20)));
        }
    }
    let CandidateStep::TimedOut { why } = step_of(&late, now()) else {
        panic!("the drain times out at its deadline");
    };
    assert!(why.starts_with(DRAIN_TIMED_OUT), "{why}");
    for expected in [
        "claim-a",
        "within 1m",
        "pod default/web is held by PodDisruptionBudget default/web-pdb, which allows 0 disruptions",
        "pod default/api is still terminating",
    ] {
        assert!(why.contains(expected), "{expected:?} in {why}");
    }
}

#[test]
fn a_drained_or_graced_candidate_is_deleted_at_once_and_a_deleting_one_left_alone() {
    let graced = draining_world(json!({ "spec": { "terminationGracePeriod": "1h" } }));
    assert!(matches!(step_of(&graced, now()), CandidateStep::Delete));

    let mut empty = draining_world(clocked(3600));
    empty.pods.clear();
    assert!(
        matches!(step_of(&empty, now()), CandidateStep::Delete),
        "drained beats timed out"
    );

    let deleting = draining_world(json!({ "metadata": { "deletionTimestamp": Time(now()) } }));
    assert!(matches!(step_of(&deleting, now()), CandidateStep::Nothing));
}

#[test]
fn drain_timeouts_are_told_apart_from_other_observations() {
    let observed = |what: Observed| Observation {
        node: "node-a".into(),
        at: now(),
        what,
    };
    assert!(is_drain_timeout(&observed(Observed::Other {
        reason: format!("{DRAIN_TIMED_OUT}: NodeClaim claim-a ...")
    })));
    assert!(!is_drain_timeout(&observed(Observed::Other {
        reason: "nothing cheaper".into()
    })));
    assert!(!is_drain_timeout(&observed(Observed::ReplacementFailed {
        reason: DRAIN_TIMED_OUT.into()
    })));
}
