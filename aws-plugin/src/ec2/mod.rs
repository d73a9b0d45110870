//! The narrow EC2 port: exactly the EC2 calls the provider makes, in the plugin's own plain
//! request and answer types, with two implementations: `sdk::SdkEc2` on `aws-sdk-ec2` (feature `aws`) and
//! [`memory::MemoryEc2`], deterministic, for the simulator and unit tests. One contract suite
//! (`contract.rs`) runs against both (the SDK one against `moto_server`).
//!
//! The trait returns boxed futures rather than using `async fn` in the trait: `async fn` makes
//! a trait unusable as `dyn`, and the provider holds its EC2 as `Arc<dyn Ec2>` so the binary,
//! the simulator and the tests pick an implementation at run time without making every caller
//! generic. One allocation per EC2 call is nothing next to a network round trip.
//!
//! IAM (instance profiles) and SSM (image aliases) are sibling ports: `crate::iam`,
//! `crate::ssm`.

pub mod memory;
#[cfg(feature = "aws")]
pub mod sdk;

#[cfg(test)]
pub(crate) mod contract;

pub use crate::aws_error::{AwsError, AwsFuture};
pub use crate::catalogue::InstanceTypeInfo;

/// The EC2 calls the provider needs. Every query with empty `ids` and empty `tags` means "all".
pub trait Ec2: Send + Sync + std::fmt::Debug {
    /// DescribeInstanceTypes: the named types, or every type when `names` is empty.
    fn describe_instance_types<'a>(
        &'a self,
        names: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceTypeInfo>>;

    /// DescribeInstanceTypeOfferings with location type `availability-zone`: which type is
    /// offered in which zone of the region.
    fn describe_instance_type_offerings(&self) -> AwsFuture<'_, Vec<InstanceTypeOffering>>;

    /// DescribeSpotPriceHistory for Linux/UNIX: the latest price per instance type and zone,
    /// for the named types (every type when empty).
    fn describe_spot_price_history<'a>(
        &'a self,
        instance_types: &'a [String],
    ) -> AwsFuture<'a, Vec<SpotPrice>>;

    /// DescribeImages by ids, name patterns (`*` and `?` wildcards), owners and tags; the
    /// criteria given are ANDed, the values within one criterion ORed.
    fn describe_images<'a>(&'a self, query: &'a ImageQuery) -> AwsFuture<'a, Vec<Image>>;

    /// DescribeSubnets by ids and tag filters.
    fn describe_subnets<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Subnet>>;

    /// DescribeSecurityGroups by ids, names and tag filters.
    fn describe_security_groups<'a>(
        &'a self,
        query: &'a SecurityGroupQuery,
    ) -> AwsFuture<'a, Vec<SecurityGroup>>;

    /// DescribePlacementGroups by ids or names, `available` ones only. An unknown name or id
    /// is an error (EC2's `InvalidPlacementGroup.Unknown`), not an empty answer.
    fn describe_placement_groups<'a>(
        &'a self,
        query: &'a PlacementGroupQuery,
    ) -> AwsFuture<'a, Vec<PlacementGroup>>;

    /// DescribeCapacityReservations, `active` ones only: by ids, or by owner, tags and
    /// instance match criteria (ANDed). An unknown id is an error
    /// (`InvalidCapacityReservationId.NotFound`), not an empty answer.
    fn describe_capacity_reservations<'a>(
        &'a self,
        query: &'a CapacityReservationQuery,
    ) -> AwsFuture<'a, Vec<CapacityReservation>>;

    /// CreateLaunchTemplate. A name already taken is [`AwsError::AlreadyExists`].
    fn create_launch_template<'a>(
        &'a self,
        request: &'a LaunchTemplateRequest,
    ) -> AwsFuture<'a, LaunchTemplate>;

    /// DescribeLaunchTemplates by names (`ids` of the query) or tag filters. Unlike the other
    /// describes, EC2 answers a missing name with an error ([`AwsError::NotFound`]).
    fn describe_launch_templates<'a>(
        &'a self,
        query: &'a ResourceQuery,
    ) -> AwsFuture<'a, Vec<LaunchTemplate>>;

    /// CreateFleet of type `instant`: launches up to `target_capacity` instances, trying the
    /// overrides of every launch template by priority (lowest first), each launched from its
    /// own template; failures per override come back in [`FleetResult::errors`], not as the
    /// call's error. A template that does not exist fails the whole call
    /// ([`AwsError::NotFound`]).
    fn create_fleet<'a>(&'a self, request: &'a FleetRequest) -> AwsFuture<'a, FleetResult>;

    /// DescribeInstances by ids and tag filters. An unknown id is [`AwsError::NotFound`].
    fn describe_instances<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Instance>>;

    /// TerminateInstances: the state change of each instance.
    fn terminate_instances<'a>(
        &'a self,
        ids: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceStateChange>>;

    /// CreateTags: adds (or overwrites) the tags on every resource.
    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a [Tag]) -> AwsFuture<'a, ()>;
}

