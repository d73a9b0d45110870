//! The provisioner (upstream kubernetes-sigs/karpenter `pkg/controllers/provisioning`): batches
//! the pods the kube-scheduler could not place, runs the scheduler over the cluster and the
//! cloud provider's instance types, creates the NodeClaims it plans and nominates the pods.
//!
//! One pass:
//!
//! 1. reads a snapshot and picks the pods waiting for capacity ([`selection::waiting_pods`]);
//!    pods nominated earlier ([`nominations`]) and pods a recent decision could not place
//!    ([`batcher::Cooldowns`]) do not count as arrivals;
//! 2. feeds the arrivals to the batching window ([`batcher::Batcher`]); while it is open, the
//!    pass returns [`Requeue::After`] the time left, and decides nothing;
//! 3. once it closed: takes the usable NodePools by weight ([`selection::usable_node_pools`]),
//!    fetches each one's instance types (through the [`CatalogueCache`] it shares with the
//!    disruption controller, [`Provisioner::with_catalogues`]; a NodePool whose fetch fails is skipped this
//!    pass with a Warning event on it), builds the scheduler's input ([`input::build`]: pods
//!    whose fields cannot be read get a Warning event and are left out) and runs
//!    [`core_domain::scheduler::solve`];
//! 4. creates one NodeClaim per planned NodeClaim ([`nodeclaims::node_claim`], event
//!    `NodeClaimCreated`), nominates the pods placed on it or on existing capacity (event
//!    `Nominated`; in [`SharedNominations`], which the disruption controller given the same
//!    handle reads, so it leaves those nodes alone for the window), and records `FailedScheduling` on each pod left out, once per batch.
//!
//! Everything in memory (window, cooldowns, nominations, catalogues) may be lost: after a
//! restart, the NodeClaims created before are in-flight capacity in the scheduler's input, so
//! their pods land on them again instead of causing new ones.
//!
//! Differences from upstream: the pods a decision could not place wait `batch_max` before they
//! open a new window (upstream re-triggers on pod events); limits are checked by the scheduler
//! against the usage in the snapshot, not again before each create (the creates of one pass
//! come from one decision).

pub mod batcher;
pub mod catalogue;
pub mod convert;
pub mod hints;
pub mod input;
pub mod memo;
pub mod nodeclaims;
pub mod nominations;
pub mod selection;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use core_domain::labels::LabelPolicy;
use core_domain::scheduler::{PreferencePolicy, SchedulingResults, solve};
use jiff::Timestamp;

use self::batcher::{BatchState, Batcher, Cooldowns, later};
use self::catalogue::CatalogueCache;
use self::input::{Catalogue, Skipped, Sources};
use self::memo::NodeMemo;
use self::nominations::{Nominations, SharedNominations, Target, nomination_window};
use self::selection::{UsableNodePool, pod_uid};
use super::{Context, Controller, ControllerError, Requeue};
use crate::cloudprovider::{CloudProvider, CloudProviderError};
use crate::cluster::{Cluster, ClusterError, SlimPod, Snapshot};
use crate::events::{EventType, ObjectRef, Reason, fields};
use crate::objects::name_of;

/// How long a NodePool's instance types are reused before they are asked for again.
pub const DEFAULT_INSTANCE_TYPES_TTL: Duration = Duration::from_secs(3 * 60);

/// How the provisioner runs, beyond the shared [`Settings`](super::Settings).
#[derive(Debug, Clone)]
pub struct ProvisionerOptions {
    /// Whether a NodePool's node class must exist and be `Ready=True`; false when the plugin
    /// does not implement ResolveNodeClass (every node class then counts as ready).
    pub require_ready_node_class: bool,
    /// Which labels are well known: core's plus the cloud provider's.
    pub label_policy: LabelPolicy,
    /// Whether preferences count (upstream `--preference-policy`).
    pub preference_policy: PreferencePolicy,
}

impl Default for ProvisionerOptions {
    fn default() -> Self {
        Self {
            require_ready_node_class: true,
            label_policy: LabelPolicy::core(),
            preference_policy: PreferencePolicy::Respect,
        }
    }
}

/// The provisioning controller.
#[derive(Debug)]
pub struct Provisioner<C, P> {
    ctx: Context<C, P>,
    options: ProvisionerOptions,
    state: Mutex<State>,
    /// Locked after `state` when both are: the disruption controller reads them too.
    nominations: SharedNominations,
    instance_types: Arc<CatalogueCache>,
    /// The Nodes of the scheduler's input, converted by earlier passes.
    memo: NodeMemo,
}

#[derive(Debug)]
struct State {
    batcher: Batcher,
    cooldowns: Cooldowns,
}

