//! The server's state: the in-memory cluster, the watch history fed by diffing it, and the
//! plain store of Leases and Events.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use core_svc::cluster::{Cluster, ClusterError, InMemoryCluster, Snapshot};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::apps;
use super::paging::KeptLists;
use super::rbac::{self, Rbac};
use super::resources::{self, Backend, NodeClassResource, RBAC_GROUP, Resource, Typed};

/// How many watch events the history keeps; a watch resuming from an older version gets
/// `410 Gone`.
pub(crate) const HISTORY_LENGTH: usize = 50_000;

/// One watch event.
#[derive(Debug, Clone)]
pub(crate) struct WatchEvent {
    /// Index of the resource in the server's table.
    pub(crate) resource: usize,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub(crate) type_: &'static str,
    /// The event's resourceVersion (the object's, or the deletion's).
    pub(crate) resource_version: u64,
    /// The object's namespace (empty for cluster-scoped ones).
    pub(crate) namespace: String,
    /// The object, with `apiVersion`, `kind` and its resourceVersion.
    pub(crate) object: Value,
}

/// The watch history and what the last diff saw.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Events, oldest first.
    pub(crate) events: VecDeque<WatchEvent>,
    /// Per resource: the newest resourceVersion no longer in `events` (a watch from before it
    /// is `410 Gone`).
    pub(crate) compacted: BTreeMap<usize, u64>,
    /// Per resource: the newest resourceVersion published or listed.
    pub(crate) latest: BTreeMap<usize, u64>,
    /// What the last diff saw: (resource, namespace, name) → (resourceVersion, object).
    seen: BTreeMap<(usize, String, String), (u64, Value)>,
    /// Events published since the start.
    pub(crate) published: u64,
}

impl History {
    fn push(&mut self, event: WatchEvent) {
        let latest = self.latest.entry(event.resource).or_default();
        *latest = (*latest).max(event.resource_version);
        self.events.push_back(event);
        self.published += 1;
        while self.events.len() > HISTORY_LENGTH {
            if let Some(dropped) = self.events.pop_front() {
                self.compacted
                    .insert(dropped.resource, dropped.resource_version);
            }
        }
    }
}

/// Leases and Events, with resourceVersions of their own (resourceVersions are opaque and per
/// resource: a client never compares two kinds').
#[derive(Debug, Default)]
pub(crate) struct Plain {
    counter: u64,
    objects: BTreeMap<(usize, String, String), Value>,
    names: u64,
}

/// Everything the server holds.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) cluster: InMemoryCluster,
    pub(crate) resources: Vec<Resource>,
    history: Mutex<History>,
    plain: Mutex<Plain>,
    published: watch::Sender<u64>,
    /// Eviction requests received.
    pub(crate) evictions: std::sync::atomic::AtomicU64,
    /// Serializes diffs, so events come out in resourceVersion order.
    sync_lock: tokio::sync::Mutex<()>,
    /// The states paged lists are cut from.
    kept_lists: Mutex<KeptLists>,
    /// List pages served after a first one (requests with a `continue` token).
    pub(crate) continued_lists: std::sync::atomic::AtomicU64,
    /// The RBAC decisions made for service accounts.
    pub(crate) rbac: Rbac,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn version_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The objects of `typed` in `snapshot`, but Pods from `pods`: a snapshot holds them slim, an
/// API server serves them whole.
fn typed_objects(
    snapshot: &Snapshot,
    pods: &[std::sync::Arc<k8s_openapi::api::core::v1::Pod>],
    typed: Typed,
) -> Vec<(String, String, u64, Value)> {
    fn each<K: kube::Resource + Serialize>(
        list: &[std::sync::Arc<K>],
    ) -> Vec<(String, String, u64, Value)> {
        list.iter()
            .map(|object| {
                let meta = object.meta();
                (
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                    version_of(meta),
                    serde_json::to_value(object.as_ref()).unwrap_or(Value::Null),
                )
            })
            .collect()
    }
    match typed {
        Typed::NodePool => each(&snapshot.node_pools),
        Typed::NodeClaim => each(&snapshot.node_claims),
        Typed::Node => each(&snapshot.nodes),
        Typed::Pod => each(pods),
        Typed::PodDisruptionBudget => each(&snapshot.pdbs),
        Typed::DaemonSet => each(&snapshot.daemon_sets),
        Typed::PriorityClass => each(&snapshot.priority_classes),
    }
}

