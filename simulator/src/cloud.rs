//! The simulated cloud of a scenario's `cloud:` section, over aws-plugin's in-memory AWS
//! ([`MemoryCloud`]): the embedded catalogue narrowed to the scenario's types and zones, spot
//! prices at a seeded 30-70% of on-demand, the images, subnets and security groups under the
//! scenario's ids, capacity errors, and the instances of a fleet to adopt.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_plugin::apis::ec2nodeclass::{ALIAS_VERSION_LATEST, Alias};
use aws_plugin::ec2::memory::hooks::RunningInstance;
use aws_plugin::ec2::{AwsError, CapacityType, Ec2, Instance, InstanceState, ResourceQuery, Tag};
use aws_plugin::instance_types::RESERVED_PRICE_DIVISOR;
use aws_plugin::memory_cloud::MemoryCloud;
use aws_plugin::node_class::amis::alias_parameters;
use core_domain::labels::CAPACITY_TYPE_RESERVED;
use jiff::Timestamp;

use crate::catalogue::spot_fraction;
use crate::scenario::{CapacityErrorSpec, CloudSpec, ImageSpec};

/// The EC2 error code of a pool without capacity.
const INSUFFICIENT_CAPACITY: &str = "InsufficientInstanceCapacity";

/// How long a terminated instance stays `shutting-down`.
pub const TERMINATION_DELAY: Duration = Duration::from_secs(30);

/// The Kubernetes version of the simulated cluster (image aliases resolve for it).
pub const KUBERNETES_VERSION: &str = "1.33";

/// Why the cloud could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No embedded catalogue for the region.
    #[error(transparent)]
    Catalogue(#[from] aws_plugin::catalogue::CatalogueError),
    /// The in-memory EC2 refused a call.
    #[error("{what}: {error}")]
    Ec2 {
        /// What was being done.
        what: String,
        /// EC2's error.
        error: AwsError,
    },
}

/// The simulated cloud.
#[derive(Debug, Clone)]
pub struct SimCloud {
    /// EC2, IAM and SSM in memory; the provider's ports.
    pub aws: MemoryCloud,
}

/// An instance as the report lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceView {
    /// `aws:///<zone>/<id>`.
    pub provider_id: String,
    /// `m5.large`.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// The image it booted.
    pub image_id: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, ...
    pub state: String,
    /// Its price per hour, from its offering.
    pub price: Option<f64>,
    /// The NodeClaim it was launched for (its tag).
    pub node_claim: Option<String>,
    /// Its private DNS name.
    pub private_dns_name: Option<String>,
    /// When it was launched, seconds since the Unix epoch.
    pub launch_time: Option<i64>,
    /// Its state, as EC2's enum.
    pub raw_state: InstanceState,
}

fn tags(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter().map(|(k, v)| Tag::new(k, v)).collect()
}

