//! Which pods the provisioner has already found capacity for, and until when (upstream's
//! nomination of state nodes, `state/statenode.go`): in memory only, so a restart forgets
//! them and the next pass finds the same capacity again (the NodeClaims it created are
//! in-flight capacity in the scheduler's input).
//!
//! A nominated pod is not scheduled again, and its requests are reserved on the capacity it
//! was nominated to, while the nomination holds:
//!
//! - to a NodeClaim: as long as the NodeClaim exists, is not being deleted and is not yet
//!   initialized; once initialized, for the nomination window after the nomination (the pod is
//!   the kube-scheduler's to bind). A NodeClaim that is not in the snapshot yet (a cache
//!   lagging behind the create) holds the nomination for the window; one that was seen and is
//!   gone drops it at once, so the pods of a failed launch are scheduled again.
//! - to a Node without a NodeClaim: for the window, while the Node exists and is not being
//!   deleted.
//!
//! The window is upstream's: max(2 × batch_max, 10 s).
//!
//! [`SharedNominations`] is the handle the provisioner writes them through and the disruption
//! controller reads them from: a node nominated within the window is no disruption candidate
//! (upstream kubernetes-sigs/karpenter `pkg/controllers/state/cluster.go`, `IsNodeNominated`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::condition;
use karpenter_api::nodeclaim::CONDITION_INITIALIZED;

use super::batcher::{later, remaining};
use crate::cluster::Snapshot;
use crate::controllers::nodeclaim::nodes_of;

/// The shortest nomination window.
pub const MIN_NOMINATION_WINDOW: Duration = Duration::from_secs(10);

/// Upstream's nomination window for a batch of at most `batch_max`: max(2 × batch_max, 10 s).
pub fn nomination_window(batch_max: Duration) -> Duration {
    batch_max.saturating_mul(2).max(MIN_NOMINATION_WINDOW)
}

/// What a pod is nominated to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A NodeClaim, by name (whether or not its Node registered).
    NodeClaim(String),
    /// A Node that has no NodeClaim (one core does not manage), by name.
    Node(String),
}

impl Target {
    /// The NodeClaim's or Node's name.
    pub fn name(&self) -> &str {
        match self {
            Target::NodeClaim(name) | Target::Node(name) => name,
        }
    }
}

/// One nomination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nomination {
    /// Where the pod is expected to go.
    pub target: Target,
    /// When it was nominated.
    pub at: Timestamp,
    /// Whether a snapshot has shown the target NodeClaim since.
    pub seen: bool,
    /// Whether the nomination ends with the window (false while its NodeClaim launches).
    pub windowed: bool,
}

/// The nominations, by pod UID.
#[derive(Debug, Clone)]
pub struct Nominations {
    window: Duration,
    by_pod: HashMap<String, Nomination>,
    /// How many nominations were ever made: it moves on each [`Nominations::nominate`], so a
    /// reader can tell that none was made since it last looked.
    generation: u64,
}

impl Nominations {
    /// No nominations; time-bound ones last `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            by_pod: HashMap::new(),
            generation: 0,
        }
    }

    /// Nominates the pod `uid` to `target` at `now`, replacing an earlier nomination.
    pub fn nominate(&mut self, uid: &str, target: Target, now: Timestamp) {
        self.generation = self.generation.wrapping_add(1);
        self.by_pod.insert(
            uid.to_owned(),
            Nomination {
                target,
                at: now,
                seen: false,
                windowed: true,
            },
        );
    }

    /// The nomination of the pod `uid`, if it holds (as of the last [`Nominations::prune`]).
    pub fn get(&self, uid: &str) -> Option<&Nomination> {
        self.by_pod.get(uid)
    }

    /// The nominations that hold, by pod UID.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Nomination)> + '_ {
        self.by_pod.iter().map(|(uid, n)| (uid.as_str(), n))
    }

    /// Moves on every nomination made (never on one dropped): equal generations mean no
    /// node has been nominated in between.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many nominations hold.
    pub fn len(&self) -> usize {
        self.by_pod.len()
    }

    /// Whether none holds.
    pub fn is_empty(&self) -> bool {
        self.by_pod.is_empty()
    }

    /// Drops the nominations that no longer hold at `now` given `snapshot` (see the module
    /// documentation), and those of pods that are no longer waiting for capacity (`waiting`:
    /// the UIDs of the pods the provisioner would schedule).
    pub fn prune(&mut self, snapshot: &Snapshot, waiting: &HashSet<&str>, now: Timestamp) {
        let window = self.window;
        self.by_pod.retain(|uid, nomination| {
            waiting.contains(uid.as_str()) && holds(nomination, snapshot, now, window)
        });
    }

    /// How long a time-bound nomination lasts.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The names of the Nodes some pod was nominated to within the window before `now`, a
    /// NodeClaim target resolved to its Nodes in `snapshot` (by provider ID). Only the window
    /// counts, not [`Nominations::prune`]'s other rules: a NodeClaim still launching is no
    /// disruption candidate anyway, and the provisioner may not have pruned since.
    pub fn nominated_nodes(&self, snapshot: &Snapshot, now: Timestamp) -> BTreeSet<String> {
        let mut nodes = BTreeSet::new();
        for nomination in self.by_pod.values() {
            if now >= later(nomination.at, self.window) {
                continue;
            }
            match &nomination.target {
                Target::Node(name) => {
                    nodes.insert(name.clone());
                }
                Target::NodeClaim(name) => {
                    let Some(claim) = snapshot.node_claim(name) else {
                        continue;
                    };
                    nodes.extend(
                        nodes_of(snapshot, claim)
                            .into_iter()
                            .filter_map(|node| node.metadata.name.clone()),
                    );
                }
            }
        }
        nodes
    }

    /// How long until the first nomination bound by the window ends, if any.
    pub fn next_expiry(&self, now: Timestamp) -> Option<Duration> {
        self.by_pod
            .values()
            .filter(|n| n.windowed)
            .filter_map(|n| remaining(now, later(n.at, self.window)))
            .min()
    }
}

