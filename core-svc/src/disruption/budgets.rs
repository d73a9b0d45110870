//! NodePool disruption budgets (upstream kubernetes-sigs/karpenter: `Budget.IsActive`,
//! `GetAllowedDisruptionsByReason` and `MustGetAllowedDisruptions` in `pkg/apis/v1/nodepool.go`,
//! `BuildDisruptionBudgetMapping` in `pkg/controllers/disruption/helpers.go`).
//!
//! How many of a NodePool's nodes a method may start disrupting for a reason (`Empty`,
//! `Drifted`, `Underutilized`):
//!
//! 1. The budgets that apply are those whose `reasons` is unset or names the reason, and that
//!    are active: always without a schedule; with one, from each schedule hit (cron, evaluated
//!    in UTC) for `duration`, i.e. while the last hit is less than `duration` ago.
//! 2. Each active budget allows `nodes`: a count, or a percentage of the NodePool's nodes
//!    rounded up (10% of 11 nodes is 2). The most restrictive one wins; with none active there
//!    is no limit.
//! 3. The nodes already disrupting are subtracted, down to 0.
//!
//! A NodePool's nodes are its managed (Node paired with a NodeClaim), initialized nodes, except
//! those whose instance is terminating. Of them, those already disrupting are the NotReady
//! ones, those being deleted (Node or NodeClaim) and those tainted
//! `karpenter.sh/disrupted:NoSchedule`: the taint is how a disruption in flight is remembered
//! across restarts, where upstream keeps an in-memory mark that it sets only once replacements
//! exist.
//!
//! A NodePool without budgets gets the default `nodes: "10%"`. A NodePool with any invalid
//! budget (a `nodes` that is neither a count nor a percentage, a schedule that does not parse,
//! a schedule without a duration or the reverse) may disrupt **nothing, for every reason**,
//! until it is fixed: fail closed, as upstream's `MustGetAllowedDisruptions`; the error says
//! which budget and why.
//!
//! Schedules are parsed by [`cron`](super::cron), as upstream's `robfig/cron` parses them.
//!
//! Differences from upstream: an empty `budgets` list also gets the default (upstream allows
//! everything then; the CRD defaults only a missing list); `nodes` is checked on every budget,
//! active or not (upstream parses it only when the budget is active); a schedule that never
//! fires (`0 0 30 2 *`) counts as always active, as upstream's does through a quirk (its next
//! hit is the zero time), which can only restrict.

use std::borrow::Cow;
use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use karpenter_api::nodeclaim::CONDITION_INSTANCE_TERMINATING;
use karpenter_api::patterns::is_budget_nodes;
use karpenter_api::{Budget, DisruptionReason, NodePool, condition};

use super::candidates::{
    disrupting, is_initialized, node_claim_of, node_claims_by_provider_id, node_name,
    node_pool_name,
};
pub use super::cron::{CronError, CronSchedule};
use crate::cluster::Snapshot;
use crate::objects::is_node_ready;

/// Every disruption reason, in their order.
pub const REASONS: [DisruptionReason; 3] = [
    DisruptionReason::Underutilized,
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
];

/// How many later schedule hits [`ActiveBudget::active_until`] follows to find where a window
/// ends; a schedule that keeps its budget active longer has no end in sight.
pub const MAX_CHAINED_HITS: usize = 1000;

/// A NodePool's nodes as budgets count them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePoolNodes {
    /// Its managed, initialized nodes whose instance is not terminating: the base of the
    /// percentages.
    pub nodes: u32,
    /// The names of those already disrupting (NotReady, being deleted, or tainted), sorted.
    pub disrupting: Vec<String>,
}

/// Counts every NodePool's nodes, by NodePool name (as the nodes' `karpenter.sh/nodepool`
/// label says, whether or not the NodePool exists).
pub fn count_nodes(snapshot: &Snapshot) -> BTreeMap<String, NodePoolNodes> {
    let claims = node_claims_by_provider_id(snapshot);
    let mut counts: BTreeMap<String, NodePoolNodes> = BTreeMap::new();
    for node in snapshot.nodes() {
        let Some(claim) = node_claim_of(&claims, node) else {
            continue;
        };
        if !is_initialized(node, claim) {
            continue;
        }
        // Drained and going: neither a node of the pool any more nor one using its budget.
        let terminating = claim.status.as_ref().is_some_and(|status| {
            condition::is_true(&status.conditions, CONDITION_INSTANCE_TERMINATING)
        });
        if terminating {
            continue;
        }
        let Some(pool) = node_pool_name(node, claim) else {
            continue;
        };
        let entry = counts.entry(pool.to_owned()).or_default();
        entry.nodes = entry.nodes.saturating_add(1);
        if !is_node_ready(node) || disrupting(node, claim).is_some() {
            entry.disrupting.push(node_name(node).to_owned());
        }
    }
    for entry in counts.values_mut() {
        entry.disrupting.sort();
    }
    counts
}

