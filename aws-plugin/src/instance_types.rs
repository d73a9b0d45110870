//! EC2 instance types as the plugin API's `InstanceType`: the labels upstream Karpenter's AWS
//! provider puts on nodes, capacity, overhead and offerings, computed from DescribeInstanceTypes
//! data the way upstream does (`pkg/providers/instancetype/types.go`), for the AL2023 image
//! family with ENI-limited pod density.
//!
//! Differences from upstream, on purpose or for want of data: network bandwidth comes from the
//! default network card's baseline bandwidth in DescribeInstanceTypes instead of upstream's
//! generated table; `vpc.amazonaws.com/pod-eni` and private IPv4 capacity (from the VPC resource
//! controller's limits table) are not reported; Windows images are not modelled yet.

use std::collections::{BTreeMap, HashMap};

use crate::labels::*;
use core_domain::labels::{
    ARCHITECTURE_AMD64, ARCHITECTURE_ARM64, CAPACITY_TYPE_RESERVED, LABEL_ARCH,
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_OS, LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE,
    LABEL_WINDOWS_BUILD,
};
use provider_sdk::v1::{Availability, InstanceType, Offering, Operator, Overhead, Requirement};

use crate::catalogue::InstanceTypeInfo;

/// The share of memory the hypervisor keeps (upstream's default `VM_MEMORY_OVERHEAD_PERCENT`).
pub const VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// The root volume AL2023 gets when the node class sets none (upstream `DefaultEBS`), GiB.
pub const DEFAULT_ROOT_VOLUME_GIB: i64 = 20;

/// What of the node class changes the computed instance types.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSettings {
    /// kubelet `maxPods`; unset means ENI-limited.
    pub max_pods: Option<i64>,
    /// kubelet `podsPerCore`.
    pub pods_per_core: Option<i64>,
    /// kubelet `kubeReserved` overrides (resource -> quantity).
    pub kube_reserved: BTreeMap<String, String>,
    /// kubelet `systemReserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// The root volume size in GiB; unset means [`DEFAULT_ROOT_VOLUME_GIB`].
    pub root_volume_gib: Option<i64>,
    /// `instanceStorePolicy: RAID0`: ephemeral storage is the instance store.
    pub instance_store_raid0: bool,
    /// `connectionTracking` is set: only Nitro instance types take its timeouts (upstream
    /// `connectionTrackingCompatibility`), so no other type is offered.
    pub nitro_only: bool,
    /// `networkInterfaces` as (network card, device index, EFA-only): only types with those
    /// cards, interfaces and EFA devices are offered.
    pub network_interfaces: Vec<(i64, i64, bool)>,
    /// `cpuOptions.nestedVirtualization: enabled`: only types whose processors support it
    /// are offered (upstream `nestedVirtualizationCompatibility`).
    pub nested_virtualization: bool,
}

/// DescribeInstanceTypes' `ProcessorInfo.SupportedFeatures` value for nested virtualization.
pub const NESTED_VIRTUALIZATION_FEATURE: &str = "nested-virtualization";

impl NodeSettings {
    /// Whether nodes of these settings can be launched as `info` at all (upstream
    /// `IsCompatibleWithNodeClass`: connection tracking, network interfaces, nested
    /// virtualization).
    pub fn accepts(&self, info: &InstanceTypeInfo) -> bool {
        (!self.nitro_only || info.hypervisor.as_deref() == Some("nitro"))
            && self.interfaces_fit(info)
            && (!self.nested_virtualization
                || info
                    .processor_info
                    .supported_features
                    .iter()
                    .any(|f| f == NESTED_VIRTUALIZATION_FEATURE))
    }

