//! A CRD's admission as kube-apiserver performs it on create, for comparing CRDs by their
//! verdicts: the object's fields are defaulted and pruned by the structural schema, checked
//! against its OpenAPI value validations (types, enums, patterns, lengths, counts, bounds,
//! required fields), and every `x-kubernetes-validations` CEL rule is evaluated with `self`
//! bound to the value it sits on (kubernetes `apiextensions-apiserver`, `pkg/apiserver/schema`:
//! `defaulting`, `pruning`, `cel`). CEL runs on the `cel` crate with the Kubernetes library
//! functions the Karpenter CRDs use (`find`, `split`); a rule that fails to evaluate refuses the
//! object, as the API server's does. Transition rules (those reading `oldSelf`) do not apply to
//! a create and are skipped. `metadata` is left to the API server's own checks.
//!
//! Test support: what it models is what the Karpenter CRDs use, not every schema keyword.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::extractors::This;
use cel::objects::{Key, Map};
use cel::{Context, Program, Value as Cel};
use regex::Regex;
use serde_json::{Map as JsonMap, Value};

/// Why a CRD could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CrdError {
    /// The text is not YAML.
    #[error("not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// No version has a schema.
    #[error("the CRD has no version with an openAPIV3Schema")]
    NoSchema,
    /// A pattern does not compile.
    #[error("pattern {pattern:?} at {path}: {error}")]
    Pattern {
        /// Where.
        path: String,
        /// The pattern.
        pattern: String,
        /// Why.
        error: regex::Error,
    },
    /// A CEL rule does not compile.
    #[error("CEL rule {rule:?} at {path}: {error}")]
    Rule {
        /// Where.
        path: String,
        /// The rule.
        rule: String,
        /// Why.
        error: String,
    },
}

/// One reason an object is refused: where, and the API server's words (or close to them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The field, as a JSON path from the object's root.
    pub(crate) path: String,
    /// Why.
    pub(crate) message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A compiled schema node.
struct Node {
    schema: Value,
    properties: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    pattern: Option<Regex>,
    rules: Vec<(Program, String, String)>,
}

/// One CRD's served version, ready to admit objects.
pub(crate) struct CrdAdmission {
    root: Node,
    /// Whether the version has the status subresource: a create then ignores `status`.
    status_subresource: bool,
}

impl CrdAdmission {
    /// Reads a CRD manifest (YAML), taking its storage version's schema.
    pub(crate) fn from_yaml(text: &str) -> Result<Self, CrdError> {
        let crd: Value = serde_yaml::from_str(text)?;
        let versions = crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let version = versions
            .iter()
            .find(|v| v["storage"] == Value::Bool(true))
            .or_else(|| versions.first())
            .ok_or(CrdError::NoSchema)?;
        let schema = version["schema"]["openAPIV3Schema"].clone();
        if !schema.is_object() {
            return Err(CrdError::NoSchema);
        }
        Ok(Self {
            root: compile(&schema, "")?,
            status_subresource: version["subresources"].get("status").is_some(),
        })
    }

    /// The refusals the API server would answer a create of `object` with; empty when it
    /// would admit it.
    pub(crate) fn admit(&self, object: &Value) -> Vec<Refusal> {
        let mut object = object.clone();
        if self.status_subresource
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        default_and_prune(&self.root, &mut object, true);
        let mut refusals = Vec::new();
        validate(&self.root, &object, "", true, &mut refusals);
        refusals
    }
}

fn compile(schema: &Value, path: &str) -> Result<Node, CrdError> {
    let mut properties = Vec::new();
    if let Some(map) = schema["properties"].as_object() {
        for (name, child) in map {
            properties.push((name.clone(), compile(child, &format!("{path}.{name}"))?));
        }
    }
    let items = match schema.get("items") {
        Some(items) if items.is_object() => Some(Box::new(compile(items, &format!("{path}[]"))?)),
        _ => None,
    };
    let additional = match schema.get("additionalProperties") {
        Some(child) if child.is_object() => Some(Box::new(compile(child, &format!("{path}[*]"))?)),
        _ => None,
    };
    let pattern = match schema["pattern"].as_str() {
        // kube-apiserver checks string patterns only (a pattern on an array constrains
        // nothing), with Go's RE2, which the `regex` crate follows.
        Some(pattern) if schema["type"] == "string" => {
            Some(Regex::new(pattern).map_err(|error| CrdError::Pattern {
                path: path.to_owned(),
                pattern: pattern.to_owned(),
                error,
            })?)
        }
        _ => None,
    };
    let mut rules = Vec::new();
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or_default();
        if text.contains("oldSelf") {
            continue;
        }
        let program = Program::compile(text).map_err(|error| CrdError::Rule {
            path: path.to_owned(),
            rule: text.to_owned(),
            error: error.to_string(),
        })?;
        let message = rule["message"]
            .as_str()
            .map_or_else(|| format!("failed rule: {text}"), str::to_owned);
        rules.push((program, text.to_owned(), message));
    }
    Ok(Node {
        schema: schema.clone(),
        properties,
        items,
        additional,
        pattern,
        rules,
    })
}

