//! A whole AWS in memory (EC2, IAM, SSM) for the simulator and tests, with the set-up an
//! EKS account has: a node role, subnets and security groups tagged for discovery, and the
//! EKS-optimized image parameters that aliases resolve through.

use std::sync::Arc;

use crate::apis::ec2nodeclass::{AMIFamily, Alias};
use crate::catalogue::CatalogueError;
use crate::ec2::memory::MemoryEc2;
use crate::ec2::{Image, Tag};
use crate::iam::memory::MemoryIam;
use crate::node_class::amis::alias_parameters;
use crate::provider::AwsClients;
use crate::ssm::memory::MemorySsm;

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
