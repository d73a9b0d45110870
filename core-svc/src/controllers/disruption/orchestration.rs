//! Executing a [`Command`] (upstream's orchestration queue, KARPENTER-REFERENCE §3.6), with
//! replacement before termination:
//!
//! 1. **start**: annotate the candidate NodeClaims with the command ([`ANNOTATION_COMMAND`]:
//!    the candidates' names; the reason, the start time, how many replacements it creates),
//!    then create the replacement NodeClaims (provisioning's NodeClaim builder, with the
//!    NodePool and node class hash annotations), annotated likewise ([`ANNOTATION_REPLACES`]);
//!    a command without replacements goes straight to 3;
//! 2. **wait** until every replacement is `Initialized`;
//! 3. **terminate** each candidate ([`candidate_step`]):
//!    - one whose NodeClaim sets `spec.terminationGracePeriod`: taint its Nodes
//!      `karpenter.sh/disrupted:NoSchedule`, set its `DisruptionReason` condition and delete it
//!      at once; the termination controller drains it, bounded by that grace period;
//!    - any other is drained **before** it is deleted: condition, the drain's start
//!      and timeout recorded on the NodeClaim ([`ANNOTATION_DRAIN_STARTED_AT`],
//!      [`ANNOTATION_DRAIN_TIMEOUT`]), then the drain path termination takes too
//!      ([`drain::drain_node`]: the taint and the load-balancer exclusion label, then
//!      evictions by [`plan::plan`], its tiers, order and rules, without a deadline; UID
//!      precondition, `PodEvicted` / `EvictionBlocked`). The timeout is the seed's drain
//!      timeout, the sum of the `terminationGracePeriodSeconds` (30 when unset) of the pods the
//!      drain waits for, computed when it starts ([`drain_timeout`], at least
//!      [`MIN_DRAIN_TIMEOUT`]). Once the plan says drained, the NodeClaim is deleted and the
//!      termination controller, finding nothing left, terminates the instance. A node with
//!      nothing to drain is cordoned and deleted in one pass.
//!
//! **Rollback.** While it waits, a command whose replacement is deleted or missing (the
//! lifecycle controller deletes a NodeClaim on insufficient capacity, and on launch and
//! registration timeouts; the API may refuse a create) or that is older than
//! [`command_timeout`] is abandoned: the replacements not initialized yet are deleted, the
//! command's annotations are removed from the others (they stay as capacity, consolidated
//! later if unused), the candidates lose the taint, the label and the condition (should a crash have left
//! them), and `DisruptionAbandoned` is recorded; the controller remembers the failure as an
//! [`Observation`], so the node's `DisruptionBlocked` says the replacement failed, and
//! retries later. A candidate NodeClaim is never deleted before
//! every replacement is initialized; once deleted it is never brought back.
//!
//! A drain that has not finished when its timeout passes (a PodDisruptionBudget allowing
//! nothing, a do-not-disrupt pod, a pod that does not stop) abandons the command the same way,
//! with a reason starting [`DRAIN_TIMED_OUT`] that names how long it waited and which pods
//! (and PodDisruptionBudgets) still held the node ([`drain_blockers`]); the node is held back
//! for the retry delay and its `DisruptionBlocked` says the drain timed out. The replacements
//! are initialized by then and may already run evicted pods: they are kept (stripped of the
//! command), and consolidation removes any that end up empty or underused. The candidates of
//! a command that were drained and deleted before another one timed out stay deleted.
//!
//! **Restarts.** Nothing about a command lives only in memory: [`in_flight`] finds every
//! command from the annotations of its candidates and replacements, [`progress`] and
//! [`candidate_step`] say what to do next from the snapshot alone (a drain's start and
//! timeout included: [`drain_clock`]), and every step is idempotent (tainting a tainted node,
//! deleting a deleting NodeClaim, evicting a terminating pod, removing absent annotations are
//! no-ops). A drain's clock is written before the taint, and every drain pass makes sure of
//! the taint and condition, so a crash in between resumes the same drain. A crash between the
//! taint and the delete of a command without replacements whose candidates had nothing to
//! drain leaves a taint that [`stale_marks`] finds on the next pass (the node is neither
//! deleting nor in a command), as upstream recovers; a command without replacements that
//! drains carries [`ANNOTATION_COMMAND`] from the drain's start on, so it resumes.
//!
//! A command is in flight while one of its candidate NodeClaims still exists: its replacements
//! stay out of the candidates until then, so an initialized replacement is not consolidated
//! away while the pods it is for are still being drained towards it.
//!
//! **Completion.** Once the last candidate is gone the command is no longer in flight, and
//! its annotations on the replacements, and on their Nodes (registration copies a
//! NodeClaim's annotations to its Node), are [`stale_marks`] that the next pass removes;
//! so do the Node copies a rollback leaves behind.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::{
    CONDITION_DISRUPTION_REASON, CONDITION_INITIALIZED, CONDITION_LAUNCHED,
};
use karpenter_api::{ConditionStatus, DisruptionReason, NodeClaim, NodePool, condition};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};

use super::Command;
use super::annotations::{self as command_keys, LegacyRename};
use crate::cloudprovider::CloudProvider;
use crate::cluster::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, Preconditions, Snapshot,
};
use crate::controllers::Context;
use crate::controllers::drain::plan::{self, DrainPlan};
use crate::controllers::drain::{self, DRAIN_RETRY_MAX, is_cordoned};
use crate::controllers::nodeclaim::{name_of, node_pool_of};
use crate::controllers::nodeclaim::{node_claim_of, nodes_of};
use crate::controllers::provisioning::nodeclaims;
use crate::disruption::{CandidateSelector, Observation, Observed};
use crate::events::{EventType, ObjectRef, Reason};
use core_domain::scheduler::PlannedNodeClaim;

