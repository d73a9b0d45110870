//! Fuzzing core's checks of a plugin's answers, the functions the gRPC client runs on every
//! answer (and the conformance runner runs too): GetInstanceTypes' catalogue, ResolveNodeClass,
//! Create's NodeClaim, Get and List instances, GetRepairPolicies, WatchInterruptions' notices,
//! and the handshake's GetPluginInfo, GetPluginVocabulary and GetSupportedNodeClasses.
//!
//! Inputs: the corpus's encoded answers (`tests/fuzz-corpus/<answer>/*.binpb`, written from
//! valid messages by `FUZZ_UPDATE_SEEDS=1`) replayed, then mutated on the wire and decoded as
//! prost would decode them; and messages built by strategies from random and extreme values
//! (NaN, infinities, negative and huge numbers, unknown enum values, empty and repeated
//! entries). Properties: no panic, and every refusal starts with the field it is about; what
//! is accepted keeps the API's promises (finite prices within the documented bound, positive
//! durations). `FUZZ_CASES=100000 cargo test -p core-svc --test fuzz_plugin_answers` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::HashMap;
use std::path::PathBuf;

use core_svc::cloudprovider::grpc::answers;
use core_svc::plugin::instance_types::{catalogue_from_proto, from_proto};
use core_svc::plugin::{HandshakeError, validate_info, validate_node_classes, validate_vocabulary};
use karpenter_api::testing::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use prost::Message;
use provider_sdk::v1;

/// The price bound the API documents for an offering.
const MAX_PRICE: f64 = 1e9;

fn corpus_dir(target: &str) -> PathBuf {
    fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), target)
}

// ---- The checks and their properties ---------------------------------------------------------

/// `text` is a refusal that starts with one of `fields` (after `prefix`, the RPC's words).
#[track_caller]
fn assert_starts_with_field(text: &str, prefix: &str, fields: &[&str]) {
    let rest = text
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{text:?} does not start with {prefix:?}"));
    assert!(
        fields.iter().any(|f| rest.starts_with(f)),
        "{text:?} names none of the fields {fields:?}"
    );
}

fn check_catalogue(answer: &v1::GetInstanceTypesResponse) {
    for t in &answer.instance_types {
        match from_proto(t) {
            Err(e) => {
                assert_eq!(e.instance_type, t.name);
                assert_starts_with_field(
                    &e.field,
                    "",
                    &["name", "requirements", "offerings", "capacity", "overhead"],
                );
                assert!(!e.problem.is_empty(), "{e}");
            }
            Ok(converted) => {
                for offering in converted.offerings() {
                    assert!(
                        offering.price.is_finite()
                            && offering.price >= 0.0
                            && offering.price <= MAX_PRICE,
                        "{}: price {} accepted",
                        t.name,
                        offering.price
                    );
                }
            }
        }
    }
    if let Err(e) = catalogue_from_proto(&answer.instance_types) {
        assert_starts_with_field(
            &e.field,
            "",
            &["name", "requirements", "offerings", "capacity", "overhead"],
        );
    }
}

fn check_resolved(answer: v1::ResolveNodeClassResponse) {
    match answers::resolved(answer) {
        Err(e) => assert_starts_with_field(
            &e,
            "invalid answer from the cloud provider: ResolveNodeClass answer: ",
            &["status", "conditions[", "resolve_again_after"],
        ),
        Ok(resolved) => {
            assert!(!resolved.resolve_again_after.is_zero());
            assert!(!resolved.status.contains_key("conditions"));
        }
    }
}

fn check_node_claim(claim: v1::NodeClaim) {
    if let Err(e) = answers::launched(Some(claim.clone()), "default-x7k2p") {
        assert_starts_with_field(
            &e,
            "invalid answer from the cloud provider: Create answer: ",
            &["node_claim"],
        );
    }
    if let Err(e) = answers::instance(claim, "instances[4]") {
        assert_starts_with_field(&e, "", &["instances[4]."]);
    }
}

fn check_repair_policies(answer: v1::GetRepairPoliciesResponse) {
    for (i, policy) in answer.policies.into_iter().enumerate() {
        match answers::repair_policy(policy, i) {
            Err(e) => assert_starts_with_field(&e, "", &[&format!("policies[{i}].")]),
            Ok(policy) => assert!(!policy.condition_type.is_empty()),
        }
    }
}

