//! Admission: what the in-memory API server refuses before a write (names, NodePool and
//! NodeClaim validation, pod and PodDisruptionBudget rules), with the API server's field causes.

use super::*;

/// DNS-1123 subdomain: what most kinds' names must be.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let valid_characters = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let alphanumeric =
        |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if name.is_empty() {
        Err("Required value: name or generateName is required".to_owned())
    } else if name.len() > MAX_NAME_LENGTH {
        Err(format!("must be no more than {MAX_NAME_LENGTH} characters"))
    } else if !valid_characters
        || !alphanumeric(name.bytes().next())
        || !alphanumeric(name.bytes().next_back())
    {
        Err(format!(
            "{name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    } else {
        Ok(())
    }
}

pub(super) fn validation_causes(errors: Vec<ValidationError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|error| FieldError {
            field: error.path.to_string(),
            message: error.violation.to_string(),
        })
        .collect()
}

/// The admission the API server applies to the kinds it has rules for, on create (`old`
/// `None`) and on update.
pub(super) fn admit<T: Stored>(
    object: &T,
    old: Option<&T>,
    facts: KindFacts<'_>,
    env: &Env<'_>,
) -> Result<(), ClusterError> {
    let name = object.meta().name.as_deref().unwrap_or_default();
    let object: &dyn Any = object;
    let old: Option<&dyn Any> = old.map(|old| old as &dyn Any);
    let result = if let Some(pool) = object.downcast_ref::<NodePool>() {
        match old.and_then(|old| old.downcast_ref::<NodePool>()) {
            Some(old) => pool.validate_update(old, env.policy),
            None => pool.validate(env.policy),
        }
        .map_err(validation_causes)
    } else if let Some(claim) = object.downcast_ref::<NodeClaim>() {
        match old.and_then(|old| old.downcast_ref::<NodeClaim>()) {
            Some(old) => claim.validate_update(old, env.policy),
            None => claim.validate(env.policy),
        }
        .map_err(validation_causes)
    } else if let Some(pdb) = object.downcast_ref::<PodDisruptionBudget>() {
        check_budget(pdb)
    } else if let Some(pod) = object.downcast_ref::<Pod>() {
        check_pod_update(pod, old.and_then(|old| old.downcast_ref::<Pod>()))
    } else {
        Ok(())
    };
    result.map_err(|causes| ClusterError::Invalid {
        kind: facts.kind.to_owned(),
        name: name.to_owned(),
        causes,
    })
}

pub(super) fn cause(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// The rule core could trip over: a pod is bound through the binding subresource
/// ([`InMemoryCluster::bind_pod`]), never by an update.
pub(super) fn check_pod_update(pod: &Pod, old: Option<&Pod>) -> Result<(), Vec<FieldError>> {
    let node_name = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
    match old {
        Some(old) if node_name(old) != node_name(pod) => Err(vec![cause(
            "spec.nodeName",
            "Forbidden: pod updates may not change spec.nodeName; bind the pod instead",
        )]),
        _ => Ok(()),
    }
}

/// policy/v1's validation of a PodDisruptionBudget spec.
pub(super) fn check_budget(pdb: &PodDisruptionBudget) -> Result<(), Vec<FieldError>> {
    let mut causes = Vec::new();
    let Some(spec) = &pdb.spec else {
        return Ok(());
    };
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        causes.push(cause(
            "spec",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (field, value) in [
        ("spec.minAvailable", &spec.min_available),
        ("spec.maxUnavailable", &spec.max_unavailable),
    ] {
        match value {
            Some(IntOrString::Int(n)) if *n < 0 => {
                causes.push(cause(field, "must be greater than or equal to 0"));
            }
            Some(IntOrString::String(text)) => match parse_percent(text) {
                Some(percent) if percent > 100 => {
                    causes.push(cause(field, "must not be greater than 100%"));
                }
                Some(_) => {}
                None => causes.push(cause(
                    field,
                    format!("{text:?}: must be an integer or percentage (e.g. '5%')"),
                )),
            },
            _ => {}
        }
    }
    if let Some(selector) = &spec.selector {
        for (index, requirement) in selector.match_expressions.iter().flatten().enumerate() {
            let field = format!("spec.selector.matchExpressions[{index}]");
            let values = requirement.values.as_deref().unwrap_or_default();
            match requirement.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => causes.push(cause(
                    &format!("{field}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                )),
                "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(cause(
                    &format!("{field}.values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => causes.push(cause(
                    &format!("{field}.operator"),
                    format!("{other:?}: not a valid selector operator"),
                )),
            }
        }
    }
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy
        && policy != UNHEALTHY_POD_EVICTION_ALWAYS_ALLOW
        && policy != UNHEALTHY_POD_EVICTION_IF_HEALTHY_BUDGET
    {
        causes.push(cause(
            "spec.unhealthyPodEvictionPolicy",
            format!("{policy:?}: supported values: \"AlwaysAllow\", \"IfHealthyBudget\""),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// `"25%"` → 25.
pub(super) fn parse_percent(text: &str) -> Option<u32> {
    text.strip_suffix('%')?.parse().ok()
}
