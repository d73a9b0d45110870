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
mod tests;
