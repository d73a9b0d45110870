//! NodeClaims in the cloud provider port's terms, and the small NodeClaim helpers every
//! controller needs: what to hand the plugin ([`request_of`]), what status says was launched
//! ([`launched_of`]), conditions ([`set_condition`]), the provider ID, finalizer and Node
//! readiness checks, taints and quantities converted between the Kubernetes types and the
//! domain's; and the two writes several controllers make: deleting a NodeClaim only if it is
//! still the one they decided about ([`delete_if_same`]), and bringing its termination
//! deadline forward ([`set_termination_deadline`]).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use core_domain::labels::LABEL_NODEPOOL;
use core_domain::quantity::Quantity;
use core_domain::requirements::NodeSelectorRequirement;
use core_domain::resources::{Quantities, ResourceName};
use core_domain::scheduler::{Taint, TaintEffect};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint as KubeTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::nodeclaim::CONDITION_LAUNCHED;
use karpenter_api::{Condition, ConditionStatus, NodeClaim, NodeClassReference, condition};
use kube::Resource;

use super::TERMINATION_FINALIZER;
use crate::cloudprovider::{
    InstanceState, LaunchedNodeClaim, NodeClaimRequest, NodeClassKind, NodeClassRef,
};
use crate::cluster::{Cluster, ClusterError, DeleteOptions, Preconditions, Snapshot};

/// Why a NodeClaim could not be expressed in the port's types. The API server admits only
/// valid NodeClaims, so this means one was written around the schema (or by a newer version).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeClaimConversionError {
    /// A resource quantity does not parse.
    #[error("{field}: {message}")]
    Quantity {
        /// The field, `spec.resources.requests[cpu]`.
        field: String,
        /// Why it does not parse.
        message: String,
    },
    /// A taint effect Kubernetes does not define.
    #[error("{field}: unknown taint effect {effect:?}")]
    TaintEffect {
        /// The field, `spec.taints[0].effect`.
        field: String,
        /// The effect as written.
        effect: String,
    },
    /// `minValues` outside what the domain represents.
    #[error("{field}: minValues {value} is out of range")]
    MinValues {
        /// The field, `spec.requirements[0].minValues`.
        field: String,
        /// The value as written.
        value: i64,
    },
}

