//! The instance lifecycle against the in-memory EC2, with node classes resolved by the real
//! resolver from the shared fixture (two zones, AL2023 images for both architectures).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use provider_sdk::v1::{self, ErrorReason};
use serde_json::json;
use tonic::Code;

use super::*;
use crate::ec2::memory::MemoryEc2;
use crate::ec2::{FleetOverride, LaunchTemplateRequest, Tag};
use crate::labels::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_PLACEMENT_GROUP_ID,
};
use crate::node_class::fixture::{Fixture, node_class};

const ZONE_A: &str = "us-east-1a";

struct Harness {
    fixture: Fixture,
    types: Arc<InstanceTypeProvider>,
    provider: InstanceProvider,
    node_class: serde_json::Value,
    resolved: Arc<ResolvedNodeClass>,
}

impl Harness {
    async fn new() -> Self {
        let mut node_class = node_class();
        node_class["spec"]["tags"] = json!({"team": "platform"});
        Self::with_node_class(node_class).await
    }

    async fn with_node_class(node_class: serde_json::Value) -> Self {
        Self::from_fixture(Fixture::new(), node_class).await
    }

    /// A node class launching into a new placement group of `strategy`.
    async fn with_placement_group(strategy: &str, partitions: Option<i32>) -> (Self, String) {
        let fixture = Fixture::new();
        let group = fixture
            .cloud
            .ec2
            .add_placement_group("nodes", strategy, partitions);
        let mut node_class = node_class();
        node_class["spec"]["placementGroupSelector"] = json!({"name": "nodes"});
        (Self::from_fixture(fixture, node_class).await, group.id)
    }

    async fn from_fixture(fixture: Fixture, node_class: serde_json::Value) -> Self {
        let resolved = fixture.resolver().resolve(&node_class).await.unwrap();
        let types = Arc::new(InstanceTypeProvider::new(
            Arc::clone(&fixture.cloud.ec2) as _,
            "us-east-1",
            Arc::clone(&fixture.clock) as _,
        ));
        let provider = InstanceProvider::new(
            Arc::clone(&fixture.cloud.ec2) as _,
            Arc::clone(&types),
            fixture.cluster.clone(),
            ClusterSettings {
                name: fixture.cluster.name.clone(),
                endpoint: "https://demo.example".to_owned(),
                ca_bundle: None,
                cidr: Some("10.100.0.0/16".to_owned()),
            },
        )
        .with_clock(Arc::clone(&fixture.clock) as _);
        Self {
            fixture,
            types,
            provider,
            node_class,
            resolved,
        }
    }

    fn ec2(&self) -> &MemoryEc2 {
        &self.fixture.cloud.ec2
    }

    async fn create(&self, claim: &v1::NodeClaim) -> Result<v1::NodeClaim, InstanceError> {
        self.provider
            .create(claim, &self.node_class, &self.resolved)
            .await
    }

    async fn ec2_instance(&self, provider_id: &str) -> Instance {
        self.provider
            .instance(provider_id)
            .await
            .unwrap()
            .expect("the instance exists")
    }

    /// The launch template of the last CreateFleet's first override group.
    fn last_template(&self) -> LaunchTemplateRequest {
        let fleet = self.last_fleet();
        self.ec2()
            .launch_template_request(&fleet.launch_templates[0].name)
            .expect("the fleet's launch template exists")
    }

    fn last_fleet(&self) -> FleetRequest {
        self.ec2()
            .fleet_requests()
            .pop()
            .expect("a CreateFleet was made")
    }
}

fn requirement(key: &str, values: &[&str]) -> v1::Requirement {
    v1::Requirement::in_values(key, values)
}

fn claim(name: &str, requirements: Vec<v1::Requirement>) -> v1::NodeClaim {
    v1::NodeClaim {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        labels: HashMap::from([
            (LABEL_NODEPOOL.to_owned(), "default".to_owned()),
            ("team".to_owned(), "platform".to_owned()),
        ]),
        spec: Some(v1::NodeClaimSpec {
            node_class_ref: Some(v1::NodeClassReference {
                group: "karpenter.k8s.aws".to_owned(),
                kind: "EC2NodeClass".to_owned(),
                name: "default".to_owned(),
            }),
            requirements,
            resource_requests: HashMap::from([("cpu".to_owned(), "1".to_owned())]),
            taints: vec![v1::Taint {
                key: "dedicated".to_owned(),
                value: "gpu".to_owned(),
                effect: v1::TaintEffect::NoSchedule as i32,
            }],
            startup_taints: vec![v1::Taint {
                key: "node.cilium.io/agent-not-ready".to_owned(),
                value: String::new(),
                effect: v1::TaintEffect::NoExecute as i32,
            }],
            ..v1::NodeClaimSpec::default()
        }),
        ..v1::NodeClaim::default()
    }
}