/// The provisioner's nominations behind a lock, for the provisioner to write and the
/// disruption controller to read. Clones share the same nominations. In memory only, like
/// [`Nominations`]: a restart starts from a fresh handle.
#[derive(Debug, Clone)]
pub struct SharedNominations {
    inner: Arc<Mutex<Nominations>>,
}

impl SharedNominations {
    /// No nominations; time-bound ones last `window` (see [`nomination_window`]).
    pub fn new(window: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Nominations::new(window))),
        }
    }

    /// The nominations, locked.
    pub fn lock(&self) -> MutexGuard<'_, Nominations> {
        // Every change is a map insert or retain: a panic elsewhere cannot leave them
        // half-written.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// See [`Nominations::nominated_nodes`].
    pub fn nominated_nodes(&self, snapshot: &Snapshot, now: Timestamp) -> BTreeSet<String> {
        self.lock().nominated_nodes(snapshot, now)
    }

    /// See [`Nominations::generation`].
    pub fn generation(&self) -> u64 {
        self.lock().generation()
    }
}

/// Whether `nomination` still holds; notes whether its NodeClaim was seen and whether the
/// window bounds it.
fn holds(
    nomination: &mut Nomination,
    snapshot: &Snapshot,
    now: Timestamp,
    window: Duration,
) -> bool {
    let within_window = now < later(nomination.at, window);
    match &nomination.target {
        Target::NodeClaim(name) => match snapshot.node_claim(name) {
            Some(claim) if claim.metadata.deletion_timestamp.is_some() => false,
            Some(claim) => {
                nomination.seen = true;
                let initialized = claim.status.as_ref().is_some_and(|status| {
                    condition::is_true(&status.conditions, CONDITION_INITIALIZED)
                });
                nomination.windowed = initialized;
                !initialized || within_window
            }
            None => {
                nomination.windowed = true;
                !nomination.seen && within_window
            }
        },
        Target::Node(name) => snapshot
            .node(name)
            .is_some_and(|node| node.metadata.deletion_timestamp.is_none() && within_window),
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::NodeClaim;
    use serde_json::json;

    use super::*;
    use crate::controllers::testing::{self, snapshot};

    fn t(seconds: u64) -> Timestamp {
        let start: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        later(start, Duration::from_secs(seconds))
    }

    fn claim(name: &str, initialized: bool, deleting: bool) -> NodeClaim {
        let mut patch = json!({});
        if initialized {
            patch["status"] = json!({ "conditions": [{
                "type": "Initialized", "status": "True",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
            }]});
        }
        if deleting {
            patch["metadata"] = json!({
                "deletionTimestamp": "2025-01-01T00:00:00Z",
                "finalizers": ["karpenter.sh/termination"],
            });
        }
        testing::node_claim(name, patch)
    }

    fn waiting() -> HashSet<&'static str> {
        HashSet::from(["pod-a"])
    }

    fn nominated(target: Target) -> Nominations {
        let mut nominations = Nominations::new(Duration::from_secs(20));
        nominations.nominate("pod-a", target, t(0));
        nominations
    }

    #[test]
    fn given_the_default_batch_max_then_the_window_is_twenty_seconds() {
        assert_eq!(
            nomination_window(Duration::from_secs(10)),
            Duration::from_secs(20)
        );
        assert_eq!(
            nomination_window(Duration::from_secs(1)),
            MIN_NOMINATION_WINDOW
        );
    }

    #[test]
    fn given_a_launching_node_claim_then_the_nomination_outlives_the_window() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        let launching = snapshot(vec![claim("default-x", false, false)], vec![]);
        nominations.prune(&launching, &waiting(), t(1));
        assert_eq!(
            nominations.next_expiry(t(1)),
            None,
            "no time bound while launching"
        );
        nominations.prune(&launching, &waiting(), t(600));
        assert!(nominations.get("pod-a").is_some());
    }

    #[test]
    fn given_an_initialized_node_claim_then_the_nomination_ends_with_the_window() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        let initialized = snapshot(vec![claim("default-x", true, false)], vec![]);
        nominations.prune(&initialized, &waiting(), t(19));
        assert!(nominations.get("pod-a").is_some());
        assert_eq!(nominations.next_expiry(t(19)), Some(Duration::from_secs(1)));
        nominations.prune(&initialized, &waiting(), t(20));
        assert!(nominations.is_empty());
    }

    #[test]
    fn given_a_node_claim_being_deleted_then_the_nomination_ends() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        nominations.prune(
            &snapshot(vec![claim("default-x", false, true)], vec![]),
            &waiting(),
            t(1),
        );
        assert!(nominations.is_empty());
    }

    #[test]
    fn given_a_node_claim_not_seen_yet_then_the_window_holds_the_nomination() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        nominations.prune(&snapshot(vec![], vec![]), &waiting(), t(5));
        assert!(nominations.get("pod-a").is_some(), "the cache may lag");
        nominations.prune(&snapshot(vec![], vec![]), &waiting(), t(20));
        assert!(nominations.is_empty());
    }

    #[test]
    fn given_a_node_claim_seen_then_gone_then_the_nomination_ends_at_once() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        let present = snapshot(vec![claim("default-x", false, false)], vec![]);
        nominations.prune(&present, &waiting(), t(1));
        assert!(nominations.get("pod-a").is_some_and(|n| n.seen));
        nominations.prune(&snapshot(vec![], vec![]), &waiting(), t(2));
        assert!(nominations.is_empty(), "a failed launch frees its pods");
    }

    #[test]
    fn given_a_pod_no_longer_waiting_then_its_nomination_is_forgotten() {
        let mut nominations = nominated(Target::NodeClaim("default-x".into()));
        let present = snapshot(vec![claim("default-x", false, false)], vec![]);
        nominations.prune(&present, &HashSet::new(), t(1));
        assert!(nominations.is_empty());
    }

    #[test]
    fn given_a_node_without_node_claim_then_the_nomination_lasts_the_window() {
        let node = testing::node("static-1", json!({}));
        let mut nominations = nominated(Target::Node("static-1".into()));
        let with_node = snapshot(vec![], vec![node]);
        nominations.prune(&with_node, &waiting(), t(10));
        assert_eq!(
            nominations.get("pod-a").map(|n| n.target.name()),
            Some("static-1")
        );
        nominations.prune(&with_node, &waiting(), t(21));
        assert!(nominations.is_empty());
    }

    #[test]
    fn given_shared_nominations_then_the_nodes_nominated_within_the_window_are_named() {
        let shared = SharedNominations::new(Duration::from_secs(20));
        let reader = shared.clone();
        shared
            .lock()
            .nominate("pod-a", Target::NodeClaim("default-x".into()), t(0));
        shared
            .lock()
            .nominate("pod-b", Target::Node("static-1".into()), t(5));
        let launched = testing::node_claim(
            "default-x",
            json!({ "status": { "providerID": "fake:///zone/i-x" } }),
        );
        let snapshot = snapshot(
            vec![launched],
            vec![
                testing::node(
                    "node-x",
                    json!({ "spec": { "providerID": "fake:///zone/i-x" } }),
                ),
                testing::node("static-1", json!({})),
            ],
        );

        assert_eq!(
            reader.nominated_nodes(&snapshot, t(19)),
            BTreeSet::from(["node-x".to_owned(), "static-1".to_owned()]),
            "a NodeClaim's nomination names its Node"
        );
        assert_eq!(
            reader.nominated_nodes(&snapshot, t(20)),
            BTreeSet::from(["static-1".to_owned()]),
            "each nomination ends with its own window"
        );
        assert!(reader.nominated_nodes(&snapshot, t(25)).is_empty());
    }
}
