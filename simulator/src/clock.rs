//! Virtual time: one offset since the scenario's start, read by core (a [`FakeClock`] at
//! `start + offset`), by aws-plugin (its [`Clock`](PluginClock): a fixed base `Instant` plus the
//! offset for cache ages, `start + offset` as calendar time) and by the in-memory EC2
//! (`MemoryEc2::set_now`, which the engine calls with [`VirtualClock::since_epoch`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use aws_plugin::instance_type_provider::Clock as PluginClock;
use core_svc::clock::{Clock as CoreClock, FakeClock};
use jiff::Timestamp;

/// The simulation's clock. Clones share the same time.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    start: Timestamp,
    core: FakeClock,
    base: Instant,
    elapsed: Arc<Mutex<Duration>>,
}

impl VirtualClock {
    /// A clock at `start`, t=0.
    pub fn new(start: Timestamp) -> Self {
        Self {
            start,
            core: FakeClock::new(start),
            base: Instant::now(),
            elapsed: Arc::new(Mutex::new(Duration::ZERO)),
        }
    }

    /// Moves every view of the clock to `elapsed` after the start.
    pub fn set_elapsed(&self, elapsed: Duration) {
        *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner) = elapsed;
        self.core
            .set(self.start.saturating_add(elapsed).unwrap_or(Timestamp::MAX));
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        *self.elapsed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The scenario's t=0.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        self.core.now()
    }

    /// The clock core's controllers and the in-memory cluster read.
    pub fn core(&self) -> FakeClock {
        self.core.clone()
    }

    /// The current time as time since the Unix epoch (the in-memory EC2's clock); the start
    /// is never before 1970 (the scenario refuses it).
    pub fn since_epoch(&self) -> Duration {
        let now = self.now();
        let seconds = u64::try_from(now.as_second()).unwrap_or(0);
        let nanos = u32::try_from(now.subsec_nanosecond()).unwrap_or(0);
        Duration::new(seconds, nanos)
    }

    /// Seconds since the start of `instant` (negative before it).
    pub fn seconds_since_start(&self, instant: Timestamp) -> f64 {
        let span = instant.duration_since(self.start);
        span.as_secs_f64()
    }
}

impl PluginClock for VirtualClock {
    fn now(&self) -> Instant {
        self.base + self.elapsed()
    }

    fn utc_now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + self.since_epoch()
    }
}

impl CoreClock for VirtualClock {
    fn now(&self) -> Timestamp {
        self.core.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_moves_together() {
        let start: Timestamp = "2026-06-15T12:00:00Z".parse().unwrap();
        let clock = VirtualClock::new(start);
        let plugin_t0 = PluginClock::now(&clock);
        clock.set_elapsed(Duration::from_secs(90));
        assert_eq!(
            CoreClock::now(&clock),
            "2026-06-15T12:01:30Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(clock.core().now(), CoreClock::now(&clock));
        assert_eq!(
            PluginClock::now(&clock) - plugin_t0,
            Duration::from_secs(90)
        );
        assert_eq!(
            clock.utc_now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_781_524_890)
        );
        assert_eq!(clock.seconds_since_start(CoreClock::now(&clock)), 90.0);
    }
}
