//! Capacity that already exists or is on its way: nodes, and NodeClaims launched earlier
//! that have not become nodes yet. The scheduler fills these before it plans anything new.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::LABEL_HOSTNAME;
use crate::requirements::{AllowUndefined, Requirement, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::constraints::{HostPort, conflicting_port};
use crate::scheduler::fit::{Demand, Fixed};
use crate::scheduler::nodeclaim::Candidate;
use crate::scheduler::pod::Pod;
use crate::scheduler::taints::{Taint, first_untolerated};
use crate::scheduler::topology::{Domain, Topology};

/// A node, or an in-flight NodeClaim, that pods can be placed on.
#[derive(Debug, Clone)]
pub struct ExistingNode {
    /// The node's (or NodeClaim's) name, which placements refer to.
    pub name: String,
    /// What the node satisfies: its labels as `key In [value]` for a node or a launched
    /// NodeClaim; for a NodeClaim not launched yet, its requirements (several zones, say).
    pub requirements: Requirements,
    /// The taints.
    pub taints: Vec<Taint>,
    /// The startup taints of its NodeClaim: ignored, with the known start-up taints (not
    /// ready, unreachable, uninitialised), while the node is not initialised.
    pub startup_taints: Vec<Taint>,
    /// Whether the node is initialised; initialised nodes are tried first.
    pub initialized: bool,
    /// What pods can use.
    pub allocatable: ResourceList,
    /// What the pods bound to it request, `pods` counting each of them.
    pub requested: ResourceList,
    /// The part of `requested` that DaemonSet pods make: DaemonSets that would run on the
    /// node but have not started yet are reserved on top of it.
    pub daemon_set_requested: ResourceList,
    /// The pods bound to it, for topology counts, anti-affinity and host ports.
    pub pods: Vec<Pod>,
}

impl ExistingNode {
    /// An initialised node `name` with `labels` and `allocatable`, empty.
    pub fn new<'a>(
        name: &str,
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        allocatable: ResourceList,
    ) -> Self {
        let mut requirements = Requirements::from_labels(labels);
        if !requirements.contains_key(LABEL_HOSTNAME) {
            requirements.add(Requirement::in_values(LABEL_HOSTNAME, [name]));
        }
        ExistingNode {
            name: name.to_owned(),
            requirements,
            taints: Vec::new(),
            startup_taints: Vec::new(),
            initialized: true,
            allocatable,
            requested: ResourceList::new(),
            daemon_set_requested: ResourceList::new(),
            pods: Vec::new(),
        }
    }

    /// An in-flight NodeClaim `name` that has not been launched yet: it satisfies
    /// `requirements` and will be one of `options`, so it is given the smallest allocatable
    /// of them (per resource), which every launch outcome has.
    pub fn in_flight(
        name: &str,
        requirements: Requirements,
        options: &[Arc<InstanceType>],
    ) -> Self {
        let allocatable = smallest_allocatable(options);
        ExistingNode {
            name: name.to_owned(),
            requirements,
            taints: Vec::new(),
            startup_taints: Vec::new(),
            initialized: false,
            allocatable,
            requested: ResourceList::new(),
            daemon_set_requested: ResourceList::new(),
            pods: Vec::new(),
        }
    }

    /// This node with `pod` bound to it (its requests, and one `pods`, added to `requested`).
    #[must_use]
    pub fn with_pod(mut self, pod: Pod) -> Self {
        self.requested = self.requested.saturating_add(&counted(&pod.requests));
        self.pods.push(pod);
        self
    }

    /// Adds `pod`, being deleted on this node: its requests are still held (its containers may
    /// still run), but it is not among `pods`, so it counts for no topology spread, as
    /// kube-scheduler's PodTopologySpread skips pods with a deletion timestamp. It also no
    /// longer counts for pod affinity or host ports, which kube-scheduler still holds against
    /// it until it is gone: an approximation that errs towards placing pods a few seconds
    /// early.
    pub fn add_terminating_pod(&mut self, pod: &Pod) {
        self.requested = self.requested.saturating_add(&counted(&pod.requests));
    }

    /// This node with the DaemonSet pod `pod` running on it.
    #[must_use]
    pub fn with_daemon_pod(mut self, pod: Pod) -> Self {
        let requests = counted(&pod.requests);
        self.daemon_set_requested = self.daemon_set_requested.saturating_add(&requests);
        self.requested = self.requested.saturating_add(&requests);
        self.pods.push(pod);
        self
    }

    /// This node with one more taint.
    #[must_use]
    pub fn with_taint(mut self, taint: Taint) -> Self {
        self.taints.push(taint);
        self
    }

    /// This node, initialised or not.
    #[must_use]
    pub fn with_initialized(mut self, initialized: bool) -> Self {
        self.initialized = initialized;
        self
    }

    /// The taints that count for scheduling: all of them once initialised, otherwise not the
    /// startup taints nor the known start-up ones.
    pub(super) fn effective_taints(&self) -> impl Iterator<Item = &Taint> + '_ {
        self.taints.iter().filter(move |taint| {
            self.initialized || !(taint.is_ephemeral() || self.startup_taints.contains(taint))
        })
    }
}

