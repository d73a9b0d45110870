//! What a Create launches, decided without I/O: which instance types of the catalogue a
//! NodeClaim allows, spot or on-demand, and the fleet's overrides (instance type x subnet),
//! cheapest first. Upstream's `instance.go`, with the same rules:
//!
//! - a type qualifies when its requirements intersect the NodeClaim's, its allocatable holds
//!   the NodeClaim's resource requests, the node class has an image for its architecture, and
//!   one of its offerings is available, allowed by the requirements, and in a zone where the
//!   node class selects a subnet;
//! - without minValues, "exotic" types (metal, GPUs and other accelerators) are dropped when
//!   ordinary ones qualify, and in a launch that may be spot or on-demand, types whose cheapest
//!   offering costs more than the cheapest on-demand one are dropped;
//! - reserved when the requirements allow it and a reserved offering qualifies (upstream's
//!   `CapacityReservationTypeFilter`: the reservations of one kind only, the kind with the
//!   cheapest offering, ties to on-demand capacity reservations, then capacity blocks, then
//!   interruptible reservations; each option targets its reservation), else spot when the
//!   requirements allow it and a spot offering qualifies, else on-demand;
//! - one override per qualifying offering of that capacity type, in the best subnet of its
//!   zone, ordered by price, at most [`MAX_OVERRIDES`].
//!
//! Where upstream keeps the 60 cheapest *types* and offers each in every zone, this keeps the
//! 60 cheapest *offerings* (a type in a zone), which bounds the fleet request the same way and
//! prefers a cheap zone of a second type over an expensive zone of the first. Offerings in
//! zones without a subnet are left out before spot or on-demand is chosen, so a spot offering
//! that could never launch does not make the launch spot.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_INSTANCE_SIZE, LABEL_TOPOLOGY_ZONE_ID,
};
use core_domain::instance_type::{InstanceType, Offering};
use core_domain::labels::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
};
use core_domain::quantity::Quantity;
use core_domain::requirements::{MinValuesError, Operator, Requirement, Requirements};
use core_domain::resources::{NodeOverhead, ResourceList, ResourceName, fits};
use provider_sdk::v1;

use crate::ec2::CapacityType;
use crate::node_class::ResolvedSubnet;

/// The most overrides one CreateFleet carries (upstream's limit on a launch's choices).
pub const MAX_OVERRIDES: usize = 60;

/// Accelerators that make a type "exotic": a workload that does not ask for one should not
/// land on it while ordinary types would do.
const ACCELERATOR_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "habana.ai/gaudi",
];

/// A field of the request that does not parse: its path and why.
pub type FieldError = (String, String);

/// The capacity reservation a reserved launch option targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedOption {
    /// `cr-...`.
    pub id: String,
    /// `default` or `capacity-block`.
    pub reservation_type: String,
    /// Whether its owner may reclaim it.
    pub interruptible: bool,
}

impl ReservedOption {
    /// A capacity block (launched with the `capacity-block` market type).
    pub fn is_capacity_block(&self) -> bool {
        self.reservation_type == "capacity-block"
    }
}

/// One way to launch: an instance type in a zone, in the subnet launches use there.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOption {
    /// `m5.large`.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
    /// `use1-az1`, when known.
    pub zone_id: Option<String>,
    /// The subnet of the zone the node class prefers.
    pub subnet_id: String,
    /// Per hour.
    pub price: f64,
    /// The reservation it launches into, for a reserved launch.
    pub reservation: Option<ReservedOption>,
}

/// What to launch: the capacity type and the options, cheapest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The fleet's market: spot or on-demand (a reserved launch into an on-demand capacity
    /// reservation is on-demand), or a capacity block.
    pub capacity_type: CapacityType,
    /// Whether the options launch into capacity reservations.
    pub reserved: bool,
    /// At most [`MAX_OVERRIDES`], by price (ties by type, then zone).
    pub options: Vec<LaunchOption>,
}

impl Plan {
    /// The `karpenter.sh/capacity-type` of its nodes: `reserved`, `spot` or `on-demand`.
    pub fn capacity_type_label(&self) -> &'static str {
        if self.reserved {
            CAPACITY_TYPE_RESERVED
        } else {
            self.capacity_type.as_str()
        }
    }
}

