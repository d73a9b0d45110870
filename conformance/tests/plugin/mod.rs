//! An in-memory plugin that keeps every promise of the API, and a [`Breakage`] knob that
//! breaks one promise at a time: the suite's own test that each check can fail.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use provider_sdk::json::struct_to_json;
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService;
use provider_sdk::v1::identity_service_server::IdentityService;
use provider_sdk::v1::plugin_capability::{Rpc, Type, rpc};
use provider_sdk::v1::{self, *};
use provider_sdk::{InstanceTypeStream, status};
use tonic::{Code, Request, Response, Status};

const GROUP: &str = "test.conformance.dev";
const KIND: &str = "TestNodeClass";
const SIZE: &str = "test.conformance.dev/size";
const ZONE: &str = "topology.kubernetes.io/zone";
const TYPE: &str = "node.kubernetes.io/instance-type";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const ARCH: &str = "kubernetes.io/arch";
const HASH: &str = "test.conformance.dev/testnodeclass-hash";

/// One promise broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breakage {
    None,
    EmptyName,
    NoVendorVersion,
    ApiVersion2,
    ChangingVersion,
    DuplicateCapability,
    VocabularyWithCoreLabel,
    NeverReady,
    NoNodeClasses,
    ResolveAnnouncedUnimplemented,
    ResolveNotReady,
    ResolveUnstableHash,
    ResolveReadsAnything,
    ResolveAnyKind,
    ConvertAnnouncedUnimplemented,
    ConvertForgetsCurrent,
    ConvertKnowsEverything,
    WatchAnnouncedUnimplemented,
    AckRefusesUnknown,
    EmptyCatalogue,
    DuplicateType,
    NoOwnName,
    ZeroPrice,
    UnspecifiedAvailability,
    SecondCatalogueDiffers,
    PendingForever,
    NewInstanceEveryCreate,
    IgnoresZone,
    IgnoresCapacityType,
    IgnoresArch,
    CreateWithoutType,
    CreateNameless,
    CreateAnyKind,
    CapacityErrorUnnamed,
    OneCreateAtATime,
    SameNameRace,
    ForgetsCutOffLaunch,
    GetWrongInstance,
    GetUnannouncedButAnswers,
    ListMissesInstances,
    ListIgnoresPageSize,
    ListAnnouncedUnimplemented,
    DeleteUnspecified,
    DeleteGoneFails,
    DeleteByNameIgnored,
    DeleteNameless,
    GetFindsTerminated,
    ListShowsTerminated,
    IsDriftedUnknownNotDrifted,
    IsDriftedAnnouncedUnimplemented,
    AlwaysDrifted,
    IgnoresHash,
    IsDriftedWithoutNodeClaim,
    RepairAnnouncedUnimplemented,
    RepairNegative,
    ErrorWithoutInfo,
    RepairDeadlineExceeded,
    DeleteKeepsInstances,
}

#[derive(Debug, Clone)]
struct Instance {
    name: String,
    provider_id: String,
    instance_type: String,
    zone: String,
    capacity_type: String,
    arch: String,
    shutting_down: bool,
    terminated: bool,
}

#[derive(Debug, Default)]
struct State {
    instances: Vec<Instance>,
    /// NodeClaim name → index in `instances`.
    by_name: BTreeMap<String, usize>,
    info_calls: u32,
    catalogue_calls: u32,
    resolve_calls: u32,
}

/// The plugin.
#[derive(Debug, Clone)]
pub(crate) struct TestPlugin {
    breakage: Breakage,
    state: Arc<Mutex<State>>,
    creating: Arc<AtomicUsize>,
}