/// Why a budget is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetProblem {
    /// `nodes` is neither a count nor a percentage from 0% to 100%.
    #[error("nodes {0:?} is neither a count nor a percentage from 0% to 100%")]
    Nodes(String),
    /// The schedule does not parse.
    #[error("schedule {schedule:?} is not a valid cron schedule: {error}")]
    Schedule {
        /// The schedule, as written.
        schedule: String,
        /// Why it does not parse.
        error: CronError,
    },
    /// A schedule without a duration.
    #[error("a schedule needs a duration")]
    ScheduleWithoutDuration,
    /// A duration without a schedule.
    #[error("a duration needs a schedule")]
    DurationWithoutSchedule,
}

/// An invalid budget: while a NodePool has one, none of its nodes may be disrupted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("disruption budget #{index} ({budget}) is invalid: {problem}")]
pub struct BudgetError {
    /// Its index in `spec.disruption.budgets`.
    pub index: usize,
    /// The budget, as [`describe_budget`] writes it.
    pub budget: String,
    /// What is wrong with it.
    pub problem: BudgetProblem,
}

/// The budget that sets the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveBudget {
    /// Its index in `spec.disruption.budgets` (0 for the default).
    pub index: usize,
    /// The budget, as [`describe_budget`] writes it.
    pub budget: String,
    /// How many nodes it lets be disrupting at once.
    pub limit: u32,
    /// Whether it has a schedule (otherwise it is always active).
    pub scheduled: bool,
    /// For a scheduled budget, when its current window ends (later hits that fall inside the
    /// window extend it); `None` without a schedule, or when no end shows within
    /// [`MAX_CHAINED_HITS`] hits.
    pub active_until: Option<Timestamp>,
}

/// What limits a NodePool's disruptions for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// No active budget applies to the reason.
    Unlimited,
    /// The most restrictive active budget (the first one, on a tie).
    Budget(ActiveBudget),
    /// A budget is invalid: nothing may be disrupted.
    Invalid(BudgetError),
}

/// What a NodePool's budgets allow for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonAllowance {
    /// What sets the limit.
    pub limit: Limit,
    /// How many more nodes may start being disrupted: the limit minus those already disrupting,
    /// at least 0; `u32::MAX` when unlimited.
    pub allowed: u32,
}

/// What a NodePool's budgets allow now, for every reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePoolAllowance {
    /// The NodePool's name.
    pub node_pool: String,
    /// Its nodes, as budgets count them.
    pub nodes: u32,
    /// Those already disrupting, sorted by name.
    pub disrupting: Vec<String>,
    /// The allowance for each reason.
    pub reasons: BTreeMap<DisruptionReason, ReasonAllowance>,
}

impl NodePoolAllowance {
    /// How many more nodes may start being disrupted for `reason`.
    pub fn allowed(&self, reason: DisruptionReason) -> u32 {
        self.reasons
            .get(&reason)
            .map_or(0, |allowance| allowance.allowed)
    }

    /// The invalid budget that stops everything, if any.
    pub fn invalid(&self) -> Option<&BudgetError> {
        self.reasons
            .values()
            .find_map(|allowance| match &allowance.limit {
                Limit::Invalid(error) => Some(error),
                _ => None,
            })
    }
}

/// The budgets in force: the NodePool's, or the default `nodes: "10%"` when it lists none.
pub fn effective_budgets(node_pool: &NodePool) -> Cow<'_, [Budget]> {
    let budgets = &node_pool.spec.disruption.budgets;
    if budgets.is_empty() {
        Cow::Owned(vec![Budget::default()])
    } else {
        Cow::Borrowed(budgets.as_slice())
    }
}

