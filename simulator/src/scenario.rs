//! Scenario files (the format of `SCENARIO.md`): YAML read into [`Scenario`], every field
//! checked at load time. An invalid scenario is a [`ScenarioError`] naming the field
//! (`events[2].scale.replicas`) and what is wrong with it, never a panic, and never a failure
//! half-way through a run.
//!
//! Manifests are checked as the API server would admit them: NodePools, NodeClaims and
//! EC2NodeClasses by their own validation, the Kubernetes kinds by their schema (a field of
//! the wrong type names its path).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use aws_plugin::apis::EC2NodeClass;
use aws_plugin::apis::ec2nodeclass::AMIFamily;
use core_domain::labels::{LabelPolicy, aws};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use karpenter_api::duration::parse_go_duration;
use karpenter_api::{NodeClaim, NodePool};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Where time starts when the scenario does not say.
pub const DEFAULT_START: &str = "2026-01-01T00:00:00Z";
/// The region when the scenario does not say.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Create returns -> instance running, when the scenario does not say.
pub const DEFAULT_LAUNCH_DELAY: Duration = Duration::from_secs(30);
/// Instance running -> Node registered and Ready, when the scenario does not say.
pub const DEFAULT_REGISTRATION_DELAY: Duration = Duration::from_secs(30);
/// The longest scenario accepted: a week of virtual time at one-second steps.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A scenario, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Free text.
    pub name: String,
    /// Every random choice derives from it.
    pub seed: u64,
    /// The wall-clock time at t=0.
    pub start: Timestamp,
    /// How much virtual time to run.
    pub duration: Duration,
    /// The simulated cloud.
    pub cloud: CloudSpec,
    /// Manifests applied at t=0, in order.
    pub objects: Vec<Manifest>,
    /// What happens later, in time order (equal times keep the file's order).
    pub events: Vec<ScheduledEvent>,
}

/// The `cloud:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudSpec {
    /// The region: which embedded catalogue and price list.
    pub region: String,
    /// The instance types offered; `None`: all of the region's.
    pub instance_types: Option<Vec<String>>,
    /// The zones offered; `None`: all of the region's.
    pub zones: Option<Vec<String>>,
    /// Create returns -> instance running.
    pub launch_delay: Duration,
    /// Instance running -> Node registered and Ready.
    pub registration_delay: Duration,
    /// Machine images known at t=0.
    pub images: Vec<ImageSpec>,
    /// Subnets.
    pub subnets: Vec<SubnetSpec>,
    /// Security groups.
    pub security_groups: Vec<SecurityGroupSpec>,
    /// Pools that fail with insufficient capacity at t=0.
    pub capacity_errors: Vec<CapacityErrorSpec>,
    /// Whether spot capacity is offered.
    pub spot: bool,
}

/// A machine image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// `ami-...`.
    pub id: String,
    /// The image name (what `name` selector terms match).
    pub name: String,
    /// EC2's architecture: `x86_64` or `arm64`.
    pub architecture: String,
    /// When it was created; `None`: when it appears.
    pub created: Option<Timestamp>,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// The AMI family whose `@latest` alias points at it from now on (`al2023`, ...).
    pub alias: Option<AMIFamily>,
}

/// A subnet.
#[derive(Debug, Clone, PartialEq)]
pub struct SubnetSpec {
    /// `subnet-...`.
    pub id: String,
    /// Its zone.
    pub zone: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// A security group.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityGroupSpec {
    /// `sg-...`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// A pool whose launches fail with insufficient capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityErrorSpec {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// `spot` or `on-demand`; `None`: both.
    pub capacity_type: Option<String>,
}

/// The kinds a scenario may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `karpenter.sh/v1` NodePool.
    NodePool,
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    EC2NodeClass,
    /// `apps/v1` Deployment (kept by the simulator's Deployment controller).
    Deployment,
    /// `v1` Pod.
    Pod,
    /// `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `scheduling.k8s.io/v1` PriorityClass.
    PriorityClass,
    /// `karpenter.sh/v1` NodeClaim, with its status (a fleet to adopt).
    NodeClaim,
    /// `v1` Node, with its status.
    Node,
}

impl Kind {
    /// Every kind, in the order of the contract.
    pub const ALL: [Kind; 9] = [
        Kind::NodePool,
        Kind::EC2NodeClass,
        Kind::Deployment,
        Kind::Pod,
        Kind::PodDisruptionBudget,
        Kind::DaemonSet,
        Kind::PriorityClass,
        Kind::NodeClaim,
        Kind::Node,
    ];

