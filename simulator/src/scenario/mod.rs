//! Scenario files (the format `simulator/SCENARIO.md` fixes): YAML read into [`Scenario`], every field
//! checked at load time. An invalid scenario is a [`ScenarioError`] naming the field
//! (`events[2].scale.replicas`) and what is wrong with it, never a panic, and never a failure
//! half-way through a run.
//!
//! Manifests are checked as the API server would admit them: NodePools, NodeClaims and
//! EC2NodeClasses by their own validation, the Kubernetes kinds by their schema (a field of
//! the wrong type names its path).
//!
//! [`overrides`]: `--set PATH=VALUE`, changes to a scenario document before it is read.

mod fields;
mod manifest;
pub mod overrides;
mod parse;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use aws_plugin::apis::ec2nodeclass::AMIFamily;
use core_svc::features::FeatureGates;

pub use crate::world::scoring::KubeScheduler;
use jiff::Timestamp;
use serde_json::Value;

pub use self::manifest::parse_provider_id;
pub use self::parse::parse;

/// Checks one manifest as an entry of `objects:` is checked (its kind supported, its
/// apiVersion, its schema and rules); the fields an error names start with `path`.
pub fn check_manifest(path: &str, value: &Value) -> Result<Manifest> {
    manifest::manifest(path, value)
}

/// Where time starts when the scenario does not say.
pub const DEFAULT_START: &str = "2026-01-01T00:00:00Z";
/// The region when the scenario does not say.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Create returns -> instance running, when the scenario does not say.
pub const DEFAULT_LAUNCH_DELAY: Duration = Duration::from_secs(30);
/// Instance running -> Node registered and Ready, when the scenario does not say.
pub const DEFAULT_REGISTRATION_DELAY: Duration = Duration::from_secs(30);
/// The longest scenario accepted: a week of virtual time at one-second steps.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A scenario, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Free text.
    pub name: String,
    /// Every random choice derives from it.
    pub seed: u64,
    /// The wall-clock time at t=0.
    pub start: Timestamp,
    /// How much virtual time to run.
    pub duration: Duration,
    /// core-svc's settings for the run (`options:`).
    pub options: Options,
    /// How the simulator's kube-scheduler chooses among the Nodes a pod fits
    /// (`kubeScheduler:`).
    pub kube_scheduler: KubeScheduler,
    /// The simulated cloud.
    pub cloud: CloudSpec,
    /// Manifests applied at t=0, in order.
    pub objects: Vec<Manifest>,
    /// What happens later, in time order (equal times keep the file's order).
    pub events: Vec<ScheduledEvent>,
}

/// The `options:` section: core-svc's settings for this run, as its flags would set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// `featureGates`: upstream's gate names (`SpotToSpotConsolidation: true`); the others
    /// keep upstream's defaults. What core-svc's `--feature-gates` sets.
    pub feature_gates: FeatureGates,
}

/// The `cloud:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudSpec {
    /// The region: which embedded catalogue and price list.
    pub region: String,
    /// The instance types offered; `None`: all of the region's.
    pub instance_types: Option<Vec<String>>,
    /// The zones offered; `None`: all of the region's.
    pub zones: Option<Vec<String>>,
    /// Create returns -> instance running.
    pub launch_delay: Duration,
    /// Instance running -> Node registered and Ready.
    pub registration_delay: Duration,
    /// Machine images known at t=0.
    pub images: Vec<ImageSpec>,
    /// Subnets.
    pub subnets: Vec<SubnetSpec>,
    /// Security groups.
    pub security_groups: Vec<SecurityGroupSpec>,
    /// Pools that fail with insufficient capacity at t=0.
    pub capacity_errors: Vec<CapacityErrorSpec>,
    /// Whether spot capacity is offered.
    pub spot: bool,
}

/// A machine image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// `ami-...`.
    pub id: String,
    /// The image name (what `name` selector terms match).
    pub name: String,
    /// EC2's architecture: `x86_64` or `arm64`.
    pub architecture: String,
    /// When it was created; `None`: when it appears.
    pub created: Option<Timestamp>,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// The AMI family whose `@latest` alias points at it from now on (`al2023`, ...).
    pub alias: Option<AMIFamily>,
}

/// A subnet.
#[derive(Debug, Clone, PartialEq)]
pub struct SubnetSpec {
    /// `subnet-...`.
    pub id: String,
    /// Its zone.
    pub zone: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// A security group.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityGroupSpec {
    /// `sg-...`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// A pool whose launches fail with insufficient capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityErrorSpec {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// `spot` or `on-demand`; `None`: both.
    pub capacity_type: Option<String>,
}

/// The kinds a scenario may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `karpenter.sh/v1` NodePool.
    NodePool,
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    EC2NodeClass,
    /// `apps/v1` Deployment (kept by the simulator's Deployment controller).
    Deployment,
    /// `v1` Pod.
    Pod,
    /// `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `scheduling.k8s.io/v1` PriorityClass.
    PriorityClass,
    /// `karpenter.sh/v1` NodeClaim, with its status (a fleet to adopt).
    NodeClaim,
    /// `v1` Node, with its status.
    Node,
}

