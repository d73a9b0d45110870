//! The invariants a run must hold whatever its faults, checked as it goes (after every
//! controller pass, and on every change of the cluster) and once more at its end. The chaos
//! runs turn them on ([`super::run_checked`]); a scenario run alone does not pay for them.
//!
//! Each is judged from what the cluster and the cloud show, not from what core says it did,
//! except where only core's own event says which nodes a disruption chose:
//!
//! - `pdb`: no eviction leaves a PodDisruptionBudget's healthy pods below what it allows (the
//!   report's `pdbViolations`); forceful paths delete pods rather than evict them, by design.
//! - `budget`: a disruption pass starts no more of a NodePool's nodes than its budgets allow
//!   for the reason, given the nodes already disrupting.
//! - `do-not-disrupt`: no disruption chooses a node held by `karpenter.sh/do-not-disrupt`
//!   (on the node, its NodeClaim, or a pod still running there; a pod's does not hold drift
//!   of a NodeClaim with a `terminationGracePeriod`, as upstream's eventual disruption class
//!   ignores pod blocks then: kubernetes-sigs/karpenter `pkg/controllers/disruption/types.go`,
//!   `NewCandidate`).
//! - `replacement`: a disruption that deletes a non-empty node without a replacement leaves
//!   its pods somewhere to go: the other Ready nodes, or launched NodeClaims on their way.
//! - `stuck-launch` / `stuck-termination`: no NodeClaim outlives its registration timeout
//!   unregistered, or its termination grace period being deleted, beyond a margin and the
//!   time the plugin was out of reach.
//!
//! Once every fault has stopped and the run has had [`SETTLE`] to recover, at its end:
//!
//! - `orphaned-instance`: every running instance has a NodeClaim;
//! - `leaked-nodeclaim`: every NodeClaim with an instance that is not being deleted has a live
//!   one (one being deleted is `stuck-termination`'s to judge: a grace period may outlast the
//!   run);
//! - `pod-never-ran`: no pod has waited unscheduled for [`PENDING_LIMIT`].

use crate::report::clock;
use core_domain::labels::ANNOTATION_DO_NOT_DISRUPT as DO_NOT_DISRUPT;
use core_svc::cluster::SlimPod;
use core_svc::controllers::nodeclaim::node_provider_id;
use core_svc::disruption::budgets::{NodePoolNodes, budget_limit, count_nodes, effective_budgets};
use core_svc::disruption::candidates::{node_claim_of, node_claims_by_provider_id};
use karpenter_api::DisruptionReason;

use super::*;

/// How long a run must be quiet (no scenario event) before its end for the end checks to
/// apply: long enough for a registration timeout, a drain and a garbage collection.
pub const SETTLE: Duration = Duration::from_secs(45 * 60);

/// The longest a pod may wait unscheduled at the end of a settled run.
pub const PENDING_LIMIT: Duration = Duration::from_secs(20 * 60);

/// How far past a timeout a NodeClaim may get before it counts as stuck: the controllers'
/// requeue intervals, a launch and a drain's last pods.
const STUCK_MARGIN: Duration = Duration::from_secs(10 * 60);

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Seconds of virtual time since the start, as a whole number.
    pub t: u64,
    /// Which invariant (`budget`, `pdb`, ...).
    pub invariant: &'static str,
    /// What was seen.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[allow(
            clippy::cast_precision_loss,
            reason = "seconds of a run, far below 2^52"
        )]
        let at = clock(self.t as f64);
        write!(
            f,
            "{} {}: {}",
            at.trim_start(),
            self.invariant,
            self.message
        )
    }
}

/// The checks' memory over a run.
#[derive(Debug, Default)]
pub(super) struct Invariants {
    pub(super) violations: Vec<Violation>,
    /// Windows in which the plugin was down or slow, or writes conflicted: time a timeout
    /// may be late by.
    pub(super) disturbances: Vec<(Timestamp, Timestamp)>,
    /// NodeClaims already reported stuck (once each).
    stuck: BTreeSet<String>,
}

fn reason_of(name: &str) -> Option<DisruptionReason> {
    match name {
        "Empty" => Some(DisruptionReason::Empty),
        "Drifted" => Some(DisruptionReason::Drifted),
        "Underutilized" => Some(DisruptionReason::Underutilized),
        _ => None,
    }
}

