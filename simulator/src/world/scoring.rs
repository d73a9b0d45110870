//! The kube-scheduler's default profile, scoring: of the Nodes a pending pod fits, the one the
//! default score plugins rate highest (kubernetes/kubernetes
//! `pkg/scheduler/apis/config/v1/default_plugins.go`, the plugins under
//! `pkg/scheduler/framework/plugins/`). Each plugin scores every feasible Node, the scores are
//! normalized per plugin to 0..=100 as the plugin's `NormalizeScore` does, and the weighted sum
//! decides:
//!
//! | plugin | weight | here |
//! |---|---|---|
//! | `NodeResourcesFit` (`LeastAllocated`, cpu and memory weight 1) | 1 | [`least_allocated`] |
//! | `NodeResourcesBalancedAllocation` | 1 | [`balanced_allocation`] |
//! | `PodTopologySpread` (ScheduleAnyway, system defaults) | 2 | [`Scorer::spread_scores`] |
//! | `InterPodAffinity` (preferred terms, both ways) | 2 | [`Scorer::inter_pod_scores`] |
//! | `NodeAffinity` (preferred terms) | 2 | [`node_affinity_score`] |
//! | `TaintToleration` (`PreferNoSchedule`) | 3 | [`intolerable_prefer_no_schedule`] |
//!
//! `ImageLocality` is left out: the simulated Nodes hold no images. `VolumeBinding` scores only
//! with storage capacity scoring configured, which the default profile does not.
//!
//! Where it differs from kube-scheduler, on purpose:
//!
//! - Ties go to the Node whose name sorts first, not to a random one, so a run is reproducible.
//! - Every feasible Node is scored, not the adaptive share `percentageOfNodesToScore` stops at
//!   in clusters of more than 100 Nodes (kube-scheduler also rotates where that search
//!   starts, which spreads pods much as scoring all does).
//! - The non-zero request defaults (100m cpu, 200Mi memory) apply per pod, not per container.
//! - The system default spreading (zone `maxSkew: 5`, hostname `maxSkew: 3`, ScheduleAnyway)
//!   applies to pods with no spread constraint of their own that a ReplicaSet, StatefulSet or
//!   ReplicationController owns, and counts the pods that carry all of the pod's labels: a
//!   Deployment's ReplicaSet selects its pods by their template's labels and
//!   `pod-template-hash`, which is close. The simulator has no Services; kube-scheduler
//!   would add the selectors of the Services that select the pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use core_domain::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use core_domain::requirements::{AllowUndefined, Operator};
use core_domain::scheduler::{
    ExistingNode, LabelSelector, Namespaces, Pod, PodAffinityTerm, TaintEffect, WhenUnsatisfiable,
};

/// How the simulator's kube-scheduler chooses among the Nodes a pod fits (the scenario's
/// `kubeScheduler:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubeScheduler {
    /// The default profile's scoring (this module): the highest-scoring feasible Node.
    #[default]
    Default,
    /// The first feasible Node, initialized Nodes first, by name: the domain scheduler's
    /// placement onto existing Nodes. Packs tighter than a real cluster.
    FirstFit,
}

impl KubeScheduler {
    /// The scenario's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeScheduler::Default => "default",
            KubeScheduler::FirstFit => "firstFit",
        }
    }

    /// The value spelled `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        [KubeScheduler::Default, KubeScheduler::FirstFit]
            .into_iter()
            .find(|profile| profile.as_str() == text)
    }
}

/// The highest score a plugin gives a Node (`framework.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;
/// The cpu a pod without a cpu request counts as, in scoring
/// (`pkg/scheduler/util/pod_resources.go`, `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory a pod without a memory request counts as, in scoring (`DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

