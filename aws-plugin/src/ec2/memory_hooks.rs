//! Hooks the simulator uses to set the in-memory EC2 up as a scenario describes it: images,
//! subnets and security groups under ids the scenario chose, a catalogue narrowed to some
//! types and zones, spot prices, and instances that were running before the simulation began
//! (a fleet to adopt). A child module of `memory`, so it reaches the private state.

use std::collections::BTreeMap;

use super::{InstanceRecord, MemoryEc2, VPC_ID, not_found};
use crate::ec2::{
    AwsError, CapacityType, Image, Instance, InstanceState, SecurityGroup, Subnet, Tag,
};

/// An instance to register as already running (see [`MemoryEc2::register_running_instance`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningInstance {
    /// `i-...`: any id not taken yet.
    pub id: String,
    /// `m5.large`: a type of the catalogue.
    pub instance_type: String,
    /// `us-east-1a`.
    pub zone: String,
    /// On-demand or spot.
    pub capacity_type: CapacityType,
    /// The image it booted.
    pub image_id: Option<String>,
    /// The subnet it runs in.
    pub subnet_id: Option<String>,
    /// Its security groups.
    pub security_group_ids: Vec<String>,
    /// Its tags (the cluster and NodeClaim tags make it the plugin's).
    pub tags: Vec<Tag>,
    /// When it was launched, seconds since the Unix epoch; `None`: now.
    pub launch_time: Option<i64>,
}

impl MemoryEc2 {
    /// Adds an image under the given id, owned by [`super::ACCOUNT_ID`]; replaces one with the
    /// same id.
    pub fn add_image_with_id(
        &self,
        id: &str,
        name: &str,
        architecture: &str,
        creation_date: &str,
        tags: Vec<Tag>,
    ) -> Image {
        let image = Image {
            id: id.to_owned(),
            name: name.to_owned(),
            owner_id: super::ACCOUNT_ID.to_owned(),
            architecture: architecture.to_owned(),
            creation_date: creation_date.to_owned(),
            state: "available".to_owned(),
            deprecation_time: None,
            tags,
        };
        self.state().images.insert(image.id.clone(), image.clone());
        image
    }

    /// Adds a subnet under the given id in `zone`; replaces one with the same id.
    pub fn add_subnet_with_id(&self, id: &str, zone: &str, tags: Vec<Tag>) -> Subnet {
        let subnet = Subnet {
            id: id.to_owned(),
            vpc_id: VPC_ID.to_owned(),
            zone: zone.to_owned(),
            zone_id: None,
            available_ip_address_count: 4091,
            tags,
        };
        self.state()
            .subnets
            .insert(subnet.id.clone(), subnet.clone());
        subnet
    }

    /// Adds a security group under the given id; replaces one with the same id.
    pub fn add_security_group_with_id(
        &self,
        id: &str,
        name: &str,
        tags: Vec<Tag>,
    ) -> SecurityGroup {
        let group = SecurityGroup {
            id: id.to_owned(),
            name: name.to_owned(),
            vpc_id: Some(VPC_ID.to_owned()),
            tags,
        };
        self.state()
            .security_groups
            .insert(group.id.clone(), group.clone());
        group
    }

    /// Keeps only the instance types in `instance_types` and the offerings in `zones`
    /// (`None`: all of them), spot prices included. Names the catalogue does not have are
    /// ignored: the caller validates them against [`crate::catalogue::embedded`].
    pub fn restrict_catalogue(&self, instance_types: Option<&[String]>, zones: Option<&[String]>) {
        let type_kept =
            |name: &str| instance_types.is_none_or(|kept| kept.iter().any(|k| k == name));
        let zone_kept = |zone: &str| zones.is_none_or(|kept| kept.iter().any(|k| k == zone));
        let mut state = self.state();
        state.instance_types.retain(|name, _| type_kept(name));
        state
            .offerings
            .retain(|o| type_kept(&o.instance_type) && zone_kept(&o.zone));
        state
            .spot_prices
            .retain(|(name, zone), _| type_kept(name) && zone_kept(zone));
    }

    /// The instance types of the catalogue and the zones each is offered in.
    pub fn offered_zones(&self) -> BTreeMap<String, Vec<String>> {
        let state = self.state();
        let mut zones: BTreeMap<String, Vec<String>> = state
            .instance_types
            .keys()
            .map(|name| (name.clone(), Vec::new()))
            .collect();
        for offering in &state.offerings {
            if let Some(list) = zones.get_mut(&offering.instance_type) {
                list.push(offering.zone.clone());
            }
        }
        zones
    }

    /// Whether the instance type supports spot (its supported usage classes).
    pub fn supports_spot(&self, instance_type: &str) -> bool {
        self.state()
            .instance_types
            .get(instance_type)
            .is_some_and(|t| t.supported_usage_classes.iter().any(|c| c == "spot"))
    }

    /// Removes every spot price: without one, no spot offering is available.
    pub fn clear_spot_prices(&self) {
        self.state().spot_prices.clear();
    }

