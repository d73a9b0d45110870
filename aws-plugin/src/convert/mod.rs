//! Node classes of the AWS provider's older APIs to `karpenter.k8s.aws/v1` EC2NodeClass: what
//! the ConvertNodeClass RPC answers, for `core-svc convert`.
//!
//! - [`v1alpha1`]: a v1alpha1 `AWSNodeTemplate`, or the inline `spec.provider` of a v1alpha5
//!   Provisioner (the same fields), by the v1beta1 change list: selectors into ORed selector
//!   terms, the `aws-ids`/`aws::ids`, `aws::name` and `aws::owners` keys into term fields,
//!   launch templates removed, the instance profile from global settings into the class;
//!   then v1's changes.
//! - [`v1beta1`]: a v1beta1 `EC2NodeClass`, by upstream's conversion webhook
//!   (aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass_conversion.go`): `amiFamily`
//!   without `amiSelectorTerms` becomes an `alias`, Ubuntu an AL2 class with Ubuntu's images.
//! - [`settings`]: what became of each `aws.*` key of the old global settings ConfigMap.
//!
//! Every conversion is pure: it reads nothing from AWS. Where the output cannot mean exactly
//! what the input meant, it is still the most faithful object, and a [`Warning`] names the
//! input field, what changed and what the user must decide. The output is checked by the same
//! rules as the CRD's ([`crate::node_class::parse_node_class`]) before it is returned.

pub mod settings;
pub mod v1alpha1;
pub mod v1beta1;

use std::collections::BTreeMap;

use karpenter_api::conversion::without_server_metadata;
use serde_json::{Map, Value};

use crate::apis::ec2nodeclass::RESTRICTED_TAGS;
use crate::node_class::{InvalidNodeClass, parse_node_class};

/// The API version every node class converts to.
pub const API_VERSION: &str = "karpenter.k8s.aws/v1";
/// The kind every node class converts to.
pub const KIND: &str = "EC2NodeClass";
/// The v1alpha5-era API of the node template.
pub const V1ALPHA1: &str = "karpenter.k8s.aws/v1alpha1";
/// The v1beta1 API.
pub const V1BETA1: &str = "karpenter.k8s.aws/v1beta1";
/// The ConfigMap that held the global settings before v1beta1.
pub const GLOBAL_SETTINGS: &str = "karpenter-global-settings";

/// The hop limit v1beta1 and earlier defaulted to; v1 defaults to 1.
pub const OLD_DEFAULT_HOP_LIMIT: i64 = 2;

/// Something the output cannot mean exactly as the input did, or that the user must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The input field it is about (`spec.launchTemplate`).
    pub path: String,
    /// What changed in meaning and what the user must decide.
    pub message: String,
}

/// One converted object and what to say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The v1 object (or the input, for a current object or the settings ConfigMap).
    pub object: Value,
    /// What the user should know.
    pub warnings: Vec<Warning>,
}

/// What a conversion may draw on besides the object.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The cluster's name, when known.
    pub cluster_name: Option<&'a str>,
    /// The cluster's Kubernetes version (`1.33`), when known.
    pub kubernetes_version: Option<&'a str>,
    /// The old global settings ConfigMap's data, when the input held it.
    pub global_settings: Option<&'a BTreeMap<String, String>>,
    /// The kubelet settings of the NodePools naming this node class, when they agree.
    pub kubelet: Option<&'a Map<String, Value>>,
}

impl Context<'_> {
    /// The global setting `key`, when set and not empty.
    fn setting(&self, key: &str) -> Option<&str> {
        self.global_settings
            .and_then(|settings| settings.get(key))
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }
}

/// What to convert.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// An object of the `karpenter.k8s.aws` group, or the global settings ConfigMap.
    Object(Map<String, Value>),
    /// A v1alpha5 Provisioner's `spec.provider`, to become the node class `name`.
    InlineProvider {
        /// The Provisioner's name.
        name: String,
        /// The provider block.
        provider: Map<String, Value>,
    },
}

/// Collects the warnings of one conversion.
#[derive(Debug, Default)]
pub struct Notes {
    warnings: Vec<Warning>,
}

