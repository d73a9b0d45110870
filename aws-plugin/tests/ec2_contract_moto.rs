//! The EC2 contract suite (`src/ec2/contract.rs`) against the SDK implementation talking to
//! moto (through `tests/moto/moto_launcher.py`, see `tests/common/mod.rs`), which the test
//! starts on 127.0.0.1 with a free port and kills when done; without it the test fails, it
//! never skips.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup call is a failed test"
)]

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_plugin::ec2::sdk::SdkEc2;
// The contract module refers to the port's items through `super::`, which is this crate's root.
use aws_plugin::ec2::{
    AwsError, CapacityReservationQuery, CapacityType, Ec2, FleetLaunchTemplate, FleetOverride,
    FleetRequest, ImageQuery, InstanceState, LaunchTemplateRequest, PlacementGroupQuery,
    ResourceQuery, SecurityGroupQuery, Tag, TagFilter, wildcard_match,
};
use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};
use aws_sdk_ec2::types as sdk;

#[path = "../src/ec2/contract.rs"]
mod contract;

mod common;

use common::Moto;

/// The fixtures, made through the raw SDK as moto allows: a VPC with a subnet, a security
/// group, and two images registered one after the other.
async fn fixtures(client: &aws_sdk_ec2::Client) -> contract::Fixtures {
    let discovery = |resource: sdk::ResourceType| {
        sdk::TagSpecification::builder()
            .resource_type(resource)
            .tags(
                sdk::Tag::builder()
                    .key("karpenter.sh/discovery")
                    .value("contract")
                    .build(),
            )
            .build()
    };
    let vpc = client
        .create_vpc()
        .cidr_block("10.42.0.0/16")
        .send()
        .await
        .expect("CreateVpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("a VPC id")
        .to_owned();
    let subnet = client
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.42.1.0/24")
        .availability_zone("us-east-1a")
        .tag_specifications(discovery(sdk::ResourceType::Subnet))
        .send()
        .await
        .expect("CreateSubnet");
    let subnet = subnet.subnet().expect("a subnet");
    let group = client
        .create_security_group()
        .group_name("contract")
        .description("contract")
        .vpc_id(&vpc_id)
        .tag_specifications(discovery(sdk::ResourceType::SecurityGroup))
        .send()
        .await
        .expect("CreateSecurityGroup");
    let mut images = Vec::new();
    for name in ["contract-ami-1.0-x86_64", "contract-ami-2.0-x86_64"] {
        let image = client
            .register_image()
            .name(name)
            .architecture(sdk::ArchitectureValues::X8664)
            .root_device_name("/dev/xvda")
            .send()
            .await
            .expect("RegisterImage");
        images.push(image.image_id().expect("an image id").to_owned());
    }
    let mut group_ids = Vec::new();
    for (name, strategy, partitions) in [
        (
            "contract-partition",
            sdk::PlacementStrategy::Partition,
            Some(3),
        ),
        ("contract-cluster", sdk::PlacementStrategy::Cluster, None),
    ] {
        let group = client
            .create_placement_group()
            .group_name(name)
            .strategy(strategy)
            .set_partition_count(partitions)
            .send()
            .await
            .expect("CreatePlacementGroup (moto_launcher.py adds it)");
        group_ids.push(
            group
                .placement_group()
                .and_then(|g| g.group_id())
                .expect("a placement group id")
                .to_owned(),
        );
    }
    let discovered = || discovery(sdk::ResourceType::CapacityReservation);
    let reservation = client
        .create_capacity_reservation()
        .instance_type("m5.large")
        .instance_platform(sdk::CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone("us-east-1a")
        .instance_count(3)
        .instance_match_criteria(sdk::InstanceMatchCriteria::Targeted)
        .tag_specifications(discovered())
        .send()
        .await
        .expect("CreateCapacityReservation (moto_launcher.py adds it)");
    let reservation_id = reservation
        .capacity_reservation()
        .and_then(|r| r.capacity_reservation_id())
        .expect("a capacity reservation id")
        .to_owned();
    // One of its three instances made interruptible, as its owner does: a reservation of 1.
    client
        .create_interruptible_capacity_reservation_allocation()
        .capacity_reservation_id(&reservation_id)
        .instance_count(1)
        .tag_specifications(discovered())
        .send()
        .await
        .expect("CreateInterruptibleCapacityReservationAllocation (moto_launcher.py adds it)");
    let interruptible_reservation_id = client
        .describe_capacity_reservations()
        .send()
        .await
        .expect("DescribeCapacityReservations")
        .capacity_reservations()
        .iter()
        .find(|r| r.interruptible() == Some(true))
        .and_then(|r| r.capacity_reservation_id())
        .expect("the interruptible allocation")
        .to_owned();
    contract::Fixtures {
        reservation_id,
        interruptible_reservation_id,
        partition_group_id: group_ids[0].clone(),
        cluster_group_id: group_ids[1].clone(),
        subnet_id: subnet.subnet_id().expect("a subnet id").to_owned(),
        zone: subnet.availability_zone().expect("a zone").to_owned(),
        security_group_id: group.group_id().expect("a group id").to_owned(),
        image_id: images[0].clone(),
        image_name_pattern: "contract-ami-*-x86_64".to_owned(),
        newest_image_id: images[1].clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_ec2_keeps_the_contract_against_moto() {
    let moto = Moto::start();
    let config = moto.sdk_config();
    let fixtures = fixtures(&aws_sdk_ec2::Client::new(&config)).await;
    let ec2 = SdkEc2::new(&config);
    contract::run_all(&ec2, &fixtures).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_a_transport_error() {
    // A port nothing listens on: bound, learned, released.
    let port = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "test",
        )))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let err = SdkEc2::new(&config)
        .describe_instances(&ResourceQuery::default())
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, AwsError::Transport { .. }), "{err:?}");
}
