//! Dump files read into objects: `kubectl get ... -o yaml` (a `kind: List` with `items`),
//! `-o json`, multi-document YAML, or plain single objects, each object remembered with the
//! file and the place in it it came from.

use serde::Deserialize as _;
use serde_json::Value;

use super::{DumpError, Source};

/// One object of a dump, with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    /// The file.
    pub file: String,
    /// Where in the file: `items[3]`, `document 2`, or empty for a file holding one object.
    pub place: String,
    /// The object.
    pub object: Value,
}

/// Every object of `source`, in the file's order; `List`s are opened.
pub(super) fn objects(source: &Source) -> Result<Vec<Found>, DumpError> {
    let mut found = Vec::new();
    let documents: Vec<Value> = documents(source)?;
    let several = documents.len() > 1;
    for (d, document) in documents.into_iter().enumerate() {
        let place = if several {
            format!("document {}", d + 1)
        } else {
            String::new()
        };
        match document {
            Value::Null => {}
            Value::Object(ref map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|kind| kind.ends_with("List"))
                    && map.contains_key("items") =>
            {
                let Some(items) = map.get("items").and_then(Value::as_array) else {
                    return Err(DumpError::Document {
                        file: source.name.clone(),
                        place: join(&place, "items"),
                        message: "expected a list".to_owned(),
                    });
                };
                for (i, item) in items.iter().enumerate() {
                    found.push(Found {
                        file: source.name.clone(),
                        place: join(&place, &format!("items[{i}]")),
                        object: item.clone(),
                    });
                }
            }
            Value::Object(_) => found.push(Found {
                file: source.name.clone(),
                place,
                object: document,
            }),
            other => {
                return Err(DumpError::Document {
                    file: source.name.clone(),
                    place: if place.is_empty() {
                        "(document)".to_owned()
                    } else {
                        place
                    },
                    message: format!(
                        "expected a Kubernetes object or a List, found {}",
                        match other {
                            Value::Array(_) => "a list",
                            Value::String(_) => "a string",
                            Value::Number(_) => "a number",
                            _ => "a boolean",
                        }
                    ),
                });
            }
        }
    }
    Ok(found)
}

fn join(place: &str, inner: &str) -> String {
    if place.is_empty() {
        inner.to_owned()
    } else {
        format!("{place}, {inner}")
    }
}

/// The file's documents as JSON values (JSON is read as the YAML it also is).
fn documents(source: &Source) -> Result<Vec<Value>, DumpError> {
    let mut documents = Vec::new();
    for (d, document) in serde_yaml::Deserializer::from_str(&source.text).enumerate() {
        let syntax = |error: serde_yaml::Error| {
            let place = match error.location() {
                Some(location) => format!("line {}, column {}", location.line(), location.column()),
                None => format!("document {}", d + 1),
            };
            DumpError::Document {
                file: source.name.clone(),
                place,
                message: format!("not valid YAML or JSON: {error}"),
            }
        };
        let mut yaml = serde_yaml::Value::deserialize(document).map_err(syntax)?;
        yaml.apply_merge().map_err(syntax)?;
        let value = serde_json::to_value(&yaml).map_err(|error| DumpError::Document {
            file: source.name.clone(),
            place: format!("document {}", d + 1),
            message: format!("not representable as JSON (keys must be strings): {error}"),
        })?;
        documents.push(value);
    }
    Ok(documents)
}
