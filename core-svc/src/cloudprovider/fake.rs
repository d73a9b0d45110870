//! An in-process cloud for controller tests, in the manner of upstream's fake cloud provider:
//! scripted instance types, launches that pick the cheapest compatible offering, errors injected
//! per call, drift answers, and a log of every call.
//!
//! It keeps the API's contract where controllers rely on it: Create is idempotent by NodeClaim
//! name, Delete of an unknown instance is [`Deletion::Gone`], Get of one is `None`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use core_domain::instance_type::{InstanceType, Offering, order_by_price};
use core_domain::labels::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, LABEL_ARCH,
    LABEL_INSTANCE_TYPE, LABEL_OS,
};
use core_domain::requirements::{Operator, Requirement, Requirements};
use core_domain::resources::{NodeOverhead, Quantities, ResourceList, fits};
use karpenter_api::ConditionStatus;

use super::{
    CloudInstance, CloudProvider, CloudProviderError, DEFAULT_RESOLVE_AGAIN_AFTER, Deletion,
    DriftReason, FailureKind, InstanceState, Interruption, InterruptionStream, LaunchedNodeClaim,
    NodeClaimRequest, NodeClassKind, RepairPolicy, ResolvedNodeClass, Rpc,
};

/// One call the fake received, with what it was asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// ResolveNodeClass of the node class with this name.
    ResolveNodeClass {
        /// `metadata.name` of the node class.
        node_class: String,
    },
    /// GetInstanceTypes for the NodePool with this name.
    InstanceTypes {
        /// `metadata.name` of the NodePool.
        node_pool: String,
    },
    /// Create of this NodeClaim (boxed: the other calls are small).
    Create(Box<NodeClaimRequest>),
    /// Delete.
    Delete {
        /// The provider ID asked for (may be empty).
        provider_id: String,
        /// The NodeClaim's name.
        node_claim_name: String,
    },
    /// Get.
    Get {
        /// The provider ID asked for.
        provider_id: String,
    },
    /// List.
    List,
    /// IsDrifted of this NodeClaim's instance.
    IsDrifted {
        /// The NodeClaim's name.
        node_claim_name: String,
        /// Its instance.
        provider_id: String,
    },
    /// GetRepairPolicies.
    RepairPolicies,
    /// WatchInterruptions.
    WatchInterruptions,
    /// AckInterruptions of these ids.
    AckInterruptions(Vec<String>),
}

impl Call {
    /// The RPC this call stands for.
    pub fn rpc(&self) -> Rpc {
        match self {
            Call::ResolveNodeClass { .. } => Rpc::ResolveNodeClass,
            Call::InstanceTypes { .. } => Rpc::GetInstanceTypes,
            Call::Create(_) => Rpc::Create,
            Call::Delete { .. } => Rpc::Delete,
            Call::Get { .. } => Rpc::Get,
            Call::List => Rpc::List,
            Call::IsDrifted { .. } => Rpc::IsDrifted,
            Call::RepairPolicies => Rpc::GetRepairPolicies,
            Call::WatchInterruptions => Rpc::WatchInterruptions,
            Call::AckInterruptions(_) => Rpc::AckInterruptions,
        }
    }
}

/// An in-memory [`CloudProvider`] driven by the test.
#[derive(Debug)]
pub struct FakeCloudProvider {
    name: String,
    node_classes: Vec<NodeClassKind>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    instance_types: Vec<Arc<InstanceType>>,
    instance_types_for_node_pool: HashMap<String, Vec<Arc<InstanceType>>>,
    errors_for_node_pool: HashMap<String, CloudProviderError>,
    next_errors: HashMap<Rpc, VecDeque<CloudProviderError>>,
    unsupported: Vec<Rpc>,
    allowed_create_calls: Option<usize>,
    create_calls: usize,
    instances: BTreeMap<String, CloudInstance>,
    launched: BTreeMap<String, LaunchedNodeClaim>,
    next_instance: u64,
    gradual_termination: bool,
    drifted: HashMap<String, DriftReason>,
    drifted_by_default: Option<DriftReason>,
    repair_policies: Vec<RepairPolicy>,
    resolved_node_class: ResolvedNodeClass,
    now: Option<SystemTime>,
    calls: Vec<Call>,
    /// The open interruption streams' senders.
    interruption_streams: Vec<futures::channel::mpsc::UnboundedSender<InterruptionBatch>>,
    acknowledged: Vec<String>,
}

