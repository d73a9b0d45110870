//! Where the notices of the plugin's interruption stream wait for the controller: delivery is
//! at least once, so a notice already acted on is not acted on again (only acknowledged
//! again), and the inbox is bounded: a notice that does not fit is dropped unacknowledged,
//! which is safe, because the plugin sends it again. It also keeps the stream's state, so the
//! controller (re)opens it with backoff on its own clock.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::cloudprovider::Interruption;

/// The most notices waiting at once.
pub const MAX_PENDING: usize = 10_000;
/// How many acted-on notice ids are remembered, to recognise them when sent again.
pub const REMEMBERED: usize = 10_000;
/// The first wait before re-opening a stream that ended.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait before re-opening it.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The wait before the `failures`-th attempt to re-open: 1 s doubling to 1 min.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_MIN.saturating_mul(1 << doublings).min(BACKOFF_MAX)
}

/// The state of the interruption stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamState {
    /// Not open: never opened, or ended `failures` times in a row (0: open it now).
    #[default]
    Closed,
    /// Open: a reader forwards its batches.
    Open,
    /// The plugin does not support interruptions.
    Unsupported,
}

/// The inbox. Shared by the stream's reader, the controller and the manager (which runs the
/// controller when the inbox has work).
#[derive(Debug, Default)]
pub struct InterruptionInbox {
    state: Mutex<State>,
    arrivals: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    pending: VecDeque<Interruption>,
    pending_ids: HashSet<String>,
    acted: VecDeque<String>,
    acted_ids: HashSet<String>,
    to_ack: Vec<String>,
    /// The last acknowledgement failed: the ids wait for the controller's retry, not for
    /// the next round.
    acks_deferred: bool,
    stream: StreamState,
    /// Consecutive ends of the stream without a batch in between.
    failures: u32,
    /// Whether the controller has seen the stream's latest end (and scheduled the re-open).
    end_seen: bool,
    received: u64,
    dropped: u64,
}

impl InterruptionInbox {
    /// An empty inbox, its stream closed.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A batch from the stream: new notices wait; notices already acted on are acknowledged
    /// again; duplicates of waiting ones are dropped.
    pub fn push(&self, batch: Vec<Interruption>) {
        let mut state = self.state();
        state.failures = 0;
        for notice in batch {
            state.received += 1;
            if state.acted_ids.contains(&notice.event_id) {
                state.to_ack.push(notice.event_id);
            } else if state.pending_ids.contains(&notice.event_id) {
                // Sent again before it was acted on: one is enough.
            } else if state.pending.len() >= MAX_PENDING {
                state.dropped += 1;
            } else {
                state.pending_ids.insert(notice.event_id.clone());
                state.pending.push_back(notice);
            }
        }
        drop(state);
        self.arrivals.notify_one();
    }

    /// Notices taken but not acted on (the cluster or a write failed): they wait again, ahead
    /// of newer ones, without counting as received twice.
    pub fn put_back(&self, notices: Vec<Interruption>) {
        let mut state = self.state();
        for notice in notices.into_iter().rev() {
            if state.acted_ids.contains(&notice.event_id)
                || !state.pending_ids.insert(notice.event_id.clone())
            {
                continue;
            }
            state.pending.push_front(notice);
        }
    }

    /// Every waiting notice, oldest first.
    pub fn take(&self) -> Vec<Interruption> {
        let mut state = self.state();
        state.pending_ids.clear();
        state.pending.drain(..).collect()
    }

    /// Notices core acted on (or chose to ignore): remembered, and to be acknowledged.
    pub fn acted(&self, ids: impl IntoIterator<Item = String>) {
        let mut state = self.state();
        for id in ids {
            if state.acted_ids.insert(id.clone()) {
                state.acted.push_back(id.clone());
                if state.acted.len() > REMEMBERED
                    && let Some(oldest) = state.acted.pop_front()
                {
                    state.acted_ids.remove(&oldest);
                }
            }
            state.to_ack.push(id);
        }
    }

    /// The ids to acknowledge now (each once).
    pub fn take_acks(&self) -> Vec<String> {
        let mut state = self.state();
        state.acks_deferred = false;
        let mut ids = std::mem::take(&mut state.to_ack);
        ids.sort();
        ids.dedup();
        ids
    }

    /// Acknowledgements that failed: tried again on the next pass.
    pub fn ack_failed(&self, ids: Vec<String>) {
        let mut state = self.state();
        state.to_ack.extend(ids);
        state.acks_deferred = true;
    }

    /// Whether the controller has anything to do: notices, acknowledgements, or a stream that
    /// ended and whose re-open is not scheduled yet.
    pub fn has_work(&self) -> bool {
        let state = self.state();
        !state.pending.is_empty()
            || (!state.to_ack.is_empty() && !state.acks_deferred)
            || (state.stream == StreamState::Closed && !state.end_seen)
    }

    /// How many notices the stream brought so far (duplicates included).
    pub fn received(&self) -> u64 {
        self.state().received
    }

