//! An in-memory EC2 for the simulator and unit tests. Deterministic: instance types, zones
//! and on-demand prices come from the embedded catalogue; ids are counters
//! (`i-0000000000000001`); time is a clock the caller sets or advances (never the wall clock),
//! and instance states follow it: `pending` until the launch delay has passed, then
//! `running`; after termination `shutting-down` until the termination delay has passed, then
//! `terminated`. Capacity errors are configured per instance type, zone and capacity type.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::{
    AwsError, AwsFuture, CapacityReservation, CapacityReservationQuery, CapacityType, Ec2,
    FleetError, FleetInstance, FleetOverride, FleetRequest, FleetResult, Image, ImageQuery,
    Instance, InstanceState, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRequest, PlacementGroup, PlacementGroupQuery, ResourceQuery,
    SecurityGroup, SecurityGroupQuery, SpotPrice, Subnet, Tag, TagFilter, wildcard_match,
};
use crate::catalogue::{self, CatalogueError};
use crate::memory_cloud::{CallCounts, lock_state};
#[path = "memory_hooks.rs"]
pub mod hooks;

/// The account the in-memory EC2 pretends to be (owner of the images added to it).
pub const ACCOUNT_ID: &str = "123456789012";

/// Where the clock starts: 2024-01-01T00:00:00Z, as seconds since the Unix epoch.
const START: Duration = Duration::from_secs(1_704_067_200);

/// How many CreateFleet requests [`MemoryEc2::fleet_requests`] keeps: enough for a test, bounded
/// for a long simulation.
pub const KEPT_FLEET_REQUESTS: usize = 100;

/// The VPC every subnet and security group belongs to.
const VPC_ID: &str = "vpc-0000000000000001";

/// Spot prices default to this share of the on-demand price, so the simulator sees spot
/// cheaper than on-demand without configuring every pool.
const DEFAULT_SPOT_SHARE: f64 = 0.3;

/// The in-memory EC2. Cheap to share behind an `Arc`; every call locks one mutex.
#[derive(Debug)]
pub struct MemoryEc2 {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    region: String,
    instance_types: BTreeMap<String, InstanceTypeInfo>,
    offerings: Vec<InstanceTypeOffering>,
    on_demand_prices: BTreeMap<String, f64>,
    spot_prices: BTreeMap<(String, String), (f64, i64)>,
    capacity_errors: BTreeMap<(String, String, CapacityType), String>,
    images: BTreeMap<String, Image>,
    subnets: BTreeMap<String, Subnet>,
    security_groups: BTreeMap<String, SecurityGroup>,
    placement_groups: BTreeMap<String, PlacementGroup>,
    capacity_reservations: BTreeMap<String, CapacityReservation>,
    launch_templates: BTreeMap<String, (LaunchTemplate, LaunchTemplateRequest)>,
    instances: BTreeMap<String, InstanceRecord>,
    now: Duration,
    launch_delay: Duration,
    termination_delay: Duration,
    next_id: u64,
    calls: CallCounts,
    /// The latest CreateFleet requests, oldest first (for tests of what callers ask for).
    fleet_requests: VecDeque<FleetRequest>,
}

#[derive(Debug)]
struct InstanceRecord {
    instance: Instance,
    launched_at: Duration,
    terminated_at: Option<Duration>,
}

