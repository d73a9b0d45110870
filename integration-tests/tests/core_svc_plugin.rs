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
        "plugin karpenter.k8s.aws 0.1.0 (API 1.0); node classes: karpenter.k8s.aws/v1 EC2NodeClass; optional RPCs: ResolveNodeClass, Get, List, IsDrifted, GetRepairPolicies, ConvertNodeClass; labels: 29 in domains [karpenter.k8s.aws]; ready: yes"
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
        .args(["--cluster-name", "integration"])
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

/// A CA and, signed by it, a server certificate for 127.0.0.1 and a client certificate.
fn write_pki(dir: &std::path::Path) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    std::fs::write(
        dir.join("ca.pem"),
        ca_params.self_signed(&ca_key).unwrap().pem(),
    )
    .unwrap();
    let ca = Issuer::new(ca_params, ca_key);
    for (name, san) in [("server", "127.0.0.1"), ("client", "core-svc")] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![san.to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }
}

#[test]
fn core_svc_reaches_aws_plugin_over_tcp_with_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let file = |name: &str| dir.path().join(name).display().to_string();
    // A free port: bound by the system, released, then taken by the plugin.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("tcp://127.0.0.1:{port}");

    let mut plugin = integration_tests::ChildGuard::spawn(
        Command::new(workspace_binary("aws-plugin"))
            .args(["--endpoint", &endpoint, "--cluster-name", "integration"])
            .args([
                "--tls-cert-file",
                &file("server.pem"),
                "--tls-key-file",
                &file("server-key.pem"),
            ])
            .args(["--tls-client-ca-file", &file("ca.pem")])
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true"),
    );
    integration_tests::wait_for_port(port, std::time::Duration::from_secs(30), &mut plugin);

    let plugin_info = |client_identity: bool| {
        let mut command = Command::new(workspace_binary("core-svc"));
        command.args([
            "plugin-info",
            "--plugin-endpoint",
            &endpoint,
            "--plugin-tls-ca-file",
            &file("ca.pem"),
        ]);
        if client_identity {
            command.args([
                "--plugin-tls-cert-file",
                &file("client.pem"),
                "--plugin-tls-key-file",
                &file("client-key.pem"),
            ]);
        }
        command.output().unwrap()
    };
    let trusted = plugin_info(true);
    assert!(trusted.status.success(), "{trusted:?}");
    assert!(String::from_utf8_lossy(&trusted.stdout).starts_with("plugin karpenter.k8s.aws"));
    let anonymous = plugin_info(false);
    assert!(
        !anonymous.status.success(),
        "a client without a certificate must be refused: {anonymous:?}"
    );
}
