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
//! [`PodResources::requests`] computes in exact [`Quantity`] arithmetic first and converts to a
//! [`ResourceList`] once, so fractions below a unit are summed before they are rounded up, as
//! Kubernetes sums `resource.Quantity` values before the scheduler rounds them.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::iter::Sum;
use std::sync::Arc;

use thiserror::Error;

use crate::quantity::Quantity;

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

/// Exact quantities by resource name: the shape of a Kubernetes `ResourceList`.
pub type Quantities = BTreeMap<ResourceName, Quantity>;

/// The resource fields of one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerResources {
    /// `resources.requests`.
    pub requests: Quantities,
    /// `resources.limits`.
    pub limits: Quantities,
    /// `restartPolicy: Always` on an init container, i.e. a sidecar (KEP-753). Ignored on
    /// regular containers.
    pub restart_policy_always: bool,
}

impl ContainerResources {
    /// The requests Kubernetes uses: `requests`, plus the limit of every resource that has a
    /// limit but no request (the API server's defaulting of requests from limits).
    pub fn effective_requests(&self) -> Quantities {
        let mut requests = self.requests.clone();
        for (name, limit) in &self.limits {
            requests.entry(name.clone()).or_insert(*limit);
        }
        requests
    }
}

/// The resource fields of one pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodResources {
    /// `spec.initContainers`, in order (sidecars included).
    pub init_containers: Vec<ContainerResources>,
    /// `spec.containers`.
    pub containers: Vec<ContainerResources>,
    /// `spec.overhead` (RuntimeClass pod overhead).
    pub overhead: Quantities,
}

impl PodResources {
    /// The pod's requests as exact quantities, computed as Kubernetes'
    /// `resourcehelper.PodRequests` does (KEP-753 rules for sidecars).
    ///
    /// Per resource: the sum over app containers and sidecars, or the peak of any init
    /// container if larger, where an init container's peak is its own request plus the
    /// requests of the sidecars started before it (a sidecar's peak is all sidecars up to and
    /// including itself); then the pod overhead is added.
    pub fn request_quantities(&self) -> Quantities {
        let mut requests = Quantities::new();
        for container in &self.containers {
            add_into(&mut requests, &container.effective_requests());
        }
        let mut sidecars = Quantities::new();
        let mut init_peak = Quantities::new();
        for container in &self.init_containers {
            let own = container.effective_requests();
            if container.restart_policy_always {
                add_into(&mut requests, &own);
                add_into(&mut sidecars, &own);
                max_into(&mut init_peak, &sidecars);
            } else {
                let mut peak = own;
                add_into(&mut peak, &sidecars);
                max_into(&mut init_peak, &peak);
            }
        }
        max_into(&mut requests, &init_peak);
        add_into(&mut requests, &self.overhead);
        requests
    }

    /// The pod's requests (see [`Self::request_quantities`]) as a [`ResourceList`], each
    /// resource rounded up to its unit once, after summing; amounts beyond `i64` saturate.
    pub fn requests(&self) -> ResourceList {
        ResourceList::from_quantities_saturating(&self.request_quantities())
    }
}

/// DaemonSet overhead on a node: the summed requests of the DaemonSet pods that would run there
/// (the caller chooses which DaemonSets apply). Summed exactly, then rounded up once.
pub fn daemon_set_overhead<'a>(
    daemon_pods: impl IntoIterator<Item = &'a PodResources>,
) -> ResourceList {
    let mut total = Quantities::new();
    for pod in daemon_pods {
        add_into(&mut total, &pod.request_quantities());
    }
    ResourceList::from_quantities_saturating(&total)
}

/// What a node reserves for itself (upstream `InstanceTypeOverhead`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOverhead {
    /// kubelet's `--kube-reserved`.
    pub kube_reserved: ResourceList,
    /// kubelet's `--system-reserved`.
    pub system_reserved: ResourceList,
    /// kubelet's hard eviction thresholds, as amounts.
    pub eviction_threshold: ResourceList,
}

impl NodeOverhead {
    /// The sum of the three reservations (upstream `Total()`).
    pub fn total(&self) -> ResourceList {
        [
            &self.kube_reserved,
            &self.system_reserved,
            &self.eviction_threshold,
        ]
        .into_iter()
        .sum()
    }
}

