//! The eviction subresource: a pod's PodDisruptionBudget checked as the API server checks it,
//! then the pod deleted with its `DisruptionTarget` condition.

use super::*;

pub(super) fn phase(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
}

pub(super) fn evict_pod(
    state: &mut State,
    env: &Env<'_>,
    namespace: &str,
    name: &str,
    preconditions: &Preconditions,
) -> Result<(), ClusterError> {
    let facts = KindFacts::of::<Pod>();
    let key = facts.key(Some(namespace), name)?;
    let State {
        counters, tables, ..
    } = state;
    let pod: Arc<Pod> = tables
        .table::<Pod>()
        .and_then(|pods| pods.get(&key))
        .cloned()
        .ok_or_else(|| facts.not_found(namespace, name))?;
    check_preconditions(pod.as_ref(), preconditions, facts, &key)?;
    tables.sync_slim_pods();
    let Some(slim) = tables.slim_pods.of(&pod).cloned() else {
        // Synced just now from the table the pod was read from.
        unreachable!("the stored pod {namespace}/{name} has no slim copy")
    };
    // Terminal, Pending and terminating pods disrupt nothing more by going.
    let bypasses_budgets =
        is_terminal(&slim) || phase(&pod) == Some("Pending") || is_terminating(&slim);
    if !bypasses_budgets {
        check_budgets(&slim, tables, namespace, name)?;
    }
    let mut pod = Pod::clone(&pod);
    if !is_terminating(&slim) && !is_terminal(&slim) {
        pod = with_disruption_target(pod, env.now);
    }
    let pods = tables.table_mut::<Pod>();
    pods.insert(key.clone(), Arc::new(pod));
    delete_object(pods, facts, key, &DeleteOptions::default(), counters, env)
}

/// The eviction subresource's PodDisruptionBudget check for a pod that is running.
pub(super) fn check_budgets(
    pod: &Arc<SlimPod>,
    tables: &mut Tables,
    namespace: &str,
    name: &str,
) -> Result<(), ClusterError> {
    let qualified = format!("{namespace}/{name}");
    let derived = tables.derived_budgets();
    let budgets: Vec<&DerivedBudget> = tables
        .budget_members
        .of(pod)
        .iter()
        .filter_map(|&position| derived.get(position))
        .collect();
    let (pdb, allowance) = match budgets.as_slice() {
        [] => return Ok(()),
        [derived] => (derived.budget.as_ref(), &derived.allowance),
        _ => {
            return Err(ClusterError::MultipleDisruptionBudgets {
                pod: qualified,
                budgets: budgets
                    .iter()
                    .map(|derived| derived.budget.metadata.name.clone().unwrap_or_default())
                    .collect(),
            });
        }
    };
    if allowance.admits_eviction(pod) {
        return Ok(());
    }
    let budget = pdb.metadata.name.clone().unwrap_or_default();
    Err(ClusterError::TooManyRequests {
        pod: qualified,
        reason: format!(
            "Cannot evict pod as it would violate the pod's disruption budget. The disruption \
             budget {budget} needs {} healthy pods and has {} currently",
            allowance.desired_healthy, allowance.current_healthy
        ),
        budget,
    })
}

/// The condition the eviction subresource sets on the pods it deletes.
pub(super) fn with_disruption_target(mut pod: Pod, now: Timestamp) -> Pod {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|condition| condition.type_ != "DisruptionTarget");
    conditions.push(PodCondition {
        type_: "DisruptionTarget".to_owned(),
        status: "True".to_owned(),
        reason: Some("EvictionByEvictionAPI".to_owned()),
        message: Some("Eviction API: evicting".to_owned()),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    });
    pod
}
