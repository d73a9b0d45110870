//! Helpers for the tests of the crates that define Karpenter API types (this one and the cloud
//! provider plugins'): the CRD-check harness every `apis_crds` test runs, and the manifest
//! helpers the `apis_manifests` and `apis_validation` tests share.
//!
//! Behind the `testing` feature, which only dev-dependencies enable: this is test code, which
//! panics the way a failed assertion does, and it pulls in `serde_yaml`.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::crd::{Generator, UPDATE_ENV};

pub mod fuzz;

/// The tests every API crate runs on its CRDs, as one `tests/apis_crds.rs` per crate:
///
/// - `checked_in_crds_match_the_types`: the files in `deploy/crds/` are what the types generate
///   ([`check_or_update`]; `KARPENTER_UPDATE_CRDS=1` rewrites them);
/// - `schemas_are_structural` ([`assert_structural`]);
/// - `schema_defaults_match_serde_defaults`: for each fixture of each type, what the API server
///   would store (schema defaults applied) is what serde makes of it
///   ([`assert_schema_defaults_match_serde`]).
///
/// ```no_run
/// use karpenter_api::crd::{Generator, crds};
/// use karpenter_api::{NodeClaim, NodePool};
///
/// const GENERATOR: Generator = Generator {
///     source: "core-svc/api/src",
///     command: "KARPENTER_UPDATE_CRDS=1 cargo test -p my-plugin --test apis_crds",
/// };
///
/// karpenter_api::crd_tests! {
///     crds: crds(),
///     generator: GENERATOR,
///     defaults: { NodePool => ["nodepool-minimal.yaml"], NodeClaim => ["nodeclaim-docs.yaml"] },
/// }
/// ```
///
/// The fixtures are the calling crate's `tests/fixtures/`.
#[macro_export]
macro_rules! crd_tests {
    (
        crds: $crds:expr,
        generator: $generator:expr,
        defaults: { $($type:ty => [$($fixture:literal),* $(,)?]),* $(,)? } $(,)?
    ) => {
        #[test]
        fn checked_in_crds_match_the_types() {
            $crate::testing::check_or_update(
                &$crds,
                &$crate::testing::deploy_crds_dir(),
                &$generator,
            );
        }

        #[test]
        fn schemas_are_structural() {
            $crate::testing::assert_structural(&$crds);
        }

        #[test]
        fn schema_defaults_match_serde_defaults() {
            // `env!` in a macro reads the calling crate's variable: its fixtures.
            let fixtures = $crate::testing::Fixtures::new(env!("CARGO_MANIFEST_DIR"));
            $($(
                $crate::testing::assert_schema_defaults_match_serde::<$type>(
                    &$crate::testing::crd_of::<$type>(),
                    fixtures.yaml($fixture),
                    $fixture,
                );
            )*)*
        }
    };
}

/// `T`'s CRD, for [`crd_tests!`](crate::crd_tests), which cannot name `kube`'s trait through
/// the calling crate.
pub fn crd_of<T: kube::CustomResourceExt>() -> CustomResourceDefinition {
    T::crd()
}

/// The workspace's `deploy/crds/`, where every API group's CRDs are checked in.
pub fn deploy_crds_dir() -> PathBuf {
    // This crate is `core-svc/api`: the workspace root is two levels up.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

/// The file `generator` writes for `crd`: its header, then the CRD as YAML.
pub fn render(crd: &CustomResourceDefinition, generator: &Generator) -> String {
    let yaml = serde_yaml::to_string(crd)
        .unwrap_or_else(|e| panic!("{}: cannot render: {e}", crate::crd::file_name(crd)));
    format!("{}{yaml}", generator.header())
}

/// Checks the files in `dir` are what `crds` render to, or, when run with
/// `KARPENTER_UPDATE_CRDS=1`, rewrites them. Panics naming the stale files and the command that
/// regenerates them.
pub fn check_or_update(
    crds: &[(String, CustomResourceDefinition)],
    dir: &Path,
    generator: &Generator,
) {
    let update = std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, crd) in crds {
        let path = dir.join(name);
        let want = render(crd, generator);
        if update {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(got) if got == want => {}
            _ => stale.push(name.as_str()),
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/crds/{stale:?} differ from what the types generate; run `{}`",
        generator.command
    );
}

/// The OpenAPI schema of a CRD's first version.
pub fn openapi_schema(crd: &CustomResourceDefinition) -> Value {
    let json = serde_json::to_value(crd).unwrap_or_else(|e| panic!("{e}"));
    json["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Every schema node, with its JSON path.
fn walk<'a>(path: String, node: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), node));
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            walk(format!("{path}.{k}"), v, out);
        }
    }
    if let Some(items) = node.get("items") {
        walk(format!("{path}[]"), items, out);
    }
    if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(format!("{path}{{}}"), extra, out);
    }
}

