//! The disruption controller (upstream kubernetes-sigs/karpenter `pkg/controllers/disruption`).
//!
//! API (for the methods' authors):
//!
//! - a method implements [`Method`]: `reason()`, `name()`, `class()` (defaults to the reason's),
//!   `compute(&MethodInput) -> MethodOutcome` (pure), and optionally `validate(&Command, &MethodInput) -> Result<Command,
//!   Rejected>` (called on the first pass at least [`VALIDATION_DELAY`] after a command with
//!   `needs_validation` was decided, with a fresh input; `Ok` may return a narrowed command).
//! - [`MethodInput`]: the snapshot, the instant, the candidates of the method's class (already
//!   filtered by [`CandidateSelector`](crate::disruption::CandidateSelector), without the nodes
//!   of commands in flight, cheapest to disrupt first), the allowed disruptions per NodePool for
//!   the method's reason (commands in flight already subtracted), the pass's
//!   [`Simulator`] (`simulate(&[node names]) -> SimulationResult`), the
//!   catalogues per NodePool and the settings.
//! - [`Command`]: reason, candidate NodeClaim names, replacements (the simulation's
//!   `PlannedNodeClaim`s), decided_at. No replacement means delete.
//! - [`MethodOutcome`]: commands, observations (why a candidate was passed over, for
//!   `DisruptionBlocked`), needs_validation.
//!
//! One pass (upstream's order, `controller.go`'s `Reconcile`):
//!
//! 1. read a snapshot; move command annotations an earlier version wrote under their old
//!    `karpenter.sh/disruption-*` names to the new ones ([`annotations`]) and read again if it
//!    did; recover the commands in flight from it ([`orchestration`]: candidates and
//!    replacements carry the command in annotations), so nothing depends on memory;
//! 2. remove stale `karpenter.sh/disrupted:NoSchedule` taints and load-balancer exclusion
//!    labels (and the `DisruptionReason` condition) from nodes neither in a command in flight
//!    nor being deleted, and the annotations of finished commands: what a crash between
//!    tainting and deleting, or a command's end, leaves behind;
//! 3. advance the commands in flight: all replacements initialized → taint, condition, then
//!    for a candidate with `spec.terminationGracePeriod` delete it at once (termination
//!    drains it within that period), for any other drain it here first (the drain path
//!    termination takes too, [`drain`](crate::controllers::drain)) and delete it once drained; a replacement failed, the command
//!    timed out waiting for its replacements, or a drain outlasted its timeout (the sum of
//!    the node's pods' `terminationGracePeriodSeconds`) → roll back
//!    ([`orchestration`] has the details);
//! 4. a command held for validation whose delay has passed is validated and started, or
//!    abandoned; while one is held no method runs (upstream waits inside the method);
//! 5. otherwise the methods in order (emptiness, drift, multi-node, single-node consolidation):
//!    the first that yields a command ends the pass;
//! 6. `DisruptionBlocked` on each node due for disruption that was not acted on, with the
//!    explanation ([`explain()`](crate::disruption::explain())), at most once per node per
//!    [`BLOCKED_EVENT_INTERVAL`] unless the message changes, and never more than once per
//!    [`BLOCKED_EVENT_MIN_SPACING`] (a drain next door flips a node between "its pod's PDB is
//!    spent" and "nothing cheaper" every second).
//!
//! Quiet polls: a pass that decided, started, wrote and observed nothing, with no command in
//! flight, no node nominated and no candidate for consolidation, remembers the cluster's
//! revision, the nominations' generation and [`quiet_until`], the first instant at which a
//! time threshold could change what a pass decides or reports (do-not-disrupt durations,
//! retry delays, the `DisruptionBlocked` spacing, the catalogues' TTL; budgets with a
//! schedule make no pass quiet). Until then a poll that sees the same revision and
//! nominations returns at once, as the pass would have decided the same nothing: a quiet
//! fleet costs a pass per threshold, not one per 10 s.
//!
//! In memory (lost on restart without harm): the command held for validation (re-decided
//! after a restart), the observations of failed attempts (failed replacements and drain
//! timeouts: explanations lose their last detail, a failed node is retried at once), the
//! instance type catalogues (fetched again), the `DisruptionBlocked` and `EvictionBlocked`
//! dedup. A drain's start and timeout are on the candidate NodeClaim, not in memory.
//!
//! Events: `DisruptionStarted` (fields `reason`, `decision`, `candidates`, `replacements`,
//! `nodePool`), `DisruptionDraining` per candidate tainted to be drained before its deletion
//! (`timeout`: the drain timeout), `PodEvicted` / `EvictionBlocked` of those drains (as the
//! termination controller records them), `DisruptionTerminating` per candidate deleted,
//! `DisruptionAbandoned` (`reason`: why, `disruptionReason`), `DisruptionBlocked` on the Node
//! (`node`, `nodeClaim`, `nodePool`, `reason`, `pod` when a pod blocks), `InvalidDoNotDisrupt`
//! on a pod whose annotation is ignored, `PluginUnavailable`. With
//! [`DisruptionController::with_metrics`], each pass sets
//! `karpenter_nodepools_allowed_disruptions`.
//!
//! Differences from upstream:
//!
//! - replacement before termination: upstream taints the candidates when the command starts;
//!   here they are tainted only once every replacement is initialized, so pods keep landing
//!   on them meanwhile and a failed command has nothing to undo on them. Their NodePool's
//!   budget counts them from the start all the same ([`budgets_in_flight`]);
//! - upstream deletes the candidates as soon as their replacements are initialized and
//!   leaves the drain to termination, which waits on a PodDisruptionBudget for ever unless
//!   the NodeClaim has a terminationGracePeriod: a deleted NodeClaim cannot come back, so such
//!   a command could never be rolled back and held its NodePool's budget indefinitely. Here a
//!   candidate without a terminationGracePeriod is drained before its deletion, with a
//!   drain timeout of the sum of its pods' grace periods; past it the command is abandoned like a failed replacement (the
//!   initialized replacements stay, consolidation removes them if they end up unneeded), and
//!   the node's `DisruptionBlocked` says the drain timed out until the retry delay has passed,
//!   ahead of whatever else holds it (often the very PodDisruptionBudget that stopped the
//!   drain: [`explain_due`]);
//! - the provisioner's nominations (upstream keeps them on its cluster state) are read through
//!   a [`SharedNominations`](crate::controllers::provisioning::nominations::SharedNominations) handle given to both ([`DisruptionController::with_nominations`]);
//!   without it (a fresh handle of its own) a node just nominated for pending pods may be
//!   chosen, and those pods go elsewhere;
//! - a node whose replacement failed, or whose drain timed out, is tried again after
//!   [`DisruptionOptions::replacement_retry`] (upstream: the next pass);
//! - the simulation places the pods already waiting before the candidates' pods
//!   ([`simulate`]);
//! - no StaticDrift method (static NodePools are not provisioned by core yet), no
//!   "consolidated" short-circuit (each pass decides afresh).

