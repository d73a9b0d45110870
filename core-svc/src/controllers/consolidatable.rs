//! The `Consolidatable` condition of NodeClaims and their `status.lastPodEventTime`
//! (upstream kubernetes-sigs/karpenter `pkg/controllers/nodeclaim/disruption/consolidation.go`
//! and `pkg/controllers/nodeclaim/podevents`).
//!
//! **lastPodEventTime.** A pod event is a change of the set of pods that occupy the NodeClaim's
//! Node: a pod bound to it, or one leaving it (deleted, terminal, terminating). DaemonSet and
//! static pods do not count: they come and go with the node itself and never move. The
//! controller compares each NodeClaim's set with the one it saw on its previous pass, and a
//! difference is an event at the pass's instant. As upstream, writes are rate-limited per
//! NodeClaim: within [`POD_EVENT_DEDUPE`] of the last written time an event is held in memory
//! and written when the window ends (upstream drops it; holding it keeps the recorded time
//! exact). The window is shorter than the 15 s validation of consolidation commands, so a
//! held event still reaches the cluster before a command decided meanwhile executes.
//!
//! **After a restart** the memory of the previous sets is gone. A NodeClaim seen for the first
//! time records its current set and counts as *no event*: a spurious event would push every
//! node's consolidation back by `consolidateAfter` on each restart of core. The cost is that a
//! change that happened while core was down is not recorded (nor is an event held in the dedupe
//! window when core stopped); the `Consolidatable` condition then goes by the last recorded
//! time, as it would have upstream with a missed watch event.
//!
//! **Consolidatable.** For a NodeClaim of a NodePool (not static, `consolidateAfter` not
//! `Never`) that is `Initialized=True`: the reference time is `lastPodEventTime` when set
//! (including an event still held in memory), else the `Initialized` condition's
//! lastTransitionTime; `Consolidatable=True` once `now - reference >= consolidateAfter`, and
//! the controller asks to run again at that exact moment. Otherwise (not initialized, `Never`,
//! static, or not yet time) the condition is removed. NodeClaims being deleted, or whose
//! NodePool is missing, are left as they are.

use crate::cluster::SlimPod;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::{CONDITION_CONSOLIDATABLE, CONDITION_INITIALIZED};
use karpenter_api::{Condition, ConditionStatus, NodeClaim, NodePool, condition};

use super::hash::CONFLICT_RETRY;
use super::nodeclaim::node_pool_of;
use super::provisioning::selection::{
    is_daemon_set_pod, is_static_pod, is_terminal, is_terminating, pod_uid,
};
use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::CloudProvider;
use crate::cluster::Cluster;

/// How long after a written `lastPodEventTime` the next one may be written (upstream
/// `dedupeTimeout`, 10 s): busy nodes would otherwise cost a write per pod.
pub const POD_EVENT_DEDUPE: Duration = Duration::from_secs(10);

/// The reason of `Consolidatable=True` (operatorpkg sets a true condition's reason to its
/// type).
pub const REASON_CONSOLIDATABLE: &str = "Consolidatable";

/// Whether a pod counts for pod events: it occupies the node (neither terminal nor
/// terminating) and could move (neither a DaemonSet's nor a static pod).
pub fn counts_for_pod_events(pod: &SlimPod) -> bool {
    !is_terminal(pod) && !is_terminating(pod) && !is_daemon_set_pod(pod) && !is_static_pod(pod)
}

/// A fingerprint of the pods that count on a node: equal sets give equal fingerprints whatever
/// their order. Only compared within one process, so the hasher need not be stable across
/// builds.
pub fn pod_fingerprint<'a>(pods: impl IntoIterator<Item = &'a SlimPod>) -> u64 {
    let mut uids: Vec<String> = pods
        .into_iter()
        .filter(|pod| counts_for_pod_events(pod))
        .map(pod_uid)
        .collect();
    uids.sort_unstable();
    let mut hasher = DefaultHasher::new();
    uids.hash(&mut hasher);
    hasher.finish()
}