pub use super::annotations::{
    ANNOTATION_COMMAND, ANNOTATION_DRAIN_STARTED_AT, ANNOTATION_DRAIN_TIMEOUT, ANNOTATION_REASON,
    ANNOTATION_REPLACEMENTS, ANNOTATION_REPLACES, ANNOTATION_STARTED_AT, COMMAND_ANNOTATIONS,
};

/// The shortest drain timeout: a blocked eviction is retried up to [`DRAIN_RETRY_MAX`] apart,
/// so a shorter timeout (pods with `terminationGracePeriodSeconds: 0`) could pass between two
/// tries.
pub const MIN_DRAIN_TIMEOUT: Duration = DRAIN_RETRY_MAX;

/// How the reason of a command abandoned for its drain's timeout begins (and the observation
/// that holds its nodes back): the explanation module's kinds of observation are fixed, so a
/// drain timeout is an `Observed::Other` told apart by these words ([`is_drain_timeout`]).
pub const DRAIN_TIMED_OUT: &str = "drain timed out";

/// Kubernetes' `generateName` alphabet: no vowels, no look-alike digits.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The shortest a command may wait for its replacements.
pub const MIN_COMMAND_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// The longest.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// What each command in flight adds to the timeout (upstream: the queue drains slower when
/// long).
pub const COMMAND_TIMEOUT_PER_COMMAND: Duration = Duration::from_millis(80);

/// How long a command may wait for its replacements: `clamp(80ms × commands, 10 min, 1 h)`
/// (upstream `getCommandTimeout`'s form).
pub fn command_timeout(commands: usize) -> Duration {
    let commands = u32::try_from(commands).unwrap_or(u32::MAX);
    COMMAND_TIMEOUT_PER_COMMAND
        .saturating_mul(commands)
        .clamp(MIN_COMMAND_TIMEOUT, MAX_COMMAND_TIMEOUT)
}

/// The API spelling of a disruption reason.
pub fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => "Underutilized",
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
    }
}

fn parse_reason(text: &str) -> Option<DisruptionReason> {
    match text {
        "Underutilized" => Some(DisruptionReason::Underutilized),
        "Empty" => Some(DisruptionReason::Empty),
        "Drifted" => Some(DisruptionReason::Drifted),
        _ => None,
    }
}

/// A replacement of a command in flight, as the snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// The NodeClaim's name.
    pub name: String,
    /// `Initialized=True`.
    pub initialized: bool,
    /// Being deleted.
    pub deleting: bool,
    /// What its `Launched` condition says when it is not True (`reason: message`).
    pub launch_problem: Option<String>,
}

/// A command in flight, recovered from the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// Its reason; `None` when the annotation is unreadable.
    pub reason: Option<DisruptionReason>,
    /// The candidates' NodeClaim names, sorted.
    pub candidates: Vec<String>,
    /// The replacements found, by name.
    pub replacements: Vec<Replacement>,
    /// The replacements it creates, by name, sorted.
    pub expected_replacements: Vec<String>,
    /// When it started; `None` when unreadable.
    pub started_at: Option<Timestamp>,
}

impl InFlight {
    /// Whether `node_claim` is one of its candidates or replacements.
    pub fn involves(&self, node_claim: &str) -> bool {
        self.candidates.iter().any(|name| name == node_claim)
            || self.replacements.iter().any(|r| r.name == node_claim)
    }

    /// Its candidates that still exist and are not being deleted.
    pub fn live_candidates<'s>(&self, snapshot: &'s Snapshot) -> Vec<&'s NodeClaim> {
        self.candidates
            .iter()
            .filter_map(|name| snapshot.node_claim(name))
            .filter(|claim| claim.metadata.deletion_timestamp.is_none())
            .collect()
    }
}

/// A command annotation of `claim`, under its name or the one earlier versions wrote.
fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    command_keys::get(claim.metadata.annotations.as_ref(), key)
}

fn claim_condition<'c>(claim: &'c NodeClaim, type_: &str) -> Option<&'c karpenter_api::Condition> {
    claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, type_))
}

