//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's protocol (what
//! upstream Karpenter uses through controller-runtime), so replicas of core-svc and any tool
//! that reads Leases agree on who leads:
//!
//! - the Lease names its holder, how long a claim lasts (`leaseDurationSeconds`, 15 s) and
//!   when it was last renewed; every write is an update carrying the `resourceVersion` read, so
//!   of two candidates writing at once one gets 409 and stays a candidate;
//! - a candidate takes the Lease only when its record has not changed for a whole lease
//!   duration *as measured by the candidate's own clock since it observed the record*: the
//!   holder's timestamps are never compared with the candidate's clock, so clock skew between
//!   nodes cannot make two leaders;
//! - the leader renews every retry period (2 s); when it has not renewed for the renew deadline
//!   (10 s) it stops leading, before any candidate may take over (15 s after the last renewal
//!   it observed).
//!
//! [`decide`] is the protocol as a pure function; [`Elector`] does the I/O through kube.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// The Lease's name, upstream's.
pub const LEASE_NAME: &str = "karpenter-leader-election";

/// The timings, upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a claim lasts without renewal (15 s).
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops leading (10 s).
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew (2 s).
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate knows of the Lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The Lease's spec as last read; `None` when there is no Lease.
    pub spec: Option<LeaseSpec>,
    /// When (on the candidate's own monotonic clock) the record last changed.
    pub changed_at: Instant,
}

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write this spec (create the Lease when there is none, else update it at the version
    /// read).
    Write(LeaseSpec),
    /// Someone else holds a live claim.
    Follow {
        /// Who.
        holder: String,
    },
}

fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// The protocol: take, renew, or leave the Lease, given what was observed and when.
pub fn decide(
    observed: &Observed,
    identity: &str,
    now: Instant,
    wall: Timestamp,
    timings: Timings,
) -> Decision {
    let duration_seconds = i32::try_from(timings.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(spec) = &observed.spec else {
        return Decision::Write(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            acquire_time: Some(MicroTime(wall)),
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        });
    };
    let current = holder(spec);
    let ours = current == Some(identity);
    // The claim's own duration when it states one: a holder with a longer lease keeps it longer.
    let claimed = spec
        .lease_duration_seconds
        .and_then(|seconds| u64::try_from(seconds).ok())
        .map_or(timings.lease_duration, Duration::from_secs);
    let expired = now.saturating_duration_since(observed.changed_at) >= claimed;
    if let Some(current) = current
        && !ours
        && !expired
    {
        return Decision::Follow {
            holder: current.to_owned(),
        };
    }
    let transitions = spec.lease_transitions.unwrap_or(0);
    Decision::Write(LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration_seconds),
        acquire_time: if ours {
            spec.acquire_time.clone()
        } else {
            Some(MicroTime(wall))
        },
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(if ours || current.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..spec.clone()
    })
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server could not be reached or refused the call.
    #[error("lease {name}: {source}")]
    Api {
        /// The Lease.
        name: String,
        /// What kube answered.
        source: kube::Error,
    },
    /// The API server did not answer within the retry period.
    #[error("lease {name}: no answer within the retry period")]
    TimedOut {
        /// The Lease.
        name: String,
    },
}

/// Competes for the Lease and publishes whether this replica leads.
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    observed: Option<(Lease, Instant)>,
    last_renewed: Option<Instant>,
    leading: watch::Sender<bool>,
}