/// What the controller remembers of one NodeClaim between passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenPods {
    /// The [`pod_fingerprint`] of its node's pods on the last pass.
    pub fingerprint: u64,
    /// A pod event observed but not written yet (held by [`POD_EVENT_DEDUPE`], or its write
    /// failed).
    pub unwritten_event: Option<Timestamp>,
}

/// Whether a NodeClaim is consolidatable now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The condition does not apply (not initialized, `consolidateAfter: Never`, static
    /// NodePool): removed.
    NotApplicable,
    /// Not yet: removed until `at`.
    NotYet {
        /// When it becomes consolidatable.
        at: Timestamp,
    },
    /// `Consolidatable=True`.
    Consolidatable,
}

/// The `Initialized` condition's lastTransitionTime when it is True.
fn initialized_at(node_claim: &NodeClaim) -> Option<Timestamp> {
    node_claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, CONDITION_INITIALIZED))
        .filter(|found| found.status == ConditionStatus::True)
        .map(|found| found.last_transition_time.0)
}

/// Whether `node_claim` of `node_pool` is consolidatable at `now`, its last pod event being
/// `last_pod_event` (the recorded one or a later one held in memory).
pub fn verdict(
    node_claim: &NodeClaim,
    node_pool: &NodePool,
    last_pod_event: Option<Timestamp>,
    now: Timestamp,
) -> Verdict {
    if node_pool.is_static() {
        return Verdict::NotApplicable;
    }
    let Some(after) = node_pool.spec.disruption.consolidate_after.duration() else {
        return Verdict::NotApplicable;
    };
    let Some(initialized) = initialized_at(node_claim) else {
        return Verdict::NotApplicable;
    };
    let reference = last_pod_event.unwrap_or(initialized);
    let at = SignedDuration::try_from(after)
        .ok()
        .and_then(|after| reference.checked_add(after).ok())
        .unwrap_or(Timestamp::MAX);
    if now >= at {
        Verdict::Consolidatable
    } else {
        Verdict::NotYet { at }
    }
}

/// The conditions of `node_claim` after `verdict`, or `None` when they do not change.
pub fn conditions_after(
    node_claim: &NodeClaim,
    verdict: Verdict,
    now: Timestamp,
) -> Option<Vec<Condition>> {
    let mut conditions = node_claim
        .status
        .as_ref()
        .map(|status| status.conditions.clone())
        .unwrap_or_default();
    let changed = match verdict {
        Verdict::Consolidatable => condition::set(
            &mut conditions,
            CONDITION_CONSOLIDATABLE,
            ConditionStatus::True,
            REASON_CONSOLIDATABLE,
            "",
            Time(now),
        ),
        Verdict::NotApplicable | Verdict::NotYet { .. } => {
            let before = conditions.len();
            conditions.retain(|found| found.type_ != CONDITION_CONSOLIDATABLE);
            conditions.len() != before
        }
    };
    changed.then_some(conditions)
}

/// One status write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    /// The NodeClaim's name.
    pub node_claim: String,
    /// Its memory key ([`memory_key`]).
    pub key: String,
    /// The `resourceVersion` it was read at: the write applies only to that version.
    pub resource_version: Option<String>,
    /// A new `lastPodEventTime`.
    pub last_pod_event_time: Option<Timestamp>,
    /// New conditions.
    pub conditions: Option<Vec<Condition>>,
}

/// What one pass does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The status writes.
    pub updates: Vec<StatusUpdate>,
    /// The memory for the next pass (events of `updates` still held: the caller clears them
    /// once written).
    pub seen: HashMap<String, SeenPods>,
    /// When the next pass is due: a NodeClaim becoming consolidatable, a held event's window
    /// ending.
    pub next_pass: Option<Timestamp>,
}

