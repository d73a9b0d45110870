//! `core-svc convert`, the binary, on upstream's own v1alpha5 and v1beta1 examples
//! (`tests/convert/upstream/`, see SOURCE.md there): the v1 output and the warnings are
//! checked in under `tests/convert/expected/`. Regenerate them, after reading the difference,
//! with `KARPENTER_UPDATE_CONVERT=1 cargo test -p core-svc --test convert`. Bad input: exit
//! status 2, the document and field named, nothing on standard output.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/convert")
        .join(path)
}

fn convert(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_core-svc"))
        .arg("convert")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("core-svc starts");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("stdin written");
    drop(input);
    child.wait_with_output().expect("core-svc exits")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

#[test]
fn upstreams_examples_convert_as_checked_in() {
    let update = std::env::var_os("KARPENTER_UPDATE_CONVERT").is_some();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(data("upstream"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    sources.sort();
    assert_eq!(sources.len(), 12, "{sources:?}");
    for source in sources {
        let name = source.file_stem().unwrap().to_str().unwrap().to_owned();
        let out = convert(&["-f", source.to_str().unwrap()], None);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let (yaml, warnings) = (text(&out.stdout), text(&out.stderr));
        let yaml_path = data(&format!("expected/{name}.yaml"));
        let warnings_path = data(&format!("expected/{name}.warnings"));
        if update {
            std::fs::write(&yaml_path, &yaml).unwrap();
            std::fs::write(&warnings_path, &warnings).unwrap();
            continue;
        }
        assert_eq!(yaml, std::fs::read_to_string(&yaml_path).unwrap(), "{name}");
        assert_eq!(
            warnings,
            std::fs::read_to_string(&warnings_path).unwrap(),
            "{name}"
        );
        assert!(
            !yaml.contains("apiVersion: karpenter.sh/v1alpha5")
                && !yaml.contains("apiVersion: karpenter.sh/v1beta1"),
            "{name}: every Karpenter object is v1:\n{yaml}"
        );
    }
}

#[test]
fn a_directory_and_standard_input_are_read_and_json_written() {
    let out = convert(
        &["-f", data("upstream").to_str().unwrap(), "-o", "json"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(20));

    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    karpenter.sh/do-not-evict: \"true\"\n";
    let out = convert(&["-f", "-"], Some(pod));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("karpenter.sh/do-not-disrupt: 'true'"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn bad_input_exits_2_naming_what_and_writing_nothing() {
    for (input, expected) in [
        ("kind: [unclosed\n", "(stdin): document 1: "),
        (
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  provider: {}\n  providerRef: {name: x}\n",
            "error: Provisioner/p: spec: both provider and providerRef are set",
        ),
        (
            "apiVersion: karpenter.sh/v1alpha3\nkind: Provisioner\nmetadata: {name: p}\n",
            "error: Provisioner/p: apiVersion: ",
        ),
    ] {
        let out = convert(&["-f", "-"], Some(input));
        assert_eq!(out.status.code(), Some(2), "{input}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains(expected),
            "{}",
            text(&out.stderr)
        );
    }
    // --strict: a warning is an error.
    let source = data("upstream/provisioner-node-ttls.yaml");
    let out = convert(&["--strict", "-f", source.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("--strict"),
        "{}",
        text(&out.stderr)
    );
}
