//! The simulated cloud a dump implies: the images, subnets and security groups its
//! EC2NodeClasses resolved to (their `status`) and its NodeClaims run (`status.imageID`), the
//! zones and the region its nodes are in.
//!
//! The simulated cloud resolves an EC2NodeClass's selector terms as aws-plugin resolves them
//! against EC2 (`aws-plugin/src/node_class/`, over `simulator/src/cloud.rs`): tags ANDed within
//! a term (`*` for any value), ids and names exactly, image names with wildcards, terms ORed;
//! an `alias: family@latest` term through the SSM parameter the image's `alias` publishes. So
//! each thing a class resolved to is given the tags of the class's first term by tags (the
//! names and ids it already has), and the images a class's `@latest` alias resolved to that
//! alias: the same terms then resolve to the same things in the simulated cloud.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use crate::scenario::parse_provider_id;

const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
const LABEL_REGION: &str = "topology.kubernetes.io/region";
const LABEL_ARCH: &str = "kubernetes.io/arch";

/// How much older than the images the node classes resolve to the images only NodeClaims
/// name are made: never the newest, so a class never prefers them.
const OLDER_IMAGES: SignedDuration = SignedDuration::from_hours(30 * 24);

/// An EC2NodeClass of the dump, as read (before sanitizing).
pub(super) struct Class<'a> {
    /// `EC2NodeClass/name`, for warnings.
    pub label: String,
    /// Its name.
    pub name: String,
    /// The object.
    pub object: &'a Value,
}

/// An adopted NodeClaim, read for its node class, image, zone and architecture.
pub(super) struct Claim<'a> {
    /// The object.
    pub object: &'a Value,
}

/// The cloud section, and what could not be carried over (object label, message).
#[derive(Debug)]
pub(super) struct Inferred {
    /// `cloud:` as the scenario format spells it.
    pub cloud: Value,
    /// Warnings, each about an object.
    pub warnings: Vec<(String, String)>,
    /// Node classes whose `amiSelectorTerms` had to change, by name: the new terms.
    pub term_changes: BTreeMap<String, Value>,
}

#[derive(Debug, Default)]
struct Image {
    name: String,
    architecture: Option<String>,
    resolved: bool,
    tags: BTreeMap<String, String>,
    alias: Option<String>,
}

