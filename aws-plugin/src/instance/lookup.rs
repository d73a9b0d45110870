//! Finding instances again and terminating them: Delete, Get and List, by provider ID or by
//! the plugin's own tags, and the NodeClaim an instance stands for.

use super::*;

impl InstanceProvider {
    /// Terminates the instance behind `provider_id`, or when it is empty every live instance
    /// tagged for `node_claim_name`. GONE once nothing is left; TERMINATING while an instance
    /// still shuts down. An instance without this cluster's tag is never terminated.
    pub async fn delete(
        &self,
        provider_id: &str,
        node_claim_name: &str,
    ) -> Result<v1::DeletionState, InstanceError> {
        let found = if !provider_id.is_empty() {
            let (_, id) = parse_provider_id(provider_id)?;
            match self.ec2.describe_instances(&ResourceQuery::ids([id])).await {
                Ok(found) => found,
                Err(e) if e.is_not_found() => Vec::new(),
                Err(e) => return Err(e.into()),
            }
        } else if !node_claim_name.is_empty() {
            self.tagged_for(node_claim_name).await?
        } else {
            return Err(InstanceError::invalid(
                "provider_id",
                "empty, and so is node_claim_name: nothing says which instance to terminate",
            ));
        };
        let live: Vec<&Instance> = found
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .collect();
        if live.is_empty() {
            return Ok(v1::DeletionState::Gone);
        }
        if let Some(foreign) = live
            .iter()
            .find(|i| !tags::belongs_to(&i.tags, &self.cluster.name))
        {
            return Err(InstanceError::NotManaged(format!(
                "instance {} has no tag {}={}: it is not this cluster's, so it is not terminated",
                foreign.id,
                tags::TAG_EKS_CLUSTER_NAME,
                self.cluster.name
            )));
        }
        // Instances already shutting down need no second call (upstream saves the API calls).
        let running: Vec<String> = live
            .iter()
            .filter(|i| i.state != InstanceState::ShuttingDown)
            .map(|i| i.id.clone())
            .collect();
        if !running.is_empty() {
            match self.ec2.terminate_instances(&running).await {
                Ok(_) => {
                    tracing::info!(instances = ?running, "terminating");
                    for reservation in live
                        .iter()
                        .filter(|i| i.state != InstanceState::ShuttingDown)
                        .filter_map(|i| i.capacity_reservation_id.as_deref())
                    {
                        self.instance_types.released_from(reservation);
                    }
                }
                // Gone between the describe and the terminate.
                Err(e) if e.is_not_found() => return Ok(v1::DeletionState::Gone),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(v1::DeletionState::Terminating)
    }

    /// The instance behind `provider_id` as a NodeClaim; `None` when it is gone or
    /// terminated. Shutting-down instances carry a deletion timestamp.
    pub async fn get(&self, provider_id: &str) -> Result<Option<v1::NodeClaim>, InstanceError> {
        Ok(self
            .instance(provider_id)
            .await?
            .map(|i| self.node_claim_of(&i)))
    }

    /// One page of this cluster's instances (launched for a NodePool, not terminated), by
    /// instance ID; the token is the last ID of the previous page, empty when there is no
    /// more. `page_size` 0 means [`DEFAULT_PAGE_SIZE`].
    pub async fn list(
        &self,
        page_size: i32,
        page_token: &str,
    ) -> Result<(Vec<v1::NodeClaim>, String), InstanceError> {
        let size = match usize::try_from(page_size) {
            Ok(0) => DEFAULT_PAGE_SIZE,
            Ok(n) => n,
            Err(_) => {
                return Err(InstanceError::invalid(
                    "page_size",
                    format!("{page_size} is negative"),
                ));
            }
        };
        if !page_token.is_empty() && !is_instance_id(page_token) {
            return Err(InstanceError::invalid(
                "page_token",
                format!("{page_token:?} is not a token this plugin issued"),
            ));
        }
        let mut instances: Vec<Instance> = self
            .ec2
            .describe_instances(&ResourceQuery::tags(vec![
                tags::cluster_filter(&self.cluster.name),
                TagFilter::exists(tags::TAG_NODEPOOL),
            ]))
            .await?
            .into_iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .collect();
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        // Instances come and go between pages; continuing after the last ID seen skips
        // none that stayed.
        let start = instances.partition_point(|i| i.id.as_str() <= page_token);
        let page: Vec<&Instance> = instances[start..].iter().take(size).collect();
        let next = if start + page.len() < instances.len() {
            page.last().map(|i| i.id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok((
            page.into_iter().map(|i| self.node_claim_of(i)).collect(),
            next,
        ))
    }

    /// The EC2 instance behind a provider ID; `None` when it is gone or terminated.
    pub async fn instance(&self, provider_id: &str) -> Result<Option<Instance>, InstanceError> {
        let (_, id) = parse_provider_id(provider_id)?;
        let found = match self.ec2.describe_instances(&ResourceQuery::ids([id])).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(found
            .into_iter()
            .find(|i| i.state != InstanceState::Terminated))
    }

    /// An instance as Get and List describe it: the NodeClaim it was launched for, its
    /// provider ID, instance type, zone, capacity type and NodePool labels, launch time and
    /// state.
    pub(super) fn node_claim_of(&self, instance: &Instance) -> v1::NodeClaim {
        let zone = instance.zone.clone().unwrap_or_default();
        let mut labels = HashMap::from([
            (
                LABEL_INSTANCE_TYPE.to_owned(),
                instance.instance_type.clone(),
            ),
            (LABEL_TOPOLOGY_ZONE.to_owned(), zone.clone()),
            (
                LABEL_CAPACITY_TYPE.to_owned(),
                instance.capacity_type.as_str().to_owned(),
            ),
        ]);
        if let Some(node_pool) = instance.tag(tags::TAG_NODEPOOL) {
            labels.insert(LABEL_NODEPOOL.to_owned(), node_pool.to_owned());
        }
        v1::NodeClaim {
            name: instance
                .tag(tags::TAG_NODECLAIM)
                .unwrap_or_default()
                .to_owned(),
            labels,
            creation_timestamp: instance.launch_time.map(seconds_timestamp),
            deletion_timestamp: instance
                .state
                .is_terminating()
                .then(|| timestamp(self.clock.utc_now())),
            status: Some(v1::NodeClaimStatus {
                provider_id: provider_id(&zone, &instance.id),
                image_id: instance.image_id.clone().unwrap_or_default(),
                instance_state: instance_state(&instance.state) as i32,
                ..v1::NodeClaimStatus::default()
            }),
            ..v1::NodeClaim::default()
        }
    }
}
