//! Runs at benchmark scale: a synthetic catalogue shaped like AWS's (about 1,250 types, 6 zones,
//! spot and on-demand, a dozen labels each) with thousands of pods. They check that every pod
//! is placed; how fast is the benchmarks' business (`simulator`), never a test's.

use std::sync::Arc;

use crate::instance_type::{InstanceType, Offering};
use crate::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_OS,
    LABEL_TOPOLOGY_ZONE,
};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{NodeOverhead, ResourceList, ResourceName};
use crate::scheduler::testing::{provider_policy, run};
use crate::scheduler::{
    LabelSelector, NodePoolSpec, Pod, PodAffinityTerm, SchedulingInput, TopologySpreadConstraint,
};

const ZONES: [&str; 6] = [
    "us-east-1a",
    "us-east-1b",
    "us-east-1c",
    "us-east-1d",
    "us-east-1e",
    "us-east-1f",
];
const MIB: i64 = 1 << 20;

fn catalogue() -> Arc<[Arc<InstanceType>]> {
    let sizes: [(&str, i64); 12] = [
        ("medium", 1),
        ("large", 2),
        ("xlarge", 4),
        ("2xlarge", 8),
        ("4xlarge", 16),
        ("8xlarge", 32),
        ("12xlarge", 48),
        ("16xlarge", 64),
        ("24xlarge", 96),
        ("32xlarge", 128),
        ("48xlarge", 192),
        ("metal", 96),
    ];
    let mut types = Vec::new();
    for (c, category) in [
        "c", "m", "r", "t", "i", "d", "x", "z", "g", "h", "a", "u", "f",
    ]
    .iter()
    .enumerate()
    {
        for generation in 3..=10 {
            let variant = ["", "a", "g", "d", "n", "gd", "i", "in"][(c + generation) % 8];
            let family = format!("{category}{generation}{variant}");
            let gib_per_cpu = [2, 4, 8, 4, 8, 8, 16, 8, 4, 4, 2, 32, 4][c];
            for (size, cpus) in sizes {
                let name = format!("{family}.{size}");
                let price = 0.0125
                    * cpus as f64
                    * (1.0 + gib_per_cpu as f64 / 8.0)
                    * (1.0 + generation as f64 / 50.0);
                types.push(build(
                    &name,
                    &family,
                    category,
                    generation,
                    size,
                    cpus,
                    gib_per_cpu,
                    price,
                ));
            }
        }
    }
    types.into()
}

#[allow(clippy::too_many_arguments)]
fn build(
    name: &str,
    family: &str,
    category: &str,
    generation: usize,
    size: &str,
    cpus: i64,
    gib_per_cpu: i64,
    price: f64,
) -> Arc<InstanceType> {
    let memory = cpus * gib_per_cpu * 1024 * MIB;
    let arch = if family.contains('g') {
        "arm64"
    } else {
        "amd64"
    };
    let requirements: Requirements = [
        Requirement::in_values(LABEL_INSTANCE_TYPE, [name]),
        Requirement::in_values(LABEL_TOPOLOGY_ZONE, ZONES),
        Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand", "spot"]),
        Requirement::in_values(LABEL_ARCH, [arch]),
        Requirement::in_values(LABEL_OS, ["linux"]),
        Requirement::in_values("karpenter.k8s.aws/instance-family", [family]),
        Requirement::in_values("karpenter.k8s.aws/instance-category", [category]),
        Requirement::in_values(
            "karpenter.k8s.aws/instance-generation",
            [generation.to_string()],
        ),
        Requirement::in_values("karpenter.k8s.aws/instance-size", [size]),
        Requirement::in_values("karpenter.k8s.aws/instance-cpu", [cpus.to_string()]),
        Requirement::in_values(
            "karpenter.k8s.aws/instance-memory",
            [(memory / MIB).to_string()],
        ),
        Requirement::in_values("karpenter.k8s.aws/instance-hypervisor", ["nitro"]),
        Requirement::in_values(
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            ["true"],
        ),
    ]
    .into_iter()
    .collect();
    let offerings = ZONES
        .iter()
        .flat_map(|zone| {
            [
                Offering::new(zone, "on-demand", price, true, Requirements::new()),
                Offering::new(zone, "spot", price * 0.35, true, Requirements::new()),
            ]
        })
        .collect();
    let pods = if cpus < 32 { 110 } else { 737 };
    let capacity = ResourceList::new()
        .with(ResourceName::CPU, cpus * 1000)
        .with(ResourceName::MEMORY, memory)
        .with(ResourceName::PODS, pods)
        .with(ResourceName::EPHEMERAL_STORAGE, 20 * 1024 * MIB);
    let overhead = NodeOverhead {
        kube_reserved: ResourceList::new()
            .with(ResourceName::CPU, 70 + cpus * 2)
            .with(ResourceName::MEMORY, (11 * pods + 255) * MIB),
        system_reserved: ResourceList::new(),
        eviction_threshold: ResourceList::new().with(ResourceName::MEMORY, 100 * MIB),
    };
    Arc::new(InstanceType::new(
        name,
        requirements,
        offerings,
        capacity,
        overhead,
    ))
}

