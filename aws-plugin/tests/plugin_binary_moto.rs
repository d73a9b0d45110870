//! The real `aws-plugin` binary, over its Unix socket, against a `moto_server` the test starts
//! (EC2, IAM and SSM on one port): a node class resolved, the catalogue streamed, an instance
//! launched (twice, idempotently), found drifted once a newer image is registered, terminated.
//! The gRPC calls go through the generated Rust client, except IsDrifted, which goes through
//! grpcurl as an operator would type it:
//!
//! ```sh
//! grpcurl -plaintext -unix -d @ /run/karpenter/plugin.sock \
//!   karpenter.cloudprovider.v1.CloudProviderService/IsDrifted <<'EOF'
//! {
//!   "nodeClaim": {
//!     "name": "default-abcde",
//!     "labels": {
//!       "karpenter.sh/nodepool": "default",
//!       "kubernetes.io/arch": "amd64",
//!       "node.kubernetes.io/instance-type": "m5.large",
//!       "topology.kubernetes.io/zone": "us-east-1a",
//!       "karpenter.sh/capacity-type": "on-demand"
//!     },
//!     "status": {
//!       "providerId": "aws:///us-east-1a/i-0123456789abcdef0",
//!       "imageId": "ami-0123456789abcdef0"
//!     }
//!   },
//!   "nodeClass": {
//!     "apiVersion": "karpenter.k8s.aws/v1",
//!     "kind": "EC2NodeClass",
//!     "metadata": {"name": "default"},
//!     "spec": {
//!       "role": "ItNodeRole",
//!       "amiFamily": "AL2023",
//!       "amiSelectorTerms": [{"name": "it-node-*", "owner": "self"}],
//!       "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}],
//!       "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}]
//!     }
//!   }
//! }
//! EOF
//! ```
//!
//! The test sends the whole Create answer as `nodeClaim` (spec, annotations, capacity...),
//! as core does; the fields above are enough by hand (IsDrifted also compares the hash
//! annotations core stamps, when there are any). It answers `{}` when nothing drifted and
//! `{"reason": "AMIDrift", "message": ...}` once a newer image matches `it-node-*`.
//!
//! moto runs through `tests/moto/moto_launcher.py` (see `tests/common/mod.rs`) and grpcurl
//! comes from `GRPCURL` or `PATH` (`.ci/install-tools` installs both); without them the test
//! fails, it never skips.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use aws_sdk_ec2::types as ec2;
use provider_sdk::Endpoint;
use provider_sdk::json::{json_to_struct, struct_to_json};
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::{
    self, ConditionStatus, CreateRequest, DeleteRequest, DeletionState, GetInstanceTypesRequest,
    GetRequest, ListRequest, ResolveNodeClassRequest,
};
use serde_json::{Value, json};
use tokio_stream::StreamExt as _;
use tonic::transport::Channel;

mod common;

#[path = "common/process.rs"]
mod process;

use common::Moto;
use process::{PluginProcess, tool};

const CLUSTER: &str = "it-cluster";
const NODE_CLAIM: &str = "default-abcde";
const DISCOVERY_KEY: &str = "karpenter.sh/discovery";
const DISCOVERY_VALUE: &str = "it";
const ROLE: &str = "ItNodeRole";
const PLACEMENT_GROUP: &str = "it-nodes";
const IS_DRIFTED: &str = "karpenter.cloudprovider.v1.CloudProviderService/IsDrifted";

/// A role EC2 may assume: IAM needs a trust policy to create one; nothing reads it.
const ASSUME_ROLE_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

/// How long any one RPC may take before the test fails instead of hanging.
const RPC_TIMEOUT: Duration = Duration::from_secs(120);

/// What the test made in moto.
#[derive(Debug)]
struct Fixtures {
    subnet_id: String,
    security_group_id: String,
    image_id: String,
    image_creation_date: String,
    placement_group_id: String,
    reservation_id: String,
}

