//! The report of a run, in the JSON form `simulator/SCENARIO.md` fixes, and the timeline's
//! readable lines.
//!
//! Maps are ordered (`BTreeMap`) and lists sorted by name, so the same run serializes to the
//! same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use karpenter_api::NodeSelectorRequirementWithMinValues;
use serde::Serialize;
use serde_json::Value;

pub use crate::series::{Point, Series};

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Its seed.
    pub seed: u64,
    /// Where virtual time stopped, in seconds since the start.
    pub end: u64,
    /// What happened, in order.
    pub timeline: Vec<TimelineEvent>,
    /// The state at the end.
    #[serde(rename = "final")]
    pub final_state: FinalState,
    /// Figures over the whole run.
    pub stats: Stats,
    /// The fleet's figures over virtual time (`crate::series`).
    pub series: Series,
}

impl Report {
    /// The report as pretty-printed JSON, with a final newline.
    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The timeline events of one type.
    pub fn events_of<'a>(&'a self, type_: &'a str) -> impl Iterator<Item = &'a TimelineEvent> + 'a {
        self.timeline
            .iter()
            .filter(move |event| event.type_ == type_)
    }
}

/// Seconds of virtual time as the timeline prints them: `h:mm:ss`, the hours right-aligned
/// in three columns.
pub fn clock(t: f64) -> String {
    let seconds = t.max(0.0) as u64;
    format!(
        "{:>3}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// One timeline entry: when, what, and the fields that say about what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    /// Seconds of virtual time since the start.
    pub t: f64,
    /// `NodeClaimCreated`, `NodeClaimLaunched`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// `nodeClaim`, `nodePool`, `node`, `pod`, `reason`, `instanceType`, ..., `message`.
    #[serde(flatten)]
    pub fields: BTreeMap<String, Value>,
}

impl TimelineEvent {
    /// A field as a string, if it is one.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// The event as one readable line: the time as h:mm:ss, the type, the identifying fields,
    /// the others, and the message.
    pub fn line(&self) -> String {
        const IDENTIFYING: [&str; 4] = ["nodePool", "nodeClaim", "node", "pod"];
        let mut line = format!("{}  {:<20}", clock(self.t), self.type_);
        let mut push = |key: &str, value: &Value| {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = write!(line, " {key}={text}");
        };
        for key in IDENTIFYING {
            if let Some(value) = self.fields.get(key) {
                push(key, value);
            }
        }
        for (key, value) in &self.fields {
            if !IDENTIFYING.contains(&key.as_str()) && key != "message" {
                push(key, value);
            }
        }
        if let Some(Value::String(message)) = self.fields.get("message")
            && !message.is_empty()
        {
            let _ = write!(line, "  ({message})");
        }
        line
    }
}

/// The objects at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FinalState {
    /// NodePools.
    #[serde(rename = "nodePools")]
    pub node_pools: Vec<FinalNodePool>,
    /// NodeClaims.
    #[serde(rename = "nodeClaims")]
    pub node_claims: Vec<FinalNodeClaim>,
    /// Nodes.
    pub nodes: Vec<FinalNode>,
    /// Pods.
    pub pods: Vec<FinalPod>,
    /// Cloud instances, terminated ones included.
    pub instances: Vec<FinalInstance>,
}

/// A NodePool at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalNodePool {
    /// Its name.
    pub name: String,
    /// Its annotations (the hash and hash version among them).
    pub annotations: BTreeMap<String, String>,
}

/// A condition's status and reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalCondition {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason (may be empty).
    pub reason: String,
}

/// A NodeClaim at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalNodeClaim {
    /// Its name.
    pub name: String,
    /// Its `karpenter.sh/nodepool` label.
    pub node_pool: String,
    /// `status.providerID`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Its instance type label.
    pub instance_type: String,
    /// Its zone label.
    pub zone: String,
    /// Its capacity type label.
    pub capacity_type: String,
    /// `status.imageID`.
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
    /// `spec.requirements`: what went to the plugin's Create.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Its conditions by type.
    pub conditions: BTreeMap<String, FinalCondition>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// A Node at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalNode {
    /// Its name.
    pub name: String,
    /// The NodeClaim with its provider ID, if any.
    pub node_claim: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
    /// Its taints, as Kubernetes writes them.
    pub taints: Vec<Value>,
    /// Whether its Ready condition is True.
    pub ready: bool,
}

