//! `apps/v1` Deployments as the API server admits them: its defaults (kubectl's describer
//! dereferences `spec.replicas`, so a Deployment without it would crash it), the checks that
//! matter to a controller (a selector that selects the template's pods), and the template hash
//! pods carry as `pod-template-hash`.
//!
//! Deployments are plain JSON in the server's own store: no Rust code reads them but the
//! workload stand-in ([`super::workloads`]), which wants exactly these few fields.

use core_domain::hash::fnv1a_64;
use core_svc::cluster::ClusterError;
use serde_json::{Map, Value, json};

/// The label the Deployment controller puts on its pods, naming the template they come from.
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Sets the defaults of `apps/v1` Deployments on `object` and checks it; `name` is for errors.
pub(crate) fn admit_deployment(name: &str, object: &mut Value) -> Result<(), ClusterError> {
    let invalid = |field: &str, message: &str| {
        ClusterError::invalid("Deployment", name, field.to_owned(), message.to_owned())
    };
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(invalid("spec", "Required value"));
    };
    default(spec, "replicas", json!(1));
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
    default(
        spec,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    );
    match spec.get("replicas").and_then(Value::as_i64) {
        Some(replicas) if replicas >= 0 => {}
        _ => {
            return Err(invalid(
                "spec.replicas",
                "must be greater than or equal to 0",
            ));
        }
    }
    let selector = spec.get("selector").cloned().unwrap_or(Value::Null);
    if selector_is_empty(&selector) {
        return Err(invalid("spec.selector", "Required value"));
    }
    let template = spec.get("template").cloned().unwrap_or(Value::Null);
    let labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    if !selector_matches(&selector, &labels) {
        return Err(invalid(
            "spec.template.metadata.labels",
            "Invalid value: `selector` does not match template `labels`",
        ));
    }
    if template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(invalid("spec.template.spec.containers", "Required value"));
    }
    Ok(())
}

fn default(spec: &mut Map<String, Value>, key: &str, value: Value) {
    if spec.get(key).is_none_or(Value::is_null) {
        spec.insert(key.to_owned(), value);
    }
}

fn selector_is_empty(selector: &Value) -> bool {
    let empty = |key: &str| match selector.get(key) {
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::Array(list)) => list.is_empty(),
        _ => true,
    };
    empty("matchLabels") && empty("matchExpressions")
}

/// Whether a `metav1.LabelSelector` (`matchLabels` and `matchExpressions` with `In`, `NotIn`,
/// `Exists`, `DoesNotExist`) selects an object with `labels`. An operator it does not know
/// selects nothing, as the API server would have refused it.
pub(crate) fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key).is_some() && label(key) == value.as_str());
    let match_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let values: Vec<&str> = expression
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match expression.get("operator").and_then(Value::as_str) {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    match_labels && match_expressions
}

/// The hash of a pod template, as pods made from it carry it in `pod-template-hash`: ten hex
/// digits of FNV-1a over the template's JSON with its keys sorted, so it depends on the
/// template only (not on the order a client wrote its fields in) and is the same in every
/// run and build.
pub(crate) fn template_hash(template: &Value) -> String {
    let mut text = String::new();
    canonical(template, &mut text);
    let hash = fnv1a_64(text.as_bytes());
    format!("{:010x}", hash & 0xff_ffff_ffff)
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(value) = map.get(key) {
                    canonical(value, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": spec})
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
    }

    #[test]
    fn a_deployment_gets_the_api_servers_defaults() {
        let mut object = deployment(
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        );
        admit_deployment("web", &mut object).unwrap();
        assert_eq!(object["spec"]["replicas"], 1);
        assert_eq!(object["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(object["spec"]["revisionHistoryLimit"], 10);
        let mut three = deployment(
            json!({"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        );
        admit_deployment("web", &mut three).unwrap();
        assert_eq!(three["spec"]["replicas"], 3, "a given value stays");
    }

    #[test]
    fn a_selector_that_misses_the_template_or_no_selector_is_refused() {
        let mut other = deployment(
            json!({"selector": {"matchLabels": {"app": "other"}}, "template": template()}),
        );
        let error = admit_deployment("web", &mut other).unwrap_err();
        assert!(error.to_string().contains("does not match"), "{error}");
        let mut none = deployment(json!({"template": template()}));
        assert!(admit_deployment("web", &mut none).is_err());
        let mut negative = deployment(
            json!({"replicas": -1, "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
        );
        assert!(admit_deployment("web", &mut negative).is_err());
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels = json!({"app": "web", "tier": "front"});
        let selector = |s: Value| selector_matches(&s, &labels);
        assert!(selector(json!({"matchLabels": {"app": "web"}})));
        assert!(!selector(json!({"matchLabels": {"app": "db"}})));
        assert!(selector(
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]})
        ));
        assert!(selector(
            json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]})
        ));
        assert!(!selector(
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]})
        ));
        assert!(!selector(
            json!({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]})
        ));
    }

    #[test]
    fn the_template_hash_ignores_field_order_and_sees_every_change() {
        let a =
            json!({"metadata": {"labels": {"app": "web", "x": "1"}}, "spec": {"containers": []}});
        let b =
            json!({"spec": {"containers": []}, "metadata": {"labels": {"x": "1", "app": "web"}}});
        let c =
            json!({"metadata": {"labels": {"app": "web", "x": "2"}}, "spec": {"containers": []}});
        assert_eq!(template_hash(&a), template_hash(&b));
        assert_ne!(template_hash(&a), template_hash(&c));
        assert_eq!(template_hash(&a).len(), 10);
    }
}