impl MemoryEc2 {
    /// An EC2 serving the embedded catalogue of `region`, with no images, subnets or security
    /// groups, a launch and a termination delay of 10 seconds, and the clock at
    /// 2024-01-01T00:00:00Z.
    pub fn new(region: &str) -> Result<Self, CatalogueError> {
        let catalogue = catalogue::embedded(region)?;
        let on_demand_prices = catalogue.on_demand_prices();
        let mut offerings = Vec::new();
        let mut spot_prices = BTreeMap::new();
        let mut instance_types = BTreeMap::new();
        for entry in catalogue.instance_types {
            let name = entry.info.instance_type.clone();
            for zone in &entry.zones {
                offerings.push(InstanceTypeOffering {
                    instance_type: name.clone(),
                    zone: zone.clone(),
                });
                if let Some(price) = on_demand_prices.get(&name) {
                    let spot = (price * DEFAULT_SPOT_SHARE * 10_000.0).round() / 10_000.0;
                    spot_prices
                        .insert((name.clone(), zone.clone()), (spot, START.as_secs() as i64));
                }
            }
            instance_types.insert(name, entry.info);
        }
        offerings.sort();
        Ok(Self {
            state: Mutex::new(State {
                region: region.to_owned(),
                instance_types,
                offerings,
                on_demand_prices,
                spot_prices,
                capacity_errors: BTreeMap::new(),
                images: BTreeMap::new(),
                subnets: BTreeMap::new(),
                security_groups: BTreeMap::new(),
                placement_groups: BTreeMap::new(),
                capacity_reservations: BTreeMap::new(),
                launch_templates: BTreeMap::new(),
                instances: BTreeMap::new(),
                now: START,
                launch_delay: Duration::from_secs(10),
                termination_delay: Duration::from_secs(10),
                next_id: 1,
                calls: CallCounts::default(),
                fleet_requests: VecDeque::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_state(&self.state)
    }

    /// The region.
    pub fn region(&self) -> String {
        self.state().region.clone()
    }

    /// The clock, as time since the Unix epoch.
    pub fn now(&self) -> Duration {
        self.state().now
    }

    /// Sets the clock. Setting it back in time is allowed (states are computed from it).
    pub fn set_now(&self, now: Duration) {
        self.state().now = now;
    }

    /// When the next instance changes state by the clock alone (`pending` to `running`,
    /// `shutting-down` to `terminated`), as time since the epoch; `None` when none will.
    pub fn next_state_change(&self) -> Option<Duration> {
        let state = self.state();
        state
            .instances
            .values()
            .map(|record| match record.terminated_at {
                Some(at) => at + state.termination_delay,
                None => record.launched_at + state.launch_delay,
            })
            .filter(|at| *at > state.now)
            .min()
    }

    /// A value that changes whenever an instance is launched or changes state (by a call or
    /// by the clock): instances are never forgotten and only move forward through their
    /// states, so counting them per state is enough.
    pub fn instances_fingerprint(&self) -> [usize; 4] {
        let state = self.state();
        let mut counts = [0; 4];
        for record in state.instances.values() {
            let slot = match state.instance_state(record) {
                InstanceState::Pending => 0,
                InstanceState::Running => 1,
                InstanceState::ShuttingDown => 2,
                _ => 3,
            };
            if let Some(count) = counts.get_mut(slot) {
                *count += 1;
            }
        }
        counts
    }

    /// Advances the clock.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state();
        state.now += by;
    }

    /// How many times the EC2 action `action` (`DescribeInstanceTypes`,
    /// `DescribeInstanceTypeOfferings`, `DescribeSpotPriceHistory`, `CreateLaunchTemplate`,
    /// `DescribeLaunchTemplates`, `CreateFleet`, `DescribeInstances`, `TerminateInstances`)
    /// was called; tests of the provider's caching and idempotency count calls with it.
    pub fn calls(&self, action: &str) -> u64 {
        self.state().calls.of(action)
    }

    /// The request the launch template `name` was created with.
    pub fn launch_template_request(&self, name: &str) -> Option<LaunchTemplateRequest> {
        self.state()
            .launch_templates
            .get(name)
            .map(|(_, request)| request.clone())
    }

    /// The latest CreateFleet requests received (at most [`KEPT_FLEET_REQUESTS`]), oldest
    /// first.
    pub fn fleet_requests(&self) -> Vec<FleetRequest> {
        self.state().fleet_requests.iter().cloned().collect()
    }

    /// How long instances stay `pending`.
    pub fn set_launch_delay(&self, delay: Duration) {
        self.state().launch_delay = delay;
    }

    /// How long terminated instances stay `shutting-down`.
    pub fn set_termination_delay(&self, delay: Duration) {
        self.state().termination_delay = delay;
    }

    /// The on-demand price of a type, from the catalogue (EC2 itself has no such call: the
    /// provider reads prices from the Pricing API or its table).
    pub fn on_demand_price(&self, instance_type: &str) -> Option<f64> {
        self.state().on_demand_prices.get(instance_type).copied()
    }

    /// Sets the spot price of a type in a zone, effective now.
    pub fn set_spot_price(&self, instance_type: &str, zone: &str, price: f64) {
        let mut state = self.state();
        let now = state.now.as_secs() as i64;
        state
            .spot_prices
            .insert((instance_type.to_owned(), zone.to_owned()), (price, now));
    }

    /// Makes CreateFleet fail for this pool with the EC2 error `code` (for instance
    /// `InsufficientInstanceCapacity`), or succeed again when `code` is `None`.
    pub fn set_capacity_error(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        code: Option<&str>,
    ) {
        let key = (instance_type.to_owned(), zone.to_owned(), capacity_type);
        let mut state = self.state();
        match code {
            Some(code) => state.capacity_errors.insert(key, code.to_owned()),
            None => state.capacity_errors.remove(&key),
        };
    }

    /// Adds a subnet in `zone` and returns it.
    pub fn add_subnet(&self, zone: &str, tags: Vec<Tag>) -> Subnet {
        let mut state = self.state();
        let subnet = Subnet {
            id: state.new_id("subnet"),
            vpc_id: VPC_ID.to_owned(),
            zone: zone.to_owned(),
            zone_id: None,
            available_ip_address_count: 4091,
            tags,
        };
        state.subnets.insert(subnet.id.clone(), subnet.clone());
        subnet
    }

    /// Adds a security group and returns it.
    pub fn add_security_group(&self, name: &str, tags: Vec<Tag>) -> SecurityGroup {
        let mut state = self.state();
        let group = SecurityGroup {
            id: state.new_id("sg"),
            name: name.to_owned(),
            vpc_id: Some(VPC_ID.to_owned()),
            tags,
        };
        state
            .security_groups
            .insert(group.id.clone(), group.clone());
        group
    }

    /// Adds an `available` placement group of `strategy` (`cluster`, `partition` with
    /// `partitions`, or `spread`) and returns it.
    pub fn add_placement_group(
        &self,
        name: &str,
        strategy: &str,
        partitions: Option<i32>,
    ) -> PlacementGroup {
        let mut state = self.state();
        let group = PlacementGroup {
            id: state.new_id("pg"),
            name: name.to_owned(),
            strategy: strategy.to_owned(),
            partition_count: partitions.filter(|_| strategy == "partition"),
            spread_level: (strategy == "spread").then(|| "rack".to_owned()),
            state: "available".to_owned(),
        };
        state
            .placement_groups
            .insert(group.id.clone(), group.clone());
        group
    }

    /// Adds an `active` capacity reservation of this account for `count` instances of
    /// `instance_type` in `zone`: `default` (an on-demand capacity reservation, `interruptible`
    /// or not) or, with `capacity_block`, a capacity block. Launches targeting it take its
    /// capacity; terminations give it back.
    pub fn add_capacity_reservation(
        &self,
        instance_type: &str,
        zone: &str,
        count: i64,
        interruptible: bool,
        capacity_block: bool,
        tags: Vec<Tag>,
    ) -> CapacityReservation {
        let mut state = self.state();
        let reservation = CapacityReservation {
            id: state.new_id("cr"),
            owner_id: ACCOUNT_ID.to_owned(),
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            instance_match_criteria: "targeted".to_owned(),
            reservation_type: if capacity_block {
                "capacity-block"
            } else {
                "default"
            }
            .to_owned(),
            state: "active".to_owned(),
            available_instance_count: count,
            total_instance_count: count,
            end_date: None,
            interruptible,
            tags,
        };
        state
            .capacity_reservations
            .insert(reservation.id.clone(), reservation.clone());
        reservation
    }

    /// Sets how many more instances the capacity reservation `id` holds, as when someone
    /// else launches into it or terminates there.
    pub fn set_capacity_reservation_available(&self, id: &str, available: i64) {
        if let Some(reservation) = self.state().capacity_reservations.get_mut(id) {
            reservation.available_instance_count = available;
        }
    }

    /// Adds an image owned by [`ACCOUNT_ID`] with the given creation date (ISO 8601), and
    /// returns it.
    pub fn add_image(
        &self,
        name: &str,
        architecture: &str,
        creation_date: &str,
        tags: Vec<Tag>,
    ) -> Image {
        let mut state = self.state();
        let image = Image {
            id: state.new_id("ami"),
            name: name.to_owned(),
            owner_id: ACCOUNT_ID.to_owned(),
            architecture: architecture.to_owned(),
            creation_date: creation_date.to_owned(),
            state: "available".to_owned(),
            deprecation_time: None,
            tags,
        };
        state.images.insert(image.id.clone(), image.clone());
        image
    }

    /// Publishes an image created now (by the clock): what a new AMI release looks like.
    pub fn publish_image(&self, name: &str, architecture: &str, tags: Vec<Tag>) -> Image {
        let date = iso8601(self.now());
        self.add_image(name, architecture, &date, tags)
    }
}

impl State {
    /// The next id with EC2's prefix: one counter for every kind, so ids never repeat.
    /// The partition an instance launched with `placement` runs in: the one asked for, or,
    /// in a partition group, the one with the fewest live instances (EC2 spreads them).
    fn partition_for(&self, placement: Option<&super::Placement>) -> Option<i32> {
        let placement = placement?;
        if placement.partition_number.is_some() {
            return placement.partition_number;
        }
        let count = self
            .placement_groups
            .get(&placement.group_id)?
            .partition_count?;
        (1..=count).min_by_key(|p| {
            self.instances
                .values()
                .filter(|r| r.terminated_at.is_none() && r.instance.partition_number == Some(*p))
                .count()
        })
    }

    fn new_id(&mut self, prefix: &str) -> String {
        let n = self.next_id;
        self.next_id += 1;
        format!("{prefix}-{n:016x}")
    }

    fn instance_state(&self, record: &InstanceRecord) -> InstanceState {
        match record.terminated_at {
            Some(at) if self.now >= at + self.termination_delay => InstanceState::Terminated,
            Some(_) => InstanceState::ShuttingDown,
            None if self.now >= record.launched_at + self.launch_delay => InstanceState::Running,
            None => InstanceState::Pending,
        }
    }

    fn instance(&self, record: &InstanceRecord) -> Instance {
        let mut instance = record.instance.clone();
        instance.state = self.instance_state(record);
        instance
    }

    fn launch(&mut self, request: &FleetRequest) -> Result<FleetResult, AwsError> {
        let mut templates = Vec::with_capacity(request.launch_templates.len());
        for config in &request.launch_templates {
            match self.launch_templates.get(&config.name) {
                Some((_, template)) => templates.push(template.clone()),
                None => {
                    return Err(AwsError::from_code(
                        "InvalidLaunchTemplateName.NotFoundException",
                        format!(
                            "The specified launch template, with template name {}, does not exist.",
                            config.name
                        ),
                    ));
                }
            }
        }
        if request.target_capacity < 1 {
            return Err(AwsError::from_code(
                "InvalidParameterValue",
                "TotalTargetCapacity must be at least 1",
            ));
        }
        let mut overrides: Vec<(&FleetOverride, &LaunchTemplateRequest)> = request
            .launch_templates
            .iter()
            .zip(&templates)
            .flat_map(|(config, template)| config.overrides.iter().map(move |o| (o, template)))
            .collect();
        // Stable: equal priorities keep the caller's order, as EC2's prioritized strategy.
        overrides.sort_by(|a, b| a.0.priority.total_cmp(&b.0.priority));
        let mut result = FleetResult::default();
        for (o, template) in overrides {
            let fail = |code: &str, message: String| FleetError {
                instance_type: Some(o.instance_type.clone()),
                subnet_id: Some(o.subnet_id.clone()),
                error: AwsError::from_code(code, message),
            };
            let Some(subnet) = self.subnets.get(&o.subnet_id).cloned() else {
                result.errors.push(fail(
                    "InvalidSubnetID.NotFound",
                    format!("The subnet ID '{}' does not exist", o.subnet_id),
                ));
                continue;
            };
            let offered = self
                .offerings
                .binary_search(&InstanceTypeOffering {
                    instance_type: o.instance_type.clone(),
                    zone: subnet.zone.clone(),
                })
                .is_ok();
            let spot_ok = request.capacity_type != CapacityType::Spot
                || self
                    .instance_types
                    .get(&o.instance_type)
                    .is_some_and(|t| t.supported_usage_classes.iter().any(|c| c == "spot"));
            if !offered || !spot_ok {
                result.errors.push(fail(
                    "Unsupported",
                    format!(
                        "Your requested instance type ({}) is not supported in your requested Availability Zone ({}) for {}.",
                        o.instance_type,
                        subnet.zone,
                        request.capacity_type.as_str()
                    ),
                ));
                continue;
            }
            if let Some(target) = &template.capacity_reservation {
                // EC2 launches into a targeted reservation only what it reserves, where it
                // reserves it, while it has room.
                let fits = self.capacity_reservations.get(&target.id).is_some_and(|r| {
                    r.instance_type == o.instance_type
                        && r.zone == subnet.zone
                        && r.state == "active"
                });
                let room = self.capacity_reservations.get(&target.id).is_some_and(|r| {
                    r.available_instance_count >= i64::from(request.target_capacity)
                });
                if !fits || !room {
                    result.errors.push(fail(
                        if fits {
                            "ReservationCapacityExceeded"
                        } else {
                            "InvalidParameterValue"
                        },
                        format!(
                            "The capacity reservation {} cannot hold {} {} in {}.",
                            target.id, request.target_capacity, o.instance_type, subnet.zone
                        ),
                    ));
                    continue;
                }
                if let Some(reservation) = self.capacity_reservations.get_mut(&target.id) {
                    reservation.available_instance_count -= i64::from(request.target_capacity);
                }
            }
            let key = (
                o.instance_type.clone(),
                subnet.zone.clone(),
                request.capacity_type,
            );
            if let Some(code) = self.capacity_errors.get(&key) {
                let message = format!(
                    "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}).",
                    o.instance_type, subnet.zone
                );
                result.errors.push(fail(code, message));
                continue;
            }
            // The whole target from the first pool that has capacity: what an instant fleet
            // with the prioritized strategy does when that pool is not exhausted.
            for _ in 0..request.target_capacity {
                let id = self.new_id("i");
                let instance = Instance {
                    id: id.clone(),
                    instance_type: o.instance_type.clone(),
                    state: InstanceState::Pending,
                    zone: Some(subnet.zone.clone()),
                    subnet_id: Some(subnet.id.clone()),
                    image_id: Some(template.image_id.clone()),
                    capacity_type: request.capacity_type,
                    // EC2 attaches the primary interface's groups: the template's own, or
                    // those of the interface it names at device index 0.
                    security_group_ids: template
                        .network_interfaces
                        .iter()
                        .find(|ni| ni.device_index == 0 && ni.network_card_index.unwrap_or(0) == 0)
                        .map_or_else(
                            || template.security_group_ids.clone(),
                            |ni| ni.security_group_ids.clone(),
                        ),
                    private_dns_name: Some(format!("ip-10-0-{}.ec2.internal", self.next_id)),
                    launch_time: i64::try_from(self.now.as_secs()).ok(),
                    partition_number: self.partition_for(template.placement.as_ref()),
                    capacity_reservation_id: template
                        .capacity_reservation
                        .as_ref()
                        .map(|target| target.id.clone()),
                    tags: request.tags.clone(),
                };
                result.instances.push(FleetInstance {
                    id: id.clone(),
                    instance_type: o.instance_type.clone(),
                    zone: Some(subnet.zone.clone()),
                    subnet_id: Some(subnet.id.clone()),
                });
                self.instances.insert(
                    id,
                    InstanceRecord {
                        instance,
                        launched_at: self.now,
                        terminated_at: None,
                    },
                );
            }
            break;
        }
        Ok(result)
    }

    fn tags_of(&mut self, id: &str) -> Result<&mut Vec<Tag>, AwsError> {
        let tags = if let Some(r) = self.instances.get_mut(id) {
            Some(&mut r.instance.tags)
        } else if let Some(i) = self.images.get_mut(id) {
            Some(&mut i.tags)
        } else if let Some(s) = self.subnets.get_mut(id) {
            Some(&mut s.tags)
        } else if let Some(g) = self.security_groups.get_mut(id) {
            Some(&mut g.tags)
        } else {
            self.launch_templates
                .values_mut()
                .find(|(t, _)| t.id == id)
                .map(|(t, _)| &mut t.tags)
        };
        tags.ok_or_else(|| not_found(id))
    }
}

/// The NotFound error EC2 gives for an id, by its prefix.
fn not_found(id: &str) -> AwsError {
    let (code, what) = match id.split('-').next().unwrap_or_default() {
        "i" => ("InvalidInstanceID.NotFound", "instance ID"),
        "ami" => ("InvalidAMIID.NotFound", "image id"),
        "subnet" => ("InvalidSubnetID.NotFound", "subnet ID"),
        "sg" => ("InvalidGroup.NotFound", "security group ID"),
        "lt" => ("InvalidLaunchTemplateId.NotFound", "launch template ID"),
        _ => ("InvalidID", "ID"),
    };
    AwsError::from_code(code, format!("The {what} '{id}' does not exist"))
}

fn passes(query: &ResourceQuery, id: &str, tags: &[Tag]) -> bool {
    (query.ids.is_empty() || query.ids.iter().any(|i| i == id)) && all_pass(&query.tags, tags)
}

fn all_pass(filters: &[TagFilter], tags: &[Tag]) -> bool {
    filters.iter().all(|f| f.matches(tags))
}

/// Every id asked for must exist, as EC2 answers DescribeSubnets/SecurityGroups/Instances.
fn check_ids<T>(ids: &[String], known: &BTreeMap<String, T>) -> Result<(), AwsError> {
    match ids.iter().find(|id| !known.contains_key(*id)) {
        Some(id) => Err(not_found(id)),
        None => Ok(()),
    }
}

fn set_tags(target: &mut Vec<Tag>, tags: &[Tag]) {
    for tag in tags {
        match target.iter_mut().find(|t| t.key == tag.key) {
            Some(existing) => existing.value.clone_from(&tag.value),
            None => target.push(tag.clone()),
        }
    }
}

/// `2024-01-01T00:00:00.000Z` for a time since the Unix epoch.
fn iso8601(since_epoch: Duration) -> String {
    crate::node_class::iso8601(std::time::UNIX_EPOCH + since_epoch)
}

impl Ec2 for MemoryEc2 {
    fn describe_instance_types<'a>(
        &'a self,
        names: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceTypeInfo>> {
        let mut state = self.state();
        state.calls.record("DescribeInstanceTypes");
        let answer = if names.is_empty() {
            Ok(state.instance_types.values().cloned().collect())
        } else {
            names
                .iter()
                .map(|name| {
                    state.instance_types.get(name).cloned().ok_or_else(|| {
                        AwsError::from_code(
                            "InvalidInstanceType",
                            format!("The following supplied instance types do not exist: [{name}]"),
                        )
                    })
                })
                .collect()
        };
        Box::pin(async move { answer })
    }

    fn describe_instance_type_offerings(&self) -> AwsFuture<'_, Vec<InstanceTypeOffering>> {
        let mut state = self.state();
        state.calls.record("DescribeInstanceTypeOfferings");
        let answer = state.offerings.clone();
        Box::pin(async move { Ok(answer) })
    }

    fn describe_spot_price_history<'a>(
        &'a self,
        instance_types: &'a [String],
    ) -> AwsFuture<'a, Vec<SpotPrice>> {
        let mut state = self.state();
        state.calls.record("DescribeSpotPriceHistory");
        let answer = state
            .spot_prices
            .iter()
            .filter(|((t, _), _)| instance_types.is_empty() || instance_types.contains(t))
            .map(|((t, z), (price, timestamp))| SpotPrice {
                instance_type: t.clone(),
                zone: z.clone(),
                price: *price,
                timestamp: *timestamp,
            })
            .collect();
        Box::pin(async move { Ok(answer) })
    }

