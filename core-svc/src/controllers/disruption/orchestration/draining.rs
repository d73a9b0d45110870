//! The terminate step of one candidate: its drain's clock and timeout on the NodeClaim, the
//! next step from the snapshot ([`candidate_step`]) and what still holds a drain that timed out
//! ([`drain_blockers`]). Pure; the orchestrator does the writes.

use crate::cluster::SlimPod;
use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{DisruptionReason, NodeClaim};
use serde_json::{Map, Value, json};

use super::command::{annotation, reason_name};
use super::{
    ANNOTATION_COMMAND, ANNOTATION_DRAIN_STARTED_AT, ANNOTATION_DRAIN_TIMEOUT, ANNOTATION_REASON,
    ANNOTATION_STARTED_AT, DRAIN_TIMED_OUT, MIN_DRAIN_TIMEOUT,
};
use crate::cluster::{PodsByNode, Snapshot};
use crate::controllers::drain::plan::{self, DrainPlan};
use crate::controllers::nodeclaim::nodes_of;
use crate::disruption::{CandidateSelector, Observation, Observed};
use crate::objects::name_of;

/// A candidate's drain before its deletion, as its annotations record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainClock {
    /// When the drain began.
    pub started_at: Timestamp,
    /// How long it may last.
    pub timeout: Duration,
}

impl DrainClock {
    /// When the drain gives up.
    pub fn deadline(&self) -> Timestamp {
        self.started_at
            .saturating_add(self.timeout)
            .unwrap_or(Timestamp::MAX)
    }
}

/// The drain recorded on `claim`; `None` when none began, or when an annotation is unreadable
/// (the drain then begins again, with a fresh clock).
pub fn drain_clock(claim: &NodeClaim) -> Option<DrainClock> {
    let started_at = annotation(claim, ANNOTATION_DRAIN_STARTED_AT)?
        .parse()
        .ok()?;
    let timeout = parse_seconds(annotation(claim, ANNOTATION_DRAIN_TIMEOUT)?)?;
    Some(DrainClock {
        started_at,
        timeout,
    })
}

pub(super) fn format_seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs())
}

pub(super) fn parse_seconds(text: &str) -> Option<Duration> {
    text.strip_suffix('s')?
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// A duration as people read it (`1m`, `1h 30m`).
pub(super) fn friendly(duration: Duration) -> String {
    jiff::SignedDuration::try_from(duration)
        .map(|d| format!("{d:#}"))
        .unwrap_or_else(|_| format!("{duration:?}"))
}

/// Whether the disruption controller drains `claim` before deleting it: when it sets no
/// `spec.terminationGracePeriod` (with one, the termination controller's deadline bounds the
/// drain, and the NodeClaim is deleted at once).
pub fn drains_before_delete(claim: &NodeClaim) -> bool {
    claim.spec.termination_grace_period.is_none()
}

/// The drain timeout for a drain of `pods` beginning at `now`: the sum of the
/// `terminationGracePeriodSeconds` (Kubernetes' 30 when unset) of the pods the drain waits for
/// (the worst case: one pod at a time, each taking its whole grace period), at least
/// [`MIN_DRAIN_TIMEOUT`]. Pure.
pub fn drain_timeout<'p>(pods: impl IntoIterator<Item = &'p SlimPod>, now: Timestamp) -> Duration {
    let seconds = pods
        .into_iter()
        .filter(|pod| plan::is_waiting_eviction(pod, now))
        .map(|pod| u64::try_from(crate::objects::pod_grace_period_seconds(pod)).unwrap_or(0))
        .fold(0, u64::saturating_add);
    Duration::from_secs(seconds).max(MIN_DRAIN_TIMEOUT)
}

/// One Node of a candidate being drained: its pods, and what the drain does with them in this
/// pass.
#[derive(Debug, Clone)]
pub struct NodeDrain<'s> {
    /// The Node.
    pub node: &'s Node,
    /// Its pods.
    pub pods: Vec<&'s SlimPod>,
    /// The termination drain's plan for them, without a deadline.
    pub plan: DrainPlan<'s>,
}

/// What the terminate step does with one candidate of a command whose replacements are all
/// initialized.
#[derive(Debug, Clone)]
pub enum CandidateStep<'s> {
    /// Being deleted already: nothing.
    Nothing,
    /// Taint, mark and delete it: it has a terminationGracePeriod, or nothing is left to drain.
    Delete,
    /// Record the drain's start and `timeout`, taint, mark, and evict as the plans say.
    StartDrain {
        /// The drain timeout.
        timeout: Duration,
        /// Its Nodes.
        nodes: Vec<NodeDrain<'s>>,
    },
    /// Evict as the plans say (making sure of the taint and the condition).
    Drain {
        /// The drain's start and timeout.
        clock: DrainClock,
        /// Its Nodes.
        nodes: Vec<NodeDrain<'s>>,
    },
    /// The drain timeout passed with pods left: the command is abandoned.
    TimedOut {
        /// Why, for `DisruptionAbandoned` and the node's observation; starts with
        /// [`DRAIN_TIMED_OUT`].
        why: String,
    },
}

