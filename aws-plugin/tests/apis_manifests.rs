//! Upstream v1 EC2NodeClass manifests (from the Karpenter docs) load unchanged, keep their
//! values, and re-serialize with the same meaning; omitted fields take upstream's defaults.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use aws_plugin::apis::{
    AMIFamily, EC2NodeClass, InstanceStorePolicy, MetadataOptions,
    ec2nodeclass::{HttpTokens, InstanceMatchCriteria, Toggle, VolumeType},
};
use karpenter_api::testing::{self, Fixtures, assert_round_trips};
use serde_json::{Value, json};

const FIXTURES: Fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));

fn load(name: &str) -> (EC2NodeClass, Value) {
    FIXTURES.load(name)
}

fn errors(nc: &EC2NodeClass) -> Vec<String> {
    testing::messages(nc.validate())
}

#[test]
fn docs_ec2nodeclass_loads_with_its_values() {
    let (nc, input) = load("ec2nodeclass-docs.yaml");
    let spec = &nc.spec;

    let kubelet = spec.kubelet.as_ref().unwrap();
    assert_eq!(
        (kubelet.pods_per_core, kubelet.max_pods),
        (Some(2), Some(20))
    );
    assert_eq!(kubelet.system_reserved["ephemeral-storage"], "1Gi");
    assert_eq!(kubelet.kube_reserved["cpu"], "200m");
    assert_eq!(kubelet.eviction_hard["memory.available"], "5%");
    assert_eq!(kubelet.eviction_soft["nodefs.available"], "15%");
    assert_eq!(
        kubelet.eviction_soft_grace_period["nodefs.available"],
        "1m30s"
    );
    assert_eq!(kubelet.eviction_max_pod_grace_period, Some(60));
    assert_eq!(kubelet.image_gc_high_threshold_percent, Some(85));
    assert_eq!(kubelet.image_gc_low_threshold_percent, Some(80));
    assert_eq!(kubelet.cpu_cfs_quota, Some(true));
    assert_eq!(kubelet.cluster_dns, ["10.0.1.100"]);

    assert_eq!(spec.ami_family, Some(AMIFamily::Al2));
    assert_eq!(nc.ami_family(), Some(AMIFamily::Al2));
    assert_eq!(spec.subnet_selector_terms.len(), 2);
    let tags = spec.subnet_selector_terms[0].tags.as_ref().unwrap();
    assert_eq!(tags["karpenter.sh/discovery"], "${CLUSTER_NAME}");
    assert_eq!(tags["environment"], "test");
    assert_eq!(
        spec.subnet_selector_terms[1].id.as_deref(),
        Some("subnet-09fa4a0a8f233a921")
    );
    assert_eq!(
        spec.security_group_selector_terms[1].name.as_deref(),
        Some("my-security-group")
    );
    assert_eq!(
        spec.role.as_deref(),
        Some("KarpenterNodeRole-${CLUSTER_NAME}")
    );
    assert_eq!(
        spec.instance_profile.as_deref(),
        Some("KarpenterNodeInstanceProfile-${CLUSTER_NAME}")
    );
    let amis = &spec.ami_selector_terms;
    assert_eq!(amis.len(), 4);
    assert_eq!(amis[1].name.as_deref(), Some("my-ami"));
    assert_eq!(amis[2].id.as_deref(), Some("ami-123"));
    assert_eq!(
        amis[3].ssm_parameter.as_deref(),
        Some("my-custom-parameter")
    );
    assert_eq!(nc.alias(), None);
    assert_eq!(
        spec.capacity_reservation_selector_terms[1].id.as_deref(),
        Some("cr-123")
    );
    assert_eq!(spec.tags["team"], "team-a");
    assert_eq!(spec.metadata_options, MetadataOptions::default());

    let bdm = &spec.block_device_mappings[0];
    assert_eq!(bdm.device_name.as_deref(), Some("/dev/xvda"));
    assert!(!bdm.root_volume);
    let ebs = bdm.ebs.as_ref().unwrap();
    assert_eq!(
        ebs.volume_size.as_ref().map(|q| q.0.as_str()),
        Some("100Gi")
    );
    assert_eq!(ebs.volume_type, Some(VolumeType::Gp3));
    assert_eq!((ebs.iops, ebs.throughput), (Some(10000), Some(125)));
    assert_eq!(
        (ebs.encrypted, ebs.delete_on_termination),
        (Some(true), Some(true))
    );
    assert_eq!(
        ebs.kms_key_id.as_deref(),
        Some("1234abcd-12ab-34cd-56ef-1234567890ab")
    );
    assert_eq!(ebs.snapshot_id.as_deref(), Some("snap-0123456789"));

    assert_eq!(spec.instance_store_policy, Some(InstanceStorePolicy::Raid0));
    assert_eq!(spec.user_data.as_deref(), Some("echo \"Hello world\"\n"));
    assert_eq!(spec.detailed_monitoring, Some(true));
    assert_eq!(spec.associate_public_ip_address, Some(true));

    let status = nc.status.as_ref().unwrap();
    assert_eq!(status.subnets.len(), 6);
    assert_eq!(status.subnets[0].zone, "us-east-2b");
    assert_eq!(
        status.security_groups[1].name,
        "ControlPlaneSecurityGroup-1AQ073TSAAPW"
    );
    assert_eq!(
        status.amis[1].requirements[0].values.as_deref(),
        Some(&["arm64".to_owned()][..])
    );
    assert_eq!(
        status.capacity_reservations[0].instance_match_criteria,
        InstanceMatchCriteria::Targeted
    );
    assert_eq!(
        status.instance_profile,
        "${CLUSTER_NAME}-0123456778901234567789"
    );
    assert_eq!(status.conditions.len(), 5);

    assert_round_trips(&nc, &input);
    // The docs set both identities to show them; the API accepts exactly one.
    assert_eq!(
        errors(&nc),
        ["spec: must specify exactly one of ['role', 'instanceProfile']"]
    );
}

