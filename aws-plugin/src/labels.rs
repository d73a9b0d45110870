//! The labels, domains and annotations of the AWS provider (upstream
//! `aws/karpenter-provider-aws` `pkg/apis/v1/labels.go`), and the vocabulary the plugin declares
//! to core from them.
//!
//! Core knows none of these keys: it learns them at handshake from `GetPluginVocabulary`
//! ([`vocabulary`]), which is built from [`VOCABULARY`] here, the one list of the labels this
//! plugin sets and honours.

use core_domain::labels::{LabelPolicy, LabelValueType};
use provider_sdk::v1;

/// The API group of the AWS provider's objects and labels.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

/// The ID of the capacity reservation an instance was launched into.
pub const LABEL_CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// The type of that capacity reservation (`default` or `capacity-block`).
pub const LABEL_CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// The placement group an instance was launched into (`placementGroupSelector`), by id.
pub const LABEL_PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
/// The partition of a `partition` placement group an instance runs in (`1`, `2`, ...).
pub const LABEL_PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";
/// Whether that capacity reservation is interruptible (`true`: its owner may reclaim it).
pub const LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
/// The hypervisor of the instance type (`nitro`, `xen`, or empty for bare metal).
pub const LABEL_INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Whether the instance type supports encryption in transit.
pub const LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// The instance category, the letters before the generation (`c`, `m`, `r`, ...).
pub const LABEL_INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// The instance family, the part before the dot (`m5`, `c6gn`, ...).
pub const LABEL_INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// The instance generation, an integer (`5` for `m5`).
pub const LABEL_INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// The instance size, the part after the dot (`large`, `2xlarge`, ...).
pub const LABEL_INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// The total local NVMe storage of the instance type, in GiB.
pub const LABEL_INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// The number of vCPUs of the instance type.
pub const LABEL_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// The CPU manufacturer (`intel`, `amd`, `aws`, ...).
pub const LABEL_INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// The sustained clock speed of the CPU, in MHz.
pub const LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// The memory of the instance type, in MiB.
pub const LABEL_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// The EBS bandwidth of the instance type, in Mbps.
pub const LABEL_INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// The network bandwidth of the instance type, in Mbps.
pub const LABEL_INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// The name of the instance type's GPU (`t4`, `a100`, ...).
pub const LABEL_INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// The manufacturer of the instance type's GPU (`nvidia`, `amd`, ...).
pub const LABEL_INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// The number of GPUs of the instance type.
pub const LABEL_INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// The memory of the instance type's GPUs, in MiB.
pub const LABEL_INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// The name of the instance type's accelerator (`inferentia`, `trainium`, ...).
pub const LABEL_INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// The manufacturer of the instance type's accelerator.
pub const LABEL_INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// The number of accelerators of the instance type.
pub const LABEL_INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// The EC2NodeClass a node was launched from.
pub const LABEL_NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Whether the instance type is a flex one (`c7i-flex.large`): `true` or `false`.
pub const LABEL_INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// The tenancy the instance runs with.
pub const LABEL_INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
/// The zone ID of a node (`use1-az1`), stable across accounts unlike zone names.
pub const LABEL_TOPOLOGY_ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// The zone label the EBS CSI driver puts on its topology; upstream AWS normalises it to
/// [`LABEL_TOPOLOGY_ZONE`](core_domain::labels::LABEL_TOPOLOGY_ZONE).
pub const LABEL_EBS_CSI_ZONE: &str = "topology.ebs.csi.aws.com/zone";

/// The hash of an EC2NodeClass, on the EC2NodeClass and on each of its NodeClaims.
pub const ANNOTATION_EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// The version of the algorithm behind [`ANNOTATION_EC2NODECLASS_HASH`].
pub const ANNOTATION_EC2NODECLASS_HASH_VERSION: &str =
    "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Set once the instance behind a NodeClaim has been tagged with its node name.