    /// The `kind:` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NodePool => "NodePool",
            Kind::EC2NodeClass => "EC2NodeClass",
            Kind::Deployment => "Deployment",
            Kind::Pod => "Pod",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::DaemonSet => "DaemonSet",
            Kind::PriorityClass => "PriorityClass",
            Kind::NodeClaim => "NodeClaim",
            Kind::Node => "Node",
        }
    }

    /// The `apiVersion:` the kind must have.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::NodePool | Kind::NodeClaim => "karpenter.sh/v1",
            Kind::EC2NodeClass => "karpenter.k8s.aws/v1",
            Kind::Deployment | Kind::DaemonSet => "apps/v1",
            Kind::Pod | Kind::Node => "v1",
            Kind::PodDisruptionBudget => "policy/v1",
            Kind::PriorityClass => "scheduling.k8s.io/v1",
        }
    }

    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::Deployment | Kind::Pod | Kind::PodDisruptionBudget | Kind::DaemonSet
        )
    }

    fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which object: kind, namespace (namespaced kinds only) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The kind.
    pub kind: Kind,
    /// The namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A manifest, checked against its kind's schema and rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Which object.
    pub key: ObjectKey,
    /// The object as JSON, namespace filled in for namespaced kinds.
    pub object: Value,
}

/// One entry of `events:`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledEvent {
    /// Where it is in the file (`events[3]`), for messages.
    pub field: String,
    /// When, since t=0.
    pub at: Duration,
    /// What.
    pub action: Action,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create an object, or replace the one of the same kind, namespace and name.
    Apply(Manifest),
    /// Delete an object.
    Delete(ObjectKey),
    /// Set a Deployment's replicas.
    Scale {
        /// The Deployment.
        deployment: ObjectKey,
        /// How many pods it keeps.
        replicas: i32,
    },
    /// Change the cloud.
    Cloud(CloudChange),
    /// core-svc crashes and restarts: every controller's in-memory state is lost.
    RestartCore,
    /// Every provider call fails as unavailable for this long.
    PluginOutage(Duration),
}

/// A change to the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudChange {
    /// A new image appears (an AMI release).
    PublishImage(ImageSpec),
    /// The capacity errors become exactly these.
    CapacityErrors(Vec<CapacityErrorSpec>),
}

/// Why a scenario is invalid: the field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScenarioError {
    /// The field's path, `events[2].scale.replicas`; `(document)` for the file as a whole.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ScenarioError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

type Result<T, E = ScenarioError> = std::result::Result<T, E>;

/// The JSON type of a value, for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A mapping being read: every key taken is remembered, and [`Fields::finish`] refuses the
/// others, so a misspelt field is an error rather than silently ignored.
struct Fields<'a> {
    path: String,
    map: &'a Map<String, Value>,
    taken: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn of(path: &str, value: &'a Value) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Self {
                path: path.to_owned(),
                map,
                taken: Vec::new(),
            }),
            other => Err(ScenarioError::new(
                display_path(path),
                format!("expected a mapping, found {}", type_name(other)),
            )),
        }
    }

    fn field(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.taken.push(key);
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn required(&mut self, key: &'static str) -> Result<&'a Value> {
        let field = self.field(key);
        self.get(key)
            .ok_or_else(|| ScenarioError::new(field, "required"))
    }

    fn string(&mut self, key: &'static str) -> Result<Option<String>> {
        let field = self.field(key);
        self.get(key).map(|value| string(&field, value)).transpose()
    }

    fn required_string(&mut self, key: &'static str) -> Result<String> {
        let field = self.field(key);
        let value = string(&field, self.required(key)?)?;
        if value.is_empty() {
            return Err(ScenarioError::new(field, "may not be empty"));
        }
        Ok(value)
    }

    fn duration(&mut self, key: &'static str) -> Result<Option<Duration>> {
        let field = self.field(key);
        self.get(key)
            .map(|value| duration(&field, value))
            .transpose()
    }

    fn bool(&mut self, key: &'static str) -> Result<Option<bool>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected true or false, found {}", type_name(other)),
            )),
        }
    }

    fn list(&mut self, key: &'static str) -> Result<Option<&'a Vec<Value>>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected a list, found {}", type_name(other)),
            )),
        }
    }

    fn tags(&mut self, key: &'static str) -> Result<BTreeMap<String, String>> {
        let field = self.field(key);
        match self.get(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| Ok((k.clone(), string(&join(&field, k), v)?)))
                .collect(),
            Some(other) => Err(ScenarioError::new(
                field,
                format!("expected a mapping of strings, found {}", type_name(other)),
            )),
        }
    }

    /// Refuses the keys nobody took.
    fn finish(self) -> Result<()> {
        match self
            .map
            .keys()
            .find(|key| !self.taken.contains(&key.as_str()))
        {
            None => Ok(()),
            Some(key) => {
                let mut known: Vec<&str> = self.taken.clone();
                known.sort_unstable();
                known.dedup();
                Err(ScenarioError::new(
                    self.field(key),
                    format!("unknown field; known here: {}", known.join(", ")),
                ))
            }
        }
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(document)".to_owned()
    } else {
        path.to_owned()
    }
}

fn string(field: &str, value: &Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        other => Err(ScenarioError::new(
            field,
            format!("expected a string, found {}", type_name(other)),
        )),
    }
}

fn duration(field: &str, value: &Value) -> Result<Duration> {
    let text = match value {
        Value::String(s) => s.clone(),
        // A bare 0 is a valid Go duration; YAML reads it as a number.
        Value::Number(n) if n.as_u64() == Some(0) => "0".to_owned(),
        other => {
            return Err(ScenarioError::new(
                field,
                format!(
                    "expected a duration such as 90s, 5m or 1h30m, found {}",
                    type_name(other)
                ),
            ));
        }
    };
    parse_go_duration(&text).map_err(|error| ScenarioError::new(field, error.to_string()))
}

