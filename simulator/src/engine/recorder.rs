//! The run's record as it goes: the timeline (core's events, the simulator's own, outages),
//! and the figures the report's `stats` sum up (pending times, NodeClaims created and deleted,
//! nodes disrupting per NodePool, evictions below a budget).

use core_svc::cluster::SlimPod;
use core_svc::disruption::budgets::{self as node_pool_budgets, Limit};
use karpenter_api::DisruptionReason;

use super::*;
use crate::series::{Sample, SeriesRecorder};

pub(super) fn node_pool_of(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels
        .and_then(|labels| labels.get("karpenter.sh/nodepool"))
        .map(String::as_str)
}

/// The timeline and the figures, as the run goes.
#[derive(Debug)]
pub(super) struct Recorder {
    pub(super) start: Timestamp,
    pub(super) timeline: Vec<TimelineEvent>,
    /// When each object's last `PluginUnavailable` from a controller was kept.
    pub(super) plugin_unavailable: BTreeMap<String, Timestamp>,
    /// Whether a simulated outage was on at the last check (to say when it ends).
    pub(super) outage_on: bool,
    pub(super) initial_node_claims: BTreeSet<String>,
    pub(super) node_claims_seen: BTreeSet<String>,
    pub(super) max_disrupting: BTreeMap<String, u64>,
    pub(super) pdb_violations: u64,
    /// Pods still running on instances the cloud took after an interruption notice.
    pub(super) pods_lost_to_interruption: u64,
    /// Pods waiting to be scheduled: UID -> since when.
    pub(super) pending: BTreeMap<String, Timestamp>,
    pub(super) pending_max: Duration,
    /// The cluster's revision at the last [`Recorder::sample`]: a sample of an unchanged
    /// cluster would find what the last one found.
    pub(super) sampled: Option<u64>,
    /// The report's `series`.
    pub(super) series: SeriesRecorder,
    /// Nodes at the last sample, for the progress line.
    pub(super) nodes: usize,
}

impl Recorder {
    pub(super) fn new(clock: &VirtualClock) -> Self {
        Self {
            start: clock.start(),
            timeline: Vec::new(),
            plugin_unavailable: BTreeMap::new(),
            outage_on: false,
            initial_node_claims: BTreeSet::new(),
            node_claims_seen: BTreeSet::new(),
            max_disrupting: BTreeMap::new(),
            pdb_violations: 0,
            pods_lost_to_interruption: 0,
            pending: BTreeMap::new(),
            pending_max: Duration::ZERO,
            sampled: None,
            series: SeriesRecorder::default(),
            nodes: 0,
        }
    }

    pub(super) fn t(&self, time: Timestamp) -> f64 {
        time.duration_since(self.start).as_secs_f64()
    }

    pub(super) fn push(&mut self, event: TimelineEvent, observer: &mut dyn Observer) {
        observer.event(&event);
        self.timeline.push(event);
    }

    pub(super) fn outage_started(
        &mut self,
        now: Timestamp,
        length: Duration,
        slow: bool,
        observer: &mut dyn Observer,
    ) {
        self.outage_on = true;
        let seconds = length.as_secs_f64();
        let message = if slow {
            format!(
                "simulated slow plugin: every provider call is acted on but answered after core's deadline for {seconds}s"
            )
        } else {
            format!(
                "simulated plugin outage: every provider call fails as unavailable for {seconds}s"
            )
        };
        self.push(
            TimelineEvent {
                t: self.t(now),
                type_: "PluginUnavailable".to_owned(),
                fields: BTreeMap::from([
                    ("for".to_owned(), json!(seconds)),
                    ("message".to_owned(), json!(message)),
                ]),
            },
            observer,
        );
    }

    pub(super) fn outage_check(
        &mut self,
        outage: &OutageSwitch,
        now: Timestamp,
        observer: &mut dyn Observer,
    ) {
        if self.outage_on && !outage.is_disturbed(now) {
            self.outage_on = false;
            self.push(
                TimelineEvent {
                    t: self.t(now),
                    type_: "PluginAvailable".to_owned(),
                    fields: BTreeMap::from([(
                        "message".to_owned(),
                        json!("the simulated plugin outage is over"),
                    )]),
                },
                observer,
            );
        }
    }

