//! Cost-aware packing: NodeClaims stop growing where growing costs more than opening
//! another, never at the price of a constraint, and never cost more than first-fit packing.

use proptest::prelude::*;

use crate::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::resources::ResourceList;
use crate::scheduler::testing::{TypeSpec, catalogue, input, pod, resources, run, shared};
use crate::scheduler::{
    ExistingNode, LabelSelector, Limits, NodePoolSpec, Packing, Pod, PodAffinityTerm,
    SchedulingInput, SchedulingResults, TopologySpreadConstraint, solve_with,
};

/// A small type priced by size and a giant one at twice that rate, as the largest types of
/// a real catalogue often are (metal, the newest generations, the last spot capacity).
fn small_and_giant() -> NodePoolSpec {
    node_pool(&[
        TypeSpec::new("c5.xlarge", 4, 8, 0.20),
        TypeSpec::new("c5.24xlarge", 96, 192, 9.60),
    ])
}

/// A NodePool over `types`.
fn node_pool(types: &[TypeSpec]) -> NodePoolSpec {
    NodePoolSpec::new("default", types.iter().map(TypeSpec::build).collect())
}

fn cheapest_types(results: &SchedulingResults) -> Vec<&str> {
    results
        .new_node_claims
        .iter()
        .filter_map(|c| c.instance_types.first().map(|t| t.name()))
        .collect()
}

#[test]
fn given_pods_that_fill_a_giant_type_when_solved_then_small_nodes_hold_them_for_less() {
    let pods: Vec<Pod> = (0..40).map(|i| pod(&format!("p{i:02}"), 1000)).collect();
    let given = input(pods, vec![small_and_giant()]);

    let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
    assert_eq!(
        cheapest_types(&first_fit),
        ["c5.24xlarge"],
        "first-fit grows one NodeClaim until only the giant holds it"
    );

    let cost_aware = run(&given);
    assert!(cost_aware.unschedulable.is_empty());
    assert_eq!(cost_aware.placed_pod_count(), 40);
    assert!(
        cheapest_types(&cost_aware)
            .iter()
            .all(|t| *t == "c5.xlarge"),
        "{:?}",
        cheapest_types(&cost_aware)
    );
    assert!(
        cost_aware.estimated_cost() < first_fit.estimated_cost() / 2.0,
        "{} against {}",
        cost_aware.estimated_cost(),
        first_fit.estimated_cost()
    );
    // The giant stays an option of every NodeClaim that it can hold: CreateFleet still
    // chooses among every type that fits, cheapest first.
    assert!(
        cost_aware
            .new_node_claims
            .iter()
            .all(|c| c.instance_types.iter().any(|t| t.name() == "c5.24xlarge"))
    );
}

#[test]
fn given_a_nodepool_with_room_for_one_node_when_solved_then_cost_never_leaves_a_pod_behind() {
    let pods: Vec<Pod> = (0..40).map(|i| pod(&format!("p{i:02}"), 1000)).collect();
    let pool = small_and_giant().with_limits(Limits::none().with_nodes(1), ResourceList::new());
    let results = run(&input(pods, vec![pool]));
    assert!(
        results.unschedulable.is_empty(),
        "{:?}",
        results.unschedulable
    );
    assert_eq!(cheapest_types(&results), ["c5.24xlarge"]);
}

#[test]
fn given_pods_that_fit_what_is_already_bought_when_solved_then_no_second_node_is_opened() {
    // Two 1-core pods fit the cheapest type that holds the first four: opening another node
    // for them would cost more.
    let pods: Vec<Pod> = (0..6)
        .map(|i| pod(&format!("p{i}"), if i < 4 { 1500 } else { 250 }))
        .collect();
    let results = run(&input(
        pods,
        vec![NodePoolSpec::new("default", catalogue())],
    ));
    assert!(results.unschedulable.is_empty());
    assert_eq!(results.node_count(), 1, "{:?}", cheapest_types(&results));
}

