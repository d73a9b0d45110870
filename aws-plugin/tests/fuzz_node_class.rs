//! Fuzzing the EC2NodeClass JSON the plugin reads in every request (`parse_node_class`: the
//! types, then the CRD's rules). Properties: no panic, and every refusal names the field (a
//! JSON path that is whole, not cut inside a map key, and the path of the first broken rule
//! when a rule is what refuses it); what is accepted validates, hashes and round-trips.
//!
//! It replays `tests/fuzz-corpus/ec2nodeclass/` first, then mutates the seeds and tries raw
//! text. `FUZZ_CASES=100000 cargo test -p aws-plugin --test fuzz_node_class` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use aws_plugin::apis::EC2NodeClass;
use aws_plugin::node_class::hash::static_hash;
use aws_plugin::node_class::parse_node_class;
use karpenter_api::testing::fuzz;
use serde_json::Value;

const ROOTS: [&str; 6] = ["(root)", "spec", "metadata", "status", "apiVersion", "kind"];

/// A path is whole: it starts at a top-level field and its brackets and quotes close.
fn assert_whole_path(field: &str, shown: &str) {
    let root = field.split(['.', '[']).next().unwrap_or_default();
    assert!(ROOTS.contains(&root), "{field:?} is not a field: {shown}");
    let mut depth = 0i32;
    let mut quoted = false;
    let mut escaped = false;
    for c in field.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '[' if !quoted => depth += 1,
            ']' if !quoted => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "{field:?} is cut: {shown}");
    }
    assert!(depth == 0 && !quoted, "{field:?} is cut: {shown}");
}

fn check(value: &Value) {
    match parse_node_class(value) {
        Err(error) => {
            let shown = error.to_string();
            assert!(!error.message.is_empty(), "no message: {shown}");
            assert!(
                shown.starts_with(&format!("node_class: {}: ", error.field)),
                "{shown}"
            );
            assert_whole_path(&error.field, &shown);
            // A rule refused it: the field is the first broken rule's path.
            let mut object = value.clone();
            if let Some(map) = object.as_object_mut() {
                map.entry("apiVersion")
                    .or_insert("karpenter.k8s.aws/v1".into());
                map.entry("kind").or_insert("EC2NodeClass".into());
                map.entry("metadata").or_insert(serde_json::json!({}));
            }
            if let Ok(class) = serde_json::from_value::<EC2NodeClass>(object)
                && let Err(errors) = class.validate()
            {
                assert_eq!(error.field, errors[0].path.as_str(), "{shown}");
            }
        }
        Ok(class) => {
            assert!(class.validate().is_ok());
            let _ = class.warnings();
            let hash = static_hash(&class);
            let json = serde_json::to_value(&class).expect("a node class serializes");
            let again = parse_node_class(&json).expect("an accepted node class reads back");
            assert_eq!(static_hash(&again), hash);
        }
    }
}

fn corpus() -> Vec<(String, String)> {
    fuzz::corpus_text(&fuzz::corpus_dir(
        env!("CARGO_MANIFEST_DIR"),
        "ec2nodeclass",
    ))
}

#[test]
fn the_corpus_replays() {
    for (name, text) in corpus() {
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        check(&value);
        if !name.starts_with("found-") {
            assert!(parse_node_class(&value).is_ok(), "seed {name}");
        }
    }
}

#[test]
fn fuzz_node_class_documents() {
    fuzz::run_documents(fuzz::seed_documents(&corpus()), 512, file!(), check);
}

#[test]
fn fuzz_node_class_text() {
    let texts = corpus().into_iter().map(|(_, text)| text).collect();
    fuzz::run_text(texts, 256, file!(), |text| {
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            check(&value);
        }
    });
}
