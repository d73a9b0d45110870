//! The CRDs in `deploy/crds/` are the ones the types generate: this test fails when they differ,
//! and rewrites them when run with `KARPENTER_UPDATE_CRDS=1`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::PathBuf;

use core_svc::apis::crd;
use serde_json::Value;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

fn render(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    format!(
        "# Generated from core-svc/src/apis by `{}`; do not edit.\n{}",
        crd::REGENERATE_COMMAND,
        serde_yaml::to_string(crd).unwrap()
    )
}

#[test]
fn checked_in_crds_match_the_types() {
    let update = std::env::var_os("KARPENTER_UPDATE_CRDS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, crd) in crd::crds() {
        let path = crds_dir().join(&name);
        let want = render(&crd);
        if update {
            std::fs::create_dir_all(crds_dir()).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(got) if got == want => {}
            _ => stale.push(name),
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/crds/{stale:?} differ from what the types generate; run `{}`",
        crd::REGENERATE_COMMAND
    );
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

fn schema_nodes(crd_name: &str) -> Vec<(String, Value)> {
    let (_, crd) = crd::crds()
        .into_iter()
        .find(|(n, _)| n == crd_name)
        .unwrap();
    let json = serde_json::to_value(&crd).unwrap();
    let root = json["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let mut nodes = Vec::new();
    walk(String::new(), &root, &mut nodes);
    nodes.into_iter().map(|(p, v)| (p, v.clone())).collect()
}

#[test]
fn schemas_are_structural() {
    for (name, _) in crd::crds() {
        for (path, node) in schema_nodes(&name) {
            let typed = node.get("type").is_some()
                || node.get("x-kubernetes-int-or-string").is_some()
                || node.get("x-kubernetes-preserve-unknown-fields").is_some();
            assert!(typed, "{name}: {path} has no type: {node}");
            for junctor in ["$ref", "oneOf", "anyOf", "allOf", "not"] {
                assert!(node.get(junctor).is_none(), "{name}: {path} uses {junctor}");
            }
            if let Some(rules) = node.get("x-kubernetes-validations") {
                for rule in rules.as_array().unwrap() {
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

/// What the API server would store for a fixture (schema defaults applied) equals what serde
/// makes of it: the two sets of defaults agree.
#[test]
fn schema_defaults_match_serde_defaults() {
    let fixtures = [
        ("karpenter.sh_nodepools.yaml", "nodepool-minimal.yaml"),
        ("karpenter.sh_nodepools.yaml", "nodepool-budgets.yaml"),
        ("karpenter.sh_nodepools.yaml", "nodepool-docs.yaml"),
        ("karpenter.sh_nodeclaims.yaml", "nodeclaim-docs.yaml"),
    ];
    for (crd_name, fixture) in fixtures {
        let (_, crd) = crd::crds()
            .into_iter()
            .find(|(n, _)| n == crd_name)
            .unwrap();
        let crd = serde_json::to_value(&crd).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let path = format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"));
        let mut stored: Value =
            serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        apply_defaults(schema, &mut stored);
        let through_serde = if crd_name.contains("nodepools") {
            serde_json::to_value(
                serde_json::from_value::<core_svc::apis::NodePool>(stored.clone()).unwrap(),
            )
        } else {
            serde_json::to_value(
                serde_json::from_value::<core_svc::apis::NodeClaim>(stored.clone()).unwrap(),
            )
        }
        .unwrap();
        assert_eq!(
            normalize(stored["spec"].clone()),
            normalize(through_serde["spec"].clone()),
            "{fixture}"
        );
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
