//! The NodeClaim lifecycle (upstream `pkg/controllers/nodeclaim/lifecycle`): the termination
//! finalizer, the launch through the plugin, registration of the Node that joins with the
//! NodeClaim's provider ID, initialization once that Node is ready, and the liveness timeouts.
//!
//! Each pass plans every NodeClaim from the snapshot ([`plan`], pure), then applies the steps
//! through the ports. A NodeClaim moves one stage per pass at most beyond its finalizer: the
//! writes of a stage are changes, which make the runner call the next pass.
//!
//! Finalization belongs to the termination controller, except for one case handled here: a
//! NodeClaim deleted before it launched (no provider ID). Create may still have succeeded with
//! its answer lost, so the plugin is asked to delete by NodeClaim name until it answers Gone,
//! and only then does the finalizer go.
//!
//! Differences from upstream: the registration timeout counts from the NodeClaim's creation
//! (upstream counts from the `Registered` condition's transition, which it initialises at
//! creation: the same instant in practice); initialization waits for the extended resources the
//! NodeClaim requests (upstream checks every requested resource, cpu and memory included, which a
//! kubelet always reports); there are no registration hooks. Its metrics
//! (`karpenter_nodeclaims_launched`, `karpenter_nodeclaims_launch_failures`) are counted from its
//! events by [`crate::metrics`].

mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use core_domain::labels::{
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODE_INITIALIZED, LABEL_NODEPOOL,
    LABEL_TOPOLOGY_ZONE,
};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};
use karpenter_api::{ConditionStatus, NodeClaim, NodeClaimStatus};
use serde_json::json;

pub use self::plan::*;
use super::nodeclaim::{node_pool_of, provider_id_of, request_of};
use super::provisioning::catalogue::CatalogueCache;
use super::{Context, Controller, ControllerError, Requeue, Snapshot, TERMINATION_FINALIZER};
use crate::cloudprovider::{CloudProvider, CloudProviderError, Deletion, LaunchedNodeClaim, Rpc};
use crate::cluster::{Cluster, ClusterError, ClusterExt, DeleteOptions};
use crate::events::{EventType, ObjectRef, Reason};

/// The lifecycle controller.
#[derive(Debug, Clone)]
pub struct LifecycleController<C, P> {
    ctx: Context<C, P>,
    /// The instance type cache the provisioner plans on, when the manager shares one: an
    /// insufficient-capacity answer drops the NodePool's entry.
    catalogues: Option<Arc<CatalogueCache>>,
}

/// What applying one NodeClaim's steps asks of the pass.
#[derive(Debug, Default)]
struct Outcome {
    requeue: Option<Duration>,
    /// What the plugin answered, when it could not be reached or its answer was refused.
    plugin_unavailable: Option<String>,
}

