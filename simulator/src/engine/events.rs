//! The scenario's events acted out: manifests applied or adopted as they are, objects
//! deleted, the cloud's and the world's changes made, each at its time.

use super::*;

impl Simulation {
    /// Applies one scenario action.
    pub(super) async fn act(
        &mut self,
        field: &str,
        action: &Action,
        observer: &mut dyn Observer,
    ) -> Result<(), EngineError> {
        let now = self.clock.now();
        match action {
            Action::Apply(manifest) => {
                let field = format!("{field}.apply");
                self.apply(&field, manifest).await?;
                if manifest.key.kind == Kind::NodeClaim {
                    self.adopt(&field, manifest).await?;
                }
            }
            Action::Delete(key) => self.delete(key).await,
            Action::Scale {
                deployment,
                replicas,
            } => {
                let namespace = deployment.namespace.as_deref().unwrap_or("default");
                if !self
                    .world
                    .scale_deployment(namespace, &deployment.name, *replicas)
                {
                    tracing::warn!(%deployment, "scale: no such Deployment (yet)");
                }
            }
            Action::Cloud(CloudChange::PublishImage(image)) => self.cloud.publish_image(image, now),
            Action::Cloud(CloudChange::CapacityErrors(errors)) => {
                self.cloud.set_capacity_errors(errors);
            }
            Action::Cloud(CloudChange::Interrupt(spec)) => self.interrupt(spec).await?,
            Action::Cloud(CloudChange::LaunchFailures(count)) => {
                self.launch_failures = (
                    self.launch_failures.0.saturating_add(*count),
                    now.checked_add(world::REGISTRATION_FAILURES_FOR).ok(),
                );
            }
            Action::Cloud(CloudChange::RegistrationFailures(count)) => {
                self.world.fail_registrations(*count, now);
            }
            Action::NodeCondition(spec) => self.node_condition(spec).await?,
            Action::DeleteNodes(targets) => self.delete_nodes(targets).await?,
            Action::Conflicts(length) => {
                let until = now.saturating_add(*length).unwrap_or(Timestamp::MAX);
                self.contention.start(until);
                self.disturbed(now, until);
            }
            Action::RestartCore => {
                let (core, provider) = start_core(
                    &self.plugin,
                    &self.cluster,
                    &self.clock,
                    &self.outage,
                    &self.contention,
                    &self.events,
                    self.scenario.options.feature_gates,
                )
                .await?;
                self.core = core;
                self.provider = provider;
                self.recorder.push(
                    TimelineEvent {
                        t: self.recorder.t(now),
                        type_: "CoreRestarted".to_owned(),
                        fields: BTreeMap::from([(
                            "message".to_owned(),
                            json!("core-svc restarted: every controller's in-memory state is lost"),
                        )]),
                    },
                    observer,
                );
            }
            Action::PluginOutage(length) => {
                let until = now.saturating_add(*length).unwrap_or(Timestamp::MAX);
                self.outage.start(until);
                self.disturbed(now, until);
                self.recorder.outage_started(now, *length, false, observer);
            }
            Action::SlowPlugin(length) => {
                let until = now.saturating_add(*length).unwrap_or(Timestamp::MAX);
                self.outage.start_slow(until);
                self.disturbed(now, until);
                self.recorder.outage_started(now, *length, true, observer);
            }
        }
        Ok(())
    }

    /// Tells the invariants that timeouts may run late from `from` to `to`.
    fn disturbed(&mut self, from: Timestamp, to: Timestamp) {
        if let Some(invariants) = self.invariants.as_mut() {
            invariants.disturbances.push((from, to));
        }
    }

