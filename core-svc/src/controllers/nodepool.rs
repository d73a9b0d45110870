//! NodePool status: the `ValidationSucceeded`, `NodeClassReady` and `Ready` conditions and the
//! node and resource counts (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/nodepool/validation`, `.../nodepool/readiness` and `.../nodepool/counter`).
//!
//! Validation is the NodePool's own rules plus the label vocabulary the plugin declared at
//! handshake: a requirement on a key of the plugin's domains that the plugin does not know, or
//! a bound on a label whose values are strings, makes `ValidationSucceeded` False with the field
//! and, for a misspelling, the label it most likely means. The provisioner uses no NodePool
//! that fails it ([`super::provisioning::selection::usable_node_pools`]), so the condition is the
//! explanation of why nothing is launched for it, not a guess from pods that stay pending.
//!
//! | condition | True | False / Unknown |
//! |---|---|---|
//! | `ValidationSucceeded` | the NodePool passes [`NodePool::validate`] under the plugin's vocabulary; the message lists what upstream's CRD admits but cannot work ([`NodePool::warnings`]: a requirement value no label can have) | False, `NodePoolValidationFailed`, every error |
//! | `NodeClassReady` | the node class exists and is Ready (or the plugin resolves none) | False `NodeClassNotFound`, `NodeClassTerminating`, or its own reason; Unknown `NodeClassReadinessUnknown` without a Ready condition |
//! | `Ready` | both of the above | the first that is not True, its status, reason and message |
//!
//! `status.nodes` counts the NodePool's NodeClaims that are not being deleted and
//! `status.resources` sums their capacity, with `nodes` among the resources, as the limits
//! count them. Writes happen only when something changed.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::condition::{self, CONDITION_READY};
use karpenter_api::nodepool::{CONDITION_NODE_CLASS_READY, CONDITION_VALIDATION_SUCCEEDED};
use karpenter_api::{ConditionStatus, LabelPolicy, NodePool, NodePoolStatus};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};

use super::nodeclaim::kube_quantities;
use super::provisioning::input::usage_by_node_pool;
use super::provisioning::selection::validation_with_warnings;
use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::CloudProvider;
use crate::cluster::Cluster;

/// The `ValidationSucceeded` reason when the NodePool fails validation (upstream's).
pub const REASON_VALIDATION_FAILED: &str = "NodePoolValidationFailed";
/// The `NodeClassReady` reason when the node class does not exist (upstream's).
pub const REASON_NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
/// The `NodeClassReady` reason when the node class is being deleted (upstream's).
pub const REASON_NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";
/// The `NodeClassReady` reason when the node class has no Ready condition yet (upstream's).
pub const REASON_NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";

/// One condition's outcome: status, reason, message.
type Outcome = (ConditionStatus, String, String);

/// `NodeClassReady` for a NodePool whose node class is `node_class`; `require_ready` is false
/// when the plugin resolves no node class (every node class then counts as ready).
fn node_class_ready(node_class: Option<&DynamicObject>, require_ready: bool) -> Outcome {
    let ok = (ConditionStatus::True, String::new(), String::new());
    if !require_ready {
        return ok;
    }
    let Some(node_class) = node_class else {
        return (
            ConditionStatus::False,
            REASON_NODE_CLASS_NOT_FOUND.to_owned(),
            "NodeClass not found on cluster".to_owned(),
        );
    };
    if node_class.metadata.deletion_timestamp.is_some() {
        return (
            ConditionStatus::False,
            REASON_NODE_CLASS_TERMINATING.to_owned(),
            "NodeClass is Terminating".to_owned(),
        );
    }
    let ready = node_class
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some(CONDITION_READY));
    let Some(ready) = ready else {
        return (
            ConditionStatus::Unknown,
            REASON_NODE_CLASS_READINESS_UNKNOWN.to_owned(),
            "Node Class Readiness Unknown".to_owned(),
        );
    };
    let field = |name: &str| {
        ready
            .get(name)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match field("status").as_str() {
        "True" => ok,
        "Unknown" => (
            ConditionStatus::Unknown,
            REASON_NODE_CLASS_READINESS_UNKNOWN.to_owned(),
            field("message"),
        ),
        _ => (
            ConditionStatus::False,
            match field("reason") {
                reason if reason.is_empty() => "NodeClassNotReady".to_owned(),
                reason => reason,
            },
            field("message"),
        ),
    }
}

