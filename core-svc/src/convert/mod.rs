//! `core-svc convert`: older Karpenter manifests to `karpenter.sh/v1`, every step that cannot
//! mean exactly what the input meant said as a [`Warning`] naming the object and the field.
//!
//! What it converts (each rule is a small function in [`nodepool`] or [`workloads`], with a
//! test quoting it):
//!
//! - `karpenter.sh/v1alpha5` Provisioner → NodePool, the v1beta1 change list (node fields
//!   under `template`, behaviour under `disruption`, `ttlSecondsAfterEmpty` and consolidation
//!   into `consolidationPolicy`/`consolidateAfter`, `ttlSecondsUntilExpired` into
//!   `expireAfter`, `providerRef` into `nodeClassRef`), then v1's changes;
//! - `karpenter.sh/v1beta1` NodePool and NodeClaim → v1 (`WhenUnderutilized` →
//!   `WhenEmptyOrUnderutilized`, `expireAfter` into the template, `nodeClassRef` with group
//!   and kind, `kubelet` out of the NodePool);
//! - the `karpenter.sh/do-not-evict` and `karpenter.sh/do-not-consolidate` annotations →
//!   `karpenter.sh/do-not-disrupt`, on Pods, Nodes and the pod templates of workloads.
//!
//! The node class kinds (`AWSNodeTemplate`, a v1beta1 `EC2NodeClass`, a Provisioner's inline
//! `spec.provider`) belong to the cloud provider: [`provider`] asks the plugin to convert them
//! (its optional ConvertNodeClass RPC, [`plugin`]), with the NodePools' kubelet settings that
//! v1 moved into the node class and the old global settings. Without a plugin they pass
//! through, each named in a warning so nobody takes it for converted. Everything else passes
//! through untouched.
//!
//! Conversion is pure but for the plugin's answers: the command line ([`crate::cli`]) reads
//! the documents, calls [`provider::convert_all`], validates the v1 objects with the API's own
//! rules and prints them only when every document converted.

pub mod documents;
pub mod nodepool;
pub mod plugin;
pub mod provider;
pub mod settings;
pub mod workloads;

use serde_json::{Map, Value};

/// Something the output cannot mean exactly as the input did, or that the user must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// `Kind/name` of the object, as the input names it.
    pub object: String,
    /// The field of the input it is about (`spec.ttlSecondsAfterEmpty`).
    pub path: String,
    /// What changed in meaning, and what the user must decide.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.object, self.path, self.message)
    }
}

/// A document that cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {path}: {message}")]
pub struct ConvertError {
    /// `Kind/name` of the object.
    pub object: String,
    /// The field at fault.
    pub path: String,
    /// Why.
    pub message: String,
}

/// One converted object and what to say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The object as v1 (or untouched).
    pub object: Value,
    /// What the user should know.
    pub warnings: Vec<Warning>,
    /// A Provisioner's inline `spec.provider`, which must become the node class its NodePool
    /// names.
    pub inline_provider: Option<Value>,
}

/// Collects the warnings of one object.
#[derive(Debug)]
pub struct Notes {
    object: String,
    warnings: Vec<Warning>,
}

impl Notes {
    /// Collects the warnings of `object` (`Kind/name`).
    pub fn new(object: String) -> Self {
        Self {
            object,
            warnings: Vec::new(),
        }
    }

    /// Records a warning on `path`.
    pub fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            object: self.object.clone(),
            path: path.to_owned(),
            message: message.into(),
        });
    }

    /// An error on `path` of this object.
    pub fn error(&self, path: &str, message: impl Into<String>) -> ConvertError {
        ConvertError {
            object: self.object.clone(),
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// The provider kinds of Karpenter's older APIs, by API version and kind: without a plugin to
/// convert them, each is named in a warning.
const PROVIDER_KINDS: [(&str, &str); 2] = [
    ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"),
    ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"),
];

/// `Kind/name` (or `Kind/namespace/name`) of an object, for messages.
pub fn object_name(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("(no kind)");
    let name = object["metadata"]["name"].as_str().unwrap_or("(no name)");
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// Converts one object (not a `List`: the caller expands those).
pub fn convert(object: Value) -> Result<Converted, ConvertError> {
    let mut notes = Notes::new(object_name(&object));
    let Value::Object(mut map) = object else {
        return Err(notes.error("(root)", "a document must be an object"));
    };
    let api_version = string_at(&map, "apiVersion").unwrap_or_default();
    let kind = string_at(&map, "kind").unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(notes.error(
            if api_version.is_empty() {
                "apiVersion"
            } else {
                "kind"
            },
            "missing: every document needs apiVersion and kind",
        ));
    }
    let mut inline_provider = None;
    let object = match (api_version.as_str(), kind.as_str()) {
        ("karpenter.sh/v1alpha5", "Provisioner") => {
            let (node_pool, provider) = nodepool::provisioner_to_node_pool(map, &mut notes)?;
            inline_provider = provider;
            node_pool
        }
        ("karpenter.sh/v1beta1", "NodePool") => nodepool::node_pool_v1beta1(map, &mut notes)?,
        ("karpenter.sh/v1beta1", "NodeClaim") => nodepool::node_claim_v1beta1(map, &mut notes)?,
        ("karpenter.sh/v1alpha5", "Machine") => {
            notes.warn(
                "(root)",
                "Machines are Karpenter's own objects, not converted: once the converted \
                 NodePools are applied and the old Karpenter is gone, delete them",
            );
            Value::Object(map)
        }
        // Already v1: nothing to do.
        ("karpenter.sh/v1", _) => Value::Object(map),
        (group_version, kind) if group_version.starts_with("karpenter.sh/") => {
            return Err(notes.error(
                "apiVersion",
                format!("{group_version} {kind} is not a Karpenter kind this tool knows"),
            ));
        }
        (group_version, kind) if PROVIDER_KINDS.contains(&(group_version, kind)) => {
            notes.warn(
                "(root)",
                format!(
                    "{group_version} {kind} belongs to the cloud provider and is passed through \
                     unconverted: give --plugin-endpoint for the plugin to convert it, or \
                     convert it to karpenter.k8s.aws/v1 EC2NodeClass by hand"
                ),
            );
            Value::Object(map)
        }
        _ => {
            workloads::rename_annotations(&mut map, &mut notes);
            Value::Object(map)
        }
    };
    Ok(Converted {
        object,
        warnings: notes.warnings,
        inline_provider,
    })
}

/// The string at `key` of `map`.
fn string_at(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_owned)
}
