//! Existing capacity: nodes and in-flight NodeClaims are filled before anything is planned.

use crate::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{Requirement, Requirements};
use crate::scheduler::testing::{TypeSpec, claims, input, pod, pool, resources, run, shared};
use crate::scheduler::{
    ExistingNode, HostPort, LabelSelector, Pod, PodAffinityTerm, Taint, TaintEffect,
};

fn node(name: &str, zone: &str, cpu: i64) -> ExistingNode {
    ExistingNode::new(
        name,
        [(LABEL_TOPOLOGY_ZONE, zone)],
        resources(cpu * 1000, 64).with(crate::resources::ResourceName::PODS, 110),
    )
}

fn placements(results: &crate::scheduler::SchedulingResults) -> Vec<(&str, &str)> {
    results
        .existing_placements
        .iter()
        .map(|(pod, node)| (pod.name(), node.as_str()))
        .collect()
}

#[test]
fn given_an_existing_node_with_room_when_solved_then_pods_go_there_before_anything_new() {
    let mut given = input(vec![pod("a", 1000), pod("b", 3000)], vec![pool("default")]);
    given.existing_nodes = shared(vec![node("node-1", "zone-a", 4)]);
    let results = run(&given);
    assert_eq!(placements(&results), [("b", "node-1"), ("a", "node-1")]);
    assert!(results.new_node_claims.is_empty());
}

#[test]
fn given_a_full_existing_node_when_solved_then_the_rest_gets_a_new_node_claim() {
    let mut given = input(vec![pod("a", 1000), pod("b", 3000)], vec![pool("default")]);
    given.existing_nodes = shared(vec![
        node("node-1", "zone-a", 4).with_pod(pod("running", 2000)),
    ]);
    let results = run(&given);
    assert_eq!(placements(&results), [("a", "node-1")]);
    assert_eq!(claims(&results), [vec!["b"]]);
}

#[test]
fn given_initialised_and_uninitialised_nodes_when_solved_then_initialised_ones_come_first_by_name()
{
    let mut given = input(
        vec![pod("a", 1000), pod("b", 1000), pod("c", 1000)],
        vec![pool("default")],
    );
    given.existing_nodes = shared(vec![
        node("node-0", "zone-a", 1).with_initialized(false),
        node("node-2", "zone-a", 1),
        node("node-1", "zone-a", 1),
    ]);
    let results = run(&given);
    assert_eq!(
        placements(&results),
        [("a", "node-1"), ("b", "node-2"), ("c", "node-0")]
    );
}

#[test]
fn given_an_uninitialised_node_with_a_startup_taint_when_solved_then_the_taint_is_ignored() {
    let startup = Taint::new("example.com/agent-not-ready", "", TaintEffect::NoSchedule);
    let mut starting = node("node-1", "zone-a", 4)
        .with_taint(startup.clone())
        .with_initialized(false);
    starting.startup_taints = vec![startup.clone()];
    let mut given = input(vec![pod("a", 1000)], vec![pool("default")]);
    given.existing_nodes = shared(vec![starting.clone()]);
    assert_eq!(placements(&run(&given)), [("a", "node-1")]);

    given.existing_nodes = shared(vec![starting.with_initialized(true)]);
    let results = run(&given);
    assert!(
        results.existing_placements.is_empty(),
        "an initialised node's taints all count"
    );
}

#[test]
fn given_a_daemon_set_not_yet_on_an_in_flight_node_when_solved_then_its_requests_are_reserved() {
    let mut given = input(vec![pod("a", 3500)], vec![pool("default")]);
    given.existing_nodes = shared(vec![node("node-1", "zone-a", 4).with_initialized(false)]);
    given.daemon_set_pods =
        vec![Pod::new("kube-system", "agent").with_requests(resources(1000, 0))];
    let results = run(&given);
    assert!(results.existing_placements.is_empty());
    given.existing_nodes = shared(vec![node("node-1", "zone-a", 5).with_daemon_pod(
        Pod::new("kube-system", "agent-1").with_requests(resources(1000, 0)),
    )]);
    let results = run(&given);
    assert_eq!(
        placements(&results),
        [("a", "node-1")],
        "the running daemon is not counted twice"
    );
}

#[test]
fn given_an_in_flight_node_claim_when_solved_then_it_is_filled_with_its_smallest_option() {
    let options = [
        TypeSpec::new("c5.xlarge", 2, 4, 0.1).build(),
        TypeSpec::new("c5.2xlarge", 4, 8, 0.2).build(),
    ];
    let zones: Requirements = [Requirement::in_values(
        LABEL_TOPOLOGY_ZONE,
        ["zone-a", "zone-b"],
    )]
    .into_iter()
    .collect();
    let mut given = input(vec![pod("a", 1500), pod("b", 1000)], vec![pool("default")]);
    given.existing_nodes = shared(vec![ExistingNode::in_flight(
        "default-x7k2p",
        zones,
        &options,
    )]);
    let results = run(&given);
    assert_eq!(placements(&results), [("a", "default-x7k2p")]);
    assert_eq!(
        claims(&results),
        [vec!["b"]],
        "2 cores is all the in-flight claim is sure to have"
    );
}

#[test]
fn given_a_node_with_a_host_port_in_use_when_solved_then_a_pod_binding_it_goes_elsewhere() {
    let mut given = input(
        vec![pod("exporter", 500).with_host_port(HostPort::tcp(9100))],
        vec![pool("default")],
    );
    given.existing_nodes =
        shared(vec![node("node-1", "zone-a", 4).with_pod(
            pod("other", 100).with_host_port(HostPort::tcp(9100)),
        )]);
    let results = run(&given);
    assert!(results.existing_placements.is_empty());
    assert_eq!(claims(&results), [vec!["exporter"]]);
}

#[test]
fn given_a_running_pod_with_anti_affinity_when_a_pod_it_repels_arrives_then_it_avoids_that_node() {
    let repelling =
        pod("db", 100)
            .with_label("app", "db")
            .with_anti_affinity(PodAffinityTerm::new(
                LABEL_HOSTNAME,
                LabelSelector::matching([("app", "web")]),
            ));
    let mut given = input(
        vec![pod("web", 500).with_label("app", "web"), pod("batch", 500)],
        vec![pool("default")],
    );
    given.existing_nodes = shared(vec![node("node-1", "zone-a", 4).with_pod(repelling)]);
    let results = run(&given);
    assert_eq!(placements(&results), [("batch", "node-1")]);
    assert_eq!(claims(&results), [vec!["web"]]);
}

#[test]
fn given_a_running_pod_with_zonal_anti_affinity_when_solved_then_new_node_claims_avoid_its_zone() {
    let repelling =
        pod("db", 100)
            .with_label("app", "db")
            .with_anti_affinity(PodAffinityTerm::new(
                LABEL_TOPOLOGY_ZONE,
                LabelSelector::matching([("app", "web")]),
            ));
    let mut given = input(
        vec![pod("web", 500).with_label("app", "web")],
        vec![pool("default")],
    );
    given.existing_nodes = shared(vec![node("node-1", "zone-a", 1).with_pod(repelling)]);
    let results = run(&given);
    let zone = results.new_node_claims[0]
        .requirements
        .get(LABEL_TOPOLOGY_ZONE)
        .map(ToString::to_string);
    assert_eq!(
        zone.as_deref(),
        Some("topology.kubernetes.io/zone In [zone-b]")
    );
}