/// m5.large or m5.xlarge, on-demand.
fn m5_on_demand(name: &str) -> v1::NodeClaim {
    claim(
        name,
        vec![
            requirement(LABEL_INSTANCE_TYPE, &["m5.large", "m5.xlarge"]),
            requirement(LABEL_CAPACITY_TYPE, &["on-demand"]),
        ],
    )
}

fn label<'a>(claim: &'a v1::NodeClaim, key: &str) -> &'a str {
    claim.labels.get(key).map_or("", String::as_str)
}

fn status(claim: &v1::NodeClaim) -> &v1::NodeClaimStatus {
    claim.status.as_ref().expect("a status")
}

#[tokio::test]
async fn create_launches_with_the_tags_and_answers_the_hydrated_node_claim() {
    let h = Harness::new().await;
    let launched = h.create(&m5_on_demand("claim-1")).await.unwrap();

    assert_eq!(launched.name, "claim-1");
    assert_eq!(launched.uid, "uid-claim-1");
    assert_eq!(
        label(&launched, LABEL_INSTANCE_TYPE),
        "m5.large",
        "the cheaper type"
    );
    assert_eq!(label(&launched, LABEL_CAPACITY_TYPE), "on-demand");
    assert_eq!(label(&launched, "kubernetes.io/arch"), "amd64");
    assert_eq!(label(&launched, "kubernetes.io/os"), "linux");
    assert_eq!(
        label(&launched, "topology.kubernetes.io/region"),
        "us-east-1"
    );
    assert_eq!(label(&launched, "karpenter.k8s.aws/instance-family"), "m5");
    let zone = label(&launched, LABEL_TOPOLOGY_ZONE).to_owned();
    assert!(
        ["us-east-1a", "us-east-1b"].contains(&zone.as_str()),
        "{zone}"
    );
    assert!(
        launched.annotations.is_empty(),
        "the hash annotation is core's to stamp"
    );

    let status = status(&launched);
    let (parsed_zone, id) = parse_provider_id(&status.provider_id).unwrap();
    assert_eq!(parsed_zone, zone);
    assert_eq!(status.provider_id, format!("aws:///{zone}/{id}"));
    let image = h.resolved.image_for("amd64").unwrap();
    assert_eq!(status.image_id, image.id);
    assert_eq!(status.capacity.get("cpu").map(String::as_str), Some("2"));
    assert_eq!(status.capacity.get("pods").map(String::as_str), Some("29"));
    assert_eq!(
        status.allocatable.get("cpu").map(String::as_str),
        Some("1930m")
    );
    assert!(status.allocatable.contains_key("memory"));
    assert_eq!(status.instance_state, v1::InstanceState::Pending as i32);
    assert!(launched.creation_timestamp.is_some());

    let instance = h.ec2_instance(&status.provider_id).await;
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.image_id.as_deref(), Some(image.id.as_str()));
    for (key, value) in [
        ("kubernetes.io/cluster/demo", "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "claim-1"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", "demo"),
        ("team", "platform"),
    ] {
        assert_eq!(
            instance.tag(key),
            Some(value),
            "{key} in {:?}",
            instance.tags
        );
    }

    let fleet = h.last_fleet();
    assert_eq!(fleet.target_capacity, 1);
    assert_eq!(fleet.capacity_type, CapacityType::OnDemand);
    assert_eq!(
        fleet.tags, instance.tags,
        "the instance carries the fleet's tags"
    );
    // m5.large runs 29 pods, m5.xlarge 58: user data differs, so a template each.
    assert_eq!(fleet.launch_templates.len(), 2, "{fleet:?}");
    let overrides = &fleet.launch_templates[0].overrides;
    assert_eq!(overrides.len(), 2, "one type in two zones: {overrides:?}");
    assert!(overrides.iter().all(|o| o.instance_type == "m5.large"));
    assert_eq!(overrides[0].priority, 0.0);

    let template = h.last_template();
    assert!(template.name.starts_with("karpenter.k8s.aws/"));
    assert_eq!(template.image_id, image.id);
    assert_eq!(template.instance_profile, h.resolved.instance_profile);
    assert_eq!(
        template.security_group_ids,
        h.resolved
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(template.block_device_mappings[0].volume_size_gib, Some(20));
    assert_eq!(
        template
            .metadata_options
            .as_ref()
            .and_then(|m| m.http_tokens.as_deref()),
        Some("required")
    );
    assert!(template.tags.contains(&Tag::new("team", "platform")));
    assert!(
        !template
            .tags
            .iter()
            .any(|t| t.key == "karpenter.sh/nodeclaim"),
        "templates are shared between NodeClaims"
    );
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(template.user_data.unwrap())
            .unwrap(),
    )
    .unwrap();
    for expected in [
        "karpenter.sh/unregistered",
        "dedicated",
        "node.cilium.io/agent-not-ready",
        "karpenter.sh/nodepool",
        "karpenter.sh/capacity-type",
        "karpenter.sh/do-not-sync-taints",
        "maxPods: 29",
    ] {
        assert!(
            user_data.contains(expected),
            "{expected} missing:\n{user_data}"
        );
    }
}

