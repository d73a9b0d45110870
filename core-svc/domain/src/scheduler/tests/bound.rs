//! The cost lower bound on catalogues small enough to solve by hand.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::bound::{BoundError, CostBound, lower_bound, plan_lower_bound};
use crate::scheduler::testing::{
    CATEGORY, FAMILY, TypeSpec, input, pod, provider_policy, resources, run, shared,
};
use crate::scheduler::{NodePoolSpec, Pod, Taint, TaintEffect};

const EPSILON: f64 = 1e-6;

fn types(specs: &[TypeSpec]) -> Arc<[Arc<InstanceType>]> {
    specs.iter().map(TypeSpec::build).collect()
}

fn pods(count: usize, requests: &ResourceList) -> Vec<Pod> {
    (0..count)
        .map(|i| Pod::new("default", &format!("p{i}")).with_requests(requests.clone()))
        .collect()
}

fn bound(pods: &[Pod], pools: &[NodePoolSpec]) -> Result<CostBound, BoundError> {
    lower_bound(pods, pools, &[], &provider_policy())
}

fn per_hour(pods: &[Pod], pools: &[NodePoolSpec]) -> f64 {
    match bound(pods, pools) {
        Ok(bound) => bound.per_hour,
        Err(error) => panic!("no bound: {error}"),
    }
}

fn requiring(pool: NodePoolSpec, key: &str, values: &[&str]) -> NodePoolSpec {
    let requirements: Requirements = [Requirement::in_values(key, values.iter())]
        .into_iter()
        .collect();
    pool.with_requirements(&requirements)
}

fn assert_close(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() < EPSILON,
        "{actual} is not {expected}"
    );
}

/// Two types, one cpu-rich and one memory-rich: 8 pods of 1 cpu and 5 GiB need 8 cpu and
/// 40 GiB. Buying `a` of (2 cpu, 4 GiB, $0.10) and `b` of (2 cpu, 16 GiB, $0.15): 2a + 2b >= 8
/// and 4a + 16b >= 40 meet at a = b = 2, $0.50; all of either costs more (10 a: $1.00; 4 b:
/// $0.60).
#[test]
fn given_two_types_when_both_resources_bind_then_the_optimum_mixes_them() {
    let pool = NodePoolSpec::new(
        "default",
        types(&[
            TypeSpec::new("c5.large", 2, 4, 0.10),
            TypeSpec::new("r5.large", 2, 16, 0.15),
        ]),
    );
    let pods = pods(8, &resources(1000, 5));
    let bound = bound(&pods, &[pool]).unwrap();
    assert_close(bound.per_hour, 0.50);
    let bought: Vec<(&str, f64)> = bound
        .nodes
        .iter()
        .map(|n| (&*n.instance_type, n.count))
        .collect();
    assert_eq!(bought.len(), 2, "{bought:?}");
    for (name, count) in bought {
        assert!((count - 2.0).abs() < EPSILON, "{name}: {count}");
    }
    assert_eq!(bound.binding, [ResourceName::CPU, ResourceName::MEMORY]);
}

#[test]
fn given_no_pods_then_the_bound_is_zero_whatever_is_offered() {
    assert_eq!(bound(&[], &[]), Ok(CostBound::default()));
}

fn burstable_catalogue() -> Arc<[Arc<InstanceType>]> {
    types(&[
        TypeSpec::new("t3.large", 2, 8, 0.05)
            .label(CATEGORY, "t")
            .burstable(),
        TypeSpec::new("m5.large", 2, 8, 0.10).label(CATEGORY, "m"),
    ])
}

