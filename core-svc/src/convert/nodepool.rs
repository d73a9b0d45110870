//! Provisioner (`karpenter.sh/v1alpha5`), NodePool and NodeClaim (`karpenter.sh/v1beta1`) to
//! `karpenter.sh/v1`. Each rule is one function over the object's JSON; the v1alpha5 →
//! v1beta1 rules are the v1beta1 change list's (Provisioner → NodePool: node fields under
//! `template`, behaviour under `disruption`, `ttlSecondsAfterEmpty` and `consolidation` into
//! `consolidationPolicy`, `ttlSecondsUntilExpired` into `expireAfter`, inline `provider`
//! removed), the v1beta1 → v1 rules upstream's conversion webhook's
//! (kubernetes-sigs/karpenter `pkg/apis/v1/nodepool_conversion.go`).

use karpenter_api::conversion::without_server_metadata;
use serde_json::{Map, Value, json};

use super::{ConvertError, Notes};

/// The API version everything converts to.
pub const V1: &str = "karpenter.sh/v1";

/// Where upstream's conversion keeps a v1beta1 NodePool's `kubelet` once v1 has none
/// (kubernetes-sigs/karpenter `pkg/apis/v1/nodepool_conversion.go`).
pub const KUBELET_COMPATIBILITY_ANNOTATION: &str =
    "compatibility.karpenter.sh/v1beta1-kubelet-conversion";

/// The node class kinds that were renamed with their API: a v1alpha5 `providerRef` to an
/// `AWSNodeTemplate` names the `EC2NodeClass` of the same name once both are converted.
const RENAMED_NODE_CLASSES: [(&str, &str, &str); 1] =
    [("AWSNodeTemplate", "karpenter.k8s.aws", "EC2NodeClass")];

/// The group and kind a reference without them meant: Karpenter's only provider before v1
/// was AWS's.
const DEFAULT_NODE_CLASS: (&str, &str) = ("karpenter.k8s.aws", "EC2NodeClass");

/// `karpenter.sh/v1alpha5` Provisioner → `karpenter.sh/v1` NodePool, and its inline
/// `spec.provider` when it had one, for the cloud provider to turn into the node class the
/// NodePool names ([`super::provider`]).
pub fn provisioner_to_node_pool(
    mut provisioner: Map<String, Value>,
    notes: &mut Notes,
) -> Result<(Value, Option<Value>), ConvertError> {
    let mut spec = take_object(&mut provisioner, "spec");
    if spec.contains_key("provider") && spec.contains_key("providerRef") {
        return Err(notes.error(
            "spec",
            "both provider and providerRef are set; v1alpha5 allowed only one",
        ));
    }
    if spec.contains_key("ttlSecondsAfterEmpty")
        && spec
            .get("consolidation")
            .and_then(|c| c.get("enabled"))
            .and_then(Value::as_bool)
            == Some(true)
    {
        return Err(notes.error(
            "spec",
            "both ttlSecondsAfterEmpty and consolidation.enabled are set; v1alpha5 allowed only one",
        ));
    }
    let name = provisioner
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut template_metadata = Map::new();
    move_field(&mut spec, "labels", &mut template_metadata, "labels");
    move_field(
        &mut spec,
        "annotations",
        &mut template_metadata,
        "annotations",
    );
    let mut template_spec = Map::new();
    for field in ["taints", "startupTaints", "requirements"] {
        move_field(&mut spec, field, &mut template_spec, field);
    }
    // v1 requires the list; v1alpha5 defaulted it to none.
    template_spec
        .entry("requirements")
        .or_insert_with(|| Value::Array(Vec::new()));
    let inline_provider = spec.remove("provider");
    let node_class_ref = match inline_provider {
        Some(_) => named_after_the_provisioner(&name),
        None => provisioner_node_class_ref(&mut spec, &name, notes),
    };
    template_spec.insert("nodeClassRef".to_owned(), node_class_ref);
    template_spec.insert(
        "expireAfter".to_owned(),
        expire_after(spec.remove("ttlSecondsUntilExpired"), notes)?,
    );
    if let Some(kubelet) = spec.remove("kubeletConfiguration") {
        let kubelet = without_container_runtime(kubelet, notes);
        kubelet_moves_to_node_class(
            &mut provisioner,
            kubelet,
            "spec.kubeletConfiguration",
            notes,
        );
    }
    let disruption = provisioner_disruption(&mut spec, notes)?;
    let mut node_pool_spec = Map::new();
    let mut template = Map::new();
    if !template_metadata.is_empty() {
        template.insert("metadata".to_owned(), Value::Object(template_metadata));
    }
    template.insert("spec".to_owned(), Value::Object(template_spec));
    node_pool_spec.insert("template".to_owned(), Value::Object(template));
    node_pool_spec.insert("disruption".to_owned(), disruption);
    if let Some(limits) = spec.remove("limits") {
        node_pool_spec.insert("limits".to_owned(), provisioner_limits(limits, notes)?);
    }
    move_field(&mut spec, "weight", &mut node_pool_spec, "weight");
    for (field, _) in spec {
        notes.warn(
            &format!("spec.{field}"),
            "not a Provisioner field this tool knows; dropped",
        );
    }
    without_server_metadata(&mut provisioner);
    provisioner.insert("apiVersion".to_owned(), V1.into());
    provisioner.insert("kind".to_owned(), "NodePool".into());
    provisioner.insert("spec".to_owned(), Value::Object(node_pool_spec));
    provisioner.remove("status");
    Ok((Value::Object(provisioner), inline_provider))
}

