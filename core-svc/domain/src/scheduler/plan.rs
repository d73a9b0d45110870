//! A pending pod prepared for placement: its requests with the pod itself counted, its node
//! requirements per relaxation step, and its topology groups; and the constraints it has to
//! keep at a given relaxation.

use std::sync::Arc;

use crate::labels::normalize_label_key;
use crate::requirements::Requirements;
use crate::resources::ResourceList;
use crate::scheduler::constraints::{
    HostPort, NodeInclusionPolicy, PodAffinityTerm, WhenUnsatisfiable,
};
use crate::scheduler::fit::Demand;
use crate::scheduler::ids::ContentMap;
use crate::scheduler::node::counted;
use crate::scheduler::pod::Pod;
use crate::scheduler::preferences::{Relaxable, Relaxation};
use crate::scheduler::selector::{
    LabelSelector, NamespaceSet, SelectorExpression, SelectorOperator,
};
use crate::scheduler::taints::Toleration;
use crate::scheduler::topology::{GroupId, GroupSpec, PodTopology, Rule, Topology};

/// A pending pod, prepared once per run.
#[derive(Debug)]
pub(super) struct PodPlan<'a> {
    pub(super) pod: &'a Pod,
    pub(super) demand: Demand,
    node_selector: Requirements,
    /// Each required node affinity term ANDed with the node selector; empty without terms.
    required_terms: Vec<Requirements>,
    /// Preferred node affinity terms, heaviest first.
    preferred_terms: Vec<Requirements>,
    spread: Vec<(GroupId, WhenUnsatisfiable)>,
    affinity: Vec<GroupId>,
    preferred_affinity: Vec<GroupId>,
    anti_affinity: Vec<GroupId>,
    preferred_anti_affinity: Vec<GroupId>,
    pub(super) inverse_owned: Vec<GroupId>,
    pub(super) selected_by: Vec<GroupId>,
    pub(super) inverse_selecting: Vec<GroupId>,
    pub(super) relaxable: Relaxable,
    /// Its replica class: pods with the same class have the same requests, constraints,
    /// ports, tolerations and topology groups, so a NodeClaim decides the same for all of
    /// them (see [`replica_classes`]).
    pub(super) class: u32,
}

/// What a pod must keep at one relaxation.
#[derive(Debug)]
pub(super) struct Constraints {
    /// Node requirements, the heaviest remaining preferred term included.
    pub(super) requirements: Requirements,
    /// Node requirements without preferences: the domains the pod may use.
    pub(super) strict: Requirements,
    /// The topology groups whose rules hold.
    pub(super) owned: Vec<GroupId>,
    /// Whether `PreferNoSchedule` taints are tolerated.
    pub(super) tolerate_prefer_no_schedule: bool,
}