fn timestamp(field: &str, value: &Value) -> Result<Timestamp> {
    let text = string(field, value)?;
    text.parse::<Timestamp>().map_err(|error| {
        ScenarioError::new(
            field,
            format!("{text:?} is not an RFC 3339 time such as 2026-01-01T00:00:00Z: {error}"),
        )
    })
}

/// Reads and checks a scenario.
pub fn parse(text: &str) -> Result<Scenario> {
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|error| {
        let field = match error.location() {
            Some(location) => format!("(line {}, column {})", location.line(), location.column()),
            None => "(document)".to_owned(),
        };
        ScenarioError::new(field, format!("not valid YAML: {error}"))
    })?;
    // `<<: *anchor` merge keys, which manifests written by hand use to share labels.
    yaml.apply_merge()
        .map_err(|error| ScenarioError::new("(document)", format!("merge key: {error}")))?;
    let document: Value = serde_json::to_value(&yaml).map_err(|error| {
        ScenarioError::new(
            "(document)",
            format!("not representable as JSON (keys must be strings): {error}"),
        )
    })?;
    let mut fields = Fields::of("", &document)?;
    let name = fields.required_string("name")?;
    let seed = match fields.get("seed") {
        None => 0,
        Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
            ScenarioError::new("seed", "expected a whole number between 0 and 2^64-1")
        })?,
        Some(other) => {
            return Err(ScenarioError::new(
                "seed",
                format!("expected a whole number, found {}", type_name(other)),
            ));
        }
    };
    let start = match fields.get("start") {
        None => DEFAULT_START
            .parse::<Timestamp>()
            .map_err(|e| ScenarioError::new("start", e.to_string()))?,
        Some(value) => timestamp("start", value)?,
    };
    if start < Timestamp::UNIX_EPOCH {
        return Err(ScenarioError::new("start", "must not be before 1970"));
    }
    let duration = duration("duration", fields.required("duration")?)?;
    if duration.is_zero() {
        return Err(ScenarioError::new("duration", "must be positive"));
    }
    if duration > MAX_DURATION {
        return Err(ScenarioError::new(
            "duration",
            format!("at most {}h", MAX_DURATION.as_secs() / 3600),
        ));
    }
    let cloud = match fields.get("cloud") {
        None => cloud(&Value::Object(Map::new()))?,
        Some(value) => cloud(value)?,
    };
    let objects = match fields.list("objects")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| manifest(&format!("objects[{i}]"), item))
            .collect::<Result<_>>()?,
    };
    let mut events = match fields.list("events")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| event(&format!("events[{i}]"), item, duration, &cloud))
            .collect::<Result<Vec<_>>>()?,
    };
    fields.finish()?;
    // Stable: events at the same time keep the file's order.
    events.sort_by_key(|event| event.at);
    let scenario = Scenario {
        name,
        seed,
        start,
        duration,
        cloud,
        objects,
        events,
    };
    check_references(&scenario)?;
    Ok(scenario)
}

