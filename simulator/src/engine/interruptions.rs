//! The cloud's interruptions and the kubelets' conditions, acted out: `cloud: {interrupt}`
//! puts EventBridge events on the interruption queue aws-plugin reads (so core learns of them
//! through the real WatchInterruptions stream) and takes the instance when the notice says;
//! `nodeCondition` has kubelets report a condition. A pod still on an instance the cloud
//! takes is counted in `podsLostToInterruption`.

use core_domain::hash::Fnv1a;
use core_domain::labels::LABEL_NODEPOOL;
use core_svc::cloudprovider::InterruptionKind;
use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::scenario::{InterruptSpec, NodeConditionSpec, Targets};

/// How long a spot instance lives after its interruption warning.
const SPOT_WARNING: Duration = Duration::from_secs(120);

/// The most yields the engine waits for core to receive the notices it sent: the plugin's
/// stream and core's reader are tasks of this thread, a handful of polls away.
const MAX_YIELDS: usize = 10_000;

/// `count` of `candidates`, picked by the seed and `salt` (FNV-1a: stable everywhere).
fn pick(candidates: Vec<&str>, count: usize, seed: u64, salt: usize) -> Vec<&str> {
    let mut keyed: Vec<(u64, &str)> = candidates
        .into_iter()
        .map(|c| {
            let hash = Fnv1a::seeded(seed)
                .write(salt.to_le_bytes().into_iter().chain(c.bytes()))
                .finish();
            (hash, c)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().take(count).map(|(_, c)| c).collect()
}

/// The EventBridge event EC2 (or AWS Health) sends for `kind` about `instance`, as the
/// interruption queue receives it.
fn event_body(
    kind: InterruptionKind,
    id: &str,
    instance: &str,
    now: Timestamp,
    retire_at: Timestamp,
) -> String {
    let (source, detail_type, detail) = match kind {
        InterruptionKind::SpotInterruption => (
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            json!({"instance-id": instance, "instance-action": "terminate"}),
        ),
        InterruptionKind::RebalanceRecommendation => (
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            json!({"instance-id": instance}),
        ),
        InterruptionKind::ScheduledChange => (
            "aws.health",
            "AWS Health Event",
            json!({
                "service": "EC2", "eventTypeCategory": "scheduledChange",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "startTime": retire_at.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string(),
                "eventDescription": [{"language": "en_US",
                    "latestDescription": "The instance is scheduled for retirement."}],
                "affectedEntities": [{"entityValue": instance}],
            }),
        ),
        InterruptionKind::Stopping => (
            "aws.ec2",
            "EC2 Instance State-change Notification",
            json!({"instance-id": instance, "state": "stopping"}),
        ),
        InterruptionKind::Terminating | InterruptionKind::CapacityReservationInterruption => (
            "aws.ec2",
            "EC2 Instance State-change Notification",
            json!({"instance-id": instance, "state": "shutting-down"}),
        ),
    };
    json!({
        "version": "0", "id": id, "detail-type": detail_type, "source": source,
        "account": "123456789012", "time": now.to_string(), "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:instance/{instance}")],
        "detail": detail,
    })
    .to_string()
}