    /// How many notices did not fit and were left to be sent again.
    pub fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// The stream's state.
    pub fn stream(&self) -> StreamState {
        self.state().stream
    }

    /// The stream is open.
    pub fn opened(&self) {
        let mut state = self.state();
        state.stream = StreamState::Open;
        state.end_seen = false;
    }

    /// The stream ended (or could not be opened): one more failure in a row.
    pub fn closed(&self) {
        let mut state = self.state();
        if state.stream != StreamState::Unsupported {
            state.stream = StreamState::Closed;
            state.failures = state.failures.saturating_add(1);
            state.end_seen = false;
        }
        drop(state);
        self.arrivals.notify_one();
    }

    /// A stream that stayed open a good while before it ended is a fresh start: the next
    /// re-open waits the shortest backoff again.
    pub fn reset_failures(&self) {
        let mut state = self.state();
        state.failures = state.failures.min(1);
    }

    /// The plugin does not support interruptions: never opened again.
    pub fn unsupported(&self) {
        self.state().stream = StreamState::Unsupported;
    }

    /// When the stream is closed and its end not yet scheduled: marks it scheduled and
    /// answers the wait before re-opening it (none for a stream never opened, or one that
    /// brought a batch since its last failure).
    pub fn schedule_reopen(&self) -> Option<Duration> {
        let mut state = self.state();
        if state.stream != StreamState::Closed || state.end_seen {
            return None;
        }
        state.end_seen = true;
        Some(if state.failures == 0 {
            Duration::ZERO
        } else {
            backoff(state.failures)
        })
    }

    /// Completes when something arrived (a batch, or the stream's end) since the last call:
    /// one waiter, the manager; an arrival while nobody waits is kept for the next call.
    pub async fn notified(&self) {
        self.arrivals.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::InterruptionKind;

    fn notice(id: &str) -> Interruption {
        Interruption {
            event_id: id.to_owned(),
            kind: InterruptionKind::SpotInterruption,
            provider_id: format!("fake:///{id}"),
            time: None,
            deadline: None,
            message: String::new(),
        }
    }

    /// At least once: a notice sent again while waiting is one notice; sent again after it
    /// was acted on, it is only acknowledged again.
    #[test]
    fn notices_are_deduplicated_by_event_id() {
        let inbox = InterruptionInbox::new();
        inbox.push(vec![notice("a"), notice("b"), notice("a")]);
        let taken = inbox.take();
        assert_eq!(taken.len(), 2);
        inbox.acted(["a".to_owned(), "b".to_owned()]);
        assert_eq!(inbox.take_acks(), ["a", "b"]);
        inbox.push(vec![notice("a")]);
        assert!(inbox.take().is_empty());
        assert_eq!(inbox.take_acks(), ["a"]);
        assert!(!inbox.has_work() || inbox.stream() == StreamState::Closed);
    }

    /// A notice taken and not acted on waits again, first; a failed acknowledgement waits for
    /// the controller's retry rather than making it due every round.
    #[test]
    fn what_failed_waits_again() {
        let inbox = InterruptionInbox::new();
        inbox.schedule_reopen();
        inbox.push(vec![notice("a"), notice("b")]);
        let taken = inbox.take();
        inbox.push(vec![notice("c")]);
        inbox.put_back(taken);
        let ids: Vec<String> = inbox.take().into_iter().map(|n| n.event_id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(inbox.received(), 3);
        inbox.acted(["a".to_owned()]);
        let acks = inbox.take_acks();
        inbox.ack_failed(acks);
        assert!(!inbox.has_work(), "deferred to the controller's retry");
        assert_eq!(inbox.take_acks(), ["a"]);
    }

    /// A full inbox drops what does not fit, unacknowledged (it comes again).
    #[test]
    fn a_full_inbox_drops_without_acknowledging() {
        let inbox = InterruptionInbox::new();
        inbox.push(
            (0..MAX_PENDING + 3)
                .map(|i| notice(&i.to_string()))
                .collect(),
        );
        assert_eq!(inbox.take().len(), MAX_PENDING);
        assert_eq!(inbox.dropped(), 3);
        assert!(inbox.take_acks().is_empty());
    }

    /// 1 s doubling to a minute; a batch resets it.
    #[test]
    fn the_stream_reopens_with_backoff() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), BACKOFF_MAX);
        let inbox = InterruptionInbox::new();
        assert!(inbox.has_work(), "a stream never opened is to open");
        assert_eq!(inbox.schedule_reopen(), Some(Duration::ZERO));
        assert_eq!(inbox.schedule_reopen(), None);
        assert!(!inbox.has_work());
        inbox.opened();
        inbox.closed();
        inbox.closed();
        assert!(inbox.has_work());
        assert_eq!(inbox.schedule_reopen(), Some(Duration::from_secs(2)));
        inbox.push(Vec::new());
        inbox.closed();
        assert_eq!(inbox.schedule_reopen(), Some(Duration::from_secs(1)));
        inbox.unsupported();
        inbox.closed();
        assert_eq!(inbox.stream(), StreamState::Unsupported);
    }
}
