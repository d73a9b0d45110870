//! [`Reflected`]: one kind's reflector (a kube-runtime watcher, listing in pages of
//! [`LIST_PAGE_SIZE`], into its own [`Store`]) and the write-through overlay laid over it, so
//! a snapshot shows the adapter's own writes before the watch delivers them; an overlay entry
//! goes once the store has caught up with it, or after [`OVERLAY_TTL`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Changes;
use super::store::{Store, Writer};
use crate::cluster::sort_key;

/// How long the adapter's own write may stand in for what the watch has not delivered yet.
/// Watches deliver in milliseconds; this only bounds the damage of an overlay entry whose
/// object was deleted by someone else before the watch caught up.
pub const OVERLAY_TTL: Duration = Duration::from_secs(30);

/// Objects per page of a reflector's list. A list of every pod of a large cluster in one
/// response is decoded whole before the first object is slimmed: at 20,000 pods that is
/// some 200 MB at once, freed right after but left behind as heap the process keeps. Pages
/// of 500 (client-go's pager and kube-runtime's default) bound it to a page.
pub const LIST_PAGE_SIZE: u32 = 500;

/// One kind's reflector store and the adapter's writes the store may not show yet: objects
/// of kind `W` as the API server sends them, cached as `C` (the object less what core never
/// reads).
pub(super) struct Reflected<W: Resource + 'static, C = W>
where
    W::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub(super) store: Arc<Store<C>>,
    pub(super) dyntype: W::DynamicType,
    overlay: Mutex<BTreeMap<(String, String), Overlaid<C>>>,
    /// What an object becomes before it is cached (store and overlay alike).
    cache: fn(W) -> C,
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

impl<W, C> Reflected<W, C>
where
    W: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    W::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    C: Resource + Send + Sync + 'static,
{
    fn new(store: Arc<Store<C>>, dyntype: W::DynamicType, cache: fn(W) -> C) -> Self {
        Self {
            store,
            dyntype,
            overlay: Mutex::new(BTreeMap::new()),
            cache,
        }
    }

    /// The store's objects with the overlay laid over them, in (namespace, name) order;
    /// overlay entries the store has caught up with are dropped. The store keeps its `Arc`s
    /// in that order, so a snapshot of the whole cluster allocates one vector per kind and
    /// copies no object and no name.
    pub(super) fn view(&self, now: Instant) -> Vec<Arc<C>> {
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

    pub(super) fn written(&self, object: &W) {
        let cached = (self.cache)(object.clone());
        let mut overlay = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        overlay.insert(
            key_of(object),
            Overlaid::Written {
                object: Arc::new(cached),
                at: Instant::now(),
            },
        );
    }

    pub(super) fn deleted(&self, namespace: &str, name: &str, uid: Option<String>) {
        let mut overlay = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        overlay.insert(
            (namespace.to_owned(), name.to_owned()),
            Overlaid::Deleted {
                uid,
                at: Instant::now(),
            },
        );
    }

    /// Starts the list-and-watch of `api` into a new store, each object made what is cached
    /// by `cache`; every event bumps `changes`.
    pub(super) fn start(
        api: Api<W>,
        dyntype: W::DynamicType,
        label: String,
        changes: &Arc<Changes>,
        cache: fn(W) -> C,
    ) -> (Self, JoinHandle<()>) {
        let store = Arc::new(Store::new());
        let mut writer = Writer::new(Arc::clone(&store));
        let stream =
            watcher(api, watcher::Config::default().page_size(LIST_PAGE_SIZE)).default_backoff();
        let changes = Arc::clone(changes);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => {
                        writer.apply(cached_event(event, cache));
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
        (Self::new(store, dyntype, cache), task)
    }
}

/// The watcher's `event` with its object made what is cached, as it arrives: a page of a
/// list is never held whole in both forms.
fn cached_event<W, C>(event: watcher::Event<W>, cache: fn(W) -> C) -> watcher::Event<C> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(cache(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(cache(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(cache(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
