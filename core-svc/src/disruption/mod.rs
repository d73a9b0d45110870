//! The pure building blocks of disruption (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/disruption`): which nodes may be
//! disrupted, how many per NodePool, in which order, and why a node is not. Every function here
//! takes a [`Snapshot`](crate::cluster::Snapshot) (or its objects), an instant and plain values;
//! none reaches a port, none is async, so the disruption controller, the simulator and
//! `core-svc explain` compute the same answers, and tests need no fakes.
//!
//! - [`candidates`]: [`CandidateSelector`] decides, node by node, whether a node is a
//!   [`Candidate`] for a [`DisruptionClass`] or why not ([`Blocked`]): managed, initialized, not
//!   already disrupting, not nominated, no `karpenter.sh/do-not-disrupt` on the node, its NodePool
//!   present, no pod blocking it (do-not-disrupt, PodDisruptionBudgets); a NodeClaim with a
//!   `terminationGracePeriod` lets drift ignore the pods.
//! - [`budgets`]: what each NodePool's disruption budgets allow now, per [`DisruptionReason`]
//!   (schedules in UTC with [`cron`]'s [`CronSchedule`], percentages rounded up, nodes already disrupting
//!   subtracted, invalid budgets failing closed), and which budget sets the limit.
//! - [`cost`]: pod eviction cost, node disruption cost, lifetime remaining; candidates are tried
//!   cheapest first, ties by name.
//! - [`do_not_disrupt`]: the pod annotation's values (`"true"`, a duration, anything else:
//!   invalid, reported for an event).
//! - [`successors`]: the evicted pods of leaving nodes whose controller has not made their
//!   successors yet, which a disruption simulation must still find room for.
//! - [`explain`](mod@explain): the one place that turns all of the above, plus what the
//!   controller observed, into the sentence a `DisruptionBlocked` event carries.
//!
//! A disruption pass (upstream's `pkg/controllers/disruption/controller.go`) is meant to use them so:
//!
//! 1. `let selector = CandidateSelector::new(&snapshot, now, &nominated_nodes);`
//! 2. for each method in order (emptiness, drift, consolidation), its reason's candidates,
//!    cheapest first: `selector.candidates(DisruptionClass::of(reason))`, kept when the method's
//!    own test holds (`Candidate::is_empty`, the NodeClaim's `Drifted` condition, ...);
//! 3. `budgets::budget_mapping(&snapshot, reason, now)`: how many nodes of each NodePool may
//!    start; decrement it per NodePool as candidates are taken;
//! 4. for each node left out, an [`Explainer`] (built once per pass) says why, for a
//!    `DisruptionBlocked` event; for each [`do_not_disrupt::invalid_annotations`], an event on
//!    the pod.

pub mod budgets;
pub mod candidates;
pub mod cost;
pub mod cron;
pub mod do_not_disrupt;
pub mod explain;
pub mod successors;

pub use budgets::{
    ActiveBudget, BudgetError, BudgetProblem, CronError, CronSchedule, Limit, NodePoolAllowance,
    NodePoolNodes, ReasonAllowance,
};
pub use candidates::{
    AnnotatedObject, Blocked, Candidate, CandidateSelector, Disrupting, DisruptionClass,
    PdbAllowance,
};
pub use do_not_disrupt::{DoNotDisrupt, InvalidAnnotation};
pub use explain::{
    BlockedReason, ExplainInputs, Explainer, Explanation, Observation, Observed, explain,
};
pub use karpenter_api::DisruptionReason;
