//! Core against a hostile cloud provider plugin (`common/hostile.rs`: a real tonic server on a
//! Unix socket, reached through core's real connection, handshake and gRPC adapter). Each
//! test has the plugin answer one kind of nonsense and checks three things: core refuses the
//! answer with an error naming what was wrong, `karpenter_cloudprovider_errors_total` counts
//! it (by method and error), and no controller deletes or launches anything because of it.
//! Where a decision is involved the controllers run on the in-memory cluster and a fake
//! clock; the test about deadlines runs on tokio's paused clock, so nothing really waits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use core_domain::requirements::{NodeSelectorRequirement, Operator};
use core_svc::apis::NodeClaim;
use core_svc::clock::{Clock as _, FakeClock};
use core_svc::cloudprovider::grpc::ErrorKind;
use core_svc::cloudprovider::{
    CloudProvider, CloudProviderError, GrpcCloudProvider, NodeClaimRequest, NodeClassRef, Rpc,
};
use core_svc::cluster::{Cluster as _, InMemoryCluster};
use core_svc::controllers::drift::DriftController;
use core_svc::controllers::gc::GarbageCollectionController;
use core_svc::controllers::lifecycle::LifecycleController;
use core_svc::controllers::provisioning::{Provisioner, ProvisionerOptions};
use core_svc::controllers::{Context, Controller as _, Requeue, Settings};
use core_svc::events::MemoryEvents;
use core_svc::metrics::Metrics;
use core_svc::plugin::Deadlines;
use k8s_openapi::api::core::v1::Pod;
use provider_sdk::v1;
use serde_json::{Value, json};

mod common;
#[path = "common/hostile.rs"]
mod hostile;

use hostile::{Served, serve};

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";

// ---- Fixtures --------------------------------------------------------------------------------

/// A valid instance type: declared in zone-a and zone-b, sold on demand in zone-a.
fn instance_type(name: &str) -> v1::InstanceType {
    v1::InstanceType {
        name: name.into(),
        requirements: vec![
            v1::Requirement::in_values(INSTANCE_TYPE, [name]),
            v1::Requirement::in_values(ZONE, ["zone-a", "zone-b"]),
            v1::Requirement::in_values(CAPACITY_TYPE, ["on-demand"]),
            v1::Requirement::in_values("kubernetes.io/arch", ["amd64"]),
            v1::Requirement::in_values("kubernetes.io/os", ["linux"]),
        ],
        offerings: vec![v1::Offering::priced(
            "zone-a",
            "on-demand",
            0.1,
            "USD",
            true,
        )],
        capacity: HashMap::from([
            ("cpu".into(), "4".into()),
            ("memory".into(), "16Gi".into()),
            ("pods".into(), "110".into()),
        ]),
        overhead: None,
        burstable_cpu: false,
    }
}

fn node_pool_json() -> Value {
    serde_json::to_value(common::node_pool("default", json!({}))).unwrap()
}

fn node_class_json() -> Value {
    serde_json::to_value(common::node_class("default", json!({}))).unwrap()
}

/// What core asks Create for: an m5.large in zone-a, on demand.
fn request(name: &str) -> NodeClaimRequest {
    let requirement = |key: &str, value: &str| NodeSelectorRequirement {
        key: key.into(),
        operator: Operator::In,
        values: vec![value.into()],
        min_values: None,
    };
    NodeClaimRequest {
        name: name.into(),
        uid: format!("uid-{name}"),
        node_class_ref: NodeClassRef {
            group: "test.karpenter.sh".into(),
            kind: "TestNodeClass".into(),
            name: "default".into(),
        },
        requirements: vec![
            requirement(INSTANCE_TYPE, "m5.large"),
            requirement(ZONE, "zone-a"),
            requirement(CAPACITY_TYPE, "on-demand"),
        ],
        ..Default::default()
    }
}

