//! A whole AWS in memory (EC2, IAM, SSM) for the simulator and tests, with the set-up an
//! EKS account has: a node role, subnets and security groups tagged for discovery, and the
//! EKS-optimized image parameters that aliases resolve through.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::apis::ec2nodeclass::{AMIFamily, Alias};
use crate::catalogue::CatalogueError;
use crate::ec2::memory::MemoryEc2;
use crate::ec2::{Image, Tag};
use crate::iam::memory::MemoryIam;
use crate::node_class::amis::alias_parameters;
use crate::provider::AwsClients;
use crate::ssm::memory::MemorySsm;

/// How often each call of an in-memory service was made, by action name, failed calls
/// included: tests of the callers' caching and idempotency count calls with it.
#[derive(Debug, Default)]
pub(crate) struct CallCounts(BTreeMap<&'static str, u64>);

impl CallCounts {
    /// Counts one call of `action`.
    pub(crate) fn record(&mut self, action: &'static str) {
        *self.0.entry(action).or_default() += 1;
    }

    /// How many times `action` was called.
    pub(crate) fn of(&self, action: &str) -> u64 {
        self.0.get(action).copied().unwrap_or(0)
    }
}

/// Locks an in-memory service's state. A poisoned lock only means another test thread
/// panicked mid-call; the state is still the best there is.
pub(crate) fn lock_state<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The in-memory EC2, IAM and SSM of one region.
#[derive(Debug, Clone)]
pub struct MemoryCloud {
    /// EC2.
    pub ec2: Arc<MemoryEc2>,
    /// IAM.
    pub iam: Arc<MemoryIam>,
    /// SSM.
    pub ssm: Arc<MemorySsm>,
}

impl MemoryCloud {
    /// An empty account in `region` (its embedded instance type catalogue).
    pub fn new(region: &str) -> Result<Self, CatalogueError> {
        Ok(Self {
            ec2: Arc::new(MemoryEc2::new(region)?),
            iam: Arc::new(MemoryIam::new()),
            ssm: Arc::new(MemorySsm::new()),
        })
    }

    /// The ports the provider takes.
    pub fn clients(&self) -> AwsClients {
        AwsClients {
            ec2: Arc::clone(&self.ec2) as _,
            iam: Arc::clone(&self.iam) as _,
            ssm: Arc::clone(&self.ssm) as _,
        }
    }

    /// Publishes a new EKS-optimized image of `family` for Kubernetes `kubernetes_version` on
    /// `architecture` (EC2's spelling) and points the family's `latest` alias parameter at it:
    /// what AWS releasing a new AMI looks like. `None` when the family has no image for the
    /// architecture (Windows on arm64, Custom).
    pub fn publish_alias_image(
        &self,
        family: AMIFamily,
        kubernetes_version: &str,
        architecture: &str,
        name: &str,
    ) -> Option<Image> {
        let latest = Alias {
            family,
            version: crate::apis::ec2nodeclass::ALIAS_VERSION_LATEST,
        };
        let (_, parameter) = alias_parameters(latest, kubernetes_version)
            .into_iter()
            .find(|(arch, _)| *arch == architecture)?;
        let image = self
            .ec2
            .publish_image(name, architecture, Vec::<Tag>::new());
        self.ssm.put_parameter(&parameter, &image.id);
        Some(image)
    }
}
