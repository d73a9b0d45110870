//! One scheduling run (upstream's `Scheduler.Solve`): prepare the pods, NodePools, nodes and
//! topology; take pods largest first; place each on an existing node, else on a NodeClaim
//! planned in this run (fewest pods first), else on a new NodeClaim of the first NodePool
//! (by weight) that accepts it, relaxing its preferences one step at a time when nothing
//! does; retry the pods left over until a pass places none.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashSet};
use std::sync::Arc;

use crate::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{AllowUndefined, Operator, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::catalog::Dimensions;
use crate::scheduler::cost::Reweigh;
use crate::scheduler::daemons::daemon_runs_on;
use crate::scheduler::diagnosis::{incompatibility, limit_refusal};
use crate::scheduler::ids::{ContentMap, IdMap};
use crate::scheduler::node::{ExistingNode, NodeState, counted};
use crate::scheduler::nodeclaim::{Candidate, Context, Miss, NodeClaimState};
use crate::scheduler::nodepool::NodePoolSpec;
use crate::scheduler::plan::{Constraints, PodPlan, affinity_spec, replica_classes};
use crate::scheduler::pod::{Pod, PodId};
use crate::scheduler::pool::PoolState;
use crate::scheduler::preferences::Relaxation;
use crate::scheduler::queue::{Queue, placement_order};
use crate::scheduler::reasons::{Refusal, Unschedulable};
use crate::scheduler::taints::{Taint, TaintEffect, first_untolerated};
use crate::scheduler::topology::{AllowedDomains, GroupId, PodTopology, Rule, Topology};
use crate::scheduler::{Packing, PreferencePolicy, SchedulingInput};

/// Groups selecting a pod, and inverse groups selecting it, by (namespace, labels).
type Selections<'a> =
    ContentMap<(&'a str, &'a BTreeMap<String, String>), (Vec<GroupId>, Vec<GroupId>)>;

/// What a NodePool's refusal of a pod without topology rules depends on: the NodePool and its
/// generation, the pod's requirements and its requests. Replicas share it.
type RefusalKey = (usize, u64, Requirements, ResourceList);

/// How many planned NodeClaims a pod looks at for one it fits in without making it grow.
const FREE_LOOKS: usize = 32;

/// Below this many NodeClaims not known to refuse a pod, they are sorted into placement
/// order directly instead of walking every planned NodeClaim in that order...
const SMALL_OPEN: usize = 32;

/// ...and so they are when at most one planned NodeClaim in this many is among them.
const SPARSE: usize = 2;

/// The planned NodeClaims known to refuse the pods of one class, by index.
#[derive(Debug, Default)]
struct Refused {
    words: Vec<u64>,
    count: usize,
    /// Whether one of them refused only for cost.
    cost_refused: bool,
    /// The NodeClaims below `seen` not known to refuse, while they are few.
    open: Vec<u32>,
    seen: u32,
    /// `count` when `open` was last cleared of refusing NodeClaims.
    open_count: usize,
}

impl Refused {
    fn contains(&self, index: u32) -> bool {
        contains(&self.words, index)
    }

    /// The NodeClaims of `total` not known to refuse, when there are at most
    /// [`SMALL_OPEN`] of them or few next to `total` ([`SPARSE`]): kept as a list, cleared of refusing ones only when some were
    /// added, and extended with the NodeClaims planned since.
    fn few_open(&mut self, total: u32) -> Option<&[u32]> {
        self.open.extend(self.seen..total);
        self.seen = total;
        if self.open_count != self.count {
            let words = &self.words;
            self.open.retain(|&i| !contains(words, i));
            self.open_count = self.count;
        }
        // Sorting the open ones costs about as much per NodeClaim as stepping over a refusing
        // one in the walk does: sort when they are few, or far fewer than the walk's steps.
        let few = self.open.len() <= SMALL_OPEN || self.open.len() * SPARSE <= total as usize;
        few.then_some(&self.open)
    }

    fn insert(&mut self, index: u32) {
        let word = index as usize / 64;
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        if self.words[word] & (1 << (index % 64)) == 0 {
            self.words[word] |= 1 << (index % 64);
            self.count += 1;
        }
    }
}

fn contains(words: &[u64], index: u32) -> bool {
    words
        .get(index as usize / 64)
        .is_some_and(|w| w & (1 << (index % 64)) != 0)
}

/// Some planned NodeClaims in placement order (fewest pods first, then by index), found as
/// the walk asks: a walk often ends at the first, which one scan finds, and only a walk that
/// goes on pays for a heap of the rest (a fraction of what sorting them costs).
struct Emptiest<'c> {
    claims: &'c [NodeClaimState],
    /// The NodeClaims not taken yet, until the heap is built.
    indices: Vec<u32>,
    heap: Option<BinaryHeap<Reverse<(usize, u32)>>>,
    /// Whether the first was taken.
    started: bool,
}

