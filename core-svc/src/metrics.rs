//! Prometheus metrics, named after upstream Karpenter's `karpenter_*` metrics where one
//! exists. Most are derived from the Events the controllers record ([`MeteredEvents`]), so a
//! decision is counted exactly when it is explained; the plugin calls come from the gRPC
//! adapter's counters, read at scrape time.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cloudprovider::CallMetrics;
use crate::events::{Event, Events, Reason};

/// Label pairs, in a fixed order.
type Labels = Vec<(&'static str, String)>;

/// The metrics core exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    nodeclaims_created: Family<Labels, Counter>,
    nodeclaims_launched: Family<Labels, Counter>,
    nodeclaims_terminated: Family<Labels, Counter>,
    launch_failures: Family<Labels, Counter>,
    nodeclaims_drifted: Family<Labels, Counter>,
    eviction_requests: Family<Labels, Counter>,
    plugin_unavailable: Counter,
    disruption_decisions: Family<Labels, Counter>,
    disruption_failures: Family<Labels, Counter>,
    allowed_disruptions: Family<Labels, Gauge>,
    node_claims: Family<Labels, Gauge>,
    node_pool_usage: Family<Labels, Gauge<f64, AtomicU64>>,
    node_pool_limit: Family<Labels, Gauge<f64, AtomicU64>>,
    interruptions_received: Family<Labels, Counter>,
    nodeclaims_disrupted: Family<Labels, Counter>,
}

