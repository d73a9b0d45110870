//! The `simulate` binary as a user runs it: the built-in scenario, a report file, and the exit
//! status and message of an invalid scenario.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::process::Command;

fn simulate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simulate"))
}

#[test]
fn without_arguments_it_runs_the_built_in_scenario_and_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let output = simulate().arg("--report").arg(&report).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("NodeClaimCreated"), "{stdout}");
    assert!(stdout.contains("NodeClaimDrifted"), "{stdout}");
    assert!(stdout.contains("reason=AMIDrift"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["scenario"], "new-ami");
    assert_eq!(json["seed"], 7);
    assert_eq!(json["end"], 2400);
    for key in ["nodePools", "nodeClaims", "nodes", "pods", "instances"] {
        assert!(json["final"][key].is_array(), "final.{key}");
    }
    // What scheduling assertions need: each NodeClaim's requirements (what went to the
    // plugin) and each pod's labels.
    let claim = &json["final"]["nodeClaims"][0];
    let requirements = claim["requirements"].as_array().unwrap();
    assert!(
        requirements
            .iter()
            .any(|r| r["key"] == "node.kubernetes.io/instance-type" && r["operator"] == "In"),
        "{claim}"
    );
    let pod = &json["final"]["pods"][0];
    assert!(
        pod["labels"].as_object().is_some_and(|l| !l.is_empty()),
        "{pod}"
    );
    let timeline = json["timeline"].as_array().unwrap();
    assert!(
        timeline
            .iter()
            .all(|e| e["t"].is_f64() && e["type"].is_string())
    );
}

#[test]
fn an_invalid_scenario_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "name: bad\nduration: 10m\nevents:\n  - {at: 1m, scale: {kind: Deployment, name: web, replicas: -1}}\n",
    )
    .unwrap();
    let output = simulate().arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("events[0].scale.replicas"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_object_the_cluster_refuses_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        r#"name: bad
duration: 1m
objects:
  - apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: both}
    spec: {minAvailable: 1, maxUnavailable: 1, selector: {}}
"#,
    )
    .unwrap();
    let output = simulate().arg(&path).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("objects[0]"), "{stderr}");
}