/// What an interruption stream yields.
type InterruptionBatch = Result<Vec<Interruption>, CloudProviderError>;

impl FakeCloudProvider {
    /// Sends `notices` on every open interruption stream (those `watch_interruptions`
    /// opened and nobody dropped); how many streams got them.
    pub fn interrupt(&self, notices: Vec<Interruption>) -> usize {
        let mut state = self.lock();
        state
            .interruption_streams
            .retain(|sender| sender.unbounded_send(Ok(notices.clone())).is_ok());
        state.interruption_streams.len()
    }

    /// Ends every open interruption stream with `error` (or just ends them).
    pub fn break_interruption_streams(&self, error: Option<CloudProviderError>) {
        let mut state = self.lock();
        for sender in state.interruption_streams.drain(..) {
            if let Some(error) = &error {
                let _ = sender.unbounded_send(Err(error.clone()));
            }
        }
    }

    /// The event ids acknowledged so far, in order.
    pub fn acknowledged(&self) -> Vec<String> {
        self.lock().acknowledged.clone()
    }

    /// A fake named `fake`, managing `test.karpenter.sh/v1 TestNodeClass`, with
    /// [`default_instance_types`], ready node classes, no drift, and upstream's default repair
    /// policy (`BadNode=False` for 30 minutes).
    pub fn new() -> Self {
        FakeCloudProvider {
            name: "fake".into(),
            node_classes: vec![NodeClassKind {
                group: "test.karpenter.sh".into(),
                version: "v1".into(),
                kind: "TestNodeClass".into(),
            }],
            state: Mutex::new(State {
                instance_types: default_instance_types(),
                instance_types_for_node_pool: HashMap::new(),
                errors_for_node_pool: HashMap::new(),
                next_errors: HashMap::new(),
                unsupported: Vec::new(),
                allowed_create_calls: None,
                create_calls: 0,
                instances: BTreeMap::new(),
                launched: BTreeMap::new(),
                next_instance: 1,
                gradual_termination: false,
                drifted: HashMap::new(),
                drifted_by_default: None,
                repair_policies: vec![RepairPolicy {
                    condition_type: "BadNode".into(),
                    condition_status: ConditionStatus::False,
                    toleration_duration: Duration::from_secs(30 * 60),
                }],
                resolved_node_class: ResolvedNodeClass {
                    status: serde_json::Map::new(),
                    conditions: Vec::new(),
                    static_hash: None,
                    static_hash_version: String::new(),
                    resolve_again_after: DEFAULT_RESOLVE_AGAIN_AFTER,
                },
                now: None,
                calls: Vec::new(),
                interruption_streams: Vec::new(),
                acknowledged: Vec::new(),
            }),
        }
    }

    /// The same fake under another name and node class kinds.
    pub fn with_identity(mut self, name: &str, node_classes: Vec<NodeClassKind>) -> Self {
        self.name = name.to_owned();
        self.node_classes = node_classes;
        self
    }

    /// Replaces the catalogue every NodePool gets (unless set per NodePool) and Create picks from.
    pub fn set_instance_types(&self, instance_types: Vec<Arc<InstanceType>>) {
        self.lock().instance_types = instance_types;
    }

    /// The catalogue the NodePool named `node_pool` gets.
    pub fn set_instance_types_for_node_pool(
        &self,
        node_pool: &str,
        instance_types: Vec<Arc<InstanceType>>,
    ) {
        self.lock()
            .instance_types_for_node_pool
            .insert(node_pool.to_owned(), instance_types);
    }

    /// Every GetInstanceTypes for the NodePool named `node_pool` fails with `error`.
    pub fn fail_node_pool(&self, node_pool: &str, error: CloudProviderError) {
        self.lock()
            .errors_for_node_pool
            .insert(node_pool.to_owned(), error);
    }

    /// The next call of `rpc` fails with `error` (queued: several calls fail in turn).
    pub fn fail_next(&self, rpc: Rpc, error: CloudProviderError) {
        self.lock()
            .next_errors
            .entry(rpc)
            .or_default()
            .push_back(error);
    }

