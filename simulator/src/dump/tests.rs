use serde_json::Value;

use super::*;

const FIXTURE: &str = include_str!("../../tests/fixtures/dump/cluster.yaml");

fn source(name: &str, text: &str) -> Source {
    Source {
        name: name.to_owned(),
        text: text.to_owned(),
    }
}

fn fixture() -> Built {
    build(&[source("cluster.yaml", FIXTURE)], &DumpOptions::default()).unwrap()
}

fn objects(built: &Built) -> &[Value] {
    built.document["objects"].as_array().unwrap()
}

/// `Kind/namespace/name` of every object, in order.
fn labels(built: &Built) -> Vec<String> {
    objects(built)
        .iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            match o["metadata"]["namespace"].as_str() {
                Some(namespace) => format!("{kind}/{namespace}/{name}"),
                None => format!("{kind}/{name}"),
            }
        })
        .collect()
}

fn find<'a>(built: &'a Built, label: &str) -> &'a Value {
    let index = labels(built).iter().position(|l| l == label).unwrap();
    &objects(built)[index]
}

#[test]
fn sensitive_fields_do_not_reach_the_scenario() {
    let text = to_yaml(&fixture());
    for secret in [
        "sk-live",
        "hunter2",
        "not-for-the-scenario",
        "bootstrap-token",
        "userData",
        "last-applied-configuration",
        "managedFields",
        "registry-credentials",
        "imagePullSecrets",
        "billing-tls",
        "billing-env",
        "secretKeyRef",
        "STRIPE_KEY",
        "resourceVersion",
        "uid:",
    ] {
        assert!(!text.contains(secret), "{secret} in the scenario:\n{text}");
    }
    let built = fixture();
    let billing = find(&built, "Pod/shop/billing");
    let container = &billing["spec"]["containers"][0];
    for dropped in ["env", "envFrom", "volumeMounts", "command", "args"] {
        assert!(container.get(dropped).is_none(), "{dropped}: {container}");
    }
    // What scheduling needs stays: the requests, and the volume that is no secret.
    assert_eq!(container["resources"]["requests"]["cpu"], "250m");
    assert_eq!(billing["spec"]["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(billing["spec"]["volumes"][0]["name"], "scratch");
    // A pod's status is only its phase.
    assert_eq!(billing["status"], serde_json::json!({"phase": "Running"}));
    let web = find(&built, "Deployment/default/web");
    assert!(
        web["spec"]["template"]["spec"]["containers"][0]
            .get("env")
            .is_none()
    );
}

#[test]
fn pods_their_controllers_make_again_are_dropped_the_others_kept() {
    let built = fixture();
    let pods: Vec<String> = labels(&built)
        .into_iter()
        .filter(|l| l.starts_with("Pod/"))
        .collect();
    // The Deployments' and the DaemonSet's pods are made again by the simulator's
    // controllers; the bare pods stay, and the pod of a ReplicaSet whose Deployment is not in
    // the dump stays as a plain pod, said.
    assert_eq!(
        pods,
        [
            "Pod/default/debug",
            "Pod/default/legacy-7d9f8c6b5-x2k4p",
            "Pod/shop/billing"
        ]
    );
    let legacy = find(&built, "Pod/default/legacy-7d9f8c6b5-x2k4p");
    assert!(legacy["metadata"].get("ownerReferences").is_none());
    assert!(
        built
            .warnings
            .iter()
            .any(|w| w.object == "Pod/default/legacy-7d9f8c6b5-x2k4p"
                && w.message.contains("Deployment legacy is not in the dump")),
        "{:?}",
        built.warnings
    );
    // Bound pods stay on their node.
    assert_eq!(
        find(&built, "Pod/default/debug")["spec"]["nodeName"],
        "general-a1b2c"
    );
}

#[test]
fn objects_come_in_kind_order_then_by_namespace_and_name() {
    let built = fixture();
    assert_eq!(
        labels(&built),
        [
            "EC2NodeClass/default",
            "NodePool/general",
            "NodePool/spot",
            "NodeClaim/general-a1b2c",
            "NodeClaim/general-d3e4f",
            "NodeClaim/spot-g5h6j",
            "Node/general-a1b2c",
            "Node/general-d3e4f",
            "Node/spot-g5h6j",
            "PodDisruptionBudget/default/web",
            "PodDisruptionBudget/shop/api",
            "DaemonSet/kube-system/node-agent",
            "Deployment/default/web",
            "Deployment/jobs/batch",
            "Deployment/shop/api",
            "Pod/default/debug",
            "Pod/default/legacy-7d9f8c6b5-x2k4p",
            "Pod/shop/billing",
        ]
    );
}

#[test]
fn the_fleet_is_adopted_with_its_status() {
    let built = fixture();
    let claim = find(&built, "NodeClaim/spot-g5h6j");
    assert_eq!(
        claim["status"]["providerID"],
        "aws:///us-east-1c/i-0c33333333333333c"
    );
    assert_eq!(claim["status"]["imageID"], "ami-0a1b2c3d4e5f60002");
    let node = find(&built, "Node/spot-g5h6j");
    assert_eq!(
        node["spec"]["providerID"],
        "aws:///us-east-1c/i-0c33333333333333c"
    );
    assert_eq!(node["status"]["allocatable"]["cpu"], "2");
    assert!(node["status"].get("nodeInfo").is_none());
    // The simulation starts when the newest object was made, to the minute.
    let start: Timestamp = built.document["start"].as_str().unwrap().parse().unwrap();
    assert_eq!(start.as_second() % 60, 0);
}

#[test]
fn the_cloud_is_inferred_so_the_node_class_resolves_to_what_it_did() {
    let built = fixture();
    let cloud = &built.document["cloud"];
    assert_eq!(cloud["region"], "us-east-1");
    assert_eq!(
        cloud["zones"],
        serde_json::json!(["us-east-1a", "us-east-1b", "us-east-1c"])
    );
    let images = cloud["images"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = images
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap(),
                i["architecture"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ami-0a1b2c3d4e5f60001", "x86_64"),
            ("ami-0a1b2c3d4e5f60002", "arm64")
        ]
    );
    // Tagged as the class's amiSelectorTerms select.
    for image in images {
        assert_eq!(image["tags"]["karpenter.sh/discovery"], "demo");
        assert_eq!(image["created"], built.document["start"]);
    }
    let subnets: Vec<(&str, &str)> = cloud["subnets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap(), s["zone"].as_str().unwrap()))
        .collect();
    assert_eq!(
        subnets,
        [
            ("subnet-0aa1", "us-east-1a"),
            ("subnet-0bb2", "us-east-1b"),
            ("subnet-0cc3", "us-east-1c")
        ]
    );
    let groups = cloud["securityGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["name"], "demo-nodes");
    assert_eq!(groups[0]["tags"]["karpenter.sh/discovery"], "demo");
    assert_eq!(groups[1]["id"], "sg-0b7e5c1d2e3f40001");
}

#[test]
fn an_image_only_a_node_claim_names_is_older_and_selected_by_no_tag() {
    // The node runs an image its class no longer resolves to: in the cluster it is drifted,
    // and so it is in the simulation.
    let dump = FIXTURE.replacen(
        "imageID: ami-0a1b2c3d4e5f60002",
        "imageID: ami-0ffff00000000000a",
        1,
    );
    let built = build(&[source("c.yaml", &dump)], &DumpOptions::default()).unwrap();
    let images = built.document["cloud"]["images"].as_array().unwrap();
    let old = images
        .iter()
        .find(|i| i["id"] == "ami-0ffff00000000000a")
        .unwrap();
    assert_eq!(old["architecture"], "arm64");
    assert!(old.get("tags").is_none(), "{old}");
    assert!(old["created"].as_str().unwrap() < built.document["start"].as_str().unwrap());
}

const CLASS_WITH_ALIAS: &str = "
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: al}
spec:
  role: R
  amiSelectorTerms: [{alias: al2023@v20260101}]
  subnetSelectorTerms: [{tags: {net: '*'}}]
  securityGroupSelectorTerms: [{name: nodes}]
status:
  amis:
    - {id: ami-0aaa, name: my-ami-1, requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}]}
    - {id: ami-0fff, name: my-ami-nvidia, requirements: [{key: kubernetes.io/arch, operator: In, values: [arm64]}, {key: karpenter.k8s.aws/instance-gpu-count, operator: Exists}]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: named}
spec:
  role: R
  amiFamily: AL2023
  amiSelectorTerms: [{name: 'my-ami-*', owner: '999988887777'}]
  subnetSelectorTerms: [{tags: {net: '*'}}]
  securityGroupSelectorTerms: [{name: nodes}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: n1
  labels: {topology.kubernetes.io/zone: us-east-1d, node.kubernetes.io/instance-type: m6g.large}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: al}
  requirements: []
status: {providerID: 'aws:///us-east-1d/i-0abc', imageID: ami-0aaa}
";

#[test]
fn aliases_owners_and_unresolved_classes_are_made_to_resolve() {
    let built = build(
        &[source("a.yaml", CLASS_WITH_ALIAS)],
        &DumpOptions::default(),
    )
    .unwrap();
    let class = find(&built, "EC2NodeClass/al");
    assert_eq!(
        class["spec"]["amiSelectorTerms"],
        serde_json::json!([{"alias": "al2023@latest"}])
    );
    assert_eq!(
        find(&built, "EC2NodeClass/named")["spec"]["amiSelectorTerms"],
        serde_json::json!([{"name": "my-ami-*"}])
    );
    let image = &built.document["cloud"]["images"][0];
    assert_eq!(image["alias"], "al2023");
    assert_eq!(image["architecture"], "arm64");
    // The alias's GPU variant is an image of its own, not the alias's `@latest`.
    let nvidia = &built.document["cloud"]["images"][1];
    assert_eq!(nvidia["id"], "ami-0fff");
    assert!(nvidia.get("alias").is_none(), "{nvidia}");
    // No status.subnets: one per zone the fleet is in, tagged for the first term.
    assert_eq!(
        built.document["cloud"]["subnets"],
        serde_json::json!([{"id": "subnet-us-east-1d", "zone": "us-east-1d", "tags": {"net": "*"}}])
    );
    assert_eq!(
        built.document["cloud"]["securityGroups"][0]["name"],
        "nodes"
    );
    // The region from the zone, with no region label.
    assert_eq!(built.document["cloud"]["region"], "us-east-1");
    let messages: Vec<&str> = built.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(
        messages.iter().any(|m| m.contains("al2023@latest")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("`owner` dropped")),
        "{messages:?}"
    );
    scenario::parse(&to_yaml(&built)).unwrap();
}

#[test]
fn errors_name_the_file_the_object_and_the_field() {
    let dump = "
apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: shop}
    spec:
      replicas: many
      selector: {matchLabels: {app: web}}
      template: {metadata: {labels: {app: web}}, spec: {containers: [{name: web, image: nginx}]}}
";
    let error = build(&[source("dump.yaml", dump)], &DumpOptions::default()).unwrap_err();
    let DumpError::Object {
        file,
        object,
        field,
        ..
    } = &error
    else {
        panic!("{error}");
    };
    assert_eq!(file, "dump.yaml");
    assert_eq!(object, "Deployment/shop/web");
    assert_eq!(field, "spec.replicas");
    assert!(
        error
            .to_string()
            .starts_with("dump.yaml: Deployment/shop/web: spec.replicas: "),
        "{error}"
    );

    let nameless =
        "{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, metadata: {}}]}";
    let error = build(&[source("d.json", nameless)], &DumpOptions::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "d.json: items[0]: metadata.name: required"
    );

    let broken = build(&[source("b.yaml", "a: [")], &DumpOptions::default()).unwrap_err();
    assert!(matches!(broken, DumpError::Document { .. }), "{broken}");
}