impl<C: Cluster, P: CloudProvider> LifecycleController<C, P> {
    /// A controller on `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            catalogues: None,
        }
    }

    /// The same controller, dropping a NodePool's entry from `catalogues` when a launch for it
    /// meets insufficient capacity: the plugin then reports those offerings unavailable, and
    /// the provisioner's next pass plans on the plugin's fresh word instead of retrying them
    /// on a cached catalogue until it expires.
    #[must_use]
    pub fn with_catalogues(mut self, catalogues: Arc<CatalogueCache>) -> Self {
        self.catalogues = Some(catalogues);
        self
    }

    fn node_claim_ref(name: &str) -> ObjectRef {
        ObjectRef::cluster_scoped("NodeClaim", name)
    }

    async fn apply(
        &self,
        snapshot: &Snapshot,
        node_claim_plan: &NodeClaimPlan,
    ) -> Result<Outcome, ClusterError> {
        let mut outcome = Outcome::default();
        let Some(mut node_claim) = snapshot.node_claim(&node_claim_plan.node_claim).cloned() else {
            return Ok(outcome);
        };
        for step in &node_claim_plan.steps {
            match step {
                Step::AddFinalizer => {
                    node_claim = self
                        .ctx
                        .cluster
                        .add_finalizer(&node_claim, TERMINATION_FINALIZER)
                        .await?;
                }
                Step::Launch => {
                    self.launch(snapshot, &node_claim, &mut outcome).await?;
                }
                Step::Register { node } => {
                    if let Some(node) = snapshot.node(node) {
                        self.register(&node_claim, node).await?;
                    }
                }
                Step::Initialize { node } => {
                    self.initialize(&node_claim, node).await?;
                }
                Step::Delete(timeout) => {
                    self.delete(&node_claim, timeout.reason(), "").await?;
                }
                Step::FinalizeUnlaunched => {
                    self.finalize_unlaunched(&node_claim, &mut outcome).await?;
                }
            }
        }
        Ok(outcome)
    }

    async fn launch(
        &self,
        snapshot: &Snapshot,
        node_claim: &NodeClaim,
        outcome: &mut Outcome,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let reference = &node_claim.spec.node_class_ref;
        let Some(node_class) = snapshot.node_class_for(reference) else {
            let message = format!(
                "{} {}/{} not found",
                reference.kind, reference.group, reference.name
            );
            self.mark_launch_unknown(
                node_claim,
                "NodeClassNotFound",
                &message,
                Some(Reason::NodeClassNotFound),
            )
            .await?;
            return Ok(());
        };
        let node_class = match serde_json::to_value(node_class) {
            Ok(value) => value,
            Err(error) => {
                tracing::error!(node_claim = name, %error, "node class does not serialize");
                return Ok(());
            }
        };
        let request = match request_of(node_claim) {
            Ok(request) => request,
            Err(error) => {
                self.mark_launch_unknown(
                    node_claim,
                    REASON_INVALID_REQUEST,
                    &error.to_string(),
                    Some(Reason::LaunchFailed),
                )
                .await?;
                return Ok(());
            }
        };
        match self.ctx.cloud.create(&request, &node_class).await {
            Ok(launched) => match foreign_launch(snapshot, name, &launched) {
                None => self.record_launch(node_claim, &launched).await,
                Some(problem) => {
                    // Another NodeClaim's instance: recorded, it would be terminated with
                    // either. As any refused answer: the launch waits and is asked again.
                    tracing::warn!(node_claim = name, %problem, "launch answer refused");
                    self.ctx.cloud.answer_refused(Rpc::Create, &problem);
                    outcome.plugin_unavailable = Some(problem);
                    outcome.requeue = Some(LAUNCH_RETRY);
                    Ok(())
                }
            },
            Err(error) => match launch_failure(&error) {
                LaunchFailure::Delete { reason, message } => {
                    tracing::info!(node_claim = name, reason, %message, "launch failed, deleting the NodeClaim");
                    if matches!(error, CloudProviderError::InsufficientCapacity(_))
                        && let (Some(catalogues), Some(pool)) =
                            (&self.catalogues, node_pool_of(node_claim))
                    {
                        catalogues.forget(pool);
                    }
                    self.ctx.event(
                        Self::node_claim_ref(name),
                        EventType::Warning,
                        Reason::LaunchFailed,
                        format!("Launch failed: {message}"),
                        self.fields(node_claim, [("reason", reason.to_owned())]),
                    );
                    self.delete(node_claim, reason, &message).await
                }
                LaunchFailure::Unknown {
                    reason,
                    message,
                    retry,
                } => {
                    tracing::warn!(node_claim = name, reason, %message, "launch failed");
                    if retry {
                        outcome.requeue = Some(LAUNCH_RETRY);
                    }
                    self.mark_launch_unknown(
                        node_claim,
                        reason,
                        &message,
                        Some(Reason::LaunchFailed),
                    )
                    .await
                }
                LaunchFailure::Pending {
                    message,
                    retry_after,
                } => {
                    tracing::info!(node_claim = name, %message, ?retry_after, "launch in progress");
                    outcome.requeue = Some(retry_after);
                    self.mark_launch_unknown(node_claim, REASON_LAUNCHING, &message, None)
                        .await
                }
                LaunchFailure::PluginUnavailable => {
                    tracing::warn!(node_claim = name, %error, "plugin unavailable, launch postponed");
                    outcome.plugin_unavailable = Some(error.to_string());
                    outcome.requeue = Some(LAUNCH_RETRY);
                    Ok(())
                }
            },
        }
    }

    /// Sets `Launched=Unknown`; the Warning event `event_reason` (none for a launch that is
    /// merely under way) goes out only when the condition changes, so a NodeClaim waiting on
    /// the same problem does not repeat it every pass.
    async fn mark_launch_unknown(
        &self,
        node_claim: &NodeClaim,
        reason: &str,
        message: &str,
        event_reason: Option<Reason>,
    ) -> Result<(), ClusterError> {
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        if !super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_LAUNCHED,
            ConditionStatus::Unknown,
            reason,
            message,
            self.ctx.clock.now(),
        ) {
            return Ok(());
        }
        self.ctx.cluster.replace_status(&updated).await?;
        let Some(event_reason) = event_reason else {
            return Ok(());
        };
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Warning,
            event_reason,
            message,
            self.fields(node_claim, [("reason", reason.to_owned())]),
        );
        Ok(())
    }

    async fn record_launch(
        &self,
        node_claim: &NodeClaim,
        launched: &LaunchedNodeClaim,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        // Metadata first: once the status says Launched, no pass copies the labels any more;
        // the other way round, a lost status write only means Create is asked again, which
        // answers the same instance.
        let node_claim = match launch_metadata_patch(node_claim, launched) {
            Some(patch) => {
                self.ctx
                    .cluster
                    .merge_patch::<NodeClaim>(None, name, &patch)
                    .await?
            }
            None => node_claim.clone(),
        };
        let mut updated = node_claim.clone();
        updated.status = Some(launched_status(
            node_claim.status.as_ref(),
            launched,
            self.ctx.clock.now(),
        ));
        let updated = self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(
            node_claim = name,
            provider_id = %launched.provider_id,
            "launched"
        );
        let labels = updated.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeClaimLaunched,
            format!("Launched {}", launched.provider_id),
            self.fields(
                &updated,
                [
                    ("instanceType", label(LABEL_INSTANCE_TYPE)),
                    ("zone", label(LABEL_TOPOLOGY_ZONE)),
                    ("capacityType", label(LABEL_CAPACITY_TYPE)),
                    ("imageID", launched.image_id.clone().unwrap_or_default()),
                    ("providerID", launched.provider_id.clone()),
                ],
            ),
        );
        Ok(())
    }

    async fn register(&self, node_claim: &NodeClaim, node: &Node) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        // The Node first: a Registered NodeClaim is never synced again.
        self.ctx
            .cluster
            .merge_patch::<Node>(None, node_name, &registration_patch(node_claim, node))
            .await?;
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        status.node_name = node_name.to_owned();
        super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_REGISTERED,
            ConditionStatus::True,
            "",
            "",
            self.ctx.clock.now(),
        );
        self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(node_claim = name, node = node_name, "registered");
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeRegistered,
            format!("Node {node_name} registered"),
            self.fields(
                node_claim,
                [
                    ("node", node_name.to_owned()),
                    ("providerID", provider_id_of(node_claim).to_owned()),
                ],
            ),
        );
        Ok(())
    }

    async fn initialize(
        &self,
        node_claim: &NodeClaim,
        node_name: &str,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({ "metadata": { "labels": { LABEL_NODE_INITIALIZED: "true" } } });
        self.ctx
            .cluster
            .merge_patch::<Node>(None, node_name, &patch)
            .await?;
        let mut updated = node_claim.clone();
        let status = updated.status.get_or_insert_with(NodeClaimStatus::default);
        super::nodeclaim::set_condition(
            &mut status.conditions,
            CONDITION_INITIALIZED,
            ConditionStatus::True,
            "",
            "",
            self.ctx.clock.now(),
        );
        self.ctx.cluster.replace_status(&updated).await?;
        tracing::info!(node_claim = name, node = node_name, "initialized");
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeInitialized,
            format!("Node {node_name} initialized"),
            self.fields(node_claim, [("node", node_name.to_owned())]),
        );
        Ok(())
    }

    async fn delete(
        &self,
        node_claim: &NodeClaim,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        let mut options = DeleteOptions::default();
        options.preconditions.uid = node_claim.metadata.uid.clone();
        match self
            .ctx
            .cluster
            .delete::<NodeClaim>(None, name, options)
            .await
        {
            Ok(()) => {}
            Err(error) if error.is_not_found() => return Ok(()),
            Err(error) => return Err(error),
        }
        tracing::info!(node_claim = name, reason, "deleted the NodeClaim");
        let message = if message.is_empty() {
            format!("Deleted NodeClaim {name}: {reason}")
        } else {
            format!("Deleted NodeClaim {name}: {reason}: {message}")
        };
        self.ctx.event(
            Self::node_claim_ref(name),
            EventType::Normal,
            Reason::NodeClaimDeleted,
            message,
            self.fields(node_claim, [("reason", reason.to_owned())]),
        );
        Ok(())
    }

    async fn finalize_unlaunched(
        &self,
        node_claim: &NodeClaim,
        outcome: &mut Outcome,
    ) -> Result<(), ClusterError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or_default();
        match self.ctx.cloud.delete("", name).await {
            Ok(Deletion::Gone) => {
                self.ctx
                    .cluster
                    .remove_finalizer(node_claim, TERMINATION_FINALIZER)
                    .await?;
                tracing::info!(node_claim = name, "no instance left, finalizer removed");
            }
            Ok(Deletion::Terminating) => {
                outcome.requeue = Some(self.ctx.settings.termination_poll);
            }
            Err(error) => {
                if matches!(
                    error,
                    CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
                ) {
                    outcome.plugin_unavailable = Some(error.to_string());
                }
                tracing::warn!(node_claim = name, %error, "could not make sure no instance was launched");
                outcome.requeue = Some(self.ctx.settings.termination_poll);
            }
        }
        Ok(())
    }

    fn fields<const N: usize>(
        &self,
        node_claim: &NodeClaim,
        extra: [(&str, String); N],
    ) -> BTreeMap<String, String> {
        let mut fields = BTreeMap::new();
        fields.insert(
            "nodeClaim".to_owned(),
            node_claim.metadata.name.clone().unwrap_or_default(),
        );
        if let Some(node_pool) = node_claim
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_NODEPOOL))
        {
            fields.insert("nodePool".to_owned(), node_pool.clone());
        }
        for (key, value) in extra {
            if !value.is_empty() {
                fields.insert(key.to_owned(), value);
            }
        }
        fields
    }
}