const FIT_WEIGHT: i64 = 1;
const BALANCED_WEIGHT: i64 = 1;
const SPREAD_WEIGHT: i64 = 2;
const INTER_POD_WEIGHT: i64 = 2;
const NODE_AFFINITY_WEIGHT: i64 = 2;
const TAINT_WEIGHT: i64 = 3;
/// `InterPodAffinityArgs.hardPodAffinityWeight`'s default: what an existing pod's required
/// affinity term that the incoming pod matches adds to its domain.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;
/// The system default spread constraints' skews (`pkg/scheduler/apis/config/v1/defaults.go`).
const DEFAULT_ZONE_SKEW: i64 = 5;
const DEFAULT_HOSTNAME_SKEW: i64 = 3;

/// A pod's cpu and memory requests as scoring counts them: a missing request counts as the
/// default (`GetNonzeroRequests`).
pub fn non_zero_requests(pod: &Pod) -> (i64, i64) {
    let or_default = |amount: i64, default: i64| if amount > 0 { amount } else { default };
    (
        or_default(pod.requests.cpu_millis(), DEFAULT_MILLI_CPU_REQUEST),
        or_default(pod.requests.memory_bytes(), DEFAULT_MEMORY_REQUEST),
    )
}

/// `LeastAllocated` for one resource: the share left free after the pod, 0..=100
/// (`noderesources/least_allocated.go`, `leastRequestedScore`).
fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    // In i128: `(capacity - requested) * 100` overflows i64 past some 92 PB of memory, which a
    // scenario may declare.
    let score = (i128::from(capacity) - i128::from(requested)) * i128::from(MAX_NODE_SCORE)
        / i128::from(capacity);
    i64::try_from(score).unwrap_or(MAX_NODE_SCORE)
}

/// `NodeResourcesFit`'s `LeastAllocated` score: cpu and memory, weight 1 each, `requested`
/// being the non-zero requests of the Node's pods and of the incoming pod.
pub fn least_allocated(requested: (i64, i64), allocatable: (i64, i64)) -> i64 {
    (least_requested(requested.0, allocatable.0) + least_requested(requested.1, allocatable.1)) / 2
}

/// `NodeResourcesBalancedAllocation`: 100 × (1 − the standard deviation of the cpu and memory
/// fractions requested, each capped at 1), `requested` being the actual requests of the Node's
/// pods and of the incoming pod (`noderesources/balanced_allocation.go`). A resource the Node
/// has none of is left out.
pub fn balanced_allocation(requested: (i64, i64), allocatable: (i64, i64)) -> i64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "resource amounts far below 2^52; kube-scheduler computes in float64 too"
    )]
    let fraction = |requested: i64, allocatable: i64| {
        (allocatable > 0).then(|| (requested as f64 / allocatable as f64).min(1.0))
    };
    let deviation = match (
        fraction(requested.0, allocatable.0),
        fraction(requested.1, allocatable.1),
    ) {
        (Some(cpu), Some(memory)) => ((cpu - memory) / 2.0).abs(),
        _ => 0.0,
    };
    #[allow(
        clippy::cast_possible_truncation,
        reason = "0..=100, truncated as kube-scheduler's int64() conversion does"
    )]
    let score = ((1.0 - deviation) * 100.0) as i64;
    score
}

