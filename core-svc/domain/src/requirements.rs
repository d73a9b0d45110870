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

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::labels::{self, LabelPolicy};

/// How many values `Display` prints before summarising the rest, as upstream.
const DISPLAYED_VALUES: usize = 5;

/// A node selector operator: the four of Kubernetes' `NodeSelectorOperator` that test
/// membership, the two that compare integers, and Karpenter's inclusive `Gte` and `Lte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present, with any value.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than the value.
    Gt,
    /// The label is an integer less than the value.
    Lt,
    /// The label is an integer greater than or equal to the value.
    Gte,
    /// The label is an integer less than or equal to the value.
    Lte,
}

impl Operator {
    /// Every operator, in the order of the API's enum.
    pub const ALL: [Operator; 8] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ];

    /// The operator as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Whether the operator compares integers and so takes exactly one integer value.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }

    /// `NotIn` and `DoesNotExist` are satisfied by an absent label, which is what makes an
    /// undefined key acceptable in [`Requirements::compatible`].
    fn allows_absence(self) -> bool {
        matches!(self, Operator::NotIn | Operator::DoesNotExist)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Operator {
    type Err = RequirementError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operator::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| RequirementError::UnknownOperator {
                operator: s.to_owned(),
            })
    }
}

/// Why a requirement cannot be built from a key, an operator, values and minValues. The
/// messages follow upstream's requirement validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// `In` with no values.
    #[error("key {key} with operator {operator} must have a value defined")]
    MissingValues {
        /// The requirement's key.
        key: String,
        /// The requirement's operator.
        operator: Operator,
    },
    /// `Exists` or `DoesNotExist` with values.
    #[error("key {key} with operator {operator} must not have values, got {values:?}")]
    UnexpectedValues {
        /// The requirement's key.
        key: String,
        /// The requirement's operator.
        operator: Operator,
        /// The values it was given.
        values: Vec<String>,
    },
    /// `Gt`, `Lt`, `Gte` or `Lte` without exactly one non-negative integer value.
    #[error(
        "key {key} with operator {operator} must have a single non-negative integer value, got \
         {values:?}"
    )]
    InvalidBound {
        /// The requirement's key.
        key: String,
        /// The requirement's operator.
        operator: Operator,
        /// The values it was given.
        values: Vec<String>,
    },
    /// minValues of zero.
    #[error("key {key} has minValues 0, minValues must be at least 1")]
    ZeroMinValues {
        /// The requirement's key.
        key: String,
    },
    /// `In` with minValues greater than its number of values.
    #[error(
        "key {key} with operator {operator} must have at least minimum number of values defined \
         in 'values' field: minValues is {min_values}, values has {count}"
    )]
    TooFewValuesForMinValues {
        /// The requirement's key.
        key: String,
        /// The requirement's operator.
        operator: Operator,
        /// The requirement's minValues.
        min_values: u32,
        /// How many values it has.
        count: usize,
    },
    /// An operator the API does not define.
    #[error(
        "unknown operator {operator:?}, expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, \
         Gte, Lte"
    )]
    UnknownOperator {
        /// The operator as given.
        operator: String,
    },
}

/// A node selector requirement in the API's shape (upstream
/// `NodeSelectorRequirementWithMinValues`), the form requirements are read from and written to
/// NodePools, NodeClaims and pods. Callers convert from and to the Kubernetes types at their
/// edge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the label relates to the values.
    pub operator: Operator,
    /// The values.
    pub values: Vec<String>,
    /// The minimum number of distinct values the launch options must cover, if any.
    pub min_values: Option<u32>,
}

impl NodeSelectorRequirement {
    /// Validates this requirement and builds the [`Requirement`] it means.
    pub fn to_requirement(&self) -> Result<Requirement, RequirementError> {
        Requirement::new(&self.key, self.operator, &self.values, self.min_values)
    }
}

/// Sorted, deduplicated label values, shared between clones; `None` is the empty set so that
/// `Exists` and `DoesNotExist` never allocate a value slice.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
struct ValueSet(Option<Arc<[Arc<str>]>>);

impl fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl ValueSet {
    fn from_sorted_unique(values: Vec<Arc<str>>) -> Self {
        if values.is_empty() {
            Self(None)
        } else {
            Self(Some(values.into()))
        }
    }

    fn from_unsorted<I>(values: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut values: Vec<Arc<str>> = values.into_iter().map(|v| Arc::from(v.as_ref())).collect();
        values.sort_unstable();
        values.dedup();
        Self::from_sorted_unique(values)
    }

    fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().unwrap_or(&[])
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.as_slice().iter().map(|v| &**v)
    }

    fn contains(&self, value: &str) -> bool {
        self.as_slice()
            .binary_search_by(|v| (**v).cmp(value))
            .is_ok()
    }

    /// The values `keep` accepts; shares `self` when it accepts them all, which is the common
    /// case and saves the allocation.
    fn retain_or_share(&self, mut keep: impl FnMut(&str) -> bool) -> Self {
        let values = self.as_slice();
        match values.iter().position(|v| !keep(v)) {
            None => self.clone(),
            Some(first_dropped) => {
                let mut kept = Vec::with_capacity(values.len() - 1);
                kept.extend_from_slice(&values[..first_dropped]);
                kept.extend(
                    values[first_dropped + 1..]
                        .iter()
                        .filter(|v| keep(v))
                        .cloned(),
                );
                Self::from_sorted_unique(kept)
            }
        }
    }

    fn intersection(&self, other: &Self) -> Self {
        let (small, large) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.retain_or_share(|v| large.contains(v))
    }

    /// `self` without the values of `other`.
    fn difference(&self, other: &Self) -> Self {
        if other.is_empty() {
            return self.clone();
        }
        self.retain_or_share(|v| !other.contains(v))
    }

    fn is_subset(&self, other: &Self) -> bool {
        self.len() <= other.len() && self.iter().all(|v| other.contains(v))
    }

    fn union(&self, other: &Self) -> Self {
        if other.is_subset(self) {
            return self.clone();
        }
        if self.is_subset(other) {
            return other.clone();
        }
        let (a, b) = (self.as_slice(), other.as_slice());
        let mut merged = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => {
                    merged.push(a[i].clone());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    merged.push(b[j].clone());
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    merged.push(a[i].clone());
                    i += 1;
                    j += 1;
                }
            }
        }
        merged.extend_from_slice(&a[i..]);
        merged.extend_from_slice(&b[j..]);
        Self::from_sorted_unique(merged)
    }
}

/// Whether `value` is an integer within the inclusive bounds; with no bounds every value is.
/// Non-integers never satisfy a bound, as upstream.
fn within_bounds(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    gte.is_none_or(|lo| n >= lo) && lte.is_none_or(|hi| n <= hi)
}

fn max_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The constraint on one label key.
///
/// Invariants that keep derived equality semantic: a concrete set (`complement == false`) has
/// no bounds; a complement set excludes only values within its bounds; and when both bounds are
/// set the lower is at most the upper (an empty range collapses to `DoesNotExist`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Arc<str>,
    complement: bool,
    values: ValueSet,
    gte: Option<i64>,
    lte: Option<i64>,
    min_values: Option<u32>,
}