    /// Creates an object of the scenario, or replaces the one of the same kind and name.
    pub(super) async fn apply(
        &mut self,
        field: &str,
        manifest: &Manifest,
    ) -> Result<(), EngineError> {
        let refused = |error: String| EngineError::Apply {
            field: field.to_owned(),
            object: manifest.key.to_string(),
            message: error,
        };
        let object = &manifest.object;
        let cluster = &self.cluster;
        let result = match manifest.key.kind {
            Kind::NodePool => upsert::<NodePool>(cluster, &manifest.key, object).await,
            Kind::Pod => upsert::<Pod>(cluster, &manifest.key, object).await,
            Kind::PodDisruptionBudget => {
                upsert::<PodDisruptionBudget>(cluster, &manifest.key, object).await
            }
            Kind::DaemonSet => upsert::<DaemonSet>(cluster, &manifest.key, object).await,
            Kind::PriorityClass => upsert::<PriorityClass>(cluster, &manifest.key, object).await,
            Kind::NodeClaim => upsert::<NodeClaim>(cluster, &manifest.key, object).await,
            Kind::Node => upsert::<Node>(cluster, &manifest.key, object).await,
            Kind::EC2NodeClass => {
                if let Some(role) = object.pointer("/spec/role").and_then(Value::as_str) {
                    self.cloud.ensure_role(role);
                }
                upsert_node_class(cluster, &manifest.key, object).await
            }
            Kind::Deployment => {
                let deployment: Deployment = from_json(object).map_err(refused)?;
                self.world.apply_deployment(deployment);
                Ok(())
            }
        };
        result.map_err(|error| refused(error.to_string()))
    }

    /// Registers the running instance of an adopted NodeClaim, as if the node class it names
    /// had launched it: a subnet of its zone and the security groups the node class resolves
    /// to now, tagged as the plugin tags what it launches.
    pub(super) async fn adopt(
        &mut self,
        field: &str,
        manifest: &Manifest,
    ) -> Result<(), EngineError> {
        let refused = |message: String| EngineError::Apply {
            field: field.to_owned(),
            object: manifest.key.to_string(),
            message,
        };
        let claim: NodeClaim = from_json(&manifest.object).map_err(refused)?;
        let status = claim.status.clone().unwrap_or_default();
        let (zone, id) = parse_provider_id(&status.provider_id).map_err(refused)?;
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        let instance_type = labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .ok_or_else(|| {
                refused(
                    "an adopted NodeClaim needs its node.kubernetes.io/instance-type label"
                        .to_owned(),
                )
            })?;
        let capacity_type = match labels.get("karpenter.sh/capacity-type").map(String::as_str) {
            Some("spot") => CapacityType::Spot,
            _ => CapacityType::OnDemand,
        };
        let node_pool = labels
            .get("karpenter.sh/nodepool")
            .cloned()
            .unwrap_or_default();
        let reference = &claim.spec.node_class_ref;
        let node_class = self.cluster.get_node_class(reference).await?;
        let node_class_json = node_class
            .as_ref()
            .and_then(|class| serde_json::to_value(class).ok());
        let user_tags: BTreeMap<String, String> = node_class_json
            .as_ref()
            .and_then(|class| class.pointer("/spec/tags"))
            .and_then(|tags| serde_json::from_value(tags.clone()).ok())
            .unwrap_or_default();
        let (subnet_id, security_group_ids) = match &node_class_json {
            Some(json) => match self.provider.resolve_node_class(json).await {
                Ok(resolved) => {
                    let subnet = resolved
                        .status
                        .get("subnets")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|s| s.get("zone").and_then(Value::as_str) == Some(zone.as_str()))
                        .and_then(|s| s.get("id").and_then(Value::as_str))
                        .map(str::to_owned);
                    let groups = resolved
                        .status
                        .get("securityGroups")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|g| g.get("id").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    (subnet, groups)
                }
                Err(error) => {
                    tracing::warn!(%error, "adopting {}: its node class does not resolve", manifest.key);
                    (None, Vec::new())
                }
            },
            None => (None, Vec::new()),
        };
        let launch = launch_tags(CLUSTER_NAME, &node_pool, &reference.name, &user_tags);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let launch_time = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|time| time.0.as_second());
        self.cloud
            .register_running(RunningInstance {
                id,
                instance_type,
                zone,
                capacity_type,
                image_id: Some(status.image_id.clone()).filter(|i| !i.is_empty()),
                subnet_id,
                security_group_ids,
                tags: instance_tags(&launch, &name),
                launch_time,
            })
            .map_err(|error| refused(error.to_string()))?;
        Ok(())
    }

    pub(super) async fn delete(&mut self, key: &ObjectKey) {
        let namespace = key.namespace.as_deref();
        let name = key.name.as_str();
        let cluster = &self.cluster;
        let options = DeleteOptions::default;
        let result = match key.kind {
            Kind::Deployment => {
                if !self
                    .world
                    .delete_deployment(namespace.unwrap_or("default"), name)
                {
                    tracing::warn!(%key, "delete: no such Deployment");
                }
                Ok(())
            }
            Kind::EC2NodeClass => {
                let reference = NodeClassReference {
                    group: aws_plugin::apis::GROUP.to_owned(),
                    kind: "EC2NodeClass".to_owned(),
                    name: name.to_owned(),
                };
                cluster.delete_node_class(&reference, options()).await
            }
            Kind::NodePool => cluster.delete::<NodePool>(None, name, options()).await,
            Kind::NodeClaim => cluster.delete::<NodeClaim>(None, name, options()).await,
            Kind::Node => cluster.delete::<Node>(None, name, options()).await,
            Kind::Pod => cluster.delete::<Pod>(namespace, name, options()).await,
            Kind::PodDisruptionBudget => {
                cluster
                    .delete::<PodDisruptionBudget>(namespace, name, options())
                    .await
            }
            Kind::DaemonSet => {
                cluster
                    .delete::<DaemonSet>(namespace, name, options())
                    .await
            }
            Kind::PriorityClass => cluster.delete::<PriorityClass>(None, name, options()).await,
        };
        if let Err(error) = result {
            tracing::warn!(%key, %error, "delete failed");
        }
    }
}

