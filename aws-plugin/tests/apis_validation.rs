//! Each rule of the EC2NodeClass CRD, enforced in Rust: one invalid manifest per rule, with the
//! exact message.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use aws_plugin::apis::{EC2NodeClass, patterns};
use karpenter_api::testing::{self, Fixtures};

const FIXTURES: Fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));

fn errors(patch_yaml: &str) -> Vec<String> {
    let manifest = FIXTURES.patched("ec2nodeclass-minimal.yaml", patch_yaml);
    let nc: EC2NodeClass = serde_json::from_value(manifest).unwrap();
    testing::messages(nc.validate())
}

#[track_caller]
fn check(patch_yaml: &str, expected: &[&str]) {
    assert_eq!(errors(patch_yaml), expected, "patch:\n{patch_yaml}");
}

fn warnings(patch_yaml: &str) -> Vec<String> {
    let manifest = FIXTURES.patched("ec2nodeclass-minimal.yaml", patch_yaml);
    let nc: EC2NodeClass = serde_json::from_value(manifest).unwrap();
    nc.warnings().iter().map(ToString::to_string).collect()
}

/// Upstream's mutual-exclusion rules on subnet, security group and capacity reservation terms
/// read `!self.all(x, ...)`: refused only when every term mixes; a term that mixes beside
/// others that do not is admitted, as upstream admits it, with a warning.
#[test]
fn selector_terms_mixing_id_are_refused_only_when_every_term_does() {
    let cases = [
        (
            "spec: {subnetSelectorTerms: [{tags: {a: b}}, {id: subnet-123, tags: {a: b}}]}",
            vec!["spec.subnetSelectorTerms[1]: 'id' is mutually exclusive with other fields"],
        ),
        (
            "spec: {securityGroupSelectorTerms: [{tags: {a: b}}, {id: sg-123, name: web}]}",
            vec![
                "spec.securityGroupSelectorTerms[1]: 'id' is mutually exclusive with other fields",
                "spec.securityGroupSelectorTerms[1]: 'name' is mutually exclusive with other fields",
            ],
        ),
        (
            "spec: {capacityReservationSelectorTerms: [{tags: {a: b}}, {id: cr-123, ownerID: '012345678901'}]}",
            vec![
                "spec.capacityReservationSelectorTerms[1]: 'id' is mutually exclusive with other fields",
            ],
        ),
    ];
    for (patch, expected) in cases {
        check(patch, &[]);
        assert_eq!(warnings(patch), expected, "patch:\n{patch}");
    }
    check(
        "spec: {subnetSelectorTerms: [{id: subnet-1, tags: {a: b}}, {id: subnet-2, tags: {c: d}}]}",
        &[
            "spec.subnetSelectorTerms[0]: 'id' is mutually exclusive with other fields",
            "spec.subnetSelectorTerms[1]: 'id' is mutually exclusive with other fields",
        ],
    );
    assert!(warnings("{}").is_empty());
}

#[test]
fn valid_base() {
    check("{}", &[]);
}

#[test]
fn subnet_selector_terms() {
    check(
        "spec: {subnetSelectorTerms: []}",
        &["spec.subnetSelectorTerms: subnetSelectorTerms cannot be empty"],
    );
    check(
        "spec: {subnetSelectorTerms: [{}]}",
        &["spec.subnetSelectorTerms[0]: expected at least one, got none, ['tags', 'id']"],
    );
    check(
        "spec: {subnetSelectorTerms: [{id: subnet-123, tags: {a: b}}]}",
        &["spec.subnetSelectorTerms[0]: 'id' is mutually exclusive with other fields"],
    );
    check(
        "spec: {subnetSelectorTerms: [{id: sg-123}]}",
        &[&format!(
            "spec.subnetSelectorTerms[0].id: \"sg-123\" does not match {}",
            patterns::SUBNET_ID
        )],
    );
    check(
        "spec: {subnetSelectorTerms: [{tags: {a: ''}}]}",
        &["spec.subnetSelectorTerms[0].tags: empty tag keys or values aren't supported"],
    );
    let tags: Vec<String> = (0..21).map(|i| format!("t{i}: v")).collect();
    check(
        &format!(
            "spec: {{subnetSelectorTerms: [{{tags: {{{}}}}}]}}",
            tags.join(", ")
        ),
        &["spec.subnetSelectorTerms[0].tags: must have at most 20 entries"],
    );
    let terms: Vec<&str> = (0..31).map(|_| "{id: subnet-1}").collect();
    check(
        &format!("spec: {{subnetSelectorTerms: [{}]}}", terms.join(", ")),
        &["spec.subnetSelectorTerms: must have at most 30 items"],
    );
}

