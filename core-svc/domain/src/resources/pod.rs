//! The Kubernetes rules that produce resource lists: a pod's effective requests (init
//! containers, sidecars, overhead), DaemonSet overhead per node, and a node's allocatable.
//! Apart from the [`ResourceList`] representation because they are Kubernetes's arithmetic, not
//! the scheduler's.
//!
//! [`PodResources::requests`] computes in exact [`Quantity`] arithmetic first and converts to a
//! [`ResourceList`] once, so fractions below a unit are summed before they are rounded up, as
//! Kubernetes sums `resource.Quantity` values before the scheduler rounds them.

use std::collections::BTreeMap;

use crate::quantity::Quantity;

use super::{ResourceList, ResourceName};

/// Exact quantities by resource name: the shape of a Kubernetes `ResourceList`.
pub type Quantities = BTreeMap<ResourceName, Quantity>;

/// The resource fields of one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerResources {
    /// `resources.requests`.
    pub requests: Quantities,
    /// `resources.limits`.
    pub limits: Quantities,
    /// `restartPolicy: Always` on an init container, i.e. a sidecar (KEP-753). Ignored on
    /// regular containers.
    pub restart_policy_always: bool,
}

impl ContainerResources {
    /// The requests Kubernetes uses: `requests`, plus the limit of every resource that has a
    /// limit but no request (the API server's defaulting of requests from limits).
    pub fn effective_requests(&self) -> Quantities {
        let mut requests = self.requests.clone();
        for (name, limit) in &self.limits {
            requests.entry(name.clone()).or_insert(*limit);
        }
        requests
    }
}

/// The resource fields of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    /// `spec.initContainers`, in order (sidecars included).
    pub init_containers: Vec<ContainerResources>,
    /// `spec.containers`.
    pub containers: Vec<ContainerResources>,
    /// `spec.overhead` (RuntimeClass pod overhead).
    pub overhead: Quantities,
}

impl PodResources {
    /// The pod's requests as exact quantities, computed as Kubernetes'
    /// `resourcehelper.PodRequests` does (KEP-753 rules for sidecars).
    ///
    /// Per resource: the sum over app containers and sidecars, or the peak of any init
    /// container if larger, where an init container's peak is its own request plus the
    /// requests of the sidecars started before it (a sidecar's peak is all sidecars up to and
    /// including itself); then the pod overhead is added.
    pub fn request_quantities(&self) -> Quantities {
        let mut requests = Quantities::new();
        for container in &self.containers {
            add_into(&mut requests, &container.effective_requests());
        }
        let mut sidecars = Quantities::new();
        let mut init_peak = Quantities::new();
        for container in &self.init_containers {
            let own = container.effective_requests();
            if container.restart_policy_always {
                add_into(&mut requests, &own);
                add_into(&mut sidecars, &own);
                max_into(&mut init_peak, &sidecars);
            } else {
                let mut peak = own;
                add_into(&mut peak, &sidecars);
                max_into(&mut init_peak, &peak);
            }
        }
        max_into(&mut requests, &init_peak);
        add_into(&mut requests, &self.overhead);
        requests
    }

    /// The pod's requests (see [`Self::request_quantities`]) as a [`ResourceList`], each
    /// resource rounded up to its unit once, after summing; amounts beyond `i64` saturate.
    pub fn requests(&self) -> ResourceList {
        ResourceList::from_quantities_saturating(&self.request_quantities())
    }
}

/// DaemonSet overhead on a node: the summed requests of the DaemonSet pods that would run there
/// (the caller chooses which DaemonSets apply). Summed exactly, then rounded up once.
pub fn daemon_set_overhead<'a>(
    daemon_pods: impl IntoIterator<Item = &'a PodResources>,
) -> ResourceList {
    let mut total = Quantities::new();
    for pod in daemon_pods {
        add_into(&mut total, &pod.request_quantities());
    }
    ResourceList::from_quantities_saturating(&total)
}

/// What a node reserves for itself (upstream `InstanceTypeOverhead`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOverhead {
    /// kubelet's `--kube-reserved`.
    pub kube_reserved: ResourceList,
    /// kubelet's `--system-reserved`.
    pub system_reserved: ResourceList,
    /// kubelet's hard eviction thresholds, as amounts.
    pub eviction_threshold: ResourceList,
}

impl NodeOverhead {
    /// The sum of the three reservations (upstream `Total()`).
    pub fn total(&self) -> ResourceList {
        [
            &self.kube_reserved,
            &self.system_reserved,
            &self.eviction_threshold,
        ]
        .into_iter()
        .sum()
    }
}

/// A node's allocatable resources, as upstream `InstanceType.Allocatable()`: capacity minus the
/// overhead total, each resource floored at zero, and memory further reduced by every
/// `hugepages-*` capacity (kubelet takes huge pages out of memory), again floored at zero.
pub fn allocatable(capacity: &ResourceList, overhead: &NodeOverhead) -> ResourceList {
    let mut allocatable = capacity.saturating_sub(&overhead.total());
    allocatable.memory = allocatable
        .memory
        .saturating_sub(capacity.hugepages_bytes())
        .max(0);
    allocatable
}

fn add_into(total: &mut Quantities, more: &Quantities) {
    for (name, quantity) in more {
        let sum = total.entry(name.clone()).or_default();
        *sum = sum.saturating_add(*quantity);
    }
}

/// Kubernetes' `maxResourceList`: a resource absent from `total` is taken as is.
fn max_into(total: &mut Quantities, other: &Quantities) {
    for (name, quantity) in other {
        total
            .entry(name.clone())
            .and_modify(|current| *current = (*current).max(*quantity))
            .or_insert(*quantity);
    }
}
