//! An in-memory SQS for the simulator and unit tests: named queues, messages delivered in the
//! order sent, each receipt hiding its message for the visibility timeout on an injected
//! clock (so at-least-once delivery is deterministic), deletes by receipt handle. A long
//! poll of an empty queue waits, without a timeout, until a message is sent (on a virtual
//! clock a timeout could never fire); one with no wait answers at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{AwsError, AwsFuture, QueueMessage, Sqs};
use crate::instance_type_provider::{Clock, SystemClock};
use crate::memory_cloud::{CallCounts, lock_state};

/// SQS's default visibility timeout.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

const URL_PREFIX: &str = "memory://sqs/";

/// The in-memory SQS. Cheap to share behind an `Arc`; every call locks one mutex.
#[derive(Debug)]
pub struct MemorySqs {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    visibility_timeout: Duration,
    /// Wakes the long polls waiting for a message.
    arrivals: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    queues: BTreeMap<String, Vec<Stored>>,
    next_id: u64,
    calls: CallCounts,
}

#[derive(Debug)]
struct Stored {
    id: String,
    body: String,
    /// When it may be received again; `None` while never received.
    hidden_until: Option<Instant>,
    receipts: u64,
}

impl Default for MemorySqs {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySqs {
    /// An SQS without queues, on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An SQS without queues whose visibility timeouts run on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::default(),
            clock,
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
            arrivals: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_state(&self.state)
    }

    /// Creates the queue `name` (nothing if it exists).
    pub fn create_queue(&self, name: &str) {
        self.state().queues.entry(name.to_owned()).or_default();
    }

    /// Sends `body` to the queue `name`, which must exist; its message id.
    pub fn send(&self, name: &str, body: &str) -> Result<String, AwsError> {
        let mut state = self.state();
        state.next_id += 1;
        let id = format!("msg-{:08}", state.next_id);
        let queue = state.queues.get_mut(name).ok_or_else(|| not_found(name))?;
        queue.push(Stored {
            id: id.clone(),
            body: body.to_owned(),
            hidden_until: None,
            receipts: 0,
        });
        drop(state);
        self.arrivals.notify_waiters();
        Ok(id)
    }

    /// The bodies of the messages not deleted from the queue `name`, received or not.
    pub fn messages(&self, name: &str) -> Vec<String> {
        self.state()
            .queues
            .get(name)
            .map(|queue| queue.iter().map(|m| m.body.clone()).collect())
            .unwrap_or_default()
    }

    /// How many times the SQS action `action` (`ReceiveMessage`) was called.
    pub fn calls(&self, action: &str) -> u64 {
        self.state().calls.of(action)
    }
}

impl MemorySqs {
    /// Receives up to `max` visible messages, hiding each for the visibility timeout.
    fn take_visible(&self, queue_url: &str, max: i32) -> Result<Vec<QueueMessage>, AwsError> {
        let now = self.clock.now();
        let hidden_until = now + self.visibility_timeout;
        let mut state = self.state();
        state.calls.record("ReceiveMessage");
        let name = name_of(queue_url)?;
        let queue = state.queues.get_mut(name).ok_or_else(|| not_found(name))?;
        let limit = usize::try_from(max.clamp(1, super::MAX_MESSAGES_PER_RECEIVE)).unwrap_or(1);
        let mut received = Vec::new();
        for message in queue
            .iter_mut()
            .filter(|m| m.hidden_until.is_none_or(|until| until <= now))
            .take(limit)
        {
            message.receipts += 1;
            let receipt = format!("{}#{}", message.id, message.receipts);
            message.hidden_until = Some(hidden_until);
            received.push(QueueMessage {
                message_id: message.id.clone(),
                receipt_handle: receipt,
                body: message.body.clone(),
            });
        }
        Ok(received)
    }
}

fn not_found(name: &str) -> AwsError {
    AwsError::NotFound {
        code: "AWS.SimpleQueueService.NonExistentQueue".to_owned(),
        message: format!("the queue {name} does not exist"),
    }
}

/// The queue name of a URL this SQS gave.
fn name_of(url: &str) -> Result<&str, AwsError> {
    url.strip_prefix(URL_PREFIX).ok_or_else(|| not_found(url))
}