/// `DefaultNormalizeScore`: scales to 0..=100 by the highest score; `reverse` turns it upside
/// down (a Node with the most of what the plugin counts gets 0).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.fill(MAX_NODE_SCORE);
        }
        return;
    }
    for score in scores {
        let scaled = MAX_NODE_SCORE * *score / max;
        *score = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

/// `PodTopologySpread`'s `NormalizeScore`: fewer matching pods is better; a Node the plugin
/// ignored (`None`: it lacks a topology key of the pod's own constraints) gets 0.
pub fn spread_normalize(scores: &[Option<i64>]) -> Vec<i64> {
    let valid = || scores.iter().flatten().copied();
    let min = valid().min().unwrap_or(0);
    let max = valid().max().unwrap_or(0);
    scores
        .iter()
        .map(|score| match *score {
            None => 0,
            Some(_) if max == 0 => MAX_NODE_SCORE,
            Some(score) => MAX_NODE_SCORE * (max + min - score) / max,
        })
        .collect()
}

/// `InterPodAffinity`'s `NormalizeScore`: min-max scaling to 0..=100, all 0 when equal.
pub fn inter_pod_normalize(scores: &[i64]) -> Vec<i64> {
    let min = scores.iter().copied().min().unwrap_or(0);
    let max = scores.iter().copied().max().unwrap_or(0);
    let spread = max - min;
    scores
        .iter()
        .map(|score| {
            if spread > 0 {
                MAX_NODE_SCORE * (score - min) / spread
            } else {
                0
            }
        })
        .collect()
}

/// `TaintToleration`'s raw score: the Node's `PreferNoSchedule` taints the pod does not
/// tolerate (normalized in reverse: fewer is better).
pub fn intolerable_prefer_no_schedule(pod: &Pod, node: &ExistingNode) -> i64 {
    let count = node
        .taints
        .iter()
        .filter(|taint| taint.effect == TaintEffect::PreferNoSchedule)
        .filter(|taint| !pod.tolerations.iter().any(|t| t.tolerates(taint)))
        .count();
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// `NodeAffinity`'s raw score: the weights of the pod's preferred terms the Node matches.
pub fn node_affinity_score(pod: &Pod, node: &ExistingNode) -> i64 {
    pod.preferred_node_affinity
        .iter()
        .filter(|term| {
            node.requirements
                .is_compatible(&term.term, AllowUndefined::NoKeys)
        })
        .map(|term| i64::from(term.weight))
        .sum()
}

/// The value of label `key` on `node` (its requirements are its labels as `key In [value]`).
pub fn label<'a>(node: &'a ExistingNode, key: &str) -> Option<&'a str> {
    let requirement = node.requirements.get(key)?;
    if requirement.operator() != Operator::In || requirement.len() != 1 {
        return None;
    }
    requirement.values().next()
}

/// Whether `node` passes the pod's node selector and required node affinity.
pub fn matches_node_affinity(pod: &Pod, node: &ExistingNode) -> bool {
    pod.node_selector
        .iter()
        .all(|(key, value)| label(node, key) == Some(value.as_str()))
        && (pod.required_node_affinity.is_empty()
            || pod.required_node_affinity.iter().any(|term| {
                node.requirements
                    .is_compatible(term, AllowUndefined::NoKeys)
            }))
}

/// Whether the pod may go to `node` by what concerns only the two of them: free resources
/// (every resource it requests, and a pod slot), node selector and required node affinity,
/// `NoSchedule` and `NoExecute` taints, host ports. What concerns other pods (required spread,
/// pod affinity) is the caller's.
pub fn fits_alone(pod: &Pod, node: &ExistingNode) -> bool {
    let free = node.allocatable.saturating_sub(&node.requested);
    free.pods() >= 1
        && pod
            .requests
            .iter()
            .all(|(name, amount)| amount <= 0 || free.get(&name) >= amount)
        && matches_node_affinity(pod, node)
        && node.taints.iter().all(|taint| {
            taint.effect == TaintEffect::PreferNoSchedule
                || pod.tolerations.iter().any(|t| t.tolerates(taint))
        })
        && (pod.host_ports.is_empty()
            || !node
                .pods
                .iter()
                .flat_map(|other| &other.host_ports)
                .any(|taken| {
                    pod.host_ports
                        .iter()
                        .any(|wanted| wanted.conflicts_with(taken))
                }))
}

/// A pending pod with what scoring needs beyond the domain's view of it.
#[derive(Debug, Clone)]
pub struct PendingPod {
    /// The domain's view.
    pub pod: Pod,
    /// `spec.priority`: higher priorities are scheduled first, as the scheduling queue does.
    pub priority: i32,
    /// Whether the system default spread constraints apply (owned by a ReplicaSet,
    /// StatefulSet or ReplicationController).
    pub default_spreading: bool,
}

