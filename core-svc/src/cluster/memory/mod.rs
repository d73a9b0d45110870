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
//!
//! This module holds the cluster, its test hooks (the kubelet's and the scheduler's writes) and
//! the [`Cluster`] port; `tables` the storage and what is derived from it, `write` the write
//! semantics, `admission` what is refused before a write, `evict` the eviction subresource.

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
    Cluster, ClusterError, ClusterObject, DeleteOptions, FieldError, Preconditions, SlimPod,
    Snapshot, api_group, sort_key,
};
use crate::clock::Clock;
use crate::objects::{is_terminal, is_terminating};
use crate::pdb::{
    self, UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW, UNHEALTHY_POD_EVICTION_IF_HEALTHY_BUDGET,
};

mod admission;
mod evict;
mod tables;
mod write;

use admission::*;
use evict::*;
use tables::*;
use write::*;

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
                        pod_table_version: 0,
                        slim_pods: SlimPods::default(),
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

    /// The Pods whole, as stored, in (namespace, name) order: what an API server's front door
    /// serves (a [`Snapshot`] holds them as core reads them, [`SlimPod`]s).
    pub fn stored_pods(&self) -> Vec<Arc<Pod>> {
        self.lock().tables.list()
    }

    /// The scheduler's binding: sets the pod's `spec.nodeName` and its `PodScheduled`
    /// condition. Conflict when the pod is terminating or bound elsewhere; binding again to the
    /// same node changes nothing.
    pub fn bind_pod(&self, namespace: &str, name: &str, node: &str) -> Result<Pod, ClusterError> {
        self.modify_pod(namespace, name, |pod, facts, now| {
            if pod.metadata.deletion_timestamp.is_some() {
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
            state.tables.sync_slim_pods();
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
                pods: tables.slim_pods.pods.clone(),
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
            Ok(object.map(|object| with_derived_status(object, &mut state.tables)))
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

#[cfg(test)]
mod tests;
