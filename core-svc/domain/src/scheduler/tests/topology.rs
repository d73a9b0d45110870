//! Topology: spread over zones, hostnames and capacity types, pod affinity and anti-affinity.

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::scheduler::testing::{TypeSpec, allowed, claims, input, pod, pool, reason, run, shared};
use crate::scheduler::{
    ExistingNode, LabelSelector, Limits, Namespaces, NodeInclusionPolicy, NodePoolSpec, Pod,
    PodAffinityTerm, TopologySpreadConstraint,
};

fn web() -> LabelSelector {
    LabelSelector::matching([("app", "web")])
}

fn spread(name: &str, key: &str) -> Pod {
    pod(name, 1000)
        .with_label("app", "web")
        .with_spread(TopologySpreadConstraint::new(key, 1, web()))
}

fn zones_of(results: &crate::scheduler::SchedulingResults) -> Vec<String> {
    (0..results.new_node_claims.len())
        .map(|i| allowed(results, i, LABEL_TOPOLOGY_ZONE))
        .collect()
}

#[test]
fn given_zone_spread_with_max_skew_one_when_six_pods_arrive_then_each_zone_gets_two() {
    let pods = (0..6)
        .map(|i| spread(&format!("w{i}"), LABEL_TOPOLOGY_ZONE))
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(zones_of(&results), ["zone-a", "zone-b", "zone-c"]);
    assert_eq!(
        claims(&results),
        [vec!["w0", "w3"], vec!["w1", "w4"], vec!["w2", "w5"]]
    );
}

#[test]
fn given_zone_spread_and_existing_pods_when_solved_then_the_emptier_zones_are_filled_first() {
    let mut given = input(
        (0..2)
            .map(|i| spread(&format!("w{i}"), LABEL_TOPOLOGY_ZONE))
            .collect(),
        vec![pool("default")],
    );
    let running = Pod::new("default", "running").with_label("app", "web");
    given.existing_nodes = shared(vec![
        ExistingNode::new(
            "node-a",
            [(LABEL_TOPOLOGY_ZONE, "zone-a")],
            crate::resources::ResourceList::new(),
        )
        .with_pod(running),
    ]);
    let results = run(&given);
    assert_eq!(zones_of(&results), ["zone-b", "zone-c"]);
}

#[test]
fn given_a_terminating_pod_when_solved_then_it_holds_its_requests_but_no_zone() {
    // Two pods to spread; zone-a's node holds a matching pod being deleted. Counted, it would
    // push both new pods out of zone-a; as kube-scheduler sees it, it counts for no zone.
    let mut given = input(
        (0..3)
            .map(|i| spread(&format!("w{i}"), LABEL_TOPOLOGY_ZONE))
            .collect(),
        vec![pool("default")],
    );
    let leaving = pod("leaving", 1000).with_label("app", "web");
    let mut node = ExistingNode::new(
        "node-a",
        [(LABEL_TOPOLOGY_ZONE, "zone-a")],
        crate::resources::ResourceList::new(),
    );
    node.add_terminating_pod(&leaving);
    assert!(node.pods.is_empty());
    assert_eq!(
        node.requested,
        leaving
            .requests
            .clone()
            .with(crate::resources::ResourceName::PODS, 1),
        "its requests are held"
    );
    given.existing_nodes = shared(vec![node]);
    let results = run(&given);
    assert_eq!(zones_of(&results), ["zone-a", "zone-b", "zone-c"]);
}

#[test]
fn given_zone_spread_when_a_zone_cannot_be_launched_then_min_domains_keeps_skew_against_it() {
    let pods = (0..4)
        .map(|i| {
            pod(&format!("w{i}"), 1000)
                .with_label("app", "web")
                .with_spread(
                    TopologySpreadConstraint::new(LABEL_TOPOLOGY_ZONE, 1, web())
                        .with_min_domains(4),
                )
        })
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(zones_of(&results), ["zone-a", "zone-b", "zone-c"]);
    assert_eq!(
        reason(&results, "w3"),
        Some("would violate topology spread (zone maxSkew 1)")
    );
}

#[test]
fn given_hostname_spread_when_solved_then_each_pod_gets_its_own_node() {
    let pods = (0..4)
        .map(|i| spread(&format!("w{i}"), LABEL_HOSTNAME))
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(
        claims(&results),
        [vec!["w0"], vec!["w1"], vec!["w2"], vec!["w3"]]
    );
}