/// A resource tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    /// The key.
    pub key: String,
    /// The value (may be empty).
    pub value: String,
}

impl Tag {
    /// A tag from its key and value.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A filter on one tag: the key is present with one of `values`, or with any value when
/// `values` is empty (EC2's `tag:KEY` and `tag-key` filters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    /// The tag key.
    pub key: String,
    /// The accepted values; empty accepts any.
    pub values: Vec<String>,
}

impl TagFilter {
    /// The tag `key` with exactly `value`.
    pub fn equals(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            values: vec![value.into()],
        }
    }

    /// The tag `key` with any value.
    pub fn exists(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            values: Vec::new(),
        }
    }

    /// Whether `tags` pass this filter. EC2 matches tag values exactly (no wildcards needed
    /// by the provider).
    pub fn matches(&self, tags: &[Tag]) -> bool {
        tags.iter().any(|t| {
            t.key == self.key && (self.values.is_empty() || self.values.contains(&t.value))
        })
    }
}

/// A query by ids and tags, ANDed; both empty means everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceQuery {
    /// Resource ids (names, for launch templates).
    pub ids: Vec<String>,
    /// Tag filters, all of which must pass.
    pub tags: Vec<TagFilter>,
}

impl ResourceQuery {
    /// The resources with these ids.
    pub fn ids(ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            ids: ids.into_iter().map(Into::into).collect(),
            tags: Vec::new(),
        }
    }

    /// The resources passing these tag filters.
    pub fn tags(tags: Vec<TagFilter>) -> Self {
        Self {
            ids: Vec::new(),
            tags,
        }
    }
}

/// A DescribeSecurityGroups query: ids, group names and tags, ANDed; all empty means every
/// group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityGroupQuery {
    /// Group ids.
    pub ids: Vec<String>,
    /// Group names (EC2's `group-name` filter, exact).
    pub names: Vec<String>,
    /// Tag filters, all of which must pass.
    pub tags: Vec<TagFilter>,
}

/// One row of DescribeInstanceTypeOfferings.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct InstanceTypeOffering {
    /// `m5.large`.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
}

/// The latest spot price of a type in a zone.
#[derive(Debug, Clone, PartialEq)]
pub struct SpotPrice {
    /// `m5.large`.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
    /// US dollars per hour.
    pub price: f64,
    /// When the price took effect, seconds since the Unix epoch.
    pub timestamp: i64,
}

/// A DescribeImages query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageQuery {
    /// Image ids.
    pub ids: Vec<String>,
    /// Name patterns with EC2's `*` and `?` wildcards.
    pub names: Vec<String>,
    /// Owner account ids or aliases (`self`, `amazon`).
    pub owners: Vec<String>,
    /// Tag filters.
    pub tags: Vec<TagFilter>,
}

