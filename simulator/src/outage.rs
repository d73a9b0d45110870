//! A plugin outage: the [`CloudProvider`] the controllers get wraps the gRPC one, and while an
//! outage lasts every call fails as [`CloudProviderError::Unavailable`] without reaching the
//! plugin, which is what core sees when the plugin's container is down.

use std::sync::{Arc, Mutex, PoisonError};

use core_domain::instance_type::InstanceType;
use core_svc::clock::{Clock, FakeClock};
use core_svc::cloudprovider::{
    CloudInstance, CloudProvider, CloudProviderError, Deletion, DriftReason, InterruptionStream,
    LaunchedNodeClaim, NodeClaimRequest, NodeClassKind, RepairPolicy, ResolvedNodeClass,
};
use jiff::Timestamp;

/// When the current outage ends, shared between the engine and every provider it built.
#[derive(Debug, Clone, Default)]
pub struct OutageSwitch {
    until: Arc<Mutex<Option<Timestamp>>>,
}

impl OutageSwitch {
    /// No outage.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plugin is unreachable until `until` (an earlier end is kept if later).
    pub fn start(&self, until: Timestamp) {
        let mut current = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        *current = Some(current.map_or(until, |known| known.max(until)));
    }

    /// When the outage under way at `now` ends; `None` when there is none.
    pub fn ends_after(&self, now: Timestamp) -> Option<Timestamp> {
        (*self.until.lock().unwrap_or_else(PoisonError::into_inner)).filter(|until| now < *until)
    }

    /// Whether the plugin is unreachable at `now`.
    pub fn is_down(&self, now: Timestamp) -> bool {
        self.until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| now < until)
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
}

impl<P: CloudProvider> CloudProvider for OutageProvider<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn supported_node_classes(&self) -> &[NodeClassKind] {
        self.inner.supported_node_classes()
    }

    async fn resolve_node_class(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<ResolvedNodeClass, CloudProviderError> {
        self.check()?;
        self.inner.resolve_node_class(node_class).await
    }

    async fn instance_types(
        &self,
        node_pool: &serde_json::Value,
        node_class: Option<&serde_json::Value>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        self.check()?;
        self.inner.instance_types(node_pool, node_class).await
    }

    async fn create(
        &self,
        request: &NodeClaimRequest,
        node_class: &serde_json::Value,
    ) -> Result<LaunchedNodeClaim, CloudProviderError> {
        self.check()?;
        self.inner.create(request, node_class).await
    }

    async fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> Result<Deletion, CloudProviderError> {
        self.check()?;
        self.inner.delete(provider_id, node_claim_name).await
    }

    async fn get(&self, provider_id: &str) -> Result<Option<CloudInstance>, CloudProviderError> {
        self.check()?;
        self.inner.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudProviderError> {
        self.check()?;
        self.inner.list().await
    }

    async fn is_drifted(
        &self,
        node_claim: &NodeClaimRequest,
        launched: &LaunchedNodeClaim,
        node_class: &serde_json::Value,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        self.check()?;
        self.inner
            .is_drifted(node_claim, launched, node_class)
            .await
    }

    async fn repair_policies(&self) -> Result<Vec<RepairPolicy>, CloudProviderError> {
        self.check()?;
        self.inner.repair_policies().await
    }

    async fn watch_interruptions(&self) -> Result<InterruptionStream, CloudProviderError> {
        self.check()?;
        self.inner.watch_interruptions().await
    }

    async fn ack_interruptions(&self, event_ids: &[String]) -> Result<(), CloudProviderError> {
        self.check()?;
        self.inner.ack_interruptions(event_ids).await
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
}
