use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Taint;

use super::*;

struct Fixture {
    cluster: ClusterSettings,
    kubelet: KubeletConfiguration,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        time_added: None,
    }
}

fn string_map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn fixture() -> Fixture {
    Fixture {
        cluster: ClusterSettings {
            name: "test-cluster".into(),
            endpoint: "https://test-cluster".into(),
            ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
            cidr: Some("10.100.0.0/16".into()),
        },
        kubelet: KubeletConfiguration {
            cluster_dns: vec!["10.0.100.10".into()],
            kube_reserved: string_map(&[("memory", "1Gi"), ("cpu", "100m")]),
            eviction_hard: string_map(&[("memory.available", "5%")]),
            ..KubeletConfiguration::default()
        },
        labels: string_map(&[
            ("testing/cluster", "unspecified"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/capacity-type", "on-demand"),
        ]),
        // Not in order: the output sorts them.
        taints: vec![
            taint("karpenter.sh/unregistered", None, "NoExecute"),
            taint("dedicated", Some("gpu"), "NoSchedule"),
        ],
    }
}

impl Fixture {
    /// What `family` renders with `user_data` and this fixture's settings.
    fn rendered(&self, family: AMIFamily, user_data: Option<&str>) -> String {
        render(&self.input(family, user_data)).unwrap()
    }

    fn input<'a>(&'a self, family: AMIFamily, user_data: Option<&'a str>) -> Bootstrap<'a> {
        Bootstrap {
            family,
            cluster: &self.cluster,
            user_data,
            kubelet: Some(&self.kubelet),
            max_pods: Some(110),
            labels: &self.labels,
            taints: &self.taints,
        }
    }
}

const KARPENTER_NODE_CONFIG: &str = r#"--//
Content-Type: application/node.eks.aws

# Karpenter Generated NodeConfig
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
metadata: {}
spec:
  cluster:
    apiServerEndpoint: https://test-cluster
    certificateAuthority: Y2EtYnVuZGxlCg==
    cidr: 10.100.0.0/16
    name: test-cluster
  containerd: {}
  instance:
    localStorage: {}
  kubelet:
    config:
      clusterDNS:
      - 10.0.100.10
      evictionHard:
        memory.available: 5%
      kubeReserved:
        cpu: 100m
        memory: 1Gi
      maxPods: 110
      registerWithTaints:
      - effect: NoSchedule
        key: dedicated
        value: gpu
      - effect: NoExecute
        key: karpenter.sh/unregistered
    flags:
    - --node-labels="karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,testing/cluster=unspecified"

--//--
"#;

const MIME_HEADER: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n";

/// Asserts that AL2023 renders `user_data` as a MIME document of `parts` and then Karpenter's
/// node config.
fn assert_al2023_parts(user_data: &str, parts: &str) {
    assert_eq!(
        fixture().rendered(AMIFamily::Al2023, Some(user_data)),
        format!("{MIME_HEADER}{parts}{KARPENTER_NODE_CONFIG}")
    );
}

#[test]
fn al2023_puts_the_user_script_before_karpenters_node_config() {
    let script = "#!/bin/bash\necho \"Hello, AL2023!\"\n";
    assert_al2023_parts(
        script,
        "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Hello, AL2023!\"\n\n",
    );
}

#[test]
fn al2023_merges_the_parts_of_mime_user_data() {
    // Upstream's `al2023_mime_userdata_input.golden`: its last boundary has no closing `--`.
    let user_data = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 42\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Hello, AL2023!\"\n--//\n";
    assert_al2023_parts(
        user_data,
        "--//\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 42\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Hello, AL2023!\"\n",
    );
}

#[test]
fn al2023_types_a_yaml_user_data_as_a_node_config() {
    let user_data = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 42\n";
    assert_al2023_parts(
        user_data,
        &format!("--//\nContent-Type: application/node.eks.aws\n\n{user_data}\n"),
    );
}

#[test]
fn al2023_with_nothing_but_the_cluster() {
    let cluster = ClusterSettings {
        name: "c".into(),
        endpoint: "https://c".into(),
        ca_bundle: None,
        cidr: Some("fd00::/108".into()),
    };
    let labels = BTreeMap::new();
    let input = Bootstrap {
        family: AMIFamily::Al2023,
        cluster: &cluster,
        user_data: None,
        kubelet: None,
        max_pods: None,
        labels: &labels,
        taints: &[],
    };
    assert_eq!(
        render(&input).unwrap(),
        format!(
            "{MIME_HEADER}--//\nContent-Type: application/node.eks.aws\n\n# Karpenter Generated NodeConfig\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nmetadata: {{}}\nspec:\n  cluster:\n    apiServerEndpoint: https://c\n    cidr: fd00::/108\n    name: c\n  containerd: {{}}\n  instance:\n    localStorage: {{}}\n  kubelet: {{}}\n\n--//--\n"
        )
    );
}

#[test]
fn al2023_passes_the_node_class_kubelet_settings() {
    let mut fixture = fixture();
    fixture.kubelet.max_pods = Some(58);
    fixture.kubelet.cpu_cfs_quota = Some(false);
    let text = fixture.rendered(AMIFamily::Al2023, None);
    // The node class's maxPods wins over the ENI-limited one.
    assert!(text.contains("      maxPods: 58\n"), "{text}");
    assert!(text.contains("      cpuCFSQuota: false\n"), "{text}");
}

#[test]
fn al2023_needs_the_service_cidr_and_a_base64_ca() {
    let mut fixture = fixture();
    fixture.cluster.cidr = None;
    let error = render(&fixture.input(AMIFamily::Al2023, None)).unwrap_err();
    assert!(
        matches!(error, BootstrapError::MissingClusterCidr),
        "{error}"
    );
    assert!(error.to_string().contains("--cluster-cidr"));

    let mut fixture = self::fixture();
    fixture.cluster.ca_bundle = Some("not base64!".into());
    let error = render(&fixture.input(AMIFamily::Al2023, None)).unwrap_err();
    assert!(
        matches!(error, BootstrapError::InvalidCaBundle(_)),
        "{error}"
    );
}

#[test]
fn invalid_mime_user_data_names_spec_user_data() {
    let fixture = fixture();
    for family in [AMIFamily::Al2023, AMIFamily::Al2] {
        let error =
            render(&fixture.input(family, Some("Content-Type: text/plain\n\nhello"))).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, BootstrapError::InvalidMime { .. }),
            "{message}"
        );
        assert!(
            message.starts_with("spec.userData is not a valid MIME"),
            "{message}"
        );
        assert!(message.contains(family.as_str()), "{message}");
    }
}