impl<C: Cluster, P: CloudProvider> Controller for LifecycleController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.lifecycle"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let plan = plan(
            &snapshot,
            now,
            &self.ctx.settings,
            self.ctx.cloud.supported_node_classes(),
        );
        let mut requeue = plan.requeue;
        // The first NodeClaim held up by the plugin carries the one event of the pass.
        let mut plugin_unavailable: Option<(&str, String)> = None;
        for node_claim_plan in &plan.node_claims {
            match self.apply(&snapshot, node_claim_plan).await {
                Ok(outcome) => {
                    if let Some(after) = outcome.requeue {
                        requeue = requeue.min(Requeue::After(after));
                    }
                    if let Some(message) = outcome.plugin_unavailable
                        && plugin_unavailable.is_none()
                    {
                        plugin_unavailable = Some((node_claim_plan.node_claim.as_str(), message));
                    }
                }
                Err(error @ ClusterError::Unavailable(_)) => return Err(error.into()),
                Err(error) if error.is_conflict() || error.is_not_found() => {
                    // Someone else wrote first, or the object went: read again at once.
                    tracing::debug!(node_claim = %node_claim_plan.node_claim, %error, "write refused");
                    requeue = requeue.min(Requeue::After(Duration::ZERO));
                }
                Err(error) => {
                    tracing::warn!(node_claim = %node_claim_plan.node_claim, %error, "write refused");
                    requeue = requeue.min(Requeue::After(LAUNCH_RETRY));
                }
            }
        }
        if let Some((first, message)) = plugin_unavailable {
            self.ctx.event(
                Self::node_claim_ref(first),
                EventType::Warning,
                Reason::PluginUnavailable,
                format!("The cloud provider plugin is unavailable; launches wait: {message}"),
                BTreeMap::new(),
            );
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests;
