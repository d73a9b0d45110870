//! DaemonSet overhead per instance type, ported from upstream's provisioning suite
//! (kubernetes-sigs/karpenter `pkg/controllers/provisioning/suite_test.go`, context
//! "Daemonsets", v1.14.0): a DaemonSet counts only on the types it would run on.

use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::LABEL_INSTANCE_TYPE;
use crate::requirements::{Requirement, Requirements};
use crate::resources::ResourceName;
use crate::scheduler::bound::lower_bound;
use crate::scheduler::testing::{
    TypeSpec, input, options, pod, provider_policy, reason, resources, run,
};
use crate::scheduler::{HostPort, NodePoolSpec, Pod};

const SIZE: &str = "karpenter.k8s.aws/instance-size";

/// `m5.large` to `m5.4xlarge` (2 to 16 cpu, 4 GiB a cpu), each labelled with its size.
fn sized_types() -> Arc<[Arc<InstanceType>]> {
    [
        ("m5.large", "large", 2, 0.10),
        ("m5.xlarge", "xlarge", 4, 0.20),
        ("m5.2xlarge", "2xlarge", 8, 0.40),
        ("m5.4xlarge", "4xlarge", 16, 0.80),
    ]
    .iter()
    .map(|&(name, size, cpu, price)| {
        TypeSpec::new(name, cpu, cpu * 4, price)
            .label(SIZE, size)
            .build()
    })
    .collect()
}

fn sized_pool() -> NodePoolSpec {
    NodePoolSpec::new("default", sized_types())
}

/// A DaemonSet pod requesting `cpu_millis` that runs only on types of the sizes `sizes`.
fn agent(name: &str, cpu_millis: i64, sizes: &[&str]) -> Pod {
    let term: Requirements = [Requirement::in_values(SIZE, sizes.iter().copied())]
        .into_iter()
        .collect();
    Pod::new("kube-system", name)
        .with_requests(resources(cpu_millis, 0))
        .with_required_node_affinity(term)
}

/// A 1-cpu agent for large and xlarge nodes, a 10-cpu one for 4xlarge nodes. Checked against
/// the template alone, both counted on every type and a pod of 1.5 cpu got the only type with
/// 11.5 cpu to spare; upstream launches an xlarge.
#[test]
fn given_daemonsets_for_some_sizes_when_a_small_pod_is_solved_then_it_gets_a_small_type() {
    let mut given = input(vec![pod("app", 1500)], vec![sized_pool()]);
    given.daemon_set_pods = vec![
        agent("small-agent", 1000, &["large", "xlarge"]),
        agent("big-agent", 10_000, &["4xlarge"]),
    ];
    let results = run(&given);
    assert_eq!(
        options(&results, 0),
        ["m5.xlarge", "m5.2xlarge", "m5.4xlarge"],
        "the large type has 1 cpu beside its agent, the 4xlarge 6"
    );
    assert_eq!(
        results.new_node_claims[0].requests,
        resources(1500, 1).with(ResourceName::PODS, 1),
        "the 2xlarge carries no DaemonSet, so the least overhead is none"
    );
}

/// Upstream "should filter out daemonsets based on instance type requirements": a 1-cpu
/// DaemonSet for small nodes and a 10-cpu one for large ones; a 1-cpu pod goes to a type
/// neither runs on rather than one that would hold both.
#[test]
fn given_daemonsets_selecting_sizes_when_solved_then_each_counts_only_on_its_sizes() {
    let types: Arc<[Arc<InstanceType>]> = [
        TypeSpec::new("small", 2, 2, 0.10).label(SIZE, "small"),
        TypeSpec::new("default", 4, 4, 0.20).label(SIZE, "medium"),
        TypeSpec::new("huge", 16, 16, 0.80).label(SIZE, "large"),
    ]
    .iter()
    .map(TypeSpec::build)
    .collect();
    let mut given = input(
        vec![pod("app", 1500)],
        vec![NodePoolSpec::new("default", types)],
    );
    given.daemon_set_pods = vec![
        agent("small-agent", 1000, &["small"]),
        agent("large-agent", 10_000, &["large"]),
    ];
    let results = run(&given);
    assert_eq!(
        options(&results, 0),
        ["default", "huge"],
        "small has 1 cpu left beside its agent; huge has 6 beside its own"
    );
    assert_eq!(
        results.new_node_claims[0].requests,
        resources(1500, 1).with(ResourceName::PODS, 1),
        "the cheaper option carries no DaemonSet, so none is requested"
    );
}

