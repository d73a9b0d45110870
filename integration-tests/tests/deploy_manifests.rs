//! The kustomize base in deploy/base: every file parses, the kustomization lists them all, and
//! the two containers agree on what the 0600 plugin socket needs (the same endpoint on a
//! shared volume, the same user).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::PathBuf;

use serde::Deserialize as _;
use serde_yaml::Value;

fn base() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/base")
}

fn load(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(base().join(name)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap())
        .collect()
}

#[test]
fn the_kustomization_lists_every_manifest_and_each_parses() {
    let kustomization = &load("kustomization.yaml")[0];
    let mut listed: Vec<String> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(base())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present);
    for name in &present {
        for document in load(name) {
            assert!(
                document["kind"].as_str().is_some(),
                "{name}: every document has a kind"
            );
        }
    }
}

#[test]
fn both_containers_share_the_socket_and_the_user() {
    let deployment = &load("deployment.yaml")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(
        pod["securityContext"]["runAsUser"].as_u64().is_some(),
        "one pod-level user: the socket is 0600"
    );
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 2);
    let endpoint = |c: &Value| {
        c["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "PLUGIN_ENDPOINT")
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(endpoint(&containers[0]), endpoint(&containers[1]));
    for container in containers {
        assert!(
            container["securityContext"]["runAsUser"].is_null(),
            "no container overrides the pod's user"
        );
        let mounts = container["volumeMounts"].as_sequence().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m["name"] == "plugin-socket" && m["mountPath"] == "/run/karpenter")
        );
    }
    assert!(endpoint(&containers[0]).starts_with("unix:///run/karpenter/"));
}