impl Elector {
    /// A candidate `identity` (the pod's name) for the Lease `name` in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: Timings,
    ) -> Self {
        let (leading, _) = watch::channel(false);
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            observed: None,
            last_renewed: None,
            leading,
        }
    }

    /// Whether this replica leads, now and as it changes.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs the election until `stop` resolves; then, when leading, gives the Lease up (so a
    /// standby takes over at once rather than after the lease duration).
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            self.round().await;
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.timings.retry_period) => {}
            }
        }
        if *self.leading.borrow() {
            self.leading.send_replace(false);
            if let Err(error) = self.release().await {
                tracing::warn!(%error, "could not release the leader lease; a standby takes over when it expires");
            }
        }
    }

    /// One attempt to acquire or renew; updates [`Elector::leading`].
    pub async fn round(&mut self) {
        let now = Instant::now();
        // A round that hangs on a slow API server must not keep a leader leading: past the
        // retry period it counts as a failed renewal (client-go bounds it the same way).
        let attempt =
            match tokio::time::timeout(self.timings.retry_period, self.try_acquire_or_renew(now))
                .await
            {
                Ok(attempt) => attempt,
                Err(_) => Err(LeaseError::TimedOut {
                    name: self.name.clone(),
                }),
            };
        let was_leading = *self.leading.borrow();
        let leading = match attempt {
            Ok(true) => {
                self.last_renewed = Some(now);
                true
            }
            Ok(false) => false,
            Err(error) => {
                tracing::warn!(%error, "leader election round failed");
                // A leader keeps leading through failed renewals until the renew deadline.
                was_leading
                    && self.last_renewed.is_some_and(|renewed| {
                        now.saturating_duration_since(renewed) < self.timings.renew_deadline
                    })
            }
        };
        if leading != was_leading {
            if leading {
                tracing::info!(identity = %self.identity, lease = %self.name, "became the leader");
            } else {
                tracing::warn!(identity = %self.identity, lease = %self.name, "stopped leading");
            }
            self.leading.send_replace(leading);
        }
    }

    async fn try_acquire_or_renew(&mut self, now: Instant) -> Result<bool, LeaseError> {
        let api_error = |source| LeaseError::Api {
            name: self.name.clone(),
            source,
        };
        let current = self.api.get_opt(&self.name).await.map_err(api_error)?;
        // The record "changed" when its resourceVersion moved since the last read.
        let changed_at = match (&self.observed, &current) {
            (Some((seen, at)), Some(lease))
                if seen.metadata.resource_version == lease.metadata.resource_version =>
            {
                *at
            }
            _ => now,
        };
        let observed = Observed {
            spec: current.as_ref().and_then(|lease| lease.spec.clone()),
            changed_at,
        };
        if let Some(lease) = &current {
            self.observed = Some((lease.clone(), changed_at));
        }
        let spec = match decide(
            &observed,
            &self.identity,
            now,
            Timestamp::now(),
            self.timings,
        ) {
            Decision::Follow { holder } => {
                tracing::debug!(%holder, "following the leader");
                return Ok(false);
            }
            Decision::Write(spec) => spec,
        };
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observed = Some((lease, now));
                Ok(true)
            }
            // Someone else wrote first: not ours this round.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(api_error(source)),
        }
    }

    async fn release(&mut self) -> Result<(), LeaseError> {
        let Some((mut lease, _)) = self.observed.take() else {
            return Ok(());
        };
        if let Some(spec) = &mut lease.spec {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(drop)
            .map_err(|source| LeaseError::Api {
                name: self.name.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn held_by(identity: &str, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            renew_time: Some(MicroTime(wall())),
            acquire_time: Some(MicroTime(wall())),
            ..LeaseSpec::default()
        }
    }

    fn written(decision: Decision) -> LeaseSpec {
        match decision {
            Decision::Write(spec) => spec,
            Decision::Follow { holder } => panic!("follows {holder}"),
        }
    }

    #[test]
    fn given_no_lease_then_the_candidate_creates_it_holding_it() {
        let now = Instant::now();
        let spec = written(decide(
            &Observed {
                spec: None,
                changed_at: now,
            },
            "core-a",
            now,
            wall(),
            Timings::default(),
        ));
        assert_eq!(spec.holder_identity.as_deref(), Some("core-a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn given_a_live_claim_of_another_then_the_candidate_follows_even_if_clocks_disagree() {
        let start = Instant::now();
        let observed = Observed {
            spec: Some(held_by("core-b", 3)),
            changed_at: start,
        };
        // 14 s after the candidate saw the record change: still live, whatever renewTime says.
        let decision = decide(
            &observed,
            "core-a",
            start + Duration::from_secs(14),
            wall() + jiff::SignedDuration::from_hours(1),
            Timings::default(),
        );
        assert_eq!(
            decision,
            Decision::Follow {
                holder: "core-b".to_owned()
            }
        );
    }

    #[test]
    fn given_a_claim_unchanged_for_a_lease_duration_then_the_candidate_takes_it_over() {
        let start = Instant::now();
        let observed = Observed {
            spec: Some(held_by("core-b", 3)),
            changed_at: start,
        };
        let spec = written(decide(
            &observed,
            "core-a",
            start + Duration::from_secs(15),
            wall(),
            Timings::default(),
        ));
        assert_eq!(spec.holder_identity.as_deref(), Some("core-a"));
        assert_eq!(
            spec.lease_transitions,
            Some(4),
            "a takeover is a transition"
        );
    }

    #[test]
    fn given_our_own_claim_then_we_renew_it_keeping_acquire_time_and_transitions() {
        let start = Instant::now();
        let mut ours = held_by("core-a", 2);
        ours.acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
        let spec = written(decide(
            &Observed {
                spec: Some(ours),
                changed_at: start,
            },
            "core-a",
            start + Duration::from_secs(2),
            wall(),
            Timings::default(),
        ));
        assert_eq!(spec.lease_transitions, Some(2));
        assert_eq!(spec.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
        assert_eq!(spec.renew_time, Some(MicroTime(wall())));
    }

    #[test]
    fn given_a_released_lease_then_the_candidate_takes_it_at_once() {
        let start = Instant::now();
        let mut released = held_by("core-b", 1);
        released.holder_identity = None;
        let spec = written(decide(
            &Observed {
                spec: Some(released),
                changed_at: start,
            },
            "core-a",
            start,
            wall(),
            Timings::default(),
        ));
        assert_eq!(spec.holder_identity.as_deref(), Some("core-a"));
    }

    #[test]
    fn given_the_default_timings_then_a_leader_stops_before_a_standby_may_start() {
        let timings = Timings::default();
        assert!(timings.renew_deadline < timings.lease_duration);
        assert!(timings.retry_period < timings.renew_deadline);
    }
}
