//! Reading the EC2NodeClass JSON that core sends in every request (`google.protobuf.Struct`
//! turned into JSON), with an error that names the field that does not parse.

use crate::apis::EC2NodeClass;

/// A node class that cannot be read: the JSON path of the offending field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node_class: {field}: {message}")]
pub struct InvalidNodeClass {
    /// The JSON path of the field (`spec.kubelet.maxPods`), or `(root)`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidNodeClass {
    /// The error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Parses a whole EC2NodeClass object (`metadata`, `spec`, optionally `status`).
///
/// `apiVersion` and `kind` may be left out (core sends the object as read, which has them;
/// someone debugging with grpcurl may not bother). What the CRD's OpenAPI schema and CEL rules
/// reject is rejected here too, so a node class that the API server would not have admitted
/// is never launched from.
pub fn parse_node_class(value: &serde_json::Value) -> Result<EC2NodeClass, InvalidNodeClass> {
    let Some(object) = value.as_object() else {
        return Err(InvalidNodeClass::new("(root)", "expected a JSON object"));
    };
    if !object.contains_key("spec") {
        return Err(InvalidNodeClass::new("spec", "missing"));
    }
    let mut object = object.clone();
    object
        .entry("apiVersion")
        .or_insert_with(|| "karpenter.k8s.aws/v1".into());
    object
        .entry("kind")
        .or_insert_with(|| "EC2NodeClass".into());
    object
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    let node_class: EC2NodeClass =
        serde_path_to_error::deserialize(serde_json::Value::Object(object)).map_err(|e| {
            let path = karpenter_api::validation::deserialize_path(e.path());
            InvalidNodeClass::new(
                if path.is_empty() {
                    "(root)".to_owned()
                } else {
                    path
                },
                e.into_inner().to_string(),
            )
        })?;
    if let Err(errors) = node_class.validate() {
        // The first error's own path: its text cannot be split at `:`, which a map key in the
        // path may hold (`spec.tags["a:b"]`).
        let field = errors
            .first()
            .map_or("spec", |first| first.path.as_str())
            .to_owned();
        let message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(InvalidNodeClass::new(field, message));
    }
    Ok(node_class)
}

/// The node class's name, or `(unnamed)` for error messages.
pub fn name_of(node_class: &EC2NodeClass) -> &str {
    node_class.metadata.name.as_deref().unwrap_or("(unnamed)")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::node_class::fixture::node_class as valid;

    #[test]
    fn a_valid_node_class_parses_with_defaults() {
        let node_class = parse_node_class(&valid()).unwrap();
        assert_eq!(name_of(&node_class), "default");
        assert_eq!(node_class.spec.role.as_deref(), Some("KarpenterNodeRole"));
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let mut bad = valid();
        bad["spec"]["kubelet"] = json!({"maxPods": "many"});
        let err = parse_node_class(&bad).unwrap_err();
        assert_eq!(err.field, "spec.kubelet.maxPods", "{err}");
        let mut bad = valid();
        bad["spec"]["blockDeviceMappings"] = json!([{"ebs": {"volumeType": "floppy"}}]);
        let err = parse_node_class(&bad).unwrap_err();
        assert_eq!(
            err.field, "spec.blockDeviceMappings[0].ebs.volumeType",
            "{err}"
        );
    }

    #[test]
    fn what_the_crd_rejects_is_rejected_naming_the_field() {
        let mut bad = valid();
        bad["spec"]["subnetSelectorTerms"] = json!([]);
        let err = parse_node_class(&bad).unwrap_err();
        assert!(err.field.starts_with("spec.subnetSelectorTerms"), "{err}");
    }

    #[test]
    fn not_an_object_or_no_spec_is_refused() {
        assert_eq!(parse_node_class(&json!([])).unwrap_err().field, "(root)");
        assert_eq!(parse_node_class(&json!({})).unwrap_err().field, "spec");
    }
}
