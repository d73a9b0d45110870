//! [`CallMetrics`]: the plugin calls counted per RPC and status code, their failures per RPC and
//! [`ErrorKind`] (a status, or an answer core refused), and timed per RPC, for the metrics
//! exporter.
//! Apart from the client: it is read by `metrics.rs` and knows nothing of the calls.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tonic::Code;

use crate::cloudprovider::Rpc;

/// Counters of plugin calls per RPC: attempts by status code (OK included), failures by
/// [`ErrorKind`] and retries, for a metrics exporter to read. Lock-free; shared by clones of one
/// provider.
#[derive(Debug)]
pub struct CallMetrics {
    attempts: [[AtomicU64; CODES]; Rpc::ALL.len()],
    errors: [[AtomicU64; ERROR_KINDS]; Rpc::ALL.len()],
    retries: [AtomicU64; Rpc::ALL.len()],
    durations: Family<DurationLabels, Histogram>,
}

/// Why a plugin call failed, as `karpenter_cloudprovider_errors_total` labels it (`error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An attempt ended with this status (never OK), the plugin's or the client's own
    /// (`DeadlineExceeded` when core's deadline passed, `Unavailable` for a broken connection).
    Status(Code),
    /// An answer the message size limit refused before it could be read: larger than
    /// `MAX_MESSAGE_BYTES`.
    MessageTooLarge,
    /// An answer the API does not allow, refused field by field (a NaN price, an instance type
    /// twice, an empty catalogue, a Create answer for another NodeClaim, ...).
    InvalidAnswer,
    /// An answer that contradicts another answer of the plugin or what core knows, refused by
    /// the controller that cross-checked it (List omitting an instance Get finds, Create
    /// answering an instance another NodeClaim holds, IsDrifted about an instance the plugin
    /// does not have).
    InconsistentAnswer,
}

/// Status codes 0 to 16 (0, OK, never used), then the three kinds of refused answers.
const ERROR_KINDS: usize = CODES + 3;

impl ErrorKind {
    /// Every kind, in the order of the counters.
    fn all() -> impl Iterator<Item = ErrorKind> {
        (1..CODES)
            .map(|code| ErrorKind::Status(i32::try_from(code).map_or(Code::Unknown, Code::from)))
            .chain([
                ErrorKind::MessageTooLarge,
                ErrorKind::InvalidAnswer,
                ErrorKind::InconsistentAnswer,
            ])
    }

    fn index(self) -> usize {
        match self {
            ErrorKind::Status(code) => code_index(code),
            ErrorKind::MessageTooLarge => CODES,
            ErrorKind::InvalidAnswer => CODES + 1,
            ErrorKind::InconsistentAnswer => CODES + 2,
        }
    }

    /// The `error` label: the status code's name (`DeadlineExceeded`), or the kind's.
    pub fn label(self) -> String {
        match self {
            ErrorKind::Status(code) => format!("{code:?}"),
            ErrorKind::MessageTooLarge => "MessageTooLarge".to_owned(),
            ErrorKind::InvalidAnswer => "InvalidAnswer".to_owned(),
            ErrorKind::InconsistentAnswer => "InconsistentAnswer".to_owned(),
        }
    }
}

/// One non-zero counter of [`CallMetrics::errors_by_kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCount {
    /// The RPC.
    pub rpc: Rpc,
    /// What went wrong.
    pub error: ErrorKind,
    /// How many times.
    pub count: u64,
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
            errors: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
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

    /// How many calls or attempts of `rpc` failed for `error`.
    pub fn errors(&self, rpc: Rpc, error: ErrorKind) -> u64 {
        self.errors[rpc.index()][error.index()].load(Ordering::Relaxed)
    }

    /// Every non-zero error counter, by RPC then kind (status codes first).
    pub fn errors_by_kind(&self) -> Vec<ErrorCount> {
        let mut counts = Vec::new();
        for rpc in Rpc::ALL {
            for error in ErrorKind::all() {
                let count = self.errors(rpc, error);
                if count > 0 {
                    counts.push(ErrorCount { rpc, error, count });
                }
            }
        }
        counts
    }

    /// Counts one attempt of `rpc` that ended with `code`, and a failure of that status when it
    /// is not OK.
    pub fn record_attempt(&self, rpc: Rpc, code: Code) {
        let error = (code != Code::Ok).then_some(ErrorKind::Status(code));
        self.record_attempt_as(rpc, code, error);
    }

    /// Counts one attempt of `rpc` that ended with `code`, and `error` when it failed.
    pub(super) fn record_attempt_as(&self, rpc: Rpc, code: Code, error: Option<ErrorKind>) {
        self.attempts[rpc.index()][code_index(code)].fetch_add(1, Ordering::Relaxed);
        if let Some(error) = error {
            self.record_error(rpc, error);
        }
    }

    /// Counts one failure of `rpc` (an answer refused, most often: failed attempts are counted
    /// by [`Self::record_attempt`]).
    pub fn record_error(&self, rpc: Rpc, error: ErrorKind) {
        self.errors[rpc.index()][error.index()].fetch_add(1, Ordering::Relaxed);
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
