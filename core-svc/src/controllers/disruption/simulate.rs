//! "If these nodes went away, where would their pods go?" (upstream `SimulateScheduling`).
//!
//! A [`Simulator`] is built once per disruption pass from the snapshot: the scheduler's input
//! as provisioning builds it ([`input::build`]), with
//!
//! - as existing capacity: every Node and in-flight NodeClaim that is not being deleted, minus
//!   the nodes that are already leaving without being marked in the snapshot (the candidates of
//!   commands in flight, whose replacements are being launched);
//! - as pods placed first: the pods waiting for capacity (pending, and the reschedulable pods
//!   of nodes being deleted), the reschedulable pods of the leaving nodes, and the pods evicted
//!   from either whose controller has not made their successors yet
//!   ([`awaiting_successors`]). They are solved
//!   once, alone; those that fit existing capacity (the replacements in flight, typically) are
//!   bound to it in the input, so a candidate's pod never takes a place already promised; the
//!   others stay in every simulation, competing for new capacity only;
//! - as NodePools: the usable ones with their catalogues, their limits counted against what
//!   their NodeClaims use now (a candidate's NodeClaim still counts: its replacement is
//!   launched while it still runs, so limits must leave room for both).
//!
//! [`Simulator::simulate`] then takes the candidate nodes out of the existing capacity, adds
//! their reschedulable pods (running pods and terminating StatefulSet pods; no DaemonSet or
//! mirror pod) to the pods to place, solves, and puts the nodes back: no conversion is repeated
//! per simulation, and the nodes shown to the scheduler are shared with its input (`Arc`),
//! never cloned: a drift pass may simulate every candidate of a large cluster in turn.
//! When no pod in the cluster has a topology spread, pod affinity or anti-affinity constraint,
//! where pods run does not matter to where others may go, so the nodes without room for the
//! smallest pod to place (per resource) are taken out as well, from the waiting pods' solve
//! and from every simulation: the scheduler's cost grows with the nodes it is shown, and a
//! packed cluster's nodes are mostly full.
//!
//! A candidate pod counts as scheduled only when it lands on an initialized node or on a new
//! NodeClaim: like upstream, a pod placed on capacity that is not initialized yet would wait
//! for it, so the simulation reports it unschedulable ("would schedule against uninitialized
//! node ..."). The new NodeClaims reported are those holding at least one candidate pod; those
//! planned only for the pods already waiting are the provisioner's to create.
//!
//! A consolidation simulation ([`Simulator::simulate_consolidation`]) also keeps the
//! candidates' pods off every node still within its NodePool's `consolidateAfter` since its last
//! pod event (or its initialization), as upstream does since v1.14 (kubernetes-sigs/karpenter
//! #3006, `IsUnderConsolidateAfter` in `pkg/utils/disruption`): a node that just received pods
//! is not also the destination of the next consolidation. The pods waiting for capacity (pending,
//! or from nodes being deleted) may still go there. Such a node is shown to the scheduler with
//! the taint [`SETTLING_TAINT`], which no pod tolerates, so it still counts for every topology
//! rule. Drift and expiration simulations place pods on it as before.
//!
//! Differences from upstream: pods whose PodDisruptionBudget fully blocks eviction are placed
//! like any other (upstream leaves them out); nominations the provisioner holds in memory are
//! not reserved (the NodeClaims they point at are in-flight capacity all the same).

use crate::cluster::SlimPod;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use core_domain::labels::{LABEL_NODEPOOL, LabelPolicy};
use core_domain::scheduler::{
    ExistingNode, PlannedNodeClaim, PodId, PreferencePolicy, Room, SchedulingInput, Taint,
    TaintEffect, has_inter_pod_constraints, solve,
};
use jiff::Timestamp;
use karpenter_api::NodePool;

use crate::cluster::{PodsByNode, Snapshot};
use crate::controllers::consolidatable::{self, Verdict};
use crate::controllers::provisioning::convert;
use crate::controllers::provisioning::input::{self, Catalogue, Sources};
use crate::controllers::provisioning::memo::NodeMemo;
use crate::controllers::provisioning::selection;
use crate::disruption::candidates::is_reschedulable;
use crate::disruption::successors::awaiting_successors;

