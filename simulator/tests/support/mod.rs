//! Helpers shared by the scenario tests: run an example scenario and read its report.

#![allow(
    dead_code,
    reason = "each test crate that includes this module uses a part of it"
)]

use std::collections::BTreeSet;

use simulator::engine::{self, Quiet};
use simulator::report::{FinalPod, Report, TimelineEvent};
use simulator::scenario;

pub(crate) const OLD_IMAGE: &str = "ami-0a1";
pub(crate) const NEW_IMAGE: &str = "ami-0b2";
pub(crate) const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

pub(crate) fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(format!("{name}.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn run(text: &str) -> Report {
    let scenario = scenario::parse(text).unwrap();
    engine::run_blocking(scenario, &mut Quiet).unwrap()
}

pub(crate) fn events<'a>(report: &'a Report, type_: &'a str) -> Vec<&'a TimelineEvent> {
    report.events_of(type_).collect()
}

/// The events of `type_` about `claim`.
pub(crate) fn events_for<'a>(
    report: &'a Report,
    type_: &'a str,
    claim: &str,
) -> Vec<&'a TimelineEvent> {
    report
        .events_of(type_)
        .filter(|e| e.field("nodeClaim") == Some(claim))
        .collect()
}

pub(crate) fn first_t(report: &Report, type_: &str, claim: &str) -> Option<f64> {
    events_for(report, type_, claim).first().map(|e| e.t)
}

/// The NodeClaims the provisioner created before `t` (the fleet before a change).
/// The pods left at the end in `namespace`.
pub(crate) fn pods_in<'a>(report: &'a Report, namespace: &str) -> Vec<&'a FinalPod> {
    report
        .final_state
        .pods
        .iter()
        .filter(|p| p.namespace == namespace)
        .collect()
}

pub(crate) fn created_before(report: &Report, t: f64) -> BTreeSet<String> {
    report
        .events_of("NodeClaimCreated")
        .filter(|e| e.t < t)
        .filter_map(|e| e.field("nodeClaim"))
        .map(str::to_owned)
        .collect()
}

pub(crate) fn claims_of(events: &[&TimelineEvent]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| e.field("nodeClaim"))
        .map(str::to_owned)
        .collect()
}

/// The replacement NodeClaims a `DisruptionStarted` created: those created in the same pass
/// "to replace" its candidates.
pub(crate) fn replacements_of(report: &Report, started: &TimelineEvent) -> Vec<String> {
    let candidates = started.field("candidates").unwrap().replace(',', ", ");
    let suffix = format!(" to replace {candidates}");
    report
        .events_of("NodeClaimCreated")
        .filter(|e| e.t == started.t && e.field("message").is_some_and(|m| m.ends_with(&suffix)))
        .map(|e| e.field("nodeClaim").unwrap().to_owned())
        .collect()
}

/// [`assert_replaced_before_deleted`] for each of `candidates`: the names of all their
/// replacements.
pub(crate) fn assert_each_replaced_before_deleted<'a>(
    report: &Report,
    candidates: impl IntoIterator<Item = &'a String>,
    image: &str,
) -> BTreeSet<String> {
    candidates
        .into_iter()
        .flat_map(|candidate| assert_replaced_before_deleted(report, candidate, image))
        .collect()
}

/// `candidate` was deleted by a Drifted command whose replacements booted `image` and were
/// initialized before any of the candidate's pods was evicted and before it was deleted
/// (replacement before termination). Returns the replacements.
pub(crate) fn assert_replaced_before_deleted(
    report: &Report,
    candidate: &str,
    image: &str,
) -> Vec<String> {
    let deleted = first_t(report, "NodeClaimDeleted", candidate)
        .unwrap_or_else(|| panic!("{candidate} was never deleted"));
    let started = events_for(report, "DisruptionStarted", candidate)
        .into_iter()
        .rfind(|e| e.t < deleted)
        .unwrap_or_else(|| panic!("{candidate} was deleted without a DisruptionStarted"));
    assert_eq!(started.field("reason"), Some("Drifted"), "{started:?}");
    assert_eq!(started.field("decision"), Some("replace"), "{started:?}");
    let replacements = replacements_of(report, started);
    assert_eq!(
        started.field("replacements"),
        Some(replacements.len().to_string().as_str()),
        "{candidate}: {replacements:?}"
    );
    assert!(!replacements.is_empty(), "{candidate}");
    let first_eviction = first_t(report, "PodEvicted", candidate);
    for replacement in &replacements {
        let launched = events_for(report, "NodeClaimLaunched", replacement);
        assert_eq!(launched.len(), 1, "{replacement}: {launched:?}");
        assert_eq!(launched[0].field("imageID"), Some(image), "{replacement}");
        let initialized = first_t(report, "NodeInitialized", replacement)
            .unwrap_or_else(|| panic!("{replacement} (for {candidate}) never initialized"));
        assert!(
            initialized < deleted,
            "{candidate} deleted at {deleted} before its replacement {replacement} initialized at {initialized}"
        );
        if let Some(evicted) = first_eviction {
            assert!(
                initialized <= evicted,
                "{candidate} drained at {evicted} before {replacement} initialized at {initialized}"
            );
        }
    }
    replacements
}

/// The end of an upgrade: every NodeClaim and running instance on `image`, nothing drifted,
/// deleting, tainted `karpenter.sh/disrupted` or orphaned, every pod running on a node.
pub(crate) fn assert_fleet_on(report: &Report, image: &str) {
    let state = &report.final_state;
    assert!(!state.node_claims.is_empty());
    for claim in &state.node_claims {
        assert_eq!(claim.image_id, image, "{}", claim.name);
        assert!(!claim.conditions.contains_key("Drifted"), "{}", claim.name);
        assert!(!claim.deleting, "{}", claim.name);
    }
    let running: Vec<_> = state
        .instances
        .iter()
        .filter(|i| i.state == "running")
        .collect();
    assert_eq!(running.len(), state.node_claims.len(), "{running:?}");
    assert!(running.iter().all(|i| i.image_id == image), "{running:?}");
    assert!(
        state
            .instances
            .iter()
            .filter(|i| i.image_id != image)
            .all(|i| i.state == "terminated"),
        "{:?}",
        state.instances
    );
    assert_eq!(report.stats.orphaned_instances, 0);
    assert_eq!(state.nodes.len(), state.node_claims.len());
    for node in &state.nodes {
        assert!(node.ready, "{}", node.name);
        assert!(
            node.taints.iter().all(|t| t["key"] != DISRUPTED_TAINT),
            "{}: stale taint {:?}",
            node.name,
            node.taints
        );
    }
    let nodes: BTreeSet<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    for pod in &state.pods {
        assert_eq!(pod.phase, "Running", "{}/{}", pod.namespace, pod.name);
        assert!(
            pod.node.as_deref().is_some_and(|n| nodes.contains(n)),
            "{}/{} on {:?}",
            pod.namespace,
            pod.name,
            pod.node
        );
    }
    assert_eq!(report.stats.pdb_violations, 0);
}

/// Every NodeClaim of `fleet` was drifted by the new AMI after `published`.
pub(crate) fn assert_drifted_after(report: &Report, fleet: &BTreeSet<String>, published: f64) {
    let drifted = events(report, "NodeClaimDrifted");
    assert_eq!(&claims_of(&drifted), fleet);
    assert!(drifted.iter().all(|e| e.t >= published), "{drifted:?}");
    assert!(
        drifted
            .iter()
            .all(|e| e.field("reason") == Some("AMIDrift"))
    );
}
