//! Instance types as the plugin sends them, turned into the domain's, validated on the way: a
//! plugin that answers nonsense (a quantity that does not parse, a negative price, an offering
//! without a zone) gets an error naming the type and the field, and core keeps using what it
//! had rather than trusting it.

use std::sync::Arc;

use core_domain::instance_type::{InstanceType, Offering};
use core_domain::labels::{CAPACITY_TYPES, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use core_domain::quantity::Quantity;
use core_domain::requirements::{NodeSelectorRequirement, Operator, Requirements};
use core_domain::resources::{NodeOverhead, ResourceList};
use karpenter_api::patterns::is_label_value;
use provider_sdk::v1;

/// The highest price per node and hour core accepts, in any currency: a thousand times the
/// dearest instance there is, even counted in the currencies with the most units to the dollar.
/// Prices are summed and compared across whole fleets; one near `f64::MAX` turns a sum infinite
/// and a comparison meaningless.
pub const MAX_PRICE: f64 = 1e9;

/// Why a plugin's instance type was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("instance type {instance_type:?}: {field}: {problem}")]
pub struct InvalidInstanceType {
    /// The type's name as sent (possibly empty).
    pub instance_type: String,
    /// The offending field, e.g. `offerings[2].price`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Converts and validates one instance type.
pub fn from_proto(pb: &v1::InstanceType) -> Result<InstanceType, InvalidInstanceType> {
    let invalid = |field: String, problem: String| InvalidInstanceType {
        instance_type: pb.name.clone(),
        field,
        problem,
    };
    if pb.name.is_empty() {
        return Err(invalid("name".into(), "must not be empty".into()));
    }
    let requirements =
        requirements(&pb.requirements, "requirements").map_err(|(f, p)| invalid(f, p))?;
    match requirements.get(LABEL_INSTANCE_TYPE) {
        Some(r) if r.operator() == Operator::In && r.values().eq([pb.name.as_str()]) => {}
        _ => {
            return Err(invalid(
                "requirements".into(),
                format!(
                    "must hold {LABEL_INSTANCE_TYPE} In [{}], the type's own name",
                    pb.name
                ),
            ));
        }
    }
    if pb.offerings.is_empty() {
        return Err(invalid(
            "offerings".into(),
            "empty: a type lists every zone and capacity type it is sold in, \
             AVAILABILITY_UNAVAILABLE where it cannot be launched now"
                .into(),
        ));
    }
    // The zones the type declares its nodes in; an available offering elsewhere would launch a
    // node whose zone contradicts the type's requirements the scheduler placed pods by.
    let declared_zones = requirements
        .get(LABEL_TOPOLOGY_ZONE)
        .filter(|r| r.operator() == Operator::In);
    let mut offerings = Vec::with_capacity(pb.offerings.len());
    for (i, offering) in pb.offerings.iter().enumerate() {
        if let Some(offering) = self::offering(offering, i).map_err(|(f, p)| invalid(f, p))? {
            if let Some(zones) = declared_zones
                && offering.available
                && !zones.has(&offering.zone)
            {
                return Err(invalid(
                    format!("offerings[{i}].zone"),
                    format!(
                        "{:?} is not a zone the type declares ({zones}): an available offering \
                         is in one of the type's zones",
                        offering.zone
                    ),
                ));
            }
            offerings.push(offering);
        }
    }
    let capacity = resource_list(&pb.capacity, "capacity").map_err(|(f, p)| invalid(f, p))?;
    let overhead = match &pb.overhead {
        Some(o) => NodeOverhead {
            kube_reserved: resource_list(&o.kube_reserved, "overhead.kube_reserved")
                .map_err(|(f, p)| invalid(f, p))?,
            system_reserved: resource_list(&o.system_reserved, "overhead.system_reserved")
                .map_err(|(f, p)| invalid(f, p))?,
            eviction_threshold: resource_list(&o.eviction_threshold, "overhead.eviction_threshold")
                .map_err(|(f, p)| invalid(f, p))?,
        },
        None => NodeOverhead::default(),
    };
    Ok(
        InstanceType::new(&pb.name, requirements, offerings, capacity, overhead)
            .with_burstable_cpu(pb.burstable_cpu),
    )
}

/// Converts a whole catalogue; one invalid type refuses the whole answer, since a partial
/// catalogue would make the missing types look gone (drift reason InstanceTypeNotFound).
pub fn catalogue_from_proto(
    pb: &[v1::InstanceType],
) -> Result<Vec<Arc<InstanceType>>, InvalidInstanceType> {
    let mut seen = std::collections::HashSet::with_capacity(pb.len());
    // Prices are compared across the whole catalogue: one currency for all of it.
    let mut currency: Option<&str> = None;
    pb.iter()
        .map(|t| {
            if !seen.insert(t.name.as_str()) {
                return Err(InvalidInstanceType {
                    instance_type: t.name.clone(),
                    field: "name".into(),
                    problem: "appears twice in the catalogue".into(),
                });
            }
            for (i, offering) in t.offerings.iter().enumerate() {
                if offering.price.is_none() {
                    continue;
                }
                match currency {
                    Some(first) if first != offering.currency => {
                        return Err(InvalidInstanceType {
                            instance_type: t.name.clone(),
                            field: format!("offerings[{i}].currency"),
                            problem: format!(
                                "{:?} differs from the catalogue's {first:?}: prices in one \
                                 catalogue share a currency",
                                offering.currency
                            ),
                        });
                    }
                    Some(_) => {}
                    None => currency = Some(&offering.currency),
                }
            }
            from_proto(t).map(Arc::new)
        })
        .collect()
}

type FieldError = (String, String);

/// One offering; `None` for an unavailable one without a price.
fn offering(pb: &v1::Offering, index: usize) -> Result<Option<Offering>, FieldError> {
    let field = |name: &str| format!("offerings[{index}].{name}");
    if pb.zone.is_empty() {
        return Err((field("zone"), "must not be empty".into()));
    }
    if !is_label_value(&pb.zone) {
        return Err((
            field("zone"),
            format!(
                "{:?} is not a valid {LABEL_TOPOLOGY_ZONE} label value (at most 63 letters, \
                 digits, '-', '_' or '.', starting and ending with a letter or digit)",
                pb.zone
            ),
        ));
    }
    if !CAPACITY_TYPES.contains(&pb.capacity_type.as_str()) {
        return Err((
            field("capacity_type"),
            format!(
                "{:?} is none of {}",
                pb.capacity_type,
                CAPACITY_TYPES.join(", ")
            ),
        ));
    }
    let available = match v1::Availability::try_from(pb.availability) {
        Ok(v1::Availability::Available) => true,
        Ok(v1::Availability::Unavailable) => false,
        Ok(v1::Availability::Unspecified) | Err(_) => {
            return Err((
                field("availability"),
                format!(
                    "{} is neither AVAILABILITY_AVAILABLE nor AVAILABILITY_UNAVAILABLE",
                    pb.availability
                ),
            ));
        }
    };
    let Some(price) = pb.price else {
        if available {
            return Err((
                field("price"),
                "missing: an available offering must have a price".into(),
            ));
        }
        // Unavailable and unpriced: the cloud does not sell it now; with no price it cannot
        // be compared, so it is left out (the caller skips it).
        return Ok(None);
    };
    if !price.is_finite() || price < 0.0 {
        return Err((
            field("price"),
            format!("{price} is not a finite, non-negative price"),
        ));
    }
    if price > MAX_PRICE {
        return Err((
            field("price"),
            format!(
                "{price:e} is above core's limit of {MAX_PRICE:e} per node and hour: no instance \
                 costs that, and sums of such prices overflow"
            ),
        ));
    }
    if !is_currency_code(&pb.currency) {
        return Err((
            field("currency"),
            format!("{:?} is not an ISO 4217 code such as USD", pb.currency),
        ));
    }
    let extra = requirements(&pb.requirements, &field("requirements"))?;
    let mut offering = Offering::new(&pb.zone, &pb.capacity_type, price, available, extra);
    offering.reservation_capacity = match pb.reservation_capacity {
        Some(n) if n < 0 => {
            return Err((field("reservation_capacity"), format!("{n} is negative")));
        }
        n => n.map(|n| n.unsigned_abs()),
    };
    Ok(Some(offering))
}

/// Three uppercase ASCII letters, the shape of an ISO 4217 code.
fn is_currency_code(code: &str) -> bool {
    code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase())
}

fn requirements(pb: &[v1::Requirement], field: &str) -> Result<Requirements, FieldError> {
    let converted: Result<Vec<NodeSelectorRequirement>, FieldError> = pb
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let operator = match v1::Operator::try_from(r.operator) {
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
                        format!("{field}[{i}].operator"),
                        format!("{} is not a valid operator", r.operator),
                    ));
                }
            };
            let min_values = match r.min_values {
                Some(n) if n < 1 => {
                    return Err((
                        format!("{field}[{i}].min_values"),
                        format!("{n} is below 1"),
                    ));
                }
                n => n.map(i32::unsigned_abs),
            };
            Ok(NodeSelectorRequirement {
                key: r.key.clone(),
                operator,
                values: r.values.clone(),
                min_values,
            })
        })
        .collect();
    Requirements::from_node_selector_requirements(&converted?)
        .map_err(|e| (field.to_owned(), e.to_string()))
}