#[tokio::test]
async fn create_is_idempotent_by_node_claim_name() {
    let h = Harness::new().await;
    let first = h.create(&m5_on_demand("claim-1")).await.unwrap();
    let second = h.create(&m5_on_demand("claim-1")).await.unwrap();
    assert_eq!(status(&first).provider_id, status(&second).provider_id);
    assert_eq!(h.ec2().calls("CreateFleet"), 1);
    assert_eq!(label(&second, LABEL_INSTANCE_TYPE), "m5.large");
    assert_eq!(status(&second).image_id, status(&first).image_id);
    assert_eq!(status(&second).capacity, status(&first).capacity);

    // Once the instance is shutting down, the name launches again.
    h.provider
        .delete(&status(&first).provider_id, "claim-1")
        .await
        .unwrap();
    let third = h.create(&m5_on_demand("claim-1")).await.unwrap();
    assert_ne!(status(&third).provider_id, status(&first).provider_id);
    assert_eq!(h.ec2().calls("CreateFleet"), 2);
}

#[tokio::test]
async fn a_create_while_another_for_the_name_runs_is_aborted() {
    let h = Harness::new().await;
    let running = h.provider.claim("claim-1").unwrap();
    let err = h.create(&m5_on_demand("claim-1")).await.unwrap_err();
    assert!(matches!(err, InstanceError::InProgress(_)), "{err:?}");
    assert_eq!(err.to_status().code(), Code::Aborted);
    assert_eq!(h.ec2().calls("CreateFleet"), 0);
    // Other names are not held up, and the name is free again once the first ends.
    h.create(&m5_on_demand("claim-2")).await.unwrap();
    drop(running);
    h.create(&m5_on_demand("claim-1")).await.unwrap();
}

#[tokio::test]
async fn spot_when_allowed_and_available_on_demand_otherwise() {
    let h = Harness::new().await;
    let both = |name: &str| {
        claim(
            name,
            vec![
                requirement(LABEL_INSTANCE_TYPE, &["m5.large"]),
                requirement(LABEL_CAPACITY_TYPE, &["spot", "on-demand"]),
            ],
        )
    };
    let spot = h.create(&both("spot")).await.unwrap();
    assert_eq!(label(&spot, LABEL_CAPACITY_TYPE), "spot");
    assert_eq!(h.last_fleet().capacity_type, CapacityType::Spot);
    let instance = h.ec2_instance(&status(&spot).provider_id).await;
    assert_eq!(instance.capacity_type, CapacityType::Spot);

    let on_demand = h.create(&m5_on_demand("od")).await.unwrap();
    assert_eq!(label(&on_demand, LABEL_CAPACITY_TYPE), "on-demand");

    // Spot allowed, but every spot offering recently ran out: on-demand.
    for zone in ["us-east-1a", "us-east-1b"] {
        h.types.mark_unavailable("m5.large", zone, "spot");
    }
    let fallback = h.create(&both("fallback")).await.unwrap();
    assert_eq!(label(&fallback, LABEL_CAPACITY_TYPE), "on-demand");
    assert_eq!(h.last_fleet().capacity_type, CapacityType::OnDemand);
}

#[tokio::test]
async fn at_most_sixty_overrides_cheapest_first() {
    let h = Harness::new().await;
    let launched = h
        .create(&claim(
            "many",
            vec![
                requirement("kubernetes.io/arch", &["amd64"]),
                requirement(LABEL_CAPACITY_TYPE, &["on-demand"]),
            ],
        ))
        .await
        .unwrap();
    let fleet = h.last_fleet();
    let mut overrides: Vec<&FleetOverride> = fleet
        .launch_templates
        .iter()
        .flat_map(|t| &t.overrides)
        .collect();
    assert_eq!(overrides.len(), fleet::MAX_OVERRIDES);
    overrides.sort_by(|a, b| a.priority.total_cmp(&b.priority));
    let priorities: Vec<f64> = overrides.iter().map(|o| o.priority).collect();
    assert_eq!(priorities, (0..60).map(f64::from).collect::<Vec<_>>());

    // Priorities follow the catalogue's on-demand prices.
    let catalogue = h.types.instance_types(Some(&h.node_class)).await.unwrap();
    let zone_of_subnet: HashMap<String, String> = h
        .resolved
        .subnets
        .iter()
        .map(|s| (s.id.clone(), s.zone.clone()))
        .collect();
    let price = |instance_type: &str, zone: &str| {
        catalogue
            .iter()
            .find(|t| t.name == instance_type)
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| o.zone == zone && o.capacity_type == "on-demand")
            })
            .and_then(|o| o.price)
            .unwrap()
    };
    let prices: Vec<f64> = overrides
        .iter()
        .map(|o| price(&o.instance_type, &zone_of_subnet[&o.subnet_id]))
        .collect();
    assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
    assert_eq!(
        label(&launched, LABEL_INSTANCE_TYPE),
        overrides[0].instance_type,
        "the first priority launched"
    );
    // Types of several pod densities: several templates, each created once.
    assert!(fleet.launch_templates.len() > 1);
    assert_eq!(
        h.ec2().calls("CreateLaunchTemplate"),
        fleet.launch_templates.len() as u64
    );
}

