//! [`InMemoryCluster`]: the cluster port in memory, with the API server's semantics, for tests
//! and the simulator.
//!
//! What it models, beyond storage: resourceVersions from one counter, status subresources,
//! finalizers and graceful pod deletion, generateName, UIDs, the eviction subresource with the
//! disruption controller's PDB arithmetic ([`crate::pdb`]), and NodePool / NodeClaim admission
//! ([`NodePool::validate`], [`NodeClaim::validate_update`], ...). What it leaves out: watches
//! (callers read snapshots), namespaces as objects, and workload controllers. A PDB's status is
//! the one the disruption controller would write, computed whenever it is read; the scale of a
//! budget's workloads, which the disruption controller reads from their controllers, is taken
//! to be the number of live pods that have a controller.
//!
//! Everything is deterministic: names and UIDs come from the seed, times from the [`Clock`].

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use core_domain::hash::SplitMix64;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Pod, PodCondition, PodStatus},
    policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus},
    scheduling::v1::PriorityClass,
};
use k8s_openapi::apimachinery::pkg::{
    apis::meta::v1::{ObjectMeta, Time},
    util::intstr::IntOrString,
};
use karpenter_api::{LabelPolicy, NodeClaim, NodeClassReference, NodePool, ValidationError};
use kube::core::DynamicObject;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, FieldError, Preconditions, Snapshot,
    api_group,
};
use crate::clock::Clock;
use crate::objects::{is_terminal, is_terminating};
use crate::pdb::{
    self, UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW, UNHEALTHY_POD_EVICTION_IF_HEALTHY_BUDGET,
};

/// A Pod's grace period when neither it nor the delete call sets one.
const DEFAULT_POD_GRACE_PERIOD_SECONDS: i64 = 30;
/// Kubernetes' alphabet for generated names: no vowels (no words) and no look-alikes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// How many random characters generateName appends.
const GENERATED_SUFFIX_LENGTH: usize = 5;
/// The longest generateName prefix kept, so that prefix and suffix fit in 63 characters.
const MAX_GENERATE_NAME_PREFIX: usize = 63 - GENERATED_SUFFIX_LENGTH;
/// How many names generateName tries before giving up with AlreadyExists.
const GENERATE_NAME_ATTEMPTS: usize = 8;
const MAX_NAME_LENGTH: usize = 253;

/// The cluster API in memory. Thread-safe; clones share the same cluster.
#[derive(Clone)]
pub struct InMemoryCluster {
    shared: Arc<Shared>,
}

struct Shared {
    clock: Arc<dyn Clock>,
    policy: LabelPolicy,
    state: Mutex<State>,
}

impl std::fmt::Debug for InMemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("InMemoryCluster");
        // try_lock: formatting from inside a call that holds the lock must not deadlock.
        if let Ok(state) = self.shared.state.try_lock() {
            debug
                .field("objects", &state.tables.count())
                .field("resource_version", &state.counters.resource_version);
        }
        debug.finish_non_exhaustive()
    }
}

struct State {
    counters: Counters,
    tables: Tables,
    outage: Outage,
}

/// The values every write draws from.
struct Counters {
    resource_version: u64,
    random: SplitMix64,
}

impl Counters {
    fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn next_uid(&mut self) -> String {
        let high = self.random.next_u64();
        let low = self.random.next_u64();
        // Shaped as a version 4 UUID, as the API server's are.
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0x0fff,
            0x8000 | (low >> 48) & 0x3fff,
            low & 0xffff_ffff_ffff
        )
    }

    fn next_name_suffix(&mut self) -> String {
        (0..GENERATED_SUFFIX_LENGTH)
            .map(|_| {
                let index = self.random.next_u64() % NAME_ALPHABET.len() as u64;
                char::from(NAME_ALPHABET[index as usize])
            })
            .collect()
    }
}

/// Simulated API outages.
#[derive(Default)]
struct Outage {
    unavailable: bool,
    failing_calls: usize,
}

impl Outage {
    fn check(&mut self) -> Result<(), ClusterError> {
        if self.unavailable {
            return Err(ClusterError::Unavailable(
                "in-memory API server switched off".to_owned(),
            ));
        }
        if self.failing_calls > 0 {
            self.failing_calls -= 1;
            return Err(ClusterError::Unavailable(
                "in-memory API server failed the call as told".to_owned(),
            ));
        }
        Ok(())
    }
}

/// Objects of one kind by (namespace, name); the empty namespace for cluster-scoped kinds.
/// Each object behind an `Arc`: a snapshot shares them instead of copying every object, and a
/// write replaces the one it changes.
type Table<T> = BTreeMap<(String, String), Arc<T>>;

struct Tables {
    /// One `Table<K>` per [`ClusterObject`] kind, keyed by the kind's `TypeId`.
    typed: HashMap<TypeId, Box<dyn Any + Send>>,
    /// Node classes by (API group, kind).
    node_classes: BTreeMap<(String, String), Table<DynamicObject>>,
    /// Moves whenever the Pod or PodDisruptionBudget table is handed out for writing: the
    /// budgets' derived statuses read nothing else.
    budget_inputs: u64,
    /// Moves whenever the PodDisruptionBudget table is handed out for writing.
    budget_table_version: u64,
    /// The budgets with their derived statuses and allowances, as of `budget_inputs` = `.0`.
    /// Every snapshot and every eviction needs them, so they are derived again only after a pod
    /// or budget may have changed.
    derived_budgets: Option<(u64, Arc<[DerivedBudget]>)>,
    /// Which budgets select which pods, kept from one derivation to the next.
    budget_members: BudgetMembers,
}

/// A budget as read, with the allowance its status was derived from.
struct DerivedBudget {
    budget: Arc<PodDisruptionBudget>,
    allowance: pdb::PdbAllowance,
}

/// Which budgets select each pod, kept between derivations. Matching every pod against every
/// budget's selector after each pod write was most of the in-memory API server's time in a
/// fleet roll (1,800 pods, 18 budgets, a write every few milliseconds). A write replaces the
/// pod's `Arc`, so a pod whose `Arc` is the one matched last time is selected by the same
/// budgets; a write to any budget starts over.
#[derive(Default)]
struct BudgetMembers {
    /// The `budget_table_version` the entries were matched against.
    budget_table_version: u64,
    /// By the address of the pod's `Arc`: that `Arc` (held, so that the address cannot be
    /// reused by another pod while the entry lives) and the positions, in the budget table's
    /// order, of the budgets that select the pod.
    by_pod: HashMap<usize, (Arc<Pod>, Vec<usize>)>,
}