    /// Every call of `rpc` answers [`CloudProviderError::Unsupported`], as a plugin that does
    /// not implement it.
    pub fn set_unsupported(&self, rpc: Rpc) {
        let mut state = self.lock();
        if !state.unsupported.contains(&rpc) {
            state.unsupported.push(rpc);
        }
    }

    /// After `n` Create calls, each further one fails (upstream's `AllowedCreateCalls`).
    pub fn set_allowed_create_calls(&self, n: usize) {
        self.lock().allowed_create_calls = Some(n);
    }

    /// When true, Delete of a live instance first answers Terminating (marking it shutting
    /// down) and only the next Delete removes it; when false (the default) it is gone at once.
    pub fn set_gradual_termination(&self, gradual: bool) {
        self.lock().gradual_termination = gradual;
    }

    /// IsDrifted of the instance `provider_id` answers `reason` (`None`: not drifted).
    pub fn set_drifted(&self, provider_id: &str, reason: Option<DriftReason>) {
        let mut state = self.lock();
        match reason {
            Some(reason) => state.drifted.insert(provider_id.to_owned(), reason),
            None => state.drifted.remove(provider_id),
        };
    }

    /// IsDrifted of every instance without its own answer says `reason`.
    pub fn set_drifted_by_default(&self, reason: Option<DriftReason>) {
        self.lock().drifted_by_default = reason;
    }

    /// What GetRepairPolicies answers.
    pub fn set_repair_policies(&self, policies: Vec<RepairPolicy>) {
        self.lock().repair_policies = policies;
    }

    /// What ResolveNodeClass answers.
    pub fn set_resolved_node_class(&self, resolved: ResolvedNodeClass) {
        self.lock().resolved_node_class = resolved;
    }

    /// The creation time given to instances launched from now on (none until set).
    pub fn set_now(&self, now: SystemTime) {
        self.lock().now = Some(now);
    }

    /// Puts an instance into the cloud that no Create launched (a leaked one, say).
    pub fn insert_instance(&self, instance: CloudInstance) {
        self.lock()
            .instances
            .insert(instance.provider_id.clone(), instance);
    }

    /// Makes an instance vanish, as if the cloud terminated it; whether it existed.
    pub fn remove_instance(&self, provider_id: &str) -> bool {
        let mut state = self.lock();
        state.launched.remove(provider_id);
        state.instances.remove(provider_id).is_some()
    }

    /// The instances the cloud has now, by provider ID.
    pub fn instances(&self) -> Vec<CloudInstance> {
        self.lock().instances.values().cloned().collect()
    }

    /// Every call so far, in order (failed ones included).
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls of `rpc` so far, in order.
    pub fn calls_of(&self, rpc: Rpc) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.rpc() == rpc)
            .cloned()
            .collect()
    }

    /// The NodeClaims Create was called with, in order.
    pub fn create_calls(&self) -> Vec<NodeClaimRequest> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Create(request) => Some(NodeClaimRequest::clone(request)),
                _ => None,
            })
            .collect()
    }

    /// Forgets the calls so far.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No method leaves the state half-updated across a panic point that matters to a test.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for FakeCloudProvider {
    fn default() -> Self {
        FakeCloudProvider::new()
    }
}

