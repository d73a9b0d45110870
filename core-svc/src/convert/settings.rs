//! The old global settings ConfigMap (`karpenter-global-settings`, removed in v1beta1): "global
//! settings moved into the node class" or onto the controllers' flags. Its core keys are
//! explained here; its `aws.*` (provider) keys by the plugin, which applies those that moved
//! into its node class ([`super::provider`]).

use std::collections::BTreeMap;

use serde_json::Value;

use super::Notes;

/// The ConfigMap's name.
pub const GLOBAL_SETTINGS: &str = "karpenter-global-settings";

/// Where core's settings went (kubernetes-sigs/karpenter v0.32 `pkg/apis/settings/settings.go`
/// lists them).
const CORE_SETTINGS: [(&str, &str); 3] = [
    (
        "batchMaxDuration",
        "core-svc batches pending pods for at most 10s, upstream's default; another value \
         cannot be set",
    ),
    (
        "batchIdleDuration",
        "core-svc closes a batch after 1s without new pods, upstream's default; another value \
         cannot be set",
    ),
    (
        "featureGates.driftEnabled",
        "drift is always on in v1: remove it (to hold nodes back, use disruption budgets or \
         the karpenter.sh/do-not-disrupt annotation)",
    ),
];

/// Whether `object` is the global settings ConfigMap.
pub fn is_global_settings(object: &Value) -> bool {
    object["apiVersion"] == "v1"
        && object["kind"] == "ConfigMap"
        && object["metadata"]["name"] == GLOBAL_SETTINGS
}

/// The ConfigMap's data, as strings.
pub fn data(object: &Value) -> BTreeMap<String, String> {
    object["data"]
        .as_object()
        .map(|data| {
            data.iter()
                .map(|(key, value)| {
                    let value = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    (key.clone(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One warning per core key of the ConfigMap, saying where it went; with `plugin_explains`
/// false (no plugin converting), one for the provider keys too, which only the plugin can
/// place.
pub fn explain(data: &BTreeMap<String, String>, plugin_explains: bool, notes: &mut Notes) {
    for key in data.keys() {
        let path = format!("data.{key}");
        if let Some((_, destination)) = CORE_SETTINGS.iter().find(|(setting, _)| setting == key) {
            notes.warn(&path, *destination);
        } else if !key.starts_with("aws.") {
            notes.warn(&path, "not a setting core knows: ignored");
        } else if !plugin_explains {
            notes.warn(
                &path,
                "a cloud provider setting: give --plugin-endpoint for the plugin to say where it \
                 went (and apply the ones that moved into its node classes)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// "Global settings moved into the node class" or onto flags: every core key is said;
    /// provider keys are the plugin's to say, or named as such when there is none.
    #[test]
    fn every_core_setting_is_explained() {
        let config_map = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "karpenter-global-settings", "namespace": "karpenter"},
            "data": {"batchMaxDuration": "20s", "featureGates.driftEnabled": "true",
                     "aws.clusterName": "demo", "madeUp": "1"},
        });
        assert!(is_global_settings(&config_map));
        let data = data(&config_map);
        let mut notes = Notes::new("ConfigMap/karpenter/karpenter-global-settings".to_owned());
        explain(&data, true, &mut notes);
        let paths: Vec<&str> = notes.warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "data.batchMaxDuration",
                "data.featureGates.driftEnabled",
                "data.madeUp"
            ]
        );
        let mut notes = Notes::new("x".to_owned());
        explain(&data, false, &mut notes);
        assert_eq!(notes.warnings[0].path, "data.aws.clusterName");
    }
}