/// How the controller remembers a NodeClaim: its UID (a NodeClaim recreated under the same
/// name is another one), else its name.
pub fn memory_key(node_claim: &NodeClaim) -> String {
    node_claim
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| node_claim.metadata.name.clone().unwrap_or_default())
}

fn earliest(current: Option<Timestamp>, candidate: Timestamp) -> Option<Timestamp> {
    Some(current.map_or(candidate, |current| current.min(candidate)))
}

/// Decides one pass over `snapshot` at `now`, given what the previous pass saw (see the module
/// documentation).
pub fn plan(snapshot: &Snapshot, now: Timestamp, seen: &HashMap<String, SeenPods>) -> Plan {
    let pods_by_node = snapshot.pods_by_node();
    let mut plan = Plan::default();
    // Sized for every NodeClaim at once: growing would hash every key again.
    plan.seen.reserve(snapshot.node_claims.len());
    for node_claim in snapshot.node_claims() {
        if node_claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = memory_key(node_claim);
        let status = node_claim.status.as_ref();
        let node_name = status.map_or("", |status| status.node_name.as_str());
        let pods = if node_name.is_empty() {
            &[][..]
        } else {
            pods_by_node.get(node_name).map_or(&[][..], Vec::as_slice)
        };
        let fingerprint = pod_fingerprint(pods.iter().copied());
        let remembered = match seen.get(&key) {
            // Never seen (a new NodeClaim, or core restarted): no event, see the module docs.
            None => SeenPods {
                fingerprint,
                unwritten_event: None,
            },
            Some(previous) if previous.fingerprint != fingerprint => SeenPods {
                fingerprint,
                unwritten_event: Some(now),
            },
            Some(previous) => *previous,
        };
        let recorded = status
            .and_then(|status| status.last_pod_event_time.as_ref())
            .map(|time| time.0);
        let mut write_event = None;
        if let Some(event) = remembered.unwritten_event {
            let window_end = recorded
                .and_then(|recorded| recorded.checked_add(POD_EVENT_DEDUPE).ok())
                .unwrap_or(Timestamp::MIN);
            if now >= window_end {
                write_event = Some(event);
            } else {
                plan.next_pass = earliest(plan.next_pass, window_end);
            }
        }
        let last_pod_event = match (recorded, remembered.unwritten_event) {
            (Some(recorded), Some(held)) => Some(recorded.max(held)),
            (recorded, held) => recorded.or(held),
        };
        plan.seen.insert(key.clone(), remembered);
        let node_pool = node_pool_of(node_claim).and_then(|name| snapshot.node_pool(name));
        let conditions = node_pool.and_then(|node_pool| {
            let verdict = verdict(node_claim, node_pool, last_pod_event, now);
            if let Verdict::NotYet { at } = verdict {
                plan.next_pass = earliest(plan.next_pass, at);
            }
            conditions_after(node_claim, verdict, now)
        });
        if write_event.is_some() || conditions.is_some() {
            plan.updates.push(StatusUpdate {
                node_claim: node_claim.metadata.name.clone().unwrap_or_default(),
                key,
                resource_version: node_claim.metadata.resource_version.clone(),
                last_pod_event_time: write_event,
                conditions,
            });
        }
    }
    plan
}

/// The merge patch of `update`'s status, optimistic on its `resourceVersion`.
pub fn status_patch(update: &StatusUpdate) -> serde_json::Value {
    let mut status = serde_json::Map::new();
    if let Some(time) = update.last_pod_event_time {
        status.insert("lastPodEventTime".to_owned(), serde_json::json!(Time(time)));
    }
    if let Some(conditions) = &update.conditions {
        status.insert("conditions".to_owned(), serde_json::json!(conditions));
    }
    serde_json::json!({
        "metadata": { "resourceVersion": update.resource_version },
        "status": status,
    })
}

/// The `Consolidatable` condition controller.
#[derive(Debug)]
pub struct ConsolidatableController<C, P> {
    ctx: Context<C, P>,
    seen: Mutex<HashMap<String, SeenPods>>,
}