impl<'c> Emptiest<'c> {
    fn new(claims: &'c [NodeClaimState], indices: Vec<u32>) -> Self {
        Emptiest {
            claims,
            indices,
            heap: None,
            started: false,
        }
    }

    fn key(&self, index: u32) -> (usize, u32) {
        (self.claims[index as usize].pods.len(), index)
    }
}

impl Iterator for Emptiest<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if !self.started {
            self.started = true;
            let (position, _) = self
                .indices
                .iter()
                .enumerate()
                .min_by_key(|&(_, &index)| self.key(index))?;
            return Some(self.indices.swap_remove(position));
        }
        if self.heap.is_none() {
            let rest: Vec<Reverse<(usize, u32)>> = self
                .indices
                .iter()
                .map(|&index| Reverse(self.key(index)))
                .collect();
            self.heap = Some(BinaryHeap::from(rest));
        }
        self.heap
            .as_mut()
            .and_then(BinaryHeap::pop)
            .map(|Reverse((_, index))| index)
    }
}

/// A run in progress.
#[derive(Debug)]
pub(super) struct Solver<'a> {
    pub(super) plans: Vec<PodPlan<'a>>,
    pub(super) state: State<'a>,
}

/// Everything a placement changes or reads, apart from the pods' plans.
#[derive(Debug)]
pub(super) struct State<'a> {
    pub(super) allow: AllowUndefined<'a>,
    pub(super) dims: Dimensions,
    pub(super) topology: Topology,
    pub(super) pools: Vec<PoolState<'a>>,
    pub(super) nodes: Vec<NodeState<'a>>,
    pub(super) claims: Vec<NodeClaimState>,
    /// Planned NodeClaims by (pod count, index): upstream tries the emptiest first.
    pub(super) claim_order: BTreeSet<(usize, u32)>,
    /// (pod, node) in placement order.
    pub(super) node_placements: Vec<(usize, usize)>,
    /// Why each pod is not placed, when it is not.
    pub(super) reasons: Vec<Option<Unschedulable>>,
    pub(super) placed: Vec<bool>,
    /// Refusals already worked out, since explaining one scans the whole catalogue.
    refusals: ContentMap<RefusalKey, Refusal>,
    /// Whether some instance type of a NodePool could hold a pod with these requirements
    /// and requests at all (limits and topology aside), by (NodePool, requirements,
    /// requests): lets a pod skip every NodeClaim of a NodePool that can never take it.
    feasible: ContentMap<(usize, Requirements, ResourceList), bool>,
    /// The same by (NodePool, replica class, relaxation), which is cheaper to look up.
    feasible_by_class: IdMap<(usize, u32, Relaxation), bool>,
    /// For each (replica class, relaxation) whose refusals are final, the planned NodeClaims
    /// that refused it: the next pod of the class skips them.
    refused: IdMap<(u32, Relaxation), Refused>,
    /// NodeClaims just opened, by (NodePool, its generation, replica class, relaxation), for
    /// pods whose refusals are final: a NodeClaim opened for the same class at the same
    /// relaxation starts just like them, whatever was planned since (its hostname is new).
    opened: IdMap<(usize, u64, u32, Relaxation), NodeClaimState>,
    /// What pods of a replica class at a relaxation cost in each interned zone, by
    /// (NodePool, class, relaxation): see `State::cheaper_zones`.
    pub(super) zone_costs: IdMap<(usize, u32, Relaxation), Arc<[f64]>>,
    /// Whether planned NodeClaims stop growing when growing costs more than opening another
    /// (`cost.rs`); off, packing is upstream's first-fit decreasing.
    pub(super) cost_aware: bool,
    /// While the improvement pass splits or mixes NodeClaims: how the cost caps of the
    /// NodeClaims it opens are weighed (`PoolCost::cap`).
    pub(super) reweigh: Option<Reweigh>,
}

