//! Resource lists for the scheduler's hot path, and the Kubernetes rules that produce them: a
//! pod's effective requests, DaemonSet overhead per node, and a node's allocatable.
//!
//! # Representation
//!
//! [`ResourceList`] keeps `cpu`, `memory`, `ephemeral-storage` and `pods` as plain `i64` fields
//! and every other resource (`nvidia.com/gpu`, `hugepages-2Mi`, …) in a small vector sorted by
//! name. The scheduler adds and compares requests millions of times; a fixed field is one
//! integer operation and a pod without extended resources never touches the vector. No hash map
//! is involved.
//!
//! Units are those of the kube-scheduler's own `framework.Resource`: `cpu` in milli-cores
//! (`MilliValue()`), everything else in whole units, i.e. bytes for `memory`,
//! `ephemeral-storage` and `hugepages-*`, a count for `pods` and extended resources (`Value()`,
//! rounded up). `i64` holds 8 EiB of memory and 9·10¹⁵ cores, far beyond any node or cluster.
//! Arithmetic comes in a checked form (an error naming the resource) and a saturating form
//! (never panics, for the hot path: a saturated request fits nowhere, which is the right answer
//! for absurd input).
//!
//! The Kubernetes rules that produce them live in `pod.rs`.

mod pod;

use std::borrow::Borrow;
use std::fmt;
use std::iter::Sum;
use std::sync::Arc;

use thiserror::Error;

use crate::quantity::Quantity;

pub use self::pod::*;

/// The name of a resource (`cpu`, `memory`, `nvidia.com/gpu`, …).
///
/// The four names [`ResourceList`] keeps as fields are recognised on construction; every other
/// name is an extended resource. Ordered by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceName(Name);

// Private so that a well-known name can never be built as `Other`, which keeps the derived
// Eq/Hash consistent with the by-name Ord.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Name {
    Cpu,
    Memory,
    EphemeralStorage,
    Pods,
    Other(Arc<str>),
}

impl ResourceName {
    /// `cpu`, in milli-cores.
    pub const CPU: Self = Self(Name::Cpu);
    /// `memory`, in bytes.
    pub const MEMORY: Self = Self(Name::Memory);
    /// `ephemeral-storage`, in bytes.
    pub const EPHEMERAL_STORAGE: Self = Self(Name::EphemeralStorage);
    /// `pods`, a count.
    pub const PODS: Self = Self(Name::Pods);
    /// The prefix of huge page resources (`hugepages-2Mi`), which kubelet carves out of memory.
    pub const HUGEPAGES_PREFIX: &'static str = "hugepages-";

    /// The resource called `name`.
    pub fn new(name: &str) -> Self {
        match name {
            "cpu" => Self::CPU,
            "memory" => Self::MEMORY,
            "ephemeral-storage" => Self::EPHEMERAL_STORAGE,
            "pods" => Self::PODS,
            other => Self(Name::Other(Arc::from(other))),
        }
    }

    /// The name as Kubernetes spells it.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Name::Cpu => "cpu",
            Name::Memory => "memory",
            Name::EphemeralStorage => "ephemeral-storage",
            Name::Pods => "pods",
            Name::Other(name) => name,
        }
    }

    /// Whether [`ResourceList`] counts this resource in thousandths (only `cpu` does).
    pub fn uses_millis(&self) -> bool {
        matches!(self.0, Name::Cpu)
    }

    /// Whether this is a `hugepages-*` resource.
    pub fn is_hugepages(&self) -> bool {
        self.as_str().starts_with(Self::HUGEPAGES_PREFIX)
    }

    /// The unit of this resource's amounts in a [`ResourceList`], for messages.
    pub fn unit(&self) -> &'static str {
        match &self.0 {
            Name::Cpu => "millicores",
            Name::Memory | Name::EphemeralStorage => "bytes",
            Name::Other(name) if name.starts_with(Self::HUGEPAGES_PREFIX) => "bytes",
            Name::Pods | Name::Other(_) => "units",
        }
    }

    /// `amount` of this resource, in [`ResourceList`] units, as a quantity.
    fn quantity(&self, amount: i64) -> Quantity {
        if self.uses_millis() {
            Quantity::from_millis(amount)
        } else {
            Quantity::from_units(amount)
        }
    }

    /// `quantity` in [`ResourceList`] units (rounded up), or `None` beyond `i64`.
    fn amount(&self, quantity: Quantity) -> Option<i64> {
        let amount = if self.uses_millis() {
            quantity.millis()
        } else {
            quantity.value()
        };
        i64::try_from(amount).ok()
    }

    /// Like [`Self::amount`], clamped to `i64`.
    fn amount_saturating(&self, quantity: Quantity) -> i64 {
        self.amount(quantity).unwrap_or(if quantity.is_negative() {
            i64::MIN
        } else {
            i64::MAX
        })
    }
}

