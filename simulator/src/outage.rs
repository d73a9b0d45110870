//! A plugin outage: the [`CloudProvider`] the controllers get wraps the gRPC one, and while an
//! outage lasts every call fails as [`CloudProviderError::Unavailable`] without reaching the
//! plugin, which is what core sees when the plugin's container is down.
//!
//! A slow plugin is the nastier half of the same fault: the call reaches the plugin, which
//! acts on it (a Create launches an instance), but the answer arrives after core's deadline,
//! so core sees the call fail as it would on `DEADLINE_EXCEEDED` and never learns what was
//! done. What core must then not do is leak what the plugin did.

use std::sync::{Arc, Mutex, PoisonError};

use core_domain::instance_type::InstanceType;
use core_svc::clock::{Clock, FakeClock};
use core_svc::cloudprovider::{
    CloudInstance, CloudProvider, CloudProviderError, Deletion, DriftReason, InterruptionStream,
    LaunchedNodeClaim, NodeClaimRequest, NodeClassKind, RepairPolicy, ResolvedNodeClass, Rpc,
};
use jiff::Timestamp;

/// When the current outage (and the current slow spell) ends, shared between the engine and
/// every provider it built.
#[derive(Debug, Clone, Default)]
pub struct OutageSwitch {
    until: Arc<Mutex<Option<Timestamp>>>,
    slow_until: Arc<Mutex<Option<Timestamp>>>,
}

fn extend(end: &Mutex<Option<Timestamp>>, until: Timestamp) {
    let mut current = end.lock().unwrap_or_else(PoisonError::into_inner);
    *current = Some(current.map_or(until, |known| known.max(until)));
}

fn active_at(end: &Mutex<Option<Timestamp>>, now: Timestamp) -> Option<Timestamp> {
    (*end.lock().unwrap_or_else(PoisonError::into_inner)).filter(|until| now < *until)
}

impl OutageSwitch {
    /// No outage.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plugin is unreachable until `until` (an earlier end is kept if later).
    pub fn start(&self, until: Timestamp) {
        extend(&self.until, until);
    }

    /// The plugin answers after core's deadline until `until` (an earlier end is kept if
    /// later).
    pub fn start_slow(&self, until: Timestamp) {
        extend(&self.slow_until, until);
    }