impl Requirement {
    /// Builds the requirement `key operator values`, validated as the API validates
    /// NodePool requirements: `In` needs a value; `Exists` and `DoesNotExist` take none; `Gt`,
    /// `Lt`, `Gte` and `Lte` take exactly one non-negative integer; minValues is at least 1 and,
    /// with `In`, at most the number of values. A deprecated key is normalised.
    pub fn new<S: AsRef<str>>(
        key: &str,
        operator: Operator,
        values: &[S],
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError> {
        let owned_values = || values.iter().map(|v| v.as_ref().to_owned()).collect();
        if min_values == Some(0) {
            return Err(RequirementError::ZeroMinValues {
                key: key.to_owned(),
            });
        }
        let requirement = match operator {
            Operator::In => {
                if values.is_empty() {
                    return Err(RequirementError::MissingValues {
                        key: key.to_owned(),
                        operator,
                    });
                }
                if let Some(min) = min_values
                    && values.len() < min as usize
                {
                    return Err(RequirementError::TooFewValuesForMinValues {
                        key: key.to_owned(),
                        operator,
                        min_values: min,
                        count: values.len(),
                    });
                }
                Self::in_values(key, values.iter().map(AsRef::as_ref))
            }
            Operator::NotIn => Self::not_in(key, values.iter().map(AsRef::as_ref)),
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(RequirementError::UnexpectedValues {
                        key: key.to_owned(),
                        operator,
                        values: owned_values(),
                    });
                }
                if operator == Operator::Exists {
                    Self::exists(key)
                } else {
                    Self::does_not_exist(key)
                }
            }
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let bound = match values {
                    [only] => only.as_ref().parse::<i64>().ok().filter(|n| *n >= 0),
                    _ => None,
                };
                let Some(bound) = bound else {
                    return Err(RequirementError::InvalidBound {
                        key: key.to_owned(),
                        operator,
                        values: owned_values(),
                    });
                };
                match operator {
                    Operator::Gt => Self::greater_than(key, bound),
                    Operator::Lt => Self::less_than(key, bound),
                    Operator::Gte => Self::at_least(key, bound),
                    _ => Self::at_most(key, bound),
                }
            }
        };
        Ok(requirement.with_min_values(min_values))
    }

    fn from_parts(key: &str, complement: bool, values: ValueSet) -> Self {
        Self {
            key: Arc::from(labels::normalize_label_key(key)),
            complement,
            values,
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key Exists`: any value, but the label must be present.
    pub fn exists(key: &str) -> Self {
        Self::from_parts(key, true, ValueSet::default())
    }

    /// `key DoesNotExist`: the label must be absent.
    pub fn does_not_exist(key: &str) -> Self {
        Self::from_parts(key, false, ValueSet::default())
    }

    /// `key In values`. With no values nothing satisfies it, the same as `DoesNotExist` (the
    /// validating [`new`](Self::new) refuses that; this constructor does not).
    pub fn in_values<I>(key: &str, values: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::from_parts(key, false, ValueSet::from_unsorted(values))
    }

    /// `key In values` for values already shared elsewhere (say the names of the instance
    /// types a NodeClaim may launch): the strings are not copied, and requirements built from
    /// the same vector share one value slice.
    pub fn in_shared_values(key: &str, mut values: Vec<Arc<str>>) -> Self {
        values.sort_unstable();
        values.dedup();
        Self::from_parts(key, false, ValueSet::from_sorted_unique(values))
    }

    /// `key NotIn values`; with no values, the same as `Exists`.
    pub fn not_in<I>(key: &str, values: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::from_parts(key, true, ValueSet::from_unsorted(values))
    }

    /// `key Gt n`: an integer greater than `n`, stored as `Gte n+1`.
    pub fn greater_than(key: &str, n: i64) -> Self {
        match n.checked_add(1) {
            Some(lower) => Self::at_least(key, lower),
            None => Self::does_not_exist(key),
        }
    }

    /// `key Lt n`: an integer less than `n`, stored as `Lte n-1`.
    pub fn less_than(key: &str, n: i64) -> Self {
        match n.checked_sub(1) {
            Some(upper) => Self::at_most(key, upper),
            None => Self::does_not_exist(key),
        }
    }

    /// `key Gte n`: an integer greater than or equal to `n`.
    pub fn at_least(key: &str, n: i64) -> Self {
        Self {
            gte: Some(n),
            ..Self::exists(key)
        }
    }

    /// `key Lte n`: an integer less than or equal to `n`.
    pub fn at_most(key: &str, n: i64) -> Self {
        Self {
            lte: Some(n),
            ..Self::exists(key)
        }
    }

    /// This requirement with its minValues replaced.
    #[must_use]
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    /// The (normalised) label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The minimum number of distinct values the launch options must cover, if any.
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// The inclusive lower bound, if any (`Gt n` reports `n+1`).
    pub fn lower_bound(&self) -> Option<i64> {
        self.gte
    }

    /// The inclusive upper bound, if any (`Lt n` reports `n-1`).
    pub fn upper_bound(&self) -> Option<i64> {
        self.lte
    }

    /// The set operator this requirement amounts to, as upstream's `Operator()`: `In` (some
    /// values), `DoesNotExist` (no value), `NotIn` (all but some values) or `Exists` (all
    /// values). A bounded requirement reports `Exists` or `NotIn`; its bounds are in
    /// [`lower_bound`](Self::lower_bound) and [`upper_bound`](Self::upper_bound), and
    /// [`to_node_selector_requirements`](Self::to_node_selector_requirements) writes them as
    /// `Gte`/`Lte`. Compatibility relies on exactly this mapping.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, true) => Operator::Exists,
            (true, false) => Operator::NotIn,
            (false, true) => Operator::DoesNotExist,
            (false, false) => Operator::In,
        }
    }

    /// The values, sorted: the allowed ones for `In`, the excluded ones for `NotIn`, none for
    /// `Exists` and `DoesNotExist` (as upstream's `Values()`).
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.values.iter()
    }

    /// How many values satisfy the requirement, as upstream's `Len()`: the number of values for
    /// a concrete set, and `usize::MAX` minus the excluded ones for a complement (bounds are not
    /// counted, so `Gt 1` is "infinite" too).
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// Whether no value satisfies the requirement (it amounts to `DoesNotExist`).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// Whether `value` satisfies the requirement, bounds included.
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && within_bounds(value, self.gte, self.lte)
        } else {
            self.values.contains(value)
        }
    }

    /// The requirement both `self` and `other` impose. The key is `self`'s and minValues the
    /// larger of the two.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let complement = self.complement && other.complement;
        let gte = max_option(self.gte, other.gte);
        let lte = min_option(self.lte, other.lte);
        let min_values = max_option(self.min_values, other.min_values);
        if let (Some(lower), Some(upper)) = (gte, lte)
            && lower > upper
        {
            return Self {
                key: self.key.clone(),
                complement: false,
                values: ValueSet::default(),
                gte: None,
                lte: None,
                min_values,
            };
        }
        let values = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values),
            (true, false) => other.values.difference(&self.values),
            (false, true) => self.values.difference(&other.values),
            (false, false) => self.values.intersection(&other.values),
        };
        let values = if gte.is_some() || lte.is_some() {
            values.retain_or_share(|v| within_bounds(v, gte, lte))
        } else {
            values
        };
        let (gte, lte) = if complement { (gte, lte) } else { (None, None) };
        Self {
            key: self.key.clone(),
            complement,
            values,
            gte,
            lte,
            min_values,
        }
    }

    /// Whether some value satisfies both `self` and `other`, without building the intersection
    /// (upstream `HasIntersection`). Two complements always intersect: infinitely many strings
    /// parse to any integer in a non-empty range (`5`, `05`, `+5`, ...).
    pub fn intersects(&self, other: &Requirement) -> bool {
        let gte = max_option(self.gte, other.gte);
        let lte = min_option(self.lte, other.lte);
        if let (Some(lower), Some(upper)) = (gte, lte)
            && lower > upper
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within_bounds(v, gte, lte)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within_bounds(v, gte, lte)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.iter().any(|v| large.contains(v))
            }
        }
    }

    /// A value that satisfies the requirement, for labelling a node that must satisfy it
    /// (upstream `Any()`): the smallest value of an `In`; for `Exists` and `NotIn` the smallest
    /// integer from the lower bound (or 0) that is not excluded, or failing that the largest
    /// below 0 when there is no lower bound; `None` for `DoesNotExist` and for a bounded range
    /// whose every integer is excluded. Upstream picks a random integer; a deterministic one
    /// keeps simulations reproducible.
    pub fn any_value(&self) -> Option<Cow<'_, str>> {
        if !self.complement {
            return self.values.iter().next().map(Cow::Borrowed);
        }
        let upper = self.lte.unwrap_or(i64::MAX);
        let start = self.gte.unwrap_or_else(|| upper.min(0));
        let allowed = |n: i64| {
            let text = n.to_string();
            (!self.values.contains(&text)).then_some(Cow::Owned(text))
        };
        // Each search ends within `values.len() + 1` steps: only that many integers are excluded.
        let upward = (start..=upper).find_map(allowed);
        if upward.is_some() || self.gte.is_some() {
            return upward;
        }
        (i64::MIN..start).rev().find_map(allowed)
    }

    /// This requirement in the API's shape. A complement with exclusions and bounds needs
    /// several entries with the same key (ANDed, as in a node selector term); upstream writes
    /// only the bound and drops the exclusions. A negative inclusive upper bound (`Lt 0`) is
    /// written as `Lt`, because the API refuses negative values.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirement> {
        let entry = |operator: Operator, values: Vec<String>| NodeSelectorRequirement {
            key: self.key.to_string(),
            operator,
            values,
            min_values: self.min_values,
        };
        let values = || self.values.iter().map(str::to_owned).collect::<Vec<_>>();
        if !self.complement {
            return vec![if self.values.is_empty() {
                entry(Operator::DoesNotExist, Vec::new())
            } else {
                entry(Operator::In, values())
            }];
        }
        let mut entries = Vec::with_capacity(1);
        if !self.values.is_empty() {
            entries.push(entry(Operator::NotIn, values()));
        }
        if let Some(lower) = self.gte {
            entries.push(match lower.checked_sub(1) {
                Some(below) if lower < 0 => entry(Operator::Gt, vec![below.to_string()]),
                _ => entry(Operator::Gte, vec![lower.to_string()]),
            });
        }
        if let Some(upper) = self.lte {
            entries.push(match upper.checked_add(1) {
                Some(above) if upper < 0 => entry(Operator::Lt, vec![above.to_string()]),
                _ => entry(Operator::Lte, vec![upper.to_string()]),
            });
        }
        if entries.is_empty() {
            entries.push(entry(Operator::Exists, Vec::new()));
        }
        entries
    }
}

/// Upstream's style: `key In [a b]`, `key Exists`, at most five values then `and N others`,
/// then the bounds (`>=2 <=8`) and minValues.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operator = self.operator();
        write!(f, "{} {operator}", self.key)?;
        if !matches!(operator, Operator::Exists | Operator::DoesNotExist) {
            f.write_str(" [")?;
            for (i, value) in self.values.iter().take(DISPLAYED_VALUES).enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                f.write_str(value)?;
            }
            if self.values.len() > DISPLAYED_VALUES {
                write!(f, " and {} others", self.values.len() - DISPLAYED_VALUES)?;
            }
            f.write_str("]")?;
        }
        if let Some(lower) = self.gte {
            write!(f, " >={lower}")?;
        }
        if let Some(upper) = self.lte {
            write!(f, " <={upper}")?;
        }
        if let Some(min_values) = self.min_values {
            write!(f, " minValues {min_values}")?;
        }
        Ok(())
    }
}

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
mod tests {
    use super::*;
    use crate::labels::{
        LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_OS,
        LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE,
    };
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    fn reqs<I: IntoIterator<Item = Requirement>>(items: I) -> Requirements {
        items.into_iter().collect()
    }

    /// Upstream's fixtures (`requirement_test.go`), on one key.
    const FIXTURE_NAMES: [&str; 14] = [
        "exists", "dne", "inA", "inB", "inAB", "notInA", "in1", "in9", "in19", "notIn12", "gt1",
        "gt9", "lt1", "lt9",
    ];

    fn fixture(key: &str, name: &str) -> Requirement {
        let op = |operator, values: &[&str]| Requirement::new(key, operator, values, None).unwrap();
        match name {
            "exists" => op(Operator::Exists, &[]),
            "dne" => op(Operator::DoesNotExist, &[]),
            "inA" => op(Operator::In, &["A"]),
            "inB" => op(Operator::In, &["B"]),
            "inAB" => op(Operator::In, &["A", "B"]),
            "notInA" => op(Operator::NotIn, &["A"]),
            "in1" => op(Operator::In, &["1"]),
            "in9" => op(Operator::In, &["9"]),
            "in19" => op(Operator::In, &["1", "9"]),
            "notIn12" => op(Operator::NotIn, &["1", "2"]),
            "gt1" => op(Operator::Gt, &["1"]),
            "gt9" => op(Operator::Gt, &["9"]),
            "lt1" => op(Operator::Lt, &["1"]),
            "lt9" => op(Operator::Lt, &["9"]),
            // Results upstream spells out as structs.
            "notInA12" => op(Operator::NotIn, &["A", "1", "2"]),
            "notIn2gt1" => {
                Requirement::greater_than(key, 1).intersection(&op(Operator::NotIn, &["2"]))
            }
            "notIn12lt9" => {
                Requirement::less_than(key, 9).intersection(&op(Operator::NotIn, &["1", "2"]))
            }
            "gt1lt9" => {
                Requirement::greater_than(key, 1).intersection(&Requirement::less_than(key, 9))
            }
            other => panic!("unknown fixture {other}"),
        }
    }

    fn fixtures(key: &str) -> Vec<(&'static str, Requirement)> {
        FIXTURE_NAMES
            .iter()
            .map(|&n| (n, fixture(key, n)))
            .collect()
    }

    #[test]
    fn intersection_matches_upstream_table() {
        // Row ∩ column, columns in FIXTURE_NAMES order (upstream's "Intersect requirements").
        #[rustfmt::skip]
        let table: [(&str, [&str; 14]); 14] = [
            //           exists     dne    inA    inB    inAB    notInA      in1    in9    in19    notIn12      gt1          gt9    lt1    lt9
            ("exists",  ["exists",  "dne", "inA", "inB", "inAB", "notInA",   "in1", "in9", "in19", "notIn12",   "gt1",       "gt9", "lt1", "lt9"]),
            ("dne",     ["dne"; 14]),
            ("inA",     ["inA",     "dne", "inA", "dne", "inA",  "dne",      "dne", "dne", "dne",  "inA",       "dne",       "dne", "dne", "dne"]),
            ("inB",     ["inB",     "dne", "dne", "inB", "inB",  "inB",      "dne", "dne", "dne",  "inB",       "dne",       "dne", "dne", "dne"]),
            ("inAB",    ["inAB",    "dne", "inA", "inB", "inAB", "inB",      "dne", "dne", "dne",  "inAB",      "dne",       "dne", "dne", "dne"]),
            ("notInA",  ["notInA",  "dne", "dne", "inB", "inB",  "notInA",   "in1", "in9", "in19", "notInA12",  "gt1",       "gt9", "lt1", "lt9"]),
            ("in1",     ["in1",     "dne", "dne", "dne", "dne",  "in1",      "in1", "dne", "in1",  "dne",       "dne",       "dne", "dne", "in1"]),
            ("in9",     ["in9",     "dne", "dne", "dne", "dne",  "in9",      "dne", "in9", "in9",  "in9",       "in9",       "dne", "dne", "dne"]),
            ("in19",    ["in19",    "dne", "dne", "dne", "dne",  "in19",     "in1", "in9", "in19", "in9",       "in9",       "dne", "dne", "in1"]),
            ("notIn12", ["notIn12", "dne", "inA", "inB", "inAB", "notInA12", "dne", "in9", "in9",  "notIn12",   "notIn2gt1", "gt9", "lt1", "notIn12lt9"]),
            ("gt1",     ["gt1",     "dne", "dne", "dne", "dne",  "gt1",      "dne", "in9", "in9",  "notIn2gt1", "gt1",       "gt9", "dne", "gt1lt9"]),
            ("gt9",     ["gt9",     "dne", "dne", "dne", "dne",  "gt9",      "dne", "dne", "dne",  "gt9",       "gt9",       "gt9", "dne", "dne"]),
            ("lt1",     ["lt1",     "dne", "dne", "dne", "dne",  "lt1",      "dne", "dne", "dne",  "lt1",       "dne",       "dne", "lt1", "lt1"]),
            ("lt9",     ["lt9",     "dne", "dne", "dne", "dne",  "lt9",      "in1", "dne", "in1",  "notIn12lt9", "gt1lt9",   "dne", "lt1", "lt9"]),
        ];
        let mut checked = 0;
        for (row, expected_row) in table {
            let left = fixture("key", row);
            for (column, expected) in FIXTURE_NAMES.iter().zip(expected_row) {
                let right = fixture("key", column);
                assert_eq!(
                    left.intersection(&right),
                    fixture("key", expected),
                    "{row} ∩ {column} should be {expected}"
                );
                assert_eq!(
                    left.intersects(&right),
                    expected != "dne",
                    "{row} intersects {column}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 196);
        // The special results, spelled out so the fixtures above cannot hide a mistake.
        assert_eq!(fixture("key", "notIn2gt1").to_string(), "key NotIn [2] >=2");
        assert_eq!(
            fixture("key", "notIn12lt9").to_string(),
            "key NotIn [1 2] <=8"
        );
        assert_eq!(fixture("key", "gt1lt9").to_string(), "key Exists >=2 <=8");
        assert_eq!(fixture("key", "notInA12").to_string(), "key NotIn [1 2 A]");
    }

    #[test]
    fn shared_values_equal_copied_ones_and_share_their_slice() {
        let names: Vec<Arc<str>> = vec!["m5.large".into(), "c5.large".into(), "m5.large".into()];
        let shared = Requirement::in_shared_values(LABEL_INSTANCE_TYPE, names.clone());
        assert_eq!(
            shared,
            Requirement::in_values(LABEL_INSTANCE_TYPE, ["c5.large", "m5.large"])
        );
        let again = Requirement::in_shared_values(LABEL_INSTANCE_TYPE, names.clone());
        let (Some(a), Some(b)) = (&shared.values.0, &again.values.0) else {
            panic!("both have values");
        };
        assert!(
            Arc::ptr_eq(&a[0], &b[0]),
            "the strings are the caller's, not copies"
        );
        assert!(Arc::ptr_eq(&a[1], &names[0]));
    }

    #[test]
    fn intersection_keeps_the_larger_min_values() {
        let with = |name: &str, min| fixture("key", name).with_min_values(Some(min));
        let cases = [
            (
                with("exists", 1),
                fixture("key", "inAB"),
                Requirement::in_values("key", ["A", "B"]).with_min_values(Some(1)),
            ),
            (with("exists", 1), fixture("key", "dne"), with("dne", 1)),
            (
                with("notIn12", 2),
                with("lt1", 1),
                fixture("key", "lt1").with_min_values(Some(2)),
            ),
            (
                with("lt9", 1),
                with("in19", 2),
                Requirement::in_values("key", ["1"]).with_min_values(Some(2)),
            ),
            (with("gt9", 1), with("lt9", 3), with("dne", 3)),
            (
                fixture("key", "inA"),
                fixture("key", "inA"),
                fixture("key", "inA"),
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(a.intersection(&b), expected, "{a} ∩ {b}");
            assert_eq!(b.intersection(&a), expected, "{b} ∩ {a}");
        }
    }

    #[test]
    fn has_matches_upstream_table() {
        // Columns: A, B, 1, 2, 9.
        let table = [
            ("exists", [true, true, true, true, true]),
            ("dne", [false; 5]),
            ("inA", [true, false, false, false, false]),
            ("inB", [false, true, false, false, false]),
            ("inAB", [true, true, false, false, false]),
            ("notInA", [false, true, true, true, true]),
            ("in1", [false, false, true, false, false]),
            ("in9", [false, false, false, false, true]),
            ("in19", [false, false, true, false, true]),
            ("notIn12", [true, true, false, false, true]),
            ("gt1", [false, false, false, true, true]),
            ("gt9", [false; 5]),
            ("lt1", [false; 5]),
            ("lt9", [false, false, true, true, false]),
        ];
        for (name, expected) in table {
            let requirement = fixture("key", name);
            for (value, want) in ["A", "B", "1", "2", "9"].into_iter().zip(expected) {
                assert_eq!(requirement.has(value), want, "{name} has {value}");
            }
        }
    }

    #[test]
    fn operator_len_display_and_any_match_upstream() {
        // (name, operator, len, display, any)
        let table: [(&str, Operator, usize, &str, Option<&str>); 14] = [
            (
                "exists",
                Operator::Exists,
                usize::MAX,
                "key Exists",
                Some("0"),
            ),
            ("dne", Operator::DoesNotExist, 0, "key DoesNotExist", None),
            ("inA", Operator::In, 1, "key In [A]", Some("A")),
            ("inB", Operator::In, 1, "key In [B]", Some("B")),
            ("inAB", Operator::In, 2, "key In [A B]", Some("A")),
            (
                "notInA",
                Operator::NotIn,
                usize::MAX - 1,
                "key NotIn [A]",
                Some("0"),
            ),
            ("in1", Operator::In, 1, "key In [1]", Some("1")),
            ("in9", Operator::In, 1, "key In [9]", Some("9")),
            ("in19", Operator::In, 2, "key In [1 9]", Some("1")),
            (
                "notIn12",
                Operator::NotIn,
                usize::MAX - 2,
                "key NotIn [1 2]",
                Some("0"),
            ),
            (
                "gt1",
                Operator::Exists,
                usize::MAX,
                "key Exists >=2",
                Some("2"),
            ),
            (
                "gt9",
                Operator::Exists,
                usize::MAX,
                "key Exists >=10",
                Some("10"),
            ),
            (
                "lt1",
                Operator::Exists,
                usize::MAX,
                "key Exists <=0",
                Some("0"),
            ),
            (
                "lt9",
                Operator::Exists,
                usize::MAX,
                "key Exists <=8",
                Some("0"),
            ),
        ];
        for (name, operator, len, display, any) in table {
            let requirement = fixture("key", name);
            assert_eq!(requirement.operator(), operator, "{name}");
            assert_eq!(requirement.len(), len, "{name}");
            assert_eq!(requirement.is_empty(), len == 0, "{name}");
            assert_eq!(requirement.to_string(), display, "{name}");
            assert_eq!(requirement.any_value().as_deref(), any, "{name}");
            if let Some(value) = requirement.any_value() {
                assert!(
                    requirement.has(&value),
                    "{name} any {value} must satisfy it"
                );
            }
        }
        assert_eq!(
            fixture("key", "gt9")
                .intersection(&fixture("key", "lt1"))
                .to_string(),
            "key DoesNotExist"
        );
    }

    #[test]
    fn display_summarises_long_value_lists_and_shows_min_values() {
        let many = Requirement::in_values("key", ["g", "f", "e", "d", "c", "b", "a"]);
        assert_eq!(many.to_string(), "key In [a b c d e and 2 others]");
        let five = Requirement::in_values("key", ["e", "d", "c", "b", "a"]);
        assert_eq!(five.to_string(), "key In [a b c d e]");
        let flexible = Requirement::new("key", Operator::In, &["a", "b"], Some(2)).unwrap();
        assert_eq!(flexible.to_string(), "key In [a b] minValues 2");
    }

    #[test]
    fn any_value_skips_excluded_integers_and_respects_bounds() {
        let not_in = Requirement::not_in("key", ["0", "1", "3"]);
        assert_eq!(not_in.any_value().as_deref(), Some("2"));
        let bounded =
            Requirement::at_least("key", 5).intersection(&Requirement::not_in("key", ["5", "6"]));
        assert_eq!(bounded.any_value().as_deref(), Some("7"));
        let negative = Requirement::less_than("key", 0);
        assert_eq!(negative.any_value().as_deref(), Some("-1"));
        let exhausted = Requirement::at_least("key", 5)
            .intersection(&Requirement::at_most("key", 5))
            .intersection(&Requirement::not_in("key", ["5"]));
        assert_eq!(exhausted.any_value(), None);
        let top = Requirement::at_least("key", i64::MAX);
        assert_eq!(top.any_value().as_deref(), Some("9223372036854775807"));
    }

    #[test]
    fn gte_and_lte_are_gt_and_lt_shifted_by_one() {
        for n in [0_i64, 1, 7, 1_000_000] {
            assert_eq!(
                Requirement::at_least("key", n),
                Requirement::greater_than("key", n - 1)
            );
            assert_eq!(
                Requirement::at_most("key", n),
                Requirement::less_than("key", n + 1)
            );
            let gte = Requirement::new("key", Operator::Gte, &[n.to_string()], None).unwrap();
            assert!(gte.has(&n.to_string()));
            assert!(!gte.has(&(n - 1).to_string()));
            let lte = Requirement::new("key", Operator::Lte, &[n.to_string()], None).unwrap();
            assert!(lte.has(&n.to_string()));
            assert!(!lte.has(&(n + 1).to_string()));
        }
        assert!(Requirement::greater_than("key", i64::MAX).is_empty());
        assert!(Requirement::less_than("key", i64::MIN).is_empty());
        let gt_max =
            Requirement::new("key", Operator::Gt, &[i64::MAX.to_string()], Some(2)).unwrap();
        assert_eq!(
            gt_max,
            Requirement::does_not_exist("key").with_min_values(Some(2))
        );
    }

    #[test]
    fn bounds_reject_non_integers_and_accept_signed_forms() {
        let gt = Requirement::greater_than("key", 4);
        for (value, want) in [
            ("5", true),
            ("4", false),
            ("+5", true),
            ("05", true),
            ("5.0", false),
            ("five", false),
            ("", false),
            (" 5", false),
            ("-5", false),
        ] {
            assert_eq!(gt.has(value), want, "Gt 4 has {value:?}");
        }
    }

    #[test]
    fn new_validates_like_the_api() {
        let err = |op, values: &[&str], min| {
            Requirement::new("k", op, values, min)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(Operator::In, &[], None),
            "key k with operator In must have a value defined"
        );
        assert_eq!(
            err(Operator::Exists, &["a"], None),
            "key k with operator Exists must not have values, got [\"a\"]"
        );
        assert_eq!(
            err(Operator::DoesNotExist, &["a"], None),
            "key k with operator DoesNotExist must not have values, got [\"a\"]"
        );
        for op in [Operator::Gt, Operator::Lt, Operator::Gte, Operator::Lte] {
            for values in [
                &[][..],
                &["1", "2"],
                &["x"],
                &["-1"],
                &["1.5"],
                &["99999999999999999999"],
            ] {
                assert_eq!(
                    err(op, values, None),
                    format!(
                        "key k with operator {op} must have a single non-negative integer value, got {values:?}"
                    )
                );
            }
        }
        assert_eq!(
            err(Operator::In, &["a"], Some(0)),
            "key k has minValues 0, minValues must be at least 1"
        );
        assert_eq!(
            err(Operator::In, &["a", "b"], Some(3)),
            "key k with operator In must have at least minimum number of values defined in 'values' field: minValues is 3, values has 2"
        );
        assert_eq!(
            "Above".parse::<Operator>().unwrap_err().to_string(),
            "unknown operator \"Above\", expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
        );
        // What the API allows.
        assert!(
            Requirement::new("k", Operator::NotIn, &[] as &[&str], None)
                .unwrap()
                .operator()
                == Operator::Exists
        );
        assert!(Requirement::new("k", Operator::Gt, &["0"], Some(50)).is_ok());
        assert!(Requirement::new("k", Operator::Exists, &[] as &[&str], Some(3)).is_ok());
        assert_eq!(
            Requirement::new("k", Operator::In, &["b", "a", "b"], Some(3))
                .unwrap()
                .values()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn operators_round_trip_through_their_names() {
        for op in Operator::ALL {
            assert_eq!(op.as_str().parse::<Operator>().unwrap(), op);
            assert_eq!(op.to_string(), op.as_str());
            assert_eq!(
                op.is_bound(),
                matches!(
                    op,
                    Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
                )
            );
        }
    }

    #[test]
    fn deprecated_keys_are_normalised_on_construction() {
        let labels = [
            ("failure-domain.beta.kubernetes.io/zone", "test"),
            ("failure-domain.beta.kubernetes.io/region", "test"),
            ("beta.kubernetes.io/arch", "test"),
            ("beta.kubernetes.io/os", "test"),
            ("beta.kubernetes.io/instance-type", "test"),
        ];
        let expected_keys = [
            LABEL_ARCH,
            LABEL_OS,
            LABEL_INSTANCE_TYPE,
            LABEL_TOPOLOGY_REGION,
            LABEL_TOPOLOGY_ZONE,
        ];
        let from_labels = Requirements::from_labels(labels);
        assert_eq!(from_labels.keys().collect::<Vec<_>>(), expected_keys);
        let selector: Vec<NodeSelectorRequirement> = labels
            .iter()
            .map(|(key, value)| NodeSelectorRequirement {
                key: (*key).to_owned(),
                operator: Operator::In,
                values: vec![(*value).to_owned()],
                min_values: None,
            })
            .collect();
        let from_selector = Requirements::from_node_selector_requirements(&selector).unwrap();
        assert_eq!(from_selector, from_labels);
        assert!(!from_labels.contains_key("failure-domain.beta.kubernetes.io/zone"));
        assert!(from_labels.get(LABEL_TOPOLOGY_ZONE).unwrap().has("test"));
        // A deprecated and a stable label that disagree leave nothing to satisfy.
        let clash = Requirements::from_labels([
            (LABEL_ARCH, "amd64"),
            ("beta.kubernetes.io/arch", "arm64"),
        ]);
        assert!(clash.get(LABEL_ARCH).unwrap().is_empty());
    }

    #[test]
    fn node_selector_form_matches_upstream_and_keeps_exclusions() {
        let ns = |r: &Requirement| {
            r.to_node_selector_requirements()
                .into_iter()
                .map(|n| format!("{} {:?} {:?}", n.operator, n.values, n.min_values))
                .collect::<Vec<_>>()
        };
        assert_eq!(ns(&fixture("k", "exists")), ["Exists [] None"]);
        assert_eq!(ns(&fixture("k", "dne")), ["DoesNotExist [] None"]);
        assert_eq!(
            ns(&fixture("k", "inAB").with_min_values(Some(2))),
            ["In [\"A\", \"B\"] Some(2)"]
        );
        assert_eq!(ns(&fixture("k", "notIn12")), ["NotIn [\"1\", \"2\"] None"]);
        assert_eq!(ns(&fixture("k", "gt1")), ["Gte [\"2\"] None"]);
        assert_eq!(ns(&fixture("k", "lt9")), ["Lte [\"8\"] None"]);
        assert_eq!(ns(&fixture("k", "lt1")), ["Lte [\"0\"] None"]);
        assert_eq!(ns(&Requirement::less_than("k", 0)), ["Lt [\"0\"] None"]);
        assert_eq!(
            ns(&fixture("k", "gt1lt9")),
            ["Gte [\"2\"] None", "Lte [\"8\"] None"]
        );
        assert_eq!(
            ns(&fixture("k", "notIn12lt9")),
            ["NotIn [\"1\", \"2\"] None", "Lte [\"8\"] None"]
        );

        let all: Requirements = FIXTURE_NAMES
            .iter()
            .chain(&["notInA12", "notIn2gt1", "notIn12lt9", "gt1lt9"])
            .map(|name| fixture(name, name).with_min_values(Some(1)))
            .collect();
        assert_eq!(all.len(), 18);
        let written = all.to_node_selector_requirements();
        assert_eq!(
            Requirements::from_node_selector_requirements(&written).unwrap(),
            all
        );
    }

    #[test]
    fn requirements_add_intersects_per_key_and_keeps_keys_sorted() {
        let mut requirements = Requirements::new();
        requirements.add(Requirement::in_values("b", ["1", "2"]));
        requirements.add(Requirement::exists("a"));
        requirements.add(Requirement::not_in("b", ["1"]));
        requirements.add(Requirement::in_values("c", ["x"]).with_min_values(Some(1)));
        assert_eq!(requirements.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(
            requirements.get("b"),
            Some(&Requirement::in_values("b", ["2"]))
        );
        assert_eq!(requirements.len(), 3);
        assert!(requirements.has_min_values());
        assert_eq!(
            requirements.remove("c").map(|r| r.to_string()).as_deref(),
            Some("c In [x] minValues 1")
        );
        assert!(!requirements.has_min_values());
        assert_eq!(requirements.remove("c"), None);
        let mut more = Requirements::from_labels([("a", "v")]);
        more.add_all(&requirements);
        assert_eq!(more.to_string(), "a In [v], b In [2]");
        assert!(Requirements::new().is_empty());
    }

    #[test]
    fn requirements_display_is_sorted_and_hides_hostname() {
        let requirements: Requirements = FIXTURE_NAMES
            .iter()
            .map(|name| fixture(name, name))
            .chain([Requirement::in_values(LABEL_HOSTNAME, ["node-1"])])
            .collect();
        assert_eq!(
            requirements.to_string(),
            "dne DoesNotExist, exists Exists, gt1 Exists >=2, gt9 Exists >=10, in1 In [1], in19 In [1 9], \
             in9 In [9], inA In [A], inAB In [A B], inB In [B], lt1 Exists <=0, lt9 Exists <=8, \
             notIn12 NotIn [1 2], notInA NotIn [A]"
        );
    }

    /// Upstream's compatibility fixtures: a well-known key (zone) on each side, plus
    /// `unconstrained` which defines nothing.
    fn compatibility_fixtures() -> Vec<(&'static str, Requirements)> {
        let mut all = vec![("unconstrained", Requirements::new())];
        all.extend(
            fixtures(LABEL_TOPOLOGY_ZONE)
                .into_iter()
                .map(|(name, r)| (name, reqs([r]))),
        );
        all
    }

    /// Row `.compatible(column)`, 'Y' compatible and '.' not; columns in
    /// `compatibility_fixtures` order (upstream's "should be compatible" tables).
    const COMPATIBLE_ALLOWING_WELL_KNOWN: [&str; 15] = [
        "YYYYYYYYYYYYYYY", // unconstrained
        "YY.YYYYYYYYYYYY", // exists
        "Y.Y...Y...Y....", // dne
        "YY.Y.Y....Y....", // inA
        "YY..YYY...Y....", // inB
        "YY.YYYY...Y....", // inAB
        "YYY.YYYYYYYYYYY", // notInA
        "YY....YY.Y....Y", // in1
        "YY....Y.YYYY...", // in9
        "YY....YYYYYY..Y", // in19
        "YYYYYYY.YYYYYYY", // notIn12
        "YY....Y.YYYYY.Y", // gt1
        "YY....Y...YYY..", // gt9
        "YY....Y...Y..YY", // lt1
        "YY....YY.YYY.YY", // lt9
    ];

    #[test]
    fn compatibility_allowing_undefined_well_known_labels_matches_upstream() {
        let policy = LabelPolicy::core();
        let allow = AllowUndefined::WellKnownLabels(&policy);
        let all = compatibility_fixtures();
        for ((row, existing), expected) in all.iter().zip(COMPATIBLE_ALLOWING_WELL_KNOWN) {
            for ((column, incoming), want) in all.iter().zip(expected.chars()) {
                let want = want == 'Y';
                assert_eq!(
                    existing.compatible(incoming, allow).is_ok(),
                    want,
                    "{row}.compatible({column})"
                );
                assert_eq!(
                    existing.is_compatible(incoming, allow),
                    want,
                    "{row}.is_compatible({column})"
                );
            }
        }
    }

    #[test]
    fn strict_compatibility_matches_upstream() {
        let all = compatibility_fixtures();
        // Strictly, an unconstrained side only accepts incoming keys that may be absent.
        let mut expected = COMPATIBLE_ALLOWING_WELL_KNOWN;
        expected[0] = "Y.Y...Y...Y....";
        for ((row, existing), expected) in all.iter().zip(expected) {
            for ((column, incoming), want) in all.iter().zip(expected.chars()) {
                let want = want == 'Y';
                assert_eq!(
                    existing
                        .compatible(incoming, AllowUndefined::NoKeys)
                        .is_ok(),
                    want,
                    "{row}.compatible({column})"
                );
                assert_eq!(
                    existing.is_compatible(incoming, AllowUndefined::NoKeys),
                    want,
                    "{row}.is_compatible({column})"
                );
            }
        }
    }

    #[test]
    fn undefined_label_errors_name_the_likely_typo() {
        let policy = LabelPolicy::core();
        let allow = AllowUndefined::WellKnownLabels(&policy);
        let cases = [
            ("zone", "topology.kubernetes.io/zone"),
            ("region", "topology.kubernetes.io/region"),
            ("nodepool", "karpenter.sh/nodepool"),
            ("instance-type", "node.kubernetes.io/instance-type"),
            ("arch", "kubernetes.io/arch"),
            ("capacity-type", "karpenter.sh/capacity-type"),
            ("topology.kubernetesio/zone", "topology.kubernetes.io/zone"),
            ("node.io/zone", "topology.kubernetes.io/zone"),
            (
                "topology.kubernetes.io/regio",
                "topology.kubernetes.io/region",
            ),
            ("node.kubernetes.io/region", "topology.kubernetes.io/region"),
            ("karpenter/nodepool", "karpenter.sh/nodepool"),
        ];
        for (bad, meant) in cases {
            let incoming = reqs([Requirement::exists(bad)]);
            assert_eq!(
                Requirements::new()
                    .compatible(&incoming, allow)
                    .unwrap_err()
                    .to_string(),
                format!("label \"{bad}\" does not have known values (typo of \"{meant}\"?)")
            );
        }
        let unknown = reqs([Requirement::exists("deployment")]);
        assert_eq!(
            Requirements::new()
                .compatible(&unknown, AllowUndefined::NoKeys)
                .unwrap_err()
                .to_string(),
            "label \"deployment\" does not have known values"
        );
        // Defined keys are candidates too, after the well-known ones.
        let existing = Requirements::from_labels([("example.com/team", "a")]);
        let typo = reqs([Requirement::exists("team")]);
        assert_eq!(
            existing.compatible(&typo, AllowUndefined::NoKeys),
            Err(CompatibilityError::UndefinedLabel {
                key: "team".into(),
                hint: Some("example.com/team".into())
            })
        );
    }

    #[test]
    fn conflict_errors_name_key_and_both_value_sets() {
        let family = crate::labels::aws::LABEL_INSTANCE_FAMILY;
        let existing = reqs([
            Requirement::in_values(family, ["m5", "c5"]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["a"]),
            Requirement::in_values(LABEL_CAPACITY_TYPE, ["spot"]),
        ]);
        let incoming = reqs([
            Requirement::in_values(family, ["p5"]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["b"]),
            Requirement::in_values(LABEL_CAPACITY_TYPE, ["spot"]),
        ]);
        let err = existing.intersects(&incoming).unwrap_err();
        assert_eq!(
            err.to_string(),
            "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [p5] not in \
             karpenter.k8s.aws/instance-family In [c5 m5]; key topology.kubernetes.io/zone, \
             topology.kubernetes.io/zone In [b] not in topology.kubernetes.io/zone In [a]"
        );
        let CompatibilityError::Conflicts(conflicts) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(conflicts.len(), 2);
        assert_eq!(
            conflicts[0].incoming,
            Requirement::in_values(family, ["p5"])
        );
        assert_eq!(
            conflicts[0].existing,
            Requirement::in_values(family, ["c5", "m5"])
        );
        // Roles stay the same whichever side is smaller.
        let small = reqs([Requirement::in_values(family, ["p5"])]);
        assert_eq!(
            existing.intersects(&small).unwrap_err().to_string(),
            "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [p5] not in \
             karpenter.k8s.aws/instance-family In [c5 m5]"
        );
        assert_eq!(
            small.intersects(&existing).unwrap_err().to_string(),
            "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [c5 m5] not in \
             karpenter.k8s.aws/instance-family In [p5]"
        );
        assert!(!existing.is_intersecting(&incoming));
        assert!(existing.is_intersecting(&Requirements::new()));
    }

    #[test]
    fn drift_table_from_the_reference() {
        // KARPENTER-REFERENCE 2.3: a NodeClaim's labels against its NodePool's requirements.
        let labels = [
            (LABEL_TOPOLOGY_ZONE, "zone-a"),
            (LABEL_CAPACITY_TYPE, "spot"),
            ("karpenter.k8s.aws/instance-cpu", "8"),
            ("example.com/team", "blue"),
        ];
        let cpu = "karpenter.k8s.aws/instance-cpu";
        // (row, the NodePool's one requirement, drifted)
        #[rustfmt::skip]
        let rows = [
            ("In changed to a value the label lacks", Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-b"]), true),
            ("new In requirement on a key the NodeClaim lacks", Requirement::in_values("example.com/tier", ["gold"]), true),
            ("In narrowed to exclude the current value", Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"]), true),
            ("In expanded", Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-a", "zone-b", "zone-c"]), false),
            ("changed to Exists", Requirement::exists("example.com/team"), false),
            ("changed to DoesNotExist on a present key", Requirement::does_not_exist("example.com/team"), true),
            ("Gt moved past the label value", Requirement::greater_than(cpu, 8), true),
            ("Lt moved past the label value", Requirement::less_than(cpu, 8), true),
            ("Gt still below the label value", Requirement::greater_than(cpu, 7), false),
            ("Lte still at the label value", Requirement::at_most(cpu, 8), false),
            ("DoesNotExist on an absent key", Requirement::does_not_exist("example.com/tier"), false),
            ("NotIn on an absent key", Requirement::not_in("example.com/tier", ["gold"]), false),
            ("NotIn the current value", Requirement::not_in(LABEL_TOPOLOGY_ZONE, ["zone-a"]), true),
            ("Exists on an absent key", Requirement::exists("example.com/tier"), true),
        ];
        assert!(Requirements::new().matches_labels(labels).is_ok());
        for (row, requirement, drifted) in rows {
            let requirements = reqs([requirement]);
            assert_eq!(
                requirements.matches_labels(labels).is_err(),
                drifted,
                "{row}"
            );
        }
        let err = reqs([Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-b"])])
            .matches_labels(labels)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [zone-b] not in topology.kubernetes.io/zone In [zone-a]"
        );
        let deprecated = reqs([Requirement::in_values(LABEL_ARCH, ["amd64"])]);
        assert!(
            deprecated
                .matches_labels([("beta.kubernetes.io/arch", "amd64")])
                .is_ok()
        );
    }

    #[test]
    fn labels_come_from_unrestricted_keys_only() {
        let requirements = reqs([
            Requirement::in_values("example.com/team", ["blue"]),
            Requirement::in_values("example.com/tier", ["silver", "gold"]),
            Requirement::exists("example.com/any"),
            Requirement::not_in("example.com/not", ["0", "1"]),
            Requirement::greater_than("example.com/count", 5),
            Requirement::does_not_exist("example.com/absent"),
            Requirement::in_values("node.kubernetes.io/pool", ["p"]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-a"]),
            Requirement::in_values(LABEL_HOSTNAME, ["node-1"]),
            Requirement::in_values("karpenter.sh/custom", ["x"]),
            Requirement::in_values("kubernetes.io/custom", ["x"]),
            Requirement::in_values(crate::labels::aws::LABEL_INSTANCE_FAMILY, ["m5"]),
        ]);
        let core = requirements.labels(&LabelPolicy::core());
        let expected: BTreeMap<String, String> = [
            ("example.com/any", "0"),
            ("example.com/count", "6"),
            ("example.com/not", "2"),
            ("example.com/team", "blue"),
            ("example.com/tier", "gold"),
            ("karpenter.k8s.aws/instance-family", "m5"),
            ("node.kubernetes.io/pool", "p"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(core, expected);
        let aws = LabelPolicy::with_provider(
            crate::labels::aws::RESTRICTED_LABEL_DOMAINS,
            crate::labels::aws::WELL_KNOWN_LABELS,
        );
        assert!(
            !requirements
                .labels(&aws)
                .contains_key("karpenter.k8s.aws/instance-family")
        );
    }

    fn instance_type(family: &str, name: &str) -> Requirements {
        Requirements::from_labels([
            ("karpenter.k8s.aws/instance-family", family),
            (LABEL_INSTANCE_TYPE, name),
        ])
    }

    #[test]
    fn min_values_counts_distinct_values_across_leading_options() {
        // Upstream's documented example.
        let requirements = Requirements::from_node_selector_requirements(&[
            NodeSelectorRequirement {
                key: LABEL_INSTANCE_TYPE.into(),
                operator: Operator::In,
                values: [
                    "c4.large",
                    "c4.xlarge",
                    "c5.large",
                    "c5.xlarge",
                    "m4.large",
                    "m4.xlarge",
                ]
                .map(String::from)
                .to_vec(),
                min_values: Some(3),
            },
            NodeSelectorRequirement {
                key: "karpenter.k8s.aws/instance-family".into(),
                operator: Operator::In,
                values: ["c4", "c5", "m4"].map(String::from).to_vec(),
                min_values: Some(3),
            },
        ])
        .unwrap();
        let passing = [
            instance_type("c4", "c4.large"),
            instance_type("c5", "c5.xlarge"),
            instance_type("m4", "m4.2xlarge"),
        ];
        assert_eq!(requirements.satisfies_min_values(&passing), Ok(3));
        let more = [
            passing[0].clone(),
            passing[1].clone(),
            passing[2].clone(),
            instance_type("m4", "m4.large"),
        ];
        assert_eq!(requirements.satisfies_min_values(&more), Ok(3));

        let failing = [
            instance_type("c4", "c4.large"),
            instance_type("c4", "c4.xlarge"),
            instance_type("c5", "c5.2xlarge"),
        ];
        let err = requirements.satisfies_min_values(&failing).unwrap_err();
        assert_eq!(
            err.unmet,
            [UnmetMinValues {
                key: "karpenter.k8s.aws/instance-family".into(),
                distinct_values: 2,
                min_values: 3
            }]
        );
        assert_eq!(
            err.to_string(),
            "minValues requirement is not met for label(s) karpenter.k8s.aws/instance-family (2 of 3 values)"
        );

        // Options without the key, or only excluding values, add nothing for it.
        let vague = [
            reqs([Requirement::not_in(
                "karpenter.k8s.aws/instance-family",
                ["x", "y", "z"],
            )]),
            Requirements::new(),
        ];
        assert_eq!(
            requirements
                .satisfies_min_values(&vague)
                .unwrap_err()
                .unmet
                .len(),
            2
        );
        assert_eq!(
            requirements
                .satisfies_min_values(&[])
                .unwrap_err()
                .unmet
                .len(),
            2
        );
        assert_eq!(Requirements::new().satisfies_min_values(&failing), Ok(0));
    }

    // ---- Property tests ----

    /// Values the strategies draw from: non-integers, integers in and around the bounds, and
    /// alternative spellings of integers.
    static PROBES: [&str; 14] = [
        "a", "b", "c", "0", "1", "2", "5", "9", "10", "11", "-1", "+5", "05", "x1",
    ];

    fn any_requirement() -> impl Strategy<Value = Requirement> {
        let values = prop::collection::vec(prop::sample::select(PROBES.to_vec()), 0..4);
        let bound = 0_i64..12;
        let min_values = prop::option::of(1_u32..4);
        (
            prop::sample::select(Operator::ALL.to_vec()),
            values,
            bound,
            min_values,
        )
            .prop_map(|(op, values, bound, min_values)| {
                let requirement = match op {
                    Operator::In => Requirement::in_values("key", values),
                    Operator::NotIn => Requirement::not_in("key", values),
                    Operator::Exists => Requirement::exists("key"),
                    Operator::DoesNotExist => Requirement::does_not_exist("key"),
                    Operator::Gt => Requirement::greater_than("key", bound),
                    Operator::Lt => Requirement::less_than("key", bound),
                    Operator::Gte => Requirement::at_least("key", bound),
                    Operator::Lte => Requirement::at_most("key", bound),
                };
                requirement.with_min_values(min_values)
            })
    }

    /// Requirements built by intersecting a few, so complements carry bounds and exclusions.
    fn any_combined_requirement() -> impl Strategy<Value = Requirement> {
        prop::collection::vec(any_requirement(), 1..4).prop_map(|parts| {
            parts
                .iter()
                .skip(1)
                .fold(parts[0].clone(), |acc, r| acc.intersection(r))
        })
    }

    fn any_requirements() -> impl Strategy<Value = Requirements> {
        let key = prop::sample::select(vec!["k1", "k2", "k3", LABEL_TOPOLOGY_ZONE]);
        prop::collection::vec((key, any_combined_requirement()), 0..5).prop_map(|parts| {
            parts
                .into_iter()
                .map(|(key, r)| {
                    let mut rekeyed = r;
                    rekeyed.key = Arc::from(key);
                    rekeyed
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(0x6b61_7270),
            ..ProptestConfig::default()
        })]

        #[test]
        fn intersection_is_commutative(a in any_combined_requirement(), b in any_combined_requirement()) {
            prop_assert_eq!(a.intersection(&b), b.intersection(&a));
        }

        #[test]
        fn intersection_is_associative(a in any_combined_requirement(), b in any_combined_requirement(), c in any_combined_requirement()) {
            prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
        }

        #[test]
        fn intersection_is_idempotent(a in any_combined_requirement()) {
            prop_assert_eq!(a.intersection(&a), a);
        }

        #[test]
        fn a_value_satisfies_the_intersection_iff_it_satisfies_both(a in any_combined_requirement(), b in any_combined_requirement()) {
            let both = a.intersection(&b);
            for value in PROBES {
                prop_assert_eq!(both.has(value), a.has(value) && b.has(value), "value {}", value);
            }
        }

        #[test]
        fn exists_is_the_identity_and_does_not_exist_absorbs(a in any_combined_requirement()) {
            prop_assert_eq!(Requirement::exists("key").intersection(&a), a.clone());
            prop_assert_eq!(a.intersection(&Requirement::exists("key")), a.clone());
            let none = Requirement::does_not_exist("key").intersection(&a);
            prop_assert!(none.is_empty());
            prop_assert_eq!(none.operator(), Operator::DoesNotExist);
            prop_assert!(!Requirement::does_not_exist("key").intersects(&a));
        }

        #[test]
        fn intersects_agrees_with_a_non_empty_intersection(a in any_combined_requirement(), b in any_combined_requirement()) {
            prop_assert_eq!(a.intersects(&b), !a.intersection(&b).is_empty());
            prop_assert_eq!(a.intersects(&b), b.intersects(&a));
        }

        #[test]
        fn finite_sets_intersect_iff_they_share_a_value(
            values in prop::collection::vec(prop::sample::select(PROBES.to_vec()), 0..4),
            narrowing in any_combined_requirement(),
            b in any_combined_requirement(),
        ) {
            // An `In` narrowed by anything stays finite, with values drawn from PROBES.
            let a = Requirement::in_values("key", values).intersection(&narrowing);
            let shared = PROBES.iter().any(|v| a.has(v) && b.has(v));
            prop_assert_eq!(a.intersects(&b), shared);
        }

        #[test]
        fn bounds_compare_integers(bound in -20_i64..20, n in -25_i64..25) {
            let text = n.to_string();
            prop_assert_eq!(Requirement::greater_than("key", bound).has(&text), n > bound);
            prop_assert_eq!(Requirement::less_than("key", bound).has(&text), n < bound);
            prop_assert_eq!(Requirement::at_least("key", bound).has(&text), n >= bound);
            prop_assert_eq!(Requirement::at_most("key", bound).has(&text), n <= bound);
            let range = Requirement::at_least("key", bound).intersection(&Requirement::at_most("key", bound + 3));
            prop_assert_eq!(range.has(&text), (bound..=bound + 3).contains(&n));
            prop_assert_eq!(range.intersects(&Requirement::in_values("key", [&text])), (bound..=bound + 3).contains(&n));
        }

        #[test]
        fn any_value_satisfies_the_requirement(a in any_combined_requirement()) {
            match a.any_value() {
                Some(value) => prop_assert!(a.has(&value), "{} from {}", value, a),
                None => prop_assert!(a.is_empty() || (a.lower_bound().is_some() && a.upper_bound().is_some())),
            }
        }

        #[test]
        fn node_selector_form_round_trips(r in any_requirements()) {
            // The API refuses an `In` with fewer values than its minValues; drop those.
            let r: Requirements = r
                .iter()
                .map(|req| {
                    let valid = req.operator() != Operator::In
                        || req.min_values().is_none_or(|min| req.values().len() >= min as usize);
                    req.clone().with_min_values(req.min_values().filter(|_| valid))
                })
                .collect();
            let written = r.to_node_selector_requirements();
            prop_assert_eq!(Requirements::from_node_selector_requirements(&written), Ok(r));
        }

        #[test]
        fn adding_in_any_order_gives_the_same_requirements(parts in prop::collection::vec(any_combined_requirement(), 0..5), rotate in 0_usize..5) {
            let forward: Requirements = parts.iter().cloned().collect();
            let mut rotated = parts.clone();
            if !rotated.is_empty() {
                let by = rotate % rotated.len();
                rotated.rotate_left(by);
            }
            let rotated: Requirements = rotated.into_iter().rev().collect();
            prop_assert_eq!(forward, rotated);
        }

        #[test]
        fn yes_no_answers_agree_with_the_results(a in any_requirements(), b in any_requirements()) {
            let policy = LabelPolicy::core();
            for allow in [AllowUndefined::NoKeys, AllowUndefined::WellKnownLabels(&policy)] {
                prop_assert_eq!(a.is_compatible(&b, allow), a.compatible(&b, allow).is_ok());
            }
            prop_assert_eq!(a.is_intersecting(&b), a.intersects(&b).is_ok());
            prop_assert_eq!(a.is_intersecting(&b), b.is_intersecting(&a));
        }

        #[test]
        fn labels_satisfy_the_requirements_they_come_from(r in any_requirements()) {
            let policy = LabelPolicy::core();
            let labels = r.labels(&policy);
            for (key, value) in &labels {
                prop_assert!(r.get(key).is_some_and(|req| req.has(value)), "{}={} from {}", key, value, r);
            }
        }
    }
}
