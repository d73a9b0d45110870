//! The `labelSelector` and `fieldSelector` query parameters of lists and watches, in the API
//! server's string form. Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
//! `!k`, joined by commas. Fields: `f=v`, `f==v`, `f!=v` on any field by its dotted path
//! (`metadata.name`, `spec.nodeName`, `status.phase`; an absent field is the empty string),
//! where the API server allows a few per kind. Without them, `kubectl get pods -l app=web`
//! would silently list every pod.

use serde_json::Value;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty one selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Term>);

/// Splits at the commas outside parentheses.
fn requirements(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0_i32;
    let mut start = 0;
    for (at, character) in text.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn values(list: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized list of values, found {list:?}"))?;
    Ok(inner
        .split(',')
        .map(|value| value.trim().to_owned())
        .collect())
}

fn key(text: &str) -> Result<String, String> {
    let key = text.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(format!("invalid label key {key:?}"));
    }
    Ok(key.to_owned())
}

impl LabelSelector {
    /// Parses the query parameter's value.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for requirement in requirements(text) {
            let requirement = requirement.trim();
            if requirement.is_empty() {
                continue;
            }
            let term = if let Some((k, v)) = requirement.split_once("!=") {
                Term::NotEquals(key(k)?, v.trim().to_owned())
            } else if let Some((k, v)) = requirement.split_once("==") {
                Term::Equals(key(k)?, v.trim().to_owned())
            } else if let Some((k, v)) = requirement.split_once('=') {
                Term::Equals(key(k)?, v.trim().to_owned())
            } else if let Some((k, list)) = requirement.split_once(" notin ") {
                Term::NotIn(key(k)?, values(list)?)
            } else if let Some((k, list)) = requirement.split_once(" in ") {
                Term::In(key(k)?, values(list)?)
            } else if let Some(k) = requirement.strip_prefix('!') {
                Term::DoesNotExist(key(k)?)
            } else {
                Term::Exists(key(requirement)?)
            };
            terms.push(term);
        }
        Ok(Self(terms))
    }

    /// Whether an object (JSON, its labels at `metadata.labels`) is selected.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let label = |key: &str| {
            object
                .pointer("/metadata/labels")
                .and_then(|labels| labels.get(key))
                .and_then(Value::as_str)
        };
        self.0.iter().all(|term| match term {
            Term::Equals(k, v) => label(k) == Some(v.as_str()),
            Term::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Term::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Term::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Term::Exists(k) => label(k).is_some(),
            Term::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// A parsed field selector; the empty one selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the query parameter's value.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for requirement in text.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = requirement.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = requirement.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = requirement.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid field selector requirement {requirement:?}"
                ));
            };
            terms.push((key(field)?, equal, value.trim().to_owned()));
        }
        Ok(Self(terms))
    }

    /// Whether an object (JSON) is selected.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

/// A list's or a watch's label and field selectors together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selectors {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Selectors {
    /// From the `labelSelector` and `fieldSelector` query parameters, either absent.
    pub(crate) fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        Ok(Self {
            labels: LabelSelector::parse(labels.unwrap_or_default())
                .map_err(|e| format!("labelSelector: {e}"))?,
            fields: FieldSelector::parse(fields.unwrap_or_default())
                .map_err(|e| format!("fieldSelector: {e}"))?,
        })
    }

    /// Whether an object (JSON) is selected by both.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_form_of_requirement_selects_as_the_api_server_does() {
        let web = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let bare = json!({"metadata": {}});
        let select =
            |text: &str, object: &Value| LabelSelector::parse(text).unwrap().matches(object);
        assert!(select("", &bare));
        assert!(select("app=web", &web));
        assert!(select("app==web,tier=front", &web));
        assert!(!select("app=web,tier=back", &web));
        assert!(select("app!=db", &web) && select("app!=db", &bare));
        assert!(select("tier in (back, front)", &web));
        assert!(!select("tier notin (front)", &web));
        assert!(select("tier notin (front)", &bare));
        assert!(select("app", &web) && !select("app", &bare));
        assert!(select("!app", &bare) && !select("!app", &web));
        assert!(select("app=web,tier in (front,back),!zone", &web));
        assert!(LabelSelector::parse("tier in front").is_err());
    }

    #[test]
    fn field_selectors_compare_fields_by_their_dotted_paths() {
        let pod = serde_json::json!({"metadata": {"name": "web-1", "namespace": "default"},
                                 "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}});
        let select = |text: &str| FieldSelector::parse(text).unwrap().matches(&pod);
        assert!(select(""));
        assert!(select("metadata.name=web-1"));
        assert!(select("metadata.name==web-1,metadata.namespace=default"));
        assert!(!select("metadata.name=web-2"));
        assert!(select("spec.nodeName!=node-b,status.phase=Running"));
        assert!(select("spec.schedulerName="), "an absent field is empty");
        assert!(FieldSelector::parse("metadata.name").is_err());
        let both = Selectors::parse(Some("app"), Some("metadata.name=web-1")).unwrap();
        assert!(!both.matches(&pod), "no label app");
    }
}
