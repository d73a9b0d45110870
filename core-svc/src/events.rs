//! Kubernetes Events, as a port: controllers record what they did and why (the reasons
//! upstream Karpenter emits), the kube adapter will post them as `events.k8s.io/v1` Events,
//! and the simulator turns them into its timeline.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Normal or Warning, as Kubernetes Events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventType {
    /// Something happened as intended.
    Normal,
    /// Something needs attention.
    Warning,
}

/// What an event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// `NodeClaim`, `Node`, `Pod`, `NodePool`, `EC2NodeClass`, ...
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl ObjectRef {
    /// A cluster-scoped object.
    pub fn cluster_scoped(kind: &str, name: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            namespace: String::new(),
            name: name.to_owned(),
        }
    }

    /// A namespaced object.
    pub fn namespaced(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// Declares [`Reason`]: each variant with the exact reason string it records.
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)*) => {
        /// Why an event was recorded: every reason core's controllers record, in one place, so
        /// the recorders and whatever reads events by reason ([`crate::metrics`], the
        /// simulator's timeline) name the same thing, and a renamed reason fails to compile
        /// rather than silently stopping a metric. The strings are upstream Karpenter's where
        /// upstream records the event, and must stay byte for byte as they are: dashboards,
        /// alerts and the simulator's reports read them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The reason as recorded (`NodeClaimCreated`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $text,)*
                }
            }
        }
    };
}

reasons! {
    /// Provisioning created a NodeClaim (also a disruption replacement).
    NodeClaimCreated => "NodeClaimCreated",
    /// Provisioning's create of a NodeClaim failed.
    NodeClaimCreationFailed => "NodeClaimCreationFailed",
    /// A pending pod fits no NodePool.
    FailedScheduling => "FailedScheduling",
    /// A pending pod is nominated to a node or planned NodeClaim.
    Nominated => "Nominated",
    /// A NodePool's instance types could not be read (the plugin answered an error).
    GetInstanceTypesFailed => "GetInstanceTypesFailed",
    /// The plugin is unreachable or answering nonsense; the controller keeps its hands off.
    PluginUnavailable => "PluginUnavailable",
    /// The plugin launched a NodeClaim's instance.
    NodeClaimLaunched => "NodeClaimLaunched",
    /// A launch failed.
    LaunchFailed => "LaunchFailed",
    /// A NodeClaim's node class does not exist.
    NodeClassNotFound => "NodeClassNotFound",
    /// A NodeClaim's Node registered.
    NodeRegistered => "NodeRegistered",
    /// A NodeClaim's Node is initialized.
    NodeInitialized => "NodeInitialized",
    /// A NodeClaim became drifted (or drifted for a new reason).
    NodeClaimDrifted => "NodeClaimDrifted",
    /// A NodeClaim stopped being drifted.
    DriftCleared => "DriftCleared",
    /// A NodeClaim's finalizer went: it is deleted.
    NodeClaimDeleted => "NodeClaimDeleted",
    /// A Node's finalizer went: it is deleted.
    NodeDeleted => "NodeDeleted",
    /// The plugin says a NodeClaim's instance is gone.
    InstanceTerminated => "InstanceTerminated",
    /// The drain evicted a pod.
    PodEvicted => "PodEvicted",
    /// The drain deleted a pod for the terminationGracePeriod deadline.
    PodDeleted => "PodDeleted",
    /// A PodDisruptionBudget refused an eviction.
    EvictionBlocked => "EvictionBlocked",
    /// Disruption started a command.
    DisruptionStarted => "DisruptionStarted",
    /// Disruption abandoned a command (failed replacement, timeout, validation).
    DisruptionAbandoned => "DisruptionAbandoned",
    /// Disruption tainted and deleted a candidate.
    DisruptionTerminating => "DisruptionTerminating",
    /// Disruption began draining a candidate before deleting it.
    DisruptionDraining => "DisruptionDraining",
    /// Why a node that could be disrupted is not.
    DisruptionBlocked => "DisruptionBlocked",
    /// A pod's `karpenter.sh/do-not-disrupt` value is invalid.
    InvalidDoNotDisrupt => "InvalidDoNotDisrupt",
    /// Core learned of a cloud notice about a NodeClaim's instance through the plugin (ours;
    /// the kind-specific upstream reasons below come with it).
    InterruptionReceived => "InterruptionReceived",
    /// A spot interruption warning.
    SpotInterrupted => "SpotInterrupted",
    /// A spot rebalance recommendation.
    SpotRebalanceRecommendation => "SpotRebalanceRecommendation",
    /// The instance is stopping, not by core.
    InstanceStopping => "InstanceStopping",
    /// The instance is terminating, not by core.
    InstanceTerminating => "InstanceTerminating",
    /// Scheduled maintenance of the instance.
    InstanceUnhealthy => "InstanceUnhealthy",
    /// The instance's capacity reservation is reclaimed.
    CapacityReservationInstanceInterrupted => "CapacityReservationInstanceInterrupted",
    /// An interruption made core delete the NodeClaim.
    TerminatingOnInterruption => "TerminatingOnInterruption",
    /// A node's condition held past its repair policy's toleration: core replaces it (ours).
    NodeUnhealthy => "NodeUnhealthy",
    /// Repair held back: too many of the NodePool's nodes are unhealthy.
    NodeRepairBlocked => "NodeRepairBlocked",
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When (from the controllers' clock).
    pub time: jiff::Timestamp,
    /// About what.
    pub object: ObjectRef,
    /// Normal or Warning.
    pub type_: EventType,
    /// Why: upstream's reason where one exists (`NodeClaimLaunched`, `DisruptionBlocked`, ...).
    pub reason: Reason,
    /// For people.
    pub message: String,
    /// Structured details for tools (the simulator's timeline reads `nodePool`,
    /// `instanceType`, `providerID`, ...).
    pub fields: BTreeMap<String, String>,
}

/// An event's fields from `(key, value)` pairs.
pub fn fields<'a, V: Into<String>>(
    pairs: impl IntoIterator<Item = (&'a str, V)>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.into()))
        .collect()
}

/// An event's fields from the `(key, value)` pairs whose value is not empty: a detail that is
/// not known is left out rather than written empty.
pub fn non_empty_fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    fields(pairs.iter().copied().filter(|(_, value)| !value.is_empty()))
}

