//! An in-memory SSM Parameter Store for the simulator and unit tests: the parameters it is
//! given, nothing else (no public `/aws/service/...` parameters unless put, which unlike SSM
//! it allows, so tests can stand in for AWS's own).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::{AwsFuture, Ssm};
use crate::memory_cloud::{CallCounts, lock_state};

/// The in-memory SSM. Cheap to share behind an `Arc`; every call locks one mutex.
#[derive(Debug, Default)]
pub struct MemorySsm {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    parameters: BTreeMap<String, String>,
    calls: CallCounts,
}

impl MemorySsm {
    /// An SSM with no parameters.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_state(&self.state)
    }

    /// Sets the parameter `name` to `value`, overwriting any value it had. Any name is
    /// allowed, `/aws/...` included.
    pub fn put_parameter(&self, name: &str, value: &str) {
        self.state()
            .parameters
            .insert(name.to_owned(), value.to_owned());
    }

    /// How many times the SSM action `action` (`GetParameter`) was called.
    pub fn calls(&self, action: &str) -> u64 {
        self.state().calls.of(action)
    }
}

impl Ssm for MemorySsm {
    fn get_parameter<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<String>> {
        let mut state = self.state();
        state.calls.record("GetParameter");
        let answer = state.parameters.get(name).cloned();
        Box::pin(async move { Ok(answer) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ssm::contract;

    const NAME: &str = "/karpenter-test/image";
    const VALUE: &str = "ami-0123456789abcdef0";

    fn fixtures(ssm: &MemorySsm) -> contract::Fixtures {
        ssm.put_parameter(NAME, VALUE);
        contract::Fixtures {
            name: NAME.to_owned(),
            value: VALUE.to_owned(),
        }
    }

    #[tokio::test]
    async fn contract_suite() {
        let ssm = MemorySsm::new();
        let fixtures = fixtures(&ssm);
        contract::run_all(&ssm, &fixtures).await;
    }

    #[tokio::test]
    async fn contract_suite_behind_arc_dyn() {
        let ssm = Arc::new(MemorySsm::new());
        let fixtures = fixtures(&ssm);
        let shared: Arc<dyn Ssm> = ssm;
        contract::run_all(shared.as_ref(), &fixtures).await;
    }

    #[tokio::test]
    async fn put_overwrites_and_public_names_are_allowed() {
        let ssm = MemorySsm::new();
        let public = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64";
        ssm.put_parameter(public, "ami-1");
        ssm.put_parameter(public, "ami-2");
        assert_eq!(
            ssm.get_parameter(public).await.expect("get").as_deref(),
            Some("ami-2")
        );
        assert_eq!(ssm.calls("GetParameter"), 1);
        let _ = ssm.get_parameter("/missing").await;
        assert_eq!(ssm.calls("GetParameter"), 2);
    }
}