impl BudgetMembers {
    /// For each of `budgets` (the budget table, in order), the pods it selects, matching only
    /// the pods written since the last call; what the pods of the last call that are gone
    /// held is dropped.
    fn select<'p>(
        &mut self,
        budgets: &[Arc<PodDisruptionBudget>],
        budget_table_version: u64,
        pods: impl Iterator<Item = &'p Arc<Pod>>,
    ) -> Vec<Vec<&'p Pod>> {
        if self.budget_table_version != budget_table_version {
            self.by_pod.clear();
            self.budget_table_version = budget_table_version;
        }
        let selectors: Vec<_> = budgets.iter().map(|budget| pdb::selector(budget)).collect();
        let mut selected = vec![Vec::new(); budgets.len()];
        let mut next = HashMap::with_capacity(self.by_pod.len());
        for pod in pods {
            let address = Arc::as_ptr(pod) as usize;
            let positions = match self.by_pod.remove(&address) {
                Some((known, positions)) if Arc::ptr_eq(&known, pod) => positions,
                _ => budgets
                    .iter()
                    .zip(&selectors)
                    .enumerate()
                    .filter(|(_, (budget, selector))| pdb::selects(budget, selector.as_ref(), pod))
                    .map(|(position, _)| position)
                    .collect(),
            };
            for &position in &positions {
                if let Some(pods) = selected.get_mut(position) {
                    pods.push(pod.as_ref());
                }
            }
            next.insert(address, (Arc::clone(pod), positions));
        }
        self.by_pod = next;
        selected
    }

    /// The positions of the budgets that selected `pod` at the last [`Self::select`].
    fn of(&self, pod: &Arc<Pod>) -> &[usize] {
        match self.by_pod.get(&(Arc::as_ptr(pod) as usize)) {
            Some((known, positions)) if Arc::ptr_eq(known, pod) => positions,
            _ => &[],
        }
    }
}

impl Tables {
    fn table<K: ClusterObject>(&self) -> Option<&Table<K>> {
        self.typed
            .get(&TypeId::of::<K>())
            .and_then(|table| table.downcast_ref())
    }

    fn table_mut<K: ClusterObject>(&mut self) -> &mut Table<K> {
        let kind = TypeId::of::<K>();
        if kind == TypeId::of::<Pod>() || kind == TypeId::of::<PodDisruptionBudget>() {
            self.budget_inputs += 1;
        }
        if kind == TypeId::of::<PodDisruptionBudget>() {
            self.budget_table_version += 1;
        }
        let slot = self
            .typed
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(Table::<K>::new()));
        match slot.downcast_mut() {
            Some(table) => table,
            // Each slot is created above, under its own type's TypeId.
            None => unreachable!("the table of {} has another type", K::KIND),
        }
    }

    fn list<K: ClusterObject>(&self) -> Vec<Arc<K>> {
        self.table::<K>()
            .map(|table| table.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The budgets, each with the status derived from the pods as they are now.
    fn budgets_with_status(&mut self) -> Vec<Arc<PodDisruptionBudget>> {
        self.derived_budgets()
            .iter()
            .map(|derived| Arc::clone(&derived.budget))
            .collect()
    }

    /// The budgets with their allowances from the pods as they are now, in table order.
    fn derived_budgets(&mut self) -> Arc<[DerivedBudget]> {
        if let Some((inputs, derived)) = &self.derived_budgets
            && *inputs == self.budget_inputs
        {
            return Arc::clone(derived);
        }
        let budgets = self.list::<PodDisruptionBudget>();
        let Self {
            typed,
            budget_members,
            budget_table_version,
            ..
        } = self;
        let pods = typed
            .get(&TypeId::of::<Pod>())
            .and_then(|table| table.downcast_ref::<Table<Pod>>())
            .into_iter()
            .flat_map(BTreeMap::values);
        let selected = budget_members.select(&budgets, *budget_table_version, pods);
        let derived: Arc<[DerivedBudget]> = budgets
            .iter()
            .zip(&selected)
            .map(|(budget, pods)| {
                let allowance = pdb::allowance_of_selected(budget, pods);
                let mut budget = PodDisruptionBudget::clone(budget);
                budget.status = Some(status_of(&budget, &allowance));
                DerivedBudget {
                    budget: Arc::new(budget),
                    allowance,
                }
            })
            .collect();
        self.derived_budgets = Some((self.budget_inputs, Arc::clone(&derived)));
        derived
    }

    fn len<K: ClusterObject>(&self) -> usize {
        self.table::<K>().map_or(0, BTreeMap::len)
    }

    fn count(&self) -> usize {
        self.len::<NodePool>()
            + self.len::<NodeClaim>()
            + self.len::<Node>()
            + self.len::<Pod>()
            + self.len::<PodDisruptionBudget>()
            + self.len::<DaemonSet>()
            + self.len::<PriorityClass>()
            + self.node_classes.values().map(BTreeMap::len).sum::<usize>()
    }

    /// The pods of `namespace`, in name order.
    fn pods_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.table::<Pod>().into_iter().flat_map(move |pods| {
            pods.range((namespace.to_owned(), String::new())..)
                .take_while(move |((pod_namespace, _), _)| pod_namespace == namespace)
                .map(|(_, pod)| pod.as_ref())
        })
    }
}

/// What the API server's behaviour depends on, per kind.
#[derive(Debug, Clone, Copy)]
struct KindFacts<'a> {
    kind: &'a str,
    namespaced: bool,
    status_subresource: bool,
    custom_resource: bool,
}

impl KindFacts<'static> {
    fn of<K: ClusterObject>() -> Self {
        Self {
            kind: K::KIND,
            namespaced: K::NAMESPACED,
            status_subresource: K::STATUS_SUBRESOURCE,
            custom_resource: K::CUSTOM_RESOURCE,
        }
    }
}

impl<'a> KindFacts<'a> {
    fn node_class(kind: &'a str) -> Self {
        Self {
            kind,
            namespaced: false,
            status_subresource: true,
            custom_resource: true,
        }
    }

    fn not_found(&self, namespace: &str, name: &str) -> ClusterError {
        ClusterError::NotFound {
            kind: self.kind.to_owned(),
            namespace: self.namespace(namespace),
            name: name.to_owned(),
        }
    }

    fn conflict(&self, namespace: &str, name: &str, message: String) -> ClusterError {
        ClusterError::Conflict {
            kind: self.kind.to_owned(),
            namespace: self.namespace(namespace),
            name: name.to_owned(),
            message,
        }
    }

    fn invalid(&self, name: &str, field: &str, message: impl Into<String>) -> ClusterError {
        ClusterError::invalid(self.kind, name, field, message)
    }