#[test]
fn user_data_cannot_hold_karpenters_boundary() {
    let fixture = fixture();
    for family in [AMIFamily::Al2023, AMIFamily::Al2] {
        let error = render(&fixture.input(family, Some("echo a\n--//\necho b\n"))).unwrap_err();
        assert!(
            matches!(error, BootstrapError::BoundaryInUserData),
            "{error}"
        );
    }
}

const AL2_USER_PART: &str = "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Running custom user data script\"\n\n";

const AL2_BOOTSTRAP_PART: &str = r#"--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash -xe
exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1
/etc/eks/bootstrap.sh 'test-cluster' --apiserver-endpoint 'https://test-cluster' --b64-cluster-ca 'Y2EtYnVuZGxlCg==' \
--dns-cluster-ip '10.0.100.10' \
--use-max-pods false \
--kubelet-extra-args '--node-labels="karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,testing/cluster=unspecified" --register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=110 --kube-reserved="cpu=100m,memory=1Gi" --eviction-hard="memory.available<5%"'
--//--
"#;

#[test]
fn al2_runs_the_user_script_then_bootstrap_sh() {
    let fixture = fixture();
    let script = "#!/bin/bash\necho \"Running custom user data script\"\n";
    assert_eq!(
        fixture.rendered(AMIFamily::Al2, Some(script)),
        format!("{MIME_HEADER}{AL2_USER_PART}{AL2_BOOTSTRAP_PART}")
    );
    assert_eq!(
        fixture.rendered(AMIFamily::Al2, None),
        format!("{MIME_HEADER}{AL2_BOOTSTRAP_PART}")
    );
}

