//! NodePools: weights, limits, taints, template requirements, and the reasons they refuse.

use crate::labels::LABEL_CAPACITY_TYPE;
use crate::labels::LABEL_HOSTNAME;
use crate::requirements::Requirement;
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::testing::{claims, input, options, pod, pool, reason, resources, run};
use crate::scheduler::{LabelSelector, Limits, PodAffinityTerm, Taint, TaintEffect, Toleration};

fn gpu_taint() -> Taint {
    Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)
}

fn spot_only() -> crate::requirements::Requirements {
    [Requirement::in_values(LABEL_CAPACITY_TYPE, ["spot"])]
        .into_iter()
        .collect()
}

#[test]
fn given_two_node_pools_when_solved_then_the_heavier_one_is_used_first() {
    let mut cheap = pool("cheap");
    cheap.weight = 1;
    let preferred = pool("preferred").with_weight(50);
    let results = run(&input(vec![pod("a", 1000)], vec![cheap, preferred]));
    assert_eq!(results.new_node_claims[0].node_pool, "preferred");
}

#[test]
fn given_equal_weights_when_solved_then_node_pools_are_tried_by_name() {
    let results = run(&input(
        vec![pod("a", 1000)],
        vec![pool("zeta"), pool("alpha")],
    ));
    assert_eq!(results.new_node_claims[0].node_pool, "alpha");
}

#[test]
fn given_a_tainted_node_pool_when_the_pod_does_not_tolerate_it_then_the_reason_names_the_taint() {
    let gpu = pool("default").with_taint(gpu_taint());
    let results = run(&input(vec![pod("web", 1000)], vec![gpu.clone()]));
    assert_eq!(
        reason(&results, "web"),
        Some("incompatible with NodePool default: taint dedicated=gpu:NoSchedule not tolerated")
    );
    let tolerant = pod("web", 1000).with_toleration(Toleration::equal("dedicated", "gpu", None));
    let results = run(&input(vec![tolerant], vec![gpu]));
    assert_eq!(claims(&results), [vec!["web"]]);
}

#[test]
fn given_a_prefer_no_schedule_taint_when_nothing_else_fits_then_it_is_tolerated_last() {
    let soft = pool("default").with_taint(Taint::new("spot", "", TaintEffect::PreferNoSchedule));
    let results = run(&input(vec![pod("web", 1000)], vec![soft]));
    assert_eq!(claims(&results), [vec!["web"]]);
}

#[test]
fn given_a_node_pool_at_its_cpu_limit_when_solved_then_the_reason_names_the_limit() {
    let full = pool("default").with_limits(
        Limits::none().with(ResourceName::CPU, 100_000),
        resources(100_000, 0),
    );
    let results = run(&input(vec![pod("web", 1000)], vec![full]));
    assert_eq!(
        reason(&results, "web"),
        Some("NodePool default cpu limit 100 reached")
    );
}

#[test]
fn given_a_limit_when_node_claims_are_planned_then_their_largest_option_counts_against_it() {
    let limited = pool("default").with_limits(
        Limits::none().with(ResourceName::CPU, 16_000),
        ResourceList::new(),
    );
    let pods = vec![pod("a", 6000), pod("b", 6000), pod("c", 6000)];
    let results = run(&input(pods, vec![limited]));
    assert_eq!(claims(&results), [vec!["a"], vec!["b"]]);
    assert_eq!(
        reason(&results, "c"),
        Some("NodePool default cpu limit 16 reached")
    );
}

#[test]
fn given_a_limit_that_only_small_types_fit_when_solved_then_larger_types_are_not_options() {
    let limited = pool("default").with_limits(
        Limits::none().with(ResourceName::CPU, 3_000),
        ResourceList::new(),
    );
    let results = run(&input(vec![pod("a", 500)], vec![limited]));
    let names: Vec<&str> = results.new_node_claims[0]
        .instance_types
        .iter()
        .map(|t| t.name())
        .collect();
    assert_eq!(names, ["c5.large", "c5.xlarge"]);
}

#[test]
fn given_a_limit_when_alike_pods_open_node_claims_one_after_another_then_each_has_only_what_is_left()
 {
    // 12 cores: the first NodeClaim may become a c5.4xlarge (8), which leaves 4 for the
    // second, opened for a pod just like the first.
    let limited = pool("default").with_limits(
        Limits::none().with(ResourceName::CPU, 12_000),
        ResourceList::new(),
    );
    let web = LabelSelector::matching([("app", "web")]);
    let pods = ["a", "b"]
        .map(|name| {
            pod(name, 500)
                .with_label("app", "web")
                .with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, web.clone()))
        })
        .to_vec();
    let results = run(&input(pods, vec![limited]));
    assert_eq!(claims(&results), [vec!["a"], vec!["b"]]);
    assert!(options(&results, 0).contains(&"c5.4xlarge"));
    assert!(!options(&results, 1).contains(&"c5.4xlarge"));
}

#[test]
fn given_a_node_limit_when_solved_then_no_more_node_claims_than_allowed_are_planned() {
    let limited = pool("default").with_limits(Limits::none().with_nodes(1), ResourceList::new());
    let results = run(&input(vec![pod("a", 6000), pod("b", 6000)], vec![limited]));
    assert_eq!(claims(&results), [vec!["a"]]);
    assert_eq!(
        reason(&results, "b"),
        Some("NodePool default nodes limit 1 reached")
    );
}

#[test]
fn given_several_node_pools_refusing_when_solved_then_each_says_why() {
    let gpu = pool("gpu").with_weight(10).with_taint(gpu_taint());
    let full = pool("default").with_limits(Limits::none().with_nodes(0), ResourceList::new());
    let spot = pool("spot").with_requirements(&spot_only());
    let on_demand = pod("web", 1000).with_node_selector(LABEL_CAPACITY_TYPE, "on-demand");
    let results = run(&input(vec![on_demand], vec![gpu, full, spot]));
    assert_eq!(
        reason(&results, "web"),
        Some(
            "incompatible with NodePool gpu: taint dedicated=gpu:NoSchedule not tolerated; \
             NodePool default nodes limit 0 reached; \
             incompatible with NodePool spot: nodeSelector karpenter.sh/capacity-type=on-demand but the NodePool requires karpenter.sh/capacity-type In [spot]"
        )
    );
}

#[test]
fn given_a_label_the_node_pool_does_not_define_when_solved_then_the_reason_says_so() {
    let results = run(&input(
        vec![pod("web", 1000).with_node_selector("team", "payments")],
        vec![pool("default")],
    ));
    assert_eq!(
        reason(&results, "web"),
        Some(
            "incompatible with NodePool default: nodeSelector team=payments needs label team, which neither the NodePool nor its instance types define"
        )
    );
    let labelled = pool("default").with_label("team", "payments");
    let results = run(&input(
        vec![pod("web", 1000).with_node_selector("team", "payments")],
        vec![labelled],
    ));
    assert_eq!(claims(&results), [vec!["web"]]);
}

#[test]
fn given_no_node_pool_when_solved_then_pods_are_unschedulable() {
    let results = run(&input(vec![pod("web", 1000)], vec![]));
    assert_eq!(
        reason(&results, "web"),
        Some("no NodePool can launch nodes")
    );
}

#[test]
fn given_a_pod_selecting_a_node_pool_by_name_when_solved_then_it_goes_there() {
    let pools = vec![pool("a").with_weight(10), pool("b")];
    let results = run(&input(
        vec![pod("web", 1000).with_node_selector("karpenter.sh/nodepool", "b")],
        pools,
    ));
    assert_eq!(results.new_node_claims[0].node_pool, "b");
}
