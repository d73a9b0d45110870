//! The contract every [`Ec2`] implementation keeps, as test functions over `&dyn Ec2`: the
//! in-memory EC2 runs them in unit tests, the SDK one against `moto_server`
//! (`tests/ec2_contract_moto.rs`, which includes this file by path). Only what both must
//! guarantee is asserted. moto 5.2.1 differs from EC2 (and from the in-memory EC2) in ways the
//! contract therefore leaves open:
//!
//! - instances are `running` at once, and `terminated` on the first describe after
//!   TerminateInstances (which itself answers `shutting-down`): a fresh instance is `pending`
//!   or `running`, a terminated one `shutting-down` or `terminated`;
//! - image creation dates have one-second resolution, so images registered in the same second
//!   tie: the newest image's date is the greatest, not necessarily alone;
//! - CreateFleet launches any instance type in any subnet and never reports per-override
//!   errors, so capacity errors are tested against the in-memory EC2 only; it ignores
//!   priorities and launches the first override of the first launch template, so the cases
//!   put the lowest priority there;
//! - spot prices are a placeholder (`0.00001`, dated 2006): only their shape is checked;
//! - a malformed instance id is `InvalidInstanceID.NotFound` (EC2: `...Malformed`).

#![allow(
    clippy::expect_used,
    reason = "test code, also where an integration test includes it by path: a failed call is a failed test"
)]

// The integration test includes this file by path and puts the port's items at its root, so
// `super::` resolves in both places.
use super::{
    AwsError, CapacityReservationQuery, CapacityType, Ec2, FleetLaunchTemplate, FleetOverride,
    FleetRequest, ImageQuery, InstanceState, LaunchTemplateRequest, PlacementGroupQuery,
    ResourceQuery, SecurityGroupQuery, Tag, TagFilter, wildcard_match,
};

/// What each implementation creates before the suite runs, through its own means.
#[derive(Debug, Clone)]
pub(crate) struct Fixtures {
    /// A subnet tagged `karpenter.sh/discovery=contract`.
    pub(crate) subnet_id: String,
    /// The subnet's zone.
    pub(crate) zone: String,
    /// A security group tagged `karpenter.sh/discovery=contract`.
    pub(crate) security_group_id: String,
    /// An image instances can boot.
    pub(crate) image_id: String,
    /// A name pattern matching at least two images.
    pub(crate) image_name_pattern: String,
    /// The newest (by creation date) image matching the pattern.
    pub(crate) newest_image_id: String,
    /// A `partition` placement group named `contract-partition` with 3 partitions.
    pub(crate) partition_group_id: String,
    /// A `cluster` placement group named `contract-cluster`.
    pub(crate) cluster_group_id: String,
    /// A targeted capacity reservation for 2 m5.large in the subnet's zone, tagged
    /// `karpenter.sh/discovery=contract`.
    pub(crate) reservation_id: String,
    /// An interruptible one for 1 m5.large there, tagged the same.
    pub(crate) interruptible_reservation_id: String,
}

/// Runs every case, in an order where later ones build on nothing earlier ones left behind
/// except what their names say.
pub(crate) async fn run_all(ec2: &dyn Ec2, f: &Fixtures) {
    instance_types(ec2).await;
    offerings(ec2).await;
    spot_prices(ec2).await;
    images(ec2, f).await;
    subnets_and_security_groups(ec2, f).await;
    placement_groups(ec2, f).await;
    capacity_reservations(ec2, f).await;
    launch_terminate(ec2, f).await;
    errors(ec2).await;
}

async fn instance_types(ec2: &dyn Ec2) {
    let types = ec2
        .describe_instance_types(&["m5.large".to_owned()])
        .await
        .expect("describe_instance_types");
    assert_eq!(types.len(), 1, "{types:?}");
    let m5 = &types[0];
    assert_eq!(m5.instance_type, "m5.large");
    assert_eq!(m5.v_cpu_info.default_v_cpus, 2);
    assert_eq!(m5.memory_info.size_in_mi_b, 8192);
    assert!(
        m5.processor_info
            .supported_architectures
            .iter()
            .any(|a| a == "x86_64")
    );
    assert!(m5.network_info.maximum_network_interfaces > 0);

    let all = ec2
        .describe_instance_types(&[])
        .await
        .expect("describe all types");
    assert!(all.len() > 100, "every type, across pages: {}", all.len());
    assert!(all.iter().any(|t| t.instance_type == "m5.large"));
}

