//! Unit tests of the topology: domain choice, minDomains, claim skipping, recording.

use super::*;
use crate::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::scheduler::selector::{LabelSelector, NamespaceSet};

fn zone_spread(topology: &mut Topology, max_skew: u32, min_domains: Option<u32>) -> GroupId {
    topology.group(GroupSpec {
        rule: Rule::Spread {
            max_skew,
            min_domains,
        },
        key: LABEL_TOPOLOGY_ZONE.into(),
        namespaces: NamespaceSet::All,
        selector: Some(LabelSelector::default()),
        node_filter: Vec::new(),
    })
}

fn zone(value: &str) -> Requirements {
    [Requirement::in_values(LABEL_TOPOLOGY_ZONE, [value])]
        .into_iter()
        .collect()
}

fn pod_in<'a>(owned: &'a [GroupId], strict: &'a Requirements) -> PodTopology<'a> {
    PodTopology {
        owned,
        selected_by: owned,
        inverse_selecting: &[],
        inverse_owned: &[],
        strict,
        cheaper_zones: None,
    }
}

#[test]
fn given_zone_counts_when_spreading_then_the_least_loaded_allowed_zone_is_pinned() {
    let mut topology = Topology::default();
    let spread = zone_spread(&mut topology, 1, None);
    topology.add_domains(LABEL_TOPOLOGY_ZONE, ["b", "a", "c"]);
    let none = Requirements::new();
    let owned = [spread];
    let pod = pod_in(&owned, &none);
    for value in ["a", "b"] {
        topology.record(&pod, Domain::Claim(0), &zone(value), AllowUndefined::NoKeys);
    }
    let mut requirements = Requirements::new();
    topology
        .narrow(&pod, &mut requirements, &mut |_, _, _| true)
        .unwrap();
    assert_eq!(requirements, zone("c"));
    let mut pinned_elsewhere = zone("a");
    topology.record(&pod, Domain::Claim(1), &zone("c"), AllowUndefined::NoKeys);
    topology.record(&pod, Domain::Claim(1), &zone("a"), AllowUndefined::NoKeys);
    let refused = topology.narrow(&pod, &mut pinned_elsewhere, &mut |_, _, _| true);
    assert_eq!(
        refused.map_err(|broken| topology.violation(broken).to_string()),
        Err("would violate topology spread (zone maxSkew 1)".to_owned()),
        "a has 2, the others 1: a third would make a skew of 2"
    );
}

#[test]
fn given_min_domains_above_the_known_zones_when_spreading_then_the_minimum_is_zero() {
    let mut topology = Topology::default();
    let spread = zone_spread(&mut topology, 1, Some(3));
    topology.add_domains(LABEL_TOPOLOGY_ZONE, ["a", "b"]);
    let none = Requirements::new();
    let owned = [spread];
    let pod = pod_in(&owned, &none);
    topology.record(&pod, Domain::Claim(0), &zone("a"), AllowUndefined::NoKeys);
    topology.record(&pod, Domain::Claim(1), &zone("b"), AllowUndefined::NoKeys);
    let mut requirements = Requirements::new();
    assert!(
        topology
            .narrow(&pod, &mut requirements, &mut |_, _, _| true)
            .is_err(),
        "with 2 of 3 domains the minimum stays 0, so no zone may take a second pod"
    );
}

#[test]
fn given_a_viability_check_when_spreading_then_unlaunchable_zones_are_skipped() {
    let mut topology = Topology::default();
    let spread = zone_spread(&mut topology, 1, None);
    topology.add_domains(LABEL_TOPOLOGY_ZONE, ["a", "b"]);
    let none = Requirements::new();
    let owned = [spread];
    let pod = pod_in(&owned, &none);
    let mut requirements = Requirements::new();
    topology
        .narrow(&pod, &mut requirements, &mut |_, value, _| value != "a")
        .unwrap();
    assert_eq!(requirements, zone("b"));
}

#[test]
fn given_hostname_anti_affinity_when_every_claim_has_a_match_then_no_claim_is_tried() {
    let mut topology = Topology::default();
    let anti = topology.group(GroupSpec {
        rule: Rule::AntiAffinity,
        key: LABEL_HOSTNAME.into(),
        namespaces: NamespaceSet::All,
        selector: Some(LabelSelector::default()),
        node_filter: Vec::new(),
    });
    let none = Requirements::new();
    let owned = [anti];
    let pod = pod_in(&owned, &none);
    assert!(!topology.may_fit_a_claim(&pod, 0));
    topology.record(&pod, Domain::Claim(0), &none, AllowUndefined::NoKeys);
    assert!(!topology.may_fit_a_claim(&pod, 1));
    assert!(topology.may_fit_a_claim(&pod, 2), "claim 1 has none yet");
    assert!(topology.check_hostname(&pod, Domain::Claim(1)).is_ok());
    assert_eq!(
        topology
            .check_hostname(&pod, Domain::Claim(0))
            .map_err(|broken| topology.violation(broken).to_string()),
        Err("would violate pod anti-affinity (hostname)".to_owned())
    );
}

#[test]
fn given_zonal_anti_affinity_on_an_unpinned_node_when_recorded_then_every_possible_zone_is_blocked()
{
    let mut topology = Topology::default();
    let anti = topology.group(GroupSpec {
        rule: Rule::AntiAffinity,
        key: LABEL_TOPOLOGY_ZONE.into(),
        namespaces: NamespaceSet::All,
        selector: Some(LabelSelector::default()),
        node_filter: Vec::new(),
    });
    topology.add_domains(LABEL_TOPOLOGY_ZONE, ["a", "b", "c"]);
    let none = Requirements::new();
    let owned = [anti];
    let pod = pod_in(&owned, &none);
    let two: Requirements = [Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["a", "b"])]
        .into_iter()
        .collect();
    topology.record(&pod, Domain::Claim(0), &two, AllowUndefined::NoKeys);
    let mut requirements = Requirements::new();
    topology
        .narrow(&pod, &mut requirements, &mut |_, _, _| true)
        .unwrap();
    assert_eq!(requirements, zone("c"));
}
