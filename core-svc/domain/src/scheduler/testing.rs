//! Builders for scheduler tests: a small catalogue in three zones, NodePools, pods, and
//! readers that turn results into short comparable values.

use std::sync::Arc;

use crate::instance_type::{InstanceType, Offering};
use crate::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_OS, LABEL_TOPOLOGY_ZONE,
    LabelPolicy, LabelValueType,
};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{NodeOverhead, ResourceList, ResourceName};
use crate::scheduler::{
    ExistingNode, NodePoolSpec, Pod, SchedulingInput, SchedulingResults, solve,
};

pub(super) const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
pub(super) const GIB: i64 = 1 << 30;

/// `cpu` millicores and `memory` GiB.
pub(super) fn resources(cpu_millis: i64, memory_gib: i64) -> ResourceList {
    ResourceList::new()
        .with(ResourceName::CPU, cpu_millis)
        .with(ResourceName::MEMORY, memory_gib * GIB)
}

/// An instance type to build.
#[derive(Debug, Clone)]
pub(super) struct TypeSpec {
    pub(super) name: String,
    pub(super) cpu: i64,
    pub(super) memory_gib: i64,
    pub(super) price: f64,
    pub(super) zones: Vec<&'static str>,
    pub(super) capacity_types: Vec<&'static str>,
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) extended: Vec<(&'static str, i64)>,
    pub(super) pods: i64,
    pub(super) burstable: bool,
}

impl TypeSpec {
    /// `cpu` cores and `memory_gib` GiB, on-demand in every zone at `price`.
    pub(super) fn new(name: &str, cpu: i64, memory_gib: i64, price: f64) -> Self {
        TypeSpec {
            name: name.to_owned(),
            cpu,
            memory_gib,
            price,
            zones: ZONES.to_vec(),
            capacity_types: vec!["on-demand"],
            labels: vec![(FAMILY, family(name))],
            extended: Vec::new(),
            pods: 110,
            burstable: false,
        }
    }

