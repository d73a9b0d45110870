//! [`CallMetrics`]: the plugin calls counted per RPC and status code, and timed per RPC, for the
//! metrics exporter.
//! Apart from the client: it is read by `metrics.rs` and knows nothing of the calls.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tonic::Code;

use crate::cloudprovider::Rpc;

/// Counters of plugin calls per RPC: attempts by status code (OK included) and retries, for a
/// metrics exporter to read. Lock-free; shared by clones of one provider.
#[derive(Debug)]
pub struct CallMetrics {
    attempts: [[AtomicU64; CODES]; Rpc::ALL.len()],
    retries: [AtomicU64; Rpc::ALL.len()],
    durations: Family<DurationLabels, Histogram>,
}

/// A duration histogram's labels: the method.
pub type DurationLabels = Vec<(&'static str, &'static str)>;

/// Upstream's buckets for `karpenter_cloudprovider_duration_seconds` (kubernetes-sigs/karpenter,
/// `pkg/metrics/constants.go`, `DurationBuckets`): fine below a second, where plugin calls
/// should be, coarse up to the minute a Create may take.
const DURATION_BUCKETS: [f64; 36] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75,
    2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// gRPC status codes are 0 (OK) to 16 (UNAUTHENTICATED).
pub(super) const CODES: usize = 17;

/// One non-zero counter of [`CallMetrics::attempts_by_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCount {
    /// The RPC.
    pub rpc: Rpc,
    /// The status the attempt ended with.
    pub code: Code,
    /// How many attempts ended so.
    pub count: u64,
}

impl CallMetrics {
    /// All counters at zero.
    pub fn new() -> Self {
        CallMetrics {
            attempts: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            retries: std::array::from_fn(|_| AtomicU64::new(0)),
            durations: Family::new_with_constructor(duration_histogram),
        }
    }

    /// How long calls took, retries included, by method (`method` = the RPC's name).
    pub fn durations(&self) -> &Family<DurationLabels, Histogram> {
        &self.durations
    }

    /// Records that a call of `rpc` took `elapsed`, all its attempts included.
    pub fn observe_call(&self, rpc: Rpc, elapsed: std::time::Duration) {
        self.durations
            .get_or_create(&vec![("method", rpc.as_str())])
            .observe(elapsed.as_secs_f64());
    }

    /// How many attempts of `rpc` ended with `code`.
    pub fn attempts(&self, rpc: Rpc, code: Code) -> u64 {
        self.attempts[rpc.index()][code_index(code)].load(Ordering::Relaxed)
    }

    /// How many times a failed attempt of `rpc` was followed by another.
    pub fn retries(&self, rpc: Rpc) -> u64 {
        self.retries[rpc.index()].load(Ordering::Relaxed)
    }

    /// Every non-zero attempt counter, by RPC then code.
    pub fn attempts_by_code(&self) -> Vec<AttemptCount> {
        let mut counts = Vec::new();
        for rpc in Rpc::ALL {
            for (index, counter) in self.attempts[rpc.index()].iter().enumerate() {
                let count = counter.load(Ordering::Relaxed);
                if count > 0 {
                    let code = i32::try_from(index).map_or(Code::Unknown, Code::from);
                    counts.push(AttemptCount { rpc, code, count });
                }
            }
        }
        counts
    }

    /// Counts one attempt of `rpc` that ended with `code`.
    pub fn record_attempt(&self, rpc: Rpc, code: Code) {
        self.attempts[rpc.index()][code_index(code)].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_retry(&self, rpc: Rpc) {
        self.retries[rpc.index()].fetch_add(1, Ordering::Relaxed);
    }
}

impl Default for CallMetrics {
    fn default() -> Self {
        CallMetrics::new()
    }
}

pub(super) fn code_index(code: Code) -> usize {
    usize::try_from(i32::from(code))
        .unwrap_or(CODES - 1)
        .min(CODES - 1)
}

// ---- Core → proto ----------------------------------------------------------------------------
