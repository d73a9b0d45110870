//! Bin-packing: resources, first-fit decreasing, host ports, DaemonSet overhead, requirements.

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
use crate::requirements::Requirement;
use crate::scheduler::testing::{
    allowed, claims, input, options, pod, pool, reason, resources, run,
};
use crate::scheduler::{HostPort, Pod, SchedulingError, Toleration, solve};

#[test]
fn given_ten_one_core_pods_when_solved_then_they_fill_one_large_node_and_spill_to_a_second() {
    let pods = (0..10).map(|i| pod(&format!("p{i}"), 1000)).collect();
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(
        claims(&results),
        [
            vec!["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"],
            vec!["p8", "p9"]
        ]
    );
    assert_eq!(
        options(&results, 0),
        ["c5.4xlarge"],
        "only 8 cores hold 8 pods"
    );
    assert_eq!(
        options(&results, 1),
        ["c5.xlarge", "c5.2xlarge", "m5.2xlarge", "c5.4xlarge"],
        "cheapest first, and the 1-core type is too small for two pods"
    );
    assert_eq!(
        results.new_node_claims[1].requests,
        resources(2000, 2).with(crate::resources::ResourceName::PODS, 2)
    );
    assert!(results.unschedulable.is_empty());
}

#[test]
fn given_pods_of_different_sizes_when_solved_then_the_largest_are_placed_first() {
    let pods = vec![pod("small", 500), pod("large", 6000), pod("medium", 2000)];
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(claims(&results), [vec!["large", "medium"], vec!["small"]]);
}

#[test]
fn given_a_pod_larger_than_every_type_when_solved_then_the_reason_names_its_requests() {
    let results = run(&input(vec![pod("huge", 64_000)], vec![pool("default")]));
    assert!(results.new_node_claims.is_empty());
    assert_eq!(
        reason(&results, "huge"),
        Some("no instance type in NodePool default has room for {cpu: 64, memory: 1Gi}")
    );
}

#[test]
fn given_a_node_selector_no_type_satisfies_when_solved_then_the_reason_names_it() {
    let gpu = pod("train", 1000).with_node_selector("karpenter.k8s.aws/instance-family", "p5");
    let results = run(&input(vec![gpu], vec![pool("default")]));
    assert_eq!(
        reason(&results, "train"),
        Some(
            "no instance type satisfies nodeSelector karpenter.k8s.aws/instance-family=p5 in NodePool default"
        )
    );
}

#[test]
fn given_requirements_each_satisfiable_but_not_together_when_solved_then_the_reason_lists_them() {
    let picky = pod("picky", 1000).with_required_node_affinity(
        [
            Requirement::in_values("karpenter.k8s.aws/instance-family", ["m5"]),
            Requirement::in_values("node.kubernetes.io/instance-type", ["c5.large"]),
        ]
        .into_iter()
        .collect(),
    );
    let results = run(&input(vec![picky], vec![pool("default")]));
    assert_eq!(
        reason(&results, "picky"),
        Some(
            "no instance type satisfies karpenter.k8s.aws/instance-family In [m5], node.kubernetes.io/instance-type In [c5.large] in NodePool default"
        )
    );
}

#[test]
fn given_a_zone_selector_when_solved_then_the_node_claim_is_in_that_zone() {
    let zonal = pod("zonal", 1000).with_node_selector(LABEL_TOPOLOGY_ZONE, "zone-b");
    let results = run(&input(vec![zonal], vec![pool("default")]));
    assert_eq!(allowed(&results, 0, LABEL_TOPOLOGY_ZONE), "zone-b");
    assert_eq!(allowed(&results, 0, LABEL_CAPACITY_TYPE), "on-demand");
}

#[test]
fn given_pods_binding_the_same_host_port_when_solved_then_they_get_separate_nodes() {
    let with_port = |name| pod(name, 500).with_host_port(HostPort::tcp(9100));
    let pods = vec![with_port("a"), with_port("b"), pod("c", 500)];
    let results = run(&input(pods, vec![pool("default")]));
    assert_eq!(claims(&results), [vec!["a", "c"], vec!["b"]]);
}