/// The NodeClaim as the plugin sees it in Create and IsDrifted.
pub fn request_of(node_claim: &NodeClaim) -> Result<NodeClaimRequest, NodeClaimConversionError> {
    let meta = &node_claim.metadata;
    let spec = &node_claim.spec;
    let requirements = spec
        .requirements
        .iter()
        .enumerate()
        .map(|(index, requirement)| {
            let min_values = requirement
                .min_values
                .map(|value| {
                    u32::try_from(value).map_err(|_| NodeClaimConversionError::MinValues {
                        field: format!("spec.requirements[{index}].minValues"),
                        value,
                    })
                })
                .transpose()?;
            Ok(NodeSelectorRequirement {
                key: requirement.key.clone(),
                operator: requirement.operator,
                values: requirement.values.clone(),
                min_values,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NodeClaimRequest {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        node_class_ref: node_class_ref(&spec.node_class_ref),
        requirements,
        resource_requests: quantities_of("spec.resources.requests", &spec.resources.requests)?,
        taints: taints_of("spec.taints", &spec.taints)?,
        startup_taints: taints_of("spec.startupTaints", &spec.startup_taints)?,
        expire_after: spec.expire_after.duration(),
        termination_grace_period: spec
            .termination_grace_period
            .as_ref()
            .map(|grace| grace.duration()),
        creation_time: meta.creation_timestamp.as_ref().map(system_time),
        deletion_time: meta.deletion_timestamp.as_ref().map(system_time),
    })
}

/// What the NodeClaim's status and labels say was launched; `None` until `Launched` is True
/// with a provider ID. Labels and annotations are the NodeClaim's (the launch's were merged
/// into them); capacity entries that do not parse are left out, as they say nothing usable;
/// the instance's state is not recorded on the NodeClaim, so it is `Unknown`.
pub fn launched_of(node_claim: &NodeClaim) -> Option<LaunchedNodeClaim> {
    let status = node_claim.status.as_ref()?;
    if status.provider_id.is_empty() || !condition::is_true(&status.conditions, CONDITION_LAUNCHED)
    {
        return None;
    }
    let meta = &node_claim.metadata;
    Some(LaunchedNodeClaim {
        provider_id: status.provider_id.clone(),
        image_id: (!status.image_id.is_empty()).then(|| status.image_id.clone()),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        capacity: parsable_quantities(&status.capacity),
        allocatable: parsable_quantities(&status.allocatable),
        state: InstanceState::Unknown,
    })
}

/// Whether a NodeClaim's node class is of a kind the provider manages (upstream `IsManaged`):
/// the others belong to another provider, which core must not launch, collect or finalize.
pub fn is_managed(node_claim: &NodeClaim, kinds: &[NodeClassKind]) -> bool {
    let reference = &node_claim.spec.node_class_ref;
    kinds
        .iter()
        .any(|kind| kind.group == reference.group && kind.kind == reference.kind)
}

/// The provider ID in a NodeClaim's status; empty until launched.
pub fn provider_id_of(node_claim: &NodeClaim) -> &str {
    node_claim
        .status
        .as_ref()
        .map_or("", |status| status.provider_id.as_str())
}

pub use crate::objects::name_of;

/// The name of the NodePool the NodeClaim belongs to: its `karpenter.sh/nodepool` label.
pub fn node_pool_of(node_claim: &NodeClaim) -> Option<&str> {
    node_claim
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_NODEPOOL))
        .map(String::as_str)
}

/// Whether a NodeClaim, or its Node, carries [`TERMINATION_FINALIZER`].
pub fn has_termination_finalizer<K: Resource>(object: &K) -> bool {
    object
        .meta()
        .finalizers
        .iter()
        .flatten()
        .any(|finalizer| finalizer == TERMINATION_FINALIZER)
}

/// The Node's provider ID (empty when unset).
pub fn node_provider_id(node: &Node) -> &str {
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
        .unwrap_or_default()
}

/// The Nodes of a NodeClaim: those with its provider ID (a node name can be reused by a later
/// instance, a provider ID cannot).
pub fn nodes_of<'a>(snapshot: &'a Snapshot, node_claim: &NodeClaim) -> Vec<&'a Node> {
    let provider_id = provider_id_of(node_claim);
    if provider_id.is_empty() {
        return Vec::new();
    }
    snapshot
        .nodes()
        .filter(|node| node_provider_id(node) == provider_id)
        .collect()
}

/// The Nodes of the snapshot by provider ID, for a caller that asks [`nodes_of`] of many
/// NodeClaims (each ask is a scan of every Node).
pub fn nodes_by_provider_id(snapshot: &Snapshot) -> HashMap<&str, Vec<&Node>> {
    // Sized for every Node at once: growing would hash every key again.
    let mut by_provider_id: HashMap<&str, Vec<&Node>> =
        HashMap::with_capacity(snapshot.nodes.len());
    for node in snapshot.nodes() {
        let provider_id = node_provider_id(node);
        if !provider_id.is_empty() {
            by_provider_id.entry(provider_id).or_default().push(node);
        }
    }
    by_provider_id
}

/// The NodeClaim of a Node, by provider ID.
pub fn node_claim_of<'a>(snapshot: &'a Snapshot, node: &Node) -> Option<&'a NodeClaim> {
    let provider_id = node_provider_id(node);
    if provider_id.is_empty() {
        return None;
    }
    snapshot
        .node_claims()
        .find(|node_claim| provider_id_of(node_claim) == provider_id)
}