#[test]
fn alias_ec2nodeclass_loads_and_validates() {
    let (nc, input) = load("ec2nodeclass-alias.yaml");
    let alias = nc.alias().unwrap();
    assert_eq!((alias.family, alias.version), (AMIFamily::Al2023, "latest"));
    assert_eq!(nc.spec.ami_family, None);
    assert_eq!(nc.ami_family(), Some(AMIFamily::Al2023));
    let bdm = &nc.spec.block_device_mappings[0];
    assert!(bdm.root_volume);
    assert_eq!(nc.spec.metadata_options.http_put_response_hop_limit, 2);
    assert_eq!(nc.spec.metadata_options.http_tokens, HttpTokens::Required);
    let user_data = nc.spec.user_data.as_deref().unwrap();
    assert!(user_data.starts_with("MIME-Version: 1.0\n"));
    assert!(user_data.contains("shutdownGracePeriod: 30s"));
    assert!(user_data.ends_with("--//--\n"));
    assert_round_trips(&nc, &input);
    nc.validate().unwrap();
}

#[test]
fn omitted_fields_take_upstream_defaults() {
    let (nc, input) = load("ec2nodeclass-minimal.yaml");
    let out = assert_round_trips(&nc, &input);
    assert_eq!(
        out["spec"]["metadataOptions"],
        json!({
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        })
    );
    assert_eq!(nc.ami_family(), Some(AMIFamily::Bottlerocket));
    assert!(nc.spec.kubelet.is_none());
    assert!(nc.spec.block_device_mappings.is_empty());
    assert!(nc.spec.capacity_reservation_selector_terms.is_empty());
    nc.validate().unwrap();

    let partial: EC2NodeClass = serde_json::from_value({
        let mut v = input.clone();
        v["spec"]["metadataOptions"] = json!({ "httpTokens": "optional" });
        v
    })
    .unwrap();
    let options = &partial.spec.metadata_options;
    assert_eq!(options.http_tokens, HttpTokens::Optional);
    assert_eq!(options.http_endpoint, Toggle::Enabled);
    assert_eq!(options.http_protocol_ipv6, Toggle::Disabled);
    assert_eq!(options.http_put_response_hop_limit, 1);
}

/// Upstream v1.14's kubelet is a closed object: the API server prunes the fields it does not
/// type, and so does loading it here.
#[test]
fn unknown_kubelet_settings_are_pruned_as_upstream_v1_14_prunes_them() {
    let (nc, _input) = load("ec2nodeclass-kubelet-extra.yaml");
    let kubelet = nc.spec.kubelet.as_ref().unwrap();
    assert_eq!(kubelet.max_pods, Some(110));
    let out = serde_json::to_value(&nc).unwrap();
    assert_eq!(out["spec"]["kubelet"], json!({ "maxPods": 110 }));
    nc.validate().unwrap();
}

#[test]
fn unknown_fields_elsewhere_are_ignored_as_the_api_server_prunes_them() {
    let mut manifest: Value = FIXTURES.yaml("ec2nodeclass-minimal.yaml");
    manifest["spec"]["futureField"] = json!(true);
    let nc: EC2NodeClass = serde_json::from_value(manifest).unwrap();
    assert!(
        serde_json::to_value(&nc).unwrap()["spec"]
            .get("futureField")
            .is_none()
    );
}

#[test]
fn malformed_values_fail_to_load() {
    let mut manifest: Value = FIXTURES.yaml("ec2nodeclass-minimal.yaml");
    manifest["spec"]["amiFamily"] = json!("Ubuntu");
    let err = serde_json::from_value::<EC2NodeClass>(manifest).unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `Ubuntu`"),
        "{err}"
    );
}