#[test]
fn given_a_daemon_set_when_solved_then_its_overhead_is_on_every_new_node_claim() {
    let mut with_daemons = input(vec![pod("app", 7_600)], vec![pool("default")]);
    let without = run(&with_daemons);
    assert_eq!(options(&without, 0), ["c5.4xlarge"]);

    with_daemons.daemon_set_pods =
        vec![Pod::new("kube-system", "agent").with_requests(resources(500, 0))];
    let results = run(&with_daemons);
    assert!(results.new_node_claims.is_empty());
    assert_eq!(
        reason(&results, "app"),
        Some(
            "no instance type in NodePool default has room for {cpu: 7600m, memory: 1Gi} plus daemonset overhead {cpu: 500m}"
        )
    );

    with_daemons.pods = vec![pod("app", 1000)];
    let results = run(&with_daemons);
    let expected = resources(1500, 1).with(crate::resources::ResourceName::PODS, 2);
    assert_eq!(results.new_node_claims[0].requests, expected);
}

#[test]
fn given_daemon_sets_that_would_not_run_on_the_node_pool_when_solved_then_they_add_nothing() {
    let arch = [Requirement::in_values("kubernetes.io/arch", ["amd64"])]
        .into_iter()
        .collect();
    let mut tainted = pool("default").with_requirements(&arch);
    tainted.taints = vec![crate::scheduler::Taint::new(
        "dedicated",
        "web",
        crate::scheduler::TaintEffect::NoSchedule,
    )];
    let app = pod("app", 1000).with_toleration(Toleration::exists("dedicated", None));
    let mut given = input(vec![app], vec![tainted]);
    given.daemon_set_pods = vec![
        Pod::new("kube-system", "intolerant").with_requests(resources(300, 0)),
        Pod::new("kube-system", "arm-only")
            .with_requests(resources(200, 0))
            .with_toleration(Toleration::exists("", None))
            .with_node_selector("kubernetes.io/arch", "arm64"),
        Pod::new("kube-system", "counted")
            .with_requests(resources(100, 0))
            .with_toleration(Toleration::exists("", None)),
    ];
    let results = run(&given);
    assert_eq!(results.new_node_claims[0].requests.cpu_millis(), 1100);
}

#[test]
fn given_an_extended_resource_request_when_solved_then_only_types_with_it_are_options() {
    use crate::scheduler::testing::TypeSpec;
    let mut types: Vec<_> = pool("default").instance_types.to_vec();
    types.push(
        TypeSpec::new("g5.xlarge", 4, 16, 1.0)
            .extended("nvidia.com/gpu", 1)
            .build(),
    );
    let gpu_pool = crate::scheduler::NodePoolSpec::new("default", types.into());
    let trainer =
        Pod::new("default", "trainer").with_requests(resources(1000, 1).with("nvidia.com/gpu", 1));
    let results = run(&input(vec![trainer, pod("web", 1000)], vec![gpu_pool]));
    assert_eq!(options(&results, 0), ["g5.xlarge"]);
    assert_eq!(
        claims(&results),
        [vec!["trainer", "web"]],
        "equal sizes go by UID, and the plain pod joins the GPU node"
    );
}

#[test]
fn given_a_pod_listed_twice_when_solved_then_the_input_is_refused() {
    let result = solve(&input(
        vec![pod("a", 1), pod("a", 2)],
        vec![pool("default")],
    ));
    assert_eq!(
        result,
        Err(SchedulingError::DuplicatePod(crate::scheduler::PodId::new(
            "default", "a"
        )))
    );
    assert_eq!(
        result.map(|_| ()).unwrap_err().to_string(),
        "pod default/a is listed more than once"
    );
}

#[test]
fn given_a_daemon_set_binding_a_host_port_when_a_pod_wants_it_then_the_reason_says_so() {
    let mut given = input(
        vec![pod("exporter", 500).with_host_port(HostPort::tcp(9100))],
        vec![pool("default")],
    );
    given.daemon_set_pods =
        vec![Pod::new("kube-system", "node-exporter").with_host_port(HostPort::tcp(9100))];
    let results = run(&given);
    assert_eq!(
        reason(&results, "exporter"),
        Some("incompatible with NodePool default: host port 9100/TCP is taken by a DaemonSet")
    );
}