#[test]
fn a_missing_file_exits_2() {
    let output = simulate()
        .arg("/nonexistent/scenario.yaml")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn a_chaos_run_that_holds_exits_0_and_a_checked_scenario_that_breaks_exits_1_naming_it() {
    let output = simulate()
        .args(["--chaos", "2", "--runs", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("chaos seed 2: every invariant held"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 chaos run(s), 1 held every invariant"),
        "{stdout}"
    );

    // A pod no instance type can hold never runs: `pod-never-ran` at the end.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("giant.yaml");
    let scenario = r#"
name: giant
duration: 1h
cloud:
  instanceTypes: [m5.large]
  images: [{id: ami-0a1, name: al2023, created: "2025-12-01T00:00:00Z", tags: {team: platform}}]
  subnets: [{id: subnet-a, zone: us-east-1a, tags: {discovery: demo}}]
  securityGroups: [{id: sg-1, name: nodes, tags: {discovery: demo}}]
objects:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      role: KarpenterNodeRole
      amiFamily: AL2023
      amiSelectorTerms: [{tags: {team: platform}}]
      subnetSelectorTerms: [{tags: {discovery: demo}}]
      securityGroupSelectorTerms: [{tags: {discovery: demo}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: giant}
    spec:
      replicas: 1
      selector: {matchLabels: {app: giant}}
      template:
        metadata: {labels: {app: giant}}
        spec:
          containers: [{name: giant, image: registry.invalid/giant, resources: {requests: {cpu: "64"}}}]
"#;
    std::fs::write(&path, scenario).unwrap();
    let output = simulate()
        .arg("--check")
        .arg("-q")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("invariant broken: 1:00:00 pod-never-ran: 1 pod(s) still wait"),
        "{stderr}"
    );
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    // `simulate | head -1`: the pipe closes after the first line.
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    let mut child = simulate()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    // The reader is dropped here: the pipe is closed.
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(first.contains("NodeClaimCreated"), "{first}");
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn repeated_events_are_folded_in_the_timeline_but_kept_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/budget-window-holds-drift.yaml"
    );
    let folded = simulate()
        .arg(scenario)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert!(folded.status.success());
    let every = simulate()
        .arg(scenario)
        .arg("--every-event")
        .output()
        .unwrap();
    let folded = String::from_utf8(folded.stdout).unwrap();
    let every = String::from_utf8(every.stdout).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let events = json["timeline"].as_array().unwrap().len();
    assert!(
        every.lines().filter(|line| line.starts_with(' ')).count() >= events,
        "--every-event prints every event of the report"
    );
    assert!(
        folded.contains("(the same as at"),
        "the budget window blocks the drift pass after pass: {folded}"
    );
    assert!(
        folded.lines().count() < every.lines().count(),
        "folded: {}, every: {}",
        folded.lines().count(),
        every.lines().count()
    );
}

#[test]
fn set_compares_the_scenario_as_written_and_as_changed() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/ami-upgrade-respects-budget.yaml"
    );
    let output = simulate()
        .arg(scenario)
        .args([
            "--set",
            r#"objects[NodePool/default].spec.disruption.budgets=[{nodes: "50%"}]"#,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let header = stdout.lines().nth(1).unwrap();
    assert!(
        header.contains("ami-upgrade-respects-budget with --set"),
        "{stdout}"
    );
    let most = stdout
        .lines()
        .find(|line| line.starts_with("most disrupting at once"))
        .unwrap();
    // 8 nodes: a 20% budget lets 2 disrupt at once, 50% lets 4.
    assert!(
        most.contains("default 2") && most.contains("default 4"),
        "{most}"
    );

    let vs_itself = simulate()
        .arg(scenario)
        .arg("--vs")
        .arg(scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8(vs_itself.stdout).unwrap();
    for line in stdout.lines().skip(1) {
        let cells: Vec<&str> = line.split("  ").filter(|c| !c.trim().is_empty()).collect();
        assert_eq!(cells.len(), 3, "{line}");
        assert_eq!(
            cells[1].trim(),
            cells[2].trim(),
            "the same scenario twice: {line}"
        );
    }

    let bad = simulate()
        .arg(scenario)
        .args(["--set", "objects[NodePool/nope].spec=1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("objects[NodePool/nope]: no such object"),
        "{stderr}"
    );
}

#[test]
fn plot_and_html_write_the_picture_and_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("run.svg");
    let html = dir.path().join("run.html");
    let report = dir.path().join("run.json");
    let output = simulate()
        .arg("--quiet")
        .arg("--report")
        .arg(&report)
        .arg("--plot")
        .arg(&svg)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    let document = roxmltree::Document::parse(&picture).unwrap();
    let texts: Vec<&str> = document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .filter_map(|node| node.text())
        .collect();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let drifted = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["type"] == "NodeClaimDrifted")
        .count();
    assert!(drifted > 0);
    assert!(
        json["series"]["nodesByImage"]["ami-0b2"].is_array(),
        "{}",
        json["series"]
    );
    // The built-in new-ami scenario: one NodePool, on-demand, rolled from one image to another.
    let drifted = format!("NodeClaimDrifted ({drifted})");
    for wanted in [
        simulator::plot::NODES_BY_IMAGE,
        simulator::plot::DISRUPTING,
        "on-demand",
        "default disrupting",
        "default budget (Drifted)",
        "ami-0a1",
        "ami-0b2",
        &drifted,
    ] {
        assert!(
            texts.iter().any(|text| text.contains(wanted)),
            "{wanted:?} not in {texts:?}"
        );
    }

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h1>new-ami</h1>"), "{page}");
    assert!(page.contains("<svg"), "{page}");
    assert!(page.contains("<th>pdbViolations</th><td>0</td>"), "{page}");
    assert!(page.contains("NodeClaimDrifted"), "{page}");
    assert!(!page.contains("src=\"http"), "{page}");
    assert!(!page.contains("href=\"http"), "{page}");
}

#[test]
fn a_picture_that_cannot_be_written_exits_1_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("run.svg");
    let output = simulate()
        .arg("--quiet")
        .arg("--plot")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("cannot write"), "{stderr}");
    assert!(stderr.contains("run.svg"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
