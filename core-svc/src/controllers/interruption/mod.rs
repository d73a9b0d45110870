//! Interruption handling, core's side (upstream keeps it in the AWS provider,
//! aws/karpenter-provider-aws `pkg/controllers/interruption`; here the cloud's part is the
//! plugin's WatchInterruptions stream and the decisions are core's):
//!
//! - a spot interruption, a scheduled change, an instance stopping or terminating behind
//!   core's back, a capacity reservation reclaimed: the NodeClaim is deleted at once, its
//!   termination deadline (`karpenter.sh/nodeclaim-termination-timestamp`) brought forward to
//!   the notice's (PDBs yield to it, as upstream's forceful methods make them), so the drain
//!   finishes before the cloud takes the instance. No disruption budget applies. The
//!   provisioner sees the NodeClaim's pods as needing a place at once and launches their
//!   replacements while the node drains;
//! - a rebalance recommendation: an Event; and drift, when the NodePool opts in with
//!   [`ANNOTATION_REBALANCE_AS_DRIFT`] (the drift controller then replaces the node under the
//!   NodePool's budgets).
//!
//! Each notice is acknowledged once acted on (or found to be about no NodeClaim of core's).
//! [`decide`] is pure; [`inbox`] holds what the stream brought; the controller opens the
//! stream (re-opening it with backoff on its own clock when it ends) and does the I/O.

pub mod inbox;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_NODEPOOL};
use futures::StreamExt as _;
use jiff::Timestamp;
use karpenter_api::{NodeClaim, NodePool};
use serde_json::json;

use super::{Context, Controller, ControllerError, Requeue};
use crate::cloudprovider::{CloudProvider, CloudProviderError, Interruption, InterruptionKind};
use crate::cluster::Cluster;
use crate::controllers::nodeclaim::{
    annotated_termination_deadline, delete_if_same, node_pool_of, set_termination_deadline,
};
use crate::disruption::candidates::node_claims_by_provider_id;
use crate::events::{EventType, ObjectRef, Reason, non_empty_fields};
use crate::objects::name_of;
use inbox::{InterruptionInbox, StreamState};

/// A NodePool annotation: `"true"` makes a rebalance recommendation for one of its nodes
/// drift (`RebalanceRecommendation`), so the node is replaced under the NodePool's budgets
/// before its spot capacity is reclaimed. This project's own; upstream only records an Event.
pub const ANNOTATION_REBALANCE_AS_DRIFT: &str = "karpenter-rs.dev/rebalance-as-drift";

/// The NodeClaim annotation recording when its instance got a rebalance recommendation (RFC
/// 3339), which [`ANNOTATION_REBALANCE_AS_DRIFT`] turns into drift.
pub const ANNOTATION_REBALANCE_RECOMMENDED: &str = "karpenter-rs.dev/rebalance-recommended-at";

/// What to do about one notice.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<'a> {
    /// Nothing of core's: acknowledge it (no NodeClaim has the instance).
    Ignore(&'static str),
    /// A rebalance recommendation: an Event, and drift when the NodePool opts in.
    Rebalance {
        /// The NodeClaim.
        node_claim: &'a NodeClaim,
        /// Whether its NodePool opted in to treat it as drift.
        as_drift: bool,
    },
    /// Replace the node: its termination deadline brought forward to `deadline`, the
    /// NodeClaim deleted (unless it already is).
    Replace {
        /// The NodeClaim.
        node_claim: &'a NodeClaim,
        /// The termination deadline to write (earlier than any it has).
        deadline: Timestamp,
        /// Whether the deadline annotation must be written.
        annotate: bool,
    },
}

/// What to do about `notice` at `now`.
pub fn decide<'a>(
    notice: &Interruption,
    node_claims: &HashMap<&str, &'a NodeClaim>,
    node_pools: &HashMap<&str, &NodePool>,
    now: Timestamp,
) -> Decision<'a> {
    let Some(node_claim) = node_claims.get(notice.provider_id.as_str()).copied() else {
        return Decision::Ignore("no NodeClaim has this instance");
    };
    if !notice.kind.replaces() {
        let as_drift = node_pool_of(node_claim)
            .and_then(|pool| node_pools.get(pool))
            .and_then(|pool| pool.metadata.annotations.as_ref())
            .and_then(|annotations| annotations.get(ANNOTATION_REBALANCE_AS_DRIFT))
            .is_some_and(|value| value == "true");
        return Decision::Rebalance {
            node_claim,
            as_drift,
        };
    }
    // The cloud's deadline, never in the past; none (the instance stops now) is now.
    let deadline = notice
        .deadline
        .and_then(|deadline| Timestamp::try_from(deadline).ok())
        .map_or(now, |deadline| deadline.max(now));
    let existing = annotated_termination_deadline(node_claim);
    let deadline = existing.map_or(deadline, |existing| existing.min(deadline));
    Decision::Replace {
        node_claim,
        deadline,
        annotate: existing != Some(deadline),
    }
}