impl TestPlugin {
    pub(crate) fn new(breakage: Breakage) -> Self {
        TestPlugin {
            breakage,
            state: Arc::default(),
            creating: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn broken(&self, breakage: Breakage) -> bool {
        self.breakage == breakage
    }

    fn invalid(&self, field: &str, problem: &str) -> Status {
        if self.broken(Breakage::ErrorWithoutInfo) {
            Status::invalid_argument(format!("{field}: {problem}"))
        } else {
            status::invalid_field(field, problem)
        }
    }

    fn check_kind(
        &self,
        object: Option<&prost_types::Struct>,
        any: Breakage,
    ) -> Result<(), Status> {
        let json = object.cloned().map(struct_to_json).unwrap_or_default();
        let api_version = json["apiVersion"].as_str().unwrap_or_default();
        let kind = json["kind"].as_str().unwrap_or_default();
        if self.broken(any) || (api_version.starts_with(&format!("{GROUP}/")) && kind == KIND) {
            return Ok(());
        }
        Err(status::node_class_kind_unsupported(
            &format!(
                "{}/{kind}",
                api_version.split('/').next().unwrap_or_default()
            ),
            "not a TestNodeClass",
        ))
    }

    fn node_claim(&self, instance: &Instance) -> NodeClaim {
        NodeClaim {
            name: instance.name.clone(),
            labels: HashMap::from([
                (TYPE.to_owned(), instance.instance_type.clone()),
                (ZONE.to_owned(), instance.zone.clone()),
                (CAPACITY_TYPE.to_owned(), instance.capacity_type.clone()),
                (ARCH.to_owned(), instance.arch.clone()),
            ]),
            status: Some(NodeClaimStatus {
                provider_id: instance.provider_id.clone(),
                capacity: resources(),
                allocatable: resources(),
                instance_state: InstanceState::Running as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn capabilities(&self) -> Vec<PluginCapability> {
        let mut types = vec![
            rpc::Type::ResolveNodeClass,
            rpc::Type::Get,
            rpc::Type::List,
            rpc::Type::IsDrifted,
            rpc::Type::GetRepairPolicies,
            rpc::Type::ConvertNodeClass,
            rpc::Type::WatchInterruptions,
        ];
        if self.broken(Breakage::GetUnannouncedButAnswers) {
            types.retain(|t| *t != rpc::Type::Get);
        }
        if self.broken(Breakage::DuplicateCapability) {
            types.push(rpc::Type::Get);
        }
        types
            .into_iter()
            .map(|t| PluginCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
            })
            .collect()
    }
}

fn resources() -> HashMap<String, String> {
    HashMap::from([
        ("cpu".to_owned(), "2".to_owned()),
        ("memory".to_owned(), "4Gi".to_owned()),
        ("pods".to_owned(), "110".to_owned()),
    ])
}

/// (name, arch, size, [(zone, capacity type, price, available)])
type TypeSpec = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str, f64, bool)],
);

const CATALOGUE: [TypeSpec; 3] = [
    (
        "small",
        "amd64",
        "1",
        &[
            ("zone-a", "on-demand", 0.10, true),
            ("zone-b", "on-demand", 0.11, true),
            ("zone-a", "spot", 0.04, true),
            ("zone-c", "on-demand", 0.10, false),
        ],
    ),
    (
        "medium",
        "amd64",
        "2",
        &[
            ("zone-a", "on-demand", 0.20, true),
            ("zone-b", "spot", 0.08, true),
        ],
    ),
    ("arm", "arm64", "2", &[("zone-a", "on-demand", 0.15, true)]),
];

fn catalogue(breakage: Breakage, second: bool) -> Vec<InstanceType> {
    let mut types: Vec<InstanceType> = CATALOGUE
        .iter()
        .map(|(name, arch, size, offerings)| InstanceType {
            name: (*name).to_owned(),
            requirements: vec![
                Requirement::in_values(TYPE, [name]),
                Requirement::in_values(ARCH, [arch]),
                Requirement::in_values(SIZE, [size]),
            ],
            offerings: offerings
                .iter()
                .map(|(zone, capacity_type, price, available)| {
                    Offering::priced(zone, capacity_type, *price, "USD", *available)
                })
                .collect(),
            capacity: resources(),
            overhead: Some(Overhead {
                kube_reserved: HashMap::from([("cpu".to_owned(), "100m".to_owned())]),
                ..Default::default()
            }),
            burstable_cpu: false,
        })
        .collect();
    match breakage {
        Breakage::EmptyCatalogue => types.clear(),
        Breakage::DuplicateType => types.push(types[0].clone()),
        Breakage::NoOwnName => types[1].requirements.retain(|r| r.key != TYPE),
        Breakage::ZeroPrice => types[0].offerings[0].price = Some(0.0),
        Breakage::UnspecifiedAvailability => types[0].offerings[3].availability = 0,
        Breakage::SecondCatalogueDiffers if second => {
            types.pop();
        }
        _ => {}
    }
    types
}

/// The value the requirements allow for `key` among `candidates`, honouring In and NotIn.
fn allows(requirements: &[Requirement], key: &str, value: &str) -> bool {
    requirements
        .iter()
        .filter(|r| r.key == key)
        .all(|r| match r.operator() {
            Operator::In => r.values.iter().any(|v| v == value),
            Operator::NotIn => !r.values.iter().any(|v| v == value),
            _ => true,
        })
}

#[tonic::async_trait]
impl IdentityService for TestPlugin {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        let calls = {
            let mut state = self.state();
            state.info_calls += 1;
            state.info_calls
        };
        Ok(Response::new(GetPluginInfoResponse {
            name: if self.broken(Breakage::EmptyName) {
                String::new()
            } else {
                GROUP.into()
            },
            vendor_version: match self.breakage {
                Breakage::NoVendorVersion => String::new(),
                Breakage::ChangingVersion => format!("1.0.{calls}"),
                _ => "1.0.0".into(),
            },
            api_version: if self.broken(Breakage::ApiVersion2) {
                "2.0".into()
            } else {
                "1.0".into()
            },
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: self.capabilities(),
        }))
    }

    async fn get_plugin_vocabulary(
        &self,
        _: Request<GetPluginVocabularyRequest>,
    ) -> Result<Response<GetPluginVocabularyResponse>, Status> {
        let mut labels = vec![LabelDefinition {
            key: SIZE.into(),
            value_type: LabelValueType::Integer as i32,
            description: "vCPUs".into(),
        }];
        if self.broken(Breakage::VocabularyWithCoreLabel) {
            labels.push(LabelDefinition {
                key: ZONE.into(),
                value_type: LabelValueType::String as i32,
                description: String::new(),
            });
        }
        Ok(Response::new(GetPluginVocabularyResponse {
            labels,
            restricted_label_domains: vec![GROUP.into()],
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse {
            ready: Some(!self.broken(Breakage::NeverReady)),
            message: String::new(),
        }))
    }
}

#[tonic::async_trait]
impl CloudProviderService for TestPlugin {
    async fn get_supported_node_classes(
        &self,
        _: Request<GetSupportedNodeClassesRequest>,
    ) -> Result<Response<GetSupportedNodeClassesResponse>, Status> {
        let mut node_classes = vec![NodeClassKind {
            group: GROUP.into(),
            version: "v1".into(),
            kind: KIND.into(),
        }];
        if self.broken(Breakage::NoNodeClasses) {
            node_classes.clear();
        }
        Ok(Response::new(GetSupportedNodeClassesResponse {
            node_classes,
        }))
    }

    async fn resolve_node_class(
        &self,
        request: Request<ResolveNodeClassRequest>,
    ) -> Result<Response<ResolveNodeClassResponse>, Status> {
        if self.broken(Breakage::ResolveAnnouncedUnimplemented) {
            return Err(Status::unimplemented("ResolveNodeClass"));
        }
        let request = request.into_inner();
        self.check_kind(request.node_class.as_ref(), Breakage::ResolveAnyKind)?;
        let json = request.node_class.map(struct_to_json).unwrap_or_default();
        if !json["spec"].is_object() && !self.broken(Breakage::ResolveReadsAnything) {
            return Err(self.invalid("node_class.spec", "must be an object"));
        }
        let calls = {
            let mut state = self.state();
            state.resolve_calls += 1;
            state.resolve_calls
        };
        let ready = !self.broken(Breakage::ResolveNotReady);
        Ok(Response::new(ResolveNodeClassResponse {
            status: None,
            conditions: vec![Condition {
                r#type: "ImagesReady".into(),
                status: if ready {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                } as i32,
                reason: if ready {
                    String::new()
                } else {
                    "NoImage".into()
                },
                message: if ready {
                    String::new()
                } else {
                    "no image".into()
                },
            }],
            static_hash: if self.broken(Breakage::ResolveUnstableHash) {
                format!("hash-{calls}")
            } else {
                "hash-1".into()
            },
            static_hash_version: "v1".into(),
            resolve_again_after: None,
        }))
    }

    async fn get_instance_types(
        &self,
        _: Request<GetInstanceTypesRequest>,
    ) -> Result<Response<InstanceTypeStream>, Status> {
        let second = {
            let mut state = self.state();
            state.catalogue_calls += 1;
            state.catalogue_calls > 1
        };
        let chunk = GetInstanceTypesResponse {
            instance_types: catalogue(self.breakage, second),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(chunk)]))))
    }

    async fn create(
        &self,
        request: Request<CreateRequest>,
    ) -> Result<Response<CreateResponse>, Status> {
        let request = request.into_inner();
        let claim = request.node_claim.unwrap_or_default();
        if claim.name.is_empty() && !self.broken(Breakage::CreateNameless) {
            return Err(self.invalid("node_claim.name", "must not be empty"));
        }
        self.check_kind(request.node_class.as_ref(), Breakage::CreateAnyKind)?;
        let requirements = claim.spec.map(|s| s.requirements).unwrap_or_default();
        if !requirements
            .iter()
            .any(|r| r.key == TYPE && r.operator() == Operator::In)
            && !self.broken(Breakage::CreateWithoutType)
        {
            return Err(self.invalid("node_claim.spec.requirements", "no instance-type In"));
        }
        if self.broken(Breakage::PendingForever) {
            return Ok(Response::new(CreateResponse {
                state: LaunchState::Pending as i32,
                retry_after: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 10_000_000,
                }),
                ..Default::default()
            }));
        }
        let in_flight = self.creating.fetch_add(1, Ordering::SeqCst);
        let _done = Done(self.creating.clone());
        if in_flight > 0 && self.broken(Breakage::OneCreateAtATime) {
            return Err(status::cloud_api_error(Code::Unavailable, None, "busy"));
        }
        // Idempotent by name: the name is claimed before the launch, under the lock.
        let existing = {
            let state = self.state();
            state
                .by_name
                .get(&claim.name)
                .map(|i| state.instances[*i].clone())
        };
        if let Some(instance) = existing.filter(|_| !self.broken(Breakage::NewInstanceEveryCreate))
        {
            if instance.provider_id.is_empty() {
                return Err(status::create_in_progress(&claim.name));
            }
            return Ok(launched(self.node_claim(&instance)));
        }
        let chosen = CATALOGUE.iter().flat_map(|(name, arch, _, offerings)| {
            offerings.iter().map(move |o| (*name, *arch, *o))
        });
        let mut options: Vec<_> = chosen
            .filter(|(name, arch, (zone, capacity_type, _, available))| {
                *available
                    && allows(&requirements, TYPE, name)
                    && (self.broken(Breakage::IgnoresZone) || allows(&requirements, ZONE, zone))
                    && (self.broken(Breakage::IgnoresCapacityType)
                        || allows(&requirements, CAPACITY_TYPE, capacity_type))
                    && (self.broken(Breakage::IgnoresArch) || allows(&requirements, ARCH, arch))
            })
            .collect();
        options.sort_by(|a, b| a.2.2.total_cmp(&b.2.2));
        if matches!(
            self.breakage,
            Breakage::IgnoresZone | Breakage::IgnoresArch | Breakage::IgnoresCapacityType
        ) {
            // Whatever was asked: the first zone, amd64, on-demand.
            options
                .sort_by_key(|(_, arch, (zone, capacity_type, ..))| (*zone, *arch, *capacity_type));
        }
        let Some((name, arch, (zone, capacity_type, ..))) = options.first().copied() else {
            let metadata = if self.broken(Breakage::CapacityErrorUnnamed) {
                HashMap::new()
            } else {
                HashMap::from([("instance_types".to_owned(), "small".to_owned())])
            };
            return Err(status::insufficient_capacity("no capacity", metadata));
        };
        let mut instance = Instance {
            name: claim.name.clone(),
            provider_id: String::new(),
            instance_type: name.into(),
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            arch: arch.into(),
            shutting_down: false,
            terminated: false,
        };
        let race =
            self.broken(Breakage::SameNameRace) || self.broken(Breakage::ForgetsCutOffLaunch);
        let index = {
            let mut state = self.state();
            if !race
                && state.by_name.contains_key(&claim.name)
                && !self.broken(Breakage::NewInstanceEveryCreate)
            {
                return Err(status::create_in_progress(&claim.name));
            }
            instance.provider_id = format!("test:///{zone}/i-{}", state.instances.len());
            state.instances.push(instance.clone());
            let index = state.instances.len() - 1;
            if !race {
                state.by_name.insert(claim.name.clone(), index);
            }
            index
        };
        // The cloud takes a while to launch.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if race {
            self.state().by_name.insert(claim.name.clone(), index);
        }
        Ok(launched(self.node_claim(&instance)))
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let request = request.into_inner();
        if request.node_claim_name.is_empty() && !self.broken(Breakage::DeleteNameless) {
            return Err(self.invalid("node_claim_name", "must not be empty"));
        }
        if self.broken(Breakage::DeleteUnspecified) {
            return Ok(Response::new(DeleteResponse { state: 0 }));
        }
        let mut state = self.state();
        let found = state.instances.iter_mut().filter(|i| {
            if request.provider_id.is_empty() {
                i.name == request.node_claim_name && !self.broken(Breakage::DeleteByNameIgnored)
            } else {
                i.provider_id == request.provider_id
            }
        });
        let mut terminating = false;
        let mut already_gone = true;
        for instance in found {
            already_gone &= instance.terminated;
            if instance.terminated || self.broken(Breakage::DeleteKeepsInstances) {
                continue;
            }
            if instance.shutting_down {
                instance.terminated = true;
            } else {
                instance.shutting_down = true;
                terminating = true;
            }
        }
        if already_gone && self.broken(Breakage::DeleteGoneFails) {
            return Err(status::plugin_internal(Code::Internal, "already gone"));
        }
        Ok(Response::new(DeleteResponse {
            state: if terminating {
                DeletionState::Terminating
            } else {
                DeletionState::Gone
            } as i32,
        }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        let provider_id = request.into_inner().provider_id;
        let state = self.state();
        let found = state.instances.iter().find(|i| {
            i.provider_id == provider_id
                && (!i.terminated || self.broken(Breakage::GetFindsTerminated))
        });
        match found {
            Some(instance) => {
                let mut claim = self.node_claim(instance);
                if self.broken(Breakage::GetWrongInstance) {
                    claim.status.get_or_insert_default().provider_id =
                        "test:///zone-a/i-999".into();
                }
                Ok(Response::new(GetResponse {
                    node_claim: Some(claim),
                }))
            }
            None => Err(status::instance_not_found(
                "provider_id",
                &provider_id,
                "no such instance",
            )),
        }
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        if self.broken(Breakage::ListAnnouncedUnimplemented) {
            return Err(Status::unimplemented("List"));
        }
        let request = request.into_inner();
        let state = self.state();
        let live: Vec<NodeClaim> = state
            .instances
            .iter()
            .filter(|i| !i.terminated || self.broken(Breakage::ListShowsTerminated))
            .filter(|_| !self.broken(Breakage::ListMissesInstances))
            .map(|i| self.node_claim(i))
            .collect();
        let start: usize = request.page_token.parse().unwrap_or(0);
        let size = match usize::try_from(request.page_size) {
            Ok(0) | Err(_) => live.len().max(1),
            Ok(_) if self.broken(Breakage::ListIgnoresPageSize) => live.len().max(1),
            Ok(size) => size,
        };
        let end = (start + size).min(live.len());
        Ok(Response::new(ListResponse {
            node_claims: live.get(start..end).unwrap_or_default().to_vec(),
            next_page_token: if end < live.len() {
                end.to_string()
            } else {
                String::new()
            },
        }))
    }

    async fn is_drifted(
        &self,
        request: Request<IsDriftedRequest>,
    ) -> Result<Response<IsDriftedResponse>, Status> {
        if self.broken(Breakage::IsDriftedAnnouncedUnimplemented) {
            return Err(Status::unimplemented("IsDrifted"));
        }
        let request = request.into_inner();
        let Some(claim) = request.node_claim else {
            if self.broken(Breakage::IsDriftedWithoutNodeClaim) {
                return Ok(Response::new(IsDriftedResponse::default()));
            }
            return Err(self.invalid("node_claim", "missing"));
        };
        let provider_id = claim.status.map(|s| s.provider_id).unwrap_or_default();
        let state = self.state();
        let live = state
            .instances
            .iter()
            .any(|i| i.provider_id == provider_id && !i.terminated);
        if !live {
            if self.broken(Breakage::IsDriftedUnknownNotDrifted) {
                return Ok(Response::new(IsDriftedResponse::default()));
            }
            return Err(status::instance_not_found(
                "provider_id",
                &provider_id,
                "no such instance",
            ));
        }
        let stale = claim.annotations.get(HASH).is_some_and(|h| h != "hash-1");
        if self.broken(Breakage::AlwaysDrifted) || (stale && !self.broken(Breakage::IgnoresHash)) {
            return Ok(Response::new(IsDriftedResponse {
                reason: "NodeClassDrift".into(),
                message: "the node class's hash changed".into(),
            }));
        }
        Ok(Response::new(IsDriftedResponse::default()))
    }

    async fn watch_interruptions(
        &self,
        _: Request<WatchInterruptionsRequest>,
    ) -> Result<Response<provider_sdk::InterruptionStream>, Status> {
        if self.broken(Breakage::WatchAnnouncedUnimplemented) {
            return Err(Status::unimplemented("WatchInterruptions"));
        }
        // Nothing is ever interrupted here: a stream that stays open and quiet.
        Ok(Response::new(Box::pin(tokio_stream::pending::<
            Result<WatchInterruptionsResponse, Status>,
        >())))
    }

    async fn ack_interruptions(
        &self,
        _: Request<AckInterruptionsRequest>,
    ) -> Result<Response<AckInterruptionsResponse>, Status> {
        if self.broken(Breakage::AckRefusesUnknown) {
            return Err(status::invalid_field("event_ids", "unknown event id"));
        }
        Ok(Response::new(AckInterruptionsResponse {}))
    }

    async fn convert_node_class(
        &self,
        request: Request<ConvertNodeClassRequest>,
    ) -> Result<Response<ConvertNodeClassResponse>, Status> {
        if self.broken(Breakage::ConvertAnnouncedUnimplemented) {
            return Err(Status::unimplemented("ConvertNodeClass"));
        }
        let Some(convert_node_class_request::Source::Object(object)) = request.into_inner().source
        else {
            return Ok(Response::new(ConvertNodeClassResponse::default()));
        };
        let json = struct_to_json(object.clone());
        let current = json["apiVersion"] == format!("{GROUP}/v1") && json["kind"] == KIND;
        let known = if self.broken(Breakage::ConvertForgetsCurrent) {
            false
        } else {
            current || self.broken(Breakage::ConvertKnowsEverything)
        };
        Ok(Response::new(ConvertNodeClassResponse {
            known,
            object: known.then_some(object),
            warnings: Vec::new(),
        }))
    }

    async fn get_repair_policies(
        &self,
        _: Request<GetRepairPoliciesRequest>,
    ) -> Result<Response<GetRepairPoliciesResponse>, Status> {
        match self.breakage {
            Breakage::RepairAnnouncedUnimplemented => {
                return Err(Status::unimplemented("GetRepairPolicies"));
            }
            Breakage::RepairDeadlineExceeded => return Err(Status::deadline_exceeded("slow")),
            _ => {}
        }
        let seconds = if self.broken(Breakage::RepairNegative) {
            -5
        } else {
            600
        };
        Ok(Response::new(GetRepairPoliciesResponse {
            policies: vec![RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: ConditionStatus::False as i32,
                toleration_duration: Some(prost_types::Duration { seconds, nanos: 0 }),
            }],
        }))
    }
}

fn launched(claim: NodeClaim) -> Response<CreateResponse> {
    Response::new(CreateResponse {
        node_claim: Some(claim),
        state: v1::LaunchState::Launched as i32,
        ..Default::default()
    })
}

/// Counts a Create out when it ends, however it ends.
struct Done(Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
