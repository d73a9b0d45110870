//! The server's state: the in-memory cluster, the watch history fed by diffing it, and the
//! plain store of Leases and Events.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use core_svc::cluster::{Cluster, ClusterError, InMemoryCluster, Snapshot};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::resources::{self, Backend, NodeClassResource, Resource, Typed};

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

fn typed_objects(snapshot: &Snapshot, typed: Typed) -> Vec<(String, String, u64, Value)> {
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
        Typed::Pod => each(&snapshot.pods),
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
        let mut current: BTreeMap<(usize, String, String), (u64, Value)> = BTreeMap::new();
        for (index, resource) in self.resources.iter().enumerate() {
            let objects = match &resource.backend {
                Backend::Typed(typed) => typed_objects(&snapshot, *typed),
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
        let namespace = namespace.unwrap_or_default().to_owned();
        let mut plain = lock(&self.plain);
        let not_found = || ClusterError::NotFound {
            kind: resource.kind.clone(),
            namespace: Some(namespace.clone()),
            name: name.to_owned(),
        };
        let conflict = |message: String| ClusterError::Conflict {
            kind: resource.kind.clone(),
            namespace: Some(namespace.clone()),
            name: name.to_owned(),
            message,
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
                    metadata.insert("name".to_owned(), Value::String(object_name));
                    metadata.insert("namespace".to_owned(), Value::String(namespace.clone()));
                    metadata.insert(
                        "uid".to_owned(),
                        Value::String(format!("plain-{}", plain.counter + 1)),
                    );
                }
                ("ADDED", object)
            }
            PlainCall::Replace(object) => {
                let current = plain.objects.get(&key).ok_or_else(not_found)?;
                let current_version = current.pointer("/metadata/resourceVersion").cloned();
                match object.pointer("/metadata/resourceVersion") {
                    Some(sent) if Some(sent) != current_version.as_ref() => {
                        return Err(conflict(
                            "the object has been modified; please apply your changes to the latest version and try again".to_owned(),
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
                ("MODIFIED", object)
            }
            PlainCall::MergePatch(patch) => {
                let mut object = plain.objects.get(&key).cloned().ok_or_else(not_found)?;
                if let Some(sent) = patch.pointer("/metadata/resourceVersion")
                    && Some(sent) != object.pointer("/metadata/resourceVersion")
                {
                    return Err(conflict("the object has been modified".to_owned()));
                }
                json_patch::merge(&mut object, patch);
                ("MODIFIED", object)
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

/// A call on a Lease or an Event.
#[derive(Debug)]
pub(crate) enum PlainCall<'a> {
    Get,
    Create(Value),
    Replace(Value),
    MergePatch(&'a Value),
    Delete,
}