impl PartialOrd for ResourceName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl AsRef<str> for ResourceName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ResourceName {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for ResourceName {
    fn from(name: String) -> Self {
        Self::new(&name)
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a resource list could not be built or combined.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceError {
    /// The same resource appeared twice in one list.
    #[error("resource {0} is listed more than once")]
    Duplicate(ResourceName),
    /// A quantity too large for a 64-bit count of the resource's unit.
    #[error("{resource} = {quantity} does not fit a 64-bit count of {unit}", unit = resource.unit())]
    OutOfRange {
        /// The resource.
        resource: ResourceName,
        /// The quantity given for it.
        quantity: Quantity,
    },
    /// A sum or difference that leaves the 64-bit range.
    #[error("the {operation} of {resource} overflows a 64-bit count of {unit}", unit = resource.unit())]
    Overflow {
        /// The resource.
        resource: ResourceName,
        /// `sum` or `difference`.
        operation: &'static str,
    },
}

/// A request that does not fit: which resource, how much was asked and how much there is.
///
/// Displays as `needs 4 cpu, 3500m available`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("needs {requested} {resource}, {available} available")]
pub struct Insufficient {
    /// The resource that does not fit.
    pub resource: ResourceName,
    /// The amount requested.
    pub requested: Quantity,
    /// The amount available.
    pub available: Quantity,
}

/// Amounts of resources, in the units described in the module docs; absent means zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceList {
    cpu_millis: i64,
    memory: i64,
    ephemeral_storage: i64,
    pods: i64,
    /// Sorted by name, unique, no zero amounts, no well-known names; that makes the derived
    /// equality structural equality of the lists.
    extended: Vec<(Arc<str>, i64)>,
}

impl ResourceList {
    /// An empty list (every resource zero).
    pub const fn new() -> Self {
        Self {
            cpu_millis: 0,
            memory: 0,
            ephemeral_storage: 0,
            pods: 0,
            extended: Vec::new(),
        }
    }

    /// Builds a list from `(name, quantity)` pairs, rounding each quantity up to the resource's
    /// unit. Fails on a repeated name or a quantity beyond `i64` units.
    pub fn from_quantities<I, N, Q>(pairs: I) -> Result<Self, ResourceError>
    where
        I: IntoIterator<Item = (N, Q)>,
        N: AsRef<str>,
        Q: Borrow<Quantity>,
    {
        let mut list = Self::new();
        let mut seen = Vec::new();
        for (name, quantity) in pairs {
            let name = ResourceName::new(name.as_ref());
            let quantity = *quantity.borrow();
            if seen.contains(&name) {
                return Err(ResourceError::Duplicate(name));
            }
            let amount = name.amount(quantity).ok_or(ResourceError::OutOfRange {
                resource: name.clone(),
                quantity,
            })?;
            list.set(&name, amount);
            seen.push(name);
        }
        Ok(list)
    }

    /// Like [`Self::from_quantities`] for a map, clamping out-of-range amounts to `i64`.
    fn from_quantities_saturating(quantities: &Quantities) -> Self {
        let mut list = Self::new();
        for (name, quantity) in quantities {
            list.set(name, name.amount_saturating(*quantity));
        }
        list
    }

    /// The non-zero resources as quantities, sorted by name.
    pub fn to_quantities(&self) -> Vec<(ResourceName, Quantity)> {
        self.iter()
            .map(|(name, amount)| {
                let quantity = name.quantity(amount);
                (name, quantity)
            })
            .collect()
    }

    /// The non-zero resources and their amounts, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceName, i64)> + '_ {
        let fixed = [
            (ResourceName::CPU, self.cpu_millis),
            (ResourceName::EPHEMERAL_STORAGE, self.ephemeral_storage),
            (ResourceName::MEMORY, self.memory),
            (ResourceName::PODS, self.pods),
        ];
        let mut all: Vec<(ResourceName, i64)> = fixed
            .into_iter()
            .filter(|(_, amount)| *amount != 0)
            .chain(
                self.extended
                    .iter()
                    .map(|(name, amount)| (ResourceName(Name::Other(name.clone())), *amount)),
            )
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter()
    }

    /// CPU in milli-cores.
    pub const fn cpu_millis(&self) -> i64 {
        self.cpu_millis
    }

    /// Memory in bytes.
    pub const fn memory_bytes(&self) -> i64 {
        self.memory
    }