/// EC2's ISO 8601 form of a time (`2026-01-01T00:00:00.000Z`).
fn iso8601(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

impl SimCloud {
    /// The cloud `spec` describes, at `start`; spot prices derive from `seed`.
    pub fn new(spec: &CloudSpec, seed: u64, start: Timestamp) -> Result<Self, CloudError> {
        let aws = MemoryCloud::new(&spec.region)?;
        let cloud = Self { aws };
        let ec2 = &cloud.aws.ec2;
        ec2.set_now(since_epoch(start));
        ec2.set_launch_delay(spec.launch_delay);
        ec2.set_termination_delay(TERMINATION_DELAY);
        ec2.restrict_catalogue(spec.instance_types.as_deref(), spec.zones.as_deref());
        if spec.spot {
            for (instance_type, zones) in ec2.offered_zones() {
                let Some(on_demand) = ec2.on_demand_price(&instance_type) else {
                    continue;
                };
                if !ec2.supports_spot(&instance_type) {
                    continue;
                }
                for zone in zones {
                    let price = on_demand * spot_fraction(seed, &instance_type, &zone);
                    ec2.set_spot_price(
                        &instance_type,
                        &zone,
                        (price * 10_000.0).round() / 10_000.0,
                    );
                }
            }
        } else {
            ec2.clear_spot_prices();
        }
        for image in &spec.images {
            cloud.publish_image(image, start);
        }
        for subnet in &spec.subnets {
            ec2.add_subnet_with_id(&subnet.id, &subnet.zone, tags(&subnet.tags));
        }
        for group in &spec.security_groups {
            ec2.add_security_group_with_id(&group.id, &group.name, tags(&group.tags));
        }
        cloud.set_capacity_errors(&spec.capacity_errors);
        Ok(cloud)
    }

    /// Moves the cloud's clock.
    pub fn set_time(&self, now: Timestamp) {
        self.aws.ec2.set_now(since_epoch(now));
    }

    /// Changes whenever an instance is launched or changes state.
    pub fn instances_fingerprint(&self) -> [usize; 4] {
        self.aws.ec2.instances_fingerprint()
    }

    /// When the next instance changes state by the clock alone, if any will.
    pub fn next_state_change(&self) -> Option<Timestamp> {
        let since_epoch = self.aws.ec2.next_state_change()?;
        Timestamp::from_duration(jiff::SignedDuration::try_from(since_epoch).ok()?).ok()
    }

    /// Makes `image` known, created at its `created` time or `now`; an image with an alias
    /// becomes what the family's `@latest` alias resolves to.
    pub fn publish_image(&self, image: &ImageSpec, now: Timestamp) {
        let created = image.created.unwrap_or(now);
        self.aws.ec2.add_image_with_id(
            &image.id,
            &image.name,
            &image.architecture,
            &iso8601(created),
            tags(&image.tags),
        );
        if let Some(family) = image.alias {
            let latest = Alias {
                family,
                version: ALIAS_VERSION_LATEST,
            };
            if let Some((_, parameter)) = alias_parameters(latest, KUBERNETES_VERSION)
                .into_iter()
                .find(|(architecture, _)| *architecture == image.architecture)
            {
                self.aws.ssm.put_parameter(&parameter, &image.id);
            }
        }
    }

    /// The capacity errors become exactly `errors`.
    pub fn set_capacity_errors(&self, errors: &[CapacityErrorSpec]) {
        let ec2 = &self.aws.ec2;
        ec2.clear_capacity_errors();
        for error in errors {
            let capacity_types: &[CapacityType] = match error.capacity_type.as_deref() {
                Some("spot") => &[CapacityType::Spot],
                Some(_) => &[CapacityType::OnDemand],
                None => &[CapacityType::Spot, CapacityType::OnDemand],
            };
            for capacity_type in capacity_types {
                ec2.set_capacity_error(
                    &error.instance_type,
                    &error.zone,
                    *capacity_type,
                    Some(INSUFFICIENT_CAPACITY),
                );
            }
        }
    }

    /// Makes the IAM role `name` exist (node classes name the role their nodes run with).
    pub fn ensure_role(&self, name: &str) {
        self.aws.iam.add_role(name);
    }

    /// Registers an instance running since before t=0 (a node of a fleet to adopt).
    pub fn register_running(&self, running: RunningInstance) -> Result<Instance, CloudError> {
        let id = running.id.clone();
        self.aws
            .ec2
            .register_running_instance(running)
            .map_err(|error| CloudError::Ec2 {
                what: format!("registering instance {id}"),
                error,
            })
    }

    /// Terminates the instance `id` as the cloud would on its own (an interruption).
    pub async fn terminate(&self, id: &str) {
        if let Err(error) = self.aws.ec2.terminate_instances(&[id.to_owned()]).await {
            tracing::warn!(instance = id, %error, "the cloud could not take the instance");
        }
    }

    /// Every instance, terminated ones included, by id.
    pub async fn instances(&self) -> Vec<InstanceView> {
        let found = self
            .aws
            .ec2
            .describe_instances(&ResourceQuery::default())
            .await
            // Listing without ids cannot fail in memory; an empty cloud is the safe reading.
            .unwrap_or_default();
        let mut views: Vec<InstanceView> = found.iter().map(|i| self.view(i)).collect();
        views.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
        views
    }

    fn view(&self, instance: &Instance) -> InstanceView {
        let zone = instance.zone.clone().unwrap_or_default();
        // An instance in a capacity reservation costs what its reserved offering does: the
        // reservation is paid for whether it runs or not.
        let reserved = instance.capacity_reservation_id.is_some();
        let price = match instance.capacity_type {
            _ if reserved => self
                .aws
                .ec2
                .on_demand_price(&instance.instance_type)
                .map(|p| p / RESERVED_PRICE_DIVISOR),
            CapacityType::OnDemand | CapacityType::CapacityBlock => {
                self.aws.ec2.on_demand_price(&instance.instance_type)
            }
            CapacityType::Spot => self.aws.ec2.spot_price(&instance.instance_type, &zone),
        };
        InstanceView {
            provider_id: format!("aws:///{zone}/{}", instance.id),
            instance_type: instance.instance_type.clone(),
            zone,
            capacity_type: if reserved {
                CAPACITY_TYPE_RESERVED.to_owned()
            } else {
                instance.capacity_type.as_str().to_owned()
            },
            image_id: instance.image_id.clone().unwrap_or_default(),
            state: instance.state.as_str().to_owned(),
            price,
            node_claim: instance
                .tag(aws_plugin::instance::tags::TAG_NODECLAIM)
                .map(str::to_owned),
            private_dns_name: instance.private_dns_name.clone(),
            launch_time: instance.launch_time,
            raw_state: instance.state.clone(),
        }
    }
}

fn since_epoch(time: Timestamp) -> Duration {
    let seconds = u64::try_from(time.as_second()).unwrap_or(0);
    let nanos = u32::try_from(time.subsec_nanosecond()).unwrap_or(0);
    Duration::new(seconds, nanos)
}

#[cfg(test)]
mod tests {
    use crate::scenario;

    use super::*;

    fn cloud(yaml: &str) -> SimCloud {
        let scenario = scenario::parse(&format!("name: t\nduration: 1h\ncloud:\n{yaml}")).unwrap();
        SimCloud::new(&scenario.cloud, scenario.seed, scenario.start).unwrap()
    }

    #[test]
    fn the_catalogue_is_narrowed_and_spot_is_priced_below_on_demand() {
        let cloud =
            cloud("  instanceTypes: [m5.large, c5.large]\n  zones: [us-east-1a, us-east-1b]\n");
        let offered = cloud.aws.ec2.offered_zones();
        assert_eq!(offered.keys().collect::<Vec<_>>(), ["c5.large", "m5.large"]);
        assert_eq!(offered["m5.large"], ["us-east-1a", "us-east-1b"]);
        let on_demand = cloud.aws.ec2.on_demand_price("m5.large").unwrap();
        let spot = cloud.aws.ec2.spot_price("m5.large", "us-east-1a").unwrap();
        assert!(
            (0.3 * on_demand - 1e-4..0.7 * on_demand + 1e-4).contains(&spot),
            "{spot} vs {on_demand}"
        );
    }

    #[test]
    fn without_spot_no_spot_price_is_left() {
        let cloud = cloud("  instanceTypes: [m5.large]\n  spot: false\n");
        assert_eq!(cloud.aws.ec2.spot_price("m5.large", "us-east-1a"), None);
    }

    #[tokio::test]
    async fn an_adopted_instance_is_running_under_its_own_id() {
        let cloud = cloud("  subnets: [{id: subnet-a, zone: us-east-1a}]\n");
        cloud
            .register_running(RunningInstance {
                id: "i-0abc".to_owned(),
                instance_type: "m5.large".to_owned(),
                zone: "us-east-1a".to_owned(),
                capacity_type: CapacityType::OnDemand,
                image_id: Some("ami-1".to_owned()),
                subnet_id: Some("subnet-a".to_owned()),
                security_group_ids: vec![],
                tags: vec![],
                launch_time: None,
            })
            .unwrap();
        let instances = cloud.instances().await;
        assert_eq!(instances.len(), 1);
        assert_eq!(instances[0].provider_id, "aws:///us-east-1a/i-0abc");
        assert_eq!(instances[0].state, "running");
        assert_eq!(instances[0].price, Some(0.096));
    }
}
