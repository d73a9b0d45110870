//! DaemonSet overhead per instance type: which DaemonSet pods run on a new node of a NodePool
//! depends on the type it launches as, not only on the NodePool's template.
//!
//! # Why per type
//!
//! Clusters run agents for some sizes or families only (a GPU device plugin, a 10-cpu log
//! shipper on the large nodes). Checked against the template alone, such a DaemonSet either
//! counts on every type or on none: with a 1-cpu agent for `large` nodes and a 10-cpu one for
//! `4xlarge` nodes, every new node would carry 11 cpu and a 1-cpu pod would get a 16-cpu type.
//! Upstream groups the types by the set of DaemonSet pods that would run on them and charges
//! each group its own overhead (kubernetes-sigs/karpenter#2975, v1.14.0:
//! `pkg/controllers/provisioning/scheduling/scheduler.go`, `buildDaemonOverheadGroups` and
//! `isDaemonPodCompatible`); so does this module. The catalogue takes each type's group's
//! overhead off its allocatable (`Catalog::new`), so everything that compares a NodeClaim's
//! pods with its options (filtering, cost, the bound) sees what a node of that type has left.

use crate::instance_type::InstanceType;
use crate::requirements::{AllowUndefined, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::constraints::HostPort;
use crate::scheduler::fit::Demand;
use crate::scheduler::ids::ContentMap;
use crate::scheduler::node::counted;
use crate::scheduler::pod::Pod;
use crate::scheduler::taints::{Taint, first_untolerated};

/// The DaemonSet pods that run on some of a NodePool's types, and what they take there.
#[derive(Debug, Clone, Default)]
pub(super) struct DaemonGroup {
    /// Their requests, each pod counted.
    pub(super) demand: Demand,
    /// The same without the pod count, for messages.
    pub(super) requests: ResourceList,
    /// The host ports they bind.
    pub(super) ports: Vec<HostPort>,
}

/// A NodePool's DaemonSet groups, each the overhead of the types whose DaemonSet pods are the
/// same set. Group ids are indices into [`Self::groups`].
#[derive(Debug, Default)]
pub(super) struct DaemonGroups {
    groups: Vec<DaemonGroup>,
    by_members: ContentMap<Vec<usize>, u32>,
}

impl DaemonGroups {
    /// The group of the daemons `members` (indices into `daemon_set_pods`, ascending),
    /// created on first sight.
    pub(super) fn group_of(&mut self, members: Vec<usize>, daemon_set_pods: &[Pod]) -> u32 {
        if let Some(&id) = self.by_members.get(&members) {
            return id;
        }
        let pods = || members.iter().map(|&i| &daemon_set_pods[i]);
        let requests: ResourceList = pods().map(|ds| &ds.requests).sum();
        let counted_requests: Vec<ResourceList> = pods().map(|ds| counted(&ds.requests)).collect();
        let group = DaemonGroup {
            demand: Demand::new(counted_requests.iter().sum()),
            requests,
            ports: pods()
                .flat_map(|ds| ds.host_ports.iter().copied())
                .collect(),
        };
        let id = u32::try_from(self.groups.len()).unwrap_or(u32::MAX);
        self.groups.push(group);
        self.by_members.insert(members, id);
        id
    }

    /// The groups, by id.
    pub(super) fn groups(&self) -> &[DaemonGroup] {
        &self.groups
    }

    /// The groups, by id, owned.
    pub(super) fn into_groups(self) -> Vec<DaemonGroup> {
        self.groups
    }
}

/// The cluster's DaemonSet pods as seen from one NodePool's new nodes.
#[derive(Debug, Clone, Copy)]
pub(super) struct DaemonSets<'a> {
    /// One pod per DaemonSet, as it would be created on a new node.
    pub(super) pods: &'a [Pod],
    /// The NodePool's taints.
    pub(super) taints: &'a [Taint],
    /// Which undefined labels a DaemonSet may select on.
    pub(super) allow: AllowUndefined<'a>,
}

impl<'a> DaemonSets<'a> {
    /// No DaemonSets.
    #[cfg(test)]
    pub(super) fn none() -> Self {
        DaemonSets {
            pods: &[],
            taints: &[],
            allow: AllowUndefined::NoKeys,
        }
    }

    /// The pods that would run on some node launched from a NodePool with template
    /// requirements `base`, for [`Self::on_type`].
    pub(super) fn on_template(&self, base: &Requirements) -> OnTemplate {
        let pods = self
            .pods
            .iter()
            .enumerate()
            .filter(|(_, ds)| runs_on(ds, self.taints, base, None, self.allow))
            .map(|(i, ds)| {
                (
                    i,
                    !ds.node_selector.is_empty() || !ds.required_node_affinity.is_empty(),
                )
            })
            .collect();
        OnTemplate { pods }
    }

    /// The pods (as ascending indices into [`Self::pods`]) that would run on a node of
    /// `instance_type` launched from a NodePool with template requirements `base`, of those
    /// `template` found ([`Self::on_template`] of the same `base`).
    pub(super) fn on_type(
        &self,
        template: &OnTemplate,
        base: &Requirements,
        instance_type: &InstanceType,
    ) -> Vec<usize> {
        let own = instance_type.requirements();
        template
            .pods
            .iter()
            .filter(|&&(i, selects)| {
                !selects || runs_on(&self.pods[i], self.taints, base, Some(own), self.allow)
            })
            .map(|&(i, _)| i)
            .collect()
    }
}

/// The DaemonSet pods that run on some node of a NodePool, as indices, each with whether it
/// selects nodes (by node selector or affinity) and so may run on some of its types only.
/// The others run on every type: most DaemonSets select nothing, and the catalogue asks about
/// hundreds of types, so they are decided once.
#[derive(Debug)]
pub(super) struct OnTemplate {
    pods: Vec<(usize, bool)>,
}

/// Whether a DaemonSet pod would run on nodes with `taints` and `requirements` (an existing
/// node's labels, or a NodePool's template; upstream `isDaemonPodCompatible`): it tolerates
/// the taints (`PreferNoSchedule` does not keep a DaemonSet away) and one of its required
/// node affinity terms is compatible.
pub(super) fn daemon_runs_on(
    daemon: &Pod,
    taints: &[Taint],
    requirements: &Requirements,
    allow: AllowUndefined<'_>,
) -> bool {
    runs_on(daemon, taints, requirements, None, allow)
}

/// [`daemon_runs_on`], and when `instance_type` is given, the same term must also intersect
/// the type's own requirements (intersect rather than be compatible: the type does not
/// define the custom keys a DaemonSet may select on, which the template already checked).
fn runs_on(
    daemon: &Pod,
    taints: &[Taint],
    requirements: &Requirements,
    instance_type: Option<&Requirements>,
    allow: AllowUndefined<'_>,
) -> bool {
    if first_untolerated(taints, &daemon.tolerations, true).is_some() {
        return false;
    }
    let node_selector = Requirements::from_labels(&daemon.node_selector);
    let accepts = |term: &Requirements| {
        requirements.is_compatible(term, allow)
            && instance_type.is_none_or(|own| own.is_intersecting(term))
    };
    if daemon.required_node_affinity.is_empty() {
        return accepts(&node_selector);
    }
    daemon.required_node_affinity.iter().any(|term| {
        let mut merged = node_selector.clone();
        merged.add_all(term);
        accepts(&merged)
    })
}
