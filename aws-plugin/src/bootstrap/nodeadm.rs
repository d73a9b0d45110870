//! AL2023: nodeadm reads every `application/node.eks.aws` part of the archive and merges them,
//! so Karpenter's `NodeConfig` goes last, after the node class's parts (upstream `nodeadm.go`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::mime::{self, NODE_CONFIG, Part, SHELL_SCRIPT};
use super::{Bootstrap, BootstrapError, taint_value, yaml};

pub(super) fn script(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    let node_config = node_config(input)?;
    let mut parts = user_parts(input)?;
    parts.push(Part::new(NODE_CONFIG, node_config));
    mime::serialize(&parts)
}

/// The node class's `userData` as parts: an archive's own parts, else one part typed by what
/// it is, a `NodeConfig` (any YAML mapping, as upstream tests) or a shell script.
fn user_parts(input: &Bootstrap<'_>) -> Result<Vec<Part>, BootstrapError> {
    let Some(user_data) = input.custom_user_data() else {
        return Ok(Vec::new());
    };
    if mime::is_archive(user_data) {
        return mime::parse(user_data).map_err(|reason| BootstrapError::InvalidMime {
            family: input.family.as_str(),
            reason,
        });
    }
    let content_type = if yaml::is_mapping(user_data) {
        NODE_CONFIG
    } else {
        SHELL_SCRIPT
    };
    Ok(vec![Part::new(content_type, user_data)])
}

/// Karpenter's `NodeConfig`, as upstream marshals nodeadm's type (empty fields left out).
fn node_config(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    let cidr = input
        .cluster
        .cidr
        .as_deref()
        .filter(|cidr| !cidr.is_empty())
        .ok_or(BootstrapError::MissingClusterCidr)?;
    let mut cluster = Map::new();
    if !input.cluster.endpoint.is_empty() {
        cluster.insert(
            "apiServerEndpoint".into(),
            input.cluster.endpoint.clone().into(),
        );
    }
    if let Some(ca) = input.ca_bundle() {
        // nodeadm's field is bytes: upstream decodes the bundle, and JSON encodes it again.
        let ca: String = ca.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let pem = STANDARD
            .decode(ca)
            .map_err(BootstrapError::InvalidCaBundle)?;
        cluster.insert("certificateAuthority".into(), STANDARD.encode(pem).into());
    }
    cluster.insert("cidr".into(), cidr.into());
    if !input.cluster.name.is_empty() {
        cluster.insert("name".into(), input.cluster.name.clone().into());
    }

    let mut kubelet = Map::new();
    let config = kubelet_config(input)?;
    if !config.is_empty() {
        kubelet.insert("config".into(), Value::Object(config));
    }
    if let Some(labels) = input.node_label_arg() {
        kubelet.insert("flags".into(), json!([labels]));
    }

    let node_config = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "metadata": {},
        "spec": {
            "cluster": cluster,
            "containerd": {},
            "instance": { "localStorage": {} },
            "kubelet": kubelet,
        },
    });
    Ok(format!(
        "# Karpenter Generated NodeConfig\n{}",
        yaml::to_string(&node_config)
    ))
}

/// `spec.kubelet` as kubelet configuration fields, with the ENI-limited
/// `maxPods` when the node class sets none, and the taints as `registerWithTaints`.
fn kubelet_config(input: &Bootstrap<'_>) -> Result<Map<String, Value>, BootstrapError> {
    let mut config = match input.kubelet {
        Some(kubelet) => match serde_json::to_value(kubelet).map_err(BootstrapError::Kubelet)? {
            Value::Object(config) => config,
            _ => Map::new(),
        },
        None => Map::new(),
    };
    if let Some(max_pods) = input.max_pods() {
        config.insert("maxPods".into(), max_pods.into());
    }
    let taints = input.sorted_taints();
    if !taints.is_empty() {
        let taints = taints
            .into_iter()
            .map(|taint| {
                let mut entry = Map::new();
                entry.insert("effect".into(), taint.effect.clone().into());
                entry.insert("key".into(), taint.key.clone().into());
                if !taint_value(taint).is_empty() {
                    entry.insert("value".into(), taint_value(taint).into());
                }
                Value::Object(entry)
            })
            .collect();
        config.insert("registerWithTaints".into(), Value::Array(taints));
    }
    Ok(config)
}
