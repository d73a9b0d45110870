//! Fuzzing the scenario parser, `simulator::scenario::parse`. Properties: it never panics, it
//! ends (inputs are a few kilobytes), and every refusal names a field: a path into the
//! scenario (`events[2].scale.replicas`), a YAML position, or `(document)`.
//!
//! It replays `tests/fuzz-corpus/scenario/` first (the shipped scenarios, and every `found-*`
//! input a past run found), then mutates the seeds as YAML documents and as text, and tries
//! arbitrary text. `FUZZ_CASES=100000 cargo test -p simulator --test fuzz_scenario` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use karpenter_api::testing::fuzz;
use simulator::scenario::{ScenarioError, parse};

/// The scenario's top-level keys: every path into the scenario starts with one.
const SECTIONS: [&str; 8] = [
    "name", "seed", "start", "duration", "options", "cloud", "objects", "events",
];

fn assert_names_a_field(error: &ScenarioError, input: &str) {
    let field = error.field.as_str();
    assert!(!field.is_empty(), "no field: {error}\n--- input:\n{input}");
    assert!(
        !error.message.is_empty(),
        "no message: {error}\n--- input:\n{input}"
    );
    let section = field
        .split(['.', '['])
        .next()
        .expect("split yields at least one part");
    let named = field == "(document)"
        || field.starts_with("(line ")
        || SECTIONS.contains(&section)
        // A key nobody reads is named as written, whatever it is.
        || error.message.starts_with("unknown field");
    assert!(
        named,
        "{field:?} is not a field of the scenario: {error}\n--- input:\n{input}"
    );
    assert!(
        error.to_string().starts_with(field),
        "the message does not start with the field: {error}"
    );
}

fn check(input: &str) {
    if let Err(error) = parse(input) {
        assert_names_a_field(&error, input);
    }
}

fn corpus() -> Vec<(String, String)> {
    fuzz::corpus_text(&fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), "scenario"))
}

#[test]
fn the_corpus_replays() {
    for (name, text) in corpus() {
        let result = parse(&text);
        if let Err(error) = &result {
            assert_names_a_field(error, &text);
        }
        // The seeds are the shipped scenarios: they must stay valid, or they seed nothing.
        if !name.starts_with("found-") {
            assert!(result.is_ok(), "seed {name}: {result:?}");
        }
    }
}

#[test]
fn fuzz_scenario_documents() {
    fuzz::run_documents(fuzz::seed_documents(&corpus()), 400, file!(), |document| {
        check(&serde_yaml::to_string(document).expect("JSON renders as YAML"));
    });
}

#[test]
fn fuzz_scenario_text() {
    let texts = corpus().into_iter().map(|(_, text)| text).collect();
    fuzz::run_text(texts, 400, file!(), check);
}