impl State {
    /// Logs `call`, then takes the error scripted for it, if any.
    fn begin(&mut self, call: Call) -> Result<(), CloudProviderError> {
        let rpc = call.rpc();
        self.calls.push(call);
        if self.unsupported.contains(&rpc) {
            return Err(CloudProviderError::Unsupported { rpc: rpc.as_str() });
        }
        match self.next_errors.get_mut(&rpc).and_then(VecDeque::pop_front) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn launch(
        &mut self,
        request: &NodeClaimRequest,
    ) -> Result<LaunchedNodeClaim, CloudProviderError> {
        let requirements = Requirements::from_node_selector_requirements(&request.requirements)
            .map_err(|e| {
                CloudProviderError::InvalidRequest(format!("node_claim.spec.requirements: {e}"))
            })?;
        let requests = ResourceList::from_quantities(&request.resource_requests).map_err(|e| {
            CloudProviderError::InvalidRequest(format!("node_claim.spec.resource_requests: {e}"))
        })?;
        let mut candidates: Vec<Arc<InstanceType>> = self
            .instance_types
            .iter()
            .filter(|t| t.is_compatible(&requirements) && fits(&requests, t.allocatable()).is_ok())
            .cloned()
            .collect();
        order_by_price(&mut candidates, &requirements);
        let chosen = candidates.first().cloned().ok_or_else(|| {
            CloudProviderError::InsufficientCapacity(format!(
                "no instance type has an available offering for {requirements} with room for {requests}"
            ))
        })?;
        let offering = choose_offering(&chosen, &requirements)
            .cloned()
            .ok_or_else(|| {
                CloudProviderError::InsufficientCapacity(format!(
                    "{} has no available offering",
                    chosen.name()
                ))
            })?;
        if offering.capacity_type.as_ref() == CAPACITY_TYPE_RESERVED {
            self.use_reservation(&chosen, &offering);
        }

        let mut labels = single_values(chosen.requirements());
        labels.extend(single_values(&offering.requirements));
        let provider_id = format!("fake:///{}/i-{:08}", offering.zone, self.next_instance);
        self.next_instance += 1;
        let capacity: Quantities = chosen.capacity().to_quantities().into_iter().collect();
        let allocatable: Quantities = chosen.allocatable().to_quantities().into_iter().collect();
        let launched = LaunchedNodeClaim {
            provider_id: provider_id.clone(),
            image_id: Some("fake-image-1".into()),
            labels: labels.clone(),
            annotations: BTreeMap::new(),
            capacity: capacity.clone(),
            allocatable: allocatable.clone(),
            state: InstanceState::Running,
        };
        self.instances.insert(
            provider_id.clone(),
            CloudInstance {
                node_claim_name: Some(request.name.clone()),
                provider_id: provider_id.clone(),
                image_id: launched.image_id.clone(),
                labels,
                capacity,
                allocatable,
                creation_time: self.now,
                deletion_time: None,
                state: InstanceState::Running,
            },
        );
        self.launched.insert(provider_id, launched.clone());
        Ok(launched)
    }

    /// One fewer node fits the reservation behind `offering`; at zero it is unavailable.
    fn use_reservation(&mut self, instance_type: &Arc<InstanceType>, offering: &Offering) {
        let mut offerings = instance_type.offerings().to_vec();
        for o in offerings.iter_mut().filter(|o| **o == *offering) {
            let left = o.reservation_capacity.unwrap_or(0).saturating_sub(1);
            o.reservation_capacity = Some(left);
            o.available = left > 0;
        }
        let updated = Arc::new(
            InstanceType::new(
                instance_type.name(),
                instance_type.requirements().clone(),
                offerings,
                instance_type.capacity().clone(),
                instance_type.overhead().clone(),
            )
            .with_burstable_cpu(instance_type.is_cpu_burstable()),
        );
        for t in &mut self.instance_types {
            if Arc::ptr_eq(t, instance_type) {
                *t = updated.clone();
            }
        }
    }

    fn find_launched_for(&self, node_claim_name: &str) -> Option<LaunchedNodeClaim> {
        self.instances
            .values()
            .find(|i| i.node_claim_name.as_deref() == Some(node_claim_name) && !i.is_deleting())
            .and_then(|i| self.launched.get(&i.provider_id))
            .cloned()
    }
}

/// A reserved offering with room left if there is one (as upstream's fake), otherwise the
/// cheapest available compatible offering.
fn choose_offering<'a>(
    instance_type: &'a InstanceType,
    requirements: &'a Requirements,
) -> Option<&'a Offering> {
    instance_type
        .available_offerings(requirements)
        .find(|o| {
            o.capacity_type.as_ref() == CAPACITY_TYPE_RESERVED
                && o.reservation_capacity.unwrap_or(0) > 0
        })
        .or_else(|| instance_type.cheapest_offering(requirements))
}

