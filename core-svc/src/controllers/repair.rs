//! Node repair (upstream kubernetes-sigs/karpenter `pkg/controllers/node/health`): a node
//! whose condition has matched a repair policy for longer than the policy's toleration is
//! replaced forcefully: its NodeClaim's termination deadline set to now (so the drain deletes
//! its pods at once, PDBs and `do-not-disrupt` included, as upstream's repair does) and the
//! NodeClaim deleted; the provisioner places its pods again. No disruption budget applies.
//!
//! The policies are the plugin's (`GetRepairPolicies`) plus the kubelet's own `Ready`
//! (`False` or `Unknown` for 30 minutes) where the plugin has none for it.
//!
//! The safety cap is upstream's: within a NodePool, nodes are repaired only while at most
//! 20 % of its nodes (rounded up) have a matching condition, however long it has held; above
//! that, a cloud-wide or network-wide fault is likelier than broken nodes, and replacing them
//! all would make it worse: nothing is repaired and `NodeRepairBlocked` says so. This project
//! turns repair on by default (upstream keeps it behind the `NodeRepair` gate, off): with the
//! cap, the worst it does is replace a fifth of a NodePool whose nodes the kubelet itself
//! reports broken for half an hour. `--feature-gates NodeRepair=false` turns it off.
//!
//! [`plan`] is pure; the controller reads, asks the plugin for its policies (again every
//! [`POLICIES_REFRESH`]) and writes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use core_domain::labels::LABEL_CAPACITY_TYPE;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{ConditionStatus, NodeClaim};

use super::{Context, Controller, ControllerError, Requeue};
use crate::cloudprovider::{CloudProvider, CloudProviderError, RepairPolicy};
use crate::cluster::{Cluster, Snapshot};
use crate::controllers::nodeclaim::{
    delete_if_same, node_pool_of, node_provider_id, set_termination_deadline,
};
use crate::disruption::candidates::node_claims_by_provider_id;
use crate::events::{EventType, ObjectRef, Reason, non_empty_fields};
use crate::objects::name_of;

/// The largest share of a NodePool's nodes that may be unhealthy for repair to go ahead.
pub const MAX_UNHEALTHY_PERCENT: usize = 20;
/// How soon a blocked NodePool is looked at again (upstream's).
pub const BLOCKED_RETRY: Duration = Duration::from_secs(5 * 60);
/// How long the plugin's policies are reused before asking again.
pub const POLICIES_REFRESH: Duration = Duration::from_secs(10 * 60);
/// The kubelet's own Ready policy's toleration (upstream's AWS policy for Ready).
pub const KUBELET_READY_TOLERATION: Duration = Duration::from_secs(30 * 60);

/// The policies to repair by: the plugin's, and the kubelet's `Ready=False` and
/// `Ready=Unknown` for [`KUBELET_READY_TOLERATION`] unless the plugin has its own for them.
pub fn policies(plugin: &[RepairPolicy]) -> Vec<RepairPolicy> {
    let mut all = plugin.to_vec();
    for status in [ConditionStatus::False, ConditionStatus::Unknown] {
        if !all
            .iter()
            .any(|p| p.condition_type == "Ready" && p.condition_status == status)
        {
            all.push(RepairPolicy {
                condition_type: "Ready".to_owned(),
                condition_status: status,
                toleration_duration: KUBELET_READY_TOLERATION,
            });
        }
    }
    all
}

/// A condition status as a Node's conditions spell it.
fn status_name(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

/// A node's condition that matches a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    /// `Ready=False`.
    pub condition: String,
    /// The policy's toleration.
    pub toleration: Duration,
    /// When the toleration ends: the condition's last transition plus the toleration.
    pub due: Timestamp,
}