impl Kind {
    /// Every kind, in the order of the contract.
    pub const ALL: [Kind; 9] = [
        Kind::NodePool,
        Kind::EC2NodeClass,
        Kind::Deployment,
        Kind::Pod,
        Kind::PodDisruptionBudget,
        Kind::DaemonSet,
        Kind::PriorityClass,
        Kind::NodeClaim,
        Kind::Node,
    ];

    /// The `kind:` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NodePool => "NodePool",
            Kind::EC2NodeClass => "EC2NodeClass",
            Kind::Deployment => "Deployment",
            Kind::Pod => "Pod",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::DaemonSet => "DaemonSet",
            Kind::PriorityClass => "PriorityClass",
            Kind::NodeClaim => "NodeClaim",
            Kind::Node => "Node",
        }
    }

    /// The `apiVersion:` the kind must have.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::NodePool | Kind::NodeClaim => "karpenter.sh/v1",
            Kind::EC2NodeClass => "karpenter.k8s.aws/v1",
            Kind::Deployment | Kind::DaemonSet => "apps/v1",
            Kind::Pod | Kind::Node => "v1",
            Kind::PodDisruptionBudget => "policy/v1",
            Kind::PriorityClass => "scheduling.k8s.io/v1",
        }
    }

    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::Deployment | Kind::Pod | Kind::PodDisruptionBudget | Kind::DaemonSet
        )
    }

    fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which object: kind, namespace (namespaced kinds only) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The kind.
    pub kind: Kind,
    /// The namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A manifest, checked against its kind's schema and rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Which object.
    pub key: ObjectKey,
    /// The object as JSON, namespace filled in for namespaced kinds.
    pub object: Value,
}

/// One entry of `events:`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledEvent {
    /// Where it is in the file (`events[3]`), for messages.
    pub field: String,
    /// When, since t=0.
    pub at: Duration,
    /// What.
    pub action: Action,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create an object, or replace the one of the same kind, namespace and name.
    Apply(Manifest),
    /// Delete an object.
    Delete(ObjectKey),
    /// Set a Deployment's replicas.
    Scale {
        /// The Deployment.
        deployment: ObjectKey,
        /// How many pods it keeps.
        replicas: i32,
    },
    /// Change the cloud.
    Cloud(CloudChange),
    /// core-svc crashes and restarts: every controller's in-memory state is lost.
    RestartCore,
    /// Every provider call fails as unavailable for this long.
    PluginOutage(Duration),
    /// For this long every provider call reaches the plugin, which acts on it (a Create
    /// launches), but its answer comes after core's deadline: core sees the call fail.
    SlowPlugin(Duration),
    /// For this long, core's writes that carry a `resourceVersion` precondition conflict
    /// (409) every other time, as if another writer had got there first.
    Conflicts(Duration),
    /// Kubelets report a condition.
    NodeCondition(NodeConditionSpec),
    /// Nodes deleted by hand (`kubectl delete node`).
    DeleteNodes(Targets),
}

/// A change to the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudChange {
    /// A new image appears (an AMI release).
    PublishImage(ImageSpec),
    /// The capacity errors become exactly these.
    CapacityErrors(Vec<CapacityErrorSpec>),
    /// The cloud sends interruption notices.
    Interrupt(InterruptSpec),
    /// Of the instances due to join in the next 10 minutes, the first this many never do (a
    /// broken bootstrap, fixed by then).
    RegistrationFailures(usize),
    /// Of the instances launched in the next 10 minutes, the first this many fail while they
    /// start: the cloud terminates them before they run.
    LaunchFailures(usize),
}

/// Which instances or nodes an event is about: a seeded pick of `count` of a NodePool's, or
/// the ones named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// `count` of the NodePool's running instances (or Ready nodes), picked by the seed.
    NodePool {
        /// The NodePool.
        name: String,
        /// How many.
        count: usize,
    },
    /// These provider IDs (`interrupt`) or node names (`nodeCondition`).
    Named(Vec<String>),
}

/// `cloud: {interrupt: {...}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptSpec {
    /// What the notices say.
    pub kind: core_svc::cloudprovider::InterruptionKind,
    /// About which instances.
    pub targets: Targets,
    /// For a scheduled change: when the instance is retired (default 1 h).
    pub after: Duration,
}

/// `nodeCondition: {...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConditionSpec {
    /// Which nodes.
    pub targets: Targets,
    /// The condition type (`Ready`, `DiskPressure`, ...).
    pub type_: String,
    /// Its status: `True`, `False` or `Unknown`.
    pub status: String,
}

/// How long after a scheduled-change notice the instance is retired, unless `after` says.
pub const DEFAULT_SCHEDULED_CHANGE_AFTER: Duration = Duration::from_secs(3600);

/// Why a scenario is invalid: the field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScenarioError {
    /// The field's path, `events[2].scale.replicas`; `(document)` for the file as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ScenarioError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

type Result<T, E = ScenarioError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
