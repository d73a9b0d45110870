//! One label key's constraint: [`Operator`], [`Requirement`] (a set of values or its
//! complement, with inclusive integer bounds and minValues) and its algebra. Apart from
//! [`Requirements`](super::Requirements), the map of keys, which only combines them.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::labels::{self};

use super::values::ValueSet;

/// How many values `Display` prints before summarising the rest, as upstream.
pub(super) const DISPLAYED_VALUES: usize = 5;

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
    pub(super) fn allows_absence(self) -> bool {
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

/// Whether `value` is an integer within the inclusive bounds; with no bounds every value is.
/// Non-integers never satisfy a bound, as upstream.
pub(super) fn within_bounds(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    gte.is_none_or(|lo| n >= lo) && lte.is_none_or(|hi| n <= hi)
}

pub(super) fn max_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

pub(super) fn min_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
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
    pub(super) key: Arc<str>,
    pub(super) complement: bool,
    pub(super) values: ValueSet,
    pub(super) gte: Option<i64>,
    pub(super) lte: Option<i64>,
    pub(super) min_values: Option<u32>,
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
