//! The API server's write semantics, kind by kind: create (generateName, UIDs), update and
//! merge patch with resourceVersion conflicts and the status subresource, delete with
//! preconditions, finalizers and graceful pod deletion.

use super::*;

/// What the API server's behaviour depends on, per kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct KindFacts<'a> {
    pub(super) kind: &'a str,
    pub(super) namespaced: bool,
    pub(super) status_subresource: bool,
    pub(super) custom_resource: bool,
}

impl KindFacts<'static> {
    pub(super) fn of<K: ClusterObject>() -> Self {
        Self {
            kind: K::KIND,
            namespaced: K::NAMESPACED,
            status_subresource: K::STATUS_SUBRESOURCE,
            custom_resource: K::CUSTOM_RESOURCE,
        }
    }
}

impl<'a> KindFacts<'a> {
    pub(super) fn node_class(kind: &'a str) -> Self {
        Self {
            kind,
            namespaced: false,
            status_subresource: true,
            custom_resource: true,
        }
    }

    pub(super) fn not_found(&self, namespace: &str, name: &str) -> ClusterError {
        ClusterError::NotFound {
            kind: self.kind.to_owned(),
            namespace: self.namespace(namespace),
            name: name.to_owned(),
        }
    }

    pub(super) fn conflict(&self, namespace: &str, name: &str, message: String) -> ClusterError {
        ClusterError::Conflict {
            kind: self.kind.to_owned(),
            namespace: self.namespace(namespace),
            name: name.to_owned(),
            message,
        }
    }

    pub(super) fn invalid(
        &self,
        name: &str,
        field: &str,
        message: impl Into<String>,
    ) -> ClusterError {
        ClusterError::invalid(self.kind, name, field, message)
    }

    pub(super) fn namespace(&self, namespace: &str) -> Option<String> {
        self.namespaced.then(|| namespace.to_owned())
    }

    /// The table key for a request's namespace, refusing the wrong scope.
    pub(super) fn key(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(String, String), ClusterError> {
        match (self.namespaced, namespace) {
            (true, Some(namespace)) if !namespace.is_empty() => {
                Ok((namespace.to_owned(), name.to_owned()))
            }
            (true, _) => Err(self.invalid(name, "metadata.namespace", "Required value")),
            (false, None) => Ok((String::new(), name.to_owned())),
            (false, Some(_)) => Err(self.invalid(
                name,
                "metadata.namespace",
                format!("{} is cluster-scoped and takes no namespace", self.kind),
            )),
        }
    }
}

/// Per call: the time and the admission rules.
pub(super) struct Env<'a> {
    pub(super) now: Timestamp,
    pub(super) policy: &'a LabelPolicy,
}