/// The instance `provider_id` as the plugin describes it, launched for `node_claim`, running.
fn instance(node_claim: &str, provider_id: &str, instance_type: &str) -> v1::NodeClaim {
    v1::NodeClaim {
        name: node_claim.into(),
        labels: HashMap::from([
            (INSTANCE_TYPE.into(), instance_type.into()),
            (ZONE.into(), "zone-a".into()),
            (CAPACITY_TYPE.into(), "on-demand".into()),
        ]),
        status: Some(v1::NodeClaimStatus {
            provider_id: provider_id.into(),
            image_id: "img-1".into(),
            capacity: HashMap::from([("cpu".into(), "4".into())]),
            allocatable: HashMap::from([("cpu".into(), "3900m".into())]),
            instance_state: v1::InstanceState::Running.into(),
        }),
        ..Default::default()
    }
}

fn launched(claim: v1::NodeClaim) -> v1::CreateResponse {
    v1::CreateResponse {
        node_claim: Some(claim),
        state: v1::LaunchState::Launched.into(),
        retry_after: None,
        message: String::new(),
    }
}

// ---- Assertions ------------------------------------------------------------------------------

#[track_caller]
fn assert_contains(text: &str, expected: &str) {
    assert!(
        text.contains(expected),
        "{text:?} should contain {expected:?}"
    );
}

/// The error, which must be a refused answer, as people read it.
#[track_caller]
fn refused<T: std::fmt::Debug>(result: Result<T, CloudProviderError>) -> String {
    match result {
        Err(error @ CloudProviderError::InvalidResponse(_)) => error.to_string(),
        other => panic!("expected a refused answer, got {other:?}"),
    }
}

/// The `karpenter_cloudprovider_errors_total` sample of `rpc` and `error` in core's metrics
/// exposition, where the provider's counters are exported.
fn exported_errors(provider: &GrpcCloudProvider, rpc: Rpc, error: &str) -> Option<u64> {
    let text = Metrics::new(Some(Arc::clone(provider.metrics())))
        .encode()
        .unwrap();
    let prefix = format!(
        "karpenter_cloudprovider_errors_total{{method=\"{}\",error=\"{error}\"}} ",
        rpc.as_str()
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|count| count.parse().unwrap())
}

/// `rpc`'s answers were refused for `kind` `count` times, in the counters and in the exported
/// metric.
#[track_caller]
fn assert_counted(provider: &GrpcCloudProvider, rpc: Rpc, kind: ErrorKind, count: u64) {
    assert_eq!(
        provider.metrics().errors(rpc, kind),
        count,
        "{rpc} {kind:?}"
    );
    assert_eq!(
        exported_errors(provider, rpc, &kind.label()),
        Some(count),
        "karpenter_cloudprovider_errors_total{{method={rpc}, error={}}}",
        kind.label()
    );
}

// ---- The catalogue ---------------------------------------------------------------------------

async fn catalogue(served: &Served) -> Result<usize, CloudProviderError> {
    served
        .provider
        .instance_types(&node_pool_json(), Some(&node_class_json()))
        .await
        .map(|types| types.len())
}

#[tokio::test]
async fn an_instance_type_listed_twice_refuses_the_catalogue_naming_the_type() {
    let served = serve(Deadlines::DEFAULT).await;
    served.plugin.script().instance_types = vec![
        instance_type("m5.large"),
        instance_type("c5.large"),
        instance_type("m5.large"),
    ];

    let error = refused(catalogue(&served).await);

    assert_contains(
        &error,
        "GetInstanceTypes answer: instance type \"m5.large\": name: appears twice in the catalogue",
    );
    assert_counted(
        &served.provider,
        Rpc::GetInstanceTypes,
        ErrorKind::InvalidAnswer,
        1,
    );
}

#[tokio::test]
async fn an_empty_catalogue_a_nameless_type_and_a_type_without_offerings_are_refused() {
    let served = serve(Deadlines::DEFAULT).await;
    let nameless = v1::InstanceType {
        name: String::new(),
        ..instance_type("m5.large")
    };
    let unsold = v1::InstanceType {
        offerings: vec![],
        ..instance_type("m5.large")
    };
    let cases = [
        (
            vec![],
            "GetInstanceTypes answer: instance_types: empty: a catalogue lists every instance type",
        ),
        (
            vec![instance_type("c5.large"), nameless],
            "GetInstanceTypes answer: instance type \"\": name: must not be empty",
        ),
        (
            vec![unsold],
            "GetInstanceTypes answer: instance type \"m5.large\": offerings: empty",
        ),
    ];
    for (types, expected) in cases {
        served.plugin.script().instance_types = types;
        assert_contains(&refused(catalogue(&served).await), expected);
    }
    assert_counted(
        &served.provider,
        Rpc::GetInstanceTypes,
        ErrorKind::InvalidAnswer,
        3,
    );

    served.plugin.script().instance_types = vec![instance_type("m5.large")];
    assert_eq!(catalogue(&served).await, Ok(1), "a sane answer is taken");
}