    /// Upstream `networkInterfaceCompatibility`: ENA supported, each interface's card present
    /// with room for its device index, and enough EFA devices.
    fn interfaces_fit(&self, info: &InstanceTypeInfo) -> bool {
        if self.network_interfaces.is_empty() {
            return true;
        }
        let network = &info.network_info;
        if network.network_cards.is_empty() || network.ena_support.as_deref() == Some("unsupported")
        {
            return false;
        }
        let cards_fit = self.network_interfaces.iter().all(|&(card, device, _)| {
            let index = usize::try_from(card).unwrap_or(usize::MAX);
            network.network_cards.len() > index
                && network
                    .network_cards
                    .iter()
                    .enumerate()
                    .find(|(i, c)| {
                        c.network_card_index
                            .or_else(|| i64::try_from(*i).ok())
                            .is_some_and(|index| index == card)
                    })
                    .is_some_and(|(_, c)| c.maximum_network_interfaces > device)
        });
        let efas = self
            .network_interfaces
            .iter()
            .filter(|(_, _, efa)| *efa)
            .count();
        let efas_fit = efas == 0
            || network.efa_info.as_ref().is_some_and(|e| {
                usize::try_from(e.maximum_efa_interfaces).is_ok_and(|max| efas <= max)
            });
        cards_fit && efas_fit
    }
}

/// One zone of the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// `us-east-1a`.
    pub name: String,
    /// `use1-az2`, when known.
    pub id: Option<String>,
}

/// Prices of one instance type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    /// On-demand, per hour.
    pub on_demand: Option<f64>,
    /// Spot, per zone, per hour.
    pub spot: HashMap<String, f64>,
}

/// The currency AWS prices in.
pub const CURRENCY: &str = "USD";

/// A reserved offering costs the on-demand price divided by this: all but free (the instances
/// are paid for already) while keeping the types' relative order for consolidation (upstream's
/// `ReservedCapacityResolver`).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// A capacity reservation of an instance type, as its reserved offering shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedCapacity {
    /// `cr-...`.
    pub id: String,
    /// The instance type it reserves.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    /// Whether its owner may reclaim it.
    pub interruptible: bool,
    /// How many more instances it holds.
    pub available: i64,
    /// A capacity block about to end: nothing more is launched into it.
    pub expiring: bool,
}

/// The instance type `info`, offered in `zones` at `prices`, and in its capacity
/// `reservations` (capacity type `reserved`). An offering is available when the type is
/// offered in the zone, has a price (a reservation: room left, not expiring), and
/// `is_unavailable` (recent insufficient-capacity errors) does not say otherwise; every type
/// is returned, with unavailable offerings marked, never omitted.
#[allow(
    clippy::too_many_arguments,
    reason = "each is one independent input of the computation; a struct would only rename them"
)]
pub fn instance_type(
    info: &InstanceTypeInfo,
    region: &str,
    zones: &[Zone],
    offered_in: &[String],
    prices: &Prices,
    reservations: &[ReservedCapacity],
    settings: &NodeSettings,
    is_unavailable: &dyn Fn(&str, &str, &str) -> bool,
) -> InstanceType {
    let mut offerings = offerings(info, zones, offered_in, prices, is_unavailable);
    if !reservations.is_empty() {
        add_reserved_offerings(
            &mut offerings,
            info,
            zones,
            offered_in,
            prices,
            reservations,
            is_unavailable,
        );
    }
    let pods = pods(info, settings);
    let memory_mib = memory_mib(info);
    let ephemeral_bytes = ephemeral_storage_bytes(info, settings);
    InstanceType {
        name: info.instance_type.clone(),
        requirements: requirements(info, region, &offerings),
        capacity: capacity(info, pods, memory_mib, ephemeral_bytes),
        overhead: Some(overhead(info, pods, settings, ephemeral_bytes)),
        offerings,
        burstable_cpu: info.burstable_performance_supported,
    }
}

fn offerings(
    info: &InstanceTypeInfo,
    zones: &[Zone],
    offered_in: &[String],
    prices: &Prices,
    is_unavailable: &dyn Fn(&str, &str, &str) -> bool,
) -> Vec<Offering> {
    let mut usage_classes: Vec<&str> = info
        .supported_usage_classes
        .iter()
        .map(String::as_str)
        .collect();
    usage_classes.sort_unstable();
    usage_classes.dedup();
    let mut offerings = Vec::new();
    for zone in zones {
        for &capacity_type in &usage_classes {
            let price = match capacity_type {
                "on-demand" => prices.on_demand,
                "spot" => prices.spot.get(&zone.name).copied(),
                // capacity-block and anything newer: not something Karpenter launches.
                _ => continue,
            };
            let offered = offered_in.contains(&zone.name);
            let available = offered
                && price.is_some()
                && !is_unavailable(&info.instance_type, &zone.name, capacity_type);
            // No price: EC2 does not sell it here now. The price is then left unset, never
            // reported as 0 (core would take a free offering for the cheapest).
            offerings.push(Offering {
                zone: zone.name.clone(),
                capacity_type: capacity_type.to_owned(),
                price,
                currency: price.map(|_| CURRENCY.to_owned()).unwrap_or_default(),
                availability: Availability::from_bool(available) as i32,
                requirements: zone
                    .id
                    .iter()
                    .map(|id| requirement_in(LABEL_TOPOLOGY_ZONE_ID, [id.as_str()]))
                    .collect(),
                reservation_capacity: None,
            });
        }
    }
    offerings
}

