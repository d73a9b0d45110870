//! The virtual-time loop.
//!
//! t=0 is the scenario's `start`. Time moves in steps of [`STEP`]; at each step, in this fixed
//! order: the scenario's events that are due, the world's stand-ins (kubelets, scheduler,
//! workload controllers), then every core controller whose pass is due, then the figures.
//! Every call is awaited in turn on one thread, so a scenario and its seed give the same
//! report byte for byte.
//!
//! Which controllers run, in what order and when each is due is core's own
//! [`Manager`], the one `core-svc run` drives: a pass is due when
//! the time its last pass asked for has come, or when anything in the cluster changed since its
//! last pass began (its own writes included, as a watch would deliver them); a failed pass is
//! retried after [`ERROR_RETRY`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use aws_plugin::bootstrap::ClusterSettings;
use aws_plugin::ec2::CapacityType;
use aws_plugin::ec2::memory::hooks::RunningInstance;
use aws_plugin::identity::Identity;
use aws_plugin::instance::tags::{instance_tags, launch_tags};
use aws_plugin::node_class::ClusterIdentity;
use aws_plugin::provider::{AwsCloudProvider, ProviderSettings};
use aws_plugin::sqs::memory::MemorySqs;
use core_domain::labels::LabelPolicy;
use core_domain::resources::ResourceList;
use core_domain::scheduler::bound::lower_bound;
use core_svc::cloudprovider::CloudProvider;
use core_svc::cluster::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, InMemoryCluster, Snapshot,
};
use core_svc::controllers::nodeclass::merge_patch_between;
use core_svc::controllers::provisioning::catalogue as core_catalogue;
use core_svc::controllers::provisioning::{convert, selection};
use core_svc::controllers::{Context, Settings};
use core_svc::events::{Event, MemoryEvents, Reason};
use core_svc::features::FeatureGates;
use core_svc::manager::{ControllerKind, Manager, ManagerOptions};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use karpenter_api::nodeclaim::CONDITION_INSTANCE_TERMINATING;
use karpenter_api::{ConditionStatus, NodeClaim, NodeClassReference, NodePool, condition};
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::budgets;
use crate::clock::VirtualClock;
use crate::cloud::{CloudError, InstanceView, KUBERNETES_VERSION, SimCloud};
use crate::contention::{ContendedCluster, ContentionSwitch};
use crate::outage::{OutageProvider, OutageSwitch};
use crate::report::{
    FinalCondition, FinalInstance, FinalNode, FinalNodeClaim, FinalNodePool, FinalPod, FinalState,
    Report, Stats, TimelineEvent,
};
use crate::scenario::{
    Action, CloudChange, Kind, Manifest, ObjectKey, Scenario, parse_provider_id,
};
use crate::transport::{GrpcProvider, InProcessPlugin, TransportError};
use crate::world::{self, World};

mod events;
mod final_state;
mod interruptions;
mod invariants;
mod recorder;

use final_state::*;
use invariants::Invariants;
pub use invariants::{PENDING_LIMIT, SETTLE, Violation};
use recorder::*;

/// One step of virtual time.
pub const STEP: Duration = Duration::from_secs(1);

/// How soon a failed controller pass runs again.
pub use core_svc::manager::ERROR_RETRY;

/// The cluster's name, as the plugin tags what it launches.
pub const CLUSTER_NAME: &str = "simulated";

/// A controller's `PluginUnavailable` event is kept in the timeline at most this often per
/// object outside a simulated outage (during one, the outage's own entry says it all).
const PLUGIN_UNAVAILABLE_EVERY: Duration = Duration::from_secs(60);

/// The timeline's event types, as `simulator/SCENARIO.md` lists them. Core's other events (`Nominated`,
/// `FailedScheduling`, ...) are not part of the timeline.
pub const TIMELINE_TYPES: [&str; 21] = [
    "NodeClaimCreated",
    "NodeClaimLaunched",
    "LaunchFailed",
    "NodeRegistered",
    "NodeInitialized",
    "NodeClaimDrifted",
    "DriftCleared",
    "DisruptionStarted",
    "DisruptionAbandoned",
    // Why a node that could be disrupted is not.
    "DisruptionBlocked",
    "PodEvicted",
    "EvictionBlocked",
    "NodeClaimDeleted",
    "NodeDeleted",
    "InstanceTerminated",
    "CoreRestarted",
    "PluginUnavailable",
    // When the plugin answers again.
    "PluginAvailable",
    // Core learned of a cloud notice through the plugin (with `kind` and `nodeClaim`).
    "InterruptionReceived",
    // Core started a forceful repair (with `node`, `condition` and `toleration`).
    "NodeUnhealthy",
    // Repair held back: too many of the NodePool's nodes are unhealthy.
    "NodeRepairBlocked",
];

