//! Converted Nodes kept from one pass to the next.
//!
//! Every provisioning and disruption pass builds the scheduler's input from the whole cluster,
//! and converting a Node with its pods (labels into requirements, quantities parsed) is most of
//! that work. Between two passes few Nodes change: a [`NodeMemo`] keeps each Node's conversion
//! with the `resourceVersion`s it was made from (the Node's, its NodeClaim's and every pod's it
//! counted) and shares it while all of them are still the same. The API server gives
//! every write a new `resourceVersion`, so an unchanged list of versions means unchanged
//! objects. The same goes for each launched NodeClaim's `status.capacity`, parsed for its
//! NodePool's usage on every pass ([`NodeMemo::capacity`]).
//!
//! Only what converted without an error is kept (errors are reported on every pass), and an
//! object without a `resourceVersion` (a test fixture) is never kept. Entries a pass did not ask
//! for are dropped when the next pass begins, so the memo holds at most the cluster's Nodes
//! and NodeClaims.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use core_domain::resources::ResourceList;
use core_domain::scheduler::ExistingNode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Converted Nodes by name, with the versions they were converted from (see the module
/// documentation). Shared by reference; locked per lookup.
#[derive(Debug, Default)]
pub struct NodeMemo {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The pass being built; entries not used by the previous one are dropped when it starts.
    pass: u64,
    nodes: HashMap<String, Entry>,
    /// Launched NodeClaims' parsed `status.capacity`, by NodeClaim name.
    capacities: HashMap<String, Capacity>,
}

#[derive(Debug)]
struct Capacity {
    version: String,
    capacity: ResourceList,
    used: u64,
}

#[derive(Debug)]
struct Entry {
    versions: Vec<String>,
    node: Arc<ExistingNode>,
    used: u64,
}

/// The versions of the objects one conversion reads, in the order it reads them; `None` when
/// one of them has no `resourceVersion`.
pub fn versions<'a>(objects: impl IntoIterator<Item = &'a ObjectMeta>) -> Option<Vec<&'a str>> {
    objects
        .into_iter()
        .map(|meta| meta.resource_version.as_deref())
        .collect()
}

impl NodeMemo {
    /// An empty memo.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a pass: drops what the previous pass did not use.
    pub fn begin_pass(&self) {
        let mut inner = self.lock();
        let previous = inner.pass;
        inner.nodes.retain(|_, entry| entry.used == previous);
        inner
            .capacities
            .retain(|_, capacity| capacity.used == previous);
        inner.pass += 1;
    }

    /// The `status.capacity` of the NodeClaim `name` as parsed at `version`, if kept.
    pub fn capacity(&self, name: &str, version: &str) -> Option<ResourceList> {
        let mut inner = self.lock();
        let pass = inner.pass;
        let kept = inner.capacities.get_mut(name)?;
        if kept.version != version {
            return None;
        }
        kept.used = pass;
        Some(kept.capacity.clone())
    }

    /// Keeps `capacity`, the `status.capacity` of the NodeClaim `name` at `version`.
    pub fn put_capacity(&self, name: &str, version: &str, capacity: &ResourceList) {
        let mut inner = self.lock();
        let used = inner.pass;
        inner.capacities.insert(
            name.to_owned(),
            Capacity {
                version: version.to_owned(),
                capacity: capacity.clone(),
                used,
            },
        );
    }

    /// The Node `name` as converted from exactly `versions`, if kept (shared: the scheduler
    /// only reads it).
    pub fn get(&self, name: &str, versions: &[&str]) -> Option<Arc<ExistingNode>> {
        let mut inner = self.lock();
        let pass = inner.pass;
        let entry = inner.nodes.get_mut(name)?;
        if !entry
            .versions
            .iter()
            .map(String::as_str)
            .eq(versions.iter().copied())
        {
            return None;
        }
        entry.used = pass;
        Some(Arc::clone(&entry.node))
    }

    /// Keeps `node`, converted from `versions`.
    pub fn put(&self, name: &str, versions: &[&str], node: &Arc<ExistingNode>) {
        let mut inner = self.lock();
        let used = inner.pass;
        inner.nodes.insert(
            name.to_owned(),
            Entry {
                versions: versions.iter().map(|&version| version.to_owned()).collect(),
                node: Arc::clone(node),
                used,
            },
        );
    }

    /// How many Nodes are kept.
    pub fn len(&self) -> usize {
        self.lock().nodes.len()
    }

    /// How many NodeClaim capacities are kept.
    pub fn capacities(&self) -> usize {
        self.lock().capacities.len()
    }

    /// Whether no Node is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every operation leaves the map whole; a panic elsewhere cannot corrupt it.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            resource_version: version.map(str::to_owned),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn versions_are_read_in_order_and_missing_when_any_object_has_none() {
        let (node, pod) = (meta(Some("7")), meta(Some("9")));
        assert_eq!(versions([&node, &pod]), Some(vec!["7", "9"]));
        assert_eq!(versions([&node, &meta(None)]), None);
    }

    #[test]
    fn a_node_is_handed_back_only_for_the_same_versions() {
        let memo = NodeMemo::new();
        memo.begin_pass();
        let node = Arc::new(ExistingNode::new(
            "a",
            [],
            ResourceList::new().with("cpu", 1000),
        ));
        memo.put("a", &["1", "2"], &node);
        assert_eq!(
            memo.get("a", &["1", "2"])
                .map(|node| node.allocatable.clone()),
            Some(node.allocatable.clone())
        );
        assert!(memo.get("a", &["1", "3"]).is_none(), "a pod changed");
        assert!(memo.get("a", &["1"]).is_none(), "a pod went away");
        assert!(memo.get("a", &["1", "2", "4"]).is_none(), "a pod came");
        assert!(memo.get("b", &["1", "2"]).is_none());
    }

    #[test]
    fn a_capacity_is_handed_back_only_for_the_same_version_and_dropped_once_unused() {
        let memo = NodeMemo::new();
        memo.begin_pass();
        let capacity = ResourceList::new().with("cpu", 4000);
        memo.put_capacity("claim-a", "7", &capacity);
        assert_eq!(memo.capacity("claim-a", "7"), Some(capacity.clone()));
        assert_eq!(memo.capacity("claim-a", "8"), None, "the NodeClaim changed");
        assert_eq!(memo.capacity("claim-b", "7"), None);
        memo.begin_pass();
        assert_eq!(memo.capacity("claim-a", "7"), Some(capacity));
        memo.begin_pass();
        assert_eq!(memo.capacities(), 1, "used by the last pass");
        memo.begin_pass();
        assert_eq!(memo.capacities(), 0, "not used by the last pass");
    }

    #[test]
    fn what_a_pass_did_not_use_is_dropped_when_the_next_begins() {
        let memo = NodeMemo::new();
        memo.begin_pass();
        let node = Arc::new(ExistingNode::new("a", [], ResourceList::new()));
        memo.put("a", &["1"], &node);
        memo.put("b", &["2"], &node);
        memo.begin_pass();
        assert!(memo.get("a", &["1"]).is_some());
        assert_eq!(memo.len(), 2, "dropped only when the next pass begins");
        memo.begin_pass();
        assert_eq!(memo.len(), 1, "b was not used by the last pass");
        assert!(memo.get("a", &["1"]).is_some());
        memo.begin_pass();
        memo.begin_pass();
        assert!(memo.is_empty());
    }
}
