//! EC2NodeClass (`karpenter.k8s.aws/v1`, cluster-scoped): how the AWS plugin launches instances
//! for a NodePool: subnets, security groups, AMIs, IAM identity, storage, IMDS, kubelet.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{kubelet::KubeletConfiguration, patterns, status::EC2NodeClassStatus};

/// The alias families, as `amiSelectorTerms[].alias` spells them.
pub const ALIAS_FAMILIES: [&str; 6] = [
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];
/// The alias families that only allow `@latest`.
pub const WINDOWS_ALIAS_FAMILIES: [&str; 3] = ["windows2019", "windows2022", "windows2025"];
/// The alias version that follows new AMI releases.
pub const ALIAS_VERSION_LATEST: &str = "latest";
/// The most selector terms of each kind.
pub const MAX_SELECTOR_TERMS: usize = 30;
/// The most tags a selector term may match on.
pub const MAX_SELECTOR_TAGS: usize = 20;
/// The most block device mappings.
pub const MAX_BLOCK_DEVICE_MAPPINGS: usize = 50;
/// The longest alias.
pub const MAX_ALIAS_LENGTH: usize = 30;

/// Tag keys Karpenter sets itself: users may not set them through `spec.tags`. The bool says
/// whether the key is a prefix (`kubernetes.io/cluster/<name>`).
pub const RESTRICTED_TAGS: [(&str, bool); 5] = [
    ("eks:eks-cluster-name", false),
    ("kubernetes.io/cluster", true),
    ("karpenter.sh/nodepool", false),
    ("karpenter.sh/nodeclaim", false),
    ("karpenter.k8s.aws/ec2nodeclass", false),
];