/// Upstream's Event reason and message for a notice of `kind`.
fn kind_event(kind: InterruptionKind) -> (Reason, EventType, &'static str) {
    match kind {
        InterruptionKind::SpotInterruption => (
            Reason::SpotInterrupted,
            EventType::Warning,
            "Spot interruption warning was triggered",
        ),
        InterruptionKind::RebalanceRecommendation => (
            Reason::SpotRebalanceRecommendation,
            EventType::Normal,
            "Spot rebalance recommendation was triggered",
        ),
        InterruptionKind::ScheduledChange => (
            Reason::InstanceUnhealthy,
            EventType::Warning,
            "An unhealthy warning was triggered for the instance",
        ),
        InterruptionKind::Stopping => (
            Reason::InstanceStopping,
            EventType::Warning,
            "Instance is stopping",
        ),
        InterruptionKind::Terminating => (
            Reason::InstanceTerminating,
            EventType::Warning,
            "Instance is terminating",
        ),
        InterruptionKind::CapacityReservationInterruption => (
            Reason::CapacityReservationInstanceInterrupted,
            EventType::Warning,
            "Capacity Reservation interruption warning was triggered",
        ),
    }
}

/// The interruption controller.
#[derive(Debug)]
pub struct InterruptionController<C, P> {
    ctx: Context<C, P>,
    inbox: Arc<InterruptionInbox>,
    /// When the closed stream may be opened again.
    reopen_at: Mutex<Option<Timestamp>>,
    /// When the stream now open was opened.
    opened_at: Mutex<Option<Timestamp>>,
    /// The task forwarding the open stream into the inbox; stopped with the controller.
    reader: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl<C, P> Drop for InterruptionController<C, P> {
    fn drop(&mut self) {
        if let Some(reader) = self
            .reader
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            reader.abort();
        }
    }
}

impl<C: Cluster, P: CloudProvider> InterruptionController<C, P> {
    /// A controller working through `ctx`, reading `inbox` (which the manager watches).
    pub fn new(ctx: Context<C, P>, inbox: Arc<InterruptionInbox>) -> Self {
        Self {
            ctx,
            inbox,
            reopen_at: Mutex::new(None),
            opened_at: Mutex::new(None),
            reader: Mutex::new(None),
        }
    }

