//! Placement hints: tells the kube-scheduler which Node the provisioner planned each pod for.
//!
//! The provisioner packs pods onto the NodeClaims it launches; once their Nodes join, the
//! kube-scheduler binds the pods in its own order and to its own choice of node. When many
//! Nodes join at once that choice can differ from the plan, and pods that fitted the plan no
//! longer fit what is left: the provisioner launches more capacity for them, and consolidation
//! removes it again minutes later. Kubernetes lets external components set a pending pod's
//! `status.nominatedNodeName` to the node they expect it on (KEP-5278, "nominated node name
//! for an expected pod placement", kubernetes/enhancements
//! `keps/sig-scheduling/5278-nominated-node-name-for-expectation`); the kube-scheduler tries
//! the nominated node first and takes it when the pod fits there (KEP-1923, "try nominated
//! node first"), and from Kubernetes 1.34 no longer clears the field on a failed attempt. On
//! older versions the hint lasts one scheduling attempt, which is the one that matters.
//!
//! A pod gets a hint when it is nominated to a NodeClaim whose Node has registered, is pending
//! and unbound, and does not already carry that hint. Only Nodes of NodeClaims are named: a
//! nomination of a Node no NodeClaim manages reads as the kube-scheduler's own preemption
//! ([`super::selection::Preemptions`]), so the provisioner never writes one. A hint that
//! proved wrong is harmless: the kube-scheduler looks at every other node next, and the
//! provisioner still provisions for the pod (the rule in `Preemptions`).

use crate::cluster::SlimPod;
use std::collections::HashMap;

use serde_json::{Value, json};

use super::nominations::{Nominations, Target};
use super::selection::{is_terminating, node_name, nominated_node, pod_uid};
use crate::cluster::Snapshot;

/// One hint to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint<'a> {
    /// The pod.
    pub pod: &'a SlimPod,
    /// The Node it is planned for.
    pub node: &'a str,
}

impl Hint<'_> {
    /// The status merge patch that writes the hint. It carries the pod's `resourceVersion`: a
    /// pod bound or changed since the snapshot gets a conflict, and the next pass decides again.
    pub fn patch(&self) -> Value {
        json!({
            "metadata": { "resourceVersion": self.pod.metadata.resource_version },
            "status": { "nominatedNodeName": self.node },
        })
    }
}

/// The hints to write: for each pending, unbound pod nominated to a NodeClaim whose Node has
/// joined (and is not being deleted), the Node's name, unless the pod carries it already.
/// In the snapshot's pod order.
pub fn hints<'a>(snapshot: &'a Snapshot, nominations: &Nominations) -> Vec<Hint<'a>> {
    if nominations.is_empty() {
        return Vec::new();
    }
    let node_of_claim: HashMap<&str, &str> = nodes_of_claims(snapshot)
        .filter(|(_, node)| {
            snapshot
                .node(node)
                .is_some_and(|node| node.metadata.deletion_timestamp.is_none())
        })
        .collect();
    if node_of_claim.is_empty() {
        return Vec::new();
    }
    snapshot
        .pods()
        .filter(|pod| node_name(pod).is_none() && !is_terminating(pod) && is_pending(pod))
        .filter_map(|pod| {
            let Target::NodeClaim(claim) = &nominations.get(&pod_uid(pod))?.target else {
                return None;
            };
            let node = *node_of_claim.get(claim.as_str())?;
            (nominated_node(pod) != Some(node)).then_some(Hint { pod, node })
        })
        .collect()
}

/// Each NodeClaim (not being deleted) with its Node, by name: the Node its status names once
/// registered, or before that the Node whose provider ID is the NodeClaim's (the kubelet
/// creates the Node with the `karpenter.sh/unregistered` taint, which keeps the kube-scheduler
/// away until registration removes it, so a hint written then is in place in time).
pub fn nodes_of_claims(snapshot: &Snapshot) -> impl Iterator<Item = (&str, &str)> + '_ {
    let node_of_provider_id: HashMap<&str, &str> = snapshot
        .nodes()
        .filter_map(|node| {
            let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
            Some((provider_id, node.metadata.name.as_deref()?))
        })
        .filter(|(provider_id, _)| !provider_id.is_empty())
        .collect();
    snapshot
        .node_claims()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .filter_map(move |claim| {
            let name = claim.metadata.name.as_deref()?;
            let status = claim.status.as_ref()?;
            let node = if status.node_name.is_empty() {
                *node_of_provider_id.get(status.provider_id.as_str())?
            } else {
                status.node_name.as_str()
            };
            Some((name, node))
        })
}

