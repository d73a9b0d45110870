//! What to launch, chosen from the plugin's own catalogue (pure): the cheapest available
//! offering, and for each requirement the API says Create honours (zone, capacity type,
//! architecture) a NodeClaim that allows many instance types but narrows that one key to a
//! value the cheapest choice would not have, so a plugin that ignores the key is caught.

use std::collections::BTreeSet;

use core_domain::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE,
};
use provider_sdk::v1::{self, Operator, Requirement};

/// How many instance types a "many types" NodeClaim allows (EC2 takes at most 60 overrides
/// per fleet; the cheapest 20 keep every plugin's request small).
const MANY: usize = 20;

/// One offering that says it can be launched.
#[derive(Debug, Clone, PartialEq)]
pub struct Available<'a> {
    /// Its instance type.
    pub instance_type: &'a v1::InstanceType,
    /// The offering.
    pub offering: &'a v1::Offering,
}

impl Available<'_> {
    /// Its price (every available offering has one: the catalogue checks say so).
    pub fn price(&self) -> f64 {
        self.offering.price.unwrap_or(f64::INFINITY)
    }

    /// The architecture of its type, from the type's `kubernetes.io/arch` In requirement.
    pub fn arch(&self) -> Option<&str> {
        arch_of(self.instance_type)
    }

    /// Exactly this offering: its type, zone and capacity type.
    pub fn requirements(&self) -> Vec<Requirement> {
        vec![
            Requirement::in_values(LABEL_INSTANCE_TYPE, [&self.instance_type.name]),
            Requirement::in_values(LABEL_TOPOLOGY_ZONE, [&self.offering.zone]),
            Requirement::in_values(LABEL_CAPACITY_TYPE, [&self.offering.capacity_type]),
        ]
    }
}

/// The single architecture an instance type names, if it names one.
pub fn arch_of(instance_type: &v1::InstanceType) -> Option<&str> {
    instance_type
        .requirements
        .iter()
        .find(|r| r.key == LABEL_ARCH && r.operator() == Operator::In && r.values.len() == 1)
        .map(|r| r.values[0].as_str())
}

/// Every available offering, cheapest first (ties by type, zone and capacity type, so the
/// choice is the same on every run).
pub fn available(catalogue: &[v1::InstanceType]) -> Vec<Available<'_>> {
    let mut all: Vec<Available<'_>> = catalogue
        .iter()
        .flat_map(|instance_type| {
            instance_type
                .offerings
                .iter()
                .filter(|offering| offering.is_available() && offering.price.is_some())
                .map(move |offering| Available {
                    instance_type,
                    offering,
                })
        })
        .collect();
    all.sort_by(|a, b| {
        a.price()
            .total_cmp(&b.price())
            .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
            .then_with(|| a.offering.zone.cmp(&b.offering.zone))
            .then_with(|| a.offering.capacity_type.cmp(&b.offering.capacity_type))
    });
    all
}

/// The offering every plain launch uses: the cheapest available on-demand one (on-demand
/// launches where spot may be refused), else the cheapest available one.
pub fn primary<'a>(available: &[Available<'a>]) -> Option<Available<'a>> {
    available
        .iter()
        .find(|a| a.offering.capacity_type == "on-demand")
        .or_else(|| available.first())
        .cloned()
}

/// A NodeClaim's requirements that allow many types but narrow `key` to `value`, and the
/// type names it allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Narrowed {
    /// The key narrowed.
    pub key: &'static str,
    /// The one value allowed.
    pub value: String,
    /// The instance types allowed.
    pub instance_types: BTreeSet<String>,
    /// The requirements to send.
    pub requirements: Vec<Requirement>,
}