/// The node's matching condition whose toleration ends first, if any.
pub fn unhealthy(node: &Node, policies: &[RepairPolicy]) -> Option<Unhealthy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .filter_map(|condition| {
            let policy = policies.iter().find(|p| {
                p.condition_type == condition.type_
                    && status_name(p.condition_status) == condition.status
            })?;
            // A condition without a transition time has no age to weigh: left to the next
            // status the kubelet writes.
            let since = condition.last_transition_time.as_ref().map(|t| t.0)?;
            let due = since
                .saturating_add(policy.toleration_duration)
                .unwrap_or(Timestamp::MAX);
            Some(Unhealthy {
                condition: format!("{}={}", condition.type_, condition.status),
                toleration: policy.toleration_duration,
                due,
            })
        })
        .min_by_key(|u| u.due)
}

/// One node to repair.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair<'a> {
    /// The node.
    pub node: &'a Node,
    /// Its NodeClaim.
    pub node_claim: &'a NodeClaim,
    /// Its NodePool.
    pub node_pool: &'a str,
    /// Why.
    pub unhealthy: Unhealthy,
}

/// A NodePool whose repairs are held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The NodePool.
    pub node_pool: String,
    /// Its nodes with a matching condition.
    pub unhealthy: usize,
    /// Its nodes.
    pub nodes: usize,
}

/// What one repair pass does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepairPlan<'a> {
    /// The nodes to replace now.
    pub repair: Vec<Repair<'a>>,
    /// The NodePools with nodes due whose repair the cap holds back.
    pub blocked: Vec<Blocked>,
    /// When the next toleration ends.
    pub next_due: Option<Timestamp>,
}

/// A managed node of a NodePool: its NodeClaim, and its matching condition if any.
type Member<'a> = (&'a Node, &'a NodeClaim, Option<Unhealthy>);