async fn offerings(ec2: &dyn Ec2) {
    let offerings = ec2
        .describe_instance_type_offerings()
        .await
        .expect("offerings");
    assert!(!offerings.is_empty());
    assert!(
        offerings.iter().all(|o| o.zone.starts_with("us-east-1")),
        "zones, not regions"
    );
    assert!(offerings.iter().any(|o| o.instance_type == "m5.large"));
}

async fn spot_prices(ec2: &dyn Ec2) {
    let types = ["m5.large".to_owned()];
    let prices = ec2
        .describe_spot_price_history(&types)
        .await
        .expect("spot prices");
    let mut pools: Vec<_> = prices.iter().map(|p| (&p.instance_type, &p.zone)).collect();
    let n = pools.len();
    pools.sort();
    pools.dedup();
    assert_eq!(pools.len(), n, "one (the latest) price per type and zone");
    assert!(
        prices
            .iter()
            .all(|p| p.instance_type == "m5.large" && p.price > 0.0)
    );
}

async fn images(ec2: &dyn Ec2, f: &Fixtures) {
    let by_name = ec2
        .describe_images(&ImageQuery {
            names: vec![f.image_name_pattern.clone()],
            ..ImageQuery::default()
        })
        .await
        .expect("images by name");
    assert!(by_name.len() >= 2, "{by_name:?}");
    // The newest image's date is the greatest. Not "the only greatest": moto dates images to
    // the second, so two registered in the same second tie.
    let newest = by_name
        .iter()
        .find(|i| i.id == f.newest_image_id)
        .expect("the newest image");
    assert!(
        by_name
            .iter()
            .all(|i| i.creation_date <= newest.creation_date),
        "{by_name:?}"
    );
    assert!(
        by_name
            .iter()
            .all(|i| wildcard_match(&f.image_name_pattern, &i.name))
    );

    let by_id = ec2
        .describe_images(&ImageQuery {
            ids: vec![f.image_id.clone()],
            ..ImageQuery::default()
        })
        .await
        .expect("image by id");
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].id, f.image_id);

    ec2.create_tags(
        std::slice::from_ref(&f.newest_image_id),
        &[Tag::new("contract-image", "newest")],
    )
    .await
    .expect("tag image");
    let by_tag = ec2
        .describe_images(&ImageQuery {
            tags: vec![TagFilter::equals("contract-image", "newest")],
            ..ImageQuery::default()
        })
        .await
        .expect("images by tag");
    assert_eq!(
        by_tag.iter().map(|i| &i.id).collect::<Vec<_>>(),
        [&f.newest_image_id]
    );
}

async fn subnets_and_security_groups(ec2: &dyn Ec2, f: &Fixtures) {
    let discovery = vec![TagFilter::equals("karpenter.sh/discovery", "contract")];
    let subnets = ec2
        .describe_subnets(&ResourceQuery::tags(discovery.clone()))
        .await
        .expect("subnets");
    assert_eq!(
        subnets.iter().map(|s| &s.id).collect::<Vec<_>>(),
        [&f.subnet_id]
    );
    assert_eq!(subnets[0].zone, f.zone);
    assert!(subnets[0].available_ip_address_count > 0);
    let by_id = ec2
        .describe_subnets(&ResourceQuery::ids([f.subnet_id.clone()]))
        .await
        .expect("subnet by id");
    assert_eq!(by_id, subnets);

    let groups = ec2
        .describe_security_groups(&SecurityGroupQuery {
            tags: discovery,
            ..SecurityGroupQuery::default()
        })
        .await
        .expect("security groups");
    assert_eq!(
        groups.iter().map(|g| &g.id).collect::<Vec<_>>(),
        [&f.security_group_id]
    );
    let exists = ec2
        .describe_security_groups(&SecurityGroupQuery {
            tags: vec![TagFilter::exists("karpenter.sh/discovery")],
            ..SecurityGroupQuery::default()
        })
        .await
        .expect("security groups by tag key");
    assert_eq!(exists, groups);
    let by_name = ec2
        .describe_security_groups(&SecurityGroupQuery {
            names: vec![groups[0].name.clone()],
            ..SecurityGroupQuery::default()
        })
        .await
        .expect("security groups by name");
    assert_eq!(by_name, groups);
    let by_id = ec2
        .describe_security_groups(&SecurityGroupQuery {
            ids: vec![f.security_group_id.clone()],
            ..SecurityGroupQuery::default()
        })
        .await
        .expect("security groups by id");
    assert_eq!(by_id, groups);
}

