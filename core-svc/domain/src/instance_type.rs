//! Instance types and offerings as core sees them: what a node of a type can hold, where and
//! how it can be bought, at what price; and the choices the scheduler makes among them
//! (compatible types, cheapest offering, ordering by price, truncation under minValues).

use std::sync::Arc;

use crate::labels::{LABEL_CAPACITY_TYPE as CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE as ZONE};
use crate::requirements::{MinValuesError, Requirement, Requirements};
use crate::resources::{NodeOverhead, ResourceList, allocatable};

/// The most instance types one NodeClaim lists (upstream `MaxInstanceTypes`): enough choice for
/// the provider to dodge capacity errors, small enough for the object to stay readable.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// One way to buy an instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    /// What a node of this offering satisfies: always zone and capacity type, plus any extra
    /// keys the provider gave (zone ID, reservation ID).
    pub requirements: Requirements,
    /// The zone (also in `requirements`), kept apart because the scheduler reads it often.
    pub zone: Arc<str>,
    /// The capacity type (`on-demand`, `spot`, `reserved`), likewise.
    pub capacity_type: Arc<str>,
    /// Price per hour.
    pub price: f64,
    /// Whether it can be launched now.
    pub available: bool,
    /// For reserved offerings, how many more nodes fit the reservation.
    pub reservation_capacity: Option<u32>,
}

impl Offering {
    /// An offering in `zone` of `capacity_type`, with `extra` requirements beyond those two.
    pub fn new(
        zone: &str,
        capacity_type: &str,
        price: f64,
        available: bool,
        extra: Requirements,
    ) -> Self {
        let mut requirements = extra;
        requirements.add(Requirement::in_values(ZONE, [zone]));
        requirements.add(Requirement::in_values(CAPACITY_TYPE, [capacity_type]));
        Offering {
            requirements,
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            available,
            reservation_capacity: None,
        }
    }

    /// Whether a node of this offering can meet `requirements`.
    pub fn is_compatible(&self, requirements: &Requirements) -> bool {
        requirements.is_intersecting(&self.requirements)
    }
}

/// An instance type: its requirements (the labels its nodes carry), offerings, capacity and
/// overhead. Allocatable is computed once, at construction.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    name: Arc<str>,
    requirements: Requirements,
    offerings: Vec<Offering>,
    capacity: ResourceList,
    overhead: NodeOverhead,
    allocatable: ResourceList,
    burstable_cpu: bool,
}

impl InstanceType {
    /// An instance type; allocatable = capacity - overhead (memory also less hugepages).
    pub fn new(
        name: &str,
        requirements: Requirements,
        offerings: Vec<Offering>,
        capacity: ResourceList,
        overhead: NodeOverhead,
    ) -> Self {
        let allocatable = allocatable(&capacity, &overhead);
        InstanceType {
            name: name.into(),
            requirements,
            offerings,
            capacity,
            overhead,
            allocatable,
            burstable_cpu: false,
        }
    }

    /// The same type, its cpu burstable or not (see [`is_cpu_burstable`](Self::is_cpu_burstable)).
    #[must_use]
    pub fn with_burstable_cpu(mut self, burstable: bool) -> Self {
        self.burstable_cpu = burstable;
        self
    }

    /// Whether the type's cpu is burstable (a baseline share plus credits: AWS `t3`, GCP
    /// `e2-micro`, Azure B series), as the cloud provider says: its full cpu is not sustained.
    pub fn is_cpu_burstable(&self) -> bool {
        self.burstable_cpu
    }

    /// The name, equal to the `node.kubernetes.io/instance-type` label.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What every node of this type satisfies.
    pub fn requirements(&self) -> &Requirements {
        &self.requirements
    }

    /// Every offering, available or not.
    pub fn offerings(&self) -> &[Offering] {
        &self.offerings
    }

    /// The full capacity of a node.
    pub fn capacity(&self) -> &ResourceList {
        &self.capacity
    }

    /// What the node keeps for itself.
    pub fn overhead(&self) -> &NodeOverhead {
        &self.overhead
    }

    /// What pods can use.
    pub fn allocatable(&self) -> &ResourceList {
        &self.allocatable
    }

    /// The available offerings compatible with `requirements`.
    pub fn available_offerings<'a>(
        &'a self,
        requirements: &'a Requirements,
    ) -> impl Iterator<Item = &'a Offering> + 'a {
        self.offerings
            .iter()
            .filter(move |o| o.available && o.is_compatible(requirements))
    }

    /// Whether an available offering is compatible with `requirements`.
    pub fn has_available_offering(&self, requirements: &Requirements) -> bool {
        self.available_offerings(requirements).next().is_some()
    }

    /// The cheapest available offering compatible with `requirements`.
    pub fn cheapest_offering<'a>(&'a self, requirements: &'a Requirements) -> Option<&'a Offering> {
        self.available_offerings(requirements)
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// Whether a node of this type can meet `requirements` at all: its own requirements are
    /// compatible and one of its offerings is available for them.
    pub fn is_compatible(&self, requirements: &Requirements) -> bool {
        requirements.is_intersecting(&self.requirements)
            && self.has_available_offering(requirements)
    }
}

/// The types of `instance_types` compatible with `requirements`, in their order.
pub fn compatible<'a>(
    instance_types: &'a [Arc<InstanceType>],
    requirements: &'a Requirements,
) -> impl Iterator<Item = &'a Arc<InstanceType>> + 'a {
    instance_types
        .iter()
        .filter(move |t| t.is_compatible(requirements))
}