fn preserves_unknown(node: &Node) -> bool {
    node.schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
}

/// Defaults then prunes `value` as `node` says (the API server defaults first, then prunes).
fn default_and_prune(node: &Node, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            for (name, child) in &node.properties {
                if !map.contains_key(name)
                    && let Some(default) = child.schema.get("default")
                {
                    map.insert(name.clone(), default.clone());
                }
            }
            let known: Vec<&str> = node.properties.iter().map(|(n, _)| n.as_str()).collect();
            if node.additional.is_none() && !preserves_unknown(node) {
                map.retain(|key, _| {
                    known.contains(&key.as_str())
                        || (root && ["apiVersion", "kind", "metadata"].contains(&key.as_str()))
                });
            }
            for (key, child_value) in map.iter_mut() {
                if root && key == "metadata" {
                    continue;
                }
                if let Some((_, child)) = node.properties.iter().find(|(n, _)| n == key) {
                    default_and_prune(child, child_value, false);
                } else if let Some(additional) = &node.additional {
                    default_and_prune(additional, child_value, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &node.items {
                for value in items {
                    default_and_prune(item, value, false);
                }
            }
        }
        _ => {}
    }
}

fn refuse(refusals: &mut Vec<Refusal>, path: &str, message: impl Into<String>) {
    refusals.push(Refusal {
        path: if path.is_empty() {
            "<root>".to_owned()
        } else {
            path.trim_start_matches('.').to_owned()
        },
        message: message.into(),
    });
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

fn validate(node: &Node, value: &Value, path: &str, root: bool, refusals: &mut Vec<Refusal>) {
    let schema = &node.schema;
    if value.is_null() {
        if schema["nullable"] != Value::Bool(true) {
            refuse(refusals, path, "must not be null");
        }
        return;
    }
    if let Some(expected) = schema["type"].as_str()
        && !type_matches(expected, value)
    {
        refuse(refusals, path, format!("must be of type {expected}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        refuse(refusals, path, format!("Unsupported value: {value}"));
    }
    let bound = |key: &str| {
        schema[key]
            .as_u64()
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
    };
    match value {
        Value::String(text) => {
            let length = text.chars().count();
            if bound("maxLength").is_some_and(|max| length > max) {
                refuse(refusals, path, "Too long");
            }
            if bound("minLength").is_some_and(|min| length < min) {
                refuse(refusals, path, "Too short");
            }
            if let Some(pattern) = &node.pattern
                && !pattern.is_match(text)
            {
                refuse(
                    refusals,
                    path,
                    format!("should match '{}'", pattern.as_str()),
                );
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or_default();
            if schema["maximum"].as_f64().is_some_and(|max| n > max) {
                refuse(refusals, path, "must be less than or equal to the maximum");
            }
            if schema["minimum"].as_f64().is_some_and(|min| n < min) {
                refuse(
                    refusals,
                    path,
                    "must be greater than or equal to the minimum",
                );
            }
        }
        Value::Array(items) => {
            if bound("maxItems").is_some_and(|max| items.len() > max) {
                refuse(refusals, path, "Too many items");
            }
            if bound("minItems").is_some_and(|min| items.len() < min) {
                refuse(refusals, path, "Too few items");
            }
            if let Some(item) = &node.items {
                for (i, value) in items.iter().enumerate() {
                    validate(item, value, &format!("{path}[{i}]"), false, refusals);
                }
            }
        }
        Value::Object(map) => {
            if bound("maxProperties").is_some_and(|max| map.len() > max) {
                refuse(refusals, path, "Too many properties");
            }
            if bound("minProperties").is_some_and(|min| map.len() < min) {
                refuse(refusals, path, "Too few properties");
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                if let Some(name) = required.as_str()
                    && !map.contains_key(name)
                {
                    refuse(refusals, &format!("{path}.{name}"), "Required value");
                }
            }
            for (key, child_value) in map {
                if root && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
                    continue;
                }
                if let Some((_, child)) = node.properties.iter().find(|(n, _)| n == key) {
                    validate(
                        child,
                        child_value,
                        &format!("{path}.{key}"),
                        false,
                        refusals,
                    );
                } else if let Some(additional) = &node.additional {
                    validate(
                        additional,
                        child_value,
                        &format!("{path}[{key:?}]"),
                        false,
                        refusals,
                    );
                }
            }
        }
        _ => {}
    }
    for (program, text, message) in &node.rules {
        match evaluate(program, value) {
            Ok(true) => {}
            Ok(false) => refuse(refusals, path, message.clone()),
            Err(error) => refuse(
                refusals,
                path,
                format!("rule {text:?} could not be evaluated: {error}"),
            ),
        }
    }
}

/// `value` as CEL sees a JSON value: integers as `int`, other numbers as `double`.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map(Cel::Int)
            .unwrap_or_else(|| Cel::Float(n.as_f64().unwrap_or_default())),
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => Cel::Map(object(map)),
    }
}

fn object(map: &JsonMap<String, Value>) -> Map {
    let entries: HashMap<Key, Cel> = map
        .iter()
        .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
        .collect();
    Map {
        map: Arc::new(entries),
    }
}

/// Kubernetes' CEL `string.find(regex)`: the first match, or the empty string.
fn find(This(this): This<Arc<String>>, pattern: Arc<String>) -> cel::ResolveResult {
    let regex = Regex::new(&pattern)
        .map_err(|e| cel::ExecutionError::function_error("find", e.to_string()))?;
    Ok(Cel::String(Arc::new(
        regex
            .find(&this)
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default(),
    )))
}

/// Kubernetes' CEL `string.split(separator)`.
fn split(This(this): This<Arc<String>>, separator: Arc<String>) -> Cel {
    Cel::List(Arc::new(
        this.split(separator.as_str())
            .map(|part| Cel::String(Arc::new(part.to_owned())))
            .collect(),
    ))
}

fn evaluate(program: &Program, value: &Value) -> Result<bool, String> {
    let mut context = Context::default();
    context
        .add_function("find", find)
        .expect("find is not a CEL built-in");
    context
        .add_function("split", split)
        .expect("split is not a CEL built-in");
    context.add_variable_from_value("self", to_cel(value));
    match program.execute(&context) {
        Ok(Cel::Bool(result)) => Ok(result),
        Ok(other) => Err(format!("returned {other:?}, not a bool")),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value) -> CrdAdmission {
        let manifest = json!({
            "spec": { "versions": [{
                "name": "v1", "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": schema },
            }]}
        });
        CrdAdmission::from_yaml(&serde_json::to_string(&manifest).unwrap()).unwrap()
    }

    fn messages(crd: &CrdAdmission, object: Value) -> Vec<String> {
        crd.admit(&object).iter().map(ToString::to_string).collect()
    }

    /// As the API server: defaults before the rules, unknown fields pruned, status ignored on
    /// create, a string pattern checked where a pattern on an array is not.
    #[test]
    fn defaults_prune_and_checks_apply_as_the_api_server_orders_them() {
        let crd = crd(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "size": { "type": "integer", "default": 3, "maximum": 5 },
                        "values": { "type": "array", "items": { "type": "string" }, "pattern": "^a$" },
                        "name": { "type": "string", "pattern": "^[a-z]+$" },
                    },
                    "x-kubernetes-validations": [
                        { "rule": "self.size >= 3", "message": "size must be at least 3" },
                        { "rule": "self.size == oldSelf.size", "message": "transition rules skip creates" },
                    ],
                },
                "status": { "type": "object", "properties": { "n": { "type": "integer" } } },
            },
        }));
        assert!(
            messages(
                &crd,
                json!({"spec": {"values": ["b"], "extra": 1}, "status": {"n": "x"}})
            )
            .is_empty()
        );
        assert_eq!(
            messages(&crd, json!({"spec": {"size": 2}})),
            ["spec: size must be at least 3"]
        );
        assert_eq!(
            messages(&crd, json!({"spec": {"size": 6, "name": "A"}})),
            [
                "spec.name: should match '^[a-z]+$'",
                "spec.size: must be less than or equal to the maximum",
            ]
        );
    }

    /// Kubernetes' `find` and `split`, and an evaluation error refusing the object.
    #[test]
    fn kubernetes_string_functions_and_evaluation_errors() {
        let crd = crd(json!({
            "type": "object",
            "properties": { "spec": {
                "type": "object",
                "properties": { "alias": { "type": "string" }, "labels": { "type": "object", "additionalProperties": { "type": "string" } } },
                "x-kubernetes-validations": [
                    { "rule": "self.alias.split('@')[0] in ['al2023']", "message": "family" },
                    { "rule": "self.labels.all(x, !x.find('^([^/]+)').endsWith('karpenter.sh'))", "message": "domain" },
                ],
            }},
        }));
        assert!(
            messages(
                &crd,
                json!({"spec": {"alias": "al2023@latest", "labels": {"a.io/b": "c"}}})
            )
            .is_empty()
        );
        assert_eq!(
            messages(
                &crd,
                json!({"spec": {"alias": "al2@latest", "labels": {"karpenter.sh/x": "c"}}})
            ),
            ["spec: family", "spec: domain"]
        );
        let refused = messages(&crd, json!({"spec": {"alias": "al2023@latest"}}));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].contains("could not be evaluated"), "{refused:?}");
    }
}