impl State {
    /// When the next pass is due without a change: the first cooldown or nomination to end.
    fn wake_up(&self, nominations: &Nominations, now: Timestamp) -> Requeue {
        [
            self.cooldowns.next_release(now),
            nominations.next_expiry(now),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(Requeue::OnChange, Requeue::After)
    }
}

/// One closed batch: the pods to place and those reserved on their nominations.
struct Batch<'a> {
    pods: Vec<&'a SlimPod>,
    reserved: Vec<(&'a SlimPod, Target)>,
}

/// What applying a decision did.
#[derive(Default)]
struct Applied {
    /// Pod UID → where it goes.
    nominated: Vec<(String, Target)>,
    /// The first error that stopped the creates.
    error: Option<ClusterError>,
}

impl<C: Cluster, P: CloudProvider> Provisioner<C, P> {
    /// A provisioner with the default options.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self::with_options(ctx, ProvisionerOptions::default())
    }

    /// A provisioner with `options`; its nominations are its own until
    /// [`Provisioner::with_nominations`].
    pub fn with_options(ctx: Context<C, P>, options: ProvisionerOptions) -> Self {
        let settings = &ctx.settings;
        let state = State {
            batcher: Batcher::new(settings.batch_idle, settings.batch_max),
            cooldowns: Cooldowns::new(),
        };
        Self {
            instance_types: Arc::new(CatalogueCache::new(DEFAULT_INSTANCE_TYPES_TTL)),
            nominations: SharedNominations::new(nomination_window(settings.batch_max)),
            ctx,
            options,
            state: Mutex::new(state),
            memo: NodeMemo::new(),
        }
    }

    /// Keeps the nominations in `shared` (replacing its own, which should be empty: call it
    /// before the first pass), so the disruption controller given the same handle sees them.
    /// The handle's window applies; create it with [`nomination_window`] of the settings'
    /// `batch_max`.
    #[must_use]
    pub fn with_nominations(mut self, shared: SharedNominations) -> Self {
        self.nominations = shared;
        self
    }

    /// Fetches instance types through `shared` (replacing its own cache, which should be
    /// empty: call it before the first pass), the one the disruption controller given the same
    /// handle uses too, so both plan on the same catalogue of a NodePool.
    #[must_use]
    pub fn with_catalogues(mut self, shared: Arc<CatalogueCache>) -> Self {
        self.instance_types = shared;
        self
    }

    /// The handle to this provisioner's nominations.
    pub fn shared_nominations(&self) -> SharedNominations {
        self.nominations.clone()
    }