impl Simulation {
    /// `cloud: {interrupt}`: a notice per picked instance on the queue, the instance taken
    /// when the notice says (spot: two minutes; scheduled change: `after`; stopping or
    /// terminating: now; a rebalance recommendation takes nothing).
    pub(super) async fn interrupt(&mut self, spec: &InterruptSpec) -> Result<(), EngineError> {
        let now = self.clock.now();
        let snapshot = self.cluster.snapshot().await?;
        let pool_of: BTreeMap<&str, &str> = snapshot
            .node_claims()
            .filter_map(|claim| {
                let pool = claim.metadata.labels.as_ref()?.get(LABEL_NODEPOOL)?;
                Some((claim.metadata.name.as_deref()?, pool.as_str()))
            })
            .collect();
        let instances = self.cloud.instances().await;
        let running: Vec<&InstanceView> =
            instances.iter().filter(|i| i.state == "running").collect();
        let picked: Vec<&str> = match &spec.targets {
            Targets::NodePool { name, count } => {
                let candidates = running
                    .iter()
                    .filter(|i| {
                        i.node_claim
                            .as_deref()
                            .and_then(|claim| pool_of.get(claim))
                            .is_some_and(|pool| pool == name)
                    })
                    .map(|i| i.provider_id.as_str())
                    .collect();
                pick(candidates, *count, self.scenario.seed, self.next_event)
            }
            Targets::Named(ids) => running
                .iter()
                .map(|i| i.provider_id.as_str())
                .filter(|id| ids.iter().any(|named| named == id))
                .collect(),
        };
        let retire_at = match spec.kind {
            InterruptionKind::SpotInterruption
            | InterruptionKind::CapacityReservationInterruption => Some(SPOT_WARNING),
            InterruptionKind::ScheduledChange => Some(spec.after),
            InterruptionKind::Stopping | InterruptionKind::Terminating => Some(Duration::ZERO),
            InterruptionKind::RebalanceRecommendation => None,
        };
        let received = self.core.interruptions().received();
        let mut sent = 0;
        for provider_id in picked {
            let Ok((_, instance)) = parse_provider_id(provider_id) else {
                continue;
            };
            self.interruption_events += 1;
            let id = format!("sim-{:06}", self.interruption_events);
            let at = now
                .saturating_add(retire_at.unwrap_or(Duration::ZERO))
                .unwrap_or(Timestamp::MAX);
            let body = event_body(spec.kind, &id, &instance, now, at);
            if let Err(error) = self.sqs.send(CLUSTER_NAME, &body) {
                tracing::warn!(%error, "interrupt: the queue refused the notice");
                continue;
            }
            sent += 1;
            if retire_at.is_some() {
                self.retirements.push((at, provider_id.to_owned()));
            }
        }
        // The plugin's stream and core's reader run on this thread: let them deliver.
        for _ in 0..MAX_YIELDS {
            if self.core.interruptions().received() >= received + sent {
                break;
            }
            tokio::task::yield_now().await;
        }
        self.retire_due(now).await;
        Ok(())
    }