fn check_interruption(notice: v1::InterruptionNotice) {
    if let Err(e) = answers::interruption(notice, "notices[2]") {
        assert_starts_with_field(&e, "", &["notices[2]."]);
    }
}

#[track_caller]
fn assert_handshake_field(error: HandshakeError, fields: &[&str]) {
    match error {
        HandshakeError::InvalidAnswer { field, problem, .. } => {
            assert!(fields.contains(&field), "{field:?} is not a field");
            assert!(!problem.is_empty());
        }
        other => panic!("not an answer's refusal: {other}"),
    }
}

fn check_info(answer: v1::GetPluginInfoResponse) {
    if let Err(e) = validate_info(answer) {
        assert_handshake_field(e, &["name", "vendor_version", "api_version"]);
    }
}

fn check_vocabulary(answer: v1::GetPluginVocabularyResponse) {
    if let Err(e) = validate_vocabulary(answer) {
        assert_handshake_field(e, &["labels", "restricted_label_domains"]);
    }
}

fn check_node_classes(kinds: &[v1::NodeClassKind]) {
    if let Err(e) = validate_node_classes(kinds) {
        assert_handshake_field(e, &["node_classes"]);
    }
}

// ---- Targets: each answer's message type, its check, and valid seeds -------------------------

/// An answer type fuzzed: its corpus directory, how to check a decoded message, and the valid
/// messages its seeds are written from.
struct Target {
    dir: &'static str,
    check: fn(&[u8]),
    seeds: fn() -> Vec<(&'static str, Vec<u8>)>,
    /// Whether two encodings are of the same message (map entries encode in any order).
    same: fn(&[u8], &[u8]) -> bool,
}

fn same<M: Message + Default + PartialEq>(a: &[u8], b: &[u8]) -> bool {
    matches!((M::decode(a), M::decode(b)), (Ok(a), Ok(b)) if a == b)
}

fn decoded<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    M::decode(bytes).ok()
}

fn targets() -> Vec<Target> {
    vec![
        Target {
            dir: "instance-types",
            check: |b| {
                if let Some(m) = decoded::<v1::GetInstanceTypesResponse>(b) {
                    check_catalogue(&m);
                }
            },
            seeds: || vec![("catalogue", seed_catalogue().encode_to_vec())],
            same: same::<v1::GetInstanceTypesResponse>,
        },
        Target {
            dir: "resolve-node-class",
            check: |b| {
                if let Some(m) = decoded::<v1::ResolveNodeClassResponse>(b) {
                    check_resolved(m);
                }
            },
            seeds: || vec![("resolved", seed_resolved().encode_to_vec())],
            same: same::<v1::ResolveNodeClassResponse>,
        },
        Target {
            dir: "node-claim",
            check: |b| {
                if let Some(m) = decoded::<v1::NodeClaim>(b) {
                    check_node_claim(m);
                }
            },
            seeds: || vec![("launched", seed_node_claim().encode_to_vec())],
            same: same::<v1::NodeClaim>,
        },
        Target {
            dir: "repair-policies",
            check: |b| {
                if let Some(m) = decoded::<v1::GetRepairPoliciesResponse>(b) {
                    check_repair_policies(m);
                }
            },
            seeds: || vec![("policies", seed_repair_policies().encode_to_vec())],
            same: same::<v1::GetRepairPoliciesResponse>,
        },
        Target {
            dir: "interruption",
            check: |b| {
                if let Some(m) = decoded::<v1::InterruptionNotice>(b) {
                    check_interruption(m);
                }
            },
            seeds: || vec![("spot", seed_interruption().encode_to_vec())],
            same: same::<v1::InterruptionNotice>,
        },
        Target {
            dir: "plugin-info",
            check: |b| {
                if let Some(m) = decoded::<v1::GetPluginInfoResponse>(b) {
                    check_info(m);
                }
            },
            seeds: || vec![("info", seed_info().encode_to_vec())],
            same: same::<v1::GetPluginInfoResponse>,
        },
        Target {
            dir: "vocabulary",
            check: |b| {
                if let Some(m) = decoded::<v1::GetPluginVocabularyResponse>(b) {
                    check_vocabulary(m);
                }
            },
            seeds: || vec![("vocabulary", seed_vocabulary().encode_to_vec())],
            same: same::<v1::GetPluginVocabularyResponse>,
        },
    ]
}

