//! The per-RPC table of docs/plugin-authoring.md is generated from the proto's own comments
//! (through the descriptor set the crate embeds, the same comments `grpcurl describe` prints):
//! each CloudProviderService RPC's request and answer, whether it is required, the status codes
//! of its table, and its `Idempotent:`, `Deadline:` and `Retried:` lines. This test fails when
//! the document and the proto disagree, printing the table the proto gives;
//! `UPDATE_RPC_TABLE=1 cargo test -p provider-sdk --test rpc_table` rewrites the document.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::PathBuf;

use prost::Message as _;
use prost_types::FileDescriptorSet;
use provider_sdk::FILE_DESCRIPTOR_SET;

const BEGIN: &str = "<!-- BEGIN rpc-table: generated from the proto's comments by \
                     proto/tests/rpc_table.rs; do not edit by hand -->";
const END: &str = "<!-- END rpc-table -->";

/// What the proto says about one RPC.
#[derive(Debug)]
struct Rpc {
    name: String,
    request: String,
    answer: String,
    required: String,
    codes: Vec<String>,
    idempotent: String,
    deadline: String,
    retried: String,
}

/// The value of the line starting `label:` and of the indented lines that continue it.
fn semantics(lines: &[&str], label: &str) -> Option<String> {
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("{label}:")))?;
    let mut value = lines[start][label.len() + 1..].trim().to_owned();
    for line in &lines[start + 1..] {
        if !line.starts_with("  ") || line.trim().is_empty() {
            break;
        }
        value.push(' ');
        value.push_str(line.trim());
    }
    Some(value)
}

/// The first cells of the rows of the comment's status table (continuation rows, whose first
/// cell is empty, extend the row above).
fn codes(lines: &[&str]) -> Vec<String> {
    let mut codes: Vec<String> = Vec::new();
    for line in lines.iter().filter(|l| l.starts_with('|')) {
        let first = line.split('|').nth(1).unwrap_or_default().trim();
        if first == "Code" || first.starts_with("---") {
            continue;
        }
        if first.is_empty() {
            continue;
        }
        match codes.last_mut() {
            // "any error, even" continued by "after some chunks".
            Some(last) if last.ends_with("even") => {
                last.push(' ');
                last.push_str(first);
            }
            _ => codes.push(first.to_owned()),
        }
    }
    codes
}

fn rpcs() -> Vec<Rpc> {
    let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
    let file = set
        .file
        .iter()
        .find(|f| f.name() == "karpenter/cloudprovider/v1/cloudprovider.proto")
        .unwrap();
    let service_index = file
        .service
        .iter()
        .position(|s| s.name() == "CloudProviderService")
        .unwrap();
    let locations = &file.source_code_info.as_ref().unwrap().location;
    let short = |name: &str| name.rsplit('.').next().unwrap_or_default().to_owned();
    file.service[service_index]
        .method
        .iter()
        .enumerate()
        .map(|(m, method)| {
            let path = [
                6,
                i32::try_from(service_index).unwrap(),
                2,
                i32::try_from(m).unwrap(),
            ];
            let comment = locations
                .iter()
                .find(|l| l.path == path)
                .map(|l| l.leading_comments().to_owned())
                .unwrap_or_default();
            let lines: Vec<&str> = comment
                .lines()
                .map(|l| l.strip_prefix(' ').unwrap_or(l))
                .collect();
            let name = method.name().to_owned();
            let flat = comment.split_whitespace().collect::<Vec<_>>().join(" ");
            let required = match flat.find("Optional (capability ") {
                Some(at) => {
                    let capability = flat[at + "Optional (capability ".len()..]
                        .split(')')
                        .next()
                        .unwrap_or_default();
                    format!("optional, `{capability}`")
                }
                None => "required".to_owned(),
            };
            let line = |label| {
                semantics(&lines, label)
                    .unwrap_or_else(|| panic!("{name}'s comment has no `{label}:` line"))
            };
            Rpc {
                request: short(method.input_type()),
                answer: if method.server_streaming() {
                    format!("stream of {}", short(method.output_type()))
                } else {
                    short(method.output_type())
                },
                required,
                codes: codes(&lines),
                idempotent: line("Idempotent"),
                deadline: line("Deadline"),
                retried: line("Retried"),
                name,
            }
        })
        .collect()
}

fn table(rpcs: &[Rpc]) -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut out = String::from(
        "| RPC | Request → answer | | Status codes | Idempotent | Deadline | Retried |\n\
         |-----|------------------|-|--------------|------------|----------|---------|\n",
    );
    for rpc in rpcs {
        out.push_str(&format!(
            "| `{}` | `{}` → `{}` | {} | {} | {} | {} | {} |\n",
            rpc.name,
            rpc.request,
            rpc.answer,
            rpc.required,
            cell(&rpc.codes.join("; ")),
            cell(&rpc.idempotent),
            cell(&rpc.deadline),
            cell(&rpc.retried),
        ));
    }
    out
}

#[test]
fn every_rpc_states_its_semantics_and_the_guide_s_table_is_the_proto_s() {
    let rpcs = rpcs();
    assert_eq!(rpcs.len(), 12, "{rpcs:#?}");
    for rpc in &rpcs {
        assert!(!rpc.codes.is_empty(), "{} has no status table", rpc.name);
        assert!(
            rpc.codes[0].starts_with("OK"),
            "{}: {:?}",
            rpc.name,
            rpc.codes
        );
    }
    let generated = table(&rpcs);

    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/plugin-authoring.md");
    let document = std::fs::read_to_string(&path).unwrap();
    let begin = document.find(BEGIN).expect("the table's BEGIN marker") + BEGIN.len();
    let end = document.find(END).expect("the table's END marker");
    let current = document[begin..end].trim_matches('\n');
    if current == generated.trim_end() {
        return;
    }
    if std::env::var_os("UPDATE_RPC_TABLE").is_some() {
        let updated = format!("{}\n{}{}", &document[..begin], generated, &document[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/plugin-authoring.md's RPC table differs from the proto's comments; rerun with \
         UPDATE_RPC_TABLE=1 to rewrite it. The proto says:\n{generated}"
    );
}
