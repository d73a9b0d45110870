//! The requirements algebra: node selector requirements as sets of label values that can be
//! intersected and checked for compatibility, as upstream Karpenter's
//! `pkg/scheduling/requirement.go` and `requirements.go`.
//!
//! A [`Requirement`] constrains one label key. Like upstream it is a set of values that is
//! either the values themselves (`In`; empty means `DoesNotExist`) or their complement (`NotIn`;
//! nothing excluded means `Exists`), plus optional inclusive integer bounds that `Gt`, `Lt`,
//! `Gte` and `Lte` set. [`Requirements`] maps keys to requirements; adding a requirement for a
//! key already present intersects the two.
//!
//! # Representation and cost
//!
//! The scheduler calls [`Requirements::is_compatible`], [`Requirement::intersects`] and
//! [`Requirement::has`] millions of times per simulation, and clones a NodeClaim's requirements
//! every time it tries a pod, so:
//!
//! - values are a sorted, deduplicated `Arc<[Arc<str>]>`: cloning a requirement or a whole
//!   [`Requirements`] bumps reference counts and never copies strings, a lookup is a binary
//!   search, and the common requirement of one or a handful of values is one small allocation
//!   (a hash set would cost an allocation per set and hashing on every lookup);
//! - [`Requirements`] is a vector sorted by key: the usual NodeClaim has ten to twenty keys, so
//!   a binary search beats hashing, iteration and `Display` are in key order for free, and
//!   messages are deterministic (upstream iterates Go maps in random order);
//! - the yes/no questions ([`Requirement::intersects`], [`Requirements::is_compatible`],
//!   [`Requirements::is_intersecting`]) never allocate; the `Result` forms allocate only to
//!   build the error;
//! - [`Requirement::intersection`] reuses an input's value slice when the result equals it
//!   (`Exists` ∩ x, x ∩ x, a subset), which is most intersections the scheduler makes.
//!
//! Bounds are stored inclusive, as upstream since `Gte`/`Lte` arrived: `Gt n` is `Gte n+1` and
//! `Lt n` is `Lte n-1`, so every bounded requirement has one canonical form and derived equality
//! is semantic equality. A value satisfies bounds only if it parses as a decimal `i64`
//! (upstream `strconv.Atoi`); concrete (`In`) sets carry no bounds, their values are filtered
//! instead.

mod requirement;
mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::labels::{self, LabelPolicy};

pub use self::requirement::*;

/// Which keys [`Requirements::compatible`] lets the incoming requirements use although the
/// existing ones do not define them (upstream `CompatibilityOptions.AllowUndefined`).
#[derive(Debug, Clone, Copy)]
pub enum AllowUndefined<'a> {
    /// None: every key the incoming requirements need must be defined, unless they only need
    /// it absent (`NotIn`, `DoesNotExist`). Upstream's default, used for drift.
    NoKeys,
    /// The policy's well-known labels (upstream `AllowUndefinedWellKnownLabels`), used when
    /// scheduling: the provider fills them in from the instance type and offering.
    WellKnownLabels(&'a LabelPolicy),
}

impl<'a> AllowUndefined<'a> {
    fn allows(&self, key: &str) -> bool {
        match self {
            AllowUndefined::NoKeys => false,
            AllowUndefined::WellKnownLabels(policy) => policy.is_well_known(key),
        }
    }

    fn keys(self) -> impl Iterator<Item = &'a str> + 'a {
        let policy = match self {
            AllowUndefined::NoKeys => None,
            AllowUndefined::WellKnownLabels(policy) => Some(policy),
        };
        policy.into_iter().flat_map(LabelPolicy::well_known_labels)
    }
}

/// Two requirements on one key that no label value satisfies together (upstream
/// `badKeyError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {key}, {incoming} not in {existing}")]
pub struct KeyConflict {
    /// The key.
    pub key: String,
    /// The incoming requirement (the argument's).
    pub incoming: Requirement,
    /// The existing requirement (the receiver's).
    pub existing: Requirement,
}