    /// Opens the stream when it is closed and its backoff has passed; the wait left when
    /// not yet.
    async fn ensure_stream(&self, now: Timestamp) -> Option<Duration> {
        if self.inbox.stream() != StreamState::Closed {
            return None;
        }
        // A stream that served a good while before it ended starts the backoff over.
        let opened_at = self
            .opened_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if opened_at.is_some_and(|at| {
            Duration::try_from(now.duration_since(at)).is_ok_and(|open| open >= inbox::BACKOFF_MAX)
        }) {
            self.inbox.reset_failures();
        }
        if let Some(wait) = self.inbox.schedule_reopen() {
            *self
                .reopen_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some(now.saturating_add(wait).unwrap_or(Timestamp::MAX));
        }
        let reopen_at = *self
            .reopen_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = reopen_at
            && at > now
        {
            return Some(Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO));
        }
        match self.ctx.cloud.watch_interruptions().await {
            Ok(mut stream) => {
                self.inbox.opened();
                *self
                    .opened_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(now);
                tracing::info!("watching the plugin's interruption notices");
                let inbox = Arc::clone(&self.inbox);
                let reader = tokio::spawn(async move {
                    while let Some(item) = stream.next().await {
                        match item {
                            Ok(batch) => inbox.push(batch),
                            Err(error) => {
                                tracing::warn!(%error, "the interruption stream broke; re-opening it");
                                break;
                            }
                        }
                    }
                    inbox.closed();
                });
                if let Some(previous) = self
                    .reader
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .replace(reader)
                {
                    previous.abort();
                }
                None
            }
            Err(CloudProviderError::Unsupported { .. }) => {
                tracing::info!(
                    "the plugin sends no interruption notices; interruptions are seen only when instances are gone"
                );
                self.inbox.unsupported();
                None
            }
            Err(error) => {
                tracing::warn!(%error, "cannot open the interruption stream; trying again");
                self.inbox.closed();
                let wait = self.inbox.schedule_reopen().unwrap_or(inbox::BACKOFF_MIN);
                *self
                    .reopen_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    Some(now.saturating_add(wait).unwrap_or(Timestamp::MAX));
                Some(wait)
            }
        }
    }

    /// Acts on one notice; `Ok` once it may be acknowledged.
    async fn act(
        &self,
        notice: &Interruption,
        decision: Decision<'_>,
    ) -> Result<(), ControllerError> {
        let (node_claim, replace) = match decision {
            Decision::Ignore(why) => {
                tracing::debug!(event_id = %notice.event_id, provider_id = %notice.provider_id, why, "interruption notice ignored");
                return Ok(());
            }
            Decision::Rebalance {
                node_claim,
                as_drift,
            } => {
                if as_drift {
                    let patch = json!({ "metadata": { "annotations": {
                        ANNOTATION_REBALANCE_RECOMMENDED: self.ctx.clock.now().to_string(),
                    } } });
                    self.ctx
                        .cluster
                        .merge_patch::<NodeClaim>(None, name_of(node_claim), &patch)
                        .await?;
                }
                (node_claim, None)
            }
            Decision::Replace {
                node_claim,
                deadline,
                annotate,
            } => {
                // Deleted first, then the deadline written (the termination controller runs
                // later in the same round): a deadline never lingers on a NodeClaim whose
                // deletion failed, to force a later, ordinary drain.
                let deleted = node_claim.metadata.deletion_timestamp.is_none();
                if deleted && !delete_if_same(&*self.ctx.cluster, node_claim).await? {
                    return Ok(());
                }
                if annotate {
                    // Gone already (nothing held it): nothing to drain, but what happened is
                    // still said.
                    set_termination_deadline(&*self.ctx.cluster, name_of(node_claim), deadline)
                        .await?;
                }
                (node_claim, Some((deadline, deleted)))
            }
        };
        let name = name_of(node_claim);
        let labels = node_claim.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).map_or("", String::as_str);
        let deadline_text = replace.map(|(d, _)| d.to_string()).unwrap_or_default();
        let fields = non_empty_fields(&[
            ("nodeClaim", name),
            ("nodePool", label(LABEL_NODEPOOL)),
            ("capacityType", label(LABEL_CAPACITY_TYPE)),
            ("kind", notice.kind.as_str()),
            ("reason", notice.kind.metric_name()),
            ("eventId", &notice.event_id),
            ("providerID", &notice.provider_id),
            ("deadline", &deadline_text),
        ]);
        let object = ObjectRef::cluster_scoped("NodeClaim", name);
        self.ctx.event(
            object.clone(),
            EventType::Normal,
            Reason::InterruptionReceived,
            if notice.message.is_empty() {
                format!("{} notice from the cloud", notice.kind.as_str())
            } else {
                format!(
                    "{} notice from the cloud: {}",
                    notice.kind.as_str(),
                    notice.message
                )
            },
            fields.clone(),
        );
        let (reason, type_, message) = kind_event(notice.kind);
        self.ctx.event(
            object.clone(),
            type_,
            reason,
            message.to_owned(),
            fields.clone(),
        );
        if let Some((deadline, true)) = replace {
            tracing::info!(node_claim = name, kind = notice.kind.as_str(), %deadline, "deleting NodeClaim on interruption");
            self.ctx.event(
                object,
                EventType::Warning,
                Reason::TerminatingOnInterruption,
                format!(
                    "Interruption triggered termination for the NodeClaim; drained by {deadline}"
                ),
                fields,
            );
        }
        Ok(())
    }
}

impl<C: Cluster, P: CloudProvider> Controller for InterruptionController<C, P> {
    fn name(&self) -> &'static str {
        "interruption"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let now = self.ctx.clock.now();
        let mut requeue = match self.ensure_stream(now).await {
            Some(wait) => Requeue::After(wait),
            None => Requeue::OnChange,
        };
        let notices = self.inbox.take();
        if !notices.is_empty() {
            let snapshot = match self.ctx.cluster.snapshot().await {
                Ok(snapshot) => snapshot,
                Err(error) => {
                    self.inbox.put_back(notices);
                    return Err(error.into());
                }
            };
            let node_claims = node_claims_by_provider_id(&snapshot);
            let node_pools: HashMap<&str, &NodePool> = snapshot
                .node_pools()
                .map(|pool| (name_of(pool), pool))
                .collect();
            let mut failure = None;
            let mut failed = Vec::new();
            for notice in notices {
                let decision = decide(&notice, &node_claims, &node_pools, now);
                match self.act(&notice, decision).await {
                    Ok(()) => self.inbox.acted([notice.event_id.clone()]),
                    // Not acknowledged, and tried again on the next pass.
                    Err(error) => {
                        tracing::warn!(event_id = %notice.event_id, %error, "acting on an interruption failed");
                        failure.get_or_insert(error);
                        failed.push(notice);
                    }
                }
            }
            if let Some(error) = failure {
                self.inbox.put_back(failed);
                return Err(error);
            }
        }
        let acks = self.inbox.take_acks();
        if !acks.is_empty() {
            match self.ctx.cloud.ack_interruptions(&acks).await {
                Ok(()) | Err(CloudProviderError::Unsupported { .. }) => {}
                Err(error) => {
                    tracing::warn!(%error, count = acks.len(), "acknowledging interruptions failed; trying again");
                    self.inbox.ack_failed(acks);
                    requeue = requeue.min(Requeue::After(Duration::from_secs(5)));
                }
            }
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests;
