//! A topology group: the rule it enforces, the pods it counts, and its counts per domain.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::labels::{LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use crate::requirements::{AllowUndefined, Requirements};
use crate::scheduler::ids::IdMap;
use crate::scheduler::selector::{LabelSelector, NamespaceSet};

/// An index into the topology's groups (or into its inverse groups).
pub(crate) type GroupId = usize;

/// A topology domain: a label value, or a NodeClaim planned in this run (its own hostname).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Domain {
    /// An interned label value.
    Value(u32),
    /// The hostname of the planned NodeClaim with this index.
    Claim(u32),
}

/// The rule a group enforces on its owners.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Rule {
    /// Topology spread.
    Spread {
        /// `maxSkew`.
        max_skew: u32,
        /// `minDomains`.
        min_domains: Option<u32>,
    },
    /// Pod affinity: join a domain that has a selected pod.
    Affinity,
    /// Pod anti-affinity: stay out of domains that have a selected pod.
    AntiAffinity,
}

/// What identifies a group; equal specs are one group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct GroupSpec {
    /// What owners must keep.
    pub(crate) rule: Rule,
    /// The (normalised) topology key.
    pub(crate) key: Arc<str>,
    /// Where the counted pods are.
    pub(crate) namespaces: NamespaceSet,
    /// Which pods count; `None` counts none.
    pub(crate) selector: Option<LabelSelector>,
    /// Nodes that count (spread's `nodeAffinityPolicy: Honor`): those compatible with one of
    /// these terms; empty when every node counts.
    pub(crate) node_filter: Vec<Requirements>,
}

impl GroupSpec {
    /// Whether a pod in `namespace` with `labels` counts.
    pub(super) fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace)
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// Whether a pod on a node with `requirements` counts (the node filter).
    pub(super) fn counts_on(&self, requirements: &Requirements, allow: AllowUndefined<'_>) -> bool {
        self.node_filter.is_empty()
            || self
                .node_filter
                .iter()
                .any(|term| requirements.is_compatible(term, allow))
    }
}

/// A group and its counts.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) spec: GroupSpec,
    /// Whether the key is the hostname, whose domains are nodes and need no narrowing.
    pub(super) hostname: bool,
    /// Selected pods per domain; absent means none.
    pub(super) counts: IdMap<Domain, u32>,
    /// The sum of `counts`.
    pub(super) total: u64,
    /// For hostname groups, how many planned NodeClaims have each count (index 1 and up;
    /// the others have none): lets a pod skip every planned NodeClaim at once when none can
    /// keep its rule, which is what keeps a large hostname spread linear.
    pub(super) claims_with_count: Vec<usize>,
}

impl Group {
    /// A group for `spec` that has counted nothing yet.
    pub(super) fn new(spec: GroupSpec) -> Self {
        Group {
            hostname: &*spec.key == LABEL_HOSTNAME,
            spec,
            counts: IdMap::default(),
            total: 0,
            claims_with_count: Vec::new(),
        }
    }

    /// The selected pods in `domain`.
    pub(super) fn count(&self, domain: Domain) -> u32 {
        self.counts.get(&domain).copied().unwrap_or(0)
    }

    /// Counts one more selected pod in `domain`.
    pub(super) fn record(&mut self, domain: Domain) {
        let count = self.counts.entry(domain).or_insert(0);
        *count += 1;
        let count = *count as usize;
        self.total += 1;
        if self.hostname && matches!(domain, Domain::Claim(_)) {
            if self.claims_with_count.len() <= count {
                self.claims_with_count.resize(count + 1, 0);
            }
            self.claims_with_count[count] += 1;
            if count > 1 {
                self.claims_with_count[count - 1] -= 1;
            }
        }
    }

    /// Counts one selected pod less in `domain`, which has one: a pod the improvement pass
    /// moves off a planned NodeClaim.
    pub(super) fn unrecord(&mut self, domain: Domain) {
        let Some(count) = self.counts.get_mut(&domain) else {
            return;
        };
        let before = *count as usize;
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.counts.remove(&domain);
        }
        self.total = self.total.saturating_sub(1);
        if self.hostname && matches!(domain, Domain::Claim(_)) {
            if let Some(with_before) = self.claims_with_count.get_mut(before) {
                *with_before = with_before.saturating_sub(1);
            }
            if before > 1
                && let Some(with_after) = self.claims_with_count.get_mut(before - 1)
            {
                *with_after += 1;
            }
        }
    }

    /// The violation of this group's rule (of another pod's, for an inverse group).
    pub(super) fn violation(&self, inverse: bool) -> Violation {
        Violation {
            rule: self.spec.rule.clone(),
            key: self.spec.key.clone(),
            inverse,
        }
    }

    /// How many of `claims` planned NodeClaims have a count of at most `most`.
    pub(super) fn claims_with_at_most(&self, most: u32, claims: usize) -> usize {
        let above: usize = self.claims_with_count.iter().skip(most as usize + 1).sum();
        claims.saturating_sub(above)
    }
}

/// Which rule a placement would break, as the run's topology numbers it: a group of the pod's
/// own rules, or an inverse group (another pod's anti-affinity). Placing a pod tries it on
/// many planned NodeClaims and drops most refusals unread, so they carry this copyable number,
/// and only a refusal that has to be explained becomes a [`Violation`]
/// (`Topology::violation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Broken {
    pub(super) group: GroupId,
    pub(super) inverse: bool,
}

impl Broken {
    /// The pod's own rule of `group`.
    pub(super) fn own(group: GroupId) -> Self {
        Broken {
            group,
            inverse: false,
        }
    }

    /// Another pod's anti-affinity, inverse group `group`.
    pub(super) fn inverse(group: GroupId) -> Self {
        Broken {
            group,
            inverse: true,
        }
    }

    /// Either, as `inverse` says.
    pub(super) fn of(group: GroupId, inverse: bool) -> Self {
        Broken { group, inverse }
    }
}

/// A rule a placement would break.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    rule: Rule,
    key: Arc<str>,
    /// Whether it is another pod's anti-affinity.
    inverse: bool,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = short_key(&self.key);
        match (&self.rule, self.inverse) {
            (Rule::Spread { max_skew, .. }, _) => {
                write!(
                    f,
                    "would violate topology spread ({key} maxSkew {max_skew})"
                )
            }
            (Rule::Affinity, _) => write!(f, "would violate pod affinity ({key})"),
            (Rule::AntiAffinity, false) => write!(f, "would violate pod anti-affinity ({key})"),
            (Rule::AntiAffinity, true) => {
                write!(f, "would violate another pod's anti-affinity ({key})")
            }
        }
    }
}

/// The well-known topology keys by their short names, as people say them.
fn short_key(key: &str) -> &str {
    match key {
        LABEL_TOPOLOGY_ZONE => "zone",
        LABEL_HOSTNAME => "hostname",
        LABEL_CAPACITY_TYPE => "capacity-type",
        other => other,
    }
}