/// "We will take the opportunity to remove spec.provider entirely": an inline provider
/// becomes a node class of the Provisioner's name, which the NodePool names.
fn named_after_the_provisioner(name: &str) -> Value {
    let (group, kind) = DEFAULT_NODE_CLASS;
    json!({"group": group, "kind": kind, "name": name})
}

/// `spec.providerRef` → `nodeClassRef` with group and kind (an `AWSNodeTemplate` becomes the
/// `EC2NodeClass` of its name).
fn provisioner_node_class_ref(
    spec: &mut Map<String, Value>,
    name: &str,
    notes: &mut Notes,
) -> Value {
    let reference = spec.remove("providerRef").unwrap_or(Value::Null);
    let Some(referenced) = reference.get("name").and_then(Value::as_str) else {
        notes.warn(
            "spec.providerRef",
            format!(
                "no providerRef: the NodePool names EC2NodeClass {name:?}, which you must create"
            ),
        );
        let (group, kind) = DEFAULT_NODE_CLASS;
        return json!({"group": group, "kind": kind, "name": name});
    };
    let kind = reference
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("AWSNodeTemplate");
    let (group, kind) = RENAMED_NODE_CLASSES
        .iter()
        .find(|(old, _, _)| *old == kind)
        .map_or_else(
            || (group_of(&reference).unwrap_or(DEFAULT_NODE_CLASS.0), kind),
            |(_, group, new)| (*group, *new),
        );
    json!({"group": group, "kind": kind, "name": referenced})
}

/// The API group of a reference's `apiVersion`.
fn group_of(reference: &Value) -> Option<&str> {
    let api_version = reference.get("apiVersion")?.as_str()?;
    Some(api_version.split_once('/').map_or(api_version, |(g, _)| g))
}

/// `ttlSecondsUntilExpired` → `expireAfter`: the same time in seconds; unset meant never in
/// v1alpha5, where v1's default is 720h, so it is written out as `Never`.
fn expire_after(ttl: Option<Value>, notes: &Notes) -> Result<Value, ConvertError> {
    match ttl {
        None | Some(Value::Null) => Ok("Never".into()),
        Some(value) => {
            let seconds = value.as_u64().ok_or_else(|| {
                notes.error(
                    "spec.ttlSecondsUntilExpired",
                    format!("{value} is not a non-negative number of seconds"),
                )
            })?;
            Ok(format!("{seconds}s").into())
        }
    }
}

/// The v1alpha5 emptiness and consolidation settings as v1's `disruption`:
/// - `consolidation.enabled: true` → `WhenEmptyOrUnderutilized` after `0s`, as soon as
///   possible, as v1alpha5 consolidated;
/// - `ttlSecondsAfterEmpty: N` → `WhenEmpty` after `Ns`. With N > 0 the meaning shifts: v1
///   counts from the node's last pod event, v1alpha5 from when it became empty;
/// - neither → `WhenEmpty` after `Never`: v1alpha5 removed no node for being empty or
///   underutilized, and neither does this.
fn provisioner_disruption(
    spec: &mut Map<String, Value>,
    notes: &mut Notes,
) -> Result<Value, ConvertError> {
    let consolidation = spec
        .remove("consolidation")
        .and_then(|c| c.get("enabled").and_then(Value::as_bool))
        .unwrap_or(false);
    if consolidation {
        return Ok(
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}),
        );
    }
    match spec.remove("ttlSecondsAfterEmpty") {
        None | Some(Value::Null) => {
            Ok(json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}))
        }
        Some(value) => {
            let seconds = value.as_u64().ok_or_else(|| {
                notes.error(
                    "spec.ttlSecondsAfterEmpty",
                    format!("{value} is not a non-negative number of seconds"),
                )
            })?;
            if seconds > 0 {
                notes.warn(
                    "spec.ttlSecondsAfterEmpty",
                    format!(
                        "now consolidateAfter: {seconds}s with WhenEmpty, counted from the node's \
                         last pod scheduled or removed rather than from when it became empty; \
                         check the delay still suits your pod churn"
                    ),
                );
            }
            Ok(
                json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": format!("{seconds}s")}),
            )
        }
    }
}