/// Why nothing can be launched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// No offering the NodeClaim allows can be launched now; says which step left nothing.
    #[error("{0}")]
    NoCapacity(String),
    /// The options within [`MAX_OVERRIDES`] cannot cover the requirements' minValues.
    #[error("the {MAX_OVERRIDES} launch options cannot satisfy minValues: {0}")]
    MinValues(MinValuesError),
}

/// What the NodeClaim and the node class allow.
#[derive(Debug, Clone, Copy)]
pub struct Constraints<'a> {
    /// The NodeClaim's requirements.
    pub requirements: &'a Requirements,
    /// The NodeClaim's resource requests.
    pub requests: &'a ResourceList,
    /// The subnet launches use in each zone.
    pub subnets: &'a BTreeMap<&'a str, &'a ResolvedSubnet>,
    /// The Kubernetes architectures the node class has an image for.
    pub architectures: &'a BTreeSet<&'a str>,
}

impl Constraints<'_> {
    /// An offering this launch could use: available, allowed, in a zone with a subnet.
    fn launchable(&self, offering: &Offering) -> bool {
        offering.available
            && offering.is_compatible(self.requirements)
            && self.subnets.contains_key(&*offering.zone)
    }

    fn launchable_offerings<'t>(
        &'t self,
        instance_type: &'t InstanceType,
    ) -> impl Iterator<Item = &'t Offering> + 't {
        instance_type
            .offerings()
            .iter()
            .filter(|o| self.launchable(o))
    }

    fn allows(&self, capacity_type: &str) -> bool {
        self.requirements
            .get(LABEL_CAPACITY_TYPE)
            .is_none_or(|r| r.has(capacity_type))
    }
}

/// The single `kubernetes.io/arch` of a type, if it has one.
pub fn architecture(instance_type: &InstanceType) -> Option<&str> {
    single_value(instance_type.requirements().get(LABEL_ARCH)?)
}

/// The value of an `In` requirement with exactly one value.
pub fn single_value(requirement: &Requirement) -> Option<&str> {
    if requirement.operator() != Operator::In || requirement.len() != 1 {
        return None;
    }
    requirement.values().next()
}