#[tokio::test]
async fn a_capacity_error_falls_through_to_the_next_offering_and_marks_it() {
    let h = Harness::new().await;
    h.ec2().set_capacity_error(
        "m5.large",
        ZONE_A,
        CapacityType::OnDemand,
        Some("InsufficientInstanceCapacity"),
    );
    let mut zonal = m5_on_demand("claim-1");
    if let Some(spec) = zonal.spec.as_mut() {
        spec.requirements
            .push(requirement(LABEL_TOPOLOGY_ZONE, &[ZONE_A]));
    }
    let launched = h.create(&zonal).await.unwrap();
    assert_eq!(label(&launched, LABEL_INSTANCE_TYPE), "m5.xlarge");
    assert_eq!(label(&launched, LABEL_TOPOLOGY_ZONE), ZONE_A);
    assert!(h.types.is_unavailable("m5.large", ZONE_A, "on-demand"));
    assert!(!h.types.is_unavailable("m5.large", ZONE_A, "spot"));
    assert!(!h.types.is_unavailable("m5.xlarge", ZONE_A, "on-demand"));
}

#[tokio::test]
async fn every_offering_failing_is_resource_exhausted_with_the_reason() {
    let h = Harness::new().await;
    for instance_type in ["m5.large", "m5.xlarge"] {
        for zone in ["us-east-1a", "us-east-1b"] {
            h.ec2().set_capacity_error(
                instance_type,
                zone,
                CapacityType::OnDemand,
                Some("InsufficientInstanceCapacity"),
            );
        }
    }
    let err = h.create(&m5_on_demand("claim-1")).await.unwrap_err();
    assert!(
        matches!(err, InstanceError::InsufficientCapacity { .. }),
        "{err:?}"
    );
    let status = err.to_status();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        provider_sdk::status::error_reason(&status),
        Some(ErrorReason::InsufficientCapacity)
    );
    assert!(
        status.message().contains("InsufficientInstanceCapacity"),
        "{status:?}"
    );
    // The ErrorInfo names what CreateFleet tried, for tools and for people.
    let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
    assert_eq!(info.metadata["instance_types"], "m5.large,m5.xlarge");
    assert_eq!(info.metadata["zones"], "us-east-1a,us-east-1b");
    assert_eq!(info.metadata["capacity_types"], "on-demand");
    assert!(
        h.types
            .is_unavailable("m5.xlarge", "us-east-1b", "on-demand")
    );

    // Asked again, nothing is tried: every offering in the node class's zones is known to
    // be out of capacity.
    let err = h.create(&m5_on_demand("claim-1")).await.unwrap_err();
    assert!(
        matches!(err, InstanceError::InsufficientCapacity { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("in the node class's zones [us-east-1a, us-east-1b] is available"),
        "{err}"
    );
    // Nothing tried this time: the ErrorInfo names what the NodeClaim asked for.
    let status = err.to_status();
    let info = tonic_types::StatusExt::get_details_error_info(&status).unwrap();
    assert!(info.metadata.contains_key("instance_types"), "{info:?}");
    assert_eq!(h.ec2().calls("CreateFleet"), 1);
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments_naming_the_field() {
    let h = Harness::new().await;
    let err = h.create(&claim("empty", Vec::new())).await.unwrap_err();
    let status = err.to_status();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("node_claim.spec.requirements:"),
        "{status:?}"
    );

    let mut bad_operator = m5_on_demand("bad");
    if let Some(spec) = bad_operator.spec.as_mut() {
        spec.requirements[1].operator = 0;
    }
    let err = h.create(&bad_operator).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("node_claim.spec.requirements[1].operator:"),
        "{err}"
    );

    let mut bad_taint = m5_on_demand("bad");
    if let Some(spec) = bad_taint.spec.as_mut() {
        spec.startup_taints[0].effect = 0;
    }
    let err = h.create(&bad_taint).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("node_claim.spec.startup_taints[0].effect:"),
        "{err}"
    );

    let nameless = m5_on_demand("");
    let err = h.create(&nameless).await.unwrap_err();
    assert!(err.to_string().starts_with("node_claim.name:"), "{err}");
    assert_eq!(h.ec2().calls("CreateFleet"), 0);
}

