//! The example scenarios end to end, each checked for the facts its comment promises, plus
//! the engine's own guarantees: determinism, core restarts, plugin outages, node deletion.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

mod support;

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::nodepool::NODEPOOL_HASH_VERSION;
use simulator::report::{FinalNodeClaim, Report};
use support::{
    NEW_IMAGE, OLD_IMAGE, assert_drifted_after, assert_each_replaced_before_deleted,
    assert_fleet_on, claims_of as claims_in, created_before, events, example, pods_in,
    replacements_of, run,
};

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

    let web = pods_in(&report, "default");
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
    let bound = stats.cost_lower_bound_per_hour_at_end;
    assert!(
        bound.is_some_and(|bound| bound > 0.0 && bound <= stats.cost_per_hour_at_end),
        "a bound below the cost of ${}/h: {bound:?}",
        stats.cost_per_hour_at_end
    );
}

#[test]
fn a_scale_up_is_planned_once_and_nothing_it_launched_is_consolidated_while_the_pods_stay() {
    let report = run(&example("scale-up-stays-put"));

    let created = events(&report, "NodeClaimCreated");
    let batches: BTreeSet<u64> = created.iter().map(|e| e.t as u64).collect();
    assert_eq!(
        batches.len(),
        1,
        "every pod planned in the first batch; a later batch means pods landed off the plan: {batches:?}"
    );
    assert_lifecycle_in_order(&report);
    assert!(
        events(&report, "DisruptionStarted").is_empty(),
        "consolidation undid none of the plan"
    );
    let stats = &report.stats;
    assert_eq!(stats.node_claims_deleted, 0);
    assert_eq!(stats.node_claims_created, created.len() as u64);
    assert!(
        stats.pods_pending_max_seconds <= 65.0,
        "launch (30s) + registration (30s) + batching, once: {}",
        stats.pods_pending_max_seconds
    );
    let workloads = pods_in(&report, "default");
    assert_eq!(workloads.len(), 30 + 40 + 6);
    assert!(
        workloads
            .iter()
            .all(|p| p.phase == "Running" && p.node.is_some())
    );
}

#[test]
fn new_ami_drifts_what_the_old_image_launched_and_replaces_it_with_the_new_one() {
    let report = run(&example("new-ami"));
    let published = 720.0;
    let scaled_up = 1500.0;
    let launched = events(&report, "NodeClaimLaunched");
    let (old, new): (Vec<_>, Vec<_>) = launched
        .iter()
        .partition(|e| e.field("imageID") == Some(OLD_IMAGE));
    let old = claims_in(&old);
    assert!(
        !old.is_empty(),
        "capacity launched before the release at 12m"
    );
    assert_eq!(old, created_before(&report, published));
    assert!(
        new.iter()
            .all(|e| e.field("imageID") == Some(NEW_IMAGE) && e.t >= published),
        "{new:?}"
    );

    let drifted = events(&report, "NodeClaimDrifted");
    assert_drifted_after(&report, &old, published);
    assert!(
        drifted.iter().all(|e| e.t <= published + 6.0 * 60.0),
        "drift is seen within a resolution and a drift period"
    );
    assert!(events(&report, "DriftCleared").is_empty());

    // Each drifted NodeClaim is replaced on the new image, the replacement initialized
    // before the old node is drained and deleted.
    let replacements = assert_each_replaced_before_deleted(&report, &old, NEW_IMAGE);
    // Capacity launched for the scale-up at 25m boots the new image and never drifts.
    let scale_up: BTreeSet<String> = report
        .events_of("NodeClaimCreated")
        .filter(|e| e.t >= scaled_up)
        .filter_map(|e| e.field("nodeClaim"))
        .map(str::to_owned)
        .collect();
    assert!(
        !scale_up.is_empty(),
        "capacity launched for the scale-up at 25m"
    );
    assert!(scale_up.is_disjoint(&claims_in(&drifted)));
    let finals: BTreeSet<String> = report
        .final_state
        .node_claims
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        finals,
        &replacements | &scale_up,
        "the replacements and the scale-up"
    );
    assert_fleet_on(&report, NEW_IMAGE);
    // The default budget, 10% of 2 to 4 nodes rounded up: one node at a time.
    assert_eq!(
        report.stats.max_disrupting_by_node_pool,
        BTreeMap::from([("default".to_owned(), 1)])
    );
}