/// Decides what to launch for `constraints` from `catalogue`.
pub fn plan(catalogue: &[InstanceType], constraints: &Constraints<'_>) -> Result<Plan, PlanError> {
    let requirements = constraints.requirements;
    let mut funnel = Funnel::default();
    let mut candidates: Vec<&InstanceType> = Vec::new();
    for instance_type in catalogue {
        if !requirements.is_intersecting(instance_type.requirements()) {
            continue;
        }
        funnel.compatible += 1;
        if fits(constraints.requests, instance_type.allocatable()).is_err() {
            continue;
        }
        funnel.fitting += 1;
        if !architecture(instance_type).is_some_and(|a| constraints.architectures.contains(a)) {
            continue;
        }
        funnel.with_image += 1;
        let mut allowed = instance_type.available_offerings(requirements).peekable();
        if allowed.peek().is_none() {
            continue;
        }
        funnel.with_offering += 1;
        funnel
            .offering_zones
            .extend(allowed.map(|o| o.zone.to_string()));
        if constraints
            .launchable_offerings(instance_type)
            .next()
            .is_none()
        {
            continue;
        }
        candidates.push(instance_type);
    }
    if candidates.is_empty() {
        return Err(PlanError::NoCapacity(funnel.explain(constraints)));
    }
    if !requirements.has_min_values() {
        candidates = without_exotic_types(candidates);
        if is_mixed_capacity(&candidates, constraints) {
            candidates = without_unwanted_spot(candidates, constraints);
        }
    }
    if constraints.allows(CAPACITY_TYPE_RESERVED)
        && let Some(plan) = reserved_plan(&candidates, constraints)
    {
        return plan;
    }
    let capacity_type = capacity_type(&candidates, constraints);
    let mut options: Vec<(LaunchOption, &InstanceType)> = Vec::new();
    for &instance_type in &candidates {
        for offering in constraints.launchable_offerings(instance_type) {
            if &*offering.capacity_type != capacity_type.as_str() {
                continue;
            }
            let Some(subnet) = constraints.subnets.get(&*offering.zone) else {
                continue;
            };
            let zone_id = subnet.zone_id.clone().or_else(|| {
                offering
                    .requirements
                    .get(LABEL_TOPOLOGY_ZONE_ID)
                    .and_then(single_value)
                    .map(str::to_owned)
            });
            options.push((
                LaunchOption {
                    instance_type: instance_type.name().to_owned(),
                    zone: offering.zone.to_string(),
                    zone_id,
                    subnet_id: subnet.id.clone(),
                    price: offering.price,
                    reservation: None,
                },
                instance_type,
            ));
        }
    }
    if options.is_empty() {
        return Err(PlanError::NoCapacity(format!(
            "no {} offering of the {} qualifying instance types is allowed by the requirements",
            capacity_type.as_str(),
            candidates.len()
        )));
    }
    options.sort_by(|(a, _), (b, _)| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    // One option per type and zone: a partition placement group offers each once per
    // partition, and the partition goes into the launch template, not the override.
    options.dedup_by(|(a, _), (b, _)| a.instance_type == b.instance_type && a.zone == b.zone);
    let options = truncate(options, requirements)?;
    Ok(Plan {
        capacity_type,
        reserved: false,
        options,
    })
}

/// A kind of capacity reservation, in upstream's order at equal price: its priority, type
/// (`default` or `capacity-block`) and interruptibility.
type ReservationKind = (u8, String, bool);

/// The reserved launch, when a candidate has a launchable reserved offering: the options of
/// one kind of reservation (CreateFleet takes one market type), cheapest first, each targeting
/// its reservation.
fn reserved_plan(
    candidates: &[&InstanceType],
    constraints: &Constraints<'_>,
) -> Option<Result<Plan, PlanError>> {
    let mut by_kind: BTreeMap<ReservationKind, Vec<(LaunchOption, &InstanceType)>> =
        BTreeMap::new();
    for &instance_type in candidates {
        for offering in constraints.launchable_offerings(instance_type) {
            if &*offering.capacity_type != CAPACITY_TYPE_RESERVED {
                continue;
            }
            let label = |key: &str| offering.requirements.get(key).and_then(single_value);
            let (Some(id), Some(subnet)) = (
                label(LABEL_CAPACITY_RESERVATION_ID),
                constraints.subnets.get(&*offering.zone),
            ) else {
                continue;
            };
            let reservation_type = label(LABEL_CAPACITY_RESERVATION_TYPE).unwrap_or("default");
            let interruptible = label(LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE) == Some("true");
            // Upstream's order among kinds at the same price.
            let priority = match (reservation_type, interruptible) {
                ("default", false) => 0,
                ("capacity-block", _) => 1,
                _ => 2,
            };
            by_kind
                .entry((priority, reservation_type.to_owned(), interruptible))
                .or_default()
                .push((
                    LaunchOption {
                        instance_type: instance_type.name().to_owned(),
                        zone: offering.zone.to_string(),
                        zone_id: subnet
                            .zone_id
                            .clone()
                            .or_else(|| label(LABEL_TOPOLOGY_ZONE_ID).map(str::to_owned)),
                        subnet_id: subnet.id.clone(),
                        price: offering.price,
                        reservation: Some(ReservedOption {
                            id: id.to_owned(),
                            reservation_type: reservation_type.to_owned(),
                            interruptible,
                        }),
                    },
                    instance_type,
                ));
        }
    }
    let cheapest = |options: &[(LaunchOption, &InstanceType)]| {
        options
            .iter()
            .map(|(o, _)| o.price)
            .fold(f64::INFINITY, f64::min)
    };
    let ((_, reservation_type, _), mut options) = by_kind.into_iter().min_by(|a, b| {
        cheapest(&a.1)
            .total_cmp(&cheapest(&b.1))
            .then_with(|| a.0.0.cmp(&b.0.0))
    })?;
    options.sort_by(|(a, _), (b, _)| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| {
                a.reservation
                    .as_ref()
                    .map(|r| &r.id)
                    .cmp(&b.reservation.as_ref().map(|r| &r.id))
            })
    });
    Some(
        truncate(options, constraints.requirements).map(|options| Plan {
            capacity_type: if reservation_type == "capacity-block" {
                CapacityType::CapacityBlock
            } else {
                CapacityType::OnDemand
            },
            reserved: true,
            options,
        }),
    )
}

