//! The gRPC adapter of the cloud provider port against a real plugin server on a real socket: a
//! scripted `CloudProviderService` served by provider-sdk's `serve`, so statuses (with their
//! ErrorInfo details), streams and deadlines cross the wire as they do in production.
//!
//! Every row of the status tables of Create, Delete, Get, List and IsDrifted is here, plus the
//! retry behaviour and the catalogue's all-or-nothing rule. Waits between retries go through a
//! fake timer: nothing here sleeps for backoff.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use core_svc::cloudprovider::retry::FakeTimer;
use core_svc::cloudprovider::{
    CloudProvider, CloudProviderError, Deletion, FailureKind, GrpcCloudProvider, InstanceState,
    LaunchedNodeClaim, NodeClaimRequest, NodeClassRef, Rpc,
};
use core_svc::plugin::{
    Capabilities, Deadlines, Handshake, PluginConnection, PluginInfo, Vocabulary, handshake,
};
use provider_sdk::serve::{Listener, serve};
use provider_sdk::v1;
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::identity_service_server::IdentityService;
use provider_sdk::{Endpoint, InstanceTypeStream};
use serde_json::json;
use tonic::{Code, Request, Response, Status};

type Answers<T> = VecDeque<Result<T, Status>>;

/// What the plugin answers, call by call, and what it was asked.
#[derive(Default)]
struct Script {
    resolve: Answers<v1::ResolveNodeClassResponse>,
    instance_types: Answers<Vec<Result<v1::GetInstanceTypesResponse, Status>>>,
    create: Answers<v1::CreateResponse>,
    delete: Answers<v1::DeleteResponse>,
    get: Answers<v1::GetResponse>,
    list: Answers<v1::ListResponse>,
    is_drifted: Answers<v1::IsDriftedResponse>,
    repair: Answers<v1::GetRepairPoliciesResponse>,
    /// How long every call takes before answering.
    delay: Option<Duration>,
    /// Calls per RPC.
    calls: HashMap<&'static str, usize>,
    /// The `grpc-timeout` header of each call, per RPC.
    timeouts: HashMap<&'static str, Vec<String>>,
    create_requests: Vec<v1::CreateRequest>,
    is_drifted_requests: Vec<v1::IsDriftedRequest>,
    list_tokens: Vec<String>,
}

#[derive(Clone, Default)]
struct Plugin(Arc<Mutex<Script>>);

impl Plugin {
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().unwrap()
    }

    fn calls(&self, rpc: &str) -> usize {
        self.script().calls.get(rpc).copied().unwrap_or(0)
    }

    /// Records the call and takes its next answer, after the scripted delay.
    async fn answer<T, R>(
        &self,
        rpc: &'static str,
        request: &Request<R>,
        queue: impl FnOnce(&mut Script) -> &mut Answers<T>,
    ) -> Result<Response<T>, Status> {
        let (answer, delay) = {
            let mut script = self.script();
            *script.calls.entry(rpc).or_default() += 1;
            let timeout = request
                .metadata()
                .get("grpc-timeout")
                .map(|t| t.to_str().unwrap().to_owned())
                .unwrap_or_default();
            script.timeouts.entry(rpc).or_default().push(timeout);
            let delay = script.delay;
            let answer = queue(&mut script)
                .pop_front()
                .unwrap_or_else(|| Err(Status::internal(format!("unscripted {rpc}"))));
            (answer, delay)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        answer.map(Response::new)
    }
}

#[tonic::async_trait]
impl CloudProviderService for Plugin {
    async fn get_supported_node_classes(
        &self,
        _: Request<v1::GetSupportedNodeClassesRequest>,
    ) -> Result<Response<v1::GetSupportedNodeClassesResponse>, Status> {
        Ok(Response::new(v1::GetSupportedNodeClassesResponse {
            node_classes: vec![v1::NodeClassKind {
                group: "example.com".into(),
                version: "v1".into(),
                kind: "ExampleNodeClass".into(),
            }],
        }))
    }

    async fn resolve_node_class(
        &self,
        request: Request<v1::ResolveNodeClassRequest>,
    ) -> Result<Response<v1::ResolveNodeClassResponse>, Status> {
        self.answer("ResolveNodeClass", &request, |s| &mut s.resolve)
            .await
    }

    async fn get_instance_types(
        &self,
        request: Request<v1::GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let chunks = self
            .answer("GetInstanceTypes", &request, |s| &mut s.instance_types)
            .await?
            .into_inner();
        Ok(Response::new(Box::pin(tonic::codegen::tokio_stream::iter(
            chunks,
        ))))
    }