/// The top-level EC2NodeClass specification: what the AWS plugin needs to launch instances.
// The `#[kube]` attributes are laid out as `karpenter_api::crd` says.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(group = "karpenter.k8s.aws", version = "v1", kind = "EC2NodeClass")]
#[kube(doc = "EC2NodeClass is the Schema for the EC2NodeClass API")]
#[kube(
    plural = "ec2nodeclasses",
    category = "karpenter",
    shortname = "ec2nc",
    shortname = "ec2ncs"
)]
#[kube(status = "EC2NodeClassStatus", derive = "PartialEq")]
#[kube(
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct EC2NodeClassSpec {
    /// Subnet selector terms, ORed; the fields within a term are ANDed.
    #[schemars(
        length(max = 30),
        extend("x-kubernetes-validations" = [
            { "rule": "self.size() != 0", "message": "subnetSelectorTerms cannot be empty" },
            {
                "rule": "self.all(x, has(x.tags) || has(x.id))",
                "message": "expected at least one, got none, ['tags', 'id']",
            },
            {
                "rule": "!self.all(x, has(x.id) && has(x.tags))",
                "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            },
        ])
    )]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security group selector terms, ORed; the fields within a term are ANDed.
    #[schemars(
        length(max = 30),
        extend("x-kubernetes-validations" = [
            { "rule": "self.size() != 0", "message": "securityGroupSelectorTerms cannot be empty" },
            {
                "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
                "message": "expected at least one, got none, ['tags', 'id', 'name']",
            },
            {
                "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
                "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            },
            {
                "rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
                "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            },
        ])
    )]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservation selector terms, ORed: the on-demand capacity reservations NodePools
    /// using this class may launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 30),
        extend("x-kubernetes-validations" = [
            {
                "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
                "message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            },
            {
                "rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
                "message": "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            },
        ])
    )]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// The placement group instances launch into, by name or by id. Only instance types that
    /// support its strategy are offered; a partition group's partitions are a topology (the
    /// `karpenter.k8s.aws/placement-group-partition` label).
    #[serde(
        default,
        rename = "placementGroupSelector",
        skip_serializing_if = "Option::is_none"
    )]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IP address; unset, the subnet's setting decides.
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Idle connection tracking timeouts of the interfaces the launch template names (the
    /// primary one; not those the CNI adds at run time). Needs Nitro instance types.
    #[serde(
        default,
        rename = "connectionTracking",
        skip_serializing_if = "Option::is_none"
    )]
    pub connection_tracking: Option<ConnectionTracking>,
    /// The network interfaces attached at launch, by network card and device index (an EFA
    /// interface is one of type `efa-only`). Empty: one primary interface.
    #[serde(
        default,
        rename = "networkInterfaces",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(
        length(max = 150),
        extend("x-kubernetes-validations" = [
            {
                "rule": "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
                "message": "networkInterfaces must include a primary interface with interfaceType='interface'",
            },
            {
                "rule": "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
                "message": "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            },
        ])
    )]
    pub network_interfaces: Vec<NetworkInterface>,
    /// How many IPv4 prefixes to assign to the primary network interface.
    #[serde(
        default,
        rename = "ipPrefixCount",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// AMI selector terms, ORed; the fields within a term are ANDed. An `alias` term must be the
    /// only term.
    #[serde(rename = "amiSelectorTerms")]
    #[schemars(
        length(min = 1, max = 30),
        extend("x-kubernetes-validations" = [
            {
                "rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
                "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            },
            {
                "rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
                "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            },
            {
                "rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
                "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            },
            {
                "rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            },
        ])
    )]
    pub ami_selector_terms: Vec<AMISelectorTerm>,
    /// The UserData format and default block devices. Optional with an alias (whose family it
    /// must then match, or be `Custom`); required otherwise.
    #[serde(default, rename = "amiFamily", skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AMIFamily>,
    /// UserData for the instances, in the AMI family's format; Karpenter merges its own into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role the nodes use; Karpenter manages an instance profile for it. Exactly one of
    /// `role` and `instanceProfile` is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "self != ''", "message": "role cannot be empty" }
    ]))]
    pub role: Option<String>,
    /// An existing instance profile for the nodes. Exactly one of `role` and `instanceProfile`
    /// is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "self != ''", "message": "instanceProfile cannot be empty" }
    ]))]
    pub instance_profile: Option<String>,
    /// Tags for the instances, volumes and launch templates Karpenter creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(
        schema_with = "karpenter_api::schema::string_map",
        extend("x-kubernetes-validations" = [
            { "rule": "self.all(k, k != '')", "message": "empty tag keys aren't supported" },
            {
                "rule": "self.all(k, k !='eks:eks-cluster-name')",
                "message": "tag contains a restricted tag matching eks:eks-cluster-name",
            },
            {
                "rule": "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
                "message": "tag contains a restricted tag matching kubernetes.io/cluster/",
            },
            {
                "rule": "self.all(k, k != 'karpenter.sh/nodepool')",
                "message": "tag contains a restricted tag matching karpenter.sh/nodepool",
            },
            {
                "rule": "self.all(k, k !='karpenter.sh/nodeclaim')",
                "message": "tag contains a restricted tag matching karpenter.sh/nodeclaim",
            },
            {
                "rule": "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
                "message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
            },
        ])
    )]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Block devices for the instances; unset, the AMI family's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 50),
        extend("x-kubernetes-validations" = [{
            "rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "message": "must have only one blockDeviceMappings with rootVolume",
        }])
    )]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How instance-store disks are used; unset, they are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Whether detailed CloudWatch monitoring is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// How the Instance Metadata Service is exposed to the instances.
    #[serde(default)]
    #[schemars(extend("default" = {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }))]
    pub metadata_options: MetadataOptions,
    /// The reserved `Context` field of EC2 Fleet requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options of the instances.
    #[serde(
        default,
        rename = "cpuOptions",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_options: Option<CpuOptions>,
}

