//! Scores against what kube-scheduler's plugins compute for small cases, worked by hand from
//! kubernetes/kubernetes `pkg/scheduler/framework/plugins/`.

use super::*;
use core_domain::resources::ResourceList;
use core_domain::scheduler::{Taint, Toleration, TopologySpreadConstraint};

const GI: i64 = 1 << 30;

fn allocatable(cpu_millis: i64, memory: i64) -> ResourceList {
    ResourceList::new()
        .with("cpu", cpu_millis)
        .with("memory", memory)
        .with("pods", 110)
}

fn pod(name: &str, cpu_millis: i64, memory: i64) -> Pod {
    Pod::new("default", name)
        .with_requests(
            ResourceList::new()
                .with("cpu", cpu_millis)
                .with("memory", memory),
        )
        .with_label("app", "web")
}

fn node(name: &str, zone: &str) -> ExistingNode {
    ExistingNode::new(
        name,
        [(LABEL_HOSTNAME, name), (LABEL_TOPOLOGY_ZONE, zone)],
        allocatable(4000, 8 * GI),
    )
}

fn pending(pod: Pod) -> PendingPod {
    PendingPod {
        pod,
        priority: 0,
        default_spreading: false,
    }
}

#[test]
fn least_allocated_scores_the_share_left_free_after_the_pod() {
    // The brief's case: 4 CPU / 8Gi with 1 CPU / 2Gi requested, a pod of 1 CPU / 2Gi:
    // (4 - 2) / 4 * 100 = 50 for each resource, 50 averaged.
    assert_eq!(least_allocated((2000, 4 * GI), (4000, 8 * GI)), 50);
    // kube-scheduler's least_allocated_test.go "nothing scheduled, resources requested,
    // differently sized nodes": cpu (4000-3000)*100/4000 = 25, memory (10000-5000)*100/10000
    // = 50, averaged to 37.
    assert_eq!(least_allocated((3000, 5000), (4000, 10000)), 37);
    // More than allocatable scores 0 for that resource; nothing allocatable scores 0.
    assert_eq!(least_allocated((5000, 0), (4000, 10000)), 50);
    assert_eq!(least_allocated((0, 0), (0, 0)), 0);
}