pub(super) fn from_json<T: DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|error| error.to_string())
}

/// Creates `object`, or replaces the one of its name (keeping its status where the kind has a
/// status subresource, and then writing the manifest's status, for NodeClaims and Nodes given
/// with theirs).
pub(super) async fn upsert<K: ClusterObject>(
    cluster: &InMemoryCluster,
    key: &ObjectKey,
    object: &Value,
) -> Result<(), String> {
    let mut typed: K = from_json(object)?;
    let existing: Option<K> = cluster
        .get(key.namespace.as_deref(), &key.name)
        .await
        .map_err(|e| e.to_string())?;
    match existing {
        None => {
            typed.meta_mut().resource_version = None;
            cluster.create(&typed).await.map_err(|e| e.to_string())?;
        }
        Some(existing) => {
            typed.meta_mut().resource_version = existing.meta().resource_version.clone();
            cluster.replace(&typed).await.map_err(|e| e.to_string())?;
        }
    }
    if K::STATUS_SUBRESOURCE
        && (K::KIND == "NodeClaim" || K::KIND == "Node")
        && let Some(status) = object.get("status").filter(|s| !s.is_null())
    {
        let patch = json!({"status": status});
        cluster
            .merge_patch_status::<K>(key.namespace.as_deref(), &key.name, &patch)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(super) async fn upsert_node_class(
    cluster: &InMemoryCluster,
    key: &ObjectKey,
    object: &Value,
) -> Result<(), String> {
    let reference = NodeClassReference {
        group: aws_plugin::apis::GROUP.to_owned(),
        kind: key.kind.as_str().to_owned(),
        name: key.name.clone(),
    };
    match cluster
        .get_node_class(&reference)
        .await
        .map_err(|e| e.to_string())?
    {
        None => {
            let dynamic: DynamicObject = from_json(object)?;
            cluster
                .create_node_class(&dynamic)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Some(existing) => {
            let current = serde_json::to_value(&existing).map_err(|e| e.to_string())?;
            let pick = |value: &Value| {
                json!({
                    "metadata": {
                        "labels": value.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                    },
                    "spec": value.get("spec").cloned().unwrap_or(json!({})),
                })
            };
            match merge_patch_between(&pick(&current), &pick(object)) {
                None => Ok(()),
                Some(patch) => cluster
                    .merge_patch_node_class(&reference, &patch)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            }
        }
    }
}