/// Upstream's `ReservedCapacityResolver`: one `reserved` offering per reservation, labelled
/// with its id, type and interruptibility, priced at [`RESERVED_PRICE_DIVISOR`]th of on-demand,
/// its room as `reservation_capacity`; the other offerings then say they are in no
/// reservation, so a NodeClaim asking for one is never launched outside it.
fn add_reserved_offerings(
    offerings: &mut Vec<Offering>,
    info: &InstanceTypeInfo,
    zones: &[Zone],
    offered_in: &[String],
    prices: &Prices,
    reservations: &[ReservedCapacity],
    is_unavailable: &dyn Fn(&str, &str, &str) -> bool,
) {
    for offering in offerings.iter_mut() {
        for key in RESERVATION_LABELS {
            offering.requirements.push(does_not_exist(key));
        }
    }
    for reservation in reservations {
        let zone_id = zones
            .iter()
            .find(|z| z.name == reservation.zone)
            .and_then(|z| z.id.as_deref());
        let available = reservation.available > 0
            && !reservation.expiring
            && offered_in.contains(&reservation.zone)
            && !is_unavailable(
                &info.instance_type,
                &reservation.zone,
                CAPACITY_TYPE_RESERVED,
            );
        let price = prices.on_demand.map_or(0.0, |p| p / RESERVED_PRICE_DIVISOR);
        let mut requirements = vec![
            requirement_in(LABEL_CAPACITY_RESERVATION_ID, [reservation.id.as_str()]),
            requirement_in(
                LABEL_CAPACITY_RESERVATION_TYPE,
                [reservation.reservation_type.as_str()],
            ),
            requirement_in(
                LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
                [if reservation.interruptible {
                    "true"
                } else {
                    "false"
                }],
            ),
        ];
        requirements.extend(zone_id.map(|id| requirement_in(LABEL_TOPOLOGY_ZONE_ID, [id])));
        offerings.push(Offering {
            zone: reservation.zone.clone(),
            capacity_type: CAPACITY_TYPE_RESERVED.to_owned(),
            price: Some(price),
            currency: CURRENCY.to_owned(),
            availability: Availability::from_bool(available) as i32,
            requirements,
            reservation_capacity: Some(
                i32::try_from(reservation.available.max(0)).unwrap_or(i32::MAX),
            ),
        });
    }
}

/// The labels a reserved offering carries and the others say they lack.
const RESERVATION_LABELS: [&str; 3] = [
    LABEL_CAPACITY_RESERVATION_ID,
    LABEL_CAPACITY_RESERVATION_TYPE,
    LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// `key In [values]`; with no values (a type with no available offering has no zone to
/// offer), `DoesNotExist`, which selects the same nodes (none carrying a value) in a form the
/// API accepts: `In` needs at least one value.
fn requirement_in<'a>(key: &str, values: impl IntoIterator<Item = &'a str>) -> Requirement {
    let mut values: Vec<String> = values.into_iter().map(str::to_owned).collect();
    if values.is_empty() {
        return does_not_exist(key);
    }
    values.sort();
    values.dedup();
    Requirement {
        key: key.to_owned(),
        operator: Operator::In as i32,
        values,
        min_values: None,
    }
}

fn does_not_exist(key: &str) -> Requirement {
    Requirement {
        key: key.to_owned(),
        operator: Operator::DoesNotExist as i32,
        values: Vec::new(),
        min_values: None,
    }
}

