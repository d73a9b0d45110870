//! The disruption controller's I/O: one pass read snapshot → orchestrate the commands in
//! flight → [`decide`](super::decide) → start, hold or report, with what it keeps in memory
//! between passes (the module documentation of [`super`] describes the pass).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::{DisruptionReason, NodePool};

use super::blocked::{
    BlockedNode, blocking_pod, dedup_key, due_nodes, explain_due, worth_reporting,
};
use super::orchestration::{
    InFlight, Orchestrator, Progress, Started, command_timeout, progress, reason_name,
};
use super::pass::{PassInputs, decide_with, validate_held};
use super::quiet::{Quiet, quiet_until, still_quiet};
use super::{
    BLOCKED_EVENT_INTERVAL, BLOCKED_EVENT_MIN_SPACING, Command, DisruptionOptions, Method,
    POLLING_PERIOD, VALIDATION_DELAY, default_methods, orchestration,
};
use crate::cloudprovider::{CloudProvider, CloudProviderError};
use crate::cluster::{Cluster, Snapshot};
use crate::controllers::cluster_state::cluster_state;
use crate::controllers::nodeclaim::nodes_of;
use crate::controllers::provisioning::DEFAULT_INSTANCE_TYPES_TTL;
use crate::controllers::provisioning::catalogue::CatalogueCache;
use crate::controllers::provisioning::input::{Catalogue, usage_by_node_pool};
use crate::controllers::provisioning::memo::NodeMemo;
use crate::controllers::provisioning::nominations::{SharedNominations, nomination_window};
use crate::controllers::provisioning::selection::{self, UsableNodePool};
use crate::controllers::termination::EVENT_DEDUPE_WINDOW;
use crate::controllers::{Context, Controller, ControllerError, Requeue};
use crate::disruption::{CandidateSelector, Observation, Observed, do_not_disrupt};
use crate::events::{EventType, ObjectRef, Reason};
use crate::metrics::Metrics;

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
    /// writes them to ([`Provisioner::with_nominations`](crate::controllers::provisioning::Provisioner::with_nominations)):
    /// a node nominated within the window is no candidate. Without it, the controller's own
    /// handle stays empty.
    #[must_use]
    pub fn with_nominations(mut self, shared: SharedNominations) -> Self {
        self.nominations = shared;
        self
    }

    /// Fetches instance types through `shared`, the cache the provisioner given the same handle
    /// uses ([`Provisioner::with_catalogues`](crate::controllers::provisioning::Provisioner::with_catalogues)).
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
            &self.options.label_policy,
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
        self.report_cluster_state(&snapshot, &catalogues);
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
        // Built for the first command ready to terminate, then shared by the others.
        let mut pods_by_node = None;
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
                    let pods_by_node = pods_by_node.get_or_insert_with(|| snapshot.pods_by_node());
                    let terminated = orchestrator
                        .terminate(
                            reason,
                            &command.candidates,
                            command.started_at,
                            snapshot,
                            pods_by_node,
                        )
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

    /// The cluster-state gauges: this pass sees the whole fleet, every 10 s at most.
    fn report_cluster_state(&self, snapshot: &Snapshot, catalogues: &HashMap<String, Catalogue>) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let usage = usage_by_node_pool(snapshot, catalogues);
        metrics.set_cluster_state(&cluster_state(snapshot, &usage));
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
        // A set: during a roll most of the fleet is due, and most of it was reported.
        let due_names: HashSet<&str> = due.iter().map(|(node, _, _)| node.as_str()).collect();
        state
            .blocked
            .retain(|node, _| due_names.contains(node.as_str()));
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