impl<C: Cluster, P: CloudProvider> ConsolidatableController<C, P> {
    /// A controller working through `ctx`, remembering nothing yet.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<String, SeenPods>> {
        // The map is replaced whole at the end of a pass, so a poisoned one is still coherent.
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<C: Cluster, P: CloudProvider> Controller for ConsolidatableController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.disruption.consolidation"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let previous = self.seen().clone();
        let Plan {
            updates,
            mut seen,
            next_pass,
        } = plan(&snapshot, now, &previous);
        let mut requeue = next_pass.map_or(Requeue::OnChange, |next| {
            Requeue::After(Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO))
        });
        let mut failure = None;
        for update in &updates {
            let patch = status_patch(update);
            match self
                .ctx
                .cluster
                .merge_patch_status::<NodeClaim>(None, &update.node_claim, &patch)
                .await
            {
                Ok(_) => {
                    if update.last_pod_event_time.is_some()
                        && let Some(entry) = seen.get_mut(&update.key)
                    {
                        entry.unwritten_event = None;
                    }
                    log_update(update);
                }
                Err(error) if error.is_not_found() => {
                    seen.remove(&update.key);
                }
                // The held event stays in memory and is written on the retry.
                Err(error) if error.is_conflict() => {
                    requeue = requeue.min(Requeue::After(CONFLICT_RETRY));
                }
                Err(error) => {
                    tracing::warn!(node_claim = %update.node_claim, %error, "writing the NodeClaim's consolidation status failed");
                    failure.get_or_insert(error);
                }
            }
        }
        *self.seen() = seen;
        match failure {
            Some(error) => Err(error.into()),
            None => Ok(requeue),
        }
    }
}