async fn fixtures(ec2: &aws_sdk_ec2::Client, iam: &aws_sdk_iam::Client) -> Fixtures {
    let discovery = |resource: ec2::ResourceType| {
        ec2::TagSpecification::builder()
            .resource_type(resource)
            .tags(
                ec2::Tag::builder()
                    .key(DISCOVERY_KEY)
                    .value(DISCOVERY_VALUE)
                    .build(),
            )
            .build()
    };
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.77.0.0/16")
        .send()
        .await
        .expect("CreateVpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("a VPC id");
    let subnet = ec2
        .create_subnet()
        .vpc_id(vpc_id)
        .cidr_block("10.77.1.0/24")
        .availability_zone("us-east-1a")
        .tag_specifications(discovery(ec2::ResourceType::Subnet))
        .send()
        .await
        .expect("CreateSubnet");
    let group = ec2
        .create_security_group()
        .group_name("it-nodes")
        .description("nodes of the integration test")
        .vpc_id(vpc_id)
        .tag_specifications(discovery(ec2::ResourceType::SecurityGroup))
        .send()
        .await
        .expect("CreateSecurityGroup");
    iam.create_role()
        .role_name(ROLE)
        .assume_role_policy_document(ASSUME_ROLE_POLICY)
        .send()
        .await
        .expect("CreateRole");
    let image_id = register_image(ec2, "it-node-1").await;
    let placement_group = ec2
        .create_placement_group()
        .group_name(PLACEMENT_GROUP)
        .strategy(ec2::PlacementStrategy::Partition)
        .partition_count(2)
        .send()
        .await
        .expect("CreatePlacementGroup (moto_launcher.py adds it)");
    let reservation = ec2
        .create_capacity_reservation()
        .instance_type("m5.large")
        .instance_platform(ec2::CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone("us-east-1a")
        .instance_count(1)
        .instance_match_criteria(ec2::InstanceMatchCriteria::Targeted)
        .tag_specifications(discovery(ec2::ResourceType::CapacityReservation))
        .send()
        .await
        .expect("CreateCapacityReservation (moto_launcher.py adds it)");
    Fixtures {
        reservation_id: reservation
            .capacity_reservation()
            .and_then(|r| r.capacity_reservation_id())
            .expect("a capacity reservation id")
            .to_owned(),
        placement_group_id: placement_group
            .placement_group()
            .and_then(|g| g.group_id())
            .expect("a placement group id")
            .to_owned(),
        subnet_id: subnet
            .subnet()
            .and_then(|s| s.subnet_id())
            .expect("a subnet id")
            .to_owned(),
        security_group_id: group.group_id().expect("a group id").to_owned(),
        image_creation_date: image_creation_date(ec2, &image_id).await,
        image_id,
    }
}

/// An x86_64 image of this account named `name`. moto's RegisterImage ignores the
/// architecture (its images come back with none, which no node runs), while CopyImage keeps
/// the source's: so copy one of the Linux x86_64 images moto ships.
async fn register_image(ec2: &aws_sdk_ec2::Client, name: &str) -> String {
    let shipped = ec2
        .describe_images()
        .owners("amazon")
        .filters(
            ec2::Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await
        .expect("DescribeImages");
    let source = shipped
        .images()
        .iter()
        .filter(|i| i.platform().is_none())
        .filter_map(|i| i.image_id())
        .min()
        .expect("moto ships a Linux x86_64 image");
    ec2.copy_image()
        .source_image_id(source)
        .source_region("us-east-1")
        .name(name)
        .send()
        .await
        .expect("CopyImage")
        .image_id()
        .expect("an image id")
        .to_owned()
}

async fn image_creation_date(ec2: &aws_sdk_ec2::Client, image_id: &str) -> String {
    let images = ec2
        .describe_images()
        .image_ids(image_id)
        .send()
        .await
        .expect("DescribeImages");
    images
        .images()
        .first()
        .and_then(|i| i.creation_date())
        .unwrap_or_else(|| panic!("no creation date for {image_id}: {images:?}"))
        .to_owned()
}

/// Makes an image `name` with a creation date strictly after `after`. moto dates images to the
/// second, so an image registered in the same second as the first would tie with it and
/// "the newest" would be either: one registered in a later second is the newest for sure.
/// moto runs on the real clock, so the only way to a later second is to let one pass.
async fn register_newer_image(ec2: &aws_sdk_ec2::Client, name: &str, after: &str) -> String {
    for _ in 0..20 {
        let image_id = register_image(ec2, name).await;
        if image_creation_date(ec2, &image_id).await.as_str() > after {
            return image_id;
        }
        ec2.deregister_image()
            .image_id(&image_id)
            .send()
            .await
            .expect("DeregisterImage");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("moto dated every image {name} at or before {after}");
}

/// The EC2NodeClass as the user wrote it.
fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": ROLE,
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"name": "it-node-*", "owner": "self"}],
            "subnetSelectorTerms": [{"tags": {DISCOVERY_KEY: DISCOVERY_VALUE}}],
            "securityGroupSelectorTerms": [{"tags": {DISCOVERY_KEY: DISCOVERY_VALUE}}],
            "associatePublicIPAddress": false,
            "connectionTracking": {"tcpEstablishedTimeout": 300, "udpTimeout": 45},
            "detailedMonitoring": true,
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            ],
            "placementGroupSelector": {"name": PLACEMENT_GROUP},
            "capacityReservationSelectorTerms": [{"tags": {DISCOVERY_KEY: DISCOVERY_VALUE}}],
            // `enabled` would offer only the types whose processors support it (m8i, ...);
            // either value reaches the launch template.
            "cpuOptions": {"nestedVirtualization": "disabled"},
        }
    })
}

