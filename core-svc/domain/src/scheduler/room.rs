//! What a node has free, against the smallest request among pods to place: a node without room
//! for the smallest takes none of them, so callers that solve many times over a mostly full
//! cluster (the disruption simulations, the simulator's kube-scheduler) can leave it out of the
//! input, when nothing depends on where pods are ([`has_inter_pod_constraints`]).

use std::sync::Arc;

use crate::resources::ResourceList;
use crate::scheduler::{ExistingNode, Pod};

/// Amounts of the resources every pod asks for: what a node has free, or the smallest request
/// among the pods to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    cpu_millis: i64,
    memory: i64,
    ephemeral_storage: i64,
    pods: i64,
}

impl Room {
    /// What `node` has free (before any DaemonSet not running yet: that can only take more).
    pub fn free_on(node: &ExistingNode) -> Self {
        let free = node.allocatable.saturating_sub(&node.requested);
        Self {
            cpu_millis: free.cpu_millis(),
            memory: free.memory_bytes(),
            ephemeral_storage: free.ephemeral_storage_bytes(),
            pods: free.pods(),
        }
    }

    /// The smallest request of `pods` for each of cpu, memory and ephemeral storage, and one pod
    /// slot: a node with less free than that of any of them takes none of them.
    pub fn smallest(pods: &[Pod]) -> Self {
        let least = |amount: fn(&ResourceList) -> i64| {
            pods.iter()
                .map(|pod| amount(&pod.requests))
                .min()
                .unwrap_or(0)
        };
        Self {
            cpu_millis: least(ResourceList::cpu_millis),
            memory: least(ResourceList::memory_bytes),
            ephemeral_storage: least(ResourceList::ephemeral_storage_bytes),
            pods: 1,
        }
    }

    /// Whether this much free holds `wanted`, resource by resource.
    pub fn holds(&self, wanted: &Self) -> bool {
        let enough = |free: i64, want: i64| want <= 0 || free >= want;
        enough(self.cpu_millis, wanted.cpu_millis)
            && enough(self.memory, wanted.memory)
            && enough(self.ephemeral_storage, wanted.ephemeral_storage)
            && enough(self.pods, wanted.pods)
    }
}

/// Whether any pod, to place (`pods`) or placed (on `nodes`), has a constraint that looks at
/// other pods (topology spread, pod affinity or anti-affinity): then every node counts,
/// wherever it has room, and none may be left out.
pub fn has_inter_pod_constraints(pods: &[Pod], nodes: &[Arc<ExistingNode>]) -> bool {
    pods.iter()
        .chain(nodes.iter().flat_map(|node| &node.pods))
        .any(|pod| {
            !pod.topology_spread_constraints.is_empty()
                || !pod.pod_affinity.is_empty()
                || !pod.pod_anti_affinity.is_empty()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::SchedulingInput;

    #[test]
    fn full_nodes_are_left_out_only_when_no_pod_looks_at_other_pods() {
        let mut input = SchedulingInput::default();
        let mut small = crate::scheduler::Pod::new("default", "small");
        small.requests = ResourceList::new().with("cpu", 500);
        let mut big = crate::scheduler::Pod::new("default", "big");
        big.requests = ResourceList::new()
            .with("cpu", 2000)
            .with("memory", 1 << 30);
        input.pods = vec![small.clone(), big];
        let smallest = Room::smallest(&input.pods);
        assert_eq!(
            smallest,
            Room {
                cpu_millis: 500,
                memory: 0,
                ephemeral_storage: 0,
                pods: 1
            }
        );

        let allocatable = ResourceList::new().with("cpu", 1000).with("pods", 2);
        let node = ExistingNode::new("n", [], allocatable.clone());
        assert!(Room::free_on(&node).holds(&smallest));
        let full = ExistingNode::new("n", [], allocatable.clone()).with_pod(small.clone());
        let mut busy = crate::scheduler::Pod::new("default", "busy");
        busy.requests = ResourceList::new().with("cpu", 600);
        let cpu_full = ExistingNode::new("n", [], allocatable.clone()).with_pod(busy);
        let slots_full = ExistingNode::new("n", [], allocatable)
            .with_pod(crate::scheduler::Pod::new("default", "one"))
            .with_pod(crate::scheduler::Pod::new("default", "two"));
        assert!(
            Room::free_on(&full).holds(&smallest),
            "500m and one slot left"
        );
        assert!(!Room::free_on(&cpu_full).holds(&smallest), "400m left");
        assert!(
            !Room::free_on(&slots_full).holds(&smallest),
            "no pod slot left"
        );

        assert!(!has_inter_pod_constraints(
            &input.pods,
            &input.existing_nodes
        ));
        input.existing_nodes.push(Arc::new(
            ExistingNode::new("m", [], ResourceList::new()).with_pod({
                let mut spread = crate::scheduler::Pod::new("default", "spread");
                spread
                    .pod_anti_affinity
                    .required
                    .push(crate::scheduler::PodAffinityTerm::new(
                        "kubernetes.io/hostname",
                        crate::scheduler::LabelSelector::default(),
                    ));
                spread
            }),
        ));
        assert!(has_inter_pod_constraints(
            &input.pods,
            &input.existing_nodes
        ));
    }
}
