//! Create: launching, idempotency, the requirements it must honour, the requests it must
//! refuse, insufficient capacity, parallel and cut-off calls.

use std::collections::HashMap;
use std::time::Duration;

use core_domain::labels::{LABEL_ARCH, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL};
use core_svc::cloudprovider::grpc::answers;
use core_svc::controllers::hash::HashAnnotationKeys;
use core_svc::plugin::with_deadline;
use futures::future::join_all;
use provider_sdk::v1::{
    self, CreateRequest, CreateResponse, ErrorReason, NodeClaim, NodeClaimSpec, NodeClassReference,
    Operator, Requirement,
};
use serde_json::json;
use tonic::Code;

use super::node_class::{group_kind, name_of};
use super::{Check, Recorder, expect_error, metadata_key};
use crate::Outcome;
use crate::session::{CreateError, Session, describe_message, describe_status};
use crate::targets::{self, Narrowed};

pub(crate) const LAUNCHES: Check = Check {
    id: "create.launches",
    promise: "Create of the cheapest available offering answers LAUNCHED (after PENDING, if it \
              must) with a provider ID, the instance type, zone and capacity type labels, and \
              capacity and allocatable core accepts",
};
pub(crate) const IDEMPOTENT: Check = Check {
    id: "create.idempotent",
    promise: "Create of the same NodeClaim 10 times launches one instance and answers its \
              provider ID every time",
};
pub(crate) const HONOURS_ZONE: Check = Check {
    id: "create.honours-zone",
    promise: "a NodeClaim that allows many types but one zone is launched in that zone",
};
pub(crate) const HONOURS_CAPACITY_TYPE: Check = Check {
    id: "create.honours-capacity-type",
    promise: "a NodeClaim that allows many types but one capacity type is launched as that \
              capacity type",
};
pub(crate) const HONOURS_ARCH: Check = Check {
    id: "create.honours-architecture",
    promise: "a NodeClaim that allows many types but one architecture is launched on a type of \
              that architecture",
};
pub(crate) const WITHIN_REQUIREMENTS: Check = Check {
    id: "create.within-requirements",
    promise: "every launched NodeClaim's labels satisfy every requirement sent",
};
pub(crate) const REQUIRES_INSTANCE_TYPE: Check = Check {
    id: "create.requires-instance-type",
    promise: "Create without an instance-type requirement answers INVALID_ARGUMENT, reason \
              INVALID_FIELD, `field` naming the requirements, and launches nothing",
};
pub(crate) const REQUIRES_NAME: Check = Check {
    id: "create.requires-name",
    promise: "Create of a NodeClaim without a name answers INVALID_ARGUMENT, reason \
              INVALID_FIELD, `field` naming the name",
};
pub(crate) const UNKNOWN_KIND: Check = Check {
    id: "create.unknown-node-class-kind",
    promise: "Create with a node class of a kind the plugin does not manage answers \
              INVALID_ARGUMENT, reason NODE_CLASS_KIND_UNSUPPORTED, `kind` in the metadata",
};
pub(crate) const INSUFFICIENT_CAPACITY: Check = Check {
    id: "create.insufficient-capacity",
    promise: "Create that no available offering can satisfy answers RESOURCE_EXHAUSTED, reason \
              INSUFFICIENT_CAPACITY, with `instance_types`, `zones` or `capacity_types` in the \
              metadata, and launches nothing",
};
pub(crate) const PARALLEL: Check = Check {
    id: "create.parallel",
    promise: "three Creates of different NodeClaims at once each launch their own instance",
};
pub(crate) const SAME_NAME: Check = Check {
    id: "create.concurrent-same-name",
    promise: "three Creates of one NodeClaim at once (each ABORTED with reason \
              CREATE_IN_PROGRESS retried, as core does) answer the same instance, and one \
              instance exists",
};
pub(crate) const DEADLINE_RETRY: Check = Check {
    id: "create.deadline-retry",
    promise: "a Create cut off by its deadline, then called again, ends with one instance",
};

pub(crate) const CHECKS: [Check; 13] = [
    LAUNCHES,
    IDEMPOTENT,
    HONOURS_ZONE,
    HONOURS_CAPACITY_TYPE,
    HONOURS_ARCH,
    REQUIRES_INSTANCE_TYPE,
    REQUIRES_NAME,
    UNKNOWN_KIND,
    INSUFFICIENT_CAPACITY,
    PARALLEL,
    SAME_NAME,
    DEADLINE_RETRY,
    WITHIN_REQUIREMENTS,
];