/// Which pods a selector counts: the namespaces, resolved against the pod that owns the term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CountKey {
    owner_namespace: String,
    namespaces: Namespaces,
    selector: LabelSelector,
}

impl CountKey {
    fn counts(&self, pod: &Pod) -> bool {
        let namespace = pod.id.namespace();
        let in_scope = match &self.namespaces {
            Namespaces::Own => namespace == self.owner_namespace,
            Namespaces::Listed(listed) if listed.is_empty() => namespace == self.owner_namespace,
            Namespaces::Listed(listed) => listed.contains(namespace),
            Namespaces::All => true,
        };
        in_scope && self.selector.matches(&pod.labels)
    }
}

/// A spread constraint as scoring sees it.
struct SoftSpread {
    key: String,
    max_skew: i64,
    count: CountKey,
}

/// One scheduling cycle's Nodes with what scoring keeps about them, updated as pods are bound.
#[derive(Debug)]
pub struct Scorer {
    nodes: Vec<Arc<ExistingNode>>,
    /// Per Node: the non-zero cpu and memory requests of its pods.
    non_zero: Vec<(i64, i64)>,
    /// Per (namespaces, selector): how many pods on each Node it counts. Filled on first use,
    /// kept current on each bind: pods of one Deployment share one.
    counts: HashMap<CountKey, Vec<i64>>,
    /// Pods on the Nodes with pod affinity terms of their own (`(node, pod)` indices), for
    /// `InterPodAffinity`'s symmetric part.
    with_affinity: Vec<(usize, usize)>,
}

impl Scorer {
    /// Scoring over `nodes` (Ready, schedulable, with their pods).
    pub fn new(nodes: Vec<Arc<ExistingNode>>) -> Self {
        let non_zero = nodes
            .iter()
            .map(|node| {
                node.pods
                    .iter()
                    .map(non_zero_requests)
                    .fold((0_i64, 0_i64), |sum, pod| {
                        (sum.0.saturating_add(pod.0), sum.1.saturating_add(pod.1))
                    })
            })
            .collect();
        let with_affinity = nodes
            .iter()
            .enumerate()
            .flat_map(|(at, node)| {
                node.pods
                    .iter()
                    .enumerate()
                    .filter(|(_, pod)| has_affinity_terms(pod))
                    .map(move |(index, _)| (at, index))
            })
            .collect();
        Self {
            nodes,
            non_zero,
            counts: HashMap::new(),
            with_affinity,
        }
    }

    /// The Nodes, with the pods bound so far.
    pub fn nodes(&self) -> &[Arc<ExistingNode>] {
        &self.nodes
    }

    /// Records `pod` as bound to the Node at `at`.
    pub fn bind(&mut self, at: usize, pod: Pod) {
        let (cpu, memory) = non_zero_requests(&pod);
        if let Some(sum) = self.non_zero.get_mut(at) {
            *sum = (sum.0.saturating_add(cpu), sum.1.saturating_add(memory));
        }
        for (key, counts) in &mut self.counts {
            if key.counts(&pod)
                && let Some(count) = counts.get_mut(at)
            {
                *count += 1;
            }
        }
        let Some(node) = self.nodes.get_mut(at) else {
            return;
        };
        if has_affinity_terms(&pod) {
            self.with_affinity.push((at, node.pods.len()));
        }
        *node = Arc::new(ExistingNode::clone(node).with_pod(pod));
    }