    /// Takes the instances whose time has come, counting the pods still on them.
    pub(super) async fn retire_due(&mut self, now: Timestamp) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retirements)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.retirements = later;
        if due.is_empty() {
            return;
        }
        let snapshot = match self.cluster.snapshot().await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::warn!(%error, "interrupt: cannot read the cluster");
                return;
            }
        };
        for (_, provider_id) in due {
            let node = snapshot.nodes().find(|node| {
                node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(&provider_id)
            });
            if let Some(node) = node {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                self.recorder.pods_lost_to_interruption += snapshot
                    .pods()
                    .filter(|pod| world::bound_node(pod) == Some(name))
                    .filter(|pod| !world::is_terminal(pod) && !world::is_daemon_set_pod(pod))
                    .count() as u64;
            }
            if let Ok((_, instance)) = parse_provider_id(&provider_id) {
                self.cloud.terminate(&instance).await;
            }
        }
    }

    /// `cloud: {launchFailures}`: instances still starting are terminated by the cloud, as
    /// many as the event said, until its window closes.
    pub(super) async fn fail_launches(&mut self, now: Timestamp) {
        let (count, until) = self.launch_failures;
        if count == 0 || until.is_none_or(|until| now >= until) {
            return;
        }
        let starting: Vec<String> = self
            .cloud
            .instances()
            .await
            .into_iter()
            .filter(|i| i.state == "pending")
            .map(|i| i.provider_id)
            .take(count)
            .collect();
        for provider_id in starting {
            if let Ok((_, instance)) = parse_provider_id(&provider_id) {
                tracing::debug!(provider_id, "the instance fails to start (simulated)");
                self.cloud.terminate(&instance).await;
                self.launch_failures.0 -= 1;
            }
        }
    }

    /// The earliest retirement still to come.
    pub(super) fn next_retirement(&self) -> Option<Timestamp> {
        self.retirements.iter().map(|(at, _)| *at).min()
    }

    /// The Ready nodes `targets` picks (a seeded pick of a NodePool's), or the ones it names.
    fn pick_nodes(&self, snapshot: &Snapshot, targets: &Targets) -> Vec<String> {
        match targets {
            Targets::NodePool { name, count } => {
                let candidates: Vec<&str> = snapshot
                    .nodes()
                    .filter(|node| world::is_node_ready(node))
                    .filter(|node| {
                        node.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(LABEL_NODEPOOL))
                            .is_some_and(|pool| pool == name)
                    })
                    .filter_map(|node| node.metadata.name.as_deref())
                    .collect();
                pick(candidates, *count, self.scenario.seed, self.next_event)
                    .into_iter()
                    .map(str::to_owned)
                    .collect()
            }
            Targets::Named(names) => names.clone(),
        }
    }

    /// `deleteNodes`: the picked nodes are deleted as `kubectl delete node` would.
    pub(super) async fn delete_nodes(&mut self, targets: &Targets) -> Result<(), EngineError> {
        let snapshot = self.cluster.snapshot().await?;
        for name in self.pick_nodes(&snapshot, targets) {
            if let Err(error) = self
                .cluster
                .delete::<Node>(None, &name, DeleteOptions::default())
                .await
            {
                tracing::warn!(node = name, %error, "deleteNodes: delete refused");
            }
        }
        Ok(())
    }

    /// `nodeCondition`: the picked Ready nodes' kubelets report the condition from now.
    pub(super) async fn node_condition(
        &mut self,
        spec: &NodeConditionSpec,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        let snapshot = self.cluster.snapshot().await?;
        let picked = self.pick_nodes(&snapshot, &spec.targets);
        for name in picked {
            let Some(node) = snapshot
                .nodes()
                .find(|n| n.metadata.name.as_deref() == Some(&name))
            else {
                tracing::warn!(node = name, "nodeCondition: no such node");
                continue;
            };
            let mut conditions: Vec<NodeCondition> = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            conditions.retain(|c| c.type_ != spec.type_);
            conditions.push(NodeCondition {
                type_: spec.type_.clone(),
                status: spec.status.clone(),
                reason: Some("SimulatedCondition".to_owned()),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: Some(Time(now)),
                message: Some("set by the scenario".to_owned()),
            });
            let patch = json!({"status": {"conditions": conditions}});
            if let Err(error) = self
                .cluster
                .merge_patch_status::<Node>(None, &name, &patch)
                .await
            {
                tracing::warn!(node = name, %error, "nodeCondition: patch refused");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pick_is_seeded_and_stable() {
        let all = vec!["a", "b", "c", "d", "e"];
        let first = pick(all.clone(), 2, 7, 0);
        assert_eq!(first.len(), 2);
        assert_eq!(pick(all.clone(), 2, 7, 0), first);
        assert_eq!(pick(all.clone(), 9, 7, 0).len(), 5);
    }

    #[test]
    fn events_read_back_as_the_plugin_parses_them() {
        use aws_plugin::interruption::parse::{Parsed, parse};
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        for kind in [
            InterruptionKind::SpotInterruption,
            InterruptionKind::RebalanceRecommendation,
            InterruptionKind::ScheduledChange,
            InterruptionKind::Stopping,
            InterruptionKind::Terminating,
        ] {
            let body = event_body(kind, "e", "i-0123", now, later);
            let Parsed::Notices(notices) = parse(&body) else {
                panic!("{kind:?}: {body}")
            };
            assert_eq!(notices[0].instance_id, "i-0123");
        }
        let body = event_body(InterruptionKind::ScheduledChange, "e", "i-1", now, later);
        let Parsed::Notices(notices) = parse(&body) else {
            panic!("{body}")
        };
        assert_eq!(
            notices[0].deadline,
            Some(std::time::SystemTime::from(later))
        );
    }
}