#[derive(Debug, Default)]
struct Subnet {
    zone: String,
    tags: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Group {
    name: String,
    tags: BTreeMap<String, String>,
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn list<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The tags of the first term that selects by tags.
fn first_tags(terms: &[Value]) -> BTreeMap<String, String> {
    terms
        .iter()
        .find_map(|term| term.get("tags").and_then(Value::as_object))
        .map(|tags| {
            tags.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("*").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds `from` to `into`, keeping what `into` has.
fn add_tags(into: &mut BTreeMap<String, String>, from: &BTreeMap<String, String>) {
    for (key, value) in from {
        into.entry(key.clone()).or_insert_with(|| value.clone());
    }
}

/// Kubernetes' architecture as EC2 spells it.
fn ec2_architecture(arch: &str) -> Option<&'static str> {
    match arch {
        "amd64" | "x86_64" => Some("x86_64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

/// Whether a `status.amis` entry is an alias's standard variant: none of its requirements
/// asks for a label to exist (the Nvidia and Neuron variants ask for
/// `karpenter.k8s.aws/instance-gpu-count` or `instance-accelerator-count`; the standard one
/// asks for them not to: aws/karpenter-provider-aws `pkg/providers/amifamily/types.go`,
/// `Variant.Requirements`).
fn is_standard_variant(ami: &Value) -> bool {
    list(ami, "/requirements")
        .iter()
        .all(|requirement| str_at(requirement, "/operator") != Some("Exists"))
}

/// The architecture an image's requirements pin, if they pin one.
fn requirement_architecture(ami: &Value) -> Option<&'static str> {
    list(ami, "/requirements").iter().find_map(|requirement| {
        (requirement.get("key").and_then(Value::as_str) == Some(LABEL_ARCH)
            && requirement.get("operator").and_then(Value::as_str) == Some("In"))
        .then(|| list(requirement, "/values"))
        .and_then(|values| match values {
            [one] => one.as_str().and_then(ec2_architecture),
            _ => None,
        })
    })
}

/// The family of an `alias: family@latest` term, lower case, and whether it was `@latest`.
fn alias_term(terms: &[Value]) -> Option<(String, bool)> {
    terms.iter().find_map(|term| {
        let alias = term.get("alias").and_then(Value::as_str)?;
        let (family, version) = alias.split_once('@').unwrap_or((alias, "latest"));
        Some((family.to_lowercase(), version == "latest"))
    })
}

/// Whether `id` is an EC2 id of the kind `prefix` starts (what the scenario's cloud takes);
/// a status naming anything else names nothing the simulated cloud can hold.
fn is_id(id: &str, prefix: &str) -> bool {
    id.len() > prefix.len() && id.starts_with(prefix)
}

/// The region of a zone name (`us-east-1a` → `us-east-1`).
fn region_of_zone(zone: &str) -> Option<String> {
    let trimmed = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
    (trimmed.len() < zone.len() && trimmed.ends_with(|c: char| c.is_ascii_digit()))
        .then(|| trimmed.to_owned())
}

/// Infers the cloud from the dump's node classes, adopted NodeClaims and Nodes. `start` is
/// when the simulation starts: the images the classes resolved to are made then.
pub(super) fn infer(
    classes: &[Class<'_>],
    claims: &[Claim<'_>],
    nodes: &[&Value],
    start: Timestamp,
) -> Result<Inferred, String> {
    let mut warnings = Vec::new();
    let mut term_changes: BTreeMap<String, Value> = BTreeMap::new();
    let mut images: BTreeMap<String, Image> = BTreeMap::new();
    let mut subnets: BTreeMap<String, Subnet> = BTreeMap::new();
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut zones: BTreeSet<String> = BTreeSet::new();
    let mut regions: BTreeMap<String, usize> = BTreeMap::new();

    for object in claims
        .iter()
        .map(|claim| claim.object)
        .chain(nodes.iter().copied())
    {
        if let Some(zone) = label(object, LABEL_ZONE) {
            zones.insert(zone.to_owned());
        }
        if let Some(region) = label(object, LABEL_REGION) {
            *regions.entry(region.to_owned()).or_default() += 1;
        }
    }
    for claim in claims {
        if let Some((zone, _)) =
            str_at(claim.object, "/status/providerID").and_then(|p| parse_provider_id(p).ok())
        {
            zones.insert(zone);
        }
    }

    // Every zone a class resolved a subnet in, before any class without status gets one subnet
    // per zone: what it gets must not depend on the order the classes come in.
    for class in classes {
        for found in list(class.object, "/status/subnets") {
            if let Some(zone) = str_at(found, "/zone") {
                zones.insert(zone.to_owned());
            }
        }
    }

    let classes_by_name: BTreeMap<&str, &Class<'_>> =
        classes.iter().map(|c| (c.name.as_str(), c)).collect();
    for class in classes {
        let object = class.object;
        let ami_terms = list(object, "/spec/amiSelectorTerms");
        let ami_tags = first_tags(ami_terms);
        let mut terms: Vec<Value> = ami_terms.to_vec();
        let alias = match alias_term(ami_terms) {
            Some((family, true)) => Some(family),
            Some((family, false)) => {
                warnings.push((
                    class.label.clone(),
                    format!(
                        "amiSelectorTerms: a pinned alias resolves in the simulated cloud only as {family}@latest (the images it resolved to are published as that)"
                    ),
                ));
                for term in &mut terms {
                    if term.get("alias").is_some() {
                        *term = json!({"alias": format!("{family}@latest")});
                    }
                }
                Some(family)
            }
            None => None,
        };
        // The simulated cloud owns every image it knows (as the account itself): a term
        // naming another owner would find none of them.
        let mut owner_dropped = false;
        for term in terms.iter_mut().filter_map(Value::as_object_mut) {
            if term
                .get("owner")
                .and_then(Value::as_str)
                .is_some_and(|owner| owner != "self")
            {
                term.remove("owner");
                owner_dropped = true;
            }
        }
        if owner_dropped {
            warnings.push((
                class.label.clone(),
                "amiSelectorTerms: `owner` dropped, the simulated cloud owns every image"
                    .to_owned(),
            ));
        }
        if terms != ami_terms {
            term_changes.insert(class.name.clone(), Value::Array(terms));
        }
        if ami_terms
            .iter()
            .any(|term| term.get("ssmParameter").is_some())
        {
            warnings.push((
                class.label.clone(),
                "amiSelectorTerms: an ssmParameter term does not resolve in the simulated cloud"
                    .to_owned(),
            ));
        }
        for ami in list(object, "/status/amis") {
            let Some(id) = str_at(ami, "/id").filter(|id| is_id(id, "ami-")) else {
                continue;
            };
            let image = images.entry(id.to_owned()).or_default();
            image.resolved = true;
            if image.name.is_empty()
                && let Some(name) = str_at(ami, "/name")
            {
                name.clone_into(&mut image.name);
            }
            if image.architecture.is_none() {
                image.architecture = requirement_architecture(ami).map(str::to_owned);
            }
            add_tags(&mut image.tags, &ami_tags);
            // The simulated cloud keeps one `@latest` image per architecture (the standard
            // variant's parameter); an alias also lists GPU and accelerator variants, which
            // must not take its place.
            if image.alias.is_none() && is_standard_variant(ami) {
                image.alias.clone_from(&alias);
            }
        }

        let subnet_terms = list(object, "/spec/subnetSelectorTerms");
        let subnet_tags = first_tags(subnet_terms);
        let resolved_subnets = list(object, "/status/subnets");
        for found in resolved_subnets {
            let (Some(id), Some(zone)) = (
                str_at(found, "/id").filter(|id| is_id(id, "subnet-")),
                str_at(found, "/zone"),
            ) else {
                continue;
            };
            let subnet = subnets.entry(id.to_owned()).or_default();
            zone.clone_into(&mut subnet.zone);
            add_tags(&mut subnet.tags, &subnet_tags);
            zones.insert(zone.to_owned());
        }
        let group_terms = list(object, "/spec/securityGroupSelectorTerms");
        let group_tags = first_tags(group_terms);
        let group_name = group_terms
            .iter()
            .find_map(|term| str_at(term, "/name"))
            .map(str::to_owned);
        let resolved_groups = list(object, "/status/securityGroups");
        for found in resolved_groups {
            let Some(id) = str_at(found, "/id").filter(|id| is_id(id, "sg-")) else {
                continue;
            };
            let group = groups.entry(id.to_owned()).or_default();
            if group.name.is_empty() {
                group.name = str_at(found, "/name")
                    .map(str::to_owned)
                    .or_else(|| group_name.clone())
                    .unwrap_or_else(|| id.to_owned());
            }
            add_tags(&mut group.tags, &group_tags);
        }
        // A class not resolved yet (no status): what its terms by tags would find.
        if resolved_subnets.is_empty() {
            if subnet_tags.is_empty() {
                warnings.push((
                    class.label.clone(),
                    "status.subnets is empty and no subnetSelectorTerm selects by tags: no subnet made for it".to_owned(),
                ));
            } else {
                for zone in &zones {
                    let subnet = subnets.entry(format!("subnet-{zone}")).or_default();
                    zone.clone_into(&mut subnet.zone);
                    add_tags(&mut subnet.tags, &subnet_tags);
                }
                warnings.push((
                    class.label.clone(),
                    "status.subnets is empty: one subnet per zone made, tagged to match its first subnetSelectorTerm".to_owned(),
                ));
            }
        }
        if resolved_groups.is_empty() {
            if group_tags.is_empty() && group_name.is_none() {
                warnings.push((
                    class.label.clone(),
                    "status.securityGroups is empty and no securityGroupSelectorTerm selects by tags or name: no security group made for it".to_owned(),
                ));
            } else {
                let id = format!("sg-{}", class.name);
                let group = groups.entry(id.clone()).or_default();
                if group.name.is_empty() {
                    group.name = group_name.clone().unwrap_or(id);
                }
                add_tags(&mut group.tags, &group_tags);
                warnings.push((
                    class.label.clone(),
                    "status.securityGroups is empty: a security group made to match its first securityGroupSelectorTerm".to_owned(),
                ));
            }
        }
    }

    // The images the fleet runs: those a class resolved to are known already; the others are
    // older images (a node running one is drifted, as it is in the cluster), unless the
    // class has not resolved any, in which case they are what it resolves to.
    for claim in claims {
        let Some(id) = str_at(claim.object, "/status/imageID").filter(|id| is_id(id, "ami-"))
        else {
            continue;
        };
        let class = str_at(claim.object, "/spec/nodeClassRef/name")
            .and_then(|name| classes_by_name.get(name));
        let image = images.entry(id.to_owned()).or_default();
        if image.architecture.is_none() {
            image.architecture = label(claim.object, LABEL_ARCH)
                .and_then(ec2_architecture)
                .map(str::to_owned);
        }
        if let Some(class) = class
            && list(class.object, "/status/amis").is_empty()
        {
            image.resolved = true;
            let terms = list(class.object, "/spec/amiSelectorTerms");
            add_tags(&mut image.tags, &first_tags(terms));
            if image.alias.is_none() {
                image.alias = alias_term(terms).map(|(family, _)| family);
            }
        }
    }

    let region = match regions
        .iter()
        .max_by_key(|(region, count)| (**count, std::cmp::Reverse(*region)))
    {
        Some((region, _)) => region.clone(),
        None => zones
            .iter()
            .find_map(|zone| region_of_zone(zone))
            .unwrap_or_else(|| crate::scenario::DEFAULT_REGION.to_owned()),
    };
    let catalogue = aws_plugin::catalogue::embedded(&region).map_err(|error| {
        format!("the cluster is in {region}, which the simulator has no catalogue of: {error}")
    })?;
    let known_zones = catalogue.zones();
    let unknown: Vec<String> = zones
        .iter()
        .filter(|zone| !known_zones.contains(*zone))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "zones {} are not zones of {region} the simulator knows ({})",
            unknown.join(", "),
            known_zones.join(", ")
        ));
    }

    let older = start
        .checked_sub(OLDER_IMAGES)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let image_values: Vec<Value> = images
        .into_iter()
        .map(|(id, image)| {
            let mut fields = Map::new();
            let name = if image.name.is_empty() {
                format!("dumped-{id}")
            } else {
                image.name
            };
            fields.insert("id".to_owned(), json!(id));
            fields.insert("name".to_owned(), json!(name));
            fields.insert(
                "architecture".to_owned(),
                json!(image.architecture.unwrap_or_else(|| "x86_64".to_owned())),
            );
            let created = if image.resolved { start } else { older };
            fields.insert("created".to_owned(), json!(created.to_string()));
            if !image.tags.is_empty() {
                fields.insert("tags".to_owned(), json!(image.tags));
            }
            if let Some(alias) = image.alias.filter(|_| image.resolved) {
                fields.insert("alias".to_owned(), json!(alias));
            }
            Value::Object(fields)
        })
        .collect();
    let subnet_values: Vec<Value> = subnets
        .into_iter()
        .map(|(id, subnet)| {
            let mut fields = Map::new();
            fields.insert("id".to_owned(), json!(id));
            fields.insert("zone".to_owned(), json!(subnet.zone));
            if !subnet.tags.is_empty() {
                fields.insert("tags".to_owned(), json!(subnet.tags));
            }
            Value::Object(fields)
        })
        .collect();
    let group_values: Vec<Value> = groups
        .into_iter()
        .map(|(id, group)| {
            let mut fields = Map::new();
            fields.insert("id".to_owned(), json!(id));
            fields.insert("name".to_owned(), json!(group.name));
            if !group.tags.is_empty() {
                fields.insert("tags".to_owned(), json!(group.tags));
            }
            Value::Object(fields)
        })
        .collect();
    let mut cloud = Map::new();
    cloud.insert("region".to_owned(), json!(region));
    if !zones.is_empty() {
        cloud.insert("zones".to_owned(), json!(zones));
    }
    cloud.insert("images".to_owned(), Value::Array(image_values));
    cloud.insert("subnets".to_owned(), Value::Array(subnet_values));
    cloud.insert("securityGroups".to_owned(), Value::Array(group_values));
    Ok(Inferred {
        cloud: Value::Object(cloud),
        warnings,
        term_changes,
    })
}