#[test]
fn security_group_selector_terms() {
    check(
        "spec: {securityGroupSelectorTerms: []}",
        &["spec.securityGroupSelectorTerms: securityGroupSelectorTerms cannot be empty"],
    );
    check(
        "spec: {securityGroupSelectorTerms: [{}]}",
        &[
            "spec.securityGroupSelectorTerms[0]: expected at least one, got none, ['tags', 'id', 'name']",
        ],
    );
    check(
        "spec: {securityGroupSelectorTerms: [{id: sg-1, name: web}]}",
        &[
            "spec.securityGroupSelectorTerms[0]: 'id' is mutually exclusive with other fields",
            "spec.securityGroupSelectorTerms[0]: 'name' is mutually exclusive with other fields",
        ],
    );
    check(
        "spec: {securityGroupSelectorTerms: [{name: web, tags: {a: b}}]}",
        &["spec.securityGroupSelectorTerms[0]: 'name' is mutually exclusive with other fields"],
    );
    check(
        "spec: {securityGroupSelectorTerms: [{id: subnet-1}]}",
        &[&format!(
            "spec.securityGroupSelectorTerms[0].id: \"subnet-1\" does not match {}",
            patterns::SECURITY_GROUP_ID
        )],
    );
}

#[test]
fn capacity_reservation_selector_terms() {
    check(
        "spec: {capacityReservationSelectorTerms: [{tags: {a: b}, ownerID: '012345678901'}]}",
        &[],
    );
    check(
        "spec: {capacityReservationSelectorTerms: [{instanceMatchCriteria: open}]}",
        &[],
    );
    check(
        "spec: {capacityReservationSelectorTerms: [{ownerID: '012345678901'}]}",
        &[
            "spec.capacityReservationSelectorTerms[0]: expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
        ],
    );
    check(
        "spec: {capacityReservationSelectorTerms: [{id: cr-123, ownerID: '012345678901'}]}",
        &["spec.capacityReservationSelectorTerms[0]: 'id' is mutually exclusive with other fields"],
    );
    check(
        "spec: {capacityReservationSelectorTerms: [{id: cr-ABC}]}",
        &[&format!(
            "spec.capacityReservationSelectorTerms[0].id: \"cr-ABC\" does not match {}",
            patterns::CAPACITY_RESERVATION_ID
        )],
    );
    check(
        "spec: {capacityReservationSelectorTerms: [{tags: {a: b}, ownerID: '1234'}]}",
        &[&format!(
            "spec.capacityReservationSelectorTerms[0].ownerID: \"1234\" does not match {}",
            patterns::ACCOUNT_ID
        )],
    );
}

#[test]
fn placement_group_selector() {
    check("spec: {placementGroupSelector: {name: my-group}}", &[]);
    check("spec: {placementGroupSelector: {id: pg-0123abcd}}", &[]);
    check(
        "spec: {placementGroupSelector: {}}",
        &["spec.placementGroupSelector: expected at least one, got none, ['name', 'id']"],
    );
    check(
        "spec: {placementGroupSelector: {name: my-group, id: pg-0123abcd}}",
        &["spec.placementGroupSelector: 'name' and 'id' are mutually exclusive"],
    );
    check(
        "spec: {placementGroupSelector: {name: ''}}",
        &["spec.placementGroupSelector.name: name cannot be empty"],
    );
    check(
        "spec: {placementGroupSelector: {id: my-group}}",
        &[&format!(
            "spec.placementGroupSelector.id: \"my-group\" does not match {}",
            patterns::PLACEMENT_GROUP_ID
        )],
    );
}

