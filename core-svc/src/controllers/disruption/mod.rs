//! The disruption controller (upstream `pkg/controllers/disruption`, KARPENTER-REFERENCE §3).
//!
//! API (for the methods' authors):
//!
//! - a method implements [`Method`]: `reason()`, `name()`, `class()` (defaults to the reason's),
//!   `compute(&MethodInput) -> MethodOutcome` (pure), and optionally `validate(&Command, &MethodInput) -> Result<Command,
//!   Rejected>` (called on the first pass at least [`VALIDATION_DELAY`] after a command with
//!   `needs_validation` was decided, with a fresh input; `Ok` may return a narrowed command).
//! - [`MethodInput`]: the snapshot, the instant, the candidates of the method's class (already
//!   filtered by [`CandidateSelector`], without the nodes
//!   of commands in flight, cheapest to disrupt first), the allowed disruptions per NodePool for
//!   the method's reason (commands in flight already subtracted), the pass's
//!   [`Simulator`] (`simulate(&[node names]) -> SimulationResult`), the
//!   catalogues per NodePool and the settings.
//! - [`Command`]: reason, candidate NodeClaim names, replacements (the simulation's
//!   `PlannedNodeClaim`s), decided_at. No replacement means delete.
//! - [`MethodOutcome`]: commands, observations (why a candidate was passed over, for
//!   `DisruptionBlocked`), needs_validation.
//!
//! One pass (upstream's order, §3.1):
//!
//! 1. read a snapshot; move command annotations an earlier version wrote under their old
//!    `karpenter.sh/disruption-*` names to the new ones ([`annotations`]) and read again if it
//!    did; recover the commands in flight from it ([`orchestration`]: candidates and
//!    replacements carry the command in annotations), so nothing depends on memory;
//! 2. remove stale `karpenter.sh/disrupted:NoSchedule` taints (and the `DisruptionReason`
//!    condition) from nodes neither in a command in flight nor being deleted: what a crash
//!    between tainting and deleting leaves behind;
//! 3. advance the commands in flight: all replacements initialized → taint, condition, then
//!    for a candidate with `spec.terminationGracePeriod` delete it at once (termination
//!    drains it within that period), for any other drain it here first (termination's drain
//!    plan and eviction step) and delete it once drained; a replacement failed, the command
//!    timed out waiting for its replacements, or a drain outlasted its timeout (the sum of
//!    the node's pods' `terminationGracePeriodSeconds`) → roll back
//!    ([`orchestration`] has the details);
//! 4. a command held for validation whose delay has passed is validated and started, or
//!    abandoned; while one is held no method runs (upstream waits inside the method);
//! 5. otherwise the methods in order (emptiness, drift, multi-node, single-node consolidation):
//!    the first that yields a command ends the pass;
//! 6. `DisruptionBlocked` on each node due for disruption that was not acted on, with the
//!    explanation ([`explain()`](crate::disruption::explain())), at most once per node per
//!    [`BLOCKED_EVENT_INTERVAL`] unless the message changes, and never more than once per
//!    [`BLOCKED_EVENT_MIN_SPACING`] (a drain next door flips a node between "its pod's PDB is
//!    spent" and "nothing cheaper" every second).
//!
//! Quiet polls: a pass that decided, started, wrote and observed nothing, with no command in
//! flight, no node nominated and no candidate for consolidation, remembers the cluster's
//! revision, the nominations' generation and [`quiet_until`], the first instant at which a
//! time threshold could change what a pass decides or reports (do-not-disrupt durations,
//! retry delays, the `DisruptionBlocked` spacing, the catalogues' TTL; budgets with a
//! schedule make no pass quiet). Until then a poll that sees the same revision and
//! nominations returns at once, as the pass would have decided the same nothing: a quiet
//! fleet costs a pass per threshold, not one per 10 s.
//!
//! In memory (lost on restart without harm): the command held for validation (re-decided
//! after a restart), the observations of failed attempts (failed replacements and drain
//! timeouts: explanations lose their last detail, a failed node is retried at once), the
//! instance type catalogues (fetched again), the `DisruptionBlocked` and `EvictionBlocked`
//! dedup. A drain's start and timeout are on the candidate NodeClaim, not in memory.
//!
//! Events: `DisruptionStarted` (fields `reason`, `decision`, `candidates`, `replacements`,
//! `nodePool`), `DisruptionDraining` per candidate tainted to be drained before its deletion
//! (`timeout`: the drain timeout), `PodEvicted` / `EvictionBlocked` of those drains (as the
//! termination controller records them), `DisruptionTerminating` per candidate deleted,
//! `DisruptionAbandoned` (`reason`: why, `disruptionReason`), `DisruptionBlocked` on the Node
//! (`node`, `nodeClaim`, `nodePool`, `reason`, `pod` when a pod blocks), `InvalidDoNotDisrupt`
//! on a pod whose annotation is ignored, `PluginUnavailable`. With
//! [`DisruptionController::with_metrics`], each pass sets
//! `karpenter_nodepools_allowed_disruptions`.
//!
//! Differences from upstream:
//!
//! - replacement before termination: upstream taints the candidates when the command starts;
//!   here they are tainted only once every replacement is initialized, so pods keep landing
//!   on them meanwhile and a failed command has nothing to undo on them. Their NodePool's
//!   budget counts them from the start all the same ([`budgets_in_flight`]);
//! - upstream deletes the candidates as soon as their replacements are initialized and
//!   leaves the drain to termination, which waits on a PodDisruptionBudget for ever unless
//!   the NodeClaim has a terminationGracePeriod: a deleted NodeClaim cannot come back, so such
//!   a command could never be rolled back and held its NodePool's budget indefinitely. Here a
//!   candidate without a terminationGracePeriod is drained before its deletion, with the
//!   seed's drain timeout; past it the command is abandoned like a failed replacement (the
//!   initialized replacements stay, consolidation removes them if they end up unneeded), and
//!   the node's `DisruptionBlocked` says the drain timed out until the retry delay has passed,
//!   ahead of whatever else holds it (often the very PodDisruptionBudget that stopped the
//!   drain: [`explain_due`]);
//! - the provisioner's nominations (upstream keeps them on its cluster state) are read through
//!   a [`SharedNominations`] handle given to both ([`DisruptionController::with_nominations`]);
//!   without it (a fresh handle of its own) a node just nominated for pending pods may be
//!   chosen, and those pods go elsewhere;
//! - a node whose replacement failed, or whose drain timed out, is tried again after
//!   [`DisruptionOptions::replacement_retry`] (upstream: the next pass);
//! - the simulation places the pods already waiting before the candidates' pods
//!   ([`simulate`]);
//! - no StaticDrift method (static NodePools are not provisioned by core yet), no
//!   "consolidated" short-circuit (each pass decides afresh).

pub mod annotations;
pub mod consolidation;
pub mod drift;
pub mod emptiness;
pub mod multi;
pub mod orchestration;
pub mod simulate;
pub mod single;
pub mod validation;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use core_domain::labels::LabelPolicy;
use core_domain::scheduler::{PlannedNodeClaim, PreferencePolicy};
use jiff::Timestamp;
use karpenter_api::nodeclaim::{CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED};
use karpenter_api::{DisruptionReason, NodePool, condition};

use self::consolidation::ConsolidationOptions;
use self::drift::Drift;
use self::emptiness::Emptiness;
use self::multi::MultiNodeConsolidation;
use self::orchestration::{
    InFlight, Orchestrator, Progress, Started, command_timeout, progress, reason_name,
};
use self::simulate::{SimulationSources, Simulator};
use self::single::SingleNodeConsolidation;
use super::nodeclaim::nodes_of;
use super::provisioning::DEFAULT_INSTANCE_TYPES_TTL;
use super::provisioning::catalogue::CatalogueCache;
use super::provisioning::input::Catalogue;
use super::provisioning::memo::NodeMemo;
use super::provisioning::nominations::{SharedNominations, nomination_window};
use super::provisioning::selection::{self, UsableNodePool};
use super::termination::EVENT_DEDUPE_WINDOW;
use super::{Context, Controller, ControllerError, Requeue, Settings};
use crate::cloudprovider::{CloudProvider, CloudProviderError};
use crate::cluster::{Cluster, Snapshot};
use crate::disruption::candidates::{disrupting, node_pool_name};
use crate::disruption::{
    Blocked, BlockedReason, Candidate, CandidateSelector, DisruptionClass, Explainer, Explanation,
    Observation, Observed, budgets, do_not_disrupt,
};
use crate::events::{EventType, ObjectRef, Reason};
use crate::metrics::Metrics;
use crate::objects::is_node_ready;

/// How long a command of a method that validates waits before it is re-checked and started
/// (upstream `commandValidationDelay`).
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// How often the same `DisruptionBlocked` message is repeated for a node.
pub const BLOCKED_EVENT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The least time between two `DisruptionBlocked` events of one node, even when what they
/// say differs: the reason can change every pass while a neighbour drains, and an event per
/// second per node says nothing an operator can act on.
pub const BLOCKED_EVENT_MIN_SPACING: Duration = Duration::from_secs(60);

/// How long the controller waits when no method acted (upstream `pollingPeriod`).
pub const POLLING_PERIOD: Duration = Duration::from_secs(10);

/// A disruption method (upstream's `Method` interface).
pub trait Method: Send + Sync {
    /// Why it disrupts: `Empty`, `Drifted` or `Underutilized`.
    fn reason(&self) -> DisruptionReason;

    /// How it treats pods that block a node.
    fn class(&self) -> DisruptionClass {
        DisruptionClass::of(self.reason())
    }

    /// A short name for logs and metrics (`emptiness`, `drift`, `multi`, `single`).
    fn name(&self) -> &'static str;

    /// The commands to start now. Pure: no ports.
    fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome;

    /// Whether `command`, decided at least [`VALIDATION_DELAY`] ago, still holds on `input`
    /// (fresh); `Ok` carries what to start (a subset of the candidates, say). Called only for
    /// commands whose outcome asked for validation.
    fn validate(&self, command: &Command, input: &MethodInput<'_>) -> Result<Command, Rejected> {
        let _ = input;
        Ok(command.clone())
    }
}

