//! [`KubeCluster`]: the cluster port over a real Kubernetes API server, with kube-rs.
//!
//! - **Reads** come from one reflector per kind (a list, then a watch, relisting after a `410
//!   Gone` or a disconnect): a [`Snapshot`] is assembled from the reflectors' stores, never
//!   from the API server, so a pass costs no request. A relist swaps a store's contents only
//!   once the new list is complete (kube-runtime's `Init`/`InitDone`), so a watch fault never
//!   makes objects look deleted. [`Cluster::get`] alone asks the API server, for a fresh read.
//! - **Writes** go straight to the API server (merge patches, replaces carrying the
//!   `resourceVersion` the caller read, `/status` for status), under field manager
//!   `karpenter`. A 409 is answered as [`ClusterError::Conflict`] and never retried here: the
//!   controller reads again on its next pass. What a write answers is kept in a write-through
//!   overlay, so the next pass sees the adapter's own writes even before the watch delivers
//!   them; an overlay entry goes as soon as the store holds that version or a newer one (or
//!   after [`OVERLAY_TTL`], whichever comes first).
//! - **Eviction** is a hand-built `policy/v1` Eviction POST ([`requests::eviction_body`]); a
//!   429 is a budget saying no ([`ClusterError::TooManyRequests`]), and kube's client retries
//!   nothing, so a POST is never repeated behind the caller's back.
//! - [`Cluster::revision`] moves on every watch event and every write of the adapter; the
//!   manager waits on [`KubeCluster::subscribe`].

pub mod events;
pub mod requests;
mod slim;
mod store;

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use karpenter_api::{NodeClaim, NodeClassReference, NodePool};
use kube::Resource;
use kube::api::{DynamicObject, GroupVersionKind};
use kube::core::params::GetParams;
use kube::core::{Request, Status};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::requests::{Target, cluster_error, eviction_error};
use self::store::{Store, Writer};
use super::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, Preconditions, Snapshot, sort_key,
};
use crate::cloudprovider::NodeClassKind;

/// How long the adapter's own write may stand in for what the watch has not delivered yet.
/// Watches deliver in milliseconds; this only bounds the damage of an overlay entry whose
/// object was deleted by someone else before the watch caught up.
pub const OVERLAY_TTL: Duration = Duration::from_secs(30);

/// Objects per page of a reflector's list. A list of every pod of a large cluster in one
/// response is decoded whole before the first object is slimmed: at 20,000 pods that is
/// some 200 MB at once, freed right after but left behind as heap the process keeps. Pages
/// of 500 (client-go's pager and kube-runtime's default) bound it to a page.
pub const LIST_PAGE_SIZE: u32 = 500;

/// Why the adapter could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A node class kind the plugin serves is not served by the API server (its CRD is
    /// missing).
    #[error(
        "the API server does not serve {group}/{version} {kind} (is its CRD installed?): {source}"
    )]
    NodeClassKind {
        /// The group.
        group: String,
        /// The version.
        version: String,
        /// The kind.
        kind: String,
        /// What discovery answered.
        source: kube::Error,
    },
}

/// The cluster port over a Kubernetes API server. Clones share the reflectors.
#[derive(Clone)]
pub struct KubeCluster {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    typed: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    node_classes: Vec<Reflected<DynamicObject>>,
    changes: Arc<Changes>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster")
            .field("revision", &self.shared.changes.revision())
            .field("node_class_kinds", &self.shared.node_classes.len())
            .finish_non_exhaustive()
    }
}

/// The revision counter, as a watch channel: a receiver never misses that it moved.
#[derive(Debug)]
struct Changes {
    revision: watch::Sender<u64>,
}

impl Changes {
    fn new() -> Self {
        Self {
            revision: watch::Sender::new(0),
        }
    }

    fn bump(&self) {
        self.revision.send_modify(|revision| *revision += 1);
    }

    fn revision(&self) -> u64 {
        *self.revision.borrow()
    }
}

/// One kind's reflector store and the adapter's writes the store may not show yet.
struct Reflected<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Arc<Store<K>>,
    dyntype: K::DynamicType,
    overlay: Mutex<BTreeMap<(String, String), Overlaid<K>>>,
    /// What is dropped from an object before it is cached (store and overlay alike).
    slim: fn(&mut K),
}

