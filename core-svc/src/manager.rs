//! The controller manager: the one list of controllers core runs, and when each runs.
//!
//! `core-svc run` drives it on the system clock against the API server; the simulator drives
//! the very same manager on its virtual clock against the in-memory cluster. Neither keeps a
//! list of controllers of its own.
//!
//! A controller's pass is due when the time its last pass asked for ([`Requeue::After`]) has
//! come, or when anything in the cluster changed since its last pass began (its own writes
//! included, as a watch would deliver them). A change is seen through
//! [`Cluster::revision`], which moves on every change the cluster sees; a failed pass is
//! retried after [`ERROR_RETRY`]. Disruption and garbage collection are the exceptions
//! ([`ControllerKind::polled_every`]): like upstream's, they are polled (every 10 s and every
//! 2 min, sooner when they ask) and not run on changes. Controllers run one at a time, in the
//! order of [`ControllerKind::ALL`]: a pass sees every write of the passes before it.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::LabelPolicy;
use tokio::sync::watch;

use crate::cloudprovider::CloudProvider;
use crate::cluster::Cluster;
use crate::controllers::consolidatable::ConsolidatableController;
use crate::controllers::disruption::consolidation::ConsolidationOptions;
use crate::controllers::disruption::{DisruptionController, DisruptionOptions};
use crate::controllers::drift::DriftController;
use crate::controllers::expiration::ExpirationController;
use crate::controllers::gc::GarbageCollectionController;
use crate::controllers::hash::HashController;
use crate::controllers::interruption::InterruptionController;
use crate::controllers::interruption::inbox::InterruptionInbox;
use crate::controllers::lifecycle::LifecycleController;
use crate::controllers::nodeclass::NodeClassController;
use crate::controllers::nodepool::NodePoolStatusController;
use crate::controllers::provisioning::catalogue::CatalogueCache;
use crate::controllers::provisioning::nominations::{SharedNominations, nomination_window};
use crate::controllers::provisioning::{
    DEFAULT_INSTANCE_TYPES_TTL, Provisioner, ProvisionerOptions,
};
use crate::controllers::repair::RepairController;
use crate::controllers::termination::TerminationController;
use crate::controllers::{Context, Controller, ControllerError, Requeue};
use crate::features::FeatureGates;
use crate::metrics::Metrics;

/// How soon a failed controller pass runs again.
pub const ERROR_RETRY: Duration = Duration::from_secs(5);

/// The shortest time between two rounds of [`Manager::drive`]: a round's own writes make every
/// controller due again, and a second a round is the simulator's step too.
pub const ROUND_INTERVAL: Duration = Duration::from_secs(1);

/// The longest [`Manager::drive`] waits with nothing due and no change seen.
pub const MAX_IDLE: Duration = Duration::from_secs(60);

/// Every controller core runs, in the order the manager runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerKind {
    /// Node class status, readiness and static hash (`nodeclass`).
    NodeClass,
    /// NodePool conditions (validation, node class readiness, Ready) and counts
    /// (`nodepool.status`).
    NodePoolStatus,
    /// The NodePool template hash (`nodepool.hash`).
    Hash,
    /// The cloud's interruption notices (`interruption`).
    Interruption,
    /// Node repair (`node.health`).
    Repair,
    /// Pending pods to NodeClaims (`provisioner`).
    Provisioning,
    /// Launch, registration, initialization (`nodeclaim.lifecycle`).
    Lifecycle,
    /// The `Drifted` condition (`nodeclaim.disruption.drift`).
    Drift,
    /// `expireAfter` (`nodeclaim.expiration`).
    Expiration,
    /// Drain and instance deletion (`node.termination`).
    Termination,
    /// NodeClaims without instances and instances without NodeClaims (`nodeclaim.garbagecollection`).
    GarbageCollection,
    /// The `Consolidatable` condition (`nodeclaim.disruption`).
    Consolidatable,
    /// Emptiness, drift and consolidation (`disruption`).
    Disruption,
}

