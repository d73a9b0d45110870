//! The embedded EC2 catalogue (`data/us-east-1.json`, generated from the EC2 data the `moto`
//! package ships, see `data/README.md`): DescribeInstanceTypes answers under EC2's own field
//! names, the zones offering each type, and its on-demand price. The in-memory EC2 serves it,
//! and benchmarks and the simulator build their instance types from it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The regions whose catalogue is embedded, with the file's text.
const EMBEDDED: &[(&str, &str)] = &[("us-east-1", include_str!("../data/us-east-1.json"))];

/// One region's catalogue.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalogue {
    /// The region.
    pub region: String,
    /// Every instance type offered in the region.
    pub instance_types: Vec<CatalogueEntry>,
}

/// One instance type of the catalogue.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogueEntry {
    /// What DescribeInstanceTypes says about it.
    pub info: InstanceTypeInfo,
    /// The zones offering it (DescribeInstanceTypeOfferings by availability zone).
    pub zones: Vec<String>,
    /// Its on-demand price per hour in US dollars, when the price table has it.
    pub on_demand_price: Option<f64>,
}

/// The DescribeInstanceTypes fields the provider uses, under EC2's names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceTypeInfo {
    /// `m5.large`.
    pub instance_type: String,
    /// `on-demand`, `spot`, `capacity-block`.
    #[serde(default)]
    pub supported_usage_classes: Vec<String>,
    /// `nitro` or `xen`; absent for bare metal.
    #[serde(default)]
    pub hypervisor: Option<String>,
    /// Bare metal.
    #[serde(default)]
    pub bare_metal: bool,
    /// Burstable cpu (the `t` families: a baseline share plus credits).
    #[serde(default)]
    pub burstable_performance_supported: bool,
    /// CPU.
    pub processor_info: ProcessorInfo,
    /// vCPUs.
    pub v_cpu_info: VCpuInfo,
    /// Memory.
    pub memory_info: MemoryInfo,
    /// Network.
    pub network_info: NetworkInfo,
    /// GPUs.
    #[serde(default)]
    pub gpu_info: Option<GpuInfo>,
    /// Inference accelerators.
    #[serde(default)]
    pub inference_accelerator_info: Option<InferenceAcceleratorInfo>,
    /// Instance store.
    #[serde(default)]
    pub instance_storage_info: Option<InstanceStorageInfo>,
    /// EBS.
    #[serde(default)]
    pub ebs_info: Option<EbsInfo>,
    /// The placement group strategies it supports; absent where the source has no word.
    #[serde(default)]
    pub placement_group_info: Option<PlacementGroupInfo>,
}

/// `PlacementGroupInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PlacementGroupInfo {
    /// `cluster`, `partition`, `spread`.
    #[serde(default)]
    pub supported_strategies: Vec<String>,
}

/// `ProcessorInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ProcessorInfo {
    /// `x86_64`, `arm64`, `i386`, `x86_64_mac`, `arm64_mac`.
    #[serde(default)]
    pub supported_architectures: Vec<String>,
    /// `Intel`, `AMD`, `AWS`, `Apple`.
    #[serde(default)]
    pub manufacturer: Option<String>,
    /// GHz.
    #[serde(default)]
    pub sustained_clock_speed_in_ghz: Option<f64>,
    /// Additional features, such as `nested-virtualization`.
    #[serde(default)]
    pub supported_features: Vec<String>,
}

/// `VCpuInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VCpuInfo {
    /// vCPUs.
    pub default_v_cpus: i64,
}

/// `MemoryInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MemoryInfo {
    /// MiB.
    pub size_in_mi_b: i64,
}

/// `NetworkInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInfo {
    /// Network interfaces across all cards.
    pub maximum_network_interfaces: i64,
    /// IPv4 addresses per interface.
    pub ipv4_addresses_per_interface: i64,
    /// The card the VPC CNI uses.
    #[serde(default)]
    pub default_network_card_index: usize,
    /// Per card.
    #[serde(default)]
    pub network_cards: Vec<NetworkCard>,
    /// Encryption in transit.
    #[serde(default)]
    pub encryption_in_transit_supported: bool,
    /// EFA.
    #[serde(default)]
    pub efa_info: Option<EfaInfo>,
    /// `required`, `supported` or `unsupported`; absent where the source has no word.
    #[serde(default)]
    pub ena_support: Option<String>,
}

