//! Launch templates: one per distinct launch configuration (image, security groups, instance
//! profile, user data, block devices, metadata options, network interface settings,
//! monitoring, placement group and partition, capacity reservation, nested virtualization,
//! tags), named after a hash of that
//! configuration (`karpenter.k8s.aws/<hash>`, upstream's `LaunchTemplateName`), so every
//! launch with the same configuration shares one template and a changed configuration gets a
//! new one instead of editing a template instances were launched from.
//!
//! Templates are found by name before they are created; a name taken between the lookup and
//! the creation (another plugin replica, a concurrent Create) is the same configuration, so
//! it counts as found. Names known to exist are remembered, so a burst of Creates costs one
//! lookup per configuration; a template deleted behind the plugin's back is forgotten when
//! CreateFleet says it is gone ([`LaunchTemplates::forget`]).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use core_domain::hash::fnv1a_64;

use crate::apis::EC2NodeClass;
use crate::apis::ec2nodeclass::{
    AMIFamily, BlockDeviceMapping as ApiBlockDeviceMapping, HttpTokens, InterfaceType,
    MetadataOptions as ApiMetadataOptions,
};
use crate::ec2::{
    AwsError, BlockDeviceMapping, ConnectionTracking, Ec2, LaunchTemplateRequest, MetadataOptions,
    NetworkInterfaceRequest, Placement, ReservationTarget, ResourceQuery,
};

use super::fleet::FieldError;

/// The prefix of every launch template the plugin creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws";

/// What one launch configuration is made of; [`request`] turns it into the named template.
#[derive(Debug, Clone)]
pub struct LaunchConfig<'a> {
    /// The node class (block devices, metadata options).
    pub node_class: &'a EC2NodeClass,
    /// The AMI family in effect (default block devices).
    pub family: AMIFamily,
    /// The image.
    pub image_id: &'a str,
    /// The security groups, by id.
    pub security_group_ids: Vec<String>,
    /// The instance profile's name.
    pub instance_profile: Option<String>,
    /// Base64 user data.
    pub user_data: Option<String>,
    /// The placement group (and partition) the node class's `placementGroupSelector`
    /// resolved to.
    pub placement: Option<Placement>,
    /// The capacity reservation a reserved launch targets.
    pub capacity_reservation: Option<ReservationTarget>,
    /// The template's tags.
    pub tags: Vec<crate::ec2::Tag>,
}

/// The CreateLaunchTemplate request for `config`, named after its hash. A block device the
/// node class describes wrongly is the error, naming its field.
pub fn request(config: &LaunchConfig<'_>) -> Result<LaunchTemplateRequest, FieldError> {
    let mut security_group_ids = config.security_group_ids.clone();
    security_group_ids.sort();
    security_group_ids.dedup();
    let spec = &config.node_class.spec;
    let network_interfaces = network_interfaces(config.node_class, &mut security_group_ids);
    let mut request = LaunchTemplateRequest {
        name: String::new(),
        image_id: config.image_id.to_owned(),
        security_group_ids,
        network_interfaces,
        detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
        user_data: config.user_data.clone(),
        instance_profile: config.instance_profile.clone(),
        block_device_mappings: block_device_mappings(config.node_class, config.family)?,
        metadata_options: Some(metadata_options(&config.node_class.spec.metadata_options)),
        placement: config.placement.clone(),
        capacity_reservation: config.capacity_reservation.clone(),
        // Upstream sets it whenever the node class does, `disabled` included.
        nested_virtualization: spec
            .cpu_options
            .and_then(|cpu| cpu.nested_virtualization)
            .map(|toggle| toggle.as_str().to_owned()),
        tags: config.tags.clone(),
    };
    request.name = name_of(&request);
    Ok(request)
}