impl<'a> PodPlan<'a> {
    /// Prepares `pod`, creating its topology groups in `topology`.
    pub(super) fn new(
        pod: &'a Pod,
        topology: &mut Topology,
        prefer_no_schedule_taints: bool,
    ) -> Self {
        let node_selector = Requirements::from_labels(&pod.node_selector);
        let required_terms: Vec<Requirements> = pod
            .required_node_affinity
            .iter()
            .map(|term| {
                let mut merged = node_selector.clone();
                merged.add_all(term);
                merged
            })
            .collect();
        let mut preferred = pod.preferred_node_affinity.iter().collect::<Vec<_>>();
        preferred.sort_by_key(|w| std::cmp::Reverse(w.weight));
        let preferred_terms = preferred.into_iter().map(|w| w.term.clone()).collect();

        let node_filter = if required_terms.is_empty() {
            if node_selector.is_empty() {
                Vec::new()
            } else {
                vec![node_selector.clone()]
            }
        } else {
            required_terms.clone()
        };
        let namespace = pod.id.namespace();
        let spread = pod
            .topology_spread_constraints
            .iter()
            .map(|c| {
                let spec = GroupSpec {
                    rule: Rule::Spread {
                        max_skew: c.max_skew,
                        min_domains: c.min_domains,
                    },
                    key: normalize_label_key(&c.topology_key).into(),
                    namespaces: NamespaceSet::Listed([Arc::from(namespace)].into()),
                    selector: with_label_keys(c.label_selector.as_ref(), &c.match_label_keys, pod),
                    node_filter: match c.node_affinity_policy {
                        NodeInclusionPolicy::Honor => node_filter.clone(),
                        NodeInclusionPolicy::Ignore => Vec::new(),
                    },
                };
                (topology.group(spec), c.when_unsatisfiable)
            })
            .collect::<Vec<_>>();
        let mut term_group = |rule: Rule, term: &PodAffinityTerm| {
            topology.group(affinity_spec(rule, term, namespace))
        };
        let affinity = pod
            .pod_affinity
            .required
            .iter()
            .map(|t| term_group(Rule::Affinity, t))
            .collect();
        let preferred_affinity = heaviest_first(&pod.pod_affinity.preferred)
            .map(|t| term_group(Rule::Affinity, t))
            .collect();
        let anti_affinity = pod
            .pod_anti_affinity
            .required
            .iter()
            .map(|t| term_group(Rule::AntiAffinity, t))
            .collect();
        let preferred_anti_affinity = heaviest_first(&pod.pod_anti_affinity.preferred)
            .map(|t| term_group(Rule::AntiAffinity, t))
            .collect();
        let inverse_owned = pod
            .pod_anti_affinity
            .required
            .iter()
            .map(|t| topology.inverse_group(affinity_spec(Rule::AntiAffinity, t, namespace)))
            .collect();
        let relaxable = Relaxable {
            required_node_terms: pod.required_node_affinity.len(),
            preferred_affinity: pod.pod_affinity.preferred.len(),
            preferred_anti_affinity: pod.pod_anti_affinity.preferred.len(),
            preferred_node_affinity: pod.preferred_node_affinity.len(),
            schedule_anyway: spread
                .iter()
                .filter(|(_, w)| *w == WhenUnsatisfiable::ScheduleAnyway)
                .count(),
            prefer_no_schedule_taints,
        };
        PodPlan {
            pod,
            demand: Demand::new(counted(&pod.requests)),
            node_selector,
            required_terms,
            preferred_terms,
            spread,
            affinity,
            preferred_affinity,
            anti_affinity,
            preferred_anti_affinity,
            inverse_owned,
            selected_by: Vec::new(),
            inverse_selecting: Vec::new(),
            relaxable,
            class: 0,
        }
    }

    /// What the pod must keep at `relaxation`.
    pub(super) fn constraints(&self, relaxation: &Relaxation) -> Constraints {
        let strict = self
            .required_terms
            .get(relaxation.required_node_terms)
            .unwrap_or(&self.node_selector)
            .clone();
        let requirements = match self.preferred_terms.get(relaxation.preferred_node_affinity) {
            Some(preferred) => {
                let mut with_preference = strict.clone();
                with_preference.add_all(preferred);
                with_preference
            }
            None => strict.clone(),
        };
        let mut owned = Vec::new();
        let mut schedule_anyway_seen = 0;
        for (group, when) in &self.spread {
            if *when == WhenUnsatisfiable::ScheduleAnyway {
                schedule_anyway_seen += 1;
                if schedule_anyway_seen <= relaxation.schedule_anyway {
                    continue;
                }
            }
            owned.push(*group);
        }
        owned.extend(&self.affinity);
        owned.extend(
            self.preferred_affinity
                .iter()
                .skip(relaxation.preferred_affinity),
        );
        owned.extend(&self.anti_affinity);
        owned.extend(
            self.preferred_anti_affinity
                .iter()
                .skip(relaxation.preferred_anti_affinity),
        );
        Constraints {
            requirements,
            strict,
            owned,
            tolerate_prefer_no_schedule: relaxation.tolerate_prefer_no_schedule,
        }
    }