/// The labels that `requirements` pin to one value.
fn single_values(requirements: &Requirements) -> BTreeMap<String, String> {
    requirements
        .iter()
        .filter(|r| r.operator() == Operator::In && r.len() == 1)
        .filter_map(|r| {
            r.values()
                .next()
                .map(|v| (r.key().to_owned(), v.to_owned()))
        })
        .collect()
}

fn object_name(object: &serde_json::Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl CloudProvider for FakeCloudProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn supported_node_classes(&self) -> &[NodeClassKind] {
        &self.node_classes
    }

    async fn resolve_node_class(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<ResolvedNodeClass, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::ResolveNodeClass {
            node_class: object_name(node_class),
        })?;
        Ok(state.resolved_node_class.clone())
    }

    async fn instance_types(
        &self,
        node_pool: &serde_json::Value,
        _node_class: Option<&serde_json::Value>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        let name = object_name(node_pool);
        let mut state = self.lock();
        state.begin(Call::InstanceTypes {
            node_pool: name.clone(),
        })?;
        if let Some(error) = state.errors_for_node_pool.get(&name) {
            return Err(error.clone());
        }
        Ok(state
            .instance_types_for_node_pool
            .get(&name)
            .unwrap_or(&state.instance_types)
            .clone())
    }

    async fn create(
        &self,
        request: &NodeClaimRequest,
        _node_class: &serde_json::Value,
    ) -> Result<LaunchedNodeClaim, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::Create(Box::new(request.clone())))?;
        if let Some(launched) = state.find_launched_for(&request.name) {
            return Ok(launched);
        }
        state.create_calls += 1;
        if state
            .allowed_create_calls
            .is_some_and(|allowed| state.create_calls > allowed)
        {
            return Err(CloudProviderError::Other {
                kind: FailureKind::ResourceExhausted,
                message: "the fake's allowed create calls are used up".into(),
            });
        }
        state.launch(request)
    }

    async fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> Result<Deletion, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::Delete {
            provider_id: provider_id.to_owned(),
            node_claim_name: node_claim_name.to_owned(),
        })?;
        let found = if provider_id.is_empty() {
            state
                .instances
                .values()
                .find(|i| i.node_claim_name.as_deref() == Some(node_claim_name))
                .map(|i| i.provider_id.clone())
        } else {
            state
                .instances
                .contains_key(provider_id)
                .then(|| provider_id.to_owned())
        };
        let Some(provider_id) = found else {
            return Ok(Deletion::Gone);
        };
        let gradual = state.gradual_termination;
        let now = state.now.unwrap_or(SystemTime::UNIX_EPOCH);
        if let Some(instance) = state.instances.get_mut(&provider_id)
            && gradual
            && !instance.is_deleting()
        {
            instance.deletion_time = Some(now);
            instance.state = InstanceState::Terminating;
            return Ok(Deletion::Terminating);
        }
        state.instances.remove(&provider_id);
        state.launched.remove(&provider_id);
        Ok(Deletion::Gone)
    }

    async fn get(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::Get {
            provider_id: provider_id.to_owned(),
        })?;
        Ok(state.instances.get(provider_id).cloned())
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::List)?;
        Ok(state.instances.values().cloned().collect())
    }

    async fn is_drifted(
        &self,
        node_claim: &NodeClaimRequest,
        launched: &LaunchedNodeClaim,
        _node_class: &serde_json::Value,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::IsDrifted {
            node_claim_name: node_claim.name.clone(),
            provider_id: launched.provider_id.clone(),
        })?;
        Ok(state
            .drifted
            .get(&launched.provider_id)
            .or(state.drifted_by_default.as_ref())
            .cloned())
    }

    async fn repair_policies(&self) -> Result<Vec<RepairPolicy>, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::RepairPolicies)?;
        Ok(state.repair_policies.clone())
    }

    async fn watch_interruptions(&self) -> Result<InterruptionStream, CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::WatchInterruptions)?;
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        state.interruption_streams.push(sender);
        Ok(Box::pin(receiver))
    }

    async fn ack_interruptions(&self, event_ids: &[String]) -> Result<(), CloudProviderError> {
        let mut state = self.lock();
        state.begin(Call::AckInterruptions(event_ids.to_vec()))?;
        state.acknowledged.extend(event_ids.iter().cloned());
        Ok(())
    }
}

