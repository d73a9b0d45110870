//! The v1alpha5 disruption annotations on any object that carries pods or is a node:
//! `karpenter.sh/do-not-evict` (a pod's: "actually prevents Karpenter's disruption of the
//! NodeClaim/Node rather than the eviction of it") and `karpenter.sh/do-not-consolidate` (a
//! node's) both became `karpenter.sh/do-not-disrupt` in v1beta1.

use serde_json::{Map, Value};

use super::Notes;

/// The v1beta1 annotation.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// A pod's v1alpha5 annotation: the same meaning as [`DO_NOT_DISRUPT`].
pub const DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";
/// A node's v1alpha5 annotation: consolidation only, where [`DO_NOT_DISRUPT`] holds back
/// drift and expiration too.
pub const DO_NOT_CONSOLIDATE: &str = "karpenter.sh/do-not-consolidate";

/// Where an object keeps the annotations of its pods (or its own, for a Pod or a Node).
fn annotation_paths(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Pod" | "Node" => Some(&["metadata"]),
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController"
        | "PodTemplate" => Some(&["spec", "template", "metadata"]),
        "CronJob" => Some(&["spec", "jobTemplate", "spec", "template", "metadata"]),
        _ => None,
    }
}

/// Renames the v1alpha5 annotations of `object` (when it is a kind that has them) to
/// `karpenter.sh/do-not-disrupt`.
pub fn rename_annotations(object: &mut Map<String, Value>, notes: &mut Notes) {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(path) = annotation_paths(&kind) else {
        return;
    };
    let mut at: Option<&mut Value> = None;
    for (i, key) in path.iter().enumerate() {
        at = if i == 0 {
            object.get_mut(*key)
        } else {
            at.and_then(|v| v.get_mut(*key))
        };
    }
    let Some(Value::Object(annotations)) = at.and_then(|m| m.get_mut("annotations")) else {
        return;
    };
    let field = format!("{}.annotations", path.join("."));
    for old in [DO_NOT_EVICT, DO_NOT_CONSOLIDATE] {
        let Some(value) = annotations.remove(old) else {
            continue;
        };
        if value.as_str() != Some("true") {
            notes.warn(
                &format!("{field}[{old}]"),
                format!("{value} was not \"true\", so it meant nothing; removed"),
            );
            continue;
        }
        if old == DO_NOT_CONSOLIDATE {
            notes.warn(
                &format!("{field}[{old}]"),
                format!(
                    "now {DO_NOT_DISRUPT}, which holds the node back from drift and expiration \
                     as well as from consolidation"
                ),
            );
        }
        annotations
            .entry(DO_NOT_DISRUPT)
            .or_insert_with(|| "true".into());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::convert::convert;

    /// "the karpenter.sh/do-not-evict annotation actually prevents Karpenter's disruption":
    /// on a pod, and on a workload's pod template, it is `do-not-disrupt`, without a word.
    #[test]
    fn do_not_evict_becomes_do_not_disrupt_on_pods_and_templates() {
        let pod = convert(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default",
                         "annotations": {"karpenter.sh/do-not-evict": "true", "other": "x"}},
        }))
        .unwrap();
        assert_eq!(
            pod.object["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true", "other": "x"})
        );
        assert!(pod.warnings.is_empty());
        let cron = convert(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"jobTemplate": {"spec": {"template": {"metadata": {
                "annotations": {"karpenter.sh/do-not-evict": "true"}}}}}},
        }))
        .unwrap();
        assert_eq!(
            cron.object["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true"})
        );
    }

    /// "[do-not-consolidate] should be expanded out to all disruption mechanisms": on a node
    /// it becomes `do-not-disrupt`, and the wider hold is said.
    #[test]
    fn do_not_consolidate_becomes_do_not_disrupt_with_a_warning() {
        let node = convert(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "annotations": {"karpenter.sh/do-not-consolidate": "true"}},
        }))
        .unwrap();
        assert_eq!(
            node.object["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true"})
        );
        assert_eq!(node.warnings.len(), 1);
        assert!(
            node.warnings[0]
                .to_string()
                .contains("drift and expiration"),
            "{:?}",
            node.warnings
        );
        // Other objects pass untouched.
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "annotations": {"karpenter.sh/do-not-evict": "true"}}});
        assert_eq!(convert(config.clone()).unwrap().object, config);
    }
}