impl Notes {
    /// Records a warning on the input field `path`.
    pub fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// Converts `source`; `Ok(None)` when it is not a kind this plugin converts.
pub fn convert(
    source: Source,
    context: &Context<'_>,
) -> Result<Option<Converted>, InvalidNodeClass> {
    let mut notes = Notes::default();
    let object = match source {
        Source::InlineProvider { name, provider } => {
            let spec =
                v1alpha1::node_template_spec(provider, "spec.provider", context, &mut notes)?;
            let mut metadata = Map::new();
            metadata.insert("name".to_owned(), Value::String(name));
            node_class(metadata, spec, context, &mut notes)?
        }
        Source::Object(mut object) => {
            let api_version = string_at(&object, "apiVersion");
            let kind = string_at(&object, "kind");
            match (api_version.as_str(), kind.as_str()) {
                (V1ALPHA1, "AWSNodeTemplate") => {
                    let (metadata, spec) = metadata_and_spec(&mut object)?;
                    let spec = v1alpha1::node_template_spec(spec, "spec", context, &mut notes)?;
                    node_class(metadata, spec, context, &mut notes)?
                }
                (V1BETA1, KIND) => {
                    let (metadata, spec) = metadata_and_spec(&mut object)?;
                    let spec = v1beta1::node_class_spec(spec, context, &mut notes)?;
                    node_class(metadata, spec, context, &mut notes)?
                }
                (API_VERSION, KIND) => {
                    let (metadata, spec) = metadata_and_spec(&mut object)?;
                    node_class(metadata, spec, context, &mut notes)?
                }
                ("v1", "ConfigMap") if is_global_settings(&object) => {
                    settings::explain(&object, &mut notes);
                    Value::Object(object)
                }
                _ => return Ok(None),
            }
        }
    };
    Ok(Some(Converted {
        object,
        warnings: notes.warnings,
    }))
}

/// Whether `object` (a ConfigMap) is the old global settings.
fn is_global_settings(object: &Map<String, Value>) -> bool {
    object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        == Some(GLOBAL_SETTINGS)
}

/// The string at `key`, or empty.
fn string_at(object: &Map<String, Value>, key: &str) -> String {
    object
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// An object's metadata and spec.
type MetadataAndSpec = (Map<String, Value>, Map<String, Value>);

/// Takes the object's metadata (without what the server filled in, or finalizers the new
/// object gets from its own controller) and spec; the status is dropped, as the plugin
/// resolves it again.
fn metadata_and_spec(object: &mut Map<String, Value>) -> Result<MetadataAndSpec, InvalidNodeClass> {
    without_server_metadata(object);
    let mut metadata = match object.remove("metadata") {
        Some(Value::Object(metadata)) => metadata,
        None => Map::new(),
        Some(_) => return Err(InvalidNodeClass::new("metadata", "expected an object")),
    };
    metadata.remove("finalizers");
    metadata.remove("ownerReferences");
    let spec = match object.remove("spec") {
        Some(Value::Object(spec)) => spec,
        None => return Err(InvalidNodeClass::new("spec", "missing")),
        Some(_) => return Err(InvalidNodeClass::new("spec", "expected an object")),
    };
    Ok((metadata, spec))
}

/// The v1 object from its metadata and converted spec, with the NodePools' kubelet settings
/// moved in, checked by the CRD's rules.
fn node_class(
    metadata: Map<String, Value>,
    mut spec: Map<String, Value>,
    context: &Context<'_>,
    notes: &mut Notes,
) -> Result<Value, InvalidNodeClass> {
    if let Some(kubelet) = context.kubelet {
        kubelet_from_node_pools(&mut spec, kubelet, notes);
    }
    let mut object = Map::new();
    object.insert("apiVersion".to_owned(), API_VERSION.into());
    object.insert("kind".to_owned(), KIND.into());
    object.insert("metadata".to_owned(), Value::Object(metadata));
    object.insert("spec".to_owned(), Value::Object(spec));
    let object = Value::Object(object);
    parse_node_class(&object)?;
    Ok(object)
}

/// "kubelet (moved) from the NodePool to the EC2NodeClass" (v1): the settings the NodePools
/// naming this class had become the class's own, unless the class already sets its own, which
/// then win (and the difference is said).
pub fn kubelet_from_node_pools(
    spec: &mut Map<String, Value>,
    kubelet: &Map<String, Value>,
    notes: &mut Notes,
) {
    match spec.get("kubelet") {
        None => {
            spec.insert("kubelet".to_owned(), Value::Object(kubelet.clone()));
        }
        Some(Value::Object(own)) if own == kubelet => {}
        Some(_) => notes.warn(
            "spec.kubelet",
            "the NodePools naming this class set other kubelet settings than the class's own: \
             the class's are kept; the NodePools' are in their \
             compatibility.karpenter.sh/v1beta1-kubelet-conversion annotation, which this \
             plugin does not read",
        ),
    }
}

/// v1 defaults `metadataOptions.httpPutResponseHopLimit` to 1 where every older API defaulted
/// to 2: a class that did not set it keeps 2, so pods that reach the instance metadata
/// service through the node keep reaching it.
pub fn keep_old_hop_limit(spec: &mut Map<String, Value>) {
    let options = spec
        .entry("metadataOptions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(options) = options {
        options
            .entry("httpPutResponseHopLimit")
            .or_insert(OLD_DEFAULT_HOP_LIMIT.into());
    }
}

/// Tags that v1 refuses because Karpenter sets them itself are dropped, each said.
pub fn drop_restricted_tags(spec: &mut Map<String, Value>, path: &str, notes: &mut Notes) {
    let Some(Value::Object(tags)) = spec.get_mut("tags") else {
        return;
    };
    let restricted: Vec<String> = tags
        .keys()
        .filter(|key| {
            RESTRICTED_TAGS.iter().any(|(tag, prefix)| {
                if *prefix {
                    key.starts_with(tag)
                } else {
                    key.as_str() == *tag
                }
            })
        })
        .cloned()
        .collect();
    for key in restricted {
        tags.remove(&key);
        notes.warn(
            format!("{path}.{key}"),
            "Karpenter sets this tag itself and v1 refuses it in spec.tags: dropped",
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    pub(super) fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    /// A current EC2NodeClass is returned as it is (without what the server filled in), and
    /// other kinds are not this plugin's to convert.
    #[test]
    fn a_current_class_is_kept_and_other_kinds_are_unknown() {
        let current = json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "default", "resourceVersion": "9"},
            "spec": {
                "role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            },
            "status": {"conditions": []},
        });
        let converted = convert(Source::Object(object(current.clone())), &Context::default())
            .unwrap()
            .unwrap();
        let mut expected = current;
        expected["metadata"] = json!({"name": "default"});
        expected.as_object_mut().unwrap().remove("status");
        assert_eq!(converted.object, expected);
        assert!(converted.warnings.is_empty());

        let other = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "Other", "spec": {}});
        assert_eq!(
            convert(Source::Object(object(other)), &Context::default()).unwrap(),
            None
        );
    }

