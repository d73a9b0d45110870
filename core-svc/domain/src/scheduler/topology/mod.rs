//! Topology: topology spread, pod affinity and pod anti-affinity, as upstream's `Topology` and
//! `TopologyGroup`. A group counts the pods its selector matches per domain of its key; pods
//! that own a group must keep its rule, and where a new NodeClaim could be in several domains
//! the rule pins it to one.
//!
//! Groups are shared: every pod of a Deployment with the same constraint owns one group, as
//! upstream hashes them. All groups a run can need (the preferred terms included) are created
//! before the first placement, so that counts always include every placement of the run.
//!
//! Anti-affinity works both ways: the required anti-affinity terms of placed pods (those
//! already running and those placed in this run) are "inverse" groups, which keep the pods
//! they select out of the domains where their owners are.

mod group;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::labels::LABEL_TOPOLOGY_ZONE;
use crate::requirements::{AllowUndefined, Operator, Requirement, Requirements};
use crate::scheduler::dimensions::ValueIndex;
use crate::scheduler::ids::ContentMap;

use group::Group;
pub(super) use group::{Broken, Domain, GroupId, GroupSpec, Rule, Violation};

/// The domains one rule of a pod allows (see [`Topology::allowed_domains`]).
#[derive(Debug, Clone)]
pub(super) struct AllowedDomains {
    /// The rule's key.
    pub(super) key: Arc<str>,
    /// The values it allows, sorted.
    pub(super) values: Vec<Arc<str>>,
    /// What placing the pod elsewhere would violate.
    pub(super) broken: Broken,
    /// Whether the rule is a topology spread (the pod's own).
    pub(super) spread: bool,
    /// For a rule on zones, the run's interned zones among `values`, sorted, so that a planned
    /// NodeClaim pinned to a zone is checked against it by number
    /// (`NodeClaimState::pinned_zone`) rather than by looking up and comparing strings, for
    /// each of the many NodeClaims a zone spread's pod is tried on. A value no instance type
    /// offers is left out: no NodeClaim can be pinned to it.
    pub(super) zones: Option<Vec<u32>>,
}

impl AllowedDomains {
    /// The rule as it allows the pod when its zone spreads keep to the zones `cheaper`
    /// (`PodTopology::cheaper_zones`): a zone spread's values narrowed to them, any other
    /// rule unchanged. `interned` are the run's zones, which `zones` numbers.
    pub(super) fn keeping(&self, cheaper: &[Arc<str>], interned: &ValueIndex) -> AllowedDomains {
        let mut kept = self.clone();
        if let (true, Some(zones)) = (self.spread, &mut kept.zones) {
            kept.values.retain(|value| cheaper.contains(value));
            zones.retain(|&zone| cheaper.contains(interned.value(zone)));
        }
        kept
    }

    /// Whether a target whose requirements pin `key` to one value keeps the rule: `None`
    /// when they do not pin it.
    pub(super) fn allows(&self, requirements: &Requirements) -> Option<bool> {
        let pinned = requirements
            .get(&self.key)
            .filter(|r| r.operator() == Operator::In && r.len() == 1)?;
        let value = pinned.values().next()?;
        Some(self.values.binary_search_by(|v| (**v).cmp(value)).is_ok())
    }
}

/// What the topology needs to know about the pod being placed.
#[derive(Debug, Clone, Copy)]
pub(super) struct PodTopology<'a> {
    /// The groups whose rules the pod keeps (given its relaxation).
    pub(super) owned: &'a [GroupId],
    /// The groups whose selector matches the pod.
    pub(super) selected_by: &'a [GroupId],
    /// The inverse groups whose selector matches the pod.
    pub(super) inverse_selecting: &'a [GroupId],
    /// The inverse groups of the pod's own required anti-affinity.
    pub(super) inverse_owned: &'a [GroupId],
    /// The pod's required node requirements: the domains it may use.
    pub(super) strict: &'a Requirements,
    /// When set, the zones its zone spreads keep to among those they allow: where pods like
    /// it cost least (`State::cheaper_zones`). Any allowed zone keeps a spread; this only
    /// chooses among them.
    pub(super) cheaper_zones: Option<&'a [Arc<str>]>,
}

impl PodTopology<'_> {
    /// Whether the pod has no topology rule to keep.
    pub(super) fn is_unconstrained(&self) -> bool {
        self.owned.is_empty() && self.inverse_selecting.is_empty()
    }
}