/// Every command in flight: the candidates and replacements grouped by the candidate list
/// their annotations name, kept while one of those candidates still exists. Sorted by
/// candidates.
pub fn in_flight(snapshot: &Snapshot) -> Vec<InFlight> {
    let mut commands: BTreeMap<&str, InFlight> = BTreeMap::new();
    for claim in snapshot.node_claims() {
        let (key, is_replacement) = match (
            annotation(claim, ANNOTATION_REPLACES),
            annotation(claim, ANNOTATION_COMMAND),
        ) {
            (Some(key), _) => (key, true),
            (None, Some(key)) => (key, false),
            (None, None) => continue,
        };
        let command = commands.entry(key).or_insert_with(|| InFlight {
            reason: None,
            candidates: split_names(key),
            replacements: Vec::new(),
            expected_replacements: Vec::new(),
            started_at: None,
        });
        if command.reason.is_none() {
            command.reason = annotation(claim, ANNOTATION_REASON).and_then(parse_reason);
        }
        let started = annotation(claim, ANNOTATION_STARTED_AT).and_then(|at| at.parse().ok());
        command.started_at = match (command.started_at, started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(names) = annotation(claim, ANNOTATION_REPLACEMENTS) {
            command.expected_replacements.extend(split_names(names));
            command.expected_replacements.sort();
            command.expected_replacements.dedup();
        }
        if !is_replacement {
            continue;
        }
        let launch_problem = claim_condition(claim, CONDITION_LAUNCHED)
            .filter(|launched| launched.status != ConditionStatus::True)
            .map(|launched| {
                let reason = launched.reason.as_deref().unwrap_or("NotLaunched");
                match launched.message.as_deref() {
                    Some(message) if !message.is_empty() => format!("{reason}: {message}"),
                    _ => reason.to_owned(),
                }
            });
        command.replacements.push(Replacement {
            name: name_of(claim).to_owned(),
            initialized: claim_condition(claim, CONDITION_INITIALIZED)
                .is_some_and(|c| c.status == ConditionStatus::True),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            launch_problem,
        });
    }
    commands
        .into_values()
        .filter(|command| {
            command
                .candidates
                .iter()
                .any(|name| snapshot.node_claim(name).is_some())
        })
        .collect()
}

fn split_names(list: &str) -> Vec<String> {
    let mut names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What a command in flight needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Every candidate is being deleted or gone: nothing left to do.
    Finished,
    /// Some replacement is not initialized yet.
    Waiting,
    /// Every replacement is initialized: on to the terminate step ([`candidate_step`]).
    Ready,
    /// Abandon it, for this reason.
    Failed(String),
}

/// What `command` needs next at `now` (see the module documentation). Pure.
pub fn progress(
    command: &InFlight,
    snapshot: &Snapshot,
    now: Timestamp,
    timeout: Duration,
) -> Progress {
    if command.live_candidates(snapshot).is_empty() {
        return Progress::Finished;
    }
    if let Some(failed) = command.replacements.iter().find(|r| r.deleting) {
        let detail = failed
            .launch_problem
            .as_deref()
            .map(|problem| format!(" ({problem})"))
            .unwrap_or_default();
        let stage = if failed.initialized {
            "was deleted"
        } else {
            "was deleted before it initialized (insufficient capacity, a NodePool limit, or a launch or registration timeout)"
        };
        return Progress::Failed(format!(
            "replacement NodeClaim {} {stage}{detail}",
            failed.name
        ));
    }
    let missing: Vec<&str> = command
        .expected_replacements
        .iter()
        .filter(|name| !command.replacements.iter().any(|r| &r.name == *name))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Progress::Failed(format!(
            "replacement NodeClaim {} disappeared before it initialized (insufficient capacity, a NodePool limit, or a launch or registration timeout deletes it)",
            missing.join(", ")
        ));
    }
    if command.replacements.iter().all(|r| r.initialized) {
        return Progress::Ready;
    }
    let Some(started_at) = command.started_at else {
        return Progress::Failed("the command's start time is unreadable".to_owned());
    };
    let deadline = started_at.saturating_add(timeout).unwrap_or(Timestamp::MAX);
    if now >= deadline {
        let waiting: Vec<&str> = command
            .replacements
            .iter()
            .filter(|r| !r.initialized)
            .map(|r| r.name.as_str())
            .collect();
        return Progress::Failed(format!(
            "timed out after {} waiting for replacement NodeClaims {} to initialize",
            jiff::SignedDuration::try_from(timeout)
                .map(|d| format!("{d:#}"))
                .unwrap_or_else(|_| format!("{timeout:?}")),
            waiting.join(", ")
        ));
    }
    Progress::Waiting
}

/// A stale disruption mark: a taint or a condition nobody stands behind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum StaleMark {
    /// The Node carries `karpenter.sh/disrupted:NoSchedule` or core's load-balancer exclusion
    /// label ([`drain::is_cordoned`]).
    Taint {
        /// The Node.
        node: String,
    },
    /// The NodeClaim has a `DisruptionReason` condition.
    Condition {
        /// The NodeClaim.
        node_claim: String,
    },
    /// The NodeClaim carries [`COMMAND_ANNOTATIONS`] of a command no longer in flight (a
    /// replacement whose candidates are all gone).
    Annotations {
        /// The NodeClaim.
        node_claim: String,
    },
    /// The Node carries [`COMMAND_ANNOTATIONS`] (copied at registration) while its NodeClaim
    /// is in no command in flight.
    NodeAnnotations {
        /// The Node.
        node: String,
    },
}