/// Zones of the fake cloud.
pub const FAKE_ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// An instance type as upstream's fake builds them: `cpu` cores, `memory_gib` GiB, `pods`
/// pods, linux on `arch`; spot in the first two zones and on-demand in all three, priced 0.1 per
/// core plus 0.1 per GiB (spot at 70 % of that); kube-reserved 100m CPU and 10 MiB.
pub fn instance_type(name: &str, cpu: i64, memory_gib: i64, pods: i64, arch: &str) -> InstanceType {
    const GIB: i64 = 1 << 30;
    let price = 0.1 * cpu as f64 + 0.1 * memory_gib as f64;
    let mut offerings = Vec::new();
    for (i, zone) in FAKE_ZONES.iter().enumerate() {
        if i < 2 {
            offerings.push(Offering::new(
                zone,
                CAPACITY_TYPE_SPOT,
                price * 0.7,
                true,
                Requirements::new(),
            ));
        }
        offerings.push(Offering::new(
            zone,
            CAPACITY_TYPE_ON_DEMAND,
            price,
            true,
            Requirements::new(),
        ));
    }
    let mut requirements = Requirements::new();
    requirements.add(Requirement::in_values(LABEL_INSTANCE_TYPE, [name]));
    requirements.add(Requirement::in_values(LABEL_ARCH, [arch]));
    requirements.add(Requirement::in_values(LABEL_OS, ["linux"]));
    requirements.add(Requirement::in_values(
        core_domain::labels::LABEL_TOPOLOGY_ZONE,
        FAKE_ZONES,
    ));
    requirements.add(Requirement::in_values(
        core_domain::labels::LABEL_CAPACITY_TYPE,
        [CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND],
    ));
    let capacity = ResourceList::new()
        .with("cpu", cpu * 1000)
        .with("memory", memory_gib * GIB)
        .with("pods", pods);
    let overhead = NodeOverhead {
        kube_reserved: ResourceList::new()
            .with("cpu", 100)
            .with("memory", 10 << 20),
        ..NodeOverhead::default()
    };
    InstanceType::new(name, requirements, offerings, capacity, overhead)
}

/// The default catalogue: `default-instance-type` (4 CPU, 4 GiB, 5 pods), `small-instance-type`
/// (2 CPU, 2 GiB), `arm-instance-type` (16 CPU, 128 GiB, arm64) and `single-pod-instance-type`
/// (pods=1).
pub fn default_instance_types() -> Vec<Arc<InstanceType>> {
    vec![
        Arc::new(instance_type("default-instance-type", 4, 4, 5, "amd64")),
        Arc::new(instance_type("small-instance-type", 2, 2, 5, "amd64")),
        Arc::new(instance_type("arm-instance-type", 16, 128, 5, "arm64")),
        Arc::new(instance_type("single-pod-instance-type", 4, 4, 1, "amd64")),
    ]
}