/// The interfaces the template names, as upstream's `generateNetworkInterfaces` builds them
/// (but the EFA interfaces it adds by itself for EFA types): the node class's
/// `networkInterfaces`, each with the security groups, and, but on an `efa-only` device, the
/// public IP setting and the connection tracking; without them, the primary interface alone
/// when the node class sets its public IP or connection tracking. The groups move from
/// `security_group_ids` onto the interfaces (EC2 refuses them in both places). Without any such
/// setting none is named (upstream always names the primary interface; the launches are the
/// same, and the templates of such node classes keep their names).
fn network_interfaces(
    node_class: &EC2NodeClass,
    security_group_ids: &mut Vec<String>,
) -> Vec<NetworkInterfaceRequest> {
    let spec = &node_class.spec;
    let tracking = spec.connection_tracking.map(|ct| ConnectionTracking {
        tcp_established_timeout: ct.tcp_established_timeout,
        udp_stream_timeout: ct.udp_stream_timeout,
        udp_timeout: ct.udp_timeout,
    });
    if !spec.network_interfaces.is_empty() {
        let groups = std::mem::take(security_group_ids);
        return spec
            .network_interfaces
            .iter()
            .map(|ni| {
                // Assigning an address setting to an EFA-only device makes RunInstances fail.
                let addressed = ni.interface_type != InterfaceType::EfaOnly;
                NetworkInterfaceRequest {
                    network_card_index: Some(ni.network_card_index),
                    device_index: ni.device_index,
                    interface_type: Some(ni.interface_type.as_str().to_owned()),
                    security_group_ids: groups.clone(),
                    associate_public_ip_address: spec
                        .associate_public_ip_address
                        .filter(|_| addressed),
                    connection_tracking: tracking.filter(|_| addressed),
                }
            })
            .collect();
    }
    if spec.associate_public_ip_address.is_none() && tracking.is_none() {
        return Vec::new();
    }
    vec![NetworkInterfaceRequest {
        network_card_index: None,
        device_index: 0,
        interface_type: None,
        security_group_ids: std::mem::take(security_group_ids),
        associate_public_ip_address: spec.associate_public_ip_address,
        connection_tracking: tracking,
    }]
}

/// `karpenter.k8s.aws/<hash>` of everything in `request` but its name.
pub fn name_of(request: &LaunchTemplateRequest) -> String {
    let devices: Vec<serde_json::Value> = request
        .block_device_mappings
        .iter()
        .map(|b| {
            serde_json::json!([
                b.device_name,
                b.volume_size_gib,
                b.volume_type,
                b.iops,
                b.throughput,
                b.encrypted,
                b.kms_key_id,
                b.delete_on_termination,
                b.snapshot_id,
            ])
        })
        .collect();
    let metadata = request.metadata_options.as_ref().map(|m| {
        serde_json::json!([
            m.http_endpoint,
            m.http_tokens,
            m.http_put_response_hop_limit,
            m.http_protocol_ipv6,
        ])
    });
    let tags: Vec<[&str; 2]> = request
        .tags
        .iter()
        .map(|t| [t.key.as_str(), t.value.as_str()])
        .collect();
    // An array, not an object: its text does not depend on how serde_json orders keys.
    let mut canonical = vec![
        serde_json::json!(request.image_id),
        serde_json::json!(request.security_group_ids),
        serde_json::json!(request.user_data),
        serde_json::json!(request.instance_profile),
        serde_json::json!(devices),
        serde_json::json!(metadata),
        serde_json::json!(tags),
    ];
    // Appended only when set, so that the templates of configurations without them keep
    // the names they had before these settings reached the template.
    if !request.network_interfaces.is_empty() {
        let interfaces: Vec<serde_json::Value> = request
            .network_interfaces
            .iter()
            .map(|ni| {
                let tracking = ni.connection_tracking.map(|ct| {
                    [
                        ct.tcp_established_timeout,
                        ct.udp_stream_timeout,
                        ct.udp_timeout,
                    ]
                });
                serde_json::json!([
                    ni.network_card_index,
                    ni.device_index,
                    ni.interface_type,
                    ni.security_group_ids,
                    ni.associate_public_ip_address,
                    tracking,
                ])
            })
            .collect();
        canonical.push(serde_json::json!(["networkInterfaces", interfaces]));
    }
    if request.detailed_monitoring {
        canonical.push(serde_json::json!("detailedMonitoring"));
    }
    if let Some(placement) = &request.placement {
        canonical.push(serde_json::json!([
            "placement",
            placement.group_id,
            placement.partition_number,
        ]));
    }
    if let Some(target) = &request.capacity_reservation {
        canonical.push(serde_json::json!([
            "capacityReservation",
            target.id,
            target.capacity_block,
        ]));
    }
    if let Some(nested) = &request.nested_virtualization {
        canonical.push(serde_json::json!(["nestedVirtualization", nested]));
    }
    let canonical = serde_json::Value::Array(canonical);
    format!(
        "{NAME_PREFIX}/{}",
        fnv1a_64(canonical.to_string().as_bytes())
    )
}

