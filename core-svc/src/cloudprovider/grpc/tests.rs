//! The gRPC adapter's unit tests: status codes classified, retries, and each conversion's
//! validation.

use serde_json::json;

use super::*;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_TOPOLOGY_ZONE};
use core_domain::quantity::Quantity;
use core_domain::requirements::{NodeSelectorRequirement, Operator};
use core_domain::resources::{Quantities, ResourceName};
use core_domain::scheduler::{Taint, TaintEffect};
use karpenter_api::ConditionStatus;
use provider_sdk::v1;
use tonic::{Code, Status};

use crate::cloudprovider::{
    CloudProviderError, DEFAULT_RESOLVE_AGAIN_AFTER, FailureKind, InstanceState, NodeClaimRequest,
    RepairPolicy, Rpc,
};

fn call_error(status: Status) -> CallError {
    CallError {
        status,
        attempts: 1,
    }
}

#[test]
fn json_survives_the_struct_round_trip_with_integers_kept() {
    let object = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "metadata": {"name": "default", "generation": 3},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "ratio": 0.5, "tags": null, "ok": true}
    });
    let pb = json_to_struct(&object, "node_class").unwrap();
    let back = provider_sdk::json::try_struct_to_json(pb, "node_class").unwrap();
    assert_eq!(serde_json::Value::Object(back), object);
    assert_eq!(
        json_to_struct(&json!([1, 2]), "node_pool").unwrap_err(),
        CloudProviderError::InvalidRequest("node_pool: must be a JSON object, not [1,2]".into())
    );
}

#[test]
fn a_struct_holding_nan_is_refused_naming_the_path() {
    let pb = prost_types::Struct {
        fields: [(
            "amis".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::ListValue(
                    prost_types::ListValue {
                        values: vec![prost_types::Value {
                            kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
                        }],
                    },
                )),
            },
        )]
        .into(),
    };
    assert_eq!(
        provider_sdk::json::try_struct_to_json(pb, "status").unwrap_err(),
        "status.amis[0]: NaN is not a JSON number"
    );
}

#[test]
fn statuses_map_to_errors_by_the_common_table() {
    let cases = [
        (Status::unimplemented("no"), Rpc::Get, "Unsupported"),
        (Status::unavailable("down"), Rpc::Create, "Unavailable"),
        (Status::deadline_exceeded("slow"), Rpc::List, "Unavailable"),
        (
            Status::invalid_argument("name"),
            Rpc::Create,
            "InvalidRequest",
        ),
        (Status::not_found("gone"), Rpc::IsDrifted, "NotFound"),
        (
            provider_sdk::status::insufficient_capacity("ice", HashMap::new()),
            Rpc::Create,
            "InsufficientCapacity",
        ),
        (
            provider_sdk::status::node_class_not_ready("default", "no subnets"),
            Rpc::GetInstanceTypes,
            "NodeClassNotReady",
        ),
        (
            Status::resource_exhausted("message too large"),
            Rpc::Create,
            "Other",
        ),
        (
            Status::failed_precondition("no reason"),
            Rpc::Create,
            "Other",
        ),
        (Status::permission_denied("iam"), Rpc::Create, "Other"),
        (Status::internal("bug"), Rpc::Delete, "Other"),
        (Status::aborted("busy"), Rpc::Create, "Other"),
    ];
    for (status, rpc, expected) in cases {
        let error = classify(rpc, &call_error(status.clone()));
        let variant = format!("{error:?}");
        assert!(
            variant.starts_with(expected),
            "{rpc} {status:?} -> {variant}, expected {expected}"
        );
    }
    assert_eq!(
        classify(Rpc::List, &call_error(Status::unimplemented(""))),
        CloudProviderError::Unsupported { rpc: "List" }
    );
}

