//! The batching window (upstream kubernetes-sigs/karpenter `pkg/controllers/provisioning/batcher.go`), as a
//! pure state machine over times: pending pods are collected until none has arrived for
//! `idle`, or until `max` has passed since the first, and only then scheduled together, so a
//! deployment scaled to 100 replicas gets one well-packed decision instead of 100 small ones.
//!
//! Upstream's batcher is fed by watch events; ours is level-triggered: each pass reports the
//! pending pods it sees, and a pod counts as arriving at the first pass that sees it in the
//! window. Pods are de-duplicated by UID within a window, as upstream's triggers are.
//!
//! [`Cooldowns`] keeps pods a decision could not place from opening a new window at once: the
//! kube-scheduler leaves them `Unschedulable`, and without a pause every pass would schedule
//! them again.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;

/// Where the window stands after a pass reported the pending pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchState {
    /// No pending pod: no window is open.
    Empty,
    /// A window is open; it closes after this long unless more pods arrive.
    Open {
        /// Time left until it closes.
        closes_in: Duration,
    },
    /// The window closed: schedule now, then [`Batcher::reset`].
    Closed,
}

/// The batching window.
#[derive(Debug, Clone)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    window: Option<Window>,
}

#[derive(Debug, Clone)]
struct Window {
    opened: Timestamp,
    last_arrival: Timestamp,
    seen: HashSet<String>,
}

impl Batcher {
    /// A batcher that waits `idle` after the last arrival, at most `max` after the first.
    pub fn new(idle: Duration, max: Duration) -> Self {
        Self {
            idle,
            max,
            window: None,
        }
    }

    /// Reports the UIDs of the pods pending at `now` and answers where the window stands.
    /// A UID the window has not seen yet is an arrival: it opens the window, or keeps it open
    /// for another `idle` (never past `max` after it opened). When nothing is pending the
    /// window is dropped: there is nothing left to schedule.
    pub fn observe<'a>(
        &mut self,
        now: Timestamp,
        pending: impl IntoIterator<Item = &'a str>,
    ) -> BatchState {
        let mut pending = pending.into_iter().peekable();
        if pending.peek().is_none() {
            self.window = None;
            return BatchState::Empty;
        }
        let window = self.window.get_or_insert_with(|| Window {
            opened: now,
            last_arrival: now,
            seen: HashSet::new(),
        });
        for uid in pending {
            if !window.seen.contains(uid) {
                window.seen.insert(uid.to_owned());
                // A clock stepping back must not move the window backwards.
                window.last_arrival = window.last_arrival.max(now);
            }
        }
        let closes_at = later(window.last_arrival, self.idle).min(later(window.opened, self.max));
        match remaining(now, closes_at) {
            Some(closes_in) => BatchState::Open { closes_in },
            None => BatchState::Closed,
        }
    }

    /// Forgets the window once its pods were scheduled; the next arrival opens a new one.
    pub fn reset(&mut self) {
        self.window = None;
    }

    /// Whether a window is open.
    pub fn is_open(&self) -> bool {
        self.window.is_some()
    }
}

/// Pods held back from opening a window until a time, by UID.
#[derive(Debug, Clone, Default)]
pub struct Cooldowns {
    until: HashMap<String, Timestamp>,
}

impl Cooldowns {
    /// No pod held back.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds the pod `uid` back until `until`.
    pub fn hold(&mut self, uid: &str, until: Timestamp) {
        self.until.insert(uid.to_owned(), until);
    }

    /// Whether the pod `uid` is held back at `now`.
    pub fn is_held(&self, uid: &str, now: Timestamp) -> bool {
        self.until.get(uid).is_some_and(|until| now < *until)
    }

    /// Forgets holds that ended by `now` and those of pods no longer pending.
    pub fn prune(&mut self, now: Timestamp, pending: &HashSet<&str>) {
        self.until
            .retain(|uid, until| now < *until && pending.contains(uid.as_str()));
    }

    /// How long until the first hold ends, if any.
    pub fn next_release(&self, now: Timestamp) -> Option<Duration> {
        self.until
            .values()
            .filter_map(|until| remaining(now, *until))
            .min()
    }
}

/// `start + duration`, saturating at the end of time.
pub(crate) fn later(start: Timestamp, duration: Duration) -> Timestamp {
    start.saturating_add(duration).unwrap_or(Timestamp::MAX)
}