    /// What the pod with UID `pod_uid` is nominated to, if its nomination holds (as of the
    /// last pass).
    pub fn nomination(&self, pod_uid: &str) -> Option<Target> {
        self.nominations
            .lock()
            .get(pod_uid)
            .map(|nomination| nomination.target.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of the state is a whole-value assignment or a map insert: a panic
        // elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn pass(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let waiting = selection::waiting_pods(&snapshot);
        let hinted;
        let next = {
            let mut state = self.lock();
            let mut nominations = self.nominations.lock();
            let uids: Vec<String> = waiting.iter().map(|pod| pod_uid(pod)).collect();
            let live: HashSet<&str> = uids.iter().map(String::as_str).collect();
            nominations.prune(&snapshot, &live, now);
            state.cooldowns.prune(now, &live);
            hinted = hints::hints(&snapshot, &nominations);
            let arrivals: Vec<&str> = uids
                .iter()
                .map(String::as_str)
                .filter(|uid| nominations.get(uid).is_none())
                .filter(|uid| !state.cooldowns.is_held(uid, now))
                .collect();
            match state.batcher.observe(now, arrivals) {
                BatchState::Empty => Err(state.wake_up(&nominations, now)),
                BatchState::Open { closes_in } => {
                    Err(Requeue::After(closes_in).min(state.wake_up(&nominations, now)))
                }
                BatchState::Closed => {
                    state.batcher.reset();
                    let mut batch = Batch {
                        pods: Vec::new(),
                        reserved: Vec::new(),
                    };
                    for (pod, uid) in waiting.iter().zip(&uids) {
                        match nominations.get(uid) {
                            Some(nomination) => {
                                batch.reserved.push((*pod, nomination.target.clone()));
                            }
                            None => batch.pods.push(*pod),
                        }
                    }
                    self.instance_types
                        .retain(|name| snapshot.node_pool(name).is_some());
                    Ok(batch)
                }
            }
        };
        self.write_hints(&hinted).await;
        match next {
            Ok(batch) => self.decide(&snapshot, now, &batch).await,
            Err(requeue) => Ok(requeue),
        }
    }

    /// Writes the placement hints ([`hints`]). A hint that cannot be written is only logged:
    /// it is an optimisation, and the next pass tries again while the pod waits.
    async fn write_hints(&self, hinted: &[hints::Hint<'_>]) {
        for hint in hinted {
            let namespace = hint.pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = hint.pod.metadata.name.as_deref().unwrap_or_default();
            if let Err(error) = self
                .ctx
                .cluster
                .merge_patch_status::<k8s_openapi::api::core::v1::Pod>(
                    Some(namespace),
                    name,
                    &hint.patch(),
                )
                .await
            {
                tracing::debug!(pod = %format!("{namespace}/{name}"), node = hint.node, %error, "cannot hint the pod's node to the kube-scheduler");
            }
        }
    }

    async fn decide(
        &self,
        snapshot: &Snapshot,
        now: Timestamp,
        batch: &Batch<'_>,
    ) -> Result<Requeue, ControllerError> {
        let (usable, unusable) = selection::usable_node_pools(
            snapshot,
            self.ctx.cloud.supported_node_classes(),
            self.options.require_ready_node_class,
            &self.options.label_policy,
        );
        for (pool, why) in &unusable {
            tracing::debug!(node_pool = %name_of(*pool), reason = %why, "NodePool not used");
        }
        let node_pools = self.catalogues(&usable, now).await;
        let catalogues = self.instance_types.all();
        let built = input::build(&Sources {
            snapshot,
            pods: &batch.pods,
            pods_by_node: None,
            reserved: &batch.reserved,
            node_pools: &node_pools,
            catalogues: &catalogues,
            label_policy: &self.options.label_policy,
            preference_policy: self.options.preference_policy,
            memo: Some(&self.memo),
        });
        self.report_skipped(&built.skipped);
        let results = match solve(&built.input) {
            Ok(results) => results,
            Err(error) => {
                // The input is built from a snapshot whose names are unique; should that ever
                // not hold, nothing is created and the pods are retried later.
                tracing::error!(%error, "the scheduler refused its input");
                SchedulingResults::default()
            }
        };
        tracing::info!(
            pods = built.input.pods.len(),
            node_pools = node_pools.len(),
            existing_nodes = built.input.existing_nodes.len(),
            new_node_claims = results.new_node_claims.len(),
            placed_on_existing = results.existing_placements.len(),
            unschedulable = results.unschedulable.len(),
            "scheduled a batch"
        );
        let applied = self.apply(&results, &built, &usable).await;
        self.report_unschedulable(&results);
        let mut state = self.lock();
        let mut nominations = self.nominations.lock();
        for (uid, target) in applied.nominated {
            nominations.nominate(&uid, target, now);
        }
        let retry_at = later(now, self.ctx.settings.batch_max);
        for pod in &batch.pods {
            let uid = pod_uid(pod);
            if nominations.get(&uid).is_none() {
                state.cooldowns.hold(&uid, retry_at);
            }
        }
        let requeue = state.wake_up(&nominations, now);
        drop(nominations);
        drop(state);
        match applied.error {
            Some(error) => Err(error.into()),
            None => Ok(requeue),
        }
    }

    /// The usable NodePools with their instance types, in order; the ones whose instance
    /// types could not be had are left out, with an event.
    async fn catalogues<'a>(
        &self,
        usable: &[UsableNodePool<'a>],
        now: Timestamp,
    ) -> Vec<(&'a karpenter_api::NodePool, Catalogue)> {
        let mut out = Vec::with_capacity(usable.len());
        let mut reported_unavailable = false;
        for pool in usable {
            let name = name_of(pool.pool).to_owned();
            match self
                .instance_types
                .get(self.ctx.cloud.as_ref(), pool, now)
                .await
            {
                Ok(types) => out.push((pool.pool, types)),
                Err(error) => {
                    tracing::warn!(node_pool = %name, %error, "cannot get instance types; NodePool skipped this pass");
                    let unavailable = matches!(
                        error,
                        CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
                    );
                    if unavailable && reported_unavailable {
                        continue;
                    }
                    reported_unavailable |= unavailable;
                    let reason = if unavailable {
                        Reason::PluginUnavailable
                    } else {
                        Reason::GetInstanceTypesFailed
                    };
                    self.ctx.event(
                        ObjectRef::cluster_scoped("NodePool", &name),
                        EventType::Warning,
                        reason,
                        format!("Cannot get the instance types of NodePool {name}: {error}"),
                        fields([("nodePool", name.clone()), ("reason", error.to_string())]),
                    );
                }
            }
        }
        out
    }

    /// Creates the planned NodeClaims and says where each placed pod goes. Stops at the first
    /// error that says the API server is unavailable; a NodeClaim the API refuses is reported
    /// and the others are still created.
    async fn apply(
        &self,
        results: &SchedulingResults,
        built: &input::Built,
        usable: &[UsableNodePool<'_>],
    ) -> Applied {
        let mut applied = Applied::default();
        let uid_of =
            |pod: &core_domain::scheduler::PodId| built.uids.get(&pod.to_string()).cloned();
        for planned in &results.new_node_claims {
            let Some(pool) = usable
                .iter()
                .find(|u| u.pool.metadata.name.as_deref() == Some(planned.node_pool.as_str()))
            else {
                continue;
            };
            let object = nodeclaims::node_claim(planned, pool.pool, pool.node_class);
            let created = match self.ctx.cluster.create(&object).await {
                Ok(created) => created,
                Err(error) => {
                    tracing::warn!(node_pool = %planned.node_pool, %error, "cannot create NodeClaim");
                    if matches!(error, ClusterError::Unavailable(_)) {
                        applied.error = Some(error);
                        break;
                    }
                    self.ctx.event(
                        ObjectRef::cluster_scoped("NodePool", &planned.node_pool),
                        EventType::Warning,
                        Reason::NodeClaimCreationFailed,
                        format!("Cannot create a NodeClaim: {error}"),
                        fields([
                            ("nodePool", planned.node_pool.clone()),
                            ("reason", error.to_string()),
                        ]),
                    );
                    continue;
                }
            };
            let claim_name = name_of(&created).to_owned();
            tracing::info!(
                node_claim = %claim_name,
                node_pool = %planned.node_pool,
                pods = planned.pods.len(),
                instance_types = planned.instance_types.len(),
                requests = %planned.requests,
                "created NodeClaim"
            );
            self.ctx.event(
                ObjectRef::cluster_scoped("NodeClaim", &claim_name),
                EventType::Normal,
                Reason::NodeClaimCreated,
                format!(
                    "Created NodeClaim {claim_name} from NodePool {} for {} pod(s)",
                    planned.node_pool,
                    planned.pods.len()
                ),
                fields([
                    ("nodeClaim", claim_name.clone()),
                    ("nodePool", planned.node_pool.clone()),
                ]),
            );
            for pod in &planned.pods {
                if let Some(uid) = uid_of(pod) {
                    self.nominated_event(pod, &Target::NodeClaim(claim_name.clone()));
                    applied
                        .nominated
                        .push((uid, Target::NodeClaim(claim_name.clone())));
                }
            }
        }
        for (pod, node) in &results.existing_placements {
            if let (Some(uid), Some(target)) = (uid_of(pod), built.targets.get(node)) {
                self.nominated_event(pod, target);
                applied.nominated.push((uid, target.clone()));
            }
        }
        applied
    }

    fn nominated_event(&self, pod: &core_domain::scheduler::PodId, target: &Target) {
        let (kind, key) = match target {
            Target::NodeClaim(_) => ("nodeclaim", "nodeClaim"),
            Target::Node(_) => ("node", "node"),
        };
        self.ctx.event(
            ObjectRef::namespaced("Pod", pod.namespace(), pod.name()),
            EventType::Normal,
            Reason::Nominated,
            format!("Pod should schedule on: {kind}/{}", target.name()),
            fields([("pod", pod.to_string()), (key, target.name().to_owned())]),
        );
    }

    fn report_unschedulable(&self, results: &SchedulingResults) {
        for (pod, reason) in &results.unschedulable {
            tracing::info!(pod = %pod, %reason, "cannot schedule pod");
            self.ctx.event(
                ObjectRef::namespaced("Pod", pod.namespace(), pod.name()),
                EventType::Warning,
                Reason::FailedScheduling,
                format!("Failed to schedule pod, {reason}"),
                fields([("pod", pod.to_string()), ("reason", reason.clone())]),
            );
        }
    }

    fn report_skipped(&self, skipped: &[Skipped]) {
        for skipped in skipped {
            match skipped {
                Skipped::Pod { pod, error, .. } => {
                    tracing::warn!(%pod, field = %error.field, error = %error.message, "ignoring pod");
                    let (namespace, name) = pod.split_once('/').unwrap_or(("", pod));
                    self.ctx.event(
                        ObjectRef::namespaced("Pod", namespace, name),
                        EventType::Warning,
                        Reason::FailedScheduling,
                        format!("Ignoring pod, {error}"),
                        fields([
                            ("pod", pod.clone()),
                            ("field", error.field.clone()),
                            ("reason", error.message.clone()),
                        ]),
                    );
                }
                Skipped::Object { object, error } => {
                    tracing::warn!(%object, field = %error.field, error = %error.message, "left out of scheduling");
                }
            }
        }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for Provisioner<C, P> {
    fn name(&self) -> &'static str {
        "provisioner"
    }

    fn reconcile(&self) -> impl Future<Output = Result<Requeue, ControllerError>> + Send {
        self.pass()
    }
}