enum Overlaid<K> {
    /// The object as the adapter's write answered it.
    Written { object: Arc<K>, at: Instant },
    /// Deleted by the adapter: the object of this UID is gone even if the store still has it.
    Deleted { uid: Option<String>, at: Instant },
}

/// Whether the store's `stored` version already includes the overlay's `written` one.
/// resourceVersions are opaque, but every API server in use hands out etcd revisions
/// (integers); when either is not an integer, only equality counts.
fn caught_up(stored: Option<&str>, written: Option<&str>) -> bool {
    match (stored, written) {
        (Some(stored), Some(written)) => {
            stored == written
                || matches!((stored.parse::<u64>(), written.parse::<u64>()), (Ok(s), Ok(w)) if s >= w)
        }
        _ => false,
    }
}

fn key_of<K: Resource>(object: &K) -> (String, String) {
    let (namespace, name) = sort_key(object);
    (namespace.to_owned(), name.to_owned())
}

impl<K> Reflected<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    fn new(store: Arc<Store<K>>, dyntype: K::DynamicType, slim: fn(&mut K)) -> Self {
        Self {
            store,
            dyntype,
            overlay: Mutex::new(BTreeMap::new()),
            slim,
        }
    }

    /// The store's objects with the overlay laid over them, in (namespace, name) order;
    /// overlay entries the store has caught up with are dropped. The store keeps its `Arc`s
    /// in that order, so a snapshot of the whole cluster allocates one vector per kind and
    /// copies no object and no name.
    fn view(&self, now: Instant) -> Vec<Arc<K>> {
        let mut objects = self.store.state();
        let mut overlay = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        overlay.retain(|(namespace, name), entry| {
            let found = objects.binary_search_by(|object| {
                sort_key(object.as_ref()).cmp(&(namespace.as_str(), name.as_str()))
            });
            let stored = found.ok().map(|at| &objects[at]);
            match entry {
                Overlaid::Written { at, .. } | Overlaid::Deleted { at, .. }
                    if now.saturating_duration_since(*at) > OVERLAY_TTL =>
                {
                    false
                }
                Overlaid::Written { object, .. } => {
                    let current = stored.and_then(|s| s.meta().resource_version.as_deref());
                    if caught_up(current, object.meta().resource_version.as_deref()) {
                        return false;
                    }
                    match found {
                        Ok(at) => objects[at] = Arc::clone(object),
                        Err(at) => objects.insert(at, Arc::clone(object)),
                    }
                    true
                }
                Overlaid::Deleted { uid, .. } => {
                    let Some(stored_object) = stored else {
                        return false;
                    };
                    let same = uid.is_none() || stored_object.meta().uid == *uid;
                    if same && let Ok(at) = found {
                        objects.remove(at);
                    }
                    same
                }
            }
        });
        objects
    }

    fn written(&self, object: &K) {
        let mut cached = object.clone();
        (self.slim)(&mut cached);
        let mut overlay = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        overlay.insert(
            key_of(object),
            Overlaid::Written {
                object: Arc::new(cached),
                at: Instant::now(),
            },
        );
    }

    fn deleted(&self, namespace: &str, name: &str, uid: Option<String>) {
        let mut overlay = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        overlay.insert(
            (namespace.to_owned(), name.to_owned()),
            Overlaid::Deleted {
                uid,
                at: Instant::now(),
            },
        );
    }

    /// Starts the list-and-watch of `api` into a new store, each object slimmed by `slim`;
    /// every event bumps `changes`.
    fn start(
        api: Api<K>,
        dyntype: K::DynamicType,
        label: String,
        changes: &Arc<Changes>,
        slim: fn(&mut K),
    ) -> (Self, JoinHandle<()>) {
        let store = Arc::new(Store::new());
        let mut writer = Writer::new(Arc::clone(&store));
        let stream = watcher(api, watcher::Config::default().page_size(LIST_PAGE_SIZE))
            .default_backoff()
            .modify(slim);
        let changes = Arc::clone(changes);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        writer.apply(event);
                        changes.bump();
                    }
                    // The watcher relists on its own (with backoff); the store keeps what it
                    // had meanwhile.
                    Err(error) => {
                        tracing::warn!(kind = %label, %error, "watch failed; relisting");
                    }
                }
            }
        });
        (Self::new(store, dyntype, slim), task)
    }
}

