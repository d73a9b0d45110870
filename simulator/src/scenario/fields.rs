//! Reading scenario YAML as JSON values field by field, each error naming the field's path
//! (`events[2].scale.replicas`). Apart from the sections' parsers so they read as what they check.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::duration::parse_go_duration;
use serde_json::{Map, Value};

use super::{Result, ScenarioError};

/// The JSON type of a value, for messages.
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A mapping being read: every key taken is remembered, and [`Fields::finish`] refuses the
/// others, so a misspelt field is an error rather than silently ignored.
pub(super) struct Fields<'a> {
    path: String,
    pub(super) map: &'a Map<String, Value>,
    taken: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    pub(super) fn of(path: &str, value: &'a Value) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Self {
                path: path.to_owned(),
                map,
                taken: Vec::new(),
            }),
            other => Err(ScenarioError::new(
                display_path(path),
                format!("expected a mapping, found {}", type_name(other)),
            )),
        }
    }

    pub(super) fn field(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub(super) fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.taken.push(key);
        self.map.get(key).filter(|value| !value.is_null())
    }

    pub(super) fn required(&mut self, key: &'static str) -> Result<&'a Value> {
        let field = self.field(key);
        self.get(key)
            .ok_or_else(|| ScenarioError::new(field, "required"))
    }

    pub(super) fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        let field = self.field(key);
        self.get(key).map(|value| string(&field, value)).transpose()
    }

    pub(super) fn required_string(&mut self, key: &'static str) -> Result<String> {
        let field = self.field(key);
        let value = string(&field, self.required(key)?)?;
        if value.is_empty() {
            return Err(ScenarioError::new(field, "may not be empty"));
        }
        Ok(value)
    }

    pub(super) fn duration(&mut self, key: &'static str) -> Result<Option<Duration>> {
        let field = self.field(key);
        self.get(key)
            .map(|value| duration(&field, value))
            .transpose()
    }

    pub(super) fn bool(&mut self, key: &'static str) -> Result<Option<bool>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected true or false, found {}", type_name(other)),
            )),
        }
    }

    pub(super) fn list(&mut self, key: &'static str) -> Result<Option<&'a Vec<Value>>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected a list, found {}", type_name(other)),
            )),
        }
    }

    pub(super) fn tags(&mut self, key: &'static str) -> Result<BTreeMap<String, String>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| Ok((k.clone(), string(&join(&field, k), v)?)))
                .collect(),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected a mapping of strings, found {}", type_name(other)),
            )),
        }
    }

    /// Refuses the keys nobody took.
    pub(super) fn finish(self) -> Result<()> {
        match self
            .map
            .keys()
            .find(|key| !self.taken.contains(&key.as_str()))
        {
            None => Ok(()),
            Some(key) => {
                let mut known: Vec<&str> = self.taken.clone();
                known.sort_unstable();
                known.dedup();
                Err(ScenarioError::new(
                    self.field(key),
                    format!("unknown field; known here: {}", known.join(", ")),
                ))
            }
        }
    }
}

pub(super) fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(document)".to_owned()
    } else {
        path.to_owned()
    }
}

pub(super) fn string(field: &str, value: &Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(ScenarioError::new(
            field,
            format!("expected a string, found {}", type_name(other)),
        )),
    }
}

pub(super) fn duration(field: &str, value: &Value) -> Result<Duration> {
    let text = match value {
        Value::String(s) => s.clone(),
        // A bare 0 is a valid Go duration; YAML reads it as a number.
        Value::Number(n) if n.as_u64() == Some(0) => "0".to_owned(),
        other => {
            return Err(ScenarioError::new(
                field,
                format!(
                    "expected a duration such as 90s, 5m or 1h30m, found {}",
                    type_name(other)
                ),
            ));
        }
    };
    parse_go_duration(&text).map_err(|error| ScenarioError::new(field, error.to_string()))
}

pub(super) fn timestamp(field: &str, value: &Value) -> Result<Timestamp> {
    let text = string(field, value)?;
    text.parse::<Timestamp>().map_err(|error| {
        ScenarioError::new(
            field,
            format!("{text:?} is not an RFC 3339 time such as 2026-01-01T00:00:00Z: {error}"),
        )
    })
}
