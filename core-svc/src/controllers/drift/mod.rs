//! The `Drifted` condition of NodeClaims (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/nodeclaim/disruption/drift.go`).
//!
//! For each managed NodeClaim whose NodePool exists: a NodeClaim that is not `Launched=True`
//! loses `Drifted`. Otherwise the first of these that finds drift decides:
//!
//! 1. static drift, `NodePoolDrifted`: the NodePool's and the NodeClaim's hash annotations
//!    differ under equal hash versions (all four annotations present; see [`super::hash`]);
//! 2. requirements drift, `RequirementsDrifted`: the NodeClaim's labels no longer satisfy the
//!    NodePool's requirements (the domain's `Compatible`, upstream semantics);
//! 3. `InstanceTypeNotFound`, for NodeClaims older than `instance_type_drift_min_age`, checked
//!    at most every `instance_type_drift_period` per NodeClaim: its instance type is not in the
//!    NodePool's catalogue, or none of the type's offerings matches its labels (a `reserved`
//!    NodeClaim may also be matched by an on-demand offering, as upstream). The verdict of a
//!    check stands until the next one; an empty catalogue or an error decides nothing;
//! 4. the plugin's IsDrifted (`Unsupported`: no provider drift).
//!
//! Drift found sets `Drifted=True` with the reason and a message saying what differs (event
//! `NodeClaimDrifted`); none found removes the condition (event `DriftCleared`). An answer
//! that means "unknown" (the plugin unreachable, the instance or node class not found) leaves
//! the condition as it is. Unlike upstream, whose message repeats the reason, the message
//! names what differs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use core_domain::instance_type::InstanceType;
use core_domain::labels::LABEL_NODEPOOL;
use jiff::Timestamp;
use karpenter_api::nodeclaim::CONDITION_LAUNCHED;
use karpenter_api::{NodeClaim, NodePool};

pub use self::checks::*;
use super::hash::{CONFLICT_RETRY, is_managed};
use super::nodeclaim::{age, is_condition_true, launched_of, request_of};
use super::nodeclass::PLUGIN_RETRY;
use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::{CloudProvider, CloudProviderError, DriftReason, Rpc};
use crate::cluster::Cluster;
use crate::events::{EventType, ObjectRef, Reason};
use crate::objects::name_of;

mod checks;

/// How plugin answers that expire close together are renewed together. A pass comes back this
/// long before the first standing answer expires and asks again about every NodeClaim whose
/// answer expires within twice this: so no answer is used past its period, answers that
/// expire within this of each other are renewed by one pass (and expire together from then
/// on), and a quiet fleet costs at most one pass per this span instead of one per NodeClaim
/// (NodeClaims launched a second apart would each cost a pass over the whole fleet). An answer
/// is renewed at most twice this early.
pub const RENEW_SPACING: Duration = Duration::from_secs(10);

/// [`RENEW_SPACING`], but at most a quarter of `period`, and at least a second.
fn renew_spacing(period: Duration) -> Duration {
    RENEW_SPACING.min(period / 4).max(Duration::from_secs(1))
}

/// The last InstanceTypeNotFound check of a NodeClaim and its verdict, which stands until the
/// next check.
#[derive(Debug, Clone)]
struct InstanceTypeCheck {
    at: Timestamp,
    drift: Option<DriftReason>,
}

/// The plugin's last answer about a NodeClaim, and what it was asked about. The answer stands
/// while neither the NodeClaim nor its node class changed and `drift_period` has not passed
/// since (it is renewed up to twice [`RENEW_SPACING`] early): the plugin is asked about each NodeClaim when something it could judge differently
/// changed, and at least every period for what only the cloud knows (upstream requeues each
/// NodeClaim every 5 minutes the same way), not once per NodeClaim on every change anywhere in
/// the cluster.
#[derive(Debug, Clone)]
struct ProviderCheck {
    at: Timestamp,
    node_claim_version: Option<String>,
    node_class_version: Option<String>,
    drift: Option<DriftReason>,
}

/// Per pass: each NodePool's catalogue, fetched once; `None` when it could not be had.
type Catalogues = HashMap<String, Option<Vec<Arc<InstanceType>>>>;

/// What one pass ran into besides verdicts.
#[derive(Debug, Default)]
struct PassState {
    catalogues: Catalogues,
    /// Each node class as JSON, by (group, kind, name), converted once per pass: every
    /// IsDrifted of its NodeClaims sends it.
    node_classes: HashMap<(String, String, String), Arc<serde_json::Value>>,
    plugin_failed: bool,
    lost_race: bool,
}