    /// The total weighted score of each of `candidates` (indices into the Nodes) for `pod`.
    pub fn scores(&mut self, pending: &PendingPod, candidates: &[usize]) -> Vec<i64> {
        let pod = &pending.pod;
        let (pod_cpu, pod_memory) = non_zero_requests(pod);
        let mut totals: Vec<i64> = candidates
            .iter()
            .map(|&at| {
                let node = &self.nodes[at];
                let allocatable = (
                    node.allocatable.cpu_millis(),
                    node.allocatable.memory_bytes(),
                );
                let non_zero = self.non_zero[at];
                let fit = least_allocated(
                    (
                        non_zero.0.saturating_add(pod_cpu),
                        non_zero.1.saturating_add(pod_memory),
                    ),
                    allocatable,
                );
                let balanced = if pod.requests.cpu_millis() <= 0 && pod.requests.memory_bytes() <= 0
                {
                    // A best-effort pod: the plugin skips it.
                    0
                } else {
                    balanced_allocation(
                        (
                            node.requested
                                .cpu_millis()
                                .saturating_add(pod.requests.cpu_millis()),
                            node.requested
                                .memory_bytes()
                                .saturating_add(pod.requests.memory_bytes()),
                        ),
                        allocatable,
                    )
                };
                FIT_WEIGHT * fit + BALANCED_WEIGHT * balanced
            })
            .collect();
        let mut add = |scores: Vec<i64>, weight: i64| {
            for (total, score) in totals.iter_mut().zip(scores) {
                *total += weight * score;
            }
        };
        let mut taints: Vec<i64> = candidates
            .iter()
            .map(|&at| intolerable_prefer_no_schedule(pod, &self.nodes[at]))
            .collect();
        default_normalize(&mut taints, true);
        add(taints, TAINT_WEIGHT);
        if !pod.preferred_node_affinity.is_empty() {
            let mut affinity: Vec<i64> = candidates
                .iter()
                .map(|&at| node_affinity_score(pod, &self.nodes[at]))
                .collect();
            default_normalize(&mut affinity, false);
            add(affinity, NODE_AFFINITY_WEIGHT);
        }
        if let Some(spread) = self.spread_scores(pending, candidates) {
            add(spread, SPREAD_WEIGHT);
        }
        if let Some(inter_pod) = self.inter_pod_scores(pod, candidates) {
            add(inter_pod, INTER_POD_WEIGHT);
        }
        totals
    }

    /// How many pods `key` counts on each Node.
    fn counts(&mut self, key: &CountKey) -> &[i64] {
        let nodes = &self.nodes;
        self.counts.entry(key.clone()).or_insert_with(|| {
            nodes
                .iter()
                .map(|node| {
                    let matching = node.pods.iter().filter(|pod| key.counts(pod)).count();
                    i64::try_from(matching).unwrap_or(i64::MAX)
                })
                .collect()
        })
    }

