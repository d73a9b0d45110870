//! Quiet polls: after a pass that decided, wrote and reported nothing, until when a poll that
//! sees the same cluster may be skipped. Apart from the controller because it is a pure
//! argument about which inputs move with time alone.

use std::time::Duration;

use jiff::Timestamp;

use super::{BLOCKED_EVENT_INTERVAL, BLOCKED_EVENT_MIN_SPACING};
use crate::cluster::Snapshot;
use crate::disruption::{Observation, budgets, do_not_disrupt};

/// What a pass that decided, wrote and reported nothing saw, and until when a pass seeing the
/// same would do the same: the polls before `until` that see the same cluster revision and
/// the same nominations are skipped ([`quiet_until`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Quiet {
    /// The cluster's revision before the pass read its snapshot.
    pub(super) revision: u64,
    /// The nominations' generation then.
    pub(super) nominations: u64,
    /// The first instant at which a time threshold may change what a pass decides or reports.
    pub(super) until: Timestamp,
}

/// Whether a pass seeing `seen` (its revision, nominations and instant in `until`) may be
/// skipped after the quiet pass `quiet`: the same cluster revision and nominations, and not
/// yet `quiet.until`.
pub(super) fn still_quiet(quiet: Quiet, seen: Quiet) -> bool {
    quiet.revision == seen.revision
        && quiet.nominations == seen.nominations
        && seen.until < quiet.until
}

/// After a pass at `now` on `snapshot` that decided nothing, started nothing, wrote nothing,
/// observed nothing, found no node nominated, no command in flight and no candidate for
/// consolidation: the first instant at which a pass on the same snapshot and the same
/// nominations could decide or report something else, as every input that moves with time
/// alone gives it:
///
/// - a NodePool budget with a schedule: its window opens and closes with time (`None`: no
///   skipping at all);
/// - a pod's `do-not-disrupt` duration ends;
/// - an observation's retry delay (`retry`) ends: a failed replacement or drain timeout holds
///   its node back and explains it until then;
/// - a node's last `DisruptionBlocked` (`blocked`, when each was recorded) leaves the
///   [`BLOCKED_EVENT_MIN_SPACING`] (it is explained again then, maybe with news) or, explained
///   since, comes up for its [`BLOCKED_EVENT_INTERVAL`] repeat;
/// - the cached catalogues (`catalogues_fresh_until`) are fetched again and may differ.
///
/// Nominations only end with time (a nominated node makes the pass no quiet one), and budgets
/// without a schedule, candidates, PodDisruptionBudgets, emptiness and drift depend on the
/// snapshot alone. `None` when no such instant can be told. Pure.
pub fn quiet_until(
    snapshot: &Snapshot,
    now: Timestamp,
    observations: &[Observation],
    blocked: &[Timestamp],
    catalogues_fresh_until: Option<Timestamp>,
    retry: Duration,
) -> Option<Timestamp> {
    let scheduled = snapshot.node_pools().any(|pool| {
        budgets::effective_budgets(pool)
            .iter()
            .any(|budget| budget.schedule.is_some() || budget.duration.is_some())
    });
    if scheduled {
        return None;
    }
    let later = |at: Timestamp, after: Duration| at.saturating_add(after).unwrap_or(Timestamp::MAX);
    let do_not_disrupt =
        snapshot
            .pods()
            .filter_map(|pod| match do_not_disrupt::evaluate(pod, now) {
                crate::disruption::DoNotDisrupt::Until { until, .. } => Some(until),
                _ => None,
            });
    let retries = observations
        .iter()
        .map(|observation| later(observation.at, retry));
    let events = blocked.iter().map(|&at| {
        let spaced = later(at, BLOCKED_EVENT_MIN_SPACING);
        if now < spaced {
            spaced
        } else {
            later(at, BLOCKED_EVENT_INTERVAL)
        }
    });
    let until = do_not_disrupt
        .chain(retries)
        .chain(events)
        .chain(catalogues_fresh_until)
        .filter(|&at| at > now)
        .min()
        .unwrap_or(Timestamp::MAX);
    Some(until)
}