impl Metrics {
    /// The metrics, with the plugin's call counters when core talks to a plugin over gRPC.
    pub fn new(plugin_calls: Option<Arc<CallMetrics>>) -> Self {
        let mut registry = Registry::default();
        let nodeclaims_created = Family::<Labels, Counter>::default();
        let nodeclaims_launched = Family::<Labels, Counter>::default();
        let nodeclaims_terminated = Family::<Labels, Counter>::default();
        let launch_failures = Family::<Labels, Counter>::default();
        let nodeclaims_drifted = Family::<Labels, Counter>::default();
        let eviction_requests = Family::<Labels, Counter>::default();
        let plugin_unavailable = Counter::default();
        let disruption_decisions = Family::<Labels, Counter>::default();
        let disruption_failures = Family::<Labels, Counter>::default();
        let allowed_disruptions = Family::<Labels, Gauge>::default();
        let node_claims = Family::<Labels, Gauge>::default();
        let node_pool_usage = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let node_pool_limit = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        let interruptions_received = Family::<Labels, Counter>::default();
        let nodeclaims_disrupted = Family::<Labels, Counter>::default();
        registry.register(
            "karpenter_interruption_received_messages",
            "Interruption notices received from the plugin, by message type (spot_interrupted, rebalance_recommendation, scheduled_change, instance_stopped, instance_terminated, capacity_reservation_interrupted).",
            interruptions_received.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims deleted forcefully, by reason (an interruption's message type, or unhealthy for node repair), NodePool and capacity type.",
            nodeclaims_disrupted.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_created",
            "NodeClaims created, by NodePool.",
            nodeclaims_created.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_launched",
            "NodeClaims launched by the cloud provider, by NodePool.",
            nodeclaims_launched.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_terminated",
            "NodeClaims whose finalizer was removed after their instance was gone, by NodePool.",
            nodeclaims_terminated.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_launch_failures",
            "Create calls that failed, by reason.",
            launch_failures.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_drifted",
            "NodeClaims found drifted, by NodePool and drift reason.",
            nodeclaims_drifted.clone(),
        );
        registry.register(
            "karpenter_nodes_eviction_requests",
            "Eviction requests, by answer (evicted, blocked).",
            eviction_requests.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_unavailable",
            "Controller passes that found the plugin unreachable or answering nonsense and kept their hands off.",
            plugin_unavailable.clone(),
        );
        registry.register(
            "karpenter_disruption_decisions",
            "Disruption commands started, by disruption reason and decision (delete, replace).",
            disruption_decisions.clone(),
        );
        registry.register(
            "karpenter_disruption_queue_failures",
            "Disruption commands abandoned (failed replacement, timeout, validation), by disruption reason.",
            disruption_failures.clone(),
        );
        registry.register(
            "karpenter_nodepools_allowed_disruptions",
            "How many more nodes each NodePool may start disrupting now, by reason.",
            allowed_disruptions.clone(),
        );
        registry.register(
            "karpenter_nodeclaims",
            "NodeClaims now, by NodePool and lifecycle phase (Pending, Launched, Registered, Initialized, Terminating).",
            node_claims.clone(),
        );
        registry.register(
            "karpenter_nodepools_usage",
            "What each NodePool's NodeClaims hold, by resource (cpu in cores, memory in bytes, nodes, pods, ...).",
            node_pool_usage.clone(),
        );
        registry.register(
            "karpenter_nodepools_limit",
            "Each NodePool's spec.limits, by resource (cpu in cores, memory in bytes, ...).",
            node_pool_limit.clone(),
        );
        if let Some(calls) = plugin_calls {
            registry.register(
                "karpenter_cloudprovider_duration_seconds",
                "How long plugin calls took, retries included, by method.",
                calls.durations().clone(),
            );
            registry.register_collector(Box::new(PluginCalls(calls)));
        }
        Self {
            registry,
            nodeclaims_created,
            nodeclaims_launched,
            nodeclaims_terminated,
            launch_failures,
            nodeclaims_drifted,
            eviction_requests,
            plugin_unavailable,
            disruption_decisions,
            disruption_failures,
            allowed_disruptions,
            node_claims,
            node_pool_usage,
            node_pool_limit,
            interruptions_received,
            nodeclaims_disrupted,
        }
    }

    /// Sets the cluster-state gauges (NodeClaims by phase, NodePool usage and limits) to
    /// `state`, dropping the series of NodePools and phases no longer there.
    pub fn set_cluster_state(&self, state: &ClusterState) {
        self.node_claims.clear();
        for ((node_pool, phase), count) in &state.node_claims {
            self.node_claims
                .get_or_create(&vec![
                    ("nodepool", node_pool.clone()),
                    ("phase", (*phase).to_owned()),
                ])
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        for (family, values) in [
            (&self.node_pool_usage, &state.usage),
            (&self.node_pool_limit, &state.limits),
        ] {
            family.clear();
            for ((node_pool, resource), value) in values {
                family
                    .get_or_create(&vec![
                        ("nodepool", node_pool.clone()),
                        ("resource_type", resource.clone()),
                    ])
                    .set(*value);
            }
        }
    }

    /// Sets how many more nodes `node_pool` may start disrupting for `reason` (the disruption
    /// controller calls it each pass).
    pub fn set_allowed_disruptions(&self, node_pool: &str, reason: &str, allowed: i64) {
        self.allowed_disruptions
            .get_or_create(&vec![
                ("nodepool", node_pool.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .set(allowed);
    }

    /// Counts what `event` says happened.
    pub fn observe(&self, event: &Event) {
        let field = |name: &str| event.fields.get(name).cloned().unwrap_or_default();
        let node_pool = || vec![("nodepool", field("nodePool"))];
        match event.reason {
            Reason::NodeClaimCreated => {
                self.nodeclaims_created.get_or_create(&node_pool()).inc();
            }
            Reason::NodeClaimLaunched => {
                self.nodeclaims_launched.get_or_create(&node_pool()).inc();
            }
            Reason::NodeClaimDeleted if event.object.kind == "NodeClaim" => {
                self.nodeclaims_terminated.get_or_create(&node_pool()).inc();
            }
            Reason::LaunchFailed => {
                self.launch_failures
                    .get_or_create(&vec![("reason", field("reason"))])
                    .inc();
            }
            Reason::NodeClaimDrifted => {
                self.nodeclaims_drifted
                    .get_or_create(&vec![
                        ("nodepool", field("nodePool")),
                        ("reason", field("reason")),
                    ])
                    .inc();
            }
            Reason::PodEvicted => {
                self.eviction_requests
                    .get_or_create(&vec![("answer", "evicted".to_owned())])
                    .inc();
            }
            Reason::EvictionBlocked => {
                self.eviction_requests
                    .get_or_create(&vec![("answer", "blocked".to_owned())])
                    .inc();
            }
            Reason::PluginUnavailable => {
                self.plugin_unavailable.inc();
            }
            Reason::DisruptionStarted => {
                self.disruption_decisions
                    .get_or_create(&vec![
                        ("reason", field("reason")),
                        ("decision", field("decision")),
                    ])
                    .inc();
            }
            Reason::DisruptionAbandoned => {
                self.disruption_failures
                    .get_or_create(&vec![("reason", field("disruptionReason"))])
                    .inc();
            }
            Reason::InterruptionReceived => {
                self.interruptions_received
                    .get_or_create(&vec![("message_type", field("reason"))])
                    .inc();
            }
            Reason::TerminatingOnInterruption | Reason::NodeUnhealthy => {
                self.nodeclaims_disrupted
                    .get_or_create(&vec![
                        ("reason", field("reason")),
                        ("nodepool", field("nodePool")),
                        ("capacity_type", field("capacityType")),
                    ])
                    .inc();
            }
            _ => {}
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// What the cluster-state gauges show (computed from a snapshot by
/// `controllers::cluster_state`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    /// NodeClaims by (NodePool, phase).
    pub node_claims: BTreeMap<(String, &'static str), usize>,
    /// What each NodePool's NodeClaims hold, by (NodePool, resource), in Prometheus' base
    /// units (cores, bytes, counts).
    pub usage: BTreeMap<(String, String), f64>,
    /// Each NodePool's `spec.limits`, by (NodePool, resource).
    pub limits: BTreeMap<(String, String), f64>,
}

/// An [`Events`] sink that counts each event in [`Metrics`] before passing it on.
#[derive(Debug)]
pub struct MeteredEvents<E> {
    inner: E,
    metrics: Arc<Metrics>,
}

impl<E> MeteredEvents<E> {
    /// Counts into `metrics`, then records into `inner`.
    pub fn new(inner: E, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }
}

impl<E: Events> Events for MeteredEvents<E> {
    fn record(&self, event: Event) {
        self.metrics.observe(&event);
        self.inner.record(event);
    }
}

/// The gRPC adapter's counters as `karpenter_cloudprovider_calls_total` (attempts, by method
/// and status code) and `karpenter_cloudprovider_errors_total` (failures, by method and error:
/// a failed attempt's status code, or a refused answer's kind), read at scrape time.
#[derive(Debug)]
struct PluginCalls(Arc<CallMetrics>);

impl Collector for PluginCalls {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "karpenter_cloudprovider_calls",
            "Plugin call attempts, by method and gRPC status code.",
            None,
            counter.metric_type(),
        )?;
        for count in self.0.attempts_by_code() {
            let labels: Labels = vec![
                ("method", count.rpc.as_str().to_owned()),
                ("code", format!("{:?}", count.code)),
            ];
            ConstCounter::new(count.count).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "karpenter_cloudprovider_errors",
            "Plugin calls that failed, by method and error: the gRPC status code of an attempt \
             that did not end OK (DeadlineExceeded, Unavailable, ...), or an answer core refused \
             (InvalidAnswer: not what the API allows; InconsistentAnswer: contradicts another \
             answer or the cluster; MessageTooLarge: over the message size limit).",
            None,
            counter.metric_type(),
        )?;
        for count in self.0.errors_by_kind() {
            let labels: Labels = vec![
                ("method", count.rpc.as_str().to_owned()),
                ("error", count.error.label()),
            ];
            ConstCounter::new(count.count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::events::{EventType, MemoryEvents, ObjectRef};

    fn event(reason: Reason, fields: &[(&str, &str)]) -> Event {
        Event {
            time: jiff::Timestamp::UNIX_EPOCH,
            object: ObjectRef::cluster_scoped("NodeClaim", "default-abcde"),
            type_: EventType::Normal,
            reason,
            message: String::new(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn events_are_counted_under_upstream_names() {
        let metrics = Arc::new(Metrics::new(None));
        let events = MeteredEvents::new(MemoryEvents::new(), Arc::clone(&metrics));
        events.record(event(Reason::NodeClaimCreated, &[("nodePool", "default")]));
        events.record(event(Reason::NodeClaimCreated, &[("nodePool", "default")]));
        events.record(event(
            Reason::NodeClaimDrifted,
            &[("nodePool", "default"), ("reason", "AMIDrift")],
        ));
        events.record(event(Reason::PluginUnavailable, &[]));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(r#"karpenter_nodeclaims_created_total{nodepool="default"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_drifted_total{nodepool="default",reason="AMIDrift"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains("karpenter_cloudprovider_unavailable_total 1"),
            "{text}"
        );
        assert_eq!(
            events.inner.all().len(),
            4,
            "events still reach the inner sink"
        );
    }

    #[test]
    fn disruption_decisions_failures_and_allowances_are_exported() {
        let metrics = Arc::new(Metrics::new(None));
        let events = MeteredEvents::new(MemoryEvents::new(), Arc::clone(&metrics));
        events.record(event(
            Reason::DisruptionStarted,
            &[("reason", "Drifted"), ("decision", "replace")],
        ));
        events.record(event(
            Reason::DisruptionAbandoned,
            &[("reason", "timed out"), ("disruptionReason", "Drifted")],
        ));
        metrics.set_allowed_disruptions("default", "Drifted", 3);
        metrics.set_allowed_disruptions("default", "Drifted", 2);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"karpenter_disruption_decisions_total{reason="Drifted",decision="replace"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"karpenter_disruption_queue_failures_total{reason="Drifted"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_nodepools_allowed_disruptions{nodepool="default",reason="Drifted"} 2"#
            ),
            "{text}"
        );
    }

    /// Upstream's interruption metrics, from the interruption and repair Events.
    #[test]
    fn interruptions_and_forceful_disruptions_are_exported() {
        let metrics = Arc::new(Metrics::new(None));
        let events = MeteredEvents::new(MemoryEvents::new(), Arc::clone(&metrics));
        let fields = [
            ("reason", "spot_interrupted"),
            ("nodePool", "spot"),
            ("capacityType", "spot"),
        ];
        events.record(event(Reason::InterruptionReceived, &fields));
        events.record(event(Reason::TerminatingOnInterruption, &fields));
        events.record(event(
            Reason::NodeUnhealthy,
            &[
                ("reason", "unhealthy"),
                ("nodePool", "general"),
                ("capacityType", "on-demand"),
            ],
        ));
        let text = metrics.encode().unwrap();
        for line in [
            r#"karpenter_interruption_received_messages_total{message_type="spot_interrupted"} 1"#,
            r#"karpenter_nodeclaims_disrupted_total{reason="spot_interrupted",nodepool="spot",capacity_type="spot"} 1"#,
            r#"karpenter_nodeclaims_disrupted_total{reason="unhealthy",nodepool="general",capacity_type="on-demand"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn plugin_calls_are_exported_with_errors_apart() {
        let calls = Arc::new(CallMetrics::new());
        calls.record_attempt(crate::cloudprovider::Rpc::Create, tonic::Code::Ok);
        calls.record_attempt(crate::cloudprovider::Rpc::Create, tonic::Code::Unavailable);
        calls.record_error(
            crate::cloudprovider::Rpc::Create,
            crate::cloudprovider::grpc::ErrorKind::InvalidAnswer,
        );
        calls.record_error(
            crate::cloudprovider::Rpc::List,
            crate::cloudprovider::grpc::ErrorKind::InconsistentAnswer,
        );
        let text = Metrics::new(Some(calls)).encode().unwrap();
        assert!(
            text.contains(r#"karpenter_cloudprovider_calls_total{method="Create",code="Ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_errors_total{method="Create",error="Unavailable"} 1"#
            ),
            "{text}"
        );
        assert!(
            !text.contains(r#"karpenter_cloudprovider_errors_total{method="Create",error="Ok"}"#)
        );
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_errors_total{method="Create",error="InvalidAnswer"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_cloudprovider_errors_total{method="List",error="InconsistentAnswer"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn plugin_call_durations_are_a_histogram_by_method() {
        let calls = Arc::new(CallMetrics::new());
        let rpc = crate::cloudprovider::Rpc::IsDrifted;
        calls.observe_call(rpc, std::time::Duration::from_millis(30));
        calls.observe_call(rpc, std::time::Duration::from_secs(2));
        let text = Metrics::new(Some(calls)).encode().unwrap();
        for line in [
            r#"karpenter_cloudprovider_duration_seconds_bucket{le="0.025",method="IsDrifted"} 0"#,
            r#"karpenter_cloudprovider_duration_seconds_bucket{le="0.05",method="IsDrifted"} 1"#,
            r#"karpenter_cloudprovider_duration_seconds_bucket{le="2.0",method="IsDrifted"} 2"#,
            r#"karpenter_cloudprovider_duration_seconds_count{method="IsDrifted"} 2"#,
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }

    #[test]
    fn the_cluster_state_gauges_are_exported_and_dropped_with_their_node_pool() {
        let mut state = ClusterState::default();
        state
            .node_claims
            .insert(("default".to_owned(), "Initialized"), 2);
        state
            .usage
            .insert(("default".to_owned(), "cpu".to_owned()), 7.5);
        state
            .limits
            .insert(("default".to_owned(), "cpu".to_owned()), 100.0);
        let metrics = Metrics::new(None);
        metrics.set_cluster_state(&state);
        let text = metrics.encode().unwrap();
        for line in [
            r#"karpenter_nodeclaims{nodepool="default",phase="Initialized"} 2"#,
            r#"karpenter_nodepools_usage{nodepool="default",resource_type="cpu"} 7.5"#,
            r#"karpenter_nodepools_limit{nodepool="default",resource_type="cpu"} 100"#,
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
        // A later state without the NodePool drops its series.
        metrics.set_cluster_state(&ClusterState::default());
        let text = metrics.encode().unwrap();
        assert!(!text.contains(r#"nodepool="default""#), "{text}");
    }
}