/// What a [`Simulator`] is built from.
#[derive(Debug, Clone, Copy)]
pub struct SimulationSources<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The NodePools new capacity may come from, in the order to try them (weight, then name),
    /// with their catalogues.
    pub node_pools: &'a [(&'a NodePool, Catalogue)],
    /// Every catalogue known, by NodePool name: in-flight NodeClaims' options and usage
    /// estimates come from them.
    pub catalogues: &'a HashMap<String, Catalogue>,
    /// Which labels are well known.
    pub label_policy: &'a LabelPolicy,
    /// Whether preferences count.
    pub preference_policy: PreferencePolicy,
    /// Nodes (by name) already leaving though the snapshot does not mark them deleting: the
    /// candidates of commands in flight.
    pub leaving: &'a BTreeSet<String>,
    /// Where Nodes converted by earlier passes are kept; `None` converts every Node afresh.
    pub memo: Option<&'a NodeMemo>,
    /// The pass's instant: which nodes are still within their `consolidateAfter`.
    pub now: Timestamp,
}

/// The taint a consolidation simulation shows on a node still within its NodePool's
/// `consolidateAfter` (see the module documentation): no pod tolerates it, so a candidate's pod
/// that fits nowhere else is reported unschedulable naming it.
pub const SETTLING_TAINT: &str = "karpenter.sh/within-consolidate-after";

/// What a simulation found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SimulationResult {
    /// Whether every reschedulable pod of the simulated nodes found a place.
    pub all_scheduled: bool,
    /// How many reschedulable pods the simulated nodes have.
    pub pods: usize,
    /// The pods (`namespace/name`) that found no place, with the scheduler's reason, in pod
    /// order.
    pub unschedulable: Vec<(String, String)>,
    /// The NodeClaims to launch for them (those holding at least one of their pods), in the
    /// order planned.
    pub new_node_claims: Vec<PlannedNodeClaim>,
    /// The pods (`namespace/name`) placed on existing, initialized capacity, with the node.
    pub placements: Vec<(String, String)>,
}

impl SimulationResult {
    /// The unschedulable pods' names, for an explanation.
    pub fn unschedulable_pods(&self) -> Vec<String> {
        self.unschedulable
            .iter()
            .map(|(pod, _)| pod.clone())
            .collect()
    }

    /// The first reason a pod could not be placed, or an empty string.
    pub fn first_reason(&self) -> &str {
        self.unschedulable
            .first()
            .map_or("", |(_, reason)| reason.as_str())
    }
}

/// The scheduler's input for one pass, from which candidates are taken out (see the module
/// documentation). Built on the first simulation, so a pass whose methods never simulate (only
/// empty nodes, say) does not pay for it. Safe to share between the methods of one pass;
/// simulations run one at a time.
#[derive(Debug)]
pub struct Simulator<'a> {
    sources: SimulationSources<'a>,
    /// The snapshot's pods by node: the pass's own index when it lends it
    /// ([`Simulator::with_pods_by_node`]).
    pods_by_node: PodsIndex<'a>,
    state: OnceLock<Mutex<State>>,
}

/// A [`Simulator`]'s pods by node, its own or lent (not a `Cow`, which would make the
/// simulator invariant in its lifetime).
#[derive(Debug)]
enum PodsIndex<'a> {
    Owned(PodsByNode<'a>),
    Lent(&'a PodsByNode<'a>),
}

impl<'a> PodsIndex<'a> {
    fn get(&self) -> &PodsByNode<'a> {
        match self {
            Self::Owned(index) => index,
            Self::Lent(index) => index,
        }
    }
}

#[derive(Debug)]
struct State {
    /// The scheduler's input. Between simulations its `existing_nodes` is empty: the nodes
    /// live in `slots`, and a simulation shares the ones it shows the scheduler and lets go
    /// of them after, so no simulation copies the whole cluster.
    input: SchedulingInput,
    /// The existing nodes, in the order provisioning built them.
    slots: Vec<Slot>,
    /// The existing node names, for lookups; positions in `slots`.
    index: HashMap<String, usize>,
    /// How many pods of `input.pods` are there for every simulation.
    base_pods: usize,
    /// Whether nodes without room for any pod to place may be left out of a simulation: no pod
    /// looks at other pods, so such a node changes nothing.
    prunable: bool,
}