/// The status a NodePool should have: its conditions (`existing` updated, each transition
/// time moved only by a change of status) and counts from `usage`, its NodeClaims' resources
/// with `nodes` among them. `validation` is the warnings when the NodePool is valid, the
/// errors when not.
pub fn desired_status(
    existing: Option<&NodePoolStatus>,
    validation: Result<String, String>,
    node_class: Outcome,
    usage: Option<&core_domain::resources::ResourceList>,
    now: Time,
) -> NodePoolStatus {
    let mut status = existing.cloned().unwrap_or_default();
    let validated = match validation {
        Ok(warnings) => (ConditionStatus::True, String::new(), warnings),
        Err(errors) => (
            ConditionStatus::False,
            REASON_VALIDATION_FAILED.to_owned(),
            errors,
        ),
    };
    let ready = [&validated, &node_class]
        .into_iter()
        .find(|(status, _, _)| *status != ConditionStatus::True)
        .cloned()
        .unwrap_or((ConditionStatus::True, String::new(), String::new()));
    for (type_, (state, reason, message)) in [
        (CONDITION_VALIDATION_SUCCEEDED, validated),
        (CONDITION_NODE_CLASS_READY, node_class),
        (CONDITION_READY, ready),
    ] {
        condition::set(
            &mut status.conditions,
            type_,
            state,
            &reason,
            &message,
            now.clone(),
        );
    }
    let resources: BTreeMap<String, KubeQuantity> = usage
        .map(|usage| kube_quantities(&usage.to_quantities().into_iter().collect()))
        .unwrap_or_default();
    status.nodes = Some(
        usage
            .map(|usage| usage.get(&core_domain::resources::ResourceName::new(NODES)))
            .unwrap_or(0),
    );
    status.resources = resources;
    status
}

/// The merge patch that turns `existing` into `desired`. A merge patch merges maps key by key
/// and leaves out what it does not name, so every resource `existing` counts and `desired`
/// does not (the last GPU node gone, the NodePool scaled to zero) is deleted explicitly:
/// otherwise the stale count would stay and every pass would write again. Conditions are a
/// list, which a merge patch replaces whole. Pure.
pub fn status_patch(existing: Option<&NodePoolStatus>, desired: &NodePoolStatus) -> Value {
    let mut resources: Map<String, Value> = desired
        .resources
        .iter()
        .map(|(name, quantity)| (name.clone(), Value::String(quantity.0.clone())))
        .collect();
    for name in existing
        .into_iter()
        .flat_map(|status| status.resources.keys())
    {
        resources.entry(name.clone()).or_insert(Value::Null);
    }
    json!({ "status": {
        "conditions": desired.conditions,
        "nodes": desired.nodes,
        "resources": resources,
    } })
}

/// The resource name the limits count nodes under.
const NODES: &str = karpenter_api::nodepool::LIMIT_NODES;

/// Publishes every NodePool's conditions and counts.
#[derive(Debug)]
pub struct NodePoolStatusController<C, P> {
    ctx: Context<C, P>,
    label_policy: LabelPolicy,
    require_ready_node_class: bool,
}

impl<C: Cluster, P: CloudProvider> NodePoolStatusController<C, P> {
    /// The controller; `label_policy` is core's with the plugin's vocabulary.
    pub fn new(
        ctx: Context<C, P>,
        label_policy: LabelPolicy,
        require_ready_node_class: bool,
    ) -> Self {
        Self {
            ctx,
            label_policy,
            require_ready_node_class,
        }
    }

    /// Each NodePool whose status should change: its name, the new status, and the merge
    /// patch that writes it.
    fn statuses(&self, snapshot: &Snapshot, now: Time) -> Vec<(String, NodePoolStatus, Value)> {
        let usage = usage_by_node_pool(snapshot, &HashMap::new());
        snapshot
            .node_pools()
            .filter_map(|pool| {
                let name = pool.metadata.name.clone()?;
                let node_class = snapshot.node_class_for(&pool.spec.template.spec.node_class_ref);
                let desired = desired_status(
                    pool.status.as_ref(),
                    validation_with_warnings(pool, &self.label_policy),
                    node_class_ready(node_class, self.require_ready_node_class),
                    usage.get(&name),
                    now.clone(),
                );
                (pool.status.as_ref() != Some(&desired)).then(|| {
                    let patch = status_patch(pool.status.as_ref(), &desired);
                    (name, desired, patch)
                })
            })
            .collect()
    }
}