/// Upstream `computeRequirements`: every well-known label defined, `DoesNotExist` where the
/// type has no value.
fn requirements(info: &InstanceTypeInfo, region: &str, offerings: &[Offering]) -> Vec<Requirement> {
    let available = || offerings.iter().filter(|o| o.is_available());
    let mut labels: Vec<(&str, Option<String>)> = vec![
        (
            LABEL_INSTANCE_CPU,
            Some(info.v_cpu_info.default_v_cpus.to_string()),
        ),
        (
            LABEL_INSTANCE_MEMORY,
            Some(info.memory_info.size_in_mi_b.to_string()),
        ),
        (
            LABEL_INSTANCE_HYPERVISOR,
            Some(info.hypervisor.clone().unwrap_or_default()),
        ),
        (
            LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            Some(
                info.network_info
                    .encryption_in_transit_supported
                    .to_string(),
            ),
        ),
        (
            LABEL_INSTANCE_CPU_MANUFACTURER,
            info.processor_info
                .manufacturer
                .as_deref()
                .map(lower_kebab_case),
        ),
        (
            LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            info.processor_info
                .sustained_clock_speed_in_ghz
                .map(|ghz| ((ghz * 1000.0).round() as i64).to_string()),
        ),
        (LABEL_INSTANCE_EBS_BANDWIDTH, ebs_bandwidth(info)),
        (
            LABEL_INSTANCE_NETWORK_BANDWIDTH,
            network_bandwidth_mbps(info),
        ),
        (LABEL_INSTANCE_LOCAL_NVME, local_nvme_gb(info)),
    ];
    let (category, generation) = category_and_generation(&info.instance_type).unzip();
    labels.push((LABEL_INSTANCE_CATEGORY, category));
    labels.push((LABEL_INSTANCE_GENERATION, generation));
    let (family, size) = info
        .instance_type
        .split_once('.')
        .map(|(f, s)| (f.to_owned(), s.to_owned()))
        .unzip();
    let flex = family.as_deref().is_some_and(|f| f.contains("-flex"));
    labels.push((LABEL_INSTANCE_CAPABILITY_FLEX, Some(flex.to_string())));
    labels.push((LABEL_INSTANCE_FAMILY, family));
    labels.push((LABEL_INSTANCE_SIZE, size));
    // Upstream offers `default` and `dedicated`; this plugin launches default tenancy only.
    labels.push((LABEL_INSTANCE_TENANCY, Some("default".to_owned())));
    let gpu = info.gpu_info.as_ref().and_then(|g| single(&g.gpus));
    labels.push((
        LABEL_INSTANCE_GPU_NAME,
        gpu.map(|g| lower_kebab_case(&g.name)),
    ));
    labels.push((
        LABEL_INSTANCE_GPU_MANUFACTURER,
        gpu.map(|g| lower_kebab_case(&g.manufacturer)),
    ));
    labels.push((LABEL_INSTANCE_GPU_COUNT, gpu.map(|g| g.count.to_string())));
    labels.push((
        LABEL_INSTANCE_GPU_MEMORY,
        gpu.and_then(|g| g.memory_info.as_ref())
            .map(|m| m.size_in_mi_b.to_string()),
    ));
    let accelerator = info
        .inference_accelerator_info
        .as_ref()
        .and_then(|a| single(&a.accelerators));
    labels.push((
        LABEL_INSTANCE_ACCELERATOR_NAME,
        accelerator.map(|a| lower_kebab_case(&a.name)),
    ));
    labels.push((
        LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        accelerator.map(|a| lower_kebab_case(&a.manufacturer)),
    ));
    labels.push((
        LABEL_INSTANCE_ACCELERATOR_COUNT,
        accelerator.map(|a| a.count.to_string()),
    ));

    let mut requirements = vec![
        requirement_in(LABEL_INSTANCE_TYPE, [info.instance_type.as_str()]),
        requirement_in(LABEL_ARCH, [architecture(info)]),
        requirement_in(LABEL_OS, ["linux"]),
        requirement_in(LABEL_TOPOLOGY_ZONE, available().map(|o| o.zone.as_str())),
        requirement_in(LABEL_TOPOLOGY_REGION, [region]),
        does_not_exist(LABEL_WINDOWS_BUILD),
        requirement_in(
            LABEL_CAPACITY_TYPE,
            available().map(|o| o.capacity_type.as_str()),
        ),
    ];
    let zone_ids: Vec<&str> = available()
        .flat_map(|o| o.requirements.iter())
        .filter(|r| r.key == LABEL_TOPOLOGY_ZONE_ID)
        .flat_map(|r| r.values.iter().map(String::as_str))
        .collect();
    if !zone_ids.is_empty() {
        requirements.push(requirement_in(LABEL_TOPOLOGY_ZONE_ID, zone_ids));
    }
    // Upstream's: the reservations the type is offered in, or none.
    for key in RESERVATION_LABELS {
        let values: Vec<&str> = offerings
            .iter()
            .filter(|o| o.capacity_type == CAPACITY_TYPE_RESERVED)
            .flat_map(|o| o.requirements.iter())
            .filter(|r| r.key == key)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect();
        requirements.push(requirement_in(key, values));
    }
    for (key, value) in labels {
        requirements.push(match value {
            Some(value) => requirement_in(key, [value.as_str()]),
            None => does_not_exist(key),
        });
    }
    requirements
}