    /// Turns core's events into timeline entries; answers the pods evicted (`namespace/name`).
    pub(super) fn record(
        &mut self,
        events: Vec<Event>,
        outage: &OutageSwitch,
        now: Timestamp,
        observer: &mut dyn Observer,
    ) -> Vec<String> {
        let mut evicted = Vec::new();
        for event in events {
            if !TIMELINE_TYPES.contains(&event.reason.as_str()) {
                continue;
            }
            let object = &event.object;
            if event.reason == Reason::PluginUnavailable {
                if outage.is_disturbed(now) {
                    continue;
                }
                let key = format!("{}/{}/{}", object.kind, object.namespace, object.name);
                if self.plugin_unavailable.get(&key).is_some_and(|last| {
                    now.duration_since(*last).as_secs_f64() < PLUGIN_UNAVAILABLE_EVERY.as_secs_f64()
                }) {
                    continue;
                }
                self.plugin_unavailable.insert(key, now);
            }
            let mut fields: BTreeMap<String, Value> = event
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let identity = match object.kind.as_str() {
                "NodeClaim" => Some(("nodeClaim", object.name.clone())),
                "Node" => Some(("node", object.name.clone())),
                "NodePool" => Some(("nodePool", object.name.clone())),
                "Pod" => Some(("pod", format!("{}/{}", object.namespace, object.name))),
                _ => None,
            };
            if let Some((key, value)) = identity {
                fields.entry(key.to_owned()).or_insert(Value::String(value));
            }
            if !event.message.is_empty() {
                fields.insert("message".to_owned(), Value::String(event.message.clone()));
            }
            if event.reason == Reason::PodEvicted
                && let Some(Value::String(pod)) = fields.get("pod")
            {
                evicted.push(pod.clone());
            }
            if event.reason == Reason::NodeClaimCreated
                && let Some(Value::String(name)) = fields.get("nodeClaim")
            {
                self.node_claims_seen.insert(name.clone());
            }
            let entry = TimelineEvent {
                t: self.t(event.time),
                type_: event.reason.as_str().to_owned(),
                fields,
            };
            self.push(entry, observer);
        }
        evicted
    }

    /// Counts the evictions that left a budget of their pod below what it allows.
    pub(super) fn check_budgets(
        &mut self,
        evicted: &[String],
        before: &Snapshot,
        controller_of: &dyn Fn(&SlimPod) -> budgets::Controller,
    ) {
        for pdb in &before.pdbs {
            self.pdb_violations += budgets::violations(pdb, &before.pods, evicted, controller_of);
        }
    }