    async fn create(
        &self,
        request: Request<v1::CreateRequest>,
    ) -> Result<Response<v1::CreateResponse>, Status> {
        self.script()
            .create_requests
            .push(request.get_ref().clone());
        self.answer("Create", &request, |s| &mut s.create).await
    }

    async fn delete(
        &self,
        request: Request<v1::DeleteRequest>,
    ) -> Result<Response<v1::DeleteResponse>, Status> {
        self.answer("Delete", &request, |s| &mut s.delete).await
    }

    async fn get(
        &self,
        request: Request<v1::GetRequest>,
    ) -> Result<Response<v1::GetResponse>, Status> {
        self.answer("Get", &request, |s| &mut s.get).await
    }

    async fn list(
        &self,
        request: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        self.script()
            .list_tokens
            .push(request.get_ref().page_token.clone());
        self.answer("List", &request, |s| &mut s.list).await
    }

    async fn is_drifted(
        &self,
        request: Request<v1::IsDriftedRequest>,
    ) -> Result<Response<v1::IsDriftedResponse>, Status> {
        self.script()
            .is_drifted_requests
            .push(request.get_ref().clone());
        self.answer("IsDrifted", &request, |s| &mut s.is_drifted)
            .await
    }

    async fn get_repair_policies(
        &self,
        request: Request<v1::GetRepairPoliciesRequest>,
    ) -> Result<Response<v1::GetRepairPoliciesResponse>, Status> {
        self.answer("GetRepairPolicies", &request, |s| &mut s.repair)
            .await
    }
}

#[derive(Clone)]
struct Identity;

