//! The scenario's sections read and checked: the top level, the cloud, the scheduled events and
//! the references between them (manifests are [`manifest`](super::manifest)'s).

use std::time::Duration;

use aws_plugin::apis::ec2nodeclass::AMIFamily;
use core_svc::features::{FeatureGateError, FeatureGates};
use jiff::Timestamp;
use serde_json::{Map, Value};

use super::fields::{Fields, display_path, duration, string, timestamp, type_name};
use super::manifest::{manifest, object_key};
use super::{
    Action, CapacityErrorSpec, CloudChange, CloudSpec, DEFAULT_LAUNCH_DELAY, DEFAULT_REGION,
    DEFAULT_REGISTRATION_DELAY, DEFAULT_SCHEDULED_CHANGE_AFTER, DEFAULT_START, ImageSpec,
    InterruptSpec, Kind, KubeScheduler, MAX_DURATION, NodeConditionSpec, ObjectKey, Options,
    Result, Scenario, ScenarioError, ScheduledEvent, SecurityGroupSpec, SubnetSpec, Targets,
};

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
    let options = match fields.get("options") {
        None => Options::default(),
        Some(value) => options(value)?,
    };
    let kube_scheduler = match fields.get("kubeScheduler") {
        None => KubeScheduler::default(),
        Some(value) => kube_scheduler(value)?,
    };
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
        options,
        kube_scheduler,
        cloud,
        objects,
        events,
    };
    check_references(&scenario)?;
    Ok(scenario)
}

/// `kubeScheduler:`, one of [`KubeScheduler`]'s names.
fn kube_scheduler(value: &Value) -> Result<KubeScheduler> {
    let names = [KubeScheduler::Default, KubeScheduler::FirstFit].map(KubeScheduler::as_str);
    let Value::String(text) = value else {
        return Err(ScenarioError::new(
            "kubeScheduler",
            format!(
                "expected one of {}, found {}",
                names.join(", "),
                type_name(value)
            ),
        ));
    };
    KubeScheduler::from_name(text).ok_or_else(|| {
        ScenarioError::new(
            "kubeScheduler",
            format!("expected one of {}, found {text:?}", names.join(", ")),
        )
    })
}

/// The `options:` section.
pub(super) fn options(value: &Value) -> Result<Options> {
    let mut fields = Fields::of("options", value)?;
    let feature_gates = match fields.get("featureGates") {
        None => FeatureGates::default(),
        Some(Value::Object(gates)) => {
            let mut settings = Vec::with_capacity(gates.len());
            for (name, value) in gates {
                let field = format!("options.featureGates.{name}");
                let Value::Bool(on) = value else {
                    return Err(ScenarioError::new(
                        field,
                        format!("expected true or false, found {}", type_name(value)),
                    ));
                };
                settings.push((name.as_str(), *on));
            }
            FeatureGates::with(settings).map_err(|error| {
                let name = match &error {
                    FeatureGateError::Unknown { name } => name.clone(),
                    FeatureGateError::Malformed { item } => item.clone(),
                };
                ScenarioError::new(format!("options.featureGates.{name}"), error.to_string())
            })?
        }
        Some(other) => {
            return Err(ScenarioError::new(
                "options.featureGates",
                format!(
                    "expected a map of gate names to true or false, found {}",
                    type_name(other)
                ),
            ));
        }
    };
    fields.finish()?;
    Ok(Options { feature_gates })
}

