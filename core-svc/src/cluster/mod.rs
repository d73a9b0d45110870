//! The cluster API port: what core reads from and writes to Kubernetes.
//!
//! Controllers are generic over [`Cluster`], so the same code runs against the API server (a
//! kube-rs adapter), against [`InMemoryCluster`] in tests, and in the simulator. Reads are one
//! consistent [`Snapshot`]; writes follow the API server's semantics, which the in-memory
//! implementation reproduces and its tests pin down:
//!
//! - **Optimistic concurrency.** Every write gives the object a new `resourceVersion` from one
//!   cluster-wide counter. A replace carrying a stale `resourceVersion` is a
//!   [`ClusterError::Conflict`]; so is a merge patch that names one
//!   (`{"metadata":{"resourceVersion":"42"}}` makes a patch optimistic, as in Kubernetes). A
//!   custom resource (NodePool, NodeClaim, node classes) may not be replaced without one.
//! - **Status subresource.** For kinds that have one, a write of the object ignores `.status` and
//!   a status write ignores everything but `.status`. Create clears the status of custom
//!   resources, PDBs and DaemonSets, and sets a Pod's to `phase: Pending`, as the API server does.
//! - **Deletion.** An object with finalizers gets a `deletionTimestamp` (once: deleting it again
//!   does not move it) and stays until its last finalizer is removed; no finalizer may be added
//!   meanwhile. A Pod bound to a node is deleted gracefully: `deletionTimestamp` is now plus
//!   its grace period and it stays until the kubelet confirms
//!   ([`InMemoryCluster::finish_pod_termination`]); a grace period of 0 removes it at once,
//!   and a shorter one may bring the deadline forward, never back.
//! - **Eviction** ([`Cluster::evict`]) honours PodDisruptionBudgets as the eviction subresource
//!   does (see its documentation).
//! - **No-op writes** (the object comes out unchanged) change nothing, not even the
//!   `resourceVersion`.
//! - `generation` starts at 1 and grows when anything outside `metadata` and `status` changes.

pub mod apiserver;
pub mod contract;
mod error;
mod memory;
mod object;
mod snapshot;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Taint},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use karpenter_api::{NodeClaim, NodeClassReference, NodePool};
use kube::core::DynamicObject;
use serde_json::{Map, Value};

pub use crate::objects::{SlimContainer, SlimPod, SlimPodSpec, SlimPodStatus};
pub use apiserver::KubeCluster;
pub use error::{ClusterError, FieldError};
pub use memory::InMemoryCluster;
pub use object::ClusterObject;
pub use snapshot::{PodsByNode, Snapshot, shared};
pub(crate) use snapshot::{api_group, node_class_key, sort_key};

/// Conditions a delete or an eviction requires of the object (the API's `Preconditions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object must have this UID: guards against acting on a newer object of the same name
    /// (a StatefulSet pod recreated since the read).
    pub uid: Option<String>,
    /// The object must be at this `resourceVersion`.
    pub resource_version: Option<String>,
}

impl Preconditions {
    /// Requires the object to have `uid`.
    pub fn uid(uid: impl Into<String>) -> Self {
        Self {
            uid: Some(uid.into()),
            resource_version: None,
        }
    }
}

/// How to delete (the API's `DeleteOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// For a Pod: seconds the kubelet gets to stop it; unset, the pod's
    /// `terminationGracePeriodSeconds` (30 by default); 0 removes it at once (force delete).
    /// Ignored by other kinds.
    pub grace_period_seconds: Option<i64>,
    /// What the object must match.
    pub preconditions: Preconditions,
}

impl DeleteOptions {
    /// Deletes with a grace period of `seconds`.
    pub fn grace_period(seconds: i64) -> Self {
        Self {
            grace_period_seconds: Some(seconds),
            preconditions: Preconditions::default(),
        }
    }

    /// Also requires the object to have `uid`.
    pub fn with_uid(mut self, uid: impl Into<String>) -> Self {
        self.preconditions.uid = Some(uid.into());
        self
    }
}

/// The cluster API. Writes follow Kubernetes semantics (see the [module](self) documentation).
///
/// Namespaced kinds take `Some(namespace)`, cluster-scoped ones `None`; the other way round is
/// [`ClusterError::Invalid`].
pub trait Cluster: Send + Sync + std::fmt::Debug {
    /// Reads every object core decides on, at one instant.
    fn snapshot(&self) -> impl Future<Output = Result<Snapshot, ClusterError>> + Send;