/// The cheapest `MANY` types with an available offering, plus `must` (so the narrowed
/// value can be launched at all).
fn many_types<'a>(available: &[Available<'a>], must: &'a str) -> BTreeSet<String> {
    let mut names: Vec<&str> = Vec::with_capacity(MANY + 1);
    for a in available {
        if names.len() == MANY {
            break;
        }
        if !names.contains(&a.instance_type.name.as_str()) {
            names.push(&a.instance_type.name);
        }
    }
    names.push(must);
    names.into_iter().map(str::to_owned).collect()
}

fn narrowed(
    available: &[Available<'_>],
    key: &'static str,
    target: &Available<'_>,
    value: &str,
) -> Narrowed {
    let instance_types = many_types(available, &target.instance_type.name);
    Narrowed {
        key,
        value: value.to_owned(),
        requirements: vec![
            Requirement::in_values(LABEL_INSTANCE_TYPE, &instance_types),
            Requirement::in_values(key, [value]),
        ],
        instance_types,
    }
}

/// Many types, but only a zone the primary offering is not in; `None` with one zone.
pub fn other_zone(available: &[Available<'_>], primary: &Available<'_>) -> Option<Narrowed> {
    let target = available
        .iter()
        .find(|a| a.offering.zone != primary.offering.zone)?;
    Some(narrowed(
        available,
        LABEL_TOPOLOGY_ZONE,
        target,
        &target.offering.zone,
    ))
}

/// Many types, but only a capacity type the primary offering is not; `None` with one.
pub fn other_capacity_type(
    available: &[Available<'_>],
    primary: &Available<'_>,
) -> Option<Narrowed> {
    let target = available
        .iter()
        .find(|a| a.offering.capacity_type != primary.offering.capacity_type)?;
    Some(narrowed(
        available,
        LABEL_CAPACITY_TYPE,
        target,
        &target.offering.capacity_type,
    ))
}

/// Many types, but only an architecture the primary type is not; `None` with one.
pub fn other_arch(available: &[Available<'_>], primary: &Available<'_>) -> Option<Narrowed> {
    let primary_arch = primary.arch()?;
    let target = available
        .iter()
        .find(|a| a.arch().is_some_and(|arch| arch != primary_arch))?;
    let arch = target.arch()?.to_owned();
    Some(narrowed(available, LABEL_ARCH, target, &arch))
}

/// Requirements no available offering satisfies, and what they name: an offering the
/// catalogue calls unavailable (its type, zone and capacity type, when no other offering of
/// the same three is available), else the primary type outside every zone it is offered in.
pub fn unlaunchable(catalogue: &[v1::InstanceType], primary: &Available<'_>) -> Vec<Requirement> {
    let available: BTreeSet<(&str, &str, &str)> = available(catalogue)
        .iter()
        .map(|a| {
            (
                a.instance_type.name.as_str(),
                a.offering.zone.as_str(),
                a.offering.capacity_type.as_str(),
            )
        })
        .collect();
    let unavailable = catalogue.iter().find_map(|instance_type| {
        instance_type
            .offerings
            .iter()
            .find(|o| {
                o.availability() == v1::Availability::Unavailable
                    && !available.contains(&(
                        instance_type.name.as_str(),
                        o.zone.as_str(),
                        o.capacity_type.as_str(),
                    ))
            })
            .map(|offering| Available {
                instance_type,
                offering,
            })
    });
    match unavailable {
        Some(offering) => offering.requirements(),
        None => {
            let zones: BTreeSet<&str> = primary
                .instance_type
                .offerings
                .iter()
                .map(|o| o.zone.as_str())
                .collect();
            vec![
                Requirement::in_values(LABEL_INSTANCE_TYPE, [&primary.instance_type.name]),
                Requirement {
                    key: LABEL_TOPOLOGY_ZONE.to_owned(),
                    operator: Operator::NotIn as i32,
                    values: zones.into_iter().map(str::to_owned).collect(),
                    min_values: None,
                },
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests: a panic is a failed assertion")]

    use super::*;

    fn instance_type(
        name: &str,
        arch: &str,
        offerings: &[(&str, &str, f64, bool)],
    ) -> v1::InstanceType {
        v1::InstanceType {
            name: name.into(),
            requirements: vec![
                Requirement::in_values(LABEL_INSTANCE_TYPE, [name]),
                Requirement::in_values(LABEL_ARCH, [arch]),
            ],
            offerings: offerings
                .iter()
                .map(|(zone, capacity_type, price, available)| {
                    v1::Offering::priced(zone, capacity_type, *price, "USD", *available)
                })
                .collect(),
            ..Default::default()
        }
    }

    fn catalogue() -> Vec<v1::InstanceType> {
        vec![
            instance_type(
                "small",
                "amd64",
                &[
                    ("a", "on-demand", 0.10, true),
                    ("a", "spot", 0.03, true),
                    ("b", "on-demand", 0.10, false),
                ],
            ),
            instance_type(
                "medium",
                "amd64",
                &[
                    ("a", "on-demand", 0.20, true),
                    ("b", "on-demand", 0.20, true),
                ],
            ),
            instance_type("arm", "arm64", &[("a", "on-demand", 0.15, true)]),
        ]
    }

    #[test]
    fn the_primary_is_the_cheapest_available_on_demand_offering() {
        let catalogue = catalogue();
        let available = available(&catalogue);
        assert_eq!(
            available[0].offering.capacity_type, "spot",
            "cheapest first"
        );
        let primary = primary(&available).unwrap();
        assert_eq!(
            (
                primary.instance_type.name.as_str(),
                primary.offering.zone.as_str()
            ),
            ("small", "a")
        );
        assert_eq!(primary.offering.capacity_type, "on-demand");
    }

    #[test]
    fn each_narrowing_allows_many_types_but_one_value_the_primary_lacks() {
        let catalogue = catalogue();
        let available = available(&catalogue);
        let primary = primary(&available).unwrap();

        let zone = other_zone(&available, &primary).unwrap();
        assert_eq!((zone.key, zone.value.as_str()), (LABEL_TOPOLOGY_ZONE, "b"));
        assert!(zone.instance_types.contains("small") && zone.instance_types.contains("medium"));

        let capacity_type = other_capacity_type(&available, &primary).unwrap();
        assert_eq!(capacity_type.value, "spot");

        let arch = other_arch(&available, &primary).unwrap();
        assert_eq!(arch.value, "arm64");
        assert_eq!(
            arch.instance_types.len(),
            3,
            "the cheaper amd64 types are allowed too"
        );
        assert_eq!(
            arch.requirements[1],
            Requirement::in_values(LABEL_ARCH, ["arm64"])
        );
    }

    #[test]
    fn a_single_zone_catalogue_has_no_zone_to_narrow_to() {
        let catalogue = vec![instance_type(
            "small",
            "amd64",
            &[("a", "on-demand", 0.1, true)],
        )];
        let available = available(&catalogue);
        let primary = primary(&available).unwrap();
        assert_eq!(other_zone(&available, &primary), None);
        assert_eq!(other_capacity_type(&available, &primary), None);
        assert_eq!(other_arch(&available, &primary), None);
    }

    #[test]
    fn unlaunchable_names_an_unavailable_offering_or_no_zone_at_all() {
        let catalogue = catalogue();
        let available_offerings = available(&catalogue);
        let primary = primary(&available_offerings).unwrap();
        assert_eq!(
            unlaunchable(&catalogue, &primary),
            vec![
                Requirement::in_values(LABEL_INSTANCE_TYPE, ["small"]),
                Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["b"]),
                Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"]),
            ]
        );
        let all_available = vec![instance_type(
            "small",
            "amd64",
            &[("a", "on-demand", 0.1, true), ("b", "spot", 0.1, true)],
        )];
        let offerings = available(&all_available);
        let primary = super::primary(&offerings).unwrap();
        let requirements = unlaunchable(&all_available, &primary);
        assert_eq!(requirements[1].operator(), Operator::NotIn);
        assert_eq!(requirements[1].values, ["a", "b"]);
    }
}