#[tokio::test]
async fn nan_negative_infinite_and_absurd_prices_are_refused_naming_the_offering() {
    let served = serve(Deadlines::DEFAULT).await;
    let cases = [
        (
            f64::NAN,
            "offerings[0].price: NaN is not a finite, non-negative price",
        ),
        (
            -0.5,
            "offerings[0].price: -0.5 is not a finite, non-negative price",
        ),
        (
            f64::INFINITY,
            "offerings[0].price: inf is not a finite, non-negative price",
        ),
        (
            f64::NEG_INFINITY,
            "offerings[0].price: -inf is not a finite, non-negative price",
        ),
        (
            1e300,
            "offerings[0].price: 1e300 is above core's limit of 1e9 per node and hour",
        ),
    ];
    for (price, expected) in cases {
        let mut priced = instance_type("m5.large");
        priced.offerings[0].price = Some(price);
        served.plugin.script().instance_types = vec![instance_type("c5.large"), priced];
        let error = refused(catalogue(&served).await);
        assert_contains(&error, "instance type \"m5.large\": ");
        assert_contains(&error, expected);
    }
    assert_counted(
        &served.provider,
        Rpc::GetInstanceTypes,
        ErrorKind::InvalidAnswer,
        5,
    );
}

#[tokio::test]
async fn offerings_in_zones_the_type_never_declared_or_malformed_are_refused() {
    // The API's notion of known zones: an instance type's requirements declare the zones of
    // its nodes (`topology.kubernetes.io/zone In [...]`), and an available offering is in one
    // of them. Zones are label values on the Node, so they must be valid ones.
    let served = serve(Deadlines::DEFAULT).await;
    let cases = [
        (
            "mars-1a",
            "instance type \"m5.large\": offerings[0].zone: \"mars-1a\" is not a zone the type \
             declares (topology.kubernetes.io/zone In [zone-a zone-b])",
        ),
        (
            "zone a!",
            "offerings[0].zone: \"zone a!\" is not a valid topology.kubernetes.io/zone label value",
        ),
        ("", "offerings[0].zone: must not be empty"),
    ];
    for (zone, expected) in cases {
        let mut misplaced = instance_type("m5.large");
        misplaced.offerings[0].zone = zone.into();
        served.plugin.script().instance_types = vec![misplaced];
        assert_contains(&refused(catalogue(&served).await), expected);
    }
    assert_counted(
        &served.provider,
        Rpc::GetInstanceTypes,
        ErrorKind::InvalidAnswer,
        3,
    );

    // An unavailable offering may be anywhere (aws-plugin lists the zones the node class has
    // no subnet in so, and declares only the zones it can launch in).
    let mut elsewhere = instance_type("m5.large");
    elsewhere.offerings.push(v1::Offering::priced(
        "zone-c",
        "on-demand",
        0.1,
        "USD",
        false,
    ));
    served.plugin.script().instance_types = vec![elsewhere];
    assert_eq!(catalogue(&served).await, Ok(1));
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_refused_unread_and_not_asked_again() {
    let served = serve(Deadlines::DEFAULT).await;
    let mut huge = instance_type("m5.large");
    // 17 MiB in one resource name: over core's 16 MiB, in one chunk.
    huge.capacity
        .insert("x".repeat(17 * 1024 * 1024), "1".into());
    served.plugin.script().instance_types = vec![huge];

    let error = refused(catalogue(&served).await);

    assert_contains(
        &error,
        "GetInstanceTypes answer: a message over core's limit of 16777216 bytes, refused unread",
    );
    assert_eq!(
        served.plugin.calls("GetInstanceTypes"),
        1,
        "the same answer would come again"
    );
    assert_counted(
        &served.provider,
        Rpc::GetInstanceTypes,
        ErrorKind::MessageTooLarge,
        1,
    );
}

/// A refused catalogue plans nothing: the provisioner launches no NodeClaim for a pending pod
/// until the plugin answers a catalogue core accepts.
#[tokio::test]
async fn the_provisioner_launches_nothing_on_a_refused_catalogue() {
    let world = World::new(Deadlines::DEFAULT).await;
    world
        .cluster
        .create(&common::node_pool("default", json!({})))
        .await
        .unwrap();
    world.pending_pod("web-1").await;
    let provisioner =
        Provisioner::with_options(world.context.clone(), ProvisionerOptions::default());
    let mut nonsense = instance_type("m5.large");
    nonsense.offerings[0].price = Some(f64::NAN);
    world.plugin().script().instance_types = vec![instance_type("c5.large"), nonsense];

    for _ in 0..10 {
        if let Requeue::After(wait) = provisioner.reconcile().await.unwrap() {
            world.clock.advance(wait.max(Duration::from_secs(1)));
        }
    }

    assert!(world.plugin().calls("GetInstanceTypes") >= 1);
    assert!(world.node_claims().await.is_empty(), "nothing launched");
    assert!(
        world
            .provider()
            .metrics()
            .errors(Rpc::GetInstanceTypes, ErrorKind::InvalidAnswer)
            >= 1
    );

    world.plugin().script().instance_types = vec![instance_type("m5.large")];
    for _ in 0..10 {
        if !world.node_claims().await.is_empty() {
            break;
        }
        if let Requeue::After(wait) = provisioner.reconcile().await.unwrap() {
            world.clock.advance(wait.max(Duration::from_secs(1)));
        }
    }
    assert_eq!(
        world.node_claims().await.len(),
        1,
        "a sane catalogue is planned on"
    );
}

// ---- Deadlines -------------------------------------------------------------------------------

/// On tokio's paused clock: the plugin sleeps an hour, core's 2 s deadline passes at once.
#[tokio::test(start_paused = true)]
async fn an_answer_past_the_deadline_is_refused_and_garbage_collection_keeps_its_hands_off() {
    let deadlines = Deadlines {
        default: Duration::from_secs(2),
        ..Deadlines::DEFAULT
    };
    let world = World::new(deadlines).await;
    world.plugin().script().delay = Some(Duration::from_secs(3600));
    let started = tokio::time::Instant::now();

    let error = world
        .provider()
        .get("hostile:///zone-a/i-1")
        .await
        .unwrap_err();

    assert!(
        matches!(error, CloudProviderError::Unavailable(_)),
        "{error:?}"
    );
    assert_contains(
        &error.to_string(),
        "Get failed after 1 attempt(s): DeadlineExceeded",
    );
    assert!(
        started.elapsed() < Duration::from_secs(3600),
        "not waited out"
    );
    assert_counted(
        world.provider(),
        Rpc::Get,
        ErrorKind::Status(tonic::Code::DeadlineExceeded),
        1,
    );

    // Garbage collection on a List past its deadline: nothing is deleted.
    world
        .registered_node_claim("web-a", "hostile:///zone-a/i-1")
        .await;
    let gc = GarbageCollectionController::new(world.context.clone());
    gc.reconcile().await.unwrap();
    assert!(!world.is_deleting("web-a").await);
    assert_eq!(world.plugin().calls("Delete"), 0);
    assert_eq!(world.events.with_reason("PluginUnavailable").len(), 1);
    assert_counted(
        world.provider(),
        Rpc::List,
        ErrorKind::Status(tonic::Code::DeadlineExceeded),
        1,
    );
}

// ---- Create ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_create_answer_for_another_node_claim_or_another_instance_type_is_refused() {
    let served = serve(Deadlines::DEFAULT).await;
    let node_class = node_class_json();
    let cases = [
        (
            instance("default-other", "hostile:///zone-a/i-9", "m5.large"),
            "Create answer: node_claim.name: \"default-other\" is not the NodeClaim asked for, \
             \"default-mine\"",
        ),
        (
            instance("default-mine", "hostile:///zone-a/i-9", "p4d.24xlarge"),
            "Create answer: node_claim.labels[node.kubernetes.io/instance-type]: \
             \"p4d.24xlarge\" is not what the NodeClaim \"default-mine\" asked for \
             (node.kubernetes.io/instance-type In [m5.large])",
        ),
    ];
    for (answer, expected) in cases {
        served.plugin.script().create = Some(launched(answer));
        let error = refused(
            served
                .provider
                .create(&request("default-mine"), &node_class)
                .await,
        );
        assert_contains(&error, expected);
    }
    assert_counted(&served.provider, Rpc::Create, ErrorKind::InvalidAnswer, 2);
}

