//! GetInstanceTypes: the catalogue, read twice, judged field by field and then by core's own
//! reading of it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use core_domain::labels::{CAPACITY_TYPES, LABEL_INSTANCE_TYPE, LabelValueType, WELL_KNOWN_LABELS};
use core_domain::resources::ResourceName;
use core_svc::plugin::instance_types::{catalogue_from_proto, from_proto};
use core_svc::plugin::with_deadline;
use prost::Message as _;
use provider_sdk::v1::{self, GetInstanceTypesRequest, Operator, Requirement};
use serde_json::json;
use tokio_stream::StreamExt as _;

use super::node_class::{group_kind, name_of};
use super::{Check, Recorder};
use crate::Outcome;
use crate::session::{Session, describe_message, describe_status};

/// The most bytes one chunk should take, as the API recommends.
const CHUNK_BYTES: usize = 1024 * 1024;

pub(crate) const NON_EMPTY: Check = Check {
    id: "instance-types.non-empty",
    promise: "GetInstanceTypes streams a complete catalogue of at least one instance type",
};
pub(crate) const UNIQUE: Check = Check {
    id: "instance-types.unique-names",
    promise: "every instance type appears once in the catalogue, in exactly one chunk",
};
pub(crate) const OWN_NAME: Check = Check {
    id: "instance-types.own-name",
    promise: "every instance type's requirements hold node.kubernetes.io/instance-type In [its \
              name]",
};
pub(crate) const PLACED: Check = Check {
    id: "instance-types.offering-placement",
    promise: "every offering names its zone and a capacity type (on-demand, reserved or spot)",
};
pub(crate) const PRICED: Check = Check {
    id: "instance-types.offering-price",
    promise: "every available offering has a price; every price is finite, above 0 and has a \
              currency",
};
pub(crate) const AVAILABILITY: Check = Check {
    id: "instance-types.offering-availability",
    promise: "every offering says AVAILABLE or UNAVAILABLE, never UNSPECIFIED",
};
pub(crate) const ONE_CURRENCY: Check = Check {
    id: "instance-types.one-currency",
    promise: "every price in one catalogue is in the same currency",
};
pub(crate) const RESOURCES: Check = Check {
    id: "instance-types.resources",
    promise: "every capacity has cpu, memory and pods above 0, and its overhead leaves \
              allocatable within capacity",
};
pub(crate) const KEYS_KNOWN: Check = Check {
    id: "instance-types.requirement-keys",
    promise: "every requirement key (of types and offerings) is one of core's well-known labels \
              or in the plugin's vocabulary",
};
pub(crate) const VALUES_TYPED: Check = Check {
    id: "instance-types.requirement-values",
    promise: "every requirement has an operator, and the values of an INTEGER label are integers",
};
pub(crate) const CHUNK_SIZE: Check = Check {
    id: "instance-types.chunk-size",
    promise: "every chunk of the stream stays under 1 MiB encoded",
};
pub(crate) const CORE_ACCEPTS: Check = Check {
    id: "instance-types.core-accepts",
    promise: "core accepts the whole catalogue (quantities parse, requirements are valid)",
};
pub(crate) const CONSISTENT: Check = Check {
    id: "instance-types.consistent",
    promise: "a second GetInstanceTypes answers the same types with the same offerings",
};
pub(crate) const LAUNCHABLE: Check = Check {
    id: "instance-types.launchable",
    promise: "the catalogue has at least one available offering (else nothing can launch)",
};

pub(crate) const CHECKS: [Check; 14] = [
    NON_EMPTY,
    UNIQUE,
    OWN_NAME,
    PLACED,
    PRICED,
    AVAILABILITY,
    ONE_CURRENCY,
    RESOURCES,
    KEYS_KNOWN,
    VALUES_TYPED,
    CHUNK_SIZE,
    CORE_ACCEPTS,
    CONSISTENT,
    LAUNCHABLE,
];

/// The NodePool the suite asks for: no requirements of its own, its nodeClassRef the node
/// class under test.
fn node_pool(node_class: &serde_json::Value) -> serde_json::Value {
    let (group, kind) = group_kind(node_class);
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "conformance"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": group, "kind": kind, "name": name_of(node_class)},
            "requirements": [],
        }}},
    })
}

