//! What `core-svc explain NODE|NODECLAIM` prints: one node's drift and disruption state, from
//! one snapshot, through the same [`explain`](crate::disruption::explain()) the disruption
//! controller's `DisruptionBlocked` events use, so the command and the events never disagree.
//!
//! Pure: the command reads the snapshot and asks the plugin; [`inspect`] decides what to say.

use std::collections::BTreeSet;
use std::fmt;

use jiff::Timestamp;
use karpenter_api::nodeclaim::CONDITION_DRIFTED;
use karpenter_api::{ConditionStatus, NodeClaim, condition};
use serde::Serialize;

use crate::cloudprovider::DriftReason;
use crate::cluster::Snapshot;
use crate::disruption::explain::{ExplainInputs, explain};
use crate::objects::DISRUPTED_TAINT_KEY;

/// What the plugin's IsDrifted answered for the NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "answer")]
pub enum PluginDrift {
    /// Not asked (no launched NodeClaim, no node class, or no plugin given).
    NotAsked {
        /// Why.
        why: String,
    },
    /// The instance matches what its node class selects now.
    NotDrifted,
    /// Drifted, and why.
    Drifted {
        /// The reason (`AMIDrift`).
        reason: String,
        /// What differs.
        message: String,
    },
    /// The plugin failed to answer (nothing is concluded from it).
    Failed {
        /// What failed.
        error: String,
    },
}

impl PluginDrift {
    /// The plugin's answer as this report shows it.
    pub fn from_answer<E: fmt::Display>(answer: Result<Option<DriftReason>, E>) -> Self {
        match answer {
            Ok(None) => Self::NotDrifted,
            Ok(Some(drift)) => Self::Drifted {
                reason: drift.reason,
                message: drift.message,
            },
            Err(error) => Self::Failed {
                error: error.to_string(),
            },
        }
    }
}

/// The NodeClaim's `Drifted` condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftStatus {
    /// `True`, `False` or `Unknown`; `None` when the condition is absent (not drifted).
    pub status: Option<String>,
    /// Its reason.
    pub reason: Option<String>,
    /// Its message.
    pub message: Option<String>,
}

/// One node's state, as `core-svc explain` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The Node, when it exists.
    pub node: Option<String>,
    /// The NodeClaim, when it exists.
    pub node_claim: Option<String>,
    /// Its NodePool.
    pub node_pool: Option<String>,
    /// The NodeClaim's `Drifted` condition.
    pub drift: DriftStatus,
    /// The plugin's IsDrifted answer.
    pub plugin_drift: PluginDrift,
    /// Whether the node may be disrupted now (nothing holds it back).
    pub candidate: bool,
    /// What holds it back, in one sentence, when something does.
    pub blocked: Option<String>,
    /// What happens next.
    pub next: String,
}

/// Why there is nothing to report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// Neither a Node nor a NodeClaim has the name.
    #[error("no Node or NodeClaim is called {0:?}")]
    NotFound(String),
}

/// The NodeClaim and Node `name` designates: a NodeClaim's name or its Node's.
pub fn resolve<'a>(
    snapshot: &'a Snapshot,
    name: &str,
) -> Result<(Option<&'a NodeClaim>, Option<String>), InspectError> {
    let by_claim = snapshot.node_claim(name);
    let by_node = || {
        snapshot.node_claims().find(|claim| {
            claim
                .status
                .as_ref()
                .is_some_and(|status| status.node_name == name)
        })
    };
    let node_claim = by_claim.or_else(by_node);
    let node = match node_claim
        .and_then(|claim| claim.status.as_ref())
        .map(|status| status.node_name.as_str())
        .filter(|node| !node.is_empty())
    {
        Some(node) => Some(node.to_owned()),
        None => snapshot.node(name).map(|_| name.to_owned()),
    };
    if node_claim.is_none() && node.is_none() {
        return Err(InspectError::NotFound(name.to_owned()));
    }
    Ok((node_claim, node))
}

