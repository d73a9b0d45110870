//! The instance type catalogue `GetInstanceTypes` answers: EC2's DescribeInstanceTypes, its
//! zonal DescribeInstanceTypeOfferings and the latest spot prices, fetched through the
//! [`Ec2`] port, cached for a refresh period, and turned into the API's `InstanceType`s by
//! [`crate::instance_types::instance_type`] with the node class's settings.
//!
//! On-demand prices come from the price table of the embedded catalogue
//! ([`crate::catalogue::embedded`]), not from the AWS Pricing API: the Pricing API is not
//! reachable from where this plugin is built and tested, and the table is what upstream falls
//! back to as well. A region without an embedded table is a construction error.
//!
//! Every type EC2 describes is returned. Offerings that cannot be launched now (not offered in
//! the zone, no price, or a recent insufficient-capacity error recorded with
//! [`InstanceTypeProvider::mark_unavailable`]) are marked `available: false`, never omitted,
//! so core never mistakes a temporarily unavailable type for a gone one.
//!
//! Time is read from a [`Clock`] the caller passes in, so tests advance a fake clock instead
//! of sleeping.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use core_domain::labels::LABEL_ARCH;
use provider_sdk::v1::{Availability, InstanceType, Requirement};
use serde::de::DeserializeOwned;

use crate::apis::ec2nodeclass::{
    BlockDeviceMapping, EC2NodeClassSpec, InstanceStorePolicy, InterfaceType, Toggle,
};
use crate::apis::kubelet::KubeletConfiguration;
use crate::catalogue::CatalogueError;
use crate::ec2::{AwsError, Ec2, InstanceTypeInfo, PlacementGroup};
use crate::instance_types::{NodeSettings, Prices, ReservedCapacity, Zone, instance_type};
use crate::labels::{LABEL_PLACEMENT_GROUP_ID, LABEL_PLACEMENT_GROUP_PARTITION};
use crate::node_class::ResolvedNodeClass;

/// What a node class can launch: the zones it has subnets in, the architectures it has
/// images for, the placement group it launches into and the capacity reservations it may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launchable {
    /// Zone names.
    pub zones: BTreeSet<String>,
    /// Kubernetes architectures (`amd64`, `arm64`).
    pub architectures: BTreeSet<String>,
    /// What the node class resolved beyond its spec.
    pub resolved: Resolved,
}

/// What a node class resolved that shapes its catalogue: the placement group and the capacity
/// reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The placement group `placementGroupSelector` resolved to.
    pub placement_group: Option<PlacementGroup>,
    /// The capacity reservations `capacityReservationSelectorTerms` select.
    pub reservations: Vec<ReservedCapacity>,
}

impl Resolved {
    /// What `resolved` shapes its catalogue with.
    pub fn of(resolved: &ResolvedNodeClass) -> Self {
        Self {
            placement_group: resolved.placement_group.clone(),
            reservations: resolved
                .capacity_reservations
                .iter()
                .map(|r| ReservedCapacity {
                    id: r.reservation.id.clone(),
                    instance_type: r.reservation.instance_type.clone(),
                    zone: r.reservation.zone.clone(),
                    reservation_type: r.reservation.reservation_type.clone(),
                    interruptible: r.reservation.interruptible,
                    available: r.reservation.available_instance_count,
                    expiring: r.expiring,
                })
                .collect(),
        }
    }

    /// The reservations of `instance_type`.
    fn reservations_of(&self, instance_type: &str) -> Vec<ReservedCapacity> {
        self.reservations
            .iter()
            .filter(|r| r.instance_type == instance_type)
            .cloned()
            .collect()
    }
}

impl Launchable {
    /// Marks every offering of `instance_type` unavailable when its architecture has no image.
    fn mark_imageless(&self, instance_type: &mut InstanceType) {
        let arch = instance_type
            .requirements
            .iter()
            .find(|r| r.key == LABEL_ARCH);
        let has_image =
            arch.is_none_or(|r| r.values.iter().any(|a| self.architectures.contains(a)));
        if !has_image {
            for offering in &mut instance_type.offerings {
                offering.availability = Availability::Unavailable as i32;
            }
        }
    }
}

/// Whether `info` can launch into `group` (upstream `placementGroupCompatibility`: the type
/// supports the group's strategy). A type the source says nothing about is kept: EC2 has the
/// last word.
fn fits_placement(group: Option<&PlacementGroup>, info: &InstanceTypeInfo) -> bool {
    let (Some(group), Some(supported)) = (group, &info.placement_group_info) else {
        return true;
    };
    supported.supported_strategies.contains(&group.strategy)
}

/// The labels of `group` on `instance_type`, as upstream's offering provider adds them:
/// `placement-group-id` on the type; for a partition group, every partition on the type and
/// one offering per partition, so spreading over `karpenter.k8s.aws/placement-group-partition`
/// sees them as topology domains.
fn place(group: Option<&PlacementGroup>, instance_type: &mut InstanceType) {
    let Some(group) = group else {
        return;
    };
    instance_type.requirements.push(Requirement::in_values(
        LABEL_PLACEMENT_GROUP_ID,
        [group.id.as_str()],
    ));
    let partitions: Vec<String> = match group.partition_count {
        Some(count) if group.strategy == "partition" && count > 0 => {
            (1..=count).map(|p| p.to_string()).collect()
        }
        _ => return,
    };
    instance_type.requirements.push(Requirement::in_values(
        LABEL_PLACEMENT_GROUP_PARTITION,
        partitions.iter().map(String::as_str),
    ));
    instance_type.offerings = std::mem::take(&mut instance_type.offerings)
        .into_iter()
        .flat_map(|offering| {
            partitions.iter().map(move |partition| {
                let mut offering = offering.clone();
                offering.requirements.push(Requirement::in_values(
                    LABEL_PLACEMENT_GROUP_PARTITION,
                    [partition.as_str()],
                ));
                offering
            })
        })
        .collect();
}