/// The node class's block devices, or the AMI family's defaults when it names none
/// (upstream's `DefaultBlockDeviceMappings`: an encrypted gp3 root volume of 20 GiB, for
/// Bottlerocket a 4 GiB OS volume and a 20 GiB data volume, for Windows 50 GiB; none for
/// Custom).
pub fn block_device_mappings(
    node_class: &EC2NodeClass,
    family: AMIFamily,
) -> Result<Vec<BlockDeviceMapping>, FieldError> {
    let mappings = &node_class.spec.block_device_mappings;
    if mappings.is_empty() {
        return Ok(default_block_devices(family));
    }
    mappings
        .iter()
        .enumerate()
        .map(|(i, m)| block_device(m, &format!("node_class.spec.blockDeviceMappings[{i}]")))
        .collect()
}

fn default_block_devices(family: AMIFamily) -> Vec<BlockDeviceMapping> {
    let gp3 = |device: &str, gib: i32| BlockDeviceMapping {
        device_name: device.to_owned(),
        volume_size_gib: Some(gib),
        volume_type: Some("gp3".to_owned()),
        encrypted: Some(true),
        ..BlockDeviceMapping::default()
    };
    match family {
        AMIFamily::Al2 | AMIFamily::Al2023 => vec![gp3("/dev/xvda", 20)],
        AMIFamily::Bottlerocket => vec![gp3("/dev/xvda", 4), gp3("/dev/xvdb", 20)],
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            vec![gp3("/dev/sda1", 50)]
        }
        AMIFamily::Custom => Vec::new(),
    }
}

fn block_device(
    mapping: &ApiBlockDeviceMapping,
    field: &str,
) -> Result<BlockDeviceMapping, FieldError> {
    let device_name = mapping
        .device_name
        .clone()
        .ok_or_else(|| (format!("{field}.deviceName"), "missing".to_owned()))?;
    let Some(ebs) = &mapping.ebs else {
        return Ok(BlockDeviceMapping {
            device_name,
            ..BlockDeviceMapping::default()
        });
    };
    let int = |value: Option<i64>, name: &str| {
        value
            .map(i32::try_from)
            .transpose()
            .map_err(|_| (format!("{field}.ebs.{name}"), "out of range".to_owned()))
    };
    let volume_size_gib = ebs
        .volume_size
        .as_ref()
        .map(|size| {
            let at = || format!("{field}.ebs.volumeSize");
            let quantity = core_domain::quantity::Quantity::parse(&size.0)
                .map_err(|e| (at(), e.to_string()))?;
            // Whole GiB rounded up, as upstream: EC2 sizes volumes in GiB.
            let gib = (quantity.value() + (1 << 30) - 1) >> 30;
            i32::try_from(gib).map_err(|_| (at(), "too large".to_owned()))
        })
        .transpose()?;
    Ok(BlockDeviceMapping {
        device_name,
        volume_size_gib,
        volume_type: ebs
            .volume_type
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|v| v.as_str().map(str::to_owned)),
        iops: int(ebs.iops, "iops")?,
        throughput: int(ebs.throughput, "throughput")?,
        encrypted: ebs.encrypted,
        kms_key_id: ebs.kms_key_id.clone(),
        delete_on_termination: ebs.delete_on_termination,
        snapshot_id: ebs.snapshot_id.clone(),
    })
}