fn cloud(value: &Value) -> Result<CloudSpec> {
    let mut fields = Fields::of("cloud", value)?;
    let region = fields
        .string("region")?
        .unwrap_or_else(|| DEFAULT_REGION.to_owned());
    let catalogue = aws_plugin::catalogue::embedded(&region).map_err(|error| {
        ScenarioError::new("cloud.region", format!("no simulated catalogue: {error}"))
    })?;
    let known_zones = catalogue.zones();
    let names = |field: &str, items: &Vec<Value>| -> Result<Vec<String>> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| string(&format!("{field}[{i}]"), item))
            .collect()
    };
    let instance_types = match fields.list("instanceTypes")? {
        None => None,
        Some(items) => {
            let list = names("cloud.instanceTypes", items)?;
            for (i, name) in list.iter().enumerate() {
                if !catalogue
                    .instance_types
                    .iter()
                    .any(|entry| entry.info.instance_type == *name)
                {
                    return Err(ScenarioError::new(
                        format!("cloud.instanceTypes[{i}]"),
                        format!("{name:?} is not an instance type of {region}"),
                    ));
                }
            }
            if list.is_empty() {
                return Err(ScenarioError::new(
                    "cloud.instanceTypes",
                    "may not be empty (leave it out for every type)",
                ));
            }
            Some(list)
        }
    };
    let zones = match fields.list("zones")? {
        None => None,
        Some(items) => {
            let list = names("cloud.zones", items)?;
            for (i, zone) in list.iter().enumerate() {
                if !known_zones.contains(zone) {
                    return Err(ScenarioError::new(
                        format!("cloud.zones[{i}]"),
                        format!(
                            "{zone:?} is not a zone of {region} ({})",
                            known_zones.join(", ")
                        ),
                    ));
                }
            }
            if list.is_empty() {
                return Err(ScenarioError::new(
                    "cloud.zones",
                    "may not be empty (leave it out for every zone)",
                ));
            }
            Some(list)
        }
    };
    let zone_ok = |zone: &str| match &zones {
        Some(list) => list.iter().any(|z| z == zone),
        None => known_zones.iter().any(|z| z == zone),
    };
    let launch_delay = fields
        .duration("launchDelay")?
        .unwrap_or(DEFAULT_LAUNCH_DELAY);
    let registration_delay = fields
        .duration("registrationDelay")?
        .unwrap_or(DEFAULT_REGISTRATION_DELAY);
    let images = match fields.list("images")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| image(&format!("cloud.images[{i}]"), item))
            .collect::<Result<_>>()?,
    };
    let subnets = match fields.list("subnets")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("cloud.subnets[{i}]");
                let mut f = Fields::of(&path, item)?;
                let id = prefixed_id(&f.field("id"), f.required_string("id")?, "subnet-")?;
                let zone = f.required_string("zone")?;
                if !zone_ok(&zone) {
                    return Err(ScenarioError::new(
                        f.field("zone"),
                        format!("{zone:?} is not a zone the cloud offers"),
                    ));
                }
                let tags = f.tags("tags")?;
                f.finish()?;
                Ok(SubnetSpec { id, zone, tags })
            })
            .collect::<Result<_>>()?,
    };
    let security_groups = match fields.list("securityGroups")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("cloud.securityGroups[{i}]");
                let mut f = Fields::of(&path, item)?;
                let id = prefixed_id(&f.field("id"), f.required_string("id")?, "sg-")?;
                let name = f.required_string("name")?;
                let tags = f.tags("tags")?;
                f.finish()?;
                Ok(SecurityGroupSpec { id, name, tags })
            })
            .collect::<Result<_>>()?,
    };
    let mut spec = CloudSpec {
        region,
        instance_types,
        zones,
        launch_delay,
        registration_delay,
        images,
        subnets,
        security_groups,
        capacity_errors: Vec::new(),
        spot: true,
    };
    spec.capacity_errors = match fields.list("capacityErrors")? {
        None => Vec::new(),
        Some(items) => capacity_errors("cloud.capacityErrors", items, &spec)?,
    };
    spec.spot = fields.bool("spot")?.unwrap_or(true);
    fields.finish()?;
    unique(
        "cloud.images",
        spec.images.iter().map(|i| i.id.as_str()),
        "id",
    )?;
    unique(
        "cloud.subnets",
        spec.subnets.iter().map(|s| s.id.as_str()),
        "id",
    )?;
    unique(
        "cloud.securityGroups",
        spec.security_groups.iter().map(|g| g.id.as_str()),
        "id",
    )?;
    Ok(spec)
}

fn unique<'a>(field: &str, ids: impl Iterator<Item = &'a str>, key: &str) -> Result<()> {
    let mut seen: Vec<&str> = Vec::new();
    for (i, id) in ids.enumerate() {
        if seen.contains(&id) {
            return Err(ScenarioError::new(
                format!("{field}[{i}].{key}"),
                format!("{id:?} is listed twice"),
            ));
        }
        seen.push(id);
    }
    Ok(())
}

fn prefixed_id(field: &str, id: String, prefix: &str) -> Result<String> {
    if id.len() > prefix.len() && id.starts_with(prefix) {
        Ok(id)
    } else {
        Err(ScenarioError::new(
            field,
            format!("{id:?} must start with {prefix:?}"),
        ))
    }
}

fn image(path: &str, value: &Value) -> Result<ImageSpec> {
    let mut f = Fields::of(path, value)?;
    let id = prefixed_id(&f.field("id"), f.required_string("id")?, "ami-")?;
    let name = f.required_string("name")?;
    let architecture = f
        .string("architecture")?
        .unwrap_or_else(|| "x86_64".to_owned());
    if !matches!(architecture.as_str(), "x86_64" | "arm64") {
        return Err(ScenarioError::new(
            f.field("architecture"),
            format!("{architecture:?}: expected x86_64 or arm64 (EC2's spelling)"),
        ));
    }
    let created_field = f.field("created");
    let created = f
        .get("created")
        .map(|value| timestamp(&created_field, value))
        .transpose()?;
    let tags = f.tags("tags")?;
    let alias_field = f.field("alias");
    let alias = match f.string("alias")? {
        None => None,
        Some(text) => Some(
            AMIFamily::ALIASED
                .into_iter()
                .find(|family| family.as_str().eq_ignore_ascii_case(&text))
                .ok_or_else(|| {
                    let known: Vec<String> = AMIFamily::ALIASED
                        .iter()
                        .map(|family| family.as_str().to_lowercase())
                        .collect();
                    ScenarioError::new(
                        alias_field,
                        format!("{text:?} is not an alias family ({})", known.join(", ")),
                    )
                })?,
        ),
    };
    f.finish()?;
    Ok(ImageSpec {
        id,
        name,
        architecture,
        created,
        tags,
        alias,
    })
}

