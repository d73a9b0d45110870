//! [`Orchestrator`]: starts, terminates, rolls back and cleans up commands through the ports,
//! each step idempotent; what to do is decided by the pure functions of its sibling modules.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON;
use karpenter_api::{ConditionStatus, DisruptionReason, NodeClaim, condition};
use serde_json::{Value, json};

use super::command::{
    InFlight, annotation, candidate_patch, claim_condition, node_pools_of, reason_name,
    replacement_names, replacement_object,
};
use super::draining::{
    CandidateStep, DrainClock, NodeDrain, candidate_step, drain_patch, format_seconds, friendly,
};
use super::progress::StaleMark;
use super::{ANNOTATION_COMMAND, ANNOTATION_REPLACES, fields};
use crate::cloudprovider::CloudProvider;
use crate::cluster::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, PodsByNode, Preconditions, Snapshot,
};
use crate::controllers::Context;
use crate::controllers::disruption::Command;
use crate::controllers::disruption::annotations::{self as command_keys, LegacyRename};
use crate::controllers::drain::{self, is_cordoned};
use crate::controllers::nodeclaim::nodes_of;
use crate::events::{EventType, ObjectRef, Reason};
use crate::objects::name_of;

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
    /// A candidate's drain timed out (the reason, starting [`DRAIN_TIMED_OUT`](super::DRAIN_TIMED_OUT)): nothing was
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
            let pods_by_node = snapshot.pods_by_node();
            self.terminate(
                command.reason,
                &command.candidates,
                Some(now),
                snapshot,
                &pods_by_node,
            )
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
    /// done and [`Terminated::timed_out`] says why. `pods_by_node` is the snapshot's
    /// ([`Snapshot::pods_by_node`]), built once by a caller that terminates several commands.
    pub async fn terminate(
        &self,
        reason: DisruptionReason,
        candidates: &[String],
        started_at: Option<Timestamp>,
        snapshot: &Snapshot,
        pods_by_node: &PodsByNode<'_>,
    ) -> Result<Terminated, ClusterError> {
        let now = self.ctx.clock.now();
        let steps: Vec<(&NodeClaim, CandidateStep<'_>)> = candidates
            .iter()
            .filter_map(|name| snapshot.node_claim(name))
            .map(|claim| (claim, candidate_step(claim, snapshot, pods_by_node, now)))
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
pub(super) fn drain_retry(acted: bool, clock: DrainClock, now: Timestamp) -> Duration {
    drain::retry_after(acted, [clock.deadline()], now)
}

pub(super) fn soonest(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}
