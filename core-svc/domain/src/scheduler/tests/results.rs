//! Results: determinism, instance type options (order, truncation, minValues), cost.

use std::sync::Arc;

use crate::instance_type::MAX_INSTANCE_TYPES;
use crate::labels::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE,
};
use crate::requirements::{Requirement, Requirements};
use crate::scheduler::testing::{
    TypeSpec, allowed, claims, input, options, pod, pool, reason, run, shared,
};
use crate::scheduler::{
    ExistingNode, HostPort, LabelSelector, NodePoolSpec, PodAffinityTerm, TopologySpreadConstraint,
};

fn many_types(count: usize) -> NodePoolSpec {
    // Prices fall as the index rises, so the cheapest are the last ones built.
    let types: Vec<_> = (0..count)
        .map(|i| TypeSpec::new(&format!("t{i:04}.large"), 4, 8, 10.0 - i as f64 / 100.0).build())
        .collect();
    NodePoolSpec::new("default", types.into())
}

fn min_values(key: &str, min: u32) -> Requirements {
    [Requirement::exists(key).with_min_values(Some(min))]
        .into_iter()
        .collect()
}

#[test]
fn given_the_same_input_twice_when_solved_then_the_results_are_identical() {
    let mut pods = Vec::new();
    for i in 0..40 {
        let mut p = pod(&format!("p{i}"), 250 * (i % 5 + 1))
            .with_label("app", if i % 2 == 0 { "a" } else { "b" });
        match i % 4 {
            0 => {
                p = p.with_spread(TopologySpreadConstraint::new(
                    LABEL_TOPOLOGY_ZONE,
                    1,
                    LabelSelector::matching([("app", "a")]),
                ))
            }
            1 => {
                p = p.with_anti_affinity(PodAffinityTerm::new(
                    LABEL_HOSTNAME,
                    LabelSelector::matching([("app", "b")]),
                ))
            }
            2 => p = p.with_host_port(HostPort::tcp(8080)),
            _ => {}
        }
        pods.push(p);
    }
    let mut given = input(pods, vec![pool("default"), pool("other").with_weight(5)]);
    given.existing_nodes = shared(vec![ExistingNode::new(
        "node-1",
        [(LABEL_TOPOLOGY_ZONE, "zone-b")],
        crate::scheduler::testing::resources(2000, 8),
    )]);
    let first = run(&given);
    let second = run(&given);
    assert_eq!(first, second);
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
    assert_eq!(first.placed_pod_count(), 40);
}

#[test]
fn given_more_types_than_a_node_claim_lists_when_solved_then_the_cheapest_600_are_kept_in_order() {
    let results = run(&input(vec![pod("p", 1000)], vec![many_types(700)]));
    let kept = options(&results, 0);
    assert_eq!(kept.len(), MAX_INSTANCE_TYPES);
    assert_eq!(kept.first(), Some(&"t0699.large"));
    assert_eq!(kept.last(), Some(&"t0100.large"));
    let requirement = results.new_node_claims[0]
        .requirements
        .get(LABEL_INSTANCE_TYPE);
    assert_eq!(requirement.map(|r| r.len()), Some(MAX_INSTANCE_TYPES));
}

#[test]
fn given_min_values_beyond_what_600_types_can_cover_when_solved_then_the_pods_are_unschedulable() {
    let pool = many_types(700).with_requirements(&min_values(LABEL_INSTANCE_TYPE, 650));
    let results = run(&input(vec![pod("p", 1000)], vec![pool]));
    assert!(results.new_node_claims.is_empty());
    assert_eq!(
        reason(&results, "p"),
        Some(
            "NodePool default cannot keep minValues within the 600 cheapest instance types: \
             minValues requirement is not met for label(s) node.kubernetes.io/instance-type (600 of 650 values)"
        )
    );
}

#[test]
fn given_min_values_on_instance_families_when_a_pod_would_narrow_below_them_then_it_goes_elsewhere()
{
    let pool =
        pool("default").with_requirements(&min_values("karpenter.k8s.aws/instance-family", 2));
    let results = run(&input(
        vec![pod("big", 6000), pod("small", 1000)],
        vec![pool],
    ));
    assert_eq!(
        reason(&results, "big"),
        Some(
            "NodePool default: minValues requirement is not met for label(s) karpenter.k8s.aws/instance-family (1 of 2 values)"
        ),
        "only c5.4xlarge holds 6 cores"
    );
    assert_eq!(claims(&results), [vec!["small"]]);
    assert_eq!(
        options(&results, 0),
        [
            "c5.large",
            "c5.xlarge",
            "c5.2xlarge",
            "m5.2xlarge",
            "c5.4xlarge"
        ]
    );
}

#[test]
fn given_spot_and_on_demand_offerings_when_solved_then_the_claim_lists_both_and_costs_the_cheapest()
{
    let types: Vec<_> = [TypeSpec::new("c5.xlarge", 2, 4, 0.2)
        .capacity_types(&["on-demand", "spot"])
        .zones(&["zone-a"])]
    .iter()
    .map(TypeSpec::build)
    .collect();
    let results = run(&input(
        vec![pod("p", 1000)],
        vec![NodePoolSpec::new("default", Arc::from(types))],
    ));
    assert_eq!(allowed(&results, 0, LABEL_CAPACITY_TYPE), "on-demand spot");
    assert_eq!(allowed(&results, 0, LABEL_TOPOLOGY_ZONE), "zone-a");
    assert_eq!(results.node_count(), 1);
    assert!(
        (results.estimated_cost() - 0.1).abs() < 1e-9,
        "{}",
        results.estimated_cost()
    );
}