/// An existing node during a run: what is left of it and what it has become.
#[derive(Debug)]
pub(super) struct NodeState<'a> {
    pub(super) node: &'a ExistingNode,
    pub(super) host: Domain,
    /// The node's requirements, narrowed by the pods placed on it (as upstream does, so that
    /// later pods see the domain the earlier ones chose on an in-flight NodeClaim).
    pub(super) requirements: Requirements,
    available: ResourceList,
    available_fixed: Fixed,
    host_ports: Vec<HostPort>,
}

impl<'a> NodeState<'a> {
    /// The node with `daemon_overhead` (DaemonSets that would run there) reserved, less what
    /// its DaemonSet pods already request.
    pub(super) fn new(
        node: &'a ExistingNode,
        host: Domain,
        daemon_overhead: &ResourceList,
    ) -> Self {
        let pending_daemons = daemon_overhead.saturating_sub(&node.daemon_set_requested);
        let available = node
            .allocatable
            .saturating_sub(&node.requested)
            .saturating_sub(&pending_daemons);
        NodeState {
            node,
            host,
            requirements: node.requirements.clone(),
            available_fixed: Fixed::of(&available),
            available,
            host_ports: node
                .pods
                .iter()
                .flat_map(|p| p.host_ports.iter().copied())
                .collect(),
        }
    }

    /// Whether the pod fits, and the node's requirements with it when they change.
    pub(super) fn try_add(
        &self,
        topology: &Topology,
        pod: &Candidate<'_>,
    ) -> Option<Option<Requirements>> {
        if !pod.demand.fits(&self.available, &self.available_fixed) {
            return None;
        }
        let tolerate_soft = pod.constraints.tolerate_prefer_no_schedule;
        if first_untolerated(self.node.effective_taints(), pod.tolerations, tolerate_soft).is_some()
        {
            return None;
        }
        if conflicting_port(&self.host_ports, pod.host_ports).is_some() {
            return None;
        }
        topology.check_hostname(&pod.topology, self.host).ok()?;
        let wanted = &pod.constraints.requirements;
        let mut requirements = None;
        if !wanted.is_empty() {
            if !self
                .requirements
                .is_compatible(wanted, AllowUndefined::NoKeys)
            {
                return None;
            }
            let mut merged = self.requirements.clone();
            merged.add_all(wanted);
            requirements = Some(merged);
        }
        if topology.has_domain_rules(&pod.topology) {
            let mut narrowed = requirements
                .clone()
                .unwrap_or_else(|| self.requirements.clone());
            topology
                .narrow(&pod.topology, &mut narrowed, &mut |_, _, _| true)
                .ok()?;
            // A rule on a key the node has no label for cannot hold on it.
            if !self
                .requirements
                .is_compatible(&narrowed, AllowUndefined::NoKeys)
            {
                return None;
            }
            requirements = Some(narrowed);
        }
        Some(requirements)
    }

