//! Fuzzing the domain's parsers: Kubernetes quantities (`Quantity::parse`) and requirements in
//! the API's form (`Requirements::from_node_selector_requirements`, then the algebra on what
//! parses). Properties: nothing panics, every case ends quickly, a refused quantity is named in
//! its error and a refused requirement names its key, and what parses prints back to itself.
//!
//! (core-domain depends on nothing, so it cannot use karpenter-api's fuzzing harness; the few
//! helpers it needs are here.) `FUZZ_CASES=100000 cargo test -p core-domain --test
//! fuzz_parsing` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::Path;

use core_domain::quantity::Quantity;
use core_domain::requirements::{
    AllowUndefined, NodeSelectorRequirement, Operator, RequirementError, Requirements,
};
use core_domain::resources::ResourceList;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};

fn config(default_cases: u32) -> Config {
    Config {
        cases: std::env::var("FUZZ_CASES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default_cases),
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// Every file of `tests/fuzz-corpus/<target>/`, sorted by name, as text; one file is one input
/// (a single trailing newline is not part of it).
fn corpus(target: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-corpus")
        .join(target);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let text = text.strip_suffix('\n').map(str::to_owned).unwrap_or(text);
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            (name, text)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus", dir.display());
    files
}

/// Quantity-shaped text: digits, signs, points, suffix letters and exponents, in any order, so
/// most cases reach the suffix and exponent rules.
fn quantity_text() -> impl Strategy<Value = String> {
    let part = proptest::sample::select(
        &[
            "0",
            "1",
            "9",
            "12",
            "999999999999999999999",
            "-",
            "+",
            ".",
            "e",
            "E",
            "i",
            "n",
            "u",
            "m",
            "k",
            "K",
            "M",
            "G",
            "T",
            "P",
            "Ki",
            "Mi",
            "Gi",
            "Ei",
            "e3",
            "e-3",
            "e+9",
            "e2147483647",
            "e-2147483648",
            "e9999999999",
            " ",
            "x",
            "%",
        ][..],
    );
    prop_oneof![
        4 => proptest::collection::vec(part, 0..8).prop_map(|parts| parts.concat()),
        1 => "[0-9.eEinumkKMGTP+-]{0,30}",
        1 => any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
}

fn check_quantity(text: &str) {
    match Quantity::parse(text) {
        Ok(quantity) => {
            // What parses prints as a quantity that parses to the same value.
            let shown = quantity.to_string();
            let again = Quantity::parse(&shown)
                .unwrap_or_else(|e| panic!("{text:?} printed as {shown:?}, which fails: {e}"));
            assert_eq!(again, quantity, "{text:?} printed as {shown:?}");
            let _ = quantity.saturating_add(quantity).saturating_sub(-quantity);
            let _ = ResourceList::from_quantities([("cpu", quantity), ("memory", quantity)]);
            let _ = ResourceList::from_quantities([("example.com/gpu", quantity)]);
        }
        Err(error) => {
            let shown = error.to_string();
            assert!(
                shown.starts_with("invalid quantity \""),
                "{shown:?} does not name the quantity"
            );
            let echoed = error.input();
            assert!(
                text.starts_with(echoed.trim_end_matches('…')),
                "{shown:?} echoes {echoed:?}, not the input {text:?}"
            );
        }
    }
}

#[test]
fn fuzz_quantity() {
    for (_, text) in corpus("quantity") {
        check_quantity(&text);
    }
    let mut runner = TestRunner::new(config(1000));
    runner
        .run(&quantity_text(), |text| {
            check_quantity(&text);
            Ok(())
        })
        .unwrap();
}

fn requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    let value = prop_oneof![
        proptest::sample::select(
            &[
                "",
                "0",
                "1",
                "-1",
                "+1",
                "007",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "a",
                "m5.large",
                "1.5",
                " 1",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-z0-9.-]{0,8}",
    ];
    (
        proptest::sample::select(&["a", "b", "karpenter.sh/capacity-type", "", "x/y"][..]),
        proptest::sample::select(&Operator::ALL[..]),
        proptest::collection::vec(value, 0..4),
        proptest::option::of(prop_oneof![0u32..5, Just(u32::MAX)]),
    )
        .prop_map(
            |(key, operator, values, min_values)| NodeSelectorRequirement {
                key: key.to_owned(),
                operator,
                values,
                min_values,
            },
        )
}

fn assert_names_key(error: &RequirementError, requirements: &[NodeSelectorRequirement]) {
    let shown = error.to_string();
    let named = match error {
        RequirementError::UnknownOperator { operator } => shown.contains(operator.as_str()),
        _ => requirements
            .iter()
            .any(|r| shown.starts_with(&format!("key {} ", r.key))),
    };
    assert!(named, "{shown:?} names no requirement's key");
}

fn check_requirements(a: &[NodeSelectorRequirement], b: &[NodeSelectorRequirement]) {
    let parsed = |list: &[NodeSelectorRequirement]| {
        match Requirements::from_node_selector_requirements(list) {
            Ok(requirements) => Some(requirements),
            Err(error) => {
                assert_names_key(&error, list);
                None
            }
        }
    };
    let (Some(left), Some(right)) = (parsed(a), parsed(b)) else {
        return;
    };
    // The algebra is total on whatever parses.
    let _ = left.intersects(&right);
    let _ = left.is_intersecting(&right);
    let _ = left.compatible(&right, AllowUndefined::NoKeys);
    let policy = core_domain::labels::LabelPolicy::core();
    let _ = left.is_compatible(&right, AllowUndefined::WellKnownLabels(&policy));
    let mut both = left.clone();
    both.add_all(&right);
    for requirement in both.iter() {
        let _ = requirement.any_value();
        let _ = requirement.to_string();
        let _ = requirement.len();
    }
    let _ = both.satisfies_min_values([&left, &right]);
    // What parses goes back to the API's form and parses again to the same requirements; but
    // an intersection may keep a minValues above its values' count (`NotIn [] minValues 3`
    // with `In [x]`), which the scheduler's minValues check refuses before anything is written.
    match Requirements::from_node_selector_requirements(&left.to_node_selector_requirements()) {
        Ok(again) => assert_eq!(again, left),
        Err(error) => assert!(
            matches!(error, RequirementError::TooFewValuesForMinValues { .. }),
            "{left:?} in the API's form does not parse: {error}"
        ),
    }
}

#[test]
fn fuzz_requirements() {
    for (name, text) in corpus("requirements") {
        // A corpus file: one requirement per line, `key operator value,value [minValues]`.
        let list: Vec<NodeSelectorRequirement> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let mut words = line.split(' ');
                let key = words.next().unwrap_or_default().to_owned();
                let operator = words
                    .next()
                    .and_then(|op| op.parse().ok())
                    .unwrap_or_else(|| panic!("{name}: {line:?}: no operator"));
                let values = words
                    .next()
                    .filter(|v| !v.is_empty())
                    .map(|v| v.split(',').map(str::to_owned).collect())
                    .unwrap_or_default();
                let min_values = words.next().and_then(|m| m.parse().ok());
                NodeSelectorRequirement {
                    key,
                    operator,
                    values,
                    min_values,
                }
            })
            .collect();
        check_requirements(&list, &list);
    }
    let list = || proptest::collection::vec(requirement(), 0..5);
    let mut runner = TestRunner::new(config(1000));
    runner
        .run(&(list(), list()), |(a, b)| {
            check_requirements(&a, &b);
            Ok(())
        })
        .unwrap();
}
