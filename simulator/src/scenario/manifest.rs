//! Manifests checked as the API server would admit them: NodePools, NodeClaims and
//! EC2NodeClasses by their own validation, the Kubernetes kinds by their schema (a field of the
//! wrong type names its path).

use std::fmt;

use aws_plugin::apis::EC2NodeClass;
use core_domain::labels::LabelPolicy;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use karpenter_api::{NodeClaim, NodePool};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::fields::{Fields, string, type_name};
use super::{Kind, Manifest, ObjectKey, Result, ScenarioError};

pub(super) fn label_policy() -> LabelPolicy {
    aws_plugin::labels::label_policy()
}

/// Deserializes `value` as `T`, naming the path of a field of the wrong shape.
pub(super) fn typed<T: DeserializeOwned>(path: &str, value: &Value) -> Result<T> {
    serde_path_to_error::deserialize::<_, T>(value.clone()).map_err(|error| {
        let inner = karpenter_api::validation::deserialize_path(error.path());
        let field = if inner.is_empty() {
            path.to_owned()
        } else if inner.starts_with('[') {
            format!("{path}{inner}")
        } else {
            format!("{path}.{inner}")
        };
        ScenarioError::new(field, error.into_inner().to_string())
    })
}

pub(super) fn validation<V: fmt::Display>(
    path: &str,
    errors: Vec<karpenter_api::ValidationError<V>>,
) -> ScenarioError {
    let mut errors = errors.into_iter();
    match errors.next() {
        Some(first) => {
            let more = errors.count();
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            ScenarioError::new(
                format!("{path}.{}", first.path.as_str()),
                format!("{}{tail}", first.violation),
            )
        }
        None => ScenarioError::new(path, "invalid"),
    }
}

pub(super) fn manifest(path: &str, value: &Value) -> Result<Manifest> {
    let map = match value {
        Value::Object(map) => map,
        other => {
            return Err(ScenarioError::new(
                path,
                format!(
                    "expected a manifest (a mapping), found {}",
                    type_name(other)
                ),
            ));
        }
    };
    let kind_field = format!("{path}.kind");
    let kind_name = string(
        &kind_field,
        map.get("kind")
            .ok_or_else(|| ScenarioError::new(&kind_field, "required"))?,
    )?;
    let kind = Kind::parse(&kind_name).ok_or_else(|| {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        ScenarioError::new(
            &kind_field,
            format!("{kind_name:?} is not supported ({})", known.join(", ")),
        )
    })?;
    let version_field = format!("{path}.apiVersion");
    let api_version = string(
        &version_field,
        map.get("apiVersion")
            .ok_or_else(|| ScenarioError::new(&version_field, "required"))?,
    )?;
    if api_version != kind.api_version() {
        return Err(ScenarioError::new(
            version_field,
            format!("{api_version:?}: {kind} is {}", kind.api_version()),
        ));
    }
    let meta_field = format!("{path}.metadata");
    let metadata = match map.get("metadata") {
        Some(Value::Object(metadata)) => metadata,
        Some(other) => {
            return Err(ScenarioError::new(
                meta_field,
                format!("expected a mapping, found {}", type_name(other)),
            ));
        }
        None => return Err(ScenarioError::new(meta_field, "required")),
    };
    let name_field = format!("{path}.metadata.name");
    let name = string(
        &name_field,
        metadata
            .get("name")
            .ok_or_else(|| ScenarioError::new(&name_field, "required"))?,
    )?;
    if name.is_empty() {
        return Err(ScenarioError::new(name_field, "may not be empty"));
    }
    let mut object = value.clone();
    let namespace = if kind.namespaced() {
        let namespace = match metadata.get("namespace") {
            None | Some(Value::Null) => "default".to_owned(),
            Some(value) => string(&format!("{path}.metadata.namespace"), value)?,
        };
        if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
            metadata.insert("namespace".to_owned(), Value::String(namespace.clone()));
        }
        Some(namespace)
    } else {
        if metadata.get("namespace").is_some_and(|n| !n.is_null()) {
            return Err(ScenarioError::new(
                format!("{path}.metadata.namespace"),
                format!("{kind} is cluster-scoped"),
            ));
        }
        None
    };
    check_kind(path, kind, &object)?;
    Ok(Manifest {
        key: ObjectKey {
            kind,
            namespace,
            name,
        },
        object,
    })
}