/// Create answering an instance another NodeClaim already holds: recorded, two NodeClaims
/// would share one instance and the deletion of either would take the other's node.
#[tokio::test]
async fn the_lifecycle_never_records_another_node_claims_instance() {
    let world = World::new(Deadlines::DEFAULT).await;
    world
        .registered_node_claim("default-holder", "hostile:///zone-a/i-1")
        .await;
    world.new_node_claim("default-newcomer").await;
    world.plugin().script().create = Some(launched(instance(
        "default-newcomer",
        "hostile:///zone-a/i-1",
        "m5.large",
    )));
    let lifecycle = LifecycleController::new(world.context.clone());

    lifecycle.reconcile().await.unwrap();

    let newcomer = world.node_claim("default-newcomer").await;
    let status = newcomer.status.unwrap_or_default();
    assert_eq!(status.provider_id, "", "not recorded");
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == "Launched" && c.status == core_svc::apis::ConditionStatus::True)
    );
    assert!(world.events.with_reason("NodeClaimLaunched").is_empty());
    let unavailable = world.events.with_reason("PluginUnavailable");
    assert_eq!(unavailable.len(), 1);
    assert_contains(
        &unavailable[0].message,
        "Create answer: node_claim.status.provider_id: \"hostile:///zone-a/i-1\" is the instance \
         of NodeClaim \"default-holder\", not one launched for \"default-newcomer\"",
    );
    assert_counted(
        world.provider(),
        Rpc::Create,
        ErrorKind::InconsistentAnswer,
        1,
    );
    assert!(!world.is_deleting("default-holder").await);
    assert!(!world.is_deleting("default-newcomer").await);
    assert_eq!(world.plugin().calls("Delete"), 0);
}