/// The pods of upstream's benchmark: cpu from {100m, 250m, 500m, 1, 1.5}, memory from
/// {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}, drawn from a seeded generator.
fn pods(count: usize, shape: impl Fn(usize, Pod) -> Pod) -> Vec<Pod> {
    let mut state: u64 = 42;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    (0..count)
        .map(|i| {
            let cpu = [100, 250, 500, 1000, 1500][next() % 5];
            let memory = [100, 256, 512, 1024, 2048, 4096][next() % 6] * MIB;
            let label = ["a", "b", "c", "d", "e", "f", "g"][next() % 7];
            let requests = ResourceList::new()
                .with(ResourceName::CPU, cpu)
                .with(ResourceName::MEMORY, memory);
            let pod = Pod::new("default", &format!("pod-{i}"))
                .with_requests(requests)
                .with_label("app", label);
            shape(i, pod)
        })
        .collect()
}

fn input(pods: Vec<Pod>) -> SchedulingInput {
    SchedulingInput {
        pods,
        node_pools: vec![NodePoolSpec::new("default", catalogue())],
        label_policy: provider_policy(),
        ..SchedulingInput::default()
    }
}

fn selector(pod: &Pod) -> LabelSelector {
    let app = pod.labels.get("app").map_or("", String::as_str);
    LabelSelector::matching([("app", app)])
}

#[test]
fn scale_5000_plain_pods_on_an_aws_sized_catalogue() {
    let given = input(pods(5000, |_, p| p));
    let results = run(&given);
    assert!(
        results.unschedulable.is_empty(),
        "{:?}",
        results.unschedulable.first()
    );
    assert_eq!(results.placed_pod_count(), 5000);
}

#[test]
fn scale_20000_pods_with_hostname_spread() {
    let given = input(pods(20_000, |_, p| {
        let selector = selector(&p);
        p.with_spread(TopologySpreadConstraint::new(LABEL_HOSTNAME, 1, selector))
    }));
    let results = run(&given);
    assert!(
        results.unschedulable.is_empty(),
        "{:?}",
        results.unschedulable.first()
    );
    assert_eq!(results.placed_pod_count(), 20_000);
}

#[test]
fn scale_diverse_pods_as_upstreams_benchmark() {
    let given = input(pods(5000, |i, p| {
        let selector = selector(&p);
        match i % 5 {
            0 => p.with_spread(TopologySpreadConstraint::new(
                LABEL_TOPOLOGY_ZONE,
                1,
                selector,
            )),
            1 => p.with_spread(TopologySpreadConstraint::new(LABEL_HOSTNAME, 1, selector)),
            2 => p.with_affinity(PodAffinityTerm::new(LABEL_TOPOLOGY_ZONE, selector)),
            3 => p.with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, selector)),
            _ => p,
        }
    }));
    let results = run(&given);
    assert!(
        results.unschedulable.is_empty(),
        "{:?}",
        results.unschedulable.first()
    );
}
