//! EC2NodeClass resolution: what a node class selects right now (images, subnets, security
//! groups, instance profile), its readiness, and its static hash. ResolveNodeClass publishes
//! it; Create launches from it; IsDrifted compares instances against it. All three use the
//! same resolution (cached briefly), so an instance launched from a newly published image is
//! never reported drifted by a stale view.

pub mod amis;
pub mod hash;
pub mod instance_profile;
pub mod parse;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::apis::EC2NodeClass;
use crate::apis::ec2nodeclass::AMIFamily;
use crate::apis::status::{
    CONDITION_AMIS_READY, CONDITION_CAPACITY_RESERVATIONS_READY, CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_PLACEMENT_GROUP_READY, CONDITION_SECURITY_GROUPS_READY, CONDITION_SUBNETS_READY,
    CONDITION_VALIDATION_SUCCEEDED,
};
use crate::aws_error::AwsError;
use crate::ec2::{
    CapacityReservation, CapacityReservationQuery, Ec2, PlacementGroup, PlacementGroupQuery,
    ResourceQuery, SecurityGroupQuery,
};
use crate::iam::Iam;
use crate::instance_type_provider::Clock;
use crate::ssm::Ssm;

pub use amis::ResolvedImage;
pub use parse::{InvalidNodeClass, parse_node_class};

/// How long a resolution is reused. Short: a newly published image or a retagged subnet shows
/// within a minute, while a burst of Creates and IsDrifted calls (one per NodeClaim) costs
/// one round of EC2 calls.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(60);

/// When core should resolve again even if the node class does not change (to pick up
/// new images): upstream's node class controller period.
pub const RESOLVE_AGAIN_AFTER: Duration = Duration::from_secs(5 * 60);

/// What the plugin knows about its cluster, for the names and tags of what it creates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterIdentity {
    /// The cluster's name (`--cluster-name`).
    pub name: String,
    /// The region.
    pub region: String,
    /// The cluster's Kubernetes version (`1.33`), needed to resolve image aliases.
    pub kubernetes_version: Option<String>,
}

/// A subnet a node class selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSubnet {
    /// `subnet-...`.
    pub id: String,
    /// `us-east-1a`.
    pub zone: String,
    /// `use1-az1`, when EC2 says.
    pub zone_id: Option<String>,
    /// Free IPv4 addresses when resolved.
    pub available_ips: i64,
}

/// A security group a node class selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// The group's name.
    pub name: String,
}

/// How long before its end a capacity block is `expiring`: EC2 reclaims its instances in that
/// window, so nothing more is launched into it (upstream's `capacityReservationExpirationPeriod`).
pub const CAPACITY_BLOCK_EXPIRATION_WINDOW: Duration = Duration::from_secs(40 * 60);

/// A capacity reservation a node class selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedReservation {
    /// As EC2 describes it (its available count as of the resolution).
    pub reservation: CapacityReservation,
    /// A capacity block within [`CAPACITY_BLOCK_EXPIRATION_WINDOW`] of its end.
    pub expiring: bool,
}

impl ResolvedReservation {
    /// A capacity block (launched with the `capacity-block` market type).
    pub fn is_capacity_block(&self) -> bool {
        self.reservation.reservation_type == "capacity-block"
    }
}

/// One readiness condition of the node class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// `AMIsReady`, `SubnetsReady`, ...
    pub type_: &'static str,
    /// Whether it holds.
    pub ready: bool,
    /// UpperCamelCase reason when not ready.
    pub reason: String,
    /// For people, when not ready.
    pub message: String,
}

/// A node class and what it resolves to now.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNodeClass {
    /// The node class as parsed (spec defaulted).
    pub node_class: EC2NodeClass,
    /// The AMI family in effect (bootstrap format); `Custom` when none is named.
    pub family: AMIFamily,
    /// Every image selected, newest first.
    pub images: Vec<ResolvedImage>,
    /// The subnets selected, most free addresses first.
    pub subnets: Vec<ResolvedSubnet>,
    /// The security groups selected, by id.
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// The instance profile nodes run with, when it exists.
    pub instance_profile: Option<String>,
    /// The placement group `placementGroupSelector` found, when it names one that exists.
    pub placement_group: Option<PlacementGroup>,
    /// The active capacity reservations `capacityReservationSelectorTerms` select, by id.
    pub capacity_reservations: Vec<ResolvedReservation>,
    /// AMIsReady, SubnetsReady, SecurityGroupsReady, InstanceProfileReady,
    /// PlacementGroupReady, CapacityReservationsReady, ValidationSucceeded.
    pub conditions: Vec<Readiness>,
    /// The static hash ([`hash::static_hash`]).
    pub static_hash: String,
    /// When it was resolved (what EC2 counted in the reservations is as of then).
    pub resolved_at: Instant,
}