/// The provider the controllers get: the gRPC client of the in-process plugin, cut off during
/// simulated outages.
pub type SimProvider = OutageProvider<GrpcProvider>;

type Ctx = Context<ContendedCluster, SimProvider>;

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The simulated cloud could not be set up.
    #[error("cloud: {0}")]
    Cloud(#[from] CloudError),
    /// core could not reach the in-process plugin.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A scenario object the cluster or the cloud refuses (the scenario is invalid).
    #[error("{field}: {object}: {message}")]
    Apply {
        /// Where the object is in the scenario (`objects[2]`, `events[4].apply`).
        field: String,
        /// The object.
        object: String,
        /// Why it was refused.
        message: String,
    },
    /// The in-memory cluster failed where it cannot.
    #[error("the in-memory cluster failed: {0}")]
    Cluster(#[from] ClusterError),
}

/// What a run tells as it goes.
pub trait Observer {
    /// A timeline event, as it is recorded.
    fn event(&mut self, _event: &TimelineEvent) {}

    /// A step is done: where the run stands.
    fn progress(&mut self, _progress: &Progress) {}
}

/// Where a run stands after a step, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time passed.
    pub elapsed: Duration,
    /// The scenario's duration.
    pub total: Duration,
    /// Nodes at the last change of the cluster.
    pub nodes: usize,
    /// Pods waiting to be scheduled at the last change of the cluster.
    pub pending_pods: usize,
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Runs `scenario` to its end.
pub async fn run(scenario: Scenario, observer: &mut dyn Observer) -> Result<Report, EngineError> {
    Simulation::new(scenario).await?.run(observer).await
}

/// Runs `scenario` to its end with the invariants checked after every pass and change, and at
/// the end when its last event is at least [`SETTLE`] before it: the report and what broke.
pub async fn run_checked(
    scenario: Scenario,
    observer: &mut dyn Observer,
) -> Result<(Report, Vec<Violation>), EngineError> {
    let mut simulation = Simulation::new(scenario).await?;
    simulation.invariants = Some(Invariants::default());
    simulation.run_steps(observer).await?;
    simulation.end_checks().await?;
    let violations = simulation
        .invariants
        .take()
        .map(|invariants| invariants.violations)
        .unwrap_or_default();
    Ok((simulation.report().await?, violations))
}

/// [`run_checked`] on a new current-thread runtime.
pub fn run_checked_blocking(
    scenario: Scenario,
    observer: &mut dyn Observer,
) -> Result<(Report, Vec<Violation>), RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    Ok(runtime.block_on(run_checked(scenario, observer))?)
}

/// Runs `scenario` on a new current-thread runtime (what the binary and the tests call).
pub fn run_blocking(scenario: Scenario, observer: &mut dyn Observer) -> Result<Report, RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    Ok(runtime.block_on(run(scenario, observer))?)
}

/// Why [`run_blocking`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No tokio runtime.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    /// The run failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// core-svc: the controller manager core builds at start-up, all of it in memory only.
type Core = Manager<ContendedCluster, SimProvider>;

/// The first step at or after `due`, as the step loop meets it.
fn first_step_at_or_after(due: Duration) -> Duration {
    let step = STEP.as_nanos();
    let at = due.as_nanos().div_ceil(step).saturating_mul(step);
    Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX))
}

/// A simulation in progress.
#[derive(Debug)]
pub struct Simulation {
    scenario: Scenario,
    clock: VirtualClock,
    cluster: Arc<InMemoryCluster>,
    cloud: SimCloud,
    plugin: InProcessPlugin,
    outage: OutageSwitch,
    /// Write conflicts on core's side of the cluster.
    contention: ContentionSwitch,
    events: Arc<MemoryEvents>,
    label_policy: LabelPolicy,
    core: Core,
    world: World,
    recorder: Recorder,
    next_event: usize,
    provider: Arc<SimProvider>,
    /// The interruption queue aws-plugin reads.
    sqs: Arc<MemorySqs>,
    /// Instances the cloud takes at a time an interruption notice said, by provider ID.
    retirements: Vec<(Timestamp, String)>,
    /// Interruption notices sent so far (their event ids count them).
    interruption_events: u64,
    /// The invariants, when checked ([`run_checked`]).
    invariants: Option<Invariants>,
    /// `cloud: {launchFailures}`: how many of the instances launched until when still fail.
    launch_failures: (usize, Option<Timestamp>),
}