    fn namespace(&self, namespace: &str) -> Option<String> {
        self.namespaced.then(|| namespace.to_owned())
    }

    /// The table key for a request's namespace, refusing the wrong scope.
    fn key(&self, namespace: Option<&str>, name: &str) -> Result<(String, String), ClusterError> {
        match (self.namespaced, namespace) {
            (true, Some(namespace)) if !namespace.is_empty() => {
                Ok((namespace.to_owned(), name.to_owned()))
            }
            (true, _) => Err(self.invalid(name, "metadata.namespace", "Required value")),
            (false, None) => Ok((String::new(), name.to_owned())),
            (false, Some(_)) => Err(self.invalid(
                name,
                "metadata.namespace",
                format!("{} is cluster-scoped and takes no namespace", self.kind),
            )),
        }
    }
}

/// Per call: the time and the admission rules.
struct Env<'a> {
    now: Timestamp,
    policy: &'a LabelPolicy,
}

/// The part of an object a write replaces.
enum Write<'a, T> {
    Replace(&'a T),
    ReplaceStatus(&'a T),
    Patch(&'a Value),
    PatchStatus(&'a Value),
}

impl<T> Write<'_, T> {
    fn is_status(&self) -> bool {
        matches!(self, Self::ReplaceStatus(_) | Self::PatchStatus(_))
    }
}

/// What every stored kind is: node classes as well as the typed kinds.
trait Stored: kube::Resource + Clone + Serialize + DeserializeOwned + 'static {}
impl<T: kube::Resource + Clone + Serialize + DeserializeOwned + 'static> Stored for T {}

impl InMemoryCluster {
    /// An empty cluster on `clock`, admitting NodePools and NodeClaims under core's label rules;
    /// `seed` fixes the generated names and UIDs.
    pub fn new(clock: Arc<dyn Clock>, seed: u64) -> Self {
        Self::with_label_policy(clock, seed, LabelPolicy::core())
    }

    /// An empty cluster admitting NodePools and NodeClaims under `policy` (core's label rules
    /// plus a provider's).
    pub fn with_label_policy(clock: Arc<dyn Clock>, seed: u64, policy: LabelPolicy) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock,
                policy,
                state: Mutex::new(State {
                    counters: Counters {
                        resource_version: 0,
                        random: SplitMix64::new(seed),
                    },
                    tables: Tables {
                        typed: HashMap::new(),
                        node_classes: BTreeMap::new(),
                        budget_inputs: 0,
                        budget_table_version: 0,
                        derived_budgets: None,
                        budget_members: BudgetMembers::default(),
                    },
                    outage: Outage::default(),
                }),
            }),
        }
    }

    /// Switches the simulated API server off (every call answers
    /// [`ClusterError::Unavailable`]) or back on. The test hooks below keep working: they are
    /// the kubelet and the scheduler, not core.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.lock().outage.unavailable = unavailable;
    }

    /// Makes the next `calls` calls of the [`Cluster`] API fail with
    /// [`ClusterError::Unavailable`], without doing anything.
    pub fn fail_next(&self, calls: usize) {
        self.lock().outage.failing_calls = calls;
    }

    /// How many objects the cluster holds, of every kind.
    pub fn objects_count(&self) -> usize {
        self.lock().tables.count()
    }

    /// The scheduler's binding: sets the pod's `spec.nodeName` and its `PodScheduled`
    /// condition. Conflict when the pod is terminating or bound elsewhere; binding again to the
    /// same node changes nothing.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Pod, ClusterError> {
        self.modify_pod(namespace, name, |pod, facts, now| {
            if is_terminating(pod) {
                return Err(facts.conflict(
                    namespace,
                    name,
                    "pod is being deleted, cannot be assigned to a host".to_owned(),
                ));
            }
            let spec = pod.spec.get_or_insert_with(Default::default);
            match spec.node_name.as_deref() {
                Some(bound) if bound == node => return Ok(()),
                Some(bound) if !bound.is_empty() => {
                    return Err(facts.conflict(
                        namespace,
                        name,
                        format!("pod is already assigned to node {bound:?}"),
                    ));
                }
                _ => spec.node_name = Some(node.to_owned()),
            }
            set_condition(pod, "PodScheduled", true, now);
            Ok(())
        })
    }

    /// The kubelet's report on readiness: sets the pod's `Ready` condition, and `phase: Running`
    /// when it is ready.
    pub fn set_pod_ready(
        &self,
        namespace: &str,
        name: &str,
        ready: bool,
    ) -> Result<Pod, ClusterError> {
        self.modify_pod(namespace, name, |pod, _, now| {
            if ready {
                pod.status.get_or_insert_with(Default::default).phase = Some("Running".to_owned());
            }
            set_condition(pod, "Ready", ready, now);
            Ok(())
        })
    }

    /// The kubelet's report on the pod's phase (`Running`, `Succeeded`, `Failed`, ...).
    pub fn set_pod_phase(
        &self,
        namespace: &str,
        name: &str,
        phase: &str,
    ) -> Result<Pod, ClusterError> {
        self.modify_pod(namespace, name, |pod, _, _| {
            pod.status.get_or_insert_with(Default::default).phase = Some(phase.to_owned());
            Ok(())
        })
    }

    /// The kubelet confirming that a gracefully deleted pod stopped: the pod goes (or, with
    /// finalizers, waits only for them). Invalid when the pod is not being deleted.
    pub fn finish_pod_termination(&self, namespace: &str, name: &str) -> Result<(), ClusterError> {
        let mut state = self.lock();
        let facts = KindFacts::of::<Pod>();
        let key = facts.key(Some(namespace), name)?;
        let State {
            counters, tables, ..
        } = &mut *state;
        let pods = tables.table_mut::<Pod>();
        let pod = pods
            .get(&key)
            .ok_or_else(|| facts.not_found(namespace, name))?;
        if pod.metadata.deletion_timestamp.is_none() {
            return Err(facts.invalid(
                name,
                "metadata.deletionTimestamp",
                "the pod is not being deleted",
            ));
        }
        let env = Env {
            now: self.shared.clock.now(),
            policy: &self.shared.policy,
        };
        delete_object(
            pods,
            facts,
            key,
            &DeleteOptions::grace_period(0),
            counters,
            &env,
        )
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every write completes its checks before it changes anything, so a panic elsewhere
        // cannot leave a half-written object behind.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `call` on the state after the outage check, at the clock's current time.
    fn call<R>(
        &self,
        call: impl FnOnce(&mut State, &Env<'_>) -> Result<R, ClusterError>,
    ) -> Result<R, ClusterError> {
        let mut state = self.lock();
        state.outage.check()?;
        let env = Env {
            now: self.shared.clock.now(),
            policy: &self.shared.policy,
        };
        call(&mut state, &env)
    }

    /// Changes a pod as the kubelet or the scheduler would, bypassing the simulated outages;
    /// stores it with a new resourceVersion when it changed.
    fn modify_pod(
        &self,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Pod, KindFacts<'static>, Timestamp) -> Result<(), ClusterError>,
    ) -> Result<Pod, ClusterError> {
        let mut state = self.lock();
        let now = self.shared.clock.now();
        let facts = KindFacts::of::<Pod>();
        let key = facts.key(Some(namespace), name)?;
        let State {
            counters, tables, ..
        } = &mut *state;
        let pods = tables.table_mut::<Pod>();
        let current = pods
            .get(&key)
            .ok_or_else(|| facts.not_found(namespace, name))?;
        let mut pod = Pod::clone(current);
        change(&mut pod, facts, now)?;
        if pod == **current {
            return Ok(pod);
        }
        pod.metadata.resource_version = Some(counters.next_resource_version());
        pods.insert(key, Arc::new(pod.clone()));
        Ok(pod)
    }
}

/// Sets the pod condition `type_` to `status`, moving its transition time only when the
/// status changes.
fn set_condition(pod: &mut Pod, type_: &str, status: bool, now: Timestamp) {
    let status = if status { "True" } else { "False" };
    let conditions = pod
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(condition) if condition.status == status => {}
        Some(condition) => {
            condition.status = status.to_owned();
            condition.last_transition_time = Some(Time(now));
        }
        None => conditions.push(PodCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            last_transition_time: Some(Time(now)),
            ..Default::default()
        }),
    }
}

