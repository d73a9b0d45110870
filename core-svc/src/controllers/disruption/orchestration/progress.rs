//! What a command in flight needs next ([`progress`]) and the marks a finished or abandoned
//! command leaves behind ([`stale_marks`]), from the snapshot alone. Pure.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON;

use super::command::{InFlight, claim_condition};
use crate::cluster::Snapshot;
use crate::controllers::disruption::annotations as command_keys;
use crate::controllers::drain::is_cordoned;
use crate::controllers::nodeclaim::name_of;
use crate::controllers::nodeclaim::node_claim_of;

/// What a command in flight needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Every candidate is being deleted or gone: nothing left to do.
    Finished,
    /// Some replacement is not initialized yet.
    Waiting,
    /// Every replacement is initialized: on to the terminate step ([`candidate_step`](super::candidate_step)).
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
    /// label ([`drain::is_cordoned`](crate::controllers::drain::is_cordoned)).
    Taint {
        /// The Node.
        node: String,
    },
    /// The NodeClaim has a `DisruptionReason` condition.
    Condition {
        /// The NodeClaim.
        node_claim: String,
    },
    /// The NodeClaim carries [`COMMAND_ANNOTATIONS`](super::COMMAND_ANNOTATIONS) of a command no longer in flight (a
    /// replacement whose candidates are all gone).
    Annotations {
        /// The NodeClaim.
        node_claim: String,
    },
    /// The Node carries [`COMMAND_ANNOTATIONS`](super::COMMAND_ANNOTATIONS) (copied at registration) while its NodeClaim
    /// is in no command in flight.
    NodeAnnotations {
        /// The Node.
        node: String,
    },
}

/// The disruption marks to remove: on Nodes and NodeClaims neither being deleted nor part of a
/// command in flight (upstream's stale taint cleanup in `controller.go`, and the annotations of finished
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
