//! The pod-level `karpenter.sh/do-not-disrupt` annotation (upstream kubernetes-sigs/karpenter
//! `IsDisruptable` in `pkg/utils/pod`).
//!
//! The value may be:
//!
//! - `"true"`: the pod blocks the disruption of its node for as long as it runs;
//! - a positive Go duration (`"30m"`, `"1h30m"`): the pod blocks it until that long after it
//!   started (`status.startTime`, else `metadata.creationTimestamp`);
//! - anything else (`"false"`, `"yes"`, `"0s"`, `"-1h"`): invalid, so ignored; [`evaluate`]
//!   says so, with the problem, for the caller to record an event on the pod.
//!
//! Only pods that still run can block: a terminal or terminating pod never does, whatever it
//! carries ([`blocks_disruption`]). Mirror pods and DaemonSet pods can (upstream).

use crate::cluster::SlimPod;
use core_domain::labels::ANNOTATION_DO_NOT_DISRUPT;
use jiff::{SignedDuration, Timestamp};
use karpenter_api::duration::parse_go_duration;

use crate::objects::{is_terminal, is_terminating};

/// What a pod's `karpenter.sh/do-not-disrupt` annotation says at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// The pod has no such annotation.
    Absent,
    /// `"true"`: the pod blocks disruption for as long as it runs.
    Always,
    /// A duration that has not yet elapsed since the pod started: it blocks until `until`.
    Until {
        /// The annotation's value, as written.
        value: String,
        /// When the protection ends (start plus the duration).
        until: Timestamp,
    },
    /// A duration that has elapsed: the pod no longer blocks.
    Expired {
        /// The annotation's value, as written.
        value: String,
        /// When the protection ended.
        expired_at: Timestamp,
    },
    /// A value that is neither `"true"` nor a positive duration: ignored, and worth an event.
    Invalid {
        /// The annotation's value, as written.
        value: String,
        /// Why it is not accepted.
        problem: String,
    },
}

impl DoNotDisrupt {
    /// Whether the annotation blocks disruption now.
    pub fn blocks(&self) -> bool {
        matches!(self, Self::Always | Self::Until { .. })
    }

    /// The annotation's value, as written; `None` when absent.
    pub fn value(&self) -> Option<&str> {
        match self {
            Self::Absent => None,
            Self::Always => Some("true"),
            Self::Until { value, .. }
            | Self::Expired { value, .. }
            | Self::Invalid { value, .. } => Some(value),
        }
    }
}

/// When the pod started, as the duration form counts: `status.startTime`, else
/// `metadata.creationTimestamp`.
pub fn pod_started(pod: &SlimPod) -> Option<Timestamp> {
    pod.status
        .as_ref()
        .and_then(|status| status.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|time| time.0)
}

/// Reads the pod's `karpenter.sh/do-not-disrupt` annotation at `now`. The pod's phase does not
/// matter here; [`blocks_disruption`] adds that. A pod with neither a start time nor a creation
/// time (never the case for one read from an API server) counts as starting `now`.
pub fn evaluate(pod: &SlimPod, now: Timestamp) -> DoNotDisrupt {
    let Some(value) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(ANNOTATION_DO_NOT_DISRUPT))
    else {
        return DoNotDisrupt::Absent;
    };
    if value == "true" {
        return DoNotDisrupt::Always;
    }
    let invalid = |problem: String| DoNotDisrupt::Invalid {
        value: value.clone(),
        problem,
    };
    let duration = match parse_go_duration(value) {
        Ok(duration) => duration,
        Err(error) => {
            return invalid(format!(
                "expected \"true\" or a positive duration such as \"1h\" ({error})"
            ));
        }
    };
    if duration.is_zero() {
        return invalid("a duration must be positive".to_owned());
    }
    let started = pod_started(pod).unwrap_or(now);
    let end = SignedDuration::try_from(duration)
        .ok()
        .and_then(|duration| started.checked_add(duration).ok())
        .unwrap_or(Timestamp::MAX);
    if now < end {
        DoNotDisrupt::Until {
            value: value.clone(),
            until: end,
        }
    } else {
        DoNotDisrupt::Expired {
            value: value.clone(),
            expired_at: end,
        }
    }
}

/// Whether the pod runs (neither terminal nor terminating): only such a pod can block.
pub fn is_active(pod: &SlimPod) -> bool {
    !is_terminal(pod) && !is_terminating(pod)
}

/// The annotation that blocks the disruption of the pod's node now, if any: the pod runs and
/// its annotation is `"true"` or a duration not yet elapsed (upstream `!IsDisruptable`).
pub fn blocks_disruption(pod: &SlimPod, now: Timestamp) -> Option<DoNotDisrupt> {
    if !is_active(pod) {
        return None;
    }
    Some(evaluate(pod, now)).filter(DoNotDisrupt::blocks)
}

/// A pod whose `karpenter.sh/do-not-disrupt` value is ignored because it is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAnnotation {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// The value, as written.
    pub value: String,
    /// Why it is not accepted.
    pub problem: String,
}