pub mod annotations;
mod blocked;
pub mod consolidation;
mod controller;
pub mod drift;
pub mod emptiness;
pub mod multi;
pub mod orchestration;
mod pass;
mod quiet;
pub mod simulate;
pub mod single;
pub mod validation;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use core_domain::labels::LabelPolicy;
use core_domain::scheduler::{PlannedNodeClaim, PreferencePolicy};
use jiff::Timestamp;
use karpenter_api::DisruptionReason;

use self::consolidation::ConsolidationOptions;
use self::drift::Drift;
use self::emptiness::Emptiness;
use self::multi::MultiNodeConsolidation;
use self::simulate::Simulator;
use self::single::SingleNodeConsolidation;
use super::Settings;
use super::provisioning::input::Catalogue;
use crate::cluster::Snapshot;
use crate::disruption::{Candidate, DisruptionClass, Observation};

pub use self::blocked::{BlockedNode, due_nodes, explain_due};
pub use self::controller::DisruptionController;
pub use self::pass::{
    PassDecision, PassInputs, budgets_in_flight, decide, decide_with, leaving_nodes, validate_held,
};
pub use self::quiet::quiet_until;

/// How long a command of a method that validates waits before it is re-checked and started
/// (upstream `commandValidationDelay`).
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// How often the same `DisruptionBlocked` message is repeated for a node.
pub const BLOCKED_EVENT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The least time between two `DisruptionBlocked` events of one node, even when what they
/// say differs: the reason can change every pass while a neighbour drains, and an event per
/// second per node says nothing an operator can act on.
pub const BLOCKED_EVENT_MIN_SPACING: Duration = Duration::from_secs(60);

/// How long the controller waits when no method acted (upstream `pollingPeriod`).
pub const POLLING_PERIOD: Duration = Duration::from_secs(10);

/// A disruption method (upstream's `Method` interface).
pub trait Method: Send + Sync {
    /// Why it disrupts: `Empty`, `Drifted` or `Underutilized`.
    fn reason(&self) -> DisruptionReason;

    /// How it treats pods that block a node.
    fn class(&self) -> DisruptionClass {
        DisruptionClass::of(self.reason())
    }

    /// A short name for logs and metrics (`emptiness`, `drift`, `multi`, `single`).
    fn name(&self) -> &'static str;

    /// The commands to start now. Pure: no ports.
    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome;

    /// Whether `command`, decided at least [`VALIDATION_DELAY`] ago, still holds on `input`
    /// (fresh); `Ok` carries what to start (a subset of the candidates, say). Called only for
    /// commands whose outcome asked for validation.
    fn validate(&self, command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
        let _ = input;
        Ok(command.clone())
    }
}

