//! The plugin API's conformance suite (`provider-conformance`, the binary an author runs)
//! against both plugins this project ships, each a real process: aws-plugin over `moto_server`
//! (started through aws-plugin's `tests/moto/moto_launcher.py`, with a VPC, subnets in two zones, a security
//! group, a role and an x86_64 and an arm64 image from `moto/e2e_fixtures.py`), and the
//! example Python plugin, copied into an empty directory as docs/plugin-authoring.md says.
//! Both must pass every check and skip none, so a check that silently stops applying fails
//! here.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use integration_tests::{
    ChildGuard, moto_script, run_ok, start_aws_plugin_on_moto, start_moto, start_python_plugin,
    tool, wait_for_path, workspace_binary,
};
use serde_json::Value;

const NODE_CLASS: &str = "\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: ConformanceNodeRole
  amiFamily: AL2023
  amiSelectorTerms: [{name: \"conformance-node-*\", owner: self}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: conformance}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: conformance}}]
";

/// Runs the suite with `--json` and `--junit`; the exit status, the JSON report and the
/// JUnit file's text.
fn conformance(endpoint: &str, dir: &Path, extra: &[&str]) -> (Output, Value, String) {
    let junit = dir.join("junit.xml");
    let output = Command::new(workspace_binary("provider-conformance"))
        .args(["--endpoint", endpoint, "--json", "--settle-timeout", "120"])
        .arg("--junit")
        .arg(&junit)
        .args(extra)
        .output()
        .expect("running provider-conformance");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the report is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let junit = std::fs::read_to_string(&junit).expect("the JUnit report");
    (output, report, junit)
}

/// The ids of the checks whose outcome is `outcome`.
fn ids(report: &Value, outcome: &str) -> BTreeSet<String> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|check| check["outcome"] == outcome)
        .map(|check| check["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// Every check passed or was skipped, and the skipped ones are exactly `skipped`.
fn assert_conforms(output: &Output, report: &Value, junit: &str, skipped: &[&str]) {
    let failed = ids(report, "fail");
    assert!(
        failed.is_empty(),
        "failed: {failed:?}\n{}",
        serde_json::to_string_pretty(report).unwrap()
    );
    assert!(output.status.success(), "{output:?}");
    let expected: BTreeSet<String> = skipped.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(ids(report, "skip"), expected, "skipped checks");
    let all = report["checks"].as_array().unwrap().len();
    assert!(all >= 40, "{all} checks");
    assert_eq!(junit.matches("<testcase ").count(), all, "{junit}");
}

#[test]
fn aws_plugin_over_moto_passes_every_check() {
    let python = tool("python3", "TOOLS_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let (_moto, aws_endpoint) = start_moto(dir.path());
    run_ok(
        Command::new(&python)
            .arg(moto_script("e2e_fixtures.py"))
            .args(["--endpoint", &aws_endpoint, "setup"])
            .args([
                "--discovery",
                "conformance",
                "--role",
                "ConformanceNodeRole",
            ])
            .args(["--image-name", "conformance-node-x86"])
            .args(["--arm64-image-name", "conformance-node-arm"]),
    );

    // The interruption queue, so the suite checks WatchInterruptions too.
    run_ok(
        Command::new(&python)
            .arg(moto_script("e2e_fixtures.py"))
            .args(["--endpoint", &aws_endpoint, "create-queue"])
            .args(["--name", "conformance"]),
    );

    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin_on_moto(
        &socket,
        &aws_endpoint,
        "conformance",
        &["--interruption-queue", "conformance"],
        &dir.path().join("aws-plugin.log"),
    );
    let node_class = dir.path().join("ec2nodeclass.yaml");
    std::fs::write(&node_class, NODE_CLASS).unwrap();

    let (output, report, junit) = conformance(
        &format!("unix://{}", socket.display()),
        dir.path(),
        &["--node-class", node_class.to_str().unwrap()],
    );
    assert_conforms(&output, &report, &junit, &[]);
    assert_eq!(report["plugin"], "karpenter.k8s.aws 0.1.0");

    // The suite deleted every instance it launched.
    let left = run_ok(
        Command::new(&python)
            .arg(moto_script("e2e_fixtures.py"))
            .args(["--endpoint", &aws_endpoint, "instances"])
            .args(["--cluster", "conformance"]),
    );
    let left: Value = serde_json::from_str(&left).unwrap();
    let running: Vec<&Value> = left["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] != "terminated")
        .collect();
    assert!(running.is_empty(), "{running:?}");
}

/// As docs/plugin-authoring.md walks an author through it: the reference plugin copied into an
/// empty directory, the API compiled from `CLOUDPROVIDER_PROTO_ROOT`, the suite run against it.
#[test]
fn the_python_plugin_copied_into_an_empty_directory_passes_every_check() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("my-plugin");
    std::fs::create_dir(&plugin_dir).unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(
        repo.join("examples/python-plugin/plugin.py"),
        plugin_dir.join("plugin.py"),
    )
    .unwrap();
    let socket = plugin_dir.join("plugin.sock");
    let mut plugin = ChildGuard::spawn_logging_to(
        Command::new(tool("python3", "TOOLS_PYTHON"))
            .current_dir(&plugin_dir)
            .arg("plugin.py")
            .arg("--endpoint")
            .arg(format!("unix://{}", socket.display()))
            .env("CLOUDPROVIDER_PROTO_ROOT", repo.join("proto")),
        &dir.path().join("plugin.log"),
    );
    wait_for_path(&socket, Duration::from_secs(60), &mut plugin);
    let (output, report, junit) =
        conformance(&format!("unix://{}", socket.display()), dir.path(), &[]);
    assert_conforms(&output, &report, &junit, &[]);
    assert_eq!(report["plugin"], "example.python.plugin 0.2.0");
}

#[test]
fn the_suite_lists_its_checks_and_refuses_a_node_class_of_a_foreign_kind() {
    let list = run_ok(Command::new(workspace_binary("provider-conformance")).arg("--list"));
    assert!(list.lines().count() >= 40, "{list}");
    assert!(list.contains("create.idempotent"), "{list}");

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("python.sock");
    let _plugin = start_python_plugin(&socket);
    let node_class = dir.path().join("foreign.yaml");
    std::fs::write(
        &node_class,
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\n",
    )
    .unwrap();
    let output = Command::new(workspace_binary("provider-conformance"))
        .arg("--endpoint")
        .arg(format!("unix://{}", socket.display()))
        .arg("--node-class")
        .arg(&node_class)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("karpenter.k8s.aws/EC2NodeClass is not a kind the plugin manages"),
        "{stderr}"
    );
}