fn seed_instance_type(name: &str, zones: &[&str], price: f64) -> v1::InstanceType {
    v1::InstanceType {
        name: name.into(),
        requirements: vec![
            v1::Requirement::in_values("node.kubernetes.io/instance-type", [name]),
            v1::Requirement::in_values("topology.kubernetes.io/zone", zones),
            v1::Requirement::in_values("karpenter.sh/capacity-type", ["on-demand", "spot"]),
            v1::Requirement::in_values("kubernetes.io/arch", ["amd64"]),
        ],
        offerings: zones
            .iter()
            .flat_map(|zone| {
                [
                    v1::Offering::priced(zone, "on-demand", price, "USD", true),
                    v1::Offering::priced(zone, "spot", price / 3.0, "USD", true),
                ]
            })
            .collect(),
        capacity: HashMap::from([
            ("cpu".into(), "2".into()),
            ("memory".into(), "7577Mi".into()),
            ("pods".into(), "29".into()),
        ]),
        overhead: Some(v1::Overhead {
            kube_reserved: HashMap::from([("cpu".into(), "70m".into())]),
            system_reserved: HashMap::new(),
            eviction_threshold: HashMap::from([("memory".into(), "100Mi".into())]),
        }),
        burstable_cpu: false,
    }
}

fn seed_catalogue() -> v1::GetInstanceTypesResponse {
    v1::GetInstanceTypesResponse {
        instance_types: vec![
            seed_instance_type("m5.large", &["us-east-1a", "us-east-1b"], 0.096),
            seed_instance_type("c5.xlarge", &["us-east-1a"], 0.17),
        ],
    }
}

fn seed_resolved() -> v1::ResolveNodeClassResponse {
    let status = serde_json::json!({
        "amis": [{"id": "ami-0123", "name": "al2023", "requirements": []}],
        "subnets": [{"id": "subnet-1", "zone": "us-east-1a"}],
        "instanceProfile": "karpenter-profile",
    });
    v1::ResolveNodeClassResponse {
        status: provider_sdk::json::json_to_struct(&status),
        conditions: vec![v1::Condition {
            r#type: "AMIsReady".into(),
            status: v1::ConditionStatus::True.into(),
            reason: "AMIsReady".into(),
            message: String::new(),
        }],
        static_hash: "1234".into(),
        static_hash_version: "rs-v2".into(),
        resolve_again_after: Some(prost_types::Duration {
            seconds: 300,
            nanos: 0,
        }),
    }
}

fn seed_node_claim() -> v1::NodeClaim {
    v1::NodeClaim {
        name: "default-x7k2p".into(),
        labels: HashMap::from([
            ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
            ("topology.kubernetes.io/zone".into(), "us-east-1a".into()),
            ("karpenter.sh/capacity-type".into(), "on-demand".into()),
        ]),
        creation_timestamp: Some(prost_types::Timestamp {
            seconds: 1_767_225_600,
            nanos: 0,
        }),
        status: Some(v1::NodeClaimStatus {
            provider_id: "aws:///us-east-1a/i-0123456789abcdef0".into(),
            image_id: "ami-0123".into(),
            capacity: HashMap::from([("cpu".into(), "2".into()), ("memory".into(), "8Gi".into())]),
            allocatable: HashMap::from([("cpu".into(), "1930m".into())]),
            instance_state: v1::InstanceState::Running.into(),
        }),
        ..v1::NodeClaim::default()
    }
}

fn seed_repair_policies() -> v1::GetRepairPoliciesResponse {
    v1::GetRepairPoliciesResponse {
        policies: vec![v1::RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: v1::ConditionStatus::False.into(),
            toleration_duration: Some(prost_types::Duration {
                seconds: 1800,
                nanos: 0,
            }),
        }],
    }
}

fn seed_interruption() -> v1::InterruptionNotice {
    v1::InterruptionNotice {
        event_id: "e-1".into(),
        kind: v1::InterruptionKind::SpotInterruption.into(),
        provider_id: "aws:///us-east-1a/i-0123456789abcdef0".into(),
        time: Some(prost_types::Timestamp {
            seconds: 1_767_225_600,
            nanos: 0,
        }),
        deadline: Some(prost_types::Timestamp {
            seconds: 1_767_225_720,
            nanos: 0,
        }),
        message: "EC2 Spot Instance Interruption Warning".into(),
    }
}