    /// A number that moves whenever anything a [`Snapshot`] holds changes (a write, a
    /// deletion, a change seen by a watch), and stays put otherwise: the controller manager
    /// compares it to decide whether a controller has anything new to look at, without reading
    /// the cluster. Only equality is meaningful.
    fn revision(&self) -> u64;

    /// Reads one object; `None` when it does not exist.
    fn get<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, ClusterError>> + Send;

    /// Creates `object`. `metadata.generateName` is honoured when `metadata.name` is empty (the
    /// name is the prefix plus 5 random lowercase alphanumerics); sets `uid`,
    /// `resourceVersion`, `creationTimestamp` and `generation` 1. Refuses an object with a
    /// `resourceVersion`, an invalid one, and a taken name.
    fn create<K: ClusterObject>(
        &self,
        object: &K,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send;

    /// Replaces the whole object (its status kept, for kinds with a status subresource).
    /// Conflicts when `metadata.resourceVersion` is stale.
    fn replace<K: ClusterObject>(
        &self,
        object: &K,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send;

    /// Replaces the object's status, ignoring everything else. Conflicts when
    /// `metadata.resourceVersion` is stale.
    fn replace_status<K: ClusterObject>(
        &self,
        object: &K,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send;

    /// Applies a JSON merge patch (RFC 7386) to the object, not its status. Optimistic when the
    /// patch carries `metadata.resourceVersion`.
    fn merge_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send;

    /// Applies a JSON merge patch to the object's status (`{"status": {...}}`), ignoring the
    /// rest. Optimistic when the patch carries `metadata.resourceVersion`.
    fn merge_patch_status<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send;

    /// Deletes an object (see the [module](self) documentation for finalizers and pods).
    /// Deleting an object that is already being deleted is not an error.
    fn delete<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: DeleteOptions,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Evicts a pod (the `policy/v1` eviction subresource). A pod that is terminal, Pending or
    /// already terminating is deleted without consulting budgets. Otherwise the
    /// PodDisruptionBudget matching the pod decides, with the status the disruption controller
    /// computes (healthy = Ready and not terminating; `minAvailable` / `maxUnavailable` as an
    /// integer or a percentage, rounded up): no disruption allowed is
    /// [`ClusterError::TooManyRequests`]; several matching budgets is
    /// [`ClusterError::MultipleDisruptionBudgets`]. A pod that is not Ready may go when the
    /// budget's `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or (`IfHealthyBudget`, the
    /// default) when the budget is met. An admitted eviction deletes the pod gracefully, as
    /// [`Cluster::delete`] does. `preconditions` (upstream sends the pod's UID) make sure a pod
    /// recreated under the same name since the read is not the one evicted.
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Reads the node class `reference` names; `None` when it does not exist.
    fn get_node_class(
        &self,
        reference: &NodeClassReference,
    ) -> impl Future<Output = Result<Option<DynamicObject>, ClusterError>> + Send;

    /// Creates a node class; its `apiVersion` and `kind` must be set. As [`Cluster::create`].
    fn create_node_class(
        &self,
        object: &DynamicObject,
    ) -> impl Future<Output = Result<DynamicObject, ClusterError>> + Send;

    /// A JSON merge patch of a node class, not its status. As [`Cluster::merge_patch`].
    fn merge_patch_node_class(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> impl Future<Output = Result<DynamicObject, ClusterError>> + Send;

    /// A JSON merge patch of a node class's status. As [`Cluster::merge_patch_status`].
    fn merge_patch_node_class_status(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> impl Future<Output = Result<DynamicObject, ClusterError>> + Send;

    /// Deletes a node class. As [`Cluster::delete`].
    fn delete_node_class(
        &self,
        reference: &NodeClassReference,
        options: DeleteOptions,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

/// The writes controllers make over and over, built on [`Cluster`]. Each is a merge patch
/// carrying the object's `resourceVersion`: lists are replaced whole by a merge patch, so
/// without it a concurrent change to the list would be lost. Pass the object as last read; on
/// [`ClusterError::Conflict`], read again and retry.
pub trait ClusterExt: Cluster {
    /// Adds `finalizer` to `object`; answers the object unchanged, without a write, when it is
    /// already there.
    fn add_finalizer<K: ClusterObject>(
        &self,
        object: &K,
        finalizer: &str,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send {
        async move {
            let finalizers = object.meta().finalizers.as_deref().unwrap_or_default();
            if finalizers.iter().any(|present| present == finalizer) {
                return Ok(object.clone());
            }
            let mut updated = finalizers.to_vec();
            updated.push(finalizer.to_owned());
            let patch = finalizers_patch(object, updated);
            let (namespace, name) = sort_key(object);
            self.merge_patch::<K>(namespace_of::<K>(namespace), name, &patch)
                .await
        }
    }

    /// Removes `finalizer` from `object` (which deletes it when it was the last one and the
    /// object is being deleted); answers the object unchanged, without a write, when it is not
    /// there.
    fn remove_finalizer<K: ClusterObject>(
        &self,
        object: &K,
        finalizer: &str,
    ) -> impl Future<Output = Result<K, ClusterError>> + Send {
        async move {
            let finalizers = object.meta().finalizers.as_deref().unwrap_or_default();
            if !finalizers.iter().any(|present| present == finalizer) {
                return Ok(object.clone());
            }
            let updated = finalizers
                .iter()
                .filter(|present| *present != finalizer)
                .cloned()
                .collect();
            let patch = finalizers_patch(object, updated);
            let (namespace, name) = sort_key(object);
            self.merge_patch::<K>(namespace_of::<K>(namespace), name, &patch)
                .await
        }
    }

    /// Adds `taint` to `node`; answers the node unchanged, without a write, when a taint with
    /// the same key and effect is already there (whatever its value).
    fn add_node_taint(
        &self,
        node: &Node,
        taint: &Taint,
    ) -> impl Future<Output = Result<Node, ClusterError>> + Send {
        async move {
            let taints = node_taints(node);
            if taints
                .iter()
                .any(|present| present.key == taint.key && present.effect == taint.effect)
            {
                return Ok(node.clone());
            }
            let mut updated = taints.to_vec();
            updated.push(taint.clone());
            let patch = taints_patch(node, &updated)?;
            self.merge_patch::<Node>(None, sort_key(node).1, &patch)
                .await
        }
    }

    /// Removes the taints with `key` and `effect` from `node`; answers the node unchanged,
    /// without a write, when it has none.
    fn remove_node_taint(
        &self,
        node: &Node,
        key: &str,
        effect: &str,
    ) -> impl Future<Output = Result<Node, ClusterError>> + Send {
        async move {
            let taints = node_taints(node);
            let updated: Vec<Taint> = taints
                .iter()
                .filter(|present| !(present.key == key && present.effect == effect))
                .cloned()
                .collect();
            if updated.len() == taints.len() {
                return Ok(node.clone());
            }
            let patch = taints_patch(node, &updated)?;
            self.merge_patch::<Node>(None, sort_key(node).1, &patch)
                .await
        }
    }
}

impl<C: Cluster> ClusterExt for C {}

fn namespace_of<K: ClusterObject>(namespace: &str) -> Option<&str> {
    K::NAMESPACED.then_some(namespace)
}

/// The start of a merge patch that applies only while the object is at the version it was read
/// at.
fn optimistic_patch<K: kube::Resource>(object: &K) -> Map<String, Value> {
    let mut patch = Map::new();
    if let Some(resource_version) = &object.meta().resource_version {
        let mut metadata = Map::new();
        metadata.insert(
            "resourceVersion".to_owned(),
            Value::String(resource_version.clone()),
        );
        patch.insert("metadata".to_owned(), Value::Object(metadata));
    }
    patch
}

fn finalizers_patch<K: kube::Resource>(object: &K, finalizers: Vec<String>) -> Value {
    let finalizers = if finalizers.is_empty() {
        // null deletes the key: the API server stores an empty list as absent anyway.
        Value::Null
    } else {
        Value::Array(finalizers.into_iter().map(Value::String).collect())
    };
    let mut patch = optimistic_patch(object);
    if let Value::Object(metadata) = patch
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        metadata.insert("finalizers".to_owned(), finalizers);
    }
    Value::Object(patch)
}

fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
}

fn taints_patch(node: &Node, taints: &[Taint]) -> Result<Value, ClusterError> {
    let taints = if taints.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(taints).map_err(|error| {
            ClusterError::invalid(
                Node::KIND,
                sort_key(node).1,
                "spec.taints",
                error.to_string(),
            )
        })?
    };
    let mut spec = Map::new();
    spec.insert("taints".to_owned(), taints);
    let mut patch = optimistic_patch(node);
    patch.insert("spec".to_owned(), Value::Object(spec));
    Ok(Value::Object(patch))
}