/// One network card.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkCard {
    /// The card's index.
    #[serde(default)]
    pub network_card_index: Option<i64>,
    /// Interfaces on this card.
    pub maximum_network_interfaces: i64,
    /// Baseline bandwidth, Gbps.
    #[serde(default)]
    pub baseline_bandwidth_in_gbps: Option<f64>,
}

/// `EfaInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EfaInfo {
    /// EFA interfaces.
    pub maximum_efa_interfaces: i64,
}

/// `GpuInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GpuInfo {
    /// The GPUs, by model.
    #[serde(default)]
    pub gpus: Vec<Accelerator>,
}

/// `InferenceAcceleratorInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InferenceAcceleratorInfo {
    /// The accelerators, by model.
    #[serde(default)]
    pub accelerators: Vec<Accelerator>,
}

/// A GPU or accelerator model and how many the type has.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Accelerator {
    /// `T4`, `Inferentia`.
    pub name: String,
    /// `NVIDIA`, `AMD`, `Habana`, `AWS`.
    pub manufacturer: String,
    /// How many.
    pub count: i64,
    /// Memory of one.
    #[serde(default)]
    pub memory_info: Option<MemoryInfo>,
}

/// `InstanceStorageInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceStorageInfo {
    /// GB in total.
    #[serde(rename = "TotalSizeInGB")]
    pub total_size_in_gb: i64,
    /// `required`, `supported`, `unsupported`.
    #[serde(default)]
    pub nvme_support: Option<String>,
}

/// `EbsInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsInfo {
    /// `default`, `supported`, `unsupported`.
    #[serde(default)]
    pub ebs_optimized_support: Option<String>,
    /// Bandwidth.
    #[serde(default)]
    pub ebs_optimized_info: Option<EbsOptimizedInfo>,
}

/// `EbsOptimizedInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsOptimizedInfo {
    /// Mbps.
    pub maximum_bandwidth_in_mbps: i64,
}

/// Why a catalogue could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// No catalogue is embedded for the region.
    #[error("no embedded EC2 catalogue for region {region:?}; embedded: {embedded}")]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The regions there are.
        embedded: String,
    },
    /// The embedded file does not parse (a build with a broken data file).
    #[error("the embedded catalogue for {region} does not parse: {source}")]
    Parse {
        /// The region.
        region: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// The embedded catalogue of `region`.
pub fn embedded(region: &str) -> Result<Catalogue, CatalogueError> {
    let (_, text) = EMBEDDED.iter().find(|(r, _)| *r == region).ok_or_else(|| {
        CatalogueError::UnknownRegion {
            region: region.to_owned(),
            embedded: EMBEDDED
                .iter()
                .map(|(r, _)| *r)
                .collect::<Vec<_>>()
                .join(", "),
        }
    })?;
    serde_json::from_str(text).map_err(|source| CatalogueError::Parse {
        region: region.to_owned(),
        source,
    })
}

impl Catalogue {
    /// Every zone that offers at least one type, sorted.
    pub fn zones(&self) -> Vec<String> {
        let zones: std::collections::BTreeSet<&String> =
            self.instance_types.iter().flat_map(|t| &t.zones).collect();
        zones.into_iter().cloned().collect()
    }

    /// On-demand prices by instance type.
    pub fn on_demand_prices(&self) -> BTreeMap<String, f64> {
        self.instance_types
            .iter()
            .filter_map(|t| Some((t.info.instance_type.clone(), t.on_demand_price?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_us_east_1_catalogue_parses_completely() {
        let catalogue = embedded("us-east-1").unwrap();
        assert_eq!(catalogue.region, "us-east-1");
        assert_eq!(catalogue.instance_types.len(), 1243);
        assert_eq!(catalogue.zones().len(), 6);
        let m5 = catalogue
            .instance_types
            .iter()
            .find(|t| t.info.instance_type == "m5.large")
            .unwrap();
        assert_eq!(m5.info.v_cpu_info.default_v_cpus, 2);
        assert_eq!(m5.info.memory_info.size_in_mi_b, 8192);
        assert_eq!(m5.on_demand_price, Some(0.096));
        assert!(
            embedded("mars-north-1")
                .unwrap_err()
                .to_string()
                .contains("embedded: us-east-1")
        );
    }
}
