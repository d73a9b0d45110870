//! `google.protobuf.Struct` <-> JSON. Node classes and NodePools travel as Structs (so plugins
//! need no Kubernetes types), and both sides read them as JSON.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

/// A `Struct` as a JSON object. Struct numbers are doubles; whole ones within the exactly
/// representable range come back as JSON integers, so fields typed as integers (`maxPods`)
/// parse. A number JSON cannot hold (NaN, infinity) becomes `null`.
pub fn struct_to_json(value: Struct) -> serde_json::Value {
    serde_json::Value::Object(struct_members(value, Numbers::NullIfNotJson).unwrap_or_default())
}

/// A `Value` as JSON, as [`struct_to_json`] converts members.
pub fn value_to_json(value: Value) -> serde_json::Value {
    convert(value, Numbers::NullIfNotJson).unwrap_or_default()
}

/// Like [`struct_to_json`], but a number JSON cannot hold refuses the whole value with the
/// path of the member (`{path}.a.b[2]: NaN is not a JSON number`): for answers that are about
/// to be published, where `null` would silently drop a field.
pub fn try_struct_to_json(
    value: Struct,
    path: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    struct_members(value, Numbers::Refuse).map_err(|refused| refused.message(path))
}

/// What to do with a number JSON cannot hold.
#[derive(Clone, Copy)]
enum Numbers {
    NullIfNotJson,
    Refuse,
}

/// A number refused, with the path to it from the innermost member out: the path is only
/// spelled out when a conversion fails, so converting (every IsDrifted converts a node class)
/// formats nothing.
#[derive(Debug)]
struct Refused {
    number: f64,
    /// `.key` and `[index]` segments, innermost first.
    segments: Vec<String>,
}

impl Refused {
    fn within(mut self, segment: String) -> Self {
        self.segments.push(segment);
        self
    }

    fn message(self, path: &str) -> String {
        let inner: String = self.segments.iter().rev().map(String::as_str).collect();
        format!("{path}{inner}: {} is not a JSON number", self.number)
    }
}

fn struct_members(
    value: Struct,
    numbers: Numbers,
) -> Result<serde_json::Map<String, serde_json::Value>, Refused> {
    value
        .fields
        .into_iter()
        .map(|(key, value)| match convert(value, numbers) {
            Ok(json) => Ok((key, json)),
            Err(refused) => Err(refused.within(format!(".{key}"))),
        })
        .collect()
}

fn convert(value: Value, numbers: Numbers) -> Result<serde_json::Value, Refused> {
    /// The largest integer a double holds exactly.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    Ok(match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        // Exact: a whole double of at most 2^53 is an i64 without rounding.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() <= EXACT => {
            serde_json::Value::from(n as i64)
        }
        Some(Kind::NumberValue(n)) => match (serde_json::Number::from_f64(n), numbers) {
            (Some(number), _) => serde_json::Value::Number(number),
            (None, Numbers::NullIfNotJson) => serde_json::Value::Null,
            (None, Numbers::Refuse) => {
                return Err(Refused {
                    number: n,
                    segments: Vec::new(),
                });
            }
        },
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(struct_members(s, numbers)?),
        Some(Kind::ListValue(list)) => serde_json::Value::Array(
            list.values
                .into_iter()
                .enumerate()
                .map(|(i, v)| convert(v, numbers).map_err(|r| r.within(format!("[{i}]"))))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// A JSON object as a `Struct`; anything else is `None` (a Struct is always an object).
pub fn json_to_struct(value: &serde_json::Value) -> Option<Struct> {
    match value {
        serde_json::Value::Object(members) => Some(Struct {
            fields: members
                .iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect(),
        }),
        _ => None,
    }
}

/// JSON as a `Value`. Numbers become doubles, as the Struct format has only those.
pub fn json_to_value(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        serde_json::Value::Object(_) => match json_to_struct(value) {
            Some(s) => Kind::StructValue(s),
            None => Kind::NullValue(0),
        },
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_survives_the_round_trip() {
        let value = json!({"a": 17, "b": 0.5, "c": null, "d": true, "e": ["x", {"f": -3}]});
        let back = struct_to_json(json_to_struct(&value).unwrap());
        assert_eq!(back, value);
    }

    #[test]
    fn numbers_json_cannot_hold_are_null_or_refused_with_their_path() {
        let value = json_to_struct(&json!({"a": {"b": [1, 2]}})).unwrap();
        let mut nan = value.clone();
        if let Some(Kind::StructValue(a)) = nan.fields.get_mut("a").and_then(|v| v.kind.as_mut())
            && let Some(Kind::ListValue(list)) = a.fields.get_mut("b").and_then(|v| v.kind.as_mut())
        {
            list.values[1] = Value {
                kind: Some(Kind::NumberValue(f64::NAN)),
            };
        }
        assert_eq!(struct_to_json(nan.clone()), json!({"a": {"b": [1, null]}}));
        assert_eq!(
            try_struct_to_json(nan, "status").unwrap_err(),
            "status.a.b[1]: NaN is not a JSON number"
        );
        assert_eq!(
            serde_json::Value::Object(try_struct_to_json(value, "status").unwrap()),
            json!({"a": {"b": [1, 2]}})
        );
    }

    #[test]
    fn only_objects_are_structs() {
        assert!(json_to_struct(&json!([1])).is_none());
    }
}