/// Every group of a run, with its counts, and the domains of each key.
#[derive(Debug, Default)]
pub(super) struct Topology {
    values: Vec<Arc<str>>,
    by_value: ContentMap<Arc<str>, u32>,
    /// The known domains of each non-hostname key, sorted by value.
    universes: ContentMap<Arc<str>, Vec<u32>>,
    groups: Vec<Group>,
    index: ContentMap<GroupSpec, GroupId>,
    inverse: Vec<Group>,
    inverse_index: ContentMap<GroupSpec, GroupId>,
}

impl Topology {
    /// The domain of the label value `value`.
    pub(super) fn domain(&mut self, value: &str) -> Domain {
        if let Some(&index) = self.by_value.get(value) {
            return Domain::Value(index);
        }
        let index = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        let value: Arc<str> = value.into();
        self.values.push(value.clone());
        self.by_value.insert(value, index);
        Domain::Value(index)
    }

    /// The group for `spec`, created if new.
    pub(super) fn group(&mut self, spec: GroupSpec) -> GroupId {
        Self::find_or_add(&mut self.groups, &mut self.index, spec)
    }

    /// The inverse group for the anti-affinity `spec`, created if new.
    pub(super) fn inverse_group(&mut self, spec: GroupSpec) -> GroupId {
        Self::find_or_add(&mut self.inverse, &mut self.inverse_index, spec)
    }

    fn find_or_add(
        groups: &mut Vec<Group>,
        index: &mut ContentMap<GroupSpec, GroupId>,
        spec: GroupSpec,
    ) -> GroupId {
        if let Some(&id) = index.get(&spec) {
            return id;
        }
        let id = groups.len();
        index.insert(spec.clone(), id);
        groups.push(Group::new(spec));
        id
    }

    /// The keys of every group except hostname, sorted and without duplicates: the keys
    /// whose domains the caller must declare with [`Self::add_domains`].
    pub(super) fn domain_keys(&self) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = self
            .groups
            .iter()
            .chain(self.inverse.iter())
            .filter(|g| !g.hostname)
            .map(|g| g.spec.key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Declares `values` as domains of `key`.
    pub(super) fn add_domains<'v>(&mut self, key: &str, values: impl IntoIterator<Item = &'v str>) {
        let ids: Vec<u32> = values
            .into_iter()
            .filter_map(|v| match self.domain(v) {
                Domain::Value(id) => Some(id),
                Domain::Claim(_) => None,
            })
            .collect();
        let universe = self.universes.entry(key.into()).or_default();
        universe.extend(ids);
        let values = &self.values;
        universe.sort_by(|a, b| values[*a as usize].cmp(&values[*b as usize]));
        universe.dedup();
    }

    /// The groups and the inverse groups whose selector matches a pod in `namespace` with
    /// `labels`.
    pub(super) fn selecting(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> (Vec<GroupId>, Vec<GroupId>) {
        let select = |groups: &[Group]| {
            groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.spec.selects(namespace, labels))
                .map(|(id, _)| id)
                .collect()
        };
        (select(&self.groups), select(&self.inverse))
    }

    /// Counts a pod already bound to a node with `requirements` and hostname `host`, which the
    /// groups `selected_by` select and which owns `inverse_owned`.
    pub(super) fn count_bound(
        &mut self,
        selected_by: &[GroupId],
        inverse_owned: &[GroupId],
        host: Domain,
        requirements: &Requirements,
    ) {
        self.record_with(
            selected_by,
            inverse_owned,
            host,
            requirements,
            AllowUndefined::NoKeys,
        );
    }

    /// Whether the pod may go to the node or NodeClaim with hostname `host` as far as
    /// hostname rules go (which need no narrowing).
    pub(super) fn check_hostname(&self, pod: &PodTopology<'_>, host: Domain) -> Result<(), Broken> {
        for &id in pod.owned {
            let group = &self.groups[id];
            if !group.hostname {
                continue;
            }
            let count = group.count(host);
            let selects_itself = pod.selected_by.contains(&id);
            let allowed = match group.spec.rule {
                // Upstream takes the global minimum of a hostname spread as zero: a new node
                // can always be made.
                Rule::Spread { max_skew, .. } => count + u32::from(selects_itself) <= max_skew,
                Rule::Affinity => count > 0 || (group.total == 0 && selects_itself),
                Rule::AntiAffinity => count == 0,
            };
            if !allowed {
                return Err(Broken::own(id));
            }
        }
        for &id in pod.inverse_selecting {
            let group = &self.inverse[id];
            if group.hostname && group.count(host) > 0 {
                return Err(Broken::inverse(id));
            }
        }
        Ok(())
    }

