//! What converting an object from an older API version means for its metadata, the same for
//! every API group: `core-svc convert` (karpenter.sh kinds) and the plugins' ConvertNodeClass
//! (their node class kinds) write objects that are applied as new ones.

use serde_json::{Map, Value};

/// What the API server fills in on an object, dropped from a converted one: taken from
/// `kubectl get -o yaml`, they would make its apply a create refused for its
/// `resourceVersion`, or an update of a version long gone.
pub const SERVER_METADATA: [&str; 6] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

/// kubectl's record of the last apply, which describes the old object.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops [`SERVER_METADATA`] and [`LAST_APPLIED`] from `object`'s metadata (and the
/// annotations when nothing else is left in them).
pub fn without_server_metadata(object: &mut Map<String, Value>) {
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        for field in SERVER_METADATA {
            metadata.remove(field);
        }
        if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn server_fields_and_the_last_apply_are_dropped_and_the_rest_kept() {
        let mut object = json!({"metadata": {
            "name": "a", "uid": "u", "resourceVersion": "7", "generation": 2,
            "creationTimestamp": "2023-01-01T00:00:00Z", "managedFields": [], "selfLink": "/x",
            "labels": {"team": "a"},
            "annotations": {LAST_APPLIED: "{}"},
        }});
        without_server_metadata(object.as_object_mut().unwrap());
        assert_eq!(
            object,
            json!({"metadata": {"name": "a", "labels": {"team": "a"}}})
        );

        let mut kept = json!({"metadata": {"annotations": {LAST_APPLIED: "{}", "team": "a"}}});
        without_server_metadata(kept.as_object_mut().unwrap());
        assert_eq!(kept, json!({"metadata": {"annotations": {"team": "a"}}}));
    }
}
