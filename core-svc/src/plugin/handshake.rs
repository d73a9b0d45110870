//! The first conversation with a plugin: who it is, which optional RPCs it implements, which
//! labels it sets (its vocabulary), which node class kinds it manages, whether it is ready.
//! Every answer is validated.

use std::collections::BTreeSet;

use core_domain::labels::{
    LabelPolicy, LabelValueType, RESTRICTED_LABEL_DOMAINS, WELL_KNOWN_LABELS, label_domain,
};
use karpenter_api::labels::check_qualified_name;
use provider_sdk::v1::plugin_capability::{self, rpc};
use provider_sdk::v1::{
    GetPluginCapabilitiesRequest, GetPluginInfoRequest, GetPluginVocabularyRequest,
    GetPluginVocabularyResponse, GetSupportedNodeClassesRequest, NodeClassKind, ProbeRequest,
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
    /// The labels it sets and the domains it owns.
    pub vocabulary: Vocabulary,
    /// The node class kinds it manages; the first is the default.
    pub node_classes: Vec<NodeClassKind>,
    /// Whether it said it is ready, and if not, why.
    pub ready: Result<(), String>,
}

impl Handshake {
    /// Core's label policy with the plugin's vocabulary: what pods and NodePools may narrow,
    /// and what a NodePool may not name.
    pub fn label_policy(&self) -> LabelPolicy {
        self.vocabulary.label_policy()
    }

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

/// A plugin's label vocabulary, validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Vocabulary {
    /// Its labels and the type of their values, sorted by key.
    pub labels: Vec<(String, LabelValueType)>,
    /// The label domains it owns, sorted.
    pub restricted_domains: Vec<String>,
    /// False when the plugin does not implement GetPluginVocabulary (then empty).
    pub declared: bool,
}

impl Vocabulary {
    /// Core's label policy with this vocabulary.
    pub fn label_policy(&self) -> LabelPolicy {
        LabelPolicy::with_vocabulary(
            &self.restricted_domains,
            self.labels
                .iter()
                .map(|(key, value_type)| (key, *value_type)),
        )
    }
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
    /// ConvertNodeClass.
    pub convert_node_class: bool,
    /// WatchInterruptions and AckInterruptions.
    pub watch_interruptions: bool,
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

    let vocabulary = match identity
        .get_plugin_vocabulary(with_deadline(GetPluginVocabularyRequest {}, deadline))
        .await
    {
        Ok(answer) => validate_vocabulary(answer.into_inner())?,
        Err(status) if status.code() == Code::Unimplemented => {
            tracing::warn!(
                plugin = %info.name,
                "the plugin does not declare a label vocabulary (GetPluginVocabulary is \
                 UNIMPLEMENTED): pods and NodePools that name its labels cannot be scheduled"
            );
            Vocabulary::default()
        }
        Err(status) => {
            return Err(HandshakeError::Call {
                rpc: "GetPluginVocabulary",
                status,
            });
        }
    };

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
        vocabulary,
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
                Ok(rpc::Type::ConvertNodeClass) => capabilities.convert_node_class = true,
                Ok(rpc::Type::WatchInterruptions) => capabilities.watch_interruptions = true,
                Ok(rpc::Type::Unspecified) | Err(_) => {}
            }
        }
        capabilities
    }
}

