//! `google.protobuf.Struct` <-> JSON. Node classes and NodePools travel as Structs (so plugins
//! need no Kubernetes types), and both sides read them as JSON.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

/// A `Struct` as a JSON object.
pub fn struct_to_json(value: Struct) -> serde_json::Value {
    serde_json::Value::Object(
        value
            .fields
            .into_iter()
            .map(|(key, value)| (key, value_to_json(value)))
            .collect(),
    )
}

/// A `Value` as JSON. Struct numbers are doubles; whole ones within the exactly
/// representable range come back as JSON integers, so fields typed as integers (`maxPods`)
/// parse.
pub fn value_to_json(value: Value) -> serde_json::Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::NumberValue(n)) => {
            if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
                serde_json::Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, Into::into)
            }
        }
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(value_to_json).collect())
        }
    }
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
    fn only_objects_are_structs() {
        assert!(json_to_struct(&json!([1])).is_none());
    }
}