impl<'a> Solver<'a> {
    /// Prepares a run over `input`.
    pub(super) fn new(input: &'a SchedulingInput, packing: Packing) -> Self {
        let allow = AllowUndefined::WellKnownLabels(&input.label_policy);
        let mut dims = Dimensions::default();
        for pool in &input.node_pools {
            dims.add_types(&pool.instance_types);
        }
        let mut specs: Vec<&NodePoolSpec> = input.node_pools.iter().collect();
        specs.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
        let soft = |t: &Taint| t.effect == TaintEffect::PreferNoSchedule;
        let prefer_no_schedule_taints = specs.iter().flat_map(|p| &p.taints).any(soft)
            || input
                .existing_nodes
                .iter()
                .flat_map(|n| &n.taints)
                .any(soft);

        // Every group must exist before the first count, so that counts are complete.
        let mut topology = Topology::default();
        let mut plans: Vec<PodPlan<'a>> = input
            .pods
            .iter()
            .map(|pod| PodPlan::new(pod, &mut topology, prefer_no_schedule_taints))
            .collect();
        let pools: Vec<PoolState<'a>> = specs
            .into_iter()
            .map(|spec| PoolState::new(spec, &dims, &input.daemon_set_pods, allow))
            .collect();
        let nodes = prepare_nodes(input, &mut topology);
        let bound = bound_pods(input, &nodes, &mut topology);
        declare_domains(&mut topology, &pools, &nodes, &dims);

        let mut selections: Selections<'a> = ContentMap::default();
        let mut selecting = |topology: &Topology, pod: &'a Pod| {
            selections
                .entry((pod.id.namespace(), &pod.labels))
                .or_insert_with(|| topology.selecting(pod.id.namespace(), &pod.labels))
                .clone()
        };
        for (node, pod, inverse_owned) in bound {
            let (selected_by, _) = selecting(&topology, pod);
            let node = &nodes[node];
            topology.count_bound(&selected_by, &inverse_owned, node.host, &node.requirements);
        }
        for plan in &mut plans {
            (plan.selected_by, plan.inverse_selecting) = selecting(&topology, plan.pod);
        }
        let classes = replica_classes(&plans);
        for (plan, class) in plans.iter_mut().zip(classes) {
            plan.class = class;
        }

        let count = plans.len();
        Solver {
            plans,
            state: State {
                allow,
                dims,
                topology,
                pools,
                nodes,
                claims: Vec::new(),
                claim_order: BTreeSet::new(),
                node_placements: Vec::new(),
                reasons: vec![None; count],
                placed: vec![false; count],
                refusals: ContentMap::default(),
                feasible: ContentMap::default(),
                feasible_by_class: IdMap::default(),
                refused: IdMap::default(),
                opened: IdMap::default(),
                zone_costs: IdMap::default(),
                cost_aware: packing == Packing::CostAware,
                reweigh: None,
            },
        }
    }

    /// Places every pod it can.
    pub(super) fn run(&mut self, policy: PreferencePolicy) {
        let mut queue = Queue::new(placement_order(&self.plans), self.plans.len());
        while let Some(pod) = queue.pop() {
            let plan = &self.plans[pod];
            let mut relaxation = match policy {
                PreferencePolicy::Respect => Relaxation::default(),
                PreferencePolicy::Ignore => Relaxation::ignoring_preferences(&plan.relaxable),
            };
            loop {
                let constraints = plan.constraints(&relaxation);
                match self.state.add(pod, plan, &constraints, relaxation) {
                    Ok(()) => {
                        self.state.placed[pod] = true;
                        self.state.reasons[pod] = None;
                        break;
                    }
                    Err(reason) => match relaxation.next(&plan.relaxable) {
                        Some(next) => relaxation = next,
                        None => {
                            self.state.reasons[pod] = Some(reason);
                            queue.push_back(pod);
                            break;
                        }
                    },
                }
            }
        }
    }
}

