//! The instance lifecycle behind Create, Delete, Get and List: launching a NodeClaim's
//! instance with launch templates and an instant CreateFleet, finding it again by its tags,
//! and terminating it, as upstream's `instance.go` and `cloudprovider.go` do.
//!
//! - [`fleet`]: which types, spot or on-demand, which overrides (pure).
//! - [`launch_template`]: the launch templates the fleet launches from.
//! - [`tags`]: what the plugin tags and how it finds its instances again.
//! - `error`: why a call failed ([`InstanceError`]) and its gRPC status; `provider_id`: the
//!   `aws:///<zone>/<instance id>` form; `lookup`: Delete, Get and List. This module keeps
//!   Create, the launch itself.
//!
//! Create is idempotent by NodeClaim name: the instance carries `karpenter.sh/nodeclaim`, and
//! a Create for a name that already has a live instance returns that instance. A second Create
//! for a name while the first is still running in this process answers ABORTED rather than
//! racing it to a second launch. No CreateFleet client token is sent: EC2 would answer a retry
//! carrying the same token but other overrides (the failed ones now marked unavailable) with
//! `IdempotentParameterMismatch`, and a token cannot tell a lost answer from a launch that
//! really failed; the tag lookup covers the lost answer.

mod error;
pub mod fleet;
pub mod launch_template;
mod lookup;
mod provider_id;
pub mod tags;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::labels::{
    LABEL_CAPACITY_RESERVATION_ID, LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    LABEL_CAPACITY_RESERVATION_TYPE, LABEL_PLACEMENT_GROUP_PARTITION, LABEL_TOPOLOGY_ZONE_ID,
};
use core_domain::instance_type::InstanceType;
use core_domain::labels::{
    CAPACITY_TYPE_RESERVED, LABEL_CAPACITY_TYPE, LABEL_DO_NOT_SYNC_TAINTS, LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL, LABEL_TOPOLOGY_ZONE,
};
use core_domain::requirements::Requirements;
use core_domain::resources::ResourceName;
use k8s_openapi::api::core::v1::Taint;
use provider_sdk::v1;

use crate::apis::ec2nodeclass::AMIFamily;
use crate::aws_error::AwsError;
use crate::bootstrap::{self, Bootstrap, BootstrapError, ClusterSettings};
use crate::ec2::{
    CapacityType, Ec2, FleetLaunchTemplate, FleetOverride, FleetRequest, FleetResult, Instance,
    InstanceState, LaunchTemplateRequest, Placement, PlacementGroup, ReservationTarget,
    ResourceQuery, TagFilter,
};
use crate::instance_type_provider::{Clock, InstanceTypeError, InstanceTypeProvider, SystemClock};
use crate::node_class::{ClusterIdentity, ResolvedNodeClass};

use fleet::{Constraints, Plan, PlanError, ReservedOption};
use launch_template::{LaunchConfig, LaunchTemplates};

use error::bootstrap_error;
pub use error::{InstanceError, Tried};
use provider_id::is_instance_id;
pub use provider_id::{parse_provider_id, provider_id};

/// The taint every node registers with until core has seen it join (upstream's
/// `UnregisteredNoExecuteTaint`).
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

/// How many instances a List page holds when the caller lets the plugin choose.
pub const DEFAULT_PAGE_SIZE: usize = 500;

/// Launches, finds and terminates the instances of NodeClaims.
#[derive(Debug)]
pub struct InstanceProvider {
    ec2: Arc<dyn Ec2>,
    instance_types: Arc<InstanceTypeProvider>,
    cluster: ClusterIdentity,
    bootstrap: ClusterSettings,
    clock: Arc<dyn Clock>,
    launch_templates: LaunchTemplates,
    /// NodeClaim names with a Create running in this process.
    creating: Mutex<HashSet<String>>,
}

/// A Create's claim on a NodeClaim name, released when the Create ends however it ends.
struct Creating<'a> {
    names: &'a Mutex<HashSet<String>>,
    name: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        lock(self.names).remove(&self.name);
    }
}

/// A poisoned lock only means another request panicked; the set of names is still usable.
fn lock(names: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The validated parts of a Create request.
struct LaunchRequest<'a> {
    node_claim: &'a v1::NodeClaim,
    requirements: core_domain::requirements::Requirements,
    requests: core_domain::resources::ResourceList,
    taints: Vec<Taint>,
}