#[test]
fn statuses_without_a_meaning_of_their_own_map_to_a_failure_kind() {
    let cases = [
        (Code::PermissionDenied, FailureKind::PermissionDenied),
        (Code::Unauthenticated, FailureKind::PermissionDenied),
        (Code::ResourceExhausted, FailureKind::ResourceExhausted),
        (Code::Aborted, FailureKind::Conflict),
        (Code::AlreadyExists, FailureKind::Conflict),
        (Code::FailedPrecondition, FailureKind::Conflict),
        (Code::Internal, FailureKind::Internal),
        (Code::Unknown, FailureKind::Internal),
        (Code::DataLoss, FailureKind::Internal),
        (Code::OutOfRange, FailureKind::Internal),
        (Code::Cancelled, FailureKind::Internal),
    ];
    for (code, kind) in cases {
        assert_eq!(
            classify(Rpc::Create, &call_error(Status::new(code, "why"))),
            CloudProviderError::Other {
                kind,
                message: "why".into()
            },
            "{code:?}"
        );
    }
    // The ErrorInfo reasons only mean something where the API says so.
    assert_eq!(
        classify(
            Rpc::Delete,
            &call_error(provider_sdk::status::insufficient_capacity(
                "ice",
                HashMap::new()
            ))
        ),
        CloudProviderError::Other {
            kind: FailureKind::ResourceExhausted,
            message: "ice".into()
        }
    );
    // What people read keeps the wording it had when the port carried the gRPC code.
    assert_eq!(
        classify(Rpc::Get, &call_error(Status::internal("bug"))).to_string(),
        "cloud provider error Internal: bug"
    );
}

#[test]
fn a_transport_error_is_unavailable_whatever_its_code() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such socket");
    let status = Status::from_error(Box::new(io));
    let status = received(status);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let timed_out = received(Status::from_error(Box::new(tonic::TimeoutExpired(()))));
    assert_eq!(timed_out.code(), Code::DeadlineExceeded, "{timed_out:?}");
    let from_the_wire = received(Status::not_found("no instance"));
    assert_eq!(from_the_wire.code(), Code::NotFound);
}

fn launched_answer() -> v1::NodeClaim {
    v1::NodeClaim {
        name: "default-abcde".into(),
        labels: HashMap::from([
            (LABEL_INSTANCE_TYPE.into(), "m5.large".into()),
            (LABEL_TOPOLOGY_ZONE.into(), "us-east-1a".into()),
            (LABEL_CAPACITY_TYPE.into(), "on-demand".into()),
        ]),
        status: Some(v1::NodeClaimStatus {
            provider_id: "aws:///us-east-1a/i-0123".into(),
            image_id: "ami-1".into(),
            capacity: HashMap::from([("cpu".into(), "2".into()), ("memory".into(), "8Gi".into())]),
            allocatable: HashMap::from([("cpu".into(), "1930m".into())]),
            instance_state: v1::InstanceState::Pending.into(),
        }),
        ..Default::default()
    }
}

#[test]
fn a_valid_create_answer_converts() {
    let launched = launched_from_proto(Some(launched_answer()), "default-abcde").unwrap();
    assert_eq!(launched.provider_id, "aws:///us-east-1a/i-0123");
    assert_eq!(launched.image_id.as_deref(), Some("ami-1"));
    assert_eq!(launched.state, InstanceState::Pending);
    assert_eq!(
        launched.allocatable.get(&ResourceName::CPU),
        Some(&Quantity::from_millis(1930))
    );
    assert_eq!(launched.labels[LABEL_INSTANCE_TYPE], "m5.large");
}

#[test]
fn each_kind_of_bad_create_answer_is_refused_naming_the_field() {
    type Mutation = Box<dyn Fn(&mut v1::NodeClaim)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|c| c.status.as_mut().unwrap().provider_id.clear()),
            "node_claim.status.provider_id: must not be empty",
        ),
        (Box::new(|c| c.status = None), "node_claim.status: missing"),
        (
            Box::new(|c| {
                c.status
                    .as_mut()
                    .unwrap()
                    .capacity
                    .insert("memory".into(), "8 Gi".into());
            }),
            "node_claim.status.capacity[memory]: invalid quantity",
        ),
        (
            Box::new(|c| {
                c.status
                    .as_mut()
                    .unwrap()
                    .allocatable
                    .insert("cpu".into(), "-1".into());
            }),
            "node_claim.status.allocatable[cpu]: -1 is negative",
        ),
        (
            Box::new(|c| c.status.as_mut().unwrap().instance_state = 42),
            "node_claim.status.instance_state: 42 is not a known instance state",
        ),
        (
            Box::new(|c| {
                c.labels.remove(LABEL_TOPOLOGY_ZONE);
            }),
            "node_claim.labels[topology.kubernetes.io/zone]: missing",
        ),
        (
            Box::new(|c| c.name = "someone-else".into()),
            "node_claim.name: \"someone-else\" is not the NodeClaim asked for",
        ),
    ];
    for (mutate, expected) in cases {
        let mut answer = launched_answer();
        mutate(&mut answer);
        let error = launched_from_proto(Some(answer), "default-abcde").unwrap_err();
        let CloudProviderError::InvalidResponse(message) = &error else {
            panic!("{error:?} is not InvalidResponse");
        };
        assert!(
            message.starts_with("Create answer: ") && message.contains(expected),
            "{message:?} should contain {expected:?}"
        );
    }
    assert_eq!(
        launched_from_proto(None, "x").unwrap_err(),
        CloudProviderError::InvalidResponse("Create answer: node_claim: missing".into())
    );
}