/// The disruption marks to remove: on Nodes and NodeClaims neither being deleted nor part of a
/// command in flight (upstream's stale taint cleanup, §3.1, and the annotations of finished
/// commands). Pure.
pub fn stale_marks(snapshot: &Snapshot, in_flight: &[InFlight]) -> Vec<StaleMark> {
    let involved: BTreeSet<&str> = in_flight
        .iter()
        .flat_map(|command| command.candidates.iter().map(String::as_str))
        .collect();
    let in_a_command = |claim: &NodeClaim| {
        in_flight
            .iter()
            .any(|command| command.involves(name_of(claim)))
    };
    let mut marks = Vec::new();
    for node in snapshot.nodes() {
        if node.metadata.deletion_timestamp.is_some() || !is_cordoned(node) {
            continue;
        }
        let claim = node_claim_of(snapshot, node);
        if claim.is_some_and(|claim| {
            claim.metadata.deletion_timestamp.is_some() || involved.contains(name_of(claim))
        }) {
            continue;
        }
        marks.push(StaleMark::Taint {
            node: node.metadata.name.clone().unwrap_or_default(),
        });
    }
    for claim in snapshot.node_claims() {
        if claim.metadata.deletion_timestamp.is_some() || involved.contains(name_of(claim)) {
            continue;
        }
        if claim_condition(claim, CONDITION_DISRUPTION_REASON).is_some() {
            marks.push(StaleMark::Condition {
                node_claim: name_of(claim).to_owned(),
            });
        }
        if command_keys::has_any(claim.metadata.annotations.as_ref()) && !in_a_command(claim) {
            marks.push(StaleMark::Annotations {
                node_claim: name_of(claim).to_owned(),
            });
        }
    }
    for node in snapshot.nodes() {
        if node.metadata.deletion_timestamp.is_some()
            || !command_keys::has_any(node.metadata.annotations.as_ref())
        {
            continue;
        }
        // A Node without its NodeClaim is on its way out: no write for it.
        let Some(claim) = node_claim_of(snapshot, node) else {
            continue;
        };
        if !in_a_command(claim) {
            marks.push(StaleMark::NodeAnnotations {
                node: node.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    marks.sort();
    marks
}

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

fn format_seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs())
}

fn parse_seconds(text: &str) -> Option<Duration> {
    text.strip_suffix('s')?
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// A duration as people read it (`1m`, `1h 30m`).
fn friendly(duration: Duration) -> String {
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

/// The seed's drain timeout for a drain of `pods` beginning at `now`: the sum of the
/// `terminationGracePeriodSeconds` (Kubernetes' 30 when unset) of the pods the drain waits for
/// (the worst case: one pod at a time, each taking its whole grace period), at least
/// [`MIN_DRAIN_TIMEOUT`]. Pure.
pub fn drain_timeout<'p>(pods: impl IntoIterator<Item = &'p Pod>, now: Timestamp) -> Duration {
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
    pub pods: Vec<&'s Pod>,
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
    pods_by_node: &BTreeMap<&str, Vec<&'s Pod>>,
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
const BLOCKERS_NAMED: usize = 5;

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

fn blocker(pod: &Pod, selector: &CandidateSelector<'_>, now: Timestamp) -> String {
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
fn drain_patch(
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

/// The annotations a command writes on its candidates and replacements (besides
/// [`ANNOTATION_REPLACES`] / [`ANNOTATION_COMMAND`]).
fn command_annotations(command: &Command, started_at: Timestamp) -> [(&'static str, String); 3] {
    [
        (ANNOTATION_REASON, reason_name(command.reason).to_owned()),
        (ANNOTATION_STARTED_AT, started_at.to_string()),
        (
            ANNOTATION_REPLACEMENTS,
            replacement_names(command, started_at).join(","),
        ),
    ]
}

/// The names of `command`'s replacements when started at `started_at`: `<nodepool>-` and five
/// characters of `generateName`'s alphabet from a hash of the command, so they are known (and
/// written on the candidates) before anything is created. Pure.
pub fn replacement_names(command: &Command, started_at: Timestamp) -> Vec<String> {
    let seed = format!("{}|{started_at}", command.candidates.join(","));
    command
        .replacements
        .iter()
        .enumerate()
        .map(|(index, planned)| {
            // FNV-1a: stable across runs and platforms.
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in seed.bytes().chain(index.to_string().bytes()) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            let radix = NAME_ALPHABET.len() as u64;
            let suffix: String = (0..5)
                .map(|_| {
                    let digit = usize::try_from(hash % radix).unwrap_or(0);
                    hash /= radix;
                    char::from(NAME_ALPHABET.get(digit).copied().unwrap_or(b'x'))
                })
                .collect();
            format!("{}-{suffix}", planned.node_pool)
        })
        .collect()
}

/// The merge patch marking a candidate as part of `command`.
pub fn candidate_patch(command: &Command, started_at: Timestamp) -> Value {
    let mut annotations = Map::new();
    annotations.insert(
        ANNOTATION_COMMAND.to_owned(),
        Value::String(command.candidates.join(",")),
    );
    for (key, value) in command_annotations(command, started_at) {
        annotations.insert(key.to_owned(), Value::String(value));
    }
    json!({ "metadata": { "annotations": annotations } })
}

/// The replacement NodeClaim object `name` for `planned`, a NodeClaim of `pool`, in `command`
/// started at `started_at`. Pure.
pub fn replacement_object(
    name: &str,
    planned: &PlannedNodeClaim,
    pool: &NodePool,
    node_class: Option<&DynamicObject>,
    command: &Command,
    started_at: Timestamp,
) -> NodeClaim {
    let mut object = nodeclaims::node_claim(planned, pool, node_class);
    object.metadata.name = Some(name.to_owned());
    object.metadata.generate_name = None;
    let annotations = object
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_REPLACES.to_owned(), command.candidates.join(","));
    for (key, value) in command_annotations(command, started_at) {
        annotations.insert(key.to_owned(), value);
    }
    object
}

/// The NodePools of the NodeClaims named, comma-separated, sorted.
pub fn node_pools_of(snapshot: &Snapshot, node_claims: &[String]) -> String {
    let pools: BTreeSet<&str> = node_claims
        .iter()
        .filter_map(|name| snapshot.node_claim(name))
        .filter_map(node_pool_of)
        .collect();
    pools.into_iter().collect::<Vec<_>>().join(",")
}

/// How starting a command went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The replacements exist; the command waits for them.
    Replacing {
        /// Their names.
        replacements: Vec<String>,
    },
    /// A command without replacements went on to its terminate step: its candidates are
    /// deleted, or tainted and draining.
    Terminating,
    /// A replacement could not be created; what was created is deleted again.
    Abandoned {
        /// Why.
        reason: String,
    },
}

/// What one terminate step of a command did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terminated {
    /// Whether anything was written.
    pub wrote: bool,
    /// When to look again for a drain still going on.
    pub look_again: Option<Duration>,
    /// A candidate's drain timed out (the reason, starting [`DRAIN_TIMED_OUT`]): nothing was
    /// done, the command is to be rolled back.
    pub timed_out: Option<String>,
}

pub use crate::controllers::drain::EventDue;

/// Runs commands through the ports.
pub struct Orchestrator<'c, C, P> {
    ctx: &'c Context<C, P>,
    event_due: Option<EventDue<'c>>,
}

impl<C, P> std::fmt::Debug for Orchestrator<'_, C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("event_dedupe", &self.event_due.is_some())
            .finish_non_exhaustive()
    }
}

impl<'c, C: Cluster, P: CloudProvider> Orchestrator<'c, C, P> {
    /// An orchestrator over `ctx`; every `EvictionBlocked` is recorded.
    pub fn new(ctx: &'c Context<C, P>) -> Self {
        Self {
            ctx,
            event_due: None,
        }
    }

    /// Records the drains' `EvictionBlocked` events only when `event_due` says so.
    #[must_use]
    pub fn with_event_dedupe(mut self, event_due: EventDue<'c>) -> Self {
        self.event_due = Some(event_due);
        self
    }

    /// Starts `command`, decided on `snapshot`: creates its replacements, or (without any)
    /// takes its candidates to the terminate step at once. Records `DisruptionStarted`, or
    /// `DisruptionAbandoned` when a create fails.
    pub async fn start(
        &self,
        command: &Command,
        snapshot: &Snapshot,
    ) -> Result<Started, ClusterError> {
        let now = self.ctx.clock.now();
        let node_pools = node_pools_of(snapshot, &command.candidates);
        if command.replacements.is_empty() {
            self.started_event(command, &node_pools);
            // A fresh command has no drain clock yet, so nothing can time out here.
            self.terminate(command.reason, &command.candidates, Some(now), snapshot)
                .await?;
            return Ok(Started::Terminating);
        }
        // The candidates carry the command first: should every replacement vanish (or a crash
        // come before they exist), the next pass still finds the command and rolls it back.
        let marking = candidate_patch(command, now);
        for name in &command.candidates {
            match self
                .ctx
                .cluster
                .merge_patch::<NodeClaim>(None, name, &marking)
                .await
            {
                Ok(_) => {}
                Err(error) if error.is_not_found() => {
                    let reason = format!("candidate NodeClaim {name} is gone");
                    self.strip_candidates(command).await?;
                    self.abandoned_event(command.reason, &command.candidates, &node_pools, &reason);
                    return Ok(Started::Abandoned { reason });
                }
                Err(error) => return Err(error),
            }
        }
        let mut created = Vec::with_capacity(command.replacements.len());
        let mut failure = None;
        let names = replacement_names(command, now);
        for (planned, name) in command.replacements.iter().zip(&names) {
            let Some(pool) = snapshot.node_pool(&planned.node_pool) else {
                failure = Some(format!("NodePool {} no longer exists", planned.node_pool));
                break;
            };
            let node_class = snapshot.node_class_for(&pool.spec.template.spec.node_class_ref);
            let object = replacement_object(name, planned, pool, node_class, command, now);
            match self.ctx.cluster.create(&object).await {
                Ok(claim) => {
                    let name = name_of(&claim).to_owned();
                    tracing::info!(node_claim = %name, node_pool = %planned.node_pool, candidates = %command.candidates.join(","), "created a replacement NodeClaim");
                    self.ctx.event(
                        ObjectRef::cluster_scoped("NodeClaim", &name),
                        EventType::Normal,
                        Reason::NodeClaimCreated,
                        format!(
                            "Created NodeClaim {name} from NodePool {} to replace {}",
                            planned.node_pool,
                            command.candidates.join(", ")
                        ),
                        fields([
                            ("nodeClaim", name.clone()),
                            ("nodePool", planned.node_pool.clone()),
                        ]),
                    );
                    created.push(claim);
                }
                Err(ClusterError::Unavailable(message)) => {
                    // Whatever was created stays annotated: the next pass finds the command
                    // short of replacements and rolls it back.
                    return Err(ClusterError::Unavailable(message));
                }
                Err(error) => {
                    failure = Some(format!("creating a replacement failed: {error}"));
                    break;
                }
            }
        }
        if let Some(reason) = failure {
            for claim in &created {
                self.delete_node_claim(claim).await?;
            }
            self.strip_candidates(command).await?;
            self.abandoned_event(command.reason, &command.candidates, &node_pools, &reason);
            return Ok(Started::Abandoned { reason });
        }
        self.started_event(command, &node_pools);
        Ok(Started::Replacing {
            replacements: created.iter().map(|c| name_of(c).to_owned()).collect(),
        })
    }

    /// Removes the command's annotations from its candidates.
    async fn strip_candidates(&self, command: &Command) -> Result<(), ClusterError> {
        for name in &command.candidates {
            self.strip_annotations(name).await?;
        }
        Ok(())
    }

    async fn strip_annotations(&self, name: &str) -> Result<(), ClusterError> {
        self.patch_if_present::<NodeClaim>(name, &command_keys::strip_patch())
            .await
    }

    /// Applies a merge patch to the cluster-scoped object `name` of kind `K`; one that is
    /// gone needs none.
    async fn patch_if_present<K: ClusterObject>(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<(), ClusterError> {
        match self.ctx.cluster.merge_patch::<K>(None, name, patch).await {
            Ok(_) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error),
        }
    }

    fn started_event(&self, command: &Command, node_pools: &str) {
        let first = command.candidates.first().cloned().unwrap_or_default();
        let decision = command.decision().as_str();
        tracing::info!(reason = reason_name(command.reason), decision, candidates = %command.candidates.join(","), replacements = command.replacements.len(), node_pool = node_pools, "disruption started");
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &first),
            EventType::Normal,
            Reason::DisruptionStarted,
            format!(
                "Disrupting {} ({}): {} with {} replacement(s)",
                command.candidates.join(", "),
                reason_name(command.reason),
                decision,
                command.replacements.len()
            ),
            fields([
                ("reason", reason_name(command.reason).to_owned()),
                ("decision", decision.to_owned()),
                ("candidates", command.candidates.join(",")),
                ("replacements", command.replacements.len().to_string()),
                ("nodePool", node_pools.to_owned()),
            ]),
        );
    }

    fn abandoned_event(
        &self,
        reason: DisruptionReason,
        candidates: &[String],
        node_pools: &str,
        why: &str,
    ) {
        let first = candidates.first().cloned().unwrap_or_default();
        tracing::warn!(reason = reason_name(reason), candidates = %candidates.join(","), why, "disruption abandoned");
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &first),
            EventType::Warning,
            Reason::DisruptionAbandoned,
            format!(
                "Abandoned disrupting {} ({}): {why}",
                candidates.join(", "),
                reason_name(reason)
            ),
            fields([
                ("reason", why.to_owned()),
                ("disruptionReason", reason_name(reason).to_owned()),
                ("candidates", candidates.join(",")),
                ("nodePool", node_pools.to_owned()),
            ]),
        );
    }

    /// Records `DisruptionAbandoned` for a command turned down before it started (validation).
    pub fn abandon_unstarted(&self, command: &Command, snapshot: &Snapshot, why: &str) {
        let node_pools = node_pools_of(snapshot, &command.candidates);
        self.abandoned_event(command.reason, &command.candidates, &node_pools, why);
    }

    /// The terminate step of a command (`reason`, started at `started_at` when known) for
    /// its `candidates` that still exist and are not being deleted, as [`candidate_step`]
    /// says: delete, or drain before deleting. When a candidate's drain timed out, nothing is
    /// done and [`Terminated::timed_out`] says why.
    pub async fn terminate(
        &self,
        reason: DisruptionReason,
        candidates: &[String],
        started_at: Option<Timestamp>,
        snapshot: &Snapshot,
    ) -> Result<Terminated, ClusterError> {
        let now = self.ctx.clock.now();
        let pods_by_node = snapshot.pods_by_node();
        let steps: Vec<(&NodeClaim, CandidateStep<'_>)> = candidates
            .iter()
            .filter_map(|name| snapshot.node_claim(name))
            .map(|claim| (claim, candidate_step(claim, snapshot, &pods_by_node, now)))
            .collect();
        let mut done = Terminated::default();
        for (_, step) in &steps {
            if let CandidateStep::TimedOut { why } = step {
                done.timed_out = Some(why.clone());
                return Ok(done);
            }
        }
        for (claim, step) in steps {
            match step {
                CandidateStep::Nothing | CandidateStep::TimedOut { .. } => {}
                CandidateStep::Delete => {
                    self.delete_candidate(claim, reason, snapshot, now).await?;
                    done.wrote = true;
                }
                CandidateStep::StartDrain { timeout, nodes } => {
                    let clock = DrainClock {
                        started_at: now,
                        timeout,
                    };
                    // The clock first: a crash before the taint resumes this drain, whose
                    // passes make sure of the taint.
                    let patch = drain_patch(candidates, reason, started_at, clock);
                    match self
                        .ctx
                        .cluster
                        .merge_patch::<NodeClaim>(None, name_of(claim), &patch)
                        .await
                    {
                        Ok(_) => {}
                        Err(error) if error.is_not_found() => continue,
                        Err(error) => return Err(error),
                    }
                    self.mark(claim, reason, now).await?;
                    self.draining_event(claim, &nodes, reason, snapshot, timeout);
                    let (_, acted) = self.drain(claim, &nodes, now).await?;
                    done.wrote = true;
                    done.look_again = soonest(done.look_again, drain_retry(acted, clock, now));
                }
                CandidateStep::Drain { clock, nodes } => {
                    done.wrote |= self.mark(claim, reason, now).await?;
                    let (cordoned, acted) = self.drain(claim, &nodes, now).await?;
                    done.wrote |= cordoned || acted;
                    done.look_again = soonest(done.look_again, drain_retry(acted, clock, now));
                }
            }
        }
        Ok(done)
    }

    /// Taints the candidate's Nodes, sets its condition and deletes it; records
    /// `DisruptionTerminating`.
    async fn delete_candidate(
        &self,
        claim: &NodeClaim,
        reason: DisruptionReason,
        snapshot: &Snapshot,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let name = name_of(claim).to_owned();
        let nodes = nodes_of(snapshot, claim);
        for node in &nodes {
            drain::cordon(self.ctx.cluster.as_ref(), node).await?;
        }
        self.set_disruption_condition(claim, reason, now).await?;
        self.delete_node_claim(claim).await?;
        let node_names: Vec<&str> = nodes
            .iter()
            .filter_map(|node| node.metadata.name.as_deref())
            .collect();
        let pool = node_pools_of(snapshot, std::slice::from_ref(&name));
        tracing::info!(node_claim = %name, nodes = %node_names.join(","), reason = reason_name(reason), "tainted and deleted a disruption candidate");
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &name),
            EventType::Normal,
            Reason::DisruptionTerminating,
            format!("Disrupting NodeClaim {name}: {}", reason_name(reason)),
            fields([
                ("nodeClaim", name.clone()),
                ("node", node_names.join(",")),
                ("nodePool", pool),
                ("reason", reason_name(reason).to_owned()),
            ]),
        );
        Ok(())
    }

    /// Makes sure the draining candidate carries its `DisruptionReason` condition; whether it
    /// was written.
    async fn mark(
        &self,
        claim: &NodeClaim,
        reason: DisruptionReason,
        now: Timestamp,
    ) -> Result<bool, ClusterError> {
        let marked = claim_condition(claim, CONDITION_DISRUPTION_REASON)
            .is_some_and(|c| c.status == ConditionStatus::True);
        if !marked {
            self.set_disruption_condition(claim, reason, now).await?;
        }
        Ok(!marked)
    }

    /// One pass of the drain of the candidate's Nodes, through the termination controller's
    /// drain path (cordon, then evictions by the plan; no deadline: the drain timeout bounds
    /// it instead); whether a Node was cordoned now, and whether an eviction was admitted.
    async fn drain(
        &self,
        claim: &NodeClaim,
        nodes: &[NodeDrain<'_>],
        now: Timestamp,
    ) -> Result<(bool, bool), ClusterError> {
        let always = |_: &str, _: &str| true;
        let event_due: EventDue<'_> = match self.event_due {
            Some(event_due) => event_due,
            None => &always,
        };
        let (mut cordoned, mut acted) = (false, false);
        for node in nodes {
            let pass = drain::drain_node(
                self.ctx,
                node.node,
                &node.pods,
                name_of(claim),
                None,
                now,
                event_due,
            )
            .await?;
            if let Some(pass) = pass {
                cordoned |= pass.cordoned_now;
                acted |= pass.acted;
            }
        }
        Ok((cordoned, acted))
    }

    fn draining_event(
        &self,
        claim: &NodeClaim,
        nodes: &[NodeDrain<'_>],
        reason: DisruptionReason,
        snapshot: &Snapshot,
        timeout: Duration,
    ) {
        let name = name_of(claim).to_owned();
        let node_names: Vec<&str> = nodes
            .iter()
            .filter_map(|node| node.node.metadata.name.as_deref())
            .collect();
        let pool = node_pools_of(snapshot, std::slice::from_ref(&name));
        tracing::info!(node_claim = %name, nodes = %node_names.join(","), reason = reason_name(reason), timeout = %friendly(timeout), "tainted a disruption candidate; draining it before deleting it");
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &name),
            EventType::Normal,
            Reason::DisruptionDraining,
            format!(
                "Draining NodeClaim {name} before deleting it ({}); the drain gives up after {}",
                reason_name(reason),
                friendly(timeout)
            ),
            fields([
                ("nodeClaim", name.clone()),
                ("node", node_names.join(",")),
                ("nodePool", pool),
                ("reason", reason_name(reason).to_owned()),
                ("timeout", format_seconds(timeout)),
            ]),
        );
    }

    /// Abandons `command` (see the module documentation); answers whether anything changed.
    pub async fn roll_back(
        &self,
        command: &InFlight,
        snapshot: &Snapshot,
        why: &str,
    ) -> Result<bool, ClusterError> {
        let mut changed = false;
        for replacement in &command.replacements {
            let Some(claim) = snapshot.node_claim(&replacement.name) else {
                continue;
            };
            if !replacement.initialized && !replacement.deleting {
                self.delete_node_claim(claim).await?;
                changed = true;
            }
            if annotation(claim, ANNOTATION_REPLACES).is_some() {
                self.strip_annotations(&replacement.name).await?;
                changed = true;
            }
        }
        for claim in command.live_candidates(snapshot) {
            changed |= self.unmark(claim, snapshot).await?;
            if annotation(claim, ANNOTATION_COMMAND).is_some() {
                self.strip_annotations(name_of(claim)).await?;
                changed = true;
            }
        }
        if changed {
            let node_pools = node_pools_of(snapshot, &command.candidates);
            let reason = command.reason.unwrap_or(DisruptionReason::Drifted);
            self.abandoned_event(reason, &command.candidates, &node_pools, why);
        }
        Ok(changed)
    }

    /// Moves the command annotations earlier versions wrote under their old names to the new
    /// ones ([`command_keys::legacy_renames`]); whether anything was written.
    pub async fn rename_legacy_annotations(
        &self,
        snapshot: &Snapshot,
    ) -> Result<bool, ClusterError> {
        let renames = command_keys::legacy_renames(snapshot);
        for rename in &renames {
            match rename {
                LegacyRename::NodeClaim { name, patch } => {
                    tracing::info!(node_claim = %name, "moving disruption annotations to their new names");
                    self.patch_if_present::<NodeClaim>(name, patch).await?;
                }
                LegacyRename::Node { name, patch } => {
                    tracing::info!(node = %name, "moving disruption annotations to their new names");
                    self.patch_if_present::<Node>(name, patch).await?;
                }
            }
        }
        Ok(!renames.is_empty())
    }

    /// Removes a stale mark.
    pub async fn clean(&self, mark: &StaleMark, snapshot: &Snapshot) -> Result<(), ClusterError> {
        match mark {
            StaleMark::Taint { node } => {
                if let Some(node) = snapshot.node(node) {
                    tracing::info!(node = ?node.metadata.name, "removing a stale disrupted taint");
                    drain::uncordon(self.ctx.cluster.as_ref(), node).await?;
                }
            }
            StaleMark::Condition { node_claim } => {
                if let Some(claim) = snapshot.node_claim(node_claim) {
                    tracing::info!(node_claim = %node_claim, "clearing a stale DisruptionReason condition");
                    self.clear_disruption_condition(claim).await?;
                }
            }
            StaleMark::Annotations { node_claim } => {
                tracing::debug!(node_claim = %node_claim, "removing the annotations of a finished disruption command");
                self.strip_annotations(node_claim).await?;
            }
            StaleMark::NodeAnnotations { node } => {
                tracing::debug!(node = %node, "removing the annotations of a finished disruption command");
                self.patch_if_present::<Node>(node, &command_keys::strip_patch())
                    .await?;
            }
        }
        Ok(())
    }

    /// Removes the taint from the candidate's Nodes and its condition; whether anything
    /// changed.
    async fn unmark(&self, claim: &NodeClaim, snapshot: &Snapshot) -> Result<bool, ClusterError> {
        let mut changed = false;
        for node in nodes_of(snapshot, claim) {
            if is_cordoned(node) {
                drain::uncordon(self.ctx.cluster.as_ref(), node).await?;
                changed = true;
            }
        }
        if claim_condition(claim, CONDITION_DISRUPTION_REASON).is_some() {
            self.clear_disruption_condition(claim).await?;
            changed = true;
        }
        Ok(changed)
    }

    async fn set_disruption_condition(
        &self,
        claim: &NodeClaim,
        reason: DisruptionReason,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        self.write_conditions(claim, |conditions| {
            condition::set(
                conditions,
                CONDITION_DISRUPTION_REASON,
                ConditionStatus::True,
                reason_name(reason),
                "",
                Time(now),
            )
        })
        .await
    }

    async fn clear_disruption_condition(&self, claim: &NodeClaim) -> Result<(), ClusterError> {
        self.write_conditions(claim, |conditions| {
            let before = conditions.len();
            conditions.retain(|c| c.type_ != CONDITION_DISRUPTION_REASON);
            conditions.len() != before
        })
        .await
    }

    /// Rewrites the NodeClaim's conditions with `change` (which says whether it changed
    /// anything), optimistically; one retry on a fresh read after a conflict.
    async fn write_conditions(
        &self,
        claim: &NodeClaim,
        change: impl Fn(&mut Vec<karpenter_api::Condition>) -> bool + Send + Sync,
    ) -> Result<(), ClusterError> {
        let name = name_of(claim).to_owned();
        let mut current = claim.clone();
        for attempt in 0..2 {
            let mut conditions = current
                .status
                .as_ref()
                .map(|status| status.conditions.clone())
                .unwrap_or_default();
            if !change(&mut conditions) {
                return Ok(());
            }
            let conditions = serde_json::to_value(&conditions).map_err(|error| {
                ClusterError::invalid("NodeClaim", &name, "status.conditions", error.to_string())
            })?;
            let patch = json!({
                "metadata": { "resourceVersion": current.metadata.resource_version },
                "status": { "conditions": conditions },
            });
            match self
                .ctx
                .cluster
                .merge_patch_status::<NodeClaim>(None, &name, &patch)
                .await
            {
                Ok(_) => return Ok(()),
                Err(error) if error.is_not_found() => return Ok(()),
                Err(error) if error.is_conflict() && attempt == 0 => {
                    match self.ctx.cluster.get::<NodeClaim>(None, &name).await? {
                        Some(fresh) => current = fresh,
                        None => return Ok(()),
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    async fn delete_node_claim(&self, claim: &NodeClaim) -> Result<(), ClusterError> {
        let options = DeleteOptions {
            grace_period_seconds: None,
            preconditions: claim
                .metadata
                .uid
                .as_ref()
                .map(Preconditions::uid)
                .unwrap_or_default(),
        };
        match self
            .ctx
            .cluster
            .delete::<NodeClaim>(None, name_of(claim), options)
            .await
        {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// When a drain looks again: soon after it evicted something, else at the next retry of a
/// blocked eviction or at its deadline, whichever comes first.
fn drain_retry(acted: bool, clock: DrainClock, now: Timestamp) -> Duration {
    drain::retry_after(acted, [clock.deadline()], now)
}

fn soonest(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// Event fields from pairs.
pub(super) fn fields<const N: usize>(pairs: [(&str, String); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use core_domain::requirements::Requirements;
    use core_domain::resources::ResourceList;
    use karpenter_api::NodeClaim;
    use serde_json::{Value, json};

    use super::*;
    use crate::controllers::disruption::fixtures::{condition, managed, now, pool, snapshot};
    use crate::controllers::testing;
    use crate::disruption::{Observation, Observed};

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

    fn pod_with(name: &str, patch: Value) -> Pod {
        testing::patched(&pod(name, Some("node-a"), "1"), patch)
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
}
