//! Upstream parity of the CRDs: every manifest in `manifests/` is judged by upstream's released
//! CRDs (vendored in `upstream/`, see `upstream/SOURCE.md`) and by this project's
//! (`deploy/crds/`), through one admission model of kube-apiserver (`admission.rs`: defaulting,
//! pruning, the OpenAPI value checks and the CEL rules), and by the project's Rust validation
//! (what core, the simulator and the fake API server enforce). The test fails when
//!
//! - upstream's verdict is not the one the manifest's `parity/expect` annotation states (the
//!   manifests say what upstream does, so a wrong one is caught);
//! - this project's CRD judges a manifest differently from upstream's, unless
//!   `intended-differences.yaml` lists it with its reason, or lists one that no longer differs;
//! - the Rust validation judges a manifest differently from this project's CRD.
//!
//! A failure prints every manifest with the three verdicts and the refusals.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

mod admission;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use admission::CrdAdmission;
use aws_plugin::apis::EC2NodeClass;
use karpenter_api::testing::messages;
use karpenter_api::{NodeClaim, NodePool};
use serde::Deserialize;
use serde_json::Value;

/// The upstream release the vendored CRDs are (see `upstream/SOURCE.md`).
const UPSTREAM_RELEASE: &str = "aws/karpenter-provider-aws v1.14.1";

/// The CRD files, by kind.
const CRDS: [(&str, &str); 3] = [
    ("NodePool", "karpenter.sh_nodepools.yaml"),
    ("NodeClaim", "karpenter.sh_nodeclaims.yaml"),
    ("EC2NodeClass", "karpenter.k8s.aws_ec2nodeclasses.yaml"),
];

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crd_parity")
}

fn crd(dir: &Path, file: &str) -> CrdAdmission {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    CrdAdmission::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of every file in `manifests/`, in file order.
fn manifests() -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(here().join("manifests"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value =
                Value::deserialize(document).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            out.push(value);
        }
    }
    out
}

#[derive(Debug, Deserialize)]
struct Difference {
    object: String,
    reason: String,
}

fn intended_differences() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(here().join("intended-differences.yaml")).unwrap();
    let list: Vec<Difference> = serde_yaml::from_str(&text).unwrap();
    list.into_iter().map(|d| (d.object, d.reason)).collect()
}

/// The Rust validation's refusals: what serde cannot read, then the validation errors.
fn rust_refusals(kind: &str, object: &Value) -> Vec<String> {
    fn errors<T: serde::de::DeserializeOwned>(
        object: &Value,
        validate: impl FnOnce(&T) -> Vec<String>,
    ) -> Vec<String> {
        match serde_json::from_value::<T>(object.clone()) {
            Ok(typed) => validate(&typed),
            Err(error) => vec![format!("cannot be read: {error}")],
        }
    }
    let policy = aws_plugin::labels::label_policy();
    match kind {
        "NodePool" => errors(object, |p: &NodePool| messages(p.validate(&policy))),
        "NodeClaim" => errors(object, |c: &NodeClaim| messages(c.validate(&policy))),
        "EC2NodeClass" => errors(object, |n: &EC2NodeClass| messages(n.validate())),
        other => panic!("no Rust validation for kind {other}"),
    }
}

fn verdict(refusals: &[String]) -> &'static str {
    if refusals.is_empty() {
        "admit"
    } else {
        "refuse"
    }
}

#[test]
#[allow(
    clippy::print_stderr,
    reason = "the verdicts are the report a failure reads"
)]
fn this_project_s_crds_judge_upstream_manifests_as_upstream_s_do() {
    let upstream_dir = here().join("upstream");
    let ours_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let judges: BTreeMap<&str, (CrdAdmission, CrdAdmission)> = CRDS
        .iter()
        .map(|&(kind, file)| (kind, (crd(&upstream_dir, file), crd(&ours_dir, file))))
        .collect();
    let mut intended = intended_differences();

    let mut problems = Vec::new();
    let mut alike = 0;
    let mut report = Vec::new();
    let objects = manifests();
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let id = format!("{kind}/{name}");
        let expect = object["metadata"]["annotations"]["parity/expect"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no parity/expect annotation"));
        let (upstream, ours) = judges
            .get(kind)
            .unwrap_or_else(|| panic!("{id}: no CRD for kind {kind}"));
        let by_upstream: Vec<String> = upstream
            .admit(object)
            .iter()
            .map(ToString::to_string)
            .collect();
        let by_ours: Vec<String> = ours.admit(object).iter().map(ToString::to_string).collect();
        let by_rust = rust_refusals(kind, object);
        let (up, our, rust) = (verdict(&by_upstream), verdict(&by_ours), verdict(&by_rust));
        report.push(format!(
            "{id}: upstream {up}, ours {our}, Rust {rust}\n    upstream: {by_upstream:?}\n    ours: {by_ours:?}\n    Rust: {by_rust:?}"
        ));
        if up != expect {
            problems.push(format!(
                "{id}: upstream's CRD says {up}, the manifest expects {expect}: fix the manifest"
            ));
        }
        match (up == our, intended.remove(&id)) {
            (true, None) => alike += 1,
            (true, Some(reason)) => problems.push(format!(
                "{id}: listed as an intended difference ({reason}) but judged alike now: \
                 remove it from intended-differences.yaml"
            )),
            (false, None) => problems.push(format!(
                "{id}: upstream's CRD says {up}, ours {our}: make them agree or list it, with \
                 the reason, in intended-differences.yaml"
            )),
            (false, Some(_)) => {}
        }
        if our != rust {
            problems.push(format!(
                "{id}: this project's CRD says {our}, its Rust validation {rust}"
            ));
        }
    }
    for (id, _) in intended {
        problems.push(format!(
            "{id}: listed in intended-differences.yaml but no manifest has that kind/name"
        ));
    }
    eprintln!(
        "{alike} of {} manifests judged alike by {UPSTREAM_RELEASE}'s CRDs and ours\n{}",
        objects.len(),
        report.join("\n")
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