/// Keeps the [`MAX_OVERRIDES`] cheapest options; under minValues, if those span too few
/// types, the cheapest option of each type instead (the most varied set of that size).
fn truncate(
    options: Vec<(LaunchOption, &InstanceType)>,
    requirements: &Requirements,
) -> Result<Vec<LaunchOption>, PlanError> {
    let spans = |chosen: &[(LaunchOption, &InstanceType)]| {
        let mut seen = BTreeSet::new();
        let types: Vec<&Requirements> = chosen
            .iter()
            .filter(|(o, _)| seen.insert(o.instance_type.clone()))
            .map(|(_, t)| t.requirements())
            .collect();
        requirements.satisfies_min_values(types)
    };
    let cheapest: Vec<_> = options.iter().take(MAX_OVERRIDES).cloned().collect();
    if !requirements.has_min_values() {
        return Ok(cheapest.into_iter().map(|(o, _)| o).collect());
    }
    if spans(&cheapest).is_ok() {
        return Ok(cheapest.into_iter().map(|(o, _)| o).collect());
    }
    let mut seen = BTreeSet::new();
    let varied: Vec<_> = options
        .into_iter()
        .filter(|(o, _)| seen.insert(o.instance_type.clone()))
        .take(MAX_OVERRIDES)
        .collect();
    match spans(&varied) {
        Ok(_) => Ok(varied.into_iter().map(|(o, _)| o).collect()),
        Err(e) => Err(PlanError::MinValues(e)),
    }
}

/// Spot when the requirements allow it and a spot offering can launch (upstream
/// `getCapacityType`), else on-demand.
fn capacity_type(candidates: &[&InstanceType], constraints: &Constraints<'_>) -> CapacityType {
    let spot_launchable = candidates.iter().any(|t| {
        constraints
            .launchable_offerings(t)
            .any(|o| &*o.capacity_type == CAPACITY_TYPE_SPOT)
    });
    if constraints.allows(CAPACITY_TYPE_SPOT) && spot_launchable {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    }
}

/// Upstream `isMixedCapacityLaunch`: both capacity types allowed and launchable.
fn is_mixed_capacity(candidates: &[&InstanceType], constraints: &Constraints<'_>) -> bool {
    if !constraints.allows(CAPACITY_TYPE_SPOT) || !constraints.allows(CAPACITY_TYPE_ON_DEMAND) {
        return false;
    }
    let launchable = |capacity_type: &str| {
        candidates.iter().any(|t| {
            constraints
                .launchable_offerings(t)
                .any(|o| &*o.capacity_type == capacity_type)
        })
    };
    launchable(CAPACITY_TYPE_SPOT) && launchable(CAPACITY_TYPE_ON_DEMAND)
}

/// Upstream `filterUnwantedSpot`: drops types whose cheapest launchable offering costs more
/// than the cheapest launchable on-demand one, so spot never buys a bigger, pricier node than
/// on-demand would have.
fn without_unwanted_spot<'a>(
    candidates: Vec<&'a InstanceType>,
    constraints: &Constraints<'_>,
) -> Vec<&'a InstanceType> {
    let cheapest_on_demand = candidates
        .iter()
        .flat_map(|t| constraints.launchable_offerings(t))
        .filter(|o| &*o.capacity_type == CAPACITY_TYPE_ON_DEMAND)
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    candidates
        .into_iter()
        .filter(|t| {
            constraints
                .launchable_offerings(t)
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min)
                <= cheapest_on_demand
        })
        .collect()
}