/// The kind's schema and, where it has them, its rules.
pub(super) fn check_kind(path: &str, kind: Kind, object: &Value) -> Result<()> {
    match kind {
        Kind::NodePool => {
            let pool: NodePool = typed(path, object)?;
            pool.validate(&label_policy())
                .map_err(|errors| validation(path, errors))
        }
        Kind::NodeClaim => {
            let claim: NodeClaim = typed(path, object)?;
            claim
                .validate(&label_policy())
                .map_err(|errors| validation(path, errors))?;
            let status_field = format!("{path}.status.providerID");
            let status = claim.status.as_ref().filter(|s| !s.provider_id.is_empty());
            let Some(status) = status else {
                return Err(ScenarioError::new(
                    status_field,
                    "required: a NodeClaim in a scenario is an existing node to adopt",
                ));
            };
            parse_provider_id(&status.provider_id)
                .map(drop)
                .map_err(|message| ScenarioError::new(status_field, message))
        }
        Kind::EC2NodeClass => {
            let class: EC2NodeClass = typed(path, object)?;
            class.validate().map_err(|errors| validation(path, errors))
        }
        Kind::Deployment => {
            let deployment: Deployment = typed(path, object)?;
            let spec = deployment
                .spec
                .as_ref()
                .ok_or_else(|| ScenarioError::new(format!("{path}.spec"), "required"))?;
            if spec.replicas.is_some_and(|r| r < 0) {
                return Err(ScenarioError::new(
                    format!("{path}.spec.replicas"),
                    "may not be negative",
                ));
            }
            if spec.template.spec.is_none() {
                return Err(ScenarioError::new(
                    format!("{path}.spec.template.spec"),
                    "required",
                ));
            }
            Ok(())
        }
        Kind::DaemonSet => {
            let daemon_set: DaemonSet = typed(path, object)?;
            let spec = daemon_set
                .spec
                .as_ref()
                .ok_or_else(|| ScenarioError::new(format!("{path}.spec"), "required"))?;
            if spec.template.spec.is_none() {
                return Err(ScenarioError::new(
                    format!("{path}.spec.template.spec"),
                    "required",
                ));
            }
            Ok(())
        }
        Kind::Pod => {
            let pod: Pod = typed(path, object)?;
            if pod.spec.is_none() {
                return Err(ScenarioError::new(format!("{path}.spec"), "required"));
            }
            Ok(())
        }
        Kind::PodDisruptionBudget => typed::<PodDisruptionBudget>(path, object).map(drop),
        Kind::PriorityClass => typed::<PriorityClass>(path, object).map(drop),
        Kind::Node => {
            let node: Node = typed(path, object)?;
            match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
                Some(provider_id) => parse_provider_id(provider_id).map(drop).map_err(|message| {
                    ScenarioError::new(format!("{path}.spec.providerID"), message)
                }),
                None => Ok(()),
            }
        }
    }
}

/// `aws:///us-east-1a/i-0123` → (`us-east-1a`, `i-0123`).
pub fn parse_provider_id(provider_id: &str) -> Result<(String, String), String> {
    let rest = provider_id.strip_prefix("aws:///").ok_or_else(|| {
        format!("{provider_id:?} is not an AWS provider ID (aws:///<zone>/<instance id>)")
    })?;
    match rest.split_once('/') {
        Some((zone, id)) if !zone.is_empty() && id.starts_with("i-") && !id.contains('/') => {
            Ok((zone.to_owned(), id.to_owned()))
        }
        _ => Err(format!(
            "{provider_id:?} is not an AWS provider ID (aws:///<zone>/i-<id>)"
        )),
    }
}

pub(super) fn object_key(path: &str, value: &Value) -> Result<ObjectKey> {
    let mut f = Fields::of(path, value)?;
    let kind_name = f.required_string("kind")?;
    let kind = Kind::parse(&kind_name).ok_or_else(|| {
        ScenarioError::new(
            f.field("kind"),
            format!("{kind_name:?} is not a kind scenarios support"),
        )
    })?;
    let namespace_field = f.field("namespace");
    let namespace = f.string("namespace")?;
    let name = f.required_string("name")?;
    f.finish()?;
    let namespace = match (kind.namespaced(), namespace) {
        (true, Some(namespace)) => Some(namespace),
        (true, None) => Some("default".to_owned()),
        (false, None) => None,
        (false, Some(_)) => {
            return Err(ScenarioError::new(
                namespace_field,
                format!("{kind} is cluster-scoped"),
            ));
        }
    };
    Ok(ObjectKey {
        kind,
        namespace,
        name,
    })
}