fn capacity_errors(
    path: &str,
    items: &[Value],
    cloud: &CloudSpec,
) -> Result<Vec<CapacityErrorSpec>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut f = Fields::of(&format!("{path}[{i}]"), item)?;
            let instance_type = f.required_string("instanceType")?;
            if let Some(types) = &cloud.instance_types
                && !types.contains(&instance_type)
            {
                return Err(ScenarioError::new(
                    f.field("instanceType"),
                    format!("{instance_type:?} is not in cloud.instanceTypes"),
                ));
            }
            let zone = f.required_string("zone")?;
            if let Some(zones) = &cloud.zones
                && !zones.contains(&zone)
            {
                return Err(ScenarioError::new(
                    f.field("zone"),
                    format!("{zone:?} is not in cloud.zones"),
                ));
            }
            let capacity_type = f.string("capacityType")?;
            if let Some(ct) = &capacity_type
                && !matches!(ct.as_str(), "spot" | "on-demand")
            {
                return Err(ScenarioError::new(
                    f.field("capacityType"),
                    format!("{ct:?}: expected spot or on-demand (leave it out for both)"),
                ));
            }
            f.finish()?;
            Ok(CapacityErrorSpec {
                instance_type,
                zone,
                capacity_type,
            })
        })
        .collect()
}

fn label_policy() -> LabelPolicy {
    LabelPolicy::with_provider(aws::RESTRICTED_LABEL_DOMAINS, aws::WELL_KNOWN_LABELS)
}

/// Deserializes `value` as `T`, naming the path of a field of the wrong shape.
fn typed<T: DeserializeOwned>(path: &str, value: &Value) -> Result<T> {
    serde_path_to_error::deserialize::<_, T>(value.clone()).map_err(|error| {
        let inner = error.path().to_string();
        let field = if inner == "." || inner.is_empty() {
            path.to_owned()
        } else {
            format!("{path}.{inner}")
        };
        ScenarioError::new(field, error.into_inner().to_string())
    })
}

fn validation<V: fmt::Display>(
    path: &str,
    errors: Vec<karpenter_api::ValidationError<V>>,
) -> ScenarioError {
    let mut errors = errors.into_iter();
    match errors.next() {
        Some(first) => {
            let more = errors.count();
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            ScenarioError::new(
                format!("{path}.{}", first.path.as_str()),
                format!("{}{tail}", first.violation),
            )
        }
        None => ScenarioError::new(path, "invalid"),
    }
}

fn manifest(path: &str, value: &Value) -> Result<Manifest> {
    let map = match value {
        Value::Object(map) => map,
        other => {
            return Err(ScenarioError::new(
                path,
                format!(
                    "expected a manifest (a mapping), found {}",
                    type_name(other)
                ),
            ));
        }
    };
    let kind_field = format!("{path}.kind");
    let kind_name = string(
        &kind_field,
        map.get("kind")
            .ok_or_else(|| ScenarioError::new(&kind_field, "required"))?,
    )?;
    let kind = Kind::parse(&kind_name).ok_or_else(|| {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        ScenarioError::new(
            &kind_field,
            format!("{kind_name:?} is not supported ({})", known.join(", ")),
        )
    })?;
    let version_field = format!("{path}.apiVersion");
    let api_version = string(
        &version_field,
        map.get("apiVersion")
            .ok_or_else(|| ScenarioError::new(&version_field, "required"))?,
    )?;
    if api_version != kind.api_version() {
        return Err(ScenarioError::new(
            version_field,
            format!("{api_version:?}: {kind} is {}", kind.api_version()),
        ));
    }
    let meta_field = format!("{path}.metadata");
    let metadata = match map.get("metadata") {
        Some(Value::Object(metadata)) => metadata,
        Some(other) => {
            return Err(ScenarioError::new(
                meta_field,
                format!("expected a mapping, found {}", type_name(other)),
            ));
        }
        None => return Err(ScenarioError::new(meta_field, "required")),
    };
    let name_field = format!("{path}.metadata.name");
    let name = string(
        &name_field,
        metadata
            .get("name")
            .ok_or_else(|| ScenarioError::new(&name_field, "required"))?,
    )?;
    if name.is_empty() {
        return Err(ScenarioError::new(name_field, "may not be empty"));
    }
    let mut object = value.clone();
    let namespace = if kind.namespaced() {
        let namespace = match metadata.get("namespace") {
            None | Some(Value::Null) => "default".to_owned(),
            Some(value) => string(&format!("{path}.metadata.namespace"), value)?,
        };
        if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
            metadata.insert("namespace".to_owned(), Value::String(namespace.clone()));
        }
        Some(namespace)
    } else {
        if metadata.get("namespace").is_some_and(|n| !n.is_null()) {
            return Err(ScenarioError::new(
                format!("{path}.metadata.namespace"),
                format!("{kind} is cluster-scoped"),
            ));
        }
        None
    };
    check_kind(path, kind, &object)?;
    Ok(Manifest {
        key: ObjectKey {
            kind,
            namespace,
            name,
        },
        object,
    })
}