#[test]
fn given_pods_that_fill_a_c_type_on_memory_when_solved_then_no_node_grows_into_an_idle_m_type() {
    // 1 core to 2 GiB: 29 fit the c type (memory-bound, 0.0400 an hour each) and 32 the m
    // type (cpu-bound, 0.0410 each, 2.5 % dearer, with 52 GiB left idle). Within 3 % the
    // first NodeClaim grows into the m type for its last three pods and the other eight pods
    // pay for a c type of their own; within 2 % both NodeClaims stay c types.
    let pool = node_pool(&[
        TypeSpec::new("c6a.8xlarge", 32, 58, 1.16),
        TypeSpec::new("m6a.8xlarge", 32, 116, 1.312),
    ]);
    let given = input(deployment(0, 40, 1000, 2, 0), vec![pool]);

    let results = run(&given);

    assert!(results.unschedulable.is_empty());
    assert_eq!(cheapest_types(&results), ["c6a.8xlarge", "c6a.8xlarge"]);
    assert!((results.estimated_cost() - 2.32).abs() < 1e-9);
    let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
    assert!(results.estimated_cost() < first_fit.estimated_cost());
}

/// Memory-optimised types in three sizes: the largest is the cheapest per pod when full,
/// the middle one 5 % dearer than the smallest.
fn three_memory_sizes() -> NodePoolSpec {
    node_pool(&[
        TypeSpec::new("r5.4xlarge", 16, 128, 1.00),
        TypeSpec::new("r5.metal", 128, 1024, 8.40).pods(200),
        TypeSpec::new("r5.48xlarge", 192, 1536, 11.52).pods(250),
    ])
}

#[test]
fn given_pods_that_half_fill_the_type_cheapest_when_full_when_solved_then_they_are_split_onto_small_nodes()
 {
    // 100 pods of 1 core to 8 GiB. Per pod the 48xlarge is the cheapest (0.060), so the cost
    // cap lets one NodeClaim take all 100; its cheapest option holding them is then the metal
    // type at 8.40, and first-fit plans the same. At 84 % of its memory the NodeClaim is not
    // wasteful enough to be refilled, so the improvement pass before the split kept it. Seven
    // 4xlarge nodes (16 pods each) hold them for 7.00.
    let given = input(deployment(0, 100, 1000, 8, 0), vec![three_memory_sizes()]);

    let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
    assert_eq!(cheapest_types(&first_fit), ["r5.metal"]);

    let results = run(&given);
    assert!(results.unschedulable.is_empty());
    assert_eq!(cheapest_types(&results), ["r5.4xlarge"; 7]);
    assert!(
        (results.estimated_cost() - 7.0).abs() < 1e-9,
        "{}",
        results.estimated_cost()
    );
    assert_valid(&given, &results);
}

/// Compute, general purpose and memory types, the general purpose one a little larger: each
/// of the two shapes of [`given_pods_of_two_shapes_that_each_leave_their_type_idle_when_solved_then_they_share_nodes_of_the_type_between`]
/// is cheapest alone on the c or the r type, and both together on the m type.
fn compute_general_memory() -> NodePoolSpec {
    node_pool(&[
        TypeSpec::new("c6a.8xlarge", 32, 96, 1.00),
        TypeSpec::new("m6a.9xlarge", 36, 144, 1.30),
        TypeSpec::new("r6a.8xlarge", 32, 256, 2.20),
    ])
}

#[test]
fn given_pods_of_two_shapes_that_each_leave_their_type_idle_when_solved_then_they_share_nodes_of_the_type_between()
 {
    // 64 pods of 1 core to 2 GiB are cheapest per pod on the c type (0.031 each, a third of
    // its memory idle; 0.036 on the m type) and 32 pods of 1 core to 8 GiB on the r type
    // (0.069 each; 0.072 on the m type). Apart, two c nodes and an r node cost 4.20. Mixed,
    // two m nodes hold the 32 memory-heavy pods with 16 of the others (24 cores, 144 GiB
    // each) and a c node the last 32, for 3.60: every core and GiB bought is used.
    let pods = [deployment(0, 64, 1000, 2, 0), deployment(1, 32, 1000, 8, 0)].concat();
    let given = input(pods, vec![compute_general_memory()]);

    let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
    assert!(first_fit.estimated_cost() > 4.2 - 1e-9);

    let results = run(&given);
    assert!(results.unschedulable.is_empty());
    let mut types = cheapest_types(&results);
    types.sort_unstable();
    assert_eq!(types, ["c6a.8xlarge", "m6a.9xlarge", "m6a.9xlarge"]);
    assert!(
        (results.estimated_cost() - 3.6).abs() < 1e-9,
        "{}",
        results.estimated_cost()
    );
    assert_valid(&given, &results);
}

