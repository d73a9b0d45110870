//! The fuzzing harness the workspace's `tests/fuzz_*.rs` share: the corpus of seed inputs each
//! target keeps under its crate's `tests/fuzz-corpus/<target>/`, the case count (`FUZZ_CASES`
//! overrides the default, for long runs), and proptest strategies that mutate seed documents
//! structurally or make raw strings and JSON values of bounded size, so every case terminates
//! quickly.
//!
//! Fuzzing runs on stable Rust through proptest, as ordinary tests: no fuzzing engine, no
//! nightly. Each target first replays its corpus (the seeds, and every `found-*` input a past
//! run found and the fix answered), then runs the strategies.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Map, Value};

/// The environment variable that overrides every target's case count.
pub const CASES_ENV: &str = "FUZZ_CASES";

/// The case count: `FUZZ_CASES` when set to a number, else `default` (chosen per target so a
/// debug build runs it in seconds).
pub fn cases(default: u32) -> u32 {
    std::env::var(CASES_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// proptest's configuration for a target: [`cases`], and failures persisted next to the test
/// file `source_file` (pass `file!()`: `tests/fuzz_x.proptest-regressions`, replayed first on
/// the next run; the corpus's `found-*` files are the record kept in review).
pub fn config(default_cases: u32, source_file: &'static str) -> Config {
    Config {
        cases: cases(default_cases),
        source_file: Some(source_file),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// A target's corpus directory: `<crate>/tests/fuzz-corpus/<target>`.
pub fn corpus_dir(manifest_dir: &str, target: &str) -> PathBuf {
    Path::new(manifest_dir)
        .join("tests/fuzz-corpus")
        .join(target)
}

/// Every file of a corpus directory as bytes, sorted by name; panics when there is none (a
/// target without seeds fuzzes nothing useful).
pub fn corpus_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<(String, Vec<u8>)> = entries
        .map(|entry| entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
        .filter(|entry| entry.path().is_file())
        .map(|entry| {
            let path = entry.path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus files", dir.display());
    files
}

/// Every file of a corpus directory as text (lossily: a corpus file may be invalid UTF-8 on
/// purpose, and the text targets read strings).
pub fn corpus_text(dir: &Path) -> Vec<(String, String)> {
    corpus_bytes(dir)
        .into_iter()
        .map(|(name, bytes)| (name, String::from_utf8_lossy(&bytes).into_owned()))
        .collect()
}

/// The corpus files that are seeds (not `found-*`), parsed as YAML or JSON: the documents the
/// mutations start from. A seed that does not parse is a broken corpus, and panics.
pub fn seed_documents(files: &[(String, String)]) -> Vec<Value> {
    let seeds: Vec<Value> = files
        .iter()
        .filter(|(name, _)| !name.starts_with("found-"))
        .map(|(name, text)| {
            serde_yaml::from_str::<Value>(text).unwrap_or_else(|e| panic!("seed {name}: {e}"))
        })
        .collect();
    assert!(!seeds.is_empty(), "no seed documents");
    seeds
}

/// Strings that tend to break parsers and validators: empty, blanks, signs, huge and negative
/// numbers, exponents, NaN and infinity, percentages, unit suffixes, cron fields, label-key
/// shapes, control and non-ASCII characters, and a long one.
pub fn interesting_string() -> impl Strategy<Value = String> {
    const FIXED: &[&str] = &[
        "",
        " ",
        "0",
        "-0",
        "-1",
        "1",
        "+1",
        "00",
        "1.5",
        ".5",
        "5.",
        "1e3",
        "1e309",
        "1E-400",
        "1e2147483648",
        "-1e2147483647",
        "NaN",
        "inf",
        "-Infinity",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "18446744073709551616",
        "340282366920938463463374607431768211456",
        "99999999999999999999999999999999999999999999",
        "0.000000000000000000000000000000000000001",
        "100%",
        "101%",
        "-1%",
        "%",
        "10%%",
        "1Ki",
        "1Ei",
        "8Ei",
        "1m",
        "1n",
        "1u",
        "1k",
        "1E",
        "1e",
        "1Mi ",
        "Never",
        "0s",
        "-1s",
        "1h30m",
        "1d",
        "2562047h47m16.854775808s",
        "9999999999h",
        "*",
        "*/0",
        "*/1",
        "0-59/100",
        "59-0",
        "1-2-3",
        "a/b/c",
        "@daily",
        "@every 1h",
        "60 * * * *",
        "* * * * * *",
        "sun-sat",
        "4294967296",
        "karpenter.sh/nodepool",
        "kubernetes.io/hostname",
        "node.kubernetes.io/instance-type",
        "karpenter.k8s.aws/instance-cpu",
        "example.com/",
        "/key",
        "a/b/c",
        "-a",
        "a-",
        "UPPER",
        "In",
        "Gt",
        "Exists",
        "NoSchedule",
        "al2023@latest",
        "al2023@",
        "@v1",
        "ami-",
        "subnet-",
        "sg-",
        "aws:///us-east-1a/i-0123",
        "aws:///",
        "us-east-1",
        "us-east-1a",
        "2026-01-01T00:00:00Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "true",
        "null",
        "~",
        "\u{0}",
        "\t\n",
        "é",
        "日本",
        "\u{202e}",
        "😀",
        "a\u{0}b",
    ];
    prop_oneof![
        4 => proptest::sample::select(FIXED).prop_map(str::to_owned),
        2 => "[a-z0-9./%*@: -]{0,24}",
        1 => any::<String>().prop_map(|s| s.chars().take(40).collect()),
        1 => (proptest::sample::select(&["a", "9", "-", ".", "/"][..]), 60usize..320)
            .prop_map(|(c, n)| c.repeat(n)),
    ]
}

/// A JSON number: small and huge integers of both signs, and fractions, including ones only
/// `f64` holds.
pub fn interesting_number() -> impl Strategy<Value = Value> {
    const EXTREMES: &[i64] = &[
        i64::MIN,
        i64::MAX,
        i32::MIN as i64,
        i32::MAX as i64,
        u32::MAX as i64,
        -1,
        0,
    ];
    prop_oneof![
        (-3i64..300).prop_map(Value::from),
        proptest::sample::select(EXTREMES).prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        proptest::sample::select(
            &[
                0.5,
                -0.5,
                1e300,
                -1e300,
                1e-300,
                2.5e15,
                9.007_199_254_740_993e15
            ][..]
        )
        .prop_map(Value::from),
    ]
}

/// An arbitrary JSON value of bounded depth and size.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        interesting_number(),
        interesting_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((interesting_string(), inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// One structural edit of a document, at a node picked by `at` among all its nodes.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Replace the node with another value (another type, a random string or number, ...).
    Replace {
        /// Which node.
        at: usize,
        /// The new value.
        with: Value,
    },
    /// Remove one key of a mapping (or one item of a list).
    Drop {
        /// Which node.
        at: usize,
        /// Which key or item.
        which: usize,
    },
    /// Repeat one item of a list (or copy one key's value under a new key).
    Duplicate {
        /// Which node.
        at: usize,
        /// Which item.
        which: usize,
        /// How many copies.
        copies: usize,
    },
    /// Add a key to a mapping (or an item to a list).
    Insert {
        /// Which node.
        at: usize,
        /// The key.
        key: String,
        /// Its value.
        value: Value,
    },
    /// Edit a string in place: cut it, or add to it.
    EditString {
        /// Which node.
        at: usize,
        /// Where in the string.
        position: usize,
        /// What to insert there (nothing: cut the rest).
        insert: String,
    },
    /// Empty a mapping or list.
    Clear {
        /// Which node.
        at: usize,
    },
    /// Swap a number for a nearby or extreme one.
    Number {
        /// Which node.
        at: usize,
        /// The number.
        with: Value,
    },
}

/// A short sequence of [`Mutation`]s.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let at = any::<usize>();
    let mutation = prop_oneof![
        3 => (at, json_value()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        2 => (at, any::<usize>()).prop_map(|(at, which)| Mutation::Drop { at, which }),
        1 => (at, any::<usize>(), 1usize..4)
            .prop_map(|(at, which, copies)| Mutation::Duplicate { at, which, copies }),
        1 => (at, interesting_string(), json_value())
            .prop_map(|(at, key, value)| Mutation::Insert { at, key, value }),
        3 => (at, any::<usize>(), interesting_string())
            .prop_map(|(at, position, insert)| Mutation::EditString { at, position, insert }),
        1 => at.prop_map(|at| Mutation::Clear { at }),
        2 => (at, interesting_number()).prop_map(|(at, with)| Mutation::Number { at, with }),
    ];
    proptest::collection::vec(mutation, 1..5)
}

/// A seed picked from `seeds` with [`mutations`] applied: the structure-aware inputs.
pub fn mutated(seeds: Vec<Value>) -> impl Strategy<Value = Value> {
    let count = seeds.len();
    (0..count, mutations()).prop_map(move |(seed, edits)| {
        let mut document = seeds[seed].clone();
        for edit in &edits {
            apply(&mut document, edit);
        }
        document
    })
}

/// How many nodes `value` has (itself included).
fn node_count(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(node_count).sum(),
        Value::Object(map) => map.values().map(node_count).sum(),
        _ => 0,
    }
}

/// The `n`th node of `value` in pre-order.
fn nth_node(value: &mut Value, n: usize) -> Option<&mut Value> {
    if n == 0 {
        return Some(value);
    }
    let mut rest = n - 1;
    let children: Vec<&mut Value> = match value {
        Value::Array(items) => items.iter_mut().collect(),
        Value::Object(map) => map.values_mut().collect(),
        _ => return None,
    };
    for child in children {
        let size = node_count(child);
        if rest < size {
            return nth_node(child, rest);
        }
        rest -= size;
    }
    None
}

/// Applies one mutation to `document`.
pub fn apply(document: &mut Value, mutation: &Mutation) {
    let nodes = node_count(document);
    let pick = |at: usize| at % nodes;
    match mutation {
        Mutation::Replace { at, with } => {
            if let Some(node) = nth_node(document, pick(*at)) {
                *node = with.clone();
            }
        }
        Mutation::Number { at, with } => {
            if let Some(node) = nth_node(document, pick(*at)) {
                *node = with.clone();
            }
        }
        Mutation::Drop { at, which } => match nth_node(document, pick(*at)) {
            Some(Value::Object(map)) if !map.is_empty() => {
                if let Some(key) = map.keys().nth(which % map.len()).cloned() {
                    map.remove(&key);
                }
            }
            Some(Value::Array(items)) if !items.is_empty() => {
                items.remove(which % items.len());
            }
            _ => {}
        },
        Mutation::Duplicate { at, which, copies } => match nth_node(document, pick(*at)) {
            Some(Value::Array(items)) if !items.is_empty() => {
                let item = items[which % items.len()].clone();
                for _ in 0..*copies {
                    items.push(item.clone());
                }
            }
            Some(Value::Object(map)) if !map.is_empty() => {
                if let Some((key, value)) = map.iter().nth(which % map.len()) {
                    let (key, value) = (format!("{key}2"), value.clone());
                    map.insert(key, value);
                }
            }
            _ => {}
        },
        Mutation::Insert { at, key, value } => match nth_node(document, pick(*at)) {
            Some(Value::Object(map)) => {
                map.insert(key.clone(), value.clone());
            }
            Some(Value::Array(items)) => items.push(value.clone()),
            _ => {}
        },
        Mutation::EditString {
            at,
            position,
            insert,
        } => {
            if let Some(Value::String(text)) = nth_node(document, pick(*at)) {
                let chars: Vec<char> = text.chars().collect();
                let cut = position % (chars.len() + 1);
                let mut edited: String = chars[..cut].iter().collect();
                if !insert.is_empty() {
                    edited.push_str(insert);
                    edited.extend(&chars[cut..]);
                }
                *text = edited;
            }
        }
        Mutation::Clear { at } => match nth_node(document, pick(*at)) {
            Some(Value::Object(map)) => *map = Map::new(),
            Some(Value::Array(items)) => items.clear(),
            _ => {}
        },
    }
}

/// Runs `check` on [`config`]'s number of structural mutations of `seeds` ([`mutated`]);
/// panics with proptest's minimal failing input when `check` panics on one.
pub fn run_documents(
    seeds: Vec<Value>,
    default_cases: u32,
    source_file: &'static str,
    check: impl Fn(&Value),
) {
    let mut runner = proptest::test_runner::TestRunner::new(config(default_cases, source_file));
    if let Err(failure) = runner.run(&mutated(seeds), |document| {
        check(&document);
        Ok(())
    }) {
        panic!("{failure}");
    }
}

/// Runs `check` on [`config`]'s number of character-level mutations of `seeds`
/// ([`mutated_text`]); panics with proptest's minimal failing input when `check` panics on one.
pub fn run_text(
    seeds: Vec<String>,
    default_cases: u32,
    source_file: &'static str,
    check: impl Fn(&str),
) {
    let mut runner = proptest::test_runner::TestRunner::new(config(default_cases, source_file));
    if let Err(failure) = runner.run(&mutated_text(seeds), |text| {
        check(&text);
        Ok(())
    }) {
        panic!("{failure}");
    }
}

/// Raw text: a seed's text edited at the character level (a span cut, a string spliced in, a
/// line repeated), or a string of arbitrary characters.
pub fn mutated_text(seeds: Vec<String>) -> impl Strategy<Value = String> {
    let count = seeds.len();
    let edit = (
        any::<usize>(),
        0usize..64,
        interesting_string(),
        any::<bool>(),
    );
    prop_oneof![
        3 => (0..count, proptest::collection::vec(edit, 1..4)).prop_map(move |(seed, edits)| {
            let mut chars: Vec<char> = seeds[seed].chars().collect();
            for (position, cut, insert, repeat_line) in edits {
                let at = position % (chars.len() + 1);
                if repeat_line {
                    // The line around `at`, repeated: duplicate keys, duplicate list items.
                    let start = chars[..at].iter().rposition(|c| *c == '\n').map_or(0, |i| i + 1);
                    let end = chars[at..].iter().position(|c| *c == '\n').map_or(chars.len(), |i| at + i + 1);
                    let line: Vec<char> = chars[start..end].to_vec();
                    chars.splice(end..end, line);
                } else {
                    let end = (at + cut).min(chars.len());
                    chars.splice(at..end, insert.chars());
                }
            }
            chars.into_iter().collect()
        }),
        1 => any::<String>().prop_map(|s| s.chars().take(400).collect()),
        1 => proptest::collection::vec(
            proptest::sample::select(&["a", ":", " ", "\n", "-", "[", "]", "{", "}", "&x", "*x", "<<", "!!", "'", "\"", "#", "|", ">", "?", ","][..]),
            0..80,
        ).prop_map(|parts| parts.concat()),
    ]
}