    /// Whether some of the `claims` planned NodeClaims may keep the pod's hostname rules; when
    /// not, none needs to be tried.
    pub(super) fn may_fit_a_claim(&self, pod: &PodTopology<'_>, claims: usize) -> bool {
        for &id in pod.owned {
            let group = &self.groups[id];
            if !group.hostname {
                continue;
            }
            let selects_itself = pod.selected_by.contains(&id);
            let eligible = match group.spec.rule {
                Rule::Spread { max_skew, .. } => {
                    match max_skew.checked_sub(u32::from(selects_itself)) {
                        Some(most) => group.claims_with_at_most(most, claims),
                        None => 0,
                    }
                }
                Rule::Affinity if group.total == 0 && selects_itself => claims,
                Rule::Affinity => claims - group.claims_with_at_most(0, claims),
                Rule::AntiAffinity => group.claims_with_at_most(0, claims),
            };
            if eligible == 0 {
                return false;
            }
        }
        pod.inverse_selecting.iter().all(|&id| {
            let group = &self.inverse[id];
            !group.hostname || group.claims_with_at_most(0, claims) > 0
        })
    }

    /// The rule `broken` names, to explain a refusal.
    pub(super) fn violation(&self, broken: Broken) -> Violation {
        let groups = if broken.inverse {
            &self.inverse
        } else {
            &self.groups
        };
        groups[broken.group].violation(broken.inverse)
    }

    /// Whether a planned NodeClaim whose hostname rules refuse the pod will refuse it for the
    /// rest of the run: none of its hostname rules is an affinity (which a NodeClaim may come
    /// to satisfy). Hostname spread and anti-affinity refuse a NodeClaim for the pods it
    /// holds, and it only ever gains pods.
    pub(super) fn hostname_refusals_are_final(&self, pod: &PodTopology<'_>) -> bool {
        pod.owned.iter().all(|&id| {
            let group = &self.groups[id];
            !group.hostname || group.spec.rule != Rule::Affinity
        })
    }

    /// For each of the pod's rules on a key other than hostname, the key, the values it
    /// allows a target that constrains nothing, and the violation. A target pinned to one
    /// value of each such key keeps the pod's rules exactly when each pinned value is among
    /// its rule's: what [`Self::narrow`] decides for it, without its options or a copy of its
    /// requirements. `zones` are the run's interned zones (see [`AllowedDomains::zones`]).
    pub(super) fn allowed_domains(
        &self,
        pod: &PodTopology<'_>,
        zones: &ValueIndex,
    ) -> Vec<AllowedDomains> {
        let unconstrained = Requirements::new();
        let owned = pod.owned.iter().map(|&id| (&self.groups[id], id, false));
        let inverse = pod
            .inverse_selecting
            .iter()
            .map(|&id| (&self.inverse[id], id, true));
        owned
            .chain(inverse)
            .filter(|(group, _, _)| !group.hostname)
            .map(|(group, id, is_inverse)| {
                let selects_itself = !is_inverse && pod.selected_by.contains(&id);
                let mut values: Vec<Arc<str>> = self
                    .candidates(group, selects_itself, is_inverse, pod, &unconstrained)
                    .into_iter()
                    .map(|d| self.values[d as usize].clone())
                    .collect();
                values.sort();
                let zones = (&*group.spec.key == LABEL_TOPOLOGY_ZONE).then(|| {
                    let mut ids: Vec<u32> = values.iter().filter_map(|v| zones.get(v)).collect();
                    ids.sort_unstable();
                    ids
                });
                AllowedDomains {
                    key: group.spec.key.clone(),
                    values,
                    broken: Broken::of(id, is_inverse),
                    spread: !is_inverse && matches!(group.spec.rule, Rule::Spread { .. }),
                    zones,
                }
            })
            .collect()
    }

    /// How many rules the pod has on keys other than hostname.
    pub(super) fn domain_rules(&self, pod: &PodTopology<'_>) -> usize {
        pod.owned
            .iter()
            .filter(|&&id| !self.groups[id].hostname)
            .count()
            + pod
                .inverse_selecting
                .iter()
                .filter(|&&id| !self.inverse[id].hostname)
                .count()
    }

    /// Whether the pod has rules on keys other than hostname.
    pub(super) fn has_domain_rules(&self, pod: &PodTopology<'_>) -> bool {
        pod.owned.iter().any(|&id| !self.groups[id].hostname)
            || pod
                .inverse_selecting
                .iter()
                .any(|&id| !self.inverse[id].hostname)
    }