impl ResolvedNodeClass {
    /// The node class's name.
    pub fn name(&self) -> &str {
        parse::name_of(&self.node_class)
    }

    /// Whether nodes can be launched from it.
    pub fn is_ready(&self) -> bool {
        self.conditions.iter().all(|c| c.ready)
    }

    /// Why it is not ready (every failing condition), or `None`.
    pub fn not_ready_message(&self) -> Option<String> {
        let failing: Vec<String> = self
            .conditions
            .iter()
            .filter(|c| !c.ready)
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect();
        (!failing.is_empty()).then(|| {
            format!(
                "EC2NodeClass {} is not ready: {}",
                self.name(),
                failing.join("; ")
            )
        })
    }

    /// The image launches use for `architecture` (Kubernetes spelling).
    pub fn image_for(&self, architecture: &str) -> Option<&ResolvedImage> {
        amis::newest_for(&self.images, architecture)
    }

    /// The subnet launches use in each zone: the one with the most free addresses, as
    /// upstream.
    pub fn subnet_per_zone(&self) -> BTreeMap<&str, &ResolvedSubnet> {
        let mut per_zone: BTreeMap<&str, &ResolvedSubnet> = BTreeMap::new();
        for subnet in &self.subnets {
            per_zone.entry(subnet.zone.as_str()).or_insert(subnet);
        }
        per_zone
    }

    /// The `status` fields to publish (all but conditions), as upstream's EC2NodeClass
    /// status: `amis` (with the architecture requirement), `subnets`, `securityGroups`,
    /// `instanceProfile`.
    pub fn status_json(&self) -> serde_json::Value {
        let amis: Vec<serde_json::Value> = self
            .images
            .iter()
            .map(|image| {
                let mut ami = serde_json::json!({
                    "id": image.id,
                    "name": image.name,
                    "requirements": [{
                        "key": "kubernetes.io/arch",
                        "operator": "In",
                        "values": [image.architecture],
                    }],
                });
                if image.deprecated {
                    ami["deprecated"] = true.into();
                }
                ami
            })
            .collect();
        let subnets: Vec<serde_json::Value> = self
            .subnets
            .iter()
            .map(|s| {
                let mut subnet = serde_json::json!({"id": s.id, "zone": s.zone});
                if let Some(zone_id) = &s.zone_id {
                    subnet["zoneID"] = zone_id.clone().into();
                }
                subnet
            })
            .collect();
        let security_groups: Vec<serde_json::Value> = self
            .security_groups
            .iter()
            .map(|g| serde_json::json!({"id": g.id, "name": g.name}))
            .collect();
        let mut status = serde_json::json!({
            "amis": amis,
            "subnets": subnets,
            "securityGroups": security_groups,
        });
        if let Some(profile) = &self.instance_profile {
            status["instanceProfile"] = profile.clone().into();
        }
        if !self.capacity_reservations.is_empty() {
            status["capacityReservations"] = self
                .capacity_reservations
                .iter()
                .map(|resolved| {
                    let r = &resolved.reservation;
                    let mut entry = serde_json::json!({
                        "availabilityZone": r.zone,
                        "id": r.id,
                        "instanceMatchCriteria": r.instance_match_criteria,
                        "instanceType": r.instance_type,
                        "ownerID": r.owner_id,
                        "reservationType": r.reservation_type,
                        "state": if resolved.expiring { "expiring" } else { "active" },
                        "interruptible": r.interruptible,
                    });
                    if let Some(end) = r.end_date.and_then(|s| u64::try_from(s).ok()) {
                        entry["endTime"] =
                            iso8601(std::time::UNIX_EPOCH + Duration::from_secs(end)).into();
                    }
                    entry
                })
                .collect();
        }
        status
    }
}

