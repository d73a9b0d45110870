//! The report's `finalState`: the objects and instances at the end of the run.

use super::*;

/// The objects at the end, as the report lists them.
pub(super) fn final_state(snapshot: &Snapshot, instances: &[InstanceView]) -> FinalState {
    let claims_by_provider: BTreeMap<&str, &str> = snapshot
        .node_claims()
        .filter_map(|claim| {
            let id = claim.status.as_ref()?.provider_id.as_str();
            (!id.is_empty()).then_some((id, claim.metadata.name.as_deref().unwrap_or_default()))
        })
        .collect();
    FinalState {
        node_pools: snapshot
            .node_pools()
            .map(|pool| FinalNodePool {
                name: pool.metadata.name.clone().unwrap_or_default(),
                annotations: string_map(pool.metadata.annotations.as_ref()),
            })
            .collect(),
        node_claims: snapshot
            .node_claims()
            .map(|claim| {
                let labels = string_map(claim.metadata.labels.as_ref());
                let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
                let status = claim.status.clone().unwrap_or_default();
                FinalNodeClaim {
                    name: claim.metadata.name.clone().unwrap_or_default(),
                    node_pool: label("karpenter.sh/nodepool"),
                    provider_id: status.provider_id.clone(),
                    instance_type: label("node.kubernetes.io/instance-type"),
                    zone: label("topology.kubernetes.io/zone"),
                    capacity_type: label("karpenter.sh/capacity-type"),
                    image_id: status.image_id.clone(),
                    annotations: string_map(claim.metadata.annotations.as_ref()),
                    requirements: claim.spec.requirements.clone(),
                    conditions: status
                        .conditions
                        .iter()
                        .map(|c| {
                            (
                                c.type_.clone(),
                                FinalCondition {
                                    status: condition_status(c.status).to_owned(),
                                    reason: c.reason.clone().unwrap_or_default(),
                                },
                            )
                        })
                        .collect(),
                    deleting: claim.metadata.deletion_timestamp.is_some(),
                    labels,
                }
            })
            .collect(),
        nodes: snapshot
            .nodes()
            .map(|node| FinalNode {
                name: node.metadata.name.clone().unwrap_or_default(),
                node_claim: node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.provider_id.as_deref())
                    .and_then(|id| claims_by_provider.get(id))
                    .map(|name| (*name).to_owned()),
                labels: string_map(node.metadata.labels.as_ref()),
                annotations: string_map(node.metadata.annotations.as_ref()),
                taints: node
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(|taint| serde_json::to_value(taint).ok())
                    .collect(),
                ready: world::is_node_ready(node),
            })
            .collect(),
        pods: snapshot
            .pods()
            .map(|pod| FinalPod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                node: world::bound_node(pod).map(str::to_owned),
                phase: world::phase(pod).unwrap_or("Pending").to_owned(),
                labels: string_map(pod.metadata.labels.as_ref()),
            })
            .collect(),
        instances: instances
            .iter()
            .map(|i| FinalInstance {
                provider_id: i.provider_id.clone(),
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: i.capacity_type.clone(),
                image_id: i.image_id.clone(),
                state: i.state.clone(),
            })
            .collect(),
    }
}