    /// Narrows `requirements` (the target's, the pod's included) so that every non-hostname
    /// rule of the pod holds: each rule keeps the domains it allows and, where several remain,
    /// pins the first that `viable` accepts, in upstream's order of preference (spread: least
    /// loaded; affinity: most loaded; anti-affinity: by name).
    pub(super) fn narrow(
        &self,
        pod: &PodTopology<'_>,
        requirements: &mut Requirements,
        viable: &mut dyn FnMut(&str, &str, &Requirements) -> bool,
    ) -> Result<(), Broken> {
        let owned = pod.owned.iter().map(|&id| (&self.groups[id], id, false));
        let inverse = pod
            .inverse_selecting
            .iter()
            .map(|&id| (&self.inverse[id], id, true));
        for (group, id, is_inverse) in owned.chain(inverse) {
            if group.hostname {
                continue;
            }
            let selects_itself = !is_inverse && pod.selected_by.contains(&id);
            let candidates = self.candidates(group, selects_itself, is_inverse, pod, requirements);
            let key = &group.spec.key;
            let pick = candidates
                .into_iter()
                .map(|d| &self.values[d as usize])
                .find(|value| viable(key, value, requirements));
            match pick {
                Some(value) => requirements.add(Requirement::in_values(key, [&**value])),
                None => return Err(Broken::of(id, is_inverse)),
            }
        }
        Ok(())
    }

    /// The domains of `group`'s key the pod may go to, best first.
    fn candidates(
        &self,
        group: &Group,
        selects_itself: bool,
        is_inverse: bool,
        pod: &PodTopology<'_>,
        requirements: &Requirements,
    ) -> Vec<u32> {
        let strict = pod.strict;
        let key = &*group.spec.key;
        let empty = Vec::new();
        let universe = self.universes.get(key).unwrap_or(&empty);
        let pod_allows = |d: &u32| {
            strict
                .get(key)
                .is_none_or(|r| r.has(&self.values[*d as usize]))
        };
        let node_allows = |d: &u32| {
            requirements
                .get(key)
                .is_none_or(|r| r.has(&self.values[*d as usize]))
        };
        let count = |d: u32| group.count(Domain::Value(d));
        let by_name = |a: &u32, b: &u32| self.values[*a as usize].cmp(&self.values[*b as usize]);
        let mut candidates: Vec<u32> = match (&group.spec.rule, is_inverse) {
            (
                Rule::Spread {
                    max_skew,
                    min_domains,
                },
                _,
            ) => {
                let eligible: Vec<u32> = universe.iter().copied().filter(pod_allows).collect();
                let global_min = if eligible.len() < min_domains.unwrap_or(0) as usize {
                    0
                } else {
                    eligible.iter().map(|&d| count(d)).min().unwrap_or(0)
                };
                let mut fitting: Vec<u32> = eligible
                    .into_iter()
                    .filter(|d| node_allows(d))
                    .filter(|&d| count(d) + u32::from(selects_itself) <= global_min + max_skew)
                    .collect();
                if let Some(cheaper) = pod.cheaper_zones.filter(|_| key == LABEL_TOPOLOGY_ZONE) {
                    fitting.retain(|&d| cheaper.contains(&self.values[d as usize]));
                }
                fitting.sort_by(|a, b| count(*a).cmp(&count(*b)).then_with(|| by_name(a, b)));
                return fitting;
            }
            (Rule::Affinity, _) => {
                let joined: Vec<u32> = universe
                    .iter()
                    .copied()
                    .filter(|d| pod_allows(d) && count(*d) > 0)
                    .collect();
                if joined.is_empty() && selects_itself {
                    // The first pod of a self-affine group starts its domain anywhere.
                    universe
                        .iter()
                        .copied()
                        .filter(|d| pod_allows(d) && node_allows(d))
                        .collect()
                } else {
                    let mut joined: Vec<u32> =
                        joined.into_iter().filter(|d| node_allows(d)).collect();
                    joined.sort_by(|a, b| count(*b).cmp(&count(*a)).then_with(|| by_name(a, b)));
                    return joined;
                }
            }
            (Rule::AntiAffinity, _) => universe
                .iter()
                .copied()
                .filter(|d| pod_allows(d) && node_allows(d) && count(*d) == 0)
                .collect(),
        };
        candidates.sort_by(by_name);
        candidates
    }

