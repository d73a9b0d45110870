//! Executing a [`Command`](super::Command) (upstream's orchestration queue, kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/orchestration/queue.go`), with
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
//!      ([`drain::drain_node`](crate::controllers::drain::drain_node): the taint and the load-balancer exclusion label, then
//!      evictions by [`plan::plan`](crate::controllers::drain::plan::plan), its tiers, order and rules, without a deadline; UID
//!      precondition, `PodEvicted` / `EvictionBlocked`). The timeout is the drain
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
//! [`Observation`](crate::disruption::Observation), so the node's `DisruptionBlocked` says the replacement failed, and
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

mod command;
mod draining;
mod orchestrator;
mod progress;

use std::time::Duration;

use crate::controllers::drain::DRAIN_RETRY_MAX;

pub use self::command::*;
pub use self::draining::*;
pub use self::orchestrator::*;
pub use self::progress::*;

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

pub(super) use crate::events::fields;

#[cfg(test)]
mod tests;