impl Simulation {
    /// Sets the scenario up at t=0: the cloud, the plugin and core connected to it, the
    /// cluster with the scenario's objects, the adopted fleet's instances.
    pub async fn new(scenario: Scenario) -> Result<Self, EngineError> {
        let clock = VirtualClock::new(scenario.start);
        let cloud = SimCloud::new(&scenario.cloud, scenario.seed, scenario.start)?;
        // What the in-memory API server admits; core's own policy comes from the plugin's
        // vocabulary at handshake, as in a real cluster.
        let label_policy = aws_plugin::labels::label_policy();
        let cluster = Arc::new(InMemoryCluster::with_label_policy(
            Arc::new(clock.core()),
            scenario.seed,
            label_policy.clone(),
        ));
        let provider = AwsCloudProvider::new(
            cloud.aws.clients(),
            ProviderSettings {
                cluster: ClusterIdentity {
                    name: CLUSTER_NAME.to_owned(),
                    region: scenario.cloud.region.clone(),
                    kubernetes_version: Some(KUBERNETES_VERSION.to_owned()),
                },
                bootstrap: ClusterSettings {
                    name: CLUSTER_NAME.to_owned(),
                    endpoint: "https://simulated.cluster.invalid".to_owned(),
                    ca_bundle: None,
                    cidr: Some("10.100.0.0/16".to_owned()),
                },
                node_class_cache_ttl: None,
            },
            Arc::new(clock.clone()),
        );
        // The interruption queue EventBridge would feed, named after the cluster as
        // deploy/interruption-queue.yaml names it; receipts hide messages on the virtual clock.
        let sqs = Arc::new(MemorySqs::with_clock(Arc::new(clock.clone())));
        sqs.create_queue(CLUSTER_NAME);
        let provider = provider.with_interruption_queue(
            Arc::clone(&sqs) as _,
            Arc::clone(&cloud.aws.ec2) as _,
            CLUSTER_NAME,
        );
        let plugin = InProcessPlugin::start(
            Identity::new(&scenario.cloud.region, None).with_interruption_queue(CLUSTER_NAME),
            provider,
        )
        .await;
        let outage = OutageSwitch::new();
        let contention = ContentionSwitch::new();
        let events = Arc::new(MemoryEvents::new());
        let world = World::new(
            Arc::clone(&cluster),
            cloud.clone(),
            scenario.cloud.launch_delay,
            scenario.cloud.registration_delay,
            label_policy.clone(),
        )
        .with_kube_scheduler(scenario.kube_scheduler);
        let (core, provider) = start_core(
            &plugin,
            &cluster,
            &clock,
            &outage,
            &contention,
            &events,
            scenario.options.feature_gates,
        )
        .await?;
        let mut simulation = Self {
            recorder: Recorder::new(&clock),
            scenario,
            clock,
            cluster,
            cloud,
            plugin,
            outage,
            contention,
            events,
            label_policy,
            core,
            world,
            next_event: 0,
            provider,
            sqs,
            retirements: Vec::new(),
            interruption_events: 0,
            invariants: None,
            launch_failures: (0, None),
        };
        let objects = simulation.scenario.objects.clone();
        for (i, manifest) in objects.iter().enumerate() {
            simulation.apply(&format!("objects[{i}]"), manifest).await?;
        }
        for (i, manifest) in objects.iter().enumerate() {
            if manifest.key.kind == Kind::NodeClaim {
                simulation.adopt(&format!("objects[{i}]"), manifest).await?;
            }
        }
        let snapshot = simulation.cluster.snapshot().await?;
        simulation.recorder.initial_node_claims = snapshot
            .node_claims()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        Ok(simulation)
    }

    /// Runs to the scenario's end and reports.
    pub async fn run(mut self, observer: &mut dyn Observer) -> Result<Report, EngineError> {
        self.run_steps(observer).await?;
        self.report().await
    }

    async fn run_steps(&mut self, observer: &mut dyn Observer) -> Result<(), EngineError> {
        let total = self.scenario.duration;
        let mut elapsed = Duration::ZERO;
        while elapsed <= total {
            let revision = self.cluster.revision();
            self.step(elapsed, observer).await?;
            observer.progress(&Progress {
                elapsed,
                total,
                nodes: self.recorder.nodes,
                pending_pods: self.recorder.pending.len(),
            });
            elapsed = if self.cluster.revision() == revision {
                self.next_busy_step(elapsed, total).await?
            } else {
                elapsed + STEP
            };
        }
        Ok(())
    }