    /// Ephemeral storage in bytes.
    pub const fn ephemeral_storage_bytes(&self) -> i64 {
        self.ephemeral_storage
    }

    /// The pod count.
    pub const fn pods(&self) -> i64 {
        self.pods
    }

    /// The amount of `name`, in its unit (zero when absent).
    pub fn get(&self, name: &ResourceName) -> i64 {
        match &name.0 {
            Name::Cpu => self.cpu_millis,
            Name::Memory => self.memory,
            Name::EphemeralStorage => self.ephemeral_storage,
            Name::Pods => self.pods,
            Name::Other(other) => self.extended_amount(other),
        }
    }

    /// The amount of `name` as a quantity.
    pub fn quantity(&self, name: &ResourceName) -> Quantity {
        name.quantity(self.get(name))
    }

    /// Sets the amount of `name`, in its unit (see [`ResourceName::unit`]).
    pub fn set(&mut self, name: &ResourceName, amount: i64) {
        match &name.0 {
            Name::Cpu => self.cpu_millis = amount,
            Name::Memory => self.memory = amount,
            Name::EphemeralStorage => self.ephemeral_storage = amount,
            Name::Pods => self.pods = amount,
            Name::Other(other) => self.set_extended(other, amount),
        }
    }

    /// This list with `name` set to `amount` (in its unit); for building lists in tests and
    /// fixtures.
    #[must_use]
    pub fn with(mut self, name: impl Into<ResourceName>, amount: i64) -> Self {
        self.set(&name.into(), amount);
        self
    }

    /// Whether any resource other than `cpu`, `memory`, `ephemeral-storage` and `pods` is
    /// non-zero (then comparing the fixed fields alone is not enough).
    pub fn has_extended_resources(&self) -> bool {
        !self.extended.is_empty()
    }

    /// Whether every resource is zero.
    pub fn is_zero(&self) -> bool {
        self.cpu_millis == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.pods == 0
            && self.extended.is_empty()
    }

    /// `self + other`, or which resource overflowed.
    pub fn checked_add(&self, other: &Self) -> Result<Self, ResourceError> {
        self.combine(other, "sum", i64::checked_add)
    }

    /// `self - other`, exact (amounts may go negative), or which resource overflowed.
    pub fn checked_sub(&self, other: &Self) -> Result<Self, ResourceError> {
        self.combine(other, "difference", i64::checked_sub)
    }

    /// `self + other`, each resource clamped to the `i64` range.
    #[must_use]
    pub fn saturating_add(&self, other: &Self) -> Self {
        let mut sum = self.clone();
        sum.saturating_add_assign(other);
        sum
    }

    /// Adds `other` in place, each resource clamped to the `i64` range. This is the hot-path
    /// form: no allocation unless `other` has an extended resource `self` lacks.
    pub fn saturating_add_assign(&mut self, other: &Self) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (name, amount) in &other.extended {
            match self.extended_index(name) {
                Ok(i) => {
                    let sum = self.extended[i].1.saturating_add(*amount);
                    if sum == 0 {
                        self.extended.remove(i);
                    } else {
                        self.extended[i].1 = sum;
                    }
                }
                Err(i) => self.extended.insert(i, (name.clone(), *amount)),
            }
        }
    }

    /// `self - other` with every resource floored at zero: resource amounts do not go below
    /// nothing (remaining capacity, allocatable).
    #[must_use]
    pub fn saturating_sub(&self, other: &Self) -> Self {
        let floor = |a: i64, b: i64| Some(a.saturating_sub(b).max(0));
        // `floor` never fails, so neither does `combine`.
        self.combine(other, "difference", floor).unwrap_or_default()
    }

    /// The larger amount of each resource (what init containers need, one at a time).
    #[must_use]
    pub fn max_per_resource(&self, other: &Self) -> Self {
        // `max` never fails, so neither does `combine`.
        self.combine(other, "maximum", |a, b| Some(a.max(b)))
            .unwrap_or_default()
    }

    /// The smaller amount of each resource (absent = zero): what two nodes both have.
    #[must_use]
    pub fn min_per_resource(&self, other: &Self) -> Self {
        // `min` never fails, so neither does `combine`.
        self.combine(other, "minimum", |a, b| Some(a.min(b)))
            .unwrap_or_default()
    }