/// The kind's schema and, where it has them, its rules.
fn check_kind(path: &str, kind: Kind, object: &Value) -> Result<()> {
    match kind {
        Kind::NodePool => {
            let pool: NodePool = typed(path, object)?;
            pool.validate(&label_policy())
                .map_err(|errors| validation(path, errors))
        }
        Kind::NodeClaim => {
            let claim: NodeClaim = typed(path, object)?;
            claim
                .validate(&label_policy())
                .map_err(|errors| validation(path, errors))?;
            let status_field = format!("{path}.status.providerID");
            let status = claim.status.as_ref().filter(|s| !s.provider_id.is_empty());
            let Some(status) = status else {
                return Err(ScenarioError::new(
                    status_field,
                    "required: a NodeClaim in a scenario is an existing node to adopt",
                ));
            };
            parse_provider_id(&status.provider_id)
                .map(drop)
                .map_err(|message| ScenarioError::new(status_field, message))
        }
        Kind::EC2NodeClass => {
            let class: EC2NodeClass = typed(path, object)?;
            class.validate().map_err(|errors| validation(path, errors))
        }
        Kind::Deployment => {
            let deployment: Deployment = typed(path, object)?;
            let spec = deployment
                .spec
                .as_ref()
                .ok_or_else(|| ScenarioError::new(format!("{path}.spec"), "required"))?;
            if spec.replicas.is_some_and(|r| r < 0) {
                return Err(ScenarioError::new(
                    format!("{path}.spec.replicas"),
                    "may not be negative",
                ));
            }
            if spec.template.spec.is_none() {
                return Err(ScenarioError::new(
                    format!("{path}.spec.template.spec"),
                    "required",
                ));
            }
            Ok(())
        }
        Kind::DaemonSet => {
            let daemon_set: DaemonSet = typed(path, object)?;
            let spec = daemon_set
                .spec
                .as_ref()
                .ok_or_else(|| ScenarioError::new(format!("{path}.spec"), "required"))?;
            if spec.template.spec.is_none() {
                return Err(ScenarioError::new(
                    format!("{path}.spec.template.spec"),
                    "required",
                ));
            }
            Ok(())
        }
        Kind::Pod => {
            let pod: Pod = typed(path, object)?;
            if pod.spec.is_none() {
                return Err(ScenarioError::new(format!("{path}.spec"), "required"));
            }
            Ok(())
        }
        Kind::PodDisruptionBudget => typed::<PodDisruptionBudget>(path, object).map(drop),
        Kind::PriorityClass => typed::<PriorityClass>(path, object).map(drop),
        Kind::Node => {
            let node: Node = typed(path, object)?;
            match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
                Some(provider_id) => parse_provider_id(provider_id).map(drop).map_err(|message| {
                    ScenarioError::new(format!("{path}.spec.providerID"), message)
                }),
                None => Ok(()),
            }
        }
    }
}

/// `aws:///us-east-1a/i-0123` → (`us-east-1a`, `i-0123`).
pub fn parse_provider_id(provider_id: &str) -> Result<(String, String), String> {
    let rest = provider_id.strip_prefix("aws:///").ok_or_else(|| {
        format!("{provider_id:?} is not an AWS provider ID (aws:///<zone>/<instance id>)")
    })?;
    match rest.split_once('/') {
        Some((zone, id)) if !zone.is_empty() && id.starts_with("i-") && !id.contains('/') => {
            Ok((zone.to_owned(), id.to_owned()))
        }
        _ => Err(format!(
            "{provider_id:?} is not an AWS provider ID (aws:///<zone>/i-<id>)"
        )),
    }
}

fn object_key(path: &str, value: &Value) -> Result<ObjectKey> {
    let mut f = Fields::of(path, value)?;
    let kind_name = f.required_string("kind")?;
    let kind = Kind::parse(&kind_name).ok_or_else(|| {
        ScenarioError::new(
            f.field("kind"),
            format!("{kind_name:?} is not a kind scenarios support"),
        )
    })?;
    let namespace_field = f.field("namespace");
    let namespace = f.string("namespace")?;
    let name = f.required_string("name")?;
    f.finish()?;
    let namespace = match (kind.namespaced(), namespace) {
        (true, Some(namespace)) => Some(namespace),
        (true, None) => Some("default".to_owned()),
        (false, None) => None,
        (false, Some(_)) => {
            return Err(ScenarioError::new(
                namespace_field,
                format!("{kind} is cluster-scoped"),
            ));
        }
    };
    Ok(ObjectKey {
        kind,
        namespace,
        name,
    })
}