/// The node class as core sends it once resolved: with the status it published.
fn node_class_with_status(status: &Value) -> Value {
    let mut class = node_class();
    class["status"] = status.clone();
    class
}

fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        }}}
    })
}

fn requirement(key: &str, values: &[&str]) -> v1::Requirement {
    v1::Requirement::in_values(key, values)
}

/// The NodeClaim core would send for one m5.large on-demand node of NodePool `default`.
fn node_claim() -> v1::NodeClaim {
    v1::NodeClaim {
        name: NODE_CLAIM.to_owned(),
        labels: [("karpenter.sh/nodepool".to_owned(), "default".to_owned())].into(),
        spec: Some(v1::NodeClaimSpec {
            node_class_ref: Some(v1::NodeClassReference {
                group: "karpenter.k8s.aws".to_owned(),
                kind: "EC2NodeClass".to_owned(),
                name: "default".to_owned(),
            }),
            requirements: vec![
                requirement("node.kubernetes.io/instance-type", &["m5.large"]),
                requirement("karpenter.sh/capacity-type", &["on-demand"]),
            ],
            ..v1::NodeClaimSpec::default()
        }),
        ..v1::NodeClaim::default()
    }
}

/// Awaits one RPC, failing the test with the status (and not hanging) when it fails.
async fn call<T>(
    what: &str,
    rpc: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> T {
    tokio::time::timeout(RPC_TIMEOUT, rpc)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {RPC_TIMEOUT:?}"))
        .unwrap_or_else(|status| panic!("{what}: {status:?}"))
        .into_inner()
}

/// Starts the binary on `socket` against moto at `aws_endpoint`, with nothing from the test's
/// environment but what is set here.
fn start_plugin(dir: &Path, socket: &Path, aws_endpoint: &str) -> PluginProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aws-plugin"));
    command
        .arg("--endpoint")
        .arg(format!("unix://{}", socket.display()))
        .args(["--cluster-name", CLUSTER])
        .args(["--cluster-endpoint", "https://it-cluster.invalid"])
        // AL2023's nodeadm configuration needs the service CIDR.
        .args(["--cluster-cidr", "10.100.0.0/16"])
        .args(["--kubernetes-version", "1.33"])
        // A newly registered image must be seen by the very next call.
        .args(["--node-class-cache-seconds", "0"])
        .args(["--log-format", "json"])
        .env_clear()
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_ENDPOINT_URL", aws_endpoint)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    PluginProcess::start(&mut command, socket, &dir.join("aws-plugin.log"))
}