/// `spec.limits.resources` → `spec.limits`.
fn provisioner_limits(limits: Value, notes: &Notes) -> Result<Value, ConvertError> {
    match limits.get("resources") {
        Some(resources @ Value::Object(_)) => Ok(resources.clone()),
        None | Some(Value::Null) => Ok(json!({})),
        Some(other) => Err(notes.error(
            "spec.limits.resources",
            format!("{other} is not a map of resource quantities"),
        )),
    }
}

/// `karpenter.sh/v1beta1` NodePool → v1.
pub fn node_pool_v1beta1(
    mut node_pool: Map<String, Value>,
    notes: &mut Notes,
) -> Result<Value, ConvertError> {
    let mut spec = take_object(&mut node_pool, "spec");
    let mut template = take_object(&mut spec, "template");
    let mut template_spec = take_object(&mut template, "spec");
    let mut disruption = take_object(&mut spec, "disruption");
    if let Some(expire) = disruption.remove("expireAfter") {
        template_spec.insert("expireAfter".to_owned(), expire);
    }
    consolidation_policy_v1(&mut disruption, notes);
    convert_node_class_ref(&mut template_spec, "spec.template.spec.nodeClassRef", notes)?;
    if let Some(kubelet) = template_spec.remove("kubelet") {
        kubelet_moves_to_node_class(&mut node_pool, kubelet, "spec.template.spec.kubelet", notes);
    }
    template.insert("spec".to_owned(), Value::Object(template_spec));
    spec.insert("template".to_owned(), Value::Object(template));
    spec.insert("disruption".to_owned(), Value::Object(disruption));
    without_server_metadata(&mut node_pool);
    node_pool.remove("status");
    node_pool.insert("apiVersion".to_owned(), V1.into());
    node_pool.insert("spec".to_owned(), Value::Object(spec));
    Ok(Value::Object(node_pool))
}

/// `WhenUnderutilized` → `WhenEmptyOrUnderutilized`; v1beta1 refused `consolidateAfter` with
/// it (it consolidated at once), which v1 writes `0s`. `WhenEmpty` keeps its delay.
fn consolidation_policy_v1(disruption: &mut Map<String, Value>, notes: &mut Notes) {
    let policy = disruption
        .get("consolidationPolicy")
        .and_then(Value::as_str)
        .unwrap_or("WhenUnderutilized")
        .to_owned();
    if policy == "WhenUnderutilized" {
        disruption.insert(
            "consolidationPolicy".to_owned(),
            "WhenEmptyOrUnderutilized".into(),
        );
        disruption
            .entry("consolidateAfter")
            .or_insert_with(|| "0s".into());
    } else if !disruption.contains_key("consolidateAfter") {
        notes.warn(
            "spec.disruption.consolidateAfter",
            "WhenEmpty without consolidateAfter: v1 requires it; set to 0s (as soon as empty)",
        );
        disruption.insert("consolidateAfter".to_owned(), "0s".into());
    }
}