impl ControllerKind {
    /// The controllers in the order a round runs them: node classes and hashes first (what the
    /// others read), interruptions and repair before provisioning (which then places the
    /// replaced nodes' pods in the same round), provisioning before the lifecycle that launches what it
    /// created, disruption last (it acts on everything the others settled).
    pub const ALL: [Self; 13] = [
        Self::NodeClass,
        Self::NodePoolStatus,
        Self::Hash,
        Self::Interruption,
        Self::Repair,
        Self::Provisioning,
        Self::Lifecycle,
        Self::Drift,
        Self::Expiration,
        Self::Termination,
        Self::GarbageCollection,
        Self::Consolidatable,
        Self::Disruption,
    ];

    /// How often a controller that does not run on cluster changes is polled; `None` for the
    /// others, which run on every change and when they asked to. Two are polled, as upstream's
    /// singletons are: disruption (kubernetes-sigs/karpenter,
    /// `pkg/controllers/disruption/controller.go`: every 10 s, sooner when it asks), whose pass
    /// weighs the whole fleet while during a roll the cluster changes every second; and
    /// garbage collection (`pkg/controllers/nodeclaim/garbagecollection/controller.go`: every
    /// `settings.gc_period`, 2 min), which lists every instance of the cloud and looks for
    /// what no change in the cluster can tell it: instances and NodeClaims that lost each other.
    pub fn polled_every(self, settings: &crate::controllers::Settings) -> Option<Duration> {
        match self {
            Self::Disruption => Some(crate::controllers::disruption::POLLING_PERIOD),
            Self::GarbageCollection => Some(settings.gc_period),
            _ => None,
        }
    }

    /// Whether a pass of this controller may evict pods (what the simulator checks against
    /// the budgets).
    pub fn evicts(self) -> bool {
        matches!(self, Self::Termination | Self::Disruption)
    }
}

/// What the manager needs to know beyond the [`Context`].
#[derive(Debug, Clone, Default)]
pub struct ManagerOptions {
    /// The plugin resolves node classes (`ResolveNodeClass`): NodePools wait for their node
    /// class to be Ready before anything is launched or replaced for them.
    pub require_ready_node_class: bool,
    /// The label domains core and the plugin restrict.
    pub label_policy: LabelPolicy,
    /// Where the disruption controller publishes its gauges (budgets' allowed disruptions,
    /// the cluster state); none in the simulator.
    pub metrics: Option<Arc<Metrics>>,
    /// The feature gates (`--feature-gates`, a scenario's `options.featureGates`).
    pub feature_gates: FeatureGates,
}

/// One of core's controllers, over the cluster `C` and the provider `P`.
#[derive(Debug)]
enum AnyController<C, P> {
    NodeClass(NodeClassController<C, P>),
    NodePoolStatus(NodePoolStatusController<C, P>),
    Hash(HashController<C, P>),
    Interruption(InterruptionController<C, P>),
    Repair(RepairController<C, P>),
    Provisioning(Box<Provisioner<C, P>>),
    Lifecycle(LifecycleController<C, P>),
    Drift(DriftController<C, P>),
    Expiration(ExpirationController<C, P>),
    Termination(TerminationController<C, P>),
    GarbageCollection(GarbageCollectionController<C, P>),
    Consolidatable(ConsolidatableController<C, P>),
    Disruption(Box<DisruptionController<C, P>>),
}

macro_rules! each_controller {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            AnyController::NodeClass($c) => $body,
            AnyController::NodePoolStatus($c) => $body,
            AnyController::Hash($c) => $body,
            AnyController::Interruption($c) => $body,
            AnyController::Repair($c) => $body,
            AnyController::Provisioning($c) => $body,
            AnyController::Lifecycle($c) => $body,
            AnyController::Drift($c) => $body,
            AnyController::Expiration($c) => $body,
            AnyController::Termination($c) => $body,
            AnyController::GarbageCollection($c) => $body,
            AnyController::Consolidatable($c) => $body,
            AnyController::Disruption($c) => $body,
        }
    };
}

