//! [`ApiServerEvents`]: the Events port posting `events.k8s.io/v1` Events.
//!
//! A controller's `record` never waits on the API server: events go into a bounded queue that
//! one task drains; when the queue is full (a slow or unreachable API server), new events are
//! dropped and counted, never blocking a decision. An event repeated for the same object with
//! the same reason and message within [`DEDUPE_WINDOW`] is posted once, as upstream's
//! recorder does, so a pass that re-explains a blocked node every few seconds does not flood
//! the API server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;
use kube::core::Request;
use kube::core::params::PostParams;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::events::{Event, EventType, Events, ObjectRef, Reason};

/// How many events may wait for the API server.
pub const QUEUE_CAPACITY: usize = 1_000;

/// An identical event within this window is posted once.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(120);

/// The controller name every event reports, upstream's.
pub const REPORTING_CONTROLLER: &str = "karpenter";

/// Where a cluster-scoped object's events go (Events are namespaced).
const CLUSTER_SCOPED_NAMESPACE: &str = "default";

/// The API version of a kind core reports on; `None` for kinds it does not know (a provider's
/// node class of another group), which the API server accepts without one.
fn api_version_of(kind: &str) -> Option<&'static str> {
    match kind {
        "NodePool" | "NodeClaim" => Some("karpenter.sh/v1"),
        "Node" | "Pod" => Some("v1"),
        "EC2NodeClass" => Some("karpenter.k8s.aws/v1"),
        "PodDisruptionBudget" => Some("policy/v1"),
        _ => None,
    }
}

/// The namespace an event about `event.object` is created in.
pub fn event_namespace(event: &Event) -> &str {
    if event.object.namespace.is_empty() {
        CLUSTER_SCOPED_NAMESPACE
    } else {
        &event.object.namespace
    }
}

/// The `events.k8s.io/v1` Event for `event`, named `name`, reported by `instance`.
pub fn event_body(event: &Event, name: &str, instance: &str) -> Value {
    let mut regarding = json!({
        "kind": event.object.kind,
        "name": event.object.name,
    });
    if let Value::Object(map) = &mut regarding {
        if !event.object.namespace.is_empty() {
            map.insert("namespace".to_owned(), json!(event.object.namespace));
        }
        if let Some(api_version) = api_version_of(&event.object.kind) {
            map.insert("apiVersion".to_owned(), json!(api_version));
        }
    }
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": event_namespace(event)},
        "eventTime": micro_time(event.time),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
        "action": event.reason.as_str(),
        "reason": event.reason.as_str(),
        "type": match event.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        },
        "note": truncate(&event.message, 1024),
        "regarding": regarding,
    })
}

