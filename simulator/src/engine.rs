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
use core_domain::labels::{LabelPolicy, aws};
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
pub const TIMELINE_TYPES: [&str; 18] = [
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
];

/// The provider the controllers get: the gRPC client of the in-process plugin, cut off during
/// simulated outages.
pub type SimProvider = OutageProvider<GrpcProvider>;

type Ctx = Context<InMemoryCluster, SimProvider>;

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

    /// Virtual time `elapsed` of `total` has passed.
    fn progress(&mut self, _elapsed: Duration, _total: Duration) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// Runs `scenario` to its end.
pub async fn run(scenario: Scenario, observer: &mut dyn Observer) -> Result<Report, EngineError> {
    Simulation::new(scenario).await?.run(observer).await
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
type Core = Manager<InMemoryCluster, SimProvider>;

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
    events: Arc<MemoryEvents>,
    label_policy: LabelPolicy,
    core: Core,
    world: World,
    recorder: Recorder,
    next_event: usize,
    provider: Arc<SimProvider>,
}

impl Simulation {
    /// Sets the scenario up at t=0: the cloud, the plugin and core connected to it, the
    /// cluster with the scenario's objects, the adopted fleet's instances.
    pub async fn new(scenario: Scenario) -> Result<Self, EngineError> {
        let clock = VirtualClock::new(scenario.start);
        let cloud = SimCloud::new(&scenario.cloud, scenario.seed, scenario.start)?;
        let label_policy =
            LabelPolicy::with_provider(aws::RESTRICTED_LABEL_DOMAINS, aws::WELL_KNOWN_LABELS);
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
        let plugin =
            InProcessPlugin::start(Identity::new(&scenario.cloud.region, None), provider).await;
        let outage = OutageSwitch::new();
        let events = Arc::new(MemoryEvents::new());
        let world = World::new(
            Arc::clone(&cluster),
            cloud.clone(),
            scenario.cloud.launch_delay,
            scenario.cloud.registration_delay,
            label_policy.clone(),
        );
        let (core, provider) =
            start_core(&plugin, &cluster, &clock, &outage, &events, &label_policy).await?;
        let mut simulation = Self {
            recorder: Recorder::new(&clock),
            scenario,
            clock,
            cluster,
            cloud,
            plugin,
            outage,
            events,
            label_policy,
            core,
            world,
            next_event: 0,
            provider,
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
        let total = self.scenario.duration;
        let mut elapsed = Duration::ZERO;
        while elapsed <= total {
            let revision = self.cluster.revision();
            self.step(elapsed, observer).await?;
            observer.progress(elapsed, total);
            elapsed = if self.cluster.revision() == revision {
                self.next_busy_step(elapsed, total).await?
            } else {
                elapsed + STEP
            };
        }
        self.report().await
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
        self.world.step(now).await?;
        self.recorder
            .record(self.events.drain(), &self.outage, now, observer);
        for kind in ControllerKind::ALL {
            // The state before a pass that may evict, to check its evictions against the
            // budgets; read only for those passes.
            let before = if kind.evicts() && self.core.is_due(kind, now) {
                Some(self.cluster.snapshot().await?)
            } else {
                None
            };
            if self.core.run_if_due(kind, now).await.is_none() {
                continue;
            }
            let evicted = self
                .recorder
                .record(self.events.drain(), &self.outage, now, observer);
            if let Some(before) = before.filter(|_| !evicted.is_empty()) {
                let world = &self.world;
                self.recorder
                    .check_budgets(&evicted, &before, &|pod| world.controller_of(pod));
            }
        }
        let before = self.cluster.snapshot().await?;
        self.recorder.sample(&before, now);
        Ok(())
    }

    /// Applies one scenario action.
    async fn act(
        &mut self,
        field: &str,
        action: &Action,
        observer: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        match action {
            Action::Apply(manifest) => {
                let field = format!("{field}.apply");
                self.apply(&field, manifest).await?;
                if manifest.key.kind == Kind::NodeClaim {
                    self.adopt(&field, manifest).await?;
                }
            }
            Action::Delete(key) => self.delete(key).await,
            Action::Scale {
                deployment,
                replicas,
            } => {
                let namespace = deployment.namespace.as_deref().unwrap_or("default");
                if !self
                    .world
                    .scale_deployment(namespace, &deployment.name, *replicas)
                {
                    tracing::warn!(%deployment, "scale: no such Deployment (yet)");
                }
            }
            Action::Cloud(CloudChange::PublishImage(image)) => self.cloud.publish_image(image, now),
            Action::Cloud(CloudChange::CapacityErrors(errors)) => {
                self.cloud.set_capacity_errors(errors);
            }
            Action::RestartCore => {
                let (core, provider) = start_core(
                    &self.plugin,
                    &self.cluster,
                    &self.clock,
                    &self.outage,
                    &self.events,
                    &self.label_policy,
                )
                .await?;
                self.core = core;
                self.provider = provider;
                self.recorder.push(
                    TimelineEvent {
                        t: self.recorder.t(now),
                        type_: "CoreRestarted".to_owned(),
                        fields: BTreeMap::from([(
                            "message".to_owned(),
                            json!("core-svc restarted: every controller's in-memory state is lost"),
                        )]),
                    },
                    observer,
                );
            }
            Action::PluginOutage(length) => {
                self.outage
                    .start(now.saturating_add(*length).unwrap_or(Timestamp::MAX));
                self.recorder.outage_started(now, *length, observer);
            }
        }
        Ok(())
    }

    /// Creates an object of the scenario, or replaces the one of the same kind and name.
    async fn apply(&mut self, field: &str, manifest: &Manifest) -> Result<(), EngineError> {
        let refused = |error: String| EngineError::Apply {
            field: field.to_owned(),
            object: manifest.key.to_string(),
            message: error,
        };
        let object = &manifest.object;
        let cluster = &self.cluster;
        let result = match manifest.key.kind {
            Kind::NodePool => upsert::<NodePool>(cluster, &manifest.key, object).await,
            Kind::Pod => upsert::<Pod>(cluster, &manifest.key, object).await,
            Kind::PodDisruptionBudget => {
                upsert::<PodDisruptionBudget>(cluster, &manifest.key, object).await
            }
            Kind::DaemonSet => upsert::<DaemonSet>(cluster, &manifest.key, object).await,
            Kind::PriorityClass => upsert::<PriorityClass>(cluster, &manifest.key, object).await,
            Kind::NodeClaim => upsert::<NodeClaim>(cluster, &manifest.key, object).await,
            Kind::Node => upsert::<Node>(cluster, &manifest.key, object).await,
            Kind::EC2NodeClass => {
                if let Some(role) = object.pointer("/spec/role").and_then(Value::as_str) {
                    self.cloud.ensure_role(role);
                }
                upsert_node_class(cluster, &manifest.key, object).await
            }
            Kind::Deployment => {
                let deployment: Deployment = from_json(object).map_err(refused)?;
                self.world.apply_deployment(deployment);
                Ok(())
            }
        };
        result.map_err(|error| refused(error.to_string()))
    }

    /// Registers the running instance of an adopted NodeClaim, as if the node class it names
    /// had launched it: a subnet of its zone and the security groups the node class resolves
    /// to now, tagged as the plugin tags what it launches.
    async fn adopt(&mut self, field: &str, manifest: &Manifest) -> Result<(), EngineError> {
        let refused = |message: String| EngineError::Apply {
            field: field.to_owned(),
            object: manifest.key.to_string(),
            message,
        };
        let claim: NodeClaim = from_json(&manifest.object).map_err(refused)?;
        let status = claim.status.clone().unwrap_or_default();
        let (zone, id) = parse_provider_id(&status.provider_id).map_err(refused)?;
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        let instance_type = labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .ok_or_else(|| {
                refused(
                    "an adopted NodeClaim needs its node.kubernetes.io/instance-type label"
                        .to_owned(),
                )
            })?;
        let capacity_type = match labels.get("karpenter.sh/capacity-type").map(String::as_str) {
            Some("spot") => CapacityType::Spot,
            _ => CapacityType::OnDemand,
        };
        let node_pool = labels
            .get("karpenter.sh/nodepool")
            .cloned()
            .unwrap_or_default();
        let reference = &claim.spec.node_class_ref;
        let node_class = self.cluster.get_node_class(reference).await?;
        let node_class_json = node_class
            .as_ref()
            .and_then(|class| serde_json::to_value(class).ok());
        let user_tags: BTreeMap<String, String> = node_class_json
            .as_ref()
            .and_then(|class| class.pointer("/spec/tags"))
            .and_then(|tags| serde_json::from_value(tags.clone()).ok())
            .unwrap_or_default();
        let (subnet_id, security_group_ids) = match &node_class_json {
            Some(json) => match self.provider.resolve_node_class(json).await {
                Ok(resolved) => {
                    let subnet = resolved
                        .status
                        .get("subnets")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|s| s.get("zone").and_then(Value::as_str) == Some(zone.as_str()))
                        .and_then(|s| s.get("id").and_then(Value::as_str))
                        .map(str::to_owned);
                    let groups = resolved
                        .status
                        .get("securityGroups")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|g| g.get("id").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    (subnet, groups)
                }
                Err(error) => {
                    tracing::warn!(%error, "adopting {}: its node class does not resolve", manifest.key);
                    (None, Vec::new())
                }
            },
            None => (None, Vec::new()),
        };
        let launch = launch_tags(CLUSTER_NAME, &node_pool, &reference.name, &user_tags);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let launch_time = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|time| time.0.as_second());
        self.cloud
            .register_running(RunningInstance {
                id,
                instance_type,
                zone,
                capacity_type,
                image_id: Some(status.image_id.clone()).filter(|i| !i.is_empty()),
                subnet_id,
                security_group_ids,
                tags: instance_tags(&launch, &name),
                launch_time,
            })
            .map_err(|error| refused(error.to_string()))?;
        Ok(())
    }

    async fn delete(&mut self, key: &ObjectKey) {
        let namespace = key.namespace.as_deref();
        let name = key.name.as_str();
        let cluster = &self.cluster;
        let options = DeleteOptions::default;
        let result = match key.kind {
            Kind::Deployment => {
                if !self
                    .world
                    .delete_deployment(namespace.unwrap_or("default"), name)
                {
                    tracing::warn!(%key, "delete: no such Deployment");
                }
                Ok(())
            }
            Kind::EC2NodeClass => {
                let reference = NodeClassReference {
                    group: aws_plugin::apis::GROUP.to_owned(),
                    kind: "EC2NodeClass".to_owned(),
                    name: name.to_owned(),
                };
                cluster.delete_node_class(&reference, options()).await
            }
            Kind::NodePool => cluster.delete::<NodePool>(None, name, options()).await,
            Kind::NodeClaim => cluster.delete::<NodeClaim>(None, name, options()).await,
            Kind::Node => cluster.delete::<Node>(None, name, options()).await,
            Kind::Pod => cluster.delete::<Pod>(namespace, name, options()).await,
            Kind::PodDisruptionBudget => {
                cluster
                    .delete::<PodDisruptionBudget>(namespace, name, options())
                    .await
            }
            Kind::DaemonSet => {
                cluster
                    .delete::<DaemonSet>(namespace, name, options())
                    .await
            }
            Kind::PriorityClass => cluster.delete::<PriorityClass>(None, name, options()).await,
        };
        if let Err(error) = result {
            tracing::warn!(%key, %error, "delete failed");
        }
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
        let (usable, _) =
            selection::usable_node_pools(snapshot, provider.supported_node_classes(), true);
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

fn from_json<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|error| error.to_string())
}