    /// When the first outage or slow spell under way at `now` ends; `None` when there is
    /// none.
    pub fn ends_after(&self, now: Timestamp) -> Option<Timestamp> {
        [
            active_at(&self.until, now),
            active_at(&self.slow_until, now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the plugin is unreachable at `now`.
    pub fn is_down(&self, now: Timestamp) -> bool {
        active_at(&self.until, now).is_some()
    }

    /// Whether the plugin's answers come after core's deadline at `now`.
    pub fn is_slow(&self, now: Timestamp) -> bool {
        active_at(&self.slow_until, now).is_some()
    }

    /// Whether the plugin is down or slow at `now`: core gets no answer either way.
    pub fn is_disturbed(&self, now: Timestamp) -> bool {
        self.is_down(now) || self.is_slow(now)
    }
}

/// A provider that fails every call during an outage, and otherwise asks `inner`.
#[derive(Debug)]
pub struct OutageProvider<P> {
    inner: P,
    outage: OutageSwitch,
    clock: FakeClock,
}

impl<P> OutageProvider<P> {
    /// `inner`, cut off whenever `outage` says so at `clock`'s time.
    pub fn new(inner: P, outage: OutageSwitch, clock: FakeClock) -> Self {
        Self {
            inner,
            outage,
            clock,
        }
    }

    /// The provider behind the switch, reachable during an outage: for what the simulator
    /// measures about the run, which is not part of the simulated world.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    fn check(&self) -> Result<(), CloudProviderError> {
        if self.outage.is_down(self.clock.now()) {
            Err(CloudProviderError::Unavailable(
                "simulated plugin outage: the plugin does not answer".to_owned(),
            ))
        } else {
            Ok(())
        }
    }

    /// The plugin's answer, or, while it is slow, the deadline core hit before it came.
    fn in_time<T>(&self, answer: Result<T, CloudProviderError>) -> Result<T, CloudProviderError> {
        if self.outage.is_slow(self.clock.now()) {
            Err(CloudProviderError::Unavailable(
                "simulated slow plugin: DEADLINE_EXCEEDED, the answer came after core's deadline"
                    .to_owned(),
            ))
        } else {
            answer
        }
    }
}

impl<P: CloudProvider> CloudProvider for OutageProvider<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn supported_node_classes(&self) -> &[NodeClassKind] {
        self.inner.supported_node_classes()
    }

    fn answer_refused(&self, rpc: Rpc, problem: &str) {
        self.inner.answer_refused(rpc, problem);
    }

    async fn resolve_node_class(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<ResolvedNodeClass, CloudProviderError> {
        self.check()?;
        let answer = self.inner.resolve_node_class(node_class).await;
        self.in_time(answer)
    }

    async fn instance_types(
        &self,
        node_pool: &serde_json::Value,
        node_class: Option<&serde_json::Value>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        self.check()?;
        let answer = self.inner.instance_types(node_pool, node_class).await;
        self.in_time(answer)
    }

    async fn create(
        &self,
        request: &NodeClaimRequest,
        node_class: &serde_json::Value,
    ) -> Result<LaunchedNodeClaim, CloudProviderError> {
        self.check()?;
        let answer = self.inner.create(request, node_class).await;
        self.in_time(answer)
    }

    async fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> Result<Deletion, CloudProviderError> {
        self.check()?;
        let answer = self.inner.delete(provider_id, node_claim_name).await;
        self.in_time(answer)
    }

    async fn get(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudProviderError> {
        self.check()?;
        let answer = self.inner.get(provider_id).await;
        self.in_time(answer)
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudProviderError> {
        self.check()?;
        let answer = self.inner.list().await;
        self.in_time(answer)
    }

    async fn is_drifted(
        &self,
        node_claim: &NodeClaimRequest,
        launched: &LaunchedNodeClaim,
        node_class: &serde_json::Value,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        self.check()?;
        let answer = self
            .inner
            .is_drifted(node_claim, launched, node_class)
            .await;
        self.in_time(answer)
    }

    async fn repair_policies(&self) -> Result<Vec<RepairPolicy>, CloudProviderError> {
        self.check()?;
        let answer = self.inner.repair_policies().await;
        self.in_time(answer)
    }

    async fn watch_interruptions(&self) -> Result<InterruptionStream, CloudProviderError> {
        self.check()?;
        let answer = self.inner.watch_interruptions().await;
        self.in_time(answer)
    }

    async fn ack_interruptions(&self, event_ids: &[String]) -> Result<(), CloudProviderError> {
        self.check()?;
        let answer = self.inner.ack_interruptions(event_ids).await;
        self.in_time(answer)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use core_svc::cloudprovider::FakeCloudProvider;

    use super::*;

    #[tokio::test]
    async fn calls_fail_as_unavailable_only_while_the_outage_lasts() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = FakeClock::new(start);
        let outage = OutageSwitch::new();
        let provider = OutageProvider::new(FakeCloudProvider::new(), outage.clone(), clock.clone());
        assert!(provider.list().await.is_ok());
        outage.start(start.saturating_add(Duration::from_secs(300)).unwrap());
        assert!(matches!(
            provider.list().await,
            Err(CloudProviderError::Unavailable(_))
        ));
        clock.advance(Duration::from_secs(300));
        assert!(provider.list().await.is_ok());
    }

    #[tokio::test]
    async fn a_slow_plugin_acts_on_a_call_but_core_sees_it_fail() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = FakeClock::new(start);
        let outage = OutageSwitch::new();
        let provider = OutageProvider::new(FakeCloudProvider::new(), outage.clone(), clock.clone());
        let until = start.saturating_add(Duration::from_secs(60)).unwrap();
        outage.start_slow(until);
        assert!(outage.is_slow(start) && !outage.is_down(start));
        assert_eq!(outage.ends_after(start), Some(until));
        assert!(matches!(
            provider.list().await,
            Err(CloudProviderError::Unavailable(message)) if message.contains("DEADLINE_EXCEEDED")
        ));
        assert!(
            provider
                .inner()
                .calls()
                .iter()
                .any(|call| call.rpc() == core_svc::cloudprovider::Rpc::List),
            "the plugin was reached"
        );
        clock.advance(Duration::from_secs(60));
        assert!(provider.list().await.is_ok());
        assert_eq!(outage.ends_after(clock.now()), None);
    }
}