impl<C: Cluster, P: CloudProvider> AnyController<C, P> {
    fn build(
        kind: ControllerKind,
        ctx: &Context<C, P>,
        options: &ManagerOptions,
        nominations: &SharedNominations,
        catalogues: &Arc<CatalogueCache>,
        interruptions: &Arc<InterruptionInbox>,
    ) -> Self {
        match kind {
            ControllerKind::NodeClass => Self::NodeClass(NodeClassController::new(ctx.clone())),
            ControllerKind::NodePoolStatus => Self::NodePoolStatus(NodePoolStatusController::new(
                ctx.clone(),
                options.label_policy.clone(),
                options.require_ready_node_class,
            )),
            ControllerKind::Hash => Self::Hash(HashController::new(ctx.clone())),
            ControllerKind::Interruption => Self::Interruption(InterruptionController::new(
                ctx.clone(),
                Arc::clone(interruptions),
            )),
            ControllerKind::Repair => Self::Repair(RepairController::new(
                ctx.clone(),
                options.feature_gates.node_repair,
            )),
            ControllerKind::Provisioning => Self::Provisioning(Box::new(
                Provisioner::with_options(
                    ctx.clone(),
                    ProvisionerOptions {
                        require_ready_node_class: options.require_ready_node_class,
                        label_policy: options.label_policy.clone(),
                        ..ProvisionerOptions::default()
                    },
                )
                .with_nominations(nominations.clone())
                .with_catalogues(Arc::clone(catalogues)),
            )),
            ControllerKind::Lifecycle => Self::Lifecycle(
                LifecycleController::new(ctx.clone()).with_catalogues(Arc::clone(catalogues)),
            ),
            ControllerKind::Drift => Self::Drift(DriftController::new(ctx.clone())),
            ControllerKind::Expiration => Self::Expiration(ExpirationController::new(ctx.clone())),
            ControllerKind::Termination => {
                Self::Termination(TerminationController::new(ctx.clone()))
            }
            ControllerKind::GarbageCollection => {
                Self::GarbageCollection(GarbageCollectionController::new(ctx.clone()))
            }
            ControllerKind::Consolidatable => {
                Self::Consolidatable(ConsolidatableController::new(ctx.clone()))
            }
            ControllerKind::Disruption => {
                let controller = DisruptionController::with_options(
                    ctx.clone(),
                    DisruptionOptions {
                        require_ready_node_class: options.require_ready_node_class,
                        label_policy: options.label_policy.clone(),
                        consolidation: ConsolidationOptions {
                            spot_to_spot: options.feature_gates.spot_to_spot_consolidation,
                        },
                        ..DisruptionOptions::default()
                    },
                )
                .with_nominations(nominations.clone())
                .with_catalogues(Arc::clone(catalogues));
                Self::Disruption(Box::new(match &options.metrics {
                    Some(metrics) => controller.with_metrics(Arc::clone(metrics)),
                    None => controller,
                }))
            }
        }
    }

    fn name(&self) -> &'static str {
        each_controller!(self, c => c.name())
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        each_controller!(self, c => c.reconcile().await)
    }
}

/// A controller and when it runs next.
#[derive(Debug)]
struct Slot<C, P> {
    kind: ControllerKind,
    controller: AnyController<C, P>,
    /// When its last pass asked to run again; `None`: only on a change.
    due: Option<Timestamp>,
    /// [`ControllerKind::polled_every`].
    polled: Option<Duration>,
    /// The cluster's revision when its last pass began; `None` before the first pass.
    seen: Option<u64>,
}

/// What one pass did.
#[derive(Debug)]
pub struct Pass {
    /// Which controller ran.
    pub kind: ControllerKind,
    /// Its name, upstream's (`disruption`, `node.termination`, ...).
    pub name: &'static str,
    /// What it answered.
    pub result: Result<Requeue, ControllerError>,
}

/// Every controller of core, each with its schedule. Build one per process start (or per
/// simulated restart): the controllers keep in-memory state (batches, nominations, drift
/// timers) that a restart loses, as upstream's do.
#[derive(Debug)]
pub struct Manager<C, P> {
    ctx: Context<C, P>,
    slots: Vec<Slot<C, P>>,
    /// What the plugin's interruption stream brought: the interruption controller is due
    /// while it has work.
    interruptions: Arc<InterruptionInbox>,
}

