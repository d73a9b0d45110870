//! The first conversation with a plugin: who it is, which optional RPCs it implements, which
//! node class kinds it manages, whether it is ready. Every answer is validated.

use provider_sdk::v1::plugin_capability::{self, rpc};
use provider_sdk::v1::{
    GetPluginCapabilitiesRequest, GetPluginInfoRequest, GetSupportedNodeClassesRequest,
    NodeClassKind, ProbeRequest,
};
use tonic::Code;

use super::{PluginConnection, with_deadline};

/// What the handshake learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// Who the plugin is.
    pub info: PluginInfo,
    /// Which optional RPCs it implements.
    pub capabilities: Capabilities,
    /// The node class kinds it manages; the first is the default.
    pub node_classes: Vec<NodeClassKind>,
    /// Whether it said it is ready, and if not, why.
    pub ready: Result<(), String>,
}

impl Handshake {
    /// The node class kinds in core's own type, the first the default.
    pub fn node_class_kinds(&self) -> Vec<crate::cloudprovider::NodeClassKind> {
        self.node_classes
            .iter()
            .map(|kind| crate::cloudprovider::NodeClassKind {
                group: kind.group.clone(),
                version: kind.version.clone(),
                kind: kind.kind.clone(),
            })
            .collect()
    }
}

/// The plugin's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// Domain-style name, e.g. `karpenter.k8s.aws`.
    pub name: String,
    /// The plugin's own version.
    pub vendor_version: String,
    /// The API minor version it implements, e.g. `1.0`.
    pub api_version: String,
}

/// The optional RPCs a plugin announced. An RPC not announced may still be called; its
/// UNIMPLEMENTED answer then means "not supported".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// ResolveNodeClass.
    pub resolve_node_class: bool,
    /// Get.
    pub get: bool,
    /// List.
    pub list: bool,
    /// IsDrifted.
    pub is_drifted: bool,
    /// GetRepairPolicies.
    pub get_repair_policies: bool,
}

/// Why the handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// A call failed (UNAVAILABLE while the plugin starts, for example).
    #[error("{rpc} failed: {status}")]
    Call {
        /// The RPC.
        rpc: &'static str,
        /// Its status.
        status: tonic::Status,
    },
    /// The plugin answered something the API does not allow.
    #[error("the plugin's {rpc} answer is invalid: {field}: {problem}")]
    InvalidAnswer {
        /// The RPC.
        rpc: &'static str,
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// Runs the handshake on `connection`.
pub async fn handshake(connection: &PluginConnection) -> Result<Handshake, HandshakeError> {
    let deadline = connection.deadlines.default;
    let mut identity = connection.identity.clone();
    let mut cloud_provider = connection.cloud_provider.clone();

    let info = identity
        .get_plugin_info(with_deadline(GetPluginInfoRequest {}, deadline))
        .await
        .map_err(|status| HandshakeError::Call {
            rpc: "GetPluginInfo",
            status,
        })?
        .into_inner();
    let info = validate_info(info)?;

    let capabilities = identity
        .get_plugin_capabilities(with_deadline(GetPluginCapabilitiesRequest {}, deadline))
        .await
        .map_err(|status| HandshakeError::Call {
            rpc: "GetPluginCapabilities",
            status,
        })?
        .into_inner();
    let capabilities = Capabilities::from_announced(&capabilities.capabilities);

    let node_classes = cloud_provider
        .get_supported_node_classes(with_deadline(GetSupportedNodeClassesRequest {}, deadline))
        .await
        .map_err(|status| HandshakeError::Call {
            rpc: "GetSupportedNodeClasses",
            status,
        })?
        .into_inner()
        .node_classes;
    validate_node_classes(&node_classes)?;

    let ready = probe(connection).await?;
    Ok(Handshake {
        info,
        capabilities,
        node_classes,
        ready,
    })
}

/// Asks the plugin whether it is ready: `Ok(Ok(()))` when ready, `Ok(Err(why))` when healthy
/// but not ready (or FAILED_PRECONDITION, a missing dependency), `Err` when the call failed.
pub async fn probe(connection: &PluginConnection) -> Result<Result<(), String>, HandshakeError> {
    let mut identity = connection.identity.clone();
    match identity
        .probe(with_deadline(ProbeRequest {}, connection.deadlines.default))
        .await
    {
        Ok(answer) => {
            let answer = answer.into_inner();
            Ok(if answer.ready.unwrap_or(true) {
                Ok(())
            } else {
                Err(answer.message)
            })
        }
        Err(status) if status.code() == Code::FailedPrecondition => {
            Ok(Err(status.message().to_owned()))
        }
        Err(status) => Err(HandshakeError::Call {
            rpc: "Probe",
            status,
        }),
    }
}

impl Capabilities {
    /// The capabilities in an announced list; unknown values (a newer API) are ignored.
    pub fn from_announced(announced: &[provider_sdk::v1::PluginCapability]) -> Self {
        let mut capabilities = Capabilities::default();
        for capability in announced {
            let Some(plugin_capability::Type::Rpc(rpc)) = &capability.r#type else {
                continue;
            };
            match rpc::Type::try_from(rpc.r#type) {
                Ok(rpc::Type::ResolveNodeClass) => capabilities.resolve_node_class = true,
                Ok(rpc::Type::Get) => capabilities.get = true,
                Ok(rpc::Type::List) => capabilities.list = true,
                Ok(rpc::Type::IsDrifted) => capabilities.is_drifted = true,
                Ok(rpc::Type::GetRepairPolicies) => capabilities.get_repair_policies = true,
                Ok(rpc::Type::Unspecified) | Err(_) => {}
            }
        }
        capabilities
    }
}