    /// `PodTopologySpread`'s normalized scores, or `None` when it has nothing to score (no
    /// `ScheduleAnyway` constraint, and no system default).
    pub fn spread_scores(
        &mut self,
        pending: &PendingPod,
        candidates: &[usize],
    ) -> Option<Vec<i64>> {
        let pod = &pending.pod;
        let own = !pod.topology_spread_constraints.is_empty();
        let constraints: Vec<SoftSpread> = if own {
            pod.topology_spread_constraints
                .iter()
                .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
                .filter_map(|c| {
                    Some(SoftSpread {
                        key: c.topology_key.clone(),
                        max_skew: i64::from(c.max_skew),
                        count: CountKey {
                            owner_namespace: pod.id.namespace().to_owned(),
                            namespaces: Namespaces::Own,
                            selector: with_match_label_keys(
                                c.label_selector.clone()?,
                                &c.match_label_keys,
                                pod,
                            ),
                        },
                    })
                })
                .collect()
        } else if pending.default_spreading && !pod.labels.is_empty() {
            let selector = LabelSelector {
                match_labels: pod.labels.clone(),
                match_expressions: Vec::new(),
            };
            [
                (LABEL_HOSTNAME, DEFAULT_HOSTNAME_SKEW),
                (LABEL_TOPOLOGY_ZONE, DEFAULT_ZONE_SKEW),
            ]
            .into_iter()
            .map(|(key, max_skew)| SoftSpread {
                key: key.to_owned(),
                max_skew,
                count: CountKey {
                    owner_namespace: pod.id.namespace().to_owned(),
                    namespaces: Namespaces::Own,
                    selector: selector.clone(),
                },
            })
            .collect()
        } else {
            Vec::new()
        };
        if constraints.is_empty() {
            return None;
        }
        // Nodes without every key of the pod's own constraints are ignored (scored 0); the
        // system defaults ignore none.
        let has_keys =
            |node: &ExistingNode| constraints.iter().all(|c| label(node, &c.key).is_some());
        let ignored: Vec<bool> = candidates
            .iter()
            .map(|&at| own && !has_keys(&self.nodes[at]))
            .collect();
        let scored = ignored.iter().filter(|ignored| !**ignored).count();
        let mut scores: Vec<Option<i64>> = ignored
            .iter()
            .map(|ignored| (!ignored).then_some(0))
            .collect();
        let mut sums = vec![0.0_f64; candidates.len()];
        for constraint in &constraints {
            let counts = self.counts(&constraint.count).to_vec();
            let per_node: Vec<i64> = if constraint.key == LABEL_HOSTNAME {
                candidates.iter().map(|&at| counts[at]).collect()
            } else {
                // Domains are those of the scored candidates; pods count on every Node that
                // passes the pod's node affinity and has all the keys.
                let mut domains: BTreeMap<&str, i64> = BTreeMap::new();
                for (&at, ignored) in candidates.iter().zip(&ignored) {
                    if !ignored && let Some(value) = label(&self.nodes[at], &constraint.key) {
                        domains.insert(value, 0);
                    }
                }
                for (node, count) in self.nodes.iter().zip(&counts) {
                    if *count == 0 || !has_keys(node) || !matches_node_affinity(pod, node) {
                        continue;
                    }
                    if let Some(value) = label(node, &constraint.key)
                        && let Some(sum) = domains.get_mut(value)
                    {
                        *sum += count;
                    }
                }
                candidates
                    .iter()
                    .map(|&at| {
                        label(&self.nodes[at], &constraint.key)
                            .and_then(|value| domains.get(value))
                            .copied()
                            .unwrap_or(0)
                    })
                    .collect()
            };
            let size = if constraint.key == LABEL_HOSTNAME {
                scored
            } else {
                let mut values: Vec<&str> = candidates
                    .iter()
                    .zip(&ignored)
                    .filter(|(_, ignored)| !**ignored)
                    .filter_map(|(&at, _)| label(&self.nodes[at], &constraint.key))
                    .collect();
                values.sort_unstable();
                values.dedup();
                values.len()
            };
            #[allow(
                clippy::cast_precision_loss,
                reason = "counts of Nodes and pods, far below 2^52"
            )]
            let weight = ((size + 2) as f64).ln();
            for ((sum, &at), count) in sums.iter_mut().zip(candidates).zip(per_node) {
                if label(&self.nodes[at], &constraint.key).is_some() {
                    #[allow(clippy::cast_precision_loss, reason = "counts of pods, far below 2^52")]
                    let count = count as f64;
                    #[allow(clippy::cast_precision_loss, reason = "a skew, small")]
                    let skew = (constraint.max_skew - 1) as f64;
                    *sum += count * weight + skew;
                }
            }
        }
        for (score, sum) in scores.iter_mut().zip(sums) {
            if let Some(score) = score {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "rounded as kube-scheduler does; small"
                )]
                let rounded = sum.round() as i64;
                *score = rounded;
            }
        }
        Some(spread_normalize(&scores))
    }

    /// `InterPodAffinity`'s normalized scores, or `None` when neither the pod nor any pod on
    /// the Nodes has a term that scores.
    pub fn inter_pod_scores(&mut self, pod: &Pod, candidates: &[usize]) -> Option<Vec<i64>> {
        let own =
            !pod.pod_affinity.preferred.is_empty() || !pod.pod_anti_affinity.preferred.is_empty();
        if !own && self.with_affinity.is_empty() {
            return None;
        }
        // Per topology key, per value: the score of the domain.
        let mut domains: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        let terms = pod
            .pod_affinity
            .preferred
            .iter()
            .map(|term| (term, 1))
            .chain(
                pod.pod_anti_affinity
                    .preferred
                    .iter()
                    .map(|term| (term, -1)),
            );
        for (weighted, sign) in terms {
            let term = &weighted.term;
            let Some(selector) = term.label_selector.clone() else {
                continue;
            };
            let key = CountKey {
                owner_namespace: pod.id.namespace().to_owned(),
                namespaces: term.namespaces.clone(),
                selector,
            };
            let counts = self.counts(&key).to_vec();
            for (node, count) in self.nodes.iter().zip(counts) {
                if count == 0 {
                    continue;
                }
                if let Some(value) = label(node, &term.topology_key) {
                    *domains
                        .entry(term.topology_key.clone())
                        .or_default()
                        .entry(value.to_owned())
                        .or_default() += sign * i64::from(weighted.weight) * count;
                }
            }
        }
        // The symmetric part: the terms of pods already placed that the pod matches.
        for &(at, index) in &self.with_affinity {
            let node = &self.nodes[at];
            let Some(existing) = node.pods.get(index) else {
                continue;
            };
            let required = existing
                .pod_affinity
                .required
                .iter()
                .map(|term| (term, HARD_POD_AFFINITY_WEIGHT));
            let preferred = existing
                .pod_affinity
                .preferred
                .iter()
                .map(|w| (&w.term, i64::from(w.weight)));
            let anti = existing
                .pod_anti_affinity
                .preferred
                .iter()
                .map(|w| (&w.term, -i64::from(w.weight)));
            for (term, weight) in required.chain(preferred).chain(anti) {
                if !term_matches(term, existing, pod) {
                    continue;
                }
                if let Some(value) = label(node, &term.topology_key) {
                    *domains
                        .entry(term.topology_key.clone())
                        .or_default()
                        .entry(value.to_owned())
                        .or_default() += weight;
                }
            }
        }
        if domains.is_empty() {
            return None;
        }
        let raw: Vec<i64> = candidates
            .iter()
            .map(|&at| {
                domains
                    .iter()
                    .filter_map(|(key, values)| values.get(label(&self.nodes[at], key)?))
                    .sum()
            })
            .collect();
        Some(inter_pod_normalize(&raw))
    }
}