/// An existing node, with what a simulation asks of it before showing it to the scheduler.
#[derive(Debug)]
struct Slot {
    /// The node, shared with the scheduler's input while a simulation shows it.
    node: Arc<ExistingNode>,
    /// What it has free.
    room: Room,
    /// Whether it is initialized: a pod placed on it counts as scheduled.
    initialized: bool,
    /// When it is still within its NodePool's `consolidateAfter`: the node as a consolidation
    /// simulation shows it, with [`SETTLING_TAINT`].
    settling: Option<Arc<ExistingNode>>,
}

impl Slot {
    fn new(node: Arc<ExistingNode>, settling: bool) -> Self {
        let settling = settling.then(|| {
            let mut tainted = ExistingNode::clone(&node);
            tainted
                .taints
                .push(Taint::new(SETTLING_TAINT, "", TaintEffect::NoSchedule));
            Arc::new(tainted)
        });
        Self {
            room: Room::free_on(&node),
            initialized: node.initialized,
            node,
            settling,
        }
    }
}

/// The existing nodes (by Node name, or NodeClaim name while there is no Node) still within
/// their NodePool's `consolidateAfter` at `now`, from the recorded `lastPodEventTime` (else
/// the initialization): the rule of the `Consolidatable` condition
/// ([`consolidatable::verdict`]), which is upstream's `IsUnderConsolidateAfter`.
fn settling_nodes(snapshot: &Snapshot, now: Timestamp) -> HashSet<&str> {
    snapshot
        .node_claims()
        .filter_map(|claim| {
            let pool = snapshot.node_pool(claim.metadata.labels.as_ref()?.get(LABEL_NODEPOOL)?)?;
            let status = claim.status.as_ref();
            let last_pod_event = status
                .and_then(|status| status.last_pod_event_time.as_ref())
                .map(|time| time.0);
            match consolidatable::verdict(claim, pool, last_pod_event, now) {
                Verdict::NotYet { .. } => Some(
                    status
                        .map(|status| status.node_name.as_str())
                        .filter(|name| !name.is_empty())
                        .or(claim.metadata.name.as_deref())
                        .unwrap_or_default(),
                ),
                Verdict::Consolidatable | Verdict::NotApplicable => None,
            }
        })
        .collect()
}

impl State {
    fn build(sources: &SimulationSources<'_>, pods_by_node: &PodsByNode<'_>) -> Self {
        let snapshot = sources.snapshot;
        let mut waiting = selection::waiting_pods(snapshot);
        let mut seen: HashSet<(&str, &str)> = waiting.iter().map(|pod| pod_key(pod)).collect();
        for node in sources.leaving {
            for pod in pods_by_node.get(node.as_str()).into_iter().flatten() {
                if is_reschedulable(pod) && seen.insert(pod_key(pod)) {
                    waiting.push(pod);
                }
            }
        }
        // In name order: the pods' order is the scheduler's.
        let gone: BTreeSet<&str> = selection::deleting_nodes(snapshot)
            .into_iter()
            .chain(sources.leaving.iter().map(String::as_str))
            .collect();
        let gone = gone
            .into_iter()
            .flat_map(|node| pods_by_node.get(node).into_iter().flatten().copied());
        for pod in awaiting_successors(snapshot, gone) {
            if seen.insert(pod_key(pod)) {
                waiting.push(pod);
            }
        }
        let built = input::build(&Sources {
            snapshot,
            pods: &waiting,
            pods_by_node: Some(pods_by_node),
            reserved: &[],
            node_pools: sources.node_pools,
            catalogues: sources.catalogues,
            label_policy: sources.label_policy,
            preference_policy: sources.preference_policy,
            memo: sources.memo,
        });
        for skipped in &built.skipped {
            tracing::debug!(?skipped, "left out of the disruption simulation");
        }
        let mut input = built.input;
        input
            .existing_nodes
            .retain(|node| !sources.leaving.contains(&node.name));
        let prunable = !has_inter_pod_constraints(&input.pods, &input.existing_nodes);
        reserve_for_waiting(&mut input, prunable);
        let base_pods = input.pods.len();
        let settling = settling_nodes(snapshot, sources.now);
        let slots: Vec<Slot> = std::mem::take(&mut input.existing_nodes)
            .into_iter()
            .map(|node| {
                let is_settling = settling.contains(node.name.as_str());
                Slot::new(node, is_settling)
            })
            .collect();
        let index = slots
            .iter()
            .enumerate()
            .map(|(position, slot)| (slot.node.name.clone(), position))
            .collect();
        Self {
            input,
            slots,
            index,
            base_pods,
            prunable,
        }
    }
}

