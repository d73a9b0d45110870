//! `simulate --from-dump`: an operator's own cluster as a scenario. Pure: the text of
//! `kubectl get nodepools,nodeclaims,ec2nodeclasses,nodes,pods,pdb,deployments,daemonsets -A
//! -o yaml` (or JSON, multi-document YAML, single objects) in, a scenario document in the
//! format of `simulator/SCENARIO.md` out, with warnings for what could not come along.
//!
//! - The fleet is adopted as it is: NodeClaims (launched ones: with a `status.providerID`) and
//!   Nodes with their status; a Node no NodeClaim owns (a managed node group's) is kept
//!   without its provider ID, so the simulated cloud leaves it alone.
//! - Workloads are recreated: Deployments, DaemonSets, PodDisruptionBudgets, PriorityClasses.
//!   Pods their controllers make again are dropped; a pod whose controller is not in the dump
//!   (or is of a kind the simulator does not run) is kept as a plain pod, with a warning.
//! - The cloud is inferred (`cloud.rs`), sensitive fields dropped (`sanitize.rs`).
//! - Objects are ordered by kind (node classes first, pods last), then namespace and name:
//!   the same dump gives the same scenario, byte for byte.

mod cloud;
mod files;
mod read;
mod sanitize;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::scenario::{self, Kind};

pub use self::files::load;

/// The duration a dumped cluster runs for when none is asked for.
pub const DEFAULT_DURATION: &str = "1h";

/// One dump file's text, and the name it is called by in messages (its path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The path, for messages and the scenario's header.
    pub name: String,
    /// The text.
    pub text: String,
}

/// How the scenario is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpOptions {
    /// The scenario's `duration` (Go form: `1h`, `90m`).
    pub duration: String,
}

impl Default for DumpOptions {
    fn default() -> Self {
        Self {
            duration: DEFAULT_DURATION.to_owned(),
        }
    }
}

/// Why a dump could not become a scenario.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// A file could not be read.
    #[error("{file}: {message}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        message: String,
    },
    /// A file is not YAML or JSON holding objects.
    #[error("{file}: {place}: {message}")]
    Document {
        /// The file.
        file: String,
        /// Where in it (`line 3, column 1`, `document 2, items[4]`).
        place: String,
        /// What is wrong.
        message: String,
    },
    /// An object is invalid.
    #[error("{file}: {object}: {field}: {message}")]
    Object {
        /// The file.
        file: String,
        /// `kind/namespace/name` (`kind/name` for cluster-scoped kinds), or where it is in the
        /// file when it has no name.
        object: String,
        /// The field, `spec.replicas`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The cloud the dump implies cannot be simulated (a region without a catalogue).
    #[error("{0}")]
    Cloud(String),
}

/// Something of the dump that did not come along as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file.
    pub file: String,
    /// `kind/namespace/name`.
    pub object: String,
    /// What happened to it.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.object, self.message)
    }
}

/// A scenario built from a dump.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    /// The scenario document (the format of `simulator/SCENARIO.md`).
    pub document: Value,
    /// What did not come along as it was.
    pub warnings: Vec<Warning>,
    /// The files it came from.
    pub sources: Vec<String>,
}

/// One object of the dump, identified.
#[derive(Debug, Clone)]
struct Object {
    file: String,
    kind: Kind,
    namespace: Option<String>,
    name: String,
    value: Value,
}

impl Object {
    fn label(&self) -> String {
        label(self.kind.as_str(), self.namespace.as_deref(), &self.name)
    }
}