/// What a method decides on.
#[derive(Debug, Clone, Copy)]
pub struct MethodInput<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The instant.
    pub now: Timestamp,
    /// The candidates of the method's class, cheapest to disrupt first (ties by name), without
    /// the nodes of commands in flight.
    pub candidates: &'a [Candidate<'a>],
    /// How many more nodes each NodePool may start disrupting for the method's reason (commands
    /// in flight subtracted); a NodePool missing here allows none.
    pub budgets: &'a BTreeMap<String, u32>,
    /// The pass's scheduling simulation.
    pub simulator: &'a Simulator<'a>,
    /// The instance types of each usable NodePool, by name (prices of candidates, options of
    /// replacements).
    pub catalogues: &'a HashMap<String, Catalogue>,
    /// Tunables.
    pub settings: &'a Settings,
}

/// What a method decided.
#[derive(Debug, Clone, Default)]
pub struct MethodOutcome {
    /// The commands to start (no-ops left out).
    pub commands: Vec<Command>,
    /// Why candidates were passed over, for `DisruptionBlocked` events.
    pub observations: Vec<Observation>,
    /// Whether the commands wait [`VALIDATION_DELAY`] and are re-checked first (emptiness,
    /// consolidation) or start at once (drift).
    pub needs_validation: bool,
}

/// One disruption: candidates to remove, after their replacements are up.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// Why.
    pub reason: DisruptionReason,
    /// The candidates' NodeClaim names, sorted.
    pub candidates: Vec<String>,
    /// The NodeClaims to launch first; none means the candidates are only deleted.
    pub replacements: Vec<PlannedNodeClaim>,
    /// When it was decided.
    pub decided_at: Timestamp,
}

impl Command {
    /// A command, its candidates sorted and deduplicated.
    pub fn new(
        reason: DisruptionReason,
        mut candidates: Vec<String>,
        replacements: Vec<PlannedNodeClaim>,
        decided_at: Timestamp,
    ) -> Self {
        candidates.sort();
        candidates.dedup();
        Self {
            reason,
            candidates,
            replacements,
            decided_at,
        }
    }

    /// Upstream's decision: `replace`, `delete` or `no-op`.
    pub fn decision(&self) -> Decision {
        match (self.candidates.is_empty(), self.replacements.is_empty()) {
            (true, _) => Decision::NoOp,
            (false, true) => Decision::Delete,
            (false, false) => Decision::Replace,
        }
    }
}

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decision {
    /// Nothing.
    NoOp,
    /// Delete the candidates.
    Delete,
    /// Launch replacements, then delete the candidates.
    Replace,
}

impl Decision {
    /// `no-op`, `delete`, `replace` (upstream's metric label values).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoOp => "no-op",
            Self::Delete => "delete",
            Self::Replace => "replace",
        }
    }
}

/// Why a validation turned a command down (upstream's validation errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// The candidates changed (no longer candidates, not empty any more...).
    Churn,
    /// A budget no longer allows it (or a candidate was nominated).
    Budget,
    /// The simulation no longer agrees.
    Scheduling,
}

impl RejectionKind {
    /// `churn`, `budget`, `scheduling`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Churn => "churn",
            Self::Budget => "budget",
            Self::Scheduling => "scheduling",
        }
    }
}

/// A command turned down by validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} validation failed: {message}", kind.as_str())]
pub struct Rejected {
    /// Which check failed.
    pub kind: RejectionKind,
    /// What changed, for the `DisruptionAbandoned` event.
    pub message: String,
}

/// How the disruption controller runs, beyond the shared [`Settings`].
#[derive(Debug, Clone)]
pub struct DisruptionOptions {
    /// Whether a NodePool's node class must be `Ready=True` for it to supply replacements (as
    /// the provisioner's option).
    pub require_ready_node_class: bool,
    /// Which labels are well known.
    pub label_policy: LabelPolicy,
    /// Whether preferences count in the simulation.
    pub preference_policy: PreferencePolicy,
    /// How long a node whose replacement failed, or whose drain timed out, waits before it
    /// is tried again.
    pub replacement_retry: Duration,
    /// Consolidation's options (spot-to-spot).
    pub consolidation: ConsolidationOptions,
}

impl Default for DisruptionOptions {
    fn default() -> Self {
        Self {
            require_ready_node_class: true,
            label_policy: LabelPolicy::core(),
            preference_policy: PreferencePolicy::Respect,
            replacement_retry: DEFAULT_REPLACEMENT_RETRY,
            consolidation: ConsolidationOptions::default(),
        }
    }
}

/// How long a node whose replacement failed waits before it is tried again. Upstream retries
/// on its next pass; an offering that keeps failing would then launch an instance every 10 s.
pub const DEFAULT_REPLACEMENT_RETRY: Duration = Duration::from_secs(60);

/// The methods in upstream's order: emptiness, drift, multi-node then single-node
/// consolidation.
pub fn default_methods(options: ConsolidationOptions) -> Vec<Box<dyn Method>> {
    vec![
        Box::new(Emptiness),
        Box::new(Drift),
        Box::new(MultiNodeConsolidation::new(options)),
        Box::new(SingleNodeConsolidation::new(options)),
    ]
}

/// What one pass decides on: everything but the methods.
#[derive(Debug, Clone, Copy)]
pub struct PassInputs<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The instant.
    pub now: Timestamp,
    /// The NodePools replacements may come from, in order, with their catalogues.
    pub node_pools: &'a [(&'a NodePool, Catalogue)],
    /// Every catalogue known, by NodePool name.
    pub catalogues: &'a HashMap<String, Catalogue>,
    /// The commands in flight.
    pub in_flight: &'a [InFlight],
    /// The nodes nominated for pending pods.
    pub nominated: &'a BTreeSet<String>,
    /// What earlier attempts observed (a failed replacement holds its node back for
    /// `replacement_retry`).
    pub observations: &'a [Observation],
    /// Options.
    pub options: &'a DisruptionOptions,
    /// Tunables.
    pub settings: &'a Settings,
    /// Where the simulations' Nodes converted by earlier passes are kept; `None` converts
    /// every Node afresh.
    pub memo: Option<&'a NodeMemo>,
}

/// What a pass decided.
#[derive(Debug, Clone, Default)]
pub struct PassDecision {
    /// The method that acted (its index) and what it decided.
    pub acted: Option<(usize, MethodOutcome)>,
    /// What every method that ran observed.
    pub observations: Vec<Observation>,
    /// How many more nodes each NodePool may start disrupting, per reason.
    pub allowed: BTreeMap<String, BTreeMap<DisruptionReason, u32>>,
    /// Whether a candidate passed consolidation's gates ([`consolidation::passes_consolidation_gates`]):
    /// multi- and single-node consolidation then weigh candidates in their order by disruption
    /// cost, which moves with time (the lifetime left), so a pass that decided nothing may not
    /// stay so on the same cluster.
    pub consolidation_considered: bool,
}

/// Everything the methods of one pass share, computed once.
struct Prepared<'a> {
    inputs: PassInputs<'a>,
    candidates: BTreeMap<DisruptionClass, Vec<Candidate<'a>>>,
    budgets: BTreeMap<DisruptionReason, BTreeMap<String, u32>>,
    simulator: Simulator<'a>,
}

impl<'a> Prepared<'a> {
    fn new(
        inputs: PassInputs<'a>,
        selector: &CandidateSelector<'a>,
        leaving: &'a BTreeSet<String>,
        classes: &[DisruptionClass],
    ) -> Self {
        let PassInputs {
            snapshot,
            now,
            in_flight,
            observations,
            options,
            memo,
            ..
        } = inputs;
        let held_back: BTreeSet<&str> = observations
            .iter()
            .filter(|observation| {
                matches!(observation.what, Observed::ReplacementFailed { .. })
                    || orchestration::is_drain_timeout(observation)
            })
            .filter(|observation| {
                observation
                    .at
                    .saturating_add(options.replacement_retry)
                    .is_ok_and(|until| now < until)
            })
            .map(|observation| observation.node.as_str())
            .collect();
        let mut candidates = BTreeMap::new();
        for &class in classes {
            if candidates.contains_key(&class) {
                continue;
            }
            let mut list = selector.candidates(class);
            list.retain(|candidate| {
                let claim = candidate.node_claim_name();
                !in_flight.iter().any(|command| command.involves(claim))
                    && !held_back.contains(candidate.name)
            });
            candidates.insert(class, list);
        }
        let budgets = budgets_in_flight(snapshot, now, in_flight);
        let simulator = Simulator::new(SimulationSources {
            snapshot,
            node_pools: inputs.node_pools,
            catalogues: inputs.catalogues,
            label_policy: &options.label_policy,
            preference_policy: options.preference_policy,
            leaving,
            memo,
        });
        Self {
            inputs,
            candidates,
            budgets,
            simulator,
        }
    }

    fn input(&self, method: &dyn Method) -> MethodInput<'_> {
        static NONE: BTreeMap<String, u32> = BTreeMap::new();
        MethodInput {
            snapshot: self.inputs.snapshot,
            now: self.inputs.now,
            candidates: self
                .candidates
                .get(&method.class())
                .map(Vec::as_slice)
                .unwrap_or_default(),
            budgets: self.budgets.get(&method.reason()).unwrap_or(&NONE),
            simulator: &self.simulator,
            catalogues: self.inputs.catalogues,
            settings: self.inputs.settings,
        }
    }
}

/// The Nodes of the live candidates of commands in flight: the simulation treats them as
/// leaving.
pub fn leaving_nodes(snapshot: &Snapshot, in_flight: &[InFlight]) -> BTreeSet<String> {
    in_flight
        .iter()
        .flat_map(|command| command.live_candidates(snapshot))
        .flat_map(|claim| nodes_of(snapshot, claim))
        .filter_map(|node| node.metadata.name.clone())
        .collect()
}