/// The pods among `pods` whose annotation is invalid, in the order given, for the caller to
/// record one event on each (upstream records one when it meets such a value).
pub fn invalid_annotations<'a>(
    pods: impl IntoIterator<Item = &'a SlimPod>,
    now: Timestamp,
) -> Vec<InvalidAnnotation> {
    pods.into_iter()
        .filter_map(|pod| match evaluate(pod, now) {
            DoNotDisrupt::Invalid { value, problem } => Some(InvalidAnnotation {
                pod: pod_key(pod),
                value,
                problem,
            }),
            _ => None,
        })
        .collect()
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &SlimPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::SlimPod as Pod;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn pod(annotation: Option<&str>, start: Option<&str>, created: Option<&str>) -> Pod {
        let mut value = json!({
            "metadata": { "name": "p", "namespace": "ns" },
            "status": { "phase": "Running" },
        });
        if let Some(annotation) = annotation {
            value["metadata"]["annotations"] = json!({ ANNOTATION_DO_NOT_DISRUPT: annotation });
        }
        if let Some(created) = created {
            value["metadata"]["creationTimestamp"] = json!(created);
        }
        if let Some(start) = start {
            value["status"]["startTime"] = json!(start);
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn given_no_annotation_then_it_is_absent_and_does_not_block() {
        let pod = pod(None, None, None);
        assert_eq!(
            evaluate(&pod, at("2025-01-01T00:00:00Z")),
            DoNotDisrupt::Absent
        );
        assert_eq!(blocks_disruption(&pod, at("2025-01-01T00:00:00Z")), None);
    }

    #[test]
    fn given_true_then_it_blocks_forever() {
        let pod = pod(Some("true"), Some("2020-01-01T00:00:00Z"), None);
        let verdict = evaluate(&pod, at("2030-01-01T00:00:00Z"));
        assert_eq!(verdict, DoNotDisrupt::Always);
        assert!(verdict.blocks());
        assert_eq!(verdict.value(), Some("true"));
    }

    #[test]
    fn given_a_duration_then_it_blocks_until_that_long_after_the_start_time() {
        let pod = pod(
            Some("1h"),
            Some("2025-01-01T10:00:00Z"),
            Some("2025-01-01T09:00:00Z"),
        );
        let until = at("2025-01-01T11:00:00Z");
        assert_eq!(
            evaluate(&pod, at("2025-01-01T10:59:59Z")),
            DoNotDisrupt::Until {
                value: "1h".into(),
                until
            },
            "startTime wins over creationTimestamp"
        );
        assert_eq!(
            evaluate(&pod, until),
            DoNotDisrupt::Expired {
                value: "1h".into(),
                expired_at: until
            },
            "active while now - start < duration: not at the very end"
        );
        assert!(!evaluate(&pod, at("2025-01-02T00:00:00Z")).blocks());
    }

    #[test]
    fn given_a_duration_without_start_time_then_the_creation_time_counts() {
        let pod = pod(Some("90m"), None, Some("2025-01-01T09:00:00Z"));
        assert_eq!(
            evaluate(&pod, at("2025-01-01T10:00:00Z")),
            DoNotDisrupt::Until {
                value: "90m".into(),
                until: at("2025-01-01T10:30:00Z")
            }
        );
    }

    #[test]
    fn given_garbage_then_it_is_invalid_ignored_and_reported() {
        for value in ["false", "True", "yes", "1d", "-1h", "0s", "0", ""] {
            let pod = pod(Some(value), Some("2025-01-01T09:00:00Z"), None);
            let verdict = evaluate(&pod, at("2025-01-01T09:00:01Z"));
            assert!(
                matches!(&verdict, DoNotDisrupt::Invalid { value: v, .. } if v == value),
                "{value:?}: {verdict:?}"
            );
            assert!(!verdict.blocks(), "{value:?}");
            assert_eq!(blocks_disruption(&pod, at("2025-01-01T09:00:01Z")), None);
        }
        let pods = [
            pod(Some("yes"), None, None),
            pod(Some("true"), None, None),
            pod(Some("2h"), None, None),
        ];
        let invalid = invalid_annotations(&pods, at("2025-01-01T00:00:00Z"));
        assert_eq!(invalid.len(), 1);
        assert_eq!(invalid[0].pod, "ns/p");
        assert_eq!(invalid[0].value, "yes");
        assert!(
            invalid[0].problem.contains("positive duration"),
            "{invalid:?}"
        );
    }

    #[test]
    fn given_a_terminal_or_terminating_pod_then_it_never_blocks() {
        let mut finished = pod(Some("true"), None, None);
        finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(
            blocks_disruption(&finished, at("2025-01-01T00:00:00Z")),
            None
        );
        let mut terminating = pod(Some("true"), None, None);
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2025-01-01T00:00:00Z")),
        );
        assert_eq!(
            blocks_disruption(&terminating, at("2025-01-01T00:00:00Z")),
            None
        );
        let running = pod(Some("true"), None, None);
        assert_eq!(
            blocks_disruption(&running, at("2025-01-01T00:00:00Z")),
            Some(DoNotDisrupt::Always)
        );
    }
}