    /// Records the pod placed on the target with hostname `host` and final `requirements`.
    pub(super) fn record(
        &mut self,
        pod: &PodTopology<'_>,
        host: Domain,
        requirements: &Requirements,
        allow: AllowUndefined<'_>,
    ) {
        self.record_with(
            pod.selected_by,
            pod.inverse_owned,
            host,
            requirements,
            allow,
        );
    }

    /// Undoes [`Self::record`] of a pod on the planned NodeClaim `host` for its hostname
    /// groups: the pod is moving to another NodeClaim. Its other groups keep their counts, as
    /// the pod keeps its domain of their keys.
    pub(super) fn unrecord_hostname(
        &mut self,
        selected_by: &[GroupId],
        inverse_owned: &[GroupId],
        host: Domain,
    ) {
        self.count_hostname(selected_by, inverse_owned, host, Group::unrecord);
    }

    /// Records a pod on the planned NodeClaim `host` for its hostname groups only: undoes
    /// [`Self::unrecord_hostname`].
    pub(super) fn record_hostname(
        &mut self,
        selected_by: &[GroupId],
        inverse_owned: &[GroupId],
        host: Domain,
    ) {
        self.count_hostname(selected_by, inverse_owned, host, Group::record);
    }

    fn count_hostname(
        &mut self,
        selected_by: &[GroupId],
        inverse_owned: &[GroupId],
        host: Domain,
        count: fn(&mut Group, Domain),
    ) {
        for &id in selected_by {
            if self.groups[id].hostname {
                count(&mut self.groups[id], host);
            }
        }
        for &id in inverse_owned {
            if self.inverse[id].hostname {
                count(&mut self.inverse[id], host);
            }
        }
    }

    /// Whether group `id` is on hostname.
    pub(super) fn is_hostname(&self, id: GroupId) -> bool {
        self.groups[id].hostname
    }

    /// Whether inverse group `id` is on hostname.
    pub(super) fn inverse_is_hostname(&self, id: GroupId) -> bool {
        self.inverse[id].hostname
    }

    /// The key of group `id`.
    pub(super) fn key(&self, id: GroupId) -> &Arc<str> {
        &self.groups[id].spec.key
    }

    /// The key of inverse group `id`.
    pub(super) fn inverse_key(&self, id: GroupId) -> &Arc<str> {
        &self.inverse[id].spec.key
    }

    /// Whether group `id` is an affinity.
    pub(super) fn is_affinity(&self, id: GroupId) -> bool {
        self.groups[id].spec.rule == Rule::Affinity
    }

    /// Whether group `id` counts only pods on some nodes (a spread's node filter).
    pub(super) fn has_node_filter(&self, id: GroupId) -> bool {
        !self.groups[id].spec.node_filter.is_empty()
    }

    fn record_with(
        &mut self,
        selected_by: &[GroupId],
        inverse_owned: &[GroupId],
        host: Domain,
        requirements: &Requirements,
        allow: AllowUndefined<'_>,
    ) {
        for &id in selected_by {
            if !self.groups[id].spec.counts_on(requirements, allow) {
                continue;
            }
            let every_possible = self.groups[id].spec.rule == Rule::AntiAffinity;
            let domains = self.domains_of(&self.groups[id], host, requirements, every_possible);
            for domain in domains {
                self.groups[id].record(domain);
            }
        }
        for &id in inverse_owned {
            let domains = self.domains_of(&self.inverse[id], host, requirements, true);
            for domain in domains {
                self.inverse[id].record(domain);
            }
        }
    }

    /// The domains a pod on the target is in: its hostname, or the single value the target's
    /// requirement allows; with `every_possible` (anti-affinity), every known domain the
    /// requirement still allows, since the pod may end up in any of them.
    fn domains_of(
        &self,
        group: &Group,
        host: Domain,
        requirements: &Requirements,
        every_possible: bool,
    ) -> Vec<Domain> {
        if group.hostname {
            return vec![host];
        }
        let key = &*group.spec.key;
        let requirement = requirements.get(key);
        if let Some(r) = requirement
            && r.operator() == Operator::In
            && r.len() == 1
        {
            return r
                .values()
                .filter_map(|v| self.by_value.get(v))
                .map(|&id| Domain::Value(id))
                .collect();
        }
        if !every_possible {
            return Vec::new();
        }
        self.universes
            .get(key)
            .map(|universe| {
                universe
                    .iter()
                    .filter(|&&d| requirement.is_none_or(|r| r.has(&self.values[d as usize])))
                    .map(|&d| Domain::Value(d))
                    .collect()
            })
            .unwrap_or_default()
    }
}