fn seed_info() -> v1::GetPluginInfoResponse {
    v1::GetPluginInfoResponse {
        name: "karpenter.k8s.aws".into(),
        vendor_version: "0.1.0".into(),
        api_version: "1.0".into(),
        manifest: HashMap::new(),
    }
}

fn seed_vocabulary() -> v1::GetPluginVocabularyResponse {
    v1::GetPluginVocabularyResponse {
        labels: vec![
            v1::LabelDefinition {
                key: "karpenter.k8s.aws/instance-family".into(),
                value_type: v1::LabelValueType::String.into(),
                description: "The instance family".into(),
            },
            v1::LabelDefinition {
                key: "karpenter.k8s.aws/instance-cpu".into(),
                value_type: v1::LabelValueType::Integer.into(),
                description: String::new(),
            },
        ],
        restricted_label_domains: vec!["karpenter.k8s.aws".into()],
    }
}

/// `FUZZ_UPDATE_SEEDS=1` rewrites the seed files from the messages above (the `found-*` files
/// stay); otherwise the files must be what the messages encode to.
#[test]
fn seeds_are_current() {
    let update = std::env::var_os("FUZZ_UPDATE_SEEDS").is_some_and(|v| v == "1");
    for target in targets() {
        let dir = corpus_dir(target.dir);
        for (name, bytes) in (target.seeds)() {
            let path = dir.join(format!("{name}.binpb"));
            if update {
                std::fs::create_dir_all(&dir).expect("the corpus directory");
                std::fs::write(&path, &bytes).expect("a seed file writes");
            } else {
                let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
                    panic!("{}: {e}; run with FUZZ_UPDATE_SEEDS=1", path.display())
                });
                assert!(
                    (target.same)(&on_disk, &bytes),
                    "{} is stale; run with FUZZ_UPDATE_SEEDS=1",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn the_corpus_replays() {
    for target in targets() {
        for (_, bytes) in fuzz::corpus_bytes(&corpus_dir(target.dir)) {
            (target.check)(&bytes);
        }
    }
}

/// Wire-level edits: a byte flipped, bytes inserted or cut, a span repeated (a repeated field
/// or map entry twice).
fn mutated_wire(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let count = seeds.len();
    let edit = (
        any::<usize>(),
        0u8..4,
        proptest::collection::vec(any::<u8>(), 1..6),
        1usize..24,
    );
    (0..count, proptest::collection::vec(edit, 1..4)).prop_map(move |(seed, edits)| {
        let mut bytes = seeds[seed].clone();
        for (at, kind, new, len) in edits {
            let i = at % (bytes.len() + 1);
            let end = (i + len).min(bytes.len());
            match kind {
                0 if i < bytes.len() => bytes[i] ^= new[0] | 1,
                1 => {
                    bytes.splice(i..i, new);
                }
                2 => {
                    bytes.drain(i..end);
                }
                _ => {
                    let span = bytes[i..end].to_vec();
                    bytes.splice(end..end, span);
                }
            }
        }
        bytes
    })
}

#[test]
fn fuzz_wire_mutations() {
    for target in targets() {
        let seeds: Vec<Vec<u8>> = fuzz::corpus_bytes(&corpus_dir(target.dir))
            .into_iter()
            .map(|(_, bytes)| bytes)
            .collect();
        let mut runner = TestRunner::new(fuzz::config(256, file!()));
        runner
            .run(&mutated_wire(seeds), |bytes| {
                (target.check)(&bytes);
                Ok(())
            })
            .unwrap();
    }
}

// ---- Messages built from random and extreme values -------------------------------------------

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(
            &[
                "m5.large", "us-east-1a", "on-demand", "spot", "reserved", "USD", "EUR", "usd",
                "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                "karpenter.sh/capacity-type", "karpenter.k8s.aws/instance-cpu", "cpu", "memory",
                "pods", "nvidia.com/gpu", "2", "1Gi", "-1", "1e400", "8Ei", "Ready", "AMIsReady",
                "aws:///us-east-1a/i-0123", "default-x7k2p", "1.0", "2.0", "karpenter.k8s.aws",
                "karpenter.sh", "kubernetes.io", "k8s.io",
            ][..]
        )
        .prop_map(str::to_owned),
        2 => fuzz::interesting_string(),
    ]
}

fn enum_value() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0i32..8, 1 => Just(-1), 1 => Just(i32::MAX), 1 => Just(i32::MIN)]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => 0.0f64..10.0,
        1 => proptest::sample::select(
            &[
                f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, -1.0, 1e9, 1e9 + 1.0, 1e300,
                f64::MAX, f64::MIN_POSITIVE, 5e-324,
            ][..]
        ),
    ]
}