/// A Pod at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalPod {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The Node it is bound to.
    pub node: Option<String>,
    /// Its phase.
    pub phase: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// A cloud instance at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalInstance {
    /// `aws:///<zone>/<id>`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Its instance type.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Its image.
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// `pending`, `running`, `shutting-down`, `terminated`.
    pub state: String,
}

/// Figures over the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// NodeClaims created during the run.
    pub node_claims_created: u64,
    /// NodeClaims that were deleted (gone) by the end.
    pub node_claims_deleted: u64,
    /// The most Nodes of each NodePool at once tainted `karpenter.sh/disrupted` or being
    /// deleted, leaving out those whose NodeClaim has `InstanceTerminating=True` (drained,
    /// the instance shutting down), as upstream's disruption budgets count.
    pub max_disrupting_by_node_pool: BTreeMap<String, u64>,
    /// Evictions that left a PodDisruptionBudget's healthy pods below what it allows.
    pub pdb_violations: u64,
    /// Pods that were still running on an instance when the cloud took it after an
    /// interruption notice.
    pub pods_lost_to_interruption: u64,
    /// The longest any pod waited unscheduled, in seconds.
    pub pods_pending_max_seconds: f64,
    /// Cloud instances (not terminated) with no NodeClaim at the end.
    pub orphaned_instances: u64,
    /// What the instances running at the end cost per hour, from their offerings' prices.
    pub cost_per_hour_at_end: f64,
    /// A lower bound on what capacity for the pods running at the end can cost per hour: the
    /// linear-programming optimum of covering their total requests with the offerings the
    /// NodePools allow (`core_domain::scheduler::bound`; several NodePools: over the union of
    /// their offerings). `null` when there is none to compute (no usable NodePool, no
    /// catalogue, or offerings that cannot hold the pods).
    pub cost_lower_bound_per_hour_at_end: Option<f64>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_timeline_event_serializes_flat_and_prints_on_one_line() {
        let event = TimelineEvent {
            t: 31.0,
            type_: "NodeClaimLaunched".to_owned(),
            fields: BTreeMap::from([
                ("nodeClaim".to_owned(), json!("default-x7k2p")),
                ("instanceType".to_owned(), json!("m5.large")),
                ("message".to_owned(), json!("launched")),
            ]),
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"t": 31.0, "type": "NodeClaimLaunched", "nodeClaim": "default-x7k2p",
                   "instanceType": "m5.large", "message": "launched"})
        );
        assert_eq!(
            event.line(),
            "  0:00:31  NodeClaimLaunched    nodeClaim=default-x7k2p instanceType=m5.large  (launched)"
        );
    }

    #[test]
    fn the_report_uses_the_contract_names() {
        let report = Report {
            scenario: "s".to_owned(),
            seed: 7,
            end: 60,
            timeline: vec![],
            final_state: FinalState::default(),
            stats: Stats::default(),
            series: Series::default(),
        };
        let value: Value = serde_json::from_str(&report.to_json()).unwrap();
        assert!(value.get("final").unwrap().get("nodeClaims").is_some());
        let stats = value.get("stats").unwrap();
        for key in [
            "nodeClaimsCreated",
            "nodeClaimsDeleted",
            "maxDisruptingByNodePool",
            "pdbViolations",
            "podsLostToInterruption",
            "podsPendingMaxSeconds",
            "orphanedInstances",
            "costPerHourAtEnd",
            "costLowerBoundPerHourAtEnd",
        ] {
            assert!(stats.get(key).is_some(), "{key}");
        }
        let series = value.get("series").unwrap();
        for key in [
            "resolution",
            "nodesByImage",
            "nodesByCapacityType",
            "nodesByNodePool",
            "costPerHour",
            "pendingPods",
            "disruptingByNodePool",
            "disruptionBudgetByNodePool",
        ] {
            assert!(series.get(key).is_some(), "{key}");
        }
    }
}
