//! `--set PATH=VALUE`: one change to a scenario document before it is read, so a what-if is one
//! flag rather than a copy of the file.
//!
//! PATH is a dot-separated list of steps from the document's top: a map key (`duration`,
//! `spec`), a list position (`budgets[0]`), or, in a list of Kubernetes objects, the object of
//! that kind and name (`objects[NodePool/default]`, `objects[Deployment/default/web]` with a
//! namespace). VALUE is YAML (`10%`, `true`, `3`, `[{nodes: "20%"}]`). Keys missing on the way
//! are created as maps; a position or object that is not there is an error naming the step.

use std::fmt;

use serde_json::{Map, Value};

/// One `PATH=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    path: Vec<Step>,
    /// As given, for messages.
    text: String,
    value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
    Object {
        kind: String,
        namespace: Option<String>,
        name: String,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(key) => write!(f, ".{key}"),
            Self::Index(index) => write!(f, "[{index}]"),
            Self::Object {
                kind,
                namespace: Some(namespace),
                name,
            } => write!(f, "[{kind}/{namespace}/{name}]"),
            Self::Object {
                kind,
                namespace: None,
                name,
            } => write!(f, "[{kind}/{name}]"),
        }
    }
}

/// A `--set` that cannot be read or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--set {text}: {reason}")]
pub struct OverrideError {
    text: String,
    reason: String,
}

impl OverrideError {
    fn new(text: &str, reason: impl Into<String>) -> Self {
        Self {
            text: text.to_owned(),
            reason: reason.into(),
        }
    }
}

impl Override {
    /// Reads `PATH=VALUE` (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, OverrideError> {
        let (path, value) = text
            .split_once('=')
            .ok_or_else(|| OverrideError::new(text, "expected PATH=VALUE"))?;
        let path = steps(path.trim()).map_err(|reason| OverrideError::new(text, reason))?;
        let value: serde_yaml::Value = serde_yaml::from_str(value)
            .map_err(|error| OverrideError::new(text, format!("VALUE is not YAML: {error}")))?;
        let value = serde_json::to_value(value).map_err(|error| {
            OverrideError::new(text, format!("VALUE is not representable as JSON: {error}"))
        })?;
        Ok(Self {
            path,
            text: text.to_owned(),
            value,
        })
    }

    /// Sets the value in `document`.
    pub fn apply(&self, document: &mut Value) -> Result<(), OverrideError> {
        let mut at = document;
        let mut walked = String::new();
        for step in &self.path {
            let before = walked.trim_start_matches('.').to_owned();
            let before = if before.is_empty() {
                "(the document)".to_owned()
            } else {
                before
            };
            walked.push_str(&step.to_string());
            let shown = walked.trim_start_matches('.');
            at = match step {
                Step::Key(key) => {
                    if at.is_null() {
                        *at = Value::Object(Map::new());
                    }
                    let Value::Object(map) = at else {
                        return Err(self.error(format!("{before}: not a map")));
                    };
                    map.entry(key.clone()).or_insert(Value::Null)
                }
                Step::Index(index) => {
                    let Value::Array(list) = at else {
                        return Err(self.error(format!("{before}: not a list")));
                    };
                    let len = list.len();
                    list.get_mut(*index)
                        .ok_or_else(|| self.error(format!("{shown}: the list has {len} item(s)")))?
                }
                Step::Object {
                    kind,
                    namespace,
                    name,
                } => {
                    let Value::Array(list) = at else {
                        return Err(self.error(format!("{before}: not a list")));
                    };
                    list.iter_mut()
                        .find(|object| is_object(object, kind, namespace.as_deref(), name))
                        .ok_or_else(|| self.error(format!("{shown}: no such object")))?
                }
            };
        }
        *at = self.value.clone();
        Ok(())
    }

    fn error(&self, reason: String) -> OverrideError {
        OverrideError::new(&self.text, reason)
    }
}

/// `text` (a scenario file) with `overrides` applied in order, as YAML again.
pub fn apply_all(text: &str, overrides: &[Override]) -> Result<String, OverrideError> {
    let whole = |reason: String| OverrideError::new("(the scenario)", reason);
    let mut yaml: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|error| whole(format!("not valid YAML: {error}")))?;
    yaml.apply_merge()
        .map_err(|error| whole(format!("merge key: {error}")))?;
    let mut document =
        serde_json::to_value(yaml).map_err(|error| whole(format!("not JSON-like: {error}")))?;
    for one in overrides {
        one.apply(&mut document)?;
    }
    serde_yaml::to_string(&document).map_err(|error| whole(error.to_string()))
}

fn is_object(object: &Value, kind: &str, namespace: Option<&str>, name: &str) -> bool {
    let text = |value: &Value| value.as_str().map(str::to_owned);
    let metadata = &object["metadata"];
    text(&object["kind"]).as_deref() == Some(kind)
        && text(&metadata["name"]).as_deref() == Some(name)
        && namespace.is_none_or(|namespace| {
            text(&metadata["namespace"]).as_deref().unwrap_or("default") == namespace
        })
}