/// The existing nodes, initialised first then by name (upstream's order), each with the
/// DaemonSets that would run there but have not started yet reserved.
fn prepare_nodes<'a>(input: &'a SchedulingInput, topology: &mut Topology) -> Vec<NodeState<'a>> {
    let mut ordered: Vec<&'a ExistingNode> =
        input.existing_nodes.iter().map(AsRef::as_ref).collect();
    ordered.sort_by(|a, b| {
        b.initialized
            .cmp(&a.initialized)
            .then_with(|| a.name.cmp(&b.name))
    });
    ordered
        .into_iter()
        .map(|node| {
            let host = topology.domain(&hostname(node));
            let taints: Vec<Taint> = node.effective_taints().cloned().collect();
            let daemons = input
                .daemon_set_pods
                .iter()
                .filter(|ds| {
                    daemon_runs_on(ds, &taints, &node.requirements, AllowUndefined::NoKeys)
                })
                .fold(ResourceList::new(), |sum, ds| {
                    sum.saturating_add(&counted(&ds.requests))
                });
            NodeState::new(node, host, &daemons)
        })
        .collect()
}

/// The pods bound to existing nodes that count for topology (those not being placed again),
/// as (node, pod, inverse groups of its required anti-affinity); the groups are created here.
fn bound_pods<'a>(
    input: &'a SchedulingInput,
    nodes: &[NodeState<'a>],
    topology: &mut Topology,
) -> Vec<(usize, &'a Pod, Vec<GroupId>)> {
    let pending: HashSet<&PodId> = input.pods.iter().map(|p| &p.id).collect();
    let mut bound = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        for pod in node.node.pods.iter().filter(|p| !pending.contains(&p.id)) {
            let inverse = pod
                .pod_anti_affinity
                .required
                .iter()
                .map(|term| {
                    let spec = affinity_spec(Rule::AntiAffinity, term, pod.id.namespace());
                    topology.inverse_group(spec)
                })
                .collect();
            bound.push((index, pod, inverse));
        }
    }
    bound
}

