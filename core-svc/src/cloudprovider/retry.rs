//! When to call the plugin again after a failed attempt: which codes, how long to wait, when to
//! give up. The policy is pure; the waiting goes through a [`Timer`] so tests never sleep.
//!
//! Retried: UNAVAILABLE and DEADLINE_EXCEEDED on every RPC (the API makes every RPC
//! idempotent), and ABORTED on Create ("another Create for the same name is in progress").
//! Nothing else: the other codes either mean something (capacity, not found, not ready) or are
//! retried by the controllers on their own schedule.
//!
//! The whole call, retries included, fits in the RPC's deadline: each attempt gets what is left
//! of it, and no wait is started that would end past it.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use core_domain::hash::Fnv1a;
use tonic::Code;

use super::Rpc;

/// Exponential backoff with a cap on attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after the first failed attempt.
    pub initial_backoff: Duration,
    /// The longest wait; the doubling stops here.
    pub max_backoff: Duration,
    /// The most attempts of one call, the first included (1 disables retries).
    pub max_attempts: u32,
    /// Whether waits are spread over `[backoff/2, backoff]` by a hash of the call's key (the
    /// NodeClaim name, the provider ID), so that many NodeClaims failing together do not all
    /// come back at the same instant, while one key always waits the same.
    pub jitter: bool,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then try again.
    RetryAfter(Duration),
    /// Return the error.
    GiveUp(GiveUpReason),
}

/// Why a failed call is not tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The code is not one that is retried for this RPC.
    NotRetryable,
    /// `max_attempts` attempts were made.
    AttemptsExhausted,
    /// The wait would end past the call's deadline.
    DeadlineReached,
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GiveUpReason::NotRetryable => "not retryable",
            GiveUpReason::AttemptsExhausted => "attempts exhausted",
            GiveUpReason::DeadlineReached => "deadline reached",
        })
    }
}

impl RetryPolicy {
    /// 100 ms doubling to 5 s, at most 5 attempts, jittered.
    pub const DEFAULT: RetryPolicy = RetryPolicy {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(5),
        max_attempts: 5,
        jitter: true,
    };

    /// One attempt, no retries.
    pub const NEVER: RetryPolicy = RetryPolicy {
        initial_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
        max_attempts: 1,
        jitter: false,
    };

    /// Whether a failure with `code` is retried for `rpc`.
    pub fn is_retryable(rpc: Rpc, code: Code) -> bool {
        match code {
            Code::Unavailable | Code::DeadlineExceeded => true,
            Code::Aborted => rpc == Rpc::Create,
            _ => false,
        }
    }

    /// The wait after `failed_attempts` attempts failed (1 after the first): the initial backoff
    /// doubled per further failure up to the cap, then jittered by `key` if enabled.
    pub fn backoff(&self, failed_attempts: u32, key: &str) -> Duration {
        let doublings = failed_attempts.saturating_sub(1).min(31);
        let full = self
            .initial_backoff
            .checked_mul(1 << doublings)
            .map_or(self.max_backoff, |b| b.min(self.max_backoff));
        if !self.jitter {
            return full;
        }
        // Equal jitter: half fixed, half spread, so a wait never shrinks below half.
        // FNV-1a over the key and the attempt: stable across builds and platforms, unlike std's
        // hasher, so a key's waits are the same in every run.
        let spread = Fnv1a::new()
            .write(key.bytes().chain(failed_attempts.to_le_bytes()))
            .finish()
            % 1024;
        let half = full / 2;
        half + (full - half) * u32::try_from(spread).unwrap_or(0) / 1023
    }

    /// What to do after attempt number `attempt` (1-based) of `rpc` failed with `code`, when
    /// `elapsed` of the call's `deadline` has passed.
    pub fn decide(
        &self,
        rpc: Rpc,
        code: Code,
        attempt: u32,
        elapsed: Duration,
        deadline: Duration,
        key: &str,
    ) -> Decision {
        if !Self::is_retryable(rpc, code) {
            return Decision::GiveUp(GiveUpReason::NotRetryable);
        }
        if attempt >= self.max_attempts {
            return Decision::GiveUp(GiveUpReason::AttemptsExhausted);
        }
        let wait = self.backoff(attempt, key);
        if elapsed.saturating_add(wait) >= deadline {
            return Decision::GiveUp(GiveUpReason::DeadlineReached);
        }
        Decision::RetryAfter(wait)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::DEFAULT
    }
}

/// Where the adapter measures a call's time and waits between attempts.
/// Monotonic, unlike the controllers' wall clock: only durations matter here.
pub trait Timer: Send + Sync + fmt::Debug {
    /// Now, on a monotonic clock.
    fn now(&self) -> Instant;

    /// Completes after `duration`.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send;
}

/// tokio's timer: real time, or paused time in tests that pause it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

impl Timer for TokioTimer {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }
}

/// A timer for tests: sleeping returns at once and moves its time forward by the duration; every
/// sleep is recorded.
#[derive(Debug)]
pub struct FakeTimer {
    origin: Instant,
    state: Mutex<FakeTimerState>,
}