/// Checks each CRD's schema is structural, as the API server requires: every node typed, no
/// `$ref` or junctors, and every CEL rule with a rule and a message.
pub fn assert_structural(crds: &[(String, CustomResourceDefinition)]) {
    for (name, crd) in crds {
        let root = openapi_schema(crd);
        let mut nodes = Vec::new();
        walk(String::new(), &root, &mut nodes);
        for (path, node) in nodes {
            let typed = node.get("type").is_some()
                || node.get("x-kubernetes-int-or-string").is_some()
                || node.get("x-kubernetes-preserve-unknown-fields").is_some();
            assert!(typed, "{name}: {path} has no type: {node}");
            for junctor in ["$ref", "oneOf", "anyOf", "allOf", "not"] {
                assert!(node.get(junctor).is_none(), "{name}: {path} uses {junctor}");
            }
            if let Some(rules) = node.get("x-kubernetes-validations") {
                let rules = rules
                    .as_array()
                    .unwrap_or_else(|| panic!("{name}: {path}: validations are not a list"));
                for rule in rules {
                    assert!(rule["rule"].is_string(), "{name}: {path}: {rule}");
                    assert!(rule["message"].is_string(), "{name}: {path}: {rule}");
                }
            }
        }
    }
}

/// Applies the schema's `default`s to `value` the way the API server does: absent fields with a
/// default get it, recursively, including inside defaults just applied.
fn apply_defaults(schema: &Value, value: &mut Value) {
    if let (Some(props), Some(map)) = (
        schema.get("properties").and_then(Value::as_object),
        value.as_object_mut(),
    ) {
        for (k, s) in props {
            if !map.contains_key(k)
                && let Some(d) = s.get("default")
            {
                map.insert(k.clone(), d.clone());
            }
            if let Some(v) = map.get_mut(k) {
                apply_defaults(s, v);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array_mut()) {
        for v in list {
            apply_defaults(items, v);
        }
    }
}

/// Numbers as strings: quantities read as numbers come back as strings.
fn normalize(value: Value) -> Value {
    match value {
        Value::Number(n) => Value::String(n.to_string()),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, normalize(v))).collect()),
        other => other,
    }
}

/// Checks that what the API server would store for `manifest` (the CRD's schema defaults
/// applied) has the spec serde makes of it: the two sets of defaults agree. `T` is the type the
/// CRD was generated from; `what` names the manifest in a failure.
pub fn assert_schema_defaults_match_serde<T>(
    crd: &CustomResourceDefinition,
    mut manifest: Value,
    what: &str,
) where
    T: Serialize + DeserializeOwned,
{
    apply_defaults(&openapi_schema(crd), &mut manifest);
    let typed: T =
        serde_json::from_value(manifest.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let through_serde = serde_json::to_value(typed).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        normalize(manifest["spec"].clone()),
        normalize(through_serde["spec"].clone()),
        "{what}"
    );
}

/// A crate's `tests/fixtures/`: manifests to load, whole or patched.
#[derive(Debug, Clone, Copy)]
pub struct Fixtures {
    manifest_dir: &'static str,
}

impl Fixtures {
    /// The fixtures of the crate at `manifest_dir` (its `env!("CARGO_MANIFEST_DIR")`).
    pub const fn new(manifest_dir: &'static str) -> Self {
        Self { manifest_dir }
    }

    /// The path of fixture `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        Path::new(self.manifest_dir)
            .join("tests/fixtures")
            .join(name)
    }

    /// Fixture `name` as text.
    pub fn text(&self, name: &str) -> String {
        let path = self.path(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Fixture `name` as JSON.
    pub fn yaml(&self, name: &str) -> Value {
        serde_yaml::from_str(&self.text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Fixture `name` as `T`, and as JSON to compare it with.
    pub fn load<T: DeserializeOwned>(&self, name: &str) -> (T, Value) {
        let text = self.text(name);
        let value: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let typed: T = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        (typed, value)
    }

    /// Fixture `name` with `patch_yaml` merged into it ([`merge`]).
    pub fn patched(&self, name: &str, patch_yaml: &str) -> Value {
        let mut manifest = self.yaml(name);
        let patch: Value = serde_yaml::from_str(patch_yaml)
            .unwrap_or_else(|e| panic!("patch:\n{patch_yaml}\n{e}"));
        merge(&mut manifest, &patch);
        manifest
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = Value::Object(serde_json::Map::new());
            }
            if let Some(target) = target.as_object_mut() {
                for (k, v) in patch {
                    if v.is_null() {
                        target.remove(k);
                    } else {
                        merge(target.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Checks every value in `input` is in `output` with the same meaning: equal, or a number that
/// became the same quantity string. `path` names where in the object, for failures.
pub fn assert_kept(input: &Value, output: &Value, path: &str) {
    match (input, output) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let out = b.get(k).unwrap_or_else(|| panic!("{path}.{k} was dropped"));
                assert_kept(v, out, &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: length changed");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_kept(x, y, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(n), Value::String(s)) => assert_eq!(&n.to_string(), s, "{path}"),
        _ => assert_eq!(input, output, "{path}"),
    }
}

/// Serializes `typed`, checks nothing of `input` was lost, checks the result reads back as the
/// same object, and returns it.
pub fn assert_round_trips<T>(typed: &T, input: &Value) -> Value
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let output = serde_json::to_value(typed).unwrap_or_else(|e| panic!("{e}"));
    assert_kept(input, &output, "");
    let again: T = serde_json::from_value(output.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&again, typed);
    output
}

/// A validation result as the messages it prints; none when it is `Ok`.
pub fn messages<E: ToString>(result: Result<(), Vec<E>>) -> Vec<String> {
    result
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect()
}
