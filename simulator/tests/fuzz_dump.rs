//! Fuzzing the dump reader, `simulator::dump::build` (`simulate --from-dump`). Properties: it
//! never panics, it ends (inputs are a few kilobytes), every refusal names the file and, for
//! an object, the object and the field; and every scenario it builds is one
//! `simulator::scenario::parse` accepts.
//!
//! It replays `tests/fuzz-corpus/dump/` first (the kubectl dump fixture, a dump of node classes
//! without status and pods without their controllers, and every `found-*` input a past run
//! found), then mutates the seeds as documents and as text. `FUZZ_CASES=100000 cargo test -p
//! simulator --test fuzz_dump` runs long.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a panic is a failed assertion"
)]

use karpenter_api::testing::fuzz;
use simulator::dump::{DumpError, DumpOptions, Source, build, to_yaml};

const FILE: &str = "dump.yaml";

fn check(input: &str) {
    let sources = [Source {
        name: FILE.to_owned(),
        text: input.to_owned(),
    }];
    match build(&sources, &DumpOptions::default()) {
        Ok(built) => {
            let text = to_yaml(&built);
            if let Err(error) = simulator::scenario::parse(&text) {
                panic!(
                    "built a scenario that does not parse: {error}\n--- input:\n{input}\n--- scenario:\n{text}"
                );
            }
        }
        Err(error) => {
            let named = match &error {
                DumpError::Read { file, message } => file == FILE && !message.is_empty(),
                DumpError::Document {
                    file,
                    place,
                    message,
                } => file == FILE && !place.is_empty() && !message.is_empty(),
                DumpError::Object {
                    file,
                    object,
                    field,
                    message,
                } => file == FILE && !object.is_empty() && !field.is_empty() && !message.is_empty(),
                DumpError::Cloud(message) => !message.is_empty(),
            };
            assert!(
                named,
                "the refusal names too little: {error:?}\n--- input:\n{input}"
            );
        }
    }
}

fn corpus() -> Vec<(String, String)> {
    fuzz::corpus_text(&fuzz::corpus_dir(env!("CARGO_MANIFEST_DIR"), "dump"))
}

#[test]
fn the_corpus_replays() {
    for (name, text) in corpus() {
        check(&text);
        if !name.starts_with("found-") {
            let sources = [Source {
                name: name.clone(),
                text,
            }];
            let built = build(&sources, &DumpOptions::default());
            assert!(built.is_ok(), "seed {name}: {built:?}");
        }
    }
}

#[test]
fn fuzz_dump_documents() {
    fuzz::run_documents(fuzz::seed_documents(&corpus()), 150, file!(), |document| {
        check(&serde_yaml::to_string(document).expect("JSON renders as YAML"));
    });
}

#[test]
fn fuzz_dump_text() {
    let texts = corpus().into_iter().map(|(_, text)| text).collect();
    fuzz::run_text(texts, 150, file!(), check);
}
