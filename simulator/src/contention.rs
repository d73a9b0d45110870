//! Write contention: the [`Cluster`] core's controllers get wraps the in-memory one, and while
//! contention lasts every other write of core's that carries a `resourceVersion` precondition
//! (a replace, or a merge patch with `metadata.resourceVersion`, which is how core changes
//! finalizers, taints and lists) fails with 409 Conflict without changing anything, as when
//! another writer got there first. Writes without a precondition (create, delete, eviction, a
//! plain merge patch) cannot conflict on a real API server and are left alone. The simulator's
//! own stand-ins (kubelets, scheduler, workload controllers) write to the in-memory cluster
//! directly and never conflict.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use core_svc::clock::{Clock, FakeClock};
use core_svc::cluster::{
    Cluster, ClusterError, ClusterObject, DeleteOptions, InMemoryCluster, Preconditions, Snapshot,
};
use jiff::Timestamp;
use karpenter_api::NodeClassReference;
use kube::core::DynamicObject;
use serde_json::Value;

/// When the current contention ends, shared between the engine and the cluster it wraps.
#[derive(Debug, Clone, Default)]
pub struct ContentionSwitch {
    until: Arc<Mutex<Option<Timestamp>>>,
    /// Writes that could have conflicted so far: every other one does.
    eligible: Arc<AtomicU64>,
}

impl ContentionSwitch {
    /// No contention.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes conflict until `until` (an earlier end is kept if later).
    pub fn start(&self, until: Timestamp) {
        let mut current = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        *current = Some(current.map_or(until, |known| known.max(until)));
    }

    /// When the contention under way at `now` ends; `None` when there is none.
    pub fn ends_after(&self, now: Timestamp) -> Option<Timestamp> {
        (*self.until.lock().unwrap_or_else(PoisonError::into_inner)).filter(|until| now < *until)
    }

    /// Whether a write with a precondition at `now` loses the race.
    fn conflicts(&self, now: Timestamp) -> bool {
        self.ends_after(now).is_some()
            && self
                .eligible
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(2)
    }
}

/// The cluster core's controllers write to: the in-memory one, behind a [`ContentionSwitch`].
#[derive(Debug)]
pub struct ContendedCluster {
    inner: Arc<InMemoryCluster>,
    contention: ContentionSwitch,
    clock: FakeClock,
}

impl ContendedCluster {
    /// `inner`, contended whenever `contention` says so at `clock`'s time.
    pub fn new(
        inner: Arc<InMemoryCluster>,
        contention: ContentionSwitch,
        clock: FakeClock,
    ) -> Self {
        Self {
            inner,
            contention,
            clock,
        }
    }

    /// A 409 for the write of `name`, when this write loses the race.
    fn race<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        precondition: bool,
    ) -> Result<(), ClusterError> {
        if precondition && self.contention.conflicts(self.clock.now()) {
            Err(ClusterError::Conflict {
                kind: K::KIND.to_owned(),
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
                message: "simulated contention: the object has been modified; please apply your \
                          changes to the latest version and try again"
                    .to_owned(),
            })
        } else {
            Ok(())
        }
    }
}

/// Whether a merge patch carries `metadata.resourceVersion` (is optimistic).
fn has_precondition(patch: &Value) -> bool {
    patch
        .pointer("/metadata/resourceVersion")
        .is_some_and(|version| !version.is_null())
}

impl Cluster for ContendedCluster {
    async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        self.inner.snapshot().await
    }

    fn revision(&self) -> u64 {
        self.inner.revision()
    }

    async fn get<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, ClusterError> {
        self.inner.get(namespace, name).await
    }

    async fn create<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        self.inner.create(object).await
    }

    async fn replace<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        let meta = object.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        self.race::<K>(meta.namespace.as_deref(), name, true)?;
        self.inner.replace(object).await
    }

    async fn replace_status<K: ClusterObject>(&self, object: &K) -> Result<K, ClusterError> {
        let meta = object.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        self.race::<K>(meta.namespace.as_deref(), name, true)?;
        self.inner.replace_status(object).await
    }

    async fn merge_patch<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.race::<K>(namespace, name, has_precondition(patch))?;
        self.inner.merge_patch(namespace, name, patch).await
    }

    async fn merge_patch_status<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<K, ClusterError> {
        self.race::<K>(namespace, name, has_precondition(patch))?;
        self.inner.merge_patch_status(namespace, name, patch).await
    }

    async fn delete<K: ClusterObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        self.inner.delete::<K>(namespace, name, options).await
    }

    async fn evict(
        &self,
        namespace: &str,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<(), ClusterError> {
        self.inner.evict(namespace, name, preconditions).await
    }

    async fn get_node_class(
        &self,
        reference: &NodeClassReference,
    ) -> Result<Option<DynamicObject>, ClusterError> {
        self.inner.get_node_class(reference).await
    }

    async fn create_node_class(
        &self,
        object: &DynamicObject,
    ) -> Result<DynamicObject, ClusterError> {
        self.inner.create_node_class(object).await
    }

    async fn merge_patch_node_class(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        self.inner.merge_patch_node_class(reference, patch).await
    }

    async fn merge_patch_node_class_status(
        &self,
        reference: &NodeClassReference,
        patch: &Value,
    ) -> Result<DynamicObject, ClusterError> {
        self.inner
            .merge_patch_node_class_status(reference, patch)
            .await
    }

    async fn delete_node_class(
        &self,
        reference: &NodeClassReference,
        options: DeleteOptions,
    ) -> Result<(), ClusterError> {
        self.inner.delete_node_class(reference, options).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use core_svc::cluster::ClusterExt as _;
    use k8s_openapi::api::core::v1::Node;

    use super::*;

    #[tokio::test]
    async fn writes_with_a_precondition_conflict_every_other_time_while_contention_lasts() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = FakeClock::new(start);
        let inner = Arc::new(InMemoryCluster::new(Arc::new(clock.clone()), 0));
        let contention = ContentionSwitch::new();
        let cluster = ContendedCluster::new(Arc::clone(&inner), contention.clone(), clock.clone());
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"}
        }))
        .unwrap();
        let node = cluster.create(&node).await.unwrap();
        contention.start(start.saturating_add(Duration::from_secs(60)).unwrap());
        // A plain merge patch has no precondition: it never conflicts.
        for _ in 0..3 {
            cluster
                .merge_patch::<Node>(
                    None,
                    "n1",
                    &serde_json::json!({"metadata": {"labels": {"a": "b"}}}),
                )
                .await
                .unwrap();
        }
        let fresh: Node = cluster.get(None, "n1").await.unwrap().unwrap();
        let first = cluster.add_finalizer(&fresh, "example.com/one").await;
        assert!(
            first.as_ref().is_err_and(ClusterError::is_conflict),
            "{first:?}"
        );
        let stored: Node = inner.get(None, "n1").await.unwrap().unwrap();
        assert!(
            stored.metadata.finalizers.is_none(),
            "a lost race changes nothing"
        );
        let second = cluster.add_finalizer(&fresh, "example.com/one").await;
        assert!(second.is_ok(), "{second:?}");
        clock.advance(Duration::from_secs(60));
        let stored: Node = cluster.get(None, "n1").await.unwrap().unwrap();
        for _ in 0..3 {
            let again: Node = cluster.get(None, "n1").await.unwrap().unwrap();
            cluster.replace(&again).await.unwrap();
        }
        assert!(node.metadata.name.is_some() && stored.metadata.finalizers.is_some());
    }
}
