//! The install in `deploy/`: every kustomization lists every manifest beside it; every overlay
//! renders with stock `kubectl kustomize`, validates against the Kubernetes OpenAPI schemas
//! (PyPI `kubernetes-validate`, strict: an unknown field fails) and applies to the fake API
//! server with stock kubectl; and the rendered install is the HA shape it promises (two
//! replicas under a disruption budget, spread over zones and hosts, locked down, the two
//! containers agreeing on the 0600 plugin socket).
//!
//! Run alone (needs `.ci/install-tools` for kubectl and kubernetes-validate, and the
//! workspace's binaries built):
//!
//! ```sh
//! eval "$(.ci/install-tools)"
//! cargo build -p integration-tests --bins && cargo test -p integration-tests --test deploy_manifests
//! ```

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::{run_ok, start_fake_apiserver, tool};
use serde::Deserialize as _;
use serde_yaml::Value;

/// The overlays an operator applies; each renders a whole install.
const OVERLAYS: [&str; 2] = ["overlays/aws", "overlays/aws-monitoring"];

/// Kinds whose schema the Kubernetes OpenAPI documents do not hold, so `kubernetes-validate`
/// cannot check them (the CRDs' own kinds are checked by `karpenter-api`'s tests).
const CUSTOM_KINDS: [&str; 1] = ["ServiceMonitor"];

/// The Kubernetes version the manifests are validated against: the oldest EKS supports.
const KUBERNETES_VERSION: &str = "1.33.0";

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).unwrap())
        .filter(|document| !document.is_null())
        .collect()
}

fn render(overlay: &str) -> String {
    run_ok(
        Command::new(tool("kubectl", "KUBECTL"))
            .arg("kustomize")
            .arg(deploy().join(overlay)),
    )
}

fn kustomizations(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            kustomizations(&path, out);
        } else if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
            out.push(path);
        }
    }
}

/// The local files a kustomization names (resources, patches, generators' files), skipping
/// directories (other kustomizations).
fn named_files(kustomization: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    names.extend(strings(&kustomization["resources"]));
    for patch in kustomization["patches"].as_sequence().into_iter().flatten() {
        if let Some(path) = patch["path"].as_str() {
            names.insert(path.to_owned());
        }
    }
    for generator in kustomization["configMapGenerator"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        names.extend(strings(&generator["files"]));
    }
    names.retain(|name| !name.starts_with(".."));
    names
}