#[tokio::test]
async fn the_lifecycle_never_records_an_instance_type_that_was_not_asked_for() {
    let world = World::new(Deadlines::DEFAULT).await;
    world.new_node_claim("default-newcomer").await;
    world.plugin().script().create = Some(launched(instance(
        "default-newcomer",
        "hostile:///zone-a/i-2",
        "p4d.24xlarge",
    )));
    let lifecycle = LifecycleController::new(world.context.clone());

    lifecycle.reconcile().await.unwrap();

    let newcomer = world.node_claim("default-newcomer").await;
    assert_eq!(newcomer.status.unwrap_or_default().provider_id, "");
    let labels = newcomer.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(INSTANCE_TYPE), None, "no label copied");
    let unavailable = world.events.with_reason("PluginUnavailable");
    assert_eq!(unavailable.len(), 1);
    assert_contains(
        &unavailable[0].message,
        "node_claim.labels[node.kubernetes.io/instance-type]: \"p4d.24xlarge\" is not what the \
         NodeClaim \"default-newcomer\" asked for",
    );
    assert_counted(world.provider(), Rpc::Create, ErrorKind::InvalidAnswer, 1);
    assert_eq!(world.plugin().calls("Delete"), 0);
}

// ---- Get and List ----------------------------------------------------------------------------