#[tonic::async_trait]
impl IdentityService for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<v1::GetPluginInfoRequest>,
    ) -> Result<Response<v1::GetPluginInfoResponse>, Status> {
        Ok(Response::new(v1::GetPluginInfoResponse {
            name: "scripted.example.com".into(),
            vendor_version: "0.0.1".into(),
            api_version: "1.0".into(),
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<v1::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<v1::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(v1::GetPluginCapabilitiesResponse::default()))
    }

    async fn probe(
        &self,
        _: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeResponse>, Status> {
        Ok(Response::new(v1::ProbeResponse {
            ready: Some(true),
            message: String::new(),
        }))
    }
}

/// The adapter connected to a scripted plugin on a TCP socket of its own.
struct Harness {
    provider: GrpcCloudProvider<Arc<FakeTimer>>,
    timer: Arc<FakeTimer>,
    plugin: Plugin,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn harness() -> Harness {
    harness_with(Deadlines::DEFAULT).await
}

async fn harness_with(deadlines: Deadlines) -> Harness {
    let listener = Listener::bind(&"tcp://127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let endpoint = listener.local_endpoint().clone();
    let plugin = Plugin::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, None, Identity, plugin.clone(), async {
        let _ = stopped.await;
    }));
    let connection = PluginConnection::new(endpoint, None, deadlines).unwrap();
    let handshake = handshake(&connection).await.unwrap();
    let timer = Arc::new(FakeTimer::new());
    let provider = GrpcCloudProvider::new(&connection, &handshake).with_timer(timer.clone());
    Harness {
        provider,
        timer,
        plugin,
        _stop: stop,
    }
}

fn node_class() -> serde_json::Value {
    json!({"apiVersion": "example.com/v1", "kind": "ExampleNodeClass", "metadata": {"name": "default"}, "spec": {"image": "img-1"}})
}

fn node_pool() -> serde_json::Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"}, "spec": {"weight": 10}})
}

fn claim() -> NodeClaimRequest {
    NodeClaimRequest {
        name: "general-x7k2p".into(),
        uid: "5f0c".into(),
        node_class_ref: NodeClassRef {
            group: "example.com".into(),
            kind: "ExampleNodeClass".into(),
            name: "default".into(),
        },
        ..Default::default()
    }
}

fn launched_claim(provider_id: &str) -> v1::NodeClaim {
    v1::NodeClaim {
        name: "general-x7k2p".into(),
        labels: HashMap::from([
            ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
            ("topology.kubernetes.io/zone".into(), "zone-a".into()),
            ("karpenter.sh/capacity-type".into(), "spot".into()),
        ]),
        status: Some(v1::NodeClaimStatus {
            provider_id: provider_id.into(),
            image_id: "img-1".into(),
            capacity: HashMap::from([("cpu".into(), "2".into()), ("memory".into(), "8Gi".into())]),
            allocatable: HashMap::from([("cpu".into(), "1930m".into())]),
            instance_state: v1::InstanceState::Running.into(),
        }),
        ..Default::default()
    }
}

fn launched() -> LaunchedNodeClaim {
    LaunchedNodeClaim {
        provider_id: "example:///zone-a/i-1".into(),
        image_id: Some("img-1".into()),
        labels: Default::default(),
        annotations: Default::default(),
        capacity: Default::default(),
        allocatable: Default::default(),
        state: InstanceState::Running,
    }
}

fn instance_type(name: &str) -> v1::InstanceType {
    v1::InstanceType {
        name: name.into(),
        requirements: vec![v1::Requirement {
            key: "node.kubernetes.io/instance-type".into(),
            operator: v1::Operator::In.into(),
            values: vec![name.into()],
            min_values: None,
        }],
        offerings: vec![v1::Offering::priced(
            "zone-a",
            "on-demand",
            0.1,
            "USD",
            true,
        )],
        capacity: HashMap::from([("cpu".into(), "2".into()), ("pods".into(), "29".into())]),
        overhead: None,
        burstable_cpu: false,
    }
}

fn chunk(names: &[&str]) -> Result<v1::GetInstanceTypesResponse, Status> {
    Ok(v1::GetInstanceTypesResponse {
        instance_types: names.iter().map(|n| instance_type(n)).collect(),
    })
}

fn ice() -> Status {
    provider_sdk::status::insufficient_capacity(
        "InsufficientInstanceCapacity for m5.large in zone-a",
        HashMap::new(),
    )
}

fn not_ready() -> Status {
    provider_sdk::status::node_class_not_ready("default", "no image resolved")
}

#[tokio::test]
async fn the_handshake_names_the_provider_and_its_node_classes() {
    let h = harness().await;
    assert_eq!(h.provider.name(), "scripted.example.com");
    let kinds = h.provider.supported_node_classes();
    assert_eq!(kinds.len(), 1);
    assert_eq!(kinds[0].kind, "ExampleNodeClass");
    assert!(kinds[0].matches(&claim().node_class_ref));
}

#[tokio::test]
async fn create_follows_its_status_table() {
    let h = harness().await;
    h.plugin.script().create = VecDeque::from([
        Ok(v1::CreateResponse {
            node_claim: Some(launched_claim("example:///zone-a/i-1")),
            state: v1::LaunchState::Launched as i32,
            ..v1::CreateResponse::default()
        }),
        Ok(v1::CreateResponse {
            state: v1::LaunchState::Pending as i32,
            retry_after: Some(prost_types::Duration {
                seconds: 20,
                nanos: 0,
            }),
            message: "waiting for the bare-metal host".into(),
            ..v1::CreateResponse::default()
        }),
        Ok(v1::CreateResponse {
            node_claim: Some(launched_claim("example:///zone-a/i-1")),
            ..v1::CreateResponse::default()
        }),
        Err(ice()),
        Err(not_ready()),
        Err(Status::invalid_argument(
            "node_claim.spec.requirements: no instance type",
        )),
        Err(Status::resource_exhausted("message too large")),
        Err(Status::permission_denied("not allowed")),
        Err(Status::internal("bug")),
        Err(Status::unimplemented("")),
    ]);
    let launched = h.provider.create(&claim(), &node_class()).await.unwrap();
    assert_eq!(launched.provider_id, "example:///zone-a/i-1");
    assert_eq!(launched.labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(launched.state, InstanceState::Running);
    assert_eq!(launched.allocatable.values().next().unwrap().millis(), 1930);

    let expected = [
        CloudProviderError::LaunchPending {
            message: "waiting for the bare-metal host".into(),
            retry_after: Some(Duration::from_secs(20)),
        },
        CloudProviderError::InvalidResponse(
            "Create answer: state: 0 is neither LAUNCH_STATE_LAUNCHED nor LAUNCH_STATE_PENDING"
                .into(),
        ),
        CloudProviderError::InsufficientCapacity(
            "InsufficientInstanceCapacity for m5.large in zone-a".into(),
        ),
        CloudProviderError::NodeClassNotReady("no image resolved".into()),
        CloudProviderError::InvalidRequest("node_claim.spec.requirements: no instance type".into()),
        CloudProviderError::Other {
            kind: FailureKind::ResourceExhausted,
            message: "message too large".into(),
        },
        CloudProviderError::Other {
            kind: FailureKind::PermissionDenied,
            message: "not allowed".into(),
        },
        CloudProviderError::Other {
            kind: FailureKind::Internal,
            message: "bug".into(),
        },
        CloudProviderError::Unsupported { rpc: "Create" },
    ];
    for want in expected {
        assert_eq!(
            h.provider
                .create(&claim(), &node_class())
                .await
                .unwrap_err(),
            want
        );
    }
    assert_eq!(h.plugin.calls("Create"), 10, "none of those is retried");
    assert!(h.timer.sleeps().is_empty());

    // What went over the wire: the NodeClaim, the node class as a Struct, and a deadline.
    let script = h.plugin.script();
    let sent = &script.create_requests[0];
    assert_eq!(sent.node_claim.as_ref().unwrap().name, "general-x7k2p");
    let sent_class = provider_sdk::json::struct_to_json(sent.node_class.clone().unwrap());
    assert_eq!(sent_class, node_class());
    let timeout = &script.timeouts["Create"][0];
    assert!(
        !timeout.is_empty(),
        "every call carries core's deadline; got none"
    );
}

#[tokio::test]
async fn create_retries_unavailable_and_aborted_with_backoff_and_succeeds() {
    let h = harness().await;
    h.plugin.script().create = VecDeque::from([
        Err(Status::unavailable("plugin restarting")),
        Err(Status::aborted(
            "another Create for general-x7k2p is in progress",
        )),
        Ok(v1::CreateResponse {
            node_claim: Some(launched_claim("example:///zone-a/i-1")),
            state: v1::LaunchState::Launched as i32,
            ..v1::CreateResponse::default()
        }),
    ]);
    let launched = h.provider.create(&claim(), &node_class()).await.unwrap();
    assert_eq!(launched.provider_id, "example:///zone-a/i-1");
    assert_eq!(h.plugin.calls("Create"), 3);
    let sleeps = h.timer.sleeps();
    assert_eq!(sleeps.len(), 2, "{sleeps:?}");
    assert!(sleeps[0] >= Duration::from_millis(50) && sleeps[0] <= Duration::from_millis(100));
    assert!(sleeps[1] >= Duration::from_millis(100) && sleeps[1] <= Duration::from_millis(200));
    let metrics = h.provider.metrics();
    assert_eq!(metrics.attempts(Rpc::Create, Code::Unavailable), 1);
    assert_eq!(metrics.attempts(Rpc::Create, Code::Aborted), 1);
    assert_eq!(metrics.attempts(Rpc::Create, Code::Ok), 1);
    assert_eq!(metrics.retries(Rpc::Create), 2);
}

#[tokio::test]
async fn unavailable_twice_then_ok_succeeds_after_three_attempts() {
    let h = harness().await;
    h.plugin.script().get = VecDeque::from([
        Err(Status::unavailable("cloud unreachable")),
        Err(Status::unavailable("cloud unreachable")),
        Ok(v1::GetResponse {
            node_claim: Some(launched_claim("example:///zone-a/i-1")),
        }),
    ]);
    let instance = h.provider.get("example:///zone-a/i-1").await.unwrap();
    assert_eq!(
        instance.unwrap().node_claim_name.as_deref(),
        Some("general-x7k2p")
    );
    assert_eq!(h.plugin.calls("Get"), 3);
    assert_eq!(h.timer.sleeps().len(), 2);
}

#[tokio::test]
async fn persistent_unavailable_is_unavailable_after_the_attempt_budget() {
    let h = harness().await;
    h.plugin.script().get = (0..10)
        .map(|_| Err(Status::unavailable("cloud unreachable")))
        .collect();
    let error = h.provider.get("example:///zone-a/i-1").await.unwrap_err();
    let CloudProviderError::Unavailable(message) = &error else {
        panic!("{error:?}");
    };
    assert!(message.contains("after 5 attempt(s)"), "{message}");
    assert_eq!(h.plugin.calls("Get"), 5);
    assert_eq!(h.timer.sleeps().len(), 4);

    // DEADLINE_EXCEEDED is retried the same way.
    h.plugin.script().delete = VecDeque::from([
        Err(Status::deadline_exceeded("EC2 too slow")),
        Ok(v1::DeleteResponse {
            state: v1::DeletionState::Gone.into(),
        }),
    ]);
    assert_eq!(
        h.provider
            .delete("example:///zone-a/i-1", "general-x7k2p")
            .await,
        Ok(Deletion::Gone)
    );
    assert_eq!(h.plugin.calls("Delete"), 2);
}

#[tokio::test]
async fn retries_stop_at_the_calls_deadline() {
    // A 1 s budget: 100 + 200 + 400 ms of waiting fit, the next 800 ms would not.
    let deadlines = Deadlines {
        default: Duration::from_secs(1),
        ..Deadlines::DEFAULT
    };
    let h = harness_with(deadlines).await;
    let provider = h
        .provider
        .clone()
        .with_retry_policy(core_svc::cloudprovider::RetryPolicy {
            jitter: false,
            max_attempts: 100,
            ..Default::default()
        });
    h.plugin.script().list = (0..10).map(|_| Err(Status::unavailable("down"))).collect();
    assert!(matches!(
        provider.list().await,
        Err(CloudProviderError::Unavailable(_))
    ));
    assert_eq!(h.timer.sleeps(), [100, 200, 400].map(Duration::from_millis));
    assert_eq!(h.plugin.calls("List"), 4);
}

#[tokio::test]
async fn a_plugin_slower_than_the_deadline_is_unavailable() {
    let deadlines = Deadlines {
        default: Duration::from_millis(300),
        ..Deadlines::DEFAULT
    };
    let h = harness_with(deadlines).await;
    h.plugin.script().delay = Some(Duration::from_secs(30));
    h.plugin.script().get = (0..10)
        .map(|_| {
            Ok(v1::GetResponse {
                node_claim: Some(launched_claim("example:///zone-a/i-1")),
            })
        })
        .collect();
    let error = h.provider.get("example:///zone-a/i-1").await.unwrap_err();
    assert!(
        matches!(error, CloudProviderError::Unavailable(_)),
        "{error:?}"
    );
    // Whichever timer fires first (the plugin's, from the header, or the client's own), each
    // attempt ends as DEADLINE_EXCEEDED.
    let counts = h.provider.metrics().attempts_by_code();
    assert!(!counts.is_empty());
    assert!(
        counts.iter().all(|c| c.code == Code::DeadlineExceeded),
        "{counts:?}"
    );
}

#[tokio::test]
async fn delete_follows_its_status_table() {
    let h = harness().await;
    let state = |s: v1::DeletionState| Ok(v1::DeleteResponse { state: s.into() });
    h.plugin.script().delete = VecDeque::from([
        state(v1::DeletionState::Terminating),
        state(v1::DeletionState::Gone),
        state(v1::DeletionState::Unspecified),
        Err(Status::not_found("no such instance")),
        Err(Status::invalid_argument("provider_id: not an example ID")),
        Err(Status::internal("bug")),
        Ok(v1::DeleteResponse { state: 7 }),
    ]);
    let delete = || h.provider.delete("example:///zone-a/i-1", "general-x7k2p");
    assert_eq!(delete().await, Ok(Deletion::Terminating));
    assert_eq!(delete().await, Ok(Deletion::Gone));
    assert_eq!(delete().await, Ok(Deletion::Terminating), "UNSPECIFIED");
    assert_eq!(delete().await, Ok(Deletion::Gone), "NOT_FOUND");
    assert_eq!(
        delete().await,
        Err(CloudProviderError::InvalidRequest(
            "provider_id: not an example ID".into()
        ))
    );
    assert_eq!(
        delete().await,
        Err(CloudProviderError::Other {
            kind: FailureKind::Internal,
            message: "bug".into()
        })
    );
    assert_eq!(
        delete().await,
        Err(CloudProviderError::InvalidResponse(
            "Delete answer: state: 7 is not a known deletion state".into()
        ))
    );
    assert_eq!(h.plugin.calls("Delete"), 7);
}

#[tokio::test]
async fn get_follows_its_status_table() {
    let h = harness().await;
    let mut deleting = launched_claim("example:///zone-a/i-1");
    deleting.deletion_timestamp = Some(prost_types_timestamp(1_700_000_000));
    deleting.status.as_mut().unwrap().instance_state = v1::InstanceState::Terminating.into();
    h.plugin.script().get = VecDeque::from([
        Ok(v1::GetResponse {
            node_claim: Some(deleting),
        }),
        Err(Status::not_found("terminated")),
        Err(Status::unimplemented("")),
        Err(Status::internal("bug")),
        Ok(v1::GetResponse {
            node_claim: Some(launched_claim("example:///zone-a/i-2")),
        }),
        Ok(v1::GetResponse { node_claim: None }),
    ]);
    let get = || h.provider.get("example:///zone-a/i-1");
    let instance = get().await.unwrap().unwrap();
    assert!(instance.is_deleting());
    assert_eq!(
        instance.labels["node.kubernetes.io/instance-type"],
        "m5.large"
    );
    assert_eq!(get().await, Ok(None), "NOT_FOUND is gone");
    assert_eq!(
        get().await,
        Err(CloudProviderError::Unsupported { rpc: "Get" })
    );
    assert!(matches!(
        get().await,
        Err(CloudProviderError::Other {
            kind: FailureKind::Internal,
            ..
        })
    ));
    let wrong = get().await.unwrap_err().to_string();
    assert!(
        wrong.contains(
            "node_claim.status.provider_id: \"example:///zone-a/i-2\" is not the instance asked for"
        ),
        "{wrong}"
    );
    assert!(
        matches!(get().await, Err(CloudProviderError::InvalidResponse(m)) if m.contains("node_claim: missing"))
    );
}

fn prost_types_timestamp(seconds: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos: 0 }
}

fn page(ids: &[&str], next: &str) -> Result<v1::ListResponse, Status> {
    Ok(v1::ListResponse {
        node_claims: ids
            .iter()
            .map(|id| v1::NodeClaim {
                status: Some(v1::NodeClaimStatus {
                    provider_id: (*id).into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        next_page_token: next.into(),
    })
}

fn ids(instances: &[core_svc::cloudprovider::CloudInstance]) -> Vec<&str> {
    instances.iter().map(|i| i.provider_id.as_str()).collect()
}

#[tokio::test]
async fn list_reads_every_page_and_restarts_once_on_a_stale_token() {
    let h = harness().await;
    h.plugin.script().list = VecDeque::from([
        page(&["i-1", "i-2"], "p2"),
        page(&["i-3", "i-2"], "p3"),
        page(&["i-4"], ""),
    ]);
    let listed = h.provider.list().await.unwrap();
    assert_eq!(ids(&listed), ["i-1", "i-2", "i-3", "i-4"], "each once");
    assert_eq!(h.plugin.script().list_tokens, ["", "p2", "p3"]);

    h.plugin.script().list_tokens.clear();
    h.plugin.script().list = VecDeque::from([
        page(&["i-1"], "p2"),
        Err(Status::invalid_argument("page_token: stale")),
        page(&["i-5"], "q2"),
        page(&["i-6"], ""),
    ]);
    let listed = h.provider.list().await.unwrap();
    assert_eq!(
        ids(&listed),
        ["i-5", "i-6"],
        "nothing from the abandoned listing"
    );
    assert_eq!(h.plugin.script().list_tokens, ["", "p2", "", "q2"]);

    // A second stale token in one listing is an error, as is INVALID_ARGUMENT on page one.
    h.plugin.script().list = VecDeque::from([
        page(&["i-1"], "p2"),
        Err(Status::invalid_argument("page_token: stale")),
        page(&["i-1"], "p2"),
        Err(Status::invalid_argument("page_token: stale again")),
        Err(Status::invalid_argument("page_size: negative")),
    ]);
    assert_eq!(
        h.provider.list().await,
        Err(CloudProviderError::InvalidRequest(
            "page_token: stale again".into()
        ))
    );
    assert_eq!(
        h.provider.list().await,
        Err(CloudProviderError::InvalidRequest(
            "page_size: negative".into()
        ))
    );
}

#[tokio::test]
async fn list_errors_never_yield_a_partial_listing() {
    let h = harness().await;
    h.plugin.script().list = VecDeque::from([
        page(&["i-1"], "p2"),
        Err(Status::internal("bug")),
        Err(Status::unimplemented("")),
        page(&["i-1"], "p2"),
        page(&["i-2"], "p2"),
        page(&[""], ""),
    ]);
    assert!(matches!(
        h.provider.list().await,
        Err(CloudProviderError::Other {
            kind: FailureKind::Internal,
            ..
        })
    ));
    assert_eq!(
        h.provider.list().await,
        Err(CloudProviderError::Unsupported { rpc: "List" })
    );
    let circular = h.provider.list().await.unwrap_err().to_string();
    assert!(circular.contains("next_page_token: \"p2\""), "{circular}");
    let invalid = h.provider.list().await.unwrap_err().to_string();
    assert!(
        invalid.contains("node_claims[0].status.provider_id: must not be empty"),
        "{invalid}"
    );
}

#[tokio::test]
async fn is_drifted_follows_its_status_table() {
    let h = harness().await;
    let answer = |reason: &str, message: &str| {
        Ok(v1::IsDriftedResponse {
            reason: reason.into(),
            message: message.into(),
        })
    };
    h.plugin.script().is_drifted = VecDeque::from([
        answer("ImageDrift", "img-1 -> img-2"),
        answer("", ""),
        Err(not_ready()),
        Err(Status::not_found("instance gone")),
        Err(Status::unimplemented("")),
        Err(Status::internal("bug")),
        answer("image drift", "two words"),
    ]);
    let mut node_claim = claim();
    node_claim
        .annotations
        .insert("example.com/examplenodeclass-hash".into(), "42".into());
    let (launched, node_class) = (launched(), node_class());
    let is_drifted = || h.provider.is_drifted(&node_claim, &launched, &node_class);
    let drift = is_drifted().await.unwrap().unwrap();
    assert_eq!(
        (drift.reason.as_str(), drift.message.as_str()),
        ("ImageDrift", "img-1 -> img-2")
    );
    assert_eq!(is_drifted().await, Ok(None));
    assert_eq!(
        is_drifted().await,
        Err(CloudProviderError::NodeClassNotReady(
            "no image resolved".into()
        ))
    );
    assert_eq!(
        is_drifted().await,
        Err(CloudProviderError::NotFound("instance gone".into()))
    );
    assert_eq!(
        is_drifted().await,
        Err(CloudProviderError::Unsupported { rpc: "IsDrifted" })
    );
    assert!(matches!(
        is_drifted().await,
        Err(CloudProviderError::Other {
            kind: FailureKind::Internal,
            ..
        })
    ));
    assert!(
        matches!(is_drifted().await, Err(CloudProviderError::InvalidResponse(m)) if m.contains("reason: \"image drift\""))
    );

    // The plugin gets the launched NodeClaim: annotations and status included.
    let script = h.plugin.script();
    let sent = script.is_drifted_requests[0].node_claim.as_ref().unwrap();
    assert_eq!(sent.annotations["example.com/examplenodeclass-hash"], "42");
    assert_eq!(
        sent.status.as_ref().unwrap().provider_id,
        "example:///zone-a/i-1"
    );
    assert!(script.is_drifted_requests[0].node_class.is_some());
}

#[tokio::test]
async fn the_catalogue_is_all_chunks_or_nothing() {
    let h = harness().await;
    h.plugin.script().instance_types = VecDeque::from([
        Ok(vec![chunk(&["a.large", "b.large"]), chunk(&["c.large"])]),
        Ok(vec![
            chunk(&["a.large"]),
            Ok(v1::GetInstanceTypesResponse {
                instance_types: vec![v1::InstanceType {
                    offerings: vec![v1::Offering {
                        price: Some(-1.0),
                        ..instance_type("bad.large").offerings[0].clone()
                    }],
                    ..instance_type("bad.large")
                }],
            }),
        ]),
        Ok(vec![
            chunk(&["a.large"]),
            Err(Status::internal("EC2 paging broke")),
        ]),
        Err(not_ready()),
        Err(Status::unimplemented("")),
    ]);
    let types = h
        .provider
        .instance_types(&node_pool(), Some(&node_class()))
        .await
        .unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["a.large", "b.large", "c.large"]);

    let malformed = h
        .provider
        .instance_types(&node_pool(), Some(&node_class()))
        .await
        .unwrap_err();
    assert!(
        matches!(&malformed, CloudProviderError::InvalidResponse(m) if m.contains("\"bad.large\": offerings[0].price")),
        "{malformed:?}"
    );
    assert_eq!(
        h.provider.instance_types(&node_pool(), None).await,
        Err(CloudProviderError::Other {
            kind: FailureKind::Internal,
            message: "EC2 paging broke".into()
        }),
        "the chunk before the error is discarded"
    );
    assert_eq!(
        h.provider.instance_types(&node_pool(), None).await,
        Err(CloudProviderError::NodeClassNotReady(
            "no image resolved".into()
        ))
    );
    assert_eq!(
        h.provider.instance_types(&node_pool(), None).await,
        Err(CloudProviderError::Unsupported {
            rpc: "GetInstanceTypes"
        })
    );
}

#[tokio::test]
async fn a_stream_cut_by_unavailable_is_read_again_from_the_start() {
    let h = harness().await;
    h.plugin.script().instance_types = VecDeque::from([
        Ok(vec![
            chunk(&["a.large"]),
            Err(Status::unavailable("connection reset")),
        ]),
        Ok(vec![chunk(&["a.large"]), chunk(&["b.large"])]),
    ]);
    let types = h.provider.instance_types(&node_pool(), None).await.unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["a.large", "b.large"],
        "no chunk of the cut stream kept"
    );
    assert_eq!(h.plugin.calls("GetInstanceTypes"), 2);
}

#[tokio::test]
async fn resolve_node_class_and_repair_policies() {
    let h = harness().await;
    h.plugin.script().resolve = VecDeque::from([
        Ok(v1::ResolveNodeClassResponse {
            status: provider_sdk::json::json_to_struct(
                &json!({"images": [{"id": "img-1", "generation": 2}]}),
            ),
            conditions: vec![v1::Condition {
                r#type: "ImagesReady".into(),
                status: v1::ConditionStatus::False.into(),
                reason: "ImageNotFound".into(),
                message: "no image matches".into(),
            }],
            static_hash: "1234".into(),
            static_hash_version: "v1".into(),
            resolve_again_after: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        }),
        Err(Status::invalid_argument("spec.image: required")),
        Err(Status::unimplemented("")),
        Err(Status::unavailable("cloud down")),
        Err(Status::unavailable("cloud down")),
        Err(Status::unavailable("cloud down")),
        Err(Status::unavailable("cloud down")),
        Err(Status::unavailable("cloud down")),
    ]);
    let resolved = h.provider.resolve_node_class(&node_class()).await.unwrap();
    assert_eq!(
        resolved.status["images"],
        json!([{"id": "img-1", "generation": 2}])
    );
    assert_eq!(resolved.static_hash.as_deref(), Some("1234"));
    assert_eq!(resolved.resolve_again_after, Duration::from_secs(60));
    assert!(matches!(
        resolved.readiness(),
        core_svc::cloudprovider::Readiness::NotReady {
            reason: "ImageNotFound",
            ..
        }
    ));
    assert_eq!(
        h.provider.resolve_node_class(&node_class()).await,
        Err(CloudProviderError::InvalidRequest(
            "spec.image: required".into()
        ))
    );
    assert_eq!(
        h.provider.resolve_node_class(&node_class()).await,
        Err(CloudProviderError::Unsupported {
            rpc: "ResolveNodeClass"
        })
    );
    assert!(matches!(
        h.provider.resolve_node_class(&node_class()).await,
        Err(CloudProviderError::Unavailable(_))
    ));
    assert_eq!(
        h.provider.resolve_node_class(&json!("not an object")).await,
        Err(CloudProviderError::InvalidRequest(
            "node_class: must be a JSON object, not \"not an object\"".into()
        ))
    );

    h.plugin.script().repair = VecDeque::from([
        Ok(v1::GetRepairPoliciesResponse {
            policies: vec![v1::RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: v1::ConditionStatus::Unknown.into(),
                toleration_duration: Some(prost_types::Duration {
                    seconds: 600,
                    nanos: 0,
                }),
            }],
        }),
        Err(Status::unimplemented("")),
    ]);
    let policies = h.provider.repair_policies().await.unwrap();
    assert_eq!(policies[0].toleration_duration, Duration::from_secs(600));
    assert_eq!(
        h.provider.repair_policies().await,
        Err(CloudProviderError::Unsupported {
            rpc: "GetRepairPolicies"
        })
    );
}

/// An adapter to an endpoint where no plugin listens.
fn unreachable(endpoint: Endpoint) -> (GrpcCloudProvider<Arc<FakeTimer>>, Arc<FakeTimer>) {
    let connection = PluginConnection::new(endpoint, None, Deadlines::DEFAULT).unwrap();
    let handshake = Handshake {
        info: PluginInfo {
            name: "absent.example.com".into(),
            vendor_version: "0".into(),
            api_version: "1.0".into(),
        },
        capabilities: Capabilities::default(),
        vocabulary: Vocabulary::default(),
        node_classes: vec![],
        ready: Ok(()),
    };
    let timer = Arc::new(FakeTimer::new());
    let provider = GrpcCloudProvider::new(&connection, &handshake).with_timer(timer.clone());
    (provider, timer)
}

#[tokio::test]
async fn a_missing_socket_is_unavailable_never_gone() {
    let path = std::env::temp_dir()
        .join(format!("core-svc-no-plugin-{}", std::process::id()))
        .join("plugin.sock");
    let (provider, timer) = unreachable(Endpoint::Unix(path));
    assert!(
        matches!(
            provider.get("example:///zone-a/i-1").await,
            Err(CloudProviderError::Unavailable(_))
        ),
        "a missing socket must not read as NOT_FOUND"
    );
    assert!(matches!(
        provider
            .delete("example:///zone-a/i-1", "general-x7k2p")
            .await,
        Err(CloudProviderError::Unavailable(_))
    ));
    assert_eq!(timer.sleeps().len(), 8, "both calls retried to the limit");
}

#[tokio::test]
async fn a_refused_tcp_connection_is_unavailable() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let (provider, _timer) = unreachable(Endpoint::Tcp(address));
    assert!(matches!(
        provider
            .is_drifted(&claim(), &launched(), &node_class())
            .await,
        Err(CloudProviderError::Unavailable(_))
    ));
    assert_eq!(
        provider
            .metrics()
            .attempts(Rpc::IsDrifted, Code::Unavailable),
        5
    );
}