    /// Applies `op` to each resource of `self` and `other` (absent = zero).
    fn combine(
        &self,
        other: &Self,
        operation: &'static str,
        op: impl Fn(i64, i64) -> Option<i64>,
    ) -> Result<Self, ResourceError> {
        let overflow = |resource: ResourceName| ResourceError::Overflow {
            resource,
            operation,
        };
        let fixed = |a, b, name: ResourceName| op(a, b).ok_or_else(|| overflow(name));
        let mut extended = Vec::with_capacity(self.extended.len().max(other.extended.len()));
        let (mut left, mut right) = (
            self.extended.iter().peekable(),
            other.extended.iter().peekable(),
        );
        loop {
            let (name, a, b) = match (left.peek(), right.peek()) {
                (None, None) => break,
                (Some((n, a)), None) => {
                    left.next();
                    (n, *a, 0)
                }
                (None, Some((n, b))) => {
                    right.next();
                    (n, 0, *b)
                }
                (Some((ln, a)), Some((rn, b))) => match ln.cmp(rn) {
                    std::cmp::Ordering::Less => {
                        left.next();
                        (ln, *a, 0)
                    }
                    std::cmp::Ordering::Greater => {
                        right.next();
                        (rn, 0, *b)
                    }
                    std::cmp::Ordering::Equal => {
                        left.next();
                        right.next();
                        (ln, *a, *b)
                    }
                },
            };
            let amount =
                op(a, b).ok_or_else(|| overflow(ResourceName(Name::Other(name.clone()))))?;
            if amount != 0 {
                extended.push((name.clone(), amount));
            }
        }
        Ok(Self {
            cpu_millis: fixed(self.cpu_millis, other.cpu_millis, ResourceName::CPU)?,
            memory: fixed(self.memory, other.memory, ResourceName::MEMORY)?,
            ephemeral_storage: fixed(
                self.ephemeral_storage,
                other.ephemeral_storage,
                ResourceName::EPHEMERAL_STORAGE,
            )?,
            pods: fixed(self.pods, other.pods, ResourceName::PODS)?,
            extended,
        })
    }

    fn extended_index(&self, name: &str) -> Result<usize, usize> {
        self.extended.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    fn extended_amount(&self, name: &str) -> i64 {
        self.extended_index(name).map_or(0, |i| self.extended[i].1)
    }

    fn set_extended(&mut self, name: &Arc<str>, amount: i64) {
        match (self.extended_index(name), amount) {
            (Ok(i), 0) => {
                self.extended.remove(i);
            }
            (Ok(i), _) => self.extended[i].1 = amount,
            (Err(_), 0) => {}
            (Err(i), _) => self.extended.insert(i, (name.clone(), amount)),
        }
    }

    /// Sum of the `hugepages-*` amounts, in bytes.
    fn hugepages_bytes(&self) -> i64 {
        self.extended
            .iter()
            .filter(|(name, _)| name.starts_with(ResourceName::HUGEPAGES_PREFIX))
            .fold(0i64, |sum, (_, amount)| sum.saturating_add(*amount))
    }
}

impl<'a> Sum<&'a ResourceList> for ResourceList {
    /// Saturating sum.
    fn sum<I: Iterator<Item = &'a ResourceList>>(lists: I) -> Self {
        let mut total = Self::new();
        for list in lists {
            total.saturating_add_assign(list);
        }
        total
    }
}

impl fmt::Display for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (name, quantity)) in self.to_quantities().into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}: {quantity}")?;
        }
        f.write_str("}")
    }
}

/// Whether `requests` fit in `available`: every requested amount is at most the available one
/// (absent counts as zero). On failure, names the first resource that does not fit, checking
/// `cpu`, `memory`, `ephemeral-storage`, `pods`, then extended resources by name.
pub fn fits(requests: &ResourceList, available: &ResourceList) -> Result<(), Insufficient> {
    let insufficient = |resource: ResourceName, requested: i64, available: i64| {
        let requested = resource.quantity(requested);
        let available = resource.quantity(available);
        Insufficient {
            resource,
            requested,
            available,
        }
    };
    if requests.cpu_millis > available.cpu_millis {
        return Err(insufficient(
            ResourceName::CPU,
            requests.cpu_millis,
            available.cpu_millis,
        ));
    }
    if requests.memory > available.memory {
        return Err(insufficient(
            ResourceName::MEMORY,
            requests.memory,
            available.memory,
        ));
    }
    if requests.ephemeral_storage > available.ephemeral_storage {
        return Err(insufficient(
            ResourceName::EPHEMERAL_STORAGE,
            requests.ephemeral_storage,
            available.ephemeral_storage,
        ));
    }
    if requests.pods > available.pods {
        return Err(insufficient(
            ResourceName::PODS,
            requests.pods,
            available.pods,
        ));
    }
    for (name, requested) in &requests.extended {
        let have = available.extended_amount(name);
        if *requested > have {
            return Err(insufficient(
                ResourceName(Name::Other(name.clone())),
                *requested,
                have,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
