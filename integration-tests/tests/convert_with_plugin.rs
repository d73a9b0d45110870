//! `core-svc convert --plugin-endpoint` with aws-plugin converting the node classes, on
//! upstream's own examples (`core-svc/tests/convert/upstream/`, SOURCE.md there says where
//! each comes from): the v1 output and the warnings are checked in under
//! `core-svc/tests/convert/expected-plugin/`. Regenerate them, after reading the difference,
//! with `KARPENTER_UPDATE_CONVERT=1 cargo test -p integration-tests --test convert_with_plugin`.
//!
//! The plugin runs as in a pod, but with nothing to reach: converting calls no AWS API.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use integration_tests::{start_aws_plugin, workspace_binary};

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core-svc/tests/convert")
        .join(path)
}

fn convert(socket: &Path, files: &[PathBuf], extra: &[&str]) -> Output {
    let mut command = Command::new(workspace_binary("core-svc"));
    command
        .arg("convert")
        .arg("--plugin-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .args(extra)
        .env_remove("PLUGIN_ENDPOINT");
    for file in files {
        command.arg("-f").arg(file);
    }
    command.output().expect("core-svc runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// Checks (or with `KARPENTER_UPDATE_CONVERT` writes) `expected-plugin/{name}.yaml` and
/// `.warnings`.
fn check(name: &str, out: &Output) {
    let update = std::env::var_os("KARPENTER_UPDATE_CONVERT").is_some();
    let (yaml, warnings) = (text(&out.stdout), text(&out.stderr));
    for (extension, actual) in [("yaml", &yaml), ("warnings", &warnings)] {
        let path = data(&format!("expected-plugin/{name}.{extension}"));
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
        } else {
            let expected = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(actual, &expected, "{name}.{extension}");
        }
    }
}

#[test]
fn upstreams_examples_convert_with_the_plugin_as_checked_in() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin(&socket, &[]);
    let mut sources: Vec<PathBuf> = std::fs::read_dir(data("upstream"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    sources.sort();
    assert_eq!(sources.len(), 12, "{sources:?}");
    for source in &sources {
        let name = source.file_stem().unwrap().to_str().unwrap().to_owned();
        let out = convert(&socket, std::slice::from_ref(source), &[]);
        if name.contains("launch-template") {
            // Its launch template supplied the security groups: nothing valid can be written.
            assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out.stderr));
            assert!(out.stdout.is_empty());
            assert!(
                text(&out.stderr).contains("AWSNodeTemplate/default: spec.securityGroupSelector"),
                "{}",
                text(&out.stderr)
            );
        } else {
            assert!(out.status.success(), "{name}: {}", text(&out.stderr));
            let yaml = text(&out.stdout);
            assert!(
                !yaml.contains("v1alpha") && !yaml.contains("karpenter.k8s.aws/v1beta1"),
                "{name}: every Karpenter object is v1:\n{yaml}"
            );
        }
        check(&name, &out);
    }
}

/// upstream's karpenter-convert test Provisioner (kubelet settings, `providerRef: default`)
/// with its AWSNodeTemplate (`default`): v1 moved kubelet to the node class, so the class gets
/// the Provisioner's settings; `--cluster-name` is the plugin's to use.
#[test]
fn a_provisioner_and_its_template_convert_together() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin(&socket, &[]);
    let out = convert(
        &socket,
        &[
            data("upstream/convert-provisioner.yaml"),
            data("upstream/convert-nodetemplate.yaml"),
        ],
        &["-o", "json", "--cluster-name", "demo"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let class = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "EC2NodeClass")
        .expect("the node class");
    assert_eq!(class["apiVersion"], "karpenter.k8s.aws/v1");
    assert_eq!(class["spec"]["kubelet"]["maxPods"], 20);
    assert_eq!(class["spec"]["kubelet"]["clusterDNS"][0], "10.0.1.100");
    // The template named images by id: v1 allows nothing beside an id.
    assert_eq!(
        class["spec"]["amiSelectorTerms"],
        serde_json::json!([{"id": "ami-123"}, {"id": "ami-456"}])
    );
    assert_eq!(class["spec"]["amiFamily"], "Bottlerocket");
    assert_eq!(
        class["spec"]["instanceProfile"],
        "KarpenterNodeInstanceProfile-demo"
    );
    check("combined", &out);
}

/// `--strict` refuses lossy conversions; a plugin that is not there is an error before
/// anything is written.
#[test]
fn strict_and_an_absent_plugin_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin(&socket, &[]);
    let out = convert(
        &socket,
        &[data("upstream/convert-nodetemplate.yaml")],
        &["--strict"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());

    let missing = dir.path().join("nobody.sock");
    let out = convert(&missing, &[data("upstream/v1beta1-spot.yaml")], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("nobody.sock"),
        "{}",
        text(&out.stderr)
    );
}
