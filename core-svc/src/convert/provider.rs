//! The cloud provider's part of `core-svc convert`: the node class kinds of older APIs, the
//! inline providers of v1alpha5 Provisioners and the provider keys of the old global settings
//! are the plugin's to convert ([`NodeClassConverter`], over gRPC in [`super::plugin`]).
//!
//! Core hands the plugin what it knows and the plugin does not: the kubelet settings of the
//! NodePools naming a class (v1 moved `kubelet` from the NodePool to the node class) and the
//! global settings (some of which moved into the node class). Everything else stays pure:
//! [`convert_all`] converts core's kinds first, then asks the plugin, keeping the input's order
//! (a node class made from an inline provider follows its NodePool).

use std::collections::BTreeMap;
use std::future::Future;

use serde_json::Value;

use super::nodepool::KUBELET_COMPATIBILITY_ANNOTATION;
use super::{ConvertError, Converted, Notes, Warning, object_name, settings};

/// What the plugin is asked to convert.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// An object of one of the plugin's API groups, or the global settings ConfigMap.
    Object(Value),
    /// A v1alpha5 Provisioner's `spec.provider`.
    InlineProvider {
        /// The Provisioner's name, which the node class takes.
        name: String,
        /// The provider block.
        provider: Value,
    },
}

/// One ConvertNodeClass request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// What to convert.
    pub source: Source,
    /// `--cluster-name`.
    pub cluster_name: Option<String>,
    /// The global settings ConfigMap's data, when the input held it.
    pub global_settings: BTreeMap<String, String>,
    /// The kubelet settings of the NodePools naming this node class, when they agree.
    pub kubelet: Option<Value>,
}

/// The plugin's conversion of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The converted object.
    pub object: Value,
    /// `(input field, message)` for each lossy step.
    pub warnings: Vec<(String, String)>,
}

/// Why the plugin did not convert an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The object cannot be converted (INVALID_ARGUMENT): the field and why.
    #[error("{path}: {message}")]
    Refused {
        /// The input field.
        path: String,
        /// Why.
        message: String,
    },
    /// The call failed.
    #[error("the plugin's ConvertNodeClass failed: {0}")]
    Failed(String),
}

/// The plugin's ConvertNodeClass.
pub trait NodeClassConverter {
    /// The API groups whose objects it converts (those of the plugin's node class kinds);
    /// empty when nothing converts them.
    fn groups(&self) -> &[String];

    /// Converts one object; `Ok(None)` when the plugin does not know its kind.
    fn convert(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Answer>, ProviderError>> + Send;
}

/// No plugin: provider objects pass through, each said.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPlugin;

impl NodeClassConverter for NoPlugin {
    fn groups(&self) -> &[String] {
        &[]
    }