impl Cluster for InMemoryCluster {
    /// The cluster-wide resourceVersion counter: every write and every removal moves it.
    fn revision(&self) -> u64 {
        self.lock().counters.resource_version
    }

    async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        self.call(|state, _| {
            let pdbs = state.tables.budgets_with_status();
            let tables = &state.tables;
            Ok(Snapshot {
                node_pools: tables.list(),
                node_claims: tables.list(),
                node_classes: tables
                    .node_classes
                    .values()
                    .flat_map(|table| table.values().cloned())
                    .collect(),
                nodes: tables.list(),
                pods: tables.list(),
                pdbs,
                daemon_sets: tables.list(),
                priority_classes: tables.list(),
            })
        })
    }

    async fn get<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, ClusterError> {
        self.call(|state, _| {
            let key = KindFacts::of::<K>().key(namespace, name)?;
            let object = state
                .tables
                .table::<K>()
                .and_then(|table| table.get(&key))
                .map(|object| K::clone(object));
            Ok(object.map(|object| with_derived_status(object, &state.tables)))
        })
    }

    async fn create<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.call(|state, env| {
            let State {
                counters, tables, ..
            } = state;
            let object = create_object(
                tables.table_mut::<K>(),
                KindFacts::of::<K>(),
                object,
                counters,
                env,
            )?;
            Ok(with_derived_status(object, tables))
        })
    }

    async fn replace<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.typed_write(object, Write::Replace(object))
    }

    async fn replace_status<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.typed_write(object, Write::ReplaceStatus(object))
    }

    async fn merge_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.typed_patch::<K>(namespace, name, Write::Patch(patch))
    }

    async fn merge_patch_status<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.typed_patch::<K>(namespace, name, Write::PatchStatus(patch))
    }

    async fn delete<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        self.call(|state, env| {
            let facts = KindFacts::of::<K>();
            let key = facts.key(namespace, name)?;
            let State {
                counters, tables, ..
            } = state;
            delete_object(tables.table_mut::<K>(), facts, key, &options, counters, env)
        })
    }

    async fn evict(
        &self,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<(), ClusterError> {
        self.call(|state, env| evict_pod(state, env, namespace, name, preconditions))
    }

    async fn get_node_class(
        &self,
        reference: &NodeClassReference,
    ) -> Result<Option<DynamicObject>, ClusterError> {
        self.call(|state, _| {
            Ok(state
                .tables
                .node_classes
                .get(&(reference.group.clone(), reference.kind.clone()))
                .and_then(|table| table.get(&(String::new(), reference.name.clone())))
                .map(|object| DynamicObject::clone(object)))
        })
    }

    async fn create_node_class(
        &self,
        object: &DynamicObject,
    ) -> Result<DynamicObject, ClusterError> {
        self.call(|state, env| {
            let name = object.metadata.name.as_deref().unwrap_or_default();
            let Some(types) = object.types.as_ref().filter(|types| {
                !types.kind.is_empty() && !api_group(&types.api_version).is_empty()
            }) else {
                return Err(ClusterError::invalid(
                    "node class",
                    name,
                    "apiVersion",
                    "a node class needs an apiVersion with an API group, and a kind",
                ));
            };
            let table_key = (api_group(&types.api_version).to_owned(), types.kind.clone());
            let State {
                counters, tables, ..
            } = state;
            let table = tables.node_classes.entry(table_key).or_default();
            create_object(
                table,
                KindFacts::node_class(&types.kind),
                object,
                counters,
                env,
            )
        })
    }

    async fn merge_patch_node_class(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        self.node_class_patch(reference, Write::Patch(patch))
    }

    async fn merge_patch_node_class_status(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        self.node_class_patch(reference, Write::PatchStatus(patch))
    }

    async fn delete_node_class(
        &self,
        reference: &NodeClassReference,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        self.call(|state, env| {
            let facts = KindFacts::node_class(&reference.kind);
            let State {
                counters, tables, ..
            } = state;
            let table = tables
                .node_classes
                .get_mut(&(reference.group.clone(), reference.kind.clone()))
                .ok_or_else(|| facts.not_found("", &reference.name))?;
            let key = (String::new(), reference.name.clone());
            delete_object(table, facts, key, &options, counters, env)
        })
    }
}

impl InMemoryCluster {
    fn typed_write<K: ClusterObject>(
        &self,
        object: &K,
        write: Write<'_, K>,
    ) -> Result<K, ClusterError> {
        let (namespace, name) = super::sort_key(object);
        let namespace = K::NAMESPACED.then_some(namespace);
        self.typed_patch(namespace, name, write)
    }