/// The node class's IMDS options in EC2's spelling.
pub fn metadata_options(options: &ApiMetadataOptions) -> MetadataOptions {
    MetadataOptions {
        http_endpoint: Some(options.http_endpoint.as_str().to_owned()),
        http_tokens: Some(
            match options.http_tokens {
                HttpTokens::Required => "required",
                HttpTokens::Optional => "optional",
            }
            .to_owned(),
        ),
        http_put_response_hop_limit: i32::try_from(options.http_put_response_hop_limit).ok(),
        http_protocol_ipv6: Some(options.http_protocol_ipv6.as_str().to_owned()),
    }
}

/// The launch templates known to exist.
#[derive(Debug, Default)]
pub struct LaunchTemplates {
    known: Mutex<HashSet<String>>,
}

impl LaunchTemplates {
    fn known(&self) -> MutexGuard<'_, HashSet<String>> {
        // Only names are inserted and removed; a panic elsewhere leaves the set consistent.
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes sure the template `request` names exists: found by name, or created.
    pub async fn ensure(
        &self,
        ec2: &dyn Ec2,
        request: &LaunchTemplateRequest,
    ) -> Result<(), AwsError> {
        if self.known().contains(&request.name) {
            return Ok(());
        }
        let found = match ec2
            .describe_launch_templates(&ResourceQuery::ids([request.name.clone()]))
            .await
        {
            Ok(found) => !found.is_empty(),
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e),
        };
        if !found {
            match ec2.create_launch_template(request).await {
                Ok(_) => {
                    tracing::debug!(launch_template = %request.name, "created launch template");
                }
                // Created by someone else since the lookup: same name, same configuration.
                Err(AwsError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.known().insert(request.name.clone());
        Ok(())
    }

    /// Believes `name` exists without asking EC2 (tests of a stale belief).
    #[cfg(test)]
    pub(crate) fn remember(&self, name: &str) {
        self.known().insert(name.to_owned());
    }

    /// Forgets that `name` exists (CreateFleet said it does not).
    pub fn forget(&self, name: &str) {
        self.known().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ec2::Tag;
    use crate::ec2::memory::MemoryEc2;
    use crate::node_class::parse_node_class;

    fn node_class(extra: serde_json::Value) -> EC2NodeClass {
        let mut spec = json!({
            "role": "R",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        parse_node_class(&json!({"metadata": {"name": "nodes"}, "spec": spec})).unwrap()
    }

    fn config<'a>(node_class: &'a EC2NodeClass, image: &'a str) -> LaunchConfig<'a> {
        LaunchConfig {
            node_class,
            family: AMIFamily::Al2023,
            image_id: image,
            security_group_ids: vec!["sg-2".to_owned(), "sg-1".to_owned()],
            instance_profile: Some("profile".to_owned()),
            user_data: Some("dXNlcg==".to_owned()),
            placement: None,
            capacity_reservation: None,
            tags: vec![Tag::new("a", "b")],
        }
    }

    /// The placement group and partition, and nested virtualization either way, reach the
    /// template and its name; a template without them keeps the name it had.
    #[test]
    fn placement_and_nested_virtualization_reach_the_template() {
        let plain = request(&config(&node_class(json!({})), "ami-1")).unwrap();
        assert_eq!(plain.placement, None);
        assert_eq!(plain.nested_virtualization, None);
        assert_eq!(plain.name, "karpenter.k8s.aws/5129015451268291919");

        let nc = node_class(json!({}));
        let mut placed = config(&nc, "ami-1");
        placed.placement = Some(Placement {
            group_id: "pg-1".to_owned(),
            partition_number: Some(2),
        });
        let in_partition_2 = request(&placed).unwrap();
        assert_eq!(in_partition_2.placement, placed.placement);
        assert_ne!(in_partition_2.name, plain.name);
        placed.placement = Some(Placement {
            group_id: "pg-1".to_owned(),
            partition_number: None,
        });
        let anywhere = request(&placed).unwrap();
        assert_ne!(anywhere.name, in_partition_2.name);
        assert_ne!(anywhere.name, plain.name);

        let enabled = node_class(json!({"cpuOptions": {"nestedVirtualization": "enabled"}}));
        let enabled = request(&config(&enabled, "ami-1")).unwrap();
        assert_eq!(enabled.nested_virtualization.as_deref(), Some("enabled"));
        let disabled = node_class(json!({"cpuOptions": {"nestedVirtualization": "disabled"}}));
        let disabled = request(&config(&disabled, "ami-1")).unwrap();
        assert_eq!(disabled.nested_virtualization.as_deref(), Some("disabled"));
        assert_ne!(enabled.name, disabled.name);
        assert_ne!(enabled.name, plain.name);
        let empty = node_class(json!({"cpuOptions": {}}));
        assert_eq!(request(&config(&empty, "ami-1")).unwrap().name, plain.name);
    }

    #[test]
    fn names_follow_the_configuration() {
        let nc = node_class(json!({}));
        let a = request(&config(&nc, "ami-1")).unwrap();
        assert!(a.name.starts_with("karpenter.k8s.aws/"), "{}", a.name);
        assert_eq!(a.security_group_ids, ["sg-1", "sg-2"]);
        let same = request(&config(&nc, "ami-1")).unwrap();
        assert_eq!(a.name, same.name);
        let other_image = request(&config(&nc, "ami-2")).unwrap();
        assert_ne!(a.name, other_image.name);
        let mut other_data = config(&nc, "ami-1");
        other_data.user_data = Some("b3RoZXI=".to_owned());
        assert_ne!(a.name, request(&other_data).unwrap().name);
        let mut reordered = config(&nc, "ami-1");
        reordered.security_group_ids.reverse();
        assert_eq!(a.name, request(&reordered).unwrap().name);
    }

    /// A public IP setting or connection tracking names the primary interface, which takes the
    /// groups; detailed monitoring is asked for; each makes another template. Without them the
    /// template is as it was, under the name it had.
    #[test]
    fn interface_settings_and_monitoring_reach_the_template() {
        let plain = request(&config(&node_class(json!({})), "ami-1")).unwrap();
        assert!(plain.network_interfaces.is_empty());
        assert!(!plain.detailed_monitoring);
        assert_eq!(
            plain.name, "karpenter.k8s.aws/5129015451268291919",
            "the name such a template had before interface settings reached templates"
        );

        let nc = node_class(json!({
            "associatePublicIPAddress": false,
            "connectionTracking": {"tcpEstablishedTimeout": 300, "udpTimeout": 45},
            "detailedMonitoring": true,
        }));
        let tuned = request(&config(&nc, "ami-1")).unwrap();
        assert!(
            tuned.security_group_ids.is_empty(),
            "the groups move to the interface"
        );
        assert_eq!(
            tuned.network_interfaces,
            [NetworkInterfaceRequest {
                network_card_index: None,
                device_index: 0,
                interface_type: None,
                security_group_ids: vec!["sg-1".to_owned(), "sg-2".to_owned()],
                associate_public_ip_address: Some(false),
                connection_tracking: Some(ConnectionTracking {
                    tcp_established_timeout: Some(300),
                    udp_stream_timeout: None,
                    udp_timeout: Some(45),
                }),
            }]
        );
        assert!(tuned.detailed_monitoring);
        assert_ne!(tuned.name, plain.name);

        let other_timeout = node_class(json!({
            "associatePublicIPAddress": false,
            "connectionTracking": {"tcpEstablishedTimeout": 600, "udpTimeout": 45},
            "detailedMonitoring": true,
        }));
        assert_ne!(
            request(&config(&other_timeout, "ami-1")).unwrap().name,
            tuned.name
        );
        let monitored = node_class(json!({"detailedMonitoring": true}));
        let monitored = request(&config(&monitored, "ami-1")).unwrap();
        assert!(monitored.network_interfaces.is_empty());
        assert_ne!(monitored.name, plain.name);
    }

    /// The node class's interfaces, each with the groups; an EFA-only device takes neither
    /// the public IP setting nor connection tracking.
    #[test]
    fn network_interfaces_reach_the_template_as_upstream_builds_them() {
        let nc = node_class(json!({
            "associatePublicIPAddress": true,
            "connectionTracking": {"udpTimeout": 45},
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
            ],
        }));
        let with_efa = request(&config(&nc, "ami-1")).unwrap();
        assert!(with_efa.security_group_ids.is_empty());
        let groups = vec!["sg-1".to_owned(), "sg-2".to_owned()];
        let tracking = ConnectionTracking {
            udp_timeout: Some(45),
            ..ConnectionTracking::default()
        };
        assert_eq!(
            with_efa.network_interfaces,
            [
                NetworkInterfaceRequest {
                    network_card_index: Some(0),
                    device_index: 0,
                    interface_type: Some("interface".to_owned()),
                    security_group_ids: groups.clone(),
                    associate_public_ip_address: Some(true),
                    connection_tracking: Some(tracking),
                },
                NetworkInterfaceRequest {
                    network_card_index: Some(1),
                    device_index: 0,
                    interface_type: Some("efa-only".to_owned()),
                    security_group_ids: groups,
                    associate_public_ip_address: None,
                    connection_tracking: None,
                },
            ]
        );
        let primary_only = node_class(json!({
            "associatePublicIPAddress": true,
            "connectionTracking": {"udpTimeout": 45},
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            ],
        }));
        assert_ne!(
            request(&config(&primary_only, "ami-1")).unwrap().name,
            with_efa.name
        );
    }

    #[test]
    fn block_devices_come_from_the_node_class_or_the_family() {
        let nc = node_class(json!({}));
        let root = block_device_mappings(&nc, AMIFamily::Al2023).unwrap();
        assert_eq!(root.len(), 1);
        assert_eq!(root[0].device_name, "/dev/xvda");
        assert_eq!(root[0].volume_size_gib, Some(20));
        assert_eq!(root[0].encrypted, Some(true));
        assert_eq!(
            block_device_mappings(&nc, AMIFamily::Bottlerocket)
                .unwrap()
                .len(),
            2
        );
        assert!(
            block_device_mappings(&nc, AMIFamily::Custom)
                .unwrap()
                .is_empty()
        );

        let nc = node_class(json!({"blockDeviceMappings": [{
            "deviceName": "/dev/xvda",
            "rootVolume": true,
            "ebs": {"volumeSize": "100G", "volumeType": "io2", "iops": 3000, "encrypted": false}
        }]}));
        let devices = block_device_mappings(&nc, AMIFamily::Al2023).unwrap();
        // 100 GB is 93.1 GiB: rounded up.
        assert_eq!(devices[0].volume_size_gib, Some(94));
        assert_eq!(devices[0].volume_type.as_deref(), Some("io2"));
        assert_eq!(devices[0].iops, Some(3000));
        assert_eq!(devices[0].encrypted, Some(false));

        let options = metadata_options(&nc.spec.metadata_options);
        assert_eq!(options.http_tokens.as_deref(), Some("required"));
        assert_eq!(options.http_put_response_hop_limit, Some(1));
        assert_eq!(options.http_endpoint.as_deref(), Some("enabled"));
    }

    #[tokio::test]
    async fn ensure_finds_creates_and_remembers() {
        let ec2 = MemoryEc2::new("us-east-1").unwrap();
        let image = ec2.add_image("img", "x86_64", "2024-01-01T00:00:00.000Z", vec![]);
        let nc = node_class(json!({}));
        let request = request(&config(&nc, &image.id)).unwrap();
        let templates = LaunchTemplates::default();
        templates.ensure(&ec2, &request).await.unwrap();
        templates.ensure(&ec2, &request).await.unwrap();
        assert_eq!(ec2.calls("CreateLaunchTemplate"), 1);
        assert_eq!(ec2.calls("DescribeLaunchTemplates"), 1, "remembered");

        // Another process's cache: the template exists, found, not created again.
        let fresh = LaunchTemplates::default();
        fresh.ensure(&ec2, &request).await.unwrap();
        assert_eq!(ec2.calls("CreateLaunchTemplate"), 1);
        fresh.forget(&request.name);
        fresh.ensure(&ec2, &request).await.unwrap();
        assert_eq!(
            ec2.calls("DescribeLaunchTemplates"),
            3,
            "forgotten, looked up again"
        );
    }
}