pub(super) fn cloud(value: &Value) -> Result<CloudSpec> {
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

pub(super) fn unique<'a>(field: &str, ids: impl Iterator<Item = &'a str>, key: &str) -> Result<()> {
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

pub(super) fn prefixed_id(field: &str, id: String, prefix: &str) -> Result<String> {
    if id.len() > prefix.len() && id.starts_with(prefix) {
        Ok(id)
    } else {
        Err(ScenarioError::new(
            field,
            format!("{id:?} must start with {prefix:?}"),
        ))
    }
}

pub(super) fn image(path: &str, value: &Value) -> Result<ImageSpec> {
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

pub(super) fn capacity_errors(
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

pub(super) fn event(
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
    const ACTIONS: [&str; 10] = [
        "apply",
        "delete",
        "scale",
        "cloud",
        "restartCore",
        "pluginOutage",
        "slowPlugin",
        "conflicts",
        "nodeCondition",
        "deleteNodes",
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
            const CHANGES: [&str; 5] = [
                "publishImage",
                "capacityErrors",
                "interrupt",
                "registrationFailures",
                "launchFailures",
            ];
            let present: Vec<&'static str> = CHANGES
                .into_iter()
                .filter(|key| c.map.get(*key).is_some())
                .collect();
            match present.as_slice() {
                [] => {
                    return Err(ScenarioError::new(
                        field,
                        format!("needs one of {}", CHANGES.join(", ")),
                    ));
                }
                [_] => {}
                several => {
                    return Err(ScenarioError::new(
                        field,
                        format!("has {}: one change per event", several.join(" and ")),
                    ));
                }
            }
            let publish_field = c.field("publishImage");
            let interrupt_field = c.field("interrupt");
            let failures_field = c.field("registrationFailures");
            let launches_field = c.field("launchFailures");
            let change = if let Some(image_value) = c.get("publishImage") {
                CloudChange::PublishImage(self::image(&publish_field, image_value)?)
            } else if let Some(items) = c.list("capacityErrors")? {
                CloudChange::CapacityErrors(capacity_errors(
                    &c.field("capacityErrors"),
                    items,
                    cloud,
                )?)
            } else if let Some(value) = c.get("interrupt") {
                CloudChange::Interrupt(self::interrupt(&interrupt_field, value)?)
            } else if let Some(count) = c.get("launchFailures") {
                CloudChange::LaunchFailures(positive_count(&launches_field, count)?)
            } else {
                let count = c.get("registrationFailures").unwrap_or(&Value::Null);
                CloudChange::RegistrationFailures(positive_count(&failures_field, count)?)
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
        "nodeCondition" => Action::NodeCondition(node_condition(&field, body)?),
        "deleteNodes" => {
            let mut d = Fields::of(&field, body)?;
            let targets = targets(&mut d, "nodes")?;
            d.finish()?;
            Action::DeleteNodes(targets)
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
            match action {
                "pluginOutage" => Action::PluginOutage(length),
                "slowPlugin" => Action::SlowPlugin(length),
                _ => Action::Conflicts(length),
            }
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
pub(super) fn check_references(scenario: &Scenario) -> Result<()> {
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

/// A whole number > 0.
fn positive_count(field: &str, value: &Value) -> Result<usize> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| ScenarioError::new(field, "expected a whole number > 0")),
        other => Err(ScenarioError::new(
            field,
            format!("expected a whole number, found {}", type_name(other)),
        )),
    }
}

/// `targets` of an `interrupt` (`providerIDs`) or a `nodeCondition` (`nodes`): `nodePool` with
/// `count`, or the list named by `named`.
fn targets(f: &mut Fields<'_>, named: &'static str) -> Result<Targets> {
    let pool = f.string("nodePool")?;
    let count_field = f.field("count");
    let count = f.get("count");
    let list_field = f.field(named);
    let list = f.list(named)?;
    match (pool, list) {
        (Some(name), None) => {
            let count = match count {
                None => 1,
                Some(value) => positive_count(&count_field, value)?,
            };
            Ok(Targets::NodePool { name, count })
        }
        (None, Some(items)) => {
            if count.is_some() {
                return Err(ScenarioError::new(
                    count_field,
                    format!("goes with nodePool, not with {named}"),
                ));
            }
            let names = items
                .iter()
                .enumerate()
                .map(|(i, item)| self::string(&format!("{list_field}[{i}]"), item))
                .collect::<Result<Vec<_>>>()?;
            if names.is_empty() {
                return Err(ScenarioError::new(list_field, "names nothing"));
            }
            Ok(Targets::Named(names))
        }
        (Some(_), Some(_)) => Err(ScenarioError::new(
            list_field,
            format!("nodePool or {named}, not both"),
        )),
        (None, None) => Err(ScenarioError::new(
            display_path(&f.field("nodePool")),
            format!("needs nodePool (with count) or {named}"),
        )),
    }
}

/// `cloud: {interrupt: {kind, count, nodePool | providerIDs, after}}`.
fn interrupt(field: &str, value: &Value) -> Result<InterruptSpec> {
    use core_svc::cloudprovider::InterruptionKind as K;
    const KINDS: [K; 5] = [
        K::SpotInterruption,
        K::RebalanceRecommendation,
        K::ScheduledChange,
        K::Stopping,
        K::Terminating,
    ];
    let mut f = Fields::of(field, value)?;
    let kind_field = f.field("kind");
    let kind_name = f.required_string("kind")?;
    let kind = KINDS
        .into_iter()
        .find(|k| k.as_str() == kind_name)
        .ok_or_else(|| {
            ScenarioError::new(
                &kind_field,
                format!(
                    "{kind_name:?} is not one of {}",
                    KINDS.map(K::as_str).join(", ")
                ),
            )
        })?;
    let targets = targets(&mut f, "providerIDs")?;
    let after_field = f.field("after");
    let after = f.duration("after")?;
    if after.is_some() && kind != K::ScheduledChange {
        return Err(ScenarioError::new(
            after_field,
            "only a ScheduledChange has one",
        ));
    }
    f.finish()?;
    Ok(InterruptSpec {
        kind,
        targets,
        after: after.unwrap_or(DEFAULT_SCHEDULED_CHANGE_AFTER),
    })
}

/// `nodeCondition: {count, nodePool | nodes, type, status}`.
fn node_condition(field: &str, value: &Value) -> Result<NodeConditionSpec> {
    let mut f = Fields::of(field, value)?;
    let targets = targets(&mut f, "nodes")?;
    let type_ = f.required_string("type")?;
    let status_field = f.field("status");
    let status = f.required_string("status")?;
    if !matches!(status.as_str(), "True" | "False" | "Unknown") {
        return Err(ScenarioError::new(
            status_field,
            format!("{status:?} is not True, False or Unknown"),
        ));
    }
    f.finish()?;
    Ok(NodeConditionSpec {
        targets,
        type_,
        status,
    })
}
