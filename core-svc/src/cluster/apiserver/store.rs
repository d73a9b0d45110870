//! The reflectors' stores: one kind's objects as a vector of `Arc`s sorted by (namespace,
//! name), kept from a kube-runtime watcher's events.
//!
//! kube-runtime's own store keys a hash map by an `ObjectRef` (four owned strings per object)
//! and clones every object it receives before keeping it; at 20,000 pods the keys alone are
//! megabytes, and the clone of each listed object, with the original freed right after,
//! leaves the heap fragmented. This one keeps the object the watcher decoded (moved, never
//! cloned), finds it by the key borrowed from the object itself, and hands snapshots the
//! vector already in the order they are sorted by. A relist swaps the new list in only once
//! it is complete (`Init` .. `InitDone`), as kube-runtime's does, so a watch fault never
//! makes objects look deleted.

use std::cmp::Ordering;
use std::sync::{Arc, PoisonError, RwLock};

use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::cluster::sort_key;

fn by_key<K: Resource>(a: &Arc<K>, b: &Arc<K>) -> Ordering {
    sort_key(a.as_ref()).cmp(&sort_key(b.as_ref()))
}

/// One kind's objects, read by snapshots and written by its [`Writer`].
pub(super) struct Store<K> {
    objects: RwLock<Vec<Arc<K>>>,
    ready: watch::Sender<bool>,
}

impl<K: Resource> Store<K> {
    pub(super) fn new() -> Self {
        Self {
            objects: RwLock::new(Vec::new()),
            ready: watch::Sender::new(false),
        }
    }

    /// The objects, in (namespace, name) order: the store's `Arc`s, not copies.
    pub(super) fn state(&self) -> Vec<Arc<K>> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until the first complete list is in.
    pub(super) async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        // An error means the sender is gone, which it never is while `self` lives.
        let _ = ready.wait_for(|ready| *ready).await;
    }
}

/// Applies a watcher's events to a [`Store`]; owned by the task that drives the watcher.
pub(super) struct Writer<K> {
    store: Arc<Store<K>>,
    /// A relist's objects, until it is complete.
    relist: Vec<Arc<K>>,
}

impl<K: Resource> Writer<K> {
    pub(super) fn new(store: Arc<Store<K>>) -> Self {
        Self {
            store,
            relist: Vec::new(),
        }
    }

    pub(super) fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => {
                let object = Arc::new(object);
                let mut objects = self.objects();
                match objects.binary_search_by(|stored| by_key(stored, &object)) {
                    Ok(at) => objects[at] = object,
                    Err(at) => objects.insert(at, object),
                }
            }
            watcher::Event::Delete(object) => {
                let mut objects = self.objects();
                if let Ok(at) = objects
                    .binary_search_by(|stored| sort_key(stored.as_ref()).cmp(&sort_key(&object)))
                {
                    objects.remove(at);
                }
            }
            watcher::Event::Init => self.relist = Vec::new(),
            watcher::Event::InitApply(object) => self.relist.push(Arc::new(object)),
            watcher::Event::InitDone => {
                let mut relist = std::mem::take(&mut self.relist);
                // A key listed twice keeps its last object, as a map would: reversed, the
                // stable sort puts the later one first, and `dedup_by` keeps the first.
                relist.reverse();
                relist.sort_by(by_key);
                relist.dedup_by(|later, kept| by_key(later, kept).is_eq());
                relist.shrink_to_fit();
                *self.objects() = relist;
                self.store.ready.send_replace(true);
            }
        }
    }

    fn objects(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<K>>> {
        self.store
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str, version: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("default".to_owned());
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.resource_version = Some(version.to_owned());
        pod
    }

    fn names(store: &Store<Pod>) -> Vec<(String, String)> {
        store
            .state()
            .iter()
            .map(|pod| {
                (
                    pod.metadata.name.clone().unwrap_or_default(),
                    pod.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    fn named(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(name, version)| ((*name).to_owned(), (*version).to_owned()))
            .collect()
    }

    #[tokio::test]
    async fn given_watch_events_then_the_store_keeps_the_latest_objects_in_key_order() {
        let store = Arc::new(Store::new());
        let mut writer = Writer::new(Arc::clone(&store));
        writer.apply(watcher::Event::Init);
        for (name, version) in [("c", "1"), ("a", "2"), ("b", "3"), ("a", "4")] {
            writer.apply(watcher::Event::InitApply(pod(name, version)));
        }
        assert!(store.state().is_empty(), "a list counts once complete");
        writer.apply(watcher::Event::InitDone);
        store.wait_until_ready().await;
        assert_eq!(names(&store), named(&[("a", "4"), ("b", "3"), ("c", "1")]));

        writer.apply(watcher::Event::Apply(pod("b", "5")));
        writer.apply(watcher::Event::Apply(pod("aa", "6")));
        writer.apply(watcher::Event::Delete(pod("c", "7")));
        writer.apply(watcher::Event::Delete(pod("zz", "8")));
        assert_eq!(names(&store), named(&[("a", "4"), ("aa", "6"), ("b", "5")]));

        // A relist replaces the objects only when it is done: meanwhile they all stay.
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(pod("b", "9")));
        assert_eq!(names(&store).len(), 3);
        writer.apply(watcher::Event::InitDone);
        assert_eq!(names(&store), named(&[("b", "9")]));
    }
}