fn resource_list(
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn valid() -> v1::InstanceType {
        v1::InstanceType {
            name: "m5.large".into(),
            requirements: vec![v1::Requirement::in_values(
                LABEL_INSTANCE_TYPE,
                ["m5.large"],
            )],
            offerings: vec![v1::Offering::priced(
                "us-east-1a",
                "on-demand",
                0.096,
                "USD",
                true,
            )],
            capacity: HashMap::from([
                ("cpu".into(), "2".into()),
                ("memory".into(), "7577Mi".into()),
                ("pods".into(), "29".into()),
            ]),
            overhead: Some(v1::Overhead {
                kube_reserved: HashMap::from([
                    ("cpu".into(), "70m".into()),
                    ("memory".into(), "574Mi".into()),
                ]),
                system_reserved: HashMap::new(),
                eviction_threshold: HashMap::from([("memory".into(), "100Mi".into())]),
            }),
            burstable_cpu: false,
        }
    }

    #[test]
    fn a_valid_type_converts_with_allocatable_computed() {
        let t = from_proto(&valid()).unwrap();
        assert_eq!(t.name(), "m5.large");
        assert_eq!(t.allocatable().cpu_millis(), 1930);
        assert_eq!(t.allocatable().memory_bytes(), (7577 - 574 - 100) << 20);
        assert_eq!(
            t.cheapest_offering(&Requirements::new()).map(|o| o.price),
            Some(0.096)
        );
        assert!(!t.is_cpu_burstable());
        let burstable = v1::InstanceType {
            burstable_cpu: true,
            ..valid()
        };
        assert!(from_proto(&burstable).unwrap().is_cpu_burstable());
    }

    #[test]
    fn an_unavailable_offering_without_a_price_is_left_out_and_currencies_must_agree() {
        let mut t = valid();
        t.offerings.push(v1::Offering {
            price: None,
            currency: String::new(),
            ..v1::Offering::priced("us-east-1b", "on-demand", 0.0, "", false)
        });
        assert_eq!(from_proto(&t).unwrap().offerings().len(), 1);

        let mut euro = valid();
        euro.name = "m5.xlarge".into();
        euro.requirements = vec![v1::Requirement::in_values(
            LABEL_INSTANCE_TYPE,
            ["m5.xlarge"],
        )];
        euro.offerings[0].currency = "EUR".into();
        let error = catalogue_from_proto(&[valid(), euro])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("offerings[0].currency: \"EUR\" differs from the catalogue's \"USD\""),
            "{error}"
        );
    }

    #[test]
    fn each_kind_of_nonsense_is_refused_naming_the_field() {
        type Mutation = Box<dyn Fn(&mut v1::InstanceType)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (
                Box::new(|t| t.name.clear()),
                "instance type \"\": name: must not be empty",
            ),
            (
                Box::new(|t| t.requirements.clear()),
                "m5.large\": requirements: must hold node.kubernetes.io/instance-type In [m5.large]",
            ),
            (
                Box::new(|t| t.requirements[0].operator = 42),
                "requirements[0].operator: 42 is not a valid operator",
            ),
            (
                Box::new(|t| t.offerings[0].zone.clear()),
                "offerings[0].zone: must not be empty",
            ),
            (
                Box::new(|t| t.offerings[0].capacity_type = "cheap".into()),
                "offerings[0].capacity_type: \"cheap\" is none of",
            ),
            (
                Box::new(|t| t.offerings[0].price = Some(-1.0)),
                "offerings[0].price: -1 is not a finite, non-negative price",
            ),
            (
                Box::new(|t| t.offerings[0].price = None),
                "offerings[0].price: missing: an available offering must have a price",
            ),
            (
                Box::new(|t| t.offerings[0].availability = 0),
                "offerings[0].availability: 0 is neither AVAILABILITY_AVAILABLE nor",
            ),
            (
                Box::new(|t| t.offerings[0].currency.clear()),
                "offerings[0].currency: \"\" is not an ISO 4217 code",
            ),
            (
                Box::new(|t| t.offerings[0].price = Some(f64::NAN)),
                "offerings[0].price: NaN",
            ),
            (
                Box::new(|t| {
                    t.capacity.insert("memory".into(), "lots".into());
                }),
                "capacity[memory]: invalid quantity \"lots\"",
            ),
            (
                Box::new(|t| {
                    t.overhead
                        .as_mut()
                        .unwrap()
                        .kube_reserved
                        .insert("cpu".into(), "1 cpu".into());
                }),
                "overhead.kube_reserved[cpu]: invalid quantity",
            ),
        ];
        for (mutate, expected) in cases {
            let mut t = valid();
            mutate(&mut t);
            let error = from_proto(&t).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn a_catalogue_with_a_duplicate_is_refused_whole() {
        assert_eq!(catalogue_from_proto(&[valid()]).unwrap().len(), 1);
        let error = catalogue_from_proto(&[valid(), valid()]).unwrap_err();
        assert_eq!(error.field, "name");
        assert!(error.problem.contains("twice"));
    }
}