/// The port's form of a `nodeClassRef`.
pub fn node_class_ref(reference: &NodeClassReference) -> NodeClassRef {
    NodeClassRef {
        group: reference.group.clone(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    }
}

/// Sets condition `type_` at `now`, keeping its `lastTransitionTime` when the status does not
/// change; answers whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    condition::set(conditions, type_, status, reason, message, Time(now))
}

/// The status of condition `type_` of a NodeClaim; `None` when absent.
pub fn condition_status(node_claim: &NodeClaim, type_: &str) -> Option<ConditionStatus> {
    node_claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, type_))
        .map(|found| found.status)
}

/// Whether condition `type_` of a NodeClaim is True.
pub fn is_condition_true(node_claim: &NodeClaim, type_: &str) -> bool {
    condition_status(node_claim, type_) == Some(ConditionStatus::True)
}

/// A Kubernetes taint in the domain's form; `field` names it in errors.
pub fn taint_of(field: &str, taint: &KubeTaint) -> Result<Taint, NodeClaimConversionError> {
    let effect = match taint.effect.as_str() {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        other => {
            return Err(NodeClaimConversionError::TaintEffect {
                field: format!("{field}.effect"),
                effect: other.to_owned(),
            });
        }
    };
    Ok(Taint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect,
    })
}

/// A list of Kubernetes taints in the domain's form; `field` names the list in errors.
pub fn taints_of(
    field: &str,
    taints: &[KubeTaint],
) -> Result<Vec<Taint>, NodeClaimConversionError> {
    taints
        .iter()
        .enumerate()
        .map(|(index, taint)| taint_of(&format!("{field}[{index}]"), taint))
        .collect()
}

/// A domain taint as Kubernetes writes it (an empty value is left out).
pub fn kube_taint(taint: &Taint) -> KubeTaint {
    KubeTaint {
        key: taint.key.clone(),
        value: (!taint.value.is_empty()).then(|| taint.value.clone()),
        effect: taint.effect.as_str().to_owned(),
        time_added: None,
    }
}

/// A Kubernetes resource list in the domain's form; `field` names it in errors.
pub fn quantities_of(
    field: &str,
    list: &BTreeMap<String, KubeQuantity>,
) -> Result<Quantities, NodeClaimConversionError> {
    list.iter()
        .map(|(name, quantity)| {
            let parsed = Quantity::parse(&quantity.0).map_err(|error| {
                NodeClaimConversionError::Quantity {
                    field: format!("{field}[{name}]"),
                    message: error.to_string(),
                }
            })?;
            Ok((ResourceName::new(name), parsed))
        })
        .collect()
}

/// Domain quantities as a Kubernetes resource list, in canonical form.
pub fn kube_quantities(quantities: &Quantities) -> BTreeMap<String, KubeQuantity> {
    quantities
        .iter()
        .map(|(name, quantity)| (name.as_str().to_owned(), KubeQuantity(quantity.to_string())))
        .collect()
}

fn parsable_quantities(list: &BTreeMap<String, KubeQuantity>) -> Quantities {
    list.iter()
        .filter_map(|(name, quantity)| {
            Quantity::parse(&quantity.0)
                .ok()
                .map(|parsed| (ResourceName::new(name), parsed))
        })
        .collect()
}

/// A Kubernetes time as a `SystemTime`.
pub fn system_time(time: &Time) -> SystemTime {
    SystemTime::from(time.0)
}