/// The kube client for `config`, as the adapter needs it: without kube's default retry layer,
/// which repeats any request answered 429, 503 or 504 up to 15 times with backoff of up to
/// 1,000 s, POSTs included. An eviction a PodDisruptionBudget refuses (429) must come back to
/// the drain at once as "blocked", and a write that failed must come back to its controller,
/// which reads again before deciding anew; neither may be replayed behind its back.
///
/// It also makes ring rustls' process-wide crypto provider when none is installed yet: in a
/// build where another crate turns on rustls' `aws-lc-rs` as well (the AWS SDK in the same
/// workspace), rustls cannot choose one by itself and kube's TLS set-up would panic.
pub fn client(mut config: kube::Config) -> Result<Client, kube::Error> {
    // Err only means a provider is installed already, which is all that is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    config.default_retry = false;
    Client::try_from(config)
}

impl KubeCluster {
    /// Starts one reflector per kind core reads, and one per node class kind in `node_classes`
    /// (resolved through discovery), on a client made by [`client`]. Returns at once; [`KubeCluster::wait_synced`] waits for
    /// the first lists.
    pub async fn start(client: Client, node_classes: &[NodeClassKind]) -> Result<Self, StartError> {
        let changes = Arc::new(Changes::new());
        let mut tasks = Vec::new();
        let mut typed: HashMap<TypeId, Box<dyn Any + Send + Sync>> = HashMap::new();
        fn add<K: ClusterObject>(
            client: &Client,
            changes: &Arc<Changes>,
            typed: &mut HashMap<TypeId, Box<dyn Any + Send + Sync>>,
            tasks: &mut Vec<JoinHandle<()>>,
            slim: fn(&mut K),
        ) {
            let (reflected, task) = Reflected::<K>::start(
                Api::all(client.clone()),
                (),
                K::KIND.to_owned(),
                changes,
                slim,
            );
            typed.insert(TypeId::of::<K>(), Box::new(reflected));
            tasks.push(task);
        }
        add::<NodePool>(
            &client,
            &changes,
            &mut typed,
            &mut tasks,
            slim::managed_fields,
        );
        add::<NodeClaim>(
            &client,
            &changes,
            &mut typed,
            &mut tasks,
            slim::managed_fields,
        );
        add::<Node>(&client, &changes, &mut typed, &mut tasks, slim::node);
        add::<Pod>(&client, &changes, &mut typed, &mut tasks, slim::pod);
        add::<PodDisruptionBudget>(
            &client,
            &changes,
            &mut typed,
            &mut tasks,
            slim::managed_fields,
        );
        add::<DaemonSet>(
            &client,
            &changes,
            &mut typed,
            &mut tasks,
            slim::managed_fields,
        );
        add::<PriorityClass>(
            &client,
            &changes,
            &mut typed,
            &mut tasks,
            slim::managed_fields,
        );
        let mut reflected_classes = Vec::new();
        for kind in node_classes {
            let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
            let (resource, _) =
                kube::discovery::pinned_kind(&client, &gvk)
                    .await
                    .map_err(|source| StartError::NodeClassKind {
                        group: kind.group.clone(),
                        version: kind.version.clone(),
                        kind: kind.kind.clone(),
                        source,
                    })?;
            let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
            let (reflected, task) = Reflected::start(
                api,
                resource,
                kind.kind.clone(),
                &changes,
                slim::managed_fields,
            );
            reflected_classes.push(reflected);
            tasks.push(task);
        }
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                typed,
                node_classes: reflected_classes,
                changes,
                tasks,
            }),
        })
    }

    /// Waits until every reflector has its first complete list.
    pub async fn wait_synced(&self) {
        async fn ready<K: ClusterObject>(cluster: &KubeCluster) {
            cluster.reflected::<K>().store.wait_until_ready().await;
        }
        ready::<NodePool>(self).await;
        ready::<NodeClaim>(self).await;
        ready::<Node>(self).await;
        ready::<Pod>(self).await;
        ready::<PodDisruptionBudget>(self).await;
        ready::<DaemonSet>(self).await;
        ready::<PriorityClass>(self).await;
        for reflected in &self.shared.node_classes {
            reflected.store.wait_until_ready().await;
        }
    }

    /// The revision as it moves (every watch event, every write of the adapter): what the
    /// manager waits on between rounds.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.changes.revision.subscribe()
    }

    /// The kube client the adapter uses (for Leases and Events, which are not the port's).
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    fn reflected<K: ClusterObject>(&self) -> &Reflected<K> {
        match self
            .shared
            .typed
            .get(&TypeId::of::<K>())
            .and_then(|reflected| reflected.downcast_ref())
        {
            Some(reflected) => reflected,
            // `start` creates one per kind of the sealed ClusterObject.
            None => unreachable!("no reflector for {}", K::KIND),
        }
    }

    fn node_class_reflector(
        &self,
        reference: &NodeClassReference,
    ) -> Result<&Reflected<DynamicObject>, ClusterError> {
        self.shared
            .node_classes
            .iter()
            .find(|reflected| {
                reflected.dyntype.group == reference.group
                    && reflected.dyntype.kind == reference.kind
            })
            .ok_or_else(|| ClusterError::NotFound {
                kind: reference.kind.clone(),
                namespace: None,
                name: reference.name.clone(),
            })
    }

    /// Sends a write and keeps what it answers in `reflected`'s overlay.
    /// Writes `object` by the request `build` makes from its collection's request, its name
    /// and its body: create, replace and replace-status differ only there.
    async fn write_object<K: ClusterObject>(
        &self,
        object: &K,
        build: impl FnOnce(
            Request,
            &str,
            Vec<u8>,
        ) -> Result<http::Request<Vec<u8>>, kube::core::request::Error>
        + Send,
    ) -> Result<K, ClusterError> {
        let namespace = namespace_for(object);
        let name = sort_key(object).1;
        let target = typed_target::<K>(namespace, name);
        let data = body(target, object, &K::api_version(&()), K::KIND)?;
        let request = build(typed_request::<K>(namespace), name, data);
        self.write(self.reflected::<K>(), target, request).await
    }

    /// Applies a JSON merge patch to the object, or to its `subresource`.
    async fn write_merge_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<K, ClusterError> {
        let (params, patch) = (requests::patch_params(), kube::api::Patch::Merge(patch));
        let collection = typed_request::<K>(namespace);
        let request = match subresource {
            Some(subresource) => collection.patch_subresource(subresource, name, &params, &patch),
            None => collection.patch(name, &params, &patch),
        };
        let target = typed_target::<K>(namespace, name);
        self.write(self.reflected::<K>(), target, request).await
    }

    async fn write<T>(
        &self,
        reflected: &Reflected<T>,
        target: Target<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, ClusterError>
    where
        T: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        T::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    {
        let request = request.map_err(|error| {
            ClusterError::invalid(target.kind, target.name, "", error.to_string())
        })?;
        let answer = self
            .shared
            .client
            .request::<T>(request)
            .await
            .map_err(|error| cluster_error(target, error));
        if let Ok(written) = &answer {
            self.shared.changes.bump();
            reflected.written(written);
        }
        answer
    }

    async fn send_delete<T: DeserializeOwned>(
        &self,
        target: Target<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<either::Either<T, Status>, ClusterError> {
        let request = request.map_err(|error| {
            ClusterError::invalid(target.kind, target.name, "", error.to_string())
        })?;
        let answer = self
            .shared
            .client
            .request_status::<T>(request)
            .await
            .map_err(|error| cluster_error(target, error))?;
        self.shared.changes.bump();
        Ok(answer)
    }
}

fn body<K: Serialize>(
    target: Target<'_>,
    object: &K,
    api_version: &str,
    kind: &str,
) -> Result<Vec<u8>, ClusterError> {
    let mut value = serde_json::to_value(object)
        .map_err(|error| ClusterError::invalid(target.kind, target.name, "", error.to_string()))?;
    if let Value::Object(map) = &mut value {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(api_version.to_owned()),
        );
        map.insert("kind".to_owned(), Value::String(kind.to_owned()));
    }
    serde_json::to_vec(&value)
        .map_err(|error| ClusterError::invalid(target.kind, target.name, "", error.to_string()))
}

