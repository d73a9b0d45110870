//! A fake Kubernetes API server: the wire protocol over [`InMemoryCluster`].
//!
//! One semantics, two front doors: the objects core decides on (NodePools, NodeClaims, node
//! classes, Nodes, Pods, PDBs, DaemonSets, PriorityClasses) live in an [`InMemoryCluster`],
//! whose Kubernetes semantics (resourceVersion conflicts, status subresources, finalizers,
//! graceful pod deletion, generateName, the eviction subresource under PDBs, admission) its
//! own tests pin down; this server only puts HTTP in front of it, so a test can drive the same
//! store in process (the kubelet and scheduler stand-ins) and over the wire (core-svc through
//! kube-rs). Leases (`coordination.k8s.io/v1`), Events (`events.k8s.io/v1`) and Deployments
//! (`apps/v1`, with their defaults, `generation` and status subresource) live in a plain store
//! of its own with the same optimistic concurrency; [`workloads`] turns Deployments into Pods.
//!
//! What it serves: discovery (`/api`, `/apis`, each group-version's resource list), list and
//! watch with `resourceVersion` (bookmarks; `410 Gone` for a version older than its history),
//! list paging (`limit` and `continue`: every page cut from the first page's state, `410
//! Expired` for a token it can no longer serve), get, create, replace, merge and JSON patches,
//! `/status`, delete with `DeleteOptions`, the `policy/v1` eviction subresource, `labelSelector` and `fieldSelector` on lists and watches,
//! and streaming lists (`sendInitialEvents`). Errors are `Status` objects with the API server's
//! codes and reasons.
//!
//! Requests are authenticated by bearer token and authorized by RBAC under the Roles,
//! ClusterRoles and bindings the server stores ([`rbac`]); a request without credentials is a
//! cluster admin.
//!
//! Watches are fed by diffing: after every request (and on [`FakeApiServer::sync`], which the
//! in-process stand-ins call after their writes), the server compares the cluster with what it
//! last saw, object by object and resourceVersion by resourceVersion, and appends one
//! `ADDED`/`MODIFIED`/`DELETED` event per difference to a bounded history.

mod apps;
mod http_api;
pub mod kwok;
mod paging;
pub mod rbac;
mod resources;
mod selectors;
mod store;
pub mod workloads;

use std::net::SocketAddr;
use std::sync::Arc;

use core_svc::cluster::InMemoryCluster;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use resources::NodeClassResource;

/// A running fake API server.
#[derive(Debug)]
pub struct FakeApiServer {
    address: SocketAddr,
    state: Arc<store::State>,
    task: JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Serves `cluster` on `listen` (port 0 picks a free one), with the node class kinds
    /// `node_classes` registered.
    pub async fn start(
        listen: SocketAddr,
        cluster: InMemoryCluster,
        node_classes: Vec<NodeClassResource>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(store::State::new(cluster, node_classes));
        let app = http_api::router(Arc::clone(&state));
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::error!(%error, "fake API server stopped");
            }
        });
        Ok(Self {
            address,
            state,
            task,
        })
    }

    /// `http://ADDRESS`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The in-memory cluster behind the server (the in-process front door).
    pub fn cluster(&self) -> &InMemoryCluster {
        &self.state.cluster
    }

    /// Publishes changes made to the cluster in process (not through HTTP) to the watches.
    pub async fn sync(&self) {
        self.state.sync().await;
    }

    /// A kubeconfig pointing at this server with no credentials: a cluster admin.
    pub fn kubeconfig(&self) -> String {
        kubeconfig(&self.url(), None)
    }

    /// A kubeconfig pointing at this server as the service account `namespace/name`, whose
    /// requests the server authorizes under the RBAC objects it stores ([`rbac`]).
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> String {
        kubeconfig(
            &self.url(),
            Some(&rbac::service_account_token(namespace, name)),
        )
    }

    /// What each service account seen was granted, used and refused, under the RBAC objects
    /// stored now (also served at `GET /debug/rbac`).
    pub fn rbac_report(&self) -> Vec<rbac::Usage> {
        self.state.rbac.report(&self.state.rbac_objects())
    }

    /// How many watch events the server has published so far.
    pub fn events_published(&self) -> u64 {
        self.state.events_published()
    }

    /// How many eviction requests the server has received.
    pub fn evictions(&self) -> u64 {
        self.state
            .evictions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many list pages the server has served after a first one (with a `continue`).
    pub fn continued_lists(&self) -> u64 {
        self.state
            .continued_lists
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops the watch history, so every watch resuming from an older version gets `410 Gone`
    /// and must relist (what an API server does after etcd compaction).
    pub fn compact(&self) {
        self.state.compact();
    }
}

/// A kubeconfig for an API server at `url`, with a bearer token or none.
pub fn kubeconfig(url: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(token) => format!("{{token: {token:?}}}"),
        None => "{}".to_owned(),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: default
current-context: fake
users:
- name: fake
  user: {user}
"
    )
}