#[test]
fn given_hostname_spread_that_allows_two_when_solved_then_nodes_hold_two() {
    let pods = (0..4)
        .map(|i| {
            pod(&format!("w{i}"), 1000)
                .with_label("app", "web")
                .with_spread(TopologySpreadConstraint::new(LABEL_HOSTNAME, 2, web()))
        })
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(claims(&results), [vec!["w0", "w1"], vec!["w2", "w3"]]);
}

#[test]
fn given_capacity_type_spread_when_solved_then_spot_and_on_demand_alternate() {
    let types: Vec<_> =
        [TypeSpec::new("c5.xlarge", 2, 4, 0.1).capacity_types(&["on-demand", "spot"])]
            .iter()
            .map(TypeSpec::build)
            .collect();
    let pods = (0..2)
        .map(|i| spread(&format!("w{i}"), LABEL_CAPACITY_TYPE))
        .collect();
    let results = run(&input(
        pods,
        vec![NodePoolSpec::new("default", types.into())],
    ));
    let capacity_types: Vec<String> = (0..2)
        .map(|i| allowed(&results, i, LABEL_CAPACITY_TYPE))
        .collect();
    assert_eq!(capacity_types, ["on-demand", "spot"]);
}

#[test]
fn given_schedule_anyway_spread_when_it_cannot_hold_then_it_is_relaxed() {
    let limited = pool("default").with_limits(
        Limits::none().with_nodes(1),
        crate::resources::ResourceList::new(),
    );
    let pods = (0..2)
        .map(|i| {
            pod(&format!("w{i}"), 1000)
                .with_label("app", "web")
                .with_spread(
                    TopologySpreadConstraint::new(LABEL_HOSTNAME, 1, web()).schedule_anyway(),
                )
        })
        .collect();
    let results = run(&input(pods, vec![limited]));
    assert_eq!(claims(&results), [vec!["w0", "w1"]]);
}

#[test]
fn given_pod_affinity_to_another_pod_when_solved_then_it_joins_that_pods_zone() {
    let db = pod("db", 4000)
        .with_label("app", "db")
        .with_node_selector(LABEL_TOPOLOGY_ZONE, "zone-c");
    let client = pod("client", 4000).with_affinity(PodAffinityTerm::new(
        LABEL_TOPOLOGY_ZONE,
        LabelSelector::matching([("app", "db")]),
    ));
    let results = run(&input(vec![client, db], vec![pool("default")]));
    assert_eq!(zones_of(&results), ["zone-c"]);
    assert_eq!(
        claims(&results),
        [vec!["db", "client"]],
        "the client is tried first (by UID), waits, and joins once the db is placed"
    );
}

#[test]
fn given_pod_affinity_to_a_pod_that_is_nowhere_when_solved_then_the_reason_says_so() {
    let client = pod("client", 1000).with_affinity(PodAffinityTerm::new(
        LABEL_TOPOLOGY_ZONE,
        LabelSelector::matching([("app", "db")]),
    ));
    let results = run(&input(vec![client], vec![pool("default")]));
    assert_eq!(
        reason(&results, "client"),
        Some("would violate pod affinity (zone)")
    );
}

#[test]
fn given_self_affinity_on_zone_when_pods_need_several_nodes_then_all_nodes_share_one_zone() {
    let pods = (0..3)
        .map(|i| {
            pod(&format!("c{i}"), 6000)
                .with_label("app", "cache")
                .with_affinity(PodAffinityTerm::new(
                    LABEL_TOPOLOGY_ZONE,
                    LabelSelector::matching([("app", "cache")]),
                ))
        })
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(zones_of(&results), ["zone-a", "zone-a", "zone-a"]);
}

#[test]
fn given_self_anti_affinity_on_hostname_when_solved_then_each_pod_gets_its_own_node() {
    let pods = (0..3)
        .map(|i| {
            pod(&format!("a{i}"), 500)
                .with_label("app", "web")
                .with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, web()))
        })
        .collect::<Vec<_>>();
    let mut with_neighbour = pods.clone();
    with_neighbour.push(pod("other", 500));
    let results = run(&input(with_neighbour, vec![pool("default")]));
    assert_eq!(
        claims(&results),
        [vec!["a0", "other"], vec!["a1"], vec!["a2"]]
    );
}