fn map() -> impl Strategy<Value = HashMap<String, String>> {
    proptest::collection::hash_map(text(), text(), 0..4)
}

fn requirement() -> impl Strategy<Value = v1::Requirement> {
    (
        text(),
        enum_value(),
        proptest::collection::vec(text(), 0..3),
        proptest::option::of(prop_oneof![-1i32..60, Just(i32::MAX), Just(i32::MIN)]),
    )
        .prop_map(|(key, operator, values, min_values)| v1::Requirement {
            key,
            operator,
            values,
            min_values,
        })
}

fn offering() -> impl Strategy<Value = v1::Offering> {
    (
        text(),
        text(),
        proptest::option::of(float()),
        text(),
        enum_value(),
        proptest::collection::vec(requirement(), 0..2),
        proptest::option::of(prop_oneof![-2i32..10, Just(i32::MAX), Just(i32::MIN)]),
    )
        .prop_map(
            |(zone, capacity_type, price, currency, availability, requirements, reservation)| {
                v1::Offering {
                    zone,
                    capacity_type,
                    price,
                    currency,
                    availability,
                    requirements,
                    reservation_capacity: reservation,
                }
            },
        )
}

fn instance_type() -> impl Strategy<Value = v1::InstanceType> {
    (
        text(),
        any::<bool>(),
        proptest::collection::vec(requirement(), 0..3),
        proptest::collection::vec(offering(), 0..4),
        map(),
        proptest::option::of((map(), map(), map())),
        any::<bool>(),
    )
        .prop_map(
            |(
                name,
                own_requirement,
                mut requirements,
                offerings,
                capacity,
                overhead,
                burstable,
            )| {
                // Mostly with the requirement every type must carry, so the checks after it run.
                if own_requirement {
                    requirements.insert(
                        0,
                        v1::Requirement::in_values("node.kubernetes.io/instance-type", [&name]),
                    );
                }
                v1::InstanceType {
                    name,
                    requirements,
                    offerings,
                    capacity,
                    overhead: overhead.map(
                        |(kube_reserved, system_reserved, eviction_threshold)| v1::Overhead {
                            kube_reserved,
                            system_reserved,
                            eviction_threshold,
                        },
                    ),
                    burstable_cpu: burstable,
                }
            },
        )
}

fn duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
    proptest::option::of(
        (
            prop_oneof![
                -2i64..4000,
                Just(i64::MAX),
                Just(i64::MIN),
                Just(315_576_000_001)
            ],
            prop_oneof![
                0i32..2,
                Just(-1),
                Just(999_999_999),
                Just(1_000_000_000),
                Just(i32::MIN)
            ],
        )
            .prop_map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
    )
}

fn timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    proptest::option::of(
        (
            prop_oneof![
                0i64..2_000_000_000,
                Just(i64::MAX),
                Just(i64::MIN),
                Just(-62_135_596_801)
            ],
            prop_oneof![0i32..2, Just(-1), Just(1_000_000_000), Just(i32::MAX)],
        )
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

fn struct_value() -> impl Strategy<Value = Option<prost_types::Struct>> {
    use prost_types::value::Kind;
    let leaf = prop_oneof![
        float().prop_map(Kind::NumberValue),
        text().prop_map(Kind::StringValue),
        any::<bool>().prop_map(Kind::BoolValue),
        Just(Kind::NullValue(0)),
    ]
    .prop_map(|kind| prost_types::Value { kind: Some(kind) });
    let value = leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(|values| prost_types::Value {
                kind: Some(Kind::ListValue(prost_types::ListValue { values })),
            }),
            proptest::collection::btree_map(text(), inner, 0..3).prop_map(|fields| {
                prost_types::Value {
                    kind: Some(Kind::StructValue(prost_types::Struct { fields })),
                }
            }),
        ]
    });
    proptest::option::of(
        proptest::collection::btree_map(
            prop_oneof![text(), Just("conditions".to_owned())],
            value,
            0..4,
        )
        .prop_map(|fields| prost_types::Struct { fields }),
    )
}

