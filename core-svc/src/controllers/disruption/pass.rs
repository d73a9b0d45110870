//! One pass's decision, pure: the candidates, the budgets left by the commands in flight, then
//! the methods in order until one yields a command (and the re-check of a held command). Apart
//! from the controller so that the benchmark (`benches/disruption.rs`) and the tests run it on
//! a snapshot, without any port.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use jiff::Timestamp;
use karpenter_api::{DisruptionReason, NodePool};

use super::orchestration::InFlight;
use super::simulate::{SimulationSources, Simulator};
use super::{
    Command, Decision, DisruptionOptions, Method, MethodInput, MethodOutcome, Rejected,
    consolidation, orchestration,
};
use crate::cluster::Snapshot;
use crate::controllers::Settings;
use crate::controllers::nodeclaim::{nodes_by_provider_id, provider_id_of};
use crate::controllers::provisioning::input::Catalogue;
use crate::controllers::provisioning::memo::NodeMemo;
use crate::disruption::candidates::{disrupting, node_pool_name};
use crate::disruption::{
    Candidate, CandidateSelector, DisruptionClass, Observation, Observed, budgets,
};
use crate::objects::is_node_ready;

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
    /// `selector` may outlive the pass's own borrows (`leaving`): its candidates are taken for
    /// the shorter of the two.
    fn new<'s: 'a>(
        inputs: PassInputs<'a>,
        selector: &'a CandidateSelector<'s>,
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
        // Every NodeClaim a command in flight involves ([`InFlight::involves`]), gathered once:
        // each candidate of each class is checked against all of them.
        let involved: HashSet<&str> = in_flight.iter().flat_map(InFlight::node_claims).collect();
        let mut candidates = BTreeMap::new();
        for &class in classes {
            if candidates.contains_key(&class) {
                continue;
            }
            let mut list = selector.candidates(class);
            list.retain(|candidate| {
                !involved.contains(candidate.node_claim_name())
                    && !held_back.contains(candidate.name)
            });
            candidates.insert(class, list);
        }
        let budgets = budgets_in_flight(snapshot, now, in_flight);
        let sources = SimulationSources {
            snapshot,
            node_pools: inputs.node_pools,
            catalogues: inputs.catalogues,
            label_policy: &options.label_policy,
            preference_policy: options.preference_policy,
            leaving,
            memo,
            now,
        };
        // The selector grouped the same snapshot's pods by node already.
        let simulator = if std::ptr::eq(selector.snapshot(), snapshot) {
            Simulator::with_pods_by_node(sources, selector.pods_by_node())
        } else {
            Simulator::new(sources)
        };
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
    if in_flight.is_empty() {
        return BTreeSet::new();
    }
    let nodes = nodes_by_provider_id(snapshot);
    in_flight
        .iter()
        .flat_map(|command| command.live_candidates(snapshot))
        .flat_map(|claim| nodes.get(provider_id_of(claim)).into_iter().flatten())
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

/// The Nodes (with their NodeClaims) of the live candidates of commands in flight that are not
/// tainted, deleting or NotReady yet: budgets do not see them as disrupting.
pub(super) fn untainted_in_flight<'s>(
    snapshot: &'s Snapshot,
    in_flight: &[InFlight],
) -> Vec<(
    &'s k8s_openapi::api::core::v1::Node,
    &'s karpenter_api::NodeClaim,
)> {
    if in_flight.is_empty() {
        return Vec::new();
    }
    let nodes = nodes_by_provider_id(snapshot);
    in_flight
        .iter()
        .flat_map(|command| command.live_candidates(snapshot))
        .flat_map(|claim| {
            nodes
                .get(provider_id_of(claim))
                .into_iter()
                .flatten()
                .map(move |&node| (node, claim))
        })
        .filter(|(node, claim)| disrupting(node, claim).is_none() && is_node_ready(node))
        .collect()
}