/// An image (AMI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `ami-...`.
    pub id: String,
    /// The image's name.
    pub name: String,
    /// The owning account.
    pub owner_id: String,
    /// `x86_64`, `arm64`.
    pub architecture: String,
    /// ISO 8601 (`2024-01-31T12:00:00.000Z`): comparing the strings orders them by time.
    pub creation_date: String,
    /// `available`, `pending`, ...
    pub state: String,
    /// When EC2 deprecates it, ISO 8601, if set.
    pub deprecation_time: Option<String>,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// A subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// `vpc-...`.
    pub vpc_id: String,
    /// `us-east-1a`.
    pub zone: String,
    /// `use1-az1`, when EC2 says.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses.
    pub available_ip_address_count: i64,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// A security group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// The group name.
    pub name: String,
    /// `vpc-...`.
    pub vpc_id: Option<String>,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// An EBS volume of a launch template's block device mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockDeviceMapping {
    /// `/dev/xvda`.
    pub device_name: String,
    /// GiB.
    pub volume_size_gib: Option<i32>,
    /// `gp3`, `gp2`, `io1`, ...
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    pub iops: Option<i32>,
    /// MiB/s (gp3).
    pub throughput: Option<i32>,
    /// Encrypted.
    pub encrypted: Option<bool>,
    /// The KMS key for encryption.
    pub kms_key_id: Option<String>,
    /// Deleted with the instance.
    pub delete_on_termination: Option<bool>,
    /// Created from this snapshot.
    pub snapshot_id: Option<String>,
}

/// The instance metadata service options of a launch template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    pub http_endpoint: Option<String>,
    /// `required` (IMDSv2) or `optional`.
    pub http_tokens: Option<String>,
    /// 1 to 64.
    pub http_put_response_hop_limit: Option<i32>,
    /// `enabled` or `disabled`.
    pub http_protocol_ipv6: Option<String>,
}

/// Which placement groups to describe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementGroupQuery {
    /// By id (`pg-...`).
    pub ids: Vec<String>,
    /// By name.
    pub names: Vec<String>,
}

/// A placement group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementGroup {
    /// `pg-...`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// How many partitions a `partition` group has.
    pub partition_count: Option<i32>,
    /// `rack` or `host`, for a `spread` group.
    pub spread_level: Option<String>,
    /// `pending`, `available`, `deleting`, `deleted`.
    pub state: String,
}

/// Which capacity reservations to describe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityReservationQuery {
    /// By id (`cr-...`); the other criteria are then not used.
    pub ids: Vec<String>,
    /// The owning account.
    pub owner_id: Option<String>,
    /// Tag filters.
    pub tags: Vec<TagFilter>,
    /// `open` or `targeted`.
    pub instance_match_criteria: Option<String>,
}

/// A capacity reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityReservation {
    /// `cr-...`.
    pub id: String,
    /// The owning account.
    pub owner_id: String,
    /// The instance type it reserves.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    /// `default` (an on-demand capacity reservation) or `capacity-block`.
    pub reservation_type: String,
    /// `active`, `expired`, `cancelled`, `pending`, `failed`, `scheduled`, ...
    pub state: String,
    /// How many more instances it can hold now.
    pub available_instance_count: i64,
    /// How many instances it holds in all.
    pub total_instance_count: i64,
    /// When it ends, seconds since the Unix epoch; `None`: it does not.
    pub end_date: Option<i64>,
    /// Whether its owner may reclaim it (an interruptible allocation of another reservation).
    pub interruptible: bool,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// The capacity reservation a launch targets (a launch template's
/// `CapacityReservationSpecification`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationTarget {
    /// The reservation, by id.
    pub id: String,
    /// A capacity block: the launch's market type is `capacity-block`.
    pub capacity_block: bool,
}

/// Where in a placement group instances launch (a launch template's `Placement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The group, by id.
    pub group_id: String,
    /// The partition of a `partition` group; `None`: EC2 spreads instances over them.
    pub partition_number: Option<i32>,
}

