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
//!
//! This module is `KubeCluster`: its start-up and the [`Cluster`] impl. `reflected.rs` holds a
//! kind's reflector and the overlay over it, `store.rs` the reflector's store, `slim.rs` what
//! is dropped before caching, [`requests`] the requests sent and how answers are read, and
//! [`events`] the Events port.

pub mod events;
mod reflected;
pub mod requests;
mod slim;
mod store;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

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
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::reflected::Reflected;
pub use self::reflected::{LIST_PAGE_SIZE, OVERLAY_TTL};
use self::requests::{
    Target, body, cluster_error, eviction_error, namespace_for, node_class_target, typed_request,
    typed_target,
};
use super::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, Preconditions, Snapshot, sort_key,
};
use crate::cloudprovider::NodeClassKind;

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
            cache: fn(K) -> K::Cached,
        ) {
            let (reflected, task) = Reflected::<K, K::Cached>::start(
                Api::all(client.clone()),
                (),
                K::KIND.to_owned(),
                changes,
                cache,
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

    fn reflected<K: ClusterObject>(&self) -> &Reflected<K, K::Cached> {
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

    async fn write<T, C>(
        &self,
        reflected: &Reflected<T, C>,
        target: Target<'_>,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, ClusterError>
    where
        T: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        T::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
        C: Resource + Send + Sync + 'static,
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