/// A node's allocatable resources, as upstream `InstanceType.Allocatable()`: capacity minus the
/// overhead total, each resource floored at zero, and memory further reduced by every
/// `hugepages-*` capacity (kubelet takes huge pages out of memory), again floored at zero.
pub fn allocatable(capacity: &ResourceList, overhead: &NodeOverhead) -> ResourceList {
    let mut allocatable = capacity.saturating_sub(&overhead.total());
    allocatable.memory = allocatable
        .memory
        .saturating_sub(capacity.hugepages_bytes())
        .max(0);
    allocatable
}

fn add_into(total: &mut Quantities, more: &Quantities) {
    for (name, quantity) in more {
        let sum = total.entry(name.clone()).or_default();
        *sum = sum.saturating_add(*quantity);
    }
}

/// Kubernetes' `maxResourceList`: a resource absent from `total` is taken as is.
fn max_into(total: &mut Quantities, other: &Quantities) {
    for (name, quantity) in other {
        total
            .entry(name.clone())
            .and_modify(|current| *current = (*current).max(*quantity))
            .or_insert(*quantity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn quantities(pairs: &[(&str, &str)]) -> Quantities {
        pairs
            .iter()
            .map(|(name, value)| (ResourceName::new(name), q(value)))
            .collect()
    }

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        ResourceList::from_quantities(pairs.iter().map(|(n, v)| (*n, q(v)))).expect("valid list")
    }

    fn container(requests: &[(&str, &str)]) -> ContainerResources {
        ContainerResources {
            requests: quantities(requests),
            ..ContainerResources::default()
        }
    }

    fn sidecar(requests: &[(&str, &str)]) -> ContainerResources {
        ContainerResources {
            restart_policy_always: true,
            ..container(requests)
        }
    }

    #[test]
    fn names_map_well_known_resources_to_fields_and_sort_by_name() {
        assert_eq!(ResourceName::new("cpu"), ResourceName::CPU);
        assert_eq!(ResourceName::from("pods".to_owned()), ResourceName::PODS);
        assert_eq!(
            ResourceName::new("nvidia.com/gpu").as_str(),
            "nvidia.com/gpu"
        );
        assert!(ResourceName::new("hugepages-2Mi").is_hugepages());
        assert_eq!(ResourceName::new("hugepages-1Gi").unit(), "bytes");
        assert_eq!(ResourceName::CPU.unit(), "millicores");
        assert_eq!(ResourceName::new("nvidia.com/gpu").unit(), "units");
        let mut names = [
            ResourceName::PODS,
            ResourceName::new("nvidia.com/gpu"),
            ResourceName::CPU,
            ResourceName::new("aws.amazon.com/neuron"),
            ResourceName::MEMORY,
            ResourceName::EPHEMERAL_STORAGE,
        ];
        names.sort();
        let sorted: Vec<&str> = names.iter().map(ResourceName::as_str).collect();
        assert_eq!(
            sorted,
            [
                "aws.amazon.com/neuron",
                "cpu",
                "ephemeral-storage",
                "memory",
                "nvidia.com/gpu",
                "pods"
            ]
        );
    }

    #[test]
    fn converts_from_and_to_quantities_rounding_up_to_the_unit() {
        let l = list(&[
            ("cpu", "1500m"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "20G"),
            ("nvidia.com/gpu", "1"),
            ("hugepages-2Mi", "1Gi"),
        ]);
        assert_eq!(l.cpu_millis(), 1500);
        assert_eq!(l.memory_bytes(), 16 * GI);
        assert_eq!(l.pods(), 110);
        assert_eq!(l.ephemeral_storage_bytes(), 20_000_000_000);
        assert_eq!(l.get(&ResourceName::new("nvidia.com/gpu")), 1);
        assert_eq!(l.quantity(&ResourceName::new("hugepages-2Mi")), q("1Gi"));
        let shown: Vec<(String, String)> = l
            .to_quantities()
            .into_iter()
            .map(|(n, q)| (n.to_string(), q.to_string()))
            .collect();
        let expected = [
            ("cpu", "1500m"),
            ("ephemeral-storage", "20G"),
            ("hugepages-2Mi", "1Gi"),
            ("memory", "16Gi"),
            ("nvidia.com/gpu", "1"),
            ("pods", "110"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(shown, expected);
        assert_eq!(
            l.to_string(),
            "{cpu: 1500m, ephemeral-storage: 20G, hugepages-2Mi: 1Gi, memory: 16Gi, \
             nvidia.com/gpu: 1, pods: 110}"
        );
        assert_eq!(
            ResourceList::from_quantities(l.to_quantities().iter().map(|(n, q)| (n, q))),
            Ok(l)
        );

        // Sub-unit amounts round up: cpu to a milli, everything else to a whole unit.
        let tiny = list(&[
            ("cpu", "1n"),
            ("memory", "0.5"),
            ("example.com/foo", "100m"),
        ]);
        assert_eq!(tiny.cpu_millis(), 1);
        assert_eq!(tiny.memory_bytes(), 1);
        assert_eq!(tiny.get(&ResourceName::new("example.com/foo")), 1);
        // Zero entries are not stored, so lists compare structurally.
        assert_eq!(
            list(&[("nvidia.com/gpu", "0"), ("cpu", "0")]),
            ResourceList::new()
        );
        assert!(list(&[("nvidia.com/gpu", "0")]).is_zero());
    }

    #[test]
    fn rejects_duplicates_and_out_of_range_quantities() {
        let dup = ResourceList::from_quantities([("cpu", q("1")), ("cpu", q("2"))]);
        assert_eq!(dup, Err(ResourceError::Duplicate(ResourceName::CPU)));
        let dup = ResourceList::from_quantities([("a/b", q("0")), ("a/b", q("2"))]);
        assert_eq!(dup, Err(ResourceError::Duplicate(ResourceName::new("a/b"))));
        let huge = ResourceList::from_quantities([("cpu", q("9223372036854775807"))]);
        let err = huge.expect_err("out of range");
        assert_eq!(
            err.to_string(),
            "cpu = 9223372036854775807 does not fit a 64-bit count of millicores"
        );
        assert!(ResourceList::from_quantities([("memory", q("8Ei"))]).is_ok());
        assert!(ResourceList::from_quantities([("memory", q("1e19"))]).is_err());
    }

    #[test]
    fn adds_subtracts_and_takes_maxima_per_resource() {
        let a = list(&[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]);
        let b = list(&[
            ("cpu", "500m"),
            ("pods", "1"),
            ("aws.amazon.com/neuron", "2"),
        ]);
        let sum = a.checked_add(&b).expect("no overflow");
        assert_eq!(
            sum,
            list(&[
                ("cpu", "1500m"),
                ("memory", "1Gi"),
                ("pods", "1"),
                ("nvidia.com/gpu", "1"),
                ("aws.amazon.com/neuron", "2"),
            ])
        );
        assert_eq!(a.saturating_add(&b), sum);
        assert_eq!([&a, &b].into_iter().sum::<ResourceList>(), sum);
        assert_eq!(sum.checked_sub(&b), Ok(a.clone()));
        assert_eq!(
            b.checked_sub(&a),
            Ok(ResourceList::new()
                .with(ResourceName::CPU, -500)
                .with(ResourceName::MEMORY, -GI)
                .with("pods", 1)
                .with("nvidia.com/gpu", -1)
                .with("aws.amazon.com/neuron", 2))
        );
        assert_eq!(
            b.saturating_sub(&a),
            list(&[("pods", "1"), ("aws.amazon.com/neuron", "2")])
        );
        assert!(a.saturating_sub(&a).is_zero());
        assert_eq!(
            a.max_per_resource(&b),
            list(&[
                ("cpu", "1"),
                ("memory", "1Gi"),
                ("pods", "1"),
                ("nvidia.com/gpu", "1"),
                ("aws.amazon.com/neuron", "2"),
            ])
        );

        let max = ResourceList::new()
            .with("cpu", i64::MAX)
            .with("x/y", i64::MAX);
        let one = ResourceList::new().with("cpu", 1);
        assert_eq!(
            max.checked_add(&one),
            Err(ResourceError::Overflow {
                resource: ResourceName::CPU,
                operation: "sum"
            })
        );
        let err = max
            .checked_add(&ResourceList::new().with("x/y", 1))
            .expect_err("overflow");
        assert_eq!(
            err.to_string(),
            "the sum of x/y overflows a 64-bit count of units"
        );
        assert_eq!(max.saturating_add(&one).cpu_millis(), i64::MAX);

        // An extended amount that cancels out disappears.
        let mut gpu = ResourceList::new().with("nvidia.com/gpu", 2);
        gpu.saturating_add_assign(&ResourceList::new().with("nvidia.com/gpu", -2));
        assert_eq!(gpu, ResourceList::new());
    }

    #[test]
    fn only_non_fixed_resources_count_as_extended() {
        let fixed = list(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "3")]);
        assert!(!fixed.has_extended_resources());
        let gpu = fixed.clone().with("nvidia.com/gpu", 1);
        assert!(gpu.has_extended_resources());
        assert!(!gpu.with("nvidia.com/gpu", 0).has_extended_resources());
    }

    #[test]
    fn fits_names_the_first_resource_that_does_not_fit() {
        let node = list(&[("cpu", "3.5"), ("memory", "15Gi"), ("pods", "110")]);
        assert_eq!(
            fits(&list(&[("cpu", "3.5"), ("memory", "15Gi")]), &node),
            Ok(())
        );
        assert_eq!(fits(&ResourceList::new(), &node), Ok(()));

        let err = fits(&list(&[("cpu", "4"), ("memory", "16Gi")]), &node).expect_err("cpu");
        assert_eq!(err.resource, ResourceName::CPU);
        assert_eq!(err.to_string(), "needs 4 cpu, 3500m available");

        let err = fits(&list(&[("memory", "16Gi")]), &node).expect_err("memory");
        assert_eq!(err.to_string(), "needs 16Gi memory, 15Gi available");

        let err = fits(&list(&[("ephemeral-storage", "1Gi")]), &node).expect_err("storage");
        assert_eq!(err.to_string(), "needs 1Gi ephemeral-storage, 0 available");

        let err = fits(&list(&[("pods", "111")]), &node).expect_err("pods");
        assert_eq!(err.to_string(), "needs 111 pods, 110 available");

        // An extended resource the node lacks does not fit; one it has but nobody asks for
        // does not matter.
        let err = fits(&list(&[("nvidia.com/gpu", "1")]), &node).expect_err("gpu");
        assert_eq!(err.to_string(), "needs 1 nvidia.com/gpu, 0 available");
        let gpu_node = node.clone().with("nvidia.com/gpu", 8).with("a/b", 1);
        assert_eq!(fits(&list(&[("nvidia.com/gpu", "8")]), &gpu_node), Ok(()));
        assert!(fits(&list(&[("nvidia.com/gpu", "9")]), &gpu_node).is_err());
    }

    #[test]
    fn pod_requests_sum_app_containers() {
        let pod = PodResources {
            containers: vec![
                container(&[("cpu", "100m"), ("memory", "128Mi")]),
                container(&[("cpu", "250m"), ("memory", "64Mi")]),
            ],
            ..PodResources::default()
        };
        assert_eq!(
            pod.requests(),
            list(&[("cpu", "350m"), ("memory", "192Mi")])
        );
    }

    #[test]
    fn pod_requests_take_the_larger_of_init_containers_and_app_containers_per_resource() {
        let pod = PodResources {
            init_containers: vec![
                container(&[("cpu", "2"), ("memory", "64Mi")]),
                container(&[("cpu", "500m"), ("memory", "1Gi")]),
            ],
            containers: vec![
                container(&[("cpu", "1"), ("memory", "256Mi")]),
                container(&[("cpu", "500m"), ("memory", "256Mi")]),
            ],
            ..PodResources::default()
        };
        // cpu: max(1.5, 2) = 2; memory: max(512Mi, 1Gi) = 1Gi; init containers run one at a
        // time, so they are not summed with each other.
        assert_eq!(pod.requests(), list(&[("cpu", "2"), ("memory", "1Gi")]));
    }

    #[test]
    fn limits_stand_in_for_missing_requests_per_resource() {
        let c = ContainerResources {
            requests: quantities(&[("cpu", "100m"), ("memory", "0")]),
            limits: quantities(&[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]),
            restart_policy_always: false,
        };
        // cpu keeps its request, memory keeps its explicit zero, the GPU takes its limit.
        assert_eq!(
            c.effective_requests(),
            quantities(&[("cpu", "100m"), ("memory", "0"), ("nvidia.com/gpu", "1")])
        );
        let pod = PodResources {
            init_containers: vec![ContainerResources {
                limits: quantities(&[("cpu", "3")]),
                ..ContainerResources::default()
            }],
            containers: vec![c],
            ..PodResources::default()
        };
        assert_eq!(
            pod.requests(),
            list(&[("cpu", "3"), ("nvidia.com/gpu", "1")])
        );
    }

    #[test]
    fn sidecars_add_to_the_pod_and_to_later_init_containers() {
        // KEP-753: sidecars run for the pod's whole life, so they add to the app containers;
        // each regular init container runs alongside the sidecars started before it.
        let pod = PodResources {
            init_containers: vec![
                sidecar(&[("cpu", "1")]),
                container(&[("cpu", "2")]), // peak 2 + 1 = 3
                sidecar(&[("cpu", "3")]),   // peak 1 + 3 = 4
                container(&[("cpu", "2")]), // peak 2 + 4 = 6
            ],
            containers: vec![container(&[("cpu", "1")])], // 1 + sidecars 4 = 5
            ..PodResources::default()
        };
        assert_eq!(pod.requests(), list(&[("cpu", "6")]));

        // An init container before any sidecar does not see it.
        let pod = PodResources {
            init_containers: vec![container(&[("cpu", "4")]), sidecar(&[("cpu", "1")])],
            containers: vec![container(&[("cpu", "1")])],
            ..PodResources::default()
        };
        assert_eq!(pod.requests(), list(&[("cpu", "4")]));

        // A sidecar's own start is a peak too: all sidecars so far.
        let pod = PodResources {
            init_containers: vec![sidecar(&[("memory", "1Gi")]), sidecar(&[("memory", "1Gi")])],
            containers: vec![],
            ..PodResources::default()
        };
        assert_eq!(pod.requests(), list(&[("memory", "2Gi")]));

        // restartPolicy on an app container means nothing here.
        let pod = PodResources {
            containers: vec![sidecar(&[("cpu", "1")])],
            ..PodResources::default()
        };
        assert_eq!(pod.requests(), list(&[("cpu", "1")]));
    }

    #[test]
    fn overhead_is_added_after_the_init_container_maximum() {
        let pod = PodResources {
            init_containers: vec![container(&[("cpu", "2")])],
            containers: vec![container(&[("cpu", "1")])],
            overhead: quantities(&[("cpu", "250m"), ("memory", "120Mi")]),
        };
        assert_eq!(
            pod.requests(),
            list(&[("cpu", "2250m"), ("memory", "120Mi")])
        );
    }

    #[test]
    fn sub_unit_amounts_are_summed_before_rounding() {
        let pod = PodResources {
            containers: vec![
                container(&[("memory", "0.5")]),
                container(&[("memory", "0.5")]),
            ],
            ..PodResources::default()
        };
        assert_eq!(pod.requests().memory_bytes(), 1);
    }

    #[test]
    fn daemon_set_overhead_sums_the_daemon_pods() {
        let daemons = [
            PodResources {
                containers: vec![container(&[("cpu", "100m"), ("memory", "128Mi")])],
                ..PodResources::default()
            },
            PodResources {
                init_containers: vec![container(&[("cpu", "1")])],
                containers: vec![container(&[("cpu", "50m"), ("memory", "64Mi")])],
                ..PodResources::default()
            },
        ];
        assert_eq!(
            daemon_set_overhead(&daemons),
            list(&[("cpu", "1100m"), ("memory", "192Mi")])
        );
        assert_eq!(daemon_set_overhead(&[]), ResourceList::new());
    }

    #[test]
    fn allocatable_subtracts_overhead_and_hugepages_floored_at_zero() {
        let capacity = list(&[
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("pods", "58"),
            ("ephemeral-storage", "20Gi"),
            ("hugepages-2Mi", "1Gi"),
            ("hugepages-1Gi", "2Gi"),
        ]);
        let overhead = NodeOverhead {
            kube_reserved: list(&[
                ("cpu", "80m"),
                ("memory", "893Mi"),
                ("ephemeral-storage", "1Gi"),
            ]),
            system_reserved: list(&[("cpu", "20m")]),
            eviction_threshold: list(&[("memory", "100Mi"), ("ephemeral-storage", "2Gi")]),
        };
        assert_eq!(
            overhead.total(),
            list(&[
                ("cpu", "100m"),
                ("memory", "993Mi"),
                ("ephemeral-storage", "3Gi")
            ])
        );
        let alloc = allocatable(&capacity, &overhead);
        assert_eq!(alloc.cpu_millis(), 3900);
        assert_eq!(alloc.memory_bytes(), 16 * GI - 993 * MI - 3 * GI);
        assert_eq!(alloc.ephemeral_storage_bytes(), 17 * GI);
        assert_eq!(alloc.pods(), 58);
        // Huge pages stay allocatable as themselves.
        assert_eq!(alloc.get(&ResourceName::new("hugepages-2Mi")), GI);

        // Overhead beyond capacity, or huge pages beyond memory, floor at zero; overhead on a
        // resource the node does not have is ignored.
        let small = list(&[("cpu", "50m"), ("memory", "1Gi"), ("hugepages-2Mi", "2Gi")]);
        let heavy = NodeOverhead {
            kube_reserved: list(&[("cpu", "80m"), ("example.com/foo", "1")]),
            ..NodeOverhead::default()
        };
        let alloc = allocatable(&small, &heavy);
        assert_eq!(alloc.cpu_millis(), 0);
        assert_eq!(alloc.memory_bytes(), 0);
        assert_eq!(alloc.get(&ResourceName::new("example.com/foo")), 0);
    }

    fn arb_list() -> impl Strategy<Value = ResourceList> {
        let amount = || 0i64..1_000_000_000_000;
        (
            amount(),
            amount(),
            amount(),
            0i64..1000,
            proptest::collection::vec(
                (
                    prop_oneof![
                        Just("nvidia.com/gpu"),
                        Just("aws.amazon.com/neuron"),
                        Just("hugepages-2Mi"),
                        Just("example.com/foo"),
                    ],
                    0i64..64,
                ),
                0..4,
            ),
        )
            .prop_map(|(cpu, memory, storage, pods, extended)| {
                let mut list = ResourceList::new()
                    .with(ResourceName::CPU, cpu)
                    .with(ResourceName::MEMORY, memory)
                    .with(ResourceName::EPHEMERAL_STORAGE, storage)
                    .with(ResourceName::PODS, pods);
                for (name, amount) in extended {
                    list.set(&ResourceName::new(name), amount);
                }
                list
            })
    }

    proptest! {
        #[test]
        fn addition_is_commutative_and_associative_with_zero_identity(
            a in arb_list(), b in arb_list(), c in arb_list()
        ) {
            let ab = a.checked_add(&b).expect("small");
            prop_assert_eq!(&ab, &b.checked_add(&a).expect("small"));
            prop_assert_eq!(
                ab.checked_add(&c).expect("small"),
                a.checked_add(&b.checked_add(&c).expect("small")).expect("small")
            );
            prop_assert_eq!(a.checked_add(&ResourceList::new()).expect("small"), a.clone());
            prop_assert_eq!(a.saturating_add(&b), ab);
        }

        #[test]
        fn subtraction_undoes_addition(a in arb_list(), b in arb_list()) {
            let ab = a.checked_add(&b).expect("small");
            prop_assert_eq!(ab.checked_sub(&b).expect("small"), a.clone());
            prop_assert_eq!(ab.saturating_sub(&b), a.clone());
            prop_assert!(a.saturating_sub(&ab).is_zero());
            prop_assert!(a.checked_sub(&a).expect("small").is_zero());
        }

        #[test]
        fn saturating_sub_never_goes_negative(a in arb_list(), b in arb_list()) {
            let d = a.saturating_sub(&b);
            prop_assert!(d.iter().all(|(_, amount)| amount > 0));
        }

        #[test]
        fn max_is_an_upper_bound_commutative_and_idempotent(a in arb_list(), b in arb_list()) {
            let m = a.max_per_resource(&b);
            prop_assert_eq!(&m, &b.max_per_resource(&a));
            prop_assert_eq!(a.max_per_resource(&a), a.clone());
            prop_assert!(fits(&a, &m).is_ok() && fits(&b, &m).is_ok());
        }

        #[test]
        fn fits_agrees_with_subtraction(r in arb_list(), a in arb_list()) {
            let remaining = a.checked_sub(&r).expect("small");
            let all_non_negative = remaining.iter().all(|(_, amount)| amount >= 0);
            prop_assert_eq!(fits(&r, &a).is_ok(), all_non_negative);
            prop_assert!(fits(&r, &r).is_ok());
        }

        #[test]
        fn fits_is_monotone(r in arb_list(), a in arb_list(), less in arb_list(), more in arb_list()) {
            if fits(&r, &a).is_ok() {
                // Asking for less, or offering more, still fits.
                prop_assert!(fits(&r.saturating_sub(&less), &a).is_ok());
                prop_assert!(fits(&r, &a.saturating_add(&more)).is_ok());
            } else {
                // Asking for more, or offering less, still does not.
                prop_assert!(fits(&r.saturating_add(&more), &a).is_err());
                prop_assert!(fits(&r, &a.saturating_sub(&less)).is_err());
            }
        }

        #[test]
        fn quantities_round_trip(a in arb_list()) {
            let pairs = a.to_quantities();
            let back = ResourceList::from_quantities(pairs.iter().map(|(n, q)| (n, q)));
            prop_assert_eq!(back, Ok(a));
        }
    }
}