    /// The end-of-run invariants, once the run has been quiet for [`SETTLE`].
    async fn end_checks(&mut self) -> Result<(), EngineError> {
        let Some(invariants) = self.invariants.as_mut() else {
            return Ok(());
        };
        let last_event = self.scenario.events.last().map_or(Duration::ZERO, |e| e.at);
        let snapshot = self.cluster.snapshot().await?;
        let now = self.clock.now();
        invariants.after_change(&snapshot, self.recorder.start, now);
        if self.scenario.duration.saturating_sub(last_event) < SETTLE {
            return Ok(());
        }
        let instances = self.cloud.instances().await;
        self.recorder.track_pending(&snapshot, now);
        invariants.at_end(
            &snapshot,
            &instances,
            &self.recorder.pending,
            self.recorder.start,
            now,
        );
        Ok(())
    }

    /// After a step in which nothing in the cluster changed: the next step at which anything
    /// can happen. Everything that acts does so on a change or at a time it knows in advance
    /// (a scenario event, a controller's requeue, a stand-in's delay, the cloud's clock, the
    /// end of a plugin outage), so the steps before the first of those would change nothing
    /// and record nothing new, and are skipped: a quiet fleet costs a pass per requeue, not
    /// one per second. The step after `total` ends the run; the one at `total` always runs.
    async fn next_busy_step(
        &self,
        elapsed: Duration,
        total: Duration,
    ) -> Result<Duration, EngineError> {
        let now = self.clock.now();
        let snapshot = self.cluster.snapshot().await?;
        let start = self.clock.start();
        let since_start = |at: Timestamp| Duration::try_from(at.duration_since(start)).ok();
        let due = [
            self.core.next_due(),
            self.world.next_due(&snapshot, now).await,
            self.cloud.next_state_change(),
            self.outage.ends_after(now),
            self.next_retirement(),
        ]
        .into_iter()
        .flatten()
        .filter_map(since_start)
        .chain(
            self.scenario
                .events
                .get(self.next_event)
                .map(|event| event.at),
        )
        .min();
        let next = due
            .map_or(total, first_step_at_or_after)
            .max(elapsed + STEP);
        Ok(if elapsed < total {
            next.min(total)
        } else {
            next
        })
    }

    async fn step(
        &mut self,
        elapsed: Duration,
        observer: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        self.clock.set_elapsed(elapsed);
        let now = self.clock.now();
        self.cloud.set_time(now);
        self.recorder.outage_check(&self.outage, now, observer);
        while let Some(event) = self.scenario.events.get(self.next_event) {
            if event.at > elapsed {
                break;
            }
            let event = event.clone();
            self.next_event += 1;
            self.act(&event.field, &event.action, observer).await?;
        }
        self.retire_due(now).await;
        self.fail_launches(now).await;
        self.world.step(now).await?;
        self.recorder
            .record(self.events.drain(), &self.outage, now, observer);
        for kind in ControllerKind::ALL {
            // The state before a pass that may evict, to check its evictions against the
            // budgets (and, when the invariants are checked, before a disruption pass, to
            // check what it chose); read only for those passes.
            let wanted =
                kind.evicts() || (self.invariants.is_some() && kind == ControllerKind::Disruption);
            let before = if wanted && self.core.is_due(kind, now) {
                Some(self.cluster.snapshot().await?)
            } else {
                None
            };
            if self.core.run_if_due(kind, now).await.is_none() {
                continue;
            }
            let mark = self.recorder.timeline.len();
            let violations = self.recorder.pdb_violations;
            let evicted = self
                .recorder
                .record(self.events.drain(), &self.outage, now, observer);
            if let Some(before) = before.as_ref().filter(|_| !evicted.is_empty()) {
                let world = &self.world;
                self.recorder
                    .check_budgets(&evicted, before, &|pod| world.controller_of(pod));
            }
            if let Some(invariants) = self.invariants.as_mut() {
                invariants.after_pass(
                    &self.recorder.timeline[mark..],
                    before
                        .as_ref()
                        .filter(|_| kind == ControllerKind::Disruption),
                    self.recorder.pdb_violations - violations,
                    &evicted,
                    self.recorder.start,
                    now,
                    &self.label_policy,
                );
            }
        }
        // Read before the snapshot: a change landing in between is sampled next step.
        let revision = self.cluster.revision();
        if self.recorder.sampled != Some(revision) {
            let after = self.cluster.snapshot().await?;
            let instances = self.cloud.instances().await;
            self.recorder.sample(&after, &instances, now);
            self.recorder.sampled = Some(revision);
            if let Some(invariants) = self.invariants.as_mut() {
                invariants.after_change(&after, self.recorder.start, now);
            }
        }
        Ok(())
    }