async fn placement_groups(ec2: &dyn Ec2, f: &Fixtures) {
    let by_name = ec2
        .describe_placement_groups(&PlacementGroupQuery {
            names: vec!["contract-partition".to_owned()],
            ..PlacementGroupQuery::default()
        })
        .await
        .expect("placement group by name");
    assert_eq!(by_name.len(), 1, "{by_name:?}");
    let partition = &by_name[0];
    assert_eq!(partition.id, f.partition_group_id);
    assert_eq!(partition.name, "contract-partition");
    assert_eq!(partition.strategy, "partition");
    assert_eq!(partition.partition_count, Some(3));
    assert_eq!(partition.state, "available");
    let by_id = ec2
        .describe_placement_groups(&PlacementGroupQuery {
            ids: vec![f.cluster_group_id.clone()],
            ..PlacementGroupQuery::default()
        })
        .await
        .expect("placement group by id");
    assert_eq!(by_id.len(), 1, "{by_id:?}");
    assert_eq!(by_id[0].name, "contract-cluster");
    assert_eq!(by_id[0].strategy, "cluster");
    assert_eq!(by_id[0].partition_count, None);
    let every = ec2
        .describe_placement_groups(&PlacementGroupQuery::default())
        .await
        .expect("every placement group");
    let mut ids: Vec<&str> = every.iter().map(|g| g.id.as_str()).collect();
    ids.sort_unstable();
    let mut want = [f.partition_group_id.as_str(), f.cluster_group_id.as_str()];
    want.sort_unstable();
    assert_eq!(ids, want);
    let unknown = ec2
        .describe_placement_groups(&PlacementGroupQuery {
            names: vec!["no-such-group".to_owned()],
            ..PlacementGroupQuery::default()
        })
        .await
        .expect_err("an unknown name is an error, as in EC2");
    assert_eq!(
        unknown.code(),
        "InvalidPlacementGroup.Unknown",
        "{unknown:?}"
    );
}

async fn capacity_reservations(ec2: &dyn Ec2, f: &Fixtures) {
    let by_id = ec2
        .describe_capacity_reservations(&CapacityReservationQuery {
            ids: vec![f.reservation_id.clone()],
            ..CapacityReservationQuery::default()
        })
        .await
        .expect("capacity reservation by id");
    assert_eq!(by_id.len(), 1, "{by_id:?}");
    let reservation = &by_id[0];
    assert_eq!(reservation.instance_type, "m5.large");
    assert_eq!(reservation.zone, f.zone);
    assert_eq!(reservation.instance_match_criteria, "targeted");
    assert_eq!(reservation.reservation_type, "default");
    assert_eq!(reservation.state, "active");
    assert_eq!(reservation.available_instance_count, 2);
    assert_eq!(reservation.total_instance_count, 2);
    assert!(!reservation.interruptible);
    assert_eq!(
        reservation.owner_id.len(),
        12,
        "an account id: {reservation:?}"
    );

    let discovery = vec![TagFilter::equals("karpenter.sh/discovery", "contract")];
    let tagged = ec2
        .describe_capacity_reservations(&CapacityReservationQuery {
            tags: discovery.clone(),
            owner_id: Some(reservation.owner_id.clone()),
            instance_match_criteria: Some("targeted".to_owned()),
            ..CapacityReservationQuery::default()
        })
        .await
        .expect("capacity reservations by tags, owner and criteria");
    let mut ids: Vec<&str> = tagged.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let mut want = [
        f.reservation_id.as_str(),
        f.interruptible_reservation_id.as_str(),
    ];
    want.sort_unstable();
    assert_eq!(ids, want);
    let interruptible = tagged
        .iter()
        .find(|r| r.id == f.interruptible_reservation_id)
        .expect("the interruptible reservation");
    assert!(interruptible.interruptible, "{interruptible:?}");
    assert_eq!(interruptible.available_instance_count, 1);

    let open = ec2
        .describe_capacity_reservations(&CapacityReservationQuery {
            tags: discovery,
            instance_match_criteria: Some("open".to_owned()),
            ..CapacityReservationQuery::default()
        })
        .await
        .expect("capacity reservations by criteria");
    assert!(open.is_empty(), "{open:?}");
    let unknown = ec2
        .describe_capacity_reservations(&CapacityReservationQuery {
            ids: vec!["cr-0123456789abcdef0".to_owned()],
            ..CapacityReservationQuery::default()
        })
        .await
        .expect_err("an unknown id is an error, as in EC2");
    assert_eq!(
        unknown.code(),
        "InvalidCapacityReservationId.NotFound",
        "{unknown:?}"
    );
}