#[test]
fn given_a_node_claim_of_memory_heavy_pods_too_large_for_three_partners_when_solved_then_it_mixes_with_more()
 {
    // 180 pods of 1 core to 8 GiB are cheapest on the giant r type (12.00 for 192 of them;
    // 0.08 a pod on the m type), 1,012 pods of 1 core to 2 GiB on the m type, which they fill
    // on cpu with half its memory idle (0.04 a pod). The r node takes 12 of the latter too.
    // Three m nodes' idle memory holds a fraction of the r node's pods, so no mix of it with
    // three partners saves; with six, nine m nodes hold them all for 23.04 where they cost
    // 27.36.
    let pool = node_pool(&[
        TypeSpec::new("m6g.metal", 64, 256, 2.56),
        TypeSpec::new("r6a.48xlarge", 192, 1536, 12.0).pods(737),
    ]);
    let pods = [
        deployment(0, 180, 1000, 8, 0),
        deployment(1, 1012, 1000, 2, 0),
    ]
    .concat();
    let given = input(pods, vec![pool]);

    let results = run(&given);
    assert!(results.unschedulable.is_empty());
    assert!(
        !cheapest_types(&results).contains(&"r6a.48xlarge"),
        "{:?}",
        cheapest_types(&results)
    );
    // Without the mix: the r node and 16 m nodes.
    assert!(
        results.estimated_cost() < 12.0 + 16.0 * 2.56 - 1.0,
        "{}",
        results.estimated_cost()
    );
    assert_valid(&given, &results);
}

/// Cost-aware packing's plan, without the first-fit plan [`crate::scheduler::solve`] compares
/// it with at this size and would keep where cost-aware packing placed fewer pods or paid
/// more.
fn cost_aware_alone(given: &SchedulingInput) -> SchedulingResults {
    let mut solver = crate::scheduler::solver::Solver::new(given, Packing::CostAware);
    solver.run(given.preference_policy);
    solver.improve(given.preference_policy);
    solver.finish()
}

/// Zone-a offers only an older generation, at half as much again as the newer one the other
/// zones offer: a zone priced unlike the others, as a real region's zones are.
fn dear_zone_a() -> NodePoolSpec {
    node_pool(&[
        TypeSpec::new("c4.xlarge", 4, 8, 0.30).zones(&["zone-a"]),
        TypeSpec::new("c4.4xlarge", 16, 32, 1.20).zones(&["zone-a"]),
        TypeSpec::new("c5.xlarge", 4, 8, 0.20).zones(&["zone-b", "zone-c"]),
        TypeSpec::new("c5.4xlarge", 16, 32, 0.80).zones(&["zone-b", "zone-c"]),
    ])
}

#[test]
fn given_a_zone_spread_over_zones_priced_unlike_when_solved_then_the_pod_left_over_goes_to_a_cheaper_zone()
 {
    // Four pods of 3 cores, one to a node, spread over three zones: one zone gets two. Taken
    // by name, as upstream breaks ties, that is zone-a, the dear one.
    let pods = deployment(0, 4, 3000, 1, 1);
    let given = input(pods, vec![dear_zone_a()]);

    let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
    let results = run(&given);

    let pods_in_zone_a = |results: &SchedulingResults| {
        results
            .new_node_claims
            .iter()
            .filter(|c| {
                c.requirements
                    .get(LABEL_TOPOLOGY_ZONE)
                    .is_some_and(|r| r.values().eq(["zone-a"]))
            })
            .map(|c| c.pods.len())
            .sum::<usize>()
    };
    assert_eq!(pods_in_zone_a(&first_fit), 2);
    assert_eq!(pods_in_zone_a(&results), 1);
    assert_eq!(results.new_node_claims.len(), 4);
    assert!(
        (results.estimated_cost() - 0.9).abs() < 1e-9,
        "{}",
        results.estimated_cost()
    );
    assert_valid(&given, &results);
}

