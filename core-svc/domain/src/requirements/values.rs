//! [`ValueSet`]: sorted, deduplicated label values shared between clones, the representation
//! that keeps cloning and checking requirements free of allocation. Apart from the algebra so
//! that its invariants (sorted, unique, `None` for empty) are kept in one place.

use std::fmt;
use std::sync::Arc;

/// Sorted, deduplicated label values, shared between clones; `None` is the empty set so that
/// `Exists` and `DoesNotExist` never allocate a value slice.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct ValueSet(pub(super) Option<Arc<[Arc<str>]>>);

impl fmt::Debug for ValueSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl ValueSet {
    pub(super) fn from_sorted_unique(values: Vec<Arc<str>>) -> Self {
        if values.is_empty() {
            Self(None)
        } else {
            Self(Some(values.into()))
        }
    }

    pub(super) fn from_unsorted<I>(values: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut values: Vec<Arc<str>> = values.into_iter().map(|v| Arc::from(v.as_ref())).collect();
        values.sort_unstable();
        values.dedup();
        Self::from_sorted_unique(values)
    }

    pub(super) fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().unwrap_or(&[])
    }

    pub(super) fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.as_slice().iter().map(|v| &**v)
    }

    pub(super) fn contains(&self, value: &str) -> bool {
        self.as_slice()
            .binary_search_by(|v| (**v).cmp(value))
            .is_ok()
    }

    /// The values `keep` accepts; shares `self` when it accepts them all, which is the common
    /// case and saves the allocation.
    pub(super) fn retain_or_share(&self, mut keep: impl FnMut(&str) -> bool) -> Self {
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

    pub(super) fn intersection(&self, other: &Self) -> Self {
        let (small, large) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.retain_or_share(|v| large.contains(v))
    }

    /// `self` without the values of `other`.
    pub(super) fn difference(&self, other: &Self) -> Self {
        if other.is_empty() {
            return self.clone();
        }
        self.retain_or_share(|v| !other.contains(v))
    }

    pub(super) fn is_subset(&self, other: &Self) -> bool {
        self.len() <= other.len() && self.iter().all(|v| other.contains(v))
    }

    pub(super) fn union(&self, other: &Self) -> Self {
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