#[tokio::test]
async fn garbage_collection_keeps_a_node_claim_list_omits_while_get_finds_it() {
    let world = World::new(Deadlines::DEFAULT).await;
    let provider_id = "hostile:///zone-a/i-1";
    world.registered_node_claim("default-a", provider_id).await;
    {
        let mut script = world.plugin().script();
        script.list = vec![];
        script.get.insert(
            provider_id.into(),
            instance("default-a", provider_id, "m5.large"),
        );
    }
    let gc = GarbageCollectionController::new(world.context.clone());

    gc.reconcile().await.unwrap();

    assert!(!world.is_deleting("default-a").await, "Get finds it");
    assert_eq!(world.plugin().calls("Delete"), 0);
    let kept = world.events.with_reason("PluginUnavailable");
    assert_eq!(kept.len(), 1);
    assert_contains(
        &kept[0].message,
        "Garbage collection kept NodeClaim default-a: List answer: node_claims: omits instance \
         hostile:///zone-a/i-1 of NodeClaim default-a, which Get finds Running",
    );
    assert_counted(
        world.provider(),
        Rpc::List,
        ErrorKind::InconsistentAnswer,
        1,
    );

    // Once Get agrees the instance is gone, the listing's word stands.
    world.plugin().script().get.clear();
    gc.reconcile().await.unwrap();
    assert!(world.is_deleting("default-a").await);
    assert_counted(
        world.provider(),
        Rpc::List,
        ErrorKind::InconsistentAnswer,
        1,
    );
}

#[tokio::test]
async fn garbage_collection_keeps_a_node_claim_list_has_while_get_says_not_found() {
    let world = World::new(Deadlines::DEFAULT).await;
    let provider_id = "hostile:///zone-a/i-1";
    world.registered_node_claim("default-a", provider_id).await;
    world.plugin().script().list = vec![instance("default-a", provider_id, "m5.large")];
    let gc = GarbageCollectionController::new(world.context.clone());

    gc.reconcile().await.unwrap();

    assert!(
        !world.is_deleting("default-a").await,
        "a listed instance exists"
    );
    assert_eq!(world.plugin().calls("Delete"), 0);
    assert_eq!(
        world.plugin().calls("Get"),
        0,
        "Get is only asked to confirm an instance gone"
    );
}

// ---- IsDrifted -------------------------------------------------------------------------------

#[tokio::test]
async fn a_drift_verdict_about_an_instance_the_plugin_does_not_have_is_refused() {
    let world = World::new(Deadlines::DEFAULT).await;
    world
        .cluster
        .create(&common::node_pool("default", json!({})))
        .await
        .unwrap();
    let provider_id = "hostile:///zone-a/i-1";
    world.registered_node_claim("default-a", provider_id).await;
    world.plugin().script().drift = v1::IsDriftedResponse {
        reason: "AMIDrift".into(),
        message: "instance runs ami-1; the node class resolves ami-2".into(),
    };
    let drift = DriftController::new(world.context.clone());

    drift.reconcile().await.unwrap();

    assert_eq!(world.plugin().calls("IsDrifted"), 1);
    assert_eq!(
        world.drifted("default-a").await,
        None,
        "drift left unchanged"
    );
    let failed = world.events.with_reason("PluginUnavailable");
    assert_eq!(failed.len(), 1);
    assert_contains(
        &failed[0].message,
        "IsDrifted answer: reason: \"AMIDrift\" about NodeClaim \"default-a\", whose instance \
         hostile:///zone-a/i-1 Get does not find",
    );
    assert_counted(
        world.provider(),
        Rpc::IsDrifted,
        ErrorKind::InconsistentAnswer,
        1,
    );
    assert!(world.events.with_reason("NodeClaimDrifted").is_empty());

    // The same verdict about an instance the plugin has stands.
    world.plugin().script().get.insert(
        provider_id.into(),
        instance("default-a", provider_id, "m5.large"),
    );
    drift.reconcile().await.unwrap();
    assert_eq!(
        world.drifted("default-a").await.as_deref(),
        Some("AMIDrift")
    );
}

// ---- The world the controllers run in --------------------------------------------------------

/// The in-memory cluster, a fake clock and recorded events, with the hostile plugin as the
/// cloud provider, through core's gRPC adapter.
struct World {
    served: Served,
    cluster: Arc<InMemoryCluster>,
    clock: FakeClock,
    events: Arc<MemoryEvents>,
    context: Context<InMemoryCluster, GrpcCloudProvider>,
}

