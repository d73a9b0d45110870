//! Garbage collection (upstream `pkg/controllers/nodeclaim/garbagecollection`, and the
//! leaked-instance half of the AWS provider's): every `gc_period`, NodeClaims whose instance is
//! gone and instances whose NodeClaim is gone.
//!
//! - A Registered NodeClaim whose provider ID is absent from a complete listing, and whose Node
//!   is not Ready, is deleted (reason `garbage_collected`) once Get agrees the instance is gone
//!   (or shutting down, or the plugin has no Get); termination does the rest. A Get that finds
//!   the instance running contradicts the listing: the NodeClaim is kept, the contradiction
//!   reported (event `PluginUnavailable`, `karpenter_cloudprovider_errors_total{method="List",
//!   error="InconsistentAnswer"}`); a Get that fails keeps it until the next pass.
//! - An instance launched for a NodeClaim name that exists nowhere in the cluster (and whose
//!   provider ID no NodeClaim holds) is terminated once it is older than
//!   [`ORPHAN_GRACE_PERIOD`], so a Create whose NodeClaim write is still on its way is not raced.
//!   An instance whose creation time the provider does not know ages from when this controller
//!   first saw it orphaned (a restart only delays it).
//!
//! Only a complete listing is acted on: `List` answers all of it or an error; any error skips
//! the pass, `Unsupported` turns garbage collection off.
//!
//! The snapshot is read before the listing: a NodeClaim registered in the snapshot had its
//! instance launched before, so a later listing that lacks it means it is gone.
//!
//! Differences from upstream: the AWS provider terminates leaked instances after 30 s and also
//! deletes their Node; here the grace period is longer and the Node is left to the node
//! termination flow.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::CONDITION_REGISTERED;

use super::nodeclaim::{age, is_condition_true, is_managed, provider_id_of};
use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::{
    CloudInstance, CloudProvider, CloudProviderError, Deletion, NodeClassKind, Rpc,
};
use crate::cluster::{Cluster, DeleteOptions};
use crate::events::{EventType, ObjectRef, Reason};
use crate::objects::is_node_ready;

/// How old an instance without a NodeClaim must be before it is terminated.
pub const ORPHAN_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);

/// A NodeClaim to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostNodeClaim {
    /// Its name.
    pub name: String,
    /// Its UID, so a NodeClaim recreated under the name since the read is not the one deleted.
    pub uid: Option<String>,
    /// The provider ID no instance has any more.
    pub provider_id: String,
    /// Its NodePool, for the event.
    pub node_pool: Option<String>,
}

/// An instance to terminate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanedInstance {
    /// Its provider ID.
    pub provider_id: String,
    /// The NodeClaim name it was launched for.
    pub node_claim_name: String,
}

/// What a pass will do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// NodeClaims whose instance is gone.
    pub node_claims: Vec<LostNodeClaim>,
    /// Instances whose NodeClaim is gone, past the grace period.
    pub instances: Vec<OrphanedInstance>,
    /// Orphaned instances still within the grace period, by provider ID, with the instant their
    /// age counts from: what the controller remembers for instances of unknown age.
    pub orphans_seen: BTreeMap<String, Timestamp>,
    /// The soonest an orphan still waiting reaches the grace period.
    pub next_orphan_due: Option<Duration>,
}

