//! The documents `core-svc convert` reads and writes: YAML streams (several documents, JSON
//! being YAML too) with `List`s expanded, checked against the v1 API's own rules once
//! converted, and written back as YAML documents or JSON (one object, or a `List`).

use serde::Deserialize as _;
use serde_json::{Value, json};

use karpenter_api::{LabelPolicy, NodeClaim, NodePool};

use super::object_name;

/// How converted objects are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// YAML documents separated by `---`.
    Yaml,
    /// One JSON object, or a `v1` `List` of them.
    Json,
}

/// The objects of `text` (from `source`, for messages), in order: every YAML document, the
/// items of a `List`, empty documents skipped.
pub fn parse(source: &str, text: &str) -> Result<Vec<Value>, String> {
    let mut objects = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|e| format!("{source}: document {}: {e}", index + 1))?;
        match value {
            Value::Null => {}
            Value::Object(_) if value["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                match value.get("items") {
                    Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                    Some(Value::Null) | None => {}
                    Some(_) => {
                        return Err(format!(
                            "{source}: document {}: a List's items must be a list",
                            index + 1
                        ));
                    }
                }
            }
            Value::Object(_) => objects.push(value),
            _ => {
                return Err(format!(
                    "{source}: document {}: not an object (apiVersion, kind, ...)",
                    index + 1
                ));
            }
        }
    }
    Ok(objects)
}

/// Checks a converted `karpenter.sh/v1` NodePool or NodeClaim against the API's own rules
/// (the same as the CRD's CEL), with karpenter.sh's label rules: the cloud provider's
/// restricted labels are its to check when the objects are applied.
pub fn validate(object: &Value) -> Result<(), String> {
    if object["apiVersion"] != "karpenter.sh/v1" {
        return Ok(());
    }
    let policy = LabelPolicy::default();
    let name = object_name(object);
    let errors = match object["kind"].as_str() {
        Some("NodePool") => serde_json::from_value::<NodePool>(object.clone())
            .map_err(|e| format!("{name}: not a valid v1 NodePool: {e}"))?
            .validate(&policy),
        Some("NodeClaim") => serde_json::from_value::<NodeClaim>(object.clone())
            .map_err(|e| format!("{name}: not a valid v1 NodeClaim: {e}"))?
            .validate(&policy),
        _ => return Ok(()),
    };
    errors.map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "{name}: the v1 object fails validation: {}",
            errors.join("; ")
        )
    })
}

/// `objects` written as `format`.
pub fn render(objects: &[Value], format: Format) -> Result<String, String> {
    match format {
        Format::Yaml => {
            let mut out = String::new();
            for object in objects {
                out.push_str("---\n");
                out.push_str(&serde_yaml::to_string(object).map_err(|e| e.to_string())?);
            }
            Ok(out)
        }
        Format::Json => {
            let value = match objects {
                [one] => one.clone(),
                many => json!({"apiVersion": "v1", "kind": "List", "items": many}),
            };
            serde_json::to_string_pretty(&value)
                .map(|text| text + "\n")
                .map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_lists_are_read_in_order() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
                    {\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\
                    {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"b\"}}]}\n";
        let objects = parse("in.yaml", text).unwrap();
        let names: Vec<&str> = objects
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn malformed_documents_name_the_source_and_document() {
        let err = parse("in.yaml", "kind: A\n---\nkind: [unclosed\n").unwrap_err();
        assert!(err.starts_with("in.yaml: document 2: "), "{err}");
        let err = parse("in.yaml", "- a\n").unwrap_err();
        assert!(err.contains("not an object"), "{err}");
    }

    #[test]
    fn a_v1_node_pool_is_checked_with_the_api_rules() {
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                "requirements": [],
            }}},
        });
        validate(&pool).unwrap();
        pool["spec"]["template"]["spec"]["requirements"] =
            json!([{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}]);
        let err = validate(&pool).unwrap_err();
        assert!(
            err.starts_with("NodePool/p: the v1 object fails validation: "),
            "{err}"
        );
    }

    #[test]
    fn json_output_is_one_object_or_a_list() {
        let a = json!({"kind": "A"});
        let one: Value =
            serde_json::from_str(&render(std::slice::from_ref(&a), Format::Json).unwrap()).unwrap();
        assert_eq!(one, a);
        let two: Value =
            serde_json::from_str(&render(&[a.clone(), a.clone()], Format::Json).unwrap()).unwrap();
        assert_eq!(two["kind"], "List");
        assert_eq!(render(&[a], Format::Yaml).unwrap(), "---\nkind: A\n");
    }
}