#[test]
fn al2_merges_the_parts_of_mime_user_data() {
    let fixture = fixture();
    // Upstream's `al2_userdata_content_type_first_input.golden`, with CRLF line ends.
    let user_data = "Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\nMIME-Version: 1.0\r\n\r\n--BOUNDARY\r\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\r\n\r\n#!/bin/bash\r\necho \"Running custom user data script\"\r\n\r\n--BOUNDARY--";
    assert_eq!(
        fixture.rendered(AMIFamily::Al2, Some(user_data)),
        format!("{MIME_HEADER}{AL2_USER_PART}{AL2_BOOTSTRAP_PART}")
    );
}

#[test]
fn al2_writes_every_kubelet_flag_and_ipv6() {
    let mut fixture = fixture();
    fixture.kubelet = KubeletConfiguration {
        cluster_dns: vec!["fd00::a".into()],
        max_pods: Some(20),
        pods_per_core: Some(4),
        system_reserved: string_map(&[("cpu", "1")]),
        eviction_soft: string_map(&[("memory.available", "10%"), ("nodefs.available", "15%")]),
        eviction_soft_grace_period: string_map(&[
            ("memory.available", "1m"),
            ("nodefs.available", "2m"),
        ]),
        eviction_max_pod_grace_period: Some(60),
        image_gc_high_threshold_percent: Some(85),
        image_gc_low_threshold_percent: Some(80),
        cpu_cfs_quota: Some(false),
        ..KubeletConfiguration::default()
    };
    fixture.labels.clear();
    fixture.taints.clear();
    fixture.cluster.ca_bundle = None;
    let text = fixture.rendered(AMIFamily::Al2, None);
    let expected = r#"/etc/eks/bootstrap.sh 'test-cluster' --apiserver-endpoint 'https://test-cluster' \
--ip-family ipv6 \
--dns-cluster-ip 'fd00::a' \
--use-max-pods false \
--kubelet-extra-args '--max-pods=20 --pods-per-core=4 --system-reserved="cpu=1" --eviction-soft="memory.available<10%,nodefs.available<15%" --eviction-soft-grace-period="memory.available=1m,nodefs.available=2m" --eviction-max-pod-grace-period=60 --image-gc-high-threshold=85 --image-gc-low-threshold=80 --cpu-cfs-quota=false'
--//--
"#;
    assert!(text.ends_with(expected), "{text}");
}

#[test]
fn al2_without_kubelet_settings_leaves_max_pods_to_bootstrap_sh() {
    let cluster = ClusterSettings {
        name: "c".into(),
        endpoint: "https://c".into(),
        ..ClusterSettings::default()
    };
    let labels = BTreeMap::new();
    let input = Bootstrap {
        family: AMIFamily::Al2,
        cluster: &cluster,
        user_data: Some(""),
        kubelet: None,
        max_pods: None,
        labels: &labels,
        taints: &[],
    };
    assert!(
        render(&input).unwrap().ends_with(
            "2>&1\n/etc/eks/bootstrap.sh 'c' --apiserver-endpoint 'https://c'\n--//--\n"
        )
    );
}

const BOTTLEROCKET_USER_DATA: &str = r#"[settings.kubernetes]
"unknown-setting" = "unknown"
api-server = 'replaceme'
cloud-provider = 'external'
cluster-certificate = "replaceme"
cluster-name = 'replaceme'
max-pods = 9999999999 # replaceme

[settings.kubernetes.eviction-hard]
"memory.available" = "12%"

[settings.kubernetes.node-labels]
"custom-node-label" = "custom"
"testing/cluster" = "should-be-overridden"

[settings.kubernetes.node-taints]
"replace" = ["me:Schedule"]

[settings.network]
hostname = "test.local"
https-proxy = "1.2.3.4:8080"
no-proxy = ["localhost", "127.0.0.1"]
hosts = [["10.0.0.0", ["test.example.com", "test1.example.com"]]]

[settings.ntp]
time-servers = ["169.254.169.123"]
"#;

