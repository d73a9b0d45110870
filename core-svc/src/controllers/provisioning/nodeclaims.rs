//! The NodeClaim object for a NodeClaim the scheduler planned, as upstream's
//! `NodeClaimTemplate.ToNodeClaim` writes it:
//!
//! - `generateName: <nodepool>-`, owned by the NodePool (upstream sets the owner reference, with
//!   `blockOwnerDeletion`, so deleting a NodePool deletes its NodeClaims);
//! - labels: the template's, `karpenter.sh/nodepool` and `<group>/<lowercase kind>` naming the
//!   node class;
//! - annotations: the template's, the NodePool hash and its version, and the node class's
//!   hash annotations (`<group>/<lowercase kind>-hash[-version]`) copied from the node class,
//!   which is what its drift is later compared with;
//! - spec: the template's taints, startup taints, node class, `expireAfter` and
//!   `terminationGracePeriod`; requirements the template's narrowed by the pods (the planned
//!   ones, which contain the template's), with `node.kubernetes.io/instance-type In` listing the
//!   options cheapest first (at most 600); `resources.requests` what the pods and DaemonSets
//!   request.
//!
//! The hostname requirement the scheduler uses to tell planned NodeClaims apart is dropped, as
//! upstream drops it: the API refuses it, and the node's name is not known yet.

use std::collections::BTreeMap;

use core_domain::labels::{
    LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, node_class_label_key,
};
use core_domain::requirements::Operator;
use core_domain::scheduler::PlannedNodeClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::nodeclaim::ResourceRequirements;
use karpenter_api::nodepool::{
    ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION,
};
use karpenter_api::{NodeClaim, NodeClaimSpec, NodePool, NodeSelectorRequirementWithMinValues};
use kube::core::DynamicObject;

use crate::controllers::hash::HashAnnotationKeys;

/// The NodeClaim to create for `planned`, a NodeClaim of `pool` (see the module
/// documentation); `node_class` is the pool's node class, when it exists.
pub fn node_claim(
    planned: &PlannedNodeClaim,
    pool: &NodePool,
    node_class: Option<&DynamicObject>,
) -> NodeClaim {
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let template = &pool.spec.template;
    let reference = &template.spec.node_class_ref;

    let mut labels = template.metadata.labels.clone();
    labels.insert(LABEL_NODEPOOL.to_owned(), pool_name.clone());
    labels.insert(
        node_class_label_key(&reference.group, &reference.kind),
        reference.name.clone(),
    );

    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(ANNOTATION_NODEPOOL_HASH.to_owned(), pool.static_hash());
    annotations.insert(
        ANNOTATION_NODEPOOL_HASH_VERSION.to_owned(),
        NODEPOOL_HASH_VERSION.to_owned(),
    );
    if let Some(node_class) = node_class {
        let keys = HashAnnotationKeys::node_class(&reference.group, &reference.kind);
        let (hash, version) = keys.read(&node_class.metadata);
        for (key, value) in [(keys.hash, hash), (keys.version, version)] {
            if let Some(value) = value {
                annotations.insert(key, value.to_owned());
            }
        }
    }

    let owner_references = pool.metadata.uid.as_ref().map(|uid| {
        vec![OwnerReference {
            api_version: format!("{}/{}", karpenter_api::GROUP, karpenter_api::VERSION),
            kind: "NodePool".to_owned(),
            name: pool_name.clone(),
            uid: uid.clone(),
            block_owner_deletion: Some(true),
            controller: None,
        }]
    });

    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references,
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements: requirements(
                planned,
                &node_class_label_key(&reference.group, &reference.kind),
            ),
            resources: ResourceRequirements {
                requests: requests(planned),
            },
            node_class_ref: reference.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    }
}

/// The planned requirements in the API's form, instance types cheapest first; without the
/// hostname, and without the node class label `node_class_key` (the scheduler plans with it so
/// that a pod may select a node class, and the NodeClaim carries it as a label and names the
/// class in `nodeClassRef`).
fn requirements(
    planned: &PlannedNodeClaim,
    node_class_key: &str,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    let mut requirements = planned.requirements.clone();
    requirements.remove(LABEL_HOSTNAME);
    requirements.remove(node_class_key);
    requirements
        .to_node_selector_requirements()
        .into_iter()
        .map(|mut requirement| {
            if requirement.key == LABEL_INSTANCE_TYPE && requirement.operator == Operator::In {
                // The requirement keeps its values sorted by name; the plugin reads them as a
                // preference order, so they are written in the order of the options.
                let allowed = std::mem::take(&mut requirement.values);
                requirement.values = planned
                    .instance_types
                    .iter()
                    .map(|it| it.name())
                    .filter(|name| allowed.iter().any(|a| a == name))
                    .map(str::to_owned)
                    .collect();
            }
            NodeSelectorRequirementWithMinValues {
                key: requirement.key,
                operator: requirement.operator,
                values: requirement.values,
                min_values: requirement.min_values.map(i64::from),
            }
        })
        .collect()
}