    pub(super) fn zones(mut self, zones: &[&'static str]) -> Self {
        self.zones = zones.to_vec();
        self
    }

    pub(super) fn capacity_types(mut self, capacity_types: &[&'static str]) -> Self {
        self.capacity_types = capacity_types.to_vec();
        self
    }

    pub(super) fn extended(mut self, name: &'static str, amount: i64) -> Self {
        self.extended.push((name, amount));
        self
    }

    /// At most `pods` pods per node (110 unless set).
    pub(super) fn pods(mut self, pods: i64) -> Self {
        self.pods = pods;
        self
    }

    /// Its cpu burstable, as the plugin says of AWS's `t` types.
    pub(super) fn burstable(mut self) -> Self {
        self.burstable = true;
        self
    }

    /// One more label on the type's nodes.
    pub(super) fn label(mut self, key: &'static str, value: &str) -> Self {
        self.labels.push((key, value.to_owned()));
        self
    }

    /// The type; spot offerings cost half the on-demand price.
    pub(super) fn build(&self) -> Arc<InstanceType> {
        let mut requirements: Requirements = [
            Requirement::in_values(LABEL_INSTANCE_TYPE, [self.name.as_str()]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, self.zones.iter()),
            Requirement::in_values(LABEL_CAPACITY_TYPE, self.capacity_types.iter()),
            Requirement::in_values(LABEL_ARCH, ["amd64"]),
            Requirement::in_values(LABEL_OS, ["linux"]),
        ]
        .into_iter()
        .collect();
        for (key, value) in &self.labels {
            requirements.add(Requirement::in_values(key, [value.as_str()]));
        }
        let mut offerings = Vec::new();
        for zone in &self.zones {
            for capacity_type in &self.capacity_types {
                let price = if *capacity_type == "spot" {
                    self.price / 2.0
                } else {
                    self.price
                };
                offerings.push(Offering::new(
                    zone,
                    capacity_type,
                    price,
                    true,
                    Requirements::new(),
                ));
            }
        }
        let mut capacity =
            resources(self.cpu * 1000, self.memory_gib).with(ResourceName::PODS, self.pods);
        for (name, amount) in &self.extended {
            capacity = capacity.with(*name, *amount);
        }
        Arc::new(
            InstanceType::new(
                &self.name,
                requirements,
                offerings,
                capacity,
                NodeOverhead::default(),
            )
            .with_burstable_cpu(self.burstable),
        )
    }
}

fn family(name: &str) -> String {
    name.split('.').next().unwrap_or(name).to_owned()
}

/// Five general-purpose types, from 1 to 8 cores, priced by size.
pub(super) fn catalogue() -> Arc<[Arc<InstanceType>]> {
    [
        TypeSpec::new("c5.large", 1, 2, 0.05),
        TypeSpec::new("c5.xlarge", 2, 4, 0.10),
        TypeSpec::new("c5.2xlarge", 4, 8, 0.20),
        TypeSpec::new("m5.2xlarge", 4, 16, 0.25),
        TypeSpec::new("c5.4xlarge", 8, 16, 0.40),
    ]
    .iter()
    .map(TypeSpec::build)
    .collect()
}

/// A NodePool over [`catalogue`].
pub(super) fn pool(name: &str) -> NodePoolSpec {
    NodePoolSpec::new(name, catalogue())
}

/// A pod in `default` requesting `cpu_millis` and 1 GiB; its creation time follows its name
/// so equal pods keep their order.
pub(super) fn pod(name: &str, cpu_millis: i64) -> Pod {
    Pod::new("default", name).with_requests(resources(cpu_millis, 1))
}

/// The instance family label of the test catalogue's provider, shaped as AWS's (test data:
/// core knows no provider's labels).
pub(super) const FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Its instance category label.
pub(super) const CATEGORY: &str = "karpenter.k8s.aws/instance-category";

/// The label policy of a provider shaped as AWS, with the labels the tests use, as core builds
/// it from the plugin's vocabulary.
pub(super) fn provider_policy() -> LabelPolicy {
    let integer = |key| (key, LabelValueType::Integer);
    let string = |key| (key, LabelValueType::String);
    LabelPolicy::with_vocabulary(
        ["karpenter.k8s.aws"],
        [
            string(FAMILY),
            string(CATEGORY),
            string("karpenter.k8s.aws/instance-size"),
            string("karpenter.k8s.aws/instance-hypervisor"),
            string("karpenter.k8s.aws/instance-encryption-in-transit-supported"),
            integer("karpenter.k8s.aws/instance-generation"),
            integer("karpenter.k8s.aws/instance-cpu"),
            integer("karpenter.k8s.aws/instance-memory"),
        ],
    )
}

/// An input with `pods` and `pools` under the AWS label policy.
pub(super) fn input(pods: Vec<Pod>, pools: Vec<NodePoolSpec>) -> SchedulingInput {
    SchedulingInput {
        pods,
        node_pools: pools,
        label_policy: provider_policy(),
        ..SchedulingInput::default()
    }
}

/// Solves, panicking on invalid input.
pub(super) fn run(input: &SchedulingInput) -> SchedulingResults {
    solve(input).expect("valid input")
}

/// The pods of each new NodeClaim, by name.
pub(super) fn claims(results: &SchedulingResults) -> Vec<Vec<&str>> {
    results
        .new_node_claims
        .iter()
        .map(|c| c.pods.iter().map(|p| p.name()).collect())
        .collect()
}

/// The reason `pod` is unschedulable.
pub(super) fn reason<'r>(results: &'r SchedulingResults, pod: &str) -> Option<&'r str> {
    results
        .unschedulable
        .iter()
        .find(|(id, _)| id.name() == pod)
        .map(|(_, reason)| reason.as_str())
}

/// The values of `key` the `index`th new NodeClaim allows, joined with spaces.
pub(super) fn allowed(results: &SchedulingResults, index: usize, key: &str) -> String {
    results.new_node_claims[index]
        .requirements
        .get(key)
        .map(|r| r.values().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The instance type names of the `index`th new NodeClaim, in order.
pub(super) fn options(results: &SchedulingResults, index: usize) -> Vec<&str> {
    results.new_node_claims[index]
        .instance_types
        .iter()
        .map(|t| t.name())
        .collect()
}

/// `nodes` as [`SchedulingInput::existing_nodes`] holds them.
pub(crate) fn shared(nodes: Vec<ExistingNode>) -> Vec<Arc<ExistingNode>> {
    nodes.into_iter().map(Arc::new).collect()
}