/// The instances moto has for `node_claim` (by the tag the plugin puts on them).
async fn instances_for(ec2: &aws_sdk_ec2::Client, node_claim: &str) -> Vec<ec2::Instance> {
    ec2.describe_instances()
        .filters(
            ec2::Filter::builder()
                .name("tag:karpenter.sh/nodeclaim")
                .values(node_claim)
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances")
        .reservations()
        .iter()
        .flat_map(|r| r.instances().iter().cloned())
        .collect()
}

/// The data of the latest version of every launch template that launches `image_id`.
async fn launch_template_data_with_image(
    ec2: &aws_sdk_ec2::Client,
    image_id: &str,
) -> Vec<ec2::ResponseLaunchTemplateData> {
    let templates = ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("DescribeLaunchTemplates");
    let mut found = Vec::new();
    for template in templates.launch_templates() {
        let id = template.launch_template_id().expect("a template id");
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_id(id)
            .versions("$Latest")
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        found.extend(
            versions
                .launch_template_versions()
                .iter()
                .filter_map(|v| v.launch_template_data())
                .filter(|data| data.image_id() == Some(image_id))
                .cloned(),
        );
    }
    found
}

async fn instance(ec2: &aws_sdk_ec2::Client, instance_id: &str) -> ec2::Instance {
    let answer = ec2
        .describe_instances()
        .instance_ids(instance_id)
        .send()
        .await
        .expect("DescribeInstances");
    answer
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find(|i| i.instance_id() == Some(instance_id))
        .unwrap_or_else(|| panic!("moto has no instance {instance_id}: {answer:?}"))
        .clone()
}

/// IsDrifted through grpcurl, the body on stdin (`-d @`), the answer as JSON.
fn is_drifted_with_grpcurl(grpcurl: &Path, socket: &Path, launched: &v1::NodeClaim) -> Value {
    let body = json!({
        "nodeClaim": node_claim_proto_json(launched),
        "nodeClass": node_class(),
    });
    let mut command = Command::new(grpcurl);
    command
        .args(["-plaintext", "-unix", "-d", "@"])
        .arg(socket)
        .arg(IS_DRIFTED)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    child
        .stdin
        .take()
        .expect("grpcurl's stdin")
        .write_all(body.to_string().as_bytes())
        .expect("writing the request to grpcurl");
    // Dropping stdin (above) closed it: grpcurl reads the body to its end, then calls.
    let output = child.wait_with_output().expect("waiting for grpcurl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{command:?} failed with {}:\nrequest: {body}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("grpcurl printed {stdout:?}: {e}"))
}

/// A NodeClaim in the proto3 JSON mapping grpcurl reads: lowerCamelCase field names, enums by
/// name, timestamps in RFC 3339, durations as seconds with an `s`.
fn node_claim_proto_json(claim: &v1::NodeClaim) -> Value {
    let mut out = json!({
        "name": claim.name,
        "uid": claim.uid,
        "labels": claim.labels,
        "annotations": claim.annotations,
    });
    if let Some(at) = &claim.creation_timestamp {
        out["creationTimestamp"] = timestamp_json(at);
    }
    if let Some(at) = &claim.deletion_timestamp {
        out["deletionTimestamp"] = timestamp_json(at);
    }
    if let Some(spec) = &claim.spec {
        let mut spec_json = json!({
            "requirements": spec.requirements.iter().map(|r| {
                let mut requirement = json!({
                    "key": r.key,
                    "operator": enum_json(r.operator, v1::Operator::try_from(r.operator).map(|o| o.as_str_name())),
                    "values": r.values,
                });
                if let Some(min) = r.min_values {
                    requirement["minValues"] = min.into();
                }
                requirement
            }).collect::<Vec<_>>(),
            "resourceRequests": spec.resource_requests,
            "taints": spec.taints.iter().map(taint_json).collect::<Vec<_>>(),
            "startupTaints": spec.startup_taints.iter().map(taint_json).collect::<Vec<_>>(),
        });
        if let Some(reference) = &spec.node_class_ref {
            spec_json["nodeClassRef"] = json!({
                "group": reference.group,
                "kind": reference.kind,
                "name": reference.name,
            });
        }
        if let Some(after) = &spec.expire_after {
            spec_json["expireAfter"] = duration_json(after);
        }
        if let Some(grace) = &spec.termination_grace_period {
            spec_json["terminationGracePeriod"] = duration_json(grace);
        }
        out["spec"] = spec_json;
    }
    if let Some(status) = &claim.status {
        out["status"] = json!({
            "providerId": status.provider_id,
            "imageId": status.image_id,
            "capacity": status.capacity,
            "allocatable": status.allocatable,
            "instanceState": enum_json(
                status.instance_state,
                v1::InstanceState::try_from(status.instance_state).map(|s| s.as_str_name()),
            ),
        });
    }
    out
}

/// An enum by name, or by number when this build does not know the value (the mapping
/// accepts both).
fn enum_json<E>(number: i32, name: Result<&'static str, E>) -> Value {
    name.map_or_else(|_| number.into(), Into::into)
}

fn taint_json(taint: &v1::Taint) -> Value {
    json!({
        "key": taint.key,
        "value": taint.value,
        "effect": enum_json(taint.effect, v1::TaintEffect::try_from(taint.effect).map(|e| e.as_str_name())),
    })
}

fn timestamp_json(at: &prost_types::Timestamp) -> Value {
    let seconds = u64::try_from(at.seconds).expect("a timestamp after 1970");
    let whole =
        aws_plugin::node_class::iso8601(std::time::UNIX_EPOCH + Duration::from_secs(seconds));
    // iso8601 writes `.000Z`: put the nanoseconds back.
    let date_time = whole.trim_end_matches(".000Z");
    format!("{date_time}.{:09}Z", at.nanos).into()
}

fn duration_json(duration: &prost_types::Duration) -> Value {
    if duration.nanos == 0 {
        format!("{}s", duration.seconds).into()
    } else {
        format!("{}.{:09}s", duration.seconds, duration.nanos).into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_binary_resolves_launches_drifts_and_terminates_against_moto() {
    // Found first, so a missing grpcurl fails the test before anything starts.
    let grpcurl = tool("grpcurl", "GRPCURL");
    let moto = Moto::start();
    let config = moto.sdk_config();
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let fixtures = fixtures(&ec2, &iam).await;

    let dir = tempfile::tempdir().unwrap();
    let socket: PathBuf = dir.path().join("plugin.sock");
    let aws_endpoint = config.endpoint_url().expect("moto's endpoint").to_owned();
    let plugin = start_plugin(dir.path(), &socket, &aws_endpoint);
    let channel: Channel =
        provider_sdk::connect::connect(&Endpoint::Unix(socket.clone()), None).unwrap();
    let mut client = CloudProviderServiceClient::new(channel);

    // 1. ResolveNodeClass: every condition True; the status names what moto has.
    let resolved = call(
        "ResolveNodeClass",
        client.resolve_node_class(ResolveNodeClassRequest {
            node_class: json_to_struct(&node_class()),
        }),
    )
    .await;
    let not_true: Vec<&v1::Condition> = resolved
        .conditions
        .iter()
        .filter(|c| c.status != ConditionStatus::True as i32)
        .collect();
    assert!(not_true.is_empty(), "{:?}", resolved.conditions);
    let condition_types: Vec<&str> = resolved
        .conditions
        .iter()
        .map(|c| c.r#type.as_str())
        .collect();
    for expected in [
        "AMIsReady",
        "SubnetsReady",
        "SecurityGroupsReady",
        "InstanceProfileReady",
    ] {
        assert!(
            condition_types.contains(&expected),
            "{expected} missing from {condition_types:?}"
        );
    }
    assert!(!resolved.static_hash.is_empty(), "{resolved:?}");
    let status = struct_to_json(resolved.status.clone().expect("a status"));
    let ids = |key: &str| -> Vec<String> {
        status[key]
            .as_array()
            .unwrap_or_else(|| panic!("status.{key} is not a list: {status}"))
            .iter()
            .map(|item| item["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(ids("subnets"), [fixtures.subnet_id.as_str()], "{status}");
    assert_eq!(status["subnets"][0]["zone"], "us-east-1a", "{status}");
    assert_eq!(
        ids("securityGroups"),
        [fixtures.security_group_id.as_str()],
        "{status}"
    );
    assert_eq!(ids("amis"), [fixtures.image_id.as_str()], "{status}");
    assert_eq!(status["amis"][0]["name"], "it-node-1", "{status}");
    let profile = status["instanceProfile"]
        .as_str()
        .unwrap_or_else(|| panic!("no instance profile in {status}"))
        .to_owned();
    let stored = iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the plugin's instance profile {profile} is not in IAM: {e:?}"));
    let roles: Vec<&str> = stored
        .instance_profile()
        .expect("an instance profile")
        .roles()
        .iter()
        .map(|r| r.role_name())
        .collect();
    assert_eq!(roles, [ROLE], "{stored:?}");
    let node_class_published = node_class_with_status(&status);

    // 2. GetInstanceTypes: the whole catalogue, streamed in chunks.
    let mut stream = call(
        "GetInstanceTypes",
        client.get_instance_types(GetInstanceTypesRequest {
            node_pool: json_to_struct(&node_pool()),
            node_class: json_to_struct(&node_class_published),
        }),
    )
    .await;
    let mut types = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = tokio::time::timeout(RPC_TIMEOUT, stream.next())
        .await
        .expect("the next chunk within the timeout")
    {
        types.extend(chunk.expect("a chunk").instance_types);
        chunks += 1;
    }
    // moto knows about 1,260 types; "many" leaves room for moto releases.
    assert!(types.len() > 500, "{} types", types.len());
    assert!(chunks > 1, "{} types in {chunks} chunk(s)", types.len());
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large in the catalogue");
    let offering = m5
        .offerings
        .iter()
        .find(|o| o.zone == "us-east-1a" && o.capacity_type == "on-demand")
        .unwrap_or_else(|| panic!("no on-demand offering in us-east-1a: {:?}", m5.offerings));
    assert!(offering.is_available(), "{offering:?}");
    assert!(offering.price.is_some_and(|p| p > 0.0), "{offering:?}");
    assert_eq!(offering.currency, "USD");

    // 3. Create: one m5.large, on demand, in the one subnet, from the one image.
    let create = || CreateRequest {
        node_claim: Some(node_claim()),
        node_class: json_to_struct(&node_class_published),
    };
    let launched = call("Create", client.create(create()))
        .await
        .node_claim
        .expect("a NodeClaim");
    let launched_status = launched.status.clone().expect("a status");
    let provider_id = launched_status.provider_id.clone();
    let instance_id = provider_id
        .strip_prefix("aws:///us-east-1a/")
        .filter(|id| id.starts_with("i-"))
        .unwrap_or_else(|| panic!("provider id {provider_id:?}"))
        .to_owned();
    assert_eq!(launched_status.image_id, fixtures.image_id, "{launched:?}");
    let label = |key: &str| launched.labels.get(key).map(String::as_str);
    assert_eq!(label("node.kubernetes.io/instance-type"), Some("m5.large"));
    assert_eq!(label("topology.kubernetes.io/zone"), Some("us-east-1a"));
    assert_eq!(label("karpenter.sh/capacity-type"), Some("on-demand"));

    let running = instance(&ec2, &instance_id).await;
    assert_eq!(
        running.instance_type().map(|t| t.as_str()),
        Some("m5.large")
    );
    assert_eq!(running.image_id(), Some(fixtures.image_id.as_str()));
    assert_eq!(running.subnet_id(), Some(fixtures.subnet_id.as_str()));
    let tags: BTreeMap<&str, &str> = running
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    let cluster_tag = format!("kubernetes.io/cluster/{CLUSTER}");
    for (key, value) in [
        ("karpenter.sh/nodeclaim", NODE_CLAIM),
        ("karpenter.sh/nodepool", "default"),
        (cluster_tag.as_str(), "owned"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
    ] {
        assert_eq!(tags.get(key), Some(&value), "tag {key}: {tags:?}");
    }

    // What the plugin asked of EC2, as moto records it.
    let templates = launch_template_data_with_image(&ec2, &fixtures.image_id).await;
    assert!(
        !templates.is_empty(),
        "no launch template runs {}",
        fixtures.image_id
    );
    for template in &templates {
        // The node class's interface, with the groups, its public IP setting and its
        // connection tracking; monitoring is on.
        assert!(template.security_group_ids().is_empty(), "{template:?}");
        let [primary] = template.network_interfaces() else {
            panic!("one network interface: {template:?}");
        };
        assert_eq!(primary.device_index(), Some(0), "{template:?}");
        assert_eq!(primary.network_card_index(), Some(0), "{template:?}");
        assert_eq!(primary.interface_type(), Some("interface"), "{template:?}");
        assert_eq!(
            primary.groups(),
            [fixtures.security_group_id.as_str()],
            "{template:?}"
        );
        assert_eq!(primary.associate_public_ip_address(), Some(false));
        let tracking = primary
            .connection_tracking_specification()
            .expect("the connection tracking EC2 records");
        assert_eq!(tracking.tcp_established_timeout(), Some(300));
        assert_eq!(tracking.udp_timeout(), Some(45));
        assert_eq!(tracking.udp_stream_timeout(), None);
        assert_eq!(template.monitoring().and_then(|m| m.enabled()), Some(true));
        // The placement group, partition left to EC2 (the NodeClaim allows every one).
        let placement = template.placement().expect("the placement EC2 records");
        assert_eq!(
            placement.group_id(),
            Some(fixtures.placement_group_id.as_str())
        );
        assert_eq!(placement.partition_number(), None, "{template:?}");
        assert_eq!(
            template
                .cpu_options()
                .and_then(|c| c.nested_virtualization())
                .map(|n| n.as_str()),
            Some("disabled"),
            "{template:?}"
        );
    }
    // The instance got the interface's groups (moto through moto_launcher.py, as EC2).
    let groups: Vec<&str> = running
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    assert_eq!(groups, [fixtures.security_group_id.as_str()], "{running:?}");
    assert_eq!(
        label("karpenter.k8s.aws/placement-group-id"),
        Some(fixtures.placement_group_id.as_str())
    );

    // 4. Create again with the same name: the same instance, nothing new launched.
    let again = call("Create again", client.create(create()))
        .await
        .node_claim
        .expect("a NodeClaim");
    assert_eq!(
        again.status.map(|s| s.provider_id),
        Some(provider_id.clone())
    );
    let for_name = instances_for(&ec2, NODE_CLAIM).await;
    assert_eq!(
        for_name.len(),
        1,
        "one instance for {NODE_CLAIM}: {for_name:?}"
    );
    let listed = call("List", client.list(ListRequest::default())).await;
    let listed: Vec<(&str, &str)> = listed
        .node_claims
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.status.as_ref().map_or("", |s| s.provider_id.as_str()),
            )
        })
        .collect();
    assert_eq!(listed, [(NODE_CLAIM, provider_id.as_str())]);

    // 5. IsDrifted through grpcurl: not drifted, then AMIDrift once a newer image matches.
    assert_eq!(
        is_drifted_with_grpcurl(&grpcurl, &socket, &launched),
        json!({})
    );
    let newer_image = register_newer_image(&ec2, "it-node-2", &fixtures.image_creation_date).await;
    let drifted = is_drifted_with_grpcurl(&grpcurl, &socket, &launched);
    assert_eq!(drifted["reason"], "AMIDrift", "{drifted}");
    let message = drifted["message"].as_str().unwrap_or_default();
    assert!(message.contains(&fixtures.image_id), "{drifted}");
    assert!(message.contains(&newer_image), "{drifted}");

    // 6. Delete: termination starts, then the instance is gone for good.
    let delete = || DeleteRequest {
        provider_id: provider_id.clone(),
        node_claim_name: NODE_CLAIM.to_owned(),
    };
    let first = call("Delete", client.delete(delete())).await;
    assert!(
        [
            DeletionState::Terminating as i32,
            DeletionState::Gone as i32
        ]
        .contains(&first.state),
        "{first:?}"
    );
    let state = instance(&ec2, &instance_id)
        .await
        .state()
        .and_then(|s| s.name().cloned());
    assert!(
        matches!(
            state,
            Some(ec2::InstanceStateName::ShuttingDown | ec2::InstanceStateName::Terminated)
        ),
        "{state:?}"
    );
    let second = call("Delete again", client.delete(delete())).await;
    assert_eq!(second.state, DeletionState::Gone as i32, "{second:?}");
    let err = tokio::time::timeout(
        RPC_TIMEOUT,
        client.get(GetRequest {
            provider_id: provider_id.clone(),
        }),
    )
    .await
    .expect("Get answers within the timeout")
    .expect_err("a terminated instance is not found");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let listed = call("List after Delete", client.list(ListRequest::default())).await;
    assert!(listed.node_claims.is_empty(), "{listed:?}");

    // 7. A launch into the capacity reservation the node class selects: the NodeClaim is
    // `reserved`, labelled with it, and its launch template targets it.
    let reservations = status["capacityReservations"].clone();
    assert_eq!(
        reservations[0]["id"],
        fixtures.reservation_id.as_str(),
        "{status}"
    );
    assert_eq!(reservations[0]["interruptible"], false, "{status}");
    let mut reserved_claim = node_claim();
    reserved_claim.name = "reserved-abcde".to_owned();
    if let Some(spec) = reserved_claim.spec.as_mut() {
        spec.requirements = vec![
            requirement("node.kubernetes.io/instance-type", &["m5.large"]),
            requirement("karpenter.sh/capacity-type", &["reserved"]),
        ];
    }
    let reserved = call(
        "Create reserved",
        client.create(CreateRequest {
            node_claim: Some(reserved_claim),
            node_class: json_to_struct(&node_class_published),
        }),
    )
    .await
    .node_claim
    .expect("a NodeClaim");
    let reserved_label = |key: &str| reserved.labels.get(key).map(String::as_str);
    assert_eq!(
        reserved_label("karpenter.sh/capacity-type"),
        Some("reserved")
    );
    assert_eq!(
        reserved_label("karpenter.k8s.aws/capacity-reservation-id"),
        Some(fixtures.reservation_id.as_str())
    );
    assert_eq!(
        reserved_label("karpenter.k8s.aws/capacity-reservation-interruptible"),
        Some("false")
    );
    let targets: Vec<String> = launch_template_data_with_image(&ec2, &newer_image)
        .await
        .iter()
        .filter_map(|t| t.capacity_reservation_specification())
        .filter_map(|c| c.capacity_reservation_target())
        .filter_map(|t| t.capacity_reservation_id())
        .map(str::to_owned)
        .collect();
    assert_eq!(targets, std::slice::from_ref(&fixtures.reservation_id));
    let reserved_provider_id = reserved.status.map(|s| s.provider_id).unwrap_or_default();
    call(
        "Delete reserved",
        client.delete(DeleteRequest {
            provider_id: reserved_provider_id,
            node_claim_name: "reserved-abcde".to_owned(),
        }),
    )
    .await;

    // --log-format json: one JSON object per line, the launch among them.
    let log = plugin.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line.to_string().contains(&provider_id)),
        "no log line names {provider_id}:\n{log}"
    );
}