impl<C: Cluster, P: CloudProvider> Manager<C, P> {
    /// The controllers of [`ControllerKind::ALL`] over `ctx`. The provisioner and the
    /// disruption controller share one fresh set of nominations and one instance type cache,
    /// in memory.
    pub fn new(ctx: Context<C, P>, options: &ManagerOptions) -> Self {
        let nominations = SharedNominations::new(nomination_window(ctx.settings.batch_max));
        let catalogues = Arc::new(CatalogueCache::new(DEFAULT_INSTANCE_TYPES_TTL));
        let interruptions = Arc::new(InterruptionInbox::new());
        let slots = ControllerKind::ALL
            .into_iter()
            .map(|kind| Slot {
                kind,
                controller: AnyController::build(
                    kind,
                    &ctx,
                    options,
                    &nominations,
                    &catalogues,
                    &interruptions,
                ),
                due: None,
                polled: kind.polled_every(&ctx.settings),
                seen: None,
            })
            .collect();
        Self {
            ctx,
            slots,
            interruptions,
        }
    }

    /// The interruption notices received so far (the simulator waits on it after the cloud
    /// sent some).
    pub fn interruptions(&self) -> &Arc<InterruptionInbox> {
        &self.interruptions
    }

    /// The controllers, in the order they run.
    pub fn kinds(&self) -> impl Iterator<Item = ControllerKind> + '_ {
        self.slots.iter().map(|slot| slot.kind)
    }

    /// Whether `kind` is due at `now`, given the cluster's current revision.
    pub fn is_due(&self, kind: ControllerKind, now: Timestamp) -> bool {
        let revision = self.ctx.cluster.revision();
        self.slots
            .iter()
            .find(|slot| slot.kind == kind)
            .is_some_and(|slot| self.slot_is_due(slot, now, revision))
    }

    /// [`slot_is_due`], and the interruption controller whenever its inbox has work.
    fn slot_is_due(&self, slot: &Slot<C, P>, now: Timestamp, revision: u64) -> bool {
        slot_is_due(slot, now, revision)
            || (slot.kind == ControllerKind::Interruption && self.interruptions.has_work())
    }

    /// Runs `kind`'s pass when it is due at `now`; `None` when it was not.
    pub async fn run_if_due(&mut self, kind: ControllerKind, now: Timestamp) -> Option<Pass> {
        let revision = self.ctx.cluster.revision();
        let inbox_has_work = kind == ControllerKind::Interruption && self.interruptions.has_work();
        let slot = self.slots.iter_mut().find(|slot| slot.kind == kind)?;
        if !slot_is_due(slot, now, revision) && !inbox_has_work {
            return None;
        }
        slot.seen = Some(revision);
        // Wall time, for the debug log only (what a pass costs; never a decision's input).
        let started = std::time::Instant::now();
        let result = slot.controller.reconcile().await;
        tracing::debug!(
            controller = slot.controller.name(),
            elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "controller pass"
        );
        let polled = slot.polled.map(|every| later(now, every));
        slot.due = match &result {
            Ok(Requeue::After(after)) => {
                let asked = later(now, *after);
                Some(polled.map_or(asked, |polled| polled.min(asked)))
            }
            Ok(Requeue::OnChange) => polled,
            Err(error) => {
                tracing::debug!(controller = slot.controller.name(), %error, "controller pass failed; retrying");
                Some(later(now, ERROR_RETRY))
            }
        };
        Some(Pass {
            kind,
            name: slot.controller.name(),
            result,
        })
    }

    /// Runs every due controller once, in order; answers the passes that ran.
    pub async fn run_due(&mut self, now: Timestamp) -> Vec<Pass> {
        let mut passes = Vec::new();
        for kind in ControllerKind::ALL {
            if let Some(pass) = self.run_if_due(kind, now).await {
                passes.push(pass);
            }
        }
        passes
    }

    /// The earliest time a controller asked to run again, if any did. A change in the
    /// cluster makes controllers due before it.
    pub fn next_due(&self) -> Option<Timestamp> {
        let interruptions = self.interruptions.has_work().then(|| self.ctx.clock.now());
        self.slots
            .iter()
            .filter_map(|slot| slot.due)
            .chain(interruptions)
            .min()
    }
}