    fn typed_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        write: Write<'_, K>,
    ) -> Result<K, ClusterError> {
        self.call(|state, env| {
            let facts = KindFacts::of::<K>();
            let key = facts.key(namespace, name)?;
            let State {
                counters, tables, ..
            } = state;
            let object = update_object(tables.table_mut::<K>(), facts, key, write, counters, env)?;
            Ok(with_derived_status(object, tables))
        })
    }

    fn node_class_patch(
        &self,
        reference: &NodeClassReference,
        write: Write<'_, DynamicObject>,
    ) -> Result<DynamicObject, ClusterError> {
        self.call(|state, env| {
            let facts = KindFacts::node_class(&reference.kind);
            let State {
                counters, tables, ..
            } = state;
            let table = tables
                .node_classes
                .get_mut(&(reference.group.clone(), reference.kind.clone()))
                .ok_or_else(|| facts.not_found("", &reference.name))?;
            let key = (String::new(), reference.name.clone());
            update_object(table, facts, key, write, counters, env)
        })
    }
}

fn to_json<T: Serialize>(
    object: &T,
    facts: KindFacts<'_>,
    name: &str,
) -> Result<Value, ClusterError> {
    serde_json::to_value(object).map_err(|error| facts.invalid(name, "", error.to_string()))
}

fn from_json<T: DeserializeOwned>(
    value: Value,
    facts: KindFacts<'_>,
    name: &str,
) -> Result<T, ClusterError> {
    serde_json::from_value(value).map_err(|error| facts.invalid(name, "", error.to_string()))
}

/// Sets `value.status` to `status`, or removes it for `None`.
fn set_status(value: &mut Value, status: Option<Value>) {
    if let Value::Object(map) = value {
        match status {
            Some(status) if !status.is_null() => {
                map.insert("status".to_owned(), status);
            }
            _ => {
                map.remove("status");
            }
        }
    }
}

/// RFC 7386.
fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Whether two serialized objects differ outside `metadata` and `status` (what `generation`
/// counts).
fn spec_differs(old: &Value, new: &Value) -> bool {
    let strip = |value: &Value| match value {
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| *key != "metadata" && *key != "status")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect::<serde_json::Map<_, _>>(),
        _ => serde_json::Map::new(),
    };
    strip(old) != strip(new)
}