#[test]
fn cpu_options() {
    check("spec: {cpuOptions: {nestedVirtualization: enabled}}", &[]);
    check("spec: {cpuOptions: {nestedVirtualization: disabled}}", &[]);
    check("spec: {cpuOptions: {}}", &[]);
}

#[test]
fn ami_selector_terms() {
    check(
        "spec: {amiSelectorTerms: []}",
        &[
            "spec.amiSelectorTerms: must have at least one item",
            "spec.amiFamily: must specify amiFamily if amiSelectorTerms does not contain an alias",
        ],
    );
    check(
        "spec: {amiFamily: AL2023, amiSelectorTerms: [{owner: self}]}",
        &[
            "spec.amiSelectorTerms[0]: expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
        ],
    );
    check(
        "spec: {amiFamily: AL2023, amiSelectorTerms: [{id: ami-123, name: my-ami}]}",
        &["spec.amiSelectorTerms[0]: 'id' is mutually exclusive with other fields"],
    );
    check(
        "spec: {amiSelectorTerms: [{alias: al2023@latest, owner: self}]}",
        &["spec.amiSelectorTerms[0]: 'alias' is mutually exclusive with other fields"],
    );
    check(
        "spec: {amiSelectorTerms: [{alias: al2023@latest}, {name: my-ami}]}",
        &["spec.amiSelectorTerms: 'alias' is mutually exclusive with other amiSelectorTerms"],
    );
    check(
        "spec: {amiFamily: AL2023, amiSelectorTerms: [{id: image-1}]}",
        &[&format!(
            "spec.amiSelectorTerms[0].id: \"image-1\" does not match {}",
            patterns::AMI_ID
        )],
    );
    check(
        "spec: {amiFamily: Custom, amiSelectorTerms: [{name: my-ami, owner: self}, {ssmParameter: p}, {tags: {a: b}}]}",
        &[],
    );
}

#[test]
fn aliases() {
    for ok in [
        "al2@latest",
        "al2023@v20240807",
        "bottlerocket@v1.20.4",
        "windows2022@latest",
        "windows2025@latest",
    ] {
        check(
            &format!("spec: {{amiSelectorTerms: [{{alias: '{ok}'}}]}}"),
            &[],
        );
    }
    check(
        "spec: {amiSelectorTerms: [{alias: al2023}]}",
        &[
            "spec.amiSelectorTerms[0].alias: 'alias' is improperly formatted, must match the format 'family@version'",
        ],
    );
    check(
        "spec: {amiSelectorTerms: [{alias: ubuntu@latest}]}",
        &[
            "spec.amiSelectorTerms[0].alias: family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
        ],
    );
    check(
        "spec: {amiSelectorTerms: [{alias: windows2019@v1}]}",
        &["spec.amiSelectorTerms[0].alias: windows families may only specify version 'latest'"],
    );
    check(
        "spec: {amiSelectorTerms: [{alias: bottlerocket@v1.20.4-abcdefghijklmnop}]}",
        &["spec.amiSelectorTerms[0].alias: must be no more than 30 characters"],
    );
}

#[test]
fn ami_family_and_alias_agree() {
    check("spec: {amiFamily: Bottlerocket}", &[]);
    check("spec: {amiFamily: Custom}", &[]);
    check(
        "spec: {amiFamily: AL2023}",
        &[
            "spec.amiFamily: if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
        ],
    );
    check(
        "spec: {amiFamily: Bottlerocket, amiSelectorTerms: [{alias: al2@latest}]}",
        &["spec.amiFamily: if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias"],
    );
    check(
        "spec: {amiSelectorTerms: [{name: my-ami}]}",
        &["spec.amiFamily: must specify amiFamily if amiSelectorTerms does not contain an alias"],
    );
}