/// Upstream `filterExoticInstanceTypes`: metal and accelerator types only when nothing else
/// qualifies.
fn without_exotic_types(candidates: Vec<&InstanceType>) -> Vec<&InstanceType> {
    let ordinary: Vec<&InstanceType> = candidates
        .iter()
        .copied()
        .filter(|t| !is_exotic(t))
        .collect();
    if ordinary.is_empty() {
        candidates
    } else {
        ordinary
    }
}

fn is_exotic(instance_type: &InstanceType) -> bool {
    let metal = instance_type
        .requirements()
        .get(LABEL_INSTANCE_SIZE)
        .is_some_and(|r| r.values().any(|size| size.contains("metal")));
    metal
        || ACCELERATOR_RESOURCES
            .iter()
            .any(|name| instance_type.capacity().get(&ResourceName::new(name)) > 0)
}

/// How many types survived each step, to say where the catalogue ran out.
#[derive(Debug, Default)]
struct Funnel {
    compatible: usize,
    fitting: usize,
    with_image: usize,
    with_offering: usize,
    /// The zones of the allowed available offerings.
    offering_zones: BTreeSet<String>,
}

impl Funnel {
    fn explain(&self, constraints: &Constraints<'_>) -> String {
        if self.compatible == 0 {
            return format!(
                "no instance type matches the requirements {}",
                constraints.requirements
            );
        }
        if self.fitting == 0 {
            return format!(
                "{} instance types match the requirements but none has room for the requested resources {}",
                self.compatible, constraints.requests
            );
        }
        if self.with_image == 0 {
            return format!(
                "{} instance types match and fit, but the node class has images only for architectures [{}]",
                self.fitting,
                join(constraints.architectures.iter().copied())
            );
        }
        if self.with_offering == 0 {
            return format!(
                "{} instance types match, but none has an available offering (zone and capacity type) the requirements allow; offerings that recently ran out of capacity stay unavailable for a few minutes",
                self.with_image
            );
        }
        format!(
            "none of the allowed offerings in the node class's zones [{}] is available (offerings that recently ran out of capacity stay unavailable for a few minutes); the available ones are in zones [{}], where it selects no subnet",
            join(constraints.subnets.keys().copied()),
            join(self.offering_zones.iter().map(String::as_str)),
        )
    }
}

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// A requirement of the API as the domain's, or the field that is wrong (`field` names the
/// requirement, for instance `node_claim.spec.requirements[2]`).
pub fn requirement(pb: &v1::Requirement, field: &str) -> Result<Requirement, FieldError> {
    let operator = match v1::Operator::try_from(pb.operator) {
        Ok(v1::Operator::In) => Operator::In,
        Ok(v1::Operator::NotIn) => Operator::NotIn,
        Ok(v1::Operator::Exists) => Operator::Exists,
        Ok(v1::Operator::DoesNotExist) => Operator::DoesNotExist,
        Ok(v1::Operator::Gt) => Operator::Gt,
        Ok(v1::Operator::Lt) => Operator::Lt,
        Ok(v1::Operator::Gte) => Operator::Gte,
        Ok(v1::Operator::Lte) => Operator::Lte,
        Ok(v1::Operator::Unspecified) | Err(_) => {
            return Err((
                format!("{field}.operator"),
                format!("{} is not a known operator", pb.operator),
            ));
        }
    };
    if pb.key.is_empty() {
        return Err((format!("{field}.key"), "empty".to_owned()));
    }
    let min_values = match pb.min_values {
        Some(n) if n < 1 => {
            return Err((format!("{field}.min_values"), format!("{n} is below 1")));
        }
        n => n.map(i32::unsigned_abs),
    };
    Requirement::new(&pb.key, operator, &pb.values, min_values)
        .map_err(|e| (field.to_owned(), e.to_string()))
}

/// Requirements of the API as the domain's, each named `<field>[i]` when wrong.
pub fn requirements(pb: &[v1::Requirement], field: &str) -> Result<Requirements, FieldError> {
    pb.iter()
        .enumerate()
        .map(|(i, r)| requirement(r, &format!("{field}[{i}]")))
        .collect()
}