    /// The figures sampled at the end of each step that changed the cluster.
    pub(super) fn sample(
        &mut self,
        snapshot: &Snapshot,
        instances: &[InstanceView],
        now: Timestamp,
    ) {
        for pool in snapshot.node_pools() {
            if let Some(name) = &pool.metadata.name {
                self.max_disrupting.entry(name.clone()).or_insert(0);
            }
        }
        let deleting_claims: BTreeSet<&str> = snapshot
            .node_claims()
            .filter(|claim| claim.metadata.deletion_timestamp.is_some())
            .filter_map(|claim| claim.status.as_ref())
            .map(|status| status.provider_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        // Upstream's budgets stop counting a node once its instance is terminating (drained,
        // shutting down): kubernetes-sigs/karpenter `pkg/controllers/disruption/helpers.go`,
        // `BuildDisruptionBudgetMapping`.
        let terminating_instances: BTreeSet<&str> = snapshot
            .node_claims()
            .filter_map(|claim| claim.status.as_ref())
            .filter(|status| condition::is_true(&status.conditions, CONDITION_INSTANCE_TERMINATING))
            .map(|status| status.provider_id.as_str())
            .filter(|id| !id.is_empty())
            .collect();
        let mut disrupting: BTreeMap<&str, u64> = BTreeMap::new();
        for node in snapshot.nodes() {
            let Some(pool) = node_pool_of(node.metadata.labels.as_ref()) else {
                continue;
            };
            let tainted = node
                .spec
                .as_ref()
                .and_then(|spec| spec.taints.as_ref())
                .is_some_and(|taints| taints.iter().any(|t| t.key == "karpenter.sh/disrupted"));
            let provider_id = node
                .spec
                .as_ref()
                .and_then(|spec| spec.provider_id.as_deref())
                .unwrap_or_default();
            let deleting =
                node.metadata.deletion_timestamp.is_some() || deleting_claims.contains(provider_id);
            if (tainted || deleting) && !terminating_instances.contains(provider_id) {
                *disrupting.entry(pool).or_default() += 1;
            }
        }
        for (pool, count) in &disrupting {
            let max = self.max_disrupting.entry((*pool).to_owned()).or_insert(0);
            *max = (*max).max(*count);
        }
        for claim in snapshot.node_claims() {
            if let Some(name) = &claim.metadata.name {
                self.node_claims_seen.insert(name.clone());
            }
        }
        self.track_pending(snapshot, now);
        self.nodes = snapshot.nodes.len();
        let mut sample = fleet_sample(snapshot, instances, now);
        sample.pending_pods = self.pending.len() as u64;
        sample.disrupting_by_node_pool = self
            .max_disrupting
            .keys()
            .map(|pool| {
                let count = disrupting.get(pool.as_str()).copied().unwrap_or(0);
                (pool.clone(), count)
            })
            .collect();
        self.series.observe(self.t(now), &sample);
    }

    pub(super) fn track_pending(&mut self, snapshot: &Snapshot, now: Timestamp) {
        let mut still = BTreeMap::new();
        for pod in snapshot.pods() {
            let waiting = world::bound_node(pod).is_none()
                && !world::is_terminating(pod)
                && !world::is_terminal(pod);
            if !waiting {
                continue;
            }
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let since = self
                .pending
                .get(&uid)
                .copied()
                .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or(now);
            still.insert(uid, since);
        }
        for (uid, since) in &self.pending {
            if !still.contains_key(uid) {
                self.pending_max = self.pending_max.max(elapsed(*since, now));
            }
        }
        self.pending = still;
    }

    /// Closes the waits still open at the end.
    pub(super) fn finish(&mut self, snapshot: &Snapshot, now: Timestamp) {
        self.track_pending(snapshot, now);
        for since in self.pending.values() {
            self.pending_max = self.pending_max.max(elapsed(*since, now));
        }
    }

    pub(super) fn stats(&self, snapshot: &Snapshot, instances: &[InstanceView]) -> Stats {
        let present: BTreeSet<&str> = snapshot
            .node_claims()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        let created = self
            .node_claims_seen
            .iter()
            .filter(|name| !self.initial_node_claims.contains(*name))
            .count();
        let deleted = self
            .node_claims_seen
            .iter()
            .filter(|name| !present.contains(name.as_str()))
            .count();
        let orphaned = orphaned_instances(snapshot, instances).count();
        let cost: f64 = instances
            .iter()
            .filter(|i| is_live(i))
            .filter_map(|i| i.price)
            .sum();
        Stats {
            node_claims_created: created as u64,
            node_claims_deleted: deleted as u64,
            max_disrupting_by_node_pool: self.max_disrupting.clone(),
            pdb_violations: self.pdb_violations,
            pods_lost_to_interruption: self.pods_lost_to_interruption,
            pods_pending_max_seconds: self.pending_max.as_secs_f64(),
            orphaned_instances: orphaned as u64,
            cost_per_hour_at_end: (cost * 10_000.0).round() / 10_000.0,
            // Asks the plugin, so `Simulation::report` fills it in.
            cost_lower_bound_per_hour_at_end: None,
        }
    }
}

/// The series' figures of the nodes, the instances and the budgets (the pending and
/// disrupting counts are the recorder's).
fn fleet_sample(snapshot: &Snapshot, instances: &[InstanceView], now: Timestamp) -> Sample {
    let by_provider_id: BTreeMap<&str, &InstanceView> = instances
        .iter()
        .map(|instance| (instance.provider_id.as_str(), instance))
        .collect();
    let mut sample = Sample::default();
    for node in snapshot.nodes() {
        let labels = node.metadata.labels.as_ref();
        let instance = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .and_then(|id| by_provider_id.get(id));
        let image = instance.map_or("(unknown)", |instance| instance.image_id.as_str());
        let capacity_type = labels
            .and_then(|labels| labels.get("karpenter.sh/capacity-type"))
            .map(String::as_str)
            .or_else(|| instance.map(|instance| instance.capacity_type.as_str()))
            .unwrap_or("(unknown)");
        let pool = node_pool_of(labels).unwrap_or("(none)");
        for (map, key) in [
            (&mut sample.nodes_by_image, image),
            (&mut sample.nodes_by_capacity_type, capacity_type),
            (&mut sample.nodes_by_node_pool, pool),
        ] {
            *map.entry(key.to_owned()).or_default() += 1;
        }
    }
    sample.cost_per_hour = instances
        .iter()
        .filter(|instance| is_live(instance))
        .filter_map(|instance| instance.price)
        .sum();
    // Drifted: the reason a fleet roll (the pictures' main subject) is disrupted for.
    sample.disruption_budget_by_node_pool = node_pool_budgets::allowances(snapshot, now)
        .into_iter()
        .map(|(pool, allowance)| {
            let limit = match allowance.reasons.get(&DisruptionReason::Drifted) {
                Some(reason) => match &reason.limit {
                    Limit::Budget(active) => Some(u64::from(active.limit)),
                    Limit::Unlimited => None,
                    Limit::Invalid(_) => Some(0),
                },
                None => Some(0),
            };
            (pool, limit)
        })
        .collect();
    sample
}

/// Whether the instance is starting or running (what costs, and what a NodeClaim must hold).
pub(super) fn is_live(instance: &InstanceView) -> bool {
    instance.state == "pending" || instance.state == "running"
}

/// The live instances no NodeClaim holds (by provider ID).
pub(super) fn orphaned_instances<'a>(
    snapshot: &Snapshot,
    instances: &'a [InstanceView],
) -> impl Iterator<Item = &'a InstanceView> {
    let claimed: BTreeSet<String> = snapshot
        .node_claims()
        .filter_map(|c| c.status.as_ref())
        .map(|s| s.provider_id.clone())
        .filter(|id| !id.is_empty())
        .collect();
    instances
        .iter()
        .filter(move |i| is_live(i) && !claimed.contains(&i.provider_id))
}

pub(super) fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let span = now.duration_since(since);
    Duration::try_from(span).unwrap_or(Duration::ZERO)
}

pub(super) fn condition_status(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

pub(super) fn string_map(map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    map.cloned().unwrap_or_default()
}