#[test]
fn role_xor_instance_profile() {
    check(
        "spec: {role: null}",
        &["spec: must specify exactly one of ['role', 'instanceProfile']"],
    );
    check(
        "spec: {instanceProfile: profile}",
        &["spec: must specify exactly one of ['role', 'instanceProfile']"],
    );
    check("spec: {role: null, instanceProfile: profile}", &[]);
    check("spec: {role: ''}", &["spec.role: role cannot be empty"]);
    check(
        "spec: {role: null, instanceProfile: ''}",
        &["spec.instanceProfile: instanceProfile cannot be empty"],
    );
}

#[test]
fn tags() {
    check("spec: {tags: {Name: my-node, team: a}}", &[]);
    check(
        "spec: {tags: {'': x}}",
        &["spec.tags: empty tag keys aren't supported"],
    );
    for (key, shown) in [
        ("eks:eks-cluster-name", "eks:eks-cluster-name"),
        ("kubernetes.io/cluster/test", "kubernetes.io/cluster/"),
        ("karpenter.sh/nodepool", "karpenter.sh/nodepool"),
        ("karpenter.sh/nodeclaim", "karpenter.sh/nodeclaim"),
        (
            "karpenter.k8s.aws/ec2nodeclass",
            "karpenter.k8s.aws/ec2nodeclass",
        ),
    ] {
        check(
            &format!("spec: {{tags: {{'{key}': x}}}}"),
            &[&format!(
                "spec.tags[{key:?}]: tag contains a restricted tag matching {shown}"
            )],
        );
    }
}

#[test]
fn kubelet_values_follow_upstream_v1_14_patterns() {
    check(
        "spec: {kubelet: {kubeReserved: {cpu: 100m, memory: 1Gi}, systemReserved: {ephemeral-storage: '1.5e9'}, evictionHard: {memory.available: 5%, nodefs.available: 10.5%, imagefs.available: 100Mi}}}",
        &[],
    );
    check(
        "spec: {kubelet: {kubeReserved: {memory: 1GB}}}",
        &[&format!(
            "spec.kubelet.kubeReserved[\"memory\"]: \"1GB\" does not match {}",
            patterns::RESERVED_QUANTITY.as_str()
        )],
    );
    check(
        "spec: {kubelet: {evictionHard: {memory.available: 120%}}}",
        &[&format!(
            "spec.kubelet.evictionHard[\"memory.available\"]: \"120%\" does not match {}",
            patterns::EVICTION_THRESHOLD.as_str()
        )],
    );
    check(
        "spec: {kubelet: {evictionSoft: {memory.available: lots}, evictionSoftGracePeriod: {memory.available: 1m}}}",
        &[&format!(
            "spec.kubelet.evictionSoft[\"memory.available\"]: \"lots\" does not match {}",
            patterns::EVICTION_THRESHOLD.as_str()
        )],
    );
}

#[test]
fn network_interfaces() {
    check(
        "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, {networkCardIndex: 1, deviceIndex: 0, interfaceType: efa-only}]}",
        &[],
    );
    check(
        "spec: {networkInterfaces: [{networkCardIndex: 1, deviceIndex: 0, interfaceType: efa-only}]}",
        &[
            "spec.networkInterfaces: networkInterfaces must include a primary interface with interfaceType='interface'",
        ],
    );
    let collide = "spec.networkInterfaces: networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card";
    check(
        "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, {networkCardIndex: 0, deviceIndex: 0, interfaceType: efa-only}]}",
        &[collide],
    );
    check(
        "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, {networkCardIndex: 1, deviceIndex: 0, interfaceType: efa-only}, {networkCardIndex: 1, deviceIndex: 1, interfaceType: efa-only}]}",
        &[collide],
    );
    check(
        "spec: {networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}, {networkCardIndex: -1, deviceIndex: 0, interfaceType: interface}]}",
        &["spec.networkInterfaces[1].networkCardIndex: must be greater than or equal to 0"],
    );
}

