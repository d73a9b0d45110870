//! [`Snapshot`]: the consistent read a pass decides on, sorted for binary-search lookups and
//! sharing its objects with the store it came from.

use super::*;

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
    pub pods: Vec<Arc<SlimPod>>,
    /// The PodDisruptionBudgets (`policy/v1`), with the status the disruption controller
    /// computes.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// The DaemonSets (`apps/v1`).
    pub daemon_sets: Vec<Arc<DaemonSet>>,
    /// The PriorityClasses.
    pub priority_classes: Vec<Arc<PriorityClass>>,
}

/// Bound Pods by node name ([`Snapshot::pods_by_node`]): looked up, never walked, so hashed
/// (a pass builds it over every pod of the cluster).
pub type PodsByNode<'a> = HashMap<&'a str, Vec<&'a SlimPod>>;

/// `objects`, shared as a [`Snapshot`] holds them (a Pod made a [`SlimPod`]).
pub fn shared<T, U: From<T>>(objects: impl IntoIterator<Item = T>) -> Vec<Arc<U>> {
    objects
        .into_iter()
        .map(|object| Arc::new(U::from(object)))
        .collect()
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

pub(super) fn find<'a, K: kube::Resource>(
    list: &'a [Arc<K>],
    namespace: &str,
    name: &str,
) -> Option<&'a K> {
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
    pub fn pods(&self) -> impl Iterator<Item = &SlimPod> + '_ {
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

    /// Where the Node called `name` is in [`Snapshot::nodes`].
    pub fn node_position(&self, name: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|node| sort_key(node.as_ref()).cmp(&("", name)))
            .ok()
    }

    /// The Pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&SlimPod> {
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
    pub fn pods_on_node<'a>(
        &'a self,
        node_name: &'a str,
    ) -> impl Iterator<Item = &'a SlimPod> + 'a {
        self.pods()
            .filter(move |pod| pod_node_name(pod) == Some(node_name))
    }

    /// Every bound Pod grouped by node name, each group in (namespace, name) order.
    pub fn pods_by_node(&self) -> PodsByNode<'_> {
        let mut by_node = PodsByNode::with_capacity(self.nodes.len());
        for pod in self.pods() {
            if let Some(node) = pod_node_name(pod) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        by_node
    }
}

pub(super) fn pod_node_name(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}