    async fn convert(&self, _: Request) -> Result<Option<Answer>, ProviderError> {
        Ok(None)
    }
}

/// An input object once core has looked at it.
enum Slot {
    /// Converted by core: the input's `Kind/name` and the result.
    Core(String, Converted),
    /// The plugin's to convert.
    Provider(Value),
}

/// Converts every object: core's kinds by [`super::convert`], the provider's by `converter`.
pub async fn convert_all<C: NodeClassConverter>(
    objects: Vec<Value>,
    converter: &C,
    cluster_name: Option<&str>,
) -> Result<Vec<Converted>, ConvertError> {
    let global_settings = objects
        .iter()
        .find(|object| settings::is_global_settings(object))
        .map(settings::data)
        .unwrap_or_default();
    let plugin = !converter.groups().is_empty();
    let mut slots = Vec::with_capacity(objects.len());
    for object in objects {
        let for_plugin = plugin
            && (settings::is_global_settings(&object) || in_groups(&object, converter.groups()));
        slots.push(if for_plugin {
            Slot::Provider(object)
        } else {
            let name = object_name(&object);
            Slot::Core(name, super::convert(object)?)
        });
    }
    let kubelets = node_class_kubelets(slots.iter().filter_map(|slot| match slot {
        Slot::Core(_, converted) => Some(&converted.object),
        Slot::Provider(_) => None,
    }));
    let request = |source, kubelet: Option<&Kubelet>| Request {
        source,
        cluster_name: cluster_name.map(str::to_owned),
        global_settings: global_settings.clone(),
        kubelet: match kubelet {
            Some(Kubelet::Agreed(kubelet)) => Some(kubelet.clone()),
            _ => None,
        },
    };

    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Slot::Core(name, mut converted) => {
                if settings::is_global_settings(&converted.object) {
                    let mut notes = Notes::new(name.clone());
                    settings::explain(&global_settings, false, &mut notes);
                    converted.warnings.extend(notes.warnings);
                }
                let inline = converted.inline_provider.take();
                let reference = node_class_ref(&converted.object);
                out.push(converted);
                let Some(provider) = inline else { continue };
                let node_class = reference
                    .as_ref()
                    .map(|(_, name)| name.clone())
                    .unwrap_or_default();
                let kubelet = reference.as_ref().and_then(|key| kubelets.get(key));
                let source = Source::InlineProvider {
                    name: node_class.clone(),
                    provider,
                };
                match ask(converter, request(source, kubelet), &name).await? {
                    Some(node_class) => {
                        if let Some(node_pool) = out.last_mut() {
                            names_the_class(&mut node_pool.object, &node_class.object);
                        }
                        out.push(node_class);
                    }
                    None => {
                        let Some(node_pool) = out.last_mut() else {
                            continue;
                        };
                        node_pool.warnings.push(Warning {
                            object: name,
                            path: "spec.provider".to_owned(),
                            message: format!(
                                "an inline provider has no v1 form (removed in v1beta1): the \
                                 NodePool names EC2NodeClass {node_class:?}, which {}",
                                if plugin {
                                    "you must write from these settings (the plugin does not \
                                     convert inline providers)"
                                } else {
                                    "you must write from these settings, or give \
                                     --plugin-endpoint for the plugin to write it"
                                }
                            ),
                        });
                    }
                }
            }
            Slot::Provider(object) => {
                let name = object_name(&object);
                let mut warnings = Vec::new();
                if settings::is_global_settings(&object) {
                    let mut notes = Notes::new(name.clone());
                    settings::explain(&global_settings, true, &mut notes);
                    warnings = notes.warnings;
                }
                let key = (
                    group_of(&object).to_owned(),
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
                let kubelet = kubelets.get(&key);
                if matches!(kubelet, Some(Kubelet::Disagreed)) {
                    warnings.push(Warning {
                        object: name.clone(),
                        path: "spec.kubelet".to_owned(),
                        message: "the NodePools naming this class set different kubelet \
                                  settings: none moved into the class; give each NodePool a \
                                  class of its own with its settings"
                            .to_owned(),
                    });
                }
                let source = Source::Object(object.clone());
                match ask(converter, request(source, kubelet), &name).await? {
                    Some(mut converted) => {
                        warnings.append(&mut converted.warnings);
                        converted.warnings = warnings;
                        out.push(converted);
                    }
                    None => {
                        warnings.push(Warning {
                            object: name,
                            path: "(root)".to_owned(),
                            message: format!(
                                "the plugin does not convert {} {}: passed through unchanged",
                                object["apiVersion"].as_str().unwrap_or_default(),
                                object["kind"].as_str().unwrap_or_default()
                            ),
                        });
                        out.push(Converted {
                            object,
                            warnings,
                            inline_provider: None,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Asks the plugin; its warnings are named after the input object `name`.
async fn ask<C: NodeClassConverter>(
    converter: &C,
    request: Request,
    name: &str,
) -> Result<Option<Converted>, ConvertError> {
    let answer = converter
        .convert(request)
        .await
        .map_err(|error| match error {
            ProviderError::Refused { path, message } => ConvertError {
                object: name.to_owned(),
                path,
                message,
            },
            ProviderError::Failed(message) => ConvertError {
                object: name.to_owned(),
                path: "(plugin)".to_owned(),
                message,
            },
        })?;
    Ok(answer.map(|answer| Converted {
        object: answer.object,
        warnings: answer
            .warnings
            .into_iter()
            .map(|(path, message)| Warning {
                object: name.to_owned(),
                path,
                message,
            })
            .collect(),
        inline_provider: None,
    }))
}

/// Points a NodePool's `nodeClassRef` at the node class the plugin made from its inline
/// provider: its group and kind are the plugin's, whatever Karpenter's old default was.
fn names_the_class(node_pool: &mut Value, node_class: &Value) {
    let reference = &mut node_pool["spec"]["template"]["spec"]["nodeClassRef"];
    if reference.is_object() {
        reference["group"] = group_of(node_class).into();
        reference["kind"] = node_class["kind"].clone();
    }
}

/// The API group of an object's `apiVersion` (empty for the core group).
fn group_of(object: &Value) -> &str {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// Whether `object` is of one of `groups`.
fn in_groups(object: &Value, groups: &[String]) -> bool {
    let group = group_of(object);
    groups.iter().any(|g| g == group)
}

/// A v1 NodePool's node class, as `(group, name)`.
fn node_class_ref(object: &Value) -> Option<(String, String)> {
    if object["apiVersion"] != "karpenter.sh/v1" || object["kind"] != "NodePool" {
        return None;
    }
    let reference = &object["spec"]["template"]["spec"]["nodeClassRef"];
    Some((
        reference["group"].as_str()?.to_owned(),
        reference["name"].as_str()?.to_owned(),
    ))
}

/// The kubelet settings the NodePools naming one node class had.
#[derive(Debug, Clone, PartialEq)]
enum Kubelet {
    /// All the same (and set).
    Agreed(Value),
    /// None set.
    Unset,
    /// Not all the same.
    Disagreed,
}

/// The kubelet settings of the converted NodePools (kept in upstream's compatibility
/// annotation), by the `(group, name)` of the node class they name.
fn node_class_kubelets<'a>(
    objects: impl Iterator<Item = &'a Value>,
) -> BTreeMap<(String, String), Kubelet> {
    let mut kubelets: BTreeMap<(String, String), Kubelet> = BTreeMap::new();
    for object in objects {
        let Some(key) = node_class_ref(object) else {
            continue;
        };
        let kubelet = object["metadata"]["annotations"][KUBELET_COMPATIBILITY_ANNOTATION]
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .map_or(Kubelet::Unset, Kubelet::Agreed);
        kubelets
            .entry(key)
            .and_modify(|seen| {
                if *seen != kubelet {
                    *seen = Kubelet::Disagreed;
                }
            })
            .or_insert(kubelet);
    }
    kubelets
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    /// A plugin that converts `AWSNodeTemplate`s and inline providers into `EC2NodeClass`es
    /// carrying what it was sent, and knows nothing else; it records every request.
    #[derive(Debug, Default)]
    struct Plugin {
        groups: Vec<String>,
        requests: Mutex<Vec<Request>>,
    }

    impl Plugin {
        fn new() -> Self {
            Self {
                groups: vec!["karpenter.k8s.aws".to_owned()],
                requests: Mutex::default(),
            }
        }
    }

    impl NodeClassConverter for Plugin {
        fn groups(&self) -> &[String] {
            &self.groups
        }

        async fn convert(&self, request: Request) -> Result<Option<Answer>, ProviderError> {
            self.requests.lock().unwrap().push(request.clone());
            let name = match &request.source {
                Source::InlineProvider { name, .. } => name.clone(),
                Source::Object(object) if object["kind"] == "AWSNodeTemplate" => {
                    object["metadata"]["name"].as_str().unwrap().to_owned()
                }
                Source::Object(object) if object["kind"] == "Refused" => {
                    return Err(ProviderError::Refused {
                        path: "spec.x".to_owned(),
                        message: "no".to_owned(),
                    });
                }
                Source::Object(_) => return Ok(None),
            };
            Ok(Some(Answer {
                object: json!({
                    "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                    "metadata": {"name": name}, "spec": {"kubelet": request.kubelet},
                }),
                warnings: vec![("spec.amiFamily".to_owned(), "alias".to_owned())],
            }))
        }
    }

    fn provisioner(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
               "metadata": {"name": name}, "spec": spec})
    }

    fn template(name: &str) -> Value {
        json!({"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
               "metadata": {"name": name}, "spec": {}})
    }

    async fn run<C: NodeClassConverter>(objects: Vec<Value>, converter: &C) -> Vec<Converted> {
        convert_all(objects, converter, Some("demo")).await.unwrap()
    }

    /// v1 moved `kubelet` from the NodePool to the node class: the node class gets the
    /// settings of the NodePools naming it when they agree, and none (said) when they do not.
    #[tokio::test]
    async fn the_node_pools_kubelet_goes_to_the_class_they_name() {
        let plugin = Plugin::new();
        let kubelet = json!({"maxPods": 110});
        let converted = run(
            vec![
                provisioner(
                    "a",
                    json!({"providerRef": {"name": "shared"}, "kubeletConfiguration": kubelet}),
                ),
                provisioner(
                    "b",
                    json!({"providerRef": {"name": "shared"}, "kubeletConfiguration": kubelet}),
                ),
                provisioner(
                    "c",
                    json!({"providerRef": {"name": "split"}, "kubeletConfiguration": kubelet}),
                ),
                provisioner("d", json!({"providerRef": {"name": "split"}})),
                template("shared"),
                template("split"),
            ],
            &plugin,
        )
        .await;
        assert_eq!(converted[4].object["spec"]["kubelet"], kubelet);
        assert_eq!(
            converted[4].warnings.len(),
            1,
            "{:?}",
            converted[4].warnings
        );
        assert_eq!(converted[5].object["spec"]["kubelet"], Value::Null);
        assert_eq!(converted[5].warnings[0].path, "spec.kubelet");
        let requests = plugin.requests.lock().unwrap();
        assert_eq!(requests[0].cluster_name.as_deref(), Some("demo"));
    }

    /// An inline provider becomes the node class the NodePool names, right after it; without
    /// a plugin it is said instead.
    #[tokio::test]
    async fn an_inline_provider_becomes_the_named_class() {
        let inline = provisioner("default", json!({"provider": {"amiFamily": "AL2"}}));
        let converted = run(vec![inline.clone()], &Plugin::new()).await;
        assert_eq!(converted.len(), 2);
        assert_eq!(converted[1].object["kind"], "EC2NodeClass");
        assert_eq!(converted[1].object["metadata"]["name"], "default");
        assert_eq!(converted[1].warnings[0].object, "Provisioner/default");
        assert_eq!(
            converted[0].object["spec"]["template"]["spec"]["nodeClassRef"],
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
        );

        let alone = run(vec![inline], &NoPlugin).await;
        assert_eq!(alone.len(), 1);
        assert_eq!(alone[0].warnings[0].path, "spec.provider");
        assert!(alone[0].warnings[0].message.contains("--plugin-endpoint"));
    }

    /// The class made from an inline provider is of the plugin's kind, which the NodePool
    /// then names.
    #[test]
    fn the_node_pool_names_the_kind_the_plugin_made() {
        let mut node_pool = json!({"spec": {"template": {"spec": {"nodeClassRef": {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "a"}}}}});
        let class = json!({"apiVersion": "example.dev/v1", "kind": "ExampleNodeClass"});
        names_the_class(&mut node_pool, &class);
        assert_eq!(
            node_pool["spec"]["template"]["spec"]["nodeClassRef"],
            json!({"group": "example.dev", "kind": "ExampleNodeClass", "name": "a"})
        );
    }

    /// The plugin's refusal names the object and field; an object it does not know passes
    /// through, said; without a plugin, legacy kinds pass through, said.
    #[tokio::test]
    async fn refusals_and_unknown_kinds() {
        let refused = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "Refused",
                             "metadata": {"name": "x"}});
        let error = convert_all(vec![refused], &Plugin::new(), None)
            .await
            .unwrap_err();
        assert_eq!(
            (error.object.as_str(), error.path.as_str()),
            ("Refused/x", "spec.x")
        );

        let unknown = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "Other",
                             "metadata": {"name": "x"}});
        let converted = run(vec![unknown.clone()], &Plugin::new()).await;
        assert_eq!(converted[0].object, unknown);
        assert!(
            converted[0].warnings[0]
                .message
                .contains("does not convert")
        );

        let converted = run(vec![template("t")], &NoPlugin).await;
        assert_eq!(converted[0].object, template("t"));
        assert!(
            converted[0].warnings[0]
                .message
                .contains("--plugin-endpoint")
        );
    }

    /// The global settings go to every request, and the ConfigMap to the plugin, with core's
    /// own keys explained by core.
    #[tokio::test]
    async fn global_settings_reach_the_plugin() {
        let plugin = Plugin::new();
        let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "karpenter-global-settings", "namespace": "karpenter"},
            "data": {"aws.defaultInstanceProfile": "P", "batchMaxDuration": "10s"}});
        let converted = run(vec![template("t"), settings], &plugin).await;
        let requests = plugin.requests.lock().unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(
            requests[0].global_settings["aws.defaultInstanceProfile"],
            "P"
        );
        assert_eq!(converted[1].warnings[0].path, "data.batchMaxDuration");
    }
}