fn typed_target<'a, K: ClusterObject>(namespace: Option<&'a str>, name: &'a str) -> Target<'a> {
    Target {
        kind: K::KIND,
        namespace,
        name,
    }
}

fn typed_request<K: ClusterObject>(namespace: Option<&str>) -> Request {
    Request::new(K::url_path(&(), namespace))
}

fn namespace_for<K: ClusterObject>(object: &K) -> Option<&str> {
    K::NAMESPACED.then(|| sort_key(object).0)
}

impl Cluster for KubeCluster {
    async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        let now = Instant::now();
        Ok(Snapshot {
            node_pools: self.reflected::<NodePool>().view(now),
            node_claims: self.reflected::<NodeClaim>().view(now),
            node_classes: self
                .shared
                .node_classes
                .iter()
                .flat_map(|reflected| reflected.view(now))
                .collect::<Vec<_>>(),
            nodes: self.reflected::<Node>().view(now),
            pods: self.reflected::<Pod>().view(now),
            pdbs: self.reflected::<PodDisruptionBudget>().view(now),
            daemon_sets: self.reflected::<DaemonSet>().view(now),
            priority_classes: self.reflected::<PriorityClass>().view(now),
        })
        .map(|mut snapshot| {
            // Each list is in key order already; node classes of several kinds are merged.
            snapshot
                .node_classes
                .sort_by(|a, b| super::node_class_key(a).cmp(&super::node_class_key(b)));
            snapshot
        })
    }

    fn revision(&self) -> u64 {
        self.shared.changes.revision()
    }

    async fn get<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, ClusterError> {
        let target = typed_target::<K>(namespace, name);
        let request = typed_request::<K>(namespace).get(name, &GetParams::default());
        let request = request.map_err(|error| {
            ClusterError::invalid(target.kind, target.name, "", error.to_string())
        })?;
        match self.shared.client.request::<K>(request).await {
            Ok(object) => Ok(Some(object)),
            Err(error) => match cluster_error(target, error) {
                ClusterError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn create<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.write_object(object, |request, _, data| {
            request.create(&requests::post_params(), data)
        })
        .await
    }

    async fn replace<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.write_object(object, |request, name, data| {
            request.replace(name, &requests::post_params(), data)
        })
        .await
    }

    async fn replace_status<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.write_object(object, |request, name, data| {
            request.replace_subresource("status", name, &requests::post_params(), data)
        })
        .await
    }

    async fn merge_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.write_merge_patch(namespace, name, patch, None).await
    }

    async fn merge_patch_status<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.write_merge_patch(namespace, name, patch, Some("status"))
            .await
    }

    async fn delete<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        let target = typed_target::<K>(namespace, name);
        let request =
            typed_request::<K>(namespace).delete(name, &requests::delete_params(&options));
        let reflected = self.reflected::<K>();
        match self.send_delete::<K>(target, request).await {
            Ok(either::Either::Left(still_there)) => reflected.written(&still_there),
            Ok(either::Either::Right(status)) => reflected.deleted(
                namespace.unwrap_or_default(),
                name,
                status.details.map(|details| details.uid),
            ),
            // Deleting what is already gone is what the caller wanted.
            Err(ClusterError::NotFound { .. }) => {
                reflected.deleted(namespace.unwrap_or_default(), name, None);
            }
            Err(other) => return Err(other),
        }
        Ok(())
    }

    async fn evict(
        &self,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<(), ClusterError> {
        let request = requests::eviction_request(namespace, name, preconditions)
            .map_err(|error| ClusterError::invalid("Pod", name, "", error.to_string()))?;
        self.shared
            .client
            .request_text(request)
            .await
            .map_err(|error| eviction_error(namespace, name, error))?;
        self.shared.changes.bump();
        Ok(())
    }

    async fn get_node_class(
        &self,
        reference: &NodeClassReference,
    ) -> Result<Option<DynamicObject>, ClusterError> {
        // A kind the plugin does not serve has no objects, as in the in-memory cluster.
        let Ok(reflected) = self.node_class_reflector(reference) else {
            return Ok(None);
        };
        let target = node_class_target(reference);
        let request = Request::new(DynamicObject::url_path(&reflected.dyntype, None))
            .get(&reference.name, &GetParams::default())
            .map_err(|error| {
                ClusterError::invalid(target.kind, target.name, "", error.to_string())
            })?;
        match self.shared.client.request::<DynamicObject>(request).await {
            Ok(object) => Ok(Some(object)),
            Err(error) => match cluster_error(target, error) {
                ClusterError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    async fn create_node_class(
        &self,
        object: &DynamicObject,
    ) -> Result<DynamicObject, ClusterError> {
        let (group, kind) = match &object.types {
            Some(types) => (super::api_group(&types.api_version), types.kind.as_str()),
            None => ("", ""),
        };
        let name = object.metadata.name.as_deref().unwrap_or_default();
        let reference = NodeClassReference {
            group: group.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        };
        let reflected = self.node_class_reflector(&reference)?;
        let target = node_class_target(&reference);
        let resource = &reflected.dyntype;
        let data = body(target, object, &resource.api_version, &resource.kind)?;
        self.write(
            reflected,
            target,
            Request::new(DynamicObject::url_path(resource, None))
                .create(&requests::post_params(), data),
        )
        .await
    }

    async fn merge_patch_node_class(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        let reflected = self.node_class_reflector(reference)?;
        self.write(
            reflected,
            node_class_target(reference),
            Request::new(DynamicObject::url_path(&reflected.dyntype, None)).patch(
                &reference.name,
                &requests::patch_params(),
                &kube::api::Patch::Merge(patch),
            ),
        )
        .await
    }

    async fn merge_patch_node_class_status(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        let reflected = self.node_class_reflector(reference)?;
        self.write(
            reflected,
            node_class_target(reference),
            Request::new(DynamicObject::url_path(&reflected.dyntype, None)).patch_subresource(
                "status",
                &reference.name,
                &requests::patch_params(),
                &kube::api::Patch::Merge(patch),
            ),
        )
        .await
    }

    async fn delete_node_class(
        &self,
        reference: &NodeClassReference,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        let reflected = self.node_class_reflector(reference)?;
        let request = Request::new(DynamicObject::url_path(&reflected.dyntype, None))
            .delete(&reference.name, &requests::delete_params(&options));
        match self
            .send_delete::<DynamicObject>(node_class_target(reference), request)
            .await
        {
            Ok(either::Either::Left(still_there)) => reflected.written(&still_there),
            Ok(either::Either::Right(status)) => reflected.deleted(
                "",
                &reference.name,
                status.details.map(|details| details.uid),
            ),
            Err(ClusterError::NotFound { .. }) => reflected.deleted("", &reference.name, None),
            Err(other) => return Err(other),
        }
        Ok(())
    }
}

fn node_class_target(reference: &NodeClassReference) -> Target<'_> {
    Target {
        kind: &reference.kind,
        namespace: None,
        name: &reference.name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_object_with_managed_fields_then_the_cache_keeps_everything_else() {
        let mut pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
        }))
        .unwrap_or_default();
        let annotations = pod.metadata.annotations.clone();
        assert!(pod.metadata.managed_fields.is_some());
        slim::managed_fields(&mut pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.annotations, annotations);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-0"));
    }

    #[test]
    fn given_resource_versions_then_the_store_has_caught_up_when_equal_or_newer() {
        assert!(caught_up(Some("12"), Some("12")));
        assert!(caught_up(Some("13"), Some("12")));
        assert!(!caught_up(Some("11"), Some("12")));
        assert!(!caught_up(None, Some("12")));
        // Opaque versions: only equality counts.
        assert!(caught_up(Some("abc"), Some("abc")));
        assert!(!caught_up(Some("abd"), Some("abc")));
    }
}