#[test]
fn bottlerocket_merges_karpenters_settings_into_the_users() {
    let fixture = fixture();
    let expected = r#"[settings]
[settings.kubernetes]
api-server = 'https://test-cluster'
cloud-provider = 'external'
cluster-certificate = 'Y2EtYnVuZGxlCg=='
cluster-dns-ip = '10.0.100.10'
cluster-name = 'test-cluster'
max-pods = 110
unknown-setting = 'unknown'

[settings.kubernetes.eviction-hard]
'memory.available' = '5%'

[settings.kubernetes.kube-reserved]
cpu = '100m'
memory = '1Gi'

[settings.kubernetes.node-labels]
custom-node-label = 'custom'
'karpenter.sh/capacity-type' = 'on-demand'
'karpenter.sh/nodepool' = 'default'
'testing/cluster' = 'unspecified'

[settings.kubernetes.node-taints]
dedicated = ['gpu:NoSchedule']
'karpenter.sh/unregistered' = [':NoExecute']

[settings.network]
hostname = 'test.local'
hosts = [['10.0.0.0', ['test.example.com', 'test1.example.com']]]
https-proxy = '1.2.3.4:8080'
no-proxy = ['localhost', '127.0.0.1']

[settings.ntp]
time-servers = ['169.254.169.123']
"#;
    assert_eq!(
        fixture.rendered(AMIFamily::Bottlerocket, Some(BOTTLEROCKET_USER_DATA)),
        expected
    );
}

#[test]
fn bottlerocket_keeps_user_kubelet_settings_the_node_class_leaves_unset() {
    let mut fixture = fixture();
    fixture.kubelet = KubeletConfiguration {
        cluster_dns: vec!["10.0.100.10".into(), "fd00::a".into()],
        image_gc_high_threshold_percent: Some(85),
        image_gc_low_threshold_percent: Some(80),
        cpu_cfs_quota: Some(false),
        ..KubeletConfiguration::default()
    };
    fixture.labels.clear();
    fixture.taints.clear();
    let user_data = "settings.kubernetes.eviction-hard = { 'memory.available' = '12%' }\n";
    let input = Bootstrap {
        max_pods: None,
        ..fixture.input(AMIFamily::Bottlerocket, Some(user_data))
    };
    assert_eq!(
        render(&input).unwrap(),
        r#"[settings]
[settings.kubernetes]
api-server = 'https://test-cluster'
cluster-certificate = 'Y2EtYnVuZGxlCg=='
cluster-dns-ip = ['10.0.100.10', 'fd00::a']
cluster-name = 'test-cluster'
cpu-cfs-quota-enforced = false
image-gc-high-threshold-percent = '85'
image-gc-low-threshold-percent = '80'

[settings.kubernetes.eviction-hard]
'memory.available' = '12%'
"#
    );
}

#[test]
fn invalid_bottlerocket_toml_names_spec_user_data() {
    let fixture = fixture();
    let cases = [
        ("[settings.kubernetes\nmax-pods = 1\n", "TOML parse error"),
        ("settings = 'x'\n", "`settings` must be a table"),
        (
            "[settings]\nkubernetes = 5\n",
            "`settings.kubernetes` must be a table",
        ),
        (
            "[settings.kubernetes]\nnode-labels = ['a']\n",
            "`settings.kubernetes.node-labels` must be a table",
        ),
    ];
    for (user_data, reason) in cases {
        let error = render(&fixture.input(AMIFamily::Bottlerocket, Some(user_data))).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, BootstrapError::InvalidToml { .. }),
            "{message}"
        );
        assert!(
            message.starts_with("spec.userData is not valid TOML for amiFamily Bottlerocket: "),
            "{message}"
        );
        assert!(message.contains(reason), "{user_data:?}: {message}");
    }
}