impl World {
    /// With a ready node class `default`.
    async fn new(deadlines: Deadlines) -> Self {
        let served = serve(deadlines).await;
        let clock = FakeClock::new(common::start());
        let cluster = Arc::new(InMemoryCluster::new(Arc::new(clock.clone()), 7));
        let events = Arc::new(MemoryEvents::new());
        let context = Context {
            cluster: Arc::clone(&cluster),
            cloud: Arc::new(served.provider.clone()),
            clock: Arc::new(clock.clone()),
            events: events.clone(),
            settings: Settings::default(),
        };
        let node_class = common::node_class("default", json!({}));
        cluster.create_node_class(&node_class).await.unwrap();
        let reference = core_svc::apis::NodeClassReference {
            group: "test.karpenter.sh".into(),
            kind: "TestNodeClass".into(),
            name: "default".into(),
        };
        cluster
            .merge_patch_node_class_status(
                &reference,
                &json!({ "status": { "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Ready",
                    "lastTransitionTime": clock.now().to_string(),
                }] } }),
            )
            .await
            .unwrap();
        World {
            served,
            cluster,
            clock,
            events,
            context,
        }
    }

    fn plugin(&self) -> &hostile::HostilePlugin {
        &self.served.plugin
    }

    fn provider(&self) -> &GrpcCloudProvider {
        &self.context.cloud
    }

    fn node_claim_labels() -> Value {
        json!({
            "karpenter.sh/nodepool": "default",
            INSTANCE_TYPE: "m5.large",
            ZONE: "zone-a",
            CAPACITY_TYPE: "on-demand",
        })
    }

    /// A NodeClaim the provisioner just created: an m5.large in zone-a, on demand.
    async fn new_node_claim(&self, name: &str) {
        let node_claim = common::node_claim(
            name,
            json!({
                "metadata": {
                    "labels": { "karpenter.sh/nodepool": "default" },
                    "finalizers": ["karpenter.sh/termination"],
                },
                "spec": { "requirements": [
                    { "key": INSTANCE_TYPE, "operator": "In", "values": ["m5.large"] },
                    { "key": ZONE, "operator": "In", "values": ["zone-a"] },
                    { "key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"] },
                ] },
            }),
        );
        self.cluster.create(&node_claim).await.unwrap();
    }

    /// A NodeClaim launched as `provider_id` and registered, without a Node.
    async fn registered_node_claim(&self, name: &str, provider_id: &str) {
        let node_claim = common::node_claim(
            name,
            json!({ "metadata": {
                "labels": Self::node_claim_labels(),
                "finalizers": ["karpenter.sh/termination"],
            } }),
        );
        self.cluster.create(&node_claim).await.unwrap();
        let now = self.clock.now().to_string();
        self.cluster
            .merge_patch_status::<NodeClaim>(
                None,
                name,
                &json!({ "status": {
                    "providerID": provider_id,
                    "conditions": [
                        { "type": "Launched", "status": "True", "lastTransitionTime": now },
                        { "type": "Registered", "status": "True", "lastTransitionTime": now },
                    ],
                } }),
            )
            .await
            .unwrap();
    }

    /// A pending pod asking for one cpu.
    async fn pending_pod(&self, name: &str) {
        let pod = common::replica_set_pod(
            "default",
            name,
            "web-5d8f",
            json!({ "spec": { "containers": [{
                "name": "app", "image": "nginx", "resources": { "requests": { "cpu": "1" } },
            }] } }),
        );
        self.cluster.create(&pod).await.unwrap();
        self.cluster
            .merge_patch_status::<Pod>(
                Some("default"),
                name,
                &json!({ "status": { "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                }] } }),
            )
            .await
            .unwrap();
    }

    async fn node_claim(&self, name: &str) -> NodeClaim {
        self.cluster
            .get::<NodeClaim>(None, name)
            .await
            .unwrap()
            .unwrap()
    }

    async fn node_claims(&self) -> Vec<String> {
        let snapshot = self.cluster.snapshot().await.unwrap();
        snapshot
            .node_claims
            .iter()
            .filter_map(|claim| claim.metadata.name.clone())
            .collect()
    }

    async fn is_deleting(&self, name: &str) -> bool {
        self.node_claim(name)
            .await
            .metadata
            .deletion_timestamp
            .is_some()
    }

    /// The reason of the NodeClaim's Drifted=True condition.
    async fn drifted(&self, name: &str) -> Option<String> {
        self.node_claim(name)
            .await
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Drifted" && c.status == core_svc::apis::ConditionStatus::True)
            .and_then(|c| c.reason)
    }
}