#[test]
fn given_self_anti_affinity_on_zone_when_four_pods_arrive_then_three_zones_take_one_each() {
    let pods = (0..4)
        .map(|i| {
            pod(&format!("a{i}"), 500)
                .with_label("app", "web")
                .with_anti_affinity(PodAffinityTerm::new(LABEL_TOPOLOGY_ZONE, web()))
        })
        .collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(zones_of(&results), ["zone-a", "zone-b", "zone-c"]);
    assert_eq!(
        reason(&results, "a3"),
        Some("would violate pod anti-affinity (zone)")
    );
}

#[test]
fn given_a_pod_repelled_by_a_pending_pods_anti_affinity_when_solved_then_they_do_not_share_a_node()
{
    let repelling = pod("db", 2000)
        .with_label("app", "db")
        .with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, web()));
    let results = run(&input(
        vec![repelling, pod("web", 500).with_label("app", "web")],
        vec![pool("default")],
    ));
    assert_eq!(claims(&results), [vec!["db"], vec!["web"]]);

    let one_node = pool("default").with_limits(
        Limits::none().with_nodes(1),
        crate::resources::ResourceList::new(),
    );
    let pods = vec![
        pod("db", 2000)
            .with_label("app", "db")
            .with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, web())),
        pod("web", 500).with_label("app", "web"),
    ];
    let results = run(&input(pods, vec![one_node]));
    assert_eq!(
        claims(&results),
        [vec!["db"]],
        "the only node allowed is the db's"
    );
}

#[test]
fn given_node_affinity_policy_when_counting_then_honor_ignores_nodes_the_pod_cannot_use() {
    let running = Pod::new("default", "running").with_label("app", "web");
    let other_pool_node = ExistingNode::new(
        "node-a",
        [
            (LABEL_TOPOLOGY_ZONE, "zone-a"),
            ("karpenter.sh/nodepool", "a"),
        ],
        crate::resources::ResourceList::new(),
    )
    .with_pod(running);
    let spread_pod = |policy| {
        let mut constraint = TopologySpreadConstraint::new(LABEL_TOPOLOGY_ZONE, 1, web());
        constraint.node_affinity_policy = policy;
        pod("w", 1000)
            .with_label("app", "web")
            .with_node_selector("karpenter.sh/nodepool", "b")
            .with_spread(constraint)
    };
    let zone_for = |policy| {
        let mut given = input(vec![spread_pod(policy)], vec![pool("b")]);
        given.existing_nodes = shared(vec![other_pool_node.clone()]);
        zones_of(&run(&given))
    };
    assert_eq!(zone_for(NodeInclusionPolicy::Honor), ["zone-a"]);
    assert_eq!(zone_for(NodeInclusionPolicy::Ignore), ["zone-b"]);
}

#[test]
fn given_match_label_keys_when_spreading_then_each_version_spreads_on_its_own() {
    let versioned = |name: &str, version: &str| {
        let mut constraint = TopologySpreadConstraint::new(LABEL_HOSTNAME, 1, web());
        constraint.match_label_keys = vec!["version".to_owned()];
        pod(name, 1000)
            .with_label("app", "web")
            .with_label("version", version)
            .with_spread(constraint)
    };
    let pods = vec![
        versioned("a", "v1"),
        versioned("b", "v2"),
        versioned("c", "v1"),
    ];
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(claims(&results), [vec!["a", "b"], vec!["c"]]);
}

#[test]
fn given_anti_affinity_to_another_namespace_when_solved_then_only_that_namespace_repels() {
    let term = PodAffinityTerm {
        namespaces: Namespaces::Listed(["batch".to_owned()].into()),
        ..PodAffinityTerm::new(LABEL_HOSTNAME, LabelSelector::matching([("app", "job")]))
    };
    // 1.5 cores: with the local job it fills the 2-core type it needs anyway, so cost
    // does not send the local job elsewhere.
    let picky = pod("api", 1500).with_anti_affinity(term);
    let same_namespace = pod("local-job", 500).with_label("app", "job");
    let other_namespace = Pod::new("batch", "job")
        .with_requests(crate::scheduler::testing::resources(500, 1))
        .with_label("app", "job");
    let results = run(&input(
        vec![picky, same_namespace, other_namespace],
        vec![pool("default")],
    ));
    assert_eq!(claims(&results), [vec!["api", "local-job"], vec!["job"]]);
}
