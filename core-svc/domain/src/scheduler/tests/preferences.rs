//! Preferences: held as requirements, relaxed one step at a time in upstream's order.

use crate::labels::LABEL_TOPOLOGY_ZONE;
use crate::requirements::{Requirement, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::testing::{allowed, claims, input, pod, pool, reason, run, shared};
use crate::scheduler::{
    ExistingNode, LabelSelector, PodAffinityTerm, PreferencePolicy, TopologySpreadConstraint,
};

fn zone(value: &str) -> Requirements {
    [Requirement::in_values(LABEL_TOPOLOGY_ZONE, [value])]
        .into_iter()
        .collect()
}

fn family(value: &str) -> Requirements {
    [Requirement::in_values(
        "karpenter.k8s.aws/instance-family",
        [value],
    )]
    .into_iter()
    .collect()
}

/// A full node in `zone` running a pod labelled `app`.
fn running(name: &str, zone: &str, app: &str) -> ExistingNode {
    ExistingNode::new(name, [(LABEL_TOPOLOGY_ZONE, zone)], ResourceList::new())
        .with_pod(pod(&format!("{app}-0"), 100).with_label("app", app))
}

#[test]
fn given_required_node_affinity_terms_when_the_first_cannot_hold_then_the_next_is_used() {
    let either = pod("p", 1000)
        .with_required_node_affinity(family("p5"))
        .with_required_node_affinity(zone("zone-b"));
    let results = run(&input(vec![either], vec![pool("default")]));
    assert_eq!(allowed(&results, 0, LABEL_TOPOLOGY_ZONE), "zone-b");
}

#[test]
fn given_required_node_affinity_terms_when_none_can_hold_then_the_last_ones_reason_is_given() {
    let neither = pod("p", 1000)
        .with_required_node_affinity(
            zone("zone-b")
                .iter()
                .cloned()
                .chain(family("p4").iter().cloned())
                .collect(),
        )
        .with_required_node_affinity(family("p5"));
    let results = run(&input(vec![neither], vec![pool("default")]));
    assert_eq!(
        reason(&results, "p"),
        Some(
            "no instance type satisfies node affinity karpenter.k8s.aws/instance-family In [p5] in NodePool default"
        )
    );
}

#[test]
fn given_preferred_node_affinity_when_the_heaviest_cannot_hold_then_the_next_is_tried() {
    let picky = pod("p", 1000)
        .with_preferred_node_affinity(10, zone("zone-b"))
        .with_preferred_node_affinity(50, zone("zone-z"));
    let results = run(&input(vec![picky], vec![pool("default")]));
    assert_eq!(allowed(&results, 0, LABEL_TOPOLOGY_ZONE), "zone-b");
}

#[test]
fn given_preferred_pod_affinity_and_anti_affinity_in_conflict_when_relaxed_then_affinity_goes_first()
 {
    let torn = pod("p", 1000)
        .with_preferred_affinity(
            1,
            PodAffinityTerm::new(
                LABEL_TOPOLOGY_ZONE,
                LabelSelector::matching([("app", "db")]),
            ),
        )
        .with_preferred_anti_affinity(
            1,
            PodAffinityTerm::new(
                LABEL_TOPOLOGY_ZONE,
                LabelSelector::matching([("app", "cache")]),
            ),
        );
    let mut given = input(vec![torn], vec![pool("default")]);
    given.existing_nodes = shared(vec![
        running("db", "zone-c", "db"),
        running("cache", "zone-c", "cache"),
    ]);
    let results = run(&given);
    assert_eq!(
        allowed(&results, 0, LABEL_TOPOLOGY_ZONE),
        "zone-a",
        "the anti-affinity still holds"
    );
}

#[test]
fn given_preferred_anti_affinity_and_node_affinity_in_conflict_when_relaxed_then_anti_affinity_goes_first()
 {
    let torn = pod("p", 1000)
        .with_preferred_node_affinity(1, zone("zone-c"))
        .with_preferred_anti_affinity(
            1,
            PodAffinityTerm::new(
                LABEL_TOPOLOGY_ZONE,
                LabelSelector::matching([("app", "cache")]),
            ),
        );
    let mut given = input(vec![torn], vec![pool("default")]);
    given.existing_nodes = shared(vec![running("cache", "zone-c", "cache")]);
    let results = run(&given);
    assert_eq!(
        allowed(&results, 0, LABEL_TOPOLOGY_ZONE),
        "zone-c",
        "the node affinity still holds"
    );
}

#[test]
fn given_schedule_anyway_spread_when_it_can_hold_then_it_is_kept() {
    let pods = (0..3)
        .map(|i| {
            pod(&format!("w{i}"), 1000)
                .with_label("app", "web")
                .with_spread(
                    TopologySpreadConstraint::new(
                        LABEL_TOPOLOGY_ZONE,
                        1,
                        LabelSelector::matching([("app", "web")]),
                    )
                    .schedule_anyway(),
                )
        })
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(claims(&results).len(), 3);
}

#[test]
fn given_the_ignore_policy_when_solved_then_preferences_do_not_narrow_anything() {
    let picky = pod("p", 1000).with_preferred_node_affinity(10, zone("zone-b"));
    let mut given = input(vec![picky], vec![pool("default")]);
    given.preference_policy = PreferencePolicy::Ignore;
    let results = run(&given);
    assert_eq!(
        allowed(&results, 0, LABEL_TOPOLOGY_ZONE),
        "zone-a zone-b zone-c"
    );
}