/// Decides what to collect, from the snapshot and a complete listing. `orphans_seen` is what the
/// previous pass returned (empty after a restart). Pure.
pub fn plan(
    snapshot: &Snapshot,
    instances: &[CloudInstance],
    kinds: &[NodeClassKind],
    now: Timestamp,
    orphans_seen: &BTreeMap<String, Timestamp>,
) -> Plan {
    let listed: BTreeSet<&str> = instances
        .iter()
        .map(|instance| instance.provider_id.as_str())
        .collect();
    let nodes_by_provider_id: BTreeMap<&str, &Node> = snapshot
        .nodes()
        .filter_map(|node| Some((node.spec.as_ref()?.provider_id.as_deref()?, node)))
        .collect();
    let mut plan = Plan::default();
    for node_claim in snapshot.node_claims() {
        let provider_id = provider_id_of(node_claim);
        if provider_id.is_empty()
            || !is_managed(node_claim, kinds)
            || node_claim.metadata.deletion_timestamp.is_some()
            || !is_condition_true(node_claim, CONDITION_REGISTERED)
            || listed.contains(provider_id)
            || nodes_by_provider_id
                .get(provider_id)
                .is_some_and(|node| is_node_ready(node))
        {
            continue;
        }
        plan.node_claims.push(LostNodeClaim {
            name: node_claim.metadata.name.clone().unwrap_or_default(),
            uid: node_claim.metadata.uid.clone(),
            provider_id: provider_id.to_owned(),
            node_pool: node_claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(core_domain::labels::LABEL_NODEPOOL))
                .cloned(),
        });
    }

    let claimed_provider_ids: BTreeSet<&str> = snapshot
        .node_claims()
        .map(provider_id_of)
        .filter(|id| !id.is_empty())
        .collect();
    for instance in instances {
        let Some(name) = instance.node_claim_name.as_deref() else {
            continue;
        };
        if instance.is_deleting()
            || snapshot.node_claim(name).is_some()
            || claimed_provider_ids.contains(instance.provider_id.as_str())
        {
            continue;
        }
        let since = instance
            .creation_time
            .and_then(|time| Timestamp::try_from(time).ok())
            .or_else(|| orphans_seen.get(&instance.provider_id).copied())
            .unwrap_or(now);
        match ORPHAN_GRACE_PERIOD.checked_sub(age(since, now)) {
            Some(left) if !left.is_zero() => {
                plan.orphans_seen
                    .insert(instance.provider_id.clone(), since);
                plan.next_orphan_due = Some(plan.next_orphan_due.map_or(left, |due| due.min(left)));
            }
            _ => plan.instances.push(OrphanedInstance {
                provider_id: instance.provider_id.clone(),
                node_claim_name: name.to_owned(),
            }),
        }
    }
    plan
}

/// What Get says of the instance of a [`LostNodeClaim`], which a complete listing lacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Gone, or shutting down, or the plugin has no Get (the listing's word stands): collect
    /// the NodeClaim.
    Gone,
    /// Get finds the instance alive: the plugin contradicts itself, and the NodeClaim is kept.
    /// What contradicts what, naming the instance.
    Contradicted(String),
    /// Get failed: unknown, the NodeClaim is kept this pass.
    Unknown,
}

/// Reads Get's answer about a lost NodeClaim's instance. Pure.
pub fn confirmation(
    lost: &LostNodeClaim,
    answer: &Result<Option<CloudInstance>, CloudProviderError>,
) -> Confirmation {
    match answer {
        Ok(None) | Err(CloudProviderError::Unsupported { .. }) => Confirmation::Gone,
        Ok(Some(instance)) if instance.is_deleting() => Confirmation::Gone,
        Ok(Some(instance)) => Confirmation::Contradicted(format!(
            "List answer: node_claims: omits instance {} of NodeClaim {}, which Get finds {:?}; \
             the plugin contradicts itself, so the NodeClaim is kept",
            lost.provider_id, lost.name, instance.state
        )),
        Err(_) => Confirmation::Unknown,
    }
}

/// The garbage collection controller.
#[derive(Debug)]
pub struct GarbageCollectionController<C, P> {
    ctx: Context<C, P>,
    /// Orphaned instances of unknown age and when they were first seen; lost on restart,
    /// which only restarts their grace period.
    orphans_seen: Mutex<BTreeMap<String, Timestamp>>,
}