/// Sets `apiVersion`, `kind` and (when given) `metadata.resourceVersion` on `object`.
pub(crate) fn stamp(resource: &Resource, object: &mut Value, resource_version: Option<u64>) {
    if let Value::Object(map) = object {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(resource.api_version()),
        );
        map.insert("kind".to_owned(), Value::String(resource.kind.clone()));
        if let Some(version) = resource_version {
            let metadata = map
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(metadata) = metadata {
                metadata.insert(
                    "resourceVersion".to_owned(),
                    Value::String(version.to_string()),
                );
            }
        }
    }
}

impl State {
    pub(crate) fn new(cluster: InMemoryCluster, node_classes: Vec<NodeClassResource>) -> Self {
        let (published, _) = watch::channel(0);
        Self {
            cluster,
            resources: resources::all(&node_classes),
            history: Mutex::new(History::default()),
            plain: Mutex::new(Plain::default()),
            published,
            evictions: std::sync::atomic::AtomicU64::new(0),
            sync_lock: tokio::sync::Mutex::new(()),
            kept_lists: Mutex::new(KeptLists::default()),
            continued_lists: std::sync::atomic::AtomicU64::new(0),
            rbac: Rbac::default(),
        }
    }

    /// The Roles, ClusterRoles and their bindings stored now.
    pub(crate) fn rbac_objects(&self) -> rbac::Objects {
        let index_of = |plural: &str| {
            self.resources
                .iter()
                .position(|r| r.group == RBAC_GROUP && r.plural == plural)
        };
        let plain = lock(&self.plain);
        let of = |plural: &str| -> Vec<Value> {
            let Some(index) = index_of(plural) else {
                return Vec::new();
            };
            plain
                .objects
                .iter()
                .filter(|((i, _, _), _)| *i == index)
                .map(|(_, object)| object.clone())
                .collect()
        };
        rbac::Objects {
            roles: of("roles"),
            role_bindings: of("rolebindings"),
            cluster_roles: of("clusterroles"),
            cluster_role_bindings: of("clusterrolebindings"),
        }
    }

    pub(crate) fn events_published(&self) -> u64 {
        lock(&self.history).published
    }

    pub(crate) fn compact(&self) {
        let mut history = lock(&self.history);
        let latest = history.latest.clone();
        history.events.clear();
        history.compacted = latest;
        lock(&self.kept_lists).clear();
    }

    /// Keeps the state a paged list of resource `index` at `version` is cut from.
    pub(crate) fn keep_list(&self, index: usize, version: u64, items: &Arc<Vec<Value>>) {
        lock(&self.kept_lists).keep(index, version, items);
    }

    /// The state of resource `index` a paged list at `version` is cut from, unless it is gone
    /// (forgotten, or older than the watch history: compacted).
    pub(crate) fn kept_list(&self, index: usize, version: u64) -> Option<Arc<Vec<Value>>> {
        let compacted = lock(&self.history)
            .compacted
            .get(&index)
            .copied()
            .unwrap_or(0);
        if version < compacted {
            return None;
        }
        lock(&self.kept_lists).find(index, version)
    }

