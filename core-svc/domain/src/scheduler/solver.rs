//! One scheduling run (upstream's `Scheduler.Solve`): prepare the pods, NodePools, nodes and
//! topology; take pods largest first; place each on an existing node, else on a NodeClaim
//! planned in this run (fewest pods first), else on a new NodeClaim of the first NodePool
//! (by weight) that accepts it, relaxing its preferences one step at a time when nothing
//! does; retry the pods left over until a pass places none.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::labels::LABEL_HOSTNAME;
use crate::requirements::{AllowUndefined, Operator, Requirements};
use crate::resources::ResourceList;
use crate::scheduler::catalog::Dimensions;
use crate::scheduler::diagnosis::{incompatibility, limit_refusal};
use crate::scheduler::node::{ExistingNode, NodeState, counted};
use crate::scheduler::nodeclaim::{Candidate, Context, NodeClaimState, conflicting_port};
use crate::scheduler::nodepool::NodePoolSpec;
use crate::scheduler::plan::{Constraints, PodPlan, affinity_spec};
use crate::scheduler::pod::{Pod, PodId};
use crate::scheduler::pool::{PoolState, daemon_runs_on};
use crate::scheduler::preferences::Relaxation;
use crate::scheduler::queue::{Queue, placement_order};
use crate::scheduler::reasons::{Refusal, Unschedulable};
use crate::scheduler::taints::{Taint, TaintEffect, first_untolerated};
use crate::scheduler::topology::{GroupId, Rule, Topology};
use crate::scheduler::{PreferencePolicy, SchedulingInput};

/// Groups selecting a pod, and inverse groups selecting it, by (namespace, labels).
type Selections<'a> =
    HashMap<(&'a str, &'a BTreeMap<String, String>), (Vec<GroupId>, Vec<GroupId>)>;

/// What a NodePool's refusal of a pod without topology rules depends on: the NodePool and its
/// generation, the pod's requirements and its requests. Replicas share it.
type RefusalKey = (usize, u64, Requirements, ResourceList);

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
    claim_order: BTreeSet<(usize, u32)>,
    /// (pod, node) in placement order.
    pub(super) node_placements: Vec<(usize, usize)>,
    /// Why each pod is not placed, when it is not.
    pub(super) reasons: Vec<Option<Unschedulable>>,
    pub(super) placed: Vec<bool>,
    /// Refusals already worked out, since explaining one scans the whole catalogue.
    refusals: HashMap<RefusalKey, Refusal>,
    /// Whether some instance type of a NodePool could hold a pod with these requirements
    /// and requests at all (limits and topology aside), by (NodePool, requirements,
    /// requests): lets a pod skip every NodeClaim of a NodePool that can never take it.
    feasible: HashMap<(usize, Requirements, ResourceList), bool>,
}

impl<'a> Solver<'a> {
    /// Prepares a run over `input`.
    pub(super) fn new(input: &'a SchedulingInput) -> Self {
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

        let mut selections: Selections<'a> = HashMap::new();
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
                refusals: HashMap::new(),
                feasible: HashMap::new(),
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
                match self.state.add(pod, plan, &constraints) {
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
    let mut ordered: Vec<&'a ExistingNode> = input.existing_nodes.iter().collect();
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
    ) -> Result<(), Unschedulable> {
        let candidate = Candidate {
            constraints,
            topology: plan.topology(constraints),
            demand: &plan.demand,
            host_ports: &plan.pod.host_ports,
            tolerations: &plan.pod.tolerations,
        };
        if self.add_to_node(pod, &candidate) || self.add_to_claim(pod, &candidate) {
            return Ok(());
        }
        if self.pools.is_empty() {
            return Err(Unschedulable::NoNodePool);
        }
        let mut refusals = Vec::with_capacity(self.pools.len());
        for pool in 0..self.pools.len() {
            match self.launch(pool, pod, plan, &candidate) {
                Ok(()) => return Ok(()),
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

    /// Places the pod on the first planned NodeClaim that takes it, emptiest first.
    fn add_to_claim(&mut self, pod: usize, candidate: &Candidate<'_>) -> bool {
        if self.claims.is_empty()
            || !self
                .topology
                .may_fit_a_claim(&candidate.topology, self.claims.len())
        {
            return false;
        }
        let usable: Vec<bool> = (0..self.pools.len())
            .map(|pool| self.may_take(pool, candidate))
            .collect();
        let mut chosen = None;
        for &(count, index) in &self.claim_order {
            let claim = &self.claims[index as usize];
            if !usable[claim.pool] {
                continue;
            }
            let ctx = Context {
                catalog: &self.pools[claim.pool].catalog,
                dims: &self.dims,
                topology: &self.topology,
                allow: self.allow,
            };
            if let Ok(trial) = claim.try_add(&ctx, candidate) {
                chosen = Some((count, index, trial));
                break;
            }
        }
        let Some((count, index, trial)) = chosen else {
            return false;
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
        true
    }

    /// Whether NodeClaims of `pool` may take the pod at all: it tolerates the NodePool's
    /// taints and one of its instance types could hold it.
    fn may_take(&mut self, pool_index: usize, candidate: &Candidate<'_>) -> bool {
        let pool = &self.pools[pool_index];
        let tolerate_soft = candidate.constraints.tolerate_prefer_no_schedule;
        if first_untolerated(&pool.spec.taints, candidate.tolerations, tolerate_soft).is_some() {
            return false;
        }
        let wanted = &candidate.constraints.requirements;
        let key = (pool_index, wanted.clone(), candidate.demand.list.clone());
        if let Some(&feasible) = self.feasible.get(&key) {
            return feasible;
        }
        let feasible = pool.base.is_compatible(wanted, self.allow) && {
            let mut combined = pool.base.clone();
            combined.add_all(wanted);
            let narrowing = pool.catalog.narrowing(&pool.base, &combined, &self.dims);
            let demand = pool.daemon.plus(candidate.demand);
            !pool
                .catalog
                .filter(&pool.all.options, &narrowing, &demand)
                .options
                .is_empty()
        };
        self.feasible.insert(key, feasible);
        feasible
    }

    /// Plans a new NodeClaim of `pool` for the pod, or says why the NodePool cannot.
    fn launch(
        &mut self,
        pool_index: usize,
        pod: usize,
        plan: &PodPlan<'_>,
        candidate: &Candidate<'_>,
    ) -> Result<(), Box<Refusal>> {
        let pool = &self.pools[pool_index];
        let constraints = candidate.constraints;
        if let Some(taint) = first_untolerated(
            &pool.spec.taints,
            candidate.tolerations,
            constraints.tolerate_prefer_no_schedule,
        ) {
            return Err(Box::new(Refusal::Taint(taint.clone())));
        }
        if let Some(port) = conflicting_port(&pool.daemon_ports, candidate.host_ports) {
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
        let index = u32::try_from(self.claims.len()).unwrap_or(u32::MAX);
        let mut claim = NodeClaimState::new(
            pool_index,
            index,
            pool.base.clone(),
            pool.daemon.clone(),
            &pool.within,
            &pool.daemon_ports,
        );
        let ctx = Context {
            catalog: &pool.catalog,
            dims: &self.dims,
            topology: &self.topology,
            allow: self.allow,
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
        self.pools[pool_index].reserve(&claim.options);
        self.claims.push(claim);
        self.claim_order.insert((1, index));
        Ok(())
    }
}