    async fn report(&mut self) -> Result<Report, EngineError> {
        let snapshot = self.cluster.snapshot().await?;
        let instances = self.cloud.instances().await;
        let now = self.clock.now();
        self.recorder.finish(&snapshot, now);
        let final_state = final_state(&snapshot, &instances);
        let mut stats = self.recorder.stats(&snapshot, &instances);
        stats.cost_lower_bound_per_hour_at_end = self.cost_lower_bound(&snapshot).await;
        Ok(Report {
            scenario: self.scenario.name.clone(),
            seed: self.scenario.seed,
            end: self.scenario.duration.as_secs(),
            timeline: std::mem::take(&mut self.recorder.timeline),
            final_state,
            stats,
            series: std::mem::take(&mut self.recorder.series).finish(self.recorder.t(now)),
        })
    }
}

impl Simulation {
    /// What [`Stats::cost_lower_bound_per_hour_at_end`] reports: the bound over the pods that
    /// hold capacity at the end (bound to a Node, neither finished nor being deleted;
    /// DaemonSet pods are each node's overhead instead), against the union of what the usable
    /// NodePools allow at the end. The catalogues are asked of the plugin as core asks them,
    /// past any simulated outage: measuring the run is not part of it.
    async fn cost_lower_bound(&self, snapshot: &Snapshot) -> Option<f64> {
        let provider = self.provider.inner();
        let (usable, _) = selection::usable_node_pools(
            snapshot,
            provider.supported_node_classes(),
            true,
            &self.label_policy,
        );
        let mut node_pools = Vec::with_capacity(usable.len());
        for pool in &usable {
            let name = pool.pool.metadata.name.as_deref().unwrap_or_default();
            // A NodePool left out would raise the bound above what it allows: no bound then.
            // Fetched now, outside core's cache: measuring the run must not change it.
            let types = match core_catalogue::fetch(provider, pool).await {
                Ok(types) => types,
                Err(error) => {
                    tracing::warn!(node_pool = name, %error, "no cost bound: no catalogue");
                    return None;
                }
            };
            match convert::node_pool(pool.pool, types, ResourceList::new()) {
                Ok(spec) => node_pools.push(spec),
                Err(error) => {
                    tracing::warn!(node_pool = name, %error, "no cost bound: invalid NodePool");
                    return None;
                }
            }
        }
        // Pods and DaemonSets that do not convert are left out: fewer pods only lower the
        // bound, and a DaemonSet core cannot read is not one it plans for either.
        let pods: Vec<core_domain::scheduler::Pod> = snapshot
            .pods()
            .filter(|pod| {
                world::bound_node(pod).is_some()
                    && !world::is_terminal(pod)
                    && !world::is_terminating(pod)
                    && !world::is_daemon_set_pod(pod)
            })
            .filter_map(|pod| convert::pod(pod).ok())
            .collect();
        let daemon_set_pods: Vec<core_domain::scheduler::Pod> = snapshot
            .daemon_sets
            .iter()
            .filter_map(|daemon_set| convert::daemon_set_pod(daemon_set).ok())
            .collect();
        match lower_bound(&pods, &node_pools, &daemon_set_pods, &self.label_policy) {
            Ok(bound) => Some((bound.per_hour * 10_000.0).round() / 10_000.0),
            Err(error) => {
                tracing::warn!(%error, "no cost bound");
                None
            }
        }
    }
}

/// Connects a new core to the plugin and builds its controllers: what happens when core-svc
/// starts.
async fn start_core(
    plugin: &InProcessPlugin,
    cluster: &Arc<InMemoryCluster>,
    clock: &VirtualClock,
    outage: &OutageSwitch,
    contention: &ContentionSwitch,
    events: &Arc<MemoryEvents>,
    feature_gates: FeatureGates,
) -> Result<(Core, Arc<SimProvider>), EngineError> {
    let (_connection, handshake, grpc) = plugin.connect().await?;
    let provider = Arc::new(OutageProvider::new(grpc, outage.clone(), clock.core()));
    let ctx: Ctx = Context {
        cluster: Arc::new(ContendedCluster::new(
            Arc::clone(cluster),
            contention.clone(),
            clock.core(),
        )),
        cloud: Arc::clone(&provider),
        clock: Arc::new(clock.core()),
        events: Arc::clone(events) as _,
        settings: Settings::default(),
    };
    let options = ManagerOptions {
        require_ready_node_class: handshake.capabilities.resolve_node_class,
        label_policy: handshake.label_policy(),
        metrics: None,
        feature_gates,
    };
    Ok((Manager::new(ctx, &options), provider))
}
