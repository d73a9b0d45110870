//! The values of the cluster-state gauges (`karpenter_nodeclaims`, `karpenter_nodepools_usage`,
//! `karpenter_nodepools_limit`), computed from one snapshot. Pure; the disruption controller,
//! whose pass reads the whole fleet anyway, publishes them.

use std::collections::HashMap;

use core_domain::resources::{ResourceList, ResourceName};
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};

use crate::cluster::Snapshot;
use crate::controllers::nodeclaim::node_pool_of;
use crate::controllers::provisioning::convert::resource_list;
use crate::metrics::ClusterState;

/// The lifecycle phase of a NodeClaim, as `karpenter_nodeclaims` counts it: the furthest
/// condition reached, or `Terminating` once it is being deleted.
pub fn node_claim_phase(node_claim: &NodeClaim) -> &'static str {
    if node_claim.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    let conditions = node_claim
        .status
        .as_ref()
        .map(|status| status.conditions.as_slice())
        .unwrap_or_default();
    let reached = |type_: &str| karpenter_api::condition::is_true(conditions, type_);
    if reached(CONDITION_INITIALIZED) {
        "Initialized"
    } else if reached(CONDITION_REGISTERED) {
        "Registered"
    } else if reached(CONDITION_LAUNCHED) {
        "Launched"
    } else {
        "Pending"
    }
}

/// An amount of `name` in [`ResourceList`] units, in Prometheus' base units (cpu is counted
/// in millicores there, in cores here).
#[allow(
    clippy::cast_precision_loss,
    reason = "a gauge: amounts past 2^53 lose precision as any float would"
)]
fn base_units(name: &ResourceName, amount: i64) -> f64 {
    if name.uses_millis() {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

/// The state of `snapshot`, with `usage` each NodePool's NodeClaims' resources as
/// provisioning and the limits count them (`provisioning::input::usage_by_node_pool`).
pub fn cluster_state(snapshot: &Snapshot, usage: &HashMap<String, ResourceList>) -> ClusterState {
    let mut state = ClusterState::default();
    for claim in snapshot.node_claims() {
        let pool = node_pool_of(claim).unwrap_or_default().to_owned();
        *state
            .node_claims
            .entry((pool, node_claim_phase(claim)))
            .or_default() += 1;
    }
    for (pool, resources) in usage {
        for (name, amount) in resources.iter() {
            state.usage.insert(
                (pool.clone(), name.as_str().to_owned()),
                base_units(&name, amount),
            );
        }
    }
    for pool in snapshot.node_pools() {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let Ok(limits) = resource_list("spec.limits", &pool.spec.limits) else {
            // Admission refuses a limit that is not a quantity; such a NodePool shows none.
            continue;
        };
        for (resource, amount) in limits.iter() {
            state.limits.insert(
                (name.clone(), resource.as_str().to_owned()),
                base_units(&resource, amount),
            );
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::cluster::shared;
    use crate::controllers::provisioning::input::usage_by_node_pool;
    use crate::controllers::testing::{node_claim, node_pool, patched};

    fn claim(name: &str, conditions: &[&str], patch: Value) -> NodeClaim {
        let conditions: Vec<Value> = conditions
            .iter()
            .map(|type_| {
                json!({"type": type_, "status": "True", "reason": type_, "message": "",
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        patched(
            &node_claim(
                name,
                json!({
                    "metadata": {"labels": {"karpenter.sh/nodepool": "default"}},
                    "status": {"conditions": conditions,
                               "capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"}},
                }),
            ),
            patch,
        )
    }

    #[test]
    fn phases_are_counted_and_usage_and_limits_are_in_base_units() {
        let launched = [CONDITION_LAUNCHED];
        let initialized = [
            CONDITION_LAUNCHED,
            CONDITION_REGISTERED,
            CONDITION_INITIALIZED,
        ];
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
                                           "finalizers": ["karpenter.sh/termination"]}});
        let mut snapshot = Snapshot {
            node_pools: shared([node_pool(
                "default",
                json!({"spec": {"limits": {"cpu": "100", "memory": "1000Gi"}}}),
            )]),
            node_claims: shared([
                claim("a", &initialized, json!({})),
                claim("b", &initialized, json!({})),
                claim("c", &launched, json!({})),
                claim("d", &[], json!({})),
                claim("e", &initialized, deleting),
            ]),
            ..Snapshot::default()
        };
        snapshot.sort();
        let usage = usage_by_node_pool(&snapshot, &HashMap::new());
        let state = cluster_state(&snapshot, &usage);
        let phases: Vec<(&str, usize)> = state
            .node_claims
            .iter()
            .map(|((_, phase), count)| (*phase, *count))
            .collect();
        assert_eq!(
            phases,
            [
                ("Initialized", 2),
                ("Launched", 1),
                ("Pending", 1),
                ("Terminating", 1)
            ]
        );
        let of = |map: &std::collections::BTreeMap<(String, String), f64>, resource: &str| {
            map[&("default".to_owned(), resource.to_owned())]
        };
        // Four NodeClaims count (the one being deleted no longer does); cpu in cores.
        assert!((of(&state.usage, "cpu") - 8.0).abs() < 1e-9, "{state:?}");
        assert!((of(&state.usage, "memory") - 16.0 * 1024.0 * 1024.0 * 1024.0).abs() < 1.0);
        assert!((of(&state.usage, "nodes") - 4.0).abs() < 1e-9, "{state:?}");
        assert!((of(&state.limits, "cpu") - 100.0).abs() < 1e-9, "{state:?}");
        assert!((of(&state.limits, "memory") - 1000.0 * 1024.0 * 1024.0 * 1024.0).abs() < 1.0);
    }
}