#[test]
fn windows_runs_the_user_script_then_start_eks_bootstrap() {
    let fixture = fixture();
    let script = "Write-Host \"Running custom user data script\"\nWrite-Host \"Finished running custom user data script\"\n";
    let expected = r#"<powershell>
Write-Host "Running custom user data script"
Write-Host "Finished running custom user data script"
[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\Amazon\EKS\Start-EKSBootstrap.ps1"
& $EKSBootstrapScriptFile -EKSClusterName 'test-cluster' -APIServerEndpoint 'https://test-cluster' -Base64ClusterCA 'Y2EtYnVuZGxlCg==' -KubeletExtraArgs '--node-labels="karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,testing/cluster=unspecified" --register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=110 --kube-reserved="cpu=100m,memory=1Gi" --eviction-hard="memory.available<5%"' -DNSClusterIP '10.0.100.10'
</powershell>"#;
    for family in [
        AMIFamily::Windows2019,
        AMIFamily::Windows2022,
        AMIFamily::Windows2025,
    ] {
        assert_eq!(fixture.rendered(family, Some(script)), expected);
    }
}

#[test]
fn custom_is_the_user_data_verbatim() {
    let fixture = fixture();
    let user_data = "#!/bin/bash\r\necho 'mine'\n";
    let input = fixture.input(AMIFamily::Custom, Some(user_data));
    assert_eq!(user_data_text(&input), user_data);
    assert_eq!(user_data_text(&fixture.input(AMIFamily::Custom, None)), "");
}

fn user_data_text(input: &Bootstrap<'_>) -> String {
    let encoded = user_data(input).unwrap();
    String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap()
}

#[test]
fn user_data_is_the_rendered_text_in_base64() {
    let fixture = fixture();
    for family in [
        AMIFamily::Al2023,
        AMIFamily::Al2,
        AMIFamily::Bottlerocket,
        AMIFamily::Windows2022,
    ] {
        let input = fixture.input(family, None);
        assert_eq!(user_data_text(&input), render(&input).unwrap());
    }
}

#[test]
fn output_does_not_depend_on_the_order_taints_come_in() {
    let fixture = fixture();
    let mut reversed = fixture.taints.clone();
    reversed.reverse();
    // A duplicate changes nothing either.
    reversed.push(reversed[0].clone());
    let cases = [
        (AMIFamily::Al2023, "echo hi"),
        (AMIFamily::Al2, "echo hi"),
        (AMIFamily::Bottlerocket, BOTTLEROCKET_USER_DATA),
        (AMIFamily::Windows2019, "Write-Host hi"),
    ];
    for (family, script) in cases {
        let first = user_data(&fixture.input(family, Some(script))).unwrap();
        let again = user_data(&fixture.input(family, Some(script))).unwrap();
        let reordered = user_data(&Bootstrap {
            taints: &reversed,
            ..fixture.input(family, Some(script))
        })
        .unwrap();
        assert_eq!(first, again, "{family:?}");
        assert_eq!(first, reordered, "{family:?}");
    }
}

#[test]
fn labels_and_taints_are_quoted_for_the_shell_they_land_in() {
    let mut fixture = fixture();
    fixture.cluster.name = "it's".into();
    fixture.labels = string_map(&[("z", "last"), ("a", "it's \"q\" \\")]);
    fixture.taints = vec![taint("k", Some("v'\u{2019}"), "NoSchedule")];
    fixture.kubelet = KubeletConfiguration::default();

    let al2 = fixture.rendered(AMIFamily::Al2, None);
    assert!(al2.contains(r#"/etc/eks/bootstrap.sh 'it'\''s' "#), "{al2}");
    assert!(
        al2.contains(
            r#"--kubelet-extra-args '--node-labels="a=it'\''s \"q\" \\,z=last" --register-with-taints="k=v'\''’:NoSchedule" --max-pods=110'"#
        ),
        "{al2}"
    );

    let windows = fixture.rendered(AMIFamily::Windows2022, None);
    assert!(windows.contains("-EKSClusterName 'it''s' "), "{windows}");
    assert!(
        windows.contains(
            r#"-KubeletExtraArgs '--node-labels="a=it''s \"q\" \\,z=last" --register-with-taints="k=v''’’:NoSchedule" --max-pods=110'"#
        ),
        "{windows}"
    );

    let al2023 = fixture.rendered(AMIFamily::Al2023, None);
    // Plain YAML: quotes and backslashes in it are literal.
    assert!(
        al2023.contains(
            r#"    - --node-labels="a=it's \"q\" \\,z=last"
"#
        ),
        "{al2023}"
    );
    assert!(al2023.contains("        value: v'’\n"), "{al2023}");

    let bottlerocket = fixture.rendered(AMIFamily::Bottlerocket, None);
    assert!(
        bottlerocket.contains(
            "[settings.kubernetes.node-labels]\na = \"it's \\\"q\\\" \\\\\"\nz = 'last'\n"
        ),
        "{bottlerocket}"
    );
    assert!(
        bottlerocket.contains("k = [\"v'’:NoSchedule\"]\n"),
        "{bottlerocket}"
    );
}

#[test]
fn go_quote_escapes_like_go() {
    assert_eq!(go_quote("a=b,c=d"), r#""a=b,c=d""#);
    assert_eq!(
        go_quote("q\"b\\\n\t\u{1}\u{85}é"),
        r#""q\"b\\\n\t\x01\u0085é""#
    );
}