#[test]
fn pods_without_requests_count_the_non_zero_defaults() {
    let best_effort = Pod::new("default", "b");
    assert_eq!(
        non_zero_requests(&best_effort),
        (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
    );
    assert_eq!(non_zero_requests(&pod("p", 250, GI)), (250, GI));
}

#[test]
fn balanced_allocation_is_one_minus_the_deviation_of_the_fractions() {
    // cpu 2000/4000 = 0.5, memory 2Gi/8Gi = 0.25: std = |0.5 - 0.25| / 2 = 0.125,
    // (1 - 0.125) * 100 = 87.5, truncated to 87.
    assert_eq!(balanced_allocation((2000, 2 * GI), (4000, 8 * GI)), 87);
    // Equal fractions are perfectly balanced.
    assert_eq!(balanced_allocation((1000, 2 * GI), (4000, 8 * GI)), 100);
    // Fractions cap at 1: cpu 6000/4000 -> 1, memory 0: std 0.5, score 50.
    assert_eq!(balanced_allocation((6000, 0), (4000, 8 * GI)), 50);
}

#[test]
fn default_normalize_scales_by_the_highest_and_reverses_for_taints() {
    let mut affinity = vec![0, 5, 10];
    default_normalize(&mut affinity, false);
    assert_eq!(affinity, vec![0, 50, 100]);
    let mut taints = vec![0, 1, 2];
    default_normalize(&mut taints, true);
    assert_eq!(taints, vec![100, 50, 0]);
    let mut none = vec![0, 0];
    default_normalize(&mut none, true);
    assert_eq!(
        none,
        vec![100, 100],
        "no intolerable taint anywhere: all best"
    );
}

#[test]
fn prefer_no_schedule_taints_count_unless_tolerated() {
    let tainted = node("a", "z1").with_taint(Taint::new("spot", "", TaintEffect::PreferNoSchedule));
    let plain = pod("p", 100, GI);
    assert_eq!(intolerable_prefer_no_schedule(&plain, &tainted), 1);
    let mut tolerant = plain.clone();
    tolerant.tolerations.push(Toleration::exists(
        "spot",
        Some(TaintEffect::PreferNoSchedule),
    ));
    assert_eq!(intolerable_prefer_no_schedule(&tolerant, &tainted), 0);
    let hard = node("b", "z1").with_taint(Taint::new("gpu", "", TaintEffect::NoSchedule));
    assert_eq!(intolerable_prefer_no_schedule(&plain, &hard), 0);
    assert!(!fits_alone(&plain, &hard), "NoSchedule filters");
    assert!(fits_alone(&plain, &tainted), "PreferNoSchedule only scores");
}

/// Three zones holding 2, 1 and 0 matching pods; a ScheduleAnyway zone spread of maxSkew 1.
/// Three domains: weight ln(3 + 2) = 1.609; raw scores round(2 × 1.609) = 3, round(1.609) =
/// 2 and 0; normalized 100 × (max + min − score) / max: 0, 33, 100.
#[test]
fn topology_spread_scoring_prefers_the_emptiest_zone() {
    let nodes = vec![
        Arc::new(
            node("a", "z1")
                .with_pod(pod("a1", 100, GI))
                .with_pod(pod("a2", 100, GI)),
        ),
        Arc::new(node("b", "z2").with_pod(pod("b1", 100, GI))),
        Arc::new(node("c", "z3")),
    ];
    let mut scorer = Scorer::new(nodes);
    let mut incoming = pod("new", 100, GI);
    incoming.topology_spread_constraints.push(
        TopologySpreadConstraint::new(
            LABEL_TOPOLOGY_ZONE,
            1,
            LabelSelector::matching([("app", "web")]),
        )
        .schedule_anyway(),
    );
    let spread = scorer.spread_scores(&pending(incoming.clone()), &[0, 1, 2]);
    assert_eq!(spread, Some(vec![0, 33, 100]));

    // A DoNotSchedule-only pod has nothing for scoring; the system defaults apply only to
    // pods without constraints of their own.
    let mut required = incoming.clone();
    required.topology_spread_constraints[0].when_unsatisfiable = WhenUnsatisfiable::DoNotSchedule;
    assert_eq!(scorer.spread_scores(&pending(required), &[0, 1, 2]), None);
    let mut owned = pending(pod("owned", 100, GI));
    owned.default_spreading = true;
    let defaults = scorer.spread_scores(&owned, &[0, 1, 2]).unwrap();
    assert!(
        defaults[2] > defaults[1] && defaults[1] > defaults[0],
        "{defaults:?}"
    );
}

#[test]
fn preferred_pod_affinity_scores_the_domain_holding_the_matching_pods() {
    let nodes = vec![
        Arc::new(node("a", "z1").with_pod(pod("cache", 100, GI).with_label("role", "cache"))),
        Arc::new(node("b", "z2")),
    ];
    let mut scorer = Scorer::new(nodes);
    let mut incoming = pod("new", 100, GI);
    incoming
        .pod_affinity
        .preferred
        .push(core_domain::scheduler::Weighted {
            weight: 50,
            term: PodAffinityTerm::new(
                LABEL_TOPOLOGY_ZONE,
                LabelSelector::matching([("role", "cache")]),
            ),
        });
    assert_eq!(
        scorer.inter_pod_scores(&incoming, &[0, 1]),
        Some(vec![100, 0])
    );
    let mut away = pod("away", 100, GI);
    away.pod_anti_affinity.preferred = incoming.pod_affinity.preferred.clone();
    assert_eq!(scorer.inter_pod_scores(&away, &[0, 1]), Some(vec![0, 100]));
    assert_eq!(
        scorer.inter_pod_scores(&pod("none", 100, GI), &[0, 1]),
        None
    );
}

#[test]
fn equally_empty_nodes_take_pods_in_turn_under_least_allocated() {
    let mut scorer = Scorer::new(vec![Arc::new(node("a", "z1")), Arc::new(node("b", "z1"))]);
    let mut chosen = Vec::new();
    for name in ["p1", "p2", "p3", "p4"] {
        let pending = pending(pod(name, 500, GI));
        let scores = scorer.scores(&pending, &[0, 1]);
        let at = ranked(scorer.nodes(), &[0, 1], &scores)[0];
        chosen.push(scorer.nodes()[at].name.clone());
        scorer.bind(at, pending.pod);
    }
    // Ties go to the name that sorts first; then the emptier Node wins.
    assert_eq!(chosen, ["a", "b", "a", "b"]);
}

#[test]
fn preferred_node_affinity_and_untolerated_taints_move_the_choice() {
    let spot =
        Arc::new(node("a", "z1").with_taint(Taint::new("spot", "", TaintEffect::PreferNoSchedule)));
    let on_demand = Arc::new(node("b", "z2").with_pod(pod("busy", 2000, 4 * GI)));
    let mut scorer = Scorer::new(vec![spot, on_demand]);
    let incoming = pending(pod("p", 100, GI));
    let scores = scorer.scores(&incoming, &[0, 1]);
    assert_eq!(
        ranked(scorer.nodes(), &[0, 1], &scores),
        [1, 0],
        "the taint (weight 3) outweighs the busier Node's lower fit: {scores:?}"
    );

    let mut prefers_z2 = pod("q", 100, GI);
    prefers_z2
        .preferred_node_affinity
        .push(core_domain::scheduler::Weighted {
            weight: 10,
            term: core_domain::requirements::Requirements::from_labels([(
                LABEL_TOPOLOGY_ZONE,
                "z2",
            )]),
        });
    assert_eq!(node_affinity_score(&prefers_z2, &scorer.nodes()[1]), 10);
    assert_eq!(node_affinity_score(&prefers_z2, &scorer.nodes()[0]), 0);
}

#[test]
fn kube_scheduler_names_round_trip() {
    for profile in [KubeScheduler::Default, KubeScheduler::FirstFit] {
        assert_eq!(KubeScheduler::from_name(profile.as_str()), Some(profile));
    }
    assert_eq!(KubeScheduler::from_name("first-fit"), None);
}