/// Sorts by the price of each type's cheapest available offering compatible with
/// `requirements`, cheapest first; types without one go last; ties break by name so the order
/// is deterministic.
pub fn order_by_price(instance_types: &mut [Arc<InstanceType>], requirements: &Requirements) {
    instance_types.sort_by_cached_key(|t| {
        let price = t
            .cheapest_offering(requirements)
            .map_or(f64::INFINITY, |o| o.price);
        (OrderedPrice(price), t.name.clone())
    });
}

/// Orders `instance_types` by price and keeps at most `max` of them, checking that the kept
/// ones still satisfy every minValues of `requirements` (upstream `Truncate` under the Strict
/// min-values policy).
pub fn truncate(
    mut instance_types: Vec<Arc<InstanceType>>,
    requirements: &Requirements,
    max: usize,
) -> Result<Vec<Arc<InstanceType>>, MinValuesError> {
    order_by_price(&mut instance_types, requirements);
    instance_types.truncate(max);
    if requirements.has_min_values() {
        requirements.satisfies_min_values(instance_types.iter().map(|t| t.requirements()))?;
    }
    Ok(instance_types)
}

/// A price with a total order, for sorting.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedPrice(f64);

impl Eq for OrderedPrice {}

impl PartialOrd for OrderedPrice {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedPrice {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::LABEL_INSTANCE_TYPE as INSTANCE_TYPE;

    fn instance_type(name: &str, offerings: &[(&str, &str, f64, bool)]) -> Arc<InstanceType> {
        let zones: Vec<&str> = offerings.iter().map(|o| o.0).collect();
        let capacity_types: Vec<&str> = offerings.iter().map(|o| o.1).collect();
        let requirements: Requirements = [
            Requirement::in_values(INSTANCE_TYPE, [name]),
            Requirement::in_values(ZONE, zones),
            Requirement::in_values(CAPACITY_TYPE, capacity_types),
        ]
        .into_iter()
        .collect();
        let offerings = offerings
            .iter()
            .map(|(zone, capacity_type, price, available)| {
                Offering::new(zone, capacity_type, *price, *available, Requirements::new())
            })
            .collect();
        Arc::new(InstanceType::new(
            name,
            requirements,
            offerings,
            ResourceList::new(),
            NodeOverhead::default(),
        ))
    }

    fn requirements(requirements: &[Requirement]) -> Requirements {
        requirements.iter().cloned().collect()
    }

    #[test]
    fn the_cheapest_offering_is_available_and_compatible() {
        let t = instance_type(
            "m5.large",
            &[
                ("a", "spot", 0.03, false),
                ("a", "on-demand", 0.096, true),
                ("b", "spot", 0.04, true),
            ],
        );
        let any = Requirements::new();
        assert_eq!(
            t.cheapest_offering(&any).map(|o| o.price),
            Some(0.04),
            "the unavailable 0.03 is skipped"
        );
        let zone_a = requirements(&[Requirement::in_values(ZONE, ["a"])]);
        assert_eq!(t.cheapest_offering(&zone_a).map(|o| o.price), Some(0.096));
        let zone_c = requirements(&[Requirement::in_values(ZONE, ["c"])]);
        assert!(t.cheapest_offering(&zone_c).is_none());
        assert!(!t.is_compatible(&zone_c));
        let spot_in_a = requirements(&[
            Requirement::in_values(ZONE, ["a"]),
            Requirement::in_values(CAPACITY_TYPE, ["spot"]),
        ]);
        assert!(
            !t.is_compatible(&spot_in_a),
            "the only spot offering in a is unavailable"
        );
    }

    #[test]
    fn ordering_by_price_uses_the_compatible_offerings_and_is_deterministic() {
        let mut types = vec![
            instance_type("c", &[("a", "on-demand", 0.2, true)]),
            instance_type(
                "b",
                &[("a", "on-demand", 0.3, true), ("b", "spot", 0.01, true)],
            ),
            instance_type("a", &[("a", "on-demand", 0.2, true)]),
            instance_type("gone", &[("a", "on-demand", 0.01, false)]),
        ];
        order_by_price(&mut types, &Requirements::new());
        let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["b", "a", "c", "gone"]);
        let on_demand = requirements(&[Requirement::in_values(CAPACITY_TYPE, ["on-demand"])]);
        order_by_price(&mut types, &on_demand);
        let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            ["a", "c", "b", "gone"],
            "b's cheap spot offering no longer counts"
        );
    }

    #[test]
    fn truncation_keeps_the_cheapest_and_enforces_min_values() {
        let types: Vec<_> = (0..10)
            .map(|i| {
                instance_type(
                    &format!("t{i}"),
                    &[("a", "on-demand", 1.0 + f64::from(i), true)],
                )
            })
            .collect();
        let plain = Requirements::new();
        let kept = truncate(types.clone(), &plain, 3).unwrap();
        assert_eq!(
            kept.iter().map(|t| t.name()).collect::<Vec<_>>(),
            ["t0", "t1", "t2"]
        );

        let mut needs_five = Requirements::new();
        needs_five.add(Requirement::exists(INSTANCE_TYPE).with_min_values(Some(5)));
        assert!(truncate(types.clone(), &needs_five, 5).is_ok());
        let error = truncate(types, &needs_five, 3).unwrap_err();
        assert!(error.to_string().contains(INSTANCE_TYPE), "{error}");
    }
}