fn single<T>(items: &[T]) -> Option<&T> {
    match items {
        [only] => Some(only),
        _ => None,
    }
}

/// `m5d.large` -> (`m`, `5`); `u-6tb1.metal` -> (`u`, `1`), as upstream's
/// `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.` does.
fn category_and_generation(name: &str) -> Option<(String, String)> {
    let family = name.split_once('.')?.0;
    let category: String = family
        .chars()
        .take_while(char::is_ascii_lowercase)
        .collect();
    if category.is_empty() {
        return None;
    }
    let mut rest = &family[category.len()..];
    // An optional `-<digits>tb` memory marker between category and generation.
    if let Some(after_dash) = rest.strip_prefix('-') {
        let digits = after_dash.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && after_dash[digits..].starts_with("tb") {
            rest = &after_dash[digits + 2..];
        }
    }
    let generation: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!generation.is_empty()).then_some((category, generation))
}

fn architecture(info: &InstanceTypeInfo) -> &'static str {
    for architecture in &info.processor_info.supported_architectures {
        match architecture.as_str() {
            "x86_64" => return ARCHITECTURE_AMD64,
            "arm64" => return ARCHITECTURE_ARM64,
            _ => {}
        }
    }
    // i386-only or Mac types: no Kubernetes architecture; nothing will select them.
    "unsupported"
}

fn ebs_bandwidth(info: &InstanceTypeInfo) -> Option<String> {
    let ebs = info.ebs_info.as_ref()?;
    (ebs.ebs_optimized_support.as_deref() == Some("default"))
        .then(|| {
            ebs.ebs_optimized_info
                .as_ref()
                .map(|i| i.maximum_bandwidth_in_mbps.to_string())
        })
        .flatten()
}

fn network_bandwidth_mbps(info: &InstanceTypeInfo) -> Option<String> {
    let card = info
        .network_info
        .network_cards
        .get(info.network_info.default_network_card_index)?;
    card.baseline_bandwidth_in_gbps
        .map(|gbps| ((gbps * 1000.0).round() as i64).to_string())
}

fn local_nvme_gb(info: &InstanceTypeInfo) -> Option<String> {
    let storage = info.instance_storage_info.as_ref()?;
    (storage.nvme_support.as_deref() != Some("unsupported"))
        .then(|| storage.total_size_in_gb.to_string())
}

fn lower_kebab_case(s: &str) -> String {
    s.replace(' ', "-").to_lowercase()
}

/// Pods per node: kubelet maxPods, else the VPC CNI's ENI limit on the default card
/// (`interfaces * (IPv4 per interface - 1) + 2`), capped by podsPerCore.
fn pods(info: &InstanceTypeInfo, settings: &NodeSettings) -> i64 {
    let count = settings.max_pods.unwrap_or_else(|| eni_limited_pods(info));
    match settings.pods_per_core {
        Some(per_core) if per_core > 0 => count.min(per_core * info.v_cpu_info.default_v_cpus),
        _ => count,
    }
}