    /// The output is checked by the CRD's rules: a class v1 would refuse is an error naming
    /// the field, never output.
    #[test]
    fn an_output_v1_refuses_is_an_error() {
        let invalid = json!({
            "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "x"},
            "spec": {"role": "r", "instanceProfile": "p",
                     "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                     "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
        });
        let error = convert(Source::Object(object(invalid)), &Context::default()).unwrap_err();
        assert!(error.message.contains("role"), "{error}");
    }

    /// "kubelet (moves) from the NodePool to the EC2NodeClass": the NodePools' settings fill
    /// a class without its own; a class with other settings keeps them, said.
    #[test]
    fn the_node_pools_kubelet_moves_into_the_class() {
        let kubelet = object(json!({"maxPods": 110}));
        let mut spec = object(json!({}));
        let mut notes = Notes::default();
        kubelet_from_node_pools(&mut spec, &kubelet, &mut notes);
        assert_eq!(spec["kubelet"], json!({"maxPods": 110}));
        assert!(notes.warnings.is_empty());

        let mut own = object(json!({"kubelet": {"maxPods": 50}}));
        kubelet_from_node_pools(&mut own, &kubelet, &mut notes);
        assert_eq!(own["kubelet"], json!({"maxPods": 50}));
        assert_eq!(notes.warnings[0].path, "spec.kubelet");
    }

    /// v1 defaults the hop limit to 1, its predecessors to 2: an unset one is kept at 2; a
    /// set one is kept as set.
    #[test]
    fn an_unset_hop_limit_keeps_the_old_default() {
        let mut spec = object(json!({}));
        keep_old_hop_limit(&mut spec);
        assert_eq!(
            spec["metadataOptions"],
            json!({"httpPutResponseHopLimit": 2})
        );
        let mut set = object(json!({"metadataOptions": {"httpPutResponseHopLimit": 1}}));
        keep_old_hop_limit(&mut set);
        assert_eq!(set["metadataOptions"]["httpPutResponseHopLimit"], 1);
    }

    #[test]
    fn restricted_tags_are_dropped_and_said() {
        let mut spec = object(json!({"tags": {
            "team": "a", "kubernetes.io/cluster/demo": "owned", "karpenter.sh/nodepool": "x",
        }}));
        let mut notes = Notes::default();
        drop_restricted_tags(&mut spec, "spec.tags", &mut notes);
        assert_eq!(spec["tags"], json!({"team": "a"}));
        let paths: Vec<&str> = notes.warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.tags.karpenter.sh/nodepool",
                "spec.tags.kubernetes.io/cluster/demo"
            ]
        );
    }
}