impl<'a> LaunchRequest<'a> {
    fn parse(node_claim: &'a v1::NodeClaim) -> Result<Self, InstanceError> {
        if node_claim.name.is_empty() {
            return Err(InstanceError::invalid("node_claim.name", "missing"));
        }
        let spec = node_claim
            .spec
            .as_ref()
            .ok_or_else(|| InstanceError::invalid("node_claim.spec", "missing"))?;
        if spec.requirements.is_empty() {
            return Err(InstanceError::invalid(
                "node_claim.spec.requirements",
                "empty; at least the instance types to choose from are required",
            ));
        }
        let requirements = fleet::requirements(&spec.requirements, "node_claim.spec.requirements")
            .map_err(|(field, message)| InstanceError::invalid(field, message))?;
        let requests =
            fleet::resource_list(&spec.resource_requests, "node_claim.spec.resource_requests")
                .map_err(|(field, message)| InstanceError::invalid(field, message))?;
        let mut taints = Vec::new();
        for (field, list) in [
            ("node_claim.spec.taints", &spec.taints),
            ("node_claim.spec.startup_taints", &spec.startup_taints),
        ] {
            for (i, taint) in list.iter().enumerate() {
                taints.push(k8s_taint(taint, &format!("{field}[{i}]"))?);
            }
        }
        taints.push(Taint {
            key: UNREGISTERED_TAINT_KEY.to_owned(),
            effect: "NoExecute".to_owned(),
            ..Taint::default()
        });
        Ok(Self {
            node_claim,
            requirements,
            requests,
            taints,
        })
    }

    fn node_pool(&self) -> &str {
        self.node_claim
            .labels
            .get(LABEL_NODEPOOL)
            .map_or("", String::as_str)
    }
}

