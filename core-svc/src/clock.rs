//! The clock port: where controllers and the in-memory cluster read the time from.
//!
//! Controllers never call `Timestamp::now()` themselves, so the same code runs on real time in
//! production and on a [`FakeClock`] that tests and the simulator move by hand.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;

/// Where the current wall-clock time comes from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to. Clones share the same time, so a test can keep one and
/// hand another to the code under test.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<Timestamp>>,
}

impl FakeClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock to `instant`, backwards too (wall clocks can step back).
    pub fn set(&self, instant: Timestamp) {
        *self.lock() = instant;
    }

    /// Moves the clock forward by `duration`, stopping at [`Timestamp::MAX`].
    pub fn advance(&self, duration: Duration) {
        let mut now = self.lock();
        // Only calendar units can make saturating_add fail, and a std Duration has none.
        *now = now.saturating_add(duration).unwrap_or(Timestamp::MAX);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Timestamp> {
        // A Timestamp is always valid, whatever a panicking holder was doing.
        self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Timestamp {
        "2025-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn given_a_fake_clock_when_advanced_then_every_clone_sees_the_new_time() {
        let clock = FakeClock::new(t0());
        let shared = clock.clone();
        clock.advance(Duration::from_secs(90));
        assert_eq!(
            shared.now(),
            "2025-01-01T00:01:30Z".parse::<Timestamp>().unwrap()
        );
    }

    #[test]
    fn given_a_fake_clock_when_set_backwards_then_it_reads_the_earlier_time() {
        let clock = FakeClock::new(t0());
        let earlier: Timestamp = "2024-12-31T23:00:00Z".parse().unwrap();
        clock.set(earlier);
        assert_eq!(clock.now(), earlier);
    }

    #[test]
    fn given_a_fake_clock_when_advanced_past_the_end_of_time_then_it_stops_at_max() {
        let clock = FakeClock::new(Timestamp::MAX);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), Timestamp::MAX);
    }

    #[test]
    fn given_the_system_clock_then_it_reads_a_time_after_2024() {
        assert!(SystemClock.now() > "2024-01-01T00:00:00Z".parse::<Timestamp>().unwrap());
    }
}
