//! The example scenarios end to end, each checked for the facts its comment promises, plus
//! the engine's own guarantees: determinism, core restarts, plugin outages, node deletion.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::nodepool::NODEPOOL_HASH_VERSION;
use simulator::engine::{self, Quiet};
use simulator::report::{FinalNodeClaim, Report, TimelineEvent};
use simulator::scenario;

fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(format!("{name}.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(text: &str) -> Report {
    let scenario = scenario::parse(text).unwrap();
    engine::run_blocking(scenario, &mut Quiet).unwrap()
}

fn events<'a>(report: &'a Report, type_: &'a str) -> Vec<&'a TimelineEvent> {
    report.events_of(type_).collect()
}

fn claims_in(events: &[&TimelineEvent]) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| e.field("nodeClaim"))
        .map(str::to_owned)
        .collect()
}

fn condition<'a>(claim: &'a FinalNodeClaim, type_: &str) -> Option<(&'a str, &'a str)> {
    claim
        .conditions
        .get(type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// Each NodeClaim goes created -> launched -> registered -> initialized, in that order.
fn assert_lifecycle_in_order(report: &Report) {
    let first = |type_: &str, claim: &str| {
        report
            .events_of(type_)
            .find(|e| e.field("nodeClaim") == Some(claim))
            .map(|e| e.t)
    };
    for created in report.events_of("NodeClaimCreated") {
        let claim = created.field("nodeClaim").unwrap();
        let launched = first("NodeClaimLaunched", claim);
        let registered = first("NodeRegistered", claim);
        let initialized = first("NodeInitialized", claim);
        if let Some(launched) = launched {
            assert!(created.t <= launched, "{claim}: launched before created");
        }
        if let (Some(launched), Some(registered)) = (launched, registered) {
            assert!(launched < registered, "{claim}: registered before launched");
        }
        if let (Some(registered), Some(initialized)) = (registered, initialized) {
            assert!(
                registered <= initialized,
                "{claim}: initialized before registered"
            );
        }
    }
}

#[test]
fn scale_up_from_zero_launches_capacity_for_every_pod_in_every_zone() {
    let report = run(&example("scale-up-from-zero"));

    let created = events(&report, "NodeClaimCreated");
    assert!(!created.is_empty());
    assert!(
        created.iter().all(|e| e.t >= 60.0),
        "nothing is pending before the scale-up at 1m"
    );
    assert_eq!(
        claims_in(&created),
        claims_in(&events(&report, "NodeInitialized")),
        "every NodeClaim created got a node that initialized"
    );
    assert_lifecycle_in_order(&report);

    let web: Vec<_> = report
        .final_state
        .pods
        .iter()
        .filter(|p| p.namespace == "default")
        .collect();
    assert_eq!(web.len(), 30);
    assert!(web.iter().all(|p| p.phase == "Running" && p.node.is_some()));

    let nodes = &report.final_state.nodes;
    assert_eq!(nodes.len(), report.final_state.node_claims.len());
    let zones: BTreeSet<&str> = nodes
        .iter()
        .map(|n| n.labels["topology.kubernetes.io/zone"].as_str())
        .collect();
    assert_eq!(
        zones.len(),
        3,
        "the zone spread needs all three zones: {zones:?}"
    );
    for node in nodes {
        assert!(node.ready, "{}", node.name);
        assert!(node.node_claim.is_some(), "{} has its NodeClaim", node.name);
        assert!(node.taints.is_empty(), "{}: {:?}", node.name, node.taints);
        let agents = report
            .final_state
            .pods
            .iter()
            .filter(|p| p.namespace == "kube-system" && p.node.as_deref() == Some(&node.name))
            .count();
        assert_eq!(agents, 1, "one DaemonSet pod on {}", node.name);
    }
    for claim in &report.final_state.node_claims {
        assert_eq!(condition(claim, "Initialized").map(|c| c.0), Some("True"));
    }

    let stats = &report.stats;
    assert_eq!(stats.node_claims_created, created.len() as u64);
    assert_eq!(stats.node_claims_deleted, 0);
    assert_eq!(stats.orphaned_instances, 0);
    assert!(
        stats.pods_pending_max_seconds >= 60.0 && stats.pods_pending_max_seconds <= 120.0,
        "launch (30s) + registration (30s) + batching: {}",
        stats.pods_pending_max_seconds
    );
    assert!(stats.cost_per_hour_at_end > 0.0);
}

#[test]
fn new_ami_drifts_what_the_old_image_launched_and_launches_the_new_one() {
    let report = run(&example("new-ami"));
    let claims = &report.final_state.node_claims;
    let (old, new): (Vec<&FinalNodeClaim>, Vec<&FinalNodeClaim>) =
        claims.iter().partition(|c| c.image_id == "ami-0a1");
    assert!(
        !old.is_empty(),
        "capacity launched before the release at 12m"
    );
    assert!(!new.is_empty(), "capacity launched for the scale-up at 25m");
    assert!(new.iter().all(|c| c.image_id == "ami-0b2"), "{new:?}");

    let drifted = events(&report, "NodeClaimDrifted");
    assert!(
        drifted.iter().all(|e| e.t >= 720.0),
        "nothing drifts before the image is published at 12m"
    );
    assert!(
        drifted.iter().all(|e| e.t <= 720.0 + 6.0 * 60.0),
        "drift is seen within a resolution and a drift period"
    );
    assert!(
        drifted
            .iter()
            .all(|e| e.field("reason") == Some("AMIDrift")),
        "{drifted:?}"
    );
    let old_names: BTreeSet<String> = old.iter().map(|c| c.name.clone()).collect();
    assert_eq!(claims_in(&drifted), old_names);
    assert!(events(&report, "DriftCleared").is_empty());
    for claim in old {
        assert_eq!(condition(claim, "Drifted"), Some(("True", "AMIDrift")));
    }
    for claim in new {
        assert_eq!(condition(claim, "Drifted"), None, "{}", claim.name);
    }
}

#[test]
fn a_nodepool_label_change_drifts_the_node_claims_of_the_old_template() {
    let report = run(&example("nodepool-label-change"));
    let drifted = events(&report, "NodeClaimDrifted");
    assert!(!drifted.is_empty());
    assert!(
        drifted.iter().all(|e| e.t >= 480.0),
        "not before the change at 8m"
    );
    assert!(
        drifted
            .iter()
            .all(|e| e.field("reason") == Some("NodePoolDrifted"))
    );

    let pool = &report.final_state.node_pools[0];
    let pool_hash = &pool.annotations["karpenter.sh/nodepool-hash"];
    for claim in &report.final_state.node_claims {
        assert_eq!(
            condition(claim, "Drifted"),
            Some(("True", "NodePoolDrifted"))
        );
        assert_ne!(&claim.annotations["karpenter.sh/nodepool-hash"], pool_hash);
        assert_eq!(claim.labels.get("team").map(String::as_str), Some("web"));
        assert_eq!(
            claim.labels.get("tier"),
            None,
            "launched from the old template"
        );
    }
    assert_eq!(
        claims_in(&drifted).len(),
        report.final_state.node_claims.len()
    );
}

#[test]
fn an_adopted_upstream_fleet_is_restamped_not_drifted() {
    let report = run(&example("adopt-upstream-fleet"));
    assert!(events(&report, "NodeClaimDrifted").is_empty());
    assert_eq!(
        report.stats.node_claims_created, 0,
        "the pods fit the adopted nodes"
    );

    let pool = &report.final_state.node_pools[0];
    assert_eq!(
        pool.annotations["karpenter.sh/nodepool-hash-version"],
        NODEPOOL_HASH_VERSION
    );
    let claims = &report.final_state.node_claims;
    assert_eq!(
        claims.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["default-upa1", "default-upb2"]
    );
    for claim in claims {
        assert_eq!(
            claim.annotations["karpenter.sh/nodepool-hash-version"], NODEPOOL_HASH_VERSION,
            "{}",
            claim.name
        );
        assert_eq!(
            claim.annotations["karpenter.sh/nodepool-hash"],
            pool.annotations["karpenter.sh/nodepool-hash"],
            "re-stamped with the NodePool's current hash"
        );
        assert_ne!(
            claim.annotations["karpenter.k8s.aws/ec2nodeclass-hash-version"], "v4",
            "the node class hash is re-stamped too"
        );
        assert_eq!(condition(claim, "Drifted"), None);
        assert!(!claim.deleting);
    }
    let instances = &report.final_state.instances;
    assert_eq!(instances.len(), 2);
    assert!(instances.iter().all(|i| i.state == "running"));
    assert_eq!(report.stats.orphaned_instances, 0);
    let nodes: BTreeSet<&str> = report
        .final_state
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert!(
        report
            .final_state
            .pods
            .iter()
            .all(|p| p.phase == "Running" && nodes.contains(p.node.as_deref().unwrap()))
    );
}

#[test]
fn a_capacity_error_deletes_the_node_claim_and_a_later_one_launches_elsewhere() {
    let report = run(&example("capacity-errors"));
    let failed = events(&report, "LaunchFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].field("reason"), Some("InsufficientCapacity"));
    let first = failed[0].field("nodeClaim").unwrap();
    let deleted = events(&report, "NodeClaimDeleted");
    assert!(deleted.iter().any(|e| e.field("nodeClaim") == Some(first)));

    let launched = events(&report, "NodeClaimLaunched");
    assert_eq!(launched.len(), 1);
    assert!(launched[0].t > failed[0].t);
    assert_ne!(launched[0].field("nodeClaim"), Some(first));
    assert_eq!(launched[0].field("capacityType"), Some("on-demand"));

    let claims = &report.final_state.node_claims;
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].capacity_type, "on-demand");
    assert!(
        report
            .final_state
            .instances
            .iter()
            .all(|i| i.capacity_type == "on-demand")
    );
    assert_eq!(report.stats.node_claims_created, 2);
    assert_eq!(report.stats.node_claims_deleted, 1);
    assert!(report.final_state.pods.iter().all(|p| p.phase == "Running"));
}

/// scale-up-from-zero with a core restart, a plugin outage and a scale-up during it.
fn restart_and_outage() -> String {
    example("scale-up-from-zero")
        .replace("name: scale-up-from-zero", "name: restart-and-outage")
        .replace(
            "    scale: {kind: Deployment, name: web, replicas: 30}\n",
            "    scale: {kind: Deployment, name: web, replicas: 10}
  - at: 1m30s
    restartCore: {}
  - at: 3m
    pluginOutage: {for: 5m}
  - at: 4m
    scale: {kind: Deployment, name: web, replicas: 20}
",
        )
}

#[test]
fn a_core_restart_and_a_plugin_outage_lose_nothing_and_duplicate_nothing() {
    let report = run(&restart_and_outage());
    let restarted = events(&report, "CoreRestarted");
    assert_eq!(restarted.len(), 1);
    assert_eq!(restarted[0].t, 90.0);
    let outage = events(&report, "PluginUnavailable");
    assert_eq!(outage.len(), 1, "one entry for the outage: {outage:?}");
    assert_eq!(outage[0].t, 180.0);

    // No launch while the plugin is down; the NodeClaims created meanwhile launch after.
    let launched = events(&report, "NodeClaimLaunched");
    assert!(launched.iter().all(|e| e.t < 180.0 || e.t >= 480.0));
    assert!(launched.iter().any(|e| e.t >= 480.0));
    assert!(events(&report, "NodeClaimDeleted").is_empty());

    // The restart forgot the nominations: the NodeClaims in flight took the pods again instead
    // of new ones being created for them.
    let stats = &report.stats;
    assert_eq!(
        stats.node_claims_created,
        report.final_state.node_claims.len() as u64
    );
    assert_eq!(stats.node_claims_deleted, 0);
    assert_eq!(stats.orphaned_instances, 0);
    let web: Vec<_> = report
        .final_state
        .pods
        .iter()
        .filter(|p| p.namespace == "default")
        .collect();
    assert_eq!(web.len(), 20);
    assert!(web.iter().all(|p| p.phase == "Running"));
}

#[test]
fn deleting_a_node_claim_drains_it_and_replaces_its_capacity() {
    let text = example("adopt-upstream-fleet")
        .replace("name: adopt-upstream-fleet", "name: delete-adopted")
        + "events:
  - at: 5m
    delete: {kind: NodeClaim, name: default-upa1}
";
    let report = run(&text);
    let evicted = events(&report, "PodEvicted");
    assert!(!evicted.is_empty());
    assert!(
        evicted
            .iter()
            .all(|e| e.field("nodeClaim") == Some("default-upa1"))
    );
    let terminated = events(&report, "InstanceTerminated");
    assert_eq!(terminated.len(), 1);
    assert_eq!(
        terminated[0].field("providerID"),
        Some("aws:///us-east-1a/i-0aaa000000000001")
    );
    assert_eq!(report.stats.node_claims_deleted, 1);
    assert_eq!(
        report.stats.node_claims_created, 1,
        "a replacement for the evicted pods"
    );
    assert_eq!(
        report.stats.max_disrupting_by_node_pool,
        BTreeMap::from([("default".to_owned(), 1)])
    );
    let instance = |id: &str| {
        report
            .final_state
            .instances
            .iter()
            .find(|i| i.provider_id == id)
            .map(|i| i.state.as_str())
    };
    assert_eq!(
        instance("aws:///us-east-1a/i-0aaa000000000001"),
        Some("terminated")
    );
    assert!(report.final_state.pods.iter().all(|p| p.phase == "Running"));
    assert!(
        report
            .final_state
            .nodes
            .iter()
            .all(|n| n.name != "ip-10-9-1-1.ec2.internal")
    );
}

#[test]
fn the_same_scenario_and_seed_give_the_same_report_byte_for_byte() {
    for text in [example("new-ami"), restart_and_outage()] {
        let first = run(&text).to_json();
        let second = run(&text).to_json();
        assert!(first == second, "two runs differ");
    }
}

#[test]
fn another_seed_gives_other_generated_names() {
    let text = example("capacity-errors");
    let first = run(&text);
    let second = run(&text.replace("seed: 3", "seed: 4"));
    let names = |report: &Report| claims_in(&events(report, "NodeClaimCreated"));
    assert_ne!(names(&first), names(&second));
}