/// 4 cpu: two t3.large at $0.05 if burstable types count, two m5.large at $0.10 otherwise.
#[test]
fn given_a_cheaper_burstable_type_when_the_nodepool_does_not_name_it_then_it_is_left_out() {
    let pods = pods(4, &resources(1000, 1));
    let any = NodePoolSpec::new("default", burstable_catalogue());
    assert_close(per_hour(&pods, std::slice::from_ref(&any)), 0.20);
    let not_c5 = any
        .clone()
        .with_requirements(&[Requirement::not_in(FAMILY, ["c5"])].into_iter().collect());
    assert_close(per_hour(&pods, &[not_c5]), 0.20);

    let only_t3 = NodePoolSpec::new(
        "default",
        types(&[TypeSpec::new("t3.large", 2, 8, 0.05)
            .label(CATEGORY, "t")
            .burstable()]),
    );
    assert_eq!(
        bound(&pods, &[only_t3]),
        Err(BoundError::NoOfferings {
            node_pools: "default".to_owned(),
            burstable: 1,
        })
    );
}

#[test]
fn given_a_nodepool_that_names_a_burstable_family_category_or_type_then_it_is_used() {
    let pods = pods(4, &resources(1000, 1));
    let any = NodePoolSpec::new("default", burstable_catalogue());
    for (key, values) in [
        (FAMILY, &["t3", "m5"][..]),
        (CATEGORY, &["t", "m"][..]),
        (crate::labels::LABEL_INSTANCE_TYPE, &["t3.large"][..]),
    ] {
        let pool = requiring(any.clone(), key, values);
        let bound = bound(&pods, &[pool]).unwrap();
        assert_close(bound.per_hour, 0.10);
        assert_eq!(&*bound.nodes[0].instance_type, "t3.large", "{key}");
    }
}

/// 40 pods of 10m and 64 MiB: 0.4 cpu and 2.5 GiB. A (1 cpu, 2 GiB, 4 pods, $0.05) costs
/// $0.0125 a pod, B (4 cpu, 16 GiB, 110 pods, $0.30) $0.0027: 40/110 of a B, whose cpu and
/// memory are then to spare.
#[test]
fn given_tiny_pods_when_pods_per_node_run_out_first_then_the_pod_count_binds() {
    let pool = NodePoolSpec::new(
        "default",
        types(&[
            TypeSpec::new("c5.large", 1, 2, 0.05).pods(4),
            TypeSpec::new("m5.xlarge", 4, 16, 0.30),
        ]),
    );
    let tiny = ResourceList::new()
        .with(ResourceName::CPU, 10)
        .with(ResourceName::MEMORY, 64 << 20);
    let bound = bound(&pods(40, &tiny), &[pool]).unwrap();
    assert_close(bound.per_hour, 0.30 * 40.0 / 110.0);
    assert_eq!(bound.binding, [ResourceName::PODS]);
    assert_eq!(&*bound.nodes[0].instance_type, "m5.xlarge");
}

/// Spot costs half of on-demand in the test catalogue: 4 cpu is one c5.xlarge at $0.10 spot,
/// $0.20 on demand.
#[test]
fn given_a_capacity_type_requirement_then_only_its_offerings_are_priced() {
    let catalogue =
        types(&[TypeSpec::new("c5.xlarge", 4, 8, 0.20).capacity_types(&["on-demand", "spot"])]);
    let pods = pods(4, &resources(1000, 1));
    let any = NodePoolSpec::new("default", catalogue);
    let spot = bound(&pods, std::slice::from_ref(&any)).unwrap();
    assert_close(spot.per_hour, 0.10);
    assert_eq!(&*spot.nodes[0].capacity_type, "spot");
    let on_demand = requiring(any, LABEL_CAPACITY_TYPE, &["on-demand"]);
    let on_demand = bound(&pods, &[on_demand]).unwrap();
    assert_close(on_demand.per_hour, 0.20);
    assert_eq!(&*on_demand.nodes[0].capacity_type, "on-demand");
}

/// A DaemonSet of 1 cpu and 1 GiB leaves a (2 cpu, 4 GiB, $0.10) node 1 cpu: 4 cpu of pods
/// need 4 nodes. A DaemonSet that does not tolerate the NodePool's taint costs nothing.
#[test]
fn given_a_daemonset_then_its_overhead_is_taken_from_every_node() {
    let pool = NodePoolSpec::new("default", types(&[TypeSpec::new("c5.large", 2, 4, 0.10)]));
    let pods = pods(4, &resources(1000, 0));
    let agent = Pod::new("kube-system", "agent").with_requests(resources(1000, 1));
    let with_agent = lower_bound(
        &pods,
        std::slice::from_ref(&pool),
        std::slice::from_ref(&agent),
        &provider_policy(),
    );
    assert_close(with_agent.unwrap().per_hour, 0.40);

    let tainted = pool.with_taint(Taint::new("dedicated", "batch", TaintEffect::NoSchedule));
    let without_agent = lower_bound(&pods, &[tainted], &[agent], &provider_policy());
    assert_close(without_agent.unwrap().per_hour, 0.20);
}