/// What each NodePool's budgets allow per reason, minus the candidates of commands in flight
/// that the snapshot does not show as disrupting yet (they are tainted only once their
/// replacements are up, but count from the moment the command starts). Pure.
pub fn budgets_in_flight(
    snapshot: &Snapshot,
    now: Timestamp,
    in_flight: &[InFlight],
) -> BTreeMap<DisruptionReason, BTreeMap<String, u32>> {
    let allowances = budgets::allowances(snapshot, now);
    let mut pending: BTreeMap<String, u32> = BTreeMap::new();
    for (node, claim) in untainted_in_flight(snapshot, in_flight) {
        if let Some(pool) = node_pool_name(node, claim) {
            *pending.entry(pool.to_owned()).or_default() += 1;
        }
    }
    let mut out: BTreeMap<DisruptionReason, BTreeMap<String, u32>> = BTreeMap::new();
    for (pool, allowance) in &allowances {
        let used = pending.get(pool).copied().unwrap_or(0);
        for reason in budgets::REASONS {
            out.entry(reason)
                .or_default()
                .insert(pool.clone(), allowance.allowed(reason).saturating_sub(used));
        }
    }
    out
}

/// One pass's decision (pure; the benchmark's subject): candidates, budgets, then the methods
/// in order until one yields a command.
pub fn decide(inputs: PassInputs<'_>, methods: &[Box<dyn Method>]) -> PassDecision {
    let selector = CandidateSelector::new(inputs.snapshot, inputs.now, inputs.nominated);
    decide_with(inputs, &selector, methods)
}

/// [`decide`] over a [`CandidateSelector`] of `inputs`' snapshot, instant and nominations that
/// the caller goes on using (to explain the nodes left out, say).
pub fn decide_with(
    inputs: PassInputs<'_>,
    selector: &CandidateSelector<'_>,
    methods: &[Box<dyn Method>],
) -> PassDecision {
    let leaving = leaving_nodes(inputs.snapshot, inputs.in_flight);
    let classes: Vec<DisruptionClass> = methods.iter().map(|method| method.class()).collect();
    let prepared = Prepared::new(inputs, selector, &leaving, &classes);
    let mut decision = PassDecision {
        allowed: allowed_by_pool(&prepared.budgets),
        consolidation_considered: prepared
            .candidates
            .values()
            .flatten()
            .any(consolidation::passes_consolidation_gates),
        ..PassDecision::default()
    };
    for (index, method) in methods.iter().enumerate() {
        let outcome = method.compute(&prepared.input(method.as_ref()));
        decision
            .observations
            .extend(outcome.observations.iter().cloned());
        let commands: Vec<Command> = outcome
            .commands
            .iter()
            .filter(|command| command.decision() != Decision::NoOp)
            .cloned()
            .collect();
        tracing::debug!(
            method = method.name(),
            commands = commands.len(),
            observations = outcome.observations.len(),
            "disruption method ran"
        );
        if !commands.is_empty() {
            decision.acted = Some((
                index,
                MethodOutcome {
                    commands,
                    ..outcome
                },
            ));
            break;
        }
    }
    decision
}

/// Re-checks `commands` of `method`, decided earlier, on `inputs`: what may start, and what
/// was turned down.
pub fn validate_held(
    inputs: PassInputs<'_>,
    method: &dyn Method,
    commands: &[Command],
) -> Vec<Result<Command, (Command, Rejected)>> {
    let leaving = leaving_nodes(inputs.snapshot, inputs.in_flight);
    let selector = CandidateSelector::new(inputs.snapshot, inputs.now, inputs.nominated);
    let prepared = Prepared::new(inputs, &selector, &leaving, &[method.class()]);
    let input = prepared.input(method);
    commands
        .iter()
        .map(|command| {
            method
                .validate(command, &input)
                .map_err(|rejected| (command.clone(), rejected))
        })
        .collect()
}

fn allowed_by_pool(
    budgets: &BTreeMap<DisruptionReason, BTreeMap<String, u32>>,
) -> BTreeMap<String, BTreeMap<DisruptionReason, u32>> {
    let mut out: BTreeMap<String, BTreeMap<DisruptionReason, u32>> = BTreeMap::new();
    for (reason, pools) in budgets {
        for (pool, allowed) in pools {
            out.entry(pool.clone())
                .or_default()
                .insert(*reason, *allowed);
        }
    }
    out
}

/// A command decided by a method that validates, waiting for its delay.
#[derive(Debug, Clone)]
struct Held {
    method: usize,
    commands: Vec<Command>,
    decided_at: Timestamp,
}

#[derive(Debug, Default)]
struct State {
    held: Option<Held>,
    /// The latest observation per node.
    observations: BTreeMap<String, Observation>,
    /// The last `DisruptionBlocked` per node: what it said (without instants) and when.
    blocked: HashMap<String, (String, Timestamp)>,
    /// When each (event reason, key) was last recorded: the drains' `EvictionBlocked`.
    recorded: HashMap<(String, String), Timestamp>,
    /// Pods (`namespace/name`) whose invalid `do-not-disrupt` value was reported, with it.
    invalid_reported: HashMap<String, String>,
    /// The last pass decided and wrote nothing: what it saw, and until when a pass on the same
    /// inputs would do the same.
    quiet: Option<Quiet>,
}

/// What a pass that decided, wrote and reported nothing saw, and until when a pass seeing the
/// same would do the same: the polls before `until` that see the same cluster revision and
/// the same nominations are skipped ([`quiet_until`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quiet {
    /// The cluster's revision before the pass read its snapshot.
    revision: u64,
    /// The nominations' generation then.
    nominations: u64,
    /// The first instant at which a time threshold may change what a pass decides or reports.
    until: Timestamp,
}

/// The disruption controller (see the module documentation).
pub struct DisruptionController<C, P> {
    ctx: Context<C, P>,
    options: DisruptionOptions,
    methods: Vec<Box<dyn Method>>,
    metrics: Option<Arc<Metrics>>,
    state: Mutex<State>,
    instance_types: Arc<CatalogueCache>,
    nominations: SharedNominations,
    /// The simulations' Nodes, converted by earlier passes.
    memo: NodeMemo,
}

impl<C, P> std::fmt::Debug for DisruptionController<C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let methods: Vec<&str> = self.methods.iter().map(|method| method.name()).collect();
        f.debug_struct("DisruptionController")
            .field("options", &self.options)
            .field("methods", &methods)
            .finish_non_exhaustive()
    }
}

impl<C: Cluster, P: CloudProvider> DisruptionController<C, P> {
    /// The controller with the default options and methods.
    pub fn new(ctx: Context<C, P>) -> Self {
        let options = DisruptionOptions::default();
        let methods = default_methods(options.consolidation);
        Self::with_methods(ctx, options, methods)
    }

    /// The controller with `options` and its default methods.
    pub fn with_options(ctx: Context<C, P>, options: DisruptionOptions) -> Self {
        let methods = default_methods(options.consolidation);
        Self::with_methods(ctx, options, methods)
    }

    /// The controller with `options` and `methods`, tried in that order.
    pub fn with_methods(
        ctx: Context<C, P>,
        options: DisruptionOptions,
        methods: Vec<Box<dyn Method>>,
    ) -> Self {
        Self {
            instance_types: Arc::new(CatalogueCache::new(DEFAULT_INSTANCE_TYPES_TTL)),
            nominations: SharedNominations::new(nomination_window(ctx.settings.batch_max)),
            ctx,
            options,
            methods,
            metrics: None,
            state: Mutex::new(State::default()),
            memo: NodeMemo::new(),
        }
    }

    /// Reads the nodes nominated for pending pods from `shared`, the handle the provisioner
    /// writes them to ([`Provisioner::with_nominations`](super::provisioning::Provisioner::with_nominations)):
    /// a node nominated within the window is no candidate. Without it, the controller's own
    /// handle stays empty.
    #[must_use]
    pub fn with_nominations(mut self, shared: SharedNominations) -> Self {
        self.nominations = shared;
        self
    }

    /// Fetches instance types through `shared`, the cache the provisioner given the same handle
    /// uses ([`Provisioner::with_catalogues`](super::provisioning::Provisioner::with_catalogues)).
    /// Without it, the controller's cache is its own.
    #[must_use]
    pub fn with_catalogues(mut self, shared: Arc<CatalogueCache>) -> Self {
        self.instance_types = shared;
        self
    }