/// Upstream "should ignore daemonsets when no instance types meet the daemonset
/// requirements".
#[test]
fn given_a_daemonset_for_a_type_the_node_pool_lacks_when_solved_then_it_adds_nothing() {
    let term: Requirements = [Requirement::in_values(
        LABEL_INSTANCE_TYPE,
        ["non-existent-instance-type"],
    )]
    .into_iter()
    .collect();
    let mut given = input(vec![pod("app", 1000)], vec![sized_pool()]);
    given.daemon_set_pods = vec![
        Pod::new("kube-system", "agent")
            .with_requests(resources(2000, 2))
            .with_required_node_affinity(term),
    ];
    let results = run(&given);
    assert_eq!(options(&results, 0)[0], "m5.large");
    assert_eq!(
        results.new_node_claims[0].requests,
        resources(1000, 1).with(ResourceName::PODS, 1)
    );
}

/// Upstream "should not double-count daemon overhead when multiple pods are scheduled to the
/// same nodeclaim", and the overhead requested is the least over the NodeClaim's options:
/// what whichever of them launches carries.
#[test]
fn given_two_pods_on_one_node_claim_then_its_requests_add_the_least_overhead_once() {
    let mut given = input(vec![pod("a", 1000), pod("b", 1000)], vec![sized_pool()]);
    given.daemon_set_pods = vec![
        Pod::new("kube-system", "everywhere").with_requests(resources(500, 0)),
        agent("big-agent", 2000, &["2xlarge", "4xlarge"]),
    ];
    let results = run(&given);
    assert_eq!(results.new_node_claims.len(), 1);
    assert_eq!(
        options(&results, 0),
        ["m5.xlarge", "m5.2xlarge", "m5.4xlarge"]
    );
    assert_eq!(
        results.new_node_claims[0].requests,
        resources(2500, 2).with(ResourceName::PODS, 3),
        "two pods and the agent every type runs; the 2-cpu agent only on some options"
    );
}

/// Upstream "should not account for daemonset hostports when daemonset would not schedule on
/// selected node".
#[test]
fn given_a_daemonset_port_on_other_sizes_when_a_pod_wants_it_then_the_pod_still_schedules() {
    let port = HostPort::tcp(8080);
    let mut given = input(
        vec![
            pod("exporter", 1000)
                .with_host_port(port)
                .with_node_selector(SIZE, "xlarge"),
        ],
        vec![sized_pool()],
    );
    given.daemon_set_pods = vec![
        agent("large-agent", 4000, &["4xlarge"]).with_host_port(port),
        agent("small-agent", 2000, &["xlarge"]).with_host_port(HostPort::tcp(8081)),
    ];
    let results = run(&given);
    assert_eq!(options(&results, 0), ["m5.xlarge"]);
}

/// A DaemonSet binding a port on some types rules those types out for a pod wanting the
/// port, and only those; on none left, the reason names the port.
#[test]
fn given_a_daemonset_port_on_some_types_when_a_pod_wants_it_then_only_those_types_are_out() {
    let port = HostPort::tcp(9100);
    let mut given = input(
        vec![pod("exporter", 500).with_host_port(port)],
        vec![sized_pool()],
    );
    given.daemon_set_pods =
        vec![agent("node-exporter", 100, &["large", "xlarge"]).with_host_port(port)];
    let results = run(&given);
    assert_eq!(options(&results, 0), ["m5.2xlarge", "m5.4xlarge"]);

    given.pods = vec![
        pod("exporter", 500)
            .with_host_port(port)
            .with_node_selector(SIZE, "xlarge"),
    ];
    let results = run(&given);
    assert!(results.new_node_claims.is_empty());
    assert_eq!(
        reason(&results, "exporter"),
        Some("incompatible with NodePool default: host port 9100/TCP is taken by a DaemonSet")
    );
}

/// The cost bound charges each type its own DaemonSets: 8 pods of 1 cpu cost two xlarge
/// nodes' worth ($0.40) when a 10-cpu agent runs only on 4xlarge nodes, not the 4xlarge
/// the agent would make the only choice if it ran everywhere.
#[test]
fn given_a_daemonset_for_some_sizes_then_the_bound_charges_only_those_types() {
    let pods: Vec<Pod> = (0..8).map(|i| pod(&format!("p{i}"), 1000)).collect();
    let agents = [agent("big-agent", 10_000, &["4xlarge"])];
    let bound = lower_bound(&pods, &[sized_pool()], &agents, &provider_policy()).expect("a bound");
    assert!((bound.per_hour - 0.40).abs() < 1e-6, "{}", bound.per_hour);
}
