//! The controllers, written once against the ports ([`Cluster`], [`CloudProvider`],
//! [`Clock`], [`Events`]) and run unchanged by `core-svc run` (kube adapter, gRPC plugin), by
//! the simulator (in-memory cluster, in-process plugin, virtual clock) and by the tests.
//!
//! Each controller is level-triggered: one `reconcile` pass reads a [`Snapshot`], decides with
//! pure functions (unit-tested without any port), then writes. A pass returns when it wants
//! to run again; the runner calls it at that time or earlier on any change. Passes are
//! idempotent: running one twice, or after a crash half-way, converges to the same state,
//! which is what lets core restart at any moment without losing anything.
//!
//! | module | job |
//! |---|---|
//! | `nodeclass` | resolves node classes through the plugin, publishes status and readiness, stamps the static hash annotations |
//! | `hash` | the NodePool template hash and hash versioning (re-stamp on a version change) |
//! | `drift` | the `Drifted` condition of NodeClaims |
//! | `provisioning` | batches pending pods, runs the scheduler, creates NodeClaims, nominates pods |
//! | `lifecycle` | launches NodeClaims, registers and initializes their Nodes, times out launches and registrations |
//! | `termination` | finalizers, the drain (through `drain`), instance deletion |
//! | `drain` | the one drain path both termination and disruption take: cordon (taint and load-balancer label), ordered evictions, deadline deletes, retry timing |
//! | `expiration` | deletes NodeClaims past their `expireAfter` (forceful, budget-free) |
//! | `gc` | NodeClaims whose instance is gone, instances with no NodeClaim |
//! | `consolidatable` | the `Consolidatable` condition and `lastPodEventTime` |
//! | `disruption` | emptiness, drift replacement and consolidation within budgets; each command carried through (replacements, drain, delete, rollback) from annotations that survive restarts |
//! | `nodeclaim` | NodeClaim helpers the controllers share (conversions, conditions, names) |

pub mod cluster_state;
pub mod consolidatable;
pub mod disruption;
pub mod drain;
pub mod drift;
pub mod expiration;
pub mod gc;
pub mod hash;
pub mod interruption;
pub mod lifecycle;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodepool;
pub mod provisioning;
pub mod repair;
pub mod termination;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::cloudprovider::{CloudProvider, CloudProviderError};
use crate::cluster::{Cluster, ClusterError};
use crate::events::{Event, EventType, Events, ObjectRef, Reason};

pub use crate::cluster::Snapshot;

/// The finalizer core puts on NodeClaims and Nodes it manages: deletion waits for the drain
/// and for the instance to be gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// What every controller works with.
#[derive(Debug)]
pub struct Context<C, P> {
    /// The cluster.
    pub cluster: Arc<C>,
    /// The cloud provider plugin.
    pub cloud: Arc<P>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Kubernetes Events.
    pub events: Arc<dyn Events>,
    /// Tunables.
    pub settings: Settings,
}

impl<C, P> Clone for Context<C, P> {
    fn clone(&self) -> Self {
        Self {
            cluster: Arc::clone(&self.cluster),
            cloud: Arc::clone(&self.cloud),
            clock: Arc::clone(&self.clock),
            events: Arc::clone(&self.events),
            settings: self.settings.clone(),
        }
    }
}

impl<C: Cluster, P: CloudProvider> Context<C, P> {
    /// Records an event at the clock's time.
    pub fn event(
        &self,
        object: ObjectRef,
        type_: EventType,
        reason: Reason,
        message: impl Into<String>,
        fields: BTreeMap<String, String>,
    ) {
        self.events.record(Event {
            time: self.clock.now(),
            object,
            type_,
            reason,
            message: message.into(),
            fields,
        });
    }
}

/// Tunables, with upstream's defaults (kubernetes-sigs/karpenter `pkg/operator/options`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Provisioning waits this long without a new pending pod before scheduling (1 s).
    pub batch_idle: Duration,
    /// ... but never longer than this since the first pending pod of the batch (10 s).
    pub batch_max: Duration,
    /// A NodeClaim not launched after this is deleted (5 min).
    pub launch_timeout: Duration,
    /// A launched NodeClaim whose Node has not registered after this is deleted (15 min).
    pub registration_timeout: Duration,
    /// How often drift is re-evaluated (5 min).
    pub drift_period: Duration,
    /// NodeClaims younger than this are not checked for InstanceTypeNotFound (1 h).
    pub instance_type_drift_min_age: Duration,
    /// ... and each at most this often (30 min).
    pub instance_type_drift_period: Duration,
    /// Instance deletion is polled this often (5 s).
    pub termination_poll: Duration,
    /// Garbage collection period (2 min).
    pub gc_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            launch_timeout: Duration::from_secs(5 * 60),
            registration_timeout: Duration::from_secs(15 * 60),
            drift_period: Duration::from_secs(5 * 60),
            instance_type_drift_min_age: Duration::from_secs(60 * 60),
            instance_type_drift_period: Duration::from_secs(30 * 60),
            termination_poll: Duration::from_secs(5),
            gc_period: Duration::from_secs(2 * 60),
        }
    }
}

/// When a controller wants its next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Requeue {
    /// Only when something changes.
    OnChange,
    /// After this long at the latest.
    After(Duration),
}

impl Requeue {
    /// The earlier of two requeues.
    pub fn min(self, other: Self) -> Self {
        match (self, other) {
            (Self::OnChange, x) | (x, Self::OnChange) => x,
            (Self::After(a), Self::After(b)) => Self::After(a.min(b)),
        }
    }
}

/// Why a pass failed. A failed pass is retried; what it had written stays written.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The API server failed or refused a write.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The plugin failed.
    #[error(transparent)]
    Cloud(#[from] CloudProviderError),
}

/// A controller: one reconcile pass at a time.
pub trait Controller: Send + Sync {
    /// The controller's name in logs and metrics (`nodeclaim.lifecycle`, upstream's names).
    fn name(&self) -> &'static str;

    /// One pass over the current state.
    fn reconcile(&self) -> impl Future<Output = Result<Requeue, ControllerError>> + Send;
}
