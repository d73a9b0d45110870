//! What the termination controller decides from the snapshot and the clock alone: which
//! NodeClaims and Nodes to finalize ([`finalizations`]), the termination deadline
//! ([`termination_deadline`]) and where a drain stands ([`drain_status`]), with the outcomes
//! the controller's drain steps hand each other. Pure; apart from the controller so that each
//! decision is unit-tested without a port.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::nodeclaim::CONDITION_DRAINED;
use karpenter_api::{ConditionStatus, NodeClaim, condition};

use crate::cluster::Snapshot;
use crate::controllers::nodeclaim::{
    annotated_termination_deadline, has_termination_finalizer, node_claim_of, provider_id_of,
};
use crate::objects::name_of;

/// The shortest a drain lasts, from `Drained=Unknown` to `Drained=True` (upstream
/// `MinDrainTime`): long enough to catch a pod bound just before the taint landed.
pub const MIN_DRAIN_TIME: Duration = Duration::from_secs(5);

/// When the NodeClaim's drain ends regardless of what still runs: the annotation when it
/// holds a valid time (whoever wrote it first fixed it; interruptions and repair write it
/// whether or not there is a terminationGracePeriod, as upstream's forceful methods do), else
/// its deletion time plus its terminationGracePeriod, to the second. `None` while not deleting,
/// or with neither.
pub fn termination_deadline(node_claim: &NodeClaim) -> Option<Timestamp> {
    let deleting_since = node_claim.metadata.deletion_timestamp.as_ref()?;
    let annotated = annotated_termination_deadline(node_claim);
    if annotated.is_some() {
        return annotated;
    }
    let grace = node_claim.spec.termination_grace_period.as_ref()?;
    let deadline = deleting_since
        .0
        .saturating_add(grace.duration())
        .unwrap_or(Timestamp::MAX);
    Some(Timestamp::from_second(deadline.as_second()).unwrap_or(deadline))
}

pub(super) fn is_deleting<K: kube::Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// One piece of work for a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalization {
    /// A Node is being deleted but its NodeClaim is not: delete the NodeClaim, whose
    /// finalization then takes the Node along (upstream's node termination does the same).
    DeleteNodeClaim {
        /// The NodeClaim's name.
        node_claim: String,
    },
    /// A launched NodeClaim is being deleted: drain its Nodes, terminate its instance, release
    /// both.
    NodeClaim {
        /// The NodeClaim's name.
        node_claim: String,
    },
    /// A Node is being deleted with core's finalizer and has no NodeClaim: drain it, release it.
    OrphanNode {
        /// The Node's name.
        node: String,
    },
}

/// Everything the termination controller has to act on in `snapshot`, NodeClaims by name
/// first, then Nodes by name.
pub fn finalizations(snapshot: &Snapshot) -> Vec<Finalization> {
    let mut work: Vec<Finalization> = snapshot
        .node_claims()
        .filter(|node_claim| {
            is_deleting(*node_claim)
                && has_termination_finalizer(*node_claim)
                && !provider_id_of(node_claim).is_empty()
        })
        .map(|node_claim| Finalization::NodeClaim {
            node_claim: name_of(node_claim).to_owned(),
        })
        .collect();
    let mut claims_to_delete = BTreeSet::new();
    for node in snapshot.nodes() {
        if !is_deleting(node) || !has_termination_finalizer(node) {
            continue;
        }
        match node_claim_of(snapshot, node) {
            Some(node_claim) if !is_deleting(node_claim) => {
                claims_to_delete.insert(name_of(node_claim).to_owned());
            }
            // Its NodeClaim's finalization (listed above) handles it.
            Some(_) => {}
            None => work.push(Finalization::OrphanNode {
                node: name_of(node).to_owned(),
            }),
        }
    }
    work.extend(
        claims_to_delete
            .into_iter()
            .map(|node_claim| Finalization::DeleteNodeClaim { node_claim }),
    );
    work
}

/// Where a NodeClaim's drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStatus {
    /// Pods are still waited for.
    Draining,
    /// Nothing is left, but the drain began less than [`MIN_DRAIN_TIME`] ago: look again then.
    Settling {
        /// When the drain may count as done.
        until: Timestamp,
    },
    /// Drained: the instance may go.
    Drained,
}

/// The drain's status given whether pods are left (`pods_left`), when the drain began
/// (`draining_since`, the `Drained=Unknown` transition; `None` when it begins now) and the
/// termination deadline. Past the deadline the drain is over regardless.
pub fn drain_status(
    pods_left: bool,
    draining_since: Option<Timestamp>,
    now: Timestamp,
    deadline: Option<Timestamp>,
) -> DrainStatus {
    if deadline.is_some_and(|deadline| now >= deadline) {
        return DrainStatus::Drained;
    }
    if pods_left {
        return DrainStatus::Draining;
    }
    let until = draining_since
        .unwrap_or(now)
        .saturating_add(MIN_DRAIN_TIME)
        .unwrap_or(Timestamp::MAX);
    if now < until {
        DrainStatus::Settling { until }
    } else {
        DrainStatus::Drained
    }
}

/// When the NodeClaim's drain began: the transition of `Drained` to Unknown.
pub(super) fn draining_since(node_claim: &NodeClaim) -> Option<Timestamp> {
    let status = node_claim.status.as_ref()?;
    condition::find(&status.conditions, CONDITION_DRAINED)
        .filter(|drained| drained.status == ConditionStatus::Unknown)
        .map(|drained| drained.last_transition_time.0)
}

pub(super) fn is_drained(node_claim: &NodeClaim) -> bool {
    node_claim
        .status
        .as_ref()
        .is_some_and(|status| condition::is_true(&status.conditions, CONDITION_DRAINED))
}

/// How long from `now` to `then`, zero when it has passed.
pub(super) fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// What a drain of a NodeClaim's Nodes came to in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DrainOutcome {
    /// The Nodes are NotReady and the cloud says their instance is gone: nothing to drain.
    InstanceGone,
    /// Pods are still waited for; look again after this long.
    Draining(Duration),
    /// Nothing is left to wait for (or the deadline passed).
    Empty,
}

/// Where a NodeClaim stands after its drain was recorded.
#[derive(Debug)]
pub(super) enum DrainStep {
    /// Drained (or skipped): on to the instance, with the NodeClaim as written.
    Done(Box<NodeClaim>),
    /// Not yet: look again after this long.
    Wait(Duration),
}