/// A map of quantities as a resource list, or the entry that is wrong.
pub fn resource_list(
    pb: &std::collections::HashMap<String, String>,
    field: &str,
) -> Result<ResourceList, FieldError> {
    let mut pairs: Vec<(&String, Quantity)> = Vec::with_capacity(pb.len());
    for (name, quantity) in pb {
        let parsed =
            Quantity::parse(quantity).map_err(|e| (format!("{field}[{name}]"), e.to_string()))?;
        pairs.push((name, parsed));
    }
    // Sorted so that an error about the list names the same resource every time.
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    ResourceList::from_quantities(pairs).map_err(|e| (field.to_owned(), e.to_string()))
}

/// An instance type of the catalogue in the domain's terms.
pub fn instance_type(pb: &v1::InstanceType) -> Result<InstanceType, FieldError> {
    let type_requirements = requirements(&pb.requirements, "requirements")?;
    let offerings = pb
        .offerings
        .iter()
        .enumerate()
        // An offering without a price is one EC2 does not sell now: nothing to launch on.
        .filter_map(|(i, o)| o.price.map(|price| (i, o, price)))
        .map(|(i, o, price)| {
            let extra = requirements(&o.requirements, &format!("offerings[{i}].requirements"))?;
            Ok(Offering::new(
                &o.zone,
                &o.capacity_type,
                price,
                o.is_available(),
                extra,
            ))
        })
        .collect::<Result<Vec<_>, FieldError>>()?;
    let capacity = resource_list(&pb.capacity, "capacity")?;
    let overhead = match &pb.overhead {
        Some(o) => NodeOverhead {
            kube_reserved: resource_list(&o.kube_reserved, "overhead.kube_reserved")?,
            system_reserved: resource_list(&o.system_reserved, "overhead.system_reserved")?,
            eviction_threshold: resource_list(
                &o.eviction_threshold,
                "overhead.eviction_threshold",
            )?,
        },
        None => NodeOverhead::default(),
    };
    Ok(InstanceType::new(
        &pb.name,
        type_requirements,
        offerings,
        capacity,
        overhead,
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use core_domain::labels::{LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};

    use super::*;

    fn requirement_in(key: &str, values: &[&str]) -> v1::Requirement {
        v1::Requirement::in_values(key, values)
    }

    /// A type with 2 cpu / 8Gi in zones a and b, spot at `spot` and on-demand at `od`.
    fn it(name: &str, arch: &str, od: f64, spot: Option<f64>) -> InstanceType {
        let mut offerings = Vec::new();
        for zone in ["us-east-1a", "us-east-1b"] {
            offerings.push(v1::Offering::priced(zone, "on-demand", od, "USD", true));
            if let Some(spot) = spot {
                offerings.push(v1::Offering::priced(zone, "spot", spot, "USD", true));
            }
        }
        let size = name.split_once('.').map_or("", |(_, s)| s);
        instance_type(&v1::InstanceType {
            name: name.to_owned(),
            requirements: vec![
                requirement_in(LABEL_INSTANCE_TYPE, &[name]),
                requirement_in(LABEL_ARCH, &[arch]),
                requirement_in(LABEL_INSTANCE_SIZE, &[size]),
                requirement_in(LABEL_TOPOLOGY_ZONE, &["us-east-1a", "us-east-1b"]),
            ],
            offerings,
            capacity: HashMap::from([
                ("cpu".to_owned(), "2".to_owned()),
                ("memory".to_owned(), "8Gi".to_owned()),
                ("pods".to_owned(), "29".to_owned()),
            ]),
            overhead: None,
            burstable_cpu: false,
        })
        .unwrap()
    }

    fn subnet(id: &str, zone: &str) -> ResolvedSubnet {
        ResolvedSubnet {
            id: id.to_owned(),
            zone: zone.to_owned(),
            zone_id: Some(format!("id-{zone}")),
            available_ips: 100,
        }
    }

    struct World {
        subnets: Vec<ResolvedSubnet>,
        architectures: BTreeSet<&'static str>,
    }

    impl World {
        fn new() -> Self {
            Self {
                subnets: vec![
                    subnet("subnet-a", "us-east-1a"),
                    subnet("subnet-b", "us-east-1b"),
                ],
                architectures: BTreeSet::from(["amd64"]),
            }
        }

        fn plan(
            &self,
            catalogue: &[InstanceType],
            requirements: &[v1::Requirement],
            requests: &ResourceList,
        ) -> Result<Plan, PlanError> {
            let requirements = super::requirements(requirements, "r").unwrap();
            let subnets: BTreeMap<&str, &ResolvedSubnet> =
                self.subnets.iter().map(|s| (s.zone.as_str(), s)).collect();
            plan(
                catalogue,
                &Constraints {
                    requirements: &requirements,
                    requests,
                    subnets: &subnets,
                    architectures: &self.architectures,
                },
            )
        }
    }

    fn names(plan: &Plan) -> Vec<(&str, &str)> {
        plan.options
            .iter()
            .map(|o| (o.instance_type.as_str(), o.zone.as_str()))
            .collect()
    }

    #[test]
    fn spot_when_allowed_and_launchable_cheapest_first() {
        let catalogue = [
            it("m5.xlarge", "amd64", 0.2, Some(0.08)),
            it("m5.large", "amd64", 0.1, Some(0.04)),
        ];
        let both = [requirement_in(LABEL_CAPACITY_TYPE, &["spot", "on-demand"])];
        let plan = World::new()
            .plan(&catalogue, &both, &ResourceList::new())
            .unwrap();
        assert_eq!(plan.capacity_type, CapacityType::Spot);
        assert_eq!(
            names(&plan),
            [
                ("m5.large", "us-east-1a"),
                ("m5.large", "us-east-1b"),
                ("m5.xlarge", "us-east-1a"),
                ("m5.xlarge", "us-east-1b"),
            ]
        );
        assert_eq!(plan.options[0].price, 0.04);
        assert_eq!(plan.options[0].subnet_id, "subnet-a");
        assert_eq!(plan.options[0].zone_id.as_deref(), Some("id-us-east-1a"));

        let on_demand = [requirement_in(LABEL_CAPACITY_TYPE, &["on-demand"])];
        let plan = World::new()
            .plan(&catalogue, &on_demand, &ResourceList::new())
            .unwrap();
        assert_eq!(plan.capacity_type, CapacityType::OnDemand);
        assert_eq!(plan.options[0].price, 0.1);

        // Spot allowed but no type offers it: on-demand.
        let no_spot = [it("m5.large", "amd64", 0.1, None)];
        let plan = World::new()
            .plan(&no_spot, &both, &ResourceList::new())
            .unwrap();
        assert_eq!(plan.capacity_type, CapacityType::OnDemand);
    }

    #[test]
    fn at_most_sixty_overrides_the_cheapest() {
        let catalogue: Vec<InstanceType> = (0..40)
            .map(|i| it(&format!("t{i:02}.large"), "amd64", 1.0 + f64::from(i), None))
            .collect();
        let plan = World::new()
            .plan(
                &catalogue,
                &[requirement_in(LABEL_ARCH, &["amd64"])],
                &ResourceList::new(),
            )
            .unwrap();
        assert_eq!(plan.options.len(), MAX_OVERRIDES);
        assert!(plan.options.windows(2).all(|w| w[0].price <= w[1].price));
        assert_eq!(plan.options[0].instance_type, "t00.large");
        assert_eq!(plan.options[59].instance_type, "t29.large");
    }

    #[test]
    fn min_values_take_the_cheapest_option_of_each_type_when_needed() {
        let catalogue: Vec<InstanceType> = (0..70)
            .map(|i| it(&format!("t{i:02}.large"), "amd64", 1.0 + f64::from(i), None))
            .collect();
        let mut types = requirement_in(
            LABEL_INSTANCE_TYPE,
            &catalogue.iter().map(InstanceType::name).collect::<Vec<_>>(),
        );
        types.min_values = Some(45);
        let plan = World::new()
            .plan(&catalogue, &[types.clone()], &ResourceList::new())
            .unwrap();
        assert_eq!(plan.options.len(), MAX_OVERRIDES);
        let distinct: BTreeSet<&str> = plan
            .options
            .iter()
            .map(|o| o.instance_type.as_str())
            .collect();
        assert_eq!(distinct.len(), MAX_OVERRIDES, "one zone per type");

        types.min_values = Some(61);
        let err = World::new()
            .plan(&catalogue, &[types], &ResourceList::new())
            .unwrap_err();
        assert!(matches!(err, PlanError::MinValues(_)), "{err}");
    }

    #[test]
    fn exotic_and_unwanted_spot_types_give_way() {
        let catalogue = [
            it("m5.metal", "amd64", 0.05, Some(0.01)),
            it("m5.large", "amd64", 0.1, Some(0.04)),
            // Spot dearer than the cheapest on-demand: dropped in a mixed launch.
            it("m5.xlarge", "amd64", 0.2, Some(0.15)),
        ];
        let plan = World::new()
            .plan(&catalogue, &[], &ResourceList::new())
            .unwrap();
        let types: BTreeSet<&str> = plan
            .options
            .iter()
            .map(|o| o.instance_type.as_str())
            .collect();
        assert_eq!(types, BTreeSet::from(["m5.large"]));
        // Asked for by name, metal is launched.
        let plan = World::new()
            .plan(
                &catalogue,
                &[requirement_in(LABEL_INSTANCE_TYPE, &["m5.metal"])],
                &ResourceList::new(),
            )
            .unwrap();
        assert_eq!(plan.options[0].instance_type, "m5.metal");
    }

    #[test]
    fn the_explanation_names_the_step_that_left_nothing() {
        let catalogue = [it("m5.large", "amd64", 0.1, None)];
        let world = World::new();
        let explain = |reqs: &[v1::Requirement], requests: &ResourceList, world: &World| match world
            .plan(&catalogue, reqs, requests)
        {
            Err(PlanError::NoCapacity(why)) => why,
            other => panic!("{other:?}"),
        };
        let why = explain(
            &[requirement_in(LABEL_ARCH, &["arm64"])],
            &ResourceList::new(),
            &world,
        );
        assert!(why.contains("no instance type matches"), "{why}");
        let big = ResourceList::new().with(ResourceName::CPU, 64_000);
        let why = explain(&[], &big, &world);
        assert!(why.contains("none has room"), "{why}");
        let why = explain(
            &[requirement_in(LABEL_CAPACITY_TYPE, &["spot"])],
            &ResourceList::new(),
            &world,
        );
        assert!(why.contains("none has an available offering"), "{why}");
        let mut arm_only = World::new();
        arm_only.architectures = BTreeSet::from(["arm64"]);
        let why = explain(&[], &ResourceList::new(), &arm_only);
        assert!(
            why.contains("images only for architectures [arm64]"),
            "{why}"
        );
        let mut zone_c = World::new();
        zone_c.subnets = vec![subnet("subnet-c", "us-east-1c")];
        let why = explain(&[], &ResourceList::new(), &zone_c);
        assert!(
            why.contains("zones [us-east-1a, us-east-1b]") && why.contains("[us-east-1c]"),
            "{why}"
        );
    }

    #[test]
    fn requests_must_fit_allocatable() {
        let catalogue = [it("m5.large", "amd64", 0.1, None)];
        let fits = ResourceList::new().with(ResourceName::CPU, 2_000);
        assert!(World::new().plan(&catalogue, &[], &fits).is_ok());
        let too_big = ResourceList::new().with(ResourceName::CPU, 2_001);
        assert!(World::new().plan(&catalogue, &[], &too_big).is_err());
    }

    #[test]
    fn bad_requirements_name_the_field() {
        let bad = v1::Requirement {
            key: "k".to_owned(),
            operator: 42,
            values: vec![],
            min_values: None,
        };
        let (field, _) =
            requirements(&[requirement_in("a", &["b"]), bad], "spec.requirements").unwrap_err();
        assert_eq!(field, "spec.requirements[1].operator");
        let empty_in = v1::Requirement::in_values("k", Vec::<String>::new());
        let (field, message) = requirements(&[empty_in], "spec.requirements").unwrap_err();
        assert_eq!(field, "spec.requirements[0]");
        assert!(message.contains("must have a value"), "{message}");
    }
}