/// The VPC CNI's pod limit.
pub fn eni_limited_pods(info: &InstanceTypeInfo) -> i64 {
    let network = &info.network_info;
    let interfaces = network
        .network_cards
        .get(network.default_network_card_index)
        .map_or(network.maximum_network_interfaces, |card| {
            card.maximum_network_interfaces
        });
    if interfaces <= 0 {
        return 0;
    }
    interfaces * (network.ipv4_addresses_per_interface - 1) + 2
}

/// Memory the OS sees: less 64 MiB of CMA on Graviton, less the hypervisor's share.
fn memory_mib(info: &InstanceTypeInfo) -> i64 {
    let mut mib = info.memory_info.size_in_mi_b;
    if info
        .processor_info
        .supported_architectures
        .first()
        .map(String::as_str)
        == Some("arm64")
    {
        mib -= 64;
    }
    mib - (mib as f64 * VM_MEMORY_OVERHEAD_PERCENT).ceil() as i64
}

fn ephemeral_storage_bytes(info: &InstanceTypeInfo, settings: &NodeSettings) -> i64 {
    if settings.instance_store_raid0
        && let Some(storage) = &info.instance_storage_info
    {
        return storage.total_size_in_gb * 1_000_000_000;
    }
    settings.root_volume_gib.unwrap_or(DEFAULT_ROOT_VOLUME_GIB) << 30
}

fn capacity(
    info: &InstanceTypeInfo,
    pods: i64,
    memory_mib: i64,
    ephemeral_bytes: i64,
) -> HashMap<String, String> {
    let mut capacity = HashMap::from([
        ("cpu".to_owned(), info.v_cpu_info.default_v_cpus.to_string()),
        ("memory".to_owned(), format!("{memory_mib}Mi")),
        ("ephemeral-storage".to_owned(), ephemeral_bytes.to_string()),
        ("pods".to_owned(), pods.to_string()),
    ]);
    let gpus_by = |manufacturer: &str| -> i64 {
        info.gpu_info
            .iter()
            .flat_map(|g| &g.gpus)
            .filter(|g| g.manufacturer == manufacturer)
            .map(|g| g.count)
            .sum()
    };
    let neurons: i64 = info
        .inference_accelerator_info
        .iter()
        .flat_map(|a| &a.accelerators)
        .map(|a| a.count)
        .sum();
    let efa = info
        .network_info
        .efa_info
        .as_ref()
        .map_or(0, |e| e.maximum_efa_interfaces);
    for (resource, count) in [
        ("nvidia.com/gpu", gpus_by("NVIDIA")),
        ("amd.com/gpu", gpus_by("AMD")),
        ("habana.ai/gaudi", gpus_by("Habana")),
        ("aws.amazon.com/neuron", neurons),
        ("vpc.amazonaws.com/efa", efa),
    ] {
        // Zero counts are left out: a resource the node does not have.
        if count > 0 {
            capacity.insert(resource.to_owned(), count.to_string());
        }
    }
    capacity
}