/// The most unhealthy nodes of `nodes` for repair to go ahead: 20 %, rounded up.
pub fn allowed_unhealthy(nodes: usize) -> usize {
    (nodes * MAX_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Which nodes to repair at `now`: each managed node (one with a NodeClaim, neither being
/// deleted) whose toleration has ended, unless more than [`allowed_unhealthy`] of its
/// NodePool's nodes have a matching condition.
pub fn plan<'a>(
    snapshot: &'a Snapshot,
    policies: &[RepairPolicy],
    now: Timestamp,
) -> RepairPlan<'a> {
    let by_provider_id = node_claims_by_provider_id(snapshot);
    // By NodePool: its managed nodes, and each one's matching condition.
    let mut pools: BTreeMap<&str, Vec<Member<'a>>> = BTreeMap::new();
    for node in snapshot.nodes() {
        let Some(claim) = by_provider_id.get(node_provider_id(node)).copied() else {
            continue;
        };
        let Some(pool) = node_pool_of(claim) else {
            continue;
        };
        pools
            .entry(pool)
            .or_default()
            .push((node, claim, unhealthy(node, policies)));
    }
    let mut plan = RepairPlan::default();
    for (pool, members) in pools {
        let unhealthy_count = members.iter().filter(|(_, _, u)| u.is_some()).count();
        let within_cap = unhealthy_count <= allowed_unhealthy(members.len());
        let mut blocked = false;
        for (node, claim, unhealthy) in members.iter() {
            let Some(unhealthy) = unhealthy else { continue };
            let deleting = node.metadata.deletion_timestamp.is_some()
                || claim.metadata.deletion_timestamp.is_some();
            if deleting {
                continue;
            }
            if unhealthy.due > now {
                plan.next_due = Some(
                    plan.next_due
                        .map_or(unhealthy.due, |t| t.min(unhealthy.due)),
                );
                continue;
            }
            if within_cap {
                plan.repair.push(Repair {
                    node,
                    node_claim: claim,
                    node_pool: pool,
                    unhealthy: unhealthy.clone(),
                });
            } else {
                blocked = true;
            }
        }
        if blocked {
            plan.blocked.push(Blocked {
                node_pool: pool.to_owned(),
                unhealthy: unhealthy_count,
                nodes: members.len(),
            });
        }
    }
    plan
}

/// The repair policies the plugin gave, and when.
#[derive(Debug, Default)]
struct Policies {
    plugin: Vec<RepairPolicy>,
    fetched: Option<Timestamp>,
}

/// The node repair controller.
#[derive(Debug)]
pub struct RepairController<C, P> {
    ctx: Context<C, P>,
    policies: Mutex<Policies>,
    enabled: bool,
}

impl<C: Cluster, P: CloudProvider> RepairController<C, P> {
    /// A repair controller working through `ctx`; with `enabled` false (the `NodeRepair`
    /// gate off) its passes do nothing.
    pub fn new(ctx: Context<C, P>, enabled: bool) -> Self {
        Self {
            ctx,
            policies: Mutex::default(),
            enabled,
        }
    }

    /// The policies, asking the plugin again when they are older than [`POLICIES_REFRESH`].
    /// A plugin that has none (or cannot answer now) leaves the kubelet's own.
    async fn policies(&self, now: Timestamp) -> Vec<RepairPolicy> {
        let stale = {
            let cached = self
                .policies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cached.fetched.is_none_or(|at| {
                now.duration_since(at)
                    >= jiff::SignedDuration::try_from(POLICIES_REFRESH).unwrap_or_default()
            })
        };
        if stale {
            let answer = self.ctx.cloud.repair_policies().await;
            let mut cached = self
                .policies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match answer {
                Ok(plugin) => {
                    cached.plugin = plugin;
                    cached.fetched = Some(now);
                }
                Err(CloudProviderError::Unsupported { .. }) => {
                    cached.plugin.clear();
                    cached.fetched = Some(now);
                }
                Err(error) => {
                    tracing::debug!(%error, "repair policies unavailable; using those known");
                }
            }
        }
        let cached = self
            .policies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        policies(&cached.plugin)
    }

    async fn repair(&self, repair: &Repair<'_>, now: Timestamp) -> Result<(), ControllerError> {
        let name = name_of(repair.node_claim);
        // Forceful: now, whatever later deadline its terminationGracePeriod set. Deleted
        // first, so a deadline never lingers on a NodeClaim whose deletion failed.
        if !delete_if_same(&*self.ctx.cluster, repair.node_claim).await? {
            return Ok(());
        }
        // Gone already when nothing held it: nothing to drain, but the repair is still said.
        set_termination_deadline(&*self.ctx.cluster, name, now).await?;
        let node = name_of(repair.node);
        let toleration = humantime_minutes(repair.unhealthy.toleration);
        let capacity_type = repair
            .node_claim
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_CAPACITY_TYPE))
            .map_or("", String::as_str);
        tracing::info!(node, node_claim = name, condition = %repair.unhealthy.condition, "deleting unhealthy node");
        self.ctx.event(
            ObjectRef::cluster_scoped("Node", node),
            EventType::Warning,
            Reason::NodeUnhealthy,
            format!(
                "{} for longer than {toleration}: replacing the node",
                repair.unhealthy.condition
            ),
            non_empty_fields(&[
                ("node", node),
                ("nodeClaim", name),
                ("nodePool", repair.node_pool),
                ("condition", &repair.unhealthy.condition),
                ("toleration", &toleration),
                ("reason", "unhealthy"),
                ("capacityType", capacity_type),
            ]),
        );
        Ok(())
    }
}

/// `30m`, `1h30m`, `45s`: a toleration as people write it.
fn humantime_minutes(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if seconds > 0 || out.is_empty() {
        out.push_str(&format!("{seconds}s"));
    }
    out
}