impl<'a> Simulator<'a> {
    /// A simulator over `sources` (see the module documentation).
    pub fn new(sources: SimulationSources<'a>) -> Self {
        Self {
            pods_by_node: PodsIndex::Owned(sources.snapshot.pods_by_node()),
            sources,
            state: OnceLock::new(),
        }
    }

    /// [`Simulator::new`] over `pods_by_node`, the pods of `sources`' snapshot by node as
    /// [`Snapshot::pods_by_node`] groups them, which the caller has already: grouping them
    /// hashes every pod's node name.
    pub fn with_pods_by_node(
        sources: SimulationSources<'a>,
        pods_by_node: &'a PodsByNode<'a>,
    ) -> Self {
        Self {
            pods_by_node: PodsIndex::Lent(pods_by_node),
            sources,
            state: OnceLock::new(),
        }
    }

    /// The snapshot simulated on.
    pub fn snapshot(&self) -> &'a Snapshot {
        self.sources.snapshot
    }

    /// How many existing nodes (and in-flight NodeClaims) the input holds.
    pub fn existing_nodes(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A simulation restores the input before it returns; a panic half-way leaves nodes out,
        // which can only make later simulations of the same pass more conservative.
        self.state
            .get_or_init(|| Mutex::new(State::build(&self.sources, self.pods_by_node.get())))
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The reschedulable pods of the node called `node`.
    pub fn reschedulable_pods(&self, node: &str) -> impl Iterator<Item = &'a SlimPod> + '_ {
        self.pods_by_node
            .get()
            .get(node)
            .into_iter()
            .flatten()
            .copied()
            .filter(|pod| is_reschedulable(pod))
    }

    /// Where the reschedulable pods of `nodes` (Node names) would go if those nodes went away.
    pub fn simulate(&self, nodes: &[&str]) -> SimulationResult {
        self.run(nodes, false)
    }

    /// What [`simulate`](Self::simulate) finds, for consolidation: the candidates' pods do not
    /// go to nodes still within their `consolidateAfter` (see the module documentation).
    pub fn simulate_consolidation(&self, nodes: &[&str]) -> SimulationResult {
        self.run(nodes, true)
    }

    fn run(&self, nodes: &[&str], consolidation: bool) -> SimulationResult {
        let wanted: Vec<&SlimPod> = nodes
            .iter()
            .flat_map(|node| self.reschedulable_pods(node))
            .collect();
        let mut state = self.lock();
        let State {
            input,
            slots,
            index,
            base_pods,
            prunable,
        } = &mut *state;
        let base_pods = *base_pods;

        // The candidates' pods, converted once already as their nodes' pods.
        let mut candidate_nodes: Vec<usize> = nodes
            .iter()
            .filter_map(|name| index.get(*name).copied())
            .collect();
        candidate_nodes.sort_unstable();
        candidate_nodes.dedup();
        let mut converted: HashMap<PodId, core_domain::scheduler::Pod> = HashMap::new();
        for &position in &candidate_nodes {
            let node = slots.get(position).map(|slot| &slot.node);
            for pod in node.into_iter().flat_map(|node| &node.pods) {
                converted.insert(pod.id.clone(), pod.clone());
            }
        }
        let mut unschedulable = Vec::new();
        let mut candidate_ids: HashSet<PodId> = HashSet::with_capacity(wanted.len());
        for pod in &wanted {
            let (namespace, name) = pod_key(pod);
            let id = PodId::new(namespace, name);
            let scheduler_pod = match converted.remove(&id) {
                Some(pod) => Ok(pod),
                None => convert::pod(pod),
            };
            match scheduler_pod {
                Ok(scheduler_pod) => {
                    candidate_ids.insert(id);
                    input.pods.push(scheduler_pod);
                }
                Err(error) => {
                    unschedulable.push((id.to_string(), format!("cannot be read: {error}")));
                }
            }
        }

        // Show the scheduler every node but the candidates and (when nothing depends on where
        // pods are) the nodes without room for any pod to place, in their order.
        let smallest = prunable.then(|| Room::smallest(&input.pods));
        for (position, slot) in slots.iter().enumerate() {
            let is_candidate = candidate_nodes.binary_search(&position).is_ok();
            let full = smallest.is_some_and(|smallest| !slot.room.holds(&smallest));
            if !is_candidate && !full {
                let shown = match &slot.settling {
                    Some(settling) if consolidation => settling,
                    _ => &slot.node,
                };
                input.existing_nodes.push(Arc::clone(shown));
            }
        }

        let solved = solve(input);

        // Put everything back as it was.
        input.pods.truncate(base_pods);
        input.existing_nodes.clear();

        let results = match solved {
            Ok(results) => results,
            Err(error) => {
                // Names in a snapshot are unique; should that not hold, nothing is concluded.
                tracing::error!(%error, "the scheduler refused the simulation's input");
                return SimulationResult {
                    all_scheduled: false,
                    pods: wanted.len(),
                    unschedulable: wanted
                        .iter()
                        .map(|pod| {
                            let (namespace, name) = pod_key(pod);
                            (format!("{namespace}/{name}"), error.to_string())
                        })
                        .collect(),
                    ..SimulationResult::default()
                };
            }
        };
        let initialized = |node: &str| {
            index
                .get(node)
                .and_then(|&position| slots.get(position))
                .is_none_or(|slot| slot.initialized)
        };
        let mut placements = Vec::new();
        for (pod, node) in &results.existing_placements {
            if !candidate_ids.contains(pod) {
                continue;
            }
            if initialized(node) {
                placements.push((pod.to_string(), node.clone()));
            } else {
                unschedulable.push((
                    pod.to_string(),
                    format!("would schedule against uninitialized node {node}"),
                ));
            }
        }
        for (pod, reason) in &results.unschedulable {
            if candidate_ids.contains(pod) {
                unschedulable.push((pod.to_string(), reason.clone()));
            }
        }
        unschedulable.sort();
        let new_node_claims = results
            .new_node_claims
            .into_iter()
            .filter(|claim| claim.pods.iter().any(|pod| candidate_ids.contains(pod)))
            .collect();
        SimulationResult {
            all_scheduled: unschedulable.is_empty(),
            pods: wanted.len(),
            unschedulable,
            new_node_claims,
            placements,
        }
    }
}