/// A complete catalogue and the encoded size of each chunk, or why there is none.
async fn read(
    session: &mut Session,
    request: &GetInstanceTypesRequest,
) -> Result<(Vec<v1::InstanceType>, Vec<usize>), String> {
    let result = session
        .cloud
        .get_instance_types(with_deadline(
            request.clone(),
            session.deadlines.instance_types,
        ))
        .await;
    session.note("GetInstanceTypes", &result);
    let mut stream = result.map_err(|s| describe_status(&s))?.into_inner();
    let mut types = Vec::new();
    let mut sizes = Vec::new();
    while let Some(chunk) = stream.next().await {
        session.note("GetInstanceTypes", &chunk);
        let chunk =
            chunk.map_err(|s| format!("{} after {} chunks", describe_status(&s), sizes.len()))?;
        sizes.push(chunk.encoded_len());
        types.extend(chunk.instance_types);
    }
    Ok((types, sizes))
}

/// The first problem `problem` finds in any instance type, as "type: problem".
fn first_problem(
    catalogue: &[v1::InstanceType],
    problem: impl Fn(&v1::InstanceType) -> Option<String>,
) -> Option<String> {
    catalogue
        .iter()
        .find_map(|t| problem(t).map(|p| format!("instance type {:?}: {p}", t.name)))
}

fn offerings_problem(
    instance_type: &v1::InstanceType,
    problem: impl Fn(&v1::Offering) -> Option<String>,
) -> Option<String> {
    instance_type
        .offerings
        .iter()
        .enumerate()
        .find_map(|(i, o)| problem(o).map(|p| format!("offerings[{i}]: {p}")))
}

/// Every requirement of a type and its offerings, with its field path.
fn requirements(instance_type: &v1::InstanceType) -> impl Iterator<Item = (String, &Requirement)> {
    let own = instance_type
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("requirements[{i}]"), r));
    let offerings = instance_type
        .offerings
        .iter()
        .enumerate()
        .flat_map(|(o, offering)| {
            offering
                .requirements
                .iter()
                .enumerate()
                .map(move |(i, r)| (format!("offerings[{o}].requirements[{i}]"), r))
        });
    own.chain(offerings)
}

/// Each check's verdict on a catalogue, given the plugin's vocabulary (`None` when it gave
/// none: then only core's labels are known).
fn judge(
    catalogue: &[v1::InstanceType],
    sizes: &[usize],
    vocabulary: &BTreeMap<String, LabelValueType>,
) -> Vec<(Check, Option<String>)> {
    let mut seen = HashSet::new();
    let duplicate = catalogue
        .iter()
        .find(|t| !seen.insert(t.name.as_str()))
        .map(|t| format!("instance type {:?} appears twice", t.name));
    let own_name = first_problem(catalogue, |t| {
        let expected = Requirement::in_values(LABEL_INSTANCE_TYPE, [&t.name]);
        (!t.requirements.contains(&expected))
            .then(|| format!("requirements lack {LABEL_INSTANCE_TYPE} In [{}]", t.name))
    });
    let placed = first_problem(catalogue, |t| {
        offerings_problem(t, |o| {
            if o.zone.is_empty() {
                Some("zone is empty".to_owned())
            } else if !CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                Some(format!(
                    "capacity_type {:?} is not one of {CAPACITY_TYPES:?}",
                    o.capacity_type
                ))
            } else {
                None
            }
        })
    });
    let priced = first_problem(catalogue, |t| {
        offerings_problem(t, |o| match o.price {
            None if o.is_available() => Some("available but has no price".to_owned()),
            Some(price) if !price.is_finite() || price <= 0.0 => {
                Some(format!("price {price} is not a finite amount above 0"))
            }
            Some(_) if o.currency.is_empty() => Some("has a price but no currency".to_owned()),
            _ => None,
        })
    });
    let availability = first_problem(catalogue, |t| {
        offerings_problem(t, |o| {
            (o.availability() == v1::Availability::Unspecified)
                .then(|| "availability is AVAILABILITY_UNSPECIFIED".to_owned())
        })
    });
    let currencies: BTreeSet<&str> = catalogue
        .iter()
        .flat_map(|t| &t.offerings)
        .filter(|o| o.price.is_some())
        .map(|o| o.currency.as_str())
        .collect();
    let one_currency =
        (currencies.len() > 1).then(|| format!("prices in several currencies: {currencies:?}"));
    let resources = first_problem(catalogue, |t| {
        let parsed = from_proto(t).ok()?;
        let capacity = parsed.capacity();
        for resource in ["cpu", "memory", "pods"] {
            if capacity.get(&ResourceName::new(resource)) <= 0 {
                return Some(format!("capacity has no {resource}"));
            }
        }
        parsed.overhead().total().iter().find_map(|(name, amount)| {
            (amount > capacity.get(&name)).then(|| {
                format!(
                    "overhead of {} {} exceeds capacity {}",
                    parsed.overhead().total().quantity(&name),
                    name.as_str(),
                    capacity.quantity(&name)
                )
            })
        })
    });
    let keys_known = first_problem(catalogue, |t| {
        requirements(t).find_map(|(field, r)| {
            (!WELL_KNOWN_LABELS.contains(&r.key.as_str()) && !vocabulary.contains_key(&r.key)).then(
                || {
                    format!(
                        "{field}: key {:?} is neither a well-known label nor in the vocabulary",
                        r.key
                    )
                },
            )
        })
    });
    let values_typed = first_problem(catalogue, |t| {
        requirements(t).find_map(|(field, r)| {
            if matches!(r.operator(), Operator::Unspecified)
                || Operator::try_from(r.operator).is_err()
            {
                return Some(format!(
                    "{field}: operator {} is not an operator",
                    r.operator
                ));
            }
            let integer = vocabulary.get(&r.key) == Some(&LabelValueType::Integer);
            r.values
                .iter()
                .find(|v| integer && v.parse::<u64>().is_err())
                .map(|v| {
                    format!(
                        "{field}: {:?} is INTEGER but {v:?} is not an integer",
                        r.key
                    )
                })
        })
    });
    let chunk_size = sizes
        .iter()
        .enumerate()
        .find(|(_, size)| **size > CHUNK_BYTES)
        .map(|(i, size)| format!("chunk {i} is {size} bytes encoded, over {CHUNK_BYTES}"));
    let core_accepts = catalogue_from_proto(catalogue).err().map(|e| e.to_string());
    let launchable = (!catalogue
        .iter()
        .flat_map(|t| &t.offerings)
        .any(v1::Offering::is_available))
    .then(|| "no offering is AVAILABLE".to_owned());
    vec![
        (UNIQUE, duplicate),
        (OWN_NAME, own_name),
        (PLACED, placed),
        (PRICED, priced),
        (AVAILABILITY, availability),
        (ONE_CURRENCY, one_currency),
        (RESOURCES, resources),
        (KEYS_KNOWN, keys_known),
        (VALUES_TYPED, values_typed),
        (CHUNK_SIZE, chunk_size),
        (CORE_ACCEPTS, core_accepts),
        (LAUNCHABLE, launchable),
    ]
}

