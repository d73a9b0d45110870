//! The scheduler's view of a NodePool: what its nodes look like (requirements, labels,
//! taints), how many it may still launch (limits against current usage), how it ranks
//! against other NodePools (weight) and which instance types it offers.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::requirements::Requirements;
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::taints::Taint;

/// The resource name NodePool limits and usage use for the number of nodes.
pub const NODES: &str = "nodes";

/// A NodePool's limits: the most of each listed resource its nodes may have in total. A
/// resource that is not listed is unlimited; a listed zero allows nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    by_resource: BTreeMap<ResourceName, i64>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Self {
        Self::default()
    }

    /// These limits with `resource` limited to `amount` (in [`ResourceList`] units: cpu in
    /// millis, memory in bytes, [`NODES`] in nodes).
    #[must_use]
    pub fn with(mut self, resource: ResourceName, amount: i64) -> Self {
        self.by_resource.insert(resource, amount);
        self
    }

    /// These limits with at most `nodes` nodes.
    #[must_use]
    pub fn with_nodes(self, nodes: i64) -> Self {
        self.with(ResourceName::new(NODES), nodes)
    }

    /// The limited resources and their limits, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> + '_ {
        self.by_resource
            .iter()
            .map(|(name, amount)| (name, *amount))
    }

    /// Whether nothing is limited.
    pub fn is_empty(&self) -> bool {
        self.by_resource.is_empty()
    }
}

/// A NodePool, reduced to what scheduling needs.
///
/// Startup taints are not here: upstream does not consider them for scheduling (they are
/// expected to go away once the node is initialised), and an existing node that still carries
/// them lists them in [`ExistingNode::startup_taints`](crate::scheduler::ExistingNode).
#[derive(Debug, Clone)]
pub struct NodePoolSpec {
    /// The name; also the value of the `karpenter.sh/nodepool` label on its nodes.
    pub name: String,
    /// Higher weights are tried first.
    pub weight: i32,
    /// The template's requirements.
    pub requirements: Requirements,
    /// The template's labels.
    pub labels: BTreeMap<String, String>,
    /// The template's taints.
    pub taints: Vec<Taint>,
    /// The limits.
    pub limits: Limits,
    /// What the NodePool's nodes and NodeClaims already have (the sum of their capacities and
    /// the node count under [`NODES`], as `status.resources`).
    pub usage: ResourceList,
    /// The instance types the cloud provider offers for this NodePool.
    pub instance_types: Arc<[Arc<InstanceType>]>,
}

impl NodePoolSpec {
    /// A NodePool `name` of weight 0, without requirements, labels, taints or limits, offering
    /// `instance_types`.
    pub fn new(name: &str, instance_types: Arc<[Arc<InstanceType>]>) -> Self {
        NodePoolSpec {
            name: name.to_owned(),
            weight: 0,
            requirements: Requirements::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            limits: Limits::none(),
            usage: ResourceList::new(),
            instance_types,
        }
    }

    /// This NodePool with `weight`.
    #[must_use]
    pub fn with_weight(mut self, weight: i32) -> Self {
        self.weight = weight;
        self
    }

    /// This NodePool with `requirements` added to its requirements.
    #[must_use]
    pub fn with_requirements(mut self, requirements: &Requirements) -> Self {
        self.requirements.add_all(requirements);
        self
    }

    /// This NodePool with the template label `key=value`.
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// This NodePool with one more taint.
    #[must_use]
    pub fn with_taint(mut self, taint: Taint) -> Self {
        self.taints.push(taint);
        self
    }

    /// This NodePool with `limits` and current `usage`.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits, usage: ResourceList) -> Self {
        self.limits = limits;
        self.usage = usage;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_limits_when_listed_then_zero_is_a_limit_and_absent_is_not() {
        let limits = Limits::none().with(ResourceName::CPU, 0).with_nodes(3);
        let listed: Vec<(String, i64)> = limits
            .iter()
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        assert_eq!(listed, [("cpu".to_owned(), 0), ("nodes".to_owned(), 3)]);
        assert!(!limits.is_empty());
        assert!(Limits::none().is_empty());
    }
}