/// A budget as an operator wrote it: `nodes: "0", schedule: "0 9 * * 1-5", duration: 8h,
/// reasons: [Drifted]`.
pub fn describe_budget(budget: &Budget) -> String {
    let mut parts = vec![format!("nodes: {:?}", budget.nodes)];
    if let Some(schedule) = &budget.schedule {
        parts.push(format!("schedule: {schedule:?}"));
    }
    if let Some(duration) = &budget.duration {
        parts.push(format!("duration: {}", duration.as_str()));
    }
    if let Some(reasons) = &budget.reasons {
        let names: Vec<String> = reasons.iter().map(|reason| format!("{reason:?}")).collect();
        parts.push(format!("reasons: [{}]", names.join(", ")));
    }
    parts.join(", ")
}

/// `nodes` applied to `total` nodes: a count as is, a percentage rounded up; `None` when it is
/// neither (the CRD's pattern: a count, or 0% to 100%).
pub fn scaled_nodes(nodes: &str, total: u32) -> Option<u32> {
    if !is_budget_nodes(nodes) {
        return None;
    }
    match nodes.strip_suffix('%') {
        Some(percent) => {
            let percent: u64 = percent.parse().ok()?;
            let scaled = (percent * u64::from(total)).div_ceil(100);
            Some(u32::try_from(scaled).unwrap_or(u32::MAX))
        }
        // A count too large for u32 limits nothing anyway.
        None => Some(
            nodes
                .parse::<u64>()
                .map_or(u32::MAX, |count| u32::try_from(count).unwrap_or(u32::MAX)),
        ),
    }
}

/// Whether a budget is active at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    Inactive,
    Always,
    Window { until: Option<Timestamp> },
}

/// Checks a budget and tells whether it is active at `now`.
fn activity(budget: &Budget, now: Timestamp) -> Result<Activity, BudgetProblem> {
    if scaled_nodes(&budget.nodes, 0).is_none() {
        return Err(BudgetProblem::Nodes(budget.nodes.clone()));
    }
    let (schedule, duration) = match (&budget.schedule, &budget.duration) {
        (None, None) => return Ok(Activity::Always),
        (Some(_), None) => return Err(BudgetProblem::ScheduleWithoutDuration),
        (None, Some(_)) => return Err(BudgetProblem::DurationWithoutSchedule),
        (Some(schedule), Some(duration)) => (schedule, duration),
    };
    let cron = CronSchedule::parse(schedule).map_err(|error| BudgetProblem::Schedule {
        schedule: schedule.clone(),
        error,
    })?;
    let duration = SignedDuration::try_from(duration.duration()).unwrap_or(SignedDuration::MAX);
    let window_start = now.checked_sub(duration).unwrap_or(Timestamp::MIN);
    // Upstream: active iff the first hit after `now - duration` is not after `now`.
    match cron.next_after(window_start) {
        None => Ok(Activity::Window { until: None }),
        Some(hit) if hit <= now => Ok(Activity::Window {
            until: window_end(&cron, duration, hit),
        }),
        Some(_) => Ok(Activity::Inactive),
    }
}

/// Where the window opened by `hit` ends, following the later hits that fall inside it.
fn window_end(cron: &CronSchedule, duration: SignedDuration, hit: Timestamp) -> Option<Timestamp> {
    let mut end = hit.checked_add(duration).ok()?;
    let mut cursor = hit;
    for _ in 0..MAX_CHAINED_HITS {
        match cron.next_after(cursor) {
            Some(next) if next <= end => {
                end = end.max(next.checked_add(duration).ok()?);
                cursor = next;
            }
            _ => return Some(end),
        }
    }
    None
}

