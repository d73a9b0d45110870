//! A NodeClaim as the API server serves it (`kubectl get nodeclaim NAME -o json`), turned into
//! the plugin API's message. IsDrifted takes one in `node_claim_object` so that a person
//! debugging drift with grpcurl pipes kubectl's output in instead of retyping the NodeClaim in
//! the message's shape; core always sends the message itself.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::NodeClaim;
use provider_sdk::v1;

fn quantities(list: &std::collections::BTreeMap<String, Quantity>) -> HashMap<String, String> {
    list.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

fn taint(taint: &k8s_openapi::api::core::v1::Taint, path: &str) -> Result<v1::Taint, String> {
    let effect = v1::TaintEffect::from_kubernetes(&taint.effect)
        .ok_or_else(|| format!("{path}.effect: {:?} is not a taint effect", taint.effect))?;
    Ok(v1::Taint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect: effect.into(),
    })
}

fn timestamp(
    time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Option<prost_types::Timestamp> {
    time.map(|time| prost_types::Timestamp {
        seconds: time.0.as_second(),
        nanos: time.0.subsec_nanosecond(),
    })
}

fn duration(
    duration: Option<std::time::Duration>,
    path: &str,
) -> Result<Option<prost_types::Duration>, String> {
    duration
        .map(prost_types::Duration::try_from)
        .transpose()
        .map_err(|e| format!("{path}: {e}"))
}

/// The message for the NodeClaim `object` (a `karpenter.sh/v1` NodeClaim as JSON); the error
/// names the field that is not one.
pub fn node_claim_from_object(object: serde_json::Value) -> Result<v1::NodeClaim, String> {
    const PATH: &str = "node_claim_object";
    let claim: NodeClaim =
        serde_json::from_value(object).map_err(|e| format!("{PATH}: not a NodeClaim: {e}"))?;
    let meta = &claim.metadata;
    let spec = &claim.spec;
    let requirements = spec
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let min_values =
                r.min_values.map(i32::try_from).transpose().map_err(|_| {
                    format!("{PATH}.spec.requirements[{i}].minValues: out of range")
                })?;
            let operator = v1::Operator::from_kubernetes(r.operator.as_str())
                .ok_or_else(|| format!("{PATH}.spec.requirements[{i}].operator: not in the API"))?;
            Ok(v1::Requirement {
                key: r.key.clone(),
                operator: operator.into(),
                values: r.values.clone(),
                min_values,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let taints = |list: &[k8s_openapi::api::core::v1::Taint], field: &str| {
        list.iter()
            .enumerate()
            .map(|(i, t)| taint(t, &format!("{PATH}.spec.{field}[{i}]")))
            .collect::<Result<Vec<_>, String>>()
    };
    Ok(v1::NodeClaim {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        labels: meta
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        annotations: meta
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        creation_timestamp: timestamp(meta.creation_timestamp.as_ref()),
        deletion_timestamp: timestamp(meta.deletion_timestamp.as_ref()),
        spec: Some(v1::NodeClaimSpec {
            node_class_ref: Some(v1::NodeClassReference {
                group: spec.node_class_ref.group.clone(),
                kind: spec.node_class_ref.kind.clone(),
                name: spec.node_class_ref.name.clone(),
            }),
            requirements,
            resource_requests: quantities(&spec.resources.requests),
            taints: taints(&spec.taints, "taints")?,
            startup_taints: taints(&spec.startup_taints, "startupTaints")?,
            expire_after: duration(
                spec.expire_after.duration(),
                &format!("{PATH}.spec.expireAfter"),
            )?,
            termination_grace_period: duration(
                spec.termination_grace_period
                    .as_ref()
                    .map(karpenter_api::duration::GoDuration::duration),
                &format!("{PATH}.spec.terminationGracePeriod"),
            )?,
        }),
        status: claim.status.as_ref().map(|status| v1::NodeClaimStatus {
            provider_id: status.provider_id.clone(),
            image_id: status.image_id.clone(),
            capacity: quantities(&status.capacity),
            allocatable: quantities(&status.allocatable),
            instance_state: v1::InstanceState::Unspecified.into(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A NodeClaim as `kubectl get nodeclaim -o json` prints it.
    fn printed() -> serde_json::Value {
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "uid": "6f1c",
                "creationTimestamp": "2026-11-01T10:00:00Z",
                "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/arch": "amd64"},
                "annotations": {"karpenter.k8s.aws/ec2nodeclass-hash": "123",
                                "karpenter.k8s.aws/ec2nodeclass-hash-version": "v4"},
                "finalizers": ["karpenter.sh/termination"],
                "resourceVersion": "4242",
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                ],
                "resources": {"requests": {"cpu": "1200m", "memory": "1Gi"}},
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
            "status": {
                "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
                "imageID": "ami-0123456789abcdef0",
                "nodeName": "ip-10-0-1-23.ec2.internal",
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                                "message": "", "lastTransitionTime": "2026-11-01T10:00:05Z"}],
            },
        })
    }

    #[test]
    fn kubectls_nodeclaim_becomes_the_message_core_would_send() {
        let claim = node_claim_from_object(printed()).unwrap();
        assert_eq!(claim.name, "default-abcde");
        assert_eq!(claim.labels["kubernetes.io/arch"], "amd64");
        assert_eq!(
            claim.annotations["karpenter.k8s.aws/ec2nodeclass-hash"],
            "123"
        );
        assert_eq!(
            claim.creation_timestamp.map(|t| t.seconds),
            Some(1_793_527_200)
        );
        let spec = claim.spec.unwrap();
        assert_eq!(spec.node_class_ref.unwrap().kind, "EC2NodeClass");
        assert_eq!(spec.requirements.len(), 2);
        assert_eq!(spec.requirements[1].operator, i32::from(v1::Operator::Gt));
        assert_eq!(spec.resource_requests["cpu"], "1200m");
        assert_eq!(
            spec.taints[0].effect,
            i32::from(v1::TaintEffect::NoSchedule)
        );
        assert_eq!(spec.expire_after.map(|d| d.seconds), Some(720 * 3600));
        let status = claim.status.unwrap();
        assert_eq!(status.provider_id, "aws:///us-east-1a/i-0123456789abcdef0");
        assert_eq!(status.image_id, "ami-0123456789abcdef0");
        assert_eq!(status.capacity["memory"], "8Gi");
    }

    #[test]
    fn what_is_not_a_nodeclaim_is_refused_naming_the_field() {
        let mut object = printed();
        object["spec"]["requirements"][0]["operator"] = json!("Near");
        let error = node_claim_from_object(object).unwrap_err();
        assert!(
            error.starts_with("node_claim_object: not a NodeClaim"),
            "{error}"
        );
        let mut object = printed();
        object["spec"]["taints"][0]["effect"] = json!("Sometimes");
        assert_eq!(
            node_claim_from_object(object).unwrap_err(),
            "node_claim_object.spec.taints[0].effect: \"Sometimes\" is not a taint effect"
        );
    }
}