/// Places the pods already waiting first: those that fit existing capacity are bound to it in
/// the input (it is theirs before any candidate's pod), the others stay to place, competing for
/// new capacity only. Without this, a candidate's pod could take the place a waiting pod (one
/// evicted from a node being replaced, say) is about to get, and the candidate would look
/// removable without a replacement. When `prunable` (see [`State::prunable`]), the nodes
/// without room for any waiting pod are not shown to the scheduler: they would take none of
/// them, and in a full fleet they are most of it.
fn reserve_for_waiting(input: &mut SchedulingInput, prunable: bool) {
    if input.pods.is_empty() {
        return;
    }
    // Solved over the nodes with room for a waiting pod (all of them when pods look at other
    // pods), then every node back in its order.
    let smallest = prunable.then(|| Room::smallest(&input.pods));
    let all = std::mem::take(&mut input.existing_nodes);
    input.existing_nodes = all
        .iter()
        .filter(|node| smallest.is_none_or(|smallest| Room::free_on(node).holds(&smallest)))
        .cloned()
        .collect();
    let solved = solve(input);
    input.existing_nodes = all;
    let results = match solved {
        Ok(results) => results,
        Err(error) => {
            tracing::error!(%error, "the scheduler refused the waiting pods");
            return;
        }
    };
    let placed: HashMap<PodId, String> = results.existing_placements.into_iter().collect();
    let mut by_node: HashMap<String, Vec<core_domain::scheduler::Pod>> = HashMap::new();
    for pod in std::mem::take(&mut input.pods) {
        match placed.get(&pod.id) {
            Some(node) => by_node.entry(node.clone()).or_default().push(pod),
            None => input.pods.push(pod),
        }
    }
    input.existing_nodes = std::mem::take(&mut input.existing_nodes)
        .into_iter()
        .map(|node| match by_node.remove(&node.name) {
            Some(pods) => Arc::new(
                pods.into_iter()
                    .fold(Arc::unwrap_or_clone(node), ExistingNode::with_pod),
            ),
            None => node,
        })
        .collect();
}