/// A CreateLaunchTemplate request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchTemplateRequest {
    /// The template's name, unique in the region.
    pub name: String,
    /// The image instances boot.
    pub image_id: String,
    /// Security groups of the primary network interface, when the template names no
    /// interface (EC2 refuses groups both here and on an interface).
    pub security_group_ids: Vec<String>,
    /// The network interfaces, when the template names them; empty for EC2's default primary
    /// interface with `security_group_ids`.
    pub network_interfaces: Vec<NetworkInterfaceRequest>,
    /// Whether detailed CloudWatch monitoring is on.
    pub detailed_monitoring: bool,
    /// Base64 user data.
    pub user_data: Option<String>,
    /// The instance profile's name.
    pub instance_profile: Option<String>,
    /// EBS volumes.
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// IMDS options.
    pub metadata_options: Option<MetadataOptions>,
    /// The placement group instances launch into.
    pub placement: Option<Placement>,
    /// The capacity reservation instances launch into.
    pub capacity_reservation: Option<ReservationTarget>,
    /// `CpuOptions.NestedVirtualization`, `enabled` or `disabled`; `None`: EC2's default.
    pub nested_virtualization: Option<String>,
    /// Tags of the template itself.
    pub tags: Vec<Tag>,
}

/// One network interface of a launch template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkInterfaceRequest {
    /// Its network card; `None`: EC2's default card.
    pub network_card_index: Option<i32>,
    /// Its device index on the card (0 on card 0: the primary interface).
    pub device_index: i32,
    /// `interface` or `efa-only`; `None`: an ENA interface.
    pub interface_type: Option<String>,
    /// Its security groups, by id.
    pub security_group_ids: Vec<String>,
    /// Whether it gets a public IPv4 address; `None`: the subnet's setting decides.
    pub associate_public_ip_address: Option<bool>,
    /// Its idle connection tracking timeouts.
    pub connection_tracking: Option<ConnectionTracking>,
}

/// Idle connection tracking timeouts of a network interface, in seconds; `None` keeps EC2's
/// default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionTracking {
    /// Established TCP connections.
    pub tcp_established_timeout: Option<i32>,
    /// UDP flows that have seen more than one request-response transaction.
    pub udp_stream_timeout: Option<i32>,
    /// Other UDP flows.
    pub udp_timeout: Option<i32>,
}

/// A launch template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchTemplate {
    /// `lt-...`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tags.
    pub tags: Vec<Tag>,
}

/// On-demand or spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapacityType {
    /// On-demand (also a launch into an on-demand capacity reservation).
    OnDemand,
    /// Spot.
    Spot,
    /// A capacity block (a launch into a capacity block reservation).
    CapacityBlock,
}

impl CapacityType {
    /// EC2's name (`on-demand`, `spot`, `capacity-block`); the first two are also
    /// `karpenter.sh/capacity-type` label values.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => "on-demand",
            Self::Spot => "spot",
            Self::CapacityBlock => "capacity-block",
        }
    }
}

/// One instance type x subnet choice of a fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOverride {
    /// `m5.large`.
    pub instance_type: String,
    /// `subnet-...`.
    pub subnet_id: String,
    /// Lower is tried first (the provider orders by price).
    pub priority: f64,
}

/// One launch template of a fleet and the choices that launch from it (EC2's
/// `LaunchTemplateConfigs` entry).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetLaunchTemplate {
    /// The launch template's name (its latest version is used).
    pub name: String,
    /// The instance type x subnet choices launched from this template.
    pub overrides: Vec<FleetOverride>,
}

/// A CreateFleet (type `instant`) request.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetRequest {
    /// The launch templates, each with its overrides. Several when the choices need different
    /// configurations (an image per architecture, user data per pod density); priorities
    /// order the overrides across all of them.
    pub launch_templates: Vec<FleetLaunchTemplate>,
    /// On-demand or spot.
    pub capacity_type: CapacityType,
    /// How many instances.
    pub target_capacity: i32,
    /// Tags for the instances, their volumes and the fleet itself.
    pub tags: Vec<Tag>,
}