async fn launch_terminate(ec2: &dyn Ec2, f: &Fixtures) {
    let template = LaunchTemplateRequest {
        name: "contract-template".to_owned(),
        image_id: f.image_id.clone(),
        security_group_ids: vec![f.security_group_id.clone()],
        tags: vec![Tag::new("karpenter.k8s.aws/cluster", "contract")],
        ..LaunchTemplateRequest::default()
    };
    let created = ec2
        .create_launch_template(&template)
        .await
        .expect("create_launch_template");
    assert_eq!(created.name, template.name);
    assert!(created.id.starts_with("lt-"), "{created:?}");
    let again = ec2
        .create_launch_template(&template)
        .await
        .expect_err("a name is unique");
    assert!(matches!(again, AwsError::AlreadyExists { .. }), "{again:?}");
    let found = ec2
        .describe_launch_templates(&ResourceQuery::ids([template.name.clone()]))
        .await
        .expect("describe_launch_templates");
    assert_eq!(
        found.iter().map(|t| &t.id).collect::<Vec<_>>(),
        [&created.id]
    );

    let tags = vec![
        Tag::new("karpenter.sh/nodeclaim", "contract-claim"),
        Tag::new("karpenter.sh/nodepool", "default"),
    ];
    let fleet = ec2
        .create_fleet(&FleetRequest {
            launch_templates: vec![one_override(&template.name, "m5.large", f, 0.0)],
            capacity_type: CapacityType::OnDemand,
            target_capacity: 1,
            tags: tags.clone(),
        })
        .await
        .expect("create_fleet");
    assert!(fleet.errors.is_empty(), "{fleet:?}");
    assert_eq!(fleet.instances.len(), 1, "{fleet:?}");
    let id = fleet.instances[0].id.clone();
    assert!(id.starts_with("i-"));
    assert_eq!(fleet.instances[0].instance_type, "m5.large");

    let by_tag = ec2
        .describe_instances(&ResourceQuery::tags(vec![TagFilter::equals(
            "karpenter.sh/nodeclaim",
            "contract-claim",
        )]))
        .await
        .expect("describe_instances by tag");
    assert_eq!(by_tag.len(), 1, "{by_tag:?}");
    let instance = &by_tag[0];
    assert_eq!(instance.id, id);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.zone.as_deref(), Some(f.zone.as_str()));
    assert_eq!(instance.subnet_id.as_deref(), Some(f.subnet_id.as_str()));
    assert_eq!(instance.image_id.as_deref(), Some(f.image_id.as_str()));
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert!(instance.launch_time.is_some(), "{instance:?}");
    assert!(
        matches!(
            instance.state,
            InstanceState::Pending | InstanceState::Running
        ),
        "{:?}",
        instance.state
    );
    for tag in &tags {
        assert!(
            instance.tags.contains(tag),
            "{tag:?} missing from {:?}",
            instance.tags
        );
    }

    ec2.create_tags(
        std::slice::from_ref(&id),
        &[Tag::new("Name", "contract-node")],
    )
    .await
    .expect("create_tags");
    let by_id = ec2
        .describe_instances(&ResourceQuery::ids([id.clone()]))
        .await
        .expect("describe_instances by id");
    assert!(by_id[0].tags.contains(&Tag::new("Name", "contract-node")));

    spot(ec2, f, &template.name).await;
    several_launch_templates(ec2, f, &template.name).await;

    let changes = ec2
        .terminate_instances(std::slice::from_ref(&id))
        .await
        .expect("terminate");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].id, id);
    assert!(changes[0].current.is_terminating(), "{changes:?}");
    let after = ec2
        .describe_instances(&ResourceQuery::ids([id.clone()]))
        .await
        .expect("describe after terminate");
    assert!(after[0].state.is_terminating(), "{:?}", after[0].state);
}