/// Every file under `dir` but the kustomization, as paths relative to `dir`; a subdirectory
/// with its own kustomization is another kustomization's business.
fn files_under(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            if !path.join("kustomization.yaml").exists() {
                files_under(&path, &format!("{prefix}{name}/"), out);
            }
        } else if name != "kustomization.yaml" {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

#[test]
fn every_kustomization_names_every_file_beside_it() {
    let mut found = Vec::new();
    kustomizations(&deploy(), &mut found);
    assert!(found.len() >= 5, "{found:?}");
    for path in found {
        let kustomization = &documents(&std::fs::read_to_string(&path).unwrap())[0];
        let dir = path.parent().unwrap();
        let mut present = BTreeSet::new();
        files_under(dir, "", &mut present);
        assert_eq!(named_files(kustomization), present, "{}", path.display());
    }
}

#[test]
fn every_overlay_renders_and_validates_against_the_kubernetes_schemas() {
    let dir = tempfile::tempdir().unwrap();
    for overlay in OVERLAYS {
        let rendered = render(overlay);
        let file = dir
            .path()
            .join(format!("{}.yaml", overlay.replace('/', "-")));
        std::fs::write(&file, &rendered).unwrap();
        let output = Command::new(tool("kubernetes-validate", "KUBERNETES_VALIDATE"))
            .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
            .arg(&file)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{overlay}: {said}");
        for line in said.lines().filter(|l| !l.starts_with("INFO")) {
            let custom = CUSTOM_KINDS
                .iter()
                .any(|kind| line.contains(&format!("Couldn't find schema for kind {kind} ")));
            assert!(custom, "{overlay}: {line}");
        }
        let kinds: BTreeSet<String> = documents(&rendered)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect();
        for kind in [
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ClusterRole",
            "Role",
        ] {
            assert!(
                kinds.contains(kind),
                "{overlay} renders no {kind}: {kinds:?}"
            );
        }
    }
}

#[test]
fn every_overlay_applies_to_the_fake_api_server_with_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let (_apiserver, kubeconfig) = start_fake_apiserver(
        dir.path(),
        "karpenter.k8s.aws/v1/EC2NodeClass/ec2nodeclasses",
        &[],
    );
    let kubectl = || {
        let mut command = Command::new(tool("kubectl", "KUBECTL"));
        command.env("KUBECONFIG", &kubeconfig);
        command
    };
    for overlay in OVERLAYS {
        let applied = run_ok(kubectl().arg("apply").arg("-k").arg(deploy().join(overlay)));
        assert!(applied.contains("deployment.apps/karpenter"), "{applied}");
    }
    let got = run_ok(kubectl().args([
        "get",
        "deployment,poddisruptionbudget,service,serviceaccount,role,rolebinding,configmap",
        "-n",
        "karpenter",
        "-o",
        "name",
    ]));
    for object in [
        "deployment.apps/karpenter",
        "poddisruptionbudget.policy/karpenter",
        "service/karpenter",
        "serviceaccount/karpenter",
        "role.rbac.authorization.k8s.io/karpenter-leader-election",
        "configmap/karpenter-dashboards",
    ] {
        assert!(got.contains(object), "{object} not in {got}");
    }
    let cluster_roles = run_ok(kubectl().args(["get", "clusterroles", "-o", "name"]));
    for role in ["karpenter-core", "karpenter-aws"] {
        assert!(cluster_roles.contains(role), "{cluster_roles}");
    }
}

fn rendered_deployment() -> Value {
    documents(&render("overlays/aws"))
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap()
}

#[test]
fn the_install_is_highly_available_and_locked_down() {
    let deployment = rendered_deployment();
    let spec = &deployment["spec"];
    assert_eq!(
        spec["replicas"].as_u64(),
        Some(2),
        "leader election needs two"
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["runAsUser"].as_u64(), Some(65532));
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    for container in pod["containers"].as_sequence().unwrap() {
        let name = container["name"].as_str().unwrap();
        let security = &container["securityContext"];
        assert_eq!(
            security["readOnlyRootFilesystem"].as_bool(),
            Some(true),
            "{name}"
        );
        assert_eq!(
            security["allowPrivilegeEscalation"].as_bool(),
            Some(false),
            "{name}"
        );
        assert_eq!(security["capabilities"]["drop"][0], "ALL", "{name}");
        assert!(container["resources"]["requests"].is_mapping(), "{name}");
        assert!(
            container["resources"]["limits"]["memory"].is_string(),
            "{name}"
        );
    }
    let core = pod["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "core-svc")
        .unwrap();
    assert_eq!(core["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(core["readinessProbe"]["httpGet"]["path"], "/readyz");
    let ports: BTreeSet<u64> = core["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, BTreeSet::from([8080, 8081]));

    let rendered = documents(&render("overlays/aws"));
    let budget = rendered
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .unwrap();
    assert_eq!(budget["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
}

#[test]
fn both_containers_share_the_socket_and_the_user() {
    let deployment = rendered_deployment();
    let pod = &deployment["spec"]["template"]["spec"];
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
    // aws-plugin's settings come from the overlay's generated ConfigMap, under its hashed name.
    let plugin = containers
        .iter()
        .find(|c| c["name"] == "aws-plugin")
        .unwrap();
    let settings = plugin["envFrom"][0]["configMapRef"]["name"]
        .as_str()
        .unwrap();
    assert!(settings.starts_with("karpenter-aws-"), "{settings}");
}