impl<C: Cluster, P: CloudProvider> Controller for NodePoolStatusController<C, P> {
    fn name(&self) -> &'static str {
        "nodepool.status"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = Time(self.ctx.clock.now());
        for (name, status, patch) in self.statuses(&snapshot, now) {
            let validated = condition::find(&status.conditions, CONDITION_VALIDATION_SUCCEEDED);
            let message = validated
                .and_then(|c| c.message.as_deref())
                .unwrap_or_default();
            match validated {
                Some(failed) if failed.status == ConditionStatus::False => tracing::warn!(
                    node_pool = %name,
                    reason = failed.reason.as_deref().unwrap_or_default(),
                    message,
                    "NodePool is not valid: nothing is launched for it"
                ),
                Some(_) if !message.is_empty() => tracing::warn!(
                    node_pool = %name,
                    message,
                    "NodePool is admitted as upstream admits it, but some of it cannot work"
                ),
                _ => {}
            }
            self.ctx
                .cluster
                .merge_patch_status::<NodePool>(None, &name, &patch)
                .await?;
        }
        Ok(Requeue::OnChange)
    }
}

#[cfg(test)]
mod tests {
    use core_domain::resources::{ResourceList, ResourceName};
    use serde_json::json;

    use super::*;
    use crate::controllers::provisioning::selection::validation;
    use crate::controllers::testing;

    fn at(seconds: i64) -> Time {
        Time(testing::at(seconds))
    }

    fn ready_node_class(status: &str, reason: &str) -> DynamicObject {
        testing::node_class(
            "default",
            json!({ "status": { "conditions": [
                { "type": "Ready", "status": status, "reason": reason, "message": "why" }
            ] } }),
        )
    }