fn event(
    path: &str,
    value: &Value,
    duration: Duration,
    cloud: &CloudSpec,
) -> Result<ScheduledEvent> {
    let mut f = Fields::of(path, value)?;
    let at_field = f.field("at");
    let at = self::duration(&at_field, f.required("at")?)?;
    if at > duration {
        return Err(ScenarioError::new(
            at_field,
            "after the end of the scenario (its duration)",
        ));
    }
    const ACTIONS: [&str; 6] = [
        "apply",
        "delete",
        "scale",
        "cloud",
        "restartCore",
        "pluginOutage",
    ];
    let present: Vec<&'static str> = ACTIONS
        .into_iter()
        .filter(|key| f.map.get(*key).is_some())
        .collect();
    let action = match present.as_slice() {
        [] => {
            return Err(ScenarioError::new(
                display_path(path),
                format!("needs one of {}", ACTIONS.join(", ")),
            ));
        }
        [one] => *one,
        several => {
            return Err(ScenarioError::new(
                display_path(path),
                format!("has {}: one action per event", several.join(" and ")),
            ));
        }
    };
    let field = f.field(action);
    let body = f.get(action).unwrap_or(&Value::Null);
    let action = match action {
        "apply" => Action::Apply(manifest(&field, body)?),
        "delete" => Action::Delete(object_key(&field, body)?),
        "scale" => {
            let mut s = Fields::of(&field, body)?;
            let kind = s.required_string("kind")?;
            if kind != "Deployment" {
                return Err(ScenarioError::new(
                    s.field("kind"),
                    format!("{kind:?}: only a Deployment can be scaled"),
                ));
            }
            let namespace = s
                .string("namespace")?
                .unwrap_or_else(|| "default".to_owned());
            let name = s.required_string("name")?;
            let replicas_field = s.field("replicas");
            let replicas = match s.required("replicas")? {
                Value::Number(n) => n
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        ScenarioError::new(&replicas_field, "expected a whole number >= 0")
                    })?,
                other => {
                    return Err(ScenarioError::new(
                        replicas_field,
                        format!("expected a whole number, found {}", type_name(other)),
                    ));
                }
            };
            s.finish()?;
            Action::Scale {
                deployment: ObjectKey {
                    kind: Kind::Deployment,
                    namespace: Some(namespace),
                    name,
                },
                replicas,
            }
        }
        "cloud" => {
            let mut c = Fields::of(&field, body)?;
            let publish_field = c.field("publishImage");
            let publish = c.get("publishImage");
            let errors = c.list("capacityErrors")?;
            let change = match (publish, errors) {
                (Some(image_value), None) => {
                    CloudChange::PublishImage(self::image(&publish_field, image_value)?)
                }
                (None, Some(items)) => CloudChange::CapacityErrors(capacity_errors(
                    &c.field("capacityErrors"),
                    items,
                    cloud,
                )?),
                (Some(_), Some(_)) => {
                    return Err(ScenarioError::new(
                        field,
                        "has publishImage and capacityErrors: one change per event",
                    ));
                }
                (None, None) => {
                    return Err(ScenarioError::new(
                        field,
                        "needs publishImage or capacityErrors",
                    ));
                }
            };
            c.finish()?;
            if let CloudChange::PublishImage(image) = &change
                && cloud.images.iter().any(|known| known.id == image.id)
            {
                return Err(ScenarioError::new(
                    format!("{publish_field}.id"),
                    format!("{:?} is already one of cloud.images", image.id),
                ));
            }
            Action::Cloud(change)
        }
        "restartCore" => {
            if !matches!(body, Value::Object(map) if map.is_empty()) && !body.is_null() {
                return Err(ScenarioError::new(field, "expected {}"));
            }
            Action::RestartCore
        }
        _ => {
            let mut o = Fields::of(&field, body)?;
            let for_field = o.field("for");
            let length = self::duration(&for_field, o.required("for")?)?;
            if length.is_zero() {
                return Err(ScenarioError::new(for_field, "must be positive"));
            }
            o.finish()?;
            Action::PluginOutage(length)
        }
    };
    f.finish()?;
    Ok(ScheduledEvent {
        field: display_path(path),
        at,
        action,
    })
}

