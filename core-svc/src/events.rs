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

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When (from the controllers' clock).
    pub time: jiff::Timestamp,
    /// About what.
    pub object: ObjectRef,
    /// Normal or Warning.
    pub type_: EventType,
    /// UpperCamelCase, upstream's where one exists (`Launched`, `DisruptionBlocked`, ...).
    pub reason: String,
    /// For people.
    pub message: String,
    /// Structured details for tools (the simulator's timeline reads `nodePool`,
    /// `instanceType`, `providerID`, ...).
    pub fields: BTreeMap<String, String>,
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

    /// The events with `reason`.
    pub fn with_reason(&self, reason: &str) -> Vec<Event> {
        self.events()
            .iter()
            .filter(|e| e.reason == reason)
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