/// Sets and clears the `Drifted` condition of NodeClaims (upstream controller
/// `nodeclaim.disruption`, its drift part).
#[derive(Debug)]
pub struct DriftController<C, P> {
    ctx: Context<C, P>,
    instance_type_checks: Mutex<HashMap<String, InstanceTypeCheck>>,
    /// By NodeClaim UID.
    provider_checks: Mutex<HashMap<String, ProviderCheck>>,
    /// [`drift_of`]'s verdicts by NodeClaim UID, with the (NodeClaim, NodePool)
    /// resourceVersions they were decided on.
    static_checks: Mutex<HashMap<String, StaticCheck>>,
}

/// The (NodeClaim, NodePool) resourceVersions a static verdict was decided on, and the verdict.
type StaticCheck = ((Option<String>, Option<String>), Option<DriftReason>);

impl<C: Cluster, P: CloudProvider> DriftController<C, P> {
    /// A controller on `ctx` that has checked nothing yet.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self {
            ctx,
            instance_type_checks: Mutex::new(HashMap::new()),
            provider_checks: Mutex::new(HashMap::new()),
            static_checks: Mutex::new(HashMap::new()),
        }
    }

    fn provider_checks(&self) -> MutexGuard<'_, HashMap<String, ProviderCheck>> {
        // Entries are inserted whole; a poisoned map is still a valid cache.
        self.provider_checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn checks(&self) -> MutexGuard<'_, HashMap<String, InstanceTypeCheck>> {
        // Entries are inserted whole; a poisoned map is still a valid cache.
        self.instance_type_checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the plugin failed about `object`: a warning event, once per pass.
    fn plugin_failed(
        &self,
        pass: &mut PassState,
        object: ObjectRef,
        field: &str,
        error: &CloudProviderError,
    ) {
        tracing::warn!(kind = %object.kind, name = %object.name, %error, "the cloud provider could not answer; drift left unchanged");
        if !pass.plugin_failed {
            pass.plugin_failed = true;
            let fields = BTreeMap::from([
                (field.to_owned(), object.name.clone()),
                ("reason".to_owned(), error.to_string()),
            ]);
            self.ctx.event(
                object,
                EventType::Warning,
                Reason::PluginUnavailable,
                format!("could not check drift: {error}"),
                fields,
            );
        }
    }

    async fn verdict(
        &self,
        snapshot: &Snapshot,
        node_claim: &NodeClaim,
        node_pool: &NodePool,
        pass: &mut PassState,
    ) -> Verdict {
        if let Some(drift) = self.static_verdict(node_claim, node_pool) {
            return Verdict::Drifted(drift);
        }
        if let Some(drift) = self
            .instance_type_verdict(snapshot, node_claim, node_pool, pass)
            .await
        {
            return Verdict::Drifted(drift);
        }
        self.provider_verdict(snapshot, node_claim, pass).await
    }

    /// [`drift_of`], decided again only when the NodeClaim or its NodePool changed: it reads
    /// nothing else, and a pass runs on every change anywhere in the cluster.
    fn static_verdict(&self, node_claim: &NodeClaim, node_pool: &NodePool) -> Option<DriftReason> {
        let claim_version = node_claim.metadata.resource_version.as_deref();
        let pool_version = node_pool.metadata.resource_version.as_deref();
        let uid = node_claim.metadata.uid.as_deref().unwrap_or_default();
        let mut checks = self
            .static_checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Compared borrowed: a pass asks this of every NodeClaim, and it mostly holds.
        if let Some(((seen_claim, seen_pool), drift)) = checks.get(uid)
            && seen_claim.as_deref() == claim_version
            && seen_pool.as_deref() == pool_version
        {
            return drift.clone();
        }
        let drift = drift_of(node_claim, node_pool);
        let versions = (
            claim_version.map(str::to_owned),
            pool_version.map(str::to_owned),
        );
        checks.insert(uid.to_owned(), (versions, drift.clone()));
        drift
    }

    /// The InstanceTypeNotFound verdict: the last one while it stands, a new check when due.
    async fn instance_type_verdict(
        &self,
        snapshot: &Snapshot,
        node_claim: &NodeClaim,
        node_pool: &NodePool,
        pass: &mut PassState,
    ) -> Option<DriftReason> {
        let settings = &self.ctx.settings;
        let now = self.ctx.clock.now();
        let created = node_claim.metadata.creation_timestamp.as_ref()?.0;
        if age(created, now) < settings.instance_type_drift_min_age {
            return None;
        }
        let uid = node_claim.metadata.uid.as_deref().unwrap_or_default();
        if let Some(last) = self.checks().get(uid)
            && age(last.at, now) < settings.instance_type_drift_period
        {
            return last.drift.clone();
        }
        let pool_name = name_of(node_pool).to_owned();
        if !pass.catalogues.contains_key(&pool_name) {
            let catalogue = self.catalogue(snapshot, node_pool, pass).await;
            pass.catalogues.insert(pool_name.clone(), catalogue);
        }
        let catalogue = pass.catalogues.get(&pool_name)?.as_deref()?;
        if catalogue.is_empty() {
            return None;
        }
        let labels = node_claim.metadata.labels.clone().unwrap_or_default();
        let drift = instance_type_drift(&labels, catalogue, &pool_name);
        self.checks().insert(
            uid.to_owned(),
            InstanceTypeCheck {
                at: now,
                drift: drift.clone(),
            },
        );
        drift
    }

    async fn catalogue(
        &self,
        snapshot: &Snapshot,
        node_pool: &NodePool,
        pass: &mut PassState,
    ) -> Option<Vec<Arc<InstanceType>>> {
        let pool_json = serde_json::to_value(node_pool).ok()?;
        let class_json = snapshot
            .node_class_for(&node_pool.spec.template.spec.node_class_ref)
            .and_then(|class| serde_json::to_value(class).ok());
        match self
            .ctx
            .cloud
            .instance_types(&pool_json, class_json.as_ref())
            .await
        {
            Ok(catalogue) => Some(catalogue),
            Err(CloudProviderError::NodeClassNotReady(message)) => {
                tracing::debug!(node_pool = name_of(node_pool), %message, "node class not ready; instance types not checked");
                None
            }
            Err(error) => {
                let object = ObjectRef::cluster_scoped("NodePool", name_of(node_pool));
                self.plugin_failed(pass, object, "nodePool", &error);
                None
            }
        }
    }

    async fn provider_verdict(
        &self,
        snapshot: &Snapshot,
        node_claim: &NodeClaim,
        pass: &mut PassState,
    ) -> Verdict {
        let name = name_of(node_claim);
        let Some(node_class) = snapshot.node_class_for(&node_claim.spec.node_class_ref) else {
            tracing::debug!(
                node_claim = name,
                "node class not found; provider drift not checked"
            );
            return Verdict::Unknown;
        };
        let now = self.ctx.clock.now();
        let uid = node_claim.metadata.uid.as_deref().unwrap_or_default();
        let period = self.ctx.settings.drift_period;
        // Compared borrowed: a pass asks this of every NodeClaim, and it mostly holds.
        if let Some(last) = self.provider_checks().get(uid)
            && last.node_claim_version.as_deref() == node_claim.metadata.resource_version.as_deref()
            && last.node_class_version.as_deref() == node_class.metadata.resource_version.as_deref()
            && age(last.at, now).saturating_add(2 * renew_spacing(period)) < period
        {
            return last
                .drift
                .clone()
                .map_or(Verdict::NotDrifted, Verdict::Drifted);
        }
        let node_claim_version = node_claim.metadata.resource_version.clone();
        let node_class_version = node_class.metadata.resource_version.clone();
        let Some(launched) = launched_of(node_claim) else {
            return Verdict::Unknown;
        };
        let request = match request_of(node_claim) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(node_claim = name, %error, "cannot hand the NodeClaim to the plugin");
                return Verdict::Unknown;
            }
        };
        let reference = &node_claim.spec.node_class_ref;
        let class_key = (
            reference.group.clone(),
            reference.kind.clone(),
            reference.name.clone(),
        );
        let class_json = match pass.node_classes.get(&class_key) {
            Some(json) => Arc::clone(json),
            None => {
                let Ok(json) = serde_json::to_value(node_class) else {
                    return Verdict::Unknown;
                };
                let json = Arc::new(json);
                pass.node_classes.insert(class_key, Arc::clone(&json));
                json
            }
        };
        let remember = |drift: Option<DriftReason>| {
            self.provider_checks().insert(
                uid.to_owned(),
                ProviderCheck {
                    at: now,
                    node_claim_version: node_claim_version.clone(),
                    node_class_version: node_class_version.clone(),
                    drift: drift.clone(),
                },
            );
            drift.map_or(Verdict::NotDrifted, Verdict::Drifted)
        };
        let (verdict, failure) = match self
            .ctx
            .cloud
            .is_drifted(&request, &launched, &class_json)
            .await
        {
            Ok(None) => (remember(None), None),
            Ok(Some(drift)) => {
                // A replacement is only ever started for an instance the plugin has.
                let answer = self.ctx.cloud.get(&launched.provider_id).await;
                match drift_confirmation(name, &launched.provider_id, &drift, &answer) {
                    DriftConfirmation::Confirmed => (remember(Some(drift)), None),
                    DriftConfirmation::Refused(problem) => {
                        self.ctx.cloud.answer_refused(Rpc::IsDrifted, &problem);
                        (
                            Verdict::Unknown,
                            Some(CloudProviderError::InvalidResponse(problem)),
                        )
                    }
                    DriftConfirmation::Unknown => (Verdict::Unknown, answer.err()),
                }
            }
            Err(CloudProviderError::Unsupported { .. }) => (remember(None), None),
            Err(CloudProviderError::NotFound(_) | CloudProviderError::NodeClassNotReady(_)) => {
                (Verdict::Unknown, None)
            }
            Err(error) => (Verdict::Unknown, Some(error)),
        };
        if let Some(error) = failure {
            self.plugin_failed(
                pass,
                ObjectRef::cluster_scoped("NodeClaim", name),
                "nodeClaim",
                &error,
            );
        }
        verdict
    }

    /// Writes the condition `verdict` calls for, and its event.
    async fn apply(
        &self,
        node_claim: &NodeClaim,
        node_pool: &str,
        verdict: &Verdict,
        pass: &mut PassState,
    ) -> Result<(), ControllerError> {
        let name = name_of(node_claim);
        let conditions = node_claim
            .status
            .as_ref()
            .map_or(&[][..], |status| &status.conditions[..]);
        let Some((updated, event)) = drifted_conditions(conditions, verdict, self.ctx.clock.now())
        else {
            return Ok(());
        };
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": node_claim.metadata.resource_version },
            "status": { "conditions": updated },
        });
        match self
            .ctx
            .cluster
            .merge_patch_status::<NodeClaim>(None, name, &patch)
            .await
        {
            Ok(_) => {}
            Err(error) if error.is_not_found() => return Ok(()),
            Err(error) if error.is_conflict() => {
                pass.lost_race = true;
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        }
        let Some(event) = event else {
            return Ok(());
        };
        let mut fields = BTreeMap::from([
            ("nodeClaim".to_owned(), name.to_owned()),
            ("nodePool".to_owned(), node_pool.to_owned()),
        ]);
        let message = match verdict {
            Verdict::Drifted(drift) => {
                fields.insert("reason".to_owned(), drift.reason.clone());
                tracing::info!(node_claim = name, node_pool, reason = %drift.reason, message = %drift.message, "NodeClaim drifted");
                format!("drifted ({}): {}", drift.reason, drift.message)
            }
            _ => {
                tracing::info!(node_claim = name, node_pool, "NodeClaim no longer drifted");
                "no longer drifted".to_owned()
            }
        };
        self.ctx.event(
            ObjectRef::cluster_scoped("NodeClaim", name),
            EventType::Normal,
            event,
            message,
            fields,
        );
        Ok(())
    }
}