fn validate_info(
    info: provider_sdk::v1::GetPluginInfoResponse,
) -> Result<PluginInfo, HandshakeError> {
    let invalid = |field, problem: String| HandshakeError::InvalidAnswer {
        rpc: "GetPluginInfo",
        field,
        problem,
    };
    if !is_plugin_name(&info.name) {
        return Err(invalid(
            "name",
            format!(
                "{:?} is not a domain-style name of at most 63 characters starting and ending alphanumeric",
                info.name
            ),
        ));
    }
    if info.vendor_version.is_empty() {
        return Err(invalid("vendor_version", "must not be empty".to_owned()));
    }
    let major = info.api_version.split('.').next().unwrap_or_default();
    if major != "1" {
        return Err(invalid(
            "api_version",
            format!(
                "{:?} is not a 1.x version of karpenter.cloudprovider.v1",
                info.api_version
            ),
        ));
    }
    Ok(PluginInfo {
        name: info.name,
        vendor_version: info.vendor_version,
        api_version: info.api_version,
    })
}

fn is_plugin_name(name: &str) -> bool {
    let alphanumeric_ends = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= 63
        && alphanumeric_ends
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

fn validate_node_classes(node_classes: &[NodeClassKind]) -> Result<(), HandshakeError> {
    let invalid = |field, problem: String| HandshakeError::InvalidAnswer {
        rpc: "GetSupportedNodeClasses",
        field,
        problem,
    };
    if node_classes.is_empty() {
        return Err(invalid(
            "node_classes",
            "must name at least one node class kind".to_owned(),
        ));
    }
    for (i, kind) in node_classes.iter().enumerate() {
        for (field, value) in [
            ("group", &kind.group),
            ("version", &kind.version),
            ("kind", &kind.kind),
        ] {
            if value.is_empty() {
                return Err(invalid(
                    "node_classes",
                    format!("[{i}].{field} must not be empty"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use provider_sdk::v1::{GetPluginInfoResponse, PluginCapability};

    use super::*;

    fn info(name: &str, api_version: &str) -> GetPluginInfoResponse {
        GetPluginInfoResponse {
            name: name.into(),
            vendor_version: "1.2.3".into(),
            api_version: api_version.into(),
            manifest: Default::default(),
        }
    }

    #[test]
    fn plugin_info_is_validated_field_by_field() {
        assert!(validate_info(info("karpenter.k8s.aws", "1.0")).is_ok());
        for (name, api_version, expected) in [
            ("", "1.0", "name: \"\" is not a domain-style name"),
            ("-aws", "1.0", "name: \"-aws\""),
            (&"a".repeat(64), "1.0", "name:"),
            ("aws", "2.0", "api_version: \"2.0\" is not a 1.x version"),
            ("aws", "", "api_version: \"\""),
        ] {
            let error = validate_info(info(name, api_version))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
        let mut no_version = info("aws", "1.0");
        no_version.vendor_version.clear();
        assert!(
            validate_info(no_version)
                .unwrap_err()
                .to_string()
                .contains("vendor_version: must not be empty")
        );
    }

    #[test]
    fn node_classes_must_be_named_fully() {
        let kind = |group: &str| NodeClassKind {
            group: group.into(),
            version: "v1".into(),
            kind: "EC2NodeClass".into(),
        };
        assert!(validate_node_classes(&[kind("karpenter.k8s.aws")]).is_ok());
        assert!(
            validate_node_classes(&[])
                .unwrap_err()
                .to_string()
                .contains("at least one")
        );
        let error = validate_node_classes(&[kind("karpenter.k8s.aws"), kind("")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("node_classes: [1].group must not be empty"),
            "{error}"
        );
    }

    #[test]
    fn capabilities_ignore_what_this_version_does_not_know() {
        let rpc = |t: i32| PluginCapability {
            r#type: Some(plugin_capability::Type::Rpc(plugin_capability::Rpc {
                r#type: t,
            })),
        };
        let capabilities = Capabilities::from_announced(&[
            rpc(rpc::Type::IsDrifted as i32),
            rpc(rpc::Type::List as i32),
            rpc(999),
            PluginCapability { r#type: None },
        ]);
        assert_eq!(
            capabilities,
            Capabilities {
                is_drifted: true,
                list: true,
                ..Capabilities::default()
            }
        );
    }
}