#[derive(Debug, Default)]
struct FakeTimerState {
    elapsed: Duration,
    sleeps: Vec<Duration>,
}

impl FakeTimer {
    /// A timer at an arbitrary origin that has never slept.
    pub fn new() -> Self {
        FakeTimer {
            origin: Instant::now(),
            state: Mutex::new(FakeTimerState::default()),
        }
    }

    /// Every sleep so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.lock().sleeps.clone()
    }

    /// Moves the time forward without sleeping (time spent in a call, say).
    pub fn advance(&self, duration: Duration) {
        self.lock().elapsed += duration;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeTimerState> {
        // The state stays consistent whatever panicked while holding it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for FakeTimer {
    fn default() -> Self {
        FakeTimer::new()
    }
}

impl Timer for FakeTimer {
    fn now(&self) -> Instant {
        self.origin + self.lock().elapsed
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let mut state = self.lock();
        state.elapsed += duration;
        state.sleeps.push(duration);
        std::future::ready(())
    }
}

impl<C: Timer> Timer for std::sync::Arc<C> {
    fn now(&self) -> Instant {
        C::now(self)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        C::sleep(self, duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_JITTER: RetryPolicy = RetryPolicy {
        jitter: false,
        ..RetryPolicy::DEFAULT
    };

    #[test]
    fn backoff_doubles_from_100ms_up_to_5s() {
        let waits: Vec<u128> = (1..=8)
            .map(|n| NO_JITTER.backoff(n, "").as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(
            NO_JITTER.backoff(u32::MAX, ""),
            Duration::from_secs(5),
            "no overflow"
        );
    }

    #[test]
    fn jitter_stays_within_half_to_full_and_is_the_same_for_one_key() {
        let policy = RetryPolicy::DEFAULT;
        for attempt in 1..=6 {
            let full = NO_JITTER.backoff(attempt, "");
            let mut seen = std::collections::BTreeSet::new();
            for key in ["nodeclaim-a", "nodeclaim-b", "nodeclaim-c", "nodeclaim-d"] {
                let wait = policy.backoff(attempt, key);
                assert!(wait >= full / 2 && wait <= full, "{wait:?} vs {full:?}");
                assert_eq!(wait, policy.backoff(attempt, key), "deterministic");
                seen.insert(wait);
            }
            assert!(seen.len() > 1, "keys spread the waits: {seen:?}");
        }
    }

    #[test]
    fn only_unavailable_deadline_and_aborted_on_create_are_retried() {
        for rpc in Rpc::ALL {
            assert!(RetryPolicy::is_retryable(rpc, Code::Unavailable));
            assert!(RetryPolicy::is_retryable(rpc, Code::DeadlineExceeded));
            assert_eq!(
                RetryPolicy::is_retryable(rpc, Code::Aborted),
                rpc == Rpc::Create
            );
            for code in [
                Code::Ok,
                Code::InvalidArgument,
                Code::NotFound,
                Code::ResourceExhausted,
                Code::FailedPrecondition,
                Code::Unimplemented,
                Code::PermissionDenied,
                Code::Internal,
                Code::Unknown,
            ] {
                assert!(!RetryPolicy::is_retryable(rpc, code), "{rpc} {code:?}");
            }
        }
    }

    #[test]
    fn decisions_stop_at_max_attempts_and_before_the_deadline() {
        let deadline = Duration::from_secs(15);
        let decide = |attempt, elapsed_ms, code| {
            NO_JITTER.decide(
                Rpc::Get,
                code,
                attempt,
                Duration::from_millis(elapsed_ms),
                deadline,
                "",
            )
        };
        assert_eq!(
            decide(1, 0, Code::Unavailable),
            Decision::RetryAfter(Duration::from_millis(100))
        );
        assert_eq!(
            decide(4, 0, Code::Unavailable),
            Decision::RetryAfter(Duration::from_millis(800))
        );
        assert_eq!(
            decide(5, 0, Code::Unavailable),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
        assert_eq!(
            decide(2, 14_800, Code::Unavailable),
            Decision::GiveUp(GiveUpReason::DeadlineReached),
            "a 200 ms wait would end past the 15 s deadline"
        );
        assert_eq!(
            decide(1, 0, Code::Internal),
            Decision::GiveUp(GiveUpReason::NotRetryable)
        );
        assert_eq!(
            RetryPolicy::NEVER.decide(Rpc::Get, Code::Unavailable, 1, Duration::ZERO, deadline, ""),
            Decision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
    }

    #[tokio::test]
    async fn the_fake_timer_moves_by_what_it_sleeps() {
        let timer = FakeTimer::new();
        let start = timer.now();
        timer.sleep(Duration::from_millis(100)).await;
        timer.advance(Duration::from_millis(5));
        timer.sleep(Duration::from_millis(200)).await;
        assert_eq!(timer.now() - start, Duration::from_millis(305));
        assert_eq!(
            timer.sleeps(),
            [Duration::from_millis(100), Duration::from_millis(200)]
        );
    }
}