#[test]
fn given_a_zone_spread_pod_and_room_on_a_node_in_a_dear_zone_when_solved_then_it_takes_the_room() {
    // Room already paid for costs nothing, however dear its zone.
    let mut given = input(deployment(0, 1, 3000, 1, 1), vec![dear_zone_a()]);
    given.existing_nodes = shared(vec![ExistingNode::new(
        "node-a",
        [(LABEL_TOPOLOGY_ZONE, "zone-a")],
        resources(4000, 8).with(crate::resources::ResourceName::PODS, 110),
    )]);

    let results = cost_aware_alone(&given);

    assert_eq!(results.existing_placements.len(), 1);
    assert!(results.new_node_claims.is_empty());
}

#[test]
fn given_cheaper_zones_whose_types_cannot_hold_a_zone_spread_pod_when_solved_then_it_goes_where_one_can()
 {
    // Per core, the small type of zones b and c is the cheapest, but no node of it holds the
    // pod: it goes to zone-a as it would without preferring cheaper zones.
    let pool = node_pool(&[
        TypeSpec::new("c5.large", 2, 4, 0.05).zones(&["zone-b", "zone-c"]),
        TypeSpec::new("c4.2xlarge", 8, 16, 0.60).zones(&["zone-a"]),
    ]);
    let given = input(deployment(0, 1, 3000, 1, 1), vec![pool]);

    let results = cost_aware_alone(&given);

    assert!(results.unschedulable.is_empty());
    assert_eq!(results.new_node_claims.len(), 1);
    assert_eq!(
        crate::scheduler::testing::allowed(&results, 0, LABEL_TOPOLOGY_ZONE),
        "zone-a"
    );
}

#[test]
fn given_zones_whose_pods_suit_one_type_only_together_when_solved_then_that_type_holds_them_all() {
    // Alone, pods of 1 core to 2 GiB are cheapest on the c type (memory-bound: 6 a node, a
    // quarter of its cpu idle) and pods of 1 core to 6 GiB on the r type (2 a node, full);
    // two of each fill the m type exactly, which holds neither shape alone as cheaply. No two
    // NodeClaims mix: the c type's idle cpu is no use to pods asking for more memory, and
    // the r type leaves nothing idle. Each zone's pods together suit the m type. Over 1,000
    // pods, so that the NodePool is not refilled whole first-fit, which would find it too.
    let zones = ["zone-a", "zone-b"];
    let pool = node_pool(&[
        TypeSpec::new("c4.2xlarge", 8, 12, 1.0).zones(&zones),
        TypeSpec::new("r4.large", 2, 12, 0.5).zones(&zones),
        TypeSpec::new("m4.xlarge", 4, 16, 0.72).zones(&zones),
    ]);
    let pods = [
        deployment(0, 504, 1000, 2, 1),
        deployment(1, 504, 1000, 6, 1),
    ]
    .concat();
    let given = input(pods, vec![pool]);

    let results = run(&given);

    assert!(results.unschedulable.is_empty());
    // Without it: in each zone, 42 c nodes and 126 r nodes, 210.00 in all. All m nodes would
    // be 181.44; what the interleaved refill packs comes within 4 % of that.
    assert!(
        !cheapest_types(&results).contains(&"c4.2xlarge"),
        "{:?}",
        cheapest_types(&results)
    );
    assert!(
        results.estimated_cost() < 0.9 * 210.0,
        "{}",
        results.estimated_cost()
    );
    assert_valid(&given, &results);
}

/// A deployment of `replicas` pods of `cpu_millis` and `memory_gib` under `rule`.
fn deployment(app: usize, replicas: usize, cpu_millis: i64, memory_gib: i64, rule: u8) -> Vec<Pod> {
    let name = format!("app{app}");
    let selector = LabelSelector::matching([("app", name.as_str())]);
    (0..replicas)
        .map(|r| {
            let pod = Pod::new("default", &format!("{name}-{r}"))
                .with_label("app", &name)
                .with_label("rule", &rule.to_string())
                .with_requests(resources(cpu_millis, memory_gib));
            match rule {
                1 => pod.with_spread(TopologySpreadConstraint::new(
                    LABEL_TOPOLOGY_ZONE,
                    1,
                    selector.clone(),
                )),
                2 => pod.with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, selector.clone())),
                _ => pod,
            }
        })
        .collect()
}

