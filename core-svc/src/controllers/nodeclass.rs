//! Node classes: resolved through the plugin, their status and readiness published, their
//! static hash stamped (upstream's provider `nodeclass` status and `nodeclass.hash`
//! controllers, which here live in core because the plugin has no Kubernetes access).
//!
//! For every node class of a kind the plugin serves, ResolveNodeClass is called when the
//! object is new to this process, when its generation (its spec) changed, and at least every
//! `resolve_again_after` the plugin asked for. The time of the last resolve is kept in memory
//! only: losing it means resolving once more, nothing else.
//!
//! | plugin answer | status | `Ready` | hash annotations |
//! |---|---|---|---|
//! | resolved | the returned fields replaced, the others kept; the plugin's conditions | derived ([`ResolvedNodeClass::readiness`]) | stamped, or removed when it reports no hash |
//! | `Unsupported` | untouched | True | removed if present |
//! | `InvalidRequest` | untouched | False with the message | untouched |
//! | anything else | untouched | untouched | untouched |
//!
//! Hash versioning is the NodePool's (see [`super::hash`]): when the node class's version
//! annotation is not the plugin's, every NodeClaim whose `nodeClassRef` names it and whose
//! version differs is re-stamped first (its hash too unless it is already drifted), then the
//! node class.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::condition::{self, CONDITION_READY};
use karpenter_api::{Condition, ConditionStatus, NodeClassReference};
use kube::core::DynamicObject;
use serde_json::{Map, Value};

use super::hash::{CONFLICT_RETRY, HashAnnotationKeys, apply_restamp, restamps};
use super::nodeclaim::age;
use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::{
    CloudProvider, CloudProviderError, DEFAULT_RESOLVE_AGAIN_AFTER, Readiness, ResolvedNodeClass,
};
use crate::cluster::{Cluster, ClusterError, api_group};
use crate::events::{EventType, ObjectRef, Reason};

/// How soon a node class is resolved again after the plugin could not answer.
pub const PLUGIN_RETRY: Duration = Duration::from_secs(30);

/// The `Ready` reason when the plugin refuses the node class as malformed.
pub const REASON_INVALID: &str = "NodeClassInvalid";