#[test]
fn unsupported_kinds_and_versions_are_skipped_with_a_warning() {
    let dump = "
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: old}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec: {containers: [{name: c, image: i}]}
";
    let built = build(&[source("m.yaml", dump)], &DumpOptions::default()).unwrap();
    assert_eq!(labels(&built), ["Pod/default/p"]);
    let warnings: Vec<String> = built.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings[0].starts_with("m.yaml: Service/default/web: "),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("karpenter.sh/v1beta1"), "{warnings:?}");
}

#[test]
fn json_and_several_files_are_read_and_a_missing_deployment_keeps_its_pods() {
    let pods = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web-1", "namespace": "default",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}]},
       "spec": {"containers": [{"name": "c", "image": "i"}]}},
      {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "agent-1", "namespace": "default",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": true}]},
       "spec": {"containers": [{"name": "c", "image": "i"}]}}]}"#;
    let daemon_set = "
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template: {metadata: {labels: {app: agent}}, spec: {containers: [{name: a, image: a}]}}
";
    let built = build(
        &[source("pods.json", pods), source("ds.yaml", daemon_set)],
        &DumpOptions::default(),
    )
    .unwrap();
    assert_eq!(
        labels(&built),
        ["DaemonSet/default/agent", "Pod/default/web-1"]
    );
    assert!(
        built.warnings[0]
            .message
            .starts_with("its Deployment web is not in the dump"),
        "{:?}",
        built.warnings
    );
}