/// Why two sets of requirements are not compatible. The scheduler prefixes it with
/// `incompatible requirements, ` as upstream does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatibilityError {
    /// The incoming requirements need a label the existing ones do not define; the hint names a
    /// defined or well-known key the user may have meant.
    #[error("label {key:?} does not have known values{}", typo_hint(.hint))]
    UndefinedLabel {
        /// The undefined key.
        key: String,
        /// A key it may be a typo of.
        hint: Option<String>,
    },
    /// Keys on which the two sides have no value in common, in key order (upstream joins them
    /// with `; ` through multierr).
    #[error("{}", join_conflicts(.0))]
    Conflicts(Vec<KeyConflict>),
}

fn typo_hint(hint: &Option<String>) -> String {
    hint.as_ref()
        .map_or_else(String::new, |key| format!(" (typo of {key:?}?)"))
}

fn join_conflicts(conflicts: &[KeyConflict]) -> String {
    conflicts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One requirement key whose minValues the launch options do not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmetMinValues {
    /// The key.
    pub key: String,
    /// How many distinct values the options cover.
    pub distinct_values: usize,
    /// How many the requirement asks for.
    pub min_values: u32,
}

/// The launch options do not cover every requirement's minValues.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("minValues requirement is not met for label(s) {}", describe_unmet(.unmet))]
pub struct MinValuesError {
    /// The keys that fall short, in key order.
    pub unmet: Vec<UnmetMinValues>,
}

fn describe_unmet(unmet: &[UnmetMinValues]) -> String {
    unmet
        .iter()
        .map(|u| {
            format!(
                "{} ({} of {} values)",
                u.key, u.distinct_values, u.min_values
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Requirements on several keys, at most one [`Requirement`] per key; adding one for a key
/// already present intersects them. Iteration is in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    // Sorted by key, keys unique: see the module documentation for why not a map.
    by_key: Vec<Requirement>,
}

impl Requirements {
    /// No requirements: everything is allowed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requirements that labels satisfy exactly: `key In [value]` for each label, with
    /// deprecated keys normalised (upstream `NewLabelRequirements`). Pod node selectors and
    /// node labels come in this way.
    pub fn from_labels<I, K, V>(labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        labels
            .into_iter()
            .map(|(key, value)| Requirement::in_values(key.as_ref(), [value.as_ref()]))
            .collect()
    }

    /// Requirements from the API's form, validated and intersected per key (upstream
    /// `NewNodeSelectorRequirementsWithMinValues`); the first invalid one is the error.
    pub fn from_node_selector_requirements<'a, I>(requirements: I) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = &'a NodeSelectorRequirement>,
    {
        requirements
            .into_iter()
            .map(NodeSelectorRequirement::to_requirement)
            .collect()
    }

    /// These requirements in the API's form, in key order.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirement> {
        self.by_key
            .iter()
            .flat_map(Requirement::to_node_selector_requirements)
            .collect()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.by_key.binary_search_by(|r| (*r.key).cmp(key))
    }

    /// Adds a requirement, intersecting it with the existing one for its key if any.
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => {
                let merged = self.by_key[i].intersection(&requirement);
                self.by_key[i] = merged;
            }
            Err(i) => self.by_key.insert(i, requirement),
        }
    }

    /// Adds every requirement of `other` (upstream `Add(other.Values()...)`).
    pub fn add_all(&mut self, other: &Requirements) {
        for requirement in &other.by_key {
            self.add(requirement.clone());
        }
    }

    /// Removes and returns the requirement for `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.position(key).ok().map(|i| self.by_key.remove(i))
    }

    /// The requirement for `key`. An absent key allows any value, but upstream's `Get` answers
    /// `Exists` for it while this answers `None`, so callers see the difference.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.by_key[i])
    }

    /// Whether there is a requirement for `key` (upstream `Has`).
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.by_key.iter().map(Requirement::key)
    }

    /// The requirements, in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Requirement> + '_ {
        self.by_key.iter()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The requirements on keys both sides define, as `(existing, incoming)` pairs in key
    /// order; walks the smaller side and looks up the larger, as upstream's `intersectKeys`.
    fn common_keys<'a>(
        &'a self,
        incoming: &'a Requirements,
    ) -> impl Iterator<Item = (&'a Requirement, &'a Requirement)> + 'a {
        let self_is_smaller = self.len() <= incoming.len();
        let (small, large) = if self_is_smaller {
            (self, incoming)
        } else {
            (incoming, self)
        };
        small.by_key.iter().filter_map(move |s| {
            let l = large.get(&s.key)?;
            Some(if self_is_smaller { (s, l) } else { (l, s) })
        })
    }

    fn conflicts<'a>(
        &'a self,
        incoming: &'a Requirements,
    ) -> impl Iterator<Item = (&'a Requirement, &'a Requirement)> + 'a {
        self.common_keys(incoming).filter(|(existing, incoming)| {
            // Both sides accepting an absent label is agreement, whatever their values.
            let both_accept_absence =
                incoming.operator().allows_absence() && existing.operator().allows_absence();
            !both_accept_absence && !existing.intersects(incoming)
        })
    }

    /// Whether some labels satisfy both `self` and `incoming` on every key both define
    /// (upstream `Intersects`); keys only one side defines are ignored. Every conflicting key is
    /// reported.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), CompatibilityError> {
        let conflicts: Vec<KeyConflict> = self
            .conflicts(incoming)
            .map(|(existing, incoming)| KeyConflict {
                key: existing.key.to_string(),
                incoming: incoming.clone(),
                existing: existing.clone(),
            })
            .collect();
        if conflicts.is_empty() {
            Ok(())
        } else {
            Err(CompatibilityError::Conflicts(conflicts))
        }
    }

    /// [`intersects`](Self::intersects) as a yes/no answer, without allocating.
    pub fn is_intersecting(&self, incoming: &Requirements) -> bool {
        self.conflicts(incoming).next().is_none()
    }

    /// The first key `incoming` needs that `self` does not define and `allow` does not excuse.
    fn first_undefined<'a>(
        &self,
        incoming: &'a Requirements,
        allow: AllowUndefined<'_>,
    ) -> Option<&'a Requirement> {
        incoming.by_key.iter().find(|requirement| {
            !allow.allows(&requirement.key)
                && !requirement.operator().allows_absence()
                && !self.contains_key(&requirement.key)
        })
    }

    /// Whether `incoming` (say a pod's requirements) can be met by `self` (say a NodePool's or
    /// an instance type's), as upstream's `Compatible`: every key `incoming` needs must be
    /// defined by `self`, except keys `allow` excuses and keys `incoming` only needs absent
    /// (`NotIn`, `DoesNotExist`); then the two must [intersect](Self::intersects). Only the
    /// first undefined key is reported, as upstream.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow: AllowUndefined<'_>,
    ) -> Result<(), CompatibilityError> {
        if let Some(undefined) = self.first_undefined(incoming, allow) {
            return Err(CompatibilityError::UndefinedLabel {
                key: undefined.key.to_string(),
                hint: self.typo_hint(&undefined.key, allow).map(str::to_owned),
            });
        }
        self.intersects(incoming)
    }

    /// [`compatible`](Self::compatible) as a yes/no answer, without allocating.
    pub fn is_compatible(&self, incoming: &Requirements, allow: AllowUndefined<'_>) -> bool {
        self.first_undefined(incoming, allow).is_none() && self.is_intersecting(incoming)
    }

    /// A well-known or defined key that `key` may be a typo of (upstream `labelHint`): one that
    /// contains `key`, or ends with the part of `key` after its `/`. Candidates are tried in
    /// sorted order, well-known keys first.
    fn typo_hint<'a>(&'a self, key: &str, allow: AllowUndefined<'a>) -> Option<&'a str> {
        let suffix = key.split_once('/').map_or(key, |(_, name)| name);
        allow
            .keys()
            .chain(self.keys())
            .find(|candidate| candidate.contains(key) || candidate.ends_with(suffix))
    }

    /// Whether a node with these labels satisfies these requirements, as drift checks it
    /// (upstream `NewLabelRequirements(labels).Compatible(requirements)`): every key required
    /// must be labelled unless it is only required absent, and each label value must satisfy
    /// its requirement.
    pub fn matches_labels<I, K, V>(&self, labels: I) -> Result<(), CompatibilityError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        Requirements::from_labels(labels).compatible(self, AllowUndefined::NoKeys)
    }

    /// The labels a node satisfying these requirements should carry (upstream `Labels()`): for
    /// each key the policy does not restrict on nodes, [`Requirement::any_value`]. Well-known
    /// keys are left out because the provider labels them from the instance it launches.
    pub fn labels(&self, policy: &LabelPolicy) -> BTreeMap<String, String> {
        self.by_key
            .iter()
            .filter(|r| !policy.is_restricted_node_label(&r.key))
            .filter_map(|r| Some((r.key.to_string(), r.any_value()?.into_owned())))
            .collect()
    }

    /// Whether any requirement has minValues (upstream `HasMinValues`).
    pub fn has_min_values(&self) -> bool {
        self.by_key.iter().any(|r| r.min_values.is_some())
    }

    /// How many of the leading launch options are needed to cover every minValues (upstream
    /// `InstanceTypes.SatisfiesMinValues`): `options` are the requirements of each option (an
    /// instance type's), in the order they will be tried; for each key with minValues the
    /// distinct `In` values of the options are counted until every key has enough. `Ok(0)` when
    /// no requirement has minValues.
    ///
    /// Options that leave a key undefined or only exclude values add nothing for it (upstream
    /// would count the excluded values). With no options every key falls short, where upstream
    /// returns success.
    pub fn satisfies_min_values<'a, I>(&self, options: I) -> Result<usize, MinValuesError>
    where
        I: IntoIterator<Item = &'a Requirements>,
    {
        let mut tracked: Vec<(&Requirement, u32, BTreeSet<&'a str>)> = self
            .by_key
            .iter()
            .filter_map(|r| Some((r, r.min_values?, BTreeSet::new())))
            .collect();
        if tracked.is_empty() {
            return Ok(0);
        }
        for (index, option) in options.into_iter().enumerate() {
            for (requirement, _, seen) in &mut tracked {
                if let Some(offered) = option.get(&requirement.key)
                    && !offered.complement
                {
                    seen.extend(offered.values.iter());
                }
            }
            if tracked
                .iter()
                .all(|(_, min, seen)| seen.len() >= *min as usize)
            {
                return Ok(index + 1);
            }
        }
        Err(MinValuesError {
            unmet: tracked
                .iter()
                .filter(|(_, min, seen)| seen.len() < *min as usize)
                .map(|(requirement, min, seen)| UnmetMinValues {
                    key: requirement.key.to_string(),
                    distinct_values: seen.len(),
                    min_values: *min,
                })
                .collect(),
        })
    }
}

impl Extend<Requirement> for Requirements {
    fn extend<T: IntoIterator<Item = Requirement>>(&mut self, iter: T) {
        for requirement in iter {
            self.add(requirement);
        }
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut requirements = Self::new();
        requirements.extend(iter);
        requirements
    }
}

/// Upstream's style: each requirement, in key order, joined with `, `, leaving out
/// [`labels::RESTRICTED_LABELS`] (the hostname requirement of every NodeClaim is noise).
impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self
            .by_key
            .iter()
            .filter(|r| !labels::RESTRICTED_LABELS.contains(&&*r.key));
        for (i, requirement) in shown.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