fn pod_key(pod: &SlimPod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use std::collections::{BTreeSet, HashMap};

    use karpenter_api::NodeClaim;
    use serde_json::{Value, json};

    use super::*;
    use crate::controllers::disruption::fixtures::{
        INSTANCE_TYPE, catalogue, managed, pod, pool, snapshot,
    };
    use crate::controllers::testing;
    use core_domain::resources::ResourceList;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn given_full_nodes_then_the_waiting_pods_are_reserved_on_the_nodes_with_room_and_all_come_back_in_order()
     {
        use core_domain::quantity::Quantity;
        let list = |cpu: &str, pods: &str| {
            ResourceList::from_quantities([
                ("cpu", Quantity::parse(cpu).unwrap()),
                ("memory", Quantity::parse("8Gi").unwrap()),
                ("pods", Quantity::parse(pods).unwrap()),
            ])
            .unwrap()
        };
        let waiting = |name: &str| {
            core_domain::scheduler::Pod::new("default", name).with_requests(
                ResourceList::from_quantities([("cpu", Quantity::parse("1").unwrap())]).unwrap(),
            )
        };
        let node = |name: &str, cpu: &str| {
            ExistingNode::new(name, [("kubernetes.io/hostname", name)], list(cpu, "110"))
        };
        // `full` has half a core: it cannot take a 1-core pod and is not shown.
        let nodes = vec![
            Arc::new(node("c-roomy", "4")),
            Arc::new(node("a-full", "500m")),
            Arc::new(node("b-roomy", "1")),
        ];
        for prunable in [true, false] {
            let mut input = SchedulingInput {
                pods: vec![waiting("w-0"), waiting("w-1"), waiting("w-2")],
                existing_nodes: nodes.clone(),
                node_pools: Vec::new(),
                daemon_set_pods: Vec::new(),
                label_policy: LabelPolicy::core(),
                preference_policy: PreferencePolicy::Respect,
            };
            reserve_for_waiting(&mut input, prunable);
            let names: Vec<&str> = input
                .existing_nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect();
            assert_eq!(
                names,
                ["c-roomy", "a-full", "b-roomy"],
                "prunable: {prunable}"
            );
            let bound: usize = input.existing_nodes.iter().map(|n| n.pods.len()).sum();
            assert_eq!(bound, 3, "prunable: {prunable}");
            assert!(
                input.existing_nodes[1].pods.is_empty(),
                "prunable: {prunable}"
            );
            assert!(input.pods.is_empty(), "prunable: {prunable}");
        }
    }

    fn simulate_on(
        snapshot: &Snapshot,
        leaving: &[&str],
        nodes: &[&[&str]],
    ) -> Vec<SimulationResult> {
        let node_pools: Vec<(&NodePool, Catalogue)> = snapshot
            .node_pools()
            .map(|pool| (pool, catalogue()))
            .collect();
        let catalogues: HashMap<String, Catalogue> = snapshot
            .node_pools()
            .map(|pool| (pool.metadata.name.clone().unwrap_or_default(), catalogue()))
            .collect();
        let leaving: BTreeSet<String> = leaving.iter().map(|n| (*n).to_owned()).collect();
        let policy = LabelPolicy::core();
        let simulator = Simulator::new(SimulationSources {
            snapshot,
            node_pools: &node_pools,
            catalogues: &catalogues,
            label_policy: &policy,
            preference_policy: PreferencePolicy::Respect,
            leaving: &leaving,
            memo: None,
            now: crate::controllers::disruption::fixtures::now(),
        });
        let before = simulator.existing_nodes();
        let results = nodes
            .iter()
            .map(|nodes| simulator.simulate(nodes))
            .collect();
        assert_eq!(simulator.existing_nodes(), before, "every node is put back");
        results
    }

    fn default_pool() -> Vec<NodePool> {
        vec![pool("default", Value::Null)]
    }

    /// Nodes `node-a` and `node-b` of `default`, running `web` and `api` respectively, each
    /// asking for `cpu`.
    fn web_and_api(pools: Vec<NodePool>, cpu: &str) -> Snapshot {
        snapshot(
            pools,
            vec![
                managed("a", "default", vec![]),
                managed("b", "default", vec![]),
            ],
            vec![
                pod("web", Some("node-a"), cpu),
                pod("api", Some("node-b"), cpu),
            ],
        )
    }

    #[test]
    fn pods_that_fit_on_the_other_nodes_need_no_new_nodeclaim() {
        let snapshot = web_and_api(default_pool(), "1");
        let [result] = <[_; 1]>::try_from(simulate_on(&snapshot, &[], &[&["node-a"]])).unwrap();
        assert!(result.all_scheduled);
        assert_eq!(result.pods, 1);
        assert!(result.new_node_claims.is_empty());
        assert_eq!(
            result.placements,
            [("default/web".to_owned(), "node-b".to_owned())]
        );
    }

    #[test]
    fn pods_that_fit_nowhere_get_new_nodeclaims_and_the_input_is_restored_between_simulations() {
        let snapshot = web_and_api(default_pool(), "3");
        let results = simulate_on(&snapshot, &[], &[&["node-a"], &["node-b"], &["node-a"]]);
        for result in &results {
            assert!(result.all_scheduled);
            assert_eq!(result.new_node_claims.len(), 1);
            assert_eq!(result.new_node_claims[0].node_pool, "default");
            assert!(
                result.new_node_claims[0]
                    .instance_types
                    .iter()
                    .any(|it| it.name() == INSTANCE_TYPE)
            );
        }
        assert_eq!(
            results[0], results[2],
            "the same simulation twice, the same answer"
        );
        assert_eq!(
            results[1].new_node_claims[0].pods[0].to_string(),
            "default/api"
        );
        let both = simulate_on(&snapshot, &[], &[&["node-a", "node-b"]]);
        assert_eq!(both[0].pods, 2);
        assert_eq!(both[0].new_node_claims.len(), 2);
    }

    #[test]
    fn a_nodepool_at_its_limit_leaves_the_pods_unschedulable_with_the_reason() {
        let limited = testing::patched(
            &pool("default", Value::Null),
            json!({ "spec": { "limits": { "cpu": "8" } } }),
        );
        let snapshot = web_and_api(vec![limited], "3");
        let result = &simulate_on(&snapshot, &[], &[&["node-a"]])[0];
        assert!(!result.all_scheduled);
        assert_eq!(result.unschedulable_pods(), ["default/web"]);
        assert!(!result.first_reason().is_empty());
        assert!(result.new_node_claims.is_empty());
    }

    /// An in-flight NodeClaim `name` of `default` (no Node yet).
    fn in_flight_claim(name: &str) -> NodeClaim {
        testing::node_claim(
            name,
            json!({
                "metadata": { "labels": { "karpenter.sh/nodepool": "default" } },
                "spec": { "requirements": [
                    { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE] },
                ] },
            }),
        )
    }

    #[test]
    fn capacity_that_is_not_initialized_does_not_count_as_a_place() {
        let mut snapshot = snapshot(
            default_pool(),
            vec![managed("a", "default", vec![])],
            vec![pod("web", Some("node-a"), "1")],
        );
        snapshot
            .node_claims
            .push(Arc::new(in_flight_claim("launching")));
        snapshot.sort();
        let result = &simulate_on(&snapshot, &[], &[&["node-a"]])[0];
        assert!(!result.all_scheduled);
        assert_eq!(
            result.unschedulable,
            [(
                "default/web".to_owned(),
                "would schedule against uninitialized node launching".to_owned()
            )]
        );
    }

    #[test]
    fn waiting_pods_and_the_pods_of_leaving_nodes_are_placed_before_the_candidates() {
        // node-b has room for one 3-CPU pod once its own goes (it is leaving): the pending pod
        // and node-c's pod both want it, node-a's candidate pod must not take it.
        let snapshot = snapshot(
            default_pool(),
            vec![
                managed("a", "default", vec![]),
                managed("b", "default", vec![]),
                managed("c", "default", vec![]),
            ],
            vec![
                pod("candidate", Some("node-a"), "3"),
                pod("pending", None, "3"),
                pod("leaving", Some("node-c"), "3"),
            ],
        );
        let result = &simulate_on(&snapshot, &["node-c"], &[&["node-a"]])[0];
        assert!(result.all_scheduled);
        assert!(result.placements.is_empty(), "{:?}", result.placements);
        assert_eq!(result.new_node_claims.len(), 1);
        assert!(
            result.new_node_claims[0]
                .pods
                .iter()
                .any(|pod| pod.to_string() == "default/candidate")
        );
    }

    #[test]
    fn pods_evicted_from_a_leaving_node_keep_their_room_until_their_successors_exist() {
        // node-c's pod was evicted a second ago (its drain started): terminating, it needs no
        // place itself, but its ReplicaSet has not made its successor yet. node-b has room for
        // one 3-CPU pod: the successor's, not the candidate's.
        let now = crate::controllers::disruption::fixtures::now();
        let mut evicted = pod("evicted", Some("node-c"), "3");
        evicted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now.checked_add(jiff::SignedDuration::from_secs(29))
                    .unwrap(),
            ));
        evicted.metadata.deletion_grace_period_seconds = Some(30);
        let evicted_snapshot = |successor: Option<Pod>| {
            snapshot(
                default_pool(),
                vec![
                    managed("a", "default", vec![]),
                    managed("b", "default", vec![]),
                    managed("c", "default", vec![]),
                ],
                [pod("candidate", Some("node-a"), "3"), evicted.clone()]
                    .into_iter()
                    .chain(successor)
                    .collect(),
            )
        };
        for leaving in [&["node-c"][..], &[]] {
            let snapshot = evicted_snapshot(None);
            let result = &simulate_on(&snapshot, leaving, &[&["node-a"]])[0];
            if leaving.is_empty() {
                // Not leaving (nor deleting): node-c's terminating pod is not a displaced one.
                assert_eq!(
                    result.placements,
                    [("default/candidate".to_owned(), "node-b".to_owned())]
                );
            } else {
                assert!(result.all_scheduled);
                assert!(result.placements.is_empty(), "{:?}", result.placements);
                assert_eq!(result.new_node_claims.len(), 1);
            }
        }

        // Its successor made (pending, created after the eviction), the evicted pod counts no
        // more: the successor is the one waiting.
        let mut successor = pod("successor", None, "3");
        successor.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        let snapshot = evicted_snapshot(Some(successor));
        let simulator_input = {
            let leaving: BTreeSet<String> = BTreeSet::from(["node-c".to_owned()]);
            let pods_by_node = snapshot.pods_by_node();
            let node_pools: Vec<(&NodePool, Catalogue)> = snapshot
                .node_pools()
                .map(|pool| (pool, catalogue()))
                .collect();
            let policy = LabelPolicy::core();
            let state = State::build(
                &SimulationSources {
                    snapshot: &snapshot,
                    node_pools: &node_pools,
                    catalogues: &HashMap::new(),
                    label_policy: &policy,
                    preference_policy: PreferencePolicy::Respect,
                    leaving: &leaving,
                    memo: None,
                    now,
                },
                &pods_by_node,
            );
            let placed: Vec<String> = state
                .slots
                .iter()
                .flat_map(|slot| slot.node.pods.iter().map(|pod| pod.id.to_string()))
                .chain(state.input.pods.iter().map(|pod| pod.id.to_string()))
                .filter(|pod| pod != "default/candidate")
                .collect();
            placed
        };
        assert_eq!(simulator_input, ["default/successor"]);
    }

    #[test]
    fn leaving_full_nodes_out_changes_no_answer() {
        // Nodes b..e are full; node f has room for one 1-CPU pod.
        let mut managed_nodes = vec![managed("a", "default", vec![])];
        let mut pods = vec![pod("web", Some("node-a"), "1")];
        for suffix in ["b", "c", "d", "e"] {
            managed_nodes.push(managed(suffix, "default", vec![]));
            pods.push(pod(
                &format!("full-{suffix}"),
                Some(&format!("node-{suffix}")),
                "3800m",
            ));
        }
        managed_nodes.push(managed("f", "default", vec![]));
        pods.push(pod("half", Some("node-f"), "2"));
        let snapshot = snapshot(default_pool(), managed_nodes, pods);
        let result = &simulate_on(&snapshot, &[], &[&["node-a"]])[0];
        assert!(result.all_scheduled);
        assert_eq!(
            result.placements,
            [("default/web".to_owned(), "node-f".to_owned())]
        );
    }
}