/// What a method decides on.
#[derive(Debug, Clone, Copy)]
pub struct MethodInput<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The instant.
    pub now: Timestamp,
    /// The candidates of the method's class, cheapest to disrupt first (ties by name), without
    /// the nodes of commands in flight.
    pub candidates: &'a [Candidate<'a>],
    /// How many more nodes each NodePool may start disrupting for the method's reason (commands
    /// in flight subtracted); a NodePool missing here allows none.
    pub budgets: &'a BTreeMap<String, u32>,
    /// The pass's scheduling simulation.
    pub simulator: &'a Simulator<'a>,
    /// The instance types of each usable NodePool, by name (prices of candidates, options of
    /// replacements).
    pub catalogues: &'a HashMap<String, Catalogue>,
    /// Tunables.
    pub settings: &'a Settings,
}

/// What a method decided.
#[derive(Debug, Clone, Default)]
pub struct MethodOutcome {
    /// The commands to start (no-ops left out).
    pub commands: Vec<Command>,
    /// Why candidates were passed over, for `DisruptionBlocked` events.
    pub observations: Vec<Observation>,
    /// Whether the commands wait [`VALIDATION_DELAY`] and are re-checked first (emptiness,
    /// consolidation) or start at once (drift).
    pub needs_validation: bool,
}

/// One disruption: candidates to remove, after their replacements are up.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Why.
    pub reason: DisruptionReason,
    /// The candidates' NodeClaim names, sorted.
    pub candidates: Vec<String>,
    /// The NodeClaims to launch first; none means the candidates are only deleted.
    pub replacements: Vec<PlannedNodeClaim>,
    /// When it was decided.
    pub decided_at: Timestamp,
}

impl Command {
    /// A command, its candidates sorted and deduplicated.
    pub fn new(
        reason: DisruptionReason,
        mut candidates: Vec<String>,
        replacements: Vec<PlannedNodeClaim>,
        decided_at: Timestamp,
    ) -> Self {
        candidates.sort();
        candidates.dedup();
        Self {
            reason,
            candidates,
            replacements,
            decided_at,
        }
    }

    /// Upstream's decision: `replace`, `delete` or `no-op`.
    pub fn decision(&self) -> Decision {
        match (self.candidates.is_empty(), self.replacements.is_empty()) {
            (true, _) => Decision::NoOp,
            (false, true) => Decision::Delete,
            (false, false) => Decision::Replace,
        }
    }
}

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decision {
    /// Nothing.
    NoOp,
    /// Delete the candidates.
    Delete,
    /// Launch replacements, then delete the candidates.
    Replace,
}

impl Decision {
    /// `no-op`, `delete`, `replace` (upstream's metric label values).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoOp => "no-op",
            Self::Delete => "delete",
            Self::Replace => "replace",
        }
    }
}

/// Why a validation turned a command down (upstream's validation errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// The candidates changed (no longer candidates, not empty any more...).
    Churn,
    /// A budget no longer allows it (or a candidate was nominated).
    Budget,
    /// The simulation no longer agrees.
    Scheduling,
}

impl RejectionKind {
    /// `churn`, `budget`, `scheduling`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Churn => "churn",
            Self::Budget => "budget",
            Self::Scheduling => "scheduling",
        }
    }
}

/// A command turned down by validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} validation failed: {message}", kind.as_str())]
pub struct Rejected {
    /// Which check failed.
    pub kind: RejectionKind,
    /// What changed, for the `DisruptionAbandoned` event.
    pub message: String,
}

/// How the disruption controller runs, beyond the shared [`Settings`].
#[derive(Debug, Clone)]
pub struct DisruptionOptions {
    /// Whether a NodePool's node class must be `Ready=True` for it to supply replacements (as
    /// the provisioner's option).
    pub require_ready_node_class: bool,
    /// Which labels are well known.
    pub label_policy: LabelPolicy,
    /// Whether preferences count in the simulation.
    pub preference_policy: PreferencePolicy,
    /// How long a node whose replacement failed, or whose drain timed out, waits before it
    /// is tried again.
    pub replacement_retry: Duration,
    /// Consolidation's options (spot-to-spot).
    pub consolidation: ConsolidationOptions,
}

impl Default for DisruptionOptions {
    fn default() -> Self {
        Self {
            require_ready_node_class: true,
            label_policy: LabelPolicy::core(),
            preference_policy: PreferencePolicy::Respect,
            replacement_retry: DEFAULT_REPLACEMENT_RETRY,
            consolidation: ConsolidationOptions::default(),
        }
    }
}

/// How long a node whose replacement failed waits before it is tried again. Upstream retries
/// on its next pass; an offering that keeps failing would then launch an instance every 10 s.
pub const DEFAULT_REPLACEMENT_RETRY: Duration = Duration::from_secs(60);

/// The methods in upstream's order: emptiness, drift, multi-node then single-node
/// consolidation.
pub fn default_methods(options: ConsolidationOptions) -> Vec<Box<dyn Method>> {
    vec![
        Box::new(Emptiness),
        Box::new(Drift),
        Box::new(MultiNodeConsolidation::new(options)),
        Box::new(SingleNodeConsolidation::new(options)),
    ]
}

/// Snapshots and method inputs the unit tests of the disruption modules share.
#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests;