fn requests(planned: &PlannedNodeClaim) -> BTreeMap<String, KubeQuantity> {
    planned
        .requests
        .to_quantities()
        .into_iter()
        .map(|(name, quantity)| (name.to_string(), KubeQuantity(quantity.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use core_domain::labels::{LABEL_CAPACITY_TYPE, LABEL_TOPOLOGY_ZONE, LabelPolicy};
    use core_domain::resources::ResourceList;
    use core_domain::scheduler::{Pod, SchedulingInput, solve};
    use serde_json::json;

    use super::*;
    use crate::cloudprovider::fake::instance_type;
    use crate::controllers::testing;

    fn pool() -> NodePool {
        testing::node_pool(
            "default",
            json!({
                "metadata": { "uid": "pool-uid" },
                "spec": { "template": {
                    "metadata": { "labels": { "team": "a" }, "annotations": { "note": "x" } },
                    "spec": {
                        "requirements": [{ "key": LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"] }],
                        "taints": [{ "key": "dedicated", "value": "a", "effect": "NoSchedule" }],
                        "startupTaints": [{ "key": "agent-not-ready", "effect": "NoSchedule" }],
                        "expireAfter": "24h",
                        "terminationGracePeriod": "1h",
                    },
                } },
            }),
        )
    }

    fn node_class() -> DynamicObject {
        testing::node_class(
            "default",
            json!({ "metadata": { "annotations": {
                "test.karpenter.sh/testnodeclass-hash": "123",
                "test.karpenter.sh/testnodeclass-hash-version": "v9",
                "unrelated": "no",
            } } }),
        )
    }

    /// A plan from the real scheduler: one pod of 1 CPU on the NodePool above.
    fn planned() -> PlannedNodeClaim {
        let catalogue = vec![
            Arc::new(instance_type("default-instance-type", 4, 4, 5, "amd64")),
            Arc::new(instance_type("small-instance-type", 2, 2, 5, "amd64")),
            Arc::new(instance_type("arm-instance-type", 16, 128, 5, "arm64")),
        ];
        let pool = pool();
        let spec =
            super::super::convert::node_pool(&pool, catalogue.into(), ResourceList::new()).unwrap();
        let input = SchedulingInput {
            pods: vec![
                Pod::new("default", "web")
                    .with_requests(ResourceList::new().with("cpu", 1000))
                    .with_toleration(core_domain::scheduler::Toleration::exists(
                        "dedicated",
                        None,
                    )),
            ],
            node_pools: vec![spec],
            label_policy: LabelPolicy::core(),
            ..SchedulingInput::default()
        };
        let mut results = solve(&input).unwrap();
        assert_eq!(results.new_node_claims.len(), 1);
        results.new_node_claims.remove(0)
    }

    #[test]
    fn given_a_plan_then_the_node_claim_carries_the_template_and_the_hashes() {
        let pool = pool();
        let claim = node_claim(&planned(), &pool, Some(&node_class()));
        let meta = &claim.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("default-"));
        assert_eq!(meta.name, None);
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_NODEPOOL], "default");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["test.karpenter.sh/testnodeclass"], "default");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations[ANNOTATION_NODEPOOL_HASH], pool.static_hash());
        assert_eq!(
            annotations[ANNOTATION_NODEPOOL_HASH_VERSION],
            NODEPOOL_HASH_VERSION
        );
        assert_eq!(annotations["test.karpenter.sh/testnodeclass-hash"], "123");
        assert_eq!(
            annotations["test.karpenter.sh/testnodeclass-hash-version"],
            "v9"
        );
        assert_eq!(annotations["note"], "x");
        assert!(!annotations.contains_key("unrelated"));
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("NodePool", "default", "pool-uid")
        );
        assert_eq!(owner.api_version, "karpenter.sh/v1");
        assert_eq!(owner.block_owner_deletion, Some(true));
        let spec = &claim.spec;
        assert_eq!(spec.taints, pool.spec.template.spec.taints);
        assert_eq!(spec.startup_taints, pool.spec.template.spec.startup_taints);
        assert_eq!(spec.node_class_ref, pool.spec.template.spec.node_class_ref);
        assert_eq!(spec.expire_after.as_str(), "24h");
        assert_eq!(
            spec.termination_grace_period.as_ref().map(|d| d.as_str()),
            Some("1h")
        );
        assert_eq!(spec.resources.requests["cpu"].0, "1");
        assert_eq!(spec.resources.requests["pods"].0, "1");
    }

    #[test]
    fn given_a_plan_then_requirements_keep_the_template_and_list_types_cheapest_first() {
        let claim = node_claim(&planned(), &pool(), None);
        let find = |key: &str| {
            claim
                .spec
                .requirements
                .iter()
                .find(|r| r.key == key)
                .unwrap_or_else(|| panic!("no requirement on {key}"))
        };
        assert_eq!(find(LABEL_CAPACITY_TYPE).values, ["on-demand"]);
        assert_eq!(find(LABEL_NODEPOOL).values, ["default"]);
        assert_eq!(find("team").values, ["a"]);
        assert_eq!(
            find(LABEL_INSTANCE_TYPE).values,
            [
                "small-instance-type",
                "default-instance-type",
                "arm-instance-type"
            ],
            "cheapest first, not by name"
        );
        assert!(
            claim
                .spec
                .requirements
                .iter()
                .any(|r| r.key == LABEL_TOPOLOGY_ZONE)
        );
        assert!(
            !claim
                .spec
                .requirements
                .iter()
                .any(|r| r.key == LABEL_HOSTNAME)
        );
        assert!(
            claim.validate(&LabelPolicy::core()).is_ok(),
            "the API admits it: {:?}",
            claim.validate(&LabelPolicy::core())
        );
    }
}