#[tokio::test]
async fn a_node_class_that_is_not_ready_is_failed_precondition() {
    let mut nothing = node_class();
    nothing["spec"]["subnetSelectorTerms"] = json!([{"tags": {"karpenter.sh/discovery": "none"}}]);
    let h = Harness::with_node_class(nothing).await;
    assert!(!h.resolved.is_ready());
    let err = h.create(&m5_on_demand("claim-1")).await.unwrap_err();
    let status = err.to_status();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(
        provider_sdk::status::error_reason(&status),
        Some(ErrorReason::NodeClassNotReady)
    );
    assert!(status.message().contains("SubnetsReady"), "{status:?}");
    assert_eq!(h.ec2().calls("CreateFleet"), 0);
}

#[tokio::test]
async fn identical_configurations_share_one_launch_template() {
    let h = Harness::new().await;
    h.create(&m5_on_demand("claim-1")).await.unwrap();
    let first = h.last_fleet();
    h.create(&m5_on_demand("claim-2")).await.unwrap();
    let second = h.last_fleet();
    let names = |fleet: &FleetRequest| {
        fleet
            .launch_templates
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first), names(&second));
    assert_eq!(
        h.ec2().calls("CreateLaunchTemplate"),
        2,
        "one per pod density"
    );
    assert_eq!(
        h.ec2().calls("DescribeLaunchTemplates"),
        2,
        "then remembered"
    );

    // Two architectures: one template each, with its image.
    let mixed = h
        .create(&claim(
            "mixed",
            vec![
                requirement(LABEL_INSTANCE_TYPE, &["m5.large", "m6g.large"]),
                requirement(LABEL_CAPACITY_TYPE, &["on-demand"]),
            ],
        ))
        .await
        .unwrap();
    let fleet = h.last_fleet();
    assert_eq!(fleet.launch_templates.len(), 2, "{fleet:?}");
    let images: BTreeSet<String> = fleet
        .launch_templates
        .iter()
        .map(|t| {
            h.ec2()
                .launch_template_request(&t.name)
                .map(|r: LaunchTemplateRequest| r.image_id)
                .unwrap()
        })
        .collect();
    let expected: BTreeSet<String> = ["amd64", "arm64"]
        .iter()
        .map(|a| h.resolved.image_for(a).unwrap().id.clone())
        .collect();
    assert_eq!(images, expected);
    // The launched instance boots the image of its architecture.
    let arch = label(&mixed, "kubernetes.io/arch");
    assert_eq!(
        status(&mixed).image_id,
        h.resolved.image_for(arch).unwrap().id
    );
}

#[tokio::test]
async fn a_launch_template_deleted_behind_the_plugins_back_is_created_again() {
    // Two identical worlds make the same template name; the second provider believes it
    // exists (as after its template was deleted in EC2) but its EC2 has never seen it.
    let seen = Harness::new().await;
    seen.create(&m5_on_demand("claim-1")).await.unwrap();
    let template = seen.last_fleet().launch_templates[0].name.clone();
    let h = Harness::new().await;
    h.provider.launch_templates.remember(&template);
    let launched = h.create(&m5_on_demand("claim-1")).await.unwrap();
    assert_eq!(label(&launched, LABEL_INSTANCE_TYPE), "m5.large");
    assert_eq!(h.last_fleet().launch_templates[0].name, template);
    assert_eq!(
        h.ec2().calls("CreateFleet"),
        2,
        "failed once, then launched"
    );
    assert_eq!(
        h.ec2().calls("CreateLaunchTemplate"),
        h.last_fleet().launch_templates.len() as u64,
        "each created once"
    );
}

#[tokio::test]
async fn delete_terminates_then_reports_gone() {
    let h = Harness::new().await;
    let launched = h.create(&m5_on_demand("claim-1")).await.unwrap();
    let provider_id = status(&launched).provider_id.clone();
    assert_eq!(
        h.provider.delete(&provider_id, "claim-1").await.unwrap(),
        v1::DeletionState::Terminating
    );
    assert_eq!(
        h.provider.delete(&provider_id, "claim-1").await.unwrap(),
        v1::DeletionState::Terminating,
        "still shutting down"
    );
    assert_eq!(
        h.ec2().calls("TerminateInstances"),
        1,
        "not terminated twice"
    );
    let shutting_down = h.provider.get(&provider_id).await.unwrap().unwrap();
    assert!(shutting_down.deletion_timestamp.is_some());
    assert_eq!(
        status(&shutting_down).instance_state,
        v1::InstanceState::Terminating as i32
    );

    h.ec2().advance(Duration::from_secs(10));
    assert_eq!(
        h.provider.delete(&provider_id, "claim-1").await.unwrap(),
        v1::DeletionState::Gone
    );
    assert_eq!(h.provider.get(&provider_id).await.unwrap(), None);
    assert_eq!(h.provider.instance(&provider_id).await.unwrap(), None);

    let unknown = "aws:///us-east-1a/i-00000000000fffff";
    assert_eq!(
        h.provider.delete(unknown, "never").await.unwrap(),
        v1::DeletionState::Gone
    );
    assert_eq!(h.provider.get(unknown).await.unwrap(), None);
    let err = h.provider.delete("i-0123", "x").await.unwrap_err();
    assert_eq!(err.to_status().code(), Code::InvalidArgument);
    assert!(err.to_string().starts_with("provider_id:"), "{err}");
}

