//! The per-NodePool instance type cache: one per controller set, shared by the provisioner and
//! the disruption controller (the manager hands both the same one), so both plan on the same
//! catalogue of a NodePool. One NodePool's types are reused for a TTL, and fetched again sooner
//! when the NodePool or its node class changes generation. [`fetch`] asks the cloud without
//! caching, for what measures a run rather than acts in it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;

use super::batcher::later;
use super::input::Catalogue;
use super::selection::UsableNodePool;
use crate::cloudprovider::{CloudProvider, CloudProviderError};

/// NodePool name → its instance types, each kept for a TTL and while the NodePool and its
/// node class keep their generations.
#[derive(Debug)]
pub struct CatalogueCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, CachedCatalogue>>,
}

/// A NodePool's instance types and what they were fetched for.
#[derive(Debug, Clone)]
struct CachedCatalogue {
    key: CatalogueKey,
    fetched: Timestamp,
    types: Catalogue,
}

/// What a catalogue depends on: the NodePool and its node class, at their generations.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CatalogueKey {
    node_pool: (Option<String>, Option<i64>),
    node_class: Option<(Option<String>, Option<i64>)>,
}

impl CatalogueKey {
    fn of(usable: &UsableNodePool<'_>) -> Self {
        let meta = &usable.pool.metadata;
        Self {
            node_pool: (meta.uid.clone(), meta.generation),
            node_class: usable
                .node_class
                .map(|class| (class.metadata.uid.clone(), class.metadata.generation)),
        }
    }
}

impl CatalogueCache {
    /// An empty cache whose entries are reused for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, CachedCatalogue>> {
        // Every update is a whole-value insert, retain or clear: a panic cannot leave it
        // half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The instance types of `usable`: the cached ones while fresh as of `now`, otherwise
    /// fetched from `cloud` and cached.
    pub async fn get<P: CloudProvider>(
        &self,
        cloud: &P,
        usable: &UsableNodePool<'_>,
        now: Timestamp,
    ) -> Result<Catalogue, CloudProviderError> {
        let name = usable.pool.metadata.name.clone().unwrap_or_default();
        let key = CatalogueKey::of(usable);
        if let Some(cached) = self.lock().get(&name).filter(|cached| {
            cached.key == key && now >= cached.fetched && now < later(cached.fetched, self.ttl)
        }) {
            return Ok(cached.types.clone());
        }
        let types = fetch(cloud, usable).await?;
        self.lock().insert(
            name,
            CachedCatalogue {
                key,
                fetched: now,
                types: types.clone(),
            },
        );
        Ok(types)
    }

    /// When the first cached catalogue stops being fresh (and the next [`get`](Self::get) of
    /// its NodePool asks the cloud again); `None` when nothing is cached.
    pub fn fresh_until(&self) -> Option<Timestamp> {
        self.lock()
            .values()
            .map(|cached| later(cached.fetched, self.ttl))
            .min()
    }

    /// Every cached catalogue by NodePool name, fresh or not.
    pub fn all(&self) -> HashMap<String, Catalogue> {
        self.lock()
            .iter()
            .map(|(name, cached)| (name.clone(), cached.types.clone()))
            .collect()
    }

    /// Forgets the NodePools for which `keep` is false.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.lock().retain(|name, _| keep(name));
    }

    /// Forgets `node_pool`'s catalogue, so that the next [`get`](Self::get) of it fetches.
    pub fn forget(&self, node_pool: &str) {
        self.lock().remove(node_pool);
    }

    /// Forgets everything, so that the next [`get`](Self::get) of each NodePool fetches.
    pub fn clear(&self) {
        self.lock().clear();
    }
}

/// The instance types of `usable`, asked of `cloud` now, without any cache.
pub async fn fetch<P: CloudProvider>(
    cloud: &P,
    usable: &UsableNodePool<'_>,
) -> Result<Catalogue, CloudProviderError> {
    let node_pool = serde_json::to_value(usable.pool).map_err(|error| {
        let name = usable.pool.metadata.name.as_deref().unwrap_or_default();
        CloudProviderError::InvalidRequest(format!("NodePool {name} as JSON: {error}"))
    })?;
    let node_class = usable
        .node_class
        .map(serde_json::to_value)
        .transpose()
        .map_err(|error| {
            CloudProviderError::InvalidRequest(format!("node class as JSON: {error}"))
        })?;
    Ok(cloud
        .instance_types(&node_pool, node_class.as_ref())
        .await?
        .into())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cloudprovider::FakeCloudProvider;
    use crate::cloudprovider::fake::Call;
    use crate::controllers::testing::{at, node_class, node_pool};

    fn fetches(cloud: &FakeCloudProvider) -> usize {
        cloud
            .calls()
            .iter()
            .filter(|call| matches!(call, Call::InstanceTypes { .. }))
            .count()
    }

    #[tokio::test]
    async fn a_catalogue_is_reused_within_its_ttl_and_fetched_again_after_it() {
        let cloud = FakeCloudProvider::new();
        let cache = CatalogueCache::new(Duration::from_secs(60));
        let pool = node_pool("default", json!({ "metadata": { "generation": 1 } }));
        let usable = UsableNodePool {
            pool: &pool,
            node_class: None,
        };

        cache.get(&cloud, &usable, at(0)).await.unwrap();
        cache.get(&cloud, &usable, at(59)).await.unwrap();
        assert_eq!(fetches(&cloud), 1);

        cache.get(&cloud, &usable, at(60)).await.unwrap();
        assert_eq!(fetches(&cloud), 2);
    }

    #[tokio::test]
    async fn a_new_generation_of_the_node_pool_or_its_node_class_fetches_again() {
        let cloud = FakeCloudProvider::new();
        let cache = CatalogueCache::new(Duration::from_secs(60));
        let pool = node_pool("default", json!({ "metadata": { "generation": 1 } }));
        let class = node_class("default", json!({ "metadata": { "generation": 1 } }));
        let changed_pool = node_pool("default", json!({ "metadata": { "generation": 2 } }));
        let changed_class = node_class("default", json!({ "metadata": { "generation": 2 } }));

        for (pool, class) in [
            (&pool, &class),
            (&changed_pool, &class),
            (&changed_pool, &changed_class),
        ] {
            let usable = UsableNodePool {
                pool,
                node_class: Some(class),
            };
            cache.get(&cloud, &usable, at(0)).await.unwrap();
        }

        assert_eq!(fetches(&cloud), 3);
    }

    #[tokio::test]
    async fn after_clear_or_retain_the_forgotten_node_pools_fetch_again() {
        let cloud = FakeCloudProvider::new();
        let cache = CatalogueCache::new(Duration::from_secs(60));
        let pools = [node_pool("a", json!({})), node_pool("b", json!({}))];
        let usable: Vec<UsableNodePool<'_>> = pools
            .iter()
            .map(|pool| UsableNodePool {
                pool,
                node_class: None,
            })
            .collect();
        for pool in &usable {
            cache.get(&cloud, pool, at(0)).await.unwrap();
        }

        cache.retain(|name| name == "a");
        assert_eq!(cache.all().keys().collect::<Vec<_>>(), ["a"]);
        cache.clear();
        assert!(cache.all().is_empty());
        cache.get(&cloud, &usable[0], at(1)).await.unwrap();

        assert_eq!(fetches(&cloud), 3);
    }
}
