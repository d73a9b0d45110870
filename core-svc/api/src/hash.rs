//! The static hash of an object's drift-relevant fields, as upstream computes it in spirit
//! (`hashstructure` v2 with `SlicesAsSets`, `IgnoreZeroValue`, `ZeroNil`): the value is hashed
//! in a canonical form where
//!
//! - object keys are sorted, and members whose value is a zero value (`null`, `false`, `0`,
//!   `""`, `[]`, `{}`, after canonicalisation) are dropped, so leaving a field out and setting
//!   it to its zero value hash the same;
//! - arrays are sets: their elements are sorted by their canonical form, so reordering a list
//!   of taints or tags does not change the hash.
//!
//! The digest is FNV-1 64-bit over the canonical JSON text, written as a decimal `u64` like
//! upstream's annotations. It is *not* bit-compatible with upstream's hash (which walks Go
//! structs): a fleet launched by upstream Karpenter carries upstream's hash version, which
//! differs from ours, and the hash-versioning rule re-stamps such NodeClaims instead of
//! drifting them.
//!
//! Callers pass the fields that are static (selectors and behaviour fields removed) after
//! defaulting, so that an explicit default and an omitted field agree.

use core_domain::hash::fnv1_64;
use serde_json::Value;

/// The decimal FNV-1 64-bit hash of `value`'s canonical form.
pub fn static_hash(value: &Value) -> String {
    let mut text = String::new();
    if let Some(canonical) = canonical(value) {
        write_canonical(&canonical, &mut text);
    }
    fnv1_64(text.as_bytes()).to_string()
}

/// `value` with sorted keys, zero members dropped and arrays sorted; `None` when the whole
/// value is a zero value.
fn canonical(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Bool(b) => b.then_some(Value::Bool(true)),
        Value::Number(n) => (n.as_f64() != Some(0.0)).then(|| Value::Number(n.clone())),
        Value::String(s) => (!s.is_empty()).then(|| Value::String(s.clone())),
        Value::Array(items) => {
            let mut items: Vec<(String, Value)> = items
                .iter()
                .filter_map(canonical)
                .map(|item| {
                    let mut key = String::new();
                    write_canonical(&item, &mut key);
                    (key, item)
                })
                .collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            (!items.is_empty()).then(|| Value::Array(items.into_iter().map(|(_, v)| v).collect()))
        }
        Value::Object(members) => {
            // serde_json's map is ordered by key unless `preserve_order` is on; collecting into
            // a BTreeMap first makes the order explicit either way.
            let members: std::collections::BTreeMap<&String, Value> = members
                .iter()
                .filter_map(|(k, v)| canonical(v).map(|v| (k, v)))
                .collect();
            (!members.is_empty())
                .then(|| Value::Object(members.into_iter().map(|(k, v)| (k.clone(), v)).collect()))
        }
    }
}

/// Compact JSON with object members in key order (the canonical value's maps are built
/// sorted, but the text is written here so the order never depends on serde_json features).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(members) => {
            let mut members: Vec<(&String, &Value)> = members.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_and_list_order_do_not_matter() {
        let a = json!({"labels": {"a": "1", "b": "2"}, "taints": [{"key": "x"}, {"key": "y"}]});
        let b = json!({"taints": [{"key": "y"}, {"key": "x"}], "labels": {"b": "2", "a": "1"}});
        assert_eq!(static_hash(&a), static_hash(&b));
    }

    #[test]
    fn zero_values_hash_like_absent_fields() {
        let bare = json!({"userData": "x"});
        let zeros = json!({"userData": "x", "tags": {}, "detailedMonitoring": false,
                           "context": "", "blockDeviceMappings": [], "n": 0, "o": null});
        assert_eq!(static_hash(&bare), static_hash(&zeros));
    }

    #[test]
    fn any_static_change_changes_the_hash() {
        let base = json!({"userData": "x", "tags": {"team": "a"}});
        for changed in [
            json!({"userData": "y", "tags": {"team": "a"}}),
            json!({"userData": "x", "tags": {"team": "b"}}),
            json!({"userData": "x", "tags": {"team": "a", "cost": "c"}}),
            json!({"userData": "x", "tags": {"team": "a"}, "detailedMonitoring": true}),
        ] {
            assert_ne!(static_hash(&base), static_hash(&changed), "{changed}");
        }
    }

    #[test]
    fn the_hash_is_a_decimal_u64_and_stable() {
        // Pinned: FNV-1 of `{"a":1}`. A change of the canonical form changes every stored
        // hash, so it must come with a hash version bump; this test is the reminder.
        assert_eq!(static_hash(&json!({"a": 1})), "16951636251403815701");
    }
}
