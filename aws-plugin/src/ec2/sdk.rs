//! [`Ec2`] on `aws-sdk-ec2`. Built from the plugin's `SdkConfig` (region, credentials, the
//! `AWS_ENDPOINT_URL[_EC2]` override for emulators all come through `aws-config`). SDK types
//! stop here: every answer is converted into the port's types, every error classified by its
//! EC2 code ([`AwsError::from_code`]). Describe calls follow every page.

use std::collections::BTreeMap;
use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types as sdk;

use super::{
    AwsError, AwsFuture, BlockDeviceMapping, CapacityReservation, CapacityReservationQuery,
    CapacityType, Ec2, FleetError, FleetInstance, FleetRequest, FleetResult, Image, ImageQuery,
    Instance, InstanceState, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRequest, MetadataOptions, PlacementGroup, PlacementGroupQuery,
    ResourceQuery, SecurityGroup, SecurityGroupQuery, SpotPrice, Subnet, Tag, TagFilter,
};
use crate::aws::classify;
use crate::catalogue;

/// EC2 through the AWS SDK.
#[derive(Debug, Clone)]
pub struct SdkEc2 {
    client: Client,
}

impl SdkEc2 {
    /// A client from the plugin's AWS configuration.
    pub fn new(config: &SdkConfig) -> Self {
        Self {
            client: Client::new(config),
        }
    }

    /// Wraps an existing client (tests build one with their own endpoint).
    pub fn from_client(client: Client) -> Self {
        Self { client }
    }
}

fn filters(tags: &[TagFilter]) -> Vec<sdk::Filter> {
    tags.iter()
        .map(|f| {
            if f.values.is_empty() {
                sdk::Filter::builder()
                    .name("tag-key")
                    .values(&f.key)
                    .build()
            } else {
                sdk::Filter::builder()
                    .name(format!("tag:{}", f.key))
                    .set_values(Some(f.values.clone()))
                    .build()
            }
        })
        .collect()
}

/// The tag filters, and a filter on `field` when `names` names any.
fn filters_by_name(tags: &[TagFilter], field: &str, names: &[String]) -> Vec<sdk::Filter> {
    let mut filters = filters(tags);
    if !names.is_empty() {
        filters.push(
            sdk::Filter::builder()
                .name(field)
                .set_values(Some(names.to_vec()))
                .build(),
        );
    }
    filters
}

fn some_if_any<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn tags(tags: &[sdk::Tag]) -> Vec<Tag> {
    tags.iter()
        .map(|t| Tag::new(t.key().unwrap_or_default(), t.value().unwrap_or_default()))
        .collect()
}

fn sdk_tags(tags: &[Tag]) -> Vec<sdk::Tag> {
    tags.iter()
        .map(|t| sdk::Tag::builder().key(&t.key).value(&t.value).build())
        .collect()
}

fn tag_spec(resource: sdk::ResourceType, tags: &[Tag]) -> sdk::TagSpecification {
    sdk::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(sdk_tags(tags)))
        .build()
}

fn network_interface(
    ni: &crate::ec2::NetworkInterfaceRequest,
) -> sdk::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest {
    sdk::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
        .device_index(ni.device_index)
        .set_network_card_index(ni.network_card_index)
        .set_interface_type(ni.interface_type.clone())
        .set_groups(some_if_any(ni.security_group_ids.clone()))
        .set_associate_public_ip_address(ni.associate_public_ip_address)
        .set_connection_tracking_specification(ni.connection_tracking.map(|ct| {
            sdk::ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(ct.tcp_established_timeout)
                .set_udp_stream_timeout(ct.udp_stream_timeout)
                .set_udp_timeout(ct.udp_timeout)
                .build()
        }))
        .build()
}

fn int(v: Option<i32>) -> i64 {
    i64::from(v.unwrap_or_default())
}