#[test]
fn a_node_no_node_claim_owns_stays_outside_the_simulated_cloud() {
    let dump = "
apiVersion: v1
kind: Node
metadata: {name: mng-1, labels: {topology.kubernetes.io/zone: us-east-1a}}
spec: {providerID: 'aws:///us-east-1a/i-0mng', podCIDR: 10.0.0.0/24}
status:
  allocatable: {cpu: '2', memory: 8Gi, pods: '29'}
  addresses: [{type: InternalIP, address: 10.0.0.1}]
";
    let built = build(&[source("n.yaml", dump)], &DumpOptions::default()).unwrap();
    let node = find(&built, "Node/mng-1");
    assert_eq!(node["spec"], serde_json::json!({}));
    assert!(node["status"].get("addresses").is_none());
    assert!(built.warnings[0].message.contains("no NodeClaim owns it"));
}

#[test]
fn the_same_dump_gives_the_same_scenario_which_parses() {
    let first = to_yaml(&fixture());
    assert_eq!(first, to_yaml(&fixture()));
    let parsed = scenario::parse(&first).unwrap();
    assert_eq!(parsed.objects.len(), 18);
    assert_eq!(parsed.duration, std::time::Duration::from_secs(3600));
    // The header's example event is itself valid.
    let example = first
        .lines()
        .find(|l| l.contains("publishImage"))
        .unwrap()
        .trim_start_matches('#')
        .trim()
        .trim_start_matches("- ");
    let with_event = format!("{first}events:\n  - {example}\n");
    let parsed = scenario::parse(&with_event).unwrap();
    assert_eq!(parsed.events.len(), 1);
}