async fn errors(ec2: &dyn Ec2) {
    let unknown = ec2
        .describe_instances(&ResourceQuery::ids(["i-0123456789abcdef0"]))
        .await
        .expect_err("an unknown instance");
    assert!(unknown.is_not_found(), "{unknown:?}");
    assert_eq!(unknown.code(), "InvalidInstanceID.NotFound");
    assert!(!unknown.message().is_empty());

    let template = ec2
        .describe_launch_templates(&ResourceQuery::ids(["no-such-template"]))
        .await
        .expect_err("an unknown launch template name");
    assert!(template.is_not_found(), "{template:?}");
    assert_eq!(
        template.code(),
        "InvalidLaunchTemplateName.NotFoundException"
    );
}

/// A spot fleet launches a spot instance.
async fn spot(ec2: &dyn Ec2, f: &Fixtures, template: &str) {
    let fleet = ec2
        .create_fleet(&FleetRequest {
            launch_templates: vec![one_override(template, "m5.large", f, 0.0)],
            capacity_type: CapacityType::Spot,
            target_capacity: 1,
            tags: vec![Tag::new("karpenter.sh/nodeclaim", "contract-spot")],
        })
        .await
        .expect("spot create_fleet");
    assert_eq!(fleet.instances.len(), 1, "{fleet:?}");
    let id = fleet.instances[0].id.clone();
    let found = ec2
        .describe_instances(&ResourceQuery::ids([id.clone()]))
        .await
        .expect("describe the spot instance");
    assert_eq!(found[0].capacity_type, CapacityType::Spot);
    ec2.terminate_instances(&[id])
        .await
        .expect("terminate the spot instance");
}

/// A launch template config with one override in the fixtures' subnet.
fn one_override(
    template: &str,
    instance_type: &str,
    f: &Fixtures,
    priority: f64,
) -> FleetLaunchTemplate {
    FleetLaunchTemplate {
        name: template.to_owned(),
        overrides: vec![FleetOverride {
            instance_type: instance_type.to_owned(),
            subnet_id: f.subnet_id.clone(),
            priority,
        }],
    }
}

/// A fleet over two launch templates (another image each) launches the highest-priority
/// override from its own template: the instance boots that template's image.
async fn several_launch_templates(ec2: &dyn Ec2, f: &Fixtures, first_template: &str) {
    let newer = LaunchTemplateRequest {
        name: "contract-template-newest".to_owned(),
        image_id: f.newest_image_id.clone(),
        security_group_ids: vec![f.security_group_id.clone()],
        ..LaunchTemplateRequest::default()
    };
    ec2.create_launch_template(&newer)
        .await
        .expect("create the second launch template");
    let fleet = ec2
        .create_fleet(&FleetRequest {
            launch_templates: vec![
                one_override(&newer.name, "m5.xlarge", f, 0.0),
                one_override(first_template, "m5.large", f, 1.0),
            ],
            capacity_type: CapacityType::OnDemand,
            target_capacity: 1,
            tags: vec![Tag::new("karpenter.sh/nodeclaim", "contract-two-templates")],
        })
        .await
        .expect("create_fleet over two launch templates");
    assert_eq!(fleet.instances.len(), 1, "{fleet:?}");
    assert_eq!(fleet.instances[0].instance_type, "m5.xlarge");
    let id = fleet.instances[0].id.clone();
    let found = ec2
        .describe_instances(&ResourceQuery::ids([id.clone()]))
        .await
        .expect("describe the instance");
    assert_eq!(found[0].instance_type, "m5.xlarge");
    assert_eq!(
        found[0].image_id.as_deref(),
        Some(f.newest_image_id.as_str()),
        "booted from its override's template"
    );
    ec2.terminate_instances(&[id])
        .await
        .expect("terminate the instance");

    let missing = ec2
        .create_fleet(&FleetRequest {
            launch_templates: vec![
                one_override(&newer.name, "m5.large", f, 0.0),
                one_override("contract-no-such-template", "m5.large", f, 1.0),
            ],
            capacity_type: CapacityType::OnDemand,
            target_capacity: 1,
            tags: Vec::new(),
        })
        .await
        .expect_err("a launch template that does not exist fails the whole fleet");
    assert!(missing.is_not_found(), "{missing:?}");
    assert_eq!(
        missing.code(),
        "InvalidLaunchTemplateName.NotFoundException"
    );
}