#[tokio::test]
async fn delete_without_a_provider_id_finds_the_instance_by_name() {
    let h = Harness::new().await;
    let launched = h.create(&m5_on_demand("claim-1")).await.unwrap();
    assert_eq!(
        h.provider.delete("", "claim-1").await.unwrap(),
        v1::DeletionState::Terminating
    );
    let instance = h.ec2_instance(&status(&launched).provider_id).await;
    assert_eq!(instance.state, InstanceState::ShuttingDown);
    assert_eq!(
        h.provider.delete("", "never-launched").await.unwrap(),
        v1::DeletionState::Gone
    );
    let err = h.provider.delete("", "").await.unwrap_err();
    assert_eq!(err.to_status().code(), Code::InvalidArgument);
}

/// An instance launched by someone else, without the cluster's tag.
async fn foreign_instance(ec2: &MemoryEc2, image: &str, subnet: &str) -> String {
    let template = LaunchTemplateRequest {
        name: "someone-else".to_owned(),
        image_id: image.to_owned(),
        ..LaunchTemplateRequest::default()
    };
    ec2.create_launch_template(&template).await.unwrap();
    let result = ec2
        .create_fleet(&FleetRequest {
            launch_templates: vec![FleetLaunchTemplate {
                name: template.name,
                overrides: vec![FleetOverride {
                    instance_type: "m5.large".to_owned(),
                    subnet_id: subnet.to_owned(),
                    priority: 0.0,
                }],
            }],
            capacity_type: CapacityType::OnDemand,
            target_capacity: 1,
            tags: vec![Tag::new("karpenter.sh/nodepool", "default")],
        })
        .await
        .unwrap();
    provider_id(ZONE_A, &result.instances[0].id)
}

#[tokio::test]
async fn delete_refuses_an_instance_without_the_cluster_tag() {
    let h = Harness::new().await;
    let subnet = h.resolved.subnet_per_zone()[ZONE_A].id.clone();
    let image = h.resolved.image_for("amd64").unwrap().id.clone();
    let foreign = foreign_instance(h.ec2(), &image, &subnet).await;
    let err = h.provider.delete(&foreign, "claim-1").await.unwrap_err();
    assert!(matches!(err, InstanceError::NotManaged(_)), "{err:?}");
    let status = err.to_status();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let (_, id) = parse_provider_id(&foreign).unwrap();
    assert!(status.message().contains(&id), "{status:?}");
    assert!(
        status.message().contains("eks:eks-cluster-name=demo"),
        "{status:?}"
    );
    assert_eq!(h.ec2().calls("TerminateInstances"), 0);
    assert_eq!(
        h.ec2_instance(&foreign).await.state,
        InstanceState::Pending,
        "untouched"
    );
}

#[tokio::test]
async fn list_pages_through_the_clusters_live_instances() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let launched = h.create(&m5_on_demand(name)).await.unwrap();
        ids.push(status(&launched).provider_id.clone());
    }
    let subnet = h.resolved.subnet_per_zone()[ZONE_A].id.clone();
    let image = h.resolved.image_for("amd64").unwrap().id.clone();
    foreign_instance(h.ec2(), &image, &subnet).await;

    let (first, token) = h.provider.list(2, "").await.unwrap();
    assert_eq!(first.len(), 2);
    assert!(!token.is_empty());
    let (second, last) = h.provider.list(2, &token).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(last, "", "the last page");
    let listed: Vec<&v1::NodeClaim> = first.iter().chain(&second).collect();
    assert_eq!(
        listed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"],
        "sorted by instance ID, named by their tag; the foreign instance left out"
    );
    let a = listed[0];
    assert_eq!(status(a).provider_id, ids[0]);
    assert_eq!(label(a, LABEL_NODEPOOL), "default");
    assert_eq!(label(a, LABEL_INSTANCE_TYPE), "m5.large");
    assert_eq!(label(a, LABEL_CAPACITY_TYPE), "on-demand");
    assert!(a.creation_timestamp.is_some());
    assert!(a.deletion_timestamp.is_none());
    assert_eq!(status(a).instance_state, v1::InstanceState::Pending as i32);

    let (all, none) = h.provider.list(0, "").await.unwrap();
    assert_eq!((all.len(), none.as_str()), (3, ""));

    // Shutting down: listed with a deletion timestamp; terminated: gone.
    h.provider.delete(&ids[1], "b").await.unwrap();
    let (all, _) = h.provider.list(0, "").await.unwrap();
    assert!(all[1].deletion_timestamp.is_some());
    h.ec2().advance(Duration::from_secs(10));
    let (all, _) = h.provider.list(0, "").await.unwrap();
    assert_eq!(
        all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a", "c"]
    );
    assert_eq!(
        status(&all[0]).instance_state,
        v1::InstanceState::Running as i32
    );

    let err = h.provider.list(2, "not-a-token").await.unwrap_err();
    assert_eq!(err.to_status().code(), Code::InvalidArgument);
    assert!(err.to_string().starts_with("page_token:"), "{err}");
    let err = h.provider.list(-1, "").await.unwrap_err();
    assert!(err.to_string().starts_with("page_size:"), "{err}");
}