fn log_update(update: &StatusUpdate) {
    if let Some(time) = update.last_pod_event_time {
        tracing::debug!(node_claim = %update.node_claim, last_pod_event_time = %time, "recorded a pod event");
    }
    if let Some(conditions) = &update.conditions {
        let consolidatable = condition::is_true(conditions, CONDITION_CONSOLIDATABLE);
        tracing::debug!(
            node_claim = %update.node_claim,
            consolidatable,
            "updated the Consolidatable condition"
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing::{self, at};

    fn node_pool(disruption: Value) -> NodePool {
        testing::node_pool("default", json!({ "spec": { "disruption": disruption } }))
    }

    fn initialized_claim(name: &str, initialized_at: i64, extra_status: Value) -> NodeClaim {
        let mut status = json!({
            "nodeName": format!("node-{name}"),
            "conditions": [{
                "type": "Initialized", "status": "True",
                "lastTransitionTime": Time(at(initialized_at)),
            }],
        });
        testing::merge(&mut status, extra_status);
        testing::node_claim(
            name,
            json!({
                "metadata": { "uid": format!("uid-{name}"), "labels": { "karpenter.sh/nodepool": "default" } },
                "status": status,
            }),
        )
    }

    fn bound_pod(name: &str, node: &str, patch: Value) -> Pod {
        Pod::from(testing::pod(
            name,
            testing::merged(
                json!({ "metadata": { "uid": format!("uid-{name}") }, "spec": { "nodeName": node } }),
                patch,
            ),
        ))
    }

    fn snapshot(pools: Vec<NodePool>, claims: Vec<NodeClaim>, pods: Vec<Pod>) -> Snapshot {
        let mut snapshot = Snapshot {
            node_pools: crate::cluster::shared(pools),
            node_claims: crate::cluster::shared(claims),
            pods: crate::cluster::shared(pods),
            ..Snapshot::default()
        };
        snapshot.sort();
        snapshot
    }

    #[test]
    fn the_reference_is_the_last_pod_event_else_initialization() {
        let pool = node_pool(json!({ "consolidateAfter": "30s" }));
        let claim = initialized_claim("a", 0, json!({}));
        assert_eq!(
            verdict(&claim, &pool, None, at(29)),
            Verdict::NotYet { at: at(30) }
        );
        assert_eq!(
            verdict(&claim, &pool, None, at(30)),
            Verdict::Consolidatable
        );
        assert_eq!(
            verdict(&claim, &pool, Some(at(20)), at(30)),
            Verdict::NotYet { at: at(50) }
        );
        assert_eq!(
            verdict(&claim, &pool, Some(at(20)), at(50)),
            Verdict::Consolidatable
        );
    }

    #[test]
    fn never_static_and_uninitialized_do_not_apply() {
        let claim = initialized_claim("a", 0, json!({}));
        let never = node_pool(json!({ "consolidateAfter": "Never" }));
        assert_eq!(
            verdict(&claim, &never, None, at(999)),
            Verdict::NotApplicable
        );
        let static_pool = testing::patched(
            &node_pool(json!({ "consolidateAfter": "0s" })),
            json!({ "spec": { "replicas": 3 } }),
        );
        assert_eq!(
            verdict(&claim, &static_pool, None, at(999)),
            Verdict::NotApplicable
        );
        let uninitialized = testing::node_claim("b", json!({}));
        let pool = node_pool(json!({ "consolidateAfter": "0s" }));
        assert_eq!(
            verdict(&uninitialized, &pool, None, at(999)),
            Verdict::NotApplicable
        );
    }

    #[test]
    fn the_condition_is_set_once_and_removed_when_it_no_longer_holds() {
        let claim = initialized_claim("a", 0, json!({}));
        let set = conditions_after(&claim, Verdict::Consolidatable, at(5)).unwrap();
        assert!(condition::is_true(&set, CONDITION_CONSOLIDATABLE));
        let with = testing::patched(&claim, json!({ "status": { "conditions": set } }));
        assert_eq!(
            conditions_after(&with, Verdict::Consolidatable, at(9)),
            None
        );
        let removed = conditions_after(&with, Verdict::NotYet { at: at(20) }, at(9)).unwrap();
        assert!(condition::find(&removed, CONDITION_CONSOLIDATABLE).is_none());
        assert!(condition::is_true(&removed, CONDITION_INITIALIZED));
        assert_eq!(
            conditions_after(&claim, Verdict::NotApplicable, at(9)),
            None
        );
    }

    #[test]
    fn daemon_set_static_terminal_and_terminating_pods_do_not_count() {
        let plain = bound_pod("p", "n", json!({}));
        let daemon = bound_pod(
            "d",
            "n",
            json!({ "metadata": { "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "x",
            }] } }),
        );
        let terminal = bound_pod("t", "n", json!({ "status": { "phase": "Succeeded" } }));
        let terminating = bound_pod(
            "g",
            "n",
            json!({ "metadata": { "deletionTimestamp": Time(at(0)) } }),
        );
        let mirror = bound_pod(
            "m",
            "n",
            json!({ "metadata": { "annotations": { "kubernetes.io/config.mirror": "x" } } }),
        );
        assert_eq!(
            pod_fingerprint([&plain, &daemon, &terminal, &terminating, &mirror]),
            pod_fingerprint([&plain])
        );
        assert_ne!(pod_fingerprint([&plain]), pod_fingerprint([]));
        let other = bound_pod("q", "n", json!({}));
        assert_eq!(
            pod_fingerprint([&plain, &other]),
            pod_fingerprint([&other, &plain])
        );
    }

    #[test]
    fn a_first_sight_is_no_event_and_a_change_is_one() {
        let pools = vec![node_pool(json!({ "consolidateAfter": "1m" }))];
        let claims = vec![initialized_claim("a", 0, json!({}))];
        let pod = bound_pod("p", "node-a", json!({}));
        let first = plan(
            &snapshot(pools.clone(), claims.clone(), vec![pod.clone()]),
            at(100),
            &HashMap::new(),
        );
        assert!(
            first
                .updates
                .iter()
                .all(|u| u.last_pod_event_time.is_none()),
            "no memory is no event: {first:?}"
        );
        // Initialized at 0, consolidateAfter 1m: consolidatable at 100.
        assert_eq!(first.updates.len(), 1);
        assert!(condition::is_true(
            first.updates[0].conditions.as_ref().unwrap(),
            CONDITION_CONSOLIDATABLE
        ));
        let unchanged = plan(
            &snapshot(pools.clone(), claims.clone(), vec![pod]),
            at(110),
            &first.seen,
        );
        assert!(
            unchanged
                .updates
                .iter()
                .all(|u| u.last_pod_event_time.is_none())
        );
        // The pod goes: an event at 120, the condition removed until 180.
        let written = first.updates[0].conditions.clone().unwrap();
        let claims = vec![testing::patched(
            &claims[0],
            json!({ "status": { "conditions": written } }),
        )];
        let changed = plan(&snapshot(pools, claims, vec![]), at(120), &first.seen);
        let update = &changed.updates[0];
        assert_eq!(update.last_pod_event_time, Some(at(120)));
        assert!(update.conditions.is_some());
        assert_eq!(changed.next_pass, Some(at(180)));
    }

    #[test]
    fn events_within_the_dedupe_window_are_held_then_written() {
        let pools = vec![node_pool(json!({ "consolidateAfter": "1m" }))];
        let claims = vec![initialized_claim(
            "a",
            0,
            json!({ "lastPodEventTime": Time(at(100)) }),
        )];
        let seen = HashMap::from([(
            "uid-a".to_owned(),
            SeenPods {
                fingerprint: pod_fingerprint([]),
                unwritten_event: None,
            },
        )]);
        let pod = bound_pod("p", "node-a", json!({}));
        let held = plan(
            &snapshot(pools.clone(), claims.clone(), vec![pod.clone()]),
            at(105),
            &seen,
        );
        assert!(held.updates.is_empty(), "{held:?}");
        assert_eq!(
            held.next_pass,
            Some(at(110)),
            "written when the window ends"
        );
        assert_eq!(held.seen["uid-a"].unwritten_event, Some(at(105)));
        let flushed = plan(&snapshot(pools, claims, vec![pod]), at(110), &held.seen);
        assert_eq!(flushed.updates[0].last_pod_event_time, Some(at(105)));
        assert_eq!(
            flushed.next_pass,
            Some(at(165)),
            "consolidatable a minute after the held event"
        );
    }

    #[test]
    fn deleting_claims_and_claims_without_node_pool_are_left_alone() {
        let pools = vec![node_pool(json!({ "consolidateAfter": "0s" }))];
        let deleting = testing::patched(
            &initialized_claim("a", 0, json!({})),
            json!({ "metadata": { "deletionTimestamp": Time(at(1)), "finalizers": ["x"] } }),
        );
        let orphan = testing::patched(
            &initialized_claim("b", 0, json!({})),
            json!({ "metadata": { "labels": { "karpenter.sh/nodepool": "gone" } } }),
        );
        let plan = plan(
            &snapshot(pools, vec![deleting, orphan], vec![]),
            at(10),
            &HashMap::new(),
        );
        assert!(plan.updates.is_empty(), "{plan:?}");
        assert_eq!(plan.seen.len(), 1, "only the live NodeClaim is remembered");
    }

    #[test]
    fn the_patch_is_optimistic_and_carries_both_fields() {
        let update = StatusUpdate {
            node_claim: "a".into(),
            key: "uid-a".into(),
            resource_version: Some("7".into()),
            last_pod_event_time: Some(at(0)),
            conditions: Some(vec![]),
        };
        let patch = status_patch(&update);
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["status"]["lastPodEventTime"], "2023-11-14T22:13:20Z");
        assert_eq!(patch["status"]["conditions"], json!([]));
    }
}
