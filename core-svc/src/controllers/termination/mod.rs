//! Termination (upstream kubernetes-sigs/karpenter `pkg/controllers/node/termination` and the
//! finalize half of `pkg/controllers/nodeclaim/lifecycle`): what happens between a NodeClaim's (or its Node's) deletion and
//! the moment both are gone.
//!
//! For each launched NodeClaim being deleted that still carries [`TERMINATION_FINALIZER`]:
//!
//! 1. stamp `karpenter.sh/nodeclaim-termination-timestamp` (deletion time plus
//!    terminationGracePeriod) when it has a terminationGracePeriod;
//! 2. delete its Nodes (those with its provider ID), so they show as terminating, keeping them
//!    with the finalizer until the instance is gone;
//! 3. unless a Node is NotReady and the cloud says its instance is gone: taint the Nodes
//!    `karpenter.sh/disrupted:NoSchedule` and drain them tier by tier ([`drain`]), with
//!    `Drained=Unknown` while draining and `Drained=True` once nothing is left to wait for and
//!    at least [`MIN_DRAIN_TIME`] has passed since the drain began (a pod bound just before the
//!    taint landed is caught);
//! 4. `Delete` the instance until the plugin answers Gone (`InstanceTerminating=True` meanwhile);
//! 5. remove the finalizer from the Nodes, then from the NodeClaim.
//!
//! A Node deleted on its own (`kubectl delete node`) gets its NodeClaim deleted, which brings
//! it back to the steps above. A Node being deleted with the finalizer but no NodeClaim is
//! drained and released without touching the cloud (garbage collection owns stray instances).
//! NodeClaims that never launched (no provider ID) are the lifecycle controller's.
//!
//! What to finalize, the deadline and the drain's status are decided in `plan.rs`, pure; this
//! module does the I/O around them.
//!
//! Differences from upstream: one controller instead of two (node termination and NodeClaim
//! finalize), so the instance is deleted once; no VolumeAttachment wait (the cluster port has no
//! VolumeAttachments yet); its metrics (`karpenter_nodeclaims_terminated`,
//! `karpenter_nodes_eviction_requests`) are counted from its events by [`crate::metrics`]; the termination deadline is read from the annotation
//! when present and computed from the spec otherwise (upstream only reads the annotation).

mod plan;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use core_domain::labels::{ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP, LABEL_NODEPOOL};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::nodeclaim::{CONDITION_DRAINED, CONDITION_INSTANCE_TERMINATING};
use karpenter_api::{ConditionStatus, NodeClaim};
use serde_json::{Map, Value, json};

pub use self::plan::*;
use super::drain::{self, DRAIN_POLL, uid_preconditions};
use super::nodeclaim::{
    has_termination_finalizer, node_provider_id, nodes_of, provider_id_of, set_condition,
};
use super::{Context, Controller, ControllerError, Requeue, TERMINATION_FINALIZER};
use crate::cloudprovider::{CloudProvider, CloudProviderError, Deletion};
use crate::cluster::{Cluster, ClusterError, ClusterExt, DeleteOptions, PodsByNode, Snapshot};
use crate::events::{EventType, ObjectRef, Reason, non_empty_fields};
use crate::objects::{is_node_ready, name_of};

/// Repeated events about the same object and cause (a PDB blocking an eviction, the plugin
/// failing) are recorded at most this often; the retries in between only log.
pub const EVENT_DEDUPE_WINDOW: Duration = Duration::from_secs(2 * 60);

/// What a pass remembers between passes; losing it (a restart) only repeats an event.
#[derive(Debug, Default)]
struct Memory {
    /// When each (reason, object) event was last recorded, for [`EVENT_DEDUPE_WINDOW`].
    recorded: HashMap<(String, String), Timestamp>,
    /// The NodeClaims (by UID) whose `InstanceTerminated` was recorded.
    instance_terminated: BTreeSet<String>,
}

/// What one pass tracks.
#[derive(Debug, Default)]
struct Pass {
    plugin_unavailable_reported: bool,
}

/// The termination controller: drains and finalizes deleted NodeClaims and Nodes.
#[derive(Debug)]
pub struct TerminationController<C, P> {
    ctx: Context<C, P>,
    memory: Mutex<Memory>,
}