pub const ANNOTATION_INSTANCE_TAGGED: &str = "karpenter.k8s.aws/tagged";

/// The label domains the AWS provider restricts, in addition to core's.
pub const RESTRICTED_LABEL_DOMAINS: [&str; 1] = [AWS_GROUP];

/// One label of the vocabulary: its key, the type of its values and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    /// The key.
    pub key: &'static str,
    /// The type of its values.
    pub value_type: LabelValueType,
    /// What it says, for people.
    pub description: &'static str,
}

impl Label {
    const fn new(key: &'static str, value_type: LabelValueType, description: &'static str) -> Self {
        Self {
            key,
            value_type,
            description,
        }
    }
}

/// The labels the AWS provider sets on its nodes and honours in requirements, in addition to
/// core's (the Windows build label is core's already; upstream AWS inserts it again, harmlessly,
/// and here it is left out: a vocabulary may not list core's labels).
pub const VOCABULARY: [Label; 29] = [
    Label::new(
        LABEL_CAPACITY_RESERVATION_ID,
        LabelValueType::String,
        "The ID of the capacity reservation an instance was launched into.",
    ),
    Label::new(
        LABEL_CAPACITY_RESERVATION_TYPE,
        LabelValueType::String,
        "The type of that capacity reservation (default or capacity-block).",
    ),
    Label::new(
        LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
        LabelValueType::String,
        "Whether that capacity reservation is interruptible: true or false.",
    ),
    Label::new(
        LABEL_PLACEMENT_GROUP_ID,
        LabelValueType::String,
        "The placement group an instance was launched into, by id.",
    ),
    Label::new(
        LABEL_PLACEMENT_GROUP_PARTITION,
        LabelValueType::Integer,
        "The partition of a partition placement group an instance runs in (1, 2, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_HYPERVISOR,
        LabelValueType::String,
        "The hypervisor of the instance type (nitro, xen, or empty for bare metal).",
    ),
    Label::new(
        LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        LabelValueType::String,
        "Whether the instance type supports encryption in transit.",
    ),
    Label::new(
        LABEL_INSTANCE_CATEGORY,
        LabelValueType::String,
        "The instance category, the letters before the generation (c, m, r, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_FAMILY,
        LabelValueType::String,
        "The instance family, the part before the dot (m5, c6gn, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_GENERATION,
        LabelValueType::Integer,
        "The instance generation, an integer (5 for m5).",
    ),
    Label::new(
        LABEL_INSTANCE_SIZE,
        LabelValueType::String,
        "The instance size, the part after the dot (large, 2xlarge, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_LOCAL_NVME,
        LabelValueType::Integer,
        "The total local NVMe storage of the instance type, in GiB.",
    ),
    Label::new(
        LABEL_INSTANCE_CPU,
        LabelValueType::Integer,
        "The number of vCPUs of the instance type.",
    ),
    Label::new(
        LABEL_INSTANCE_CPU_MANUFACTURER,
        LabelValueType::String,
        "The CPU manufacturer (intel, amd, aws, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        LabelValueType::Integer,
        "The sustained clock speed of the CPU, in MHz.",
    ),
    Label::new(
        LABEL_INSTANCE_MEMORY,
        LabelValueType::Integer,
        "The memory of the instance type, in MiB.",
    ),
    Label::new(
        LABEL_INSTANCE_EBS_BANDWIDTH,
        LabelValueType::Integer,
        "The EBS bandwidth of the instance type, in Mbps.",
    ),
    Label::new(
        LABEL_INSTANCE_NETWORK_BANDWIDTH,
        LabelValueType::Integer,
        "The network bandwidth of the instance type, in Mbps.",
    ),
    Label::new(
        LABEL_INSTANCE_GPU_NAME,
        LabelValueType::String,
        "The name of the instance type's GPU (t4, a100, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_GPU_MANUFACTURER,
        LabelValueType::String,
        "The manufacturer of the instance type's GPU (nvidia, amd, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_GPU_COUNT,
        LabelValueType::Integer,
        "The number of GPUs of the instance type.",
    ),
    Label::new(
        LABEL_INSTANCE_GPU_MEMORY,
        LabelValueType::Integer,
        "The memory of the instance type's GPUs, in MiB.",
    ),
    Label::new(
        LABEL_INSTANCE_ACCELERATOR_NAME,
        LabelValueType::String,
        "The name of the instance type's accelerator (inferentia, trainium, ...).",
    ),
    Label::new(
        LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        LabelValueType::String,
        "The manufacturer of the instance type's accelerator.",
    ),
    Label::new(
        LABEL_INSTANCE_ACCELERATOR_COUNT,
        LabelValueType::Integer,
        "The number of accelerators of the instance type.",
    ),
    Label::new(
        LABEL_TOPOLOGY_ZONE_ID,
        LabelValueType::String,
        "The zone ID of a node (use1-az1), stable across accounts unlike zone names.",
    ),
    Label::new(
        LABEL_INSTANCE_CAPABILITY_FLEX,
        LabelValueType::String,
        "Whether the instance type is a flex one (c7i-flex.large): true or false.",
    ),
    Label::new(
        LABEL_INSTANCE_TENANCY,
        LabelValueType::String,
        "The instance's tenancy: default (this plugin launches no dedicated instances yet, \
         so a requirement for dedicated matches no type).",
    ),
    Label::new(
        LABEL_NODE_CLASS,
        LabelValueType::String,
        "The EC2NodeClass a node was launched from; Karpenter sets it from the NodePool.",
    ),
];