/// An instance a fleet launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetInstance {
    /// `i-...`.
    pub id: String,
    /// `m5.large`.
    pub instance_type: String,
    /// The zone, when EC2 says.
    pub zone: Option<String>,
    /// The subnet, when EC2 says.
    pub subnet_id: Option<String>,
}

/// Why one override of a fleet launched nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    /// The override's instance type, when EC2 says.
    pub instance_type: Option<String>,
    /// The override's subnet, when EC2 says.
    pub subnet_id: Option<String>,
    /// The classified error.
    pub error: AwsError,
}

/// What CreateFleet answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetResult {
    /// The instances launched.
    pub instances: Vec<FleetInstance>,
    /// The overrides that failed.
    pub errors: Vec<FleetError>,
}

/// An instance's lifecycle state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// Booting.
    Pending,
    /// Running.
    Running,
    /// Terminating.
    ShuttingDown,
    /// Gone (EC2 keeps describing it for about an hour).
    Terminated,
    /// Stopping.
    Stopping,
    /// Stopped.
    Stopped,
    /// A state this code does not know, as EC2 named it.
    Other(String),
}

impl InstanceState {
    /// EC2's name of the state.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::ShuttingDown => "shutting-down",
            Self::Terminated => "terminated",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
            Self::Other(s) => s,
        }
    }

    /// The state EC2 names `name`.
    pub fn from_name(name: &str) -> Self {
        match name {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "shutting-down" => Self::ShuttingDown,
            "terminated" => Self::Terminated,
            "stopping" => Self::Stopping,
            "stopped" => Self::Stopped,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Shutting down or terminated: the instance is going or gone for good.
    pub fn is_terminating(&self) -> bool {
        matches!(self, Self::ShuttingDown | Self::Terminated)
    }
}

/// An instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `i-...`.
    pub id: String,
    /// `m5.large`.
    pub instance_type: String,
    /// Its state.
    pub state: InstanceState,
    /// `us-east-1a`.
    pub zone: Option<String>,
    /// `subnet-...`.
    pub subnet_id: Option<String>,
    /// The image it booted.
    pub image_id: Option<String>,
    /// On-demand or spot.
    pub capacity_type: CapacityType,
    /// Its security groups.
    pub security_group_ids: Vec<String>,
    /// Its private DNS name, once assigned.
    pub private_dns_name: Option<String>,
    /// When it was launched, seconds since the Unix epoch, when EC2 says.
    pub launch_time: Option<i64>,
    /// Its partition, when it runs in a `partition` placement group and EC2 says.
    pub partition_number: Option<i32>,
    /// The capacity reservation it runs in.
    pub capacity_reservation_id: Option<String>,
    /// Its tags.
    pub tags: Vec<Tag>,
}

impl Instance {
    /// The value of the tag `key`, if the instance has it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }
}

/// One instance's state change on termination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceStateChange {
    /// `i-...`.
    pub id: String,
    /// Before the call.
    pub previous: InstanceState,
    /// After the call.
    pub current: InstanceState,
}

/// Whether `name` matches the EC2 filter `pattern` (`*` any run of characters, `?` one).
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("amzn2-ami-*-x86_64", "amzn2-ami-1.0-x86_64"));
        assert!(wildcard_match("a?c", "abc"));
        assert!(wildcard_match("*", ""));
        assert!(!wildcard_match("a*b", "ac"));
        assert!(wildcard_match("a*b*c", "aXbYbZc"));
        assert!(!wildcard_match("abc", "abcd"));
    }

    #[test]
    fn tag_filters() {
        let tags = [Tag::new("k", "v")];
        assert!(TagFilter::equals("k", "v").matches(&tags));
        assert!(TagFilter::exists("k").matches(&tags));
        assert!(!TagFilter::equals("k", "w").matches(&tags));
        assert!(!TagFilter::exists("j").matches(&tags));
    }
}
