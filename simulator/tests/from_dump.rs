//! `simulate --from-dump` round trip: the kubectl dump fixture (made by
//! `tests/fixtures/dump/make-fixture.sh` against fake-apiserver) → `--emit-scenario` → the
//! emitted scenario parsed and run: every dumped NodeClaim and Node adopted, every dumped
//! workload's pods running, before anything disrupts them.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use simulator::engine::{self, Quiet};
use simulator::scenario;

const FIXTURE: &str = "tests/fixtures/dump/cluster.yaml";

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

/// Runs `simulate --from-dump FIXTURE --emit-scenario OUT --emit-only ARGS` and answers OUT's
/// text and stderr.
fn emit(out: &Path, args: &[&str]) -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_simulate"))
        .arg("--from-dump")
        .arg(fixture())
        .arg("--emit-scenario")
        .arg(out)
        .arg("--emit-only")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (std::fs::read_to_string(out).unwrap(), stderr)
}

#[test]
fn the_dumped_cluster_is_adopted_and_its_workloads_run() {
    let dir = tempfile::tempdir().unwrap();
    // Ten seconds: enough for the Deployments' and the DaemonSet's pods to be made, bound and
    // running; before consolidation may act on the underused nodes.
    let (text, stderr) = emit(&dir.path().join("scenario.yaml"), &["--duration", "10s"]);
    assert!(
        stderr.contains("Pod/default/legacy-7d9f8c6b5-x2k4p: its ReplicaSet"),
        "{stderr}"
    );
    assert!(
        text.starts_with("# Built by `simulate --from-dump`"),
        "{text}"
    );
    let scenario = scenario::parse(&text).unwrap();
    let report = engine::run_blocking(scenario, &mut Quiet).unwrap();
    let json: Value = serde_json::from_str(&report.to_json()).unwrap();
    let final_state = &json["final"];

    let dump: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    let dump: Value = serde_json::to_value(dump).unwrap();
    let items = dump["items"].as_array().unwrap();
    let names_of = |kind: &str| -> Vec<String> {
        items
            .iter()
            .filter(|item| item["kind"] == kind)
            .map(|item| item["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let claims = names_of("NodeClaim");
    let nodes = names_of("Node");
    assert_eq!(claims.len(), 3);
    for claim in &claims {
        let adopted = final_state["nodeClaims"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == claim.as_str())
            .unwrap_or_else(|| panic!("NodeClaim {claim} not adopted: {final_state:#}"));
        assert_eq!(adopted["deleting"], false, "{adopted}");
    }
    for node in &nodes {
        let adopted = final_state["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == node.as_str())
            .unwrap_or_else(|| panic!("Node {node} not adopted: {final_state:#}"));
        assert_eq!(adopted["ready"], true, "{adopted}");
    }
    // Adopted, not replaced: no NodeClaim of its own, each instance the dumped one.
    assert_eq!(json["stats"]["nodeClaimsCreated"], 0);
    let instances: Vec<&str> = final_state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "running")
        .map(|i| i["providerID"].as_str().unwrap())
        .collect();
    assert_eq!(
        instances,
        [
            "aws:///us-east-1a/i-0a11111111111111a",
            "aws:///us-east-1b/i-0b22222222222222b",
            "aws:///us-east-1c/i-0c33333333333333c"
        ]
    );

    // Every workload's pods running: each Deployment's replicas, the DaemonSet's pod on each
    // node, and the pods kept as they were.
    let running = |namespace: &str, app: &str| -> usize {
        final_state["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["namespace"] == namespace
                    && p["labels"]["app"] == app
                    && p["phase"] == "Running"
                    && !p["node"].is_null()
            })
            .count()
    };
    for item in items.iter().filter(|item| item["kind"] == "Deployment") {
        let namespace = item["metadata"]["namespace"].as_str().unwrap();
        let app = item["spec"]["selector"]["matchLabels"]["app"]
            .as_str()
            .unwrap();
        let replicas = usize::try_from(item["spec"]["replicas"].as_u64().unwrap()).unwrap();
        assert_eq!(
            running(namespace, app),
            replicas,
            "Deployment {namespace}/{app}"
        );
    }
    assert_eq!(running("kube-system", "node-agent"), nodes.len());
    for (namespace, app) in [
        ("default", "debug"),
        ("shop", "billing"),
        ("default", "legacy"),
    ] {
        assert_eq!(running(namespace, app), 1, "pod {namespace}/{app}");
    }
}

#[test]
fn emitting_twice_gives_the_same_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = emit(&dir.path().join("a.yaml"), &[]);
    let (second, _) = emit(&dir.path().join("b.yaml"), &[]);
    assert_eq!(first, second);
    // The emitted file is exactly what the library builds from the same dump.
    let sources = simulator::dump::load(&[fixture()]).unwrap();
    let built = simulator::dump::build(&sources, &simulator::dump::DumpOptions::default()).unwrap();
    assert_eq!(simulator::dump::to_yaml(&built), first);
}

#[test]
fn an_invalid_dump_exits_2_naming_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("dump.yaml");
    std::fs::write(
        &dump,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nspec: {containers: 3}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_simulate"))
        .arg("-f")
        .arg(&dump)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Pod/x/p: spec.containers"), "{stderr}");
}

#[test]
fn the_headers_example_ami_release_drifts_the_nodes_it_is_for() {
    // What the README tells operators to do: take the example event of the header, add it
    // to the emitted scenario, run it again.
    let dir = tempfile::tempdir().unwrap();
    let (mut text, _) = emit(&dir.path().join("scenario.yaml"), &["--duration", "5m"]);
    let example = text
        .lines()
        .find(|line| line.contains("publishImage"))
        .unwrap()
        .trim_start_matches('#')
        .trim()
        .trim_start_matches("- ")
        .replace("at: 30m", "at: 1m");
    text.push_str(&format!("events:\n  - {example}\n"));
    let report = engine::run_blocking(scenario::parse(&text).unwrap(), &mut Quiet).unwrap();
    let json: Value = serde_json::from_str(&report.to_json()).unwrap();
    let drifted: Vec<&str> = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "NodeClaimDrifted" && e["reason"] == "AMIDrift")
        .map(|e| e["nodeClaim"].as_str().unwrap())
        .collect();
    // The new image is x86_64: the amd64 nodes drift, the arm64 spot node does not.
    assert!(drifted.contains(&"general-a1b2c"), "{drifted:?}");
    assert!(!drifted.contains(&"spot-g5h6j"), "{drifted:?}");
}
