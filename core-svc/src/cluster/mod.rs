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
mod memory;
mod object;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Pod, Taint},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use karpenter_api::{NodeClaim, NodeClassReference, NodePool};
use kube::core::DynamicObject;
use serde_json::{Map, Value};

pub use apiserver::KubeCluster;
pub use memory::InMemoryCluster;
pub use object::ClusterObject;

/// A consistent read of everything core decides on, taken at one instant.
///
/// Each list is sorted by (namespace, name), node classes by (API group, kind, name), so
/// iteration is deterministic and the lookups can binary-search. Objects are shared (`Arc`)
/// with the cluster's own store (the in-memory tables, the reflectors' stores): taking a
/// snapshot copies pointers, never objects (a test that edits one uses `Arc::make_mut`). Whoever fills the lists by hand
/// calls [`Snapshot::sort`] before looking anything up.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The NodePools.
    pub node_pools: Vec<Arc<NodePool>>,
    /// The NodeClaims.
    pub node_claims: Vec<Arc<NodeClaim>>,
    /// The node classes of every kind the plugin serves (e.g. `karpenter.k8s.aws/v1`
    /// EC2NodeClass).
    pub node_classes: Vec<Arc<DynamicObject>>,
    /// The Nodes.
    pub nodes: Vec<Arc<Node>>,
    /// The Pods, of every namespace.
    pub pods: Vec<Arc<Pod>>,
    /// The PodDisruptionBudgets (`policy/v1`), with the status the disruption controller
    /// computes.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// The DaemonSets (`apps/v1`).
    pub daemon_sets: Vec<Arc<DaemonSet>>,
    /// The PriorityClasses.
    pub priority_classes: Vec<Arc<PriorityClass>>,
}

/// `objects`, shared as a [`Snapshot`] holds them.
pub fn shared<T>(objects: impl IntoIterator<Item = T>) -> Vec<Arc<T>> {
    objects.into_iter().map(Arc::new).collect()
}

/// The (namespace, name) an object sorts and is looked up by; a cluster-scoped object has the
/// empty namespace.
pub(crate) fn sort_key<K: kube::Resource>(object: &K) -> (&str, &str) {
    let meta = object.meta();
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// The (API group, kind, name) a node class sorts and is looked up by.
pub(crate) fn node_class_key(object: &DynamicObject) -> (&str, &str, &str) {
    let (group, kind) = match &object.types {
        Some(types) => (api_group(&types.api_version), types.kind.as_str()),
        None => ("", ""),
    };
    (
        group,
        kind,
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The group of an `apiVersion` (`karpenter.k8s.aws/v1` → `karpenter.k8s.aws`; `v1` → the core
/// group, empty).
pub(crate) fn api_group(api_version: &str) -> &str {
    api_version
        .split_once('/')
        .map_or("", |(group, _version)| group)
}

fn find<'a, K: kube::Resource>(list: &'a [Arc<K>], namespace: &str, name: &str) -> Option<&'a K> {
    list.binary_search_by(|object| sort_key(object.as_ref()).cmp(&(namespace, name)))
        .ok()
        .and_then(|index| list.get(index))
        .map(AsRef::as_ref)
}

impl Snapshot {
    /// Sorts every list as the type promises.
    pub fn sort(&mut self) {
        fn by_key<K: kube::Resource>(list: &mut [Arc<K>]) {
            list.sort_by(|a, b| sort_key(a.as_ref()).cmp(&sort_key(b.as_ref())));
        }
        by_key(&mut self.node_pools);
        by_key(&mut self.node_claims);
        by_key(&mut self.nodes);
        by_key(&mut self.pods);
        by_key(&mut self.pdbs);
        by_key(&mut self.daemon_sets);
        by_key(&mut self.priority_classes);
        self.node_classes
            .sort_by(|a, b| node_class_key(a).cmp(&node_class_key(b)));
    }

    /// Every Pod, as plain references.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> + '_ {
        self.pods.iter().map(AsRef::as_ref)
    }

    /// Every Node, as plain references.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> + '_ {
        self.nodes.iter().map(AsRef::as_ref)
    }

    /// Every NodeClaim, as plain references.
    pub fn node_claims(&self) -> impl Iterator<Item = &NodeClaim> + '_ {
        self.node_claims.iter().map(AsRef::as_ref)
    }

    /// Every NodePool, as plain references.
    pub fn node_pools(&self) -> impl Iterator<Item = &NodePool> + '_ {
        self.node_pools.iter().map(AsRef::as_ref)
    }

    /// The NodePool called `name`.
    pub fn node_pool(&self, name: &str) -> Option<&NodePool> {
        find(&self.node_pools, "", name)
    }

    /// The NodeClaim called `name`.
    pub fn node_claim(&self, name: &str) -> Option<&NodeClaim> {
        find(&self.node_claims, "", name)
    }

    /// The Node called `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        find(&self.nodes, "", name)
    }

    /// The Pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        find(&self.pods, namespace, name)
    }

    /// The PodDisruptionBudget `namespace/name`.
    pub fn pdb(&self, namespace: &str, name: &str) -> Option<&PodDisruptionBudget> {
        find(&self.pdbs, namespace, name)
    }

    /// The DaemonSet `namespace/name`.
    pub fn daemon_set(&self, namespace: &str, name: &str) -> Option<&DaemonSet> {
        find(&self.daemon_sets, namespace, name)
    }

    /// The PriorityClass called `name`.
    pub fn priority_class(&self, name: &str) -> Option<&PriorityClass> {
        find(&self.priority_classes, "", name)
    }

    /// The node class of API group `group` and kind `kind` called `name`.
    pub fn node_class(&self, group: &str, kind: &str, name: &str) -> Option<&DynamicObject> {
        self.node_classes
            .binary_search_by(|object| node_class_key(object).cmp(&(group, kind, name)))
            .ok()
            .and_then(|index| self.node_classes.get(index))
            .map(AsRef::as_ref)
    }

    /// The node class a NodePool or NodeClaim refers to.
    pub fn node_class_for(&self, reference: &NodeClassReference) -> Option<&DynamicObject> {
        self.node_class(&reference.group, &reference.kind, &reference.name)
    }

    /// The Pods bound to the Node called `node_name`, in (namespace, name) order. A scan of
    /// every Pod: to visit every node, [`Snapshot::pods_by_node`] groups them once.
    pub fn pods_on_node<'a>(&'a self, node_name: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods()
            .filter(move |pod| pod_node_name(pod) == Some(node_name))
    }

    /// Every bound Pod grouped by node name, each group in (namespace, name) order.
    pub fn pods_by_node(&self) -> BTreeMap<&str, Vec<&Pod>> {
        let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in self.pods() {
            if let Some(node) = pod_node_name(pod) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        by_node
    }
}