/// `nodeClassRef {apiVersion, kind, name}` → `{group, kind, name}`: the group from the
/// `apiVersion`; without one (or a kind), the AWS node class the reference meant, said.
fn convert_node_class_ref(
    spec: &mut Map<String, Value>,
    path: &str,
    notes: &mut Notes,
) -> Result<(), ConvertError> {
    let Some(reference) = spec.get_mut("nodeClassRef") else {
        return Err(notes.error(path, "missing: a NodePool must name its node class"));
    };
    let Value::Object(reference) = reference else {
        return Err(notes.error(path, "must be an object"));
    };
    if reference.contains_key("group") {
        return Ok(());
    }
    let api_version = reference.remove("apiVersion");
    let group = api_version
        .as_ref()
        .and_then(Value::as_str)
        .map(|v| v.split_once('/').map_or(v, |(g, _)| g).to_owned());
    let (default_group, default_kind) = DEFAULT_NODE_CLASS;
    if group.is_none() || !reference.contains_key("kind") {
        notes.warn(
            path,
            format!(
                "no apiVersion or kind: assumed {default_group} {default_kind}, the only node \
                 class before v1"
            ),
        );
    }
    reference.insert(
        "group".to_owned(),
        group.unwrap_or_else(|| default_group.to_owned()).into(),
    );
    reference
        .entry("kind")
        .or_insert_with(|| default_kind.into());
    Ok(())
}

/// "Remove `kubeletConfiguration.containerRuntime`": v1beta1 dropped it, containerd being the
/// only runtime left. Dropped silently when it named containerd; said when it named another.
fn without_container_runtime(mut kubelet: Value, notes: &mut Notes) -> Value {
    let Some(runtime) = kubelet
        .as_object_mut()
        .and_then(|kubelet| kubelet.remove("containerRuntime"))
    else {
        return kubelet;
    };
    if runtime != "containerd" {
        notes.warn(
            "spec.kubeletConfiguration.containerRuntime",
            format!("{runtime} is gone: v1 nodes run containerd, the only runtime left"),
        );
    }
    kubelet
}

/// v1 has no kubelet settings on NodePools: they belong to the node class
/// (`EC2NodeClass.spec.kubelet`). Kept where upstream's conversion keeps them, in an annotation
/// (which upstream's AWS provider reads and this project's does not), and said.
fn kubelet_moves_to_node_class(
    object: &mut Map<String, Value>,
    kubelet: Value,
    path: &str,
    notes: &mut Notes,
) {
    notes.warn(
        path,
        format!(
            "v1 takes kubelet settings from the node class: {kubelet} belongs in the \
             EC2NodeClass's spec.kubelet, where a plugin's conversion of that class in the same \
             run puts it (otherwise move it by hand); kept meanwhile in the annotation \
             {KUBELET_COMPATIBILITY_ANNOTATION}"
        ),
    );
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(metadata) = metadata {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(annotations) = annotations {
            annotations.insert(
                KUBELET_COMPATIBILITY_ANNOTATION.to_owned(),
                kubelet.to_string().into(),
            );
        }
    }
}

/// `karpenter.sh/v1beta1` NodeClaim → v1: its node class reference and kubelet as a NodePool's.
pub fn node_claim_v1beta1(
    mut node_claim: Map<String, Value>,
    notes: &mut Notes,
) -> Result<Value, ConvertError> {
    let mut spec = take_object(&mut node_claim, "spec");
    convert_node_class_ref(&mut spec, "spec.nodeClassRef", notes)?;
    if let Some(kubelet) = spec.remove("kubelet") {
        kubelet_moves_to_node_class(&mut node_claim, kubelet, "spec.kubelet", notes);
    }
    node_claim.insert("apiVersion".to_owned(), V1.into());
    node_claim.insert("spec".to_owned(), Value::Object(spec));
    Ok(Value::Object(node_claim))
}

/// The object at `key` of `map`, taken out (empty when absent or not an object).
fn take_object(map: &mut Map<String, Value>, key: &str) -> Map<String, Value> {
    match map.remove(key) {
        Some(Value::Object(object)) => object,
        _ => Map::new(),
    }
}