    /// A receiver that changes whenever events are published.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.published.subscribe()
    }

    pub(crate) fn history(&self) -> MutexGuard<'_, History> {
        lock(&self.history)
    }

    /// Diffs the cluster against what was last seen and publishes the differences.
    pub(crate) async fn sync(&self) {
        let _serial = self.sync_lock.lock().await;
        // Read before the snapshot: every change the snapshot misses has a later version.
        let revision = self.cluster.revision();
        let snapshot = match self.cluster.snapshot().await {
            Ok(snapshot) => snapshot,
            // The in-memory API server is switched off: nothing to publish.
            Err(_) => return,
        };
        let pods = self.cluster.stored_pods();
        let mut current: BTreeMap<(usize, String, String), (u64, Value)> = BTreeMap::new();
        for (index, resource) in self.resources.iter().enumerate() {
            let objects = match &resource.backend {
                Backend::Typed(typed) => typed_objects(&snapshot, &pods, *typed),
                Backend::NodeClass => snapshot
                    .node_classes
                    .iter()
                    .filter(|object| {
                        object.types.as_ref().is_some_and(|types| {
                            types.kind == resource.kind
                                && types
                                    .api_version
                                    .starts_with(&format!("{}/", resource.group))
                        })
                    })
                    .map(|object| {
                        (
                            String::new(),
                            object.metadata.name.clone().unwrap_or_default(),
                            version_of(&object.metadata),
                            serde_json::to_value(object.as_ref()).unwrap_or(Value::Null),
                        )
                    })
                    .collect(),
                Backend::Plain => continue,
            };
            for (namespace, name, version, mut object) in objects {
                stamp(resource, &mut object, None);
                current.insert((index, namespace, name), (version, object));
            }
        }
        let mut history = lock(&self.history);
        let mut events = Vec::new();
        for (key, (version, object)) in &current {
            match history.seen.get(key) {
                Some((seen, _)) if seen == version => {}
                Some(_) => events.push((key.clone(), "MODIFIED", *version, object.clone())),
                None => events.push((key.clone(), "ADDED", *version, object.clone())),
            }
        }
        for (key, (version, object)) in &history.seen {
            if !current.contains_key(key) {
                let deleted_at = revision.max(version + 1);
                let mut object = object.clone();
                if let Some(resource) = self.resources.get(key.0) {
                    stamp(resource, &mut object, Some(deleted_at));
                }
                events.push((key.clone(), "DELETED", deleted_at, object));
            }
        }
        // In resourceVersion order, as a watch delivers them.
        events.sort_by_key(|(_, _, version, _)| *version);
        let any = !events.is_empty();
        for ((resource, namespace, _), type_, resource_version, object) in events {
            history.push(WatchEvent {
                resource,
                type_,
                resource_version,
                namespace,
                object,
            });
        }
        for (index, resource) in self.resources.iter().enumerate() {
            if resource.backend != Backend::Plain {
                let latest = history.latest.entry(index).or_default();
                *latest = (*latest).max(revision);
            }
        }
        history.seen = current;
        let published = history.published;
        drop(history);
        if any {
            self.published.send_replace(published);
        }
    }

    /// The objects of `resource` (in `namespace`, or all) and the list's resourceVersion.
    pub(crate) async fn list(&self, index: usize, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let Some(resource) = self.resources.get(index) else {
            return (Vec::new(), 0);
        };
        if resource.backend == Backend::Plain {
            let plain = lock(&self.plain);
            let items = plain
                .objects
                .iter()
                .filter(|((i, ns, _), _)| *i == index && namespace.is_none_or(|n| n == ns))
                .map(|(_, object)| object.clone())
                .collect();
            return (items, plain.counter);
        }
        self.sync().await;
        let history = lock(&self.history);
        let items = history
            .seen
            .iter()
            .filter(|((i, ns, _), _)| *i == index && namespace.is_none_or(|n| n == ns))
            .map(|(_, (_, object))| object.clone())
            .collect();
        let version = history.latest.get(&index).copied().unwrap_or(0);
        (items, version)
    }

    /// A call on the plain store.
    ///
    /// A resource with a `status` subresource (Deployments) is written as the API server
    /// writes such kinds: a write of the object keeps the stored status and moves
    /// `metadata.generation` when anything outside `metadata` and `status` changed; a write of
    /// `/status` changes the status only; what only the server writes (uid,
    /// creationTimestamp, generation) is kept; a write that changes nothing keeps the
    /// resourceVersion. Leases and Events, which have no status subresource, are stored as
    /// sent.
    pub(crate) fn plain_call(
        &self,
        index: usize,
        namespace: Option<&str>,
        name: &str,
        call: PlainCall<'_>,
    ) -> Result<Option<Value>, ClusterError> {
        let Some(resource) = self.resources.get(index) else {
            return Err(ClusterError::Unavailable("no such resource".to_owned()));
        };
        let has_status = resource.subresources.contains(&"status");
        let status_only = matches!(
            call,
            PlainCall::ReplaceStatus(_) | PlainCall::MergePatchStatus(_)
        );
        let namespace = namespace.unwrap_or_default().to_owned();
        let mut plain = lock(&self.plain);
        let not_found = || ClusterError::NotFound {
            kind: resource.kind.clone(),
            namespace: Some(namespace.clone()),
            name: name.to_owned(),
        };
        let conflict = |message: &str| ClusterError::Conflict {
            kind: resource.kind.clone(),
            namespace: Some(namespace.clone()),
            name: name.to_owned(),
            message: message.to_owned(),
        };
        let mut key = (index, namespace.clone(), name.to_owned());
        let (type_, mut object) = match call {
            PlainCall::Get => {
                return plain
                    .objects
                    .get(&key)
                    .cloned()
                    .map(Some)
                    .ok_or_else(not_found);
            }
            PlainCall::Create(mut object) => {
                let mut object_name = name.to_owned();
                if object_name.is_empty() {
                    let prefix = object
                        .pointer("/metadata/generateName")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    plain.names += 1;
                    object_name = format!("{prefix}{:05x}", plain.names);
                }
                key.2 = object_name.clone();
                if plain.objects.contains_key(&key) {
                    return Err(ClusterError::AlreadyExists {
                        kind: resource.kind.clone(),
                        namespace: Some(namespace.clone()),
                        name: object_name,
                    });
                }
                if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.insert("name".to_owned(), Value::String(object_name.clone()));
                    metadata.insert("namespace".to_owned(), Value::String(namespace.clone()));
                    metadata.insert(
                        "uid".to_owned(),
                        Value::String(format!("plain-{}", plain.counter + 1)),
                    );
                    metadata.insert("creationTimestamp".to_owned(), Value::String(now()));
                    if has_status {
                        metadata.insert("generation".to_owned(), Value::from(1));
                    }
                }
                if has_status && let Some(map) = object.as_object_mut() {
                    // The status is the controllers' to write, through /status.
                    map.remove("status");
                }
                admit(resource, &object_name, &mut object)?;
                ("ADDED", object)
            }
            PlainCall::Replace(sent) | PlainCall::ReplaceStatus(sent) => {
                let current = plain.objects.get(&key).ok_or_else(not_found)?;
                match sent.pointer("/metadata/resourceVersion") {
                    Some(version)
                        if Some(version) != current.pointer("/metadata/resourceVersion") =>
                    {
                        return Err(conflict(
                            "the object has been modified; please apply your changes to the latest version and try again",
                        ));
                    }
                    None => {
                        return Err(ClusterError::invalid(
                            &resource.kind,
                            name,
                            "metadata.resourceVersion",
                            "must be specified for an update",
                        ));
                    }
                    Some(_) => {}
                }
                match updated(resource, name, current, sent, status_only)? {
                    Some(object) => ("MODIFIED", object),
                    None => return Ok(Some(current.clone())),
                }
            }
            PlainCall::MergePatch(patch) | PlainCall::MergePatchStatus(patch) => {
                let current = plain.objects.get(&key).ok_or_else(not_found)?;
                if let Some(sent) = patch.pointer("/metadata/resourceVersion")
                    && Some(sent) != current.pointer("/metadata/resourceVersion")
                {
                    return Err(conflict("the object has been modified"));
                }
                let mut sent = current.clone();
                json_patch::merge(&mut sent, patch);
                match updated(resource, name, current, sent, status_only)? {
                    Some(object) => ("MODIFIED", object),
                    None => return Ok(Some(current.clone())),
                }
            }
            PlainCall::Delete => {
                let mut object = plain.objects.remove(&key).ok_or_else(not_found)?;
                plain.counter += 1;
                stamp(resource, &mut object, Some(plain.counter));
                let version = plain.counter;
                drop(plain);
                self.publish_plain(index, namespace, "DELETED", version, object);
                return Ok(None);
            }
        };
        plain.counter += 1;
        let version = plain.counter;
        stamp(resource, &mut object, Some(version));
        plain.objects.insert(key, object.clone());
        drop(plain);
        self.publish_plain(index, namespace, type_, version, object.clone());
        Ok(Some(object))
    }

    fn publish_plain(
        &self,
        resource: usize,
        namespace: String,
        type_: &'static str,
        resource_version: u64,
        object: Value,
    ) {
        let mut history = lock(&self.history);
        history.push(WatchEvent {
            resource,
            type_,
            resource_version,
            namespace,
            object,
        });
        let published = history.published;
        drop(history);
        self.published.send_replace(published);
    }
}