/// The vocabulary as `GetPluginVocabulary` answers it.
pub fn vocabulary() -> v1::GetPluginVocabularyResponse {
    v1::GetPluginVocabularyResponse {
        labels: VOCABULARY
            .iter()
            .map(|label| v1::LabelDefinition {
                key: label.key.to_owned(),
                value_type: match label.value_type {
                    LabelValueType::String => v1::LabelValueType::String,
                    LabelValueType::Integer => v1::LabelValueType::Integer,
                } as i32,
                description: label.description.to_owned(),
            })
            .collect(),
        restricted_label_domains: RESTRICTED_LABEL_DOMAINS.map(str::to_owned).to_vec(),
    }
}

/// Core's label policy with this plugin's vocabulary, as core builds it from [`vocabulary`]
/// (the simulator and the tests use it directly).
pub fn label_policy() -> LabelPolicy {
    LabelPolicy::with_vocabulary(
        RESTRICTED_LABEL_DOMAINS,
        VOCABULARY.iter().map(|label| (label.key, label.value_type)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_lists_each_key_once_inside_the_domains_it_may_use() {
        let mut keys: Vec<&str> = VOCABULARY.iter().map(|label| label.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), VOCABULARY.len());
        let policy = label_policy();
        for label in VOCABULARY {
            assert!(policy.is_well_known(label.key), "{}", label.key);
            assert!(!label.description.is_empty(), "{}", label.key);
            assert!(
                !core_domain::labels::WELL_KNOWN_LABELS.contains(&label.key),
                "{} is core's",
                label.key
            );
        }
    }

    #[test]
    fn counts_and_sizes_are_integers_names_are_strings() {
        let policy = label_policy();
        for key in [
            LABEL_INSTANCE_CPU,
            LABEL_INSTANCE_MEMORY,
            LABEL_INSTANCE_GENERATION,
        ] {
            assert_eq!(
                policy.value_type(key),
                Some(LabelValueType::Integer),
                "{key}"
            );
        }
        for key in [
            LABEL_INSTANCE_FAMILY,
            LABEL_INSTANCE_CATEGORY,
            LABEL_TOPOLOGY_ZONE_ID,
        ] {
            assert_eq!(
                policy.value_type(key),
                Some(LabelValueType::String),
                "{key}"
            );
        }
        assert!(
            policy
                .is_restricted_label("karpenter.k8s.aws/custom")
                .is_err()
        );
    }
}