/// What a second catalogue must repeat: the names and each offering's place and availability
/// (prices may move between calls).
fn shape(catalogue: &[v1::InstanceType]) -> BTreeMap<&str, BTreeSet<(&str, &str, i32)>> {
    catalogue
        .iter()
        .map(|t| {
            let offerings = t
                .offerings
                .iter()
                .map(|o| (o.zone.as_str(), o.capacity_type.as_str(), o.availability))
                .collect();
            (t.name.as_str(), offerings)
        })
        .collect()
}

pub(crate) async fn run(session: &mut Session, recorder: &mut Recorder) {
    let Some(node_class) = session.node_class.clone() else {
        recorder.skip(&CHECKS, "no node class to ask with (node-classes.*)");
        return;
    };
    let request = GetInstanceTypesRequest {
        node_pool: provider_sdk::json::json_to_struct(&node_pool(&node_class)),
        node_class: provider_sdk::json::json_to_struct(&node_class),
    };
    let sent = format!(
        "GetInstanceTypes {{ node_pool: {}, node_class: {node_class} }}",
        node_pool(&node_class)
    );
    let (catalogue, sizes) = match read(session, &request).await {
        Ok((catalogue, sizes)) if !catalogue.is_empty() => (catalogue, sizes),
        Ok(_) => {
            recorder.record(
                NON_EMPTY,
                Outcome::fail(&sent, "an empty catalogue", "at least one instance type"),
            );
            recorder.skip(&CHECKS[1..], "instance-types.non-empty failed");
            return;
        }
        Err(received) => {
            recorder.record(
                NON_EMPTY,
                Outcome::fail(&sent, received, "OK, the stream complete"),
            );
            recorder.skip(&CHECKS[1..], "instance-types.non-empty failed");
            return;
        }
    };
    recorder.record(NON_EMPTY, Outcome::Pass);

    let vocabulary: BTreeMap<String, LabelValueType> = session
        .vocabulary
        .as_ref()
        .map(|v| v.labels.iter().cloned().collect())
        .unwrap_or_default();
    let received = format!(
        "{} instance types in {} chunks",
        catalogue.len(),
        sizes.len()
    );
    let mut verdicts = judge(&catalogue, &sizes, &vocabulary);
    let launchable = verdicts.pop();
    for (check, problem) in verdicts {
        recorder.record(
            check,
            match problem {
                None => Outcome::Pass,
                Some(problem) => {
                    Outcome::fail(&sent, &received, format!("{}; {problem}", check.promise))
                }
            },
        );
    }

    let outcome = match read(session, &request).await {
        Ok((again, _)) if shape(&again) == shape(&catalogue) => Outcome::Pass,
        Ok((again, _)) => {
            let (first, second) = (shape(&catalogue), shape(&again));
            let differs = first
                .iter()
                .find(|(name, offerings)| second.get(*name) != Some(*offerings))
                .map(|(name, _)| *name)
                .or_else(|| {
                    second
                        .keys()
                        .find(|name| !first.contains_key(*name))
                        .copied()
                })
                .unwrap_or_default();
            Outcome::fail(
                format!("{sent}, twice"),
                format!(
                    "{} types, then {}; instance type {differs:?} differs: first {}, then {}",
                    catalogue.len(),
                    again.len(),
                    describe_message(&first.get(differs)),
                    describe_message(&second.get(differs))
                ),
                CONSISTENT.promise,
            )
        }
        Err(received) => Outcome::fail(format!("{sent}, twice"), received, CONSISTENT.promise),
    };
    recorder.record(CONSISTENT, outcome);
    if let Some((check, problem)) = launchable {
        recorder.record(
            check,
            match problem {
                None => Outcome::Pass,
                Some(problem) => Outcome::fail(&sent, &received, problem),
            },
        );
    }
    session.catalogue = Some(catalogue);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests: a panic is a failed assertion")]

    use std::collections::HashMap;

    use super::*;

    fn good() -> v1::InstanceType {
        v1::InstanceType {
            name: "small".into(),
            requirements: vec![
                Requirement::in_values(LABEL_INSTANCE_TYPE, ["small"]),
                Requirement::in_values("example.dev/size", ["2"]),
            ],
            offerings: vec![v1::Offering::priced("a", "on-demand", 0.1, "USD", true)],
            capacity: HashMap::from([
                ("cpu".to_owned(), "2".to_owned()),
                ("memory".to_owned(), "4Gi".to_owned()),
                ("pods".to_owned(), "110".to_owned()),
            ]),
            ..Default::default()
        }
    }

    fn failures(catalogue: &[v1::InstanceType], sizes: &[usize]) -> Vec<(&'static str, String)> {
        let vocabulary = BTreeMap::from([("example.dev/size".to_owned(), LabelValueType::Integer)]);
        judge(catalogue, sizes, &vocabulary)
            .into_iter()
            .filter_map(|(check, problem)| problem.map(|p| (check.id, p)))
            .collect()
    }

    #[test]
    fn a_good_catalogue_passes_every_verdict() {
        assert_eq!(failures(&[good()], &[100]), []);
    }

    #[test]
    fn each_fault_fails_its_own_check() {
        type Breakage = Box<dyn Fn(&mut v1::InstanceType)>;
        let cases: Vec<(&str, Breakage)> = vec![
            (
                "instance-types.own-name",
                Box::new(|t| t.requirements.remove(0).key.clear()),
            ),
            (
                "instance-types.offering-placement",
                Box::new(|t| t.offerings[0].zone.clear()),
            ),
            (
                "instance-types.offering-price",
                Box::new(|t| t.offerings[0].price = Some(0.0)),
            ),
            (
                "instance-types.offering-availability",
                Box::new(|t| t.offerings[0].availability = 0),
            ),
            (
                "instance-types.resources",
                Box::new(|t| {
                    t.overhead = Some(v1::Overhead {
                        kube_reserved: HashMap::from([("cpu".to_owned(), "3".to_owned())]),
                        ..Default::default()
                    });
                }),
            ),
            (
                "instance-types.requirement-keys",
                Box::new(|t| t.requirements[1].key = "example.dev/other".into()),
            ),
            (
                "instance-types.requirement-values",
                Box::new(|t| t.requirements[1].values = vec!["two".into()]),
            ),
            (
                "instance-types.launchable",
                Box::new(|t| t.offerings[0].availability = v1::Availability::Unavailable as i32),
            ),
        ];
        for (check, break_it) in cases {
            let mut broken = good();
            break_it(&mut broken);
            let failed: Vec<&str> = failures(&[broken], &[100])
                .into_iter()
                .map(|(id, _)| id)
                .collect();
            assert!(failed.contains(&check), "{check}: {failed:?}");
        }
        let failed = failures(&[good(), good()], &[100]);
        assert_eq!(failed[0].0, "instance-types.unique-names");
        let mut euro = good();
        euro.name = "euro".into();
        euro.requirements[0] = Requirement::in_values(LABEL_INSTANCE_TYPE, ["euro"]);
        euro.offerings[0].currency = "EUR".into();
        let failed: Vec<&str> = failures(&[good(), euro], &[100])
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert!(
            failed.contains(&"instance-types.one-currency"),
            "{failed:?}"
        );
        let failed = failures(&[good()], &[2 * CHUNK_BYTES]);
        assert_eq!(failed[0].0, "instance-types.chunk-size");
    }
}
