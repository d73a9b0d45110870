//! Schema pieces the derives cannot express: Kubernetes types whose generated schemas are not
//! what Karpenter's CRDs say (taints with patterns, resource lists), and the label-key CEL rules,
//! generated from the same lists [`crate::labels`] checks in Rust so the two cannot drift.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use crate::{
    labels::{self, RestrictedKey},
    patterns,
    requirement::{self, NodeSelectorRequirementWithMinValues},
    validation::TAINT_EFFECTS,
};

/// `ResourceList`: a map of quantities.
pub fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": patterns::QUANTITY,
            "x-kubernetes-int-or-string": true,
        },
    })
}

/// `[]Taint`, with the key, value and effect rules Karpenter adds.
pub fn taints(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "items": {
            "description": "The node this Taint is attached to has the \"effect\" on any pod that does not tolerate the Taint.",
            "type": "object",
            "required": ["effect", "key"],
            "properties": {
                "effect": {
                    "description": "The effect of the taint on pods that do not tolerate the taint. Valid effects are NoSchedule, PreferNoSchedule and NoExecute.",
                    "type": "string",
                    "enum": TAINT_EFFECTS,
                },
                "key": {
                    "description": "The taint key to be applied to a node.",
                    "type": "string",
                    "minLength": 1,
                    "pattern": patterns::QUALIFIED_NAME.as_str(),
                },
                "timeAdded": {
                    "description": "The time at which the taint was added.",
                    "type": "string",
                    "format": "date-time",
                },
                "value": {
                    "description": "The taint value corresponding to the taint key.",
                    "type": "string",
                    "pattern": patterns::QUALIFIED_NAME.as_str(),
                },
            },
        },
    })
}

fn rule(rule: String, message: String) -> Value {
    json!({ "rule": rule, "message": message })
}

fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The label-key restrictions as CEL over the string `var`, in the order the CRDs list them:
/// generated from [`labels::DOMAIN_RULES`] and [`labels::KeyUse::restricted_keys`], which the
/// Rust checks ([`labels::restrictions`]) use too, with the same messages.
fn key_rules(var: &str, key_use: labels::KeyUse) -> Vec<(String, String)> {
    let mut rules: Vec<(String, String)> = labels::DOMAIN_RULES
        .iter()
        .map(|rule| domain_rule(var, rule))
        .collect();
    rules.extend(key_use.restricted_keys().map(|key| {
        (
            format!("{var} != \"{key}\""),
            RestrictedKey::Key(key.into()).to_string(),
        )
    }));
    rules
}

/// One restricted domain as CEL over the string `var`, and its message.
pub(crate) fn domain_rule(var: &str, rule: &labels::DomainRule<'_>) -> (String, String) {
    let allowed = (!rule.allowed_keys.is_empty())
        .then(|| format!("{var} in {}", quoted_list(&rule.allowed_keys)));
    let restricted = format!("!{var}.find(\"^([^/]+)\").endsWith(\"{}\")", rule.domain);
    let cel: Vec<String> = allowed.into_iter().chain([restricted]).collect();
    (
        cel.join(" || "),
        RestrictedKey::Domain(rule.domain.into()).to_string(),
    )
}

/// How a rule over a map's keys starts: each key is `x`.
const FOR_ALL_KEYS: &str = "self.all(x, ";

/// A rule over one key `x` as a rule over a map's keys.
pub(crate) fn for_all_keys(rule: &str) -> String {
    format!("{FOR_ALL_KEYS}{rule})")
}

/// Whether `rule` is a rule over a map's keys ([`for_all_keys`]).
pub(crate) fn is_for_all_keys(rule: &str) -> bool {
    rule.starts_with(FOR_ALL_KEYS)
}

/// The requirements-list rules upstream attaches to `requirements`.
fn requirements_list_rules() -> Value {
    json!([
        {
            "rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "message": "requirements with operator 'In' must have a value defined",
        },
        {
            "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "message": "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        },
        {
            "rule": "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
            "message": "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        },
    ])
}

fn requirements(generator: &mut SchemaGenerator, key_use: labels::KeyUse) -> Schema {
    let mut item = NodeSelectorRequirementWithMinValues::json_schema(generator);
    let key_validations: Vec<Value> = key_rules("self", key_use)
        .into_iter()
        .map(|(r, m)| rule(r, m))
        .collect();
    if let Some(key) = item
        .get_mut("properties")
        .and_then(|p| p.get_mut("key"))
        .and_then(Value::as_object_mut)
    {
        key.insert("x-kubernetes-validations".into(), key_validations.into());
    }
    json_schema!({
        "type": "array",
        "maxItems": requirement::MAX_REQUIREMENTS,
        "items": item,
        "x-kubernetes-list-type": "atomic",
        "x-kubernetes-validations": requirements_list_rules(),
    })
}

/// A NodePool template's `requirements`.
pub fn nodepool_requirements(generator: &mut SchemaGenerator) -> Schema {
    requirements(generator, labels::KeyUse::NodePool)
}

/// A NodeClaim's `requirements`.
pub fn nodeclaim_requirements(generator: &mut SchemaGenerator) -> Schema {
    requirements(generator, labels::KeyUse::NodeClaim)
}

/// A NodePool template's `labels`: at most 100, label values, no restricted keys.
pub fn template_labels(_: &mut SchemaGenerator) -> Schema {
    let validations: Vec<Value> = key_rules("x", labels::KeyUse::NodePool)
        .into_iter()
        .map(|(r, m)| rule(format!("self.all(x, {r})"), m))
        .collect();
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "string",
            "maxLength": labels::MAX_VALUE_LENGTH,
            "pattern": patterns::LABEL_VALUE.as_str(),
        },
        "maxProperties": 100,
        "x-kubernetes-map-type": "atomic",
        "x-kubernetes-validations": validations,
    })
}

/// A plain string map (annotations, tags).
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
    })
}