fn condition() -> impl Strategy<Value = v1::Condition> {
    (text(), enum_value(), text(), text()).prop_map(|(r#type, status, reason, message)| {
        v1::Condition {
            r#type,
            status,
            reason,
            message,
        }
    })
}

fn node_claim() -> impl Strategy<Value = v1::NodeClaim> {
    (
        prop_oneof![Just("default-x7k2p".to_owned()), text()],
        map(),
        map(),
        timestamp(),
        timestamp(),
        proptest::option::of((text(), text(), map(), map(), enum_value())),
    )
        .prop_map(
            |(name, labels, annotations, created, deleted, status)| v1::NodeClaim {
                name,
                labels,
                annotations,
                creation_timestamp: created,
                deletion_timestamp: deleted,
                status: status.map(|(provider_id, image_id, capacity, allocatable, state)| {
                    v1::NodeClaimStatus {
                        provider_id,
                        image_id,
                        capacity,
                        allocatable,
                        instance_state: state,
                    }
                }),
                ..v1::NodeClaim::default()
            },
        )
}

#[test]
fn fuzz_instance_types() {
    let mut runner = TestRunner::new(fuzz::config(600, file!()));
    runner
        .run(&proptest::collection::vec(instance_type(), 0..4), |types| {
            // A duplicate of the first type, sometimes: a catalogue naming a type twice.
            let mut answer = v1::GetInstanceTypesResponse {
                instance_types: types,
            };
            if answer.instance_types.len() == 3 {
                let first = answer.instance_types[0].clone();
                answer.instance_types.push(first);
            }
            check_catalogue(&answer);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_other_answers() {
    let mut runner = TestRunner::new(fuzz::config(400, file!()));
    let resolved = (
        struct_value(),
        proptest::collection::vec(condition(), 0..3),
        text(),
        duration(),
    );
    runner
        .run(&resolved, |(status, conditions, static_hash, again)| {
            check_resolved(v1::ResolveNodeClassResponse {
                status,
                conditions,
                static_hash,
                static_hash_version: "v".into(),
                resolve_again_after: again,
            });
            Ok(())
        })
        .unwrap();
    runner
        .run(&node_claim(), |claim| {
            check_node_claim(claim);
            Ok(())
        })
        .unwrap();
    let policy = (text(), enum_value(), duration()).prop_map(|(t, s, d)| v1::RepairPolicy {
        condition_type: t,
        condition_status: s,
        toleration_duration: d,
    });
    runner
        .run(&proptest::collection::vec(policy, 0..3), |policies| {
            check_repair_policies(v1::GetRepairPoliciesResponse { policies });
            Ok(())
        })
        .unwrap();
    let notice = (
        text(),
        enum_value(),
        text(),
        timestamp(),
        timestamp(),
        text(),
    )
        .prop_map(|(event_id, kind, provider_id, time, deadline, message)| {
            v1::InterruptionNotice {
                event_id,
                kind,
                provider_id,
                time,
                deadline,
                message,
            }
        });
    runner
        .run(&notice, |notice| {
            check_interruption(notice);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_handshake_answers() {
    let mut runner = TestRunner::new(fuzz::config(400, file!()));
    runner
        .run(
            &(text(), text(), text(), map()),
            |(name, vendor_version, api_version, manifest)| {
                check_info(v1::GetPluginInfoResponse {
                    name,
                    vendor_version,
                    api_version,
                    manifest,
                });
                Ok(())
            },
        )
        .unwrap();
    let label = (text(), enum_value(), text()).prop_map(|(key, value_type, description)| {
        v1::LabelDefinition {
            key,
            value_type,
            description,
        }
    });
    runner
        .run(
            &(
                proptest::collection::vec(label, 0..4),
                proptest::collection::vec(text(), 0..3),
            ),
            |(labels, restricted_label_domains)| {
                check_vocabulary(v1::GetPluginVocabularyResponse {
                    labels,
                    restricted_label_domains,
                });
                Ok(())
            },
        )
        .unwrap();
    let kind = (text(), text(), text()).prop_map(|(group, version, kind)| v1::NodeClassKind {
        group,
        version,
        kind,
    });
    runner
        .run(&proptest::collection::vec(kind, 0..4), |kinds| {
            check_node_classes(&kinds);
            Ok(())
        })
        .unwrap();
}