impl<C: Cluster, P: CloudProvider> Manager<C, P> {
    /// Runs rounds for ever, on the context's clock: every due controller, then a wait until
    /// the next is due or the cluster changes (`changes`, the cluster's revision as it moves),
    /// at least [`ROUND_INTERVAL`] after the round began. Drop the future to stop: a pass cut
    /// short is idempotent and is simply run again by the next manager.
    pub async fn drive(&mut self, mut changes: watch::Receiver<u64>) {
        loop {
            let started = tokio::time::Instant::now();
            changes.borrow_and_update();
            let now = self.ctx.clock.now();
            for pass in self.run_due(now).await {
                if let Err(error) = &pass.result {
                    tracing::warn!(controller = pass.name, %error, "controller pass failed; retrying");
                }
            }
            let idle = self
                .next_due()
                .map_or(MAX_IDLE, |due| {
                    Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO)
                })
                .clamp(ROUND_INTERVAL, MAX_IDLE);
            tokio::time::sleep_until(started + ROUND_INTERVAL).await;
            if self.interruptions.has_work() {
                continue;
            }
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        // The cluster is gone (shutdown): only time makes anything due now.
                        tokio::time::sleep_until(started + idle).await;
                    }
                }
                // A notice (or the stream's end) makes the interruption controller due.
                () = self.interruptions.notified() => {}
                () = tokio::time::sleep_until(started + idle) => {}
            }
        }
    }
}

fn slot_is_due<C, P>(slot: &Slot<C, P>, now: Timestamp, revision: u64) -> bool {
    let changed = match slot.polled {
        // A polled controller's first pass is due at once.
        Some(_) => slot.seen.is_none(),
        None => slot.seen != Some(revision),
    };
    slot.due.is_some_and(|due| due <= now) || changed
}