impl<C: Cluster, P: CloudProvider> TerminationController<C, P> {
    /// A termination controller working through `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            memory: Mutex::new(Memory::default()),
        }
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        // The memory only dedupes events: whatever a panicking holder left is still usable.
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether an event with `reason` about `key` is due: not recorded within the window.
    fn event_due(&self, reason: &str, key: &str, now: Timestamp) -> bool {
        let mut memory = self.memory();
        let entry = (reason.to_owned(), key.to_owned());
        let due = memory
            .recorded
            .get(&entry)
            .is_none_or(|last| until(*last, now) >= EVENT_DEDUPE_WINDOW);
        if due {
            memory.recorded.insert(entry, now);
        }
        due
    }

    fn forget_old(&self, snapshot: &Snapshot, now: Timestamp) {
        let mut memory = self.memory();
        memory
            .recorded
            .retain(|_, last| until(*last, now) < EVENT_DEDUPE_WINDOW);
        let deleting: BTreeSet<&str> = snapshot
            .node_claims()
            .filter(|node_claim| is_deleting(*node_claim))
            .filter_map(|node_claim| node_claim.metadata.uid.as_deref())
            .collect();
        memory
            .instance_terminated
            .retain(|uid| deleting.contains(uid.as_str()));
    }

    /// Logs a plugin failure and records `PluginUnavailable` at most once per pass for the
    /// answers that mean the plugin cannot be trusted right now.
    fn plugin_failed(
        &self,
        pass: &mut Pass,
        error: &CloudProviderError,
        rpc: &str,
        object: ObjectRef,
        provider_id: &str,
    ) {
        tracing::warn!(
            kind = %object.kind,
            name = %object.name,
            provider_id,
            rpc,
            error = %error,
            "cloud provider call failed; keeping the finalizers"
        );
        let unavailable = matches!(
            error,
            CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
        );
        if unavailable && !pass.plugin_unavailable_reported {
            pass.plugin_unavailable_reported = true;
            let key = if object.kind == "Node" {
                "node"
            } else {
                "nodeClaim"
            };
            let fields = non_empty_fields(&[(key, &object.name), ("providerID", provider_id)]);
            self.ctx.event(
                object,
                EventType::Warning,
                Reason::PluginUnavailable,
                format!("{rpc} failed, termination waits: {error}"),
                fields,
            );
        }
    }

    async fn finalize(
        &self,
        pass: &mut Pass,
        snapshot: &Snapshot,
        pods_by_node: &PodsByNode<'_>,
        work: &Finalization,
        now: Timestamp,
    ) -> Result<Requeue, ControllerError> {
        match work {
            Finalization::NodeClaim { node_claim } => {
                let Some(node_claim) = snapshot.node_claim(node_claim) else {
                    return Ok(Requeue::OnChange);
                };
                let nodes = nodes_of(snapshot, node_claim);
                self.finalize_node_claim(pass, pods_by_node, node_claim.clone(), nodes, now)
                    .await
            }
            Finalization::DeleteNodeClaim { node_claim } => {
                let Some(node_claim) = snapshot.node_claim(node_claim) else {
                    return Ok(Requeue::OnChange);
                };
                let name = name_of(node_claim);
                let options = DeleteOptions {
                    grace_period_seconds: None,
                    preconditions: uid_preconditions(node_claim),
                };
                match self
                    .ctx
                    .cluster
                    .delete::<NodeClaim>(None, name, options)
                    .await
                {
                    Ok(()) => {}
                    Err(error) if error.is_not_found() => return Ok(Requeue::OnChange),
                    Err(error) => return Err(error.into()),
                }
                tracing::info!(
                    node_claim = name,
                    "deleting the NodeClaim of a deleted Node"
                );
                // Carry on in this pass with the NodeClaim as it now is.
                let Some(deleting) = self.ctx.cluster.get::<NodeClaim>(None, name).await? else {
                    return Ok(Requeue::OnChange);
                };
                if !has_termination_finalizer(&deleting) || provider_id_of(&deleting).is_empty() {
                    return Ok(Requeue::OnChange);
                }
                let nodes = nodes_of(snapshot, &deleting);
                self.finalize_node_claim(pass, pods_by_node, deleting, nodes, now)
                    .await
            }
            Finalization::OrphanNode { node } => {
                let Some(node) = snapshot.node(node) else {
                    return Ok(Requeue::OnChange);
                };
                self.finalize_orphan_node(pass, pods_by_node, node, now)
                    .await
            }
        }
    }

    /// The steps of the module documentation, as far as they go in this pass.
    async fn finalize_node_claim(
        &self,
        pass: &mut Pass,
        pods_by_node: &PodsByNode<'_>,
        mut node_claim: NodeClaim,
        nodes: Vec<&Node>,
        now: Timestamp,
    ) -> Result<Requeue, ControllerError> {
        let name = name_of(&node_claim).to_owned();
        let provider_id = provider_id_of(&node_claim).to_owned();
        // 1. The deadline, for whoever reads it (upstream's drain and disruption do).
        let deadline = termination_deadline(&node_claim);
        if let Some(deadline) = deadline {
            node_claim = self.annotate_deadline(node_claim, deadline).await?;
        }
        // 2. The Nodes show as terminating.
        let mut nodes = self.delete_nodes(nodes).await?;
        // 3. The drain.
        if !nodes.is_empty() && !is_drained(&node_claim) {
            let outcome = self
                .drain_nodes(pass, &mut nodes, pods_by_node, &name, deadline, now)
                .await?;
            match self
                .record_drain(node_claim, outcome, deadline, now)
                .await?
            {
                DrainStep::Done(drained) => node_claim = *drained,
                DrainStep::Wait(wait) => return Ok(Requeue::After(wait)),
            }
        }
        // 4. The instance.
        match self.ctx.cloud.delete(&provider_id, &name).await {
            Ok(Deletion::Gone) => {}
            Ok(Deletion::Terminating) => {
                self.set_condition(
                    &node_claim,
                    CONDITION_INSTANCE_TERMINATING,
                    ConditionStatus::True,
                    "",
                    "",
                    now,
                )
                .await?;
                return Ok(Requeue::After(self.ctx.settings.termination_poll));
            }
            Err(error) => {
                let object = ObjectRef::cluster_scoped("NodeClaim", &name);
                self.plugin_failed(pass, &error, "Delete", object, &provider_id);
                return Ok(Requeue::After(self.ctx.settings.termination_poll));
            }
        }
        // 5. The finalizers, the Nodes' first.
        self.instance_terminated(&node_claim, &nodes);
        for node in &nodes {
            self.release_node(node, &name).await?;
        }
        self.release_node_claim(&node_claim).await?;
        Ok(Requeue::OnChange)
    }

    /// Records the drain's progress on the NodeClaim: `Drained=Unknown` while draining or
    /// settling (answering when to look again), `Drained=True` once done (answering the
    /// NodeClaim as written). A drain skipped because the instance is gone records nothing.
    async fn record_drain(
        &self,
        node_claim: NodeClaim,
        outcome: DrainOutcome,
        deadline: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<DrainStep, ControllerError> {
        let (pods_left, retry) = match outcome {
            DrainOutcome::InstanceGone => return Ok(DrainStep::Done(Box::new(node_claim))),
            DrainOutcome::Draining(retry) => (true, retry),
            DrainOutcome::Empty => (false, DRAIN_POLL),
        };
        let (status, wait) =
            match drain_status(pods_left, draining_since(&node_claim), now, deadline) {
                DrainStatus::Draining => (ConditionStatus::Unknown, Some(retry)),
                DrainStatus::Settling { until: settled } => {
                    (ConditionStatus::Unknown, Some(until(now, settled)))
                }
                DrainStatus::Drained => (ConditionStatus::True, None),
            };
        let (reason, message) = match status {
            ConditionStatus::True => ("", ""),
            _ => ("Draining", "Draining"),
        };
        let written = self
            .set_condition(&node_claim, CONDITION_DRAINED, status, reason, message, now)
            .await?;
        Ok(match wait {
            Some(wait) => DrainStep::Wait(wait),
            None => {
                tracing::info!(node_claim = name_of(&written), "drained");
                DrainStep::Done(Box::new(written))
            }
        })
    }

    /// Records `InstanceTerminated`, once per NodeClaim while this process lives.
    fn instance_terminated(&self, node_claim: &NodeClaim, nodes: &[Node]) {
        let first_report = node_claim
            .metadata
            .uid
            .clone()
            .is_none_or(|uid| self.memory().instance_terminated.insert(uid));
        if !first_report {
            return;
        }
        let name = name_of(node_claim);
        let provider_id = provider_id_of(node_claim);
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", name),
            EventType::Normal,
            Reason::InstanceTerminated,
            format!("Instance {provider_id} is terminated"),
            non_empty_fields(&[
                ("nodeClaim", name),
                ("providerID", provider_id),
                ("node", nodes.first().map(name_of).unwrap_or_default()),
            ]),
        );
    }

    /// Removes the finalizer from the NodeClaim, which lets it go.
    async fn release_node_claim(&self, node_claim: &NodeClaim) -> Result<(), ControllerError> {
        if !has_termination_finalizer(node_claim) {
            return Ok(());
        }
        match self
            .ctx
            .cluster
            .remove_finalizer(node_claim, TERMINATION_FINALIZER)
            .await
        {
            Ok(_) => {}
            Err(error) if error.is_not_found() => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        let name = name_of(node_claim);
        let provider_id = provider_id_of(node_claim);
        let node_pool = node_claim
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_NODEPOOL))
            .map(String::as_str)
            .unwrap_or_default();
        tracing::info!(node_claim = name, provider_id, "NodeClaim finalized");
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", name),
            EventType::Normal,
            Reason::NodeClaimDeleted,
            "NodeClaim deleted",
            non_empty_fields(&[
                ("nodeClaim", name),
                ("nodePool", node_pool),
                ("providerID", provider_id),
            ]),
        );
        Ok(())
    }

    async fn finalize_orphan_node(
        &self,
        pass: &mut Pass,
        pods_by_node: &PodsByNode<'_>,
        node: &Node,
        now: Timestamp,
    ) -> Result<Requeue, ControllerError> {
        let mut nodes = [node.clone()];
        match self
            .drain_nodes(pass, &mut nodes, pods_by_node, "", None, now)
            .await?
        {
            DrainOutcome::Draining(retry) => Ok(Requeue::After(retry)),
            DrainOutcome::InstanceGone | DrainOutcome::Empty => {
                tracing::warn!(
                    node = name_of(&nodes[0]),
                    "releasing a deleted Node that has no NodeClaim"
                );
                let [node] = nodes;
                self.release_node(&node, "").await?;
                Ok(Requeue::OnChange)
            }
        }
    }

    /// Writes the termination deadline annotation when it is missing.
    async fn annotate_deadline(
        &self,
        node_claim: NodeClaim,
        deadline: Timestamp,
    ) -> Result<NodeClaim, ControllerError> {
        let present = node_claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|annotations| {
                annotations.contains_key(ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP)
            });
        if present {
            return Ok(node_claim);
        }
        let patch = json!({ "metadata": { "annotations": {
            ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: deadline.to_string(),
        } } });
        Ok(self
            .ctx
            .cluster
            .merge_patch::<NodeClaim>(None, name_of(&node_claim), &patch)
            .await?)
    }

    /// Deletes the Nodes not being deleted yet (adding the finalizer first, so none goes before
    /// it is drained), and answers them as they now are; those already gone are left out.
    async fn delete_nodes(&self, nodes: Vec<&Node>) -> Result<Vec<Node>, ControllerError> {
        let mut current = Vec::with_capacity(nodes.len());
        for node in nodes {
            if is_deleting(node) {
                current.push(node.clone());
                continue;
            }
            let name = name_of(node);
            if !has_termination_finalizer(node) {
                self.ctx
                    .cluster
                    .add_finalizer(node, TERMINATION_FINALIZER)
                    .await?;
            }
            let options = DeleteOptions {
                grace_period_seconds: None,
                preconditions: uid_preconditions(node),
            };
            match self.ctx.cluster.delete::<Node>(None, name, options).await {
                Ok(()) => {}
                Err(error) if error.is_not_found() => continue,
                Err(error) => return Err(error.into()),
            }
            tracing::info!(node = name, "deleting the Node of a deleted NodeClaim");
            if let Some(node) = self.ctx.cluster.get::<Node>(None, name).await? {
                current.push(node);
            }
        }
        Ok(current)
    }

    /// Removes the finalizer from a Node, which lets it go.
    async fn release_node(&self, node: &Node, node_claim: &str) -> Result<(), ControllerError> {
        if !has_termination_finalizer(node) {
            return Ok(());
        }
        match self
            .ctx
            .cluster
            .remove_finalizer(node, TERMINATION_FINALIZER)
            .await
        {
            Ok(_) => {}
            Err(error) if error.is_not_found() => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        let name = name_of(node);
        tracing::info!(node = name, node_claim, "Node finalized");
        self.ctx.event(
            ObjectRef::cluster_scoped("Node", name),
            EventType::Normal,
            Reason::NodeDeleted,
            "Node deleted",
            non_empty_fields(&[("node", name), ("nodeClaim", node_claim)]),
        );
        Ok(())
    }

    /// Whether every Node is NotReady and the cloud says its instance is gone: then there is no
    /// kubelet to stop the pods, and nothing to drain (upstream). Any doubt means drain.
    async fn instances_gone(&self, pass: &mut Pass, nodes: &[Node], node_claim: &str) -> bool {
        for node in nodes {
            if is_node_ready(node) {
                return false;
            }
            let provider_id = node_provider_id(node);
            if provider_id.is_empty() {
                return false;
            }
            match self.ctx.cloud.get(provider_id).await {
                Ok(None) => {}
                Ok(Some(_)) | Err(CloudProviderError::Unsupported { .. }) => return false,
                Err(error) => {
                    let object = if node_claim.is_empty() {
                        ObjectRef::cluster_scoped("Node", name_of(node))
                    } else {
                        ObjectRef::cluster_scoped("NodeClaim", node_claim)
                    };
                    self.plugin_failed(pass, &error, "Get", object, provider_id);
                    return false;
                }
            }
        }
        true
    }

    async fn drain_nodes(
        &self,
        pass: &mut Pass,
        nodes: &mut [Node],
        pods_by_node: &PodsByNode<'_>,
        node_claim: &str,
        deadline: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<DrainOutcome, ControllerError> {
        if self.instances_gone(pass, nodes, node_claim).await {
            tracing::info!(
                node_claim,
                "the instance is gone and its Node NotReady: skipping the drain"
            );
            return Ok(DrainOutcome::InstanceGone);
        }
        let event_due = |reason: &str, key: &str| self.event_due(reason, key, now);
        let mut left = false;
        let mut acted = false;
        let mut due = Vec::new();
        for node in nodes.iter_mut() {
            let pods = pods_by_node
                .get(name_of(node))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let Some(pass) =
                drain::drain_node(&self.ctx, node, pods, node_claim, deadline, now, &event_due)
                    .await?
            else {
                // The Node is gone: nothing of it to drain.
                continue;
            };
            *node = pass.node;
            acted |= pass.acted;
            if pass.drained {
                continue;
            }
            left = true;
            due.extend(pass.next_force_delete.into_iter().chain(deadline));
        }
        Ok(if left {
            DrainOutcome::Draining(drain::retry_after(acted, due, now))
        } else {
            DrainOutcome::Empty
        })
    }

    /// Sets a NodeClaim status condition (optimistically: the condition list is replaced whole)
    /// and answers the NodeClaim as written; no write when nothing changes.
    async fn set_condition(
        &self,
        node_claim: &NodeClaim,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<NodeClaim, ControllerError> {
        let mut conditions = node_claim
            .status
            .as_ref()
            .map(|status| status.conditions.clone())
            .unwrap_or_default();
        if !set_condition(&mut conditions, type_, status, reason, message, now) {
            return Ok(node_claim.clone());
        }
        let name = name_of(node_claim);
        let conditions = serde_json::to_value(&conditions).map_err(|error| {
            ClusterError::invalid("NodeClaim", name, "status.conditions", error.to_string())
        })?;
        let mut metadata = Map::new();
        if let Some(resource_version) = &node_claim.metadata.resource_version {
            metadata.insert(
                "resourceVersion".to_owned(),
                Value::String(resource_version.clone()),
            );
        }
        let patch = json!({ "metadata": metadata, "status": { "conditions": conditions } });
        Ok(self
            .ctx
            .cluster
            .merge_patch_status::<NodeClaim>(None, name, &patch)
            .await?)
    }
}

impl<C: Cluster, P: CloudProvider> Controller for TerminationController<C, P> {
    fn name(&self) -> &'static str {
        "node.termination"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let pods_by_node = snapshot.pods_by_node();
        let mut pass = Pass::default();
        let mut requeue = Requeue::OnChange;
        let mut failure = None;
        for work in finalizations(&snapshot) {
            match self
                .finalize(&mut pass, &snapshot, &pods_by_node, &work, now)
                .await
            {
                Ok(next) => requeue = requeue.min(next),
                // Someone wrote in between: read again soon.
                Err(ControllerError::Cluster(error)) if error.is_conflict() => {
                    tracing::debug!(?work, error = %error, "conflict; retrying");
                    requeue = requeue.min(Requeue::After(DRAIN_POLL));
                }
                Err(error) => {
                    tracing::warn!(?work, error = %error, "termination failed; retrying");
                    failure.get_or_insert(error);
                }
            }
        }
        self.forget_old(&snapshot, now);
        match failure {
            Some(error) => Err(error),
            None => Ok(requeue),
        }
    }
}

#[cfg(test)]
mod tests;