/// The limit `budgets` set for `reason` on a NodePool of `nodes` nodes at `now` (upstream
/// `GetAllowedDisruptionsByReason`): `Ok(None)` when no active budget applies, the most
/// restrictive active one otherwise; an error, for any reason, when any budget is invalid.
/// Callers normally pass [`effective_budgets`].
pub fn budget_limit(
    budgets: &[Budget],
    reason: DisruptionReason,
    nodes: u32,
    now: Timestamp,
) -> Result<Option<ActiveBudget>, BudgetError> {
    let mut activities = Vec::with_capacity(budgets.len());
    for (index, budget) in budgets.iter().enumerate() {
        let activity = activity(budget, now).map_err(|problem| BudgetError {
            index,
            budget: describe_budget(budget),
            problem,
        })?;
        activities.push(activity);
    }
    let mut tightest: Option<ActiveBudget> = None;
    for (index, (budget, activity)) in budgets.iter().zip(activities).enumerate() {
        let applies = budget
            .reasons
            .as_ref()
            .is_none_or(|reasons| reasons.contains(&reason));
        let active_until = match activity {
            Activity::Inactive => continue,
            Activity::Always => None,
            Activity::Window { until } => until,
        };
        if !applies {
            continue;
        }
        let limit = scaled_nodes(&budget.nodes, nodes).unwrap_or(0);
        if tightest
            .as_ref()
            .is_none_or(|tightest| limit < tightest.limit)
        {
            tightest = Some(ActiveBudget {
                index,
                budget: describe_budget(budget),
                limit,
                scheduled: budget.schedule.is_some(),
                active_until,
            });
        }
    }
    Ok(tightest)
}

/// What `node_pool`'s budgets allow at `now`, for every reason, given its node counts.
pub fn node_pool_allowance(
    node_pool: &NodePool,
    counts: &NodePoolNodes,
    now: Timestamp,
) -> NodePoolAllowance {
    let budgets = effective_budgets(node_pool);
    let defaulted = matches!(budgets, Cow::Owned(_));
    let disrupting = u32::try_from(counts.disrupting.len()).unwrap_or(u32::MAX);
    let reasons = REASONS
        .iter()
        .map(|&reason| {
            let allowance = match budget_limit(&budgets, reason, counts.nodes, now) {
                Err(error) => ReasonAllowance {
                    limit: Limit::Invalid(error),
                    allowed: 0,
                },
                Ok(None) => ReasonAllowance {
                    limit: Limit::Unlimited,
                    allowed: u32::MAX,
                },
                Ok(Some(mut active)) => {
                    if defaulted {
                        active.budget.push_str(" (the default)");
                    }
                    ReasonAllowance {
                        allowed: active.limit.saturating_sub(disrupting),
                        limit: Limit::Budget(active),
                    }
                }
            };
            (reason, allowance)
        })
        .collect();
    NodePoolAllowance {
        node_pool: node_pool.metadata.name.clone().unwrap_or_default(),
        nodes: counts.nodes,
        disrupting: counts.disrupting.clone(),
        reasons,
    }
}

/// What every NodePool's budgets allow at `now`, by NodePool name.
pub fn allowances(snapshot: &Snapshot, now: Timestamp) -> BTreeMap<String, NodePoolAllowance> {
    let counts = count_nodes(snapshot);
    let empty = NodePoolNodes::default();
    snapshot
        .node_pools()
        .map(|node_pool| {
            let name = node_pool.metadata.name.as_deref().unwrap_or_default();
            let allowance = node_pool_allowance(node_pool, counts.get(name).unwrap_or(&empty), now);
            (name.to_owned(), allowance)
        })
        .collect()
}

/// How many more of `node_pool`'s nodes may start being disrupted at `now`, per reason; an
/// error, meaning none for any reason, when one of its budgets is invalid.
pub fn allowed_disruptions(
    node_pool: &NodePool,
    snapshot: &Snapshot,
    now: Timestamp,
) -> Result<BTreeMap<DisruptionReason, u32>, BudgetError> {
    let name = node_pool.metadata.name.as_deref().unwrap_or_default();
    let counts = count_nodes(snapshot).remove(name).unwrap_or_default();
    let allowance = node_pool_allowance(node_pool, &counts, now);
    if let Some(error) = allowance.invalid() {
        return Err(error.clone());
    }
    Ok(allowance
        .reasons
        .into_iter()
        .map(|(reason, allowance)| (reason, allowance.allowed))
        .collect())
}