/// What the terminate step does with `claim` at `now` (see the module documentation). Pure.
pub fn candidate_step<'s>(
    claim: &'s NodeClaim,
    snapshot: &'s Snapshot,
    pods_by_node: &PodsByNode<'s>,
    now: Timestamp,
) -> CandidateStep<'s> {
    if claim.metadata.deletion_timestamp.is_some() {
        return CandidateStep::Nothing;
    }
    if !drains_before_delete(claim) {
        return CandidateStep::Delete;
    }
    let nodes: Vec<NodeDrain<'s>> = nodes_of(snapshot, claim)
        .into_iter()
        .map(|node| {
            let pods = pods_by_node
                .get(node.metadata.name.as_deref().unwrap_or_default())
                .cloned()
                .unwrap_or_default();
            let plan = plan::plan(pods.iter().copied(), now, None);
            NodeDrain { node, pods, plan }
        })
        .collect();
    if nodes.iter().all(|node| node.plan.is_drained()) {
        return CandidateStep::Delete;
    }
    match drain_clock(claim) {
        None => CandidateStep::StartDrain {
            timeout: drain_timeout(nodes.iter().flat_map(|node| node.pods.iter().copied()), now),
            nodes,
        },
        Some(clock) if now >= clock.deadline() => CandidateStep::TimedOut {
            why: format!(
                "{DRAIN_TIMED_OUT}: NodeClaim {} was not drained within {} (the sum of its pods' terminationGracePeriodSeconds when the drain began at {}): {}",
                name_of(claim),
                friendly(clock.timeout),
                crate::disruption::explain::utc(clock.started_at),
                drain_blockers(snapshot, &nodes, now)
            ),
        },
        Some(clock) => CandidateStep::Drain { clock, nodes },
    }
}

/// How many pods [`drain_blockers`] names at most.
pub(super) const BLOCKERS_NAMED: usize = 5;

/// What holds a drain up, in a few words per pod: the pods still waited for in the tier being
/// drained, each with why (terminating, do-not-disrupt, the PodDisruptionBudget over it and
/// what it allows). Pure.
pub fn drain_blockers(snapshot: &Snapshot, nodes: &[NodeDrain<'_>], now: Timestamp) -> String {
    let nominated = BTreeSet::new();
    let selector = CandidateSelector::new(snapshot, now, &nominated);
    let mut blockers = Vec::new();
    for node in nodes {
        let Some(tier) = node.plan.tier else {
            continue;
        };
        blockers.extend(
            node.pods
                .iter()
                .filter(|pod| plan::is_waiting_eviction(pod, now) && plan::Tier::of(pod) == tier)
                .map(|pod| blocker(pod, &selector, now)),
        );
    }
    let more = blockers.len().saturating_sub(BLOCKERS_NAMED);
    blockers.truncate(BLOCKERS_NAMED);
    let mut text = blockers.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more pod(s)"));
    }
    if text.is_empty() {
        text.push_str("no pod left to name");
    }
    text
}

pub(super) fn blocker(pod: &SlimPod, selector: &CandidateSelector<'_>, now: Timestamp) -> String {
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    if crate::objects::is_terminating(pod) {
        return format!("pod {name} is still terminating");
    }
    if plan::has_active_do_not_disrupt(pod, now) {
        return format!("pod {name} has karpenter.sh/do-not-disrupt");
    }
    match selector.pdbs_of(pod).as_slice() {
        [] => format!("pod {name} is still running"),
        [pdb] => format!(
            "pod {name} is held by PodDisruptionBudget {}, which allows {} disruptions",
            pdb.pdb, pdb.disruptions_allowed
        ),
        several => {
            let names: Vec<&str> = several.iter().map(|pdb| pdb.pdb.as_str()).collect();
            format!(
                "pod {name} is selected by several PodDisruptionBudgets ({}), which the eviction API refuses",
                names.join(", ")
            )
        }
    }
}

/// Whether `observation` records a drain that timed out (see [`DRAIN_TIMED_OUT`]).
pub fn is_drain_timeout(observation: &Observation) -> bool {
    matches!(&observation.what, Observed::Other { reason } if reason.starts_with(DRAIN_TIMED_OUT))
}

/// The merge patch recording a drain's start on a candidate of a command (`reason`, started
/// at `started_at` when known), with the command's own annotations: a command without
/// replacements has none yet, and needs them from now on to be found again.
pub(super) fn drain_patch(
    candidates: &[String],
    reason: DisruptionReason,
    started_at: Option<Timestamp>,
    clock: DrainClock,
) -> Value {
    let mut annotations = Map::new();
    annotations.insert(
        ANNOTATION_COMMAND.to_owned(),
        Value::String(candidates.join(",")),
    );
    annotations.insert(
        ANNOTATION_REASON.to_owned(),
        Value::String(reason_name(reason).to_owned()),
    );
    if let Some(started_at) = started_at {
        annotations.insert(
            ANNOTATION_STARTED_AT.to_owned(),
            Value::String(started_at.to_string()),
        );
    }
    annotations.insert(
        ANNOTATION_DRAIN_STARTED_AT.to_owned(),
        Value::String(clock.started_at.to_string()),
    );
    annotations.insert(
        ANNOTATION_DRAIN_TIMEOUT.to_owned(),
        Value::String(format_seconds(clock.timeout)),
    );
    json!({ "metadata": { "annotations": annotations } })
}