/// How long ago `since` was at `now`; zero when it is in the future (clocks step back).
pub fn age(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

/// Deletes `node_claim` if it is still the same object (its UID): `Ok(true)` when this call
/// deleted it, `Ok(false)` when it is gone already or was replaced by a new NodeClaim of the
/// same name, which the caller did not decide about.
pub async fn delete_if_same<C: Cluster>(
    cluster: &C,
    node_claim: &NodeClaim,
) -> Result<bool, ClusterError> {
    let preconditions = node_claim
        .metadata
        .uid
        .as_ref()
        .map(Preconditions::uid)
        .unwrap_or_default();
    let options = DeleteOptions {
        grace_period_seconds: None,
        preconditions,
    };
    let name = node_claim.metadata.name.as_deref().unwrap_or_default();
    match cluster.delete::<NodeClaim>(None, name, options).await {
        Ok(()) => Ok(true),
        Err(error) if error.is_not_found() || error.is_conflict() => Ok(false),
        Err(error) => Err(error),
    }
}

/// The `karpenter.sh/nodeclaim-termination-timestamp` a NodeClaim carries, when it holds a
/// valid time.
pub fn annotated_termination_deadline(node_claim: &NodeClaim) -> Option<Timestamp> {
    node_claim
        .metadata
        .annotations
        .as_ref()?
        .get(core_domain::labels::ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP)?
        .parse()
        .ok()
}

/// Writes `karpenter.sh/nodeclaim-termination-timestamp` = `deadline` on the NodeClaim named
/// `name`: the drain deletes its pods by then, PDBs or not. `Ok(false)` when it is gone.
pub async fn set_termination_deadline<C: Cluster>(
    cluster: &C,
    name: &str,
    deadline: Timestamp,
) -> Result<bool, ClusterError> {
    let patch = serde_json::json!({ "metadata": { "annotations": {
        core_domain::labels::ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: deadline.to_string(),
    } } });
    match cluster.merge_patch::<NodeClaim>(None, name, &patch).await {
        Ok(_) => Ok(true),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_domain::requirements::Operator;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use karpenter_api::nodeclaim::ResourceRequirements;
    use karpenter_api::{
        GoDuration, NillableDuration, NodeClaimSpec, NodeClaimStatus,
        NodeSelectorRequirementWithMinValues,
    };

    fn node_claim() -> NodeClaim {
        let mut node_claim = NodeClaim::new(
            "default-abcde",
            NodeClaimSpec {
                taints: vec![KubeTaint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                }],
                startup_taints: vec![KubeTaint {
                    key: "init".into(),
                    value: None,
                    effect: "NoExecute".into(),
                    time_added: None,
                }],
                requirements: vec![NodeSelectorRequirementWithMinValues {
                    key: "node.kubernetes.io/instance-type".into(),
                    operator: Operator::In,
                    values: vec!["m5.large".into(), "m5.xlarge".into()],
                    min_values: Some(2),
                }],
                resources: ResourceRequirements {
                    requests: BTreeMap::from([
                        ("cpu".into(), KubeQuantity("1500m".into())),
                        ("nvidia.com/gpu".into(), KubeQuantity("1".into())),
                    ]),
                },
                node_class_ref: NodeClassReference {
                    kind: "EC2NodeClass".into(),
                    name: "default".into(),
                    group: "karpenter.k8s.aws".into(),
                },
                termination_grace_period: Some(GoDuration::parse("1h").unwrap()),
                expire_after: NillableDuration::never(),
            },
        );
        node_claim.metadata = ObjectMeta {
            name: Some("default-abcde".into()),
            uid: Some("uid-1".into()),
            labels: Some(BTreeMap::from([(
                "karpenter.sh/nodepool".into(),
                "default".into(),
            )])),
            creation_timestamp: Some(Time(Timestamp::from_second(100).unwrap())),
            ..ObjectMeta::default()
        };
        node_claim
    }

    #[test]
    fn request_of_carries_every_field_in_the_domain_types() {
        let request = request_of(&node_claim()).unwrap();
        assert_eq!(request.name, "default-abcde");
        assert_eq!(request.uid, "uid-1");
        assert_eq!(request.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(request.node_class_ref.kind, "EC2NodeClass");
        assert_eq!(
            request.requirements,
            vec![NodeSelectorRequirement {
                key: "node.kubernetes.io/instance-type".into(),
                operator: Operator::In,
                values: vec!["m5.large".into(), "m5.xlarge".into()],
                min_values: Some(2),
            }]
        );
        assert_eq!(
            request.resource_requests[&ResourceName::new("cpu")],
            Quantity::from_millis(1500)
        );
        assert_eq!(
            request.resource_requests[&ResourceName::new("nvidia.com/gpu")],
            Quantity::from_units(1)
        );
        assert_eq!(
            request.taints,
            vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)]
        );
        assert_eq!(
            request.startup_taints,
            vec![Taint::new("init", "", TaintEffect::NoExecute)]
        );
        assert_eq!(request.expire_after, None, "Never");
        assert_eq!(
            request.termination_grace_period,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            request.creation_time,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(100))
        );
        assert_eq!(request.deletion_time, None);
    }

    #[test]
    fn request_of_names_the_field_it_cannot_convert() {
        let mut bad_quantity = node_claim();
        bad_quantity
            .spec
            .resources
            .requests
            .insert("memory".into(), KubeQuantity("lots".into()));
        let error = request_of(&bad_quantity).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("spec.resources.requests[memory]"),
            "{error}"
        );

        let mut bad_effect = node_claim();
        bad_effect.spec.startup_taints[0].effect = "Sometimes".into();
        assert_eq!(
            request_of(&bad_effect).unwrap_err(),
            NodeClaimConversionError::TaintEffect {
                field: "spec.startupTaints[0].effect".into(),
                effect: "Sometimes".into(),
            }
        );
    }

    #[test]
    fn launched_of_needs_launched_true_and_a_provider_id() {
        let mut node_claim = node_claim();
        assert_eq!(launched_of(&node_claim), None, "no status");
        let mut status = NodeClaimStatus {
            provider_id: "aws:///us-east-1a/i-1".into(),
            image_id: "ami-1".into(),
            capacity: BTreeMap::from([
                ("cpu".into(), KubeQuantity("2".into())),
                ("bogus".into(), KubeQuantity("?".into())),
            ]),
            ..NodeClaimStatus::default()
        };
        node_claim.status = Some(status.clone());
        assert_eq!(launched_of(&node_claim), None, "Launched not True");

        set_condition(
            &mut status.conditions,
            CONDITION_LAUNCHED,
            ConditionStatus::True,
            "",
            "",
            Timestamp::from_second(200).unwrap(),
        );
        node_claim.status = Some(status);
        let launched = launched_of(&node_claim).unwrap();
        assert_eq!(launched.provider_id, "aws:///us-east-1a/i-1");
        assert_eq!(launched.image_id.as_deref(), Some("ami-1"));
        assert_eq!(launched.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(
            launched.capacity,
            Quantities::from([(ResourceName::new("cpu"), Quantity::from_units(2))]),
            "the unparsable entry is left out"
        );

        node_claim.status.as_mut().unwrap().provider_id.clear();
        assert_eq!(launched_of(&node_claim), None, "no provider ID");
    }

    #[test]
    fn taints_round_trip_between_kubernetes_and_the_domain() {
        let spec = node_claim().spec;
        for taint in spec.taints.iter().chain(&spec.startup_taints) {
            assert_eq!(&kube_taint(&taint_of("t", taint).unwrap()), taint);
        }
    }

    #[test]
    fn quantities_come_back_in_canonical_form() {
        let quantities = Quantities::from([
            (ResourceName::new("cpu"), Quantity::from_millis(1500)),
            (ResourceName::new("memory"), Quantity::parse("4Gi").unwrap()),
        ]);
        let kube = kube_quantities(&quantities);
        assert_eq!(kube["cpu"].0, "1500m");
        assert_eq!(kube["memory"].0, "4Gi");
        assert_eq!(quantities_of("x", &kube).unwrap(), quantities);
    }

    #[test]
    fn age_is_zero_for_a_time_in_the_future() {
        let earlier = Timestamp::from_second(100).unwrap();
        let later = Timestamp::from_second(160).unwrap();
        assert_eq!(age(earlier, later), Duration::from_secs(60));
        assert_eq!(age(later, earlier), Duration::ZERO);
    }
}