fn k8s_taint(taint: &v1::Taint, field: &str) -> Result<Taint, InstanceError> {
    if taint.key.is_empty() {
        return Err(InstanceError::invalid(format!("{field}.key"), "empty"));
    }
    let effect = match v1::TaintEffect::try_from(taint.effect) {
        Ok(v1::TaintEffect::NoSchedule) => "NoSchedule",
        Ok(v1::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
        Ok(v1::TaintEffect::NoExecute) => "NoExecute",
        Ok(v1::TaintEffect::Unspecified) | Err(_) => {
            return Err(InstanceError::invalid(
                format!("{field}.effect"),
                format!("{} is not a known taint effect", taint.effect),
            ));
        }
    };
    Ok(Taint {
        key: taint.key.clone(),
        value: (!taint.value.is_empty()).then(|| taint.value.clone()),
        effect: effect.to_owned(),
        time_added: None,
    })
}

/// What was launched (or found launched), as hydration needs it.
#[derive(Debug, Clone)]
struct Launched {
    id: String,
    instance_type: String,
    zone: String,
    zone_id: Option<String>,
    capacity_type: CapacityType,
    image_id: Option<String>,
    state: InstanceState,
    launch_time: Option<i64>,
    /// Its partition of a partition placement group, when known.
    partition: Option<i32>,
    /// The capacity reservation it runs in.
    reservation: Option<ReservedOption>,
}

impl Launched {
    /// An instance found launched, with its zone ID and the reservation it runs in as the
    /// node class knows them.
    fn from_instance(instance: &Instance, resolved: &ResolvedNodeClass) -> Self {
        let reservation = instance.capacity_reservation_id.as_ref().map(|id| {
            let known = resolved
                .capacity_reservations
                .iter()
                .find(|r| r.reservation.id == *id);
            ReservedOption {
                id: id.clone(),
                reservation_type: known.map_or_else(
                    || "default".to_owned(),
                    |r| r.reservation.reservation_type.clone(),
                ),
                interruptible: known.is_some_and(|r| r.reservation.interruptible),
            }
        });
        Self {
            id: instance.id.clone(),
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone().unwrap_or_default(),
            zone_id: zone_id_of(resolved, instance.subnet_id.as_deref()),
            capacity_type: instance.capacity_type,
            image_id: instance.image_id.clone(),
            state: instance.state.clone(),
            launch_time: instance.launch_time,
            partition: instance.partition_number,
            reservation,
        }
    }
}

/// Where in the node class's placement group to launch: the group, and in a partition group
/// the lowest partition the NodeClaim allows when it narrows them (upstream also takes the
/// lowest; EC2 takes one partition per launch); EC2 spreads the instances when every
/// partition is allowed.
fn placement(group: Option<&PlacementGroup>, requirements: &Requirements) -> Option<Placement> {
    let group = group?;
    let partition_number = group
        .partition_count
        .filter(|_| group.strategy == "partition")
        .and_then(|count| {
            let requirement = requirements.get(LABEL_PLACEMENT_GROUP_PARTITION)?;
            let allowed: Vec<i32> = (1..=count)
                .filter(|p| requirement.has(&p.to_string()))
                .collect();
            (allowed.len() < usize::try_from(count).unwrap_or(usize::MAX))
                .then(|| allowed.first().copied())
                .flatten()
        });
    Some(Placement {
        group_id: group.id.clone(),
        partition_number,
    })
}

/// One launch template of a Create and the overrides launched from it.
struct TemplateGroup {
    request: LaunchTemplateRequest,
    overrides: Vec<FleetOverride>,
}

impl InstanceProvider {
    /// A provider launching into `cluster` with nodes joining through `bootstrap`, pricing and
    /// marking offerings through `instance_types`.
    pub fn new(
        ec2: Arc<dyn Ec2>,
        instance_types: Arc<InstanceTypeProvider>,
        cluster: ClusterIdentity,
        bootstrap: ClusterSettings,
    ) -> Self {
        Self {
            ec2,
            instance_types,
            cluster,
            bootstrap,
            clock: Arc::new(SystemClock),
            launch_templates: LaunchTemplates::default(),
            creating: Mutex::new(HashSet::new()),
        }
    }

    /// The same provider reading the time (creation and deletion timestamps of answers) from
    /// `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn claim(&self, name: &str) -> Result<Creating<'_>, InstanceError> {
        if !lock(&self.creating).insert(name.to_owned()) {
            return Err(InstanceError::InProgress(name.to_owned()));
        }
        Ok(Creating {
            names: &self.creating,
            name: name.to_owned(),
        })
    }

    /// Launches an instance for `node_claim` from the node class `resolved` (whose JSON,
    /// `node_class_json`, configures the instance types). Idempotent by NodeClaim name: an
    /// instance already launched for the name is returned and nothing is launched.
    pub async fn create(
        &self,
        node_claim: &v1::NodeClaim,
        node_class_json: &serde_json::Value,
        resolved: &ResolvedNodeClass,
    ) -> Result<v1::NodeClaim, InstanceError> {
        let request = LaunchRequest::parse(node_claim)?;
        if self.cluster.name.is_empty() {
            return Err(InstanceError::Misconfigured(
                "no cluster name is configured (--cluster-name); instances could not be tagged as the cluster's"
                    .to_owned(),
            ));
        }
        if !resolved.is_ready() {
            return Err(InstanceError::NodeClassNotReady {
                node_class: resolved.name().to_owned(),
                message: resolved
                    .not_ready_message()
                    .unwrap_or_else(|| format!("EC2NodeClass {} is not ready", resolved.name())),
            });
        }
        let _creating = self.claim(&node_claim.name)?;
        // The placement group narrows the types (and splits a partition group's offerings by
        // partition); zones and images are the plan's to check, naming what left nothing.
        let catalogue = self
            .instance_types
            .placed_instance_types(
                Some(node_class_json),
                &self.instance_types.resolved(resolved),
            )
            .await?;
        if let Some(existing) = self.launched_for(&node_claim.name).await? {
            tracing::info!(
                node_claim = %node_claim.name,
                instance = %existing.id,
                "already launched; returning the instance"
            );
            let launched = Launched::from_instance(&existing, resolved);
            let instance_type = catalogue.iter().find(|t| t.name == existing.instance_type);
            return Ok(self.hydrate(node_claim, &launched, instance_type));
        }
        let types: Vec<InstanceType> = catalogue
            .iter()
            .filter_map(|pb| match fleet::instance_type(pb) {
                Ok(t) => Some(t),
                Err((field, message)) => {
                    // Built by this plugin's own code: a type that does not convert is a bug,
                    // skipped so it cannot block every launch.
                    tracing::warn!(instance_type = %pb.name, field, message, "skipping an instance type that does not convert");
                    None
                }
            })
            .collect();
        let subnets = resolved.subnet_per_zone();
        let architectures: BTreeSet<&str> = resolved
            .images
            .iter()
            .map(|i| i.architecture.as_str())
            .collect();
        let plan = fleet::plan(
            &types,
            &Constraints {
                requirements: &request.requirements,
                requests: &request.requests,
                subnets: &subnets,
                architectures: &architectures,
            },
        )
        .map_err(|e| match e {
            PlanError::NoCapacity(why) => InstanceError::InsufficientCapacity {
                why,
                tried: Tried::asked(&request.requirements),
            },
            PlanError::MinValues(_) => {
                InstanceError::invalid("node_claim.spec.requirements", e.to_string())
            }
        })?;
        let launch_tags = tags::launch_tags(
            &self.cluster.name,
            request.node_pool(),
            resolved.name(),
            &resolved.node_class.spec.tags,
        );
        let placement = placement(resolved.placement_group.as_ref(), &request.requirements);
        let groups = self.template_groups(
            &request,
            resolved,
            &types,
            &plan,
            &launch_tags,
            placement.as_ref(),
        )?;
        for group in &groups {
            self.launch_templates
                .ensure(self.ec2.as_ref(), &group.request)
                .await?;
        }
        let fleet_request = FleetRequest {
            launch_templates: groups
                .iter()
                .map(|g| FleetLaunchTemplate {
                    name: g.request.name.clone(),
                    overrides: g.overrides.clone(),
                })
                .collect(),
            capacity_type: plan.capacity_type,
            target_capacity: 1,
            tags: tags::instance_tags(&launch_tags, &node_claim.name),
        };
        let result = self.create_fleet(&fleet_request, &groups).await?;
        self.mark_unavailable(&result, &plan);
        let Some(instance) = result.instances.first() else {
            return Err(fleet_failure(&result, &plan));
        };
        let option = plan.options.iter().find(|o| {
            o.instance_type == instance.instance_type
                && instance
                    .subnet_id
                    .as_ref()
                    .is_none_or(|s| *s == o.subnet_id)
                && instance.zone.as_ref().is_none_or(|z| *z == o.zone)
        });
        let image_id = option.and_then(|o| {
            groups
                .iter()
                .find(|g| {
                    g.overrides
                        .iter()
                        .any(|v| v.instance_type == o.instance_type && v.subnet_id == o.subnet_id)
                })
                .map(|g| g.request.image_id.clone())
        });
        let launched = Launched {
            id: instance.id.clone(),
            instance_type: instance.instance_type.clone(),
            zone: instance
                .zone
                .clone()
                .or_else(|| option.map(|o| o.zone.clone()))
                .unwrap_or_default(),
            zone_id: option.and_then(|o| o.zone_id.clone()),
            capacity_type: plan.capacity_type,
            image_id,
            state: InstanceState::Pending,
            launch_time: None,
            reservation: option.and_then(|o| o.reservation.clone()),
            partition: match &placement {
                Some(Placement {
                    partition_number: Some(partition),
                    ..
                }) => Some(*partition),
                Some(_)
                    if resolved
                        .placement_group
                        .as_ref()
                        .is_some_and(|g| g.strategy == "partition") =>
                {
                    self.partition_of(&instance.id).await
                }
                _ => None,
            },
        };
        if let Some(reservation) = &launched.reservation {
            self.instance_types.launched_into(&reservation.id);
        }
        tracing::info!(
            node_claim = %node_claim.name,
            instance = %launched.id,
            instance_type = %launched.instance_type,
            zone = %launched.zone,
            capacity_type = plan.capacity_type.as_str(),
            "launched instance"
        );
        let instance_type = catalogue.iter().find(|t| t.name == launched.instance_type);
        Ok(self.hydrate(node_claim, &launched, instance_type))
    }

    /// One launch template per distinct configuration among the plan's options (an image per
    /// architecture, user data per pod density), each with the overrides it launches;
    /// priorities rank the options across all of them.
    fn template_groups(
        &self,
        request: &LaunchRequest<'_>,
        resolved: &ResolvedNodeClass,
        types: &[InstanceType],
        plan: &Plan,
        launch_tags: &[crate::ec2::Tag],
        placement: Option<&Placement>,
    ) -> Result<Vec<TemplateGroup>, InstanceError> {
        let by_name: HashMap<&str, &InstanceType> = types.iter().map(|t| (t.name(), t)).collect();
        let labels = self.bootstrap_labels(
            request.node_claim,
            resolved.family,
            plan.capacity_type_label(),
        );
        let spec = &resolved.node_class.spec;
        let mut groups: Vec<TemplateGroup> = Vec::new();
        let mut group_of_config: HashMap<(String, i64, Option<String>), usize> = HashMap::new();
        for (rank, option) in plan.options.iter().enumerate() {
            let Some(instance_type) = by_name.get(option.instance_type.as_str()) else {
                continue;
            };
            let Some(architecture) = fleet::architecture(instance_type) else {
                continue;
            };
            let pods = instance_type.capacity().get(&ResourceName::PODS);
            // A reserved option's template targets its reservation.
            let reservation = option.reservation.as_ref().map(|r| r.id.clone());
            let key = (architecture.to_owned(), pods, reservation);
            let index = match group_of_config.get(&key) {
                Some(index) => *index,
                None => {
                    let Some(image) = resolved.image_for(architecture) else {
                        continue;
                    };
                    let user_data = bootstrap::user_data(&Bootstrap {
                        family: resolved.family,
                        cluster: &self.bootstrap,
                        user_data: spec.user_data.as_deref(),
                        kubelet: spec.kubelet.as_ref(),
                        max_pods: Some(pods),
                        labels: &labels,
                        taints: &request.taints,
                    })
                    .map_err(bootstrap_error)?;
                    let template = launch_template::request(&LaunchConfig {
                        node_class: &resolved.node_class,
                        family: resolved.family,
                        image_id: &image.id,
                        security_group_ids: resolved
                            .security_groups
                            .iter()
                            .map(|g| g.id.clone())
                            .collect(),
                        instance_profile: resolved.instance_profile.clone(),
                        user_data: (!user_data.is_empty()).then_some(user_data),
                        placement: placement.cloned(),
                        capacity_reservation: option.reservation.as_ref().map(|r| {
                            ReservationTarget {
                                id: r.id.clone(),
                                capacity_block: r.is_capacity_block(),
                            }
                        }),
                        tags: launch_tags.to_vec(),
                    })
                    .map_err(|(field, message)| InstanceError::invalid(field, message))?;
                    // Configurations differing only where the family ignores it (the pod
                    // density of a Custom image) share one template.
                    let index = match groups.iter().position(|g| g.request.name == template.name) {
                        Some(index) => index,
                        None => {
                            groups.push(TemplateGroup {
                                request: template,
                                overrides: Vec::new(),
                            });
                            groups.len() - 1
                        }
                    };
                    group_of_config.insert(key, index);
                    index
                }
            };
            if let Some(group) = groups.get_mut(index) {
                group.overrides.push(FleetOverride {
                    instance_type: option.instance_type.clone(),
                    subnet_id: option.subnet_id.clone(),
                    priority: rank as f64,
                });
            }
        }
        Ok(groups)
    }

    /// The labels the node registers with: the NodeClaim's, its capacity type, and (for the
    /// families whose bootstrap registers the startup taints itself) upstream's label telling
    /// core not to sync taints.
    fn bootstrap_labels(
        &self,
        node_claim: &v1::NodeClaim,
        family: AMIFamily,
        capacity_type: &str,
    ) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> = node_claim
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(LABEL_CAPACITY_TYPE.to_owned(), capacity_type.to_owned());
        if family != AMIFamily::Custom {
            labels.insert(LABEL_DO_NOT_SYNC_TAINTS.to_owned(), "true".to_owned());
        }
        labels
    }

    /// CreateFleet; a launch template deleted behind the plugin's back is recreated and the
    /// fleet tried once more (upstream does the same).
    async fn create_fleet(
        &self,
        request: &FleetRequest,
        groups: &[TemplateGroup],
    ) -> Result<FleetResult, InstanceError> {
        match self.ec2.create_fleet(request).await {
            Err(e) if e.is_not_found() && e.code().contains("LaunchTemplate") => {
                tracing::info!(error = %e, "a launch template is gone; creating it again");
                for group in groups {
                    self.launch_templates.forget(&group.request.name);
                }
                for group in groups {
                    self.launch_templates
                        .ensure(self.ec2.as_ref(), &group.request)
                        .await?;
                }
                Ok(self.ec2.create_fleet(request).await?)
            }
            other => Ok(other?),
        }
    }

    /// Marks every offering the fleet found without capacity unavailable.
    fn mark_unavailable(&self, result: &FleetResult, plan: &Plan) {
        let zone_of_subnet: HashMap<&str, &str> = plan
            .options
            .iter()
            .map(|o| (o.subnet_id.as_str(), o.zone.as_str()))
            .collect();
        for failure in &result.errors {
            if !failure.error.is_insufficient_capacity() {
                continue;
            }
            let zone = failure
                .subnet_id
                .as_deref()
                .and_then(|s| zone_of_subnet.get(s));
            if let (Some(instance_type), Some(zone)) = (&failure.instance_type, zone) {
                tracing::info!(
                    instance_type = %instance_type,
                    zone = %zone,
                    capacity_type = plan.capacity_type_label(),
                    code = failure.error.code(),
                    "offering out of capacity; marked unavailable"
                );
                self.instance_types.mark_unavailable(
                    instance_type,
                    zone,
                    plan.capacity_type_label(),
                );
            }
        }
    }

    /// The partition EC2 put `instance_id` in, for a launch into a partition group that left
    /// the choice to EC2 (upstream reads it back at registration). Unknown when EC2 does not
    /// say or cannot be asked now: the node then goes without the label, never with a wrong one.
    async fn partition_of(&self, instance_id: &str) -> Option<i32> {
        match self
            .ec2
            .describe_instances(&ResourceQuery::ids([instance_id]))
            .await
        {
            Ok(instances) => instances
                .iter()
                .find(|i| i.id == instance_id)
                .and_then(|i| i.partition_number),
            Err(error) => {
                tracing::warn!(instance = instance_id, %error, "could not read the instance's placement partition");
                None
            }
        }
    }

    /// The live (not shutting down, not terminated) instance launched for a NodeClaim.
    async fn launched_for(&self, node_claim: &str) -> Result<Option<Instance>, InstanceError> {
        let mut live: Vec<Instance> = self
            .tagged_for(node_claim)
            .await?
            .into_iter()
            .filter(|i| !i.state.is_terminating())
            .collect();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live.into_iter().next())
    }

    /// Every instance of this cluster tagged with the NodeClaim's name.
    async fn tagged_for(&self, node_claim: &str) -> Result<Vec<Instance>, AwsError> {
        self.ec2
            .describe_instances(&ResourceQuery::tags(vec![
                TagFilter::equals(tags::TAG_NODECLAIM, node_claim),
                tags::cluster_filter(&self.cluster.name),
            ]))
            .await
    }

    /// The NodeClaim as Create answers it: the labels the launch resolved (every single
    /// value of the type's requirements, then instance type, zone, zone ID, capacity type),
    /// the provider ID, the image, capacity and allocatable, the state.
    fn hydrate(
        &self,
        node_claim: &v1::NodeClaim,
        launched: &Launched,
        instance_type: Option<&v1::InstanceType>,
    ) -> v1::NodeClaim {
        let mut labels: HashMap<String, String> = HashMap::new();
        let mut capacity = HashMap::new();
        let mut allocatable = HashMap::new();
        if let Some(instance_type) = instance_type {
            for requirement in &instance_type.requirements {
                if requirement.operator == v1::Operator::In as i32
                    && let [value] = requirement.values.as_slice()
                {
                    labels.insert(requirement.key.clone(), value.clone());
                }
            }
            capacity = instance_type
                .capacity
                .iter()
                .filter(|(_, q)| {
                    core_domain::quantity::Quantity::parse(q).is_ok_and(|q| !q.is_zero())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if let Ok(domain) = fleet::instance_type(instance_type) {
                allocatable = domain
                    .allocatable()
                    .to_quantities()
                    .into_iter()
                    .map(|(name, quantity)| (name.as_str().to_owned(), quantity.to_string()))
                    .collect();
            }
            if launched.zone_id.is_none() {
                // The offering's zone ID, when the catalogue knows it.
                let from_offering = instance_type
                    .offerings
                    .iter()
                    .filter(|o| o.zone == launched.zone)
                    .flat_map(|o| &o.requirements)
                    .find(|r| r.key == LABEL_TOPOLOGY_ZONE_ID)
                    .and_then(|r| r.values.first());
                if let Some(zone_id) = from_offering {
                    labels.insert(LABEL_TOPOLOGY_ZONE_ID.to_owned(), zone_id.clone());
                }
            }
        }
        labels.insert(
            LABEL_INSTANCE_TYPE.to_owned(),
            launched.instance_type.clone(),
        );
        labels.insert(LABEL_TOPOLOGY_ZONE.to_owned(), launched.zone.clone());
        if let Some(zone_id) = &launched.zone_id {
            labels.insert(LABEL_TOPOLOGY_ZONE_ID.to_owned(), zone_id.clone());
        }
        // The type's reservations are its offerings', not this node's: only a node in a
        // reservation carries its labels.
        for key in [
            LABEL_CAPACITY_RESERVATION_ID,
            LABEL_CAPACITY_RESERVATION_TYPE,
            LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
        ] {
            labels.remove(key);
        }
        match &launched.reservation {
            Some(reservation) => {
                labels.insert(
                    LABEL_CAPACITY_TYPE.to_owned(),
                    CAPACITY_TYPE_RESERVED.to_owned(),
                );
                labels.insert(
                    LABEL_CAPACITY_RESERVATION_ID.to_owned(),
                    reservation.id.clone(),
                );
                labels.insert(
                    LABEL_CAPACITY_RESERVATION_TYPE.to_owned(),
                    reservation.reservation_type.clone(),
                );
                labels.insert(
                    LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(),
                    reservation.interruptible.to_string(),
                );
            }
            None => {
                labels.insert(
                    LABEL_CAPACITY_TYPE.to_owned(),
                    launched.capacity_type.as_str().to_owned(),
                );
            }
        }
        if let Some(partition) = launched.partition {
            labels.insert(
                LABEL_PLACEMENT_GROUP_PARTITION.to_owned(),
                partition.to_string(),
            );
        }
        v1::NodeClaim {
            name: node_claim.name.clone(),
            uid: node_claim.uid.clone(),
            labels,
            annotations: HashMap::new(),
            creation_timestamp: Some(
                launched
                    .launch_time
                    .map_or_else(|| timestamp(self.clock.utc_now()), seconds_timestamp),
            ),
            deletion_timestamp: launched
                .state
                .is_terminating()
                .then(|| timestamp(self.clock.utc_now())),
            spec: node_claim.spec.clone(),
            status: Some(v1::NodeClaimStatus {
                provider_id: provider_id(&launched.zone, &launched.id),
                image_id: launched.image_id.clone().unwrap_or_default(),
                capacity,
                allocatable,
                instance_state: instance_state(&launched.state) as i32,
            }),
        }
    }
}

/// The zone ID of a subnet the node class selects.
fn zone_id_of(resolved: &ResolvedNodeClass, subnet_id: Option<&str>) -> Option<String> {
    let subnet_id = subnet_id?;
    resolved
        .subnets
        .iter()
        .find(|s| s.id == subnet_id)
        .and_then(|s| s.zone_id.clone())
}

/// The error of a fleet that launched nothing: insufficient capacity when every override
/// failed for capacity (upstream's rule), otherwise the first other AWS error with every
/// distinct failure in the message.
fn fleet_failure(result: &FleetResult, plan: &Plan) -> InstanceError {
    let distinct: BTreeSet<String> = result
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.error.code(), e.error.message()))
        .collect();
    let summary = distinct.into_iter().collect::<Vec<_>>().join("; ");
    match result
        .errors
        .iter()
        .find(|e| !e.error.is_insufficient_capacity())
    {
        None if !result.errors.is_empty() => InstanceError::InsufficientCapacity {
            why: format!(
                "CreateFleet launched none of the {} offerings tried: {summary}",
                result.errors.len()
            ),
            tried: Tried::plan(plan),
        },
        None => InstanceError::Aws(AwsError::from_code(
            "NoInstanceLaunched",
            "CreateFleet launched no instance and reported no error",
        )),
        Some(first) => InstanceError::Aws(AwsError::from_code(
            first.error.code(),
            format!("CreateFleet launched nothing: {summary}"),
        )),
    }
}

fn instance_state(state: &InstanceState) -> v1::InstanceState {
    match state {
        InstanceState::Pending => v1::InstanceState::Pending,
        InstanceState::Running => v1::InstanceState::Running,
        InstanceState::Stopping => v1::InstanceState::Stopping,
        InstanceState::Stopped => v1::InstanceState::Stopped,
        InstanceState::ShuttingDown | InstanceState::Terminated => v1::InstanceState::Terminating,
        InstanceState::Other(_) => v1::InstanceState::Unspecified,
    }
}

fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

fn seconds_timestamp(seconds: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos: 0 }
}

#[cfg(test)]
mod tests;