fn instance_type_info(t: &sdk::InstanceTypeInfo) -> InstanceTypeInfo {
    let processor = t.processor_info();
    let network = t.network_info();
    InstanceTypeInfo {
        instance_type: t
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        supported_usage_classes: t
            .supported_usage_classes()
            .iter()
            .map(|c| c.as_str().to_owned())
            .collect(),
        hypervisor: t.hypervisor().map(|h| h.as_str().to_owned()),
        bare_metal: t.bare_metal().unwrap_or_default(),
        burstable_performance_supported: t.burstable_performance_supported().unwrap_or_default(),
        processor_info: catalogue::ProcessorInfo {
            supported_architectures: processor
                .map(|p| {
                    p.supported_architectures()
                        .iter()
                        .map(|a| a.as_str().to_owned())
                        .collect()
                })
                .unwrap_or_default(),
            manufacturer: processor.and_then(|p| p.manufacturer()).map(str::to_owned),
            sustained_clock_speed_in_ghz: processor.and_then(|p| p.sustained_clock_speed_in_ghz()),
            supported_features: processor
                .map(|p| {
                    p.supported_features()
                        .iter()
                        .map(|f| f.as_str().to_owned())
                        .collect()
                })
                .unwrap_or_default(),
        },
        v_cpu_info: catalogue::VCpuInfo {
            default_v_cpus: int(t.v_cpu_info().and_then(|v| v.default_v_cpus())),
        },
        memory_info: catalogue::MemoryInfo {
            size_in_mi_b: t
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .unwrap_or_default(),
        },
        network_info: catalogue::NetworkInfo {
            maximum_network_interfaces: int(network.and_then(|n| n.maximum_network_interfaces())),
            ipv4_addresses_per_interface: int(
                network.and_then(|n| n.ipv4_addresses_per_interface())
            ),
            default_network_card_index: network
                .and_then(|n| n.default_network_card_index())
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or_default(),
            network_cards: network
                .map(|n| {
                    n.network_cards()
                        .iter()
                        .map(|c| catalogue::NetworkCard {
                            network_card_index: c.network_card_index().map(i64::from),
                            maximum_network_interfaces: int(c.maximum_network_interfaces()),
                            baseline_bandwidth_in_gbps: c.baseline_bandwidth_in_gbps(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            encryption_in_transit_supported: network
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or_default(),
            efa_info: network
                .and_then(|n| n.efa_info())
                .map(|e| catalogue::EfaInfo {
                    maximum_efa_interfaces: int(e.maximum_efa_interfaces()),
                }),
            ena_support: network
                .and_then(|n| n.ena_support())
                .map(|e| e.as_str().to_owned()),
        },
        gpu_info: t.gpu_info().map(|g| catalogue::GpuInfo {
            gpus: g
                .gpus()
                .iter()
                .map(|d| catalogue::Accelerator {
                    name: d.name().unwrap_or_default().to_owned(),
                    manufacturer: d.manufacturer().unwrap_or_default().to_owned(),
                    count: int(d.count()),
                    memory_info: d.memory_info().map(|m| catalogue::MemoryInfo {
                        size_in_mi_b: int(m.size_in_mib()),
                    }),
                })
                .collect(),
        }),
        inference_accelerator_info: t.inference_accelerator_info().map(|i| {
            catalogue::InferenceAcceleratorInfo {
                accelerators: i
                    .accelerators()
                    .iter()
                    .map(|d| catalogue::Accelerator {
                        name: d.name().unwrap_or_default().to_owned(),
                        manufacturer: d.manufacturer().unwrap_or_default().to_owned(),
                        count: int(d.count()),
                        memory_info: d.memory_info().map(|m| catalogue::MemoryInfo {
                            size_in_mi_b: int(m.size_in_mib()),
                        }),
                    })
                    .collect(),
            }
        }),
        instance_storage_info: t
            .instance_storage_info()
            .map(|s| catalogue::InstanceStorageInfo {
                total_size_in_gb: s.total_size_in_gb().unwrap_or_default(),
                nvme_support: s.nvme_support().map(|n| n.as_str().to_owned()),
            }),
        placement_group_info: t
            .placement_group_info()
            .map(|p| catalogue::PlacementGroupInfo {
                supported_strategies: p
                    .supported_strategies()
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect(),
            }),
        ebs_info: t.ebs_info().map(|e| catalogue::EbsInfo {
            ebs_optimized_support: e.ebs_optimized_support().map(|s| s.as_str().to_owned()),
            ebs_optimized_info: e.ebs_optimized_info().map(|o| catalogue::EbsOptimizedInfo {
                maximum_bandwidth_in_mbps: int(o.maximum_bandwidth_in_mbps()),
            }),
        }),
    }
}

fn image(i: &sdk::Image) -> Image {
    Image {
        id: i.image_id().unwrap_or_default().to_owned(),
        name: i.name().unwrap_or_default().to_owned(),
        owner_id: i.owner_id().unwrap_or_default().to_owned(),
        architecture: i
            .architecture()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default(),
        creation_date: i.creation_date().unwrap_or_default().to_owned(),
        state: i.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
        deprecation_time: i.deprecation_time().map(str::to_owned),
        tags: tags(i.tags()),
    }
}

fn instance(i: &sdk::Instance) -> Instance {
    Instance {
        id: i.instance_id().unwrap_or_default().to_owned(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        state: InstanceState::from_name(
            i.state()
                .and_then(|s| s.name())
                .map(|n| n.as_str())
                .unwrap_or_default(),
        ),
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .map(str::to_owned),
        subnet_id: i.subnet_id().filter(|s| !s.is_empty()).map(str::to_owned),
        image_id: i.image_id().map(str::to_owned),
        capacity_type: match i.instance_lifecycle() {
            Some(sdk::InstanceLifecycleType::Spot) => CapacityType::Spot,
            Some(sdk::InstanceLifecycleType::CapacityBlock) => CapacityType::CapacityBlock,
            _ => CapacityType::OnDemand,
        },
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        private_dns_name: i
            .private_dns_name()
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        launch_time: i.launch_time().map(DateTime::secs),
        partition_number: i.placement().and_then(|p| p.partition_number()),
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_owned),
        tags: tags(i.tags()),
    }
}

fn state_of(s: Option<&sdk::InstanceState>) -> InstanceState {
    InstanceState::from_name(
        s.and_then(|s| s.name())
            .map(|n| n.as_str())
            .unwrap_or_default(),
    )
}

fn launch_template(t: &sdk::LaunchTemplate) -> LaunchTemplate {
    LaunchTemplate {
        id: t.launch_template_id().unwrap_or_default().to_owned(),
        name: t.launch_template_name().unwrap_or_default().to_owned(),
        tags: tags(t.tags()),
    }
}

fn block_device(b: &BlockDeviceMapping) -> sdk::LaunchTemplateBlockDeviceMappingRequest {
    sdk::LaunchTemplateBlockDeviceMappingRequest::builder()
        .device_name(&b.device_name)
        .ebs(
            sdk::LaunchTemplateEbsBlockDeviceRequest::builder()
                .set_volume_size(b.volume_size_gib)
                .set_volume_type(b.volume_type.as_deref().map(sdk::VolumeType::from))
                .set_iops(b.iops)
                .set_throughput(b.throughput)
                .set_encrypted(b.encrypted)
                .set_kms_key_id(b.kms_key_id.clone())
                .set_delete_on_termination(b.delete_on_termination)
                .set_snapshot_id(b.snapshot_id.clone())
                .build(),
        )
        .build()
}

fn metadata_options(m: &MetadataOptions) -> sdk::LaunchTemplateInstanceMetadataOptionsRequest {
    sdk::LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .set_http_endpoint(
            m.http_endpoint
                .as_deref()
                .map(sdk::LaunchTemplateInstanceMetadataEndpointState::from),
        )
        .set_http_tokens(
            m.http_tokens
                .as_deref()
                .map(sdk::LaunchTemplateHttpTokensState::from),
        )
        .set_http_put_response_hop_limit(m.http_put_response_hop_limit)
        .set_http_protocol_ipv6(
            m.http_protocol_ipv6
                .as_deref()
                .map(sdk::LaunchTemplateInstanceMetadataProtocolIpv6::from),
        )
        .build()
}

impl Ec2 for SdkEc2 {
    fn describe_instance_types<'a>(
        &'a self,
        names: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceTypeInfo>> {
        Box::pin(async move {
            let mut pages = self
                .client
                .describe_instance_types()
                .set_instance_types(some_if_any(
                    names
                        .iter()
                        .map(|n| sdk::InstanceType::from(n.as_str()))
                        .collect(),
                ))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(t) = pages.next().await {
                out.push(instance_type_info(&t.map_err(classify)?));
            }
            Ok(out)
        })
    }

    fn describe_instance_type_offerings(&self) -> AwsFuture<'_, Vec<InstanceTypeOffering>> {
        Box::pin(async move {
            let mut pages = self
                .client
                .describe_instance_type_offerings()
                .location_type(sdk::LocationType::AvailabilityZone)
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(o) = pages.next().await {
                let o = o.map_err(classify)?;
                out.push(InstanceTypeOffering {
                    instance_type: o
                        .instance_type()
                        .map(|t| t.as_str().to_owned())
                        .unwrap_or_default(),
                    zone: o.location().unwrap_or_default().to_owned(),
                });
            }
            Ok(out)
        })
    }

    fn describe_spot_price_history<'a>(
        &'a self,
        instance_types: &'a [String],
    ) -> AwsFuture<'a, Vec<SpotPrice>> {
        Box::pin(async move {
            // A start time of now makes EC2 answer the price in effect now for every pool
            // (the latest one), not the history.
            let mut pages = self
                .client
                .describe_spot_price_history()
                .set_instance_types(some_if_any(
                    instance_types
                        .iter()
                        .map(|n| sdk::InstanceType::from(n.as_str()))
                        .collect(),
                ))
                .product_descriptions("Linux/UNIX")
                .start_time(DateTime::from(SystemTime::now()))
                .into_paginator()
                .items()
                .send();
            let mut latest: BTreeMap<(String, String), SpotPrice> = BTreeMap::new();
            while let Some(p) = pages.next().await {
                let p = p.map_err(classify)?;
                let (Some(t), Some(zone), Some(price)) =
                    (p.instance_type(), p.availability_zone(), p.spot_price())
                else {
                    continue;
                };
                let Ok(price) = price.parse::<f64>() else {
                    continue;
                };
                let price = SpotPrice {
                    instance_type: t.as_str().to_owned(),
                    zone: zone.to_owned(),
                    price,
                    timestamp: p.timestamp().map(|t| t.secs()).unwrap_or_default(),
                };
                let key = (price.instance_type.clone(), price.zone.clone());
                if latest
                    .get(&key)
                    .is_none_or(|old| old.timestamp < price.timestamp)
                {
                    latest.insert(key, price);
                }
            }
            Ok(latest.into_values().collect())
        })
    }

    fn describe_images<'a>(&'a self, query: &'a ImageQuery) -> AwsFuture<'a, Vec<Image>> {
        Box::pin(async move {
            let filters = filters_by_name(&query.tags, "name", &query.names);
            let mut pages = self
                .client
                .describe_images()
                .set_image_ids(some_if_any(query.ids.clone()))
                .set_owners(some_if_any(query.owners.clone()))
                .set_filters(some_if_any(filters))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(i) = pages.next().await {
                out.push(image(&i.map_err(classify)?));
            }
            Ok(out)
        })
    }

    fn describe_subnets<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Subnet>> {
        Box::pin(async move {
            let mut pages = self
                .client
                .describe_subnets()
                .set_subnet_ids(some_if_any(query.ids.clone()))
                .set_filters(some_if_any(filters(&query.tags)))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(s) = pages.next().await {
                let s = s.map_err(classify)?;
                out.push(Subnet {
                    id: s.subnet_id().unwrap_or_default().to_owned(),
                    vpc_id: s.vpc_id().unwrap_or_default().to_owned(),
                    zone: s.availability_zone().unwrap_or_default().to_owned(),
                    zone_id: s.availability_zone_id().map(str::to_owned),
                    available_ip_address_count: int(s.available_ip_address_count()),
                    tags: tags(s.tags()),
                });
            }
            Ok(out)
        })
    }

    fn describe_security_groups<'a>(
        &'a self,
        query: &'a SecurityGroupQuery,
    ) -> AwsFuture<'a, Vec<SecurityGroup>> {
        Box::pin(async move {
            let filters = filters_by_name(&query.tags, "group-name", &query.names);
            let mut pages = self
                .client
                .describe_security_groups()
                .set_group_ids(some_if_any(query.ids.clone()))
                .set_filters(some_if_any(filters))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(g) = pages.next().await {
                let g = g.map_err(classify)?;
                out.push(SecurityGroup {
                    id: g.group_id().unwrap_or_default().to_owned(),
                    name: g.group_name().unwrap_or_default().to_owned(),
                    vpc_id: g.vpc_id().map(str::to_owned),
                    tags: tags(g.tags()),
                });
            }
            Ok(out)
        })
    }

    fn describe_placement_groups<'a>(
        &'a self,
        query: &'a PlacementGroupQuery,
    ) -> AwsFuture<'a, Vec<PlacementGroup>> {
        Box::pin(async move {
            // Not paginated: EC2 answers every match at once.
            let answer = self
                .client
                .describe_placement_groups()
                .set_group_ids(some_if_any(query.ids.clone()))
                .set_group_names(some_if_any(query.names.clone()))
                .filters(
                    sdk::Filter::builder()
                        .name("state")
                        .values(sdk::PlacementGroupState::Available.as_str())
                        .build(),
                )
                .send()
                .await
                .map_err(classify)?;
            Ok(answer
                .placement_groups()
                .iter()
                .map(|g| PlacementGroup {
                    id: g.group_id().unwrap_or_default().to_owned(),
                    name: g.group_name().unwrap_or_default().to_owned(),
                    strategy: g
                        .strategy()
                        .map(|s| s.as_str().to_owned())
                        .unwrap_or_default(),
                    partition_count: g.partition_count(),
                    spread_level: g.spread_level().map(|l| l.as_str().to_owned()),
                    state: g.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                })
                .collect())
        })
    }

    fn describe_capacity_reservations<'a>(
        &'a self,
        query: &'a CapacityReservationQuery,
    ) -> AwsFuture<'a, Vec<CapacityReservation>> {
        Box::pin(async move {
            let mut filters = vec![
                sdk::Filter::builder()
                    .name("state")
                    .values(sdk::CapacityReservationState::Active.as_str())
                    .build(),
            ];
            // By id, EC2 takes no other criteria (nor MaxResults).
            if query.ids.is_empty() {
                filters.extend(filters_by_name(
                    &query.tags,
                    "owner-id",
                    &query.owner_id.iter().cloned().collect::<Vec<_>>(),
                ));
                if let Some(criteria) = &query.instance_match_criteria {
                    filters.push(
                        sdk::Filter::builder()
                            .name("instance-match-criteria")
                            .values(criteria)
                            .build(),
                    );
                }
            }
            let mut call = self
                .client
                .describe_capacity_reservations()
                .set_filters(Some(filters));
            if query.ids.is_empty() {
                call = call.max_results(1000);
            } else {
                call = call.set_capacity_reservation_ids(Some(query.ids.clone()));
            }
            let mut pages = call.into_paginator().items().send();
            let mut out = Vec::new();
            while let Some(r) = pages.next().await {
                let r = r.map_err(classify)?;
                out.push(CapacityReservation {
                    id: r.capacity_reservation_id().unwrap_or_default().to_owned(),
                    owner_id: r.owner_id().unwrap_or_default().to_owned(),
                    instance_type: r.instance_type().unwrap_or_default().to_owned(),
                    zone: r.availability_zone().unwrap_or_default().to_owned(),
                    instance_match_criteria: r
                        .instance_match_criteria()
                        .map(|c| c.as_str().to_owned())
                        .unwrap_or_default(),
                    reservation_type: r
                        .reservation_type()
                        .map_or("default", |t| t.as_str())
                        .to_owned(),
                    state: r.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                    available_instance_count: int(r.available_instance_count()),
                    total_instance_count: int(r.total_instance_count()),
                    end_date: r.end_date().map(DateTime::secs),
                    interruptible: r.interruptible().unwrap_or(false),
                    tags: tags(r.tags()),
                });
            }
            Ok(out)
        })
    }

    fn create_launch_template<'a>(
        &'a self,
        request: &'a LaunchTemplateRequest,
    ) -> AwsFuture<'a, LaunchTemplate> {
        Box::pin(async move {
            let data = sdk::RequestLaunchTemplateData::builder()
                .image_id(&request.image_id)
                .set_security_group_ids(some_if_any(request.security_group_ids.clone()))
                .set_user_data(request.user_data.clone())
                .set_iam_instance_profile(request.instance_profile.as_ref().map(|name| {
                    sdk::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                        .name(name)
                        .build()
                }))
                .set_block_device_mappings(some_if_any(
                    request
                        .block_device_mappings
                        .iter()
                        .map(block_device)
                        .collect(),
                ))
                .set_metadata_options(request.metadata_options.as_ref().map(metadata_options))
                .set_network_interfaces(some_if_any(
                    request
                        .network_interfaces
                        .iter()
                        .map(network_interface)
                        .collect(),
                ))
                .set_monitoring(request.detailed_monitoring.then(|| {
                    sdk::LaunchTemplatesMonitoringRequest::builder()
                        .enabled(true)
                        .build()
                }))
                .set_placement(request.placement.as_ref().map(|p| {
                    sdk::LaunchTemplatePlacementRequest::builder()
                        .group_id(&p.group_id)
                        .set_partition_number(p.partition_number)
                        .build()
                }))
                .set_capacity_reservation_specification(request.capacity_reservation.as_ref().map(
                    |target| {
                        sdk::LaunchTemplateCapacityReservationSpecificationRequest::builder()
                            .capacity_reservation_target(
                                sdk::CapacityReservationTarget::builder()
                                    .capacity_reservation_id(&target.id)
                                    .build(),
                            )
                            .build()
                    },
                ))
                .set_instance_market_options(
                    request
                        .capacity_reservation
                        .as_ref()
                        .filter(|target| target.capacity_block)
                        .map(|_| {
                            sdk::LaunchTemplateInstanceMarketOptionsRequest::builder()
                                .market_type(sdk::MarketType::CapacityBlock)
                                .build()
                        }),
                )
                .set_cpu_options(request.nested_virtualization.as_deref().map(|nested| {
                    sdk::LaunchTemplateCpuOptionsRequest::builder()
                        .nested_virtualization(sdk::NestedVirtualizationSpecification::from(nested))
                        .build()
                }))
                .build();
            let mut call = self
                .client
                .create_launch_template()
                .launch_template_name(&request.name)
                .launch_template_data(data);
            if !request.tags.is_empty() {
                call = call
                    .tag_specifications(tag_spec(sdk::ResourceType::LaunchTemplate, &request.tags));
            }
            let answer = call.send().await.map_err(classify)?;
            let template = answer.launch_template().ok_or_else(|| {
                AwsError::transport("response", "CreateLaunchTemplate answered no template")
            })?;
            Ok(launch_template(template))
        })
    }

    fn describe_launch_templates<'a>(
        &'a self,
        query: &'a ResourceQuery,
    ) -> AwsFuture<'a, Vec<LaunchTemplate>> {
        Box::pin(async move {
            let mut pages = self
                .client
                .describe_launch_templates()
                .set_launch_template_names(some_if_any(query.ids.clone()))
                .set_filters(some_if_any(filters(&query.tags)))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(t) = pages.next().await {
                out.push(launch_template(&t.map_err(classify)?));
            }
            Ok(out)
        })
    }

    fn create_fleet<'a>(&'a self, request: &'a FleetRequest) -> AwsFuture<'a, FleetResult> {
        Box::pin(async move {
            // One LaunchTemplateConfig per template, as upstream sends them.
            let configs = request
                .launch_templates
                .iter()
                .map(|template| {
                    let overrides = template
                        .overrides
                        .iter()
                        .map(|o| {
                            sdk::FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(sdk::InstanceType::from(o.instance_type.as_str()))
                                .subnet_id(&o.subnet_id)
                                .priority(o.priority)
                                .build()
                        })
                        .collect();
                    sdk::FleetLaunchTemplateConfigRequest::builder()
                        .launch_template_specification(
                            sdk::FleetLaunchTemplateSpecificationRequest::builder()
                                .launch_template_name(&template.name)
                                .version("$Latest")
                                .build(),
                        )
                        .set_overrides(Some(overrides))
                        .build()
                })
                .collect();
            let target_type = match request.capacity_type {
                CapacityType::OnDemand => sdk::DefaultTargetCapacityType::OnDemand,
                CapacityType::Spot => sdk::DefaultTargetCapacityType::Spot,
                CapacityType::CapacityBlock => sdk::DefaultTargetCapacityType::CapacityBlock,
            };
            let mut call = self
                .client
                .create_fleet()
                .r#type(sdk::FleetType::Instant)
                .set_launch_template_configs(Some(configs))
                .target_capacity_specification(
                    sdk::TargetCapacitySpecificationRequest::builder()
                        .total_target_capacity(request.target_capacity)
                        .default_target_capacity_type(target_type)
                        .build(),
                )
                // Priorities are the provider's price order: honour them for both kinds.
                .on_demand_options(
                    sdk::OnDemandOptionsRequest::builder()
                        .allocation_strategy(sdk::FleetOnDemandAllocationStrategy::Prioritized)
                        .build(),
                )
                .spot_options(
                    sdk::SpotOptionsRequest::builder()
                        .allocation_strategy(
                            sdk::SpotAllocationStrategy::CapacityOptimizedPrioritized,
                        )
                        .build(),
                );
            if !request.tags.is_empty() {
                for resource in [
                    sdk::ResourceType::Instance,
                    sdk::ResourceType::Volume,
                    sdk::ResourceType::Fleet,
                ] {
                    call = call.tag_specifications(tag_spec(resource, &request.tags));
                }
            }
            let answer = call.send().await.map_err(classify)?;
            let mut result = FleetResult::default();
            for launched in answer.instances() {
                let o = launched
                    .launch_template_and_overrides()
                    .and_then(|l| l.overrides());
                for id in launched.instance_ids() {
                    result.instances.push(FleetInstance {
                        id: id.clone(),
                        instance_type: launched
                            .instance_type()
                            .or_else(|| o.and_then(|o| o.instance_type()))
                            .map(|t| t.as_str().to_owned())
                            .unwrap_or_default(),
                        zone: o.and_then(|o| o.availability_zone()).map(str::to_owned),
                        subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_owned),
                    });
                }
            }
            for e in answer.errors() {
                let o = e
                    .launch_template_and_overrides()
                    .and_then(|l| l.overrides());
                result.errors.push(FleetError {
                    instance_type: o
                        .and_then(|o| o.instance_type())
                        .map(|t| t.as_str().to_owned()),
                    subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_owned),
                    error: AwsError::from_code(
                        e.error_code().unwrap_or("Unknown"),
                        e.error_message().unwrap_or_default(),
                    ),
                });
            }
            Ok(result)
        })
    }

    fn describe_instances<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Instance>> {
        Box::pin(async move {
            let mut pages = self
                .client
                .describe_instances()
                .set_instance_ids(some_if_any(query.ids.clone()))
                .set_filters(some_if_any(filters(&query.tags)))
                .into_paginator()
                .items()
                .send();
            let mut out = Vec::new();
            while let Some(reservation) = pages.next().await {
                out.extend(
                    reservation
                        .map_err(classify)?
                        .instances()
                        .iter()
                        .map(instance),
                );
            }
            Ok(out)
        })
    }

    fn terminate_instances<'a>(
        &'a self,
        ids: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceStateChange>> {
        Box::pin(async move {
            let answer = self
                .client
                .terminate_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .send()
                .await
                .map_err(classify)?;
            Ok(answer
                .terminating_instances()
                .iter()
                .map(|c| InstanceStateChange {
                    id: c.instance_id().unwrap_or_default().to_owned(),
                    previous: state_of(c.previous_state()),
                    current: state_of(c.current_state()),
                })
                .collect())
        })
    }

    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a [Tag]) -> AwsFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .create_tags()
                .set_resources(Some(resource_ids.to_vec()))
                .set_tags(Some(sdk_tags(tags)))
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
    }
}