fn annotated(meta: &kube::api::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(DO_NOT_DISRUPT))
        .is_some_and(|value| value == "true")
}

/// What holds a disruption candidate by `karpenter.sh/do-not-disrupt`, if anything: its
/// NodeClaim, its node, or one of its running `pods` (not for drift of a NodeClaim with a
/// `terminationGracePeriod`, which upstream's eventual class lets through pod blocks).
fn holder(
    reason: DisruptionReason,
    candidate: &str,
    claim: Option<&NodeClaim>,
    node: Option<&Node>,
    pods: &[&SlimPod],
) -> Option<String> {
    if claim.is_some_and(|c| annotated(&c.metadata)) {
        return Some(format!("NodeClaim {candidate}"));
    }
    if let Some(node) = node.filter(|n| annotated(&n.metadata)) {
        return Some(format!(
            "node {}",
            node.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    let eventual = reason == DisruptionReason::Drifted
        && claim.is_some_and(|c| c.spec.termination_grace_period.is_some());
    if eventual {
        return None;
    }
    pods.iter().find(|pod| annotated(&pod.metadata)).map(|pod| {
        format!(
            "pod {}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// The provider IDs of the Nodes that joined.
fn registered_provider_ids(snapshot: &Snapshot) -> BTreeSet<&str> {
    snapshot
        .nodes()
        .map(node_provider_id)
        .filter(|id| !id.is_empty())
        .collect()
}

/// The NodeClaims launched and not registered yet, not being deleted: capacity on its way.
fn launched_unregistered(snapshot: &Snapshot) -> Vec<&NodeClaim> {
    let registered = registered_provider_ids(snapshot);
    snapshot
        .node_claims()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.status.as_ref().is_some_and(|status| {
                !status.provider_id.is_empty() && !registered.contains(status.provider_id.as_str())
            })
        })
        .collect()
}

fn seconds(since: Timestamp, now: Timestamp) -> u64 {
    elapsed(since, now).as_secs()
}

impl Invariants {
    fn violate(&mut self, t: u64, invariant: &'static str, message: String) {
        self.violations.push(Violation {
            t,
            invariant,
            message,
        });
    }

    /// How much of `[from, to]` the plugin or the API server was disturbed.
    fn disturbed(&self, from: Timestamp, to: Timestamp) -> Duration {
        self.disturbances
            .iter()
            .map(|(start, end)| {
                let start = (*start).max(from);
                let end = (*end).min(to);
                if start < end {
                    elapsed(start, end)
                } else {
                    Duration::ZERO
                }
            })
            .sum()
    }

    /// After a controller pass: the PDB figure's growth, and what its disruptions chose.
    #[allow(
        clippy::too_many_arguments,
        reason = "one call site, each a different view"
    )]
    pub(super) fn after_pass(
        &mut self,
        events: &[TimelineEvent],
        before: Option<&Snapshot>,
        pdb_violations: u64,
        evicted: &[String],
        start: Timestamp,
        now: Timestamp,
        policy: &LabelPolicy,
    ) {
        let t = seconds(start, now);
        if pdb_violations > 0 {
            self.violate(
                t,
                "pdb",
                format!(
                    "{pdb_violations} eviction(s) left a PodDisruptionBudget below what it allows (evicted: {})",
                    evicted.join(", ")
                ),
            );
        }
        let Some(before) = before else {
            return;
        };
        let started: Vec<&TimelineEvent> = events
            .iter()
            .filter(|e| e.type_ == "DisruptionStarted")
            .collect();
        if started.is_empty() {
            return;
        }
        let counts = count_nodes(before);
        let claims = node_claims_by_provider_id(before);
        let nodes_by_claim: BTreeMap<&str, &Node> = before
            .nodes()
            .filter_map(|node| {
                Some((
                    node_claim_of(&claims, node)?.metadata.name.as_deref()?,
                    node,
                ))
            })
            .collect();
        let pods_by_node = before.pods_by_node();
        let already: BTreeSet<&str> = counts
            .values()
            .flat_map(|c| c.disrupting.iter().map(String::as_str))
            .collect();
        let mut per_pool: BTreeMap<(String, DisruptionReason), Vec<String>> = BTreeMap::new();
        for event in started {
            let reason_name = event.field("reason").unwrap_or_default();
            let Some(reason) = reason_of(reason_name) else {
                continue;
            };
            let candidates: Vec<&str> = event
                .field("candidates")
                .unwrap_or_default()
                .split(',')
                .filter(|c| !c.is_empty())
                .collect();
            let mut leaving: Vec<&SlimPod> = Vec::new();
            let mut excluded: BTreeSet<&str> = BTreeSet::new();
            for candidate in &candidates {
                let claim = before
                    .node_claims()
                    .find(|c| c.metadata.name.as_deref() == Some(candidate));
                let node = nodes_by_claim.get(candidate).copied();
                let node_name = node.and_then(|n| n.metadata.name.as_deref());
                if let Some(name) = node_name {
                    excluded.insert(name);
                }
                // Resumed after a restart: it was counted as disrupting already.
                if node_name.is_some_and(|name| already.contains(name)) {
                    continue;
                }
                let pool = claim
                    .and_then(|c| node_pool_of(c.metadata.labels.as_ref()))
                    .unwrap_or_default();
                per_pool
                    .entry((pool.to_owned(), reason))
                    .or_default()
                    .push((*candidate).to_owned());
                let pods: Vec<&SlimPod> = node_name
                    .and_then(|name| pods_by_node.get(name))
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|pod| !world::is_terminal(pod) && !world::is_terminating(pod))
                    .collect();
                let held_by = holder(reason, candidate, claim, node, &pods);
                if let Some(held_by) = held_by {
                    self.violate(
                        t,
                        "do-not-disrupt",
                        format!(
                            "{reason_name} disruption chose {candidate}, held by {held_by}'s {DO_NOT_DISRUPT}"
                        ),
                    );
                }
                leaving.extend(
                    pods.into_iter()
                        .filter(|pod| !world::is_daemon_set_pod(pod)),
                );
            }
            let replacements = event.field("replacements").unwrap_or("0");
            if replacements == "0" && !leaving.is_empty() {
                let in_flight = launched_unregistered(before);
                let stranded =
                    world::scheduler::unplaceable(before, &leaving, &excluded, &in_flight, policy);
                if !stranded.is_empty() {
                    let list: Vec<String> = stranded
                        .iter()
                        .take(5)
                        .map(|(pod, why)| format!("{pod} ({why})"))
                        .collect();
                    self.violate(
                        t,
                        "replacement",
                        format!(
                            "{reason_name} disruption deleted {} without a replacement, but {} of its pods fit on no other node: {}",
                            candidates.join(","),
                            stranded.len(),
                            list.join("; ")
                        ),
                    );
                }
            }
        }
        self.check_budgets(t, before, &counts, per_pool, now);
    }

    /// The disruptions one pass started, by NodePool and reason, against what the budgets
    /// allowed before it.
    fn check_budgets(
        &mut self,
        t: u64,
        before: &Snapshot,
        counts: &BTreeMap<String, NodePoolNodes>,
        per_pool: BTreeMap<(String, DisruptionReason), Vec<String>>,
        now: Timestamp,
    ) {
        for ((pool, reason), chosen) in per_pool {
            let Some(node_pool) = before
                .node_pools()
                .find(|p| p.metadata.name.as_deref() == Some(pool.as_str()))
            else {
                continue;
            };
            let nodes = counts.get(&pool).cloned().unwrap_or_default();
            let disrupting = u32::try_from(nodes.disrupting.len()).unwrap_or(u32::MAX);
            let chosen_count = u32::try_from(chosen.len()).unwrap_or(u32::MAX);
            let allowed =
                match budget_limit(&effective_budgets(node_pool), reason, nodes.nodes, now) {
                    Ok(None) => continue,
                    Ok(Some(active)) => active.limit.saturating_sub(disrupting),
                    Err(_) => 0,
                };
            if chosen_count > allowed {
                self.violate(
                    t,
                    "budget",
                    format!(
                        "NodePool {pool}: {chosen_count} node(s) started disrupting for {reason:?} ({}) where its budgets allowed {allowed} ({} of {} nodes already disrupting)",
                        chosen.join(","),
                        disrupting,
                        nodes.nodes
                    ),
                );
            }
        }
    }

    /// After a change: NodeClaims past their timeouts.
    pub(super) fn after_change(&mut self, snapshot: &Snapshot, start: Timestamp, now: Timestamp) {
        let registered = registered_provider_ids(snapshot);
        // The simulation runs core with its default settings.
        let registration_timeout = Settings::default().registration_timeout;
        let mut found = Vec::new();
        for claim in snapshot.node_claims() {
            let name = claim.metadata.name.clone().unwrap_or_default();
            if self.stuck.contains(&name) {
                continue;
            }
            let provider_id = claim
                .status
                .as_ref()
                .map_or("", |status| status.provider_id.as_str());
            if let Some(deleted) = &claim.metadata.deletion_timestamp {
                let Some(grace) = claim.spec.termination_grace_period.as_ref() else {
                    continue;
                };
                let grace = grace.duration();
                let allowed = grace
                    .saturating_add(STUCK_MARGIN)
                    .saturating_add(self.disturbed(deleted.0, now));
                if elapsed(deleted.0, now) > allowed {
                    found.push((
                        name,
                        "stuck-termination",
                        format!(
                            "being deleted for {}s, past its terminationGracePeriod {}s",
                            seconds(deleted.0, now),
                            grace.as_secs()
                        ),
                    ));
                }
            } else if provider_id.is_empty() || !registered.contains(provider_id) {
                let Some(created) = &claim.metadata.creation_timestamp else {
                    continue;
                };
                let allowed = registration_timeout
                    .saturating_add(STUCK_MARGIN)
                    .saturating_add(self.disturbed(created.0, now));
                if elapsed(created.0, now) > allowed {
                    found.push((
                        name,
                        "stuck-launch",
                        format!(
                            "unregistered {}s after it was created (registration timeout {}s), and not being deleted",
                            seconds(created.0, now),
                            registration_timeout.as_secs()
                        ),
                    ));
                }
            }
        }
        let t = seconds(start, now);
        for (name, invariant, message) in found {
            self.violate(t, invariant, format!("NodeClaim {name}: {message}"));
            self.stuck.insert(name);
        }
    }

    /// At the end of a run that has been quiet for [`SETTLE`].
    pub(super) fn at_end(
        &mut self,
        snapshot: &Snapshot,
        instances: &[InstanceView],
        pending: &BTreeMap<String, Timestamp>,
        start: Timestamp,
        now: Timestamp,
    ) {
        let t = seconds(start, now);
        for instance in orphaned_instances(snapshot, instances) {
            self.violate(
                t,
                "orphaned-instance",
                format!(
                    "instance {} ({}) runs with no NodeClaim",
                    instance.provider_id, instance.instance_type
                ),
            );
        }
        let alive: BTreeSet<&str> = instances
            .iter()
            .filter(|i| is_live(i))
            .map(|i| i.provider_id.as_str())
            .collect();
        for claim in snapshot.node_claims() {
            let provider_id = claim
                .status
                .as_ref()
                .map_or("", |status| status.provider_id.as_str());
            let deleting = claim.metadata.deletion_timestamp.is_some();
            if !deleting && !provider_id.is_empty() && !alive.contains(provider_id) {
                self.violate(
                    t,
                    "leaked-nodeclaim",
                    format!(
                        "NodeClaim {} stays with no live instance behind {provider_id}",
                        claim.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            }
        }
        let mut waiting: Vec<(String, u64)> = Vec::new();
        for pod in snapshot.pods() {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            if let Some(since) = pending.get(uid)
                && elapsed(*since, now) >= PENDING_LIMIT
            {
                waiting.push((
                    format!(
                        "{}/{}",
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                    seconds(*since, now),
                ));
            }
        }
        if !waiting.is_empty() {
            let list: Vec<String> = waiting
                .iter()
                .take(5)
                .map(|(pod, s)| format!("{pod} ({s}s)"))
                .collect();
            self.violate(
                t,
                "pod-never-ran",
                format!(
                    "{} pod(s) still wait to be scheduled: {}",
                    waiting.len(),
                    list.join(", ")
                ),
            );
        }
    }
}