/// The steps of a PATH.
fn steps(path: &str) -> Result<Vec<Step>, String> {
    if path.is_empty() {
        return Err("PATH is empty".to_owned());
    }
    let mut steps = Vec::new();
    for part in split_outside_brackets(path) {
        let (key, mut selectors) = match part.find('[') {
            Some(open) => (&part[..open], &part[open..]),
            None => (part, ""),
        };
        if key.is_empty() && steps.is_empty() && selectors.is_empty() {
            return Err(format!("PATH {path:?} has an empty step"));
        }
        if !key.is_empty() {
            steps.push(Step::Key(key.to_owned()));
        } else if selectors.is_empty() {
            return Err(format!("PATH {path:?} has an empty step"));
        }
        while !selectors.is_empty() {
            let close = selectors
                .find(']')
                .ok_or_else(|| format!("PATH {path:?}: a '[' without its ']'"))?;
            let inside = selectors.get(1..close).unwrap_or_default();
            steps.push(selector(inside).map_err(|reason| format!("PATH {path:?}: {reason}"))?);
            selectors = &selectors[close + 1..];
            if !selectors.is_empty() && !selectors.starts_with('[') {
                return Err(format!(
                    "PATH {path:?}: text after ']' must start a new step"
                ));
            }
        }
    }
    Ok(steps)
}

/// `path` split at the dots outside `[...]`: an object's name may hold dots
/// (`objects[Node/ip-10-0-1-2.ec2.internal]`).
fn split_outside_brackets(path: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (at, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                parts.push(&path[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&path[start..]);
    parts
}

fn selector(inside: &str) -> Result<Step, String> {
    if let Ok(index) = inside.parse::<usize>() {
        return Ok(Step::Index(index));
    }
    let parts: Vec<&str> = inside.split('/').collect();
    match parts.as_slice() {
        [kind, name] if !kind.is_empty() && !name.is_empty() => Ok(Step::Object {
            kind: (*kind).to_owned(),
            namespace: None,
            name: (*name).to_owned(),
        }),
        [kind, namespace, name]
            if !kind.is_empty() && !namespace.is_empty() && !name.is_empty() =>
        {
            Ok(Step::Object {
                kind: (*kind).to_owned(),
                namespace: Some((*namespace).to_owned()),
                name: (*name).to_owned(),
            })
        }
        _ => Err(format!(
            "[{inside}] is neither a position nor Kind/name or Kind/namespace/name"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCENARIO: &str = r#"
name: what-if
duration: 1h
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      disruption:
        budgets: [{nodes: "10%"}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: shop}
    spec: {replicas: 3}
"#;

    fn set(overrides: &[&str]) -> Result<Value, OverrideError> {
        let overrides: Vec<Override> = overrides
            .iter()
            .map(|text| Override::parse(text))
            .collect::<Result<_, _>>()?;
        let text = apply_all(SCENARIO, &overrides)?;
        Ok(serde_yaml::from_str(&text).expect("YAML back"))
    }

    #[test]
    fn objects_are_found_by_kind_and_name_and_values_are_yaml() {
        let document = set(&[
            "objects[NodePool/default].spec.disruption.budgets[0].nodes=50%",
            "objects[Deployment/shop/web].spec.replicas=10",
            "options.featureGates.SpotToSpotConsolidation=true",
            "duration=3h",
        ])
        .expect("applies");
        assert_eq!(
            document["objects"][0]["spec"]["disruption"]["budgets"][0]["nodes"],
            "50%"
        );
        assert_eq!(document["objects"][1]["spec"]["replicas"], 10);
        assert_eq!(
            document["options"]["featureGates"]["SpotToSpotConsolidation"],
            true
        );
        assert_eq!(document["duration"], "3h");
    }

    #[test]
    fn names_may_hold_dots() {
        let text =
            "name: n\nobjects:\n  - {kind: Node, metadata: {name: ip-10-0-1-2.ec2.internal}}\n";
        let set = Override::parse("objects[Node/ip-10-0-1-2.ec2.internal].spec.unschedulable=true")
            .expect("parses");
        let changed = apply_all(text, &[set]).expect("applies");
        let document: Value = serde_yaml::from_str(&changed).expect("YAML back");
        assert_eq!(document["objects"][0]["spec"]["unschedulable"], true);
    }

    #[test]
    fn a_whole_list_can_be_replaced() {
        let document = set(&[
            r#"objects[NodePool/default].spec.disruption.budgets=[{nodes: "1"}, {nodes: "0", schedule: "0 9 * * *", duration: 8h}]"#,
        ])
        .expect("applies");
        assert_eq!(
            document["objects"][0]["spec"]["disruption"]["budgets"],
            json!([{"nodes": "1"}, {"nodes": "0", "schedule": "0 9 * * *", "duration": "8h"}])
        );
    }

    #[test]
    fn what_is_not_there_is_an_error_naming_the_step() {
        let cases = [
            (
                "objects[NodePool/other].spec=1",
                "objects[NodePool/other]: no such object",
            ),
            (
                "objects[NodePool/default].spec.disruption.budgets[3].nodes=1",
                "budgets[3]: the list has 1 item(s)",
            ),
            ("name.first=x", "name: not a map"),
            ("duration[0]=1", "duration: not a list"),
        ];
        for (text, expected) in cases {
            let error = set(&[text]).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.starts_with(&format!("--set {text}")), "{error}");
        }
    }

    #[test]
    fn malformed_overrides_are_refused() {
        for text in [
            "no-equals",
            "=1",
            "a..b=1",
            "a[=1",
            "a[x]=1",
            "a[0]b=1",
            "a=[unclosed",
        ] {
            assert!(Override::parse(text).is_err(), "{text}");
        }
    }
}