    /// Reports the allowed disruptions gauge into `metrics` each pass.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Until when polls are skipped: after a pass that decided, wrote and reported nothing,
    /// a poll before this instant that sees the same cluster revision and nominations returns
    /// at once ([`quiet_until`] says why that changes nothing); `None` when the next poll runs
    /// in full.
    pub fn skips_polls_until(&self) -> Option<Timestamp> {
        self.lock().quiet.map(|quiet| quiet.until)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a whole-value insert or replace: a panic cannot leave it half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn pass(&self) -> Result<Requeue, ControllerError> {
        // Read before the snapshot: a change that lands in between makes the next pass run.
        let revision = self.ctx.cluster.revision();
        let nominations = self.nominations.generation();
        let now = self.ctx.clock.now();
        {
            let mut state = self.lock();
            let seen = Quiet {
                revision,
                nominations,
                until: now,
            };
            match state.quiet {
                Some(quiet) if still_quiet(quiet, seen) => {
                    return Ok(Requeue::After(POLLING_PERIOD));
                }
                _ => state.quiet = None,
            }
        }
        let mut snapshot = self.ctx.cluster.snapshot().await?;
        // Before anything reads them: the rest of the pass sees the new names only.
        if Orchestrator::new(&self.ctx)
            .rename_legacy_annotations(&snapshot)
            .await?
        {
            snapshot = self.ctx.cluster.snapshot().await?;
        }
        let (wrote, mut requeue) = self.orchestrate(&snapshot, now).await?;
        if wrote {
            snapshot = self.ctx.cluster.snapshot().await?;
        }
        let in_flight = orchestration::in_flight(&snapshot);
        self.report_invalid_annotations(&snapshot, now);

        let (usable, _) = selection::usable_node_pools(
            &snapshot,
            self.ctx.cloud.supported_node_classes(),
            self.options.require_ready_node_class,
        );
        let Some(node_pools) = self.catalogues(&usable, now).await else {
            return Ok(requeue.min(Requeue::After(POLLING_PERIOD)));
        };
        let catalogues: HashMap<String, Catalogue> = node_pools
            .iter()
            .map(|(pool, types)| {
                (
                    pool.metadata.name.clone().unwrap_or_default(),
                    types.clone(),
                )
            })
            .collect();
        let nominated = self.nominations.nominated_nodes(&snapshot, now);
        let observations: Vec<Observation> = {
            let mut state = self.lock();
            state
                .observations
                .retain(|node, _| snapshot.node(node).is_some());
            state.recorded.retain(|_, last| {
                last.saturating_add(EVENT_DEDUPE_WINDOW)
                    .is_ok_and(|until| now < until)
            });
            state.observations.values().cloned().collect()
        };
        let inputs = PassInputs {
            snapshot: &snapshot,
            now,
            node_pools: &node_pools,
            catalogues: &catalogues,
            in_flight: &in_flight,
            nominated: &nominated,
            observations: &observations,
            options: &self.options,
            settings: &self.ctx.settings,
            memo: Some(&self.memo),
        };

        let selector = CandidateSelector::new(&snapshot, now, &nominated);
        let held = self.lock().held.clone();
        // Whether this pass decided and wrote nothing, so that the next may be skipped.
        let mut quiet_candidate = false;
        let mut acted_on: BTreeSet<String> = BTreeSet::new();
        let mut new_observations = Vec::new();
        // Commands started this pass count as in flight for the explanations: the snapshot
        // predates them.
        let mut in_flight_now = in_flight.clone();
        if let Some(held) = held {
            let due = held
                .decided_at
                .saturating_add(VALIDATION_DELAY)
                .unwrap_or(Timestamp::MAX);
            if now < due {
                let left = Duration::try_from(due.duration_since(now)).unwrap_or(VALIDATION_DELAY);
                requeue = requeue.min(Requeue::After(left));
                for command in &held.commands {
                    acted_on.extend(command.candidates.iter().cloned());
                }
            } else {
                self.lock().held = None;
                let validated = match self.methods.get(held.method) {
                    Some(method) => validate_held(inputs, method.as_ref(), &held.commands),
                    None => Vec::new(),
                };
                let orchestrator = Orchestrator::new(&self.ctx);
                for result in validated {
                    match result {
                        Ok(command) => {
                            acted_on.extend(command.candidates.iter().cloned());
                            if self
                                .start(&command, &snapshot, &mut new_observations)
                                .await?
                            {
                                in_flight_now.push(started_now(&command, now));
                            }
                        }
                        Err((command, rejected)) => {
                            orchestrator.abandon_unstarted(
                                &command,
                                &snapshot,
                                &rejected.to_string(),
                            );
                        }
                    }
                }
                requeue = Requeue::After(Duration::ZERO);
            }
        } else {
            let decision = decide_with(inputs, &selector, &self.methods);
            self.report_allowed(&decision.allowed);
            new_observations.extend(decision.observations);
            quiet_candidate = !wrote
                && in_flight.is_empty()
                && nominated.is_empty()
                && decision.acted.is_none()
                && !decision.consolidation_considered
                && new_observations.is_empty();
            match decision.acted {
                Some((method, outcome)) if outcome.needs_validation => {
                    let names: Vec<String> = outcome
                        .commands
                        .iter()
                        .flat_map(|command| command.candidates.iter().cloned())
                        .collect();
                    tracing::info!(method = self.methods.get(method).map(|m| m.name()), candidates = %names.join(","), "disruption decided; validating after the delay");
                    acted_on.extend(names);
                    self.lock().held = Some(Held {
                        method,
                        commands: outcome.commands,
                        decided_at: now,
                    });
                    requeue = requeue.min(Requeue::After(VALIDATION_DELAY));
                }
                Some((_, outcome)) => {
                    for command in &outcome.commands {
                        acted_on.extend(command.candidates.iter().cloned());
                        if self
                            .start(command, &snapshot, &mut new_observations)
                            .await?
                        {
                            in_flight_now.push(started_now(command, now));
                        }
                    }
                    requeue = Requeue::After(Duration::ZERO);
                }
                None => requeue = requeue.min(Requeue::After(POLLING_PERIOD)),
            }
        }
        {
            let mut state = self.lock();
            for observation in new_observations {
                state
                    .observations
                    .insert(observation.node.clone(), observation);
            }
        }
        self.report_blocked(&selector, &in_flight_now, &acted_on);
        if quiet_candidate && requeue == Requeue::After(POLLING_PERIOD) {
            let mut state = self.lock();
            let blocked: Vec<Timestamp> = state.blocked.values().map(|(_, at)| *at).collect();
            let observations: Vec<Observation> = state.observations.values().cloned().collect();
            let until = quiet_until(
                &snapshot,
                now,
                &observations,
                &blocked,
                self.instance_types.fresh_until(),
                self.options.replacement_retry,
            );
            state.quiet = until.map(|until| Quiet {
                revision,
                nominations,
                until,
            });
        }
        Ok(requeue)
    }

    /// Steps 2 and 3 of the pass: stale marks, commands in flight. Whether anything was
    /// written, and when to look again.
    async fn orchestrate(
        &self,
        snapshot: &Snapshot,
        now: Timestamp,
    ) -> Result<(bool, Requeue), ControllerError> {
        let in_flight = orchestration::in_flight(snapshot);
        let event_due = |reason: &str, key: &str| self.event_due(reason, key, now);
        let orchestrator = Orchestrator::new(&self.ctx).with_event_dedupe(&event_due);
        let mut wrote = false;
        let mut requeue = Requeue::OnChange;
        for mark in orchestration::stale_marks(snapshot, &in_flight) {
            orchestrator.clean(&mark, snapshot).await?;
            wrote = true;
        }
        let timeout = command_timeout(in_flight.len());
        for command in &in_flight {
            match progress(command, snapshot, now, timeout) {
                Progress::Finished => {}
                Progress::Waiting => {
                    let deadline = command
                        .started_at
                        .and_then(|at| at.saturating_add(timeout).ok())
                        .map(|deadline| deadline.duration_since(now))
                        .and_then(|left| Duration::try_from(left).ok())
                        .unwrap_or(POLLING_PERIOD);
                    requeue = requeue.min(Requeue::After(deadline.min(POLLING_PERIOD)));
                }
                Progress::Ready => {
                    let reason = command.reason.unwrap_or(DisruptionReason::Drifted);
                    let terminated = orchestrator
                        .terminate(reason, &command.candidates, command.started_at, snapshot)
                        .await?;
                    wrote |= terminated.wrote;
                    if let Some(look_again) = terminated.look_again {
                        requeue = requeue.min(Requeue::After(look_again));
                    }
                    if let Some(why) = terminated.timed_out {
                        wrote |= orchestrator.roll_back(command, snapshot, &why).await?;
                        self.observe_failure(
                            command,
                            snapshot,
                            now,
                            Observed::Other { reason: why },
                        );
                    }
                }
                Progress::Failed(why) => {
                    if orchestrator.roll_back(command, snapshot, &why).await? {
                        wrote = true;
                        // A replacement that failed (insufficient capacity, most often) made
                        // the plugin mark offerings unavailable: plan the next attempt on a
                        // fresh catalogue, not on the cached one that chose the failed offering.
                        self.instance_types.clear();
                        self.observe_failure(
                            command,
                            snapshot,
                            now,
                            Observed::ReplacementFailed { reason: why },
                        );
                    }
                }
            }
        }
        Ok((wrote, requeue))
    }

    /// Remembers why `command` was abandoned on each of its live candidates' nodes, which
    /// holds them back for the retry delay and explains them meanwhile.
    fn observe_failure(
        &self,
        command: &InFlight,
        snapshot: &Snapshot,
        now: Timestamp,
        what: Observed,
    ) {
        let mut state = self.lock();
        for claim in command.live_candidates(snapshot) {
            for node in nodes_of(snapshot, claim) {
                let node = node.metadata.name.clone().unwrap_or_default();
                state.observations.insert(
                    node.clone(),
                    Observation {
                        node,
                        at: now,
                        what: what.clone(),
                    },
                );
            }
        }
    }

    /// Whether an event `reason` about `key` is due: not recorded within
    /// [`EVENT_DEDUPE_WINDOW`] (the termination controller's window for the same events).
    fn event_due(&self, reason: &str, key: &str, now: Timestamp) -> bool {
        let mut state = self.lock();
        let entry = (reason.to_owned(), key.to_owned());
        let due = state.recorded.get(&entry).is_none_or(|last| {
            last.saturating_add(EVENT_DEDUPE_WINDOW)
                .is_ok_and(|until| now >= until)
        });
        if due {
            state.recorded.insert(entry, now);
        }
        due
    }

    /// Starts `command`; a replacement that could not be created becomes an observation on
    /// each candidate's node. Whether it started.
    async fn start(
        &self,
        command: &Command,
        snapshot: &Snapshot,
        observations: &mut Vec<Observation>,
    ) -> Result<bool, ControllerError> {
        let now = self.ctx.clock.now();
        let event_due = |reason: &str, key: &str| self.event_due(reason, key, now);
        let started = Orchestrator::new(&self.ctx)
            .with_event_dedupe(&event_due)
            .start(command, snapshot)
            .await?;
        let nodes: Vec<String> = command
            .candidates
            .iter()
            .filter_map(|name| snapshot.node_claim(name))
            .flat_map(|claim| nodes_of(snapshot, claim))
            .filter_map(|node| node.metadata.name.clone())
            .collect();
        let mut state = self.lock();
        match started {
            Started::Abandoned { reason } => {
                for node in nodes {
                    observations.push(Observation {
                        node,
                        at: now,
                        what: Observed::ReplacementFailed {
                            reason: reason.clone(),
                        },
                    });
                }
                Ok(false)
            }
            Started::Replacing { .. } | Started::Terminating => {
                for node in &nodes {
                    state.observations.remove(node);
                    observations.retain(|observation| &observation.node != node);
                }
                Ok(true)
            }
        }
    }

    /// The usable NodePools with their instance types; `None` when the plugin is unavailable
    /// (recorded once), which holds every decision back this pass.
    async fn catalogues<'a>(
        &self,
        usable: &[UsableNodePool<'a>],
        now: Timestamp,
    ) -> Option<Vec<(&'a NodePool, Catalogue)>> {
        let mut out = Vec::with_capacity(usable.len());
        for pool in usable {
            let name = pool.pool.metadata.name.clone().unwrap_or_default();
            match self
                .instance_types
                .get(self.ctx.cloud.as_ref(), pool, now)
                .await
            {
                Ok(types) => out.push((pool.pool, types)),
                Err(
                    error @ (CloudProviderError::Unavailable(_)
                    | CloudProviderError::InvalidResponse(_)),
                ) => {
                    tracing::warn!(node_pool = %name, %error, "plugin unavailable; no disruption decided this pass");
                    self.ctx.event(
                        ObjectRef::cluster_scoped("NodePool", &name),
                        EventType::Warning,
                        Reason::PluginUnavailable,
                        format!("Cannot get the instance types of NodePool {name}; disruption waits: {error}"),
                        orchestration::fields([
                            ("nodePool", name.clone()),
                            ("reason", error.to_string()),
                        ]),
                    );
                    return None;
                }
                Err(error) => {
                    // Its nodes can still be deleted; no replacement comes from it this pass.
                    tracing::warn!(node_pool = %name, %error, "cannot get instance types; NodePool supplies no replacement this pass");
                }
            }
        }
        Some(out)
    }

    fn report_allowed(&self, allowed: &BTreeMap<String, BTreeMap<DisruptionReason, u32>>) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        for (pool, reasons) in allowed {
            for (reason, count) in reasons {
                metrics.set_allowed_disruptions(pool, reason_name(*reason), i64::from(*count));
            }
        }
    }