/// What the manifests refer to must exist by the time it is needed: the node class of every
/// NodePool and adopted NodeClaim, a Deployment before it is scaled.
fn check_references(scenario: &Scenario) -> Result<()> {
    let mut created: Vec<&ObjectKey> = scenario.objects.iter().map(|m| &m.key).collect();
    for (i, manifest) in scenario.objects.iter().enumerate() {
        if created[..i].contains(&&manifest.key) {
            return Err(ScenarioError::new(
                format!("objects[{i}].metadata.name"),
                format!("{} is listed twice", manifest.key),
            ));
        }
    }
    for event in &scenario.events {
        if let Action::Apply(manifest) = &event.action {
            created.push(&manifest.key);
        }
    }
    for (i, event) in scenario.events.iter().enumerate() {
        if let Action::Scale { deployment, .. } = &event.action
            && !created.contains(&deployment)
        {
            return Err(ScenarioError::new(
                format!("events[{i}].scale"),
                format!("{deployment} is not created by the scenario"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: t\nduration: 10m\n";

    fn error_of(text: &str) -> ScenarioError {
        match parse(text) {
            Ok(scenario) => panic!("accepted: {scenario:?}"),
            Err(error) => error,
        }
    }

    #[test]
    fn a_minimal_scenario_gets_the_documented_defaults() {
        let scenario = parse(MINIMAL).unwrap();
        assert_eq!(scenario.seed, 0);
        assert_eq!(scenario.start, DEFAULT_START.parse::<Timestamp>().unwrap());
        assert_eq!(scenario.duration, Duration::from_secs(600));
        assert_eq!(scenario.cloud.region, "us-east-1");
        assert_eq!(scenario.cloud.launch_delay, Duration::from_secs(30));
        assert_eq!(scenario.cloud.registration_delay, Duration::from_secs(30));
        assert!(scenario.cloud.spot);
        assert!(scenario.objects.is_empty() && scenario.events.is_empty());
    }

    #[test]
    fn a_missing_duration_names_the_field() {
        assert_eq!(error_of("name: t\n").field, "duration");
    }

    #[test]
    fn a_bad_duration_names_the_field_and_the_value() {
        let error = error_of("name: t\nduration: forever\n");
        assert_eq!(error.field, "duration");
        assert!(error.message.contains("forever"), "{error}");
    }

    #[test]
    fn a_misspelt_top_level_field_is_refused() {
        let error = error_of("name: t\nduration: 1m\nevnets: []\n");
        assert_eq!(error.field, "evnets");
    }

    #[test]
    fn an_unknown_instance_type_names_its_index() {
        let error =
            error_of("name: t\nduration: 1m\ncloud: {instanceTypes: [m5.large, m5.gigantic]}\n");
        assert_eq!(error.field, "cloud.instanceTypes[1]");
    }

    #[test]
    fn a_subnet_outside_the_cloud_zones_is_refused() {
        let error = error_of(
            "name: t\nduration: 1m\ncloud: {zones: [us-east-1a], subnets: [{id: subnet-b, zone: us-east-1b}]}\n",
        );
        assert_eq!(error.field, "cloud.subnets[0].zone");
    }

    #[test]
    fn an_unsupported_kind_names_the_object() {
        let error = error_of(
            "name: t\nduration: 1m\nobjects:\n  - {apiVersion: v1, kind: Service, metadata: {name: s}}\n",
        );
        assert_eq!(error.field, "objects[0].kind");
    }

    #[test]
    fn a_field_of_the_wrong_type_names_its_path_inside_the_manifest() {
        let error = error_of(
            "name: t\nduration: 1m\nobjects:\n  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: many, selector: {}, template: {spec: {containers: []}}}}\n",
        );
        assert_eq!(error.field, "objects[0].spec.replicas");
    }

    #[test]
    fn an_invalid_node_pool_names_the_rule_it_breaks() {
        let error = error_of(
            r#"name: t
duration: 1m
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements:
            - {key: karpenter.sh/nodepool, operator: In, values: [x]}
"#,
        );
        assert!(
            error
                .field
                .starts_with("objects[0].spec.template.spec.requirements[0]"),
            "{error}"
        );
    }

    #[test]
    fn events_are_sorted_by_time_keeping_the_file_order_for_ties() {
        let scenario = parse(
            "name: t\nduration: 1h\nevents:\n  - {at: 30m, restartCore: {}}\n  - {at: 10m, pluginOutage: {for: 1m}}\n  - {at: 30m, pluginOutage: {for: 2m}}\n",
        )
        .unwrap();
        let actions: Vec<&Action> = scenario.events.iter().map(|e| &e.action).collect();
        assert_eq!(
            actions,
            [
                &Action::PluginOutage(Duration::from_secs(60)),
                &Action::RestartCore,
                &Action::PluginOutage(Duration::from_secs(120)),
            ]
        );
    }

    #[test]
    fn an_event_with_two_actions_is_refused() {
        let error = error_of(
            "name: t\nduration: 1h\nevents:\n  - {at: 1m, restartCore: {}, pluginOutage: {for: 1m}}\n",
        );
        assert_eq!(error.field, "events[0]");
    }

    #[test]
    fn an_event_after_the_end_is_refused() {
        let error = error_of("name: t\nduration: 10m\nevents:\n  - {at: 11m, restartCore: {}}\n");
        assert_eq!(error.field, "events[0].at");
    }

    #[test]
    fn scaling_a_deployment_the_scenario_never_creates_is_refused() {
        let error = error_of(
            "name: t\nduration: 10m\nevents:\n  - {at: 1m, scale: {kind: Deployment, name: web, replicas: 2}}\n",
        );
        assert_eq!(error.field, "events[0].scale");
    }

    #[test]
    fn an_adopted_node_claim_needs_a_provider_id() {
        let error = error_of(
            r#"name: t
duration: 1m
objects:
  - apiVersion: karpenter.sh/v1
    kind: NodeClaim
    metadata: {name: default-abc, labels: {karpenter.sh/nodepool: default}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
"#,
        );
        assert_eq!(error.field, "objects[0].status.providerID");
    }

    #[test]
    fn yaml_syntax_errors_name_the_line() {
        let error = error_of("name: t\nduration: [1m\n");
        assert!(error.field.starts_with("(line"), "{error}");
    }

    #[test]
    fn provider_ids_split_into_zone_and_instance() {
        assert_eq!(
            parse_provider_id("aws:///us-east-1a/i-0abc").unwrap(),
            ("us-east-1a".to_owned(), "i-0abc".to_owned())
        );
        assert!(parse_provider_id("aws:///i-0abc").is_err());
        assert!(parse_provider_id("gce://x/y").is_err());
    }

    #[test]
    fn every_example_scenario_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                count += 1;
            }
        }
        assert!(count >= 5, "{count} scenarios");
    }
}