#[test]
fn kubelet() {
    check("spec: {kubelet: {maxPods: 0, podsPerCore: 0}}", &[]);
    check(
        "spec: {kubelet: {maxPods: -1}}",
        &["spec.kubelet.maxPods: must be greater than or equal to 0"],
    );
    check(
        "spec: {kubelet: {podsPerCore: -1}}",
        &["spec.kubelet.podsPerCore: must be greater than or equal to 0"],
    );
    check(
        "spec: {kubelet: {imageGCHighThresholdPercent: 101}}",
        &["spec.kubelet.imageGCHighThresholdPercent: must be less than or equal to 100"],
    );
    check(
        "spec: {kubelet: {imageGCHighThresholdPercent: 50, imageGCLowThresholdPercent: 50}}",
        &[
            "spec.kubelet: imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        ],
    );
    check(
        "spec: {kubelet: {systemReserved: {gpu: '1'}}}",
        &[
            "spec.kubelet.systemReserved[\"gpu\"]: valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']",
        ],
    );
    check(
        "spec: {kubelet: {kubeReserved: {cpu: '-100m'}}}",
        &[
            "spec.kubelet.kubeReserved[\"cpu\"]: kubeReserved value cannot be a negative resource quantity",
        ],
    );
    check(
        "spec: {kubelet: {evictionHard: {disk.available: 5%}}}",
        &[
            "spec.kubelet.evictionHard[\"disk.available\"]: valid keys for evictionHard are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
        ],
    );
    check(
        "spec: {kubelet: {evictionSoft: {memory.available: 1Gi}}}",
        &[
            "spec.kubelet.evictionSoft[\"memory.available\"]: evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
        ],
    );
    check(
        "spec: {kubelet: {evictionSoftGracePeriod: {memory.available: 1m}}}",
        &[
            "spec.kubelet.evictionSoftGracePeriod[\"memory.available\"]: evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
        ],
    );
}

#[test]
fn block_device_mappings() {
    check(
        "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 20Gi}}, {deviceName: /dev/xvdb, rootVolume: true, ebs: {snapshotID: snap-1}}]}",
        &["spec.blockDeviceMappings: must have only one blockDeviceMappings with rootVolume"],
    );
    check(
        "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeType: gp3}}]}",
        &["spec.blockDeviceMappings[0].ebs: snapshotID or volumeSize must be defined"],
    );
    check(
        "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 20Gi, volumeInitializationRate: 200}}]}",
        &[
            "spec.blockDeviceMappings[0].ebs: snapshotID must be set when volumeInitializationRate is set",
        ],
    );
    check(
        "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {snapshotID: snap-1, volumeInitializationRate: 50}}]}",
        &[
            "spec.blockDeviceMappings[0].ebs.volumeInitializationRate: must be greater than or equal to 100",
        ],
    );
    check(
        "spec: {blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 100Mi}}]}",
        &[&format!(
            "spec.blockDeviceMappings[0].ebs.volumeSize: \"100Mi\" does not match {}",
            patterns::VOLUME_SIZE
        )],
    );
    let many: Vec<&str> = (0..51).map(|_| "{deviceName: /dev/xvdb}").collect();
    check(
        &format!("spec: {{blockDeviceMappings: [{}]}}", many.join(", ")),
        &["spec.blockDeviceMappings: must have at most 50 items"],
    );
}

#[test]
fn metadata_options_and_prefixes() {
    check(
        "spec: {metadataOptions: {httpPutResponseHopLimit: 64}}",
        &[],
    );
    check(
        "spec: {metadataOptions: {httpPutResponseHopLimit: 0}}",
        &["spec.metadataOptions.httpPutResponseHopLimit: must be greater than or equal to 1"],
    );
    check(
        "spec: {metadataOptions: {httpPutResponseHopLimit: 65}}",
        &["spec.metadataOptions.httpPutResponseHopLimit: must be less than or equal to 64"],
    );
    check(
        "spec: {ipPrefixCount: -1}",
        &["spec.ipPrefixCount: must be greater than or equal to 0"],
    );
}