/// Two GPU pods need two single-GPU nodes even though one node's cpu would do.
#[test]
fn given_pods_requesting_an_extended_resource_then_it_is_covered_too() {
    let pool = NodePoolSpec::new(
        "default",
        types(&[
            TypeSpec::new("c5.2xlarge", 8, 16, 0.20),
            TypeSpec::new("g5.xlarge", 4, 16, 1.00).extended("nvidia.com/gpu", 1),
        ]),
    );
    let gpu_pods = pods(2, &resources(1000, 1).with("nvidia.com/gpu", 1));
    let bound = bound(&gpu_pods, &[pool]).unwrap();
    assert_close(bound.per_hour, 2.00);
    assert_eq!(bound.binding, [ResourceName::new("nvidia.com/gpu")]);
}

#[test]
fn given_nothing_can_supply_what_the_pods_request_then_the_error_names_it() {
    let pool = NodePoolSpec::new("default", types(&[TypeSpec::new("c5.large", 2, 4, 0.10)]));
    let gpu_pods = pods(2, &resources(1000, 1).with("nvidia.com/gpu", 1));
    let error = bound(&gpu_pods, std::slice::from_ref(&pool)).unwrap_err();
    assert!(
        matches!(&error, BoundError::Infeasible { resource, .. } if resource.as_str() == "nvidia.com/gpu"),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "the pods request 2 nvidia.com/gpu and no allowed instance type has any to spare"
    );

    let nowhere = requiring(pool, LABEL_TOPOLOGY_ZONE, &["zone-z"]);
    let error = bound(&gpu_pods, &[nowhere]).unwrap_err();
    assert!(matches!(error, BoundError::NoOfferings { .. }), "{error}");
    assert_eq!(bound(&gpu_pods, &[]).unwrap_err(), BoundError::NoNodePools);
}

#[test]
fn given_an_offering_without_a_real_price_then_the_error_names_the_type() {
    let pool = NodePoolSpec::new(
        "default",
        types(&[TypeSpec::new("c5.large", 2, 4, f64::NAN)]),
    );
    let error = bound(&pods(1, &resources(1000, 1)), &[pool]).unwrap_err();
    assert!(error.to_string().contains("c5.large"), "{error}");
}

/// Several NodePools: the bound is over the union of what they allow, each with its own
/// prices, so it is no more than either alone.
#[test]
fn given_two_nodepools_then_the_bound_buys_from_the_cheaper_for_each_resource() {
    let compute = NodePoolSpec::new("compute", types(&[TypeSpec::new("c5.large", 2, 4, 0.10)]));
    let memory = NodePoolSpec::new("memory", types(&[TypeSpec::new("r5.large", 2, 16, 0.15)]));
    let pods = pods(8, &resources(1000, 5));
    let both = bound(&pods, &[compute.clone(), memory.clone()]).unwrap();
    assert_close(both.per_hour, 0.50);
    let pools: Vec<&str> = both.nodes.iter().map(|n| n.node_pool.as_str()).collect();
    assert_eq!(pools, ["compute", "memory"]);
    assert!(both.per_hour <= per_hour(&pods, &[compute]) + EPSILON);
    assert!(both.per_hour <= per_hour(&pods, &[memory]) + EPSILON);
}