/// The rules on the spec as a whole, generated from the family list so new families cannot be
/// forgotten in one of them.
fn spec_rules(schema: &mut Schema) {
    let mut rules = vec![serde_json::json!({
        "rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
        "message": "must specify exactly one of ['role', 'instanceProfile']",
    })];
    for family in AMIFamily::ALIASED {
        let alias = family.alias_family().unwrap_or_default();
        let name = family.as_str();
        let article = if name.starts_with('A') { "an" } else { "a" };
        rules.push(serde_json::json!({
            "rule": format!(
                "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{name}') : true)"
            ),
            "message": format!(
                "if set, amiFamily must be '{name}' or 'Custom' when using {article} {name} alias"
            ),
        }));
    }
    rules.push(serde_json::json!({
        "rule": "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
        "message": "must specify amiFamily if amiSelectorTerms does not contain an alias",
    }));
    schema.insert("x-kubernetes-validations".into(), rules.into());
}

/// A network interface attached at launch (upstream `NetworkInterface`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The network card it is on.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Its device index on that card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// What it is.
    pub interface_type: InterfaceType,
}

/// A network interface's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InterfaceType {
    /// An ENA interface, with IP addresses.
    #[serde(rename = "interface")]
    Interface,
    /// An EFA device without an IP address.
    #[serde(rename = "efa-only")]
    EfaOnly,
}

impl InterfaceType {
    /// EC2's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interface => "interface",
            Self::EfaOnly => "efa-only",
        }
    }
}

/// Idle connection tracking timeouts, in seconds (upstream `ConnectionTracking`); at least one
/// is set, and each unset one keeps EC2's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
    "message": "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
}]))]
pub struct ConnectionTracking {
    /// Idle established TCP connections (60 to 432,000; EC2's default is 350 on Nitro v6
    /// types but P6e-GB200, 432,000 elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432_000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle UDP flows that have seen more than one request-response transaction (60 to
    /// 180; EC2's default 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle UDP flows in one direction or of a single transaction (30 to 60; EC2's default
    /// 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// A subnet selector term: tags, or an ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The subnet ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::SUBNET_ID))]
    pub id: Option<String>,
}

/// A security group selector term: tags, an ID, or a name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags the security group must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The security group ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::SECURITY_GROUP_ID))]
    pub id: Option<String>,
    /// The security group name (the name field, not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A capacity reservation selector term: tags (optionally with an owner), an ID, or a match
/// criteria.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the capacity reservation must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The capacity reservation ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::CAPACITY_RESERVATION_ID))]
    pub id: Option<String>,
    /// The account that owns the capacity reservation.
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::ACCOUNT_ID))]
    pub owner_id: Option<String>,
    /// Which instance launches the capacity reservation accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// The placement group a node class launches into (upstream `PlacementGroupSelector`): exactly
/// one of `name` and `id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": "has(self.name) || has(self.id)", "message": "expected at least one, got none, ['name', 'id']" },
    { "rule": "!(has(self.name) && has(self.id))", "message": "'name' and 'id' are mutually exclusive" },
]))]
pub struct PlacementGroupSelector {
    /// The placement group's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The placement group's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::PLACEMENT_GROUP_ID))]
    pub id: Option<String>,
}

/// CPU options of the instances (upstream `CPUOptions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// Nested virtualization on the instance. `enabled` offers only the instance types whose
    /// processors support it (`nested-virtualization` in DescribeInstanceTypes'
    /// `ProcessorInfo.SupportedFeatures`); either value goes into the launch template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<Toggle>,
}

/// How instances are matched to a capacity reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum InstanceMatchCriteria {
    /// Any instance with matching attributes.
    Open,
    /// Only instances that target the reservation.
    Targeted,
}

impl InstanceMatchCriteria {
    /// EC2's spelling, which is also the API's.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Targeted => "targeted",
        }
    }
}