impl<C: Cluster, P: CloudProvider> Controller for DriftController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.disruption.drift"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let supported = self.ctx.cloud.supported_node_classes();
        let mut pass = PassState::default();
        for node_claim in snapshot.node_claims() {
            if node_claim.metadata.deletion_timestamp.is_some()
                || !is_managed(&node_claim.spec.node_class_ref, supported)
            {
                continue;
            }
            let pool_name = node_claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(LABEL_NODEPOOL));
            let Some(node_pool) = pool_name.and_then(|pool| snapshot.node_pool(pool)) else {
                continue;
            };
            let verdict = if is_condition_true(node_claim, CONDITION_LAUNCHED) {
                self.verdict(&snapshot, node_claim, node_pool, &mut pass)
                    .await
            } else {
                Verdict::NotDrifted
            };
            self.apply(node_claim, name_of(node_pool), &verdict, &mut pass)
                .await?;
        }
        // Forget the checks of NodeClaims that are gone.
        let live: HashSet<&str> = snapshot
            .node_claims()
            .filter_map(|node_claim| node_claim.metadata.uid.as_deref())
            .collect();
        self.checks().retain(|uid, _| live.contains(uid.as_str()));
        self.provider_checks()
            .retain(|uid, _| live.contains(uid.as_str()));
        self.static_checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|uid, _| live.contains(uid.as_str()));
        // Back a spacing before the oldest standing answer expires (see [`RENEW_SPACING`]), so
        // every NodeClaim is asked about again within a period of its last check.
        let now = self.ctx.clock.now();
        let period = self.ctx.settings.drift_period;
        let spacing = renew_spacing(period);
        let oldest = self.provider_checks().values().map(|check| check.at).min();
        let mut requeue = Requeue::After(oldest.map_or(period, |at| {
            period
                .saturating_sub(spacing)
                .saturating_sub(age(at, now))
                .max(Duration::from_secs(1))
        }));
        if pass.plugin_failed {
            requeue = requeue.min(Requeue::After(PLUGIN_RETRY));
        }
        if pass.lost_race {
            requeue = requeue.min(Requeue::After(CONFLICT_RETRY));
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests;
