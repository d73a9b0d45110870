//! The scenario format's unit tests: valid files read, invalid ones refused naming the field.

use super::*;
use std::time::Duration;

use jiff::Timestamp;

const MINIMAL: &str = "name: t\nduration: 10m\n";

fn error_of(text: &str) -> ScenarioError {
    match parse(text) {
        Ok(scenario) => panic!("accepted: {scenario:?}"),
        Err(error) => error,
    }
}

#[test]
fn a_minimal_scenario_gets_the_documented_defaults() {
    let scenario = parse(MINIMAL).unwrap();
    assert_eq!(scenario.seed, 0);
    assert_eq!(scenario.start, DEFAULT_START.parse::<Timestamp>().unwrap());
    assert_eq!(scenario.duration, Duration::from_secs(600));
    assert_eq!(scenario.cloud.region, "us-east-1");
    assert_eq!(scenario.cloud.launch_delay, Duration::from_secs(30));
    assert_eq!(scenario.cloud.registration_delay, Duration::from_secs(30));
    assert!(scenario.cloud.spot);
    assert!(scenario.objects.is_empty() && scenario.events.is_empty());
}

#[test]
fn kube_scheduler_defaults_to_scoring_and_refuses_unknown_names_naming_the_field() {
    assert_eq!(
        parse(MINIMAL).unwrap().kube_scheduler,
        KubeScheduler::Default
    );
    let first_fit = parse("name: x\nduration: 1h\nkubeScheduler: firstFit\n").unwrap();
    assert_eq!(first_fit.kube_scheduler, KubeScheduler::FirstFit);
    let explicit = parse("name: x\nduration: 1h\nkubeScheduler: default\n").unwrap();
    assert_eq!(explicit.kube_scheduler, KubeScheduler::Default);
    let error = error_of("name: x\nduration: 1h\nkubeScheduler: first-fit\n");
    assert_eq!(error.field, "kubeScheduler");
    assert!(error.message.contains("default, firstFit"), "{error}");
    let error = error_of("name: x\nduration: 1h\nkubeScheduler: {profile: default}\n");
    assert_eq!(error.field, "kubeScheduler");
}

#[test]
fn feature_gates_take_upstream_s_names_and_refuse_others_naming_them() {
    let scenario =
        parse("name: x\nduration: 1h\noptions:\n  featureGates: {SpotToSpotConsolidation: true}\n")
            .unwrap();
    assert!(scenario.options.feature_gates.spot_to_spot_consolidation);
    assert!(
        scenario.options.feature_gates.reserved_capacity,
        "defaults kept"
    );
    assert_eq!(
        parse("name: x\nduration: 1h\n").unwrap().options,
        Options::default()
    );
    let error = error_of("name: x\nduration: 1h\noptions:\n  featureGates: {SpotToSpot: true}\n");
    assert_eq!(error.field, "options.featureGates.SpotToSpot");
    assert!(error.message.contains("unknown feature gate"), "{error}");
    let error = error_of("name: x\nduration: 1h\noptions:\n  featureGates: {NodeRepair: yes}\n");
    assert_eq!(error.field, "options.featureGates.NodeRepair");
    let error = error_of("name: x\nduration: 1h\noptions:\n  gates: {}\n");
    assert!(error.field.starts_with("options"), "{error}");
}

#[test]
fn a_missing_duration_names_the_field() {
    assert_eq!(error_of("name: t\n").field, "duration");
}

#[test]
fn a_bad_duration_names_the_field_and_the_value() {
    let error = error_of("name: t\nduration: forever\n");
    assert_eq!(error.field, "duration");
    assert!(error.message.contains("forever"), "{error}");
}

#[test]
fn a_misspelt_top_level_field_is_refused() {
    let error = error_of("name: t\nduration: 1m\nevnets: []\n");
    assert_eq!(error.field, "evnets");
}

#[test]
fn an_unknown_instance_type_names_its_index() {
    let error =
        error_of("name: t\nduration: 1m\ncloud: {instanceTypes: [m5.large, m5.gigantic]}\n");
    assert_eq!(error.field, "cloud.instanceTypes[1]");
}