impl<C: Cluster, P: CloudProvider> Controller for RepairController<C, P> {
    fn name(&self) -> &'static str {
        "node.health"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        if !self.enabled {
            return Ok(Requeue::OnChange);
        }
        let now = self.ctx.clock.now();
        let policies = self.policies(now).await;
        let snapshot = self.ctx.cluster.snapshot().await?;
        let plan = plan(&snapshot, &policies, now);
        let mut failure = None;
        for repair in &plan.repair {
            if let Err(error) = self.repair(repair, now).await {
                tracing::warn!(node = name_of(repair.node), %error, "repairing a node failed");
                failure.get_or_insert(error);
            }
        }
        for blocked in &plan.blocked {
            self.ctx.event(
                ObjectRef::cluster_scoped("NodePool", &blocked.node_pool),
                EventType::Warning,
                Reason::NodeRepairBlocked,
                format!(
                    "more than {MAX_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool \
                     ({} of {}): no node is repaired",
                    blocked.unhealthy, blocked.nodes
                ),
                non_empty_fields(&[
                    ("nodePool", &blocked.node_pool),
                    ("unhealthy", &blocked.unhealthy.to_string()),
                    ("nodes", &blocked.nodes.to_string()),
                ]),
            );
        }
        if let Some(error) = failure {
            return Err(error);
        }
        let mut requeue = match plan.next_due {
            Some(due) => Requeue::After(
                Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO),
            ),
            None => Requeue::OnChange,
        };
        if !plan.blocked.is_empty() {
            requeue = requeue.min(Requeue::After(BLOCKED_RETRY));
        }
        Ok(requeue.min(Requeue::After(POLICIES_REFRESH)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use core_domain::labels::LABEL_NODEPOOL;
    use serde_json::json;

    use super::*;
    use crate::controllers::testing::{self, at};

    fn node(name: &str, ready: &str, since: i64) -> Node {
        testing::node(
            name,
            json!({
                "spec": {"providerID": format!("fake:///{name}")},
                "status": {"conditions": [{
                    "type": "Ready", "status": ready,
                    "lastTransitionTime": Time(at(since)),
                }]},
            }),
        )
    }

    fn claim(name: &str, pool: &str) -> NodeClaim {
        testing::node_claim(
            name,
            json!({
                "metadata": {"labels": {LABEL_NODEPOOL: pool}},
                "status": {"providerID": format!("fake:///{name}")},
            }),
        )
    }

    fn fleet(pool: &str, unhealthy: usize, total: usize) -> (Vec<Node>, Vec<NodeClaim>) {
        let names: Vec<String> = (0..total).map(|i| format!("{pool}-{i}")).collect();
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, name)| node(name, if i < unhealthy { "False" } else { "True" }, 0))
            .collect();
        let claims = names.iter().map(|name| claim(name, pool)).collect();
        (nodes, claims)
    }

    /// "If several match, the one with the earliest LastTransitionTime + TolerationDuration";
    /// the kubelet's Ready counts unless the plugin has its own policy for it.
    #[test]
    fn a_matching_condition_is_due_after_its_toleration() {
        let all = policies(&[RepairPolicy {
            condition_type: "Ready".to_owned(),
            condition_status: ConditionStatus::False,
            toleration_duration: Duration::from_secs(600),
        }]);
        assert_eq!(all.len(), 2, "Ready=Unknown from the kubelet's own policy");
        let broken = node("a", "False", 100);
        assert_eq!(
            unhealthy(&broken, &all),
            Some(Unhealthy {
                condition: "Ready=False".to_owned(),
                toleration: Duration::from_secs(600),
                due: at(700),
            })
        );
        assert_eq!(unhealthy(&node("b", "True", 0), &all), None);
        assert_eq!(
            unhealthy(&node("c", "Unknown", 0), &all).map(|u| u.due),
            Some(at(1800))
        );
    }

    /// Upstream's cap, 20 % rounded up: 1 of 3 is repaired; 3 of 10 is blocked, however long
    /// they have been broken; a node not due yet sets the requeue.
    #[test]
    fn repair_holds_back_above_a_fifth_of_a_node_pool() {
        assert_eq!(allowed_unhealthy(3), 1);
        assert_eq!(allowed_unhealthy(10), 2);
        let policies = policies(&[]);
        let (nodes, claims) = fleet("small", 1, 3);
        let small = testing::snapshot(claims, nodes);
        let planned = plan(&small, &policies, at(1800));
        assert_eq!(planned.repair.len(), 1);
        assert_eq!(planned.repair[0].node_pool, "small");
        assert!(planned.blocked.is_empty());
        assert!(plan(&small, &policies, at(1799)).repair.is_empty());
        assert_eq!(plan(&small, &policies, at(1799)).next_due, Some(at(1800)));

        let (nodes, claims) = fleet("big", 3, 10);
        let big = testing::snapshot(claims, nodes);
        let planned = plan(&big, &policies, at(1800));
        assert!(planned.repair.is_empty());
        assert_eq!(
            planned.blocked,
            [Blocked {
                node_pool: "big".to_owned(),
                unhealthy: 3,
                nodes: 10
            }]
        );
    }

    /// Nodes without a NodeClaim are not core's; nodes being deleted are left to termination.
    #[test]
    fn unmanaged_and_deleting_nodes_are_left_alone() {
        let policies = policies(&[]);
        let (nodes, mut claims) = fleet("p", 1, 5);
        claims[0].metadata.deletion_timestamp = Some(Time(at(5)));
        let deleting = testing::snapshot(claims, nodes.clone());
        assert!(plan(&deleting, &policies, at(4000)).repair.is_empty());
        let unmanaged = testing::snapshot(Vec::new(), nodes);
        assert!(plan(&unmanaged, &policies, at(4000)).repair.is_empty());
    }

    /// The pass over the in-memory cluster: the plugin's policy and the kubelet's Ready, the
    /// node replaced with its termination deadline now, the Event; with the gate off, nothing.
    #[tokio::test]
    async fn an_unhealthy_node_is_replaced_forcefully() {
        use crate::clock::{Clock, FakeClock};
        use crate::cloudprovider::FakeCloudProvider;
        use crate::cluster::InMemoryCluster;
        use crate::controllers::Settings;
        use crate::events::MemoryEvents;

        for enabled in [false, true] {
            let clock = Arc::new(FakeClock::new(at(0)));
            let cluster = Arc::new(InMemoryCluster::new(
                Arc::clone(&clock) as Arc<dyn Clock>,
                7,
            ));
            let events = Arc::new(MemoryEvents::new());
            let ctx = Context {
                cluster: Arc::clone(&cluster),
                cloud: Arc::new(FakeCloudProvider::new()),
                clock: Arc::clone(&clock) as Arc<dyn Clock>,
                events: Arc::clone(&events) as _,
                settings: Settings::default(),
            };
            let (nodes, claims) = fleet("pool", 1, 5);
            for claim in &claims {
                let created = cluster.create(claim).await.unwrap();
                cluster
                    .replace_status(&testing::patched(&created, json!({"status": claim.status})))
                    .await
                    .unwrap();
            }
            for node in &nodes {
                let created = cluster.create(node).await.unwrap();
                cluster
                    .replace_status(&testing::patched(&created, json!({"status": node.status})))
                    .await
                    .unwrap();
            }
            let controller = RepairController::new(ctx, enabled);
            clock.advance(Duration::from_secs(1000));
            let requeue = controller.reconcile().await.unwrap();
            if enabled {
                // Due in 800 s, but the policies are asked for again in 600 s.
                assert_eq!(requeue, Requeue::After(POLICIES_REFRESH));
            }
            clock.advance(Duration::from_secs(800));
            controller.reconcile().await.unwrap();
            let snapshot = cluster.snapshot().await.unwrap();
            let broken = snapshot.node_claims().find(|c| name_of(*c) == "pool-0");
            let deleting = broken.is_none_or(|c| c.metadata.deletion_timestamp.is_some());
            assert_eq!(deleting, enabled);
            let reasons: Vec<Reason> = events.drain().into_iter().map(|e| e.reason).collect();
            assert_eq!(
                reasons,
                if enabled {
                    vec![Reason::NodeUnhealthy]
                } else {
                    vec![]
                }
            );
        }
    }

    #[test]
    fn tolerations_read_as_people_write_them() {
        assert_eq!(humantime_minutes(Duration::from_secs(1800)), "30m");
        assert_eq!(humantime_minutes(Duration::from_secs(5400)), "1h30m");
        assert_eq!(humantime_minutes(Duration::ZERO), "0s");
    }
}