/// An AMI selector term: an alias (alone), or tags, an ID, a name and owner, or an SSM
/// parameter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AMISelectorTerm {
    /// An EKS-optimized AMI as `family@version` (`al2023@latest`, `al2023@v20240807`,
    /// `bottlerocket@v1.20.4`); Windows families only allow `latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), transform = alias_rules)]
    pub alias: Option<String>,
    /// Tags the AMI must have; `*` as a value matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = selector_tags)]
    pub tags: Option<BTreeMap<String, String>>,
    /// The AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = patterns::AMI_ID))]
    pub id: Option<String>,
    /// The AMI name (the name field, not the `Name` tag); wildcards allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The AMI owner: account IDs, `self`, `amazon`, `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The name or ARN of an SSM parameter holding the AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// The CEL rules on an alias, generated from [`ALIAS_FAMILIES`].
fn alias_rules(schema: &mut Schema) {
    let list = |items: &[&str]| {
        items
            .iter()
            .map(|f| format!("'{f}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let listed = ALIAS_FAMILIES
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ");
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([
            {
                "rule": format!("self.matches('{}')", patterns::ALIAS),
                "message": "'alias' is improperly formatted, must match the format 'family@version'",
            },
            {
                "rule": format!("self.split('@')[0] in [{}]", list(&ALIAS_FAMILIES)),
                "message": format!("family is not supported, must be one of the following: {listed}"),
            },
            {
                "rule": format!(
                    "self.split('@')[0] in [{}] ? self.split('@')[1] == 'latest' : true",
                    list(&WINDOWS_ALIAS_FAMILIES)
                ),
                "message": "windows families may only specify version 'latest'",
            },
        ]),
    );
}

/// The rules on a selector term's tags.
fn selector_tags(schema: &mut Schema) {
    schema.insert("maxProperties".into(), MAX_SELECTOR_TAGS.into());
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([{
            "rule": "self.all(k, k != '' && self[k] != '')",
            "message": "empty tag keys or values aren't supported",
        }]),
    );
}

/// The AMI family: UserData format and default block devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AMIFamily {
    /// Amazon Linux 2.
    #[serde(rename = "AL2")]
    Al2,
    /// Amazon Linux 2023.
    #[serde(rename = "AL2023")]
    Al2023,
    /// Bottlerocket.
    Bottlerocket,
    /// No UserData or block devices of Karpenter's: the user provides them.
    Custom,
    /// Windows Server 2019.
    Windows2019,
    /// Windows Server 2022.
    Windows2022,
    /// Windows Server 2025.
    Windows2025,
}

impl AMIFamily {
    /// The families an alias can name, in alias order.
    pub const ALIASED: [Self; 6] = [
        Self::Al2,
        Self::Al2023,
        Self::Bottlerocket,
        Self::Windows2019,
        Self::Windows2022,
        Self::Windows2025,
    ];

    /// The family as `amiFamily` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Al2 => "AL2",
            Self::Al2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
        }
    }

    /// The family as an alias spells it; `None` for `Custom`, which has no alias.
    pub fn alias_family(self) -> Option<&'static str> {
        Self::ALIASED
            .iter()
            .position(|f| *f == self)
            .and_then(|i| ALIAS_FAMILIES.get(i).copied())
    }

    /// The family an alias names (`al2023@latest` is `AL2023`).
    pub fn from_alias(alias: &str) -> Option<Self> {
        let family = alias.split('@').next()?;
        ALIAS_FAMILIES
            .iter()
            .position(|f| *f == family)
            .and_then(|i| Self::ALIASED.get(i).copied())
    }
}

/// An alias split into family and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias<'a> {
    /// The family.
    pub family: AMIFamily,
    /// `latest` or a pinned release.
    pub version: &'a str,
}

impl EC2NodeClass {
    /// The alias term's family and version, if the class selects AMIs by alias.
    pub fn alias(&self) -> Option<Alias<'_>> {
        let alias = self
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())?;
        let (_, version) = alias.split_once('@')?;
        Some(Alias {
            family: AMIFamily::from_alias(alias)?,
            version,
        })
    }

    /// The AMI family in effect: `amiFamily` if set, else the alias's family.
    pub fn ami_family(&self) -> Option<AMIFamily> {
        self.spec
            .ami_family
            .or_else(|| self.alias().map(|a| a.family))
    }
}