    /// Every group the pod owns at some relaxation: its spread constraints, its required and
    /// preferred pod affinity and anti-affinity terms.
    pub(super) fn every_owned(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.spread
            .iter()
            .map(|(group, _)| *group)
            .chain(self.affinity.iter().copied())
            .chain(self.preferred_affinity.iter().copied())
            .chain(self.anti_affinity.iter().copied())
            .chain(self.preferred_anti_affinity.iter().copied())
    }

    /// The topology view of the pod under `constraints`.
    pub(super) fn topology<'c>(&'c self, constraints: &'c Constraints) -> PodTopology<'c> {
        PodTopology {
            owned: &constraints.owned,
            selected_by: &self.selected_by,
            inverse_selecting: &self.inverse_selecting,
            inverse_owned: &self.inverse_owned,
            strict: &constraints.strict,
            cheaper_zones: None,
        }
    }

    /// Which key of `requirements` comes from the node selector, as `key=value`.
    pub(super) fn node_selector_entry(&self, key: &str) -> Option<(&str, &str)> {
        self.pod
            .node_selector
            .iter()
            .find(|(k, _)| normalize_label_key(k) == key)
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn heaviest_first<T>(
    terms: &[crate::scheduler::constraints::Weighted<T>],
) -> impl Iterator<Item = &T> {
    let mut sorted: Vec<_> = terms.iter().collect();
    sorted.sort_by_key(|w| std::cmp::Reverse(w.weight));
    sorted.into_iter().map(|w| &w.term)
}

/// The group spec of a pod (anti-)affinity term of a pod in `namespace`.
pub(super) fn affinity_spec(rule: Rule, term: &PodAffinityTerm, namespace: &str) -> GroupSpec {
    GroupSpec {
        rule,
        key: normalize_label_key(&term.topology_key).into(),
        namespaces: NamespaceSet::resolve(&term.namespaces, namespace),
        selector: term.label_selector.clone(),
        node_filter: Vec::new(),
    }
}

/// `selector` with `key In [value]` for each of `keys` the pod has (`matchLabelKeys`).
fn with_label_keys(
    selector: Option<&LabelSelector>,
    keys: &[String],
    pod: &Pod,
) -> Option<LabelSelector> {
    let mut selector = selector?.clone();
    for key in keys {
        if let Some(value) = pod.labels.get(key) {
            selector.match_expressions.push(SelectorExpression {
                key: key.clone(),
                operator: SelectorOperator::In,
                values: vec![value.clone()],
            });
        }
    }
    Some(selector)
}

/// Numbers the plans' replica classes: plans equal in everything a placement reads (requests,
/// node requirements and preferences, topology groups, host ports, tolerations) get the same
/// number, which they share with nothing else. A Deployment's pods are usually one class.
pub(super) fn replica_classes(plans: &[PodPlan<'_>]) -> Vec<u32> {
    type Key<'p> = (
        (
            &'p ResourceList,
            &'p Requirements,
            &'p [Requirements],
            &'p [Requirements],
        ),
        (
            &'p [(GroupId, WhenUnsatisfiable)],
            &'p [GroupId],
            &'p [GroupId],
        ),
        (&'p [GroupId], &'p [GroupId], &'p [GroupId]),
        (&'p [GroupId], &'p [GroupId]),
        (&'p [HostPort], &'p [Toleration], Relaxable),
    );
    let mut classes: ContentMap<Key<'_>, u32> = ContentMap::default();
    plans
        .iter()
        .map(|plan| {
            let key: Key<'_> = (
                (
                    &plan.demand.list,
                    &plan.node_selector,
                    &plan.required_terms,
                    &plan.preferred_terms,
                ),
                (&plan.spread, &plan.affinity, &plan.preferred_affinity),
                (
                    &plan.anti_affinity,
                    &plan.preferred_anti_affinity,
                    &plan.inverse_owned,
                ),
                (&plan.selected_by, &plan.inverse_selecting),
                (&plan.pod.host_ports, &plan.pod.tolerations, plan.relaxable),
            );
            let next = u32::try_from(classes.len()).unwrap_or(u32::MAX);
            *classes.entry(key).or_insert(next)
        })
        .collect()
}