/// How many more nodes of each NodePool may start being disrupted for `reason` at `now`
/// (upstream `BuildDisruptionBudgetMapping`); 0 for a NodePool with an invalid budget.
pub fn budget_mapping(
    snapshot: &Snapshot,
    reason: DisruptionReason,
    now: Timestamp,
) -> BTreeMap<String, u32> {
    allowances(snapshot, now)
        .into_iter()
        .map(|(name, allowance)| (name, allowance.allowed(reason)))
        .collect()
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::{Value, json};

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn budget(value: Value) -> Budget {
        serde_json::from_value(value).unwrap()
    }

    fn limit(budgets: &[Budget], reason: DisruptionReason, nodes: u32, now: &str) -> Option<u32> {
        budget_limit(budgets, reason, nodes, at(now))
            .unwrap()
            .map(|active| active.limit)
    }

    #[test]
    fn percentages_round_up() {
        let ten = [budget(json!({"nodes": "10%"}))];
        let now = "2025-03-01T12:00:00Z";
        for (nodes, expected) in [(0, 0), (1, 1), (10, 1), (11, 2), (19, 2), (100, 10)] {
            assert_eq!(
                limit(&ten, DisruptionReason::Drifted, nodes, now),
                Some(expected),
                "{nodes} nodes"
            );
        }
        assert_eq!(scaled_nodes("20%", 19), Some(4), "3.8 rounds up");
        assert_eq!(scaled_nodes("0%", 50), Some(0));
        assert_eq!(scaled_nodes("100%", 7), Some(7));
        assert_eq!(
            scaled_nodes("5", 2),
            Some(5),
            "a count is not capped by the node count"
        );
        assert_eq!(scaled_nodes("101%", 2), None);
        assert_eq!(scaled_nodes("ten", 2), None);
        assert_eq!(scaled_nodes("", 2), None);
    }

    #[test]
    fn the_most_restrictive_active_budget_wins_and_reasons_filter() {
        let budgets = [
            budget(json!({"nodes": "5"})),
            budget(json!({"nodes": "50%"})),
            budget(json!({"nodes": "0", "reasons": ["Drifted"]})),
            budget(json!({"nodes": "1", "reasons": ["Empty", "Underutilized"]})),
        ];
        let now = "2025-03-01T12:00:00Z";
        assert_eq!(limit(&budgets, DisruptionReason::Drifted, 4, now), Some(0));
        assert_eq!(limit(&budgets, DisruptionReason::Empty, 4, now), Some(1));
        assert_eq!(
            limit(&budgets, DisruptionReason::Underutilized, 4, now),
            Some(1)
        );
        let only_drift = [budget(json!({"nodes": "0", "reasons": ["Drifted"]}))];
        assert_eq!(
            limit(&only_drift, DisruptionReason::Empty, 4, now),
            None,
            "no budget for the reason: no limit"
        );
        let tie = [
            budget(json!({"nodes": "2"})),
            budget(json!({"nodes": "50%"})),
        ];
        let active = budget_limit(&tie, DisruptionReason::Empty, 4, at(now))
            .unwrap()
            .unwrap();
        assert_eq!(active.index, 0, "ties go to the first");
        assert_eq!(active.budget, "nodes: \"2\"");
    }

    #[test]
    fn a_schedule_is_active_for_its_duration_after_each_hit_in_utc() {
        let budgets = [budget(json!({
            "nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h",
        }))];
        let reason = DisruptionReason::Drifted;
        // Monday 2025-03-03.
        assert_eq!(limit(&budgets, reason, 10, "2025-03-03T08:59:59Z"), None);
        assert_eq!(limit(&budgets, reason, 10, "2025-03-03T09:00:00Z"), Some(0));
        assert_eq!(limit(&budgets, reason, 10, "2025-03-03T16:59:59Z"), Some(0));
        assert_eq!(
            limit(&budgets, reason, 10, "2025-03-03T17:00:00Z"),
            None,
            "the window is [hit, hit + duration)"
        );
        assert_eq!(
            limit(&budgets, reason, 10, "2025-03-01T10:00:00Z"),
            None,
            "Saturday"
        );
        let active = budget_limit(&budgets, reason, 10, at("2025-03-03T12:00:00Z"))
            .unwrap()
            .unwrap();
        assert!(active.scheduled);
        assert_eq!(active.active_until, Some(at("2025-03-03T17:00:00Z")));
        assert_eq!(
            active.budget,
            "nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h"
        );
    }

    #[test]
    fn overlapping_hits_extend_the_window() {
        let hourly = [budget(
            json!({"nodes": "0", "schedule": "0 9-16 * * *", "duration": "90m"}),
        )];
        let active = budget_limit(
            &hourly,
            DisruptionReason::Empty,
            3,
            at("2025-03-03T10:15:00Z"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(active.active_until, Some(at("2025-03-03T17:30:00Z")));
        let always = [budget(
            json!({"nodes": "0", "schedule": "@hourly", "duration": "2h"}),
        )];
        let active = budget_limit(
            &always,
            DisruptionReason::Empty,
            3,
            at("2025-03-03T10:15:00Z"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(active.active_until, None, "no end in sight");
    }

    #[test]
    fn a_schedule_that_never_fires_counts_as_active() {
        let budgets = [budget(
            json!({"nodes": "0", "schedule": "0 0 30 2 *", "duration": "1h"}),
        )];
        assert_eq!(
            limit(&budgets, DisruptionReason::Empty, 3, "2025-03-03T10:15:00Z"),
            Some(0)
        );
    }

    #[test]
    fn an_invalid_budget_fails_closed_for_every_reason() {
        let cases = [
            (json!({"nodes": "ten"}), "nodes \"ten\""),
            (
                json!({"nodes": "1", "schedule": "0 9 * * 7", "duration": "1h"}),
                "schedule",
            ),
            (
                json!({"nodes": "1", "schedule": "@daily"}),
                "needs a duration",
            ),
            (json!({"nodes": "1", "duration": "1h"}), "needs a schedule"),
        ];
        for (bad, message) in cases {
            let budgets = [
                budget(json!({"nodes": "100%", "reasons": ["Drifted"]})),
                budget(bad.clone()),
            ];
            for reason in REASONS {
                let error =
                    budget_limit(&budgets, reason, 10, at("2025-03-03T10:15:00Z")).unwrap_err();
                assert_eq!(error.index, 1, "{bad}");
                assert!(error.to_string().contains(message), "{error}");
            }
        }
        // Even an inactive or unrelated budget with a bad `nodes` stops everything.
        let budgets = [
            budget(json!({"nodes": "5"})),
            budget(
                json!({"nodes": "x", "schedule": "0 0 1 1 *", "duration": "1m", "reasons": ["Empty"]}),
            ),
        ];
        assert!(
            budget_limit(
                &budgets,
                DisruptionReason::Drifted,
                10,
                at("2025-03-03T10:15:00Z")
            )
            .is_err()
        );
    }

    fn node_pool(budgets: Option<Value>) -> NodePool {
        let mut disruption = json!({ "consolidateAfter": "0s" });
        if let Some(budgets) = budgets {
            disruption["budgets"] = budgets;
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": { "name": "pool" },
            "spec": {
                "disruption": disruption,
                "template": { "spec": {
                    "requirements": [],
                    "nodeClassRef": { "group": "g", "kind": "K", "name": "n" },
                } },
            },
        }))
        .unwrap()
    }

    fn managed(
        name: &str,
        ready: bool,
        initialized: bool,
        extra: Value,
    ) -> (k8s_openapi::api::core::v1::Node, karpenter_api::NodeClaim) {
        let mut node = json!({
            "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": "pool" } },
            "spec": { "providerID": format!("fake:///{name}") },
            "status": { "conditions": [ { "type": "Ready", "status": if ready { "True" } else { "False" } } ] },
        });
        if initialized {
            node["metadata"]["labels"]["karpenter.sh/initialized"] = json!("true");
        }
        let mut claim = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": format!("{name}-claim"), "labels": { "karpenter.sh/nodepool": "pool" } },
            "spec": { "requirements": [], "nodeClassRef": { "group": "g", "kind": "K", "name": "n" } },
            "status": { "providerID": format!("fake:///{name}") },
        });
        if let Some(taints) = extra.get("taints") {
            node["spec"]["taints"] = taints.clone();
        }
        if let Some(conditions) = extra.get("claimConditions") {
            claim["status"]["conditions"] = conditions.clone();
        }
        if let Some(deleted) = extra.get("claimDeleted") {
            claim["metadata"]["deletionTimestamp"] = deleted.clone();
        }
        (
            serde_json::from_value(node).unwrap(),
            serde_json::from_value(claim).unwrap(),
        )
    }

    fn pool_snapshot(
        budgets: Option<Value>,
        nodes: Vec<(k8s_openapi::api::core::v1::Node, karpenter_api::NodeClaim)>,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            node_pools: vec![Arc::new(node_pool(budgets))],
            ..Snapshot::default()
        };
        for (node, claim) in nodes {
            snapshot.nodes.push(Arc::new(node));
            snapshot.node_claims.push(Arc::new(claim));
        }
        snapshot.sort();
        snapshot
    }

    #[test]
    fn nodes_already_disrupting_use_up_the_budget() {
        let terminating = json!([{ "type": "InstanceTerminating", "status": "True", "lastTransitionTime": "2025-03-01T00:00:00Z" }]);
        let nodes = vec![
            managed("a", true, true, json!({})),
            managed("b", false, true, json!({})),
            managed(
                "c",
                true,
                true,
                json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}),
            ),
            managed(
                "d",
                true,
                true,
                json!({"claimDeleted": "2025-03-01T00:00:00Z"}),
            ),
            managed("e", true, false, json!({})),
            managed("f", true, true, json!({"claimConditions": terminating})),
            managed("g", true, true, json!({})),
        ];
        let snapshot = pool_snapshot(Some(json!([{"nodes": "3"}])), nodes);
        let counts = count_nodes(&snapshot);
        let pool = &counts["pool"];
        assert_eq!(
            pool.nodes, 5,
            "uninitialized e and terminating f are not counted"
        );
        assert_eq!(pool.disrupting, vec!["b", "c", "d"]);
        let allowed = allowed_disruptions(
            &snapshot.node_pools[0],
            &snapshot,
            at("2025-03-01T12:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            allowed[&DisruptionReason::Drifted],
            0,
            "3 allowed, 3 already disrupting"
        );
        assert_eq!(allowed.len(), 3);
        let snapshot = pool_snapshot(
            Some(json!([{"nodes": "4"}])),
            vec![
                managed("a", true, true, json!({})),
                managed("b", false, true, json!({})),
            ],
        );
        assert_eq!(
            budget_mapping(
                &snapshot,
                DisruptionReason::Empty,
                at("2025-03-01T12:00:00Z")
            ),
            BTreeMap::from([("pool".to_owned(), 3)])
        );
    }

    #[test]
    fn without_budgets_the_default_is_ten_percent() {
        let nodes = (0..11)
            .map(|i| managed(&format!("n{i}"), true, true, json!({})))
            .collect();
        let snapshot = pool_snapshot(None, nodes);
        assert_eq!(
            snapshot.node_pools[0].spec.disruption.budgets.len(),
            1,
            "serde's default"
        );
        let all = allowances(&snapshot, at("2025-03-01T12:00:00Z"));
        assert_eq!(all["pool"].allowed(DisruptionReason::Underutilized), 2);
        let nodes = (0..11)
            .map(|i| managed(&format!("n{i}"), true, true, json!({})))
            .collect();
        let empty_list = pool_snapshot(Some(json!([])), nodes);
        let all = allowances(&empty_list, at("2025-03-01T12:00:00Z"));
        let allowance = &all["pool"];
        assert_eq!(allowance.allowed(DisruptionReason::Drifted), 2);
        match &allowance.reasons[&DisruptionReason::Drifted].limit {
            Limit::Budget(active) => assert_eq!(active.budget, "nodes: \"10%\" (the default)"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_invalid_budget_is_reported_and_allows_nothing() {
        let snapshot = pool_snapshot(
            Some(
                json!([{"nodes": "100%"}, {"nodes": "1", "schedule": "whenever you like", "duration": "1h"}]),
            ),
            vec![managed("a", true, true, json!({}))],
        );
        let error = allowed_disruptions(
            &snapshot.node_pools[0],
            &snapshot,
            at("2025-03-01T12:00:00Z"),
        )
        .unwrap_err();
        assert_eq!(error.index, 1);
        assert!(
            matches!(error.problem, BudgetProblem::Schedule { .. }),
            "{error}"
        );
        assert_eq!(
            budget_mapping(
                &snapshot,
                DisruptionReason::Drifted,
                at("2025-03-01T12:00:00Z")
            )["pool"],
            0
        );
    }

    #[test]
    fn no_active_budget_means_unlimited() {
        let snapshot = pool_snapshot(
            Some(json!([{"nodes": "0", "schedule": "0 0 1 1 *", "duration": "1h"}])),
            vec![managed("a", true, true, json!({}))],
        );
        let all = allowances(&snapshot, at("2025-03-01T12:00:00Z"));
        assert_eq!(all["pool"].allowed(DisruptionReason::Empty), u32::MAX);
        assert_eq!(
            all["pool"].reasons[&DisruptionReason::Empty].limit,
            Limit::Unlimited
        );
    }
}