    /// Takes a pod with `demand` and `host_ports`; `requirements` replace the node's.
    pub(super) fn commit(
        &mut self,
        requirements: Option<Requirements>,
        demand: &Demand,
        host_ports: &[HostPort],
    ) {
        if let Some(requirements) = requirements {
            self.requirements = requirements;
        }
        self.available = self.available.saturating_sub(&demand.list);
        self.available_fixed = Fixed::of(&self.available);
        self.host_ports.extend_from_slice(host_ports);
    }
}

/// `requests` with the pod itself counted under `pods`, as upstream's `RequestsForPods`.
pub(super) fn counted(requests: &ResourceList) -> ResourceList {
    requests
        .clone()
        .with(crate::resources::ResourceName::PODS, requests.pods().max(1))
}

/// The per-resource minimum allocatable of `options` (empty without options).
fn smallest_allocatable(options: &[Arc<InstanceType>]) -> ResourceList {
    let Some((first, rest)) = options.split_first() else {
        return ResourceList::new();
    };
    rest.iter()
        .fold(first.allocatable().clone(), |smallest, t| {
            smallest.min_per_resource(t.allocatable())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{NodeOverhead, ResourceName};
    use crate::scheduler::taints::TaintEffect;

    fn resources(cpu: i64, memory: i64) -> ResourceList {
        ResourceList::new()
            .with(ResourceName::CPU, cpu)
            .with(ResourceName::MEMORY, memory)
    }

    #[test]
    fn given_a_node_without_a_hostname_label_when_built_then_its_name_is_the_hostname() {
        let node = ExistingNode::new("node-1", [("zone", "a")], resources(1000, 1));
        let expected: Requirements = [
            Requirement::in_values(LABEL_HOSTNAME, ["node-1"]),
            Requirement::in_values("zone", ["a"]),
        ]
        .into_iter()
        .collect();
        assert_eq!(node.requirements, expected);
    }

    #[test]
    fn given_bound_pods_when_added_then_requests_count_each_pod() {
        let node = ExistingNode::new("n", [], resources(4000, 100))
            .with_pod(Pod::new("a", "p").with_requests(resources(1000, 10)))
            .with_daemon_pod(Pod::new("kube-system", "ds").with_requests(resources(100, 1)));
        assert_eq!(
            node.requested,
            resources(1100, 11).with(ResourceName::PODS, 2)
        );
        assert_eq!(
            node.daemon_set_requested,
            resources(100, 1).with(ResourceName::PODS, 1)
        );
    }

    #[test]
    fn given_an_uninitialised_node_when_listing_taints_then_start_up_taints_are_ignored() {
        let startup = Taint::new("cilium", "", TaintEffect::NoSchedule);
        let not_ready = Taint::new("node.kubernetes.io/not-ready", "", TaintEffect::NoSchedule);
        let dedicated = Taint::new("dedicated", "db", TaintEffect::NoSchedule);
        let mut node = ExistingNode::new("n", [], ResourceList::new())
            .with_taint(startup.clone())
            .with_taint(not_ready)
            .with_taint(dedicated.clone())
            .with_initialized(false);
        node.startup_taints = vec![startup];
        assert_eq!(node.effective_taints().collect::<Vec<_>>(), [&dedicated]);
        let node = node.with_initialized(true);
        assert_eq!(node.effective_taints().count(), 3);
    }

    #[test]
    fn given_in_flight_options_when_built_then_allocatable_is_the_smallest_of_each() {
        let option = |name: &str, cpu, memory| {
            Arc::new(InstanceType::new(
                name,
                Requirements::new(),
                Vec::new(),
                resources(cpu, memory),
                NodeOverhead::default(),
            ))
        };
        let claim = ExistingNode::in_flight(
            "claim",
            Requirements::new(),
            &[option("a", 4000, 8), option("b", 2000, 16)],
        );
        assert_eq!(claim.allocatable, resources(2000, 8));
        assert!(!claim.initialized);
    }
}