/// Connects a new core to the plugin and builds its controllers: what happens when core-svc
/// starts.
async fn start_core(
    plugin: &InProcessPlugin,
    cluster: &Arc<InMemoryCluster>,
    clock: &VirtualClock,
    outage: &OutageSwitch,
    events: &Arc<MemoryEvents>,
    label_policy: &LabelPolicy,
) -> Result<(Core, Arc<SimProvider>), EngineError> {
    let (_connection, handshake, grpc) = plugin.connect().await?;
    let provider = Arc::new(OutageProvider::new(grpc, outage.clone(), clock.core()));
    let ctx: Ctx = Context {
        cluster: Arc::clone(cluster),
        cloud: Arc::clone(&provider),
        clock: Arc::new(clock.core()),
        events: Arc::clone(events) as _,
        settings: Settings::default(),
    };
    let options = ManagerOptions {
        require_ready_node_class: handshake.capabilities.resolve_node_class,
        label_policy: label_policy.clone(),
    };
    Ok((Manager::new(ctx, &options), provider))
}

/// Creates `object`, or replaces the one of its name (keeping its status where the kind has a
/// status subresource, and then writing the manifest's status, for NodeClaims and Nodes given
/// with theirs).
async fn upsert<K: ClusterObject>(
    cluster: &InMemoryCluster,
    key: &ObjectKey,
    object: &Value,
) -> Result<(), String> {
    let mut typed: K = from_json(object)?;
    let existing: Option<K> = cluster
        .get(key.namespace.as_deref(), &key.name)
        .await
        .map_err(|e| e.to_string())?;
    match existing {
        None => {
            typed.meta_mut().resource_version = None;
            cluster.create(&typed).await.map_err(|e| e.to_string())?;
        }
        Some(existing) => {
            typed.meta_mut().resource_version = existing.meta().resource_version.clone();
            cluster.replace(&typed).await.map_err(|e| e.to_string())?;
        }
    }
    if K::STATUS_SUBRESOURCE
        && (K::KIND == "NodeClaim" || K::KIND == "Node")
        && let Some(status) = object.get("status").filter(|s| !s.is_null())
    {
        let patch = json!({"status": status});
        cluster
            .merge_patch_status::<K>(key.namespace.as_deref(), &key.name, &patch)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn upsert_node_class(
    cluster: &InMemoryCluster,
    key: &ObjectKey,
    object: &Value,
) -> Result<(), String> {
    let reference = NodeClassReference {
        group: aws_plugin::apis::GROUP.to_owned(),
        kind: key.kind.as_str().to_owned(),
        name: key.name.clone(),
    };
    match cluster
        .get_node_class(&reference)
        .await
        .map_err(|e| e.to_string())?
    {
        None => {
            let dynamic: DynamicObject = from_json(object)?;
            cluster
                .create_node_class(&dynamic)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Some(existing) => {
            let current = serde_json::to_value(&existing).map_err(|e| e.to_string())?;
            let pick = |value: &Value| {
                json!({
                    "metadata": {
                        "labels": value.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                    },
                    "spec": value.get("spec").cloned().unwrap_or(json!({})),
                })
            };
            match merge_patch_between(&pick(&current), &pick(object)) {
                None => Ok(()),
                Some(patch) => cluster
                    .merge_patch_node_class(&reference, &patch)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            }
        }
    }
}

fn node_pool_of(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels
        .and_then(|labels| labels.get("karpenter.sh/nodepool"))
        .map(String::as_str)
}

/// The timeline and the figures, as the run goes.
#[derive(Debug)]
struct Recorder {
    start: Timestamp,
    timeline: Vec<TimelineEvent>,
    /// When each object's last `PluginUnavailable` from a controller was kept.
    plugin_unavailable: BTreeMap<String, Timestamp>,
    /// Whether a simulated outage was on at the last check (to say when it ends).
    outage_on: bool,
    initial_node_claims: BTreeSet<String>,
    node_claims_seen: BTreeSet<String>,
    max_disrupting: BTreeMap<String, u64>,
    pdb_violations: u64,
    /// Pods waiting to be scheduled: UID -> since when.
    pending: BTreeMap<String, Timestamp>,
    pending_max: Duration,
}

impl Recorder {
    fn new(clock: &VirtualClock) -> Self {
        Self {
            start: clock.start(),
            timeline: Vec::new(),
            plugin_unavailable: BTreeMap::new(),
            outage_on: false,
            initial_node_claims: BTreeSet::new(),
            node_claims_seen: BTreeSet::new(),
            max_disrupting: BTreeMap::new(),
            pdb_violations: 0,
            pending: BTreeMap::new(),
            pending_max: Duration::ZERO,
        }
    }

    fn t(&self, time: Timestamp) -> f64 {
        time.duration_since(self.start).as_secs_f64()
    }

    fn push(&mut self, event: TimelineEvent, observer: &mut dyn Observer) {
        observer.event(&event);
        self.timeline.push(event);
    }

    fn outage_started(&mut self, now: Timestamp, length: Duration, observer: &mut dyn Observer) {
        self.outage_on = true;
        let seconds = length.as_secs_f64();
        self.push(
            TimelineEvent {
                t: self.t(now),
                type_: "PluginUnavailable".to_owned(),
                fields: BTreeMap::from([
                    ("for".to_owned(), json!(seconds)),
                    (
                        "message".to_owned(),
                        json!(format!(
                            "simulated plugin outage: every provider call fails as unavailable for {seconds}s"
                        )),
                    ),
                ]),
            },
            observer,
        );
    }

    fn outage_check(&mut self, outage: &OutageSwitch, now: Timestamp, observer: &mut dyn Observer) {
        if self.outage_on && !outage.is_down(now) {
            self.outage_on = false;
            self.push(
                TimelineEvent {
                    t: self.t(now),
                    type_: "PluginAvailable".to_owned(),
                    fields: BTreeMap::from([(
                        "message".to_owned(),
                        json!("the simulated plugin outage is over"),
                    )]),
                },
                observer,
            );
        }
    }

    /// Turns core's events into timeline entries; answers the pods evicted (`namespace/name`).
    fn record(
        &mut self,
        events: Vec<Event>,
        outage: &OutageSwitch,
        now: Timestamp,
        observer: &mut dyn Observer,
    ) -> Vec<String> {
        let mut evicted = Vec::new();
        for event in events {
            if !TIMELINE_TYPES.contains(&event.reason.as_str()) {
                continue;
            }
            let object = &event.object;
            if event.reason == Reason::PluginUnavailable {
                if outage.is_down(now) {
                    continue;
                }
                let key = format!("{}/{}/{}", object.kind, object.namespace, object.name);
                if self.plugin_unavailable.get(&key).is_some_and(|last| {
                    now.duration_since(*last).as_secs_f64() < PLUGIN_UNAVAILABLE_EVERY.as_secs_f64()
                }) {
                    continue;
                }
                self.plugin_unavailable.insert(key, now);
            }
            let mut fields: BTreeMap<String, Value> = event
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let identity = match object.kind.as_str() {
                "NodeClaim" => Some(("nodeClaim", object.name.clone())),
                "Node" => Some(("node", object.name.clone())),
                "NodePool" => Some(("nodePool", object.name.clone())),
                "Pod" => Some(("pod", format!("{}/{}", object.namespace, object.name))),
                _ => None,
            };
            if let Some((key, value)) = identity {
                fields.entry(key.to_owned()).or_insert(Value::String(value));
            }
            if !event.message.is_empty() {
                fields.insert("message".to_owned(), Value::String(event.message.clone()));
            }
            if event.reason == Reason::PodEvicted
                && let Some(Value::String(pod)) = fields.get("pod")
            {
                evicted.push(pod.clone());
            }
            if event.reason == Reason::NodeClaimCreated
                && let Some(Value::String(name)) = fields.get("nodeClaim")
            {
                self.node_claims_seen.insert(name.clone());
            }
            let entry = TimelineEvent {
                t: self.t(event.time),
                type_: event.reason.as_str().to_owned(),
                fields,
            };
            self.push(entry, observer);
        }
        evicted
    }

    /// Counts the evictions that left a budget of their pod below what it allows.
    fn check_budgets(
        &mut self,
        evicted: &[String],
        before: &Snapshot,
        controller_of: &dyn Fn(&Pod) -> budgets::Controller,
    ) {
        for pdb in &before.pdbs {
            self.pdb_violations += budgets::violations(pdb, &before.pods, evicted, controller_of);
        }
    }

    /// The figures sampled at the end of each step.
    fn sample(&mut self, snapshot: &Snapshot, now: Timestamp) {
        for pool in snapshot.node_pools() {
            if let Some(name) = &pool.metadata.name {
                self.max_disrupting.entry(name.clone()).or_insert(0);
            }
        }
        let deleting_claims: BTreeSet<&str> = snapshot
            .node_claims()
            .filter(|claim| claim.metadata.deletion_timestamp.is_some())
            .filter_map(|claim| claim.status.as_ref())
            .map(|status| status.provider_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        // Upstream's budgets stop counting a node once its instance is terminating (drained,
        // shutting down): kubernetes-sigs/karpenter `pkg/controllers/disruption/helpers.go`,
        // `BuildDisruptionBudgetMapping`.
        let terminating_instances: BTreeSet<&str> = snapshot
            .node_claims()
            .filter_map(|claim| claim.status.as_ref())
            .filter(|status| condition::is_true(&status.conditions, CONDITION_INSTANCE_TERMINATING))
            .map(|status| status.provider_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        let mut disrupting: BTreeMap<&str, u64> = BTreeMap::new();
        for node in snapshot.nodes() {
            let Some(pool) = node_pool_of(node.metadata.labels.as_ref()) else {
                continue;
            };
            let tainted = node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .is_some_and(|taints| taints.iter().any(|t| t.key == "karpenter.sh/disrupted"));
            let provider_id = node
                .spec
                .as_ref()
                .and_then(|spec| spec.provider_id.as_deref())
                .unwrap_or_default();
            let deleting =
                node.metadata.deletion_timestamp.is_some() || deleting_claims.contains(provider_id);
            if (tainted || deleting) && !terminating_instances.contains(provider_id) {
                *disrupting.entry(pool).or_default() += 1;
            }
        }
        for (pool, count) in disrupting {
            let max = self.max_disrupting.entry(pool.to_owned()).or_insert(0);
            *max = (*max).max(count);
        }
        for claim in snapshot.node_claims() {
            if let Some(name) = &claim.metadata.name {
                self.node_claims_seen.insert(name.clone());
            }
        }
        self.track_pending(snapshot, now);
    }

    fn track_pending(&mut self, snapshot: &Snapshot, now: Timestamp) {
        let mut still = BTreeMap::new();
        for pod in snapshot.pods() {
            let waiting = world::bound_node(pod).is_none()
                && !world::is_terminating(pod)
                && !world::is_terminal(pod);
            if !waiting {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let since = self
                .pending
                .get(&uid)
                .copied()
                .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or(now);
            still.insert(uid, since);
        }
        for (uid, since) in &self.pending {
            if !still.contains_key(uid) {
                self.pending_max = self.pending_max.max(elapsed(*since, now));
            }
        }
        self.pending = still;
    }

    /// Closes the waits still open at the end.
    fn finish(&mut self, snapshot: &Snapshot, now: Timestamp) {
        self.track_pending(snapshot, now);
        for since in self.pending.values() {
            self.pending_max = self.pending_max.max(elapsed(*since, now));
        }
    }

    fn stats(&self, snapshot: &Snapshot, instances: &[InstanceView]) -> Stats {
        let present: BTreeSet<&str> = snapshot
            .node_claims()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let created = self
            .node_claims_seen
            .iter()
            .filter(|name| !self.initial_node_claims.contains(*name))
            .count();
        let deleted = self
            .node_claims_seen
            .iter()
            .filter(|name| !present.contains(name.as_str()))
            .count();
        let claimed: BTreeSet<&str> = snapshot
            .node_claims()
            .filter_map(|c| c.status.as_ref())
            .map(|s| s.provider_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        let live = |i: &&InstanceView| i.state == "pending" || i.state == "running";
        let orphaned = instances
            .iter()
            .filter(live)
            .filter(|i| !claimed.contains(i.provider_id.as_str()))
            .count();
        let cost: f64 = instances.iter().filter(live).filter_map(|i| i.price).sum();
        Stats {
            node_claims_created: created as u64,
            node_claims_deleted: deleted as u64,
            max_disrupting_by_node_pool: self.max_disrupting.clone(),
            pdb_violations: self.pdb_violations,
            pods_pending_max_seconds: self.pending_max.as_secs_f64(),
            orphaned_instances: orphaned as u64,
            cost_per_hour_at_end: (cost * 10_000.0).round() / 10_000.0,
            // Asks the plugin, so `Simulation::report` fills it in.
            cost_lower_bound_per_hour_at_end: None,
        }
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let span = now.duration_since(since);
    Duration::try_from(span).unwrap_or(Duration::ZERO)
}

fn condition_status(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

fn string_map(map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    map.cloned().unwrap_or_default()
}

/// The objects at the end, as the report lists them.
fn final_state(snapshot: &Snapshot, instances: &[InstanceView]) -> FinalState {
    let claims_by_provider: BTreeMap<&str, &str> = snapshot
        .node_claims()
        .filter_map(|claim| {
            let id = claim.status.as_ref()?.provider_id.as_str();
            (!id.is_empty()).then_some((id, claim.metadata.name.as_deref().unwrap_or_default()))
        })
        .collect();
    FinalState {
        node_pools: snapshot
            .node_pools()
            .map(|pool| FinalNodePool {
                name: pool.metadata.name.clone().unwrap_or_default(),
                annotations: string_map(pool.metadata.annotations.as_ref()),
            })
            .collect(),
        node_claims: snapshot
            .node_claims()
            .map(|claim| {
                let labels = string_map(claim.metadata.labels.as_ref());
                let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
                let status = claim.status.clone().unwrap_or_default();
                FinalNodeClaim {
                    name: claim.metadata.name.clone().unwrap_or_default(),
                    node_pool: label("karpenter.sh/nodepool"),
                    provider_id: status.provider_id.clone(),
                    instance_type: label("node.kubernetes.io/instance-type"),
                    zone: label("topology.kubernetes.io/zone"),
                    capacity_type: label("karpenter.sh/capacity-type"),
                    image_id: status.image_id.clone(),
                    annotations: string_map(claim.metadata.annotations.as_ref()),
                    conditions: status
                        .conditions
                        .iter()
                        .map(|c| {
                            (
                                c.type_.clone(),
                                FinalCondition {
                                    status: condition_status(c.status).to_owned(),
                                    reason: c.reason.clone().unwrap_or_default(),
                                },
                            )
                        })
                        .collect(),
                    deleting: claim.metadata.deletion_timestamp.is_some(),
                    labels,
                }
            })
            .collect(),
        nodes: snapshot
            .nodes()
            .map(|node| FinalNode {
                name: node.metadata.name.clone().unwrap_or_default(),
                node_claim: node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.provider_id.as_deref())
                    .and_then(|id| claims_by_provider.get(id))
                    .map(|name| (*name).to_owned()),
                labels: string_map(node.metadata.labels.as_ref()),
                annotations: string_map(node.metadata.annotations.as_ref()),
                taints: node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(|taint| serde_json::to_value(taint).ok())
                    .collect(),
                ready: world::is_node_ready(node),
            })
            .collect(),
        pods: snapshot
            .pods()
            .map(|pod| FinalPod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                node: world::bound_node(pod).map(str::to_owned),
                phase: world::phase(pod).unwrap_or("Pending").to_owned(),
            })
            .collect(),
        instances: instances
            .iter()
            .map(|i| FinalInstance {
                provider_id: i.provider_id.clone(),
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: i.capacity_type.clone(),
                image_id: i.image_id.clone(),
                state: i.state.clone(),
            })
            .collect(),
    }
}