/// A block device attached to the instances.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name (`/dev/xvda`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "has(self.snapshotID) || has(self.volumeSize)",
            "message": "snapshotID or volumeSize must be defined",
        },
        {
            "rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
            "message": "snapshotID must be set when volumeInitializationRate is set",
        },
    ]))]
    pub ebs: Option<BlockDevice>,
    /// Whether this device holds the kubelet root directory; at most one may.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

/// An EBS volume.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Whether the volume is deleted when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// The KMS key (ID, alias or ARN) that encrypts the volume.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The snapshot the volume is created from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3, 125 to 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// How fast, in MiB/s, the snapshot's blocks are downloaded into the volume; requires
    /// `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// The size, in `Gi`, `G`, `Ti` or `T`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "volume_size")]
    pub volume_size: Option<Quantity>,
    /// The volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

fn volume_size(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": patterns::VOLUME_SIZE.as_str() })
}

/// An EBS volume type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// Magnetic.
    Standard,
    /// Provisioned IOPS SSD.
    Io1,
    /// Provisioned IOPS SSD, second generation.
    Io2,
    /// General purpose SSD.
    Gp2,
    /// Cold HDD.
    Sc1,
    /// Throughput-optimized HDD.
    St1,
    /// General purpose SSD, third generation.
    Gp3,
}

/// How instance-store disks are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// A RAID-0 array of all instance-store NVMe disks backs the kubelet's and containerd's
    /// state, and becomes the node's ephemeral storage.
    #[serde(rename = "RAID0")]
    Raid0,
}

/// How the Instance Metadata Service is exposed to the instances. Every field has upstream's
/// default, as the API server fills it in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether the IMDS endpoint is reachable.
    #[serde(default = "enabled")]
    #[schemars(extend("default" = "enabled"))]
    pub http_endpoint: Toggle,
    /// Whether IMDS answers on IPv6.
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    #[schemars(extend("default" = "disabled"))]
    pub http_protocol_ipv6: Toggle,
    /// How many hops IMDS PUT responses may travel (1 keeps them off pods not on the host
    /// network).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 64), extend("default" = 1))]
    pub http_put_response_hop_limit: i64,
    /// Whether IMDSv2 session tokens are required.
    #[serde(default = "required")]
    #[schemars(extend("default" = "required"))]
    pub http_tokens: HttpTokens,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: Toggle::Enabled,
            http_protocol_ipv6: Toggle::Disabled,
            http_put_response_hop_limit: 1,
            http_tokens: HttpTokens::Required,
        }
    }
}

fn enabled() -> Toggle {
    Toggle::Enabled
}

fn disabled() -> Toggle {
    Toggle::Disabled
}

fn one() -> i64 {
    1
}

fn required() -> HttpTokens {
    HttpTokens::Required
}

/// `enabled` or `disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    /// On.
    Enabled,
    /// Off.
    Disabled,
}

impl Toggle {
    /// EC2's spelling, which is also the API's.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Disabled => "disabled",
        }
    }
}

/// Whether IMDS requires session tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    /// IMDSv2 only.
    Required,
    /// IMDSv1 allowed.
    Optional,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_aliases_map_both_ways() {
        for family in AMIFamily::ALIASED {
            let alias = family.alias_family().unwrap();
            assert_eq!(
                AMIFamily::from_alias(&format!("{alias}@latest")),
                Some(family)
            );
            assert_eq!(
                serde_json::to_value(family).unwrap(),
                serde_json::json!(family.as_str())
            );
        }
        assert_eq!(AMIFamily::Custom.alias_family(), None);
        assert_eq!(AMIFamily::from_alias("ubuntu@latest"), None);
        assert_eq!(AMIFamily::from_alias("custom@latest"), None);
    }
}