/// A call on an object of the plain store (a Lease, an Event, a Deployment).
#[derive(Debug)]
pub(crate) enum PlainCall<'a> {
    Get,
    Create(Value),
    Replace(Value),
    /// A PUT on `/status`.
    ReplaceStatus(Value),
    MergePatch(&'a Value),
    /// A merge patch of `/status`.
    MergePatchStatus(&'a Value),
    Delete,
}

/// The time as the API server writes it in `creationTimestamp`.
fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Defaults and checks of the kinds that have any.
fn admit(resource: &Resource, name: &str, object: &mut Value) -> Result<(), ClusterError> {
    if resource.group == "apps" && resource.kind == "Deployment" {
        apps::admit_deployment(name, object)?;
    }
    Ok(())
}

/// What an update of `current` to `sent` stores, or `None` when it changes nothing.
///
/// Of a kind with a status subresource, a write of the object keeps the current status and
/// a write of the status (`status_only`) changes nothing else; either way what only the
/// server writes stays, and `metadata.generation` moves when anything outside `metadata`
/// and `status` changed (what `observedGeneration` is compared with).
fn updated(
    resource: &Resource,
    name: &str,
    current: &Value,
    mut sent: Value,
    status_only: bool,
) -> Result<Option<Value>, ClusterError> {
    if resource.subresources.contains(&"status") {
        if status_only {
            let status = sent.get("status").cloned();
            sent = current.clone();
            set_or_remove(&mut sent, "status", status);
        } else {
            set_or_remove(&mut sent, "status", current.get("status").cloned());
            for field in [
                "uid",
                "creationTimestamp",
                "generation",
                "namespace",
                "name",
            ] {
                let kept = current.pointer(&format!("/metadata/{field}")).cloned();
                if let Some(metadata) = sent.get_mut("metadata") {
                    set_or_remove(metadata, field, kept);
                }
            }
            admit(resource, name, &mut sent)?;
            let outside = |value: &Value| -> Vec<(String, Value)> {
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(key, _)| *key != "metadata" && *key != "status")
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect()
            };
            if outside(current) != outside(&sent) {
                let generation = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if let Some(metadata) = sent.get_mut("metadata") {
                    set_or_remove(metadata, "generation", Some(Value::from(generation + 1)));
                }
            }
        }
    }
    let mut unchanged = sent.clone();
    if let Some(version) = current.pointer("/metadata/resourceVersion").cloned()
        && let Some(metadata) = unchanged.get_mut("metadata")
    {
        set_or_remove(metadata, "resourceVersion", Some(version));
    }
    stamp(resource, &mut unchanged, None);
    Ok((unchanged != *current).then_some(sent))
}

fn set_or_remove(object: &mut Value, key: &str, value: Option<Value>) {
    if let Some(map) = object.as_object_mut() {
        match value {
            Some(value) => {
                map.insert(key.to_owned(), value);
            }
            None => {
                map.remove(key);
            }
        }
    }
}