/// The bound of a plan covers the pods it placed; an unschedulable pod is left out. On
/// these catalogues (no burstable types) it never exceeds what the plan costs.
#[test]
fn given_a_plan_then_its_bound_covers_its_placed_pods_and_is_below_its_cost() {
    let catalogue = crate::scheduler::testing::catalogue();
    for count in [1, 3, 7, 20, 55] {
        let mut batch: Vec<Pod> = (0..count)
            .map(|i| pod(&format!("p{i}"), 250 + 150 * (i64::from(i) % 7)))
            .collect();
        batch.push(Pod::new("default", "huge").with_requests(resources(64_000, 1)));
        let input = input(batch, vec![NodePoolSpec::new("default", catalogue.clone())]);
        let results = run(&input);
        assert_eq!(results.unschedulable.len(), 1);
        let plan = plan_lower_bound(&input, &results).unwrap();
        let placed = &input.pods[..input.pods.len() - 1];
        assert_close(plan.per_hour, per_hour(placed, &input.node_pools));
        assert!(
            plan.per_hour <= results.estimated_cost() + EPSILON,
            "{count} pods: bound {} over plan {}",
            plan.per_hour,
            results.estimated_cost()
        );
        assert!(plan.per_hour > 0.0);
    }
}

/// One type in zone-a at 1.0 an hour and one just like it in zone-b and zone-c at 2.0, and
/// six 1-core pods of `app=web`, each spread over zones (maxSkew 1) when `spread`.
fn zones_priced_apart(spread: impl Fn(usize) -> bool) -> crate::scheduler::SchedulingInput {
    let pool = NodePoolSpec::new(
        "default",
        types(&[
            TypeSpec::new("c5.xlarge", 4, 16, 1.0).zones(&["zone-a"]),
            TypeSpec::new("m5.xlarge", 4, 16, 2.0).zones(&["zone-b", "zone-c"]),
        ]),
    );
    let web = crate::scheduler::LabelSelector::matching([("app", "web")]);
    let pods = (0..6)
        .map(|i| {
            let pod = pod(&format!("w{i}"), 1000).with_label("app", "web");
            if spread(i) {
                pod.with_spread(crate::scheduler::TopologySpreadConstraint::new(
                    LABEL_TOPOLOGY_ZONE,
                    1,
                    web.clone(),
                ))
            } else {
                pod
            }
        })
        .collect();
    input(pods, vec![pool])
}

#[test]
fn given_a_zone_spread_over_zones_priced_apart_then_the_bound_buys_each_zone_its_share() {
    // Each of the three zones holds at least two of the six pods: two cores in zone-a at
    // 1.0 per four cores, two in each of the others at 2.0, or 0.5 + 1.0 + 1.0. Without the
    // spread, all six cores would come from zone-a: 1.5.
    let given = zones_priced_apart(|_| true);
    let results = run(&given);
    let bound = plan_lower_bound(&given, &results).expect("a bound");
    assert!((bound.per_hour - 2.5).abs() < EPSILON, "{bound:?}");
    assert!(results.estimated_cost() >= bound.per_hour - EPSILON);
    let zones: Vec<&str> = bound.nodes.iter().map(|n| &*n.zone).collect();
    assert_eq!(zones, ["zone-a", "zone-b", "zone-c"], "{bound:?}");
}

#[test]
fn given_a_zone_spread_that_counts_pods_not_spread_then_the_bound_ignores_it() {
    // The last pod carries no spread but the spread counts it: it may go anywhere, so the
    // spread forces no share on any zone.
    let given = zones_priced_apart(|i| i < 5);
    let bound = plan_lower_bound(&given, &run(&given)).expect("a bound");
    assert!((bound.per_hour - 1.5).abs() < EPSILON, "{bound:?}");
}

#[test]
fn given_an_existing_node_then_zone_spread_adds_nothing_to_the_bound() {
    // A node's pods count toward the spread, so the zones' shares of the new pods are not
    // known without them: the bound leaves the spread out.
    let mut given = zones_priced_apart(|_| true);
    given.existing_nodes = shared(vec![crate::scheduler::ExistingNode::new(
        "node-a",
        [(LABEL_TOPOLOGY_ZONE, "zone-a")],
        ResourceList::new(),
    )]);
    let bound = plan_lower_bound(&given, &run(&given)).expect("a bound");
    assert!((bound.per_hour - 1.5).abs() < EPSILON, "{bound:?}");
}
