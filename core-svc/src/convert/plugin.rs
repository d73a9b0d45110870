//! [`NodeClassConverter`] over the plugin's ConvertNodeClass RPC.

use provider_sdk::json::{json_to_struct, struct_to_json};
use provider_sdk::v1::{self, convert_node_class_request};
use tonic::Code;

use super::provider::{Answer, NodeClassConverter, ProviderError, Request, Source};
use crate::plugin::{PluginConnection, handshake, with_deadline};

/// The plugin behind a connection, once its handshake said what it converts.
#[derive(Debug)]
pub struct PluginConverter {
    connection: PluginConnection,
    groups: Vec<String>,
}

impl PluginConverter {
    /// Handshakes with the plugin. Its node class kinds' API groups are what it is sent;
    /// none when it does not announce ConvertNodeClass, which the second value then says.
    pub async fn connect(connection: PluginConnection) -> Result<(Self, Option<String>), String> {
        let handshake = handshake(&connection)
            .await
            .map_err(|e| format!("plugin at {}: {e}", connection.endpoint))?;
        let (groups, note) = if handshake.capabilities.convert_node_class {
            let mut groups: Vec<String> = handshake
                .node_classes
                .iter()
                .map(|kind| kind.group.clone())
                .collect();
            groups.sort();
            groups.dedup();
            (groups, None)
        } else {
            (
                Vec::new(),
                Some(format!(
                    "plugin {} does not announce ConvertNodeClass: its node classes pass through \
                     unconverted",
                    handshake.info.name
                )),
            )
        };
        Ok((Self { connection, groups }, note))
    }
}

impl NodeClassConverter for PluginConverter {
    fn groups(&self) -> &[String] {
        &self.groups
    }

    async fn convert(&self, request: Request) -> Result<Option<Answer>, ProviderError> {
        let source = match request.source {
            Source::Object(object) => convert_node_class_request::Source::Object(
                json_to_struct(&object).unwrap_or_default(),
            ),
            Source::InlineProvider { name, provider } => {
                convert_node_class_request::Source::InlineProvider(v1::InlineProvider {
                    name,
                    provider: json_to_struct(&provider),
                })
            }
        };
        let message = v1::ConvertNodeClassRequest {
            source: Some(source),
            cluster_name: request.cluster_name.unwrap_or_default(),
            global_settings: request.global_settings.into_iter().collect(),
            kubelet: request.kubelet.as_ref().and_then(json_to_struct),
        };
        let answer = self
            .connection
            .cloud_provider
            .clone()
            .convert_node_class(with_deadline(message, self.connection.deadlines.default))
            .await;
        match answer {
            Ok(answer) => answer_of(answer.into_inner()),
            Err(status) if status.code() == Code::Unimplemented => Ok(None),
            Err(status) if status.code() == Code::InvalidArgument => {
                let path = provider_sdk::status::error_metadata(&status, "field")
                    .unwrap_or_else(|| "(object)".to_owned());
                let message = status
                    .message()
                    .strip_prefix(&format!("{path}: "))
                    .unwrap_or(status.message())
                    .to_owned();
                Err(ProviderError::Refused { path, message })
            }
            Err(status) => Err(ProviderError::Failed(format!(
                "{:?}: {}",
                status.code(),
                status.message()
            ))),
        }
    }
}

/// The answer as core's: `None` when the plugin does not know the kind. A known object
/// must come back as an object with `apiVersion` and `kind`, or nothing is written.
fn answer_of(answer: v1::ConvertNodeClassResponse) -> Result<Option<Answer>, ProviderError> {
    if !answer.known {
        return Ok(None);
    }
    let object = answer.object.map(struct_to_json).unwrap_or_default();
    if !(object["apiVersion"].is_string() && object["kind"].is_string()) {
        return Err(ProviderError::Failed(
            "the answer has no object with apiVersion and kind".to_owned(),
        ));
    }
    Ok(Some(Answer {
        object,
        warnings: answer
            .warnings
            .into_iter()
            .map(|w| (w.path, w.message))
            .collect(),
    }))
}