#[test]
fn a_pod_being_deleted_is_left_out() {
    let pods = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "going", "namespace": "default",
                    "deletionTimestamp": "2026-11-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
       "spec": {"containers": [{"name": "c", "image": "i"}]}},
      {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "staying", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "i"}]}}]}"#;
    let built = build(&[source("pods.json", pods)], &DumpOptions::default()).unwrap();
    assert_eq!(labels(&built), ["Pod/default/staying"]);
    assert!(
        built
            .warnings
            .iter()
            .any(|w| w.object.contains("going") && w.message.contains("terminating")),
        "{:?}",
        built.warnings
    );
}

#[test]
fn what_a_class_without_status_gets_does_not_depend_on_the_order_of_the_files() {
    let resolved = "
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: b-resolved}
spec:
  role: R
  amiFamily: AL2023
  amiSelectorTerms: [{id: ami-0aaa}]
  subnetSelectorTerms: [{tags: {net: 'b'}}]
  securityGroupSelectorTerms: [{name: nodes}]
status:
  amis: [{id: ami-0aaa, name: img, requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]
  subnets: [{id: subnet-0b, zone: us-east-1b}]
";
    let unresolved = "
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: a-unresolved}
spec:
  role: R
  amiFamily: AL2023
  amiSelectorTerms: [{id: ami-0aaa}]
  subnetSelectorTerms: [{tags: {net: 'a'}}]
  securityGroupSelectorTerms: [{name: nodes}]
";
    let built = |files: &[(&str, &str)]| {
        let sources: Vec<Source> = files.iter().map(|(n, t)| source(n, t)).collect();
        let built = build(&sources, &DumpOptions::default()).unwrap();
        built.document["cloud"]["subnets"].clone()
    };
    let one = built(&[("r.yaml", resolved), ("u.yaml", unresolved)]);
    let other = built(&[("u.yaml", unresolved), ("r.yaml", resolved)]);
    assert_eq!(one, other);
    assert!(
        one.as_array()
            .unwrap()
            .iter()
            .any(|subnet| subnet["id"] == "subnet-us-east-1b"),
        "the unresolved class gets a subnet in the zone the other resolved: {one}"
    );
}