impl<C: Cluster, P: CloudProvider> GarbageCollectionController<C, P> {
    /// A controller on `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            orphans_seen: Mutex::new(BTreeMap::new()),
        }
    }

    fn plugin_unavailable(&self, error: &CloudProviderError) {
        self.ctx.event(
            ObjectRef::cluster_scoped("CloudProvider", self.ctx.cloud.name()),
            EventType::Warning,
            Reason::PluginUnavailable,
            format!("Garbage collection skipped: {error}"),
            BTreeMap::new(),
        );
    }

    async fn delete_node_claim(&self, lost: &LostNodeClaim) -> Result<(), ControllerError> {
        let mut options = DeleteOptions::default();
        options.preconditions.uid = lost.uid.clone();
        match self
            .ctx
            .cluster
            .delete::<NodeClaim>(None, &lost.name, options)
            .await
        {
            Ok(()) => {}
            Err(error) if error.is_not_found() || error.is_conflict() => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        tracing::info!(node_claim = %lost.name, provider_id = %lost.provider_id, "instance gone, NodeClaim deleted");
        let mut fields = BTreeMap::from([
            ("nodeClaim".to_owned(), lost.name.clone()),
            ("providerID".to_owned(), lost.provider_id.clone()),
            ("reason".to_owned(), "garbage_collected".to_owned()),
        ]);
        if let Some(node_pool) = &lost.node_pool {
            fields.insert("nodePool".to_owned(), node_pool.clone());
        }
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &lost.name),
            EventType::Normal,
            Reason::NodeClaimDeleted,
            format!(
                "Deleted NodeClaim {}: its instance {} no longer exists",
                lost.name, lost.provider_id
            ),
            fields,
        );
        Ok(())
    }

    /// Reports a listing that Get contradicts: counted by the provider, a Warning on the
    /// NodeClaim, which is kept.
    fn contradicted(&self, lost: &LostNodeClaim, problem: &str) {
        tracing::warn!(node_claim = %lost.name, provider_id = %lost.provider_id, problem, "garbage collection refused the listing");
        self.ctx.cloud.answer_refused(Rpc::List, problem);
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", &lost.name),
            EventType::Warning,
            Reason::PluginUnavailable,
            format!("Garbage collection kept NodeClaim {}: {problem}", lost.name),
            BTreeMap::from([
                ("nodeClaim".to_owned(), lost.name.clone()),
                ("providerID".to_owned(), lost.provider_id.clone()),
            ]),
        );
    }

    /// Terminates an orphan; answers the error when the plugin could not be reached.
    async fn terminate(&self, orphan: &OrphanedInstance) -> Option<CloudProviderError> {
        match self
            .ctx
            .cloud
            .delete(&orphan.provider_id, &orphan.node_claim_name)
            .await
        {
            Ok(deletion) => {
                tracing::info!(provider_id = %orphan.provider_id, node_claim = %orphan.node_claim_name, ?deletion, "orphaned instance terminated");
                let message = match deletion {
                    Deletion::Gone => "terminated",
                    Deletion::Terminating => "terminating",
                };
                self.ctx.event(
                    ObjectRef::cluster_scoped("NodeClaim", &orphan.node_claim_name),
                    EventType::Normal,
                    Reason::InstanceTerminated,
                    format!(
                        "Instance {} of missing NodeClaim {} {message}",
                        orphan.provider_id, orphan.node_claim_name
                    ),
                    BTreeMap::from([
                        ("nodeClaim".to_owned(), orphan.node_claim_name.clone()),
                        ("providerID".to_owned(), orphan.provider_id.clone()),
                        ("reason".to_owned(), "orphaned".to_owned()),
                    ]),
                );
                None
            }
            Err(error) => {
                tracing::warn!(provider_id = %orphan.provider_id, %error, "could not terminate orphaned instance");
                matches!(
                    error,
                    CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
                )
                .then_some(error)
            }
        }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for GarbageCollectionController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.garbagecollection"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let period = Requeue::After(self.ctx.settings.gc_period);
        let snapshot = self.ctx.cluster.snapshot().await?;
        let instances = match self.ctx.cloud.list().await {
            Ok(instances) => instances,
            Err(CloudProviderError::Unsupported { .. }) => {
                tracing::debug!("the plugin does not list instances: no garbage collection");
                return Ok(Requeue::OnChange);
            }
            Err(error) => {
                tracing::warn!(%error, "listing instances failed, garbage collection skipped");
                if matches!(
                    error,
                    CloudProviderError::Unavailable(_) | CloudProviderError::InvalidResponse(_)
                ) {
                    self.plugin_unavailable(&error);
                }
                return Ok(period);
            }
        };
        let now = self.ctx.clock.now();
        let seen = self
            .orphans_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let plan = plan(
            &snapshot,
            &instances,
            self.ctx.cloud.supported_node_classes(),
            now,
            &seen,
        );
        *self
            .orphans_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = plan.orphans_seen.clone();

        let mut unavailable = None;
        for lost in &plan.node_claims {
            let answer = self.ctx.cloud.get(&lost.provider_id).await;
            match confirmation(lost, &answer) {
                Confirmation::Gone => self.delete_node_claim(lost).await?,
                Confirmation::Contradicted(problem) => self.contradicted(lost, &problem),
                Confirmation::Unknown => {
                    if let Err(error) = answer {
                        tracing::warn!(node_claim = %lost.name, provider_id = %lost.provider_id, %error, "could not confirm the instance is gone; NodeClaim kept");
                        if matches!(
                            error,
                            CloudProviderError::Unavailable(_)
                                | CloudProviderError::InvalidResponse(_)
                        ) {
                            unavailable.get_or_insert(error);
                        }
                    }
                }
            }
        }
        for orphan in &plan.instances {
            if let Some(error) = self.terminate(orphan).await {
                unavailable.get_or_insert(error);
            }
        }
        if let Some(error) = unavailable {
            self.plugin_unavailable(&error);
        }
        Ok(match plan.next_orphan_due {
            Some(due) => period.min(Requeue::After(due)),
            None => period,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::InstanceState;
    use crate::controllers::testing::{self, at, kinds, snapshot};
    use serde_json::json;
    use std::time::SystemTime;

    fn registered_node_claim(name: &str, provider_id: &str) -> NodeClaim {
        testing::node_claim(
            name,
            json!({
                "metadata": { "uid": format!("uid-{name}") },
                "status": {
                    "providerID": provider_id,
                    "conditions": [{ "type": "Registered", "status": "True", "lastTransitionTime": at(0).to_string() }],
                },
            }),
        )
    }

    fn node(provider_id: &str, ready: bool) -> Node {
        testing::node(
            &format!("node-{provider_id}"),
            json!({
                "spec": { "providerID": provider_id },
                "status": { "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] },
            }),
        )
    }

    fn instance(
        provider_id: &str,
        node_claim: Option<&str>,
        created: Option<i64>,
    ) -> CloudInstance {
        CloudInstance {
            creation_time: created.map(|s| SystemTime::from(at(s))),
            ..testing::running_instance(node_claim, provider_id)
        }
    }

    #[test]
    fn a_registered_node_claim_without_instance_is_collected_unless_its_node_is_ready() {
        let claims = vec![
            registered_node_claim("gone", "p-1"),
            registered_node_claim("present", "p-2"),
            registered_node_claim("ready-node", "p-3"),
        ];
        let snapshot = snapshot(claims, vec![node("p-1", false), node("p-3", true)]);
        let plan = plan(
            &snapshot,
            &[instance("p-2", Some("present"), Some(0))],
            &kinds(),
            at(1000),
            &BTreeMap::new(),
        );
        let names: Vec<&str> = plan
            .node_claims
            .iter()
            .map(|lost| lost.name.as_str())
            .collect();
        assert_eq!(names, vec!["gone"]);
        assert_eq!(plan.node_claims[0].uid.as_deref(), Some("uid-gone"));
    }

    #[test]
    fn a_node_claim_of_another_provider_is_not_collected() {
        let mut foreign = registered_node_claim("foreign", "other:///i-1");
        foreign.spec.node_class_ref.group = "other.example.com".into();
        let plan = plan(
            &snapshot(vec![foreign], vec![]),
            &[],
            &kinds(),
            at(1000),
            &BTreeMap::new(),
        );
        assert!(
            plan.node_claims.is_empty(),
            "our listing does not have its instances"
        );
    }

    #[test]
    fn only_a_get_that_finds_the_instance_alive_contradicts_the_listing() {
        let lost = LostNodeClaim {
            name: "gone".into(),
            uid: None,
            provider_id: "p-1".into(),
            node_pool: None,
        };
        let alive = instance("p-1", Some("gone"), Some(0));
        let mut shutting_down = alive.clone();
        shutting_down.state = InstanceState::Terminating;
        assert_eq!(confirmation(&lost, &Ok(None)), Confirmation::Gone);
        assert_eq!(
            confirmation(&lost, &Ok(Some(shutting_down))),
            Confirmation::Gone
        );
        assert_eq!(
            confirmation(&lost, &Err(CloudProviderError::Unsupported { rpc: "Get" })),
            Confirmation::Gone,
            "without Get, the listing's word stands"
        );
        assert_eq!(
            confirmation(&lost, &Err(CloudProviderError::Unavailable("down".into()))),
            Confirmation::Unknown
        );
        let Confirmation::Contradicted(problem) = confirmation(&lost, &Ok(Some(alive))) else {
            panic!("Get finds it running");
        };
        assert!(
            problem.contains("omits instance p-1 of NodeClaim gone, which Get finds Running"),
            "{problem}"
        );
    }

    #[test]
    fn an_unregistered_node_claim_is_not_collected() {
        let mut claim = registered_node_claim("launching", "p-1");
        claim.status.as_mut().unwrap().conditions.clear();
        let plan = plan(
            &snapshot(vec![claim], vec![]),
            &[],
            &kinds(),
            at(1000),
            &BTreeMap::new(),
        );
        assert!(plan.node_claims.is_empty());
    }

    #[test]
    fn an_orphan_is_terminated_only_after_the_grace_period() {
        let empty = snapshot(vec![], vec![]);
        let listing = [instance("p-9", Some("vanished"), Some(0))];
        let young = plan(&empty, &listing, &kinds(), at(299), &BTreeMap::new());
        assert!(young.instances.is_empty());
        assert_eq!(young.next_orphan_due, Some(Duration::from_secs(1)));
        let old = plan(&empty, &listing, &kinds(), at(300), &BTreeMap::new());
        assert_eq!(
            old.instances,
            vec![OrphanedInstance {
                provider_id: "p-9".into(),
                node_claim_name: "vanished".into()
            }]
        );
    }

    #[test]
    fn an_orphan_of_unknown_age_ages_from_when_it_was_first_seen() {
        let empty = snapshot(vec![], vec![]);
        let listing = [instance("p-9", Some("vanished"), None)];
        let first = plan(&empty, &listing, &kinds(), at(100), &BTreeMap::new());
        assert!(first.instances.is_empty());
        assert_eq!(first.orphans_seen.get("p-9"), Some(&at(100)));
        let later = plan(&empty, &listing, &kinds(), at(399), &first.orphans_seen);
        assert!(later.instances.is_empty());
        let due = plan(&empty, &listing, &kinds(), at(400), &first.orphans_seen);
        assert_eq!(due.instances.len(), 1);
    }

    #[test]
    fn instances_with_a_node_claim_or_none_named_or_shutting_down_are_kept() {
        let claims = vec![registered_node_claim("alive", "p-1")];
        let mut shutting_down = instance("p-3", Some("vanished"), Some(0));
        shutting_down.state = InstanceState::Terminating;
        let listing = [
            instance("p-1", Some("alive"), Some(0)),
            instance("p-2", None, Some(0)),
            shutting_down,
            instance("p-1", Some("renamed"), Some(0)),
        ];
        let plan = plan(
            &snapshot(claims, vec![]),
            &listing,
            &kinds(),
            at(10_000),
            &BTreeMap::new(),
        );
        assert_eq!(plan.instances, vec![]);
    }
}
