//! core-svc reaching a live aws-plugin over its Unix socket, as the two sidecars of one pod do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::process::Command;

use integration_tests::{run_ok, start_aws_plugin, workspace_binary};

#[test]
fn core_svc_handshakes_with_aws_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin(&socket, &[]);
    let answer = run_ok(
        Command::new(workspace_binary("core-svc"))
            .arg("plugin-info")
            .arg("--plugin-endpoint")
            .arg(format!("unix://{}", socket.display())),
    );
    assert_eq!(
        answer.trim(),
        "plugin karpenter.k8s.aws 0.1.0 (API 1.0); node classes: karpenter.k8s.aws/v1 EC2NodeClass; optional RPCs: none; ready: yes"
    );
}

#[test]
fn core_svc_says_plainly_when_the_plugin_is_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(workspace_binary("core-svc"))
        .args(["plugin-info", "--plugin-endpoint"])
        .arg(format!("unix://{}/absent.sock", dir.path().display()))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("GetPluginInfo failed"), "{log}");
}

#[test]
fn aws_plugin_refuses_to_start_without_a_region() {
    let output = Command::new(workspace_binary("aws-plugin"))
        .args(["--endpoint", "unix:///nonexistent/never-bound.sock"])
        .env_clear()
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("no AWS region: set AWS_REGION"), "{log}");
}

#[test]
fn bad_flags_are_refused_with_the_reason() {
    let output = Command::new(workspace_binary("aws-plugin"))
        .args(["--endpoint", "/run/plugin.sock"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("must start with unix:// or tcp://"),
        "{message}"
    );
}