#[test]
fn instances_from_get_and_list_need_only_a_provider_id() {
    let claim = v1::NodeClaim {
        status: Some(v1::NodeClaimStatus {
            provider_id: "fake:///a/i-1".into(),
            ..Default::default()
        }),
        deletion_timestamp: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        ..Default::default()
    };
    let instance = instance_from_proto(claim, "node_claims[0]").unwrap();
    assert_eq!(instance.node_claim_name, None);
    assert_eq!(instance.state, InstanceState::Unknown);
    assert!(instance.is_deleting());
    assert_eq!(
        instance.deletion_time,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    );
    assert_eq!(
        instance_from_proto(v1::NodeClaim::default(), "node_claims[3]").unwrap_err(),
        "node_claims[3].status: missing"
    );
}

#[test]
fn requests_carry_every_field_of_the_nodeclaim() {
    let request = NodeClaimRequest {
        name: "default-abcde".into(),
        uid: "uid-1".into(),
        labels: BTreeMap::from([("team".into(), "a".into())]),
        requirements: vec![NodeSelectorRequirement {
            key: LABEL_INSTANCE_TYPE.into(),
            operator: Operator::In,
            values: vec!["m5.large".into(), "m5.xlarge".into()],
            min_values: Some(2),
        }],
        resource_requests: Quantities::from([(ResourceName::CPU, Quantity::from_millis(1500))]),
        taints: vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)],
        startup_taints: vec![Taint::new("init", "", TaintEffect::NoExecute)],
        expire_after: Some(Duration::from_secs(720 * 3600)),
        creation_time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10)),
        ..Default::default()
    };
    let pb = node_claim_to_proto(&request, None).unwrap();
    let spec = pb.spec.unwrap();
    assert_eq!(pb.name, "default-abcde");
    assert_eq!(pb.labels["team"], "a");
    assert_eq!(spec.requirements[0].operator, i32::from(v1::Operator::In));
    assert_eq!(
        spec.requirements[0].values,
        ["m5.large", "m5.xlarge"],
        "order kept"
    );
    assert_eq!(spec.requirements[0].min_values, Some(2));
    assert_eq!(spec.resource_requests["cpu"], "1500m");
    assert_eq!(
        spec.taints[0].effect,
        i32::from(v1::TaintEffect::NoSchedule)
    );
    assert_eq!(
        spec.startup_taints[0].effect,
        i32::from(v1::TaintEffect::NoExecute)
    );
    assert_eq!(spec.expire_after.unwrap().seconds, 720 * 3600);
    assert_eq!(spec.termination_grace_period, None);
    assert_eq!(pb.creation_timestamp.unwrap().seconds, 10);
    assert!(pb.status.is_none(), "Create sends no status");
}