/// How long the EC2 answers are reused before they are fetched again (upstream refreshes
/// instance types and offerings on a similar period).
pub const DEFAULT_REFRESH_PERIOD: Duration = Duration::from_secs(5 * 60);

/// How long an offering stays unavailable after an insufficient-capacity error (upstream's
/// `UnavailableOfferingsTTL`).
pub const DEFAULT_UNAVAILABLE_TTL: Duration = Duration::from_secs(3 * 60);

/// Where the provider reads the time from: a monotonic instant for cache ages, and the
/// calendar time for what AWS dates (image deprecation).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;

    /// The current calendar time.
    fn utc_now(&self) -> SystemTime;
}

/// The monotonic system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn utc_now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when the test says; its calendar time stays at 2026-05-28, after
/// every image date the tests publish.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct FakeClock(Mutex<Instant>);

#[cfg(test)]
impl FakeClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(Instant::now())))
    }

    pub(crate) fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

#[cfg(test)]
impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }

    fn utc_now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000)
    }
}

/// Why the catalogue could not be built.
#[derive(Debug, thiserror::Error)]
pub enum InstanceTypeError {
    /// An EC2 call failed.
    #[error(transparent)]
    Ec2(#[from] AwsError),
    /// No on-demand prices for the region: without them every on-demand offering would look
    /// unavailable, so the catalogue is refused rather than served wrong.
    #[error("no on-demand prices: {0}; the Pricing API is not supported yet")]
    NoPriceTable(String),
    /// The node class JSON does not parse; `field` is the path of the part that does not.
    #[error("node_class: {field}: {message}")]
    InvalidNodeClass {
        /// The JSON path of the offending field (`spec.kubelet`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

/// An offering: instance type, zone, capacity type.
type OfferingKey = (String, String, String);

/// The EC2 answers, as fetched at `fetched_at`.
#[derive(Debug)]
struct Snapshot {
    fetched_at: Instant,
    /// Sorted by name, so the catalogue comes out in a stable order.
    types: Vec<InstanceTypeInfo>,
    /// Every zone that offers at least one type, sorted.
    zones: Vec<Zone>,
    /// Instance type -> the zones offering it.
    offered_in: HashMap<String, Vec<String>>,
    /// Instance type -> zone -> latest spot price.
    spot: HashMap<String, HashMap<String, f64>>,
}

/// Builds the instance type catalogue from EC2, with caches for the EC2 answers and for
/// offerings recently found without capacity.
#[derive(Debug)]
pub struct InstanceTypeProvider {
    ec2: Arc<dyn Ec2>,
    region: String,
    clock: Arc<dyn Clock>,
    /// The embedded on-demand price table of the region, or why there is none. Kept as a
    /// result rather than refused at start-up, so the plugin still starts, answers health and
    /// identity, and says on each GetInstanceTypes what is missing.
    on_demand_prices: Result<BTreeMap<String, f64>, String>,
    refresh_period: Duration,
    unavailable_ttl: Duration,
    /// A tokio mutex, held across the EC2 calls, so that concurrent requests after expiry
    /// wait for one refresh instead of each calling EC2.
    snapshot: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
    /// Offering -> when it becomes available again.
    unavailable: Mutex<HashMap<OfferingKey, Instant>>,
    /// Capacity reservation -> the plugin's own launches (-1) and terminations (+1) in it, and
    /// when, so a reservation counted by EC2 before them is offered with what is left
    /// (upstream's availability cache).
    reservation_changes: Mutex<HashMap<String, Vec<(Instant, i64)>>>,
}

/// How long the plugin's own launches into and terminations in a reservation are remembered:
/// longer than any count EC2 gave before them is reused (a node class resolution is reused
/// for [`crate::node_class::DEFAULT_CACHE_TTL`]).
pub const RESERVATION_CHANGES_TTL: Duration = Duration::from_secs(5 * 60);

impl InstanceTypeProvider {
    /// A provider for `region` over `ec2`, with the default refresh period and
    /// insufficient-capacity TTL. Calls nothing: the first [`Self::instance_types`] does.
    /// Without an embedded on-demand price table for the region, every GetInstanceTypes
    /// answers FAILED_PRECONDITION saying so (the Pricing API is not used yet).
    pub fn new(ec2: Arc<dyn Ec2>, region: &str, clock: Arc<dyn Clock>) -> Self {
        let on_demand_prices = crate::catalogue::embedded(region)
            .map(|catalogue| catalogue.on_demand_prices())
            .map_err(|e: CatalogueError| e.to_string());
        Self {
            ec2,
            region: region.to_owned(),
            clock,
            on_demand_prices,
            refresh_period: DEFAULT_REFRESH_PERIOD,
            unavailable_ttl: DEFAULT_UNAVAILABLE_TTL,
            snapshot: tokio::sync::Mutex::new(None),
            unavailable: Mutex::new(HashMap::new()),
            reservation_changes: Mutex::new(HashMap::new()),
        }
    }

    /// Records that the plugin launched an instance into `reservation` (its room is one
    /// less until EC2 counts again).
    pub fn launched_into(&self, reservation: &str) {
        self.record_reservation_change(reservation, -1);
    }

    /// Records that the plugin terminated an instance in `reservation` (its room is one more,
    /// a little early: EC2 frees it once the instance is gone, and a launch tried before that
    /// fails over to the next offering).
    pub fn released_from(&self, reservation: &str) {
        self.record_reservation_change(reservation, 1);
    }

    fn record_reservation_change(&self, reservation: &str, delta: i64) {
        let now = self.clock.now();
        let mut changes = self.reservation_changes();
        changes.retain(|_, list| {
            list.retain(|(at, _)| now.saturating_duration_since(*at) < RESERVATION_CHANGES_TTL);
            !list.is_empty()
        });
        changes
            .entry(reservation.to_owned())
            .or_default()
            .push((now, delta));
    }

    fn reservation_changes(&self) -> MutexGuard<'_, HashMap<String, Vec<(Instant, i64)>>> {
        self.reservation_changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What `resolved` shapes the catalogue with, each reservation's room less the plugin's
    /// own launches (and plus its terminations) since EC2 counted it.
    pub fn resolved(&self, resolved: &ResolvedNodeClass) -> Resolved {
        let mut shaped = Resolved::of(resolved);
        let changes = self.reservation_changes();
        for reservation in &mut shaped.reservations {
            let since_counted: i64 = changes
                .get(&reservation.id)
                .into_iter()
                .flatten()
                // At the same instant (a fake clock's), the resolution came first: a launch
                // is decided from a resolution.
                .filter(|(at, _)| *at >= resolved.resolved_at)
                .map(|(_, delta)| delta)
                .sum();
            reservation.available = (reservation.available + since_counted).max(0);
        }
        shaped
    }

    /// What `resolved` can launch, with [`Self::resolved`]'s reservations.
    pub fn launchable(&self, resolved: &ResolvedNodeClass) -> Launchable {
        Launchable {
            zones: resolved.subnets.iter().map(|s| s.zone.clone()).collect(),
            architectures: resolved
                .images
                .iter()
                .map(|i| i.architecture.clone())
                .collect(),
            resolved: self.resolved(resolved),
        }
    }

    /// Sets how long EC2 answers are reused.
    pub fn with_refresh_period(mut self, period: Duration) -> Self {
        self.refresh_period = period;
        self
    }

    /// Sets how long an offering stays unavailable after [`Self::mark_unavailable`].
    pub fn with_unavailable_ttl(mut self, ttl: Duration) -> Self {
        self.unavailable_ttl = ttl;
        self
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Records that EC2 had no capacity for this offering (`capacity_type` is `on-demand` or
    /// `spot`): it is reported unavailable for the TTL from now.
    pub fn mark_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        let expiry = self.clock.now() + self.unavailable_ttl;
        self.unavailable_offerings().insert(
            (
                instance_type.to_owned(),
                zone.to_owned(),
                capacity_type.to_owned(),
            ),
            expiry,
        );
    }

    /// Whether the offering was marked unavailable and its TTL has not passed yet.
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let now = self.clock.now();
        let key = (
            instance_type.to_owned(),
            zone.to_owned(),
            capacity_type.to_owned(),
        );
        self.unavailable_offerings()
            .get(&key)
            .is_some_and(|expiry| *expiry > now)
    }

    /// A poisoned lock only means a thread panicked mid-insert; the map is still usable.
    fn unavailable_offerings(&self) -> MutexGuard<'_, HashMap<OfferingKey, Instant>> {
        self.unavailable
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every instance type of the region, for nodes configured by `node_class` (the
    /// EC2NodeClass object as JSON; `None` or an empty object means the defaults).
    pub async fn instance_types(
        &self,
        node_class: Option<&serde_json::Value>,
    ) -> Result<Vec<InstanceType>, InstanceTypeError> {
        self.launchable_instance_types(node_class, None).await
    }

    /// The catalogue with every offering the node class cannot launch marked unavailable:
    /// outside `launchable`'s zones (where the node class has a subnet), as upstream, or of an
    /// architecture it has no image for. Capacity the node class cannot launch must not be
    /// planned (the provisioner would create NodeClaims that can only fail) nor announced as
    /// available (the API's promise). `None`: everything counts.
    pub async fn launchable_instance_types(
        &self,
        node_class: Option<&serde_json::Value>,
        launchable: Option<&Launchable>,
    ) -> Result<Vec<InstanceType>, InstanceTypeError> {
        let none = Resolved::default();
        let resolved = launchable.map_or(&none, |l| &l.resolved);
        self.catalogue(node_class, launchable, resolved).await
    }

    /// The catalogue for a launch from a node class that `resolved` what it did: its types
    /// and offerings as [`Self::launchable_instance_types`] gives them, with every offering as
    /// available as EC2 and the insufficient-capacity cache say (the launch plan checks zones
    /// and images itself, and says which of them left nothing).
    pub async fn placed_instance_types(
        &self,
        node_class: Option<&serde_json::Value>,
        resolved: &Resolved,
    ) -> Result<Vec<InstanceType>, InstanceTypeError> {
        self.catalogue(node_class, None, resolved).await
    }

    async fn catalogue(
        &self,
        node_class: Option<&serde_json::Value>,
        launchable: Option<&Launchable>,
        resolved: &Resolved,
    ) -> Result<Vec<InstanceType>, InstanceTypeError> {
        let placement_group = resolved.placement_group.as_ref();
        let zones = launchable.map(|l| &l.zones);
        // The node class first: a bad one is the caller's error whatever EC2 says.
        let settings = node_settings(node_class)?;
        let on_demand_prices = self
            .on_demand_prices
            .as_ref()
            .map_err(|why| InstanceTypeError::NoPriceTable(why.clone()))?;
        let snapshot = self.snapshot().await?;
        let now = self.clock.now();
        let unavailable: HashMap<OfferingKey, Instant> = {
            let mut offerings = self.unavailable_offerings();
            // Expired entries are dropped here so the map stays as small as the live ones.
            offerings.retain(|_, expiry| *expiry > now);
            offerings.clone()
        };
        let is_unavailable = |instance_type: &str, zone: &str, capacity_type: &str| {
            zones.is_some_and(|usable| !usable.contains(zone))
                || unavailable.contains_key(&(
                    instance_type.to_owned(),
                    zone.to_owned(),
                    capacity_type.to_owned(),
                ))
        };
        let no_zones = Vec::new();
        Ok(snapshot
            .types
            .iter()
            .filter(|info| settings.accepts(info))
            .filter(|info| fits_placement(placement_group, info))
            .map(|info| {
                let name = &info.instance_type;
                let prices = Prices {
                    on_demand: on_demand_prices.get(name).copied(),
                    spot: snapshot.spot.get(name).cloned().unwrap_or_default(),
                };
                let mut instance_type = instance_type(
                    info,
                    &self.region,
                    &snapshot.zones,
                    snapshot.offered_in.get(name).unwrap_or(&no_zones),
                    &prices,
                    &resolved.reservations_of(name),
                    &settings,
                    &is_unavailable,
                );
                if let Some(launchable) = launchable {
                    launchable.mark_imageless(&mut instance_type);
                }
                place(placement_group, &mut instance_type);
                instance_type
            })
            .collect())
    }

    /// The cached EC2 answers, fetched again when older than the refresh period.
    async fn snapshot(&self) -> Result<Arc<Snapshot>, AwsError> {
        let mut cached = self.snapshot.lock().await;
        if let Some(snapshot) = cached.as_ref()
            && self
                .clock
                .now()
                .saturating_duration_since(snapshot.fetched_at)
                < self.refresh_period
        {
            return Ok(Arc::clone(snapshot));
        }
        let snapshot = Arc::new(self.fetch().await?);
        *cached = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    async fn fetch(&self) -> Result<Snapshot, AwsError> {
        let fetched_at = self.clock.now();
        let (mut types, offerings, spot_prices) = tokio::try_join!(
            self.ec2.describe_instance_types(&[]),
            self.ec2.describe_instance_type_offerings(),
            self.ec2.describe_spot_price_history(&[]),
        )?;
        types.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
        types.dedup_by(|a, b| a.instance_type == b.instance_type);
        let mut offered_in: HashMap<String, Vec<String>> = HashMap::new();
        let mut zone_names = std::collections::BTreeSet::new();
        for offering in offerings {
            zone_names.insert(offering.zone.clone());
            offered_in
                .entry(offering.instance_type)
                .or_default()
                .push(offering.zone);
        }
        // The port promises the latest price per pool, but a history may hold several rows
        // per pool: keep the newest.
        let mut latest: HashMap<(String, String), (i64, f64)> = HashMap::new();
        for price in spot_prices {
            let entry = latest
                .entry((price.instance_type, price.zone))
                .or_insert((price.timestamp, price.price));
            if price.timestamp > entry.0 {
                *entry = (price.timestamp, price.price);
            }
        }
        let mut spot: HashMap<String, HashMap<String, f64>> = HashMap::new();
        for ((instance_type, zone), (_, price)) in latest {
            spot.entry(instance_type).or_default().insert(zone, price);
        }
        Ok(Snapshot {
            fetched_at,
            types,
            // The port has no DescribeAvailabilityZones, so zone ids are not known here.
            zones: zone_names
                .into_iter()
                .map(|name| Zone { name, id: None })
                .collect(),
            offered_in,
            spot,
        })
    }
}

/// What of the node class changes the instance types: kubelet `maxPods`, `podsPerCore`,
/// `kubeReserved`, `systemReserved`, the root volume's size, `instanceStorePolicy`, and
/// `connectionTracking` (which only Nitro types take), `networkInterfaces` (which only
/// types with the cards and EFA devices take) and `cpuOptions.nestedVirtualization: enabled`
/// (which only types whose processors support it take).
/// `None` or an empty object means the defaults. The object is EC2NodeClass JSON; its `spec`
/// must parse as one.
pub fn node_settings(
    node_class: Option<&serde_json::Value>,
) -> Result<NodeSettings, InstanceTypeError> {
    let Some(node_class) = node_class else {
        return Ok(NodeSettings::default());
    };
    let Some(object) = node_class.as_object() else {
        return Err(invalid("(root)", "expected a JSON object"));
    };
    if object.is_empty() {
        return Ok(NodeSettings::default());
    }
    let spec_value = object
        .get("spec")
        .ok_or_else(|| invalid("spec", "missing"))?;
    let spec: EC2NodeClassSpec = match serde_json::from_value(spec_value.clone()) {
        Ok(spec) => spec,
        Err(e) => return Err(locate(spec_value, e)),
    };
    let kubelet = spec.kubelet.unwrap_or_default();
    let root_volume_gib = spec
        .block_device_mappings
        .iter()
        .enumerate()
        .find(|(_, mapping)| mapping.root_volume)
        .and_then(|(i, mapping)| {
            let size = mapping.ebs.as_ref()?.volume_size.as_ref()?;
            Some((i, size))
        })
        .map(|(i, size)| {
            let field = format!("spec.blockDeviceMappings[{i}].ebs.volumeSize");
            let quantity = core_domain::quantity::Quantity::parse(&size.0)
                .map_err(|e| invalid(&field, &e.to_string()))?;
            // Whole GiB, rounded down: reporting more ephemeral storage than the disk has
            // would let the scheduler overpack.
            i64::try_from(quantity.value() >> 30).map_err(|_| invalid(&field, "too large"))
        })
        .transpose()?;
    Ok(NodeSettings {
        max_pods: kubelet.max_pods.map(i64::from),
        pods_per_core: kubelet.pods_per_core.map(i64::from),
        kube_reserved: kubelet.kube_reserved,
        system_reserved: kubelet.system_reserved,
        root_volume_gib,
        instance_store_raid0: spec.instance_store_policy == Some(InstanceStorePolicy::Raid0),
        nitro_only: spec.connection_tracking.is_some(),
        nested_virtualization: spec.cpu_options.and_then(|cpu| cpu.nested_virtualization)
            == Some(Toggle::Enabled),
        network_interfaces: spec
            .network_interfaces
            .iter()
            .map(|ni| {
                (
                    i64::from(ni.network_card_index),
                    i64::from(ni.device_index),
                    ni.interface_type == InterfaceType::EfaOnly,
                )
            })
            .collect(),
    })
}

fn invalid(field: &str, message: &str) -> InstanceTypeError {
    InstanceTypeError::InvalidNodeClass {
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

/// serde's error on a `Value` carries no path, so the spec's failure is narrowed down by
/// parsing the parts this module reads on their own; the deepest one that fails is named,
/// otherwise the spec as a whole (serde's message then names a missing or unknown field).
fn locate(spec: &serde_json::Value, spec_error: serde_json::Error) -> InstanceTypeError {
    fn check<T: DeserializeOwned>(value: &serde_json::Value) -> Option<String> {
        serde_json::from_value::<T>(value.clone())
            .err()
            .map(|e| e.to_string())
    }
    if let Some(kubelet) = spec.get("kubelet") {
        if let Some(fields) = kubelet.as_object() {
            for (key, value) in fields {
                let single = serde_json::Value::Object(
                    std::iter::once((key.clone(), value.clone())).collect(),
                );
                if let Some(message) = check::<KubeletConfiguration>(&single) {
                    return invalid(&format!("spec.kubelet.{key}"), &message);
                }
            }
        }
        if let Some(message) = check::<KubeletConfiguration>(kubelet) {
            return invalid("spec.kubelet", &message);
        }
    }
    if let Some(mappings) = spec.get("blockDeviceMappings") {
        if let Some(items) = mappings.as_array() {
            for (i, item) in items.iter().enumerate() {
                if let Some(message) = check::<BlockDeviceMapping>(item) {
                    return invalid(&format!("spec.blockDeviceMappings[{i}]"), &message);
                }
            }
        }
        if let Some(message) = check::<Vec<BlockDeviceMapping>>(mappings) {
            return invalid("spec.blockDeviceMappings", &message);
        }
    }
    if let Some(policy) = spec.get("instanceStorePolicy")
        && let Some(message) = check::<InstanceStorePolicy>(policy)
    {
        return invalid("spec.instanceStorePolicy", &message);
    }
    invalid("spec", &spec_error.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ec2::memory::MemoryEc2;
    use crate::labels::{
        LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
        LABEL_CAPACITY_RESERVATION_TYPE, LABEL_INSTANCE_HYPERVISOR,
    };
    use crate::node_class::fixture::node_class;
    use core_domain::labels::LABEL_CAPACITY_TYPE;
    use provider_sdk::v1::Operator;

    fn setup() -> (Arc<MemoryEc2>, Arc<FakeClock>, InstanceTypeProvider) {
        let ec2 = Arc::new(MemoryEc2::new("us-east-1").unwrap());
        let clock = FakeClock::new();
        let provider = InstanceTypeProvider::new(
            Arc::clone(&ec2) as Arc<dyn Ec2>,
            "us-east-1",
            Arc::clone(&clock) as Arc<dyn Clock>,
        );
        (ec2, clock, provider)
    }

    #[tokio::test]
    async fn a_region_without_prices_refuses_the_catalogue_and_says_why() {
        let ec2 = Arc::new(MemoryEc2::new("us-east-1").unwrap());
        let provider = InstanceTypeProvider::new(ec2, "eu-west-1", FakeClock::new());
        let error = provider.instance_types(None).await.unwrap_err();
        assert!(
            matches!(error, InstanceTypeError::NoPriceTable(_)),
            "{error}"
        );
        assert!(error.to_string().contains("eu-west-1"), "{error}");
    }

    fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
        types.iter().find(|t| t.name == name).unwrap()
    }

    fn offering<'a>(
        t: &'a InstanceType,
        zone: &str,
        capacity_type: &str,
    ) -> &'a provider_sdk::v1::Offering {
        t.offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == capacity_type)
            .unwrap()
    }

    #[tokio::test]
    async fn the_whole_catalogue_comes_back_with_none_omitted() {
        let (_, _, provider) = setup();
        let types = provider.instance_types(None).await.unwrap();
        assert_eq!(types.len(), 1243);
        let catalogue = crate::catalogue::embedded("us-east-1").unwrap();
        let mut names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        let mut expected: Vec<&str> = catalogue
            .instance_types
            .iter()
            .map(|t| t.info.instance_type.as_str())
            .collect();
        names.sort_unstable();
        expected.sort_unstable();
        assert_eq!(names, expected);
    }

    #[tokio::test]
    async fn m5_large_offerings_are_priced_from_the_table_and_spot_history() {
        let (ec2, _, provider) = setup();
        ec2.set_spot_price("m5.large", "us-east-1a", 0.0421);
        let types = provider.instance_types(None).await.unwrap();
        let m5 = find(&types, "m5.large");
        let on_demand = offering(m5, "us-east-1a", "on-demand");
        assert_eq!(on_demand.price, Some(0.096));
        assert!(on_demand.is_available());
        let spot = offering(m5, "us-east-1a", "spot");
        assert_eq!(spot.price, Some(0.0421));
        assert!(spot.is_available());
        // Elsewhere the memory EC2's default spot price.
        let spot_b = offering(m5, "us-east-1b", "spot");
        assert_eq!(spot_b.price, Some(0.0288));
        // Every offering in a zone that offers m5.large is available; the other zones' are
        // present but unavailable.
        let catalogue = crate::catalogue::embedded("us-east-1").unwrap();
        let zones = &catalogue
            .instance_types
            .iter()
            .find(|t| t.info.instance_type == "m5.large")
            .unwrap()
            .zones;
        for o in &m5.offerings {
            assert_eq!(o.is_available(), zones.contains(&o.zone), "{o:?}");
        }
        assert_eq!(m5.offerings.len(), 2 * catalogue.zones().len());
    }

    #[tokio::test]
    async fn a_marked_offering_is_unavailable_until_the_ttl_passes() {
        let (_, clock, provider) = setup();
        provider.mark_unavailable("m5.large", "us-east-1a", "spot");
        assert!(provider.is_unavailable("m5.large", "us-east-1a", "spot"));
        let types = provider.instance_types(None).await.unwrap();
        let m5 = find(&types, "m5.large");
        assert!(!offering(m5, "us-east-1a", "spot").is_available());
        assert!(offering(m5, "us-east-1a", "on-demand").is_available());
        assert!(offering(m5, "us-east-1b", "spot").is_available());
        assert_eq!(types.len(), 1243, "marked, not omitted");

        clock.advance(DEFAULT_UNAVAILABLE_TTL - Duration::from_secs(1));
        let types = provider.instance_types(None).await.unwrap();
        assert!(!offering(find(&types, "m5.large"), "us-east-1a", "spot").is_available());

        clock.advance(Duration::from_secs(1));
        assert!(!provider.is_unavailable("m5.large", "us-east-1a", "spot"));
        let types = provider.instance_types(None).await.unwrap();
        assert!(offering(find(&types, "m5.large"), "us-east-1a", "spot").is_available());
    }

    #[tokio::test]
    async fn ec2_answers_are_reused_within_the_refresh_period_and_fetched_after() {
        let (ec2, clock, provider) = setup();
        let actions = [
            "DescribeInstanceTypes",
            "DescribeInstanceTypeOfferings",
            "DescribeSpotPriceHistory",
        ];
        let calls = || actions.map(|a| ec2.calls(a));
        assert_eq!(
            calls(),
            [0, 0, 0],
            "nothing is called before the first request"
        );
        provider.instance_types(None).await.unwrap();
        assert_eq!(calls(), [1, 1, 1]);

        ec2.set_spot_price("m5.large", "us-east-1a", 0.05);
        clock.advance(DEFAULT_REFRESH_PERIOD - Duration::from_secs(1));
        let types = provider.instance_types(None).await.unwrap();
        assert_eq!(calls(), [1, 1, 1]);
        assert_eq!(
            offering(find(&types, "m5.large"), "us-east-1a", "spot").price,
            Some(0.0288),
            "the cached price"
        );

        clock.advance(Duration::from_secs(1));
        let types = provider.instance_types(None).await.unwrap();
        assert_eq!(calls(), [2, 2, 2]);
        assert_eq!(
            offering(find(&types, "m5.large"), "us-east-1a", "spot").price,
            Some(0.05)
        );
    }

    #[tokio::test]
    async fn kubelet_max_pods_from_the_node_class_changes_pods_capacity() {
        let (_, _, provider) = setup();
        let pods = |types: &[InstanceType]| {
            find(types, "m5.large")
                .capacity
                .get("pods")
                .cloned()
                .unwrap()
        };
        let default = provider.instance_types(None).await.unwrap();
        assert_eq!(pods(&default), "29");
        let mut node_class = node_class();
        node_class["spec"]["kubelet"] = json!({"maxPods": 17});
        let types = provider.instance_types(Some(&node_class)).await.unwrap();
        assert_eq!(pods(&types), "17");
    }

    /// `cpuOptions.nestedVirtualization: enabled` offers only the types whose processors
    /// support it (upstream `nestedVirtualizationCompatibility`); `disabled` changes nothing.
    #[tokio::test]
    async fn nested_virtualization_offers_the_types_that_support_it() {
        let (_, _, provider) = setup();
        let every = provider.instance_types(None).await.unwrap();
        let mut node_class = node_class();
        node_class["spec"]["cpuOptions"] = json!({"nestedVirtualization": "enabled"});
        let nested = provider.instance_types(Some(&node_class)).await.unwrap();
        let names: BTreeSet<&str> = nested.iter().map(|t| t.name.as_str()).collect();
        assert!(
            names.contains("m8i.large") && names.contains("c8i.large"),
            "{names:?}"
        );
        assert!(!names.contains("m5.large") && !names.contains("m7i.large"));
        assert_eq!(
            nested.len(),
            54,
            "the catalogue's types with nested-virtualization"
        );
        node_class["spec"]["cpuOptions"] = json!({"nestedVirtualization": "disabled"});
        let disabled = provider.instance_types(Some(&node_class)).await.unwrap();
        assert_eq!(disabled.len(), every.len());
    }

    /// A placement group narrows the types to those supporting its strategy and labels them
    /// with the group; a partition group's partitions are requirements of the type and one
    /// offering each, so a spread over them sees every partition in every zone.
    #[tokio::test]
    async fn a_placement_group_narrows_the_types_and_splits_offerings_by_partition() {
        let (_, _, provider) = setup();
        let every = provider.instance_types(None).await.unwrap();
        let placed = |strategy: &str, partitions: Option<i32>| Launchable {
            zones: ["us-east-1a".to_owned()].into(),
            architectures: ["amd64".to_owned()].into(),
            resolved: Resolved {
                placement_group: Some(PlacementGroup {
                    id: "pg-0abc".to_owned(),
                    name: "nodes".to_owned(),
                    strategy: strategy.to_owned(),
                    partition_count: partitions,
                    spread_level: None,
                    state: "available".to_owned(),
                }),
                reservations: Vec::new(),
            },
        };
        let cluster = provider
            .launchable_instance_types(None, Some(&placed("cluster", None)))
            .await
            .unwrap();
        // t2 and other older types support only partition and spread groups.
        assert!(every.iter().any(|t| t.name == "t2.micro"));
        assert!(!cluster.iter().any(|t| t.name == "t2.micro"));
        assert!(cluster.len() < every.len());
        let m5 = find(&cluster, "m5.large");
        assert!(m5.requirements.contains(&Requirement::in_values(
            LABEL_PLACEMENT_GROUP_ID,
            ["pg-0abc"]
        )));
        assert_eq!(
            m5.offerings.len(),
            find(&every, "m5.large").offerings.len(),
            "one offering per zone and capacity type, as without a group"
        );

        let partition = provider
            .launchable_instance_types(None, Some(&placed("partition", Some(3))))
            .await
            .unwrap();
        assert!(partition.iter().any(|t| t.name == "t2.micro"));
        let m5 = find(&partition, "m5.large");
        assert!(m5.requirements.contains(&Requirement::in_values(
            LABEL_PLACEMENT_GROUP_PARTITION,
            ["1", "2", "3"]
        )));
        assert_eq!(
            m5.offerings.len(),
            3 * find(&every, "m5.large").offerings.len()
        );
        let partitions_of = |zone: &str, capacity_type: &str| -> Vec<String> {
            m5.offerings
                .iter()
                .filter(|o| o.zone == zone && o.capacity_type == capacity_type)
                .flat_map(|o| &o.requirements)
                .filter(|r| r.key == LABEL_PLACEMENT_GROUP_PARTITION)
                .flat_map(|r| r.values.clone())
                .collect()
        };
        assert_eq!(partitions_of("us-east-1a", "spot"), ["1", "2", "3"]);
        assert_eq!(partitions_of("us-east-1b", "on-demand"), ["1", "2", "3"]);
    }

    /// A reservation adds a `reserved` offering to its type, all but free, with its room,
    /// labelled with the reservation; the type's other offerings say they are in none, and
    /// its requirements name its reservations (others' say none).
    #[tokio::test]
    async fn a_capacity_reservation_adds_a_reserved_offering() {
        let (_, _, provider) = setup();
        let reserved = Launchable {
            zones: ["us-east-1a".to_owned(), "us-east-1b".to_owned()].into(),
            architectures: ["amd64".to_owned()].into(),
            resolved: Resolved {
                placement_group: None,
                reservations: vec![ReservedCapacity {
                    id: "cr-0abc".to_owned(),
                    instance_type: "m5.large".to_owned(),
                    zone: "us-east-1b".to_owned(),
                    reservation_type: "default".to_owned(),
                    interruptible: true,
                    available: 3,
                    expiring: false,
                }],
            },
        };
        let types = provider
            .launchable_instance_types(None, Some(&reserved))
            .await
            .unwrap();
        let m5 = find(&types, "m5.large");
        let reserved_offering = offering(m5, "us-east-1b", "reserved");
        assert!(reserved_offering.is_available());
        assert_eq!(reserved_offering.reservation_capacity, Some(3));
        let on_demand = offering(m5, "us-east-1b", "on-demand").price.unwrap();
        assert_eq!(reserved_offering.price, Some(on_demand / 10_000_000.0));
        let has = |reqs: &[Requirement], key: &str, values: &[&str]| {
            reqs.contains(&Requirement::in_values(key, values.iter().copied()))
        };
        let reqs = &reserved_offering.requirements;
        assert!(has(reqs, LABEL_CAPACITY_RESERVATION_ID, &["cr-0abc"]));
        assert!(has(
            reqs,
            LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
            &["true"]
        ));
        assert!(has(reqs, LABEL_CAPACITY_RESERVATION_TYPE, &["default"]));
        let base = offering(m5, "us-east-1a", "on-demand");
        assert!(base.requirements.iter().any(|r| {
            r.key == LABEL_CAPACITY_RESERVATION_ID && r.operator == Operator::DoesNotExist as i32
        }));
        assert!(has(
            &m5.requirements,
            LABEL_CAPACITY_RESERVATION_ID,
            &["cr-0abc"]
        ));
        assert!(has(
            &m5.requirements,
            LABEL_CAPACITY_TYPE,
            &["on-demand", "reserved", "spot"]
        ));
        let c5 = find(&types, "c5.large");
        assert!(c5.offerings.iter().all(|o| o.capacity_type != "reserved"));
        assert!(c5.requirements.iter().any(|r| {
            r.key == LABEL_CAPACITY_RESERVATION_ID && r.operator == Operator::DoesNotExist as i32
        }));

        // Full, or expiring: offered, not available.
        let mut full = reserved.clone();
        full.resolved.reservations[0].available = 0;
        let types = provider
            .launchable_instance_types(None, Some(&full))
            .await
            .unwrap();
        assert!(!offering(find(&types, "m5.large"), "us-east-1b", "reserved").is_available());
    }

    /// The plugin's own launches and terminations count against a reservation only when EC2
    /// counted it before them; never below zero.
    #[tokio::test]
    async fn a_reservation_is_offered_with_what_the_plugins_own_launches_left() {
        let fixture = crate::node_class::fixture::Fixture::new();
        let reservation = fixture.cloud.ec2.add_capacity_reservation(
            "m5.large",
            "us-east-1a",
            2,
            false,
            false,
            vec![],
        );
        let mut class = node_class();
        class["spec"]["capacityReservationSelectorTerms"] = json!([{"id": reservation.id}]);
        let resolver = fixture.resolver().with_cache_ttl(Duration::ZERO);
        let provider = InstanceTypeProvider::new(
            Arc::clone(&fixture.cloud.ec2) as Arc<dyn Ec2>,
            "us-east-1",
            Arc::clone(&fixture.clock) as Arc<dyn Clock>,
        );
        let room =
            |resolved: &ResolvedNodeClass| provider.resolved(resolved).reservations[0].available;
        let counted = resolver.resolve(&class).await.unwrap();
        assert_eq!(room(&counted), 2);
        fixture.clock.advance(Duration::from_secs(1));
        provider.launched_into(&reservation.id);
        provider.launched_into(&reservation.id);
        provider.launched_into(&reservation.id);
        assert_eq!(
            room(&counted),
            0,
            "three launches after the count, never below zero"
        );
        provider.released_from(&reservation.id);
        assert_eq!(room(&counted), 0, "2 - 3 + 1");
        fixture.clock.advance(Duration::from_secs(1));
        fixture
            .cloud
            .ec2
            .set_capacity_reservation_available(&reservation.id, 1);
        let recounted = resolver.resolve(&class).await.unwrap();
        assert_eq!(room(&recounted), 1, "EC2's newer count includes them");
    }

    /// Connection tracking timeouts need Nitro: with them, a Xen type is not offered at all
    /// (upstream `connectionTrackingCompatibility`).
    #[tokio::test]
    async fn connection_tracking_offers_nitro_types_only() {
        let (_, _, provider) = setup();
        let every = provider.instance_types(None).await.unwrap();
        assert!(every.iter().any(|t| t.name == "m4.large"), "a Xen type");
        let mut node_class = node_class();
        node_class["spec"]["connectionTracking"] = json!({"udpTimeout": 45});
        let nitro = provider.instance_types(Some(&node_class)).await.unwrap();
        assert!(nitro.iter().any(|t| t.name == "m5.large"));
        assert!(!nitro.iter().any(|t| t.name == "m4.large"));
        assert!(nitro.len() < every.len());
        let hypervisor = |t: &InstanceType| {
            t.requirements
                .iter()
                .find(|r| r.key == LABEL_INSTANCE_HYPERVISOR)
                .map(|r| r.values.clone())
        };
        assert!(
            nitro
                .iter()
                .all(|t| hypervisor(t) == Some(vec!["nitro".to_owned()])),
            "every type offered is Nitro"
        );
    }

    /// Network interfaces need their cards, room for their device index and EFA devices
    /// (upstream `networkInterfaceCompatibility`): a second card with an EFA device rules out
    /// the common types; the primary interface alone rules out none that has ENA.
    #[tokio::test]
    async fn network_interfaces_offer_the_types_with_their_cards_and_efa_devices() {
        let (_, _, provider) = setup();
        let with = |interfaces: serde_json::Value| {
            let mut node_class = node_class();
            node_class["spec"]["networkInterfaces"] = interfaces;
            node_class
        };
        let primary =
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]);
        let types = provider.instance_types(Some(&with(primary))).await.unwrap();
        assert!(types.iter().any(|t| t.name == "m5.large"));
        let efa = json!([
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        ]);
        let types = provider.instance_types(Some(&with(efa))).await.unwrap();
        assert!(!types.is_empty(), "types with two cards and EFA exist");
        assert!(!types.iter().any(|t| t.name == "m5.large"));
        assert!(
            types.iter().any(|t| t.name == "p4d.24xlarge"),
            "4 cards, EFA"
        );
    }

    #[test]
    fn node_settings_read_kubelet_root_volume_and_instance_store_policy() {
        let node_class = json!({"spec": {
            "role": "R",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "kubelet": {
                "maxPods": 50,
                "podsPerCore": 4,
                "kubeReserved": {"cpu": "200m"},
                "systemReserved": {"memory": "100Mi"},
            },
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "10Gi"}},
                {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "100Gi"}},
            ],
            "instanceStorePolicy": "RAID0",
        }});
        let settings = node_settings(Some(&node_class)).unwrap();
        assert_eq!(
            settings,
            NodeSettings {
                max_pods: Some(50),
                pods_per_core: Some(4),
                kube_reserved: BTreeMap::from([("cpu".to_owned(), "200m".to_owned())]),
                system_reserved: BTreeMap::from([("memory".to_owned(), "100Mi".to_owned())]),
                root_volume_gib: Some(100),
                instance_store_raid0: true,
                nitro_only: false,
                network_interfaces: Vec::new(),
                nested_virtualization: false,
            }
        );
        assert_eq!(node_settings(None).unwrap(), NodeSettings::default());
        assert_eq!(
            node_settings(Some(&json!({}))).unwrap(),
            NodeSettings::default()
        );
    }

    #[tokio::test]
    async fn an_invalid_node_class_names_the_field() {
        let (ec2, _, provider) = setup();
        let spec = |extra: serde_json::Value| {
            let mut spec = json!({
                "role": "R",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
            });
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            json!({ "spec": spec })
        };
        let cases = [
            (
                spec(json!({"kubelet": {"maxPods": "many"}})),
                "spec.kubelet.maxPods",
            ),
            (
                spec(json!({"instanceStorePolicy": "RAID1"})),
                "spec.instanceStorePolicy",
            ),
            (
                spec(json!({"blockDeviceMappings": [{"rootVolume": "yes"}]})),
                "spec.blockDeviceMappings[0]",
            ),
            (json!({"spec": {"role": "R"}}), "spec"),
            (json!({"metadata": {"name": "x"}}), "spec"),
            (json!("text"), "(root)"),
        ];
        for (node_class, field) in cases {
            let err = provider
                .instance_types(Some(&node_class))
                .await
                .unwrap_err();
            match &err {
                InstanceTypeError::InvalidNodeClass { field: f, .. } => {
                    assert_eq!(f, field, "{err}");
                }
                other => panic!("{other:?}"),
            }
            assert!(err.to_string().contains(field), "{err}");
        }
        assert_eq!(ec2.calls("DescribeInstanceTypes"), 0, "rejected before EC2");
    }
}
