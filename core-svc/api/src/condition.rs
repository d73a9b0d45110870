//! Status conditions as upstream writes them (`github.com/awslabs/operatorpkg/status.Condition`):
//! `metav1.Condition` with `reason` and `message` optional, and the schema Karpenter's CRDs use.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::patterns;

/// The condition type every Karpenter object rolls its other conditions up into.
pub const CONDITION_READY: &str = "Ready";

/// One observation about an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    #[schemars(length(max = 316), regex(pattern = patterns::CONDITION_TYPE))]
    pub type_: String,
    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,
    /// The .metadata.generation that the condition was set based upon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// The last time the condition transitioned from one status to another.
    pub last_transition_time: Time,
    /// A programmatic identifier for the reason of the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), regex(pattern = patterns::CONDITION_REASON))]
    pub reason: Option<String>,
    /// A human readable message with details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub message: Option<String>,
}

/// The status of a [`Condition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

/// Finds the condition of type `type_` in `conditions`.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

/// Sets the condition of type `type_`, adding it when absent. `last_transition_time` moves to
/// `now` only when the status changes, so it keeps saying when the condition last flipped.
/// Answers whether anything changed (callers skip the status write when nothing did).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: Time,
) -> bool {
    let reason = (!reason.is_empty()).then(|| reason.to_owned());
    let message = (!message.is_empty()).then(|| message.to_owned());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let before = existing.clone();
            if existing.status != status {
                existing.status = status;
                existing.last_transition_time = now;
            }
            existing.reason = reason;
            existing.message = message;
            *existing != before
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status,
                observed_generation: None,
                last_transition_time: now,
                reason,
                message,
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn set_adds_a_missing_condition() {
        let mut conditions = vec![];
        assert!(set(
            &mut conditions,
            "Launched",
            ConditionStatus::True,
            "",
            "",
            at(5)
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(5));
        assert_eq!(conditions[0].reason, None, "an empty reason is left out");
    }

    #[test]
    fn set_keeps_the_transition_time_while_the_status_holds() {
        let mut conditions = vec![];
        set(
            &mut conditions,
            "Launched",
            ConditionStatus::Unknown,
            "A",
            "first",
            at(5),
        );
        assert!(set(
            &mut conditions,
            "Launched",
            ConditionStatus::Unknown,
            "B",
            "second",
            at(9)
        ));
        assert_eq!(conditions[0].last_transition_time, at(5));
        assert_eq!(conditions[0].message.as_deref(), Some("second"));
        assert!(
            !set(
                &mut conditions,
                "Launched",
                ConditionStatus::Unknown,
                "B",
                "second",
                at(12)
            ),
            "nothing changed"
        );
        assert!(set(
            &mut conditions,
            "Launched",
            ConditionStatus::True,
            "",
            "",
            at(20)
        ));
        assert_eq!(conditions[0].last_transition_time, at(20));
        assert_eq!(conditions.len(), 1);
    }
}