fn is_pending(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        .is_none_or(|phase| phase == "Pending")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use jiff::Timestamp;
    use karpenter_api::NodeClaim;

    use super::*;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing::{self, merged};

    fn pod(name: &str, extra: Value) -> Pod {
        Pod::from(testing::unschedulable_pod(
            name,
            merged(json!({ "metadata": { "resourceVersion": "7" } }), extra),
        ))
    }

    fn deleting() -> Value {
        json!({ "metadata": {
            "deletionTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
        } })
    }

    fn claim(name: &str, node: &str) -> NodeClaim {
        testing::node_claim(
            name,
            json!({ "status": { "nodeName": node, "providerID": format!("test:///{name}") } }),
        )
    }

    fn snapshot(pods: Vec<Pod>) -> Snapshot {
        let mut snapshot = Snapshot {
            nodes: vec![
                Arc::new(testing::node("node-a", json!({}))),
                Arc::new(testing::node("node-gone", deleting())),
                // The kubelet's Node for a NodeClaim not registered yet.
                Arc::new(testing::node(
                    "node-joining",
                    json!({ "spec": { "providerID": "test:///claim-joining" } }),
                )),
            ],
            node_claims: vec![
                Arc::new(claim("claim-a", "node-a")),
                Arc::new(claim("claim-launching", "")),
                Arc::new(claim("claim-joining", "")),
                Arc::new(claim("claim-gone", "node-gone")),
            ],
            pods: pods.into_iter().map(Arc::new).collect(),
            ..Snapshot::default()
        };
        snapshot.sort();
        snapshot
    }

    fn nominated(pairs: &[(&str, Target)]) -> Nominations {
        let mut nominations = Nominations::new(Duration::from_secs(20));
        for (pod, target) in pairs {
            nominations.nominate(&format!("uid-{pod}"), target.clone(), Timestamp::UNIX_EPOCH);
        }
        nominations
    }

    fn claim_target(name: &str) -> Target {
        Target::NodeClaim(name.to_owned())
    }

    #[test]
    fn given_pods_nominated_to_a_registered_node_claim_then_each_is_hinted_at_its_node_once() {
        let snapshot = snapshot(vec![
            pod("fresh", json!({})),
            pod(
                "hinted",
                json!({ "status": { "nominatedNodeName": "node-a" } }),
            ),
            pod(
                "elsewhere",
                json!({ "status": { "nominatedNodeName": "node-b" } }),
            ),
            pod("joining", json!({})),
        ]);
        let nominations = nominated(&[
            ("joining", claim_target("claim-joining")),
            ("fresh", claim_target("claim-a")),
            ("hinted", claim_target("claim-a")),
            ("elsewhere", claim_target("claim-a")),
        ]);
        let written: Vec<(&str, &str)> = hints(&snapshot, &nominations)
            .iter()
            .map(|hint| (hint.pod.metadata.name.as_deref().unwrap(), hint.node))
            .collect();
        assert_eq!(
            written,
            [
                ("elsewhere", "node-a"),
                ("fresh", "node-a"),
                ("joining", "node-joining")
            ]
        );
    }

    #[test]
    fn given_no_registered_node_or_no_pending_pod_then_nothing_is_hinted() {
        let snapshot = snapshot(vec![
            pod("launching", json!({})),
            pod("gone", json!({})),
            pod("unmanaged", json!({})),
            pod("bound", json!({ "spec": { "nodeName": "node-a" } })),
            pod("running", json!({ "status": { "phase": "Running" } })),
            pod(
                "terminating",
                json!({ "metadata": { "deletionTimestamp": "2025-01-01T00:00:00Z" } }),
            ),
            pod("not-nominated", json!({})),
        ]);
        let nominations = nominated(&[
            ("launching", claim_target("claim-launching")),
            ("gone", claim_target("claim-gone")),
            ("unmanaged", Target::Node("node-a".to_owned())),
            ("bound", claim_target("claim-a")),
            ("running", claim_target("claim-a")),
            ("terminating", claim_target("claim-a")),
        ]);
        assert_eq!(hints(&snapshot, &nominations), []);
    }

    #[test]
    fn given_a_hint_then_its_patch_sets_the_field_under_the_pods_resource_version() {
        let snapshot = snapshot(vec![pod("fresh", json!({}))]);
        let nominations = nominated(&[("fresh", claim_target("claim-a"))]);
        let found = hints(&snapshot, &nominations);
        assert_eq!(
            found[0].patch(),
            json!({
                "metadata": { "resourceVersion": "7" },
                "status": { "nominatedNodeName": "node-a" },
            })
        );
    }
}