/// The part of an object a write replaces.
pub(super) enum Write<'a, T> {
    Replace(&'a T),
    ReplaceStatus(&'a T),
    Patch(&'a Value),
    PatchStatus(&'a Value),
}

impl<T> Write<'_, T> {
    pub(super) fn is_status(&self) -> bool {
        matches!(self, Self::ReplaceStatus(_) | Self::PatchStatus(_))
    }
}

/// What every stored kind is: node classes as well as the typed kinds.
pub(super) trait Stored:
    kube::Resource + Clone + Serialize + DeserializeOwned + 'static
{
}
impl<T: kube::Resource + Clone + Serialize + DeserializeOwned + 'static> Stored for T {}

pub(super) fn to_json<T: Serialize>(
    object: &T,
    facts: KindFacts<'_>,
    name: &str,
) -> Result<Value, ClusterError> {
    serde_json::to_value(object).map_err(|error| facts.invalid(name, "", error.to_string()))
}

pub(super) fn from_json<T: DeserializeOwned>(
    value: Value,
    facts: KindFacts<'_>,
    name: &str,
) -> Result<T, ClusterError> {
    serde_json::from_value(value).map_err(|error| facts.invalid(name, "", error.to_string()))
}

/// Sets `value.status` to `status`, or removes it for `None`.
pub(super) fn set_status(value: &mut Value, status: Option<Value>) {
    if let Value::Object(map) = value {
        match status {
            Some(status) if !status.is_null() => {
                map.insert("status".to_owned(), status);
            }
            _ => {
                map.remove("status");
            }
        }
    }
}

/// RFC 7386.
pub(super) fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Whether two serialized objects differ outside `metadata` and `status` (what `generation`
/// counts).
pub(super) fn spec_differs(old: &Value, new: &Value) -> bool {
    let strip = |value: &Value| match value {
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| *key != "metadata" && *key != "status")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect::<serde_json::Map<_, _>>(),
        _ => serde_json::Map::new(),
    };
    strip(old) != strip(new)
}

pub(super) fn create_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    object: &T,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<T, ClusterError> {
    let mut object = object.clone();
    let meta = object.meta_mut();
    let given_name = meta.name.clone().unwrap_or_default();
    let namespace = if facts.namespaced {
        match meta.namespace.as_deref() {
            Some(namespace) if !namespace.is_empty() => namespace.to_owned(),
            _ => return Err(facts.invalid(&given_name, "metadata.namespace", "Required value")),
        }
    } else {
        // The API server drops a namespace sent with a cluster-scoped object.
        meta.namespace = None;
        String::new()
    };
    if meta.resource_version.is_some() {
        return Err(facts.invalid(
            &given_name,
            "metadata.resourceVersion",
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let name = if !given_name.is_empty() {
        given_name
    } else if let Some(prefix) = meta.generate_name.as_deref().filter(|p| !p.is_empty()) {
        let prefix: String = prefix.chars().take(MAX_GENERATE_NAME_PREFIX).collect();
        let mut attempts = 0;
        loop {
            let candidate = format!("{prefix}{}", counters.next_name_suffix());
            if !table.contains_key(&(namespace.clone(), candidate.clone())) {
                break candidate;
            }
            attempts += 1;
            if attempts == GENERATE_NAME_ATTEMPTS {
                return Err(ClusterError::AlreadyExists {
                    kind: facts.kind.to_owned(),
                    namespace: facts.namespace(&namespace),
                    name: candidate,
                });
            }
        }
    } else {
        String::new()
    };
    check_name(&name).map_err(|message| facts.invalid(&name, "metadata.name", message))?;
    let key = (namespace, name.clone());
    if table.contains_key(&key) {
        return Err(ClusterError::AlreadyExists {
            kind: facts.kind.to_owned(),
            namespace: facts.namespace(&key.0),
            name,
        });
    }
    meta.name = Some(name.clone());
    normalize(meta);
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = Some(1);
    meta.creation_timestamp = Some(Time(env.now));
    if facts.status_subresource && facts.kind != Node::KIND {
        // The API server resets the status of what it creates; the kubelet creates its Node
        // with one.
        let mut value = to_json(&object, facts, &name)?;
        let status = (facts.kind == Pod::KIND).then(|| serde_json::json!({ "phase": "Pending" }));
        set_status(&mut value, status);
        object = from_json(value, facts, &name)?;
    }
    admit(&object, None, facts, env)?;
    let meta = object.meta_mut();
    meta.uid = Some(counters.next_uid());
    meta.resource_version = Some(counters.next_resource_version());
    table.insert(key, Arc::new(object.clone()));
    Ok(object)
}

pub(super) fn update_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    key: (String, String),
    write: Write<'_, T>,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<T, ClusterError> {
    let (namespace, name) = (&key.0, &key.1);
    let old = table
        .get(&key)
        .ok_or_else(|| facts.not_found(namespace, name))?;
    if write.is_status() && !facts.status_subresource {
        return Err(facts.invalid(
            name,
            "status",
            format!("{} has no status subresource", facts.kind),
        ));
    }
    let old: &T = old;
    let old_value = to_json(old, facts, name)?;
    let (candidate, resource_version) = match &write {
        Write::Replace(object) | Write::ReplaceStatus(object) => {
            let resource_version = object.meta().resource_version.clone();
            if resource_version.is_none() && facts.custom_resource {
                return Err(facts.invalid(
                    name,
                    "metadata.resourceVersion",
                    "must be specified for an update",
                ));
            }
            (to_json(*object, facts, name)?, resource_version)
        }
        Write::Patch(patch) | Write::PatchStatus(patch) => {
            if !patch.is_object() {
                return Err(facts.invalid(name, "", "a merge patch must be a JSON object"));
            }
            let resource_version = match patch.pointer("/metadata/resourceVersion") {
                None | Some(Value::Null) => None,
                Some(Value::String(version)) => Some(version.clone()),
                Some(_) => {
                    return Err(facts.invalid(
                        name,
                        "metadata.resourceVersion",
                        "must be a string",
                    ));
                }
            };
            let mut patched = old_value.clone();
            apply_merge_patch(&mut patched, patch);
            (patched, resource_version)
        }
    };
    if let Some(version) = &resource_version
        && Some(version) != old.meta().resource_version.as_ref()
    {
        return Err(facts.conflict(
            namespace,
            name,
            "the object has been modified; please apply your changes to the latest version and \
             try again"
                .to_owned(),
        ));
    }
    let new_value = if write.is_status() {
        let mut value = old_value.clone();
        set_status(&mut value, candidate.get("status").cloned());
        value
    } else {
        let mut value = candidate;
        if facts.status_subresource {
            set_status(&mut value, old_value.get("status").cloned());
        }
        value
    };
    let mut new: T = from_json(new_value, facts, name)?;
    let old_meta = old.meta();
    let meta = new.meta_mut();
    if meta.name.as_deref() != Some(name.as_str())
        || (facts.namespaced && meta.namespace.as_deref() != Some(namespace.as_str()))
    {
        return Err(facts.invalid(
            name,
            "metadata.name",
            "the name and namespace of an object may not change",
        ));
    }
    if let Some(uid) = &meta.uid
        && Some(uid) != old_meta.uid.as_ref()
    {
        return Err(facts.conflict(
            namespace,
            name,
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old_meta.uid.as_deref().unwrap_or_default()
            ),
        ));
    }
    // What only the API server writes.
    meta.namespace = old_meta.namespace.clone();
    meta.uid = old_meta.uid.clone();
    meta.resource_version = old_meta.resource_version.clone();
    meta.creation_timestamp = old_meta.creation_timestamp.clone();
    meta.deletion_timestamp = old_meta.deletion_timestamp.clone();
    meta.deletion_grace_period_seconds = old_meta.deletion_grace_period_seconds;
    meta.generation = old_meta.generation;
    normalize(meta);
    if old_meta.deletion_timestamp.is_some() {
        let old_finalizers = old_meta.finalizers.as_deref().unwrap_or_default();
        if let Some(added) = meta
            .finalizers
            .iter()
            .flatten()
            .find(|finalizer| !old_finalizers.contains(finalizer))
        {
            return Err(facts.invalid(
                name,
                "metadata.finalizers",
                format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [{added:?}]"),
            ));
        }
    }
    if !write.is_status() {
        admit(&new, Some(old), facts, env)?;
    }
    let new_value = to_json(&new, facts, name)?;
    if new_value == old_value {
        return Ok(T::clone(old));
    }
    let meta = new.meta_mut();
    if spec_differs(&old_value, &new_value) {
        meta.generation = Some(meta.generation.unwrap_or(0) + 1);
    }
    meta.resource_version = Some(counters.next_resource_version());
    if is_finished(meta) {
        table.remove(&key);
    } else {
        table.insert(key, Arc::new(new.clone()));
    }
    Ok(new)
}

/// Drops empty lists and maps, which the API server stores as absent.
pub(super) fn normalize(meta: &mut ObjectMeta) {
    if meta.finalizers.as_ref().is_some_and(Vec::is_empty) {
        meta.finalizers = None;
    }
    if meta.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.labels = None;
    }
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.annotations = None;
    }
    if meta.owner_references.as_ref().is_some_and(Vec::is_empty) {
        meta.owner_references = None;
    }
}

/// Whether a deleted object has nothing left to wait for: no finalizer, no graceful
/// termination in progress.
pub(super) fn is_finished(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
        && meta.finalizers.as_ref().is_none_or(Vec::is_empty)
        && meta.deletion_grace_period_seconds.unwrap_or(0) == 0
}

pub(super) fn check_preconditions<T: Stored>(
    object: &T,
    preconditions: &Preconditions,
    facts: KindFacts<'_>,
    key: &(String, String),
) -> Result<(), ClusterError> {
    let meta = object.meta();
    if let Some(uid) = &preconditions.uid
        && Some(uid) != meta.uid.as_ref()
    {
        return Err(facts.conflict(
            &key.0,
            &key.1,
            format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta.uid.as_deref().unwrap_or_default()
            ),
        ));
    }
    if let Some(version) = &preconditions.resource_version
        && Some(version) != meta.resource_version.as_ref()
    {
        return Err(facts.conflict(
            &key.0,
            &key.1,
            format!(
                "Precondition failed: ResourceVersion in precondition: {version}, \
                 ResourceVersion in object meta: {}",
                meta.resource_version.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// The grace period a delete gives: pods only, as the pod strategy computes it.
pub(super) fn grace_period_seconds<T: Stored>(object: &T, options: &DeleteOptions) -> i64 {
    let Some(pod) = (object as &dyn Any).downcast_ref::<Pod>() else {
        return 0;
    };
    let unscheduled = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .is_none_or(str::is_empty);
    if unscheduled || is_terminal(&SlimPod::from(pod)) {
        return 0;
    }
    let seconds = options.grace_period_seconds.unwrap_or_else(|| {
        pod.spec
            .as_ref()
            .and_then(|spec| spec.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_POD_GRACE_PERIOD_SECONDS)
    });
    // A negative grace period means "as soon as possible" but not a force delete.
    if seconds < 0 { 1 } else { seconds }
}

pub(super) fn delete_object<T: Stored>(
    table: &mut Table<T>,
    facts: KindFacts<'_>,
    key: (String, String),
    options: &DeleteOptions,
    counters: &mut Counters,
    env: &Env<'_>,
) -> Result<(), ClusterError> {
    let object: &T = table
        .get(&key)
        .ok_or_else(|| facts.not_found(&key.0, &key.1))?;
    check_preconditions(object, &options.preconditions, facts, &key)?;
    let grace = grace_period_seconds(object, options);
    let mut object = T::clone(object);
    let meta = object.meta_mut();
    if let Some(deleting_since) = meta.deletion_timestamp.clone() {
        // Already being deleted: only an explicitly shorter grace period changes anything. The
        // deadline becomes the time of the first request plus the new period, as in
        // Kubernetes, so it only ever moves forward.
        let current = meta.deletion_grace_period_seconds.unwrap_or(0);
        let Some(requested) = options.grace_period_seconds.map(|seconds| seconds.max(0)) else {
            return Ok(());
        };
        if requested >= current {
            return Ok(());
        }
        let requested_at = deadline(deleting_since.0, -current);
        meta.deletion_timestamp = Some(Time(deadline(requested_at, requested)));
        meta.deletion_grace_period_seconds = Some(requested);
    } else {
        let no_finalizers = meta.finalizers.as_ref().is_none_or(Vec::is_empty);
        if no_finalizers && grace == 0 {
            table.remove(&key);
            counters.next_resource_version();
            return Ok(());
        }
        meta.deletion_timestamp = Some(Time(deadline(env.now, grace)));
        meta.deletion_grace_period_seconds = Some(grace);
    }
    meta.resource_version = Some(counters.next_resource_version());
    if is_finished(meta) {
        table.remove(&key);
    } else {
        table.insert(key, Arc::new(object));
    }
    Ok(())
}

/// `from` plus `seconds` (which may be negative), saturating at the ends of time.
pub(super) fn deadline(from: Timestamp, seconds: i64) -> Timestamp {
    let fallback = if seconds < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    };
    from.saturating_add(SignedDuration::from_secs(seconds))
        .unwrap_or(fallback)
}