/// What resolving a node class decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resolution<'a> {
    /// The plugin resolved it.
    Resolved(&'a ResolvedNodeClass),
    /// The plugin does not resolve node classes: every one is ready, none has a hash.
    Unsupported,
    /// The plugin cannot read it; the message says why.
    Invalid(&'a str),
}

/// The reference to a node class object, from its `apiVersion`, `kind` and name.
pub fn reference_of(node_class: &DynamicObject) -> NodeClassReference {
    let (group, kind) = node_class
        .types
        .as_ref()
        .map(|types| (api_group(&types.api_version).to_owned(), types.kind.clone()))
        .unwrap_or_default();
    NodeClassReference {
        group,
        kind,
        name: node_class.metadata.name.clone().unwrap_or_default(),
    }
}

/// The conditions a node class should carry after `resolution`, each with `observedGeneration`
/// `generation`; `lastTransitionTime` moves to `now` only for a condition whose status changes.
/// `existing` are the conditions it carries now.
pub fn conditions_after(
    existing: &[Condition],
    resolution: Resolution<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    // (type, status, reason, message) of every condition this resolution reports.
    let mut wanted: Vec<(String, ConditionStatus, String, String)> = Vec::new();
    let ready = |status: ConditionStatus, reason: &str, message: &str| {
        (
            CONDITION_READY.to_owned(),
            status,
            reason.to_owned(),
            message.to_owned(),
        )
    };
    match resolution {
        Resolution::Resolved(resolved) => {
            wanted.extend(resolved.conditions.iter().map(|own| {
                (
                    own.type_.clone(),
                    own.status,
                    own.reason.clone(),
                    own.message.clone(),
                )
            }));
            wanted.push(match resolved.readiness() {
                Readiness::Ready => ready(ConditionStatus::True, "", ""),
                Readiness::NotReady {
                    condition,
                    reason,
                    message: "",
                } => ready(
                    ConditionStatus::False,
                    reason,
                    &format!("{condition} is not True"),
                ),
                Readiness::NotReady {
                    reason, message, ..
                } => ready(ConditionStatus::False, reason, message),
            });
        }
        Resolution::Unsupported => wanted.push(ready(ConditionStatus::True, "", "")),
        Resolution::Invalid(message) => {
            wanted.push(ready(ConditionStatus::False, REASON_INVALID, message));
        }
    }
    let mut reported: Vec<&str> = Vec::new();
    if let Resolution::Invalid(_) = resolution {
        // The plugin's own conditions from the last good resolve stay as they were.
        reported.extend(existing.iter().map(|c| c.type_.as_str()));
    }
    reported.extend(wanted.iter().map(|(type_, ..)| type_.as_str()));
    // Start from the current conditions so that unchanged ones keep their transition time.
    let mut conditions = existing.to_vec();
    for (type_, status, reason, message) in &wanted {
        condition::set(&mut conditions, type_, *status, reason, message, Time(now));
    }
    conditions.retain(|c| reported.contains(&c.type_.as_str()));
    // The plugin's order, Ready last, whatever order the object had them in.
    conditions.sort_by_key(|c| {
        reported
            .iter()
            .position(|type_| *type_ == c.type_)
            .map(|position| (c.type_ == CONDITION_READY, position))
    });
    for condition in &mut conditions {
        condition.observed_generation = generation;
    }
    conditions
}

/// The status a node class should have after `resolution`: its current status with the
/// resolved fields replaced and the conditions of [`conditions_after`].
pub fn desired_status(
    node_class: &DynamicObject,
    resolution: Resolution<'_>,
    now: Timestamp,
) -> Value {
    let current = node_class
        .data
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let existing: Vec<Condition> = current
        .get("conditions")
        .cloned()
        .and_then(|conditions| serde_json::from_value(conditions).ok())
        .unwrap_or_default();
    let mut status = current;
    if let Resolution::Resolved(resolved) = resolution {
        for (field, value) in &resolved.status {
            if field != "conditions" {
                status.insert(field.clone(), value.clone());
            }
        }
    }
    let conditions = conditions_after(&existing, resolution, node_class.metadata.generation, now);
    status.insert(
        "conditions".to_owned(),
        Value::Array(
            conditions
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect(),
        ),
    );
    Value::Object(status)
}

/// The JSON merge patch (RFC 7386) that turns `current` into `desired`; `None` when they are
/// equal. Members `desired` lacks are deleted, so nested objects are replaced exactly rather
/// than merged; arrays are replaced whole.
pub fn merge_patch_between(current: &Value, desired: &Value) -> Option<Value> {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => {
            let mut patch = Map::new();
            for (key, want) in desired {
                let change = match current.get(key) {
                    Some(have) => merge_patch_between(have, want),
                    None => Some(want.clone()),
                };
                if let Some(change) = change {
                    patch.insert(key.clone(), change);
                }
            }
            for key in current.keys().filter(|key| !desired.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ => (current != desired).then(|| desired.clone()),
    }
}

/// The metadata merge patch that brings the node class's hash annotations in line with
/// `resolution`; `None` when nothing changes. Without a hash (or without ResolveNodeClass) the
/// annotations are removed, so that no stale hash can ever make a node look drifted.
pub fn hash_annotations_patch(
    node_class: &DynamicObject,
    keys: &HashAnnotationKeys,
    resolution: Resolution<'_>,
) -> Option<Value> {
    let (hash, version) = keys.read(&node_class.metadata);
    let wanted = match resolution {
        Resolution::Resolved(ResolvedNodeClass {
            static_hash: Some(wanted_hash),
            static_hash_version,
            ..
        }) => Some((wanted_hash.as_str(), static_hash_version.as_str())),
        Resolution::Resolved(_) | Resolution::Unsupported => None,
        Resolution::Invalid(_) => return None,
    };
    let annotations = match wanted {
        Some(wanted) if (hash, version) == (Some(wanted.0), Some(wanted.1)) => return None,
        Some((wanted_hash, wanted_version)) => serde_json::json!({
            keys.hash.as_str(): wanted_hash,
            keys.version.as_str(): wanted_version,
        }),
        None if hash.is_none() && version.is_none() => return None,
        None => serde_json::json!({ keys.hash.as_str(): null, keys.version.as_str(): null }),
    };
    Some(serde_json::json!({ "metadata": { "annotations": annotations } }))
}

/// When a node class was last resolved, and what it looked like then.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LastResolve {
    uid: Option<String>,
    generation: Option<i64>,
    at: Timestamp,
    again_after: Duration,
}

impl LastResolve {
    /// How long until the node class is due again; zero when it is due now (never resolved,
    /// recreated, its spec changed, or its time has come).
    fn due_in(this: Option<&Self>, node_class: &DynamicObject, now: Timestamp) -> Duration {
        match this {
            Some(last)
                if last.uid == node_class.metadata.uid
                    && last.generation == node_class.metadata.generation =>
            {
                last.again_after.saturating_sub(age(last.at, now))
            }
            _ => Duration::ZERO,
        }
    }
}

type Key = (String, String, String);

fn key_of(reference: &NodeClassReference) -> Key {
    (
        reference.group.clone(),
        reference.kind.clone(),
        reference.name.clone(),
    )
}

/// How a status write went.
enum StatusWrite {
    /// Written (or nothing to write); the object is now at this `resourceVersion`.
    Done { resource_version: Option<String> },
    /// The object changed (or went) since the snapshot; decide again on the next pass.
    LostRace,
}

/// How one node class's pass ended.
enum Outcome {
    /// Resolved and written; due again after this long.
    Done(Duration),
    /// Retry after this long (a lost write race, an unreachable plugin).
    Retry(Duration),
}

/// Resolves node classes and publishes the result (upstream's provider `nodeclass`
/// controllers).
#[derive(Debug)]
pub struct NodeClassController<C, P> {
    ctx: Context<C, P>,
    last_resolve: Mutex<HashMap<Key, LastResolve>>,
}

impl<C: Cluster, P: CloudProvider> NodeClassController<C, P> {
    /// A controller on `ctx` that has resolved nothing yet.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            last_resolve: Mutex::new(HashMap::new()),
        }
    }

    fn last_resolve(&self) -> MutexGuard<'_, HashMap<Key, LastResolve>> {
        // Entries are inserted whole; a poisoned map is still a valid cache.
        self.last_resolve
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn resolve_one(
        &self,
        snapshot: &Snapshot,
        node_class: &DynamicObject,
        reference: &NodeClassReference,
        plugin_warned: &mut bool,
    ) -> Result<Outcome, ControllerError> {
        let now = self.ctx.clock.now();
        let json = serde_json::to_value(node_class).unwrap_or_default();
        let answer = self.ctx.cloud.resolve_node_class(&json).await;
        let (resolution, again_after) = match &answer {
            Ok(resolved) => (Resolution::Resolved(resolved), resolved.resolve_again_after),
            Err(CloudProviderError::Unsupported { .. }) => {
                (Resolution::Unsupported, DEFAULT_RESOLVE_AGAIN_AFTER)
            }
            Err(CloudProviderError::InvalidRequest(message)) => {
                (Resolution::Invalid(message), DEFAULT_RESOLVE_AGAIN_AFTER)
            }
            Err(error) => {
                tracing::warn!(
                    group = %reference.group, kind = %reference.kind, node_class = %reference.name,
                    %error, "could not resolve the node class; its status is left as it was"
                );
                if !*plugin_warned {
                    *plugin_warned = true;
                    self.ctx.event(
                        ObjectRef::cluster_scoped(&reference.kind, &reference.name),
                        EventType::Warning,
                        Reason::PluginUnavailable,
                        format!("could not resolve the node class: {error}"),
                        [("reason".to_owned(), error.to_string())].into(),
                    );
                }
                return Ok(Outcome::Retry(PLUGIN_RETRY));
            }
        };

        let StatusWrite::Done { resource_version } = self
            .publish_status(node_class, reference, resolution, now)
            .await?
        else {
            return Ok(Outcome::Retry(CONFLICT_RETRY));
        };
        if !self
            .stamp_hash(
                snapshot,
                node_class,
                reference,
                resolution,
                resource_version,
            )
            .await?
        {
            return Ok(Outcome::Retry(CONFLICT_RETRY));
        }
        self.last_resolve().insert(
            key_of(reference),
            LastResolve {
                uid: node_class.metadata.uid.clone(),
                generation: node_class.metadata.generation,
                at: now,
                again_after,
            },
        );
        Ok(Outcome::Done(again_after))
    }

    /// Writes the status `resolution` calls for, unless the object changed since the snapshot.
    async fn publish_status(
        &self,
        node_class: &DynamicObject,
        reference: &NodeClassReference,
        resolution: Resolution<'_>,
        now: Timestamp,
    ) -> Result<StatusWrite, ClusterError> {
        let current = match node_class.data.get("status") {
            Some(status @ Value::Object(_)) => status.clone(),
            _ => Value::Object(Map::new()),
        };
        let desired = desired_status(node_class, resolution, now);
        let Some(status_patch) = merge_patch_between(&current, &desired) else {
            return Ok(StatusWrite::Done {
                resource_version: node_class.metadata.resource_version.clone(),
            });
        };
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": node_class.metadata.resource_version },
            "status": status_patch,
        });
        match self
            .ctx
            .cluster
            .merge_patch_node_class_status(reference, &patch)
            .await
        {
            Ok(written) => {
                tracing::debug!(kind = %reference.kind, node_class = %reference.name, "published node class status");
                Ok(StatusWrite::Done {
                    resource_version: written.metadata.resource_version,
                })
            }
            Err(error) if error.is_conflict() || error.is_not_found() => Ok(StatusWrite::LostRace),
            Err(error) => Err(error),
        }
    }

    /// Re-stamps the node class's NodeClaims on a version change, then stamps the node class.
    /// `Ok(false)` when a write lost a race.
    async fn stamp_hash(
        &self,
        snapshot: &Snapshot,
        node_class: &DynamicObject,
        reference: &NodeClassReference,
        resolution: Resolution<'_>,
        resource_version: Option<String>,
    ) -> Result<bool, ClusterError> {
        let keys = HashAnnotationKeys::node_class(&reference.group, &reference.kind);
        let Some(annotations) = hash_annotations_patch(node_class, &keys, resolution) else {
            return Ok(true);
        };
        if let Resolution::Resolved(ResolvedNodeClass {
            static_hash: Some(hash),
            static_hash_version: version,
            ..
        }) = resolution
            && keys.read(&node_class.metadata).1 != Some(version.as_str())
        {
            let launched_from_it = snapshot
                .node_claims()
                .filter(|node_claim| node_claim.spec.node_class_ref == *reference);
            for restamp in restamps(launched_from_it, &keys, hash, version) {
                if !apply_restamp(self.ctx.cluster.as_ref(), &keys, &restamp).await? {
                    return Ok(false);
                }
            }
        }
        let mut patch = annotations;
        if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("resourceVersion".to_owned(), resource_version.into());
        }
        match self
            .ctx
            .cluster
            .merge_patch_node_class(reference, &patch)
            .await
        {
            Ok(_) => {
                tracing::info!(kind = %reference.kind, node_class = %reference.name, annotation = %keys.hash, "stamped the node class hash");
                Ok(true)
            }
            Err(error) if error.is_conflict() || error.is_not_found() => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for NodeClassController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclass"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let supported = self.ctx.cloud.supported_node_classes();
        let mut requeue = Requeue::OnChange;
        let mut plugin_warned = false;
        for node_class in &snapshot.node_classes {
            let reference = reference_of(node_class);
            if !super::hash::is_managed(&reference, supported) {
                continue;
            }
            let now = self.ctx.clock.now();
            let due_in = {
                let cache = self.last_resolve();
                LastResolve::due_in(cache.get(&key_of(&reference)), node_class, now)
            };
            let next = if due_in.is_zero() {
                match self
                    .resolve_one(&snapshot, node_class, &reference, &mut plugin_warned)
                    .await?
                {
                    Outcome::Done(after) | Outcome::Retry(after) => after,
                }
            } else {
                due_in
            };
            requeue = requeue.min(Requeue::After(next));
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cloudprovider::NodeClassCondition;
    use crate::controllers::testing::at;

    fn node_class(status: Value, annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": { "name": "default", "generation": 4, "uid": "u1", "annotations": annotations },
            "spec": { "role": "r" },
            "status": status,
        }))
        .unwrap()
    }

    fn resolved(conditions: Vec<NodeClassCondition>) -> ResolvedNodeClass {
        ResolvedNodeClass {
            status: serde_json::from_value(json!({ "amis": [{ "id": "ami-2" }] })).unwrap(),
            conditions,
            static_hash: Some("123".into()),
            static_hash_version: "v6".into(),
            resolve_again_after: Duration::from_secs(60),
        }
    }

    fn own(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> NodeClassCondition {
        NodeClassCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn summary(conditions: &[Condition]) -> Vec<(&str, ConditionStatus, Option<&str>)> {
        conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status, c.reason.as_deref()))
            .collect()
    }

    #[test]
    fn reference_of_reads_group_kind_and_name() {
        assert_eq!(
            reference_of(&node_class(json!({}), json!({}))),
            NodeClassReference {
                group: "karpenter.k8s.aws".into(),
                kind: "EC2NodeClass".into(),
                name: "default".into(),
            }
        );
    }

    #[test]
    fn given_every_condition_true_then_ready_is_true_and_last_with_the_generation() {
        let resolved = resolved(vec![
            own("SubnetsReady", ConditionStatus::True, "", ""),
            own("AMIsReady", ConditionStatus::True, "", ""),
        ]);
        let conditions = conditions_after(&[], Resolution::Resolved(&resolved), Some(4), at(10));
        assert_eq!(
            summary(&conditions),
            vec![
                ("SubnetsReady", ConditionStatus::True, None),
                ("AMIsReady", ConditionStatus::True, None),
                ("Ready", ConditionStatus::True, None),
            ]
        );
        assert!(conditions.iter().all(|c| c.observed_generation == Some(4)));
        assert!(
            conditions
                .iter()
                .all(|c| c.last_transition_time == Time(at(10)))
        );
    }

    #[test]
    fn given_a_failing_condition_then_ready_is_false_with_its_reason_and_message() {
        let resolved = resolved(vec![
            own("AMIsReady", ConditionStatus::True, "", ""),
            own(
                "SubnetsReady",
                ConditionStatus::False,
                "SubnetsNotFound",
                "no subnet matches",
            ),
        ]);
        let conditions = conditions_after(&[], Resolution::Resolved(&resolved), Some(1), at(10));
        let ready = condition::find(&conditions, CONDITION_READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason.as_deref(), Some("SubnetsNotFound"));
        assert_eq!(ready.message.as_deref(), Some("no subnet matches"));
    }

    #[test]
    fn given_an_unchanged_status_then_the_transition_time_is_kept_and_dropped_conditions_go() {
        let first = resolved(vec![
            own("AMIsReady", ConditionStatus::True, "", ""),
            own("Legacy", ConditionStatus::True, "", ""),
        ]);
        let before = conditions_after(&[], Resolution::Resolved(&first), Some(1), at(10));
        let second = resolved(vec![own("AMIsReady", ConditionStatus::True, "", "")]);
        let after = conditions_after(&before, Resolution::Resolved(&second), Some(2), at(99));
        assert_eq!(
            summary(&after),
            vec![
                ("AMIsReady", ConditionStatus::True, None),
                ("Ready", ConditionStatus::True, None),
            ]
        );
        assert!(after.iter().all(|c| c.last_transition_time == Time(at(10))));
        assert!(after.iter().all(|c| c.observed_generation == Some(2)));
    }

    #[test]
    fn given_unsupported_then_only_ready_true() {
        let conditions = conditions_after(&[], Resolution::Unsupported, Some(1), at(10));
        assert_eq!(
            summary(&conditions),
            vec![("Ready", ConditionStatus::True, None)]
        );
    }

    #[test]
    fn given_an_invalid_node_class_then_ready_is_false_and_the_other_conditions_stay() {
        let good = resolved(vec![own("AMIsReady", ConditionStatus::True, "", "")]);
        let before = conditions_after(&[], Resolution::Resolved(&good), Some(1), at(10));
        let after = conditions_after(
            &before,
            Resolution::Invalid("spec.role: required"),
            Some(2),
            at(20),
        );
        assert_eq!(
            summary(&after),
            vec![
                ("AMIsReady", ConditionStatus::True, None),
                ("Ready", ConditionStatus::False, Some(REASON_INVALID)),
            ]
        );
        let ready = condition::find(&after, CONDITION_READY).unwrap();
        assert_eq!(ready.message.as_deref(), Some("spec.role: required"));
        assert_eq!(ready.last_transition_time, Time(at(20)));
    }

    #[test]
    fn desired_status_replaces_the_returned_fields_and_keeps_the_others() {
        let class = node_class(
            json!({ "amis": [{ "id": "ami-1" }], "instanceProfile": "p", "conditions": [] }),
            json!({}),
        );
        let resolved = resolved(vec![]);
        let status = desired_status(&class, Resolution::Resolved(&resolved), at(5));
        assert_eq!(status["amis"], json!([{ "id": "ami-2" }]));
        assert_eq!(status["instanceProfile"], json!("p"));
        assert_eq!(status["conditions"][0]["type"], json!("Ready"));
    }

    #[test]
    fn merge_patch_between_deletes_what_is_gone_and_leaves_out_what_is_equal() {
        let current = json!({ "a": 1, "nested": { "x": 1, "y": 2 }, "list": [1, 2], "gone": true });
        let desired = json!({ "a": 1, "nested": { "x": 1 }, "list": [2] });
        assert_eq!(
            merge_patch_between(&current, &desired),
            Some(json!({ "nested": { "y": null }, "list": [2], "gone": null }))
        );
        assert_eq!(merge_patch_between(&desired, &desired), None);
    }

    #[test]
    fn hash_annotations_follow_the_resolution() {
        let keys = HashAnnotationKeys::node_class("karpenter.k8s.aws", "EC2NodeClass");
        let resolved = resolved(vec![]);
        let bare = node_class(json!({}), json!({}));
        assert_eq!(
            hash_annotations_patch(&bare, &keys, Resolution::Resolved(&resolved)),
            Some(json!({ "metadata": { "annotations": {
                "karpenter.k8s.aws/ec2nodeclass-hash": "123",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6",
            } } }))
        );
        let stamped = node_class(
            json!({}),
            json!({
                "karpenter.k8s.aws/ec2nodeclass-hash": "123",
                "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6",
            }),
        );
        assert_eq!(
            hash_annotations_patch(&stamped, &keys, Resolution::Resolved(&resolved)),
            None
        );
        assert_eq!(
            hash_annotations_patch(&stamped, &keys, Resolution::Invalid("bad")),
            None,
            "an invalid node class keeps its hash"
        );
        assert_eq!(
            hash_annotations_patch(&stamped, &keys, Resolution::Unsupported),
            Some(json!({ "metadata": { "annotations": {
                "karpenter.k8s.aws/ec2nodeclass-hash": null,
                "karpenter.k8s.aws/ec2nodeclass-hash-version": null,
            } } }))
        );
        assert_eq!(
            hash_annotations_patch(&bare, &keys, Resolution::Unsupported),
            None
        );
    }

    #[test]
    fn a_node_class_is_due_when_new_changed_recreated_or_its_time_has_come() {
        let class = node_class(json!({}), json!({}));
        let last = LastResolve {
            uid: Some("u1".into()),
            generation: Some(4),
            at: at(100),
            again_after: Duration::from_secs(60),
        };
        assert_eq!(LastResolve::due_in(None, &class, at(100)), Duration::ZERO);
        assert_eq!(
            LastResolve::due_in(Some(&last), &class, at(130)),
            Duration::from_secs(30)
        );
        assert_eq!(
            LastResolve::due_in(Some(&last), &class, at(160)),
            Duration::ZERO
        );
        let changed = LastResolve {
            generation: Some(3),
            ..last.clone()
        };
        assert_eq!(
            LastResolve::due_in(Some(&changed), &class, at(130)),
            Duration::ZERO
        );
        let recreated = LastResolve {
            uid: Some("u0".into()),
            ..last
        };
        assert_eq!(
            LastResolve::due_in(Some(&recreated), &class, at(130)),
            Duration::ZERO
        );
    }
}