/// kube-reserved as upstream: memory 11 MiB per pod + 255 MiB; 1 GiB of ephemeral storage;
/// CPU 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest. The
/// eviction threshold: 100 MiB of memory, 10% of ephemeral storage.
fn overhead(
    info: &InstanceTypeInfo,
    pods: i64,
    settings: &NodeSettings,
    ephemeral_bytes: i64,
) -> Overhead {
    let cpu_millis = info.v_cpu_info.default_v_cpus * 1000;
    let mut reserved_cpu_millis = 0.0;
    for (start, end, share) in [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, i64::MAX, 0.0025),
    ] {
        if cpu_millis >= start {
            reserved_cpu_millis += ((cpu_millis.min(end) - start) as f64 * share).floor();
        }
    }
    let mut kube_reserved = HashMap::from([
        ("cpu".to_owned(), format!("{}m", reserved_cpu_millis as i64)),
        ("memory".to_owned(), format!("{}Mi", 11 * pods + 255)),
        ("ephemeral-storage".to_owned(), "1Gi".to_owned()),
    ]);
    kube_reserved.extend(settings.kube_reserved.clone());
    Overhead {
        kube_reserved,
        system_reserved: settings.system_reserved.clone().into_iter().collect(),
        eviction_threshold: HashMap::from([
            ("memory".to_owned(), "100Mi".to_owned()),
            (
                "ephemeral-storage".to_owned(),
                ((ephemeral_bytes as f64 / 10.0).ceil() as i64).to_string(),
            ),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue;

    fn catalogue_type(name: &str) -> InstanceTypeInfo {
        let catalogue = catalogue::embedded("us-east-1").unwrap();
        catalogue
            .instance_types
            .into_iter()
            .find(|t| t.info.instance_type == name)
            .unwrap()
            .info
    }

    fn zones() -> Vec<Zone> {
        ["us-east-1a", "us-east-1b"]
            .map(|z| Zone {
                name: z.into(),
                id: Some(format!("id-{z}")),
            })
            .to_vec()
    }

    fn label<'a>(t: &'a InstanceType, key: &str) -> Option<(&'a str, Vec<&'a str>)> {
        let r = t.requirements.iter().find(|r| r.key == key)?;
        Some((
            r.operator().as_str_name(),
            r.values.iter().map(String::as_str).collect(),
        ))
    }

    fn m5_large(
        settings: &NodeSettings,
        unavailable: &dyn Fn(&str, &str, &str) -> bool,
    ) -> InstanceType {
        let prices = Prices {
            on_demand: Some(0.096),
            spot: HashMap::from([("us-east-1a".to_owned(), 0.04)]),
        };
        instance_type(
            &catalogue_type("m5.large"),
            "us-east-1",
            &zones(),
            &["us-east-1a".to_owned(), "us-east-1b".to_owned()],
            &prices,
            &[],
            settings,
            unavailable,
        )
    }

    #[test]
    fn m5_large_has_upstreams_labels_capacity_and_overhead() {
        let t = m5_large(&NodeSettings::default(), &|_, _, _| false);
        let expected: Vec<(&str, &str, Vec<&str>)> = vec![
            (LABEL_INSTANCE_TYPE, "OPERATOR_IN", vec!["m5.large"]),
            (LABEL_ARCH, "OPERATOR_IN", vec!["amd64"]),
            (LABEL_INSTANCE_CATEGORY, "OPERATOR_IN", vec!["m"]),
            (LABEL_INSTANCE_GENERATION, "OPERATOR_IN", vec!["5"]),
            (LABEL_INSTANCE_FAMILY, "OPERATOR_IN", vec!["m5"]),
            (LABEL_INSTANCE_SIZE, "OPERATOR_IN", vec!["large"]),
            (LABEL_INSTANCE_CPU, "OPERATOR_IN", vec!["2"]),
            (LABEL_INSTANCE_MEMORY, "OPERATOR_IN", vec!["8192"]),
            (
                LABEL_INSTANCE_CPU_MANUFACTURER,
                "OPERATOR_IN",
                vec!["intel"],
            ),
            (LABEL_INSTANCE_HYPERVISOR, "OPERATOR_IN", vec!["nitro"]),
            (LABEL_INSTANCE_GPU_NAME, "OPERATOR_DOES_NOT_EXIST", vec![]),
            (LABEL_WINDOWS_BUILD, "OPERATOR_DOES_NOT_EXIST", vec![]),
            (
                LABEL_TOPOLOGY_ZONE,
                "OPERATOR_IN",
                vec!["us-east-1a", "us-east-1b"],
            ),
            (
                LABEL_CAPACITY_TYPE,
                "OPERATOR_IN",
                vec!["on-demand", "spot"],
            ),
        ];
        for (key, operator, values) in expected {
            assert_eq!(label(&t, key), Some((operator, values)), "{key}");
        }
        // 3 ENIs x (10 IPv4 - 1) + 2 = 29 pods (the EKS AMI's eni-max-pods value for m5.large).
        assert_eq!(t.capacity["pods"], "29");
        // 8192 MiB less 7.5% (615 MiB).
        assert_eq!(t.capacity["memory"], "7577Mi");
        assert_eq!(t.capacity["ephemeral-storage"], (20_i64 << 30).to_string());
        let overhead = t.overhead.unwrap();
        // 60m for the first core + 10m for the second.
        assert_eq!(overhead.kube_reserved["cpu"], "70m");
        assert_eq!(
            overhead.kube_reserved["memory"],
            format!("{}Mi", 11 * 29 + 255)
        );
        assert_eq!(overhead.eviction_threshold["memory"], "100Mi");
    }

    #[test]
    fn every_offering_is_listed_and_only_launchable_ones_are_available() {
        let t = m5_large(&NodeSettings::default(), &|_, zone, capacity_type| {
            zone == "us-east-1b" && capacity_type == "on-demand"
        });
        let offerings: Vec<(&str, &str, bool)> = t
            .offerings
            .iter()
            .map(|o| (o.zone.as_str(), o.capacity_type.as_str(), o.is_available()))
            .collect();
        assert_eq!(
            offerings,
            [
                ("us-east-1a", "on-demand", true),
                ("us-east-1a", "spot", true),
                ("us-east-1b", "on-demand", false), // recent insufficient capacity
                ("us-east-1b", "spot", false),      // no spot price
            ]
        );
        assert_eq!(t.offerings[0].requirements[0].values, ["id-us-east-1a"]);
        assert_eq!(
            label(&t, LABEL_TOPOLOGY_ZONE),
            Some(("OPERATOR_IN", vec!["us-east-1a"])),
            "only available zones"
        );
    }

    #[test]
    fn kubelet_settings_change_pods_and_overhead() {
        let settings = NodeSettings {
            max_pods: Some(110),
            pods_per_core: Some(10),
            root_volume_gib: Some(100),
            ..Default::default()
        };
        let t = m5_large(&settings, &|_, _, _| false);
        assert_eq!(
            t.capacity["pods"], "20",
            "podsPerCore 10 x 2 vCPU caps maxPods 110"
        );
        assert_eq!(t.capacity["ephemeral-storage"], (100_i64 << 30).to_string());
        assert_eq!(
            t.overhead.unwrap().kube_reserved["memory"],
            format!("{}Mi", 11 * 20 + 255)
        );
    }

    #[test]
    fn gpu_and_graviton_types() {
        // Offered in no zone and priced nowhere: every offering is listed, none available.
        let unoffered = |name: &str| {
            instance_type(
                &catalogue_type(name),
                "us-east-1",
                &zones(),
                &[],
                &Prices::default(),
                &[],
                &NodeSettings::default(),
                &|_, _, _| false,
            )
        };
        let g4dn = unoffered("g4dn.xlarge");
        assert_eq!(
            label(&g4dn, LABEL_INSTANCE_GPU_NAME),
            Some(("OPERATOR_IN", vec!["t4"]))
        );
        assert_eq!(
            label(&g4dn, LABEL_INSTANCE_GPU_MANUFACTURER),
            Some(("OPERATOR_IN", vec!["nvidia"]))
        );
        assert_eq!(g4dn.capacity["nvidia.com/gpu"], "1");
        assert!(
            g4dn.offerings.iter().all(|o| !o.is_available()),
            "not offered in any zone given: all unavailable, none omitted"
        );
        assert_eq!(
            label(&g4dn, LABEL_TOPOLOGY_ZONE),
            Some(("OPERATOR_DOES_NOT_EXIST", vec![])),
            "no zone to offer"
        );
        assert!(!g4dn.offerings.is_empty());
        let graviton = unoffered("m6g.large");
        assert_eq!(
            label(&graviton, LABEL_ARCH),
            Some(("OPERATOR_IN", vec!["arm64"]))
        );
        // (8192 - 64) less 7.5% rounded up (610).
        assert_eq!(graviton.capacity["memory"], "7518Mi");
    }

    #[test]
    fn category_and_generation_follow_upstreams_pattern() {
        for (name, expected) in [
            ("m5d.large", Some(("m", "5"))),
            ("u-6tb1.metal", Some(("u", "1"))),
            ("c7gn.16xlarge", Some(("c", "7"))),
            ("mac2.metal", Some(("mac", "2"))),
            ("weird", None),
        ] {
            let got = category_and_generation(name);
            assert_eq!(
                got.as_ref().map(|(c, g)| (c.as_str(), g.as_str())),
                expected,
                "{name}"
            );
        }
    }
}