/// Why a node class could not be resolved at all (not-ready is not an error: it is a
/// resolution with a failing condition).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The node class JSON cannot be read.
    #[error(transparent)]
    Invalid(#[from] InvalidNodeClass),
    /// AWS throttled or could not be reached: try again later, keep the last status.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

/// The maps behind the resolver's locks hold finished entries only; a panic elsewhere cannot
/// leave one half written, so a poisoned lock is still consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Resolutions by node class name and spec text, with when each was made.
type Cache = HashMap<(String, String), (Instant, Arc<ResolvedNodeClass>)>;

/// How many node class objects [`NodeClassResolver`] remembers the cache key of. Core sends
/// the same few objects over and over (with every IsDrifted of every NodeClaim); a fleet has
/// a handful of node classes, each seen in a few versions at once.
const PARSED_MEMO_SIZE: usize = 16;

/// Resolves node classes against EC2, IAM and SSM, with a short cache.
#[derive(Debug)]
pub struct NodeClassResolver {
    ec2: Arc<dyn Ec2>,
    iam: Arc<dyn Iam>,
    ssm: Arc<dyn Ssm>,
    cluster: ClusterIdentity,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    /// Keyed by the node class's name and the text of its spec: any change of either
    /// resolves afresh.
    cache: Mutex<Cache>,
    /// The cache key of each valid node class object seen lately, newest first: parsing and
    /// validating is a pure function of the object, and costs more than comparing it (an
    /// object map compares member by member in key order, so objects that differ mostly
    /// part at their name or `resourceVersion`).
    parsed: Mutex<VecDeque<(serde_json::Value, (String, String))>>,
}

impl NodeClassResolver {
    /// A resolver for `cluster`, caching for [`DEFAULT_CACHE_TTL`].
    pub fn new(
        ec2: Arc<dyn Ec2>,
        iam: Arc<dyn Iam>,
        ssm: Arc<dyn Ssm>,
        cluster: ClusterIdentity,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            ec2,
            iam,
            ssm,
            cluster,
            clock,
            ttl: DEFAULT_CACHE_TTL,
            cache: Mutex::new(HashMap::new()),
            parsed: Mutex::new(VecDeque::new()),
        }
    }

    /// The same resolver reusing results for `ttl` (zero: never reuse).
    pub fn with_cache_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The cluster this resolver works for.
    pub fn cluster(&self) -> &ClusterIdentity {
        &self.cluster
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        lock(&self.cache)
    }

    /// The resolution kept under `key`, while it is younger than the TTL at `now`.
    fn fresh(&self, key: &(String, String), now: Instant) -> Option<Arc<ResolvedNodeClass>> {
        self.cache()
            .get(key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, resolved)| Arc::clone(resolved))
    }

    /// Resolves the node class JSON core sent.
    pub async fn resolve(
        &self,
        node_class: &serde_json::Value,
    ) -> Result<Arc<ResolvedNodeClass>, ResolveError> {
        let known = lock(&self.parsed)
            .iter()
            .find(|(seen, _)| seen == node_class)
            .map(|(_, key)| key.clone());
        let now = self.clock.now();
        if let Some(resolved) = known.as_ref().and_then(|key| self.fresh(key, now)) {
            return Ok(resolved);
        }
        let parsed = parse_node_class(node_class)?;
        let key = (
            parse::name_of(&parsed).to_owned(),
            serde_json::to_string(&parsed.spec).unwrap_or_default(),
        );
        if known.is_none() {
            let mut memo = lock(&self.parsed);
            memo.truncate(PARSED_MEMO_SIZE - 1);
            memo.push_front((node_class.clone(), key.clone()));
        }
        if let Some(resolved) = self.fresh(&key, now) {
            return Ok(resolved);
        }
        let resolved = Arc::new(self.resolve_uncached(parsed).await?);
        let mut cache = self.cache();
        cache.retain(|_, (at, _)| now.saturating_duration_since(*at) < self.ttl);
        cache.insert(key, (now, Arc::clone(&resolved)));
        Ok(resolved)
    }

    async fn resolve_uncached(
        &self,
        node_class: EC2NodeClass,
    ) -> Result<ResolvedNodeClass, ResolveError> {
        let spec = &node_class.spec;
        let now = iso8601(self.clock.utc_now());
        let images = amis::resolve_images(
            self.ec2.as_ref(),
            self.ssm.as_ref(),
            &spec.ami_selector_terms,
            self.cluster.kubernetes_version.as_deref(),
            &now,
        )
        .await?;
        let (subnets, subnet_problems) = self.subnets(&node_class).await?;
        let (security_groups, group_problems) = self.security_groups(&node_class).await?;
        let profile =
            instance_profile::resolve(self.iam.as_ref(), &self.cluster, &node_class).await?;
        let (placement_group, placement_problem) = self.placement_group(&node_class).await?;
        let (capacity_reservations, reservation_problems) = self
            .capacity_reservations(&node_class, self.clock.utc_now())
            .await?;

        let mut conditions = vec![
            readiness(
                CONDITION_AMIS_READY,
                "AMINotFound",
                !images.images.is_empty(),
                images.problems.join("; "),
            ),
            readiness(
                CONDITION_SUBNETS_READY,
                "SubnetsNotFound",
                !subnets.is_empty(),
                if subnet_problems.is_empty() {
                    "no subnet matches subnetSelectorTerms".to_owned()
                } else {
                    subnet_problems.join("; ")
                },
            ),
            readiness(
                CONDITION_SECURITY_GROUPS_READY,
                "SecurityGroupsNotFound",
                !security_groups.is_empty(),
                if group_problems.is_empty() {
                    "no security group matches securityGroupSelectorTerms".to_owned()
                } else {
                    group_problems.join("; ")
                },
            ),
        ];
        let (instance_profile, profile_problem) = match profile {
            Ok(name) => (Some(name), String::new()),
            Err(problem) => (None, problem),
        };
        conditions.push(readiness(
            CONDITION_INSTANCE_PROFILE_READY,
            "InstanceProfileNotFound",
            instance_profile.is_some(),
            profile_problem,
        ));
        // Always there, true without selectors, as upstream's (whose ReservedCapacity gate is
        // on by default).
        conditions.push(readiness(
            CONDITION_CAPACITY_RESERVATIONS_READY,
            "CapacityReservationsNotFound",
            reservation_problems.is_empty(),
            reservation_problems.join("; "),
        ));
        conditions.push(readiness(
            CONDITION_PLACEMENT_GROUP_READY,
            "PlacementGroupNotFound",
            placement_problem.is_none(),
            placement_problem.unwrap_or_default(),
        ));
        // The object parsed and passed the CRD's rules (parse_node_class refuses otherwise);
        // the condition exists so tools that read upstream's status find it, and its message
        // names what the CRD admits as upstream's does but its own rules' messages refuse.
        let mut validated = readiness(
            CONDITION_VALIDATION_SUCCEEDED,
            "ValidationFailed",
            true,
            String::new(),
        );
        validated.message = node_class
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        conditions.push(validated);
        Ok(ResolvedNodeClass {
            resolved_at: self.clock.now(),
            family: node_class.ami_family().unwrap_or(AMIFamily::Custom),
            static_hash: hash::static_hash(&node_class),
            images: images.images,
            subnets,
            security_groups,
            instance_profile,
            placement_group,
            capacity_reservations,
            conditions,
            node_class,
        })
    }

    /// The active capacity reservations the selector terms select (upstream's capacity
    /// reservation provider: a term's `id`, else its owner, tags and match criteria), by id,
    /// and what went wrong per term. Reservations that cannot be launched into as upstream
    /// launches (another match criteria or type than EC2 documents) are left out.
    async fn capacity_reservations(
        &self,
        node_class: &EC2NodeClass,
        now: std::time::SystemTime,
    ) -> Result<(Vec<ResolvedReservation>, Vec<String>), AwsError> {
        let now = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let window = i64::try_from(CAPACITY_BLOCK_EXPIRATION_WINDOW.as_secs()).unwrap_or(0);
        let mut found: BTreeMap<String, ResolvedReservation> = BTreeMap::new();
        let mut problems = Vec::new();
        let terms = &node_class.spec.capacity_reservation_selector_terms;
        for (i, term) in terms.iter().enumerate() {
            let mut queries = Vec::new();
            if let Some(id) = &term.id {
                queries.push(CapacityReservationQuery {
                    ids: vec![id.clone()],
                    ..CapacityReservationQuery::default()
                });
            }
            if term.tags.is_some() || term.instance_match_criteria.is_some() {
                queries.push(CapacityReservationQuery {
                    ids: Vec::new(),
                    owner_id: term.owner_id.clone(),
                    tags: term
                        .tags
                        .as_ref()
                        .map(amis::tag_filters)
                        .unwrap_or_default(),
                    instance_match_criteria: term
                        .instance_match_criteria
                        .map(|c| c.as_str().to_owned()),
                });
            }
            for query in &queries {
                match self.ec2.describe_capacity_reservations(query).await {
                    Ok(reservations) => {
                        for reservation in reservations {
                            let launchable = matches!(
                                reservation.instance_match_criteria.as_str(),
                                "open" | "targeted"
                            ) && matches!(
                                reservation.reservation_type.as_str(),
                                "default" | "capacity-block"
                            );
                            if !launchable {
                                tracing::warn!(
                                    capacity_reservation = %reservation.id,
                                    instance_match_criteria = %reservation.instance_match_criteria,
                                    reservation_type = %reservation.reservation_type,
                                    "skipping a capacity reservation Karpenter cannot launch into"
                                );
                                continue;
                            }
                            let expiring = reservation.reservation_type == "capacity-block"
                                && reservation
                                    .end_date
                                    .is_some_and(|end| now >= end.saturating_sub(window));
                            found
                                .entry(reservation.id.clone())
                                .or_insert(ResolvedReservation {
                                    reservation,
                                    expiring,
                                });
                        }
                    }
                    Err(e) if amis::retryable(&e) => return Err(e),
                    Err(e) => problems.push(format!("capacityReservationSelectorTerms[{i}]: {e}")),
                }
            }
        }
        Ok((found.into_values().collect(), problems))
    }

    /// The placement group `placementGroupSelector` names (upstream's placement group
    /// provider: by id, else by name, `available` only), and why there is none when the
    /// selector names one. Throttling and transport errors are errors (try again, keep the
    /// last status); any other EC2 error (an unknown group) is the problem.
    async fn placement_group(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<(Option<PlacementGroup>, Option<String>), AwsError> {
        let Some(selector) = &node_class.spec.placement_group_selector else {
            return Ok((None, None));
        };
        let (query, shown) = match (&selector.id, &selector.name) {
            (Some(id), _) => (
                PlacementGroupQuery {
                    ids: vec![id.clone()],
                    names: Vec::new(),
                },
                id,
            ),
            (None, Some(name)) => (
                PlacementGroupQuery {
                    ids: Vec::new(),
                    names: vec![name.clone()],
                },
                name,
            ),
            // The validation refuses a selector with neither.
            (None, None) => return Ok((None, Some("placementGroupSelector is empty".to_owned()))),
        };
        match self.ec2.describe_placement_groups(&query).await {
            Ok(groups) => Ok(match groups.into_iter().next() {
                Some(group) => (Some(group), None),
                None => (None, Some(format!("Placement group {shown:?} not found"))),
            }),
            Err(e) if amis::retryable(&e) => Err(e),
            Err(e) => Ok((
                None,
                Some(format!("Placement group {shown:?} not found: {e}")),
            )),
        }
    }

    async fn subnets(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<(Vec<ResolvedSubnet>, Vec<String>), AwsError> {
        let mut found: BTreeMap<String, ResolvedSubnet> = BTreeMap::new();
        let mut problems = Vec::new();
        for (i, term) in node_class.spec.subnet_selector_terms.iter().enumerate() {
            let query = ResourceQuery {
                ids: term.id.iter().cloned().collect(),
                tags: term
                    .tags
                    .as_ref()
                    .map(amis::tag_filters)
                    .unwrap_or_default(),
            };
            match self.ec2.describe_subnets(&query).await {
                Ok(subnets) => {
                    for s in subnets {
                        found.entry(s.id.clone()).or_insert(ResolvedSubnet {
                            id: s.id,
                            zone: s.zone,
                            zone_id: s.zone_id,
                            available_ips: s.available_ip_address_count,
                        });
                    }
                }
                Err(e) if amis::retryable(&e) => return Err(e),
                Err(e) => problems.push(format!("subnetSelectorTerms[{i}]: {e}")),
            }
        }
        let mut subnets: Vec<ResolvedSubnet> = found.into_values().collect();
        subnets.sort_by(|a, b| {
            b.available_ips
                .cmp(&a.available_ips)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok((subnets, problems))
    }

    async fn security_groups(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<(Vec<ResolvedSecurityGroup>, Vec<String>), AwsError> {
        let mut found: BTreeMap<String, ResolvedSecurityGroup> = BTreeMap::new();
        let mut problems = Vec::new();
        for (i, term) in node_class
            .spec
            .security_group_selector_terms
            .iter()
            .enumerate()
        {
            let query = SecurityGroupQuery {
                ids: term.id.iter().cloned().collect(),
                names: term.name.iter().cloned().collect(),
                tags: term
                    .tags
                    .as_ref()
                    .map(amis::tag_filters)
                    .unwrap_or_default(),
            };
            match self.ec2.describe_security_groups(&query).await {
                Ok(groups) => {
                    for g in groups {
                        found.entry(g.id.clone()).or_insert(ResolvedSecurityGroup {
                            id: g.id,
                            name: g.name,
                        });
                    }
                }
                Err(e) if amis::retryable(&e) => return Err(e),
                Err(e) => problems.push(format!("securityGroupSelectorTerms[{i}]: {e}")),
            }
        }
        Ok((found.into_values().collect(), problems))
    }
}

fn readiness(type_: &'static str, reason: &str, ready: bool, message: String) -> Readiness {
    Readiness {
        type_,
        ready,
        reason: if ready {
            String::new()
        } else {
            reason.to_owned()
        },
        message: if ready { String::new() } else { message },
    }
}

/// `time` as ISO 8601 UTC with milliseconds, the form EC2 dates come in (so strings
/// compare in time order).
pub fn iso8601(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm), valid for every date after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A cluster's worth of in-memory AWS for tests: two zones with discovery-tagged subnets, a
/// security group, the node role and AL2023 images for both architectures.
#[cfg(test)]
pub(crate) mod fixture {
    use std::sync::Arc;

    use serde_json::json;

    use super::{ClusterIdentity, NodeClassResolver};
    use crate::apis::ec2nodeclass::AMIFamily;
    use crate::ec2::Tag;
    use crate::instance_type_provider::FakeClock;
    use crate::memory_cloud::MemoryCloud;

    /// The Kubernetes version the fixture's images are published for.
    pub(crate) const K8S: &str = "1.33";

    /// The fixture.
    #[derive(Debug)]
    pub(crate) struct Fixture {
        pub(crate) cloud: MemoryCloud,
        pub(crate) clock: Arc<FakeClock>,
        pub(crate) cluster: ClusterIdentity,
    }

    pub(crate) fn discovery() -> Vec<Tag> {
        vec![Tag::new("karpenter.sh/discovery", "demo")]
    }

    impl Fixture {
        pub(crate) fn new() -> Self {
            let cloud = MemoryCloud::new("us-east-1").unwrap();
            cloud.ec2.add_subnet("us-east-1a", discovery());
            cloud.ec2.add_subnet("us-east-1b", discovery());
            cloud.ec2.add_security_group("nodes", discovery());
            cloud.iam.add_role("KarpenterNodeRole");
            for arch in ["x86_64", "arm64"] {
                cloud
                    .publish_alias_image(AMIFamily::Al2023, K8S, arch, &format!("al2023-{arch}-v1"))
                    .unwrap();
            }
            Self {
                cloud,
                clock: FakeClock::new(),
                cluster: ClusterIdentity {
                    name: "demo".to_owned(),
                    region: "us-east-1".to_owned(),
                    kubernetes_version: Some(K8S.to_owned()),
                },
            }
        }

        pub(crate) fn resolver(&self) -> NodeClassResolver {
            let clients = self.cloud.clients();
            NodeClassResolver::new(
                clients.ec2,
                clients.iam,
                clients.ssm,
                self.cluster.clone(),
                Arc::clone(&self.clock) as _,
            )
        }
    }

    /// The `default` EC2NodeClass selecting everything the fixture made.
    pub(crate) fn node_class() -> serde_json::Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::fixture::{Fixture, K8S, node_class};
    use super::*;

    #[tokio::test]
    async fn a_node_class_resolves_to_the_newest_images_subnets_groups_and_a_profile() {
        let f = Fixture::new();
        let resolved = f.resolver().resolve(&node_class()).await.unwrap();
        assert!(resolved.is_ready(), "{:?}", resolved.not_ready_message());
        assert_eq!(resolved.family, AMIFamily::Al2023);
        assert_eq!(
            resolved.image_for("amd64").unwrap().name,
            "al2023-x86_64-v1"
        );
        assert_eq!(resolved.image_for("arm64").unwrap().name, "al2023-arm64-v1");
        assert_eq!(resolved.subnets.len(), 2);
        assert_eq!(resolved.subnet_per_zone().len(), 2);
        assert_eq!(resolved.security_groups.len(), 1);
        let profile = resolved.instance_profile.clone().unwrap();
        assert!(profile.starts_with("demo_"), "{profile}");
        let stored = f
            .cloud
            .iam
            .get_instance_profile(&profile)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.roles, ["KarpenterNodeRole"]);

        let status = resolved.status_json();
        assert_eq!(status["amis"].as_array().unwrap().len(), 2);
        assert_eq!(
            status["amis"][0]["requirements"][0]["key"],
            "kubernetes.io/arch"
        );
        assert_eq!(status["instanceProfile"], profile.as_str());
        // The status is what the CRD's status type reads.
        let parsed: crate::apis::status::EC2NodeClassStatus =
            serde_json::from_value(status).unwrap();
        assert_eq!(parsed.security_groups[0].name, "nodes");
    }

    /// A security group term mixing `id` with `name` beside a term that does not: admitted,
    /// as upstream's CRD admits it, and named in the `ValidationSucceeded` message.
    #[tokio::test]
    async fn a_term_upstream_admits_against_its_own_message_is_a_warning_in_the_status() {
        let f = Fixture::new();
        let mut class = node_class();
        class["spec"]["securityGroupSelectorTerms"] = json!([
            {"tags": {"karpenter.sh/discovery": "demo"}},
            {"id": "sg-0123456789abcdef0", "name": "nodes"},
        ]);
        let resolved = f.resolver().resolve(&class).await.unwrap();
        assert!(resolved.is_ready(), "{:?}", resolved.not_ready_message());
        let validated = resolved
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_VALIDATION_SUCCEEDED)
            .unwrap();
        assert!(validated.ready);
        assert_eq!(
            validated.message,
            "spec.securityGroupSelectorTerms[1]: 'id' is mutually exclusive with other fields; \
             spec.securityGroupSelectorTerms[1]: 'name' is mutually exclusive with other fields"
        );
        let plain = f.resolver().resolve(&node_class()).await.unwrap();
        let plain_validated = plain
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_VALIDATION_SUCCEEDED)
            .unwrap();
        assert_eq!(plain_validated.message, "");
    }

    #[tokio::test]
    async fn a_newly_published_image_is_picked_up_once_the_cache_expires() {
        let f = Fixture::new();
        let resolver = f.resolver();
        resolver.resolve(&node_class()).await.unwrap();
        f.clock.advance(Duration::from_secs(1));
        f.cloud
            .publish_alias_image(AMIFamily::Al2023, K8S, "x86_64", "al2023-x86_64-v2")
            .unwrap();
        let cached = resolver.resolve(&node_class()).await.unwrap();
        assert_eq!(cached.image_for("amd64").unwrap().name, "al2023-x86_64-v1");
        f.clock.advance(DEFAULT_CACHE_TTL);
        let fresh = resolver.resolve(&node_class()).await.unwrap();
        assert_eq!(fresh.image_for("amd64").unwrap().name, "al2023-x86_64-v2");
        assert_eq!(fresh.image_for("arm64").unwrap().name, "al2023-arm64-v1");
        assert_eq!(
            fresh.static_hash, cached.static_hash,
            "a new image is not a static change"
        );
    }

    #[tokio::test]
    async fn a_name_pattern_selects_the_newest_match_per_architecture() {
        let f = Fixture::new();
        f.cloud
            .ec2
            .add_image("team-node-1", "x86_64", "2026-01-01T00:00:00.000Z", vec![]);
        f.cloud
            .ec2
            .add_image("team-node-3", "x86_64", "2026-03-01T00:00:00.000Z", vec![]);
        f.cloud
            .ec2
            .add_image("team-node-2", "x86_64", "2026-02-01T00:00:00.000Z", vec![]);
        let mut class = node_class();
        class["spec"]["amiSelectorTerms"] = json!([{"name": "team-node-*", "owner": "self"}]);
        class["spec"]["amiFamily"] = json!("AL2023");
        let resolved = f.resolver().resolve(&class).await.unwrap();
        assert_eq!(resolved.images.len(), 3);
        assert_eq!(resolved.image_for("amd64").unwrap().name, "team-node-3");
        assert!(resolved.image_for("arm64").is_none());
    }

    /// The reservations the terms select (by id, by tags), once each, in the status with
    /// upstream's fields, `interruptible` included; an unknown id makes
    /// CapacityReservationsReady false, naming the term.
    #[tokio::test]
    async fn capacity_reservations_resolve_into_the_status() {
        let fixture = Fixture::new();
        let ec2 = &fixture.cloud.ec2;
        let ml = vec![crate::ec2::Tag::new("team", "ml")];
        let whole =
            ec2.add_capacity_reservation("m5.large", "us-east-1a", 3, false, false, ml.clone());
        let spare = ec2.add_capacity_reservation("m5.large", "us-east-1b", 1, true, false, ml);
        ec2.add_capacity_reservation("c5.large", "us-east-1a", 1, false, false, vec![]);
        let mut class = node_class();
        class["spec"]["capacityReservationSelectorTerms"] =
            json!([{"tags": {"team": "ml"}}, {"id": whole.id}]);
        let resolved = fixture.resolver().resolve(&class).await.unwrap();
        let ids: Vec<&str> = resolved
            .capacity_reservations
            .iter()
            .map(|r| r.reservation.id.as_str())
            .collect();
        assert_eq!(ids, [whole.id.as_str(), spare.id.as_str()]);
        let status = resolved.status_json();
        assert_eq!(
            status["capacityReservations"][1],
            json!({
                "availabilityZone": "us-east-1b",
                "id": spare.id,
                "instanceMatchCriteria": "targeted",
                "instanceType": "m5.large",
                "ownerID": crate::ec2::memory::ACCOUNT_ID,
                "reservationType": "default",
                "state": "active",
                "interruptible": true,
            })
        );
        let ready = |r: &ResolvedNodeClass| {
            r.conditions
                .iter()
                .find(|c| c.type_ == CONDITION_CAPACITY_RESERVATIONS_READY)
                .cloned()
                .expect("always there")
        };
        assert!(ready(&resolved).ready);
        assert!(ready(&fixture.resolver().resolve(&node_class()).await.unwrap()).ready);
        class["spec"]["capacityReservationSelectorTerms"] = json!([{"id": "cr-0000000000000bad"}]);
        let unknown = fixture.resolver().resolve(&class).await.unwrap();
        let condition = ready(&unknown);
        assert!(!condition.ready);
        assert!(
            condition
                .message
                .contains("capacityReservationSelectorTerms[0]")
                && condition.message.contains("cr-0000000000000bad"),
            "{}",
            condition.message
        );
    }

    /// PlacementGroupReady holds without a selector and with a group that exists (by name or
    /// id); an unknown group makes the class not ready, naming it.
    #[tokio::test]
    async fn placement_group_ready_says_whether_the_selector_found_its_group() {
        let fixture = Fixture::new();
        let group = fixture
            .cloud
            .ec2
            .add_placement_group("nodes", "partition", Some(2));
        let condition = |resolved: &ResolvedNodeClass| {
            resolved
                .conditions
                .iter()
                .find(|c| c.type_ == CONDITION_PLACEMENT_GROUP_READY)
                .cloned()
                .expect("always there")
        };
        let plain = fixture.resolver().resolve(&node_class()).await.unwrap();
        assert!(condition(&plain).ready);
        assert_eq!(plain.placement_group, None);
        for selector in [json!({"name": "nodes"}), json!({"id": group.id})] {
            let mut class = node_class();
            class["spec"]["placementGroupSelector"] = selector;
            let resolved = fixture.resolver().resolve(&class).await.unwrap();
            assert!(condition(&resolved).ready);
            assert_eq!(resolved.placement_group.as_ref(), Some(&group));
        }
        let mut class = node_class();
        class["spec"]["placementGroupSelector"] = json!({"name": "other"});
        let resolved = fixture.resolver().resolve(&class).await.unwrap();
        let not_ready = condition(&resolved);
        assert!(!not_ready.ready);
        assert_eq!(not_ready.reason, "PlacementGroupNotFound");
        assert!(
            not_ready.message.contains("\"other\""),
            "{}",
            not_ready.message
        );
        assert!(!resolved.is_ready());
    }

    #[tokio::test]
    async fn what_selects_nothing_makes_the_node_class_not_ready_saying_why() {
        let f = Fixture::new();
        let mut class = node_class();
        class["spec"]["subnetSelectorTerms"] =
            json!([{"tags": {"karpenter.sh/discovery": "other"}}]);
        class["spec"]["role"] = json!("NoSuchRole");
        let resolved = f.resolver().resolve(&class).await.unwrap();
        assert!(!resolved.is_ready());
        let message = resolved.not_ready_message().unwrap();
        assert!(
            message.contains("SubnetsReady: no subnet matches"),
            "{message}"
        );
        assert!(
            message.contains("InstanceProfileReady: role NoSuchRole not found"),
            "{message}"
        );
        assert!(!message.contains("AMIsReady"), "{message}");
    }

    #[tokio::test]
    async fn an_alias_without_a_kubernetes_version_says_which_flag_is_missing() {
        let mut f = Fixture::new();
        f.cluster.kubernetes_version = None;
        let resolved = f.resolver().resolve(&node_class()).await.unwrap();
        let amis = resolved
            .conditions
            .iter()
            .find(|c| c.type_ == "AMIsReady")
            .unwrap();
        assert!(!amis.ready);
        assert!(
            amis.message.contains("--kubernetes-version"),
            "{}",
            amis.message
        );
    }

    #[tokio::test]
    async fn the_same_spec_is_resolved_once_while_fresh_and_an_invalid_object_every_time() {
        let f = Fixture::new();
        let resolver = f.resolver();
        let first = resolver.resolve(&node_class()).await.unwrap();
        let again = resolver.resolve(&node_class()).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the very same object");
        let mut newer = node_class();
        newer["metadata"]["resourceVersion"] = json!("7");
        newer["status"] = json!({"conditions": []});
        let same_spec = resolver.resolve(&newer).await.unwrap();
        assert!(
            Arc::ptr_eq(&first, &same_spec),
            "only metadata and status differ"
        );
        let mut changed = node_class();
        changed["spec"]["tags"] = json!({"team": "a"});
        let other = resolver.resolve(&changed).await.unwrap();
        assert!(!Arc::ptr_eq(&first, &other), "a new spec is resolved anew");

        let mut invalid = node_class();
        invalid["spec"]["metadataOptions"] = json!({"httpPutResponseHopLimit": "one"});
        for _ in 0..2 {
            assert!(matches!(
                resolver.resolve(&invalid).await,
                Err(ResolveError::Invalid(_))
            ));
        }
    }

    #[tokio::test]
    async fn an_unreadable_node_class_is_an_error_naming_the_field() {
        let f = Fixture::new();
        let mut class = node_class();
        class["spec"]["metadataOptions"] = json!({"httpPutResponseHopLimit": "one"});
        let err = f.resolver().resolve(&class).await.unwrap_err();
        let ResolveError::Invalid(invalid) = err else {
            panic!("{err:?}")
        };
        assert_eq!(
            invalid.field,
            "spec.metadataOptions.httpPutResponseHopLimit"
        );
    }

    #[test]
    fn iso8601_is_the_form_ec2_dates_use() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(iso8601(t), "2023-11-14T22:13:20.000Z");
    }
}