/// Checks a GetPluginInfo answer: a domain-form name, a version and an API version `1.x`.
pub fn validate_info(
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

/// Checks a vocabulary: every key a prefixed label key outside core's own labels and domains,
/// declared once with a known value type; every domain a DNS subdomain that restricts none of
/// core's. A plugin that broke these rules would silently change what users may write.
pub fn validate_vocabulary(
    answer: GetPluginVocabularyResponse,
) -> Result<Vocabulary, HandshakeError> {
    let invalid = |field, problem: String| HandshakeError::InvalidAnswer {
        rpc: "GetPluginVocabulary",
        field,
        problem,
    };
    let core = LabelPolicy::core();
    let mut seen = BTreeSet::new();
    let mut labels = Vec::with_capacity(answer.labels.len());
    for (i, label) in answer.labels.into_iter().enumerate() {
        let key = &label.key;
        if let Err(error) = check_qualified_name(key) {
            return Err(invalid("labels", format!("[{i}].key: {error}")));
        }
        if label_domain(key).is_empty() {
            return Err(invalid(
                "labels",
                format!("[{i}].key {key:?} has no prefix: a plugin's labels live in a domain"),
            ));
        }
        if WELL_KNOWN_LABELS.contains(&key.as_str()) {
            return Err(invalid(
                "labels",
                format!("[{i}].key {key:?} is one of core's well-known labels; leave it out"),
            ));
        }
        if let Err(error) = core.is_restricted_label(key) {
            return Err(invalid(
                "labels",
                format!(
                    "[{i}].key {key:?} is in a domain core restricts: {}",
                    error.reason
                ),
            ));
        }
        if !seen.insert(key.clone()) {
            return Err(invalid(
                "labels",
                format!("[{i}].key {key:?} is listed twice"),
            ));
        }
        let value_type = match provider_sdk::v1::LabelValueType::try_from(label.value_type) {
            Ok(provider_sdk::v1::LabelValueType::String) => LabelValueType::String,
            Ok(provider_sdk::v1::LabelValueType::Integer) => LabelValueType::Integer,
            Ok(provider_sdk::v1::LabelValueType::Unspecified) | Err(_) => {
                return Err(invalid(
                    "labels",
                    format!(
                        "[{i}].value_type of {key:?} is {}: it must be \
                         LABEL_VALUE_TYPE_STRING or LABEL_VALUE_TYPE_INTEGER",
                        label.value_type
                    ),
                ));
            }
        };
        labels.push((label.key, value_type));
    }
    labels.sort_by(|a, b| a.0.cmp(&b.0));
    let mut restricted_domains = Vec::with_capacity(answer.restricted_label_domains.len());
    for (i, domain) in answer.restricted_label_domains.into_iter().enumerate() {
        let subdomain = !domain.is_empty()
            && domain.len() <= 253
            && domain.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !subdomain {
            return Err(invalid(
                "restricted_label_domains",
                format!("[{i}] {domain:?} is not a lowercase DNS subdomain"),
            ));
        }
        let covers = |own: &str| own == domain || own.ends_with(&format!(".{domain}"));
        if let Some(own) = RESTRICTED_LABEL_DOMAINS.iter().find(|own| covers(own)) {
            return Err(invalid(
                "restricted_label_domains",
                format!("[{i}] {domain:?} would restrict core's own domain {own}"),
            ));
        }
        // Kubernetes' own domains are open to users' labels (upstream core v1.9,
        // kubernetes-sigs/karpenter#2586); a plugin may not close them again.
        if let Some(label) = WELL_KNOWN_LABELS
            .iter()
            .find(|label| covers(label_domain(label)))
        {
            return Err(invalid(
                "restricted_label_domains",
                format!("[{i}] {domain:?} would restrict the domain of core's label {label}"),
            ));
        }
        restricted_domains.push(domain);
    }
    restricted_domains.sort();
    restricted_domains.dedup();
    Ok(Vocabulary {
        labels,
        restricted_domains,
        declared: true,
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

/// Checks a GetSupportedNodeClasses answer: at least one kind, each with a group, a version
/// and a kind, none twice.
pub fn validate_node_classes(node_classes: &[NodeClassKind]) -> Result<(), HandshakeError> {
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
        if node_classes[..i]
            .iter()
            .any(|earlier| earlier.group == kind.group && earlier.kind == kind.kind)
        {
            return Err(invalid(
                "node_classes",
                format!("[{i}]: {}/{} appears twice", kind.group, kind.kind),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use provider_sdk::v1::{GetPluginInfoResponse, LabelDefinition, PluginCapability};

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
        let error = validate_node_classes(&[kind("karpenter.k8s.aws"), kind("karpenter.k8s.aws")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("[1]: karpenter.k8s.aws/EC2NodeClass appears twice"),
            "{error}"
        );
    }

    fn label(key: &str, value_type: provider_sdk::v1::LabelValueType) -> LabelDefinition {
        LabelDefinition {
            key: key.into(),
            value_type: value_type as i32,
            description: String::new(),
        }
    }

    #[test]
    fn a_vocabulary_becomes_core_s_label_policy() {
        use provider_sdk::v1::LabelValueType as Pb;
        let vocabulary = validate_vocabulary(GetPluginVocabularyResponse {
            labels: vec![
                label("example.cloud/instance-family", Pb::String),
                label("example.cloud/instance-cpu", Pb::Integer),
                label("topology.example.cloud/zone-id", Pb::String),
            ],
            restricted_label_domains: vec!["example.cloud".into()],
        })
        .unwrap();
        let policy = vocabulary.label_policy();
        assert!(policy.is_well_known("example.cloud/instance-family"));
        assert_eq!(
            policy.value_type("example.cloud/instance-cpu"),
            Some(LabelValueType::Integer)
        );
        assert!(policy.is_restricted_label("example.cloud/other").is_err());
        assert!(policy.is_restricted_label("team").is_ok());
        assert_eq!(vocabulary.restricted_domains, ["example.cloud"]);
    }

    #[test]
    fn a_vocabulary_may_not_redefine_core_s_labels_or_domains() {
        use provider_sdk::v1::LabelValueType as Pb;
        let answer = |labels: Vec<LabelDefinition>, domains: &[&str]| GetPluginVocabularyResponse {
            labels,
            restricted_label_domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        };
        for (answer, expected) in [
            (
                answer(vec![label("instance-family", Pb::String)], &[]),
                "labels: [0].key \"instance-family\" has no prefix",
            ),
            (
                answer(vec![label("Example.cloud/x y", Pb::String)], &[]),
                "labels: [0].key:",
            ),
            (
                answer(vec![label("kubernetes.io/arch", Pb::String)], &[]),
                "is one of core's well-known labels",
            ),
            (
                answer(vec![label("karpenter.sh/size", Pb::String)], &[]),
                "is in a domain core restricts",
            ),
            (
                answer(
                    vec![
                        label("example.cloud/a", Pb::String),
                        label("example.cloud/a", Pb::Integer),
                    ],
                    &[],
                ),
                "labels: [1].key \"example.cloud/a\" is listed twice",
            ),
            (
                answer(vec![label("example.cloud/a", Pb::Unspecified)], &[]),
                "[0].value_type of \"example.cloud/a\" is 0",
            ),
            (
                answer(vec![], &[""]),
                "restricted_label_domains: [0] \"\" is not a lowercase DNS subdomain",
            ),
            (
                answer(vec![], &["io"]),
                "would restrict the domain of core's label kubernetes.io/arch",
            ),
            (
                answer(vec![], &["kubernetes.io"]),
                "would restrict the domain of core's label kubernetes.io/arch",
            ),
            (
                answer(vec![], &["sh"]),
                "would restrict core's own domain karpenter.sh",
            ),
            (
                answer(vec![], &["karpenter.sh"]),
                "would restrict core's own domain karpenter.sh",
            ),
        ] {
            let error = validate_vocabulary(answer).unwrap_err().to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
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