    /// The latest spot price of a type in a zone.
    pub fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.state()
            .spot_prices
            .get(&(instance_type.to_owned(), zone.to_owned()))
            .map(|(price, _)| *price)
    }

    /// Makes every pool launch again (no capacity error left).
    pub fn clear_capacity_errors(&self) {
        self.state().capacity_errors.clear();
    }

    /// Registers an instance that is running now, as if it had been launched before the
    /// clock's time (longer ago than the launch delay). Refuses an id already taken.
    pub fn register_running_instance(
        &self,
        running: RunningInstance,
    ) -> Result<Instance, AwsError> {
        let mut state = self.state();
        if state.instances.contains_key(&running.id) {
            return Err(AwsError::from_code(
                "InvalidInstanceID.Duplicate",
                format!("The instance ID '{}' already exists", running.id),
            ));
        }
        if !state.instance_types.contains_key(&running.instance_type) {
            return Err(AwsError::from_code(
                "InvalidInstanceType",
                format!(
                    "The following supplied instance types do not exist: [{}]",
                    running.instance_type
                ),
            ));
        }
        if let Some(subnet) = &running.subnet_id
            && !state.subnets.contains_key(subnet)
        {
            return Err(not_found(subnet));
        }
        let launched_at = state.now.saturating_sub(state.launch_delay);
        let launch_time = running
            .launch_time
            .or_else(|| i64::try_from(launched_at.as_secs()).ok());
        let private_dns_name = format!("ip-10-1-{}.ec2.internal", state.instances.len() + 1);
        let instance = Instance {
            id: running.id.clone(),
            instance_type: running.instance_type,
            state: InstanceState::Running,
            zone: Some(running.zone),
            subnet_id: running.subnet_id,
            image_id: running.image_id,
            capacity_type: running.capacity_type,
            security_group_ids: running.security_group_ids,
            private_dns_name: Some(private_dns_name),
            launch_time,
            partition_number: None,
            capacity_reservation_id: None,
            tags: running.tags,
        };
        state.instances.insert(
            running.id,
            InstanceRecord {
                instance: instance.clone(),
                launched_at,
                terminated_at: None,
            },
        );
        Ok(instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::{Ec2, ImageQuery, ResourceQuery};

    fn ec2() -> MemoryEc2 {
        MemoryEc2::new("us-east-1").expect("the embedded catalogue")
    }

    fn running(id: &str) -> RunningInstance {
        RunningInstance {
            id: id.to_owned(),
            instance_type: "m5.large".to_owned(),
            zone: "us-east-1a".to_owned(),
            capacity_type: CapacityType::OnDemand,
            image_id: Some("ami-0a1".to_owned()),
            subnet_id: Some("subnet-a".to_owned()),
            security_group_ids: vec!["sg-1".to_owned()],
            tags: vec![Tag::new("karpenter.sh/nodeclaim", "default-abc")],
            launch_time: None,
        }
    }

    #[tokio::test]
    async fn resources_added_under_given_ids_are_described_under_them() {
        let ec2 = ec2();
        ec2.add_image_with_id(
            "ami-0a1",
            "al2023-v1",
            "x86_64",
            "2026-01-01T00:00:00.000Z",
            vec![],
        );
        ec2.add_subnet_with_id(
            "subnet-a",
            "us-east-1a",
            vec![Tag::new("discovery", "demo")],
        );
        ec2.add_security_group_with_id("sg-1", "nodes", vec![]);
        let images = ec2
            .describe_images(&ImageQuery {
                ids: vec!["ami-0a1".to_owned()],
                ..ImageQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(images[0].name, "al2023-v1");
        let subnets = ec2
            .describe_subnets(&ResourceQuery::ids(["subnet-a"]))
            .await
            .unwrap();
        assert_eq!(subnets[0].zone, "us-east-1a");
    }

    #[tokio::test]
    async fn a_registered_instance_is_running_at_once_and_its_id_is_taken() {
        let ec2 = ec2();
        ec2.add_subnet_with_id("subnet-a", "us-east-1a", vec![]);
        ec2.register_running_instance(running("i-0abc")).unwrap();
        let found = ec2
            .describe_instances(&ResourceQuery::ids(["i-0abc"]))
            .await
            .unwrap();
        assert_eq!(found[0].state, InstanceState::Running);
        assert_eq!(found[0].tag("karpenter.sh/nodeclaim"), Some("default-abc"));
        assert!(ec2.register_running_instance(running("i-0abc")).is_err());
    }

    #[test]
    fn an_instance_in_an_unknown_subnet_or_of_an_unknown_type_is_refused() {
        let ec2 = ec2();
        assert!(
            ec2.register_running_instance(running("i-1")).is_err(),
            "no subnet-a"
        );
        ec2.add_subnet_with_id("subnet-a", "us-east-1a", vec![]);
        let mut unknown = running("i-2");
        unknown.instance_type = "m5.gigantic".to_owned();
        assert!(ec2.register_running_instance(unknown).is_err());
    }

    #[test]
    fn the_catalogue_narrows_to_the_types_and_zones_kept() {
        let ec2 = ec2();
        let types = ["m5.large".to_owned(), "c5.large".to_owned()];
        let zones = ["us-east-1b".to_owned()];
        ec2.restrict_catalogue(Some(&types), Some(&zones));
        let offered = ec2.offered_zones();
        assert_eq!(offered.keys().collect::<Vec<_>>(), ["c5.large", "m5.large"]);
        assert!(offered.values().all(|z| z == &["us-east-1b"]));
        assert!(ec2.spot_price("m5.large", "us-east-1a").is_none());
        assert!(ec2.spot_price("m5.large", "us-east-1b").is_some());
        ec2.clear_spot_prices();
        assert!(ec2.spot_price("m5.large", "us-east-1b").is_none());
    }
}