#[test]
fn a_subnet_outside_the_cloud_zones_is_refused() {
    let error = error_of(
        "name: t\nduration: 1m\ncloud: {zones: [us-east-1a], subnets: [{id: subnet-b, zone: us-east-1b}]}\n",
    );
    assert_eq!(error.field, "cloud.subnets[0].zone");
}

#[test]
fn an_unsupported_kind_names_the_object() {
    let error = error_of(
        "name: t\nduration: 1m\nobjects:\n  - {apiVersion: v1, kind: Service, metadata: {name: s}}\n",
    );
    assert_eq!(error.field, "objects[0].kind");
}

#[test]
fn a_field_of_the_wrong_type_names_its_path_inside_the_manifest() {
    let error = error_of(
        "name: t\nduration: 1m\nobjects:\n  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: many, selector: {}, template: {spec: {containers: []}}}}\n",
    );
    assert_eq!(error.field, "objects[0].spec.replicas");
}

#[test]
fn an_invalid_node_pool_names_the_rule_it_breaks() {
    let error = error_of(
        r#"name: t
duration: 1m
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements:
            - {key: karpenter.sh/nodepool, operator: In, values: [x]}
"#,
    );
    assert!(
        error
            .field
            .starts_with("objects[0].spec.template.spec.requirements[0]"),
        "{error}"
    );
}

#[test]
fn events_are_sorted_by_time_keeping_the_file_order_for_ties() {
    let scenario = parse(
            "name: t\nduration: 1h\nevents:\n  - {at: 30m, restartCore: {}}\n  - {at: 10m, pluginOutage: {for: 1m}}\n  - {at: 30m, pluginOutage: {for: 2m}}\n",
        )
        .unwrap();
    let actions: Vec<&Action> = scenario.events.iter().map(|e| &e.action).collect();
    assert_eq!(
        actions,
        [
            &Action::PluginOutage(Duration::from_secs(60)),
            &Action::RestartCore,
            &Action::PluginOutage(Duration::from_secs(120)),
        ]
    );
}

#[test]
fn an_event_with_two_actions_is_refused() {
    let error = error_of(
        "name: t\nduration: 1h\nevents:\n  - {at: 1m, restartCore: {}, pluginOutage: {for: 1m}}\n",
    );
    assert_eq!(error.field, "events[0]");
}

#[test]
fn an_event_after_the_end_is_refused() {
    let error = error_of("name: t\nduration: 10m\nevents:\n  - {at: 11m, restartCore: {}}\n");
    assert_eq!(error.field, "events[0].at");
}

#[test]
fn scaling_a_deployment_the_scenario_never_creates_is_refused() {
    let error = error_of(
        "name: t\nduration: 10m\nevents:\n  - {at: 1m, scale: {kind: Deployment, name: web, replicas: 2}}\n",
    );
    assert_eq!(error.field, "events[0].scale");
}

#[test]
fn an_adopted_node_claim_needs_a_provider_id() {
    let error = error_of(
        r#"name: t
duration: 1m
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodeClaim
    metadata: {name: default-abc, labels: {karpenter.sh/nodepool: default}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"#,
    );
    assert_eq!(error.field, "objects[0].status.providerID");
}

#[test]
fn yaml_syntax_errors_name_the_line() {
    let error = error_of("name: t\nduration: [1m\n");
    assert!(error.field.starts_with("(line"), "{error}");
}

#[test]
fn provider_ids_split_into_zone_and_instance() {
    assert_eq!(
        parse_provider_id("aws:///us-east-1a/i-0abc").unwrap(),
        ("us-east-1a".to_owned(), "i-0abc".to_owned())
    );
    assert!(parse_provider_id("aws:///i-0abc").is_err());
    assert!(parse_provider_id("gce://x/y").is_err());
}

#[test]
fn every_example_scenario_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            count += 1;
        }
    }
    assert!(count >= 5, "{count} scenarios");
}