#[test]
fn provider_ids_round_trip_and_need_a_zone() {
    let id = provider_id("us-east-1a", "i-0123456789abcdef0");
    assert_eq!(id, "aws:///us-east-1a/i-0123456789abcdef0");
    assert_eq!(
        parse_provider_id(&id).unwrap(),
        ("us-east-1a".to_owned(), "i-0123456789abcdef0".to_owned())
    );
    for bad in [
        "",
        "aws:///i-0123",
        "aws:////i-0123",
        "gce:///us-east-1a/i-0123",
        "aws:///us-east-1a/i-",
        "aws:///us-east-1a/i-01/x",
        "aws:///us-east-1a/vol-0123",
    ] {
        let err = parse_provider_id(bad).unwrap_err();
        assert!(
            matches!(&err, InstanceError::InvalidArgument { field, .. } if field == "provider_id"),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn aws_errors_map_to_the_documented_statuses_with_the_code() {
    let cases = [
        ("RequestLimitExceeded", Code::Unavailable),
        ("UnauthorizedOperation", Code::PermissionDenied),
        ("InternalError", Code::Internal),
        ("InvalidParameterValue", Code::Internal),
        ("InsufficientInstanceCapacity", Code::ResourceExhausted),
    ];
    for (code, expected) in cases {
        let status = InstanceError::Aws(AwsError::from_code(code, "no")).to_status();
        assert_eq!(status.code(), expected, "{code}");
        assert!(status.message().contains(code), "{status:?}");
    }
    let transport = InstanceError::Aws(AwsError::transport("dispatch", "refused")).to_status();
    assert_eq!(transport.code(), Code::Unavailable);
}

/// A partition group: a NodeClaim narrowed to some partitions launches into the lowest of them
/// (the launch template's placement); one that allows every partition leaves it to EC2 and is
/// labelled with the partition EC2 chose. Both carry the group's id.
#[tokio::test]
async fn a_partition_group_places_the_launch_and_labels_the_partition() {
    let (h, group) = Harness::with_placement_group("partition", Some(3)).await;
    let mut narrowed = m5_on_demand("claim-1");
    if let Some(spec) = narrowed.spec.as_mut() {
        spec.requirements
            .push(requirement(LABEL_PLACEMENT_GROUP_PARTITION, &["3", "2"]));
    }
    let launched = h.create(&narrowed).await.unwrap();
    assert_eq!(label(&launched, LABEL_PLACEMENT_GROUP_ID), group);
    assert_eq!(label(&launched, LABEL_PLACEMENT_GROUP_PARTITION), "2");
    let fleet = h.last_fleet();
    let template = h.last_template();
    assert_eq!(
        template.placement,
        Some(Placement {
            group_id: group.clone(),
            partition_number: Some(2),
        })
    );
    assert_eq!(
        fleet
            .launch_templates
            .iter()
            .map(|t| t.overrides.len())
            .sum::<usize>(),
        4,
        "one override per type and zone, not one per partition: {fleet:?}"
    );

    let anywhere = h.create(&m5_on_demand("claim-2")).await.unwrap();
    assert_eq!(label(&anywhere, LABEL_PLACEMENT_GROUP_ID), group);
    let template = h.last_template();
    assert_eq!(
        template.placement,
        Some(Placement {
            group_id: group,
            partition_number: None,
        })
    );
    assert_eq!(
        label(&anywhere, LABEL_PLACEMENT_GROUP_PARTITION),
        "1",
        "the emptiest partition, where the in-memory EC2 (as EC2) put it"
    );
}

/// A cluster group: the group, no partition; types that cannot join a cluster group are not
/// launched.
#[tokio::test]
async fn a_cluster_group_places_the_launch_without_a_partition() {
    let (h, group) = Harness::with_placement_group("cluster", None).await;
    let launched = h.create(&m5_on_demand("claim-1")).await.unwrap();
    assert_eq!(label(&launched, LABEL_PLACEMENT_GROUP_ID), group);
    assert_eq!(label(&launched, LABEL_PLACEMENT_GROUP_PARTITION), "");
    let template = h.last_template();
    assert_eq!(
        template.placement,
        Some(Placement {
            group_id: group,
            partition_number: None,
        })
    );
    let err = h
        .create(&claim(
            "claim-2",
            vec![requirement(LABEL_INSTANCE_TYPE, &["t2.micro"])],
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InstanceError::InsufficientCapacity { .. }),
        "t2 types support partition and spread groups only: {err:?}"
    );
}

/// A harness whose node class selects one targeted, interruptible reservation of
/// `count` m5.large in zone A, and a NodeClaim allowing m5.large reserved or on-demand.
async fn reservation_harness(count: i64) -> (Harness, crate::ec2::CapacityReservation) {
    let fixture = Fixture::new();
    let reservation = fixture.cloud.ec2.add_capacity_reservation(
        "m5.large",
        ZONE_A,
        count,
        true,
        false,
        vec![Tag::new("team", "ml")],
    );
    let mut class = node_class();
    class["spec"]["capacityReservationSelectorTerms"] = json!([{"tags": {"team": "ml"}}]);
    (Harness::from_fixture(fixture, class).await, reservation)
}

fn reserved_or_on_demand(name: &str) -> v1::NodeClaim {
    claim(
        name,
        vec![
            requirement(LABEL_INSTANCE_TYPE, &["m5.large"]),
            requirement(LABEL_CAPACITY_TYPE, &["reserved", "on-demand"]),
        ],
    )
}

/// A NodeClaim allowing reserved capacity launches into the reservation its node class
/// selects: the template targets it, the NodeClaim is `reserved` with the reservation's
/// labels. The plugin counts its own launch, so the next NodeClaim goes on-demand without
/// trying the full reservation (while the node class's resolution, and EC2's count in it, is
/// reused); once the reserved instance is terminated, the room is back.
#[tokio::test]
async fn a_reserved_launch_targets_the_reservation_and_counts_itself() {
    let (h, reservation) = reservation_harness(1).await;
    let launched = h.create(&reserved_or_on_demand("claim-1")).await.unwrap();
    assert_eq!(label(&launched, LABEL_CAPACITY_TYPE), "reserved");
    assert_eq!(
        label(&launched, LABEL_CAPACITY_RESERVATION_ID),
        reservation.id
    );
    assert_eq!(label(&launched, LABEL_CAPACITY_RESERVATION_TYPE), "default");
    assert_eq!(
        label(&launched, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE),
        "true"
    );
    assert_eq!(label(&launched, LABEL_TOPOLOGY_ZONE), ZONE_A);
    let fleet = h.last_fleet();
    assert_eq!(fleet.capacity_type, CapacityType::OnDemand);
    let template = h.last_template();
    assert_eq!(
        template.capacity_reservation,
        Some(ReservationTarget {
            id: reservation.id.clone(),
            capacity_block: false,
        })
    );
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(template.user_data.unwrap_or_default())
            .unwrap(),
    )
    .unwrap();
    assert!(
        user_data.contains("karpenter.sh/capacity-type=reserved"),
        "the node registers as reserved:\n{user_data}"
    );
    let instance = h.ec2_instance(&status(&launched).provider_id).await;
    assert_eq!(
        instance.capacity_reservation_id.as_deref(),
        Some(reservation.id.as_str())
    );

    let fleets = h.ec2().fleet_requests().len();
    let next = h.create(&reserved_or_on_demand("claim-2")).await.unwrap();
    assert_eq!(label(&next, LABEL_CAPACITY_TYPE), "on-demand");
    assert_eq!(label(&next, LABEL_CAPACITY_RESERVATION_ID), "");
    assert_eq!(
        h.ec2().fleet_requests().len(),
        fleets + 1,
        "one CreateFleet, on-demand"
    );
    let template = h.last_template();
    assert_eq!(template.capacity_reservation, None);

    h.provider
        .delete(&status(&launched).provider_id, "claim-1")
        .await
        .unwrap();
    let again = h.create(&reserved_or_on_demand("claim-3")).await.unwrap();
    assert_eq!(label(&again, LABEL_CAPACITY_TYPE), "reserved");
}

/// When EC2 says the reservation is full (someone else launched into it), that is
/// insufficient capacity and its reserved offering is unavailable, so the next launch is
/// on-demand.
#[tokio::test]
async fn a_full_reservation_is_insufficient_capacity_then_skipped() {
    let (h, reservation) = reservation_harness(1).await;
    h.ec2()
        .set_capacity_reservation_available(&reservation.id, 0);
    let err = h
        .create(&reserved_or_on_demand("claim-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InstanceError::InsufficientCapacity { .. }),
        "{err:?}"
    );
    assert!(h.types.is_unavailable("m5.large", ZONE_A, "reserved"));
    let fallback = h.create(&reserved_or_on_demand("claim-2")).await.unwrap();
    assert_eq!(label(&fallback, LABEL_CAPACITY_TYPE), "on-demand");
}