/// Where events go.
pub trait Events: Send + Sync + std::fmt::Debug {
    /// Records one event. Never fails: an event that cannot be delivered is logged and
    /// dropped, it never stops a controller.
    fn record(&self, event: Event);
}

/// Events kept in memory, in order, for tests and the simulator.
#[derive(Debug, Default)]
pub struct MemoryEvents {
    events: Mutex<Vec<Event>>,
}

impl MemoryEvents {
    /// No events yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // Events are appended whole; a poisoned lock still holds a consistent list.
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every event so far.
    pub fn all(&self) -> Vec<Event> {
        self.events().clone()
    }

    /// Every event so far, removing them.
    pub fn drain(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events())
    }

    /// The events whose reason is recorded as `reason` (tests name reasons by their strings,
    /// which pins them).
    pub fn with_reason(&self, reason: &str) -> Vec<Event> {
        self.events()
            .iter()
            .filter(|e| e.reason.as_str() == reason)
            .cloned()
            .collect()
    }
}

impl Events for MemoryEvents {
    fn record(&self, event: Event) {
        tracing::info!(
            kind = %event.object.kind,
            namespace = %event.object.namespace,
            name = %event.object.name,
            reason = %event.reason,
            warning = event.type_ == EventType::Warning,
            "{}",
            event.message
        );
        self.events().push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::{Reason, fields, non_empty_fields};

    #[test]
    fn fields_keep_every_pair_and_non_empty_fields_leave_out_the_empty_values() {
        let all = fields([("node", "a".to_owned()), ("pod", String::new())]);
        assert_eq!(all.len(), 2);
        assert_eq!(all["pod"], "");
        let known = non_empty_fields(&[("node", "a"), ("pod", "")]);
        assert_eq!(known.len(), 1);
        assert_eq!(known["node"], "a");
    }

    #[test]
    fn reasons_are_recorded_exactly_as_upstream_and_the_simulator_spell_them() {
        let recorded: Vec<&str> = Reason::ALL.iter().map(|reason| reason.as_str()).collect();
        assert_eq!(
            recorded,
            [
                "NodeClaimCreated",
                "NodeClaimCreationFailed",
                "FailedScheduling",
                "Nominated",
                "GetInstanceTypesFailed",
                "PluginUnavailable",
                "NodeClaimLaunched",
                "LaunchFailed",
                "NodeClassNotFound",
                "NodeRegistered",
                "NodeInitialized",
                "NodeClaimDrifted",
                "DriftCleared",
                "NodeClaimDeleted",
                "NodeDeleted",
                "InstanceTerminated",
                "PodEvicted",
                "PodDeleted",
                "EvictionBlocked",
                "DisruptionStarted",
                "DisruptionAbandoned",
                "DisruptionTerminating",
                "DisruptionDraining",
                "DisruptionBlocked",
                "InvalidDoNotDisrupt",
                "InterruptionReceived",
                "SpotInterrupted",
                "SpotRebalanceRecommendation",
                "InstanceStopping",
                "InstanceTerminating",
                "InstanceUnhealthy",
                "CapacityReservationInstanceInterrupted",
                "TerminatingOnInterruption",
                "NodeUnhealthy",
                "NodeRepairBlocked",
            ]
        );
        assert_eq!(Reason::PodEvicted.to_string(), "PodEvicted");
    }
}
