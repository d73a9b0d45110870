//! The disruption scenarios end to end, each checked on its report: an AMI upgrade
//! under a NodePool budget and a PodDisruptionBudget, a do-not-disrupt pod, a budget window,
//! capacity errors during an upgrade, a scale-down consolidated, and core restarts mid-upgrade.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

mod support;

use std::collections::BTreeSet;

use core_svc::controllers::disruption::annotations::{
    COMMAND_ANNOTATIONS, LEGACY_COMMAND_ANNOTATIONS,
};
use simulator::report::Report;
use support::{
    DISRUPTED_TAINT, NEW_IMAGE, OLD_IMAGE, assert_drifted_after,
    assert_each_replaced_before_deleted, assert_fleet_on, assert_replaced_before_deleted,
    claims_of, created_before, events, events_for, example, first_t, replacements_of, run,
};

#[test]
fn an_ami_upgrade_replaces_every_node_within_the_budget_and_the_pdb() {
    let report = run(&example("ami-upgrade-respects-budget"));
    let fleet = created_before(&report, 600.0);
    assert_eq!(fleet.len(), 8, "one web pod per node");
    assert_drifted_after(&report, &fleet, 600.0);

    let started = events(&report, "DisruptionStarted");
    assert!(
        started.iter().all(|e| e.field("reason") == Some("Drifted")),
        "nothing but drift disrupts this fleet: {started:?}"
    );
    assert_eq!(claims_of(&started), fleet);
    assert_eq!(
        started.len(),
        fleet.len(),
        "one command per node, none retried"
    );
    assert!(events(&report, "DisruptionAbandoned").is_empty());
    let replacements = assert_each_replaced_before_deleted(&report, &fleet, NEW_IMAGE);
    let finals: BTreeSet<String> = report
        .final_state
        .node_claims
        .iter()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(finals, replacements, "the fleet is its replacements");
    let leftovers: Vec<(&str, &String)> = report
        .final_state
        .node_claims
        .iter()
        .map(|c| (c.name.as_str(), &c.annotations))
        .chain(
            report
                .final_state
                .nodes
                .iter()
                .map(|n| (n.name.as_str(), &n.annotations)),
        )
        .flat_map(|(name, annotations)| {
            annotations
                .keys()
                .filter(|key| {
                    COMMAND_ANNOTATIONS.contains(&key.as_str())
                        || LEGACY_COMMAND_ANNOTATIONS.contains(&key.as_str())
                })
                .map(move |key| (name, key))
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "finished commands leave no annotations behind: {leftovers:?}"
    );

    // 20% of the 8 to 10 nodes the NodePool has during the roll, rounded up: 2 at once.
    let disrupting = report.stats.max_disrupting_by_node_pool["default"];
    assert!((1..=2).contains(&disrupting), "{disrupting}");
    // Two drains at once compete for the PDB's single disruption: it held one back.
    assert!(!events(&report, "EvictionBlocked").is_empty());
    assert_eq!(report.stats.pdb_violations, 0);

    assert_fleet_on(&report, NEW_IMAGE);
    assert_eq!(report.final_state.instances.len(), 16);
    assert_eq!(report.stats.node_claims_created, 16);
    assert_eq!(report.stats.node_claims_deleted, 8);
}

#[test]
fn a_do_not_disrupt_pod_holds_its_drifted_node_until_the_annotation_goes() {
    let report = run(&example("do-not-disrupt-holds"));
    let removed = 1800.0;
    let fleet = created_before(&report, 600.0);
    assert_drifted_after(&report, &fleet, 600.0);

    let held_by_pod: Vec<_> = events(&report, "DisruptionBlocked")
        .into_iter()
        .filter(|e| {
            e.field("reason") == Some("Drifted")
                && e.field("pod")
                    .is_some_and(|p| p.starts_with("default/batch-"))
        })
        .collect();
    assert!(!held_by_pod.is_empty());
    let held = claims_of(&held_by_pod);
    assert_eq!(held.len(), 1, "the batch pod's node: {held:?}");
    let held = held.first().unwrap().as_str();
    let pod = held_by_pod[0].field("pod").unwrap();
    for event in &held_by_pod {
        assert!(event.t < removed, "{event:?}");
        assert_eq!(event.field("pod"), Some(pod));
        assert!(
            event
                .field("message")
                .unwrap()
                .contains("karpenter.sh/do-not-disrupt"),
            "{event:?}"
        );
    }
    // Reported again while it holds, not once and forgotten.
    assert!(held_by_pod.last().unwrap().t >= removed - 6.0 * 60.0);

    // The rest of the fleet is replaced meanwhile; the held node only after 30m.
    for claim in &fleet {
        assert_replaced_before_deleted(&report, claim, NEW_IMAGE);
        let started = first_t(&report, "DisruptionStarted", claim).unwrap();
        let deleted = first_t(&report, "NodeClaimDeleted", claim).unwrap();
        if claim == held {
            assert!(started >= removed, "{held} disrupted at {started}");
        } else {
            assert!(deleted < removed, "{claim} deleted at {deleted}");
        }
    }
    let pod_name = pod.strip_prefix("default/").unwrap();
    assert!(
        !report
            .events_of("PodEvicted")
            .any(|e| e.field("pod") == Some(pod)),
        "the do-not-disrupt pod is never evicted"
    );
    assert!(
        report.final_state.pods.iter().all(|p| p.name != pod_name),
        "the template change replaced it"
    );
    assert_fleet_on(&report, NEW_IMAGE);
}

#[test]
fn a_zero_budget_window_holds_drift_until_it_closes() {
    let report = run(&example("budget-window-holds-drift"));
    // The scenario starts at 12:00 UTC; the window "0 12 * * *" for 2h closes at 14:00.
    let window_end = 7200.0;
    let fleet = created_before(&report, 600.0);
    assert_eq!(fleet.len(), 4);
    assert_drifted_after(&report, &fleet, 600.0);
    let drifted_at = events(&report, "NodeClaimDrifted")
        .iter()
        .map(|e| e.t)
        .fold(0.0, f64::max);
    assert!(drifted_at < 1200.0, "{drifted_at}");

    for type_ in [
        "DisruptionStarted",
        "NodeClaimDeleted",
        "PodEvicted",
        "InstanceTerminated",
    ] {
        assert!(
            report.events_of(type_).all(|e| e.t >= window_end),
            "{type_} inside the window"
        );
    }
    assert_eq!(
        created_before(&report, window_end),
        fleet,
        "no replacement launched inside the window"
    );

    for claim in &fleet {
        let blocked: Vec<_> = events_for(&report, "DisruptionBlocked", claim)
            .into_iter()
            .filter(|e| e.field("reason") == Some("Drifted") && e.t < window_end)
            .collect();
        assert!(!blocked.is_empty(), "{claim}");
        for event in &blocked {
            let message = event.field("message").unwrap();
            assert!(
                message.contains(r#"schedule: "0 12 * * *""#) && message.contains("allows no"),
                "names the budget: {message}"
            );
        }
        assert!(
            blocked.last().unwrap().t >= window_end - 6.0 * 60.0,
            "{claim}: still explained at the end of the window"
        );
        assert_replaced_before_deleted(&report, claim, NEW_IMAGE);
    }
    let first_start = events(&report, "DisruptionStarted")
        .iter()
        .map(|e| e.t)
        .fold(f64::INFINITY, f64::min);
    assert!(
        first_start < window_end + 15.0,
        "the roll starts when the window closes, not later: {first_start}"
    );
    assert!(
        report.stats.max_disrupting_by_node_pool["default"] <= 1,
        "the other budget: one node at a time"
    );
    assert_fleet_on(&report, NEW_IMAGE);
}

#[test]
fn capacity_errors_during_an_upgrade_roll_back_and_the_upgrade_resumes() {
    let report = run(&example("capacity-errors-during-upgrade"));
    // Capacity errors from 9m to 30m; the image is published at 10m.
    let cleared = 1800.0;
    let fleet = created_before(&report, 540.0);
    assert_eq!(fleet.len(), 4);
    assert_drifted_after(&report, &fleet, 600.0);

    let failed = events(&report, "LaunchFailed");
    assert!(!failed.is_empty());
    assert!(
        failed
            .iter()
            .all(|e| e.field("reason") == Some("InsufficientCapacity") && e.t < cleared),
        "{failed:?}"
    );
    let abandoned = events(&report, "DisruptionAbandoned");
    assert!(!abandoned.is_empty());
    let failed_claims = claims_of(&failed);
    for event in &abandoned {
        assert!(event.t < cleared, "{event:?}");
        assert_eq!(event.field("disruptionReason"), Some("Drifted"));
        let candidate = event.field("nodeClaim").unwrap();
        assert!(fleet.contains(candidate), "{event:?}");
        // Rolled back: the replacement that failed is gone and the candidate stays.
        let reason = event.field("reason").unwrap();
        let replacement = failed_claims
            .iter()
            .find(|c| reason.contains(&format!("replacement NodeClaim {c} ")))
            .unwrap_or_else(|| panic!("{reason}"));
        let gone = first_t(&report, "NodeClaimDeleted", replacement).unwrap();
        assert!(gone <= event.t, "{replacement}");
        assert!(first_t(&report, "NodeClaimDeleted", candidate).unwrap() > cleared);
    }
    assert!(
        report.events_of("PodEvicted").all(|e| e.t > cleared),
        "no node was drained while its replacement could not launch"
    );
    assert!(
        report
            .events_of("NodeClaimLaunched")
            .all(|e| e.t < 540.0 || e.t > cleared),
        "no instance launched while capacity was short"
    );
    let explained = report.events_of("DisruptionBlocked").any(|e| {
        e.t < cleared
            && e.field("message")
                .is_some_and(|m| m.contains("launching its replacement failed"))
    });
    assert!(explained, "DisruptionBlocked says the replacement failed");

    assert_each_replaced_before_deleted(&report, &fleet, NEW_IMAGE);
    assert_fleet_on(&report, NEW_IMAGE);
    assert_eq!(
        report.final_state.instances.len(),
        8,
        "the failed launches left no instance"
    );
    assert!(report.stats.max_disrupting_by_node_pool["default"] <= 1);
}

#[test]
fn scaling_down_consolidates_onto_fewer_cheaper_nodes() {
    let text = example("scale-down-consolidates");
    let scaled_down = 1200.0;
    // The same scenario stopped just before the scale-down (an event past the end is invalid).
    let events_at = text.find("\nevents:").unwrap();
    let before = run(&text[..=events_at].replace("duration: 30m", "duration: 19m"));
    assert_eq!(before.end, 19 * 60, "the shortened run");
    let after = run(&text);

    assert!(
        events(&before, "DisruptionStarted").is_empty(),
        "30 replicas keep the fleet busy: nothing to consolidate"
    );
    let peak_nodes = before.final_state.nodes.len();
    let peak_cost = before.stats.cost_per_hour_at_end;
    let web = |report: &Report| {
        report
            .final_state
            .pods
            .iter()
            .filter(|p| p.namespace == "default" && p.phase == "Running")
            .count()
    };
    assert_eq!(web(&before), 30);

    let started = events(&after, "DisruptionStarted");
    assert!(!started.is_empty());
    assert!(started.iter().all(|e| e.t >= scaled_down), "{started:?}");
    assert!(
        started
            .iter()
            .all(|e| matches!(e.field("reason"), Some("Empty" | "Underutilized"))),
        "{started:?}"
    );
    assert!(events(&after, "DisruptionAbandoned").is_empty());
    let nodes = after.final_state.nodes.len();
    assert!(
        nodes < peak_nodes,
        "{nodes} nodes, {peak_nodes} at the peak"
    );
    let cost = after.stats.cost_per_hour_at_end;
    assert!(cost < peak_cost, "${cost}/h, ${peak_cost}/h at the peak");
    assert_eq!(web(&after), 6);
    assert_eq!(after.stats.pdb_violations, 0);
    // 30% of the 4 nodes, rounded up.
    assert!(after.stats.max_disrupting_by_node_pool["default"] <= 2);
    assert_eq!(after.stats.orphaned_instances, 0);
    let deleted = claims_of(&events(&after, "NodeClaimDeleted"));
    assert_eq!(
        deleted.len() as u64,
        after.stats.node_claims_deleted,
        "{deleted:?}"
    );
    for claim in &deleted {
        assert!(
            started.iter().any(|e| e
                .field("candidates")
                .is_some_and(|c| c.split(',').any(|n| n == claim))),
            "{claim} deleted without a disruption"
        );
    }
    for node in &after.final_state.nodes {
        assert!(node.taints.iter().all(|t| t["key"] != DISRUPTED_TAINT));
    }
}

#[test]
fn core_restarts_mid_upgrade_lose_nothing_and_leave_nothing_behind() {
    let report = run(&example("restart-mid-upgrade"));
    let restarts: Vec<f64> = events(&report, "CoreRestarted")
        .iter()
        .map(|e| e.t)
        .collect();
    assert_eq!(restarts, [630.0, 675.0, 810.0]);
    let fleet = created_before(&report, 600.0);
    assert_eq!(fleet.len(), 4);
    assert_drifted_after(&report, &fleet, 600.0);

    let started = events(&report, "DisruptionStarted");
    assert_eq!(
        started.len(),
        4,
        "each command started once, none re-decided"
    );
    assert_eq!(claims_of(&started), fleet);
    assert!(events(&report, "DisruptionAbandoned").is_empty());

    // The restarts fell where the scenario says: during a launch, a drain, a shutdown.
    let launching = |t: f64| {
        started.iter().any(|s| {
            s.t < t
                && replacements_of(&report, s)
                    .iter()
                    .any(|r| first_t(&report, "NodeInitialized", r).is_some_and(|init| init > t))
        })
    };
    let evictions = |claim: &str| -> Vec<f64> {
        events_for(&report, "PodEvicted", claim)
            .iter()
            .map(|e| e.t)
            .collect()
    };
    let draining = |t: f64| {
        fleet.iter().any(|c| {
            let e = evictions(c);
            e.first().is_some_and(|&first| first < t) && e.last().is_some_and(|&last| last > t)
        })
    };
    let shutting_down = |t: f64| {
        fleet.iter().any(|c| {
            evictions(c).last().is_some_and(|&last| last < t)
                && first_t(&report, "NodeClaimDeleted", c).is_some_and(|gone| gone > t)
        })
    };
    assert!(
        launching(restarts[0]),
        "a replacement launching at {}",
        restarts[0]
    );
    assert!(draining(restarts[1]), "a node draining at {}", restarts[1]);
    assert!(
        shutting_down(restarts[2]),
        "a node shutting down at {}",
        restarts[2]
    );

    assert_each_replaced_before_deleted(&report, &fleet, NEW_IMAGE);
    assert_fleet_on(&report, NEW_IMAGE);
    assert_eq!(
        report.stats.node_claims_created, 8,
        "one replacement per node"
    );
    assert_eq!(report.stats.node_claims_deleted, 4);
    assert_eq!(report.final_state.instances.len(), 8);
    assert!(
        report
            .final_state
            .instances
            .iter()
            .filter(|i| i.image_id == OLD_IMAGE)
            .all(|i| i.state == "terminated")
    );
    assert!(report.stats.max_disrupting_by_node_pool["default"] <= 1);
}