/// `now + after`, saturating at the end of time.
fn later(now: Timestamp, after: Duration) -> Timestamp {
    now.saturating_add(after).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::cloudprovider::fake::FakeCloudProvider;
    use crate::cluster::{Cluster, InMemoryCluster};
    use crate::controllers::Settings;
    use crate::controllers::testing::{at, node_pool};
    use crate::events::MemoryEvents;

    fn manager() -> (
        Manager<InMemoryCluster, FakeCloudProvider>,
        Arc<InMemoryCluster>,
        Arc<FakeClock>,
    ) {
        manager_over(Arc::new(FakeCloudProvider::new()))
    }

    fn manager_over(
        cloud: Arc<FakeCloudProvider>,
    ) -> (
        Manager<InMemoryCluster, FakeCloudProvider>,
        Arc<InMemoryCluster>,
        Arc<FakeClock>,
    ) {
        let clock = Arc::new(FakeClock::new(at(0)));
        let cluster = Arc::new(InMemoryCluster::new(
            Arc::clone(&clock) as Arc<dyn Clock>,
            7,
        ));
        let ctx = Context {
            cluster: Arc::clone(&cluster),
            cloud,
            clock: Arc::clone(&clock) as Arc<dyn Clock>,
            events: Arc::new(MemoryEvents::new()),
            settings: Settings::default(),
        };
        (
            Manager::new(ctx, &ManagerOptions::default()),
            cluster,
            clock,
        )
    }

    #[test]
    fn the_spot_to_spot_gate_reaches_consolidation() {
        let (manager, ..) = manager();
        assert!(format!("{manager:?}").contains("spot_to_spot: false"));
        let clock = Arc::new(FakeClock::new(at(0)));
        let ctx = Context {
            cluster: Arc::new(InMemoryCluster::new(
                Arc::clone(&clock) as Arc<dyn Clock>,
                7,
            )),
            cloud: Arc::new(FakeCloudProvider::new()),
            clock: clock as Arc<dyn Clock>,
            events: Arc::new(MemoryEvents::new()),
            settings: Settings::default(),
        };
        let options = ManagerOptions {
            feature_gates: "SpotToSpotConsolidation=true".parse().unwrap(),
            ..ManagerOptions::default()
        };
        let manager = Manager::new(ctx, &options);
        assert!(format!("{manager:?}").contains("spot_to_spot: true"));
    }

    fn ran(passes: &[Pass]) -> Vec<ControllerKind> {
        passes.iter().map(|pass| pass.kind).collect()
    }

    #[tokio::test]
    async fn given_a_new_manager_then_every_controller_runs_once_in_order() {
        let (mut manager, _, clock) = manager();
        let passes = manager.run_due(clock.now()).await;
        assert_eq!(ran(&passes), ControllerKind::ALL.to_vec());
        assert_eq!(manager.kinds().collect::<Vec<_>>(), ControllerKind::ALL);
    }

    #[tokio::test]
    async fn given_nothing_changed_then_only_controllers_whose_time_came_run_again() {
        let (mut manager, _, clock) = manager();
        manager.run_due(clock.now()).await;
        // Same instant, no change: nobody is due.
        assert!(manager.run_due(clock.now()).await.is_empty());
        let next = manager
            .next_due()
            .expect("periodic controllers ask to run again");
        clock.set(next);
        let passes = manager.run_due(clock.now()).await;
        assert!(!passes.is_empty());
        assert!(
            passes.len() < ControllerKind::ALL.len(),
            "{:?}",
            ran(&passes)
        );
    }

    #[tokio::test]
    async fn given_a_change_in_the_cluster_then_every_controller_but_the_polled_ones_runs_again() {
        let (mut manager, cluster, clock) = manager();
        manager.run_due(clock.now()).await;
        cluster
            .create(&node_pool("default", json!({})))
            .await
            .expect("a valid NodePool");
        assert!(manager.is_due(ControllerKind::Provisioning, clock.now()));
        let polled = [
            ControllerKind::Disruption,
            ControllerKind::GarbageCollection,
        ];
        for kind in polled {
            assert!(!manager.is_due(kind, clock.now()), "{kind:?}");
        }
        let passes = manager.run_due(clock.now()).await;
        assert_eq!(
            passes.first().map(|p| p.kind),
            Some(ControllerKind::NodeClass)
        );
        assert!(passes.iter().all(|p| !polled.contains(&p.kind)));

        // Each polled controller runs on its period, change or not.
        clock.advance(crate::controllers::disruption::POLLING_PERIOD);
        assert!(manager.is_due(ControllerKind::Disruption, clock.now()));
        assert!(!manager.is_due(ControllerKind::GarbageCollection, clock.now()));
        let passes = manager.run_due(clock.now()).await;
        assert!(passes.iter().any(|p| p.kind == ControllerKind::Disruption));
        clock.set(at(120));
        assert!(manager.is_due(ControllerKind::GarbageCollection, clock.now()));
    }

    #[tokio::test]
    async fn given_a_manager_then_the_provisioner_and_disruption_share_one_instance_type_cache() {
        let cloud = Arc::new(FakeCloudProvider::new());
        let (mut manager, cluster, clock) = manager_over(Arc::clone(&cloud));
        let fetches = || {
            cloud
                .calls()
                .iter()
                .filter(|call| {
                    matches!(call, crate::cloudprovider::fake::Call::InstanceTypes { .. })
                })
                .count()
        };
        cluster
            .create(&node_pool("default", json!({})))
            .await
            .expect("a valid NodePool");
        manager
            .run_if_due(ControllerKind::Disruption, clock.now())
            .await;
        assert_eq!(fetches(), 1, "disruption fetched the NodePool's catalogue");

        let pod = crate::controllers::testing::unschedulable_pod("web", json!({}));
        cluster.create(&pod).await.expect("a valid Pod");
        // The API server keeps the status a create sends out.
        let status = json!({ "status": pod.status });
        cluster
            .merge_patch_status::<k8s_openapi::api::core::v1::Pod>(Some("default"), "web", &status)
            .await
            .expect("a Pod status");
        for _ in 0..3 {
            manager
                .run_if_due(ControllerKind::Provisioning, clock.now())
                .await;
            clock.advance(Settings::default().batch_max);
        }
        let snapshot = cluster.snapshot().await.expect("a snapshot");
        assert_eq!(
            snapshot.node_claims().count(),
            1,
            "the provisioner planned on the catalogue"
        );
        assert_eq!(fetches(), 1, "from the cache disruption filled");
    }
}