    fn summary(status: &NodePoolStatus) -> Vec<(String, ConditionStatus, Option<String>)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
            .collect()
    }

    #[test]
    fn a_valid_node_pool_with_a_ready_node_class_is_ready_with_its_counts() {
        let usage = ResourceList::new()
            .with(ResourceName::CPU, 4000)
            .with(ResourceName::new(NODES), 2);
        let status = desired_status(
            None,
            Ok(String::new()),
            node_class_ready(Some(&ready_node_class("True", "")), true),
            Some(&usage),
            at(10),
        );
        assert_eq!(
            summary(&status),
            [
                (
                    CONDITION_VALIDATION_SUCCEEDED.into(),
                    ConditionStatus::True,
                    None
                ),
                (
                    CONDITION_NODE_CLASS_READY.into(),
                    ConditionStatus::True,
                    None
                ),
                (CONDITION_READY.into(), ConditionStatus::True, None),
            ]
        );
        assert_eq!(status.nodes, Some(2));
        assert_eq!(status.resources["cpu"], KubeQuantity("4".into()));
        assert_eq!(status.resources["nodes"], KubeQuantity("2".into()));
    }

    #[test]
    fn a_validation_failure_makes_it_not_ready_with_the_errors() {
        let status = desired_status(
            None,
            Err("spec.template.spec.requirements[0].key: label domain \"x\" is restricted".into()),
            node_class_ready(None, false),
            None,
            at(10),
        );
        let ready = condition::find(&status.conditions, CONDITION_READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason.as_deref(), Some(REASON_VALIDATION_FAILED));
        assert!(ready.message.as_deref().unwrap().contains("is restricted"));
        assert_eq!(status.nodes, Some(0));
    }

    #[test]
    fn node_class_readiness_follows_upstream_reasons() {
        assert_eq!(node_class_ready(None, true).1, REASON_NODE_CLASS_NOT_FOUND);
        let mut deleting = ready_node_class("True", "");
        deleting.metadata.deletion_timestamp = Some(at(1));
        assert_eq!(
            node_class_ready(Some(&deleting), true).1,
            REASON_NODE_CLASS_TERMINATING
        );
        let no_ready = testing::node_class("default", json!({}));
        assert_eq!(
            node_class_ready(Some(&no_ready), true).0,
            ConditionStatus::Unknown
        );
        let failing = node_class_ready(Some(&ready_node_class("False", "AMINotFound")), true);
        assert_eq!(
            failing,
            (ConditionStatus::False, "AMINotFound".into(), "why".into())
        );
        // A plugin that resolves no node class: every node class counts as ready.
        assert_eq!(node_class_ready(None, false).0, ConditionStatus::True);
    }

    #[test]
    fn an_unchanged_outcome_keeps_its_transition_time_so_nothing_is_written() {
        let first = desired_status(
            None,
            Ok(String::new()),
            node_class_ready(None, false),
            None,
            at(10),
        );
        let again = desired_status(
            Some(&first),
            Ok(String::new()),
            node_class_ready(None, false),
            None,
            at(99),
        );
        assert_eq!(first, again);
        let failed = desired_status(
            Some(&first),
            Err("bad".into()),
            node_class_ready(None, false),
            None,
            at(99),
        );
        let validated =
            condition::find(&failed.conditions, CONDITION_VALIDATION_SUCCEEDED).unwrap();
        assert_eq!(validated.last_transition_time, at(99));
    }

    /// RFC 7386 JSON merge patch, as the API server applies it: `null` deletes a key.
    fn merge_patch(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let Value::Object(object) = target else {
            return;
        };
        for (key, value) in patch {
            if value.is_null() {
                object.remove(key);
            } else {
                merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    #[test]
    fn the_patch_deletes_resources_no_longer_counted_and_applies_to_the_desired_status() {
        let gpu = ResourceList::new()
            .with(ResourceName::CPU, 4000)
            .with(ResourceName::new("nvidia.com/gpu"), 1)
            .with(ResourceName::new(NODES), 1);
        let before = desired_status(
            None,
            Ok(String::new()),
            node_class_ready(None, false),
            Some(&gpu),
            at(1),
        );
        let after = desired_status(
            Some(&before),
            Ok(String::new()),
            node_class_ready(None, false),
            None,
            at(2),
        );
        let patch = status_patch(Some(&before), &after);
        assert_eq!(patch["status"]["nodes"], json!(0));
        assert_eq!(
            patch["status"]["resources"],
            json!({ "cpu": null, "nodes": null, "nvidia.com/gpu": null })
        );
        // Applied as the API server applies a merge patch, it gives exactly `after`: the next
        // pass finds nothing to write.
        let mut object = json!({ "status": serde_json::to_value(&before).unwrap() });
        merge_patch(&mut object, &patch);
        let applied: NodePoolStatus = serde_json::from_value(object["status"].clone()).unwrap();
        assert_eq!(applied, after);
    }

    #[test]
    fn validation_uses_the_plugin_vocabulary() {
        use karpenter_api::labels::LabelValueType;
        let pool = testing::node_pool(
            "default",
            json!({ "spec": { "template": { "spec": { "requirements": [
                { "key": "example.cloud/instance-famly", "operator": "In", "values": ["m5"] }
            ] } } } }),
        );
        let policy = LabelPolicy::with_vocabulary(
            ["example.cloud"],
            [("example.cloud/instance-family", LabelValueType::String)],
        );
        let error = validation(&pool, &policy).unwrap_err();
        assert!(
            error.contains("did you mean example.cloud/instance-family?"),
            "{error}"
        );
        assert!(validation(&pool, &LabelPolicy::core()).is_ok());
    }

    /// Upstream admits a requirement value that no label can have (its length and pattern
    /// sit on the array, where the API server ignores them): the NodePool stays valid and
    /// usable, and its `ValidationSucceeded` message says what cannot work.
    #[test]
    fn a_value_upstream_admits_but_no_label_can_have_is_a_warning_in_the_condition() {
        let pool = testing::node_pool(
            "default",
            json!({ "spec": { "template": { "spec": { "requirements": [
                { "key": "team", "operator": "In", "values": ["blue team"] }
            ] } } } }),
        );
        let policy = LabelPolicy::core();
        assert!(validation(&pool, &policy).is_ok());
        let warnings = validation_with_warnings(&pool, &policy).unwrap();
        assert!(
            warnings
                .starts_with("spec.template.spec.requirements[0].values[0]: value \"blue team\""),
            "{warnings}"
        );
        let status = desired_status(
            None,
            Ok(warnings.clone()),
            node_class_ready(None, false),
            None,
            at(10),
        );
        let validated =
            condition::find(&status.conditions, CONDITION_VALIDATION_SUCCEEDED).unwrap();
        assert_eq!(validated.status, ConditionStatus::True);
        assert_eq!(validated.message.as_deref(), Some(warnings.as_str()));
        let ready = condition::find(&status.conditions, CONDITION_READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::True);
    }
}