/// A NodeClaim the suite launched, for the checks that follow.
#[derive(Debug, Clone)]
pub(crate) struct Launched {
    /// The NodeClaim as sent.
    pub(crate) sent: NodeClaim,
    /// Its instance's provider ID.
    pub(crate) provider_id: String,
    /// The NodeClaim as the plugin answered it.
    pub(crate) answer: NodeClaim,
}

/// The NodeClaims later checks work on.
#[derive(Debug, Clone)]
pub(crate) struct Launches {
    /// The primary one, launched 10 times.
    pub(crate) primary: Launched,
    /// Another, which Delete removes by name alone.
    pub(crate) other: Option<Launched>,
}

/// A NodeClaim of this run, as core would send it: its NodePool label, the node class's hash
/// annotations, its nodeClassRef.
pub(crate) fn node_claim(
    session: &Session,
    what: &str,
    requirements: Vec<Requirement>,
) -> NodeClaim {
    let node_class = session.node_class.clone().unwrap_or_default();
    let (group, kind) = group_kind(&node_class);
    let mut annotations = HashMap::new();
    if let Some((hash, version)) = &session.static_hash {
        let keys = HashAnnotationKeys::node_class(&group, &kind);
        annotations.insert(keys.hash, hash.clone());
        annotations.insert(keys.version, version.clone());
    }
    NodeClaim {
        name: session.name(what),
        labels: HashMap::from([(LABEL_NODEPOOL.to_owned(), "conformance".to_owned())]),
        annotations,
        spec: Some(NodeClaimSpec {
            node_class_ref: Some(NodeClassReference {
                group,
                kind,
                name: name_of(&node_class).to_owned(),
            }),
            requirements,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn request(session: &Session, claim: NodeClaim) -> CreateRequest {
    CreateRequest {
        node_claim: Some(claim),
        node_class: session
            .node_class
            .as_ref()
            .and_then(provider_sdk::json::json_to_struct),
    }
}

fn describe_request(request: &CreateRequest) -> String {
    format!("Create {}", describe_message(&request.node_claim))
}

/// Core's reading of a LAUNCHED answer, as a launched NodeClaim.
fn launched(sent: &NodeClaim, answer: CreateResponse) -> Result<Launched, String> {
    let checked = answers::launched(answer.node_claim.clone(), &sent.name)?;
    Ok(Launched {
        sent: sent.clone(),
        provider_id: checked.provider_id,
        answer: answer.node_claim.unwrap_or_default(),
    })
}

/// The first requirement of `sent` the launched labels break, if any (an architecture the
/// labels leave out is looked up in the catalogue).
fn broken_requirement(
    sent: &NodeClaim,
    answer: &NodeClaim,
    catalogue: &[v1::InstanceType],
) -> Option<String> {
    let requirements = sent
        .spec
        .as_ref()
        .map(|s| s.requirements.as_slice())
        .unwrap_or_default();
    requirements.iter().find_map(|r| {
        let value = answer.labels.get(&r.key).map(String::as_str).or_else(|| {
            (r.key == LABEL_ARCH)
                .then(|| {
                    let instance_type = answer.labels.get(LABEL_INSTANCE_TYPE)?;
                    catalogue
                        .iter()
                        .find(|t| &t.name == instance_type)
                        .and_then(targets::arch_of)
                })
                .flatten()
        });
        let holds = match (r.operator(), value) {
            (Operator::In, Some(value)) => r.values.iter().any(|v| v == value),
            (Operator::NotIn, Some(value)) => !r.values.iter().any(|v| v == value),
            // Nothing to compare with: the launch did not resolve this key.
            _ => true,
        };
        (!holds).then(|| {
            format!(
                "{} is {:?}, outside {} {:?}",
                r.key,
                value.unwrap_or_default(),
                r.operator().as_str_name(),
                r.values
            )
        })
    })
}

/// Launches `claim` once and judges the answer: the launched NodeClaim, or the failure.
async fn launch(session: &mut Session, claim: NodeClaim) -> Result<Launched, Outcome> {
    let request = request(session, claim.clone());
    let sent = describe_request(&request);
    match session.create(request).await {
        Ok(answer) => {
            let received = describe_message(&answer);
            launched(&claim, answer).map_err(|problem| Outcome::fail(&sent, received, problem))
        }
        Err(error) => Err(Outcome::fail(
            sent,
            error.to_string(),
            "LAUNCH_STATE_LAUNCHED",
        )),
    }
}

/// Launches a NodeClaim narrowed to one value of `narrowed.key` and checks the label.
async fn honours(
    session: &mut Session,
    narrowed: Option<Narrowed>,
    what: &str,
    all_launched: &mut Vec<Launched>,
) -> Outcome {
    let Some(narrowed) = narrowed else {
        return Outcome::skip(format!(
            "the catalogue's available offerings have a single {what}"
        ));
    };
    let claim = node_claim(session, what, narrowed.requirements.clone());
    match launch(session, claim).await {
        Ok(launched) => {
            let catalogue = session.catalogue.as_deref().unwrap_or_default();
            let outcome = match broken_requirement(&launched.sent, &launched.answer, catalogue) {
                None => Outcome::Pass,
                Some(problem) => Outcome::fail(
                    format!("Create {}", describe_message(&launched.sent)),
                    describe_message(&launched.answer),
                    format!("{} {:?}; {problem}", narrowed.key, narrowed.value),
                ),
            };
            all_launched.push(launched);
            outcome
        }
        Err(outcome) => outcome,
    }
}

pub(crate) async fn run(session: &mut Session, recorder: &mut Recorder) -> Option<Launches> {
    let catalogue = session.catalogue.clone().unwrap_or_default();
    let available = targets::available(&catalogue);
    let Some(primary_offering) = targets::primary(&available) else {
        recorder.skip(
            &CHECKS,
            "no available offering to launch (instance-types.*)",
        );
        return None;
    };
    let mut all_launched: Vec<Launched> = Vec::new();

    // Launch, then the same NodeClaim nine more times.
    let primary_claim = node_claim(session, "primary", primary_offering.requirements());
    let primary = match launch(session, primary_claim.clone()).await {
        Ok(launched) => {
            recorder.record(LAUNCHES, Outcome::Pass);
            launched
        }
        Err(outcome) => {
            recorder.record(LAUNCHES, outcome);
            recorder.skip(&CHECKS[1..], "create.launches failed");
            return None;
        }
    };
    all_launched.push(primary.clone());
    let mut ids = vec![primary.provider_id.clone()];
    let mut failure = None;
    for _ in 1..10 {
        match launch(session, primary_claim.clone()).await {
            Ok(again) => ids.push(again.provider_id),
            Err(outcome) => {
                failure = Some(outcome);
                break;
            }
        }
    }
    let sent = format!("Create {}, 10 times", describe_message(&primary_claim));
    let outcome = match failure {
        Some(outcome) => outcome,
        None if ids.iter().any(|id| *id != ids[0]) => Outcome::fail(
            &sent,
            format!("provider IDs {ids:?}"),
            "the same provider ID every time",
        ),
        None => count_instances(session, &sent, &primary_claim.name).await,
    };
    recorder.record(IDEMPOTENT, outcome);

    let zone = targets::other_zone(&available, &primary_offering);
    let outcome = honours(session, zone, "zone", &mut all_launched).await;
    recorder.record(HONOURS_ZONE, outcome);
    let capacity_type = targets::other_capacity_type(&available, &primary_offering);
    let outcome = honours(session, capacity_type, "capacity-type", &mut all_launched).await;
    recorder.record(HONOURS_CAPACITY_TYPE, outcome);
    let arch = targets::other_arch(&available, &primary_offering);
    let outcome = honours(session, arch, "arch", &mut all_launched).await;
    recorder.record(HONOURS_ARCH, outcome);

    // Requests to refuse.
    let mut no_type = node_claim(session, "no-instance-type", Vec::new());
    if let Some(spec) = &mut no_type.spec {
        spec.requirements = primary_offering.requirements()[1..].to_vec();
    }
    let outcome = refused(
        session,
        no_type,
        None,
        (Code::InvalidArgument, ErrorReason::InvalidField),
        metadata_key(
            "field",
            |f| f.contains("requirements"),
            "naming the requirements",
        ),
    )
    .await;
    recorder.record(REQUIRES_INSTANCE_TYPE, outcome);

    let mut nameless = node_claim(session, "nameless", primary_offering.requirements());
    nameless.name.clear();
    let outcome = refused(
        session,
        nameless,
        None,
        (Code::InvalidArgument, ErrorReason::InvalidField),
        metadata_key(
            "field",
            |f| f.contains("name"),
            "naming the NodeClaim's name",
        ),
    )
    .await;
    recorder.record(REQUIRES_NAME, outcome);

    let mut foreign_claim = node_claim(session, "foreign-kind", primary_offering.requirements());
    if let Some(reference) = foreign_claim
        .spec
        .as_mut()
        .and_then(|s| s.node_class_ref.as_mut())
    {
        reference.group = "conformance.invalid".into();
        reference.kind = "ConformanceUnknownKind".into();
    }
    let mut foreign_class = session.node_class.clone().unwrap_or_default();
    foreign_class["apiVersion"] = json!("conformance.invalid/v1");
    foreign_class["kind"] = json!("ConformanceUnknownKind");
    let outcome = refused(
        session,
        foreign_claim,
        Some(foreign_class),
        (Code::InvalidArgument, ErrorReason::NodeClassKindUnsupported),
        metadata_key(
            "kind",
            |k| k.contains("ConformanceUnknownKind"),
            "naming the kind sent",
        ),
    )
    .await;
    recorder.record(UNKNOWN_KIND, outcome);

    let unlaunchable = node_claim(
        session,
        "no-capacity",
        targets::unlaunchable(&catalogue, &primary_offering),
    );
    let outcome = refused(
        session,
        unlaunchable,
        None,
        (Code::ResourceExhausted, ErrorReason::InsufficientCapacity),
        |metadata| {
            ["instance_types", "zones", "capacity_types"]
                .iter()
                .any(|key| metadata.get(*key).is_some_and(|v| !v.is_empty()))
                .then_some(())
                .ok_or_else(|| {
                    "naming what failed in `instance_types`, `zones` or `capacity_types`".to_owned()
                })
        },
    )
    .await;
    recorder.record(INSUFFICIENT_CAPACITY, outcome);

    // Three NodeClaims at once.
    let claims: Vec<NodeClaim> = (0..3)
        .map(|i| {
            node_claim(
                session,
                &format!("parallel-{i}"),
                primary_offering.requirements(),
            )
        })
        .collect();
    let requests: Vec<CreateRequest> = claims.iter().map(|c| request(session, c.clone())).collect();
    for request in &requests {
        session.will_launch(request);
    }
    let launcher = session.launcher();
    let results = join_all(requests.iter().map(|r| launcher.clone().launch(r.clone()))).await;
    let mut parallel = Vec::new();
    let mut failure = None;
    for (claim, (result, errors)) in claims.iter().zip(results) {
        session.launch_done(&claim.name, &result, errors);
        match result
            .map_err(|e| e.to_string())
            .and_then(|answer| launched(claim, answer))
        {
            Ok(launched) => parallel.push(launched),
            Err(problem) => failure = failure.or(Some((claim.name.clone(), problem))),
        }
    }
    let sent = format!(
        "3 Creates at once, of {:?}",
        claims.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()
    );
    let ids: Vec<&str> = parallel.iter().map(|l| l.provider_id.as_str()).collect();
    let outcome = match failure {
        Some((name, problem)) => Outcome::fail(&sent, format!("{name}: {problem}"), "3 launches"),
        None if ids.iter().enumerate().any(|(i, id)| ids[..i].contains(id)) => Outcome::fail(
            &sent,
            format!("provider IDs {ids:?}"),
            "3 different instances",
        ),
        None => Outcome::Pass,
    };
    recorder.record(PARALLEL, outcome);
    all_launched.extend(parallel.iter().cloned());

    let outcome = same_name(session, primary_offering.requirements(), &mut all_launched).await;
    recorder.record(SAME_NAME, outcome);
    let outcome = deadline_retry(session, primary_offering.requirements(), &mut all_launched).await;
    recorder.record(DEADLINE_RETRY, outcome);

    let problem = all_launched
        .iter()
        .find_map(|l| broken_requirement(&l.sent, &l.answer, &catalogue).map(|p| (l, p)));
    recorder.record(
        WITHIN_REQUIREMENTS,
        match problem {
            None => Outcome::Pass,
            Some((launched, problem)) => Outcome::fail(
                format!("Create {}", describe_message(&launched.sent)),
                describe_message(&launched.answer),
                format!("labels within the requirements; {problem}"),
            ),
        },
    );

    Some(Launches {
        primary,
        other: parallel.into_iter().next(),
    })
}

/// With List announced, that exactly one listed instance carries `name`; otherwise a pass.
async fn count_instances(session: &mut Session, sent: &str, name: &str) -> Outcome {
    if !session.capabilities.list {
        return Outcome::Pass;
    }
    match session.list_all(0).await {
        Ok(listing) if listing.named(name) == 1 => Outcome::Pass,
        Ok(listing) => Outcome::fail(
            format!("{sent}, then List"),
            format!("{} listed instances named {name:?}", listing.named(name)),
            "exactly one instance",
        ),
        Err(status) => Outcome::fail(
            format!("{sent}, then List"),
            describe_status(&status),
            "OK, listing the instance",
        ),
    }
}

/// Sends a Create the plugin must refuse, and checks that nothing was launched for it.
async fn refused(
    session: &mut Session,
    claim: NodeClaim,
    node_class: Option<serde_json::Value>,
    (code, reason): (Code, ErrorReason),
    metadata: impl Fn(&HashMap<String, String>) -> Result<(), String>,
) -> Outcome {
    let mut request = request(session, claim.clone());
    if let Some(node_class) = &node_class {
        request.node_class = provider_sdk::json::json_to_struct(node_class);
    }
    let sent = describe_request(&request);
    let result = session.create(request).await.map_err(|error| match error {
        CreateError::Status(status) => status,
        other => tonic::Status::unknown(other.to_string()),
    });
    let outcome = expect_error(&sent, &result, code, reason, metadata);
    if outcome.is_fail() || claim.name.is_empty() {
        return outcome;
    }
    if !session.capabilities.list {
        return outcome;
    }
    match session.list_all(0).await {
        Ok(listing) if listing.named(&claim.name) == 0 => Outcome::Pass,
        Ok(listing) => Outcome::fail(
            format!("{sent}, then List"),
            format!(
                "{} listed instances carry the refused NodeClaim's name",
                listing.named(&claim.name)
            ),
            "nothing launched for a refused Create",
        ),
        Err(status) => Outcome::fail(
            format!("{sent}, then List"),
            describe_status(&status),
            "OK, listing the instances",
        ),
    }
}

/// Three Creates of one new NodeClaim at once.
async fn same_name(
    session: &mut Session,
    requirements: Vec<Requirement>,
    all_launched: &mut Vec<Launched>,
) -> Outcome {
    let claim = node_claim(session, "same-name", requirements);
    let request = request(session, claim.clone());
    session.will_launch(&request);
    let sent = format!("Create {}, 3 at once", describe_message(&claim));
    let launcher = session.launcher();
    let results = join_all((0..3).map(|_| launcher.clone().launch(request.clone()))).await;
    let mut ids = Vec::new();
    for (result, errors) in results {
        session.launch_done(&claim.name, &result, errors);
        match result {
            Ok(answer) => match launched(&claim, answer) {
                Ok(launched) => ids.push(launched.provider_id),
                Err(problem) => return Outcome::fail(&sent, problem, "a valid answer"),
            },
            Err(error) => {
                return Outcome::fail(
                    &sent,
                    error.to_string(),
                    "LAUNCHED (each ABORTED with reason CREATE_IN_PROGRESS retried)",
                );
            }
        }
    }
    // Whatever the three answered, one more Create must find the one instance.
    let last = match launch(session, claim.clone()).await {
        Ok(last) => last,
        Err(outcome) => return outcome,
    };
    if let Some(other) = ids.iter().find(|id| **id != last.provider_id) {
        return Outcome::fail(
            &sent,
            format!("provider IDs {other:?} and {:?}", last.provider_id),
            "one instance for one NodeClaim",
        );
    }
    all_launched.push(last);
    count_instances(session, &sent, &claim.name).await
}

/// A Create cut off after 50 ms, then made again with the API's deadline.
async fn deadline_retry(
    session: &mut Session,
    requirements: Vec<Requirement>,
    all_launched: &mut Vec<Launched>,
) -> Outcome {
    let claim = node_claim(session, "deadline", requirements);
    let request = request(session, claim.clone());
    session.will_launch(&request);
    let sent = format!(
        "Create {} with a 50 ms deadline, then again",
        describe_message(&claim)
    );
    // The suite's own short deadline: not noted, so not counted against the plugin.
    let cut = session
        .cloud
        .create(with_deadline(request, Duration::from_millis(50)))
        .await;
    let cut_id = cut
        .ok()
        .and_then(|answer| answer.into_inner().node_claim)
        .and_then(|claim| claim.status)
        .map(|status| status.provider_id)
        .filter(|id| !id.is_empty());
    let last = match launch(session, claim.clone()).await {
        Ok(last) => last,
        Err(outcome) => return outcome,
    };
    if let Some(cut_id) = cut_id.filter(|id| *id != last.provider_id) {
        return Outcome::fail(
            &sent,
            format!("provider IDs {cut_id:?} and {:?}", last.provider_id),
            "one instance for one NodeClaim",
        );
    }
    all_launched.push(last);
    count_instances(session, &sent, &claim.name).await
}