/// The report on `name` (a Node or a NodeClaim) at `now`; `plugin_drift` is what the plugin
/// answered for its NodeClaim.
pub fn inspect(
    snapshot: &Snapshot,
    now: Timestamp,
    name: &str,
    plugin_drift: PluginDrift,
) -> Result<Report, InspectError> {
    let (node_claim, node) = resolve(snapshot, name)?;
    let drifted = node_claim
        .and_then(|claim| claim.status.as_ref())
        .and_then(|status| condition::find(&status.conditions, CONDITION_DRIFTED));
    let drift = DriftStatus {
        status: drifted.map(|c| format!("{:?}", c.status)),
        reason: drifted.and_then(|c| c.reason.clone()),
        message: drifted.and_then(|c| c.message.clone()),
    };
    let node_pool = node_claim
        .and_then(|claim| claim.metadata.labels.as_ref())
        .and_then(|labels| labels.get(core_domain::labels::LABEL_NODEPOOL))
        .cloned();
    let node_object = node.as_deref().and_then(|node| snapshot.node(node));
    let disrupting = node_object.is_some_and(|node| {
        node.metadata.deletion_timestamp.is_some()
            || node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .is_some_and(|taints| taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY))
    }) || node_claim
        .is_some_and(|claim| claim.metadata.deletion_timestamp.is_some());
    let nominated = BTreeSet::new();
    let explanation = node.as_deref().and_then(|node| {
        explain(
            node,
            snapshot,
            now,
            &ExplainInputs {
                reason: None,
                nominated: &nominated,
                observations: &[],
            },
        )
    });
    let is_drifted = drifted.is_some_and(|c| c.status == ConditionStatus::True);
    let next = if disrupting {
        "being disrupted: tainted karpenter.sh/disrupted or deleting; its pods are drained, then the instance is terminated".to_owned()
    } else if node.is_none() {
        "no Node has registered for this NodeClaim yet: the lifecycle controller waits for it (registration timeout 15 min)".to_owned()
    } else if let Some(explanation) = &explanation {
        format!(
            "nothing until what holds it back changes: {}",
            explanation.message
        )
    } else if is_drifted {
        "replaced for drift on the next disruption pass: a replacement is launched first, then the node is drained and deleted".to_owned()
    } else {
        "considered for consolidation on the next disruption pass (removed or replaced only if that is cheaper and its pods fit elsewhere)".to_owned()
    };
    Ok(Report {
        node,
        node_claim: node_claim.and_then(|claim| claim.metadata.name.clone()),
        node_pool,
        drift,
        plugin_drift,
        candidate: !disrupting && explanation.is_none(),
        blocked: explanation.map(|explanation| explanation.message),
        next,
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_none = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
        writeln!(f, "Node:        {}", or_none(&self.node))?;
        writeln!(f, "NodeClaim:   {}", or_none(&self.node_claim))?;
        writeln!(f, "NodePool:    {}", or_none(&self.node_pool))?;
        match &self.drift.status {
            Some(status) => writeln!(
                f,
                "Drifted:     {status} {} {}",
                or_none(&self.drift.reason),
                self.drift.message.as_deref().unwrap_or_default()
            )?,
            None => writeln!(f, "Drifted:     no (no Drifted condition)")?,
        }
        match &self.plugin_drift {
            PluginDrift::NotAsked { why } => writeln!(f, "Plugin:      not asked ({why})")?,
            PluginDrift::NotDrifted => writeln!(f, "Plugin:      not drifted")?,
            PluginDrift::Drifted { reason, message } => {
                writeln!(f, "Plugin:      {reason}: {message}")?;
            }
            PluginDrift::Failed { error } => writeln!(f, "Plugin:      no answer ({error})")?,
        }
        writeln!(
            f,
            "Candidate:   {}",
            if self.candidate { "yes" } else { "no" }
        )?;
        if let Some(blocked) = &self.blocked {
            writeln!(f, "Blocked:     {blocked}")?;
        }
        write!(f, "Next:        {}", self.next)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::controllers::testing::{at, node, node_claim, node_pool, pod, snapshot};

    fn launched(name: &str, node_name: &str) -> NodeClaim {
        node_claim(
            name,
            json!({
                "metadata": {"labels": {"karpenter.sh/nodepool": "default"}},
                "status": {"nodeName": node_name, "providerID": "test:///i-1",
                    "conditions": [
                        {"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Launched", "message": ""},
                        {"type": "Registered", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Registered", "message": ""},
                        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Initialized", "message": ""},
                        {"type": "Drifted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AMIDrift", "message": "new AMI"}
                    ]},
            }),
        )
    }

    fn cluster(with_pod: serde_json::Value) -> Snapshot {
        let mut snapshot = snapshot(
            vec![launched("default-abc", "node-1")],
            vec![node(
                "node-1",
                json!({"metadata": {"labels": {"karpenter.sh/nodepool": "default"}},
                       "spec": {"providerID": "test:///i-1"},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            )],
        );
        snapshot
            .node_pools
            .push(Arc::new(node_pool("default", json!({}))));
        snapshot.pods.push(Arc::new(pod("web-1", with_pod).into()));
        snapshot.sort();
        snapshot
    }

    #[test]
    fn given_a_do_not_disrupt_pod_then_the_report_names_it_as_the_blocker() {
        let snapshot = cluster(json!({
            "metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"},
        }));
        let report = inspect(&snapshot, at(3600), "node-1", PluginDrift::NotDrifted)
            .expect("the node exists");
        assert_eq!(report.node_claim.as_deref(), Some("default-abc"));
        assert!(!report.candidate);
        let blocked = report.blocked.expect("something blocks it");
        assert!(blocked.contains("web-1"), "{blocked}");
        assert!(blocked.contains("do-not-disrupt"), "{blocked}");
        assert_eq!(report.drift.reason.as_deref(), Some("AMIDrift"));
    }

    #[test]
    fn given_a_drifted_node_with_nothing_in_the_way_then_it_is_replaced_next() {
        let snapshot = cluster(json!({
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"},
        }));
        let report = inspect(&snapshot, at(3600), "default-abc", PluginDrift::NotDrifted)
            .expect("the claim exists");
        assert_eq!(report.node.as_deref(), Some("node-1"));
        assert!(report.candidate, "{report:?}");
        assert!(report.next.contains("drift"), "{}", report.next);
    }

    #[test]
    fn given_an_unknown_name_then_it_says_so() {
        let snapshot = cluster(json!({}));
        assert_eq!(
            inspect(&snapshot, at(0), "nope", PluginDrift::NotDrifted),
            Err(InspectError::NotFound("nope".to_owned()))
        );
    }

    #[test]
    fn given_a_report_then_json_and_text_carry_the_blocker() {
        let snapshot = cluster(json!({
            "metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running"},
        }));
        let report = inspect(
            &snapshot,
            at(3600),
            "node-1",
            PluginDrift::Drifted {
                reason: "AMIDrift".to_owned(),
                message: "ami-1 -> ami-2".to_owned(),
            },
        )
        .expect("report");
        let json = serde_json::to_value(&report).expect("JSON");
        assert_eq!(json["pluginDrift"]["answer"], "drifted");
        assert!(json["blocked"].as_str().is_some());
        let text = report.to_string();
        assert!(text.contains("Blocked:"), "{text}");
        assert!(text.contains("AMIDrift: ami-1 -> ami-2"), "{text}");
    }
}
