//! Fuzzing the karpenter.sh CRD validation: NodePool and NodeClaim JSON read as the API types
//! and checked by `validate` / `validate_update`, and requirement lists by
//! `check_requirements`. Properties: nothing panics, and every refusal names its field (a
//! deserialization error its JSON path, a validation error a path under `spec`).
//!
//! Each target replays `tests/fuzz-corpus/<target>/` first, then mutates its seeds and tries
//! raw text. `FUZZ_CASES=100000 cargo test -p karpenter-api --test fuzz_validation` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use karpenter_api::labels::LabelValueType;
use karpenter_api::requirement::check_requirements;
use karpenter_api::testing::fuzz;
use karpenter_api::{
    Errors, FieldPath, LabelPolicy, NodeClaim, NodePool, NodeSelectorRequirementWithMinValues,
    Operator, ValidationError, labels::KeyUse,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde::de::DeserializeOwned;
use serde_json::Value;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The policies objects are checked under: core's alone, and core's plus a provider's
/// vocabulary with an integer label (so the typed-value rules run too).
fn policies() -> [LabelPolicy; 2] {
    [
        LabelPolicy::core(),
        LabelPolicy::with_vocabulary(
            ["karpenter.k8s.aws"],
            [
                ("karpenter.k8s.aws/instance-cpu", LabelValueType::Integer),
                ("karpenter.k8s.aws/instance-family", LabelValueType::String),
            ],
        ),
    ]
}

/// A deserialization refusal names its field: a JSON path, or, at the root, the field that is
/// missing (a document that is not an object, or not the list asked for, is refused as a
/// whole).
fn read<T: DeserializeOwned>(value: &Value) -> Option<T> {
    let object_expected = std::any::type_name::<T>().ends_with("NodePool")
        || std::any::type_name::<T>().ends_with("NodeClaim");
    match serde_path_to_error::deserialize::<_, T>(value.clone()) {
        Ok(typed) => Some(typed),
        Err(error) => {
            let path = error.path().to_string();
            let message = error.inner().to_string();
            assert!(!message.is_empty(), "an empty error at {path}");
            assert!(
                path != "." || !object_expected || !value.is_object() || message.contains("field"),
                "a refusal at the root that names no field: {message}"
            );
            None
        }
    }
}

/// Every error and warning names a field under `spec`, and prints it first.
fn assert_paths(errors: &[ValidationError], what: &str) {
    for error in errors {
        let path = error.path.as_str();
        assert!(
            path == "spec" || path.starts_with("spec.") || path.starts_with("spec["),
            "{what}: {error} names no field under spec"
        );
        let shown = error.to_string();
        assert!(
            shown.starts_with(path) && shown.len() > path.len() + 2,
            "{what}: {shown:?} does not say the path and the rule"
        );
    }
}

fn check_nodepool(value: &Value, old: &NodePool) {
    let Some(pool) = read::<NodePool>(value) else {
        return;
    };
    for policy in policies() {
        let (errors, warnings) = pool.errors_and_warnings(&policy);
        assert_paths(&errors, "errors");
        assert_paths(&warnings, "warnings");
        assert_eq!(pool.validate(&policy).err().unwrap_or_default(), errors);
        if let Err(errors) = pool.validate_update(old, &policy) {
            assert_paths(&errors, "update errors");
        }
        if errors.is_empty() {
            // What validates survives the trip through JSON unchanged.
            let json = serde_json::to_value(&pool).expect("a NodePool serializes");
            let again: NodePool = serde_json::from_value(json).expect("a NodePool reads back");
            assert_eq!(again, pool);
        }
    }
    // The hash every NodeClaim is stamped with is total.
    let _ = pool.static_hash();
}

fn check_nodeclaim(value: &Value, old: &NodeClaim) {
    let Some(claim) = read::<NodeClaim>(value) else {
        return;
    };
    for policy in policies() {
        if let Err(errors) = claim.validate(&policy) {
            assert!(!errors.is_empty());
            assert_paths(&errors, "errors");
        }
        if let Err(errors) = claim.validate_update(old, &policy) {
            assert_paths(&errors, "update errors");
        }
    }
}

struct Target {
    files: Vec<(String, String)>,
    seeds: Vec<Value>,
}

impl Target {
    fn load(name: &str) -> Self {
        let files = fuzz::corpus_text(&fuzz::corpus_dir(DIR, name));
        let seeds = fuzz::seed_documents(&files);
        Self { files, seeds }
    }

    /// Every corpus file as JSON (a `found-*` file that is not JSON is raw text to parse).
    fn replay(&self, check: impl Fn(&Value)) {
        for (name, text) in &self.files {
            match serde_json::from_str::<Value>(text) {
                Ok(value) => check(&value),
                Err(_) => assert!(name.starts_with("found-"), "seed {name} is not JSON"),
            }
        }
    }

    fn texts(&self) -> Vec<String> {
        self.files.iter().map(|(_, text)| text.clone()).collect()
    }
}

/// Replays the corpus of `target`, then mutates its seeds as documents and as text, checking
/// each with `check` against the first seed as the object's old version.
fn fuzz_object<K: serde::de::DeserializeOwned>(target: &str, check: fn(&Value, &K)) {
    let target = Target::load(target);
    let old: K = serde_json::from_value(target.seeds[0].clone()).expect("seed 0 reads");
    target.replay(|value| check(value, &old));
    let mut runner = TestRunner::new(fuzz::config(512, file!()));
    runner
        .run(&fuzz::mutated(target.seeds.clone()), |value| {
            check(&value, &old);
            Ok(())
        })
        .unwrap();
    let mut runner = TestRunner::new(fuzz::config(128, file!()));
    runner
        .run(&fuzz::mutated_text(target.texts()), |text| {
            if let Ok(value) = serde_json::from_str::<Value>(&text) {
                check(&value, &old);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_nodepool() {
    fuzz_object::<NodePool>("nodepool", check_nodepool);
}

#[test]
fn fuzz_nodeclaim() {
    fuzz_object::<NodeClaim>("nodeclaim", check_nodeclaim);
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        fuzz::interesting_string(),
        proptest::sample::select(
            &[
                "node.kubernetes.io/instance-type",
                "karpenter.sh/capacity-type",
                "karpenter.sh/nodepool",
                "karpenter.k8s.aws/instance-cpu",
                "karpenter.k8s.aws/instance-family",
                "topology.kubernetes.io/zone",
                "kubernetes.io/arch",
                "example.com/team",
                "team",
            ][..]
        )
        .prop_map(str::to_owned),
    ]
}

fn requirement() -> impl Strategy<Value = NodeSelectorRequirementWithMinValues> {
    (
        key(),
        proptest::sample::select(&Operator::ALL[..]),
        proptest::collection::vec(fuzz::interesting_string(), 0..4),
        proptest::option::of(prop_oneof![
            -2i64..60,
            Just(i64::MIN),
            Just(i64::MAX),
            Just(i64::from(u32::MAX) + 1)
        ]),
    )
        .prop_map(
            |(key, operator, values, min_values)| NodeSelectorRequirementWithMinValues {
                key,
                operator,
                values,
                min_values,
            },
        )
}

fn check_requirement_list(requirements: &[NodeSelectorRequirementWithMinValues]) {
    for policy in policies() {
        for key_use in [KeyUse::NodePool, KeyUse::NodeClaim] {
            let mut errors = Errors::default();
            let path = FieldPath::root("spec").field("requirements");
            check_requirements(&mut errors, &path, requirements, key_use, &policy);
            let (errors, warnings) = errors.into_parts();
            for error in errors.iter().chain(&warnings) {
                assert!(
                    error.path.as_str().starts_with("spec.requirements"),
                    "{error} names no requirement field"
                );
            }
        }
    }
}

#[test]
fn fuzz_requirements() {
    let files = fuzz::corpus_text(&fuzz::corpus_dir(DIR, "requirements"));
    for (name, text) in &files {
        let requirements: Vec<NodeSelectorRequirementWithMinValues> =
            match serde_json::from_str(text) {
                Ok(requirements) => requirements,
                Err(e) => {
                    assert!(name.starts_with("found-"), "seed {name}: {e}");
                    continue;
                }
            };
        check_requirement_list(&requirements);
    }
    let mut runner = TestRunner::new(fuzz::config(1000, file!()));
    runner
        .run(&proptest::collection::vec(requirement(), 0..8), |list| {
            check_requirement_list(&list);
            Ok(())
        })
        .unwrap();
    // Requirement lists as JSON: the operator and minValues deserializers on arbitrary input.
    let seeds = fuzz::seed_documents(&files);
    let mut runner = TestRunner::new(fuzz::config(512, file!()));
    runner
        .run(&fuzz::mutated(seeds), |value| {
            if let Some(list) = read::<Vec<NodeSelectorRequirementWithMinValues>>(&value) {
                check_requirement_list(&list);
            }
            Ok(())
        })
        .unwrap();
}