/// The zones the NodePools of `input` can launch in: the domains of a zone spread before any
/// node exists, as [`declare_domains`] declares them (for the cost bound, which holds plans
/// to what zone spread forces on them).
pub(super) fn launchable_zones(input: &SchedulingInput) -> Vec<Arc<str>> {
    let allow = AllowUndefined::WellKnownLabels(&input.label_policy);
    let mut dims = Dimensions::default();
    for pool in &input.node_pools {
        dims.add_types(&pool.instance_types);
    }
    let mut zones: Vec<Arc<str>> = input
        .node_pools
        .iter()
        .flat_map(|spec| {
            PoolState::new(spec, &dims, &input.daemon_set_pods, allow)
                .domain_values(LABEL_TOPOLOGY_ZONE, &dims)
        })
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

/// Declares the domains of every topology key: what the NodePools can launch and what the
/// existing nodes are in.
fn declare_domains(
    topology: &mut Topology,
    pools: &[PoolState<'_>],
    nodes: &[NodeState<'_>],
    dims: &Dimensions,
) {
    for key in topology.domain_keys() {
        let mut values: Vec<Arc<str>> = pools
            .iter()
            .flat_map(|p| p.domain_values(&key, dims))
            .collect();
        for node in nodes {
            if let Some(r) = node.requirements.get(&key)
                && r.operator() == Operator::In
                && r.len() == 1
            {
                values.extend(r.values().map(Arc::from));
            }
        }
        topology.add_domains(&key, values.iter().map(|v| &**v));
    }
}

/// The node's hostname label, or its name (upstream's fallback while the label is missing).
fn hostname(node: &ExistingNode) -> String {
    node.requirements
        .get(LABEL_HOSTNAME)
        .filter(|r| r.operator() == Operator::In && r.len() == 1)
        .and_then(|r| r.values().next().map(str::to_owned))
        .unwrap_or_else(|| node.name.clone())
}

impl State<'_> {
    /// Places pod `pod` under `constraints`, or says why no NodePool can take it.
    fn add(
        &mut self,
        pod: usize,
        plan: &PodPlan<'_>,
        constraints: &Constraints,
        relaxation: Relaxation,
    ) -> Result<(), Unschedulable> {
        let topology = plan.topology(constraints);
        let allowed = if self.topology.has_domain_rules(&topology) {
            self.topology.allowed_domains(&topology, &self.dims.zones)
        } else {
            Vec::new()
        };
        let candidate = Candidate {
            constraints,
            topology,
            demand: &plan.demand,
            host_ports: &plan.pod.host_ports,
            tolerations: &plan.pod.tolerations,
            class: self
                .topology
                .hostname_refusals_are_final(&topology)
                .then_some((plan.class, relaxation)),
            allowed: &allowed,
        };
        if self.add_to_node(pod, &candidate) {
            return Ok(());
        }
        // Among the zones its spreads allow, the cheaper first (see `zones.rs`).
        if let Some((pool, cheaper)) = self.cheaper_zones(plan, relaxation, &candidate, &allowed) {
            let cheaper: Vec<Arc<str>> = cheaper
                .into_iter()
                .map(|zone| self.dims.zones.value(zone).clone())
                .collect();
            let topology = PodTopology {
                cheaper_zones: Some(&cheaper),
                ..topology
            };
            let allowed: Vec<AllowedDomains> = allowed
                .iter()
                .map(|rule| rule.keeping(&cheaper, &self.dims.zones))
                .collect();
            let preferred = Candidate {
                topology,
                allowed: &allowed,
                ..candidate
            };
            if self
                .add_to_claim(pod, &preferred, None, 0, self.cost_aware)
                .is_ok()
                || self.launch(pool, pod, plan, &preferred).is_ok()
            {
                return Ok(());
            }
        }
        let cost_refused = match self.add_to_claim(pod, &candidate, None, 0, self.cost_aware) {
            Ok(()) => return Ok(()),
            Err(cost_refused) => cost_refused,
        };
        if self.pools.is_empty() {
            return Err(Unschedulable::NoNodePool);
        }
        let mut refusals = Vec::with_capacity(self.pools.len());
        for pool in 0..self.pools.len() {
            match self.launch(pool, pod, plan, &candidate) {
                Ok(()) => return Ok(()),
                // Cost sent the pod away from a NodeClaim of this NodePool and the NodePool
                // cannot open another (its limits, most likely): the NodeClaim takes it after
                // all, as it would have without cost, before any NodePool of lower weight.
                Err(_)
                    if cost_refused
                        && self
                            .add_to_claim(pod, &candidate, Some(pool), 0, false)
                            .is_ok() =>
                {
                    return Ok(());
                }
                Err(refusal) => refusals.push((self.pools[pool].spec.name.clone(), *refusal)),
            }
        }
        Err(Unschedulable::Refused(refusals))
    }

    /// Places the pod on the first existing node that takes it.
    fn add_to_node(&mut self, pod: usize, candidate: &Candidate<'_>) -> bool {
        let found = self
            .nodes
            .iter()
            .enumerate()
            .find_map(|(i, node)| Some((i, node.try_add(&self.topology, candidate)?)));
        let Some((index, requirements)) = found else {
            return false;
        };
        let node = &mut self.nodes[index];
        let host = node.host;
        node.commit(requirements, candidate.demand, candidate.host_ports);
        self.topology.record(
            &candidate.topology,
            host,
            &node.requirements,
            AllowUndefined::NoKeys,
        );
        self.node_placements.push((pod, index));
        true
    }

    /// Places the pod on the first planned NodeClaim that takes it (of NodePool `only`, when
    /// given, and with an index of at least `from`), emptiest first; cost caps hold when
    /// `cost_aware`. When none takes it, says whether one refused only for cost.
    pub(super) fn add_to_claim(
        &mut self,
        pod: usize,
        candidate: &Candidate<'_>,
        only: Option<usize>,
        from: u32,
        cost_aware: bool,
    ) -> Result<(), bool> {
        if self.claims.is_empty()
            || !self
                .topology
                .may_fit_a_claim(&candidate.topology, self.claims.len())
        {
            return Err(false);
        }
        let usable: Vec<bool> = (0..self.pools.len())
            .map(|pool| only.is_none_or(|o| o == pool) && self.may_take(pool, candidate))
            .collect();
        // What earlier pods of the same class learnt: the NodeClaims that will refuse this
        // one too. Only the cost-aware scan of every NodePool records it, since the others
        // refuse for fewer reasons.
        let memo_key = candidate.class.filter(|_| cost_aware && only.is_none());
        let mut memo = memo_key
            .and_then(|key| self.refused.remove(&key))
            .unwrap_or_default();
        let claims = &self.claims;
        let total = u32::try_from(claims.len()).unwrap_or(u32::MAX);
        // Few NodeClaims left for this class: take them in order rather than walk every one.
        let order: Option<Emptiest<'_>> = if from > 0 {
            // The improvement pass refills onto the NodeClaims it just opened, the last few.
            Some(Emptiest::new(
                claims,
                (from..total)
                    .filter(|&i| !claims[i as usize].retired)
                    .collect(),
            ))
        } else {
            memo_key
                .and_then(|_| memo.few_open(total))
                .map(|open| Emptiest::new(claims, open.to_vec()))
        };
        let mut chosen = None;
        let mut refused = Vec::new();
        let mut cost_refused = memo.cost_refused;
        {
            let walk: Box<dyn Iterator<Item = u32> + '_> = match order {
                Some(order) => Box::new(order),
                None => Box::new(
                    self.claim_order
                        .iter()
                        .map(|&(_, index)| index)
                        .filter(|&index| index >= from && !memo.contains(index)),
                ),
            };
            // Cost-aware, a pod first goes where it costs nothing more (it fits in what the
            // NodeClaim's cheapest option leaves), and only then makes a NodeClaim grow: space
            // already paid for is filled before more is bought. The first FREE_LOOKS NodeClaims
            // are looked at for that; past them, the pod takes the first that holds it.
            let mut walk = walk;
            let mut growing = Vec::new();
            let mut looked = 0;
            let try_at = |claim: &NodeClaimState| {
                let ctx = Context {
                    catalog: &self.pools[claim.pool].catalog,
                    dims: &self.dims,
                    topology: &self.topology,
                    allow: self.allow,
                    cost_aware,
                };
                claim.try_add(&ctx, candidate)
            };
            // A NodeClaim that refuses for good is remembered for the pod's class.
            let mut missed = |miss: Miss, index: u32| {
                cost_refused |= miss.is_cost();
                if miss.is_final() {
                    refused.push(index);
                }
            };
            while cost_aware && looked < FREE_LOOKS {
                let Some(index) = walk.next() else {
                    break;
                };
                let claim = &claims[index as usize];
                if !usable[claim.pool] {
                    missed(Miss::Requirements, index);
                    continue;
                }
                looked += 1;
                if !claim.holds_for_free(&candidate.demand.fixed) {
                    growing.push(index);
                    continue;
                }
                match try_at(claim) {
                    Ok(trial) if trial.is_free() => {
                        chosen = Some((claim.pods.len(), index, trial));
                        break;
                    }
                    Ok(_) => growing.push(index),
                    Err(miss) => missed(miss, index),
                }
            }
            if chosen.is_none() {
                for index in growing.into_iter().chain(walk) {
                    let claim = &claims[index as usize];
                    if !usable[claim.pool] {
                        missed(Miss::Requirements, index);
                        continue;
                    }
                    match try_at(claim) {
                        Ok(trial) => {
                            chosen = Some((claim.pods.len(), index, trial));
                            break;
                        }
                        Err(miss) => missed(miss, index),
                    }
                }
            }
        }
        if let Some(key) = memo_key {
            for index in refused {
                memo.insert(index);
            }
            memo.cost_refused = cost_refused;
            self.refused.insert(key, memo);
        }
        let Some((count, index, trial)) = chosen else {
            return Err(cost_refused);
        };
        let claim = &mut self.claims[index as usize];
        self.topology.record(
            &candidate.topology,
            claim.host(),
            trial.requirements(claim),
            self.allow,
        );
        claim.commit(trial, pod, candidate.host_ports);
        self.claim_order.remove(&(count, index));
        self.claim_order.insert((count + 1, index));
        Ok(())
    }

    /// Whether NodeClaims of `pool` may take the pod at all: it tolerates the NodePool's
    /// taints and one of its instance types could hold it.
    pub(super) fn may_take(&mut self, pool_index: usize, candidate: &Candidate<'_>) -> bool {
        let pool = &self.pools[pool_index];
        let tolerate_soft = candidate.constraints.tolerate_prefer_no_schedule;
        if first_untolerated(&pool.spec.taints, candidate.tolerations, tolerate_soft).is_some() {
            return false;
        }
        let by_class = candidate
            .class
            .map(|(class, relaxation)| (pool_index, class, relaxation));
        if let Some(&feasible) = by_class.and_then(|key| self.feasible_by_class.get(&key)) {
            return feasible;
        }
        let wanted = &candidate.constraints.requirements;
        let key = (pool_index, wanted.clone(), candidate.demand.list.clone());
        if let Some(&feasible) = self.feasible.get(&key) {
            if let Some(by_class) = by_class {
                self.feasible_by_class.insert(by_class, feasible);
            }
            return feasible;
        }
        let feasible = pool.base.is_compatible(wanted, self.allow) && {
            let mut combined = pool.base.clone();
            combined.add_all(wanted);
            let narrowing = pool.catalog.narrowing(&pool.base, &combined, &self.dims);
            pool.catalog
                .any_fits(&pool.all.options, &narrowing, candidate.demand)
        };
        self.feasible.insert(key, feasible);
        if let Some(by_class) = by_class {
            self.feasible_by_class.insert(by_class, feasible);
        }
        feasible
    }

    /// Plans a new NodeClaim of `pool` for the pod, or says why the NodePool cannot.
    pub(super) fn launch(
        &mut self,
        pool_index: usize,
        pod: usize,
        plan: &PodPlan<'_>,
        candidate: &Candidate<'_>,
    ) -> Result<(), Box<Refusal>> {
        let index = u32::try_from(self.claims.len()).unwrap_or(u32::MAX);
        // Where a rule on another key than hostname picks the new NodeClaim's domain, it
        // depends on where other pods went: only pods without one reuse an opening.
        // The caps of a split or a mix depend on what it moves, so its NodeClaims are neither
        // reused nor offered for reuse.
        let opened_key = candidate
            .class
            .filter(|_| self.reweigh.is_none())
            .filter(|_| self.topology.domain_rules(&candidate.topology) == 0)
            .map(|(class, relaxation)| {
                (
                    pool_index,
                    self.pools[pool_index].generation,
                    class,
                    relaxation,
                )
            });
        if let Some(opened) = opened_key.and_then(|key| self.opened.get(&key)) {
            let claim = opened.reopened(index, pod);
            self.topology.record(
                &candidate.topology,
                claim.host(),
                &claim.requirements,
                self.allow,
            );
            let mut claim = claim;
            claim.reserved = self.pools[pool_index].reserve(&claim.options);
            self.claims.push(claim);
            self.claim_order.insert((1, index));
            return Ok(());
        }
        let pool = &self.pools[pool_index];
        let constraints = candidate.constraints;
        if let Some(taint) = first_untolerated(
            &pool.spec.taints,
            candidate.tolerations,
            constraints.tolerate_prefer_no_schedule,
        ) {
            return Err(Box::new(Refusal::Taint(taint.clone())));
        }
        if let Some((conflicting, port)) = pool
            .catalog
            .port_conflicts(&pool.all.options, candidate.host_ports)
            && conflicting == pool.all.options
        {
            return Err(Box::new(Refusal::HostPort(port)));
        }
        if let Err(error) = pool.base.compatible(&constraints.requirements, self.allow) {
            return Err(Box::new(incompatibility(error, plan, constraints)));
        }
        if pool.catalog.len() == 0 {
            return Err(Box::new(Refusal::NoCompatibleTypes));
        }
        if pool.within.options.is_empty() {
            return Err(Box::new(limit_refusal(pool, &pool.all.options)));
        }
        // Without topology rules the outcome depends only on the NodePool and the pod's
        // requirements and requests, which replicas share.
        let key = candidate.topology.is_unconstrained().then(|| {
            (
                pool_index,
                pool.generation,
                constraints.requirements.clone(),
                candidate.demand.list.clone(),
            )
        });
        if let Some(refusal) = key.as_ref().and_then(|k| self.refusals.get(k)) {
            return Err(Box::new(refusal.clone()));
        }
        let dims = &self.dims;
        let pool = &mut self.pools[pool_index];
        let mut claim = match pool.opening(&constraints.requirements, candidate.demand, dims) {
            Some(opening) => NodeClaimState::new(
                pool_index,
                index,
                opening.requirements.clone(),
                &opening.options,
            ),
            None => NodeClaimState::new(pool_index, index, pool.base.clone(), &pool.within),
        };
        let pool = &self.pools[pool_index];
        let ctx = Context {
            catalog: &pool.catalog,
            dims: &self.dims,
            topology: &self.topology,
            allow: self.allow,
            cost_aware: self.cost_aware,
        };
        let trial = match claim.try_add(&ctx, candidate) {
            Ok(trial) => trial,
            Err(miss) => {
                let refusal = self.explain(pool_index, miss, plan, candidate);
                if let Some(key) = key {
                    self.refusals.insert(key, refusal.clone());
                }
                return Err(Box::new(refusal));
            }
        };
        self.topology.record(
            &candidate.topology,
            claim.host(),
            trial.requirements(&claim),
            self.allow,
        );
        claim.commit(trial, pod, candidate.host_ports);
        let pool = &mut self.pools[pool_index];
        if self.cost_aware {
            // A spread or anti-affinity of the pod's own, required or preferred, relaxed or
            // not, and in the improvement pass as in the first placement (its affinity keeps
            // its deployment together, as no rule does): see `cost::RULED_SLACK`.
            let topology = &self.topology;
            let ruled = plan.every_owned().any(|g| !topology.is_affinity(g))
                || !plan.inverse_owned.is_empty();
            let prices = pool.catalog.prices(&claim.requirements, &self.dims);
            let first = &candidate.demand.fixed;
            let cap = pool.cost.cap(
                &claim.options,
                &prices,
                first,
                ruled,
                self.reweigh,
                &pool.catalog,
            );
            claim.set_cost(cap, prices.order, &pool.catalog);
        }
        claim.reserved = pool.reserve(&claim.options);
        if let Some(key) = opened_key {
            self.opened.insert(key, claim.clone());
        }
        self.claims.push(claim);
        self.claim_order.insert((1, index));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::bits::Bits;
    use crate::scheduler::catalog::Filtered;
    use crate::scheduler::fit::Fixed;

    #[test]
    fn given_claims_of_many_sizes_when_taken_emptiest_first_then_the_order_is_by_pods_then_index() {
        let options = Filtered {
            options: Bits::empty(0),
            smallest: Fixed::ZERO,
            largest: Fixed::ZERO,
        };
        let claims: Vec<NodeClaimState> = (0..40u32)
            .map(|index| {
                let mut claim = NodeClaimState::new(0, index, Requirements::new(), &options);
                // Pod counts that repeat and are out of index order.
                claim.pods = vec![0; (index as usize * 7) % 5];
                claim
            })
            .collect();
        let indices: Vec<u32> = (0..40).filter(|i| i % 3 != 0).rev().collect();
        let mut expected = indices.clone();
        expected.sort_by_key(|&i| (claims[i as usize].pods.len(), i));

        let walked: Vec<u32> = Emptiest::new(&claims, indices).collect();

        assert_eq!(walked, expected);
        assert!(Emptiest::new(&claims, Vec::new()).next().is_none());
    }
}