/// The spread selector with `matchLabelKeys`' values of the pod added.
fn with_match_label_keys(mut selector: LabelSelector, keys: &[String], pod: &Pod) -> LabelSelector {
    for key in keys {
        if let Some(value) = pod.labels.get(key) {
            selector.match_labels.insert(key.clone(), value.clone());
        }
    }
    selector
}

fn has_affinity_terms(pod: &Pod) -> bool {
    !pod.pod_affinity.required.is_empty()
        || !pod.pod_affinity.preferred.is_empty()
        || !pod.pod_anti_affinity.preferred.is_empty()
}

/// Whether `pod` is one of the pods `owner`'s `term` is about.
fn term_matches(term: &PodAffinityTerm, owner: &Pod, pod: &Pod) -> bool {
    term.label_selector.as_ref().is_some_and(|selector| {
        CountKey {
            owner_namespace: owner.id.namespace().to_owned(),
            namespaces: term.namespaces.clone(),
            selector: selector.clone(),
        }
        .counts(pod)
    })
}

/// Of `candidates` with their `scores`, the one to bind: the highest score, ties to the Node
/// whose name sorts first. Candidates in the order to try them (verification may refuse one).
pub fn ranked(nodes: &[Arc<ExistingNode>], candidates: &[usize], scores: &[i64]) -> Vec<usize> {
    let mut order: Vec<(i64, usize)> = scores
        .iter()
        .copied()
        .zip(candidates.iter().copied())
        .collect();
    order.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| nodes[a.1].name.cmp(&nodes[b.1].name))
    });
    order.into_iter().map(|(_, at)| at).collect()
}

#[cfg(test)]
mod tests;