fn label(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// The order objects are applied in: what others refer to first.
fn kind_rank(kind: Kind) -> u8 {
    match kind {
        Kind::EC2NodeClass => 0,
        Kind::NodePool => 1,
        Kind::PriorityClass => 2,
        Kind::NodeClaim => 3,
        Kind::Node => 4,
        Kind::PodDisruptionBudget => 5,
        Kind::DaemonSet => 6,
        Kind::Deployment => 7,
        Kind::Pod => 8,
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Builds a scenario from dump files.
pub fn build(sources: &[Source], options: &DumpOptions) -> Result<Built, DumpError> {
    let mut warnings = Vec::new();
    let mut objects: Vec<Object> = Vec::new();
    let mut seen: BTreeSet<(Kind, Option<String>, String)> = BTreeSet::new();
    for source in sources {
        for found in read::objects(source)? {
            let Some(object) = identify(found, &mut warnings)? else {
                continue;
            };
            let key = (object.kind, object.namespace.clone(), object.name.clone());
            if !seen.insert(key) {
                warnings.push(Warning {
                    file: object.file.clone(),
                    object: object.label(),
                    message: "listed again: the first one is kept".to_owned(),
                });
                continue;
            }
            objects.push(object);
        }
    }

    let of_kind = |kind: Kind| objects.iter().filter(move |o| o.kind == kind);
    let deployments: BTreeSet<(String, String)> = of_kind(Kind::Deployment)
        .map(|o| (o.namespace.clone().unwrap_or_default(), o.name.clone()))
        .collect();
    let daemon_sets: BTreeSet<(String, String)> = of_kind(Kind::DaemonSet)
        .map(|o| (o.namespace.clone().unwrap_or_default(), o.name.clone()))
        .collect();

    // NodeClaims: only launched ones can be adopted.
    let mut kept: Vec<Object> = Vec::new();
    for object in &objects {
        if object.kind == Kind::NodeClaim {
            let provider_id = str_at(&object.value, "/status/providerID");
            let problem = match provider_id {
                None => Some("no status.providerID (not launched yet): left out, the simulated provisioner decides again for its pods".to_owned()),
                Some(id) => scenario::parse_provider_id(id)
                    .err()
                    .map(|message| format!("status.providerID: {message}: left out")),
            };
            if let Some(message) = problem {
                warnings.push(Warning {
                    file: object.file.clone(),
                    object: object.label(),
                    message,
                });
                continue;
            }
            if object
                .value
                .pointer("/metadata/deletionTimestamp")
                .is_some()
            {
                warnings.push(Warning {
                    file: object.file.clone(),
                    object: object.label(),
                    message: "was being deleted: adopted as it is, not deleting".to_owned(),
                });
            }
        }
        kept.push(object.clone());
    }
    let claimed: BTreeSet<String> = kept
        .iter()
        .filter(|o| o.kind == Kind::NodeClaim)
        .filter_map(|o| str_at(&o.value, "/status/providerID").map(str::to_owned))
        .collect();
    let node_names: BTreeSet<String> = kept
        .iter()
        .filter(|o| o.kind == Kind::Node)
        .map(|o| o.name.clone())
        .collect();

    // The cloud, from the classes as dumped (their status) and the fleet.
    let start = start_time(&kept);
    let classes: Vec<cloud::Class<'_>> = kept
        .iter()
        .filter(|o| o.kind == Kind::EC2NodeClass)
        .map(|o| cloud::Class {
            label: o.label(),
            name: o.name.clone(),
            object: &o.value,
        })
        .collect();
    let claims: Vec<cloud::Claim<'_>> = kept
        .iter()
        .filter(|o| o.kind == Kind::NodeClaim)
        .map(|o| cloud::Claim { object: &o.value })
        .collect();
    let nodes: Vec<&Value> = kept
        .iter()
        .filter(|o| o.kind == Kind::Node)
        .map(|o| &o.value)
        .collect();
    let inferred = cloud::infer(&classes, &claims, &nodes, start).map_err(DumpError::Cloud)?;
    let class_files: BTreeMap<String, String> = kept
        .iter()
        .filter(|o| o.kind == Kind::EC2NodeClass)
        .map(|o| (o.label(), o.file.clone()))
        .collect();
    for (object, message) in inferred.warnings {
        warnings.push(Warning {
            file: class_files.get(&object).cloned().unwrap_or_default(),
            object,
            message,
        });
    }

    let mut emitted: Vec<Object> = Vec::new();
    for mut object in kept {
        // Read before the metadata is cleaned, which drops the deletion timestamp.
        let terminating = object
            .value
            .pointer("/metadata/deletionTimestamp")
            .is_some();
        sanitize::metadata(&mut object.value);
        match object.kind {
            Kind::EC2NodeClass => {
                if let Some(Value::Object(spec)) = object.value.get_mut("spec") {
                    spec.remove("userData");
                    if let Some(terms) = inferred.term_changes.get(&object.name) {
                        spec.insert("amiSelectorTerms".to_owned(), terms.clone());
                    }
                }
                sanitize::remove(&mut object.value, "status");
            }
            Kind::NodePool
            | Kind::Deployment
            | Kind::DaemonSet
            | Kind::PodDisruptionBudget
            | Kind::PriorityClass => {
                sanitize::remove(&mut object.value, "status");
                sanitize::template(&mut object.value);
            }
            Kind::NodeClaim => {}
            Kind::Node => {
                sanitize::node(&mut object.value);
                let provider_id = str_at(&object.value, "/spec/providerID").map(str::to_owned);
                if let Some(provider_id) = provider_id
                    && !claimed.contains(&provider_id)
                {
                    if let Some(Value::Object(spec)) = object.value.get_mut("spec") {
                        spec.remove("providerID");
                    }
                    warnings.push(Warning {
                        file: object.file.clone(),
                        object: object.label(),
                        message: "no NodeClaim owns it: kept as a node outside the simulated cloud (its providerID dropped, so nothing reaps or replaces it)".to_owned(),
                    });
                }
            }
            Kind::Pod => {
                if !keep_pod(
                    &mut object,
                    terminating,
                    &deployments,
                    &daemon_sets,
                    &node_names,
                    &mut warnings,
                ) {
                    continue;
                }
            }
        }
        emitted.push(object);
    }
    emitted.sort_by(|a, b| {
        (kind_rank(a.kind), &a.namespace, &a.name).cmp(&(kind_rank(b.kind), &b.namespace, &b.name))
    });
    for object in &emitted {
        scenario::check_manifest("", &object.value).map_err(|error| DumpError::Object {
            file: object.file.clone(),
            object: object.label(),
            // A refusal of the object as a whole (a required field missing) names no path.
            field: match error.field.trim_start_matches('.') {
                "" => "(object)".to_owned(),
                field => field.to_owned(),
            },
            message: error.message,
        })?;
    }

    let mut document = Map::new();
    document.insert(
        "name".to_owned(),
        json!(format!(
            "from-dump {}",
            sources
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        )),
    );
    document.insert("seed".to_owned(), json!(0));
    document.insert("start".to_owned(), json!(start.to_string()));
    document.insert("duration".to_owned(), json!(options.duration));
    document.insert("cloud".to_owned(), inferred.cloud);
    document.insert(
        "objects".to_owned(),
        Value::Array(emitted.into_iter().map(|o| o.value).collect()),
    );
    Ok(Built {
        document: Value::Object(document),
        warnings,
        sources: sources.iter().map(|s| s.name.clone()).collect(),
    })
}

/// The kind of a dumped object, and its name; `None` (with a warning) for what a scenario
/// cannot hold.
fn identify(found: read::Found, warnings: &mut Vec<Warning>) -> Result<Option<Object>, DumpError> {
    let read::Found {
        file,
        place,
        object: value,
    } = found;
    let where_ = if place.is_empty() {
        "(document)".to_owned()
    } else {
        place
    };
    let missing = |field: &str| DumpError::Object {
        file: file.clone(),
        object: where_.clone(),
        field: field.to_owned(),
        message: "required".to_owned(),
    };
    let kind_name = str_at(&value, "/kind").ok_or_else(|| missing("kind"))?;
    let api_version = str_at(&value, "/apiVersion").ok_or_else(|| missing("apiVersion"))?;
    let name = str_at(&value, "/metadata/name").ok_or_else(|| missing("metadata.name"))?;
    let namespace = str_at(&value, "/metadata/namespace");
    let Some(kind) = Kind::ALL.into_iter().find(|k| k.as_str() == kind_name) else {
        warnings.push(Warning {
            file: file.clone(),
            object: label(kind_name, namespace, name),
            message: "a kind scenarios do not hold: skipped".to_owned(),
        });
        return Ok(None);
    };
    if api_version != kind.api_version() {
        warnings.push(Warning {
            file: file.clone(),
            object: label(kind_name, namespace, name),
            message: format!(
                "apiVersion {api_version}: the simulator reads {} (for Karpenter's older APIs, `core-svc convert` first): skipped",
                kind.api_version()
            ),
        });
        return Ok(None);
    }
    let namespace = kind
        .namespaced()
        .then(|| namespace.unwrap_or("default").to_owned());
    Ok(Some(Object {
        file,
        kind,
        namespace,
        name: name.to_owned(),
        value,
    }))
}

/// Whether a dumped pod stays in the scenario, and in which form: a pod a dumped Deployment
/// or DaemonSet makes again is dropped; a pod of a controller not in the dump stays as a plain
/// pod; a finished or terminating pod goes.
fn keep_pod(
    object: &mut Object,
    terminating: bool,
    deployments: &BTreeSet<(String, String)>,
    daemon_sets: &BTreeSet<(String, String)>,
    nodes: &BTreeSet<String>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let namespace = object.namespace.clone().unwrap_or_default();
    let (file, pod_label) = (object.file.clone(), object.label());
    let mut warn = |message: String| {
        warnings.push(Warning {
            file: file.clone(),
            object: pod_label.clone(),
            message,
        });
    };
    if terminating {
        warn("was terminating: left out".to_owned());
        return false;
    }
    if let Some(phase @ ("Succeeded" | "Failed")) = str_at(&object.value, "/status/phase") {
        warn(format!(
            "phase {phase}: a finished pod holds no capacity, left out"
        ));
        return false;
    }
    let controller = object
        .value
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|owners| {
            owners
                .iter()
                .find(|owner| owner.get("controller").and_then(Value::as_bool) == Some(true))
        })
        .map(|owner| {
            (
                str_at(owner, "/kind").unwrap_or_default().to_owned(),
                str_at(owner, "/name").unwrap_or_default().to_owned(),
            )
        });
    match controller {
        None => {}
        // A static pod's mirror: its owner stays, core reads it.
        Some((kind, _)) if kind == "Node" => {}
        Some((kind, name)) => {
            let recreated = match kind.as_str() {
                "Deployment" => Some(name.clone()),
                "ReplicaSet" => Some(deployment_of_replica_set(
                    &name,
                    str_at(&object.value, "/metadata/labels/pod-template-hash"),
                )),
                _ => None,
            }
            .map(|deployment| deployments.contains(&(namespace.clone(), deployment)))
            .unwrap_or_else(|| {
                kind == "DaemonSet" && daemon_sets.contains(&(namespace.clone(), name.clone()))
            });
            if recreated {
                return false;
            }
            let which = match kind.as_str() {
                "ReplicaSet" => format!(
                    "its ReplicaSet {name}'s Deployment {} is not in the dump",
                    deployment_of_replica_set(
                        &name,
                        str_at(&object.value, "/metadata/labels/pod-template-hash")
                    )
                ),
                "Deployment" | "DaemonSet" => format!("its {kind} {name} is not in the dump"),
                _ => format!("its {kind} {name} is not a kind the simulator runs"),
            };
            warn(format!(
                "{which}: kept as a plain pod (not recreated if evicted)"
            ));
            if let Some(Value::Object(metadata)) = object.value.get_mut("metadata") {
                metadata.remove("ownerReferences");
            }
        }
    }
    if let Some(node) = str_at(&object.value, "/spec/nodeName")
        && !nodes.contains(node)
    {
        warn(format!(
            "bound to node {node}, which is not in the dump: left for the scheduler"
        ));
        if let Some(Value::Object(spec)) = object.value.get_mut("spec") {
            spec.remove("nodeName");
        }
    }
    if let Some(spec) = object.value.get_mut("spec") {
        sanitize::pod_spec(spec);
    }
    sanitize::pod_status(&mut object.value);
    true
}

/// The Deployment a ReplicaSet belongs to: its name less the `-<pod-template-hash>` the
/// Deployment controller appends.
fn deployment_of_replica_set(replica_set: &str, hash: Option<&str>) -> String {
    hash.and_then(|hash| replica_set.strip_suffix(hash))
        .and_then(|rest| rest.strip_suffix('-'))
        .or_else(|| {
            replica_set
                .rsplit_once('-')
                .map(|(deployment, _)| deployment)
        })
        .unwrap_or(replica_set)
        .to_owned()
}

/// When the simulation starts: the newest object's creation, to the next whole minute (so
/// every object exists by then), or the scenario format's default when none says.
fn start_time(objects: &[Object]) -> Timestamp {
    let newest = objects
        .iter()
        .filter_map(|o| str_at(&o.value, "/metadata/creationTimestamp"))
        .filter_map(|text| text.parse::<Timestamp>().ok())
        .max();
    match newest {
        Some(time) => {
            let second = time.as_second();
            let minute = second.div_euclid(60)
                + i64::from(second.rem_euclid(60) != 0 || time.subsec_nanosecond() != 0);
            Timestamp::from_second(minute * 60).unwrap_or(time)
        }
        None => scenario::DEFAULT_START
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH),
    }
}

/// The scenario as YAML, with a header saying where it came from, what did not come along,
/// and how to add events.
pub fn to_yaml(built: &Built) -> String {
    let mut out = String::new();
    out.push_str("# Built by `simulate --from-dump` from ");
    out.push_str(&comment(&built.sources.join(", ")));
    out.push_str(
        ".\n# Run it with `simulate THIS-FILE`. To simulate a change, add `events:` (simulator/SCENARIO.md)\n# and run it again, e.g. an AMI release half an hour in (tagged as the images its\n# EC2NodeClasses select, so they pick it up and the fleet drifts to it):\n#\n#   events:\n",
    );
    let example = example_image(&built.document);
    out.push_str(&comment(&format!(
        "#     - {{at: 30m, cloud: {{publishImage: {example}}}}}"
    )));
    out.push('\n');
    if !built.warnings.is_empty() {
        out.push_str("#\n# What did not come along as it was:\n");
        for warning in &built.warnings {
            out.push_str(&comment(&format!(
                "#   - {}: {}",
                warning.object, warning.message
            )));
            out.push('\n');
        }
    }
    for key in ["name", "seed", "start", "duration", "cloud", "objects"] {
        if let Some(value) = built.document.get(key) {
            let mut section = Map::new();
            section.insert(key.to_owned(), value.clone());
            out.push_str(&serde_yaml::to_string(&Value::Object(section)).unwrap_or_default());
        }
    }
    out
}

/// `text` fit for a comment line: control characters and Unicode line separators (a newline
/// in an object's name would end the comment) escaped.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| {
            // U+2028 and U+2029 end a line for a YAML parser too.
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A `publishImage` for the header's example: a new image like the first one the cloud knows.
fn example_image(document: &Value) -> String {
    let first = document.pointer("/cloud/images/0");
    let architecture = first
        .and_then(|image| str_at(image, "/architecture"))
        .unwrap_or("x86_64");
    let mut text = format!("{{id: ami-0new, name: new-image, architecture: {architecture}");
    if let Some(alias) = first.and_then(|image| str_at(image, "/alias")) {
        text.push_str(&format!(", alias: {alias}"));
    }
    if let Some(Value::Object(tags)) = first.and_then(|image| image.get("tags")) {
        let tags: Vec<String> = tags
            .iter()
            .map(|(k, v)| format!("{k:?}: {:?}", v.as_str().unwrap_or("*")))
            .collect();
        text.push_str(&format!(", tags: {{{}}}", tags.join(", ")));
    }
    text.push('}');
    text
}