/// `cloud: {interrupt}` and `nodeCondition` read with their defaults; a bad kind, a status
/// Kubernetes does not have, targets given twice or not at all are refused naming the field.
#[test]
fn interruptions_and_node_conditions_read_and_refuse_naming_the_field() {
    let scenario = parse(
        "name: t\nduration: 1h\nevents:\n\
         - {at: 1m, cloud: {interrupt: {kind: ScheduledChange, count: 2, nodePool: spot}}}\n\
         - {at: 2m, cloud: {interrupt: {kind: Stopping, providerIDs: [aws:///us-east-1a/i-1]}}}\n\
         - {at: 3m, nodeCondition: {nodePool: general, type: Ready, status: Unknown}}\n",
    )
    .unwrap();
    let Action::Cloud(CloudChange::Interrupt(first)) = &scenario.events[0].action else {
        panic!("{:?}", scenario.events[0])
    };
    assert_eq!(first.after, DEFAULT_SCHEDULED_CHANGE_AFTER);
    assert_eq!(
        first.targets,
        Targets::NodePool {
            name: "spot".to_owned(),
            count: 2
        }
    );
    let Action::NodeCondition(condition) = &scenario.events[2].action else {
        panic!("{:?}", scenario.events[2])
    };
    assert_eq!(
        condition.targets,
        Targets::NodePool {
            name: "general".to_owned(),
            count: 1
        }
    );
    for (event, field) in [
        (
            "{at: 1m, cloud: {interrupt: {kind: Meteor, nodePool: a}}}",
            "events[0].cloud.interrupt.kind",
        ),
        (
            "{at: 1m, cloud: {interrupt: {kind: Stopping}}}",
            "events[0].cloud.interrupt.nodePool",
        ),
        (
            "{at: 1m, cloud: {interrupt: {kind: Stopping, nodePool: a, providerIDs: [x]}}}",
            "events[0].cloud.interrupt.providerIDs",
        ),
        (
            "{at: 1m, cloud: {interrupt: {kind: Stopping, nodePool: a, after: 1h}}}",
            "events[0].cloud.interrupt.after",
        ),
        (
            "{at: 1m, nodeCondition: {nodePool: a, type: Ready, status: Sick}}",
            "events[0].nodeCondition.status",
        ),
        (
            "{at: 1m, nodeCondition: {nodePool: a, count: 0, type: Ready, status: 'False'}}",
            "events[0].nodeCondition.count",
        ),
    ] {
        let error = error_of(&format!("name: t\nduration: 1h\nevents:\n- {event}\n"));
        assert_eq!(error.field, field, "{event}: {error}");
    }
}

#[test]
fn the_fault_events_read_into_their_actions() {
    let scenario = parse(
        "name: t\nduration: 1h\nevents:\n  - {at: 1m, slowPlugin: {for: 2m}}\n  - {at: 2m, conflicts: {for: 3m}}\n  - {at: 3m, deleteNodes: {nodePool: general, count: 2}}\n  - {at: 4m, deleteNodes: {nodes: [n1]}}\n  - {at: 5m, cloud: {registrationFailures: 3}}\n  - {at: 6m, cloud: {launchFailures: 2}}\n",
    )
    .unwrap();
    let actions: Vec<&Action> = scenario.events.iter().map(|e| &e.action).collect();
    assert_eq!(
        actions,
        [
            &Action::SlowPlugin(Duration::from_secs(120)),
            &Action::Conflicts(Duration::from_secs(180)),
            &Action::DeleteNodes(Targets::NodePool {
                name: "general".to_owned(),
                count: 2
            }),
            &Action::DeleteNodes(Targets::Named(vec!["n1".to_owned()])),
            &Action::Cloud(CloudChange::RegistrationFailures(3)),
            &Action::Cloud(CloudChange::LaunchFailures(2)),
        ]
    );
}

#[test]
fn a_bad_fault_event_names_its_field() {
    for (event, field) in [
        (
            "{at: 1m, slowPlugin: {for: 0s}}",
            "events[0].slowPlugin.for",
        ),
        ("{at: 1m, conflicts: {}}", "events[0].conflicts.for"),
        (
            "{at: 1m, deleteNodes: {count: 1}}",
            "events[0].deleteNodes.nodePool",
        ),
        (
            "{at: 1m, cloud: {registrationFailures: 0}}",
            "events[0].cloud.registrationFailures",
        ),
        (
            "{at: 1m, cloud: {registrationFailures: 1, capacityErrors: []}}",
            "events[0].cloud",
        ),
        (
            "{at: 1m, cloud: {launchFailures: many}}",
            "events[0].cloud.launchFailures",
        ),
    ] {
        let error = error_of(&format!("name: t\nduration: 1h\nevents:\n  - {event}\n"));
        assert_eq!(error.field, field, "{event}: {error}");
    }
}
