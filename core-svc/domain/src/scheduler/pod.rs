//! The scheduler's view of a pod: identity, labels, requests and every scheduling constraint,
//! close to the Kubernetes fields but independent of any Kubernetes client types. The kube
//! edge converts `v1.Pod` into it; tests and the simulator build it with the `with_*` methods.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::requirements::Requirements;
use crate::resources::ResourceList;
use crate::scheduler::constraints::{
    HostPort, PodAffinity, PodAffinityTerm, TopologySpreadConstraint, Weighted,
};
use crate::scheduler::taints::Toleration;

/// A pod's namespace and name. Orders by namespace, then name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodId {
    namespace: Arc<str>,
    name: Arc<str>,
}

impl PodId {
    /// The pod `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Self {
        PodId {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// `namespace/name`.
impl fmt::Display for PodId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod as the scheduler sees it.
///
/// Node constraints keep Kubernetes' shape: `node_selector` applies always, the
/// `required_node_affinity` terms are alternatives (ORed, each ANDed with the node selector),
/// and the preferred terms are held as requirements, heaviest first, until the pod cannot
/// schedule and they are relaxed one by one (upstream's behaviour).
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// Namespace and name.
    pub id: PodId,
    /// The UID: orders pods with equal requests and creation time.
    pub uid: String,
    /// Creation time, in any unit that orders (seconds since the epoch, say): older pods of
    /// equal size are placed first.
    pub created: i64,
    /// The pod's labels, which topology spread and pod affinity selectors match.
    pub labels: BTreeMap<String, String>,
    /// The pod's effective requests (`PodResources::requests`); the scheduler adds the pod
    /// itself to the `pods` resource.
    pub requests: ResourceList,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// The required node affinity's node selector terms, ORed; empty when there is none.
    pub required_node_affinity: Vec<Requirements>,
    /// The preferred node affinity terms.
    pub preferred_node_affinity: Vec<Weighted<Requirements>>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// `spec.topologySpreadConstraints`.
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// `spec.affinity.podAffinity`.
    pub pod_affinity: PodAffinity,
    /// `spec.affinity.podAntiAffinity`.
    pub pod_anti_affinity: PodAffinity,
    /// The host ports the pod's containers bind.
    pub host_ports: Vec<HostPort>,
}

impl Pod {
    /// A pod `namespace/name` with no requests and no constraints; its UID is `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Pod {
            id: PodId::new(namespace, name),
            uid: format!("{namespace}/{name}"),
            created: 0,
            labels: BTreeMap::new(),
            requests: ResourceList::new(),
            node_selector: BTreeMap::new(),
            required_node_affinity: Vec::new(),
            preferred_node_affinity: Vec::new(),
            tolerations: Vec::new(),
            topology_spread_constraints: Vec::new(),
            pod_affinity: PodAffinity::default(),
            pod_anti_affinity: PodAffinity::default(),
            host_ports: Vec::new(),
        }
    }

    /// This pod with `requests`.
    #[must_use]
    pub fn with_requests(mut self, requests: ResourceList) -> Self {
        self.requests = requests;
        self
    }

    /// This pod with creation time `created`.
    #[must_use]
    pub fn with_created(mut self, created: i64) -> Self {
        self.created = created;
        self
    }

    /// This pod with the label `key=value`.
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// This pod with the node selector entry `key=value`.
    #[must_use]
    pub fn with_node_selector(mut self, key: &str, value: &str) -> Self {
        self.node_selector.insert(key.to_owned(), value.to_owned());
        self
    }

    /// This pod with one more required node affinity term (ORed with the others).
    #[must_use]
    pub fn with_required_node_affinity(mut self, term: Requirements) -> Self {
        self.required_node_affinity.push(term);
        self
    }

    /// This pod with one more preferred node affinity term.
    #[must_use]
    pub fn with_preferred_node_affinity(mut self, weight: i32, term: Requirements) -> Self {
        self.preferred_node_affinity.push(Weighted { weight, term });
        self
    }

    /// This pod with one more toleration.
    #[must_use]
    pub fn with_toleration(mut self, toleration: Toleration) -> Self {
        self.tolerations.push(toleration);
        self
    }

    /// This pod with one more topology spread constraint.
    #[must_use]
    pub fn with_spread(mut self, constraint: TopologySpreadConstraint) -> Self {
        self.topology_spread_constraints.push(constraint);
        self
    }

    /// This pod with one more required pod affinity term.
    #[must_use]
    pub fn with_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod_affinity.required.push(term);
        self
    }

    /// This pod with one more preferred pod affinity term.
    #[must_use]
    pub fn with_preferred_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod_affinity.preferred.push(Weighted { weight, term });
        self
    }

    /// This pod with one more required pod anti-affinity term.
    #[must_use]
    pub fn with_anti_affinity(mut self, term: PodAffinityTerm) -> Self {
        self.pod_anti_affinity.required.push(term);
        self
    }

    /// This pod with one more preferred pod anti-affinity term.
    #[must_use]
    pub fn with_preferred_anti_affinity(mut self, weight: i32, term: PodAffinityTerm) -> Self {
        self.pod_anti_affinity
            .preferred
            .push(Weighted { weight, term });
        self
    }

    /// This pod binding one more host port.
    #[must_use]
    pub fn with_host_port(mut self, port: HostPort) -> Self {
        self.host_ports.push(port);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_pod_ids_when_displayed_and_sorted_then_namespace_comes_first() {
        let a = PodId::new("b", "a");
        let b = PodId::new("a", "z");
        assert_eq!(a.to_string(), "b/a");
        assert!(b < a);
        assert_eq!((a.namespace(), a.name()), ("b", "a"));
    }

    #[test]
    fn given_a_new_pod_when_built_then_its_uid_is_its_id_until_set() {
        let pod = Pod::new("default", "web-1")
            .with_label("app", "web")
            .with_created(7);
        assert_eq!(pod.uid, "default/web-1");
        assert_eq!(pod.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(pod.created, 7);
    }
}