/// The time from `now` to `deadline`, or `None` when it has passed.
pub(crate) fn remaining(now: Timestamp, deadline: Timestamp) -> Option<Duration> {
    if now >= deadline {
        return None;
    }
    let left = deadline.duration_since(now);
    Duration::try_from(left).ok().filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: f64) -> Timestamp {
        let start: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        later(start, Duration::from_secs_f64(seconds))
    }

    fn batcher() -> Batcher {
        Batcher::new(Duration::from_secs(1), Duration::from_secs(10))
    }

    fn open(seconds: f64) -> BatchState {
        BatchState::Open {
            closes_in: Duration::from_secs_f64(seconds),
        }
    }

    #[test]
    fn given_no_pending_pod_then_no_window_opens() {
        let mut batcher = batcher();
        assert_eq!(batcher.observe(t(0.0), []), BatchState::Empty);
        assert!(!batcher.is_open());
    }

    #[test]
    fn given_a_first_pod_then_the_window_closes_one_idle_period_later() {
        let mut batcher = batcher();
        assert_eq!(batcher.observe(t(0.0), ["a"]), open(1.0));
        assert_eq!(batcher.observe(t(0.4), ["a"]), open(0.6));
        assert_eq!(batcher.observe(t(1.0), ["a"]), BatchState::Closed);
    }

    #[test]
    fn given_pods_arriving_within_the_idle_period_then_each_extends_the_window() {
        let mut batcher = batcher();
        batcher.observe(t(0.0), ["a"]);
        assert_eq!(batcher.observe(t(0.8), ["a", "b"]), open(1.0));
        assert_eq!(batcher.observe(t(1.5), ["a", "b", "c"]), open(1.0));
        assert_eq!(batcher.observe(t(2.0), ["a", "b", "c"]), open(0.5));
        assert_eq!(batcher.observe(t(2.5), ["a", "b", "c"]), BatchState::Closed);
    }

    #[test]
    fn given_a_pod_seen_again_then_it_does_not_extend_the_window() {
        let mut batcher = batcher();
        batcher.observe(t(0.0), ["a"]);
        assert_eq!(batcher.observe(t(0.9), ["a"]), open(0.1));
    }

    #[test]
    fn given_pods_arriving_without_pause_then_the_window_closes_at_max_after_its_start() {
        let mut batcher = batcher();
        let mut pending: Vec<String> = Vec::new();
        let mut now = 0.0;
        let mut state = BatchState::Empty;
        while now < 20.0 {
            pending.push(format!("pod-{now}"));
            state = batcher.observe(t(now), pending.iter().map(String::as_str));
            if state == BatchState::Closed {
                break;
            }
            now += 0.5;
        }
        assert_eq!(state, BatchState::Closed);
        assert_eq!(now, 10.0, "closed at batch_max, not later");
        let mut batcher = self::batcher();
        batcher.observe(t(0.0), ["a"]);
        assert_eq!(
            batcher.observe(t(9.5), ["a", "b"]),
            open(0.5),
            "an arrival near the end cannot push the close past max"
        );
    }

    #[test]
    fn given_a_closed_window_when_reset_then_the_next_arrival_opens_a_new_one() {
        let mut batcher = batcher();
        batcher.observe(t(0.0), ["a"]);
        assert_eq!(batcher.observe(t(1.0), ["a"]), BatchState::Closed);
        batcher.reset();
        assert_eq!(batcher.observe(t(30.0), ["b"]), open(1.0));
    }

    #[test]
    fn given_every_pod_gone_then_the_window_is_dropped() {
        let mut batcher = batcher();
        batcher.observe(t(0.0), ["a"]);
        assert_eq!(batcher.observe(t(0.5), []), BatchState::Empty);
        assert_eq!(batcher.observe(t(0.7), ["a"]), open(1.0), "a new window");
    }

    #[test]
    fn given_the_clock_stepping_back_then_the_window_does_not_close_earlier() {
        let mut batcher = batcher();
        batcher.observe(t(5.0), ["a"]);
        assert_eq!(batcher.observe(t(4.0), ["a", "b"]), open(2.0));
    }

    #[test]
    fn given_cooldowns_then_pods_are_held_until_their_time_and_pruned_after() {
        let mut cooldowns = Cooldowns::new();
        cooldowns.hold("a", t(10.0));
        cooldowns.hold("b", t(5.0));
        assert!(cooldowns.is_held("a", t(9.9)));
        assert!(!cooldowns.is_held("a", t(10.0)));
        assert!(!cooldowns.is_held("c", t(0.0)));
        assert_eq!(cooldowns.next_release(t(1.0)), Some(Duration::from_secs(4)));
        cooldowns.prune(t(6.0), &HashSet::from(["a", "b"]));
        assert_eq!(cooldowns.next_release(t(6.0)), Some(Duration::from_secs(4)));
        cooldowns.prune(t(6.0), &HashSet::new());
        assert_eq!(
            cooldowns.next_release(t(6.0)),
            None,
            "a pod gone is forgotten"
        );
    }
}