/// RFC 3339 with microseconds, the API's `MicroTime`.
fn micro_time(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The API server refuses notes over 1 kB.
fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What makes two events the same: the object, the reason and the message.
type DedupeKey = (ObjectRef, Reason, String);

/// The Events port over the API server.
#[derive(Debug)]
pub struct ApiServerEvents {
    sender: mpsc::Sender<Event>,
    recent: Mutex<HashMap<DedupeKey, Timestamp>>,
    dropped: AtomicU64,
}

impl ApiServerEvents {
    /// Starts the task that posts events with `client`, reported by `instance` (the pod's
    /// name).
    pub fn start(client: Client, instance: String) -> (Self, JoinHandle<()>) {
        let (sender, mut receiver) = mpsc::channel::<Event>(QUEUE_CAPACITY);
        let task = tokio::spawn(async move {
            let mut sequence: u64 = 0;
            while let Some(event) = receiver.recv().await {
                sequence += 1;
                let name = format!(
                    "{}.{:x}{:04x}",
                    event.object.name,
                    event.time.as_nanosecond(),
                    sequence % 0x1_0000
                );
                let body = event_body(&event, &name, &instance);
                let url = format!(
                    "/apis/events.k8s.io/v1/namespaces/{}/events",
                    event_namespace(&event)
                );
                let request =
                    Request::new(url).create(&PostParams::default(), body.to_string().into_bytes());
                let result = match request {
                    Ok(request) => client.request_text(request).await.map(drop),
                    Err(error) => Err(kube::Error::BuildRequest(error)),
                };
                if let Err(error) = result {
                    tracing::debug!(reason = %event.reason, object = %event.object.name, %error, "event not posted");
                }
            }
        });
        (
            Self {
                sender,
                recent: Mutex::new(HashMap::new()),
                dropped: AtomicU64::new(0),
            },
            task,
        )
    }

    /// How many events were dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether `event` repeats one recorded within the window (and if not, remembers it).
    fn is_repeat(&self, event: &Event) -> bool {
        let key = (event.object.clone(), event.reason, event.message.clone());
        let window = jiff::SignedDuration::try_from(DEDUPE_WINDOW).unwrap_or_default();
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.retain(|_, at| event.time.duration_since(*at) < window);
        match recent.get(&key) {
            Some(_) => true,
            None => {
                recent.insert(key, event.time);
                false
            }
        }
    }
}

impl Events for ApiServerEvents {
    fn record(&self, event: Event) {
        if self.is_repeat(&event) {
            return;
        }
        if let Err(error) = self.sender.try_send(event) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%error, "event queue full; event dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn event(kind: &str, namespace: &str, reason: Reason) -> Event {
        Event {
            time: Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
            object: ObjectRef {
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: "default-x7k2p".to_owned(),
            },
            type_: EventType::Normal,
            reason,
            message: "Disrupting NodeClaim: Drifted".to_owned(),
            fields: BTreeMap::new(),
        }
    }

    #[test]
    fn given_a_nodeclaim_event_then_the_body_is_an_events_k8s_io_event_in_default() {
        let body = event_body(
            &event("NodeClaim", "", Reason::DisruptionTerminating),
            "default-x7k2p.1",
            "core-0",
        );
        assert_eq!(
            body,
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "default-x7k2p.1", "namespace": "default"},
                "eventTime": "2027-01-15T08:00:00.000000Z",
                "reportingController": "karpenter",
                "reportingInstance": "core-0",
                "action": "DisruptionTerminating",
                "reason": "DisruptionTerminating",
                "type": "Normal",
                "note": "Disrupting NodeClaim: Drifted",
                "regarding": {"kind": "NodeClaim", "name": "default-x7k2p", "apiVersion": "karpenter.sh/v1"},
            })
        );
    }

    #[test]
    fn given_a_pod_event_then_it_goes_to_the_pods_namespace() {
        let pod = event("Pod", "shop", Reason::PodEvicted);
        assert_eq!(event_namespace(&pod), "shop");
        let body = event_body(&pod, "n", "core-0");
        assert_eq!(body["regarding"]["namespace"], "shop");
        assert_eq!(body["regarding"]["apiVersion"], "v1");
    }

    #[test]
    fn given_a_long_message_then_the_note_is_cut_at_a_character_boundary() {
        let text = "é".repeat(600);
        let cut = truncate(&text, 1024);
        assert!(cut.len() <= 1024);
        assert!(text.starts_with(cut));
    }

    #[tokio::test]
    async fn given_the_same_event_twice_in_the_window_then_it_is_queued_once() {
        let (sender, mut receiver) = mpsc::channel(4);
        let events = ApiServerEvents {
            sender,
            recent: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
        };
        let first = event("Node", "", Reason::DisruptionBlocked);
        let mut later = first.clone();
        later.time = first.time + jiff::SignedDuration::from_secs(60);
        let mut much_later = first.clone();
        much_later.time = first.time + jiff::SignedDuration::from_secs(121);
        events.record(first);
        events.record(later);
        events.record(much_later);
        let mut queued = 0;
        while receiver.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, 2);
    }

    #[tokio::test]
    async fn given_a_full_queue_then_events_are_dropped_and_counted_without_waiting() {
        let (sender, _receiver) = mpsc::channel(1);
        let events = ApiServerEvents {
            sender,
            recent: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
        };
        for reason in [
            Reason::DisruptionBlocked,
            Reason::NodeDeleted,
            Reason::NodeRegistered,
        ] {
            events.record(event("Node", "", reason));
        }
        assert_eq!(events.dropped(), 2);
    }
}