/// DNS-1123 subdomain: what most kinds' names must be.
fn check_name(name: &str) -> Result<(), String> {
    let valid_characters = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let alphanumeric =
        |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if name.is_empty() {
        Err("Required value: name or generateName is required".to_owned())
    } else if name.len() > MAX_NAME_LENGTH {
        Err(format!("must be no more than {MAX_NAME_LENGTH} characters"))
    } else if !valid_characters
        || !alphanumeric(name.bytes().next())
        || !alphanumeric(name.bytes().next_back())
    {
        Err(format!(
            "{name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    } else {
        Ok(())
    }
}

fn validation_causes(errors: Vec<ValidationError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|error| FieldError {
            field: error.path.to_string(),
            message: error.violation.to_string(),
        })
        .collect()
}

/// The admission the API server applies to the kinds it has rules for, on create (`old`
/// `None`) and on update.
fn admit<T: Stored>(
    object: &T,
    old: Option<&T>,
    facts: KindFacts<'_>,
    env: &Env<'_>,
) -> Result<(), ClusterError> {
    let name = object.meta().name.as_deref().unwrap_or_default();
    let object: &dyn Any = object;
    let old: Option<&dyn Any> = old.map(|old| old as &dyn Any);
    let result = if let Some(pool) = object.downcast_ref::<NodePool>() {
        match old.and_then(|old| old.downcast_ref::<NodePool>()) {
            Some(old) => pool.validate_update(old, env.policy),
            None => pool.validate(env.policy),
        }
        .map_err(validation_causes)
    } else if let Some(claim) = object.downcast_ref::<NodeClaim>() {
        match old.and_then(|old| old.downcast_ref::<NodeClaim>()) {
            Some(old) => claim.validate_update(old, env.policy),
            None => claim.validate(env.policy),
        }
        .map_err(validation_causes)
    } else if let Some(pdb) = object.downcast_ref::<PodDisruptionBudget>() {
        check_budget(pdb)
    } else if let Some(pod) = object.downcast_ref::<Pod>() {
        check_pod_update(pod, old.and_then(|old| old.downcast_ref::<Pod>()))
    } else {
        Ok(())
    };
    result.map_err(|causes| ClusterError::Invalid {
        kind: facts.kind.to_owned(),
        name: name.to_owned(),
        causes,
    })
}

fn cause(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// The rule core could trip over: a pod is bound through the binding subresource
/// ([`InMemoryCluster::bind_pod`]), never by an update.
fn check_pod_update(pod: &Pod, old: Option<&Pod>) -> Result<(), Vec<FieldError>> {
    let node_name = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
    match old {
        Some(old) if node_name(old) != node_name(pod) => Err(vec![cause(
            "spec.nodeName",
            "Forbidden: pod updates may not change spec.nodeName; bind the pod instead",
        )]),
        _ => Ok(()),
    }
}

/// policy/v1's validation of a PodDisruptionBudget spec.
fn check_budget(pdb: &PodDisruptionBudget) -> Result<(), Vec<FieldError>> {
    let mut causes = Vec::new();
    let Some(spec) = &pdb.spec else {
        return Ok(());
    };
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        causes.push(cause(
            "spec",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (field, value) in [
        ("spec.minAvailable", &spec.min_available),
        ("spec.maxUnavailable", &spec.max_unavailable),
    ] {
        match value {
            Some(IntOrString::Int(n)) if *n < 0 => {
                causes.push(cause(field, "must be greater than or equal to 0"));
            }
            Some(IntOrString::String(text)) => match parse_percent(text) {
                Some(percent) if percent > 100 => {
                    causes.push(cause(field, "must not be greater than 100%"));
                }
                Some(_) => {}
                None => causes.push(cause(
                    field,
                    format!("{text:?}: must be an integer or percentage (e.g. '5%')"),
                )),
            },
            _ => {}
        }
    }
    if let Some(selector) = &spec.selector {
        for (index, requirement) in selector.match_expressions.iter().flatten().enumerate() {
            let field = format!("spec.selector.matchExpressions[{index}]");
            let values = requirement.values.as_deref().unwrap_or_default();
            match requirement.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => causes.push(cause(
                    &format!("{field}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                )),
                "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(cause(
                    &format!("{field}.values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => causes.push(cause(
                    &format!("{field}.operator"),
                    format!("{other:?}: not a valid selector operator"),
                )),
            }
        }
    }
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy
        && policy != UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW
        && policy != UNHEALTHY_POD_EVICTION_IF_HEALTHY_BUDGET
    {
        causes.push(cause(
            "spec.unhealthyPodEvictionPolicy",
            format!("{policy:?}: supported values: \"AlwaysAllow\", \"IfHealthyBudget\""),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// `"25%"` → 25.
fn parse_percent(text: &str) -> Option<u32> {
    text.strip_suffix('%')?.parse().ok()
}

fn create_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    object: &T,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<T, ClusterError> {
    let mut object = object.clone();
    let meta = object.meta_mut();
    let given_name = meta.name.clone().unwrap_or_default();
    let namespace = if facts.namespaced {
        match meta.namespace.as_deref() {
            Some(namespace) if !namespace.is_empty() => namespace.to_owned(),
            _ => return Err(facts.invalid(&given_name, "metadata.namespace", "Required value")),
        }
    } else {
        // The API server drops a namespace sent with a cluster-scoped object.
        meta.namespace = None;
        String::new()
    };
    if meta.resource_version.is_some() {
        return Err(facts.invalid(
            &given_name,
            "metadata.resourceVersion",
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let name = if !given_name.is_empty() {
        given_name
    } else if let Some(prefix) = meta.generate_name.as_deref().filter(|p| !p.is_empty()) {
        let prefix: String = prefix.chars().take(MAX_GENERATE_NAME_PREFIX).collect();
        let mut attempts = 0;
        loop {
            let candidate = format!("{prefix}{}", counters.next_name_suffix());
            if !table.contains_key(&(namespace.clone(), candidate.clone())) {
                break candidate;
            }
            attempts += 1;
            if attempts == GENERATE_NAME_ATTEMPTS {
                return Err(ClusterError::AlreadyExists {
                    kind: facts.kind.to_owned(),
                    namespace: facts.namespace(&namespace),
                    name: candidate,
                });
            }
        }
    } else {
        String::new()
    };
    check_name(&name).map_err(|message| facts.invalid(&name, "metadata.name", message))?;
    let key = (namespace, name.clone());
    if table.contains_key(&key) {
        return Err(ClusterError::AlreadyExists {
            kind: facts.kind.to_owned(),
            namespace: facts.namespace(&key.0),
            name,
        });
    }
    meta.name = Some(name.clone());
    normalize(meta);
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = Some(1);
    meta.creation_timestamp = Some(Time(env.now));
    if facts.status_subresource && facts.kind != Node::KIND {
        // The API server resets the status of what it creates; the kubelet creates its Node
        // with one.
        let mut value = to_json(&object, facts, &name)?;
        let status = (facts.kind == Pod::KIND).then(|| serde_json::json!({ "phase": "Pending" }));
        set_status(&mut value, status);
        object = from_json(value, facts, &name)?;
    }
    admit(&object, None, facts, env)?;
    let meta = object.meta_mut();
    meta.uid = Some(counters.next_uid());
    meta.resource_version = Some(counters.next_resource_version());
    table.insert(key, Arc::new(object.clone()));
    Ok(object)
}

fn update_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    key: (String, String),
    write: Write<'_, T>,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<T, ClusterError> {
    let (namespace, name) = (&key.0, &key.1);
    let old = table
        .get(&key)
        .ok_or_else(|| facts.not_found(namespace, name))?;
    if write.is_status() && !facts.status_subresource {
        return Err(facts.invalid(
            name,
            "status",
            format!("{} has no status subresource", facts.kind),
        ));
    }
    let old: &T = old;
    let old_value = to_json(old, facts, name)?;
    let (candidate, resource_version) = match &write {
        Write::Replace(object) | Write::ReplaceStatus(object) => {
            let resource_version = object.meta().resource_version.clone();
            if resource_version.is_none() && facts.custom_resource {
                return Err(facts.invalid(
                    name,
                    "metadata.resourceVersion",
                    "must be specified for an update",
                ));
            }
            (to_json(*object, facts, name)?, resource_version)
        }
        Write::Patch(patch) | Write::PatchStatus(patch) => {
            if !patch.is_object() {
                return Err(facts.invalid(name, "", "a merge patch must be a JSON object"));
            }
            let resource_version = match patch.pointer("/metadata/resourceVersion") {
                None | Some(Value::Null) => None,
                Some(Value::String(version)) => Some(version.clone()),
                Some(_) => {
                    return Err(facts.invalid(
                        name,
                        "metadata.resourceVersion",
                        "must be a string",
                    ));
                }
            };
            let mut patched = old_value.clone();
            apply_merge_patch(&mut patched, patch);
            (patched, resource_version)
        }
    };
    if let Some(version) = &resource_version
        && Some(version) != old.meta().resource_version.as_ref()
    {
        return Err(facts.conflict(
            namespace,
            name,
            "the object has been modified; please apply your changes to the latest version and \
             try again"
                .to_owned(),
        ));
    }
    let new_value = if write.is_status() {
        let mut value = old_value.clone();
        set_status(&mut value, candidate.get("status").cloned());
        value
    } else {
        let mut value = candidate;
        if facts.status_subresource {
            set_status(&mut value, old_value.get("status").cloned());
        }
        value
    };
    let mut new: T = from_json(new_value, facts, name)?;
    let old_meta = old.meta();
    let meta = new.meta_mut();
    if meta.name.as_deref() != Some(name.as_str())
        || (facts.namespaced && meta.namespace.as_deref() != Some(namespace.as_str()))
    {
        return Err(facts.invalid(
            name,
            "metadata.name",
            "the name and namespace of an object may not change",
        ));
    }
    if let Some(uid) = &meta.uid
        && Some(uid) != old_meta.uid.as_ref()
    {
        return Err(facts.conflict(
            namespace,
            name,
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old_meta.uid.as_deref().unwrap_or_default()
            ),
        ));
    }
    // What only the API server writes.
    meta.namespace = old_meta.namespace.clone();
    meta.uid = old_meta.uid.clone();
    meta.resource_version = old_meta.resource_version.clone();
    meta.creation_timestamp = old_meta.creation_timestamp.clone();
    meta.deletion_timestamp = old_meta.deletion_timestamp.clone();
    meta.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
    meta.generation = old_meta.generation;
    normalize(meta);
    if old_meta.deletion_timestamp.is_some() {
        let old_finalizers = old_meta.finalizers.as_deref().unwrap_or_default();
        if let Some(added) = meta
            .finalizers
            .iter()
            .flatten()
            .find(|finalizer| !old_finalizers.contains(finalizer))
        {
            return Err(facts.invalid(
                name,
                "metadata.finalizers",
                format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"),
            ));
        }
    }
    if !write.is_status() {
        admit(&new, Some(old), facts, env)?;
    }
    let new_value = to_json(&new, facts, name)?;
    if new_value == old_value {
        return Ok(T::clone(old));
    }
    let meta = new.meta_mut();
    if spec_differs(&old_value, &new_value) {
        meta.generation = Some(meta.generation.unwrap_or(0) + 1);
    }
    meta.resource_version = Some(counters.next_resource_version());
    if is_finished(meta) {
        table.remove(&key);
    } else {
        table.insert(key, Arc::new(new.clone()));
    }
    Ok(new)
}

/// Drops empty lists and maps, which the API server stores as absent.
fn normalize(meta: &mut ObjectMeta) {
    if meta.finalizers.as_ref().is_some_and(Vec::is_empty) {
        meta.finalizers = None;
    }
    if meta.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.labels = None;
    }
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.annotations = None;
    }
    if meta.owner_references.as_ref().is_some_and(Vec::is_empty) {
        meta.owner_references = None;
    }
}

/// Whether a deleted object has nothing left to wait for: no finalizer, no graceful
/// termination in progress.
fn is_finished(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
        && meta.finalizers.as_ref().is_none_or(Vec::is_empty)
        && meta.deletion_grace_period_seconds.unwrap_or(0) == 0
}

fn check_preconditions<T: Stored>(
    object: &T,
    preconditions: &Preconditions,
    facts: KindFacts<'_>,
    key: &(String, String),
) -> Result<(), ClusterError> {
    let meta = object.meta();
    if let Some(uid) = &preconditions.uid
        && Some(uid) != meta.uid.as_ref()
    {
        return Err(facts.conflict(
            &key.0,
            &key.1,
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta.uid.as_deref().unwrap_or_default()
            ),
        ));
    }
    if let Some(version) = &preconditions.resource_version
        && Some(version) != meta.resource_version.as_ref()
    {
        return Err(facts.conflict(
            &key.0,
            &key.1,
            format!(
                "Precondition failed: ResourceVersion in precondition: {version}, \
                 ResourceVersion in object meta: {}",
                meta.resource_version.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// The grace period a delete gives: pods only, as the pod strategy computes it.
fn grace_period_seconds<T: Stored>(object: &T, options: &DeleteOptions) -> i64 {
    let Some(pod) = (object as &dyn Any).downcast_ref::<Pod>() else {
        return 0;
    };
    let unscheduled = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .is_none_or(str::is_empty);
    if unscheduled || is_terminal(pod) {
        return 0;
    }
    let seconds = options.grace_period_seconds.unwrap_or_else(|| {
        pod.spec
            .as_ref()
            .and_then(|spec| spec.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_POD_GRACE_PERIOD_SECONDS)
    });
    // A negative grace period means "as soon as possible" but not a force delete.
    if seconds < 0 { 1 } else { seconds }
}

fn delete_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    key: (String, String),
    options: &DeleteOptions,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<(), ClusterError> {
    let object: &T = table
        .get(&key)
        .ok_or_else(|| facts.not_found(&key.0, &key.1))?;
    check_preconditions(object, &options.preconditions, facts, &key)?;
    let grace = grace_period_seconds(object, options);
    let mut object = T::clone(object);
    let meta = object.meta_mut();
    if let Some(deleting_since) = meta.deletion_timestamp.clone() {
        // Already being deleted: only an explicitly shorter grace period changes anything. The
        // deadline becomes the time of the first request plus the new period, as in
        // Kubernetes, so it only ever moves forward.
        let current = meta.deletion_grace_period_seconds.unwrap_or(0);
        let Some(requested) = options.grace_period_seconds.map(|seconds| seconds.max(0)) else {
            return Ok(());
        };
        if requested >= current {
            return Ok(());
        }
        let requested_at = deadline(deleting_since.0, -current);
        meta.deletion_timestamp = Some(Time(deadline(requested_at, requested)));
        meta.deletion_grace_period_seconds = Some(requested);
    } else {
        let no_finalizers = meta.finalizers.as_ref().is_none_or(Vec::is_empty);
        if no_finalizers && grace == 0 {
            table.remove(&key);
            counters.next_resource_version();
            return Ok(());
        }
        meta.deletion_timestamp = Some(Time(deadline(env.now, grace)));
        meta.deletion_grace_period_seconds = Some(grace);
    }
    meta.resource_version = Some(counters.next_resource_version());
    if is_finished(meta) {
        table.remove(&key);
    } else {
        table.insert(key, Arc::new(object));
    }
    Ok(())
}

/// `from` plus `seconds` (which may be negative), saturating at the ends of time.
fn deadline(from: Timestamp, seconds: i64) -> Timestamp {
    let fallback = if seconds < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    };
    from.saturating_add(SignedDuration::from_secs(seconds))
        .unwrap_or(fallback)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
}

/// The status the disruption controller writes for `pdb`. It reads the scale of the pods'
/// controllers; with no workload controllers here, their live pods stand in for it, which is
/// what [`pdb::allowance`] counts.
fn budget_status(pdb: &PodDisruptionBudget, tables: &Tables) -> PodDisruptionBudgetStatus {
    status_of(pdb, &budget_allowance(pdb, tables))
}

/// The status that says `allowance` of `pdb`.
fn status_of(
    pdb: &PodDisruptionBudget,
    allowance: &pdb::PdbAllowance,
) -> PodDisruptionBudgetStatus {
    PodDisruptionBudgetStatus {
        current_healthy: allowance.current_healthy,
        desired_healthy: allowance.desired_healthy,
        disruptions_allowed: allowance.disruptions_allowed,
        expected_pods: allowance.expected_pods,
        observed_generation: pdb.metadata.generation,
        ..Default::default()
    }
}

/// The budget's allowance from the pods of its namespace. Any stored status is ignored: here the
/// arithmetic is the disruption controller.
fn budget_allowance(pdb: &PodDisruptionBudget, tables: &Tables) -> pdb::PdbAllowance {
    let namespace = pdb.metadata.namespace.as_deref().unwrap_or_default();
    pdb::allowance(pdb, pdb::selector(pdb).as_ref(), tables.pods_in(namespace))
}

/// The object as read: a PodDisruptionBudget carries the status the disruption controller
/// would have written by now.
fn with_derived_status<K: ClusterObject>(mut object: K, tables: &Tables) -> K {
    if let Some(pdb) = (&mut object as &mut dyn Any).downcast_mut::<PodDisruptionBudget>() {
        let status = budget_status(pdb, tables);
        pdb.status = Some(status);
    }
    object
}

fn evict_pod(
    state: &mut State,
    env: &Env<'_>,
    namespace: &str,
    name: &str,
    preconditions: &Preconditions,
) -> Result<(), ClusterError> {
    let facts = KindFacts::of::<Pod>();
    let key = facts.key(Some(namespace), name)?;
    let State {
        counters, tables, ..
    } = state;
    let pod: Arc<Pod> = tables
        .table::<Pod>()
        .and_then(|pods| pods.get(&key))
        .cloned()
        .ok_or_else(|| facts.not_found(namespace, name))?;
    check_preconditions(pod.as_ref(), preconditions, facts, &key)?;
    // Terminal, Pending and terminating pods disrupt nothing more by going.
    let bypasses_budgets =
        is_terminal(&pod) || phase(&pod) == Some("Pending") || is_terminating(&pod);
    if !bypasses_budgets {
        check_budgets(&pod, tables, namespace, name)?;
    }
    let mut pod = Pod::clone(&pod);
    if !is_terminating(&pod) && !is_terminal(&pod) {
        pod = with_disruption_target(pod, env.now);
    }
    let pods = tables.table_mut::<Pod>();
    pods.insert(key.clone(), Arc::new(pod));
    delete_object(pods, facts, key, &DeleteOptions::default(), counters, env)
}

/// The eviction subresource's PodDisruptionBudget check for a pod that is running.
fn check_budgets(
    pod: &Arc<Pod>,
    tables: &mut Tables,
    namespace: &str,
    name: &str,
) -> Result<(), ClusterError> {
    let qualified = format!("{namespace}/{name}");
    let derived = tables.derived_budgets();
    let budgets: Vec<&DerivedBudget> = tables
        .budget_members
        .of(pod)
        .iter()
        .filter_map(|&position| derived.get(position))
        .collect();
    let (pdb, allowance) = match budgets.as_slice() {
        [] => return Ok(()),
        [derived] => (derived.budget.as_ref(), &derived.allowance),
        _ => {
            return Err(ClusterError::MultipleDisruptionBudgets {
                pod: qualified,
                budgets: budgets
                    .iter()
                    .map(|derived| derived.budget.metadata.name.clone().unwrap_or_default())
                    .collect(),
            });
        }
    };
    if allowance.admits_eviction(pod) {
        return Ok(());
    }
    let budget = pdb.metadata.name.clone().unwrap_or_default();
    Err(ClusterError::TooManyRequests {
        pod: qualified,
        reason: format!(
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption \
             budget {budget} needs {} healthy pods and has {} currently",
            allowance.desired_healthy, allowance.current_healthy
        ),
        budget,
    })
}

/// The condition the eviction subresource sets on the pods it deletes.
fn with_disruption_target(mut pod: Pod, now: Timestamp) -> Pod {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|condition| condition.type_ != "DisruptionTarget");
    conditions.push(PodCondition {
        type_: "DisruptionTarget".to_owned(),
        status: "True".to_owned(),
        reason: Some("EvictionByEvictionAPI".to_owned()),
        message: Some("Eviction API: evicting".to_owned()),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    });
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn given_rfc_7386_examples_then_the_merge_patch_gives_their_results() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut target, patch, expected) in cases {
            apply_merge_patch(&mut target, &patch);
            assert_eq!(target, expected, "patch {patch}");
        }
    }

    #[test]
    fn given_names_then_only_dns_subdomains_pass() {
        assert!(check_name("ip-10-0-0-1.ec2.internal").is_ok());
        assert!(check_name("default-x7b2k").is_ok());
        for bad in [
            "",
            "Upper",
            "-leading",
            "trailing-",
            "under_score",
            &"a".repeat(254),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn given_a_seed_then_uids_are_uuid_shaped_distinct_and_repeatable() {
        let uids = |seed| {
            let mut counters = Counters {
                resource_version: 0,
                random: SplitMix64::new(seed),
            };
            [counters.next_uid(), counters.next_uid()]
        };
        let [first, second] = uids(1);
        assert_ne!(first, second);
        assert_eq!(uids(1), [first.clone(), second]);
        assert_ne!(uids(2)[0], first);
        let groups: Vec<usize> = first.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{first}");
        assert_eq!(first.as_bytes()[14], b'4', "{first}");
    }

    /// The budgets' statuses in a snapshot, as (name, current healthy, expected pods).
    async fn budget_counts(cluster: &InMemoryCluster) -> Vec<(String, i32, i32)> {
        let snapshot = cluster.snapshot().await.unwrap();
        snapshot
            .pdbs
            .iter()
            .map(|pdb| {
                let status = pdb.status.clone().unwrap_or_default();
                let name = pdb.metadata.name.clone().unwrap_or_default();
                (name, status.current_healthy, status.expected_pods)
            })
            .collect()
    }

    #[tokio::test]
    async fn given_pods_and_budgets_rewritten_then_the_derived_statuses_follow_every_write() {
        let clock = crate::clock::FakeClock::new(Timestamp::UNIX_EPOCH);
        let cluster = InMemoryCluster::new(Arc::new(clock), 7);
        let pdb = |name: &str, app: &str| -> PodDisruptionBudget {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
            }))
            .unwrap()
        };
        cluster.create(&pdb("web", "web")).await.unwrap();
        cluster.create(&pdb("api", "api")).await.unwrap();
        for (name, app) in [("web-0", "web"), ("web-1", "web"), ("api-0", "api")] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "labels": {"app": app},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": app, "uid": app, "controller": true}]},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }))
            .unwrap();
            cluster.create(&pod).await.unwrap();
            cluster.bind_pod("default", name, "node-a").unwrap();
            cluster.set_pod_ready("default", name, true).unwrap();
        }
        assert_eq!(
            budget_counts(&cluster).await,
            [("api".to_owned(), 1, 1), ("web".to_owned(), 2, 2)]
        );

        // A pod's status changes (a new object, the same labels) and its labels change.
        cluster.set_pod_ready("default", "web-0", false).unwrap();
        assert_eq!(budget_counts(&cluster).await[1], ("web".to_owned(), 1, 2));
        cluster
            .merge_patch::<Pod>(
                Some("default"),
                "web-1",
                &json!({"metadata": {"labels": {"app": "api"}}}),
            )
            .await
            .unwrap();
        assert_eq!(
            budget_counts(&cluster).await,
            [("api".to_owned(), 2, 2), ("web".to_owned(), 0, 1)]
        );

        // A budget's selector changes: every pod is matched again.
        cluster
            .merge_patch::<PodDisruptionBudget>(
                Some("default"),
                "api",
                &json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}}),
            )
            .await
            .unwrap();
        assert_eq!(
            budget_counts(&cluster).await,
            [("api".to_owned(), 0, 1), ("web".to_owned(), 0, 1)]
        );

        // A deleted pod leaves its budget.
        cluster
            .delete::<Pod>(Some("default"), "web-0", DeleteOptions::default())
            .await
            .unwrap();
        cluster.finish_pod_termination("default", "web-0").unwrap();
        assert_eq!(
            budget_counts(&cluster).await,
            [("api".to_owned(), 0, 0), ("web".to_owned(), 0, 0)]
        );
    }
}
