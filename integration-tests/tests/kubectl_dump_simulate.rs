//! `simulate --from-dump` on a fresh dump: `simulator/tests/fixtures/dump/make-fixture.sh`
//! (the script that made the committed fixture) run with stock kubectl against
//! `fake-apiserver`, then the dump given to `simulate`: it must build the same scenario
//! objects as the committed fixture does (generated names and UIDs differ between runs, but
//! the pods that carry them are the ones left to their controllers) and run it.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::{run_ok, tool, workspace_binary};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../simulator/tests/fixtures/dump")
}

/// `kind/namespace/name` of each object of an emitted scenario, in order.
fn objects_of(scenario: &str) -> Vec<String> {
    let document: serde_yaml::Value = serde_yaml::from_str(scenario).expect("YAML");
    document["objects"]
        .as_sequence()
        .expect("objects")
        .iter()
        .map(|object| {
            let kind = object["kind"].as_str().unwrap_or_default();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            match object["metadata"]["namespace"].as_str() {
                Some(namespace) => format!("{kind}/{namespace}/{name}"),
                None => format!("{kind}/{name}"),
            }
        })
        .collect()
}

fn emit(dump: &Path, out: &Path) -> String {
    run_ok(
        Command::new(workspace_binary("simulate"))
            .arg("--from-dump")
            .arg(dump)
            .arg("--emit-scenario")
            .arg(out)
            .arg("--emit-only"),
    );
    std::fs::read_to_string(out).expect("the emitted scenario")
}

#[test]
fn a_fresh_kubectl_dump_of_the_fake_cluster_is_simulated() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dump = dir.path().join("cluster.yaml");
    run_ok(
        Command::new("bash")
            .arg(fixture_dir().join("make-fixture.sh"))
            .arg(&dump)
            .env("KUBECTL", tool("kubectl", "KUBECTL"))
            .env("FAKE_APISERVER", workspace_binary("fake-apiserver")),
    );
    let text = std::fs::read_to_string(&dump).expect("the dump");
    assert!(text.starts_with("apiVersion: v1\nitems:\n"), "{text}");
    assert!(text.contains("\nkind: List\n"), "{text}");

    let fresh = emit(&dump, &dir.path().join("fresh.yaml"));
    let committed = emit(
        &fixture_dir().join("cluster.yaml"),
        &dir.path().join("committed.yaml"),
    );
    let objects = objects_of(&fresh);
    assert_eq!(objects, objects_of(&committed));
    assert!(
        objects.contains(&"NodeClaim/spot-g5h6j".to_owned()),
        "{objects:?}"
    );
    assert!(!fresh.contains("sk-live"), "{fresh}");

    // And it runs: the fleet adopted, nothing new launched in the first seconds.
    let report = dir.path().join("report.json");
    run_ok(
        Command::new(workspace_binary("simulate"))
            .arg("-f")
            .arg(&dump)
            .args(["--duration", "10s", "--quiet", "--report"])
            .arg(&report),
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("the report")).expect("JSON");
    assert_eq!(
        report["final"]["nodeClaims"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(report["stats"]["nodeClaimsCreated"], 0);
}