#[cfg(test)]
mod tests {
    use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE};
    use core_domain::quantity::Quantity;
    use core_domain::requirements::NodeSelectorRequirement;
    use core_domain::resources::ResourceName;
    use serde_json::json;

    use super::*;

    fn request(name: &str, requirements: Vec<NodeSelectorRequirement>) -> NodeClaimRequest {
        NodeClaimRequest {
            name: name.into(),
            requirements,
            resource_requests: Quantities::from([(ResourceName::CPU, Quantity::from_units(1))]),
            ..Default::default()
        }
    }

    fn requirement(key: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: Operator::In,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }

    #[tokio::test]
    async fn create_launches_the_cheapest_compatible_type_and_records_the_call() {
        let cloud = FakeCloudProvider::new();
        let claim = request(
            "default-1",
            vec![requirement(LABEL_CAPACITY_TYPE, &[CAPACITY_TYPE_ON_DEMAND])],
        );
        let launched = cloud.create(&claim, &json!({})).await.unwrap();
        assert_eq!(launched.labels[LABEL_INSTANCE_TYPE], "small-instance-type");
        assert_eq!(
            launched.labels[LABEL_CAPACITY_TYPE],
            CAPACITY_TYPE_ON_DEMAND
        );
        assert_eq!(launched.labels[LABEL_TOPOLOGY_ZONE], "test-zone-1");
        assert_eq!(launched.provider_id, "fake:///test-zone-1/i-00000001");
        assert_eq!(
            launched.allocatable[&ResourceName::CPU],
            Quantity::from_millis(1900)
        );
        assert_eq!(cloud.create_calls(), std::slice::from_ref(&claim));

        let again = cloud.create(&claim, &json!({})).await.unwrap();
        assert_eq!(again, launched, "idempotent by name");
        assert_eq!(cloud.instances().len(), 1);
        assert_eq!(cloud.calls_of(Rpc::Create).len(), 2);
    }

    #[tokio::test]
    async fn create_without_a_fitting_type_is_insufficient_capacity() {
        let cloud = FakeCloudProvider::new();
        let claim = request("big", vec![requirement(LABEL_ARCH, &["s390x"])]);
        assert!(matches!(
            cloud.create(&claim, &json!({})).await,
            Err(CloudProviderError::InsufficientCapacity(_))
        ));
    }

    #[tokio::test]
    async fn scripted_errors_come_once_each_in_order() {
        let cloud = FakeCloudProvider::new();
        cloud.fail_next(Rpc::Get, CloudProviderError::Unavailable("down".into()));
        cloud.fail_next(Rpc::Get, CloudProviderError::NotFound("odd".into()));
        assert_eq!(
            cloud.get("fake:///x").await,
            Err(CloudProviderError::Unavailable("down".into()))
        );
        assert_eq!(
            cloud.get("fake:///x").await,
            Err(CloudProviderError::NotFound("odd".into()))
        );
        assert_eq!(cloud.get("fake:///x").await, Ok(None));
        assert_eq!(cloud.calls_of(Rpc::Get).len(), 3, "failed calls are logged");

        cloud.set_unsupported(Rpc::List);
        assert_eq!(
            cloud.list().await,
            Err(CloudProviderError::Unsupported { rpc: "List" })
        );
    }

    #[tokio::test]
    async fn delete_ends_gone_and_can_take_two_calls() {
        let cloud = FakeCloudProvider::new();
        cloud.set_gradual_termination(true);
        let launched = cloud
            .create(&request("a", vec![]), &json!({}))
            .await
            .unwrap();
        assert_eq!(
            cloud.delete(&launched.provider_id, "a").await,
            Ok(Deletion::Terminating)
        );
        assert!(
            cloud
                .get(&launched.provider_id)
                .await
                .unwrap()
                .unwrap()
                .is_deleting()
        );
        assert_eq!(
            cloud.delete(&launched.provider_id, "a").await,
            Ok(Deletion::Gone)
        );
        assert_eq!(cloud.get(&launched.provider_id).await, Ok(None));
        assert_eq!(
            cloud.delete("fake:///never", "b").await,
            Ok(Deletion::Gone),
            "unknown is gone"
        );
        // With no provider ID, whatever was launched for the name goes.
        cloud.set_gradual_termination(false);
        cloud
            .create(&request("c", vec![]), &json!({}))
            .await
            .unwrap();
        assert_eq!(cloud.delete("", "c").await, Ok(Deletion::Gone));
        assert!(cloud.instances().is_empty());
    }

    #[tokio::test]
    async fn reserved_offerings_are_used_up() {
        let mut it = instance_type("reserved-type", 2, 2, 5, "amd64");
        let mut offerings = it.offerings().to_vec();
        let mut reserved = Offering::new(
            "test-zone-1",
            CAPACITY_TYPE_RESERVED,
            0.0,
            true,
            Requirements::new(),
        );
        reserved.reservation_capacity = Some(1);
        offerings.push(reserved);
        it = InstanceType::new(
            it.name(),
            it.requirements().clone(),
            offerings,
            it.capacity().clone(),
            it.overhead().clone(),
        );
        let cloud = FakeCloudProvider::new();
        cloud.set_instance_types(vec![Arc::new(it)]);
        let first = cloud
            .create(&request("r1", vec![]), &json!({}))
            .await
            .unwrap();
        assert_eq!(first.labels[LABEL_CAPACITY_TYPE], CAPACITY_TYPE_RESERVED);
        let second = cloud
            .create(&request("r2", vec![]), &json!({}))
            .await
            .unwrap();
        assert_ne!(second.labels[LABEL_CAPACITY_TYPE], CAPACITY_TYPE_RESERVED);
        let catalogue = cloud
            .instance_types(&json!({"metadata": {"name": "any"}}), None)
            .await
            .unwrap();
        let reserved = catalogue[0]
            .offerings()
            .iter()
            .find(|o| o.capacity_type.as_ref() == CAPACITY_TYPE_RESERVED)
            .unwrap();
        assert!(!reserved.available);
        assert_eq!(reserved.reservation_capacity, Some(0));
    }

    #[tokio::test]
    async fn instance_types_and_errors_per_node_pool() {
        let cloud = FakeCloudProvider::new();
        cloud.set_instance_types_for_node_pool(
            "gpu",
            vec![Arc::new(instance_type("gpu-type", 8, 32, 10, "amd64"))],
        );
        cloud.fail_node_pool(
            "broken",
            CloudProviderError::NodeClassNotReady("no subnets".into()),
        );
        let pool = |name: &str| json!({"metadata": {"name": name}});
        assert_eq!(
            cloud
                .instance_types(&pool("gpu"), None)
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            cloud
                .instance_types(&pool("default"), None)
                .await
                .unwrap()
                .len(),
            4
        );
        assert!(matches!(
            cloud.instance_types(&pool("broken"), None).await,
            Err(CloudProviderError::NodeClassNotReady(_))
        ));
        assert_eq!(
            cloud.calls_of(Rpc::GetInstanceTypes)[2],
            Call::InstanceTypes {
                node_pool: "broken".into()
            }
        );
    }

    #[tokio::test]
    async fn drift_answers_per_instance_and_by_default() {
        let cloud = FakeCloudProvider::new();
        let claim = request("d", vec![]);
        let launched = cloud.create(&claim, &json!({})).await.unwrap();
        let node_class = json!({});
        assert_eq!(
            cloud.is_drifted(&claim, &launched, &node_class).await,
            Ok(None)
        );
        let ami = DriftReason {
            reason: "AMIDrift".into(),
            message: "ami-1 → ami-2".into(),
        };
        cloud.set_drifted_by_default(Some(ami.clone()));
        assert_eq!(
            cloud.is_drifted(&claim, &launched, &node_class).await,
            Ok(Some(ami))
        );
        let subnet = DriftReason {
            reason: "SubnetDrift".into(),
            message: String::new(),
        };
        cloud.set_drifted(&launched.provider_id, Some(subnet.clone()));
        assert_eq!(
            cloud.is_drifted(&claim, &launched, &node_class).await,
            Ok(Some(subnet))
        );
        assert_eq!(
            cloud.calls_of(Rpc::IsDrifted)[0],
            Call::IsDrifted {
                node_claim_name: "d".into(),
                provider_id: launched.provider_id.clone()
            }
        );
    }

    #[tokio::test]
    async fn allowed_create_calls_limit_launches() {
        let cloud = FakeCloudProvider::new();
        cloud.set_allowed_create_calls(1);
        cloud
            .create(&request("a", vec![]), &json!({}))
            .await
            .unwrap();
        assert!(
            cloud
                .create(&request("b", vec![]), &json!({}))
                .await
                .is_err()
        );
        assert_eq!(cloud.instances().len(), 1);
    }

    #[tokio::test]
    async fn list_shows_inserted_and_launched_instances_and_repair_policies_default() {
        let cloud = FakeCloudProvider::new();
        let launched = cloud
            .create(&request("a", vec![]), &json!({}))
            .await
            .unwrap();
        cloud.insert_instance(crate::controllers::testing::running_instance(
            None,
            "fake:///test-zone-2/leaked",
        ));
        let listed: Vec<String> = cloud
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|i| i.provider_id)
            .collect();
        assert_eq!(
            listed,
            [
                launched.provider_id.clone(),
                "fake:///test-zone-2/leaked".into()
            ]
        );
        assert!(cloud.remove_instance(&launched.provider_id));
        assert_eq!(cloud.list().await.unwrap().len(), 1);
        assert_eq!(
            cloud.repair_policies().await.unwrap()[0].condition_type,
            "BadNode"
        );
    }
}