    fn describe_images<'a>(&'a self, query: &'a ImageQuery) -> AwsFuture<'a, Vec<Image>> {
        let state = self.state();
        let answer = match query.ids.iter().find(|id| !state.images.contains_key(*id)) {
            Some(id) => Err(not_found(id)),
            None => Ok(state
                .images
                .values()
                .filter(|i| query.ids.is_empty() || query.ids.contains(&i.id))
                .filter(|i| {
                    query.names.is_empty() || query.names.iter().any(|p| wildcard_match(p, &i.name))
                })
                .filter(|i| {
                    query.owners.is_empty()
                        || query
                            .owners
                            .iter()
                            .any(|o| *o == i.owner_id || (o == "self" && i.owner_id == ACCOUNT_ID))
                })
                .filter(|i| all_pass(&query.tags, &i.tags))
                .cloned()
                .collect()),
        };
        Box::pin(async move { answer })
    }

    fn describe_subnets<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Subnet>> {
        let state = self.state();
        let answer = check_ids(&query.ids, &state.subnets).map(|()| {
            state
                .subnets
                .values()
                .filter(|s| passes(query, &s.id, &s.tags))
                .cloned()
                .collect()
        });
        Box::pin(async move { answer })
    }

    fn describe_security_groups<'a>(
        &'a self,
        query: &'a SecurityGroupQuery,
    ) -> AwsFuture<'a, Vec<SecurityGroup>> {
        let state = self.state();
        let answer = check_ids(&query.ids, &state.security_groups).map(|()| {
            state
                .security_groups
                .values()
                .filter(|g| {
                    (query.ids.is_empty() || query.ids.contains(&g.id))
                        && (query.names.is_empty() || query.names.contains(&g.name))
                        && all_pass(&query.tags, &g.tags)
                })
                .cloned()
                .collect()
        });
        Box::pin(async move { answer })
    }

    fn describe_placement_groups<'a>(
        &'a self,
        query: &'a PlacementGroupQuery,
    ) -> AwsFuture<'a, Vec<PlacementGroup>> {
        let state = self.state();
        let groups = &state.placement_groups;
        let unknown = query
            .ids
            .iter()
            .find(|id| !groups.contains_key(*id))
            .or_else(|| {
                query
                    .names
                    .iter()
                    .find(|name| !groups.values().any(|g| &g.name == *name))
            });
        let answer = match unknown {
            Some(unknown) => Err(AwsError::from_code(
                "InvalidPlacementGroup.Unknown",
                format!("The Placement Group '{unknown}' is unknown."),
            )),
            None => Ok(groups
                .values()
                .filter(|g| {
                    g.state == "available"
                        && (query.ids.is_empty() || query.ids.contains(&g.id))
                        && (query.names.is_empty() || query.names.contains(&g.name))
                })
                .cloned()
                .collect()),
        };
        Box::pin(async move { answer })
    }

    fn describe_capacity_reservations<'a>(
        &'a self,
        query: &'a CapacityReservationQuery,
    ) -> AwsFuture<'a, Vec<CapacityReservation>> {
        let state = self.state();
        let reservations = &state.capacity_reservations;
        let answer = match query.ids.iter().find(|id| !reservations.contains_key(*id)) {
            Some(unknown) => Err(AwsError::from_code(
                "InvalidCapacityReservationId.NotFound",
                format!("The capacity reservation ID '{unknown}' does not exist"),
            )),
            None => Ok(reservations
                .values()
                .filter(|r| {
                    r.state == "active"
                        && if query.ids.is_empty() {
                            query.owner_id.as_ref().is_none_or(|o| *o == r.owner_id)
                                && query
                                    .instance_match_criteria
                                    .as_ref()
                                    .is_none_or(|c| *c == r.instance_match_criteria)
                                && all_pass(&query.tags, &r.tags)
                        } else {
                            query.ids.contains(&r.id)
                        }
                })
                .cloned()
                .collect()),
        };
        Box::pin(async move { answer })
    }

    fn create_launch_template<'a>(
        &'a self,
        request: &'a LaunchTemplateRequest,
    ) -> AwsFuture<'a, LaunchTemplate> {
        let mut state = self.state();
        state.calls.record("CreateLaunchTemplate");
        let answer = if state.launch_templates.contains_key(&request.name) {
            Err(AwsError::from_code(
                "InvalidLaunchTemplateName.AlreadyExistsException",
                format!("Launch template name already in use: {}", request.name),
            ))
        } else if !state.images.contains_key(&request.image_id) {
            Err(not_found(&request.image_id))
        } else {
            let template = LaunchTemplate {
                id: state.new_id("lt"),
                name: request.name.clone(),
                tags: request.tags.clone(),
            };
            state
                .launch_templates
                .insert(request.name.clone(), (template.clone(), request.clone()));
            Ok(template)
        };
        Box::pin(async move { answer })
    }

    fn describe_launch_templates<'a>(
        &'a self,
        query: &'a ResourceQuery,
    ) -> AwsFuture<'a, Vec<LaunchTemplate>> {
        let mut state = self.state();
        state.calls.record("DescribeLaunchTemplates");
        let answer = match query
            .ids
            .iter()
            .find(|n| !state.launch_templates.contains_key(*n))
        {
            Some(name) => Err(AwsError::from_code(
                "InvalidLaunchTemplateName.NotFoundException",
                format!(
                    "At least one of the launch templates specified in the request does not exist: {name}"
                ),
            )),
            None => Ok(state
                .launch_templates
                .values()
                .filter(|(t, _)| passes(query, &t.name, &t.tags))
                .map(|(t, _)| t.clone())
                .collect()),
        };
        Box::pin(async move { answer })
    }

    fn create_fleet<'a>(&'a self, request: &'a FleetRequest) -> AwsFuture<'a, FleetResult> {
        let mut state = self.state();
        state.calls.record("CreateFleet");
        if state.fleet_requests.len() == KEPT_FLEET_REQUESTS {
            state.fleet_requests.pop_front();
        }
        state.fleet_requests.push_back(request.clone());
        let answer = state.launch(request);
        Box::pin(async move { answer })
    }

    fn describe_instances<'a>(&'a self, query: &'a ResourceQuery) -> AwsFuture<'a, Vec<Instance>> {
        let mut state = self.state();
        state.calls.record("DescribeInstances");
        let answer = check_ids(&query.ids, &state.instances).map(|()| {
            if query.ids.is_empty() {
                return state
                    .instances
                    .values()
                    .filter(|r| all_pass(&query.tags, &r.instance.tags))
                    .map(|r| state.instance(r))
                    .collect();
            }
            // By id, not by a scan of every instance: core asks about one instance at a time
            // (drift, Get) across a fleet of hundreds. Sorted and deduplicated, so the answer
            // is what the scan gives: each instance once, in id order.
            let ids: BTreeSet<&str> = query.ids.iter().map(String::as_str).collect();
            ids.into_iter()
                .filter_map(|id| state.instances.get(id))
                .filter(|r| all_pass(&query.tags, &r.instance.tags))
                .map(|r| state.instance(r))
                .collect()
        });
        Box::pin(async move { answer })
    }

    fn terminate_instances<'a>(
        &'a self,
        ids: &'a [String],
    ) -> AwsFuture<'a, Vec<InstanceStateChange>> {
        let mut state = self.state();
        state.calls.record("TerminateInstances");
        let answer = check_ids(ids, &state.instances).map(|()| {
            let now = state.now;
            let mut changes = Vec::new();
            for id in ids {
                let previous = state.instances.get(id).map(|r| state.instance_state(r));
                let mut released = None;
                if let Some(record) = state.instances.get_mut(id)
                    && record.terminated_at.is_none()
                {
                    record.terminated_at = Some(now);
                    released = record.instance.capacity_reservation_id.clone();
                }
                if let Some(reservation) =
                    released.and_then(|r| state.capacity_reservations.get_mut(&r))
                {
                    reservation.available_instance_count += 1;
                }
                if let (Some(previous), Some(record)) = (previous, state.instances.get(id)) {
                    changes.push(InstanceStateChange {
                        id: id.clone(),
                        previous,
                        current: state.instance_state(record),
                    });
                }
            }
            changes
        });
        Box::pin(async move { answer })
    }

    fn create_tags<'a>(&'a self, resource_ids: &'a [String], tags: &'a [Tag]) -> AwsFuture<'a, ()> {
        let mut state = self.state();
        // Check every id first: EC2 tags all the resources or none.
        let answer = resource_ids
            .iter()
            .try_for_each(|id| state.tags_of(id).map(drop))
            .and_then(|()| {
                resource_ids
                    .iter()
                    .try_for_each(|id| state.tags_of(id).map(|target| set_tags(target, tags)))
            });
        Box::pin(async move { answer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::{FleetLaunchTemplate, contract};

    fn memory() -> MemoryEc2 {
        MemoryEc2::new("us-east-1").expect("the embedded catalogue")
    }

    fn discovery() -> Vec<Tag> {
        vec![Tag::new("karpenter.sh/discovery", "contract")]
    }

    /// The fixtures the contract suite needs, made through the in-memory EC2's own API.
    fn fixtures(ec2: &MemoryEc2) -> contract::Fixtures {
        let subnet = ec2.add_subnet(
            "us-east-1a",
            vec![Tag::new("karpenter.sh/discovery", "contract")],
        );
        let group = ec2.add_security_group(
            "contract",
            vec![Tag::new("karpenter.sh/discovery", "contract")],
        );
        let old = ec2.add_image(
            "contract-ami-1.0-x86_64",
            "x86_64",
            "2023-01-01T00:00:00.000Z",
            vec![],
        );
        let new = ec2.publish_image("contract-ami-2.0-x86_64", "x86_64", vec![]);
        contract::Fixtures {
            subnet_id: subnet.id,
            zone: subnet.zone,
            security_group_id: group.id,
            image_id: old.id,
            image_name_pattern: "contract-ami-*-x86_64".to_owned(),
            newest_image_id: new.id,
            partition_group_id: ec2
                .add_placement_group("contract-partition", "partition", Some(3))
                .id,
            cluster_group_id: ec2
                .add_placement_group("contract-cluster", "cluster", None)
                .id,
            reservation_id: ec2
                .add_capacity_reservation("m5.large", "us-east-1a", 2, false, false, discovery())
                .id,
            interruptible_reservation_id: ec2
                .add_capacity_reservation("m5.large", "us-east-1a", 1, true, false, discovery())
                .id,
        }
    }

    #[tokio::test]
    async fn contract_suite() {
        let ec2 = memory();
        let fixtures = fixtures(&ec2);
        contract::run_all(&ec2, &fixtures).await;
    }

    #[tokio::test]
    async fn contract_suite_behind_arc_dyn() {
        let ec2 = std::sync::Arc::new(memory());
        let fixtures = fixtures(&ec2);
        let shared: std::sync::Arc<dyn Ec2> = ec2;
        contract::run_all(shared.as_ref(), &fixtures).await;
    }

    fn fleet(
        template: &str,
        subnet: &str,
        types: &[&str],
        capacity_type: CapacityType,
    ) -> FleetRequest {
        FleetRequest {
            launch_templates: vec![FleetLaunchTemplate {
                name: template.to_owned(),
                overrides: types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| FleetOverride {
                        instance_type: (*t).to_owned(),
                        subnet_id: subnet.to_owned(),
                        priority: i as f64,
                    })
                    .collect(),
            }],
            capacity_type,
            target_capacity: 1,
            tags: vec![Tag::new("owner", "test")],
        }
    }

    async fn template(ec2: &MemoryEc2) -> (String, String) {
        let f = fixtures(ec2);
        let request = LaunchTemplateRequest {
            name: "lt".to_owned(),
            image_id: f.image_id,
            ..LaunchTemplateRequest::default()
        };
        ec2.create_launch_template(&request)
            .await
            .expect("template");
        (request.name, f.subnet_id)
    }

    #[tokio::test]
    async fn states_follow_the_clock() {
        let ec2 = memory();
        ec2.set_launch_delay(Duration::from_secs(30));
        ec2.set_termination_delay(Duration::from_secs(60));
        let (lt, subnet) = template(&ec2).await;
        let launched = ec2
            .create_fleet(&fleet(&lt, &subnet, &["m5.large"], CapacityType::OnDemand))
            .await
            .expect("fleet");
        let id = launched.instances[0].id.clone();
        assert_eq!(
            id, "i-000000000000000a",
            "ids are one deterministic counter"
        );
        let state = async || {
            ec2.describe_instances(&ResourceQuery::ids([id.clone()]))
                .await
                .expect("describe")[0]
                .state
                .clone()
        };
        assert_eq!(state().await, InstanceState::Pending);
        ec2.advance(Duration::from_secs(29));
        assert_eq!(state().await, InstanceState::Pending);
        ec2.advance(Duration::from_secs(1));
        assert_eq!(state().await, InstanceState::Running);
        let changes = ec2
            .terminate_instances(std::slice::from_ref(&id))
            .await
            .expect("terminate");
        assert_eq!(changes[0].previous, InstanceState::Running);
        assert_eq!(changes[0].current, InstanceState::ShuttingDown);
        ec2.advance(Duration::from_secs(59));
        assert_eq!(state().await, InstanceState::ShuttingDown);
        ec2.advance(Duration::from_secs(1));
        assert_eq!(state().await, InstanceState::Terminated);
    }

    #[tokio::test]
    async fn instances_asked_for_by_id_come_once_each_in_id_order_with_tags_still_filtering() {
        let ec2 = memory();
        let (lt, subnet) = template(&ec2).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let launched = ec2
                .create_fleet(&fleet(&lt, &subnet, &["m5.large"], CapacityType::OnDemand))
                .await
                .expect("fleet");
            ids.push(launched.instances[0].id.clone());
        }
        ec2.create_tags(&ids[1..2], &[Tag::new("role", "picked")])
            .await
            .expect("tags");
        let found = |query: ResourceQuery| {
            let ec2 = &ec2;
            async move {
                ec2.describe_instances(&query)
                    .await
                    .expect("describe")
                    .into_iter()
                    .map(|instance| instance.id)
                    .collect::<Vec<_>>()
            }
        };
        // Asked out of order and twice: each once, in id order, as a scan would give.
        let asked = [ids[2].clone(), ids[0].clone(), ids[2].clone()];
        assert_eq!(
            found(ResourceQuery::ids(asked)).await,
            [ids[0].clone(), ids[2].clone()]
        );
        // The tag filters still apply to the instances asked for by id.
        let mut tagged = ResourceQuery::ids(ids.clone());
        tagged.tags = vec![TagFilter::equals("role", "picked")];
        assert_eq!(found(tagged).await, [ids[1].clone()]);
        // An unknown id is an error, as before.
        let unknown = ec2
            .describe_instances(&ResourceQuery::ids(["i-ffffffffffffffff"]))
            .await;
        assert!(unknown.is_err());
        // No id: every instance.
        assert_eq!(found(ResourceQuery::default()).await, ids);
    }

    #[tokio::test]
    async fn capacity_errors_fall_through_to_the_next_override() {
        let ec2 = memory();
        let (lt, subnet) = template(&ec2).await;
        ec2.set_capacity_error(
            "m5.large",
            "us-east-1a",
            CapacityType::Spot,
            Some("InsufficientInstanceCapacity"),
        );
        let result = ec2
            .create_fleet(&fleet(
                &lt,
                &subnet,
                &["m5.large", "m5.xlarge"],
                CapacityType::Spot,
            ))
            .await
            .expect("fleet");
        assert_eq!(result.instances.len(), 1);
        assert_eq!(result.instances[0].instance_type, "m5.xlarge");
        assert_eq!(result.errors.len(), 1);
        assert!(result.errors[0].error.is_insufficient_capacity());
        assert_eq!(result.errors[0].instance_type.as_deref(), Some("m5.large"));

        // On-demand in the same pool is unaffected; clearing the error restores spot.
        let od = ec2
            .create_fleet(&fleet(&lt, &subnet, &["m5.large"], CapacityType::OnDemand))
            .await
            .expect("fleet");
        assert_eq!(od.instances[0].instance_type, "m5.large");
        ec2.set_capacity_error("m5.large", "us-east-1a", CapacityType::Spot, None);
        let spot = ec2
            .create_fleet(&fleet(&lt, &subnet, &["m5.large"], CapacityType::Spot))
            .await
            .expect("fleet");
        assert!(spot.errors.is_empty());
        assert_eq!(spot.instances[0].instance_type, "m5.large");
    }

    #[tokio::test]
    async fn all_overrides_failing_is_an_answer_not_an_error() {
        let ec2 = memory();
        let (lt, subnet) = template(&ec2).await;
        ec2.set_capacity_error(
            "m5.large",
            "us-east-1a",
            CapacityType::OnDemand,
            Some("UnfulfillableCapacity"),
        );
        let result = ec2
            .create_fleet(&fleet(
                &lt,
                &subnet,
                &["m5.large", "no.such"],
                CapacityType::OnDemand,
            ))
            .await
            .expect("fleet");
        assert!(result.instances.is_empty());
        assert_eq!(result.errors.len(), 2);
        assert!(
            result
                .errors
                .iter()
                .all(|e| e.error.is_insufficient_capacity())
        );
    }

    #[tokio::test]
    async fn spot_prices_default_below_on_demand_and_can_be_set() {
        let ec2 = memory();
        let types = ["m5.large".to_owned()];
        let prices = ec2
            .describe_spot_price_history(&types)
            .await
            .expect("prices");
        let on_demand = ec2.on_demand_price("m5.large").expect("priced");
        assert!(!prices.is_empty());
        assert!(prices.iter().all(|p| p.price > 0.0 && p.price < on_demand));
        ec2.advance(Duration::from_secs(5));
        ec2.set_spot_price("m5.large", "us-east-1a", 0.01);
        let prices = ec2
            .describe_spot_price_history(&types)
            .await
            .expect("prices");
        let a = prices
            .iter()
            .find(|p| p.zone == "us-east-1a")
            .expect("zone a");
        assert_eq!((a.price, a.timestamp), (0.01, 1_704_067_205));
    }

    #[tokio::test]
    async fn a_published_image_is_strictly_the_newest() {
        let ec2 = memory();
        let f = fixtures(&ec2);
        ec2.advance(Duration::from_secs(1));
        let newer = ec2.publish_image("contract-ami-3.0-x86_64", "x86_64", vec![]);
        let images = ec2
            .describe_images(&ImageQuery {
                names: vec![f.image_name_pattern],
                ..ImageQuery::default()
            })
            .await
            .expect("images");
        assert_eq!(images.len(), 3);
        let newest = images
            .iter()
            .max_by(|a, b| a.creation_date.cmp(&b.creation_date));
        assert_eq!(newest.map(|i| &i.id), Some(&newer.id));
        assert_eq!(newer.creation_date, "2024-01-01T00:00:01.000Z");
    }

    #[test]
    fn iso8601_dates() {
        assert_eq!(iso8601(START), "2024-01-01T00:00:00.000Z");
        assert_eq!(iso8601(Duration::from_secs(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601(Duration::from_secs(951_827_696)),
            "2000-02-29T12:34:56.000Z"
        );
    }
}