#[test]
fn a_nodepool_label_change_drifts_the_node_claims_of_the_old_template_and_replaces_them() {
    let report = run(&example("nodepool-label-change"));
    let changed = 480.0;
    let drifted = events(&report, "NodeClaimDrifted");
    assert!(!drifted.is_empty());
    assert!(
        drifted.iter().all(|e| e.t >= changed),
        "not before the change at 8m"
    );
    assert!(
        drifted
            .iter()
            .all(|e| e.field("reason") == Some("NodePoolDrifted"))
    );
    let old_template = created_before(&report, changed);
    assert_eq!(claims_in(&drifted), old_template);

    // Replaced one at a time from the new template (same image: only the NodePool changed).
    let replacements = assert_each_replaced_before_deleted(&report, &old_template, OLD_IMAGE);
    let pool = &report.final_state.node_pools[0];
    let pool_hash = &pool.annotations["karpenter.sh/nodepool-hash"];
    let claims = &report.final_state.node_claims;
    // Every NodeClaim at the end is of the new template: a replacement, or what consolidation
    // made of one that the kube-scheduler's spreading of the drained pods left underused.
    let from_new_template = &claims_in(&events(&report, "NodeClaimCreated")) - &old_template;
    assert!(replacements.is_subset(&from_new_template));
    let finals: BTreeSet<String> = claims.iter().map(|c| c.name.clone()).collect();
    assert!(
        finals.is_subset(&from_new_template),
        "{finals:?} not all of the new template"
    );
    assert_eq!(finals.len(), old_template.len(), "as many nodes as before");
    for claim in claims {
        assert_eq!(condition(claim, "Drifted"), None, "{}", claim.name);
        assert_eq!(&claim.annotations["karpenter.sh/nodepool-hash"], pool_hash);
        assert_eq!(claim.labels.get("team").map(String::as_str), Some("web"));
        assert_eq!(
            claim.labels.get("tier").map(String::as_str),
            Some("frontend"),
            "launched from the new template"
        );
    }
    assert_fleet_on(&report, OLD_IMAGE);
    assert_eq!(report.stats.max_disrupting_by_node_pool["default"], 1);
}

/// Migration keeps the fleet: the adopted fleet's NodePool written as upstream's v1beta1 and
/// converted by `core-svc convert` (with upstream's hash annotations it carried) takes the
/// place of the v1 one, and the nodes upstream launched are re-stamped, not drifted; nothing
/// is launched.
#[test]
fn a_converted_v1beta1_node_pool_keeps_the_adopted_fleet() {
    let v1beta1 = serde_json::json!({
        "apiVersion": "karpenter.sh/v1beta1",
        "kind": "NodePool",
        "metadata": {"name": "default", "annotations": {
            "karpenter.sh/nodepool-hash": "6821555240594823858",
            "karpenter.sh/nodepool-hash-version": "v3",
        }},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1",
                                 "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                                  "values": ["on-demand"]}],
            }},
            "disruption": {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h"},
        },
    });
    let converted = core_svc::convert::convert(v1beta1).unwrap();
    assert!(converted.warnings.is_empty(), "{:?}", converted.warnings);
    let mut scenario: serde_yaml::Value =
        serde_yaml::from_str(&example("adopt-upstream-fleet")).unwrap();
    let objects = scenario["objects"].as_sequence_mut().unwrap();
    let pool = objects
        .iter_mut()
        .find(|o| o["kind"].as_str() == Some("NodePool"))
        .unwrap();
    *pool = serde_yaml::to_value(&converted.object).unwrap();
    let report = run(&serde_yaml::to_string(&scenario).unwrap());
    assert!(events(&report, "NodeClaimDrifted").is_empty());
    assert_eq!(report.stats.node_claims_created, 0);
    let claims = &report.final_state.node_claims;
    assert_eq!(claims.len(), 2);
    for claim in claims {
        assert_eq!(condition(claim, "Drifted"), None, "{}", claim.name);
        assert!(!claim.deleting, "{}", claim.name);
    }
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