    /// One Warning per pod whose `karpenter.sh/do-not-disrupt` value is invalid (and ignored),
    /// again only when the value changes.
    fn report_invalid_annotations(&self, snapshot: &Snapshot, now: Timestamp) {
        let invalid = do_not_disrupt::invalid_annotations(snapshot.pods(), now);
        let mut state = self.lock();
        state
            .invalid_reported
            .retain(|pod, _| invalid.iter().any(|found| &found.pod == pod));
        for found in invalid {
            if state.invalid_reported.get(&found.pod) == Some(&found.value) {
                continue;
            }
            let (namespace, name) = found.pod.split_once('/').unwrap_or(("", &found.pod));
            self.ctx.event(
                ObjectRef::namespaced("Pod", namespace, name),
                EventType::Warning,
                Reason::InvalidDoNotDisrupt,
                format!(
                    "Ignoring karpenter.sh/do-not-disrupt: {:?}: {}",
                    found.value, found.problem
                ),
                orchestration::fields([
                    ("pod", found.pod.clone()),
                    ("reason", found.problem.clone()),
                ]),
            );
            state.invalid_reported.insert(found.pod, found.value);
        }
    }

    /// `DisruptionBlocked` on each node due for disruption (drifted, or consolidatable) that
    /// this pass did not act on, with [`explain`]'s sentence; at most once per
    /// [`BLOCKED_EVENT_INTERVAL`] per node unless what it says changes.
    fn report_blocked(
        &self,
        selector: &CandidateSelector<'_>,
        in_flight: &[InFlight],
        acted_on: &BTreeSet<String>,
    ) {
        let snapshot = selector.snapshot();
        let now = selector.now();
        let within = |at: &Timestamp, interval: Duration| {
            at.saturating_add(interval).is_ok_and(|until| now < until)
        };
        let due = due_nodes(snapshot, in_flight, acted_on);
        let mut state = self.lock();
        state
            .blocked
            .retain(|node, _| due.iter().any(|(due, _, _)| due == node));
        // A node reported within the minimum spacing is not reported again whatever its
        // explanation says, so it is not explained either: during a roll most of the fleet
        // waits on its budget, and explaining every waiting node on every pass would cost more
        // than the pass.
        let due: Vec<_> = due
            .into_iter()
            .filter(|(node, _, _)| {
                !state
                    .blocked
                    .get(node)
                    .is_some_and(|(_, at)| within(at, BLOCKED_EVENT_MIN_SPACING))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let observations: Vec<Observation> = state.observations.values().cloned().collect();
        let explained = explain_due(
            selector,
            in_flight,
            due,
            &observations,
            self.options.replacement_retry,
        );
        for BlockedNode {
            node,
            node_claim: claim,
            node_pool: pool,
            explanation,
        } in explained
        {
            if !worth_reporting(&explanation.reason) {
                continue;
            }
            let key = dedup_key(&explanation);
            let repeat = state.blocked.get(&node).is_some_and(|(said, at)| {
                within(at, BLOCKED_EVENT_MIN_SPACING)
                    || (*said == key && within(at, BLOCKED_EVENT_INTERVAL))
            });
            if repeat {
                continue;
            }
            let mut fields = orchestration::fields([
                ("node", node.clone()),
                ("nodeClaim", claim.clone()),
                ("nodePool", pool),
                ("reason", reason_name(explanation.disruption).to_owned()),
            ]);
            if let Some(pod) = blocking_pod(&explanation.reason) {
                fields.insert("pod".to_owned(), pod.to_owned());
            }
            tracing::info!(node = %node, message = %explanation.message, "disruption blocked");
            self.ctx.event(
                ObjectRef::cluster_scoped("Node", &node),
                EventType::Normal,
                Reason::DisruptionBlocked,
                explanation.message.clone(),
                fields,
            );
            state.blocked.insert(node, (key, now));
        }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for DisruptionController<C, P> {
    fn name(&self) -> &'static str {
        "disruption"
    }

    fn reconcile(&self) -> impl Future<Output = Result<Requeue, ControllerError>> + Send {
        self.pass()
    }
}

/// Whether a pass seeing `seen` (its revision, nominations and instant in `until`) may be
/// skipped after the quiet pass `quiet`: the same cluster revision and nominations, and not
/// yet `quiet.until`.
fn still_quiet(quiet: Quiet, seen: Quiet) -> bool {
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

/// The nodes due for disruption that nothing is doing anything about: a NodeClaim `Drifted=True`
/// (reason Drifted) or `Consolidatable=True` (reason inferred), not in a command in flight nor
/// acted on this pass, not being deleted. `(node, NodeClaim, reason)`, by node name. Pure.
pub fn due_nodes(
    snapshot: &Snapshot,
    in_flight: &[InFlight],
    acted_on: &BTreeSet<String>,
) -> Vec<(String, String, Option<DisruptionReason>)> {
    let claims = crate::disruption::candidates::node_claims_by_provider_id(snapshot);
    let involved: HashSet<&str> = in_flight
        .iter()
        .flat_map(|command| {
            command
                .candidates
                .iter()
                .map(String::as_str)
                .chain(command.replacements.iter().map(|r| r.name.as_str()))
        })
        .collect();
    let mut due = Vec::new();
    for node in snapshot.nodes() {
        let Some(claim) = crate::disruption::candidates::node_claim_of(&claims, node) else {
            continue;
        };
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        if claim.metadata.deletion_timestamp.is_some()
            || node.metadata.deletion_timestamp.is_some()
            || acted_on.contains(&claim_name)
            || involved.contains(claim_name.as_str())
        {
            continue;
        }
        let conditions = claim
            .status
            .as_ref()
            .map_or(&[][..], |status| &status.conditions[..]);
        let reason = if condition::is_true(conditions, CONDITION_DRIFTED) {
            Some(DisruptionReason::Drifted)
        } else if condition::is_true(conditions, CONDITION_CONSOLIDATABLE) {
            None
        } else {
            continue;
        };
        due.push((
            node.metadata.name.clone().unwrap_or_default(),
            claim_name,
            reason,
        ));
    }
    due
}

/// A command just started, as [`InFlight`] (its replacements are not in the snapshot).
fn started_now(command: &Command, now: Timestamp) -> InFlight {
    InFlight {
        reason: Some(command.reason),
        candidates: command.candidates.clone(),
        replacements: Vec::new(),
        expected_replacements: Vec::new(),
        started_at: Some(now),
    }
}

/// A node due for disruption and what holds it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedNode {
    /// The Node.
    pub node: String,
    /// Its NodeClaim.
    pub node_claim: String,
    /// Its NodePool.
    pub node_pool: String,
    /// Why it is not being disrupted.
    pub explanation: Explanation,
}

/// Why each of the `due` nodes is not being disrupted (those nothing holds back are left
/// out), by node name. [`explain()`](crate::disruption::explain()) counts a node against its
/// budget once it is tainted; the candidates of commands in flight are tainted only once their
/// replacements are up, so a node that explains as free (or by an old observation) in a
/// NodePool with such candidates is explained again on a copy of the snapshot where they carry
/// the taint: what holds it back then is the budget they use. A node whose drain timed out
/// less than `retry` ago is explained by that first: whatever else holds it (the very
/// PodDisruptionBudget that stopped the drain, often), it is not tried again before. Pure.
pub fn explain_due(
    selector: &CandidateSelector<'_>,
    in_flight: &[InFlight],
    due: Vec<(String, String, Option<DisruptionReason>)>,
    observations: &[Observation],
    retry: Duration,
) -> Vec<BlockedNode> {
    let snapshot = selector.snapshot();
    let now = selector.now();
    let pool_of = |claim: &str| {
        snapshot
            .node_claim(claim)
            .and_then(|claim| claim.metadata.labels.as_ref())
            .and_then(|labels| labels.get(core_domain::labels::LABEL_NODEPOOL))
            .cloned()
            .unwrap_or_default()
    };
    let untainted = untainted_in_flight(snapshot, in_flight);
    let busy_pools: BTreeSet<String> = untainted
        .iter()
        .filter_map(|(node, claim)| node_pool_name(node, claim).map(str::to_owned))
        .collect();
    let explainer = Explainer::new(selector);
    let mut out = Vec::new();
    let mut again = Vec::new();
    for (node, node_claim, reason) in due {
        let node_pool = pool_of(&node_claim);
        let explanation = explainer.explain(&node, reason, observations);
        if let Some(timed_out) = observations.iter().find(|observation| {
            observation.node == node
                && orchestration::is_drain_timeout(observation)
                && observation
                    .at
                    .saturating_add(retry)
                    .is_ok_and(|until| now < until)
        }) {
            let disruption = explanation
                .as_ref()
                .map(|explanation| explanation.disruption)
                .or(reason)
                .unwrap_or(DisruptionReason::Underutilized);
            let explanation = drain_timeout_explanation(&node, disruption, timed_out, retry);
            out.push(BlockedNode {
                node,
                node_claim,
                node_pool,
                explanation,
            });
            continue;
        }
        let weak = explanation
            .as_ref()
            .is_none_or(|e| matches!(e.reason, BlockedReason::Observed(_)));
        if weak && busy_pools.contains(&node_pool) {
            again.push((node, node_claim, node_pool, reason));
            continue;
        }
        if let Some(explanation) = explanation {
            out.push(BlockedNode {
                node,
                node_claim,
                node_pool,
                explanation,
            });
        }
    }
    if !again.is_empty() {
        let tainted = with_disrupted_taint(snapshot, &untainted);
        let tainted_selector = CandidateSelector::new(&tainted, now, selector.nominated());
        let explainer = Explainer::new(&tainted_selector);
        for (node, node_claim, node_pool, reason) in again {
            if let Some(explanation) = explainer.explain(&node, reason, observations) {
                out.push(BlockedNode {
                    node,
                    node_claim,
                    node_pool,
                    explanation,
                });
            }
        }
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// Why a node whose drain timed out at `observation.at` waits until `retry` has passed.
fn drain_timeout_explanation(
    node: &str,
    disruption: DisruptionReason,
    observation: &Observation,
    retry: Duration,
) -> Explanation {
    let why = match &observation.what {
        Observed::Other { reason } => reason.as_str(),
        _ => orchestration::DRAIN_TIMED_OUT,
    };
    let until = observation
        .at
        .saturating_add(retry)
        .unwrap_or(Timestamp::MAX);
    Explanation {
        node: node.to_owned(),
        disruption,
        reason: BlockedReason::Observed(observation.clone()),
        message: format!(
            "Node {node} is not disrupted again before {}: its disruption was abandoned at {}, {why}.",
            crate::disruption::explain::utc(until),
            crate::disruption::explain::utc(observation.at),
        ),
    }
}

/// The Nodes (with their NodeClaims) of the live candidates of commands in flight that are not
/// tainted, deleting or NotReady yet: budgets do not see them as disrupting.
fn untainted_in_flight<'s>(
    snapshot: &'s Snapshot,
    in_flight: &[InFlight],
) -> Vec<(
    &'s k8s_openapi::api::core::v1::Node,
    &'s karpenter_api::NodeClaim,
)> {
    in_flight
        .iter()
        .flat_map(|command| command.live_candidates(snapshot))
        .flat_map(|claim| {
            nodes_of(snapshot, claim)
                .into_iter()
                .map(move |node| (node, claim))
        })
        .filter(|(node, claim)| disrupting(node, claim).is_none() && is_node_ready(node))
        .collect()
}

/// A copy of `snapshot` where `nodes` carry the disrupted taint.
fn with_disrupted_taint(
    snapshot: &Snapshot,
    nodes: &[(&k8s_openapi::api::core::v1::Node, &karpenter_api::NodeClaim)],
) -> Snapshot {
    let names: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|(node, _)| node.metadata.name.as_deref())
        .collect();
    let mut copy = snapshot.clone();
    for node in &mut copy.nodes {
        if names.contains(node.metadata.name.as_deref().unwrap_or_default()) {
            Arc::make_mut(node)
                .spec
                .get_or_insert_with(Default::default)
                .taints
                .get_or_insert_with(Vec::new)
                .push(crate::objects::disrupted_taint());
        }
    }
    copy
}

/// Whether an explanation is a block worth an event: not the node's own state or the
/// NodePool's settings (consolidation turned off, only when empty, not consolidatable yet),
/// which say the node is not due rather than held back.
fn worth_reporting(reason: &BlockedReason) -> bool {
    match reason {
        BlockedReason::Candidate(blocked) => !matches!(
            blocked,
            Blocked::NodeNotFound
                | Blocked::Unmanaged
                | Blocked::NotInitialized
                | Blocked::AlreadyDisrupting(_)
        ),
        BlockedReason::StaticNodePool { .. }
        | BlockedReason::ConsolidationDisabled { .. }
        | BlockedReason::OnlyWhenEmpty { .. }
        | BlockedReason::NotConsolidatableYet { .. } => false,
        BlockedReason::Budget { .. } | BlockedReason::Observed(_) => true,
    }
}

/// What an explanation says, without the instant of an observation (a new attempt failing the
/// same way is not news).
fn dedup_key(explanation: &Explanation) -> String {
    match &explanation.reason {
        BlockedReason::Observed(observation) => format!("{:?}", observation.what),
        _ => explanation.message.clone(),
    }
}

/// The pod a block names, if any.
fn blocking_pod(reason: &BlockedReason) -> Option<&str> {
    match reason {
        BlockedReason::Candidate(
            Blocked::DoNotDisruptPod { pod, .. }
            | Blocked::PdbBlocks { pod, .. }
            | Blocked::MultiplePdbs { pod, .. },
        ) => Some(pod),
        _ => None,
    }
}

/// Snapshots and method inputs the unit tests of the disruption modules share.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::sync::Arc;

    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use karpenter_api::{NodeClaim, NodePool};
    use serde_json::{Value, json};

    use super::simulate::{SimulationSources, Simulator};
    use super::{MethodInput, Settings};
    use crate::cloudprovider::fake::instance_type;
    use crate::cluster::Snapshot;
    use crate::controllers::provisioning::input::Catalogue;
    use crate::controllers::testing;
    use crate::disruption::{CandidateSelector, DisruptionClass};

    /// The instance type every fixture node runs: 4 CPU (3.9 allocatable), 8 GiB, 10 pods.
    pub(crate) const INSTANCE_TYPE: &str = "default-instance-type";

    /// The fixtures' instant.
    pub(crate) fn now() -> Timestamp {
        testing::at(0)
    }

    /// A condition `type_=True` since `at`.
    pub(crate) fn condition(type_: &str, at: Timestamp) -> Value {
        json!({ "type": type_, "status": "True", "lastTransitionTime": at })
    }

    /// NodePool `name` (on-demand only); `disruption` merged into its `spec.disruption`.
    pub(crate) fn pool(name: &str, disruption: Value) -> NodePool {
        let mut spec = json!({ "template": { "spec": { "requirements": [
            { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
        ] } } });
        let disruption = if disruption.is_null() {
            json!({})
        } else {
            disruption
        };
        spec["disruption"] = testing::merged(
            json!({ "consolidateAfter": "0s", "budgets": [{ "nodes": "100%" }] }),
            disruption,
        );
        testing::node_pool(
            name,
            json!({ "metadata": { "uid": format!("{name}-uid") }, "spec": spec }),
        )
    }

    /// The catalogue of every fixture NodePool.
    pub(crate) fn catalogue() -> Catalogue {
        vec![Arc::new(instance_type(INSTANCE_TYPE, 4, 8, 10, "amd64"))].into()
    }

    /// An initialized node `node-<suffix>` of NodeClaim `claim-<suffix>` in `pool`, with
    /// `conditions` added to its NodeClaim (Launched, Registered and Initialized are there).
    pub(crate) fn managed(suffix: &str, pool: &str, conditions: Vec<Value>) -> (NodeClaim, Node) {
        let node_name = format!("node-{suffix}");
        let provider_id = format!("fake:///test-zone-1/i-{suffix}");
        let labels = json!({
            "karpenter.sh/nodepool": pool,
            "node.kubernetes.io/instance-type": INSTANCE_TYPE,
            "topology.kubernetes.io/zone": "test-zone-1",
            "karpenter.sh/capacity-type": "on-demand",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        });
        let mut all = vec![
            condition("Launched", testing::at(-3600)),
            condition("Registered", testing::at(-3600)),
            condition("Initialized", testing::at(-3600)),
        ];
        all.extend(conditions);
        let allocatable = json!({ "cpu": "3900m", "memory": "8Gi", "pods": "10" });
        let claim = testing::node_claim(
            &format!("claim-{suffix}"),
            json!({
                "metadata": { "labels": labels, "uid": format!("uid-{suffix}") },
                "status": {
                    "providerID": provider_id,
                    "nodeName": node_name,
                    "capacity": { "cpu": "4", "memory": "8Gi", "pods": "10" },
                    "allocatable": allocatable,
                    "conditions": all,
                },
            }),
        );
        let mut node_labels = labels;
        node_labels["karpenter.sh/initialized"] = json!("true");
        node_labels["kubernetes.io/hostname"] = json!(node_name);
        let node = testing::node(
            &node_name,
            json!({
                "metadata": { "labels": node_labels },
                "spec": { "providerID": provider_id },
                "status": {
                    "conditions": [{ "type": "Ready", "status": "True" }],
                    "allocatable": allocatable,
                },
            }),
        );
        (claim, node)
    }

    /// A running pod `default/name` of its own ReplicaSet on `node` (none: pending) asking for
    /// `cpu`.
    pub(crate) fn pod(name: &str, node: Option<&str>, cpu: &str) -> Pod {
        let mut value = json!({
            "metadata": {
                "uid": format!("uid-{name}"),
                "labels": { "app": name },
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": name, "uid": "rs-uid", "controller": true }],
            },
            "spec": { "containers": [{ "name": "c", "image": "c",
                "resources": { "requests": { "cpu": cpu } } }] },
        });
        match node {
            Some(node) => {
                value["spec"]["nodeName"] = json!(node);
                value["status"] = json!({ "phase": "Running",
                    "conditions": [{ "type": "Ready", "status": "True" }] });
            }
            None => {
                value["status"] = json!({ "phase": "Pending", "conditions": [
                    { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" },
                ] });
            }
        }
        testing::pod(name, value)
    }

    /// A sorted snapshot of these objects.
    pub(crate) fn snapshot(
        pools: Vec<NodePool>,
        managed: Vec<(NodeClaim, Node)>,
        pods: Vec<Pod>,
    ) -> Snapshot {
        let (node_claims, nodes): (Vec<_>, Vec<_>) = managed.into_iter().unzip();
        let mut snapshot = Snapshot {
            node_pools: crate::cluster::shared(pools),
            node_claims: crate::cluster::shared(node_claims),
            nodes: crate::cluster::shared(nodes),
            pods: crate::cluster::shared(pods),
            ..Snapshot::default()
        };
        snapshot.sort();
        snapshot
    }

    /// Runs `f` on the method input of `class` over `snapshot` at [`now`], with `budgets`
    /// (every NodePool gets the fixture catalogue).
    pub(crate) fn with_input<R>(
        snapshot: &Snapshot,
        class: DisruptionClass,
        budgets: &BTreeMap<String, u32>,
        f: impl FnOnce(&MethodInput<'_>) -> R,
    ) -> R {
        let nominated = BTreeSet::new();
        let selector = CandidateSelector::new(snapshot, now(), &nominated);
        let candidates = selector.candidates(class);
        let catalogues: HashMap<String, Catalogue> = snapshot
            .node_pools()
            .map(|pool| (pool.metadata.name.clone().unwrap_or_default(), catalogue()))
            .collect();
        let node_pools: Vec<(&NodePool, Catalogue)> = snapshot
            .node_pools()
            .map(|pool| (pool, catalogue()))
            .collect();
        let leaving = BTreeSet::new();
        let label_policy = core_domain::labels::LabelPolicy::core();
        let simulator = Simulator::new(SimulationSources {
            snapshot,
            node_pools: &node_pools,
            catalogues: &catalogues,
            label_policy: &label_policy,
            preference_policy: core_domain::scheduler::PreferencePolicy::Respect,
            leaving: &leaving,
            memo: None,
        });
        let settings = Settings::default();
        f(&MethodInput {
            snapshot,
            now: now(),
            candidates: &candidates,
            budgets,
            simulator: &simulator,
            catalogues: &catalogues,
            settings: &settings,
        })
    }

    /// `pools` each allowing `allowed`.
    pub(crate) fn budgets(pools: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pools
            .iter()
            .map(|(pool, allowed)| ((*pool).to_owned(), *allowed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{Value, json};

    use super::fixtures::{condition, managed, now, pod, pool, snapshot};
    use super::orchestration::{ANNOTATION_COMMAND, candidate_patch};
    use super::*;
    use crate::controllers::testing;

    /// A method that answers `commands` and one observation, counting its calls.
    struct Scripted {
        reason: DisruptionReason,
        commands: Vec<Command>,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(reason: DisruptionReason, candidates: &[&str]) -> Self {
            let commands = if candidates.is_empty() {
                Vec::new()
            } else {
                vec![Command::new(
                    reason,
                    candidates.iter().map(|c| (*c).to_owned()).collect(),
                    Vec::new(),
                    now(),
                )]
            };
            Self {
                reason,
                commands,
                calls: AtomicUsize::new(0),
            }
        }
    }

    impl Method for Scripted {
        fn reason(&self) -> DisruptionReason {
            self.reason
        }
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn compute(&self, input: &MethodInput<'_>) -> MethodOutcome {
            self.calls.fetch_add(1, Ordering::SeqCst);
            MethodOutcome {
                commands: self.commands.clone(),
                observations: vec![Observation {
                    node: format!("seen-by-{:?}", self.reason),
                    at: input.now,
                    what: Observed::Other {
                        reason: "looked".into(),
                    },
                }],
                needs_validation: false,
            }
        }
    }

    fn inputs<'a>(
        snapshot: &'a Snapshot,
        in_flight: &'a [InFlight],
        nominated: &'a BTreeSet<String>,
        options: &'a DisruptionOptions,
        settings: &'a Settings,
        catalogues: &'a HashMap<String, Catalogue>,
    ) -> PassInputs<'a> {
        PassInputs {
            snapshot,
            now: now(),
            node_pools: &[],
            catalogues,
            in_flight,
            nominated,
            observations: &[],
            options,
            settings,
            memo: None,
        }
    }

    #[test]
    fn commands_sort_their_candidates_and_say_what_they_do() {
        let delete = Command::new(
            DisruptionReason::Empty,
            vec!["b".into(), "a".into(), "b".into()],
            Vec::new(),
            now(),
        );
        assert_eq!(delete.candidates, ["a", "b"]);
        assert_eq!(delete.decision(), Decision::Delete);
        assert_eq!(delete.decision().as_str(), "delete");
        let nothing = Command::new(DisruptionReason::Empty, vec![], vec![], now());
        assert_eq!(nothing.decision(), Decision::NoOp);
    }

    #[test]
    fn the_first_method_with_a_command_ends_the_pass() {
        let snapshot = snapshot(vec![pool("default", Value::Null)], vec![], vec![]);
        let methods: Vec<Box<dyn Method>> = vec![
            Box::new(Scripted::new(DisruptionReason::Empty, &[])),
            Box::new(Scripted::new(DisruptionReason::Drifted, &["claim-x"])),
            Box::new(Scripted::new(DisruptionReason::Underutilized, &["claim-y"])),
        ];
        let (nominated, options, settings, catalogues) = (
            BTreeSet::new(),
            DisruptionOptions::default(),
            Settings::default(),
            HashMap::new(),
        );

        let decision = decide(
            inputs(&snapshot, &[], &nominated, &options, &settings, &catalogues),
            &methods,
        );

        let (index, outcome) = decision.acted.unwrap();
        assert_eq!(index, 1);
        assert_eq!(outcome.commands[0].candidates, ["claim-x"]);
        let seen: Vec<&str> = decision
            .observations
            .iter()
            .map(|o| o.node.as_str())
            .collect();
        assert_eq!(
            seen,
            ["seen-by-Empty", "seen-by-Drifted"],
            "the third never ran"
        );
        assert_eq!(
            decision.allowed["default"][&DisruptionReason::Drifted],
            0,
            "no nodes"
        );
    }

    /// Three nodes of `default` (budget 2), the first in a command in flight, untainted.
    fn busy_world() -> (Snapshot, Vec<InFlight>) {
        let budget = json!({ "budgets": [{ "nodes": "2" }] });
        let command = Command::new(
            DisruptionReason::Drifted,
            vec!["claim-a".into()],
            Vec::new(),
            now(),
        );
        let (a, node_a) = managed("a", "default", vec![condition("Drifted", testing::at(-60))]);
        let patch = candidate_patch(&command, now());
        let a = testing::patched(&a, json!({ "metadata": patch["metadata"].clone() }));
        assert!(
            a.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key(ANNOTATION_COMMAND)
        );
        let snapshot = snapshot(
            vec![pool("default", budget)],
            vec![
                (a, node_a),
                managed("b", "default", vec![condition("Drifted", testing::at(-30))]),
                managed("c", "default", vec![]),
            ],
            vec![pod("on-b", Some("node-b"), "1")],
        );
        let in_flight = orchestration::in_flight(&snapshot);
        assert_eq!(in_flight.len(), 1);
        (snapshot, in_flight)
    }

    #[test]
    fn candidates_of_commands_in_flight_use_budget_before_they_are_tainted() {
        let (snapshot, in_flight) = busy_world();
        let budgets = budgets_in_flight(&snapshot, now(), &in_flight);
        assert_eq!(budgets[&DisruptionReason::Drifted]["default"], 1);
        let none = budgets_in_flight(&snapshot, now(), &[]);
        assert_eq!(none[&DisruptionReason::Drifted]["default"], 2);
        assert_eq!(
            leaving_nodes(&snapshot, &in_flight),
            BTreeSet::from(["node-a".to_owned()])
        );
    }

    #[test]
    fn candidates_of_commands_in_flight_are_no_candidates_again() {
        let (snapshot, in_flight) = busy_world();
        let (nominated, options, settings, catalogues) = (
            BTreeSet::new(),
            DisruptionOptions::default(),
            Settings::default(),
            HashMap::new(),
        );
        let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
        let decision = decide(
            inputs(
                &snapshot,
                &in_flight,
                &nominated,
                &options,
                &settings,
                &catalogues,
            ),
            &methods,
        );
        let (_, outcome) = decision.acted.unwrap();
        assert_eq!(
            outcome.commands[0].candidates,
            ["claim-b"],
            "claim-a is in flight"
        );
    }

    #[test]
    fn a_failed_replacement_holds_its_node_back_for_the_retry_delay() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![managed(
                "a",
                "default",
                vec![condition("Drifted", testing::at(-60))],
            )],
            vec![],
        );
        let failed = |seconds_ago: i64| Observation {
            node: "node-a".into(),
            at: testing::at(-seconds_ago),
            what: Observed::ReplacementFailed {
                reason: "no capacity".into(),
            },
        };
        let (nominated, options, settings, catalogues) = (
            BTreeSet::new(),
            DisruptionOptions::default(),
            Settings::default(),
            HashMap::new(),
        );
        let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
        for (ago, expect_command) in [(30, false), (60, true)] {
            let observations = [failed(ago)];
            let mut pass = inputs(&snapshot, &[], &nominated, &options, &settings, &catalogues);
            pass.observations = &observations;
            let decision = decide(pass, &methods);
            assert_eq!(
                decision.acted.is_some(),
                expect_command,
                "{ago}s after the failure"
            );
        }
    }

    #[test]
    fn due_nodes_are_drifted_or_consolidatable_and_not_being_handled() {
        let (mut snapshot, in_flight) = busy_world();
        let (d, node_d) = managed("d", "default", vec![condition("Consolidatable", now())]);
        let (e, node_e) = managed("e", "default", vec![condition("Drifted", now())]);
        let mut e = e;
        e.metadata.deletion_timestamp = Some(Time(now()));
        snapshot.node_claims.extend([d, e].map(Arc::new));
        snapshot.nodes.extend([node_d, node_e].map(Arc::new));
        snapshot.sort();

        let due = due_nodes(&snapshot, &in_flight, &BTreeSet::new());
        assert_eq!(
            due,
            [
                (
                    "node-b".to_owned(),
                    "claim-b".to_owned(),
                    Some(DisruptionReason::Drifted)
                ),
                ("node-d".to_owned(), "claim-d".to_owned(), None),
            ]
        );
        let acted = BTreeSet::from(["claim-b".to_owned()]);
        assert_eq!(due_nodes(&snapshot, &in_flight, &acted).len(), 1);
    }

    #[test]
    fn a_node_held_by_the_budget_of_commands_in_flight_is_explained_by_that_budget() {
        let budget = json!({ "budgets": [{ "nodes": "1" }] });
        let command = Command::new(
            DisruptionReason::Drifted,
            vec!["claim-a".into()],
            vec![],
            now(),
        );
        let (a, node_a) = managed("a", "default", vec![condition("Drifted", testing::at(-60))]);
        let patch = candidate_patch(&command, now());
        let a = testing::patched(&a, json!({ "metadata": patch["metadata"].clone() }));
        let snapshot = snapshot(
            vec![pool("default", budget)],
            vec![
                (a, node_a),
                managed("b", "default", vec![condition("Drifted", testing::at(-30))]),
            ],
            vec![],
        );
        let in_flight = orchestration::in_flight(&snapshot);
        let due = due_nodes(&snapshot, &in_flight, &BTreeSet::new());

        let nominated = BTreeSet::new();
        let selector = CandidateSelector::new(&snapshot, now(), &nominated);
        let explained = explain_due(&selector, &in_flight, due, &[], DEFAULT_REPLACEMENT_RETRY);

        assert_eq!(explained.len(), 1);
        assert_eq!(explained[0].node, "node-b");
        assert_eq!(explained[0].node_pool, "default");
        assert!(
            matches!(
                explained[0].explanation.reason,
                BlockedReason::Budget { .. }
            ),
            "{:?}",
            explained[0].explanation
        );
        assert!(explained[0].explanation.message.contains("node-a"));
        assert!(worth_reporting(&explained[0].explanation.reason));
    }

    #[test]
    fn a_repeated_observation_is_the_same_news() {
        let observed = |at: Timestamp| Explanation {
            node: "n".into(),
            disruption: DisruptionReason::Drifted,
            reason: BlockedReason::Observed(Observation {
                node: "n".into(),
                at,
                what: Observed::Other { reason: "x".into() },
            }),
            message: format!("at {at}: x"),
        };
        assert_eq!(
            dedup_key(&observed(now())),
            dedup_key(&observed(testing::at(60)))
        );
        assert!(!worth_reporting(&BlockedReason::NotConsolidatableYet {
            node_pool: "p".into(),
            consolidate_after: "1m".into(),
            eligible_at: None,
        }));
        assert!(!worth_reporting(&BlockedReason::Candidate(
            Blocked::AlreadyDisrupting(crate::disruption::Disrupting::Tainted)
        )));
        let pod_block = BlockedReason::Candidate(Blocked::DoNotDisruptPod {
            pod: "default/batch".into(),
            annotation: crate::disruption::DoNotDisrupt::Always,
        });
        assert!(worth_reporting(&pod_block));
        assert_eq!(blocking_pod(&pod_block), Some("default/batch"));
    }

    fn drain_timed_out(seconds_ago: i64) -> Observation {
        Observation {
            node: "node-a".into(),
            at: testing::at(-seconds_ago),
            what: Observed::Other {
                reason: format!(
                    "{}: NodeClaim claim-a was not drained within 1m: pod default/web is held by PodDisruptionBudget default/web-pdb",
                    orchestration::DRAIN_TIMED_OUT
                ),
            },
        }
    }

    #[test]
    fn a_drain_timeout_holds_its_node_back_for_the_retry_delay() {
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![managed(
                "a",
                "default",
                vec![condition("Drifted", testing::at(-600))],
            )],
            vec![],
        );
        let (nominated, options, settings, catalogues) = (
            BTreeSet::new(),
            DisruptionOptions::default(),
            Settings::default(),
            HashMap::new(),
        );
        let methods: Vec<Box<dyn Method>> = vec![Box::new(Drift)];
        for (ago, expect_command) in [(59, false), (60, true)] {
            let observations = [drain_timed_out(ago)];
            let mut pass = inputs(&snapshot, &[], &nominated, &options, &settings, &catalogues);
            pass.observations = &observations;
            let decision = decide(pass, &methods);
            assert_eq!(
                decision.acted.is_some(),
                expect_command,
                "{ago}s after the timeout"
            );
        }
    }

    #[test]
    fn a_recent_drain_timeout_explains_its_node_before_what_else_holds_it() {
        let protected = testing::patched(
            &pod("web", Some("node-a"), "1"),
            json!({ "metadata": { "annotations": { "karpenter.sh/do-not-disrupt": "true" } } }),
        );
        let snapshot = snapshot(
            vec![pool("default", Value::Null)],
            vec![managed(
                "a",
                "default",
                vec![condition("Drifted", testing::at(-600))],
            )],
            vec![protected],
        );
        let due = due_nodes(&snapshot, &[], &BTreeSet::new());
        let explain = |observation: Observation| {
            let nominated = BTreeSet::new();
            let selector = CandidateSelector::new(&snapshot, now(), &nominated);
            let explained = explain_due(
                &selector,
                &[],
                due.clone(),
                &[observation],
                DEFAULT_REPLACEMENT_RETRY,
            );
            assert_eq!(explained.len(), 1);
            explained[0].explanation.clone()
        };

        let recent = explain(drain_timed_out(30));
        assert!(
            matches!(recent.reason, BlockedReason::Observed(_)),
            "{recent:?}"
        );
        assert_eq!(recent.disruption, DisruptionReason::Drifted);
        assert!(
            recent.message.contains("drain timed out")
                && recent.message.contains("default/web-pdb")
                && recent.message.contains("not disrupted again before"),
            "{}",
            recent.message
        );
        assert!(worth_reporting(&recent.reason));

        let old = explain(drain_timed_out(60));
        assert!(
            matches!(
                old.reason,
                BlockedReason::Candidate(Blocked::DoNotDisruptPod { .. })
            ),
            "once retried, the node explains as any other: {old:?}"
        );
    }

    fn quiet_fleet(pool_disruption: Value, pods: Vec<k8s_openapi::api::core::v1::Pod>) -> Snapshot {
        snapshot(
            vec![pool("default", pool_disruption)],
            vec![managed("a", "default", vec![])],
            pods,
        )
    }

    const RETRY: Duration = Duration::from_secs(60);

    #[test]
    fn with_nothing_that_moves_with_time_a_quiet_pass_stays_quiet_for_ever() {
        let snapshot = quiet_fleet(Value::Null, vec![pod("web", Some("node-a"), "1")]);
        assert_eq!(
            quiet_until(&snapshot, now(), &[], &[], None, RETRY),
            Some(Timestamp::MAX)
        );
    }

    #[test]
    fn a_budget_with_a_schedule_makes_no_pass_skippable() {
        let snapshot = quiet_fleet(
            json!({ "budgets": [{ "nodes": "0", "schedule": "0 11 * * *", "duration": "2h" }] }),
            vec![],
        );
        assert_eq!(quiet_until(&snapshot, now(), &[], &[], None, RETRY), None);
    }

    #[test]
    fn the_earliest_time_threshold_ends_the_quiet() {
        let mut protected = pod("batch", Some("node-a"), "1");
        protected.metadata.creation_timestamp = Some(Time(testing::at(-5)));
        protected.metadata.annotations = Some(BTreeMap::from([(
            "karpenter.sh/do-not-disrupt".to_owned(),
            "95s".to_owned(),
        )]));
        let snapshot = quiet_fleet(Value::Null, vec![protected]);
        let fresh = Some(testing::at(180));
        // The pod's protection ends 95 s after it started.
        assert_eq!(
            quiet_until(&snapshot, now(), &[], &[], fresh, RETRY),
            Some(testing::at(90))
        );
        // A DisruptionBlocked 20 s ago: explained again once the minimum spacing is over.
        assert_eq!(
            quiet_until(&snapshot, now(), &[], &[testing::at(-20)], fresh, RETRY),
            Some(testing::at(40))
        );
        // One 100 s ago, explained since: its repeat is due 5 minutes after it.
        assert_eq!(
            quiet_until(
                &Snapshot::default(),
                now(),
                &[],
                &[testing::at(-100)],
                fresh,
                RETRY
            ),
            Some(testing::at(180))
        );
        assert_eq!(
            quiet_until(
                &Snapshot::default(),
                now(),
                &[],
                &[testing::at(-100)],
                None,
                RETRY
            ),
            Some(testing::at(200))
        );
        // A failed replacement 30 s ago holds its node back until the retry delay is over.
        let failed = Observation {
            node: "node-a".into(),
            at: testing::at(-30),
            what: Observed::ReplacementFailed {
                reason: "no capacity".into(),
            },
        };
        assert_eq!(
            quiet_until(&Snapshot::default(), now(), &[failed], &[], fresh, RETRY),
            Some(testing::at(30))
        );
    }

    #[test]
    fn a_quiet_pass_is_skipped_only_on_the_same_revision_and_nominations_before_its_end() {
        let quiet = Quiet {
            revision: 7,
            nominations: 2,
            until: testing::at(60),
        };
        let seen = |revision, nominations, at| Quiet {
            revision,
            nominations,
            until: testing::at(at),
        };
        assert!(still_quiet(quiet, seen(7, 2, 50)));
        assert!(!still_quiet(quiet, seen(7, 2, 60)), "the threshold passes");
        assert!(!still_quiet(quiet, seen(8, 2, 10)), "the cluster changed");
        assert!(!still_quiet(quiet, seen(7, 3, 10)), "a node was nominated");
    }
}