fn pod_node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// One field an invalid object gets wrong, as the API server's `details.causes` name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path (`spec.template.spec.requirements[0].key`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

fn qualified(namespace: &Option<String>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

fn joined(causes: &[FieldError]) -> String {
    causes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a cluster call failed, as the API server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// 404: no such object.
    #[error("{kind} {} not found", qualified(namespace, name))]
    NotFound {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
    },
    /// 409 on create: the name is taken.
    #[error("{kind} {} already exists", qualified(namespace, name))]
    AlreadyExists {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
    },
    /// 409: a `resourceVersion` or UID precondition does not hold; read again and retry.
    #[error("conflict on {kind} {}: {message}", qualified(namespace, name))]
    Conflict {
        /// The kind.
        kind: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
        /// Which precondition failed.
        message: String,
    },
    /// 429: the eviction would violate a PodDisruptionBudget; retry later.
    #[error("cannot evict pod {pod}: {reason}")]
    TooManyRequests {
        /// The pod, `namespace/name`.
        pod: String,
        /// The PodDisruptionBudget that refuses (in the pod's namespace).
        budget: String,
        /// The API server's explanation, naming the budget and its counts.
        reason: String,
    },
    /// 500 from the eviction subresource: the pod matches several PodDisruptionBudgets, which
    /// eviction does not support; it stays refused until the budgets change.
    #[error(
        "pod {pod} has more than one PodDisruptionBudget ({}), which the eviction subresource does not support",
        budgets.join(", ")
    )]
    MultipleDisruptionBudgets {
        /// The pod, `namespace/name`.
        pod: String,
        /// The budgets that match it.
        budgets: Vec<String>,
    },
    /// 422 (or 400): the object breaks the kind's schema or rules.
    #[error("{kind} {name:?} is invalid: {}", joined(causes))]
    Invalid {
        /// The kind.
        kind: String,
        /// The object's name (empty when it had none yet).
        name: String,
        /// Each field at fault.
        causes: Vec<FieldError>,
    },
    /// The API server could not be reached or did not answer: nothing is known about the
    /// outcome, so nothing may be concluded from it.
    #[error("the API server is unavailable: {0}")]
    Unavailable(String),
}

impl ClusterError {
    /// An [`ClusterError::Invalid`] with one cause.
    pub fn invalid(
        kind: impl Into<String>,
        name: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            kind: kind.into(),
            name: name.into(),
            causes: vec![FieldError {
                field: field.into(),
                message: message.into(),
            }],
        }
    }

    /// Whether the error is a [`ClusterError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether the error is a [`ClusterError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }
}

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