#[test]
fn consolidation_onto_an_offering_without_capacity_rolls_back_and_keeps_the_node() {
    // The same cluster with consolidation: the spot offering without capacity is the cheaper
    // replacement for the on-demand node, so consolidation keeps trying it.
    let text = example("capacity-errors").replace(
        "consolidationPolicy: WhenEmpty,",
        "consolidationPolicy: WhenEmptyOrUnderutilized,",
    );
    let report = run(&text);
    let launched = events(&report, "NodeClaimLaunched");
    assert_eq!(launched.len(), 1, "{launched:?}");
    let kept = launched[0].field("nodeClaim").unwrap();

    let started = events(&report, "DisruptionStarted");
    assert!(!started.is_empty(), "the cheaper spot offering is tried");
    let abandoned = events(&report, "DisruptionAbandoned");
    assert_eq!(abandoned.len(), started.len(), "every attempt rolled back");
    let failed = claims_in(&events(&report, "LaunchFailed"));
    let deleted = claims_in(&events(&report, "NodeClaimDeleted"));
    for command in &started {
        assert_eq!(command.field("reason"), Some("Underutilized"));
        assert_eq!(command.field("candidates"), Some(kept));
        let replacements = replacements_of(&report, command);
        assert_eq!(replacements.len(), 1, "{command:?}");
        assert!(failed.contains(&replacements[0]), "{replacements:?}");
        assert!(deleted.contains(&replacements[0]), "{replacements:?}");
    }
    assert!(!deleted.contains(kept));
    assert!(events(&report, "PodEvicted").is_empty());
    let claims = &report.final_state.node_claims;
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].name, kept);
    assert_eq!(claims[0].capacity_type, "on-demand");
    assert_eq!(
        report.final_state.instances.len(),
        1,
        "failed launches left nothing"
    );
    assert_eq!(report.stats.orphaned_instances, 0);
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
    let web = pods_in(&report, "default");
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

/// Counts the steps the engine takes.
#[derive(Default)]
struct StepCounter(u64);

impl simulator::engine::Observer for StepCounter {
    fn progress(&mut self, _progress: &simulator::engine::Progress) {
        self.0 += 1;
    }
}

#[test]
fn once_the_cluster_settles_the_engine_skips_the_quiet_seconds_and_reports_the_same() {
    let text = example("scale-down-consolidates");
    let scenario = simulator::scenario::parse(&text).unwrap();
    let seconds = scenario.duration.as_secs();
    let mut steps = StepCounter::default();
    let report = simulator::engine::run_blocking(scenario, &mut steps).unwrap();

    // 30 minutes of virtual time: a step per second while things change, then one per
    // requeue or timed event.
    assert!(
        steps.0 < seconds / 2,
        "{} steps for {seconds} s of virtual time",
        steps.0
    );
    // The last step is the scenario's end, as when every second is stepped.
    assert_eq!(report.end, seconds);
    assert_lifecycle_in_order(&report);
}