#[test]
fn resolve_answers_are_validated() {
    let ok = v1::ResolveNodeClassResponse {
        status: Some(json_to_struct(&json!({"amis": [{"id": "ami-1"}]}), "status").unwrap()),
        conditions: vec![v1::Condition {
            r#type: "AMIsReady".into(),
            status: v1::ConditionStatus::True.into(),
            reason: String::new(),
            message: String::new(),
        }],
        static_hash: "123".into(),
        static_hash_version: "v4".into(),
        resolve_again_after: None,
    };
    let resolved = resolved_from_proto(ok.clone()).unwrap();
    assert_eq!(resolved.static_hash.as_deref(), Some("123"));
    assert_eq!(resolved.resolve_again_after, DEFAULT_RESOLVE_AGAIN_AFTER);
    assert_eq!(resolved.status["amis"][0]["id"], "ami-1");

    let refused = |mutate: &dyn Fn(&mut v1::ResolveNodeClassResponse)| {
        let mut answer = ok.clone();
        mutate(&mut answer);
        resolved_from_proto(answer).unwrap_err().to_string()
    };
    assert!(refused(&|a| a.conditions[0].status = 0).contains("conditions[0].status: 0"));
    assert!(
        refused(&|a| a.conditions[0].r#type = "not a type".into()).contains("conditions[0].type")
    );
    assert!(
        refused(&|a| a.conditions[0].reason = "two words".into()).contains("conditions[0].reason")
    );
    assert!(refused(&|a| a.conditions.push(a.conditions[0].clone())).contains("appears twice"));
    assert!(
        refused(&|a| a.resolve_again_after = Some(prost_types::Duration {
            seconds: -5,
            nanos: 0
        }))
        .contains("resolve_again_after")
    );
}

#[test]
fn condition_reasons_follow_the_crd_pattern() {
    for good in [
        "AMIDrift",
        "NodeClassDrift",
        "a",
        "Reason_1",
        "With:Colon,Comma_",
    ] {
        assert!(is_condition_reason(good), "{good}");
    }
    for bad in [
        "",
        "1Drift",
        "Two Words",
        "Trailing:",
        "dash-ed",
        &"A".repeat(1025),
    ] {
        assert!(!is_condition_reason(bad), "{bad}");
    }
}

#[test]
fn repair_policies_need_a_status_and_a_duration_that_is_not_negative() {
    let policy = |status: v1::ConditionStatus, seconds: Option<i64>| v1::RepairPolicy {
        condition_type: "Ready".into(),
        condition_status: status.into(),
        toleration_duration: seconds.map(|seconds| prost_types::Duration { seconds, nanos: 0 }),
    };
    assert_eq!(
        repair_policy_from_proto(policy(v1::ConditionStatus::False, Some(600)), 0).unwrap(),
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: ConditionStatus::False,
            toleration_duration: Duration::from_secs(600),
        }
    );
    assert!(
        repair_policy_from_proto(policy(v1::ConditionStatus::Unspecified, Some(600)), 1)
            .unwrap_err()
            .starts_with("policies[1].condition_status")
    );
    assert!(
        repair_policy_from_proto(policy(v1::ConditionStatus::False, None), 0)
            .unwrap_err()
            .contains("toleration_duration: missing")
    );
    assert_eq!(
        repair_policy_from_proto(policy(v1::ConditionStatus::False, Some(0)), 0)
            .unwrap()
            .toleration_duration,
        Duration::ZERO,
        "zero: repair as soon as the condition is seen"
    );
    assert!(
        repair_policy_from_proto(policy(v1::ConditionStatus::False, Some(-5)), 0)
            .unwrap_err()
            .contains("toleration_duration: -5s is negative")
    );
}

#[test]
fn metrics_count_attempts_by_code() {
    let metrics = CallMetrics::new();
    metrics.record_attempt(Rpc::Create, Code::Unavailable);
    metrics.record_attempt(Rpc::Create, Code::Unavailable);
    metrics.record_attempt(Rpc::Create, Code::Ok);
    metrics.record_retry(Rpc::Create);
    assert_eq!(metrics.attempts(Rpc::Create, Code::Unavailable), 2);
    assert_eq!(metrics.retries(Rpc::Create), 1);
    assert_eq!(metrics.attempts(Rpc::Get, Code::Ok), 0);
    assert_eq!(
        metrics.attempts_by_code(),
        [
            AttemptCount {
                rpc: Rpc::Create,
                code: Code::Ok,
                count: 1
            },
            AttemptCount {
                rpc: Rpc::Create,
                code: Code::Unavailable,
                count: 2
            },
        ]
    );
}