fn deployments() -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec((1usize..12, 0usize..6, 0usize..3, 0u8..3), 1..6).prop_map(|specs| {
        const SIZES: [(i64, i64); 6] = [
            (100, 1),
            (250, 1),
            (500, 1),
            (1000, 2),
            (2000, 4),
            (1000, 8),
        ];
        specs
            .into_iter()
            .enumerate()
            .flat_map(|(app, (replicas, size, _, rule))| {
                let (cpu, memory) = SIZES[size];
                deployment(app, replicas, cpu, memory, rule)
            })
            .collect()
    })
}

fn pools() -> impl Strategy<Value = NodePoolSpec> {
    prop_oneof![
        Just(NodePoolSpec::new("default", catalogue())),
        Just(small_and_giant()),
        Just(three_memory_sizes()),
        Just(compute_general_memory()),
        Just(dear_zone_a()),
    ]
}

/// Every hard rule a plan must keep, checked from the outside: what each NodeClaim's pods
/// request fits its cheapest option, no two pods of a deployment with hostname
/// anti-affinity share a NodeClaim, and zone spread keeps each deployment's zones (those
/// some type offers) within one pod of each other.
fn assert_valid(given: &SchedulingInput, results: &SchedulingResults) {
    for claim in &results.new_node_claims {
        let cheapest = claim
            .instance_types
            .first()
            .expect("a NodeClaim has options");
        assert!(
            crate::resources::fits(&claim.requests, cheapest.allocatable()).is_ok(),
            "{:?} in {}",
            claim.requests,
            cheapest.name()
        );
    }
    let pod_of = |id: &crate::scheduler::PodId| {
        given
            .pods
            .iter()
            .find(|p| p.id == *id)
            .expect("a placed pod is an input pod")
    };
    let mut zone_counts: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for claim in &results.new_node_claims {
        let mut apps = std::collections::BTreeSet::new();
        let zone = claim
            .requirements
            .get(LABEL_TOPOLOGY_ZONE)
            .map(|r| r.values().collect::<Vec<_>>().join(","))
            .unwrap_or_default();
        for id in &claim.pods {
            let pod = pod_of(id);
            let app = pod.labels.get("app").cloned().unwrap_or_default();
            let rule = pod.labels.get("rule").map(String::as_str);
            if rule == Some("2") {
                assert!(
                    apps.insert(app.clone()),
                    "two pods of {app} share a NodeClaim"
                );
            }
            if rule == Some("1") {
                assert!(
                    !zone.contains(','),
                    "a zone-spread pod on a NodeClaim of zones {zone}"
                );
                *zone_counts.entry((app, zone.clone())).or_default() += 1;
            }
        }
    }
    let mut by_app: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for ((app, _), count) in &zone_counts {
        by_app.entry(app).or_default().push(*count);
    }
    // The zones some type offers: the domains of a zone spread.
    let zones = given
        .node_pools
        .iter()
        .flat_map(|pool| pool.instance_types.iter())
        .flat_map(|t| t.offerings().iter().map(|o| o.zone.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    for (app, counts) in by_app {
        let min = if counts.len() < zones {
            0
        } else {
            *counts.iter().min().unwrap_or(&0)
        };
        let max = *counts.iter().max().unwrap_or(&0);
        assert!(max - min <= 1, "{app} spreads {counts:?} over the zones");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cost_aware_packing_keeps_every_rule_and_never_costs_more_than_first_fit(
        pods in deployments(),
        pool in pools(),
    ) {
        let given = input(pods, vec![pool]);
        let first_fit = solve_with(&given, Packing::FirstFit).expect("valid input");
        let cost_aware = solve_with(&given, Packing::CostAware).expect("valid input");
        assert_valid(&given, &first_fit);
        assert_valid(&given, &cost_aware);
        prop_assert!(cost_aware.placed_pod_count() >= first_fit.placed_pod_count());
        prop_assert!(
            cost_aware.estimated_cost() <= first_fit.estimated_cost() + 1e-9,
            "cost-aware {} against first-fit {}",
            cost_aware.estimated_cost(),
            first_fit.estimated_cost()
        );
    }
}