/// A third of the spot NodePool is interrupted within ten minutes: each warning reaches core
/// through aws-plugin's interruption queue, its NodeClaim is replaced within the two-minute
/// warning, no pod is still on an instance when the cloud takes it, and the next launches
/// avoid the interrupted spot offering (same type, other zone) while it is marked.
#[test]
fn a_spot_interruption_storm_loses_no_pod_and_avoids_the_interrupted_offerings() {
    let report = run(&example("spot-interruption-storm"));
    let received = events(&report, "InterruptionReceived");
    let kinds: Vec<&str> = received.iter().filter_map(|e| e.field("kind")).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "SpotInterruption").count(),
        4,
        "{kinds:?}"
    );
    assert!(kinds.contains(&"RebalanceRecommendation"), "{kinds:?}");
    assert_eq!(report.stats.pods_lost_to_interruption, 0);
    let launched = events(&report, "NodeClaimLaunched");
    for notice in received
        .iter()
        .filter(|e| e.field("kind") == Some("SpotInterruption"))
    {
        let claim = notice.field("nodeClaim").unwrap();
        let deleted = events(&report, "NodeClaimDeleted")
            .into_iter()
            .find(|e| e.field("nodeClaim") == Some(claim))
            .unwrap_or_else(|| panic!("{claim} deleted"));
        assert!(
            deleted.t <= notice.t + 120.0,
            "{claim} gone within the warning"
        );
        let interrupted = launched
            .iter()
            .find(|e| e.field("nodeClaim") == Some(claim))
            .unwrap();
        // Launches within the insufficient-capacity TTL avoid the interrupted offering.
        for later in launched
            .iter()
            .filter(|e| e.t >= notice.t && e.t < notice.t + 180.0)
        {
            assert!(
                later.field("instanceType") != interrupted.field("instanceType")
                    || later.field("zone") != interrupted.field("zone"),
                "{later:?} launched into the interrupted offering of {interrupted:?}"
            );
        }
    }
    assert!(report.final_state.pods.iter().all(|p| p.phase == "Running"));
    assert_eq!(report.stats.orphaned_instances, 0);
}

/// A scheduled retirement an hour ahead: replaced at once, drained under the PDB, nothing lost.
#[test]
fn a_scheduled_change_replaces_the_node_under_its_pdb() {
    let report = run(&example("scheduled-maintenance"));
    let received = events(&report, "InterruptionReceived");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].field("kind"), Some("ScheduledChange"));
    assert_eq!(report.stats.pdb_violations, 0);
    assert_eq!(report.stats.pods_lost_to_interruption, 0);
    assert_eq!(report.stats.node_claims_deleted, 1);
    assert!(report.final_state.pods.iter().all(|p| p.phase == "Running"));
}

/// One node NotReady past the toleration is repaired; half a NodePool NotReady is not, and
/// `NodeRepairBlocked` says why.
#[test]
fn repair_replaces_one_unhealthy_node_but_never_a_fifth_of_a_node_pool() {
    let report = run(&example("node-repair"));
    let repaired = events(&report, "NodeUnhealthy");
    assert_eq!(repaired.len(), 1, "{repaired:?}");
    assert_eq!(repaired[0].field("condition"), Some("Ready=False"));
    assert_eq!(repaired[0].field("toleration"), Some("30m"));
    // The condition was reported at 10m; the toleration is 30 minutes.
    assert_eq!(repaired[0].t, 2400.0);
    assert_eq!(report.stats.node_claims_deleted, 1);
    assert!(report.final_state.pods.iter().all(|p| p.phase == "Running"));

    let blocked = run(&example("node-repair-blocked"));
    assert!(events(&blocked, "NodeUnhealthy").is_empty());
    let held = events(&blocked, "NodeRepairBlocked");
    assert!(!held.is_empty());
    assert_eq!(held[0].field("unhealthy"), Some("3"));
    assert_eq!(blocked.stats.node_claims_deleted, 0);
}

/// The kube-scheduler stand-in's two ways of choosing among the Nodes a pod fits: the default
/// profile's scoring spreads four 500m pods over the two equally empty adopted m5.large
/// (LeastAllocated prefers the emptier Node), first-fit packs three onto the first by name.
#[test]
fn scoring_spreads_pods_over_equally_empty_nodes_while_first_fit_packs_them() {
    let scenario = example("adopt-upstream-fleet").replace("duration: 20m", "duration: 5m");
    let per_node = |report: &Report| {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for pod in pods_in(report, "default") {
            *counts.entry(pod.node.clone().expect("bound")).or_default() += 1;
        }
        counts.into_values().collect::<Vec<_>>()
    };
    let scored = run(&scenario);
    assert_eq!(per_node(&scored), [2, 2], "spread by LeastAllocated");
    let first_fit = run(&scenario.replace("duration: 5m", "duration: 5m\nkubeScheduler: firstFit"));
    assert_eq!(per_node(&first_fit), [3, 1], "packed first-fit");
}