/// Moves `from[from_key]` to `to[to_key]` when present.
fn move_field(
    from: &mut Map<String, Value>,
    from_key: &str,
    to: &mut Map<String, Value>,
    to_key: &str,
) {
    if let Some(value) = from.remove(from_key) {
        to.insert(to_key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::convert;

    fn converted(object: Value) -> (Value, Vec<String>) {
        let converted = convert(object).expect("converts");
        (
            converted.object,
            converted.warnings.iter().map(ToString::to_string).collect(),
        )
    }

    fn provisioner(spec: Value) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1alpha5",
            "kind": "Provisioner",
            "metadata": {"name": "default"},
            "spec": spec,
        })
    }

    /// "configuration-based fields live within the spec.template": labels, annotations,
    /// taints, startup taints, requirements; `providerRef` names the renamed node class.
    #[test]
    fn node_fields_move_under_the_template() {
        let (pool, warnings) = converted(provisioner(json!({
            "labels": {"team": "a"},
            "annotations": {"note": "x"},
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "s", "effect": "NoSchedule"}],
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            "providerRef": {"name": "default"},
            "limits": {"resources": {"cpu": "1000"}},
            "weight": 10,
            "consolidation": {"enabled": true},
            "ttlSecondsUntilExpired": 2_592_000,
        })));
        assert_eq!(warnings, Vec::<String>::new());
        assert_eq!(
            pool,
            json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {
                    "template": {
                        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                        "spec": {
                            "taints": [{"key": "k", "effect": "NoSchedule"}],
                            "startupTaints": [{"key": "s", "effect": "NoSchedule"}],
                            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                            "expireAfter": "2592000s",
                        },
                    },
                    "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
                    "limits": {"cpu": "1000"},
                    "weight": 10,
                },
            })
        );
    }

    /// "ttlSecondsAfterEmpty=0 → users want to delete nodes as soon as they go empty": WhenEmpty
    /// after 0s, silently; N > 0 after Ns, with the change of clock said.
    #[test]
    fn ttl_seconds_after_empty_becomes_when_empty() {
        let (pool, warnings) = converted(provisioner(json!({
            "providerRef": {"name": "default"}, "ttlSecondsAfterEmpty": 0,
        })));
        assert_eq!(
            pool["spec"]["disruption"],
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s"})
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let (pool, warnings) = converted(provisioner(json!({
            "providerRef": {"name": "default"}, "ttlSecondsAfterEmpty": 300,
        })));
        assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "300s");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("Provisioner/default: spec.ttlSecondsAfterEmpty: "),
            "{warnings:?}"
        );
    }

    /// Without emptiness or consolidation, and without expiry, v1alpha5 left nodes alone:
    /// so does the NodePool, where v1's defaults would not (720h expiry).
    #[test]
    fn what_v1alpha5_never_did_stays_undone() {
        let (pool, _) = converted(provisioner(json!({"providerRef": {"name": "default"}})));
        assert_eq!(
            pool["spec"]["disruption"],
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"})
        );
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "Never");
    }

    /// "We will take the opportunity to remove spec.provider entirely": the NodePool names
    /// a node class of its own name, and says so; both set is an error.
    #[test]
    fn an_inline_provider_becomes_a_node_class_named_after_the_provisioner() {
        let (pool, warnings) = converted(provisioner(json!({
            "provider": {"subnetSelector": {"karpenter.sh/discovery": "demo"}},
        })));
        assert_eq!(
            pool["spec"]["template"]["spec"]["nodeClassRef"],
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        let inline = convert(provisioner(json!({"provider": {"amiFamily": "AL2"}}))).unwrap();
        assert_eq!(inline.inline_provider, Some(json!({"amiFamily": "AL2"})));
        let err = convert(provisioner(json!({
            "provider": {}, "providerRef": {"name": "x"},
        })))
        .unwrap_err();
        assert_eq!(err.path, "spec");
        let err = convert(provisioner(json!({
            "providerRef": {"name": "x"}, "ttlSecondsAfterEmpty": 30,
            "consolidation": {"enabled": true},
        })))
        .unwrap_err();
        assert!(err.message.contains("only one"), "{err}");
    }

    /// "Remove kubeletConfiguration.containerRuntime": containerd is the only runtime left.
    #[test]
    fn the_container_runtime_is_dropped() {
        let (pool, warnings) = converted(provisioner(json!({
            "providerRef": {"name": "default"},
            "kubeletConfiguration": {"containerRuntime": "containerd", "maxPods": 20},
        })));
        assert_eq!(
            pool["metadata"]["annotations"][KUBELET_COMPATIBILITY_ANNOTATION],
            r#"{"maxPods":20}"#
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let (_, warnings) = converted(provisioner(json!({
            "providerRef": {"name": "default"},
            "kubeletConfiguration": {"containerRuntime": "dockerd"},
        })));
        assert!(
            warnings.iter().any(|w| w.contains("containerRuntime")),
            "{warnings:?}"
        );
    }

    /// Kubelet settings belong to the node class in v1: kept in upstream's compatibility
    /// annotation, and the move asked for.
    #[test]
    fn kubelet_settings_move_to_the_node_class() {
        let (pool, warnings) = converted(provisioner(json!({
            "providerRef": {"name": "default"}, "kubeletConfiguration": {"maxPods": 50},
        })));
        assert_eq!(
            pool["metadata"]["annotations"][KUBELET_COMPATIBILITY_ANNOTATION],
            r#"{"maxPods":50}"#
        );
        assert!(pool["spec"]["template"]["spec"].get("kubelet").is_none());
        assert!(
            warnings[0].contains("spec.kubeletConfiguration"),
            "{warnings:?}"
        );
    }

    fn node_pool_v1beta1_object(disruption: Value, node_class_ref: Value) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1beta1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": node_class_ref,
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                }},
                "disruption": disruption,
            },
        })
    }

    /// v1: "WhenUnderutilized" is "WhenEmptyOrUnderutilized", expireAfter moves into the
    /// template, and nodeClassRef carries group and kind.
    #[test]
    fn a_v1beta1_node_pool_becomes_v1() {
        let (pool, warnings) = converted(node_pool_v1beta1_object(
            json!({"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h",
                   "budgets": [{"nodes": "10%"}]}),
            json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"}),
        ));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(pool["apiVersion"], V1);
        assert_eq!(
            pool["spec"]["disruption"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                   "budgets": [{"nodes": "10%"}]})
        );
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "720h");
        assert_eq!(
            pool["spec"]["template"]["spec"]["nodeClassRef"],
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
        );
        // WhenEmpty keeps its delay; a reference without apiVersion is assumed AWS's, said.
        let (pool, warnings) = converted(node_pool_v1beta1_object(
            json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}),
            json!({"name": "default"}),
        ));
        assert_eq!(pool["spec"]["disruption"]["consolidateAfter"], "30s");
        assert_eq!(
            pool["spec"]["template"]["spec"]["nodeClassRef"]["group"],
            "karpenter.k8s.aws"
        );
        assert!(warnings[0].contains("nodeClassRef"), "{warnings:?}");
    }

    /// A NodePool exported with `kubectl get -o yaml` applies as a new object: what the
    /// server filled in, kubectl's record of the old object and the old status are gone; the
    /// user's own annotations stay.
    #[test]
    fn what_the_server_filled_in_is_dropped() {
        let mut exported = provisioner(json!({"providerRef": {"name": "default"}}));
        exported["metadata"] = json!({
            "name": "default", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2023-01-01T00:00:00Z", "managedFields": [],
            "annotations": {karpenter_api::conversion::LAST_APPLIED: "{}", "team": "a"},
        });
        exported["status"] = json!({"resources": {"cpu": "4"}});
        let (pool, _) = converted(exported);
        assert_eq!(
            pool["metadata"],
            json!({"name": "default", "annotations": {"team": "a"}})
        );
        assert!(pool.get("status").is_none());
        let mut v1beta1 = node_pool_v1beta1_object(json!({}), json!({"name": "default"}));
        v1beta1["metadata"]["resourceVersion"] = "7".into();
        v1beta1["status"] = json!({"conditions": []});
        let (pool, _) = converted(v1beta1);
        assert_eq!(pool["metadata"], json!({"name": "default"}));
        assert!(pool.get("status").is_none());
    }

    /// A NodeClaim's reference and kubelet convert as a NodePool's.
    #[test]
    fn a_v1beta1_node_claim_becomes_v1() {
        let (claim, warnings) = converted(json!({
            "apiVersion": "karpenter.sh/v1beta1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abcde"},
            "spec": {
                "nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": "default"},
                "kubelet": {"maxPods": 20},
                "requirements": [],
            },
        }));
        assert_eq!(claim["apiVersion"], V1);
        assert_eq!(claim["spec"]["nodeClassRef"]["group"], "karpenter.k8s.aws");
        assert!(claim["spec"].get("kubelet").is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    /// What cannot be read is an error naming the field, never a guess.
    #[test]
    fn bad_input_names_the_field() {
        let err = convert(provisioner(json!({
            "providerRef": {"name": "x"}, "ttlSecondsUntilExpired": "a day",
        })))
        .unwrap_err();
        assert_eq!(err.path, "spec.ttlSecondsUntilExpired");
        let err = convert(
            json!({"apiVersion": "karpenter.sh/v1alpha4", "kind": "Provisioner",
                                 "metadata": {"name": "x"}}),
        )
        .unwrap_err();
        assert_eq!(err.path, "apiVersion");
        let err = convert(json!({"kind": "NodePool"})).unwrap_err();
        assert_eq!(err.path, "apiVersion");
        let err = convert(node_pool_v1beta1_object(json!({}), Value::Null)).unwrap_err();
        assert!(err.path.ends_with("nodeClassRef"), "{err}");
    }
}