impl Sqs for MemorySqs {
    fn queue_url<'a>(&'a self, name: &'a str) -> AwsFuture<'a, String> {
        let mut state = self.state();
        state.calls.record("GetQueueUrl");
        let answer = if state.queues.contains_key(name) {
            Ok(format!("{URL_PREFIX}{name}"))
        } else {
            Err(not_found(name))
        };
        Box::pin(async move { answer })
    }

    fn receive<'a>(
        &'a self,
        queue_url: &'a str,
        max: i32,
        wait: Duration,
    ) -> AwsFuture<'a, Vec<QueueMessage>> {
        Box::pin(async move {
            loop {
                // Registered before looking, so a send in between is not missed.
                let arrival = self.arrivals.notified();
                let received = self.take_visible(queue_url, max)?;
                if !received.is_empty() || wait.is_zero() {
                    return Ok(received);
                }
                arrival.await;
            }
        })
    }

    fn delete<'a>(&'a self, queue_url: &'a str, receipt_handle: &'a str) -> AwsFuture<'a, ()> {
        let mut state = self.state();
        state.calls.record("DeleteMessage");
        let answer = name_of(queue_url).and_then(|name| {
            let queue = state.queues.get_mut(name).ok_or_else(|| not_found(name))?;
            // Any receipt of the message deletes it, as SQS allows for a handle still valid.
            let id = receipt_handle.split('#').next().unwrap_or_default();
            queue.retain(|m| m.id != id);
            Ok(())
        });
        Box::pin(async move { answer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type_provider::FakeClock;
    use crate::sqs::contract;

    #[tokio::test]
    async fn contract_suite() {
        let sqs = MemorySqs::new();
        sqs.create_queue("interruptions");
        let bodies = vec![
            "{\"a\":1}".to_owned(),
            "{\"b\":2}".to_owned(),
            "c".to_owned(),
        ];
        for body in &bodies {
            sqs.send("interruptions", body).unwrap();
        }
        let fixtures = contract::Fixtures {
            queue: "interruptions".to_owned(),
            bodies,
        };
        let shared: Arc<dyn Sqs> = Arc::new(sqs);
        contract::run_all(shared.as_ref(), &fixtures).await;
    }

    /// A long poll of an empty queue waits for the next message, not for a timeout.
    #[tokio::test]
    async fn a_long_poll_waits_for_a_message() {
        let sqs = Arc::new(MemorySqs::new());
        sqs.create_queue("q");
        let url = sqs.queue_url("q").await.unwrap();
        let poll = tokio::spawn({
            let sqs = Arc::clone(&sqs);
            async move { sqs.receive(&url, 10, Duration::from_secs(20)).await }
        });
        tokio::task::yield_now().await;
        assert!(!poll.is_finished());
        sqs.send("q", "late").unwrap();
        let received = poll.await.unwrap().unwrap();
        assert_eq!(received[0].body, "late");
    }

    /// A message received and not deleted comes back once the visibility timeout passed: at
    /// least once.
    #[tokio::test]
    async fn an_undeleted_message_comes_back_after_the_visibility_timeout() {
        let clock = FakeClock::new();
        let sqs = MemorySqs::with_clock(clock.clone());
        sqs.create_queue("q");
        sqs.send("q", "notice").unwrap();
        let url = sqs.queue_url("q").await.unwrap();
        let first = sqs.receive(&url, 10, Duration::ZERO).await.unwrap();
        assert_eq!(first.len(), 1);
        assert!(
            sqs.receive(&url, 10, Duration::ZERO)
                .await
                .unwrap()
                .is_empty()
        );
        clock.advance(DEFAULT_VISIBILITY_TIMEOUT);
        let again = sqs.receive(&url, 10, Duration::ZERO).await.unwrap();
        assert_eq!(again[0].message_id, first[0].message_id);
        assert_ne!(again[0].receipt_handle, first[0].receipt_handle);
        sqs.delete(&url, &again[0].receipt_handle).await.unwrap();
        assert!(sqs.messages("q").is_empty());
    }
}
