//! Expiration (upstream `nodeclaim/expiration`): a NodeClaim older than its `expireAfter` is
//! deleted. Forceful: no disruption budget, no do-not-disrupt, no replacement first; the
//! termination controller then drains it (bounded by its terminationGracePeriod), so a node
//! lives at most about `expireAfter + terminationGracePeriod`.

use std::collections::BTreeMap;
use std::time::Duration;

use core_domain::labels::LABEL_NODEPOOL;
use jiff::Timestamp;
use karpenter_api::NodeClaim;

use super::{Context, Controller, ControllerError, Requeue};
use crate::cloudprovider::CloudProvider;
use crate::cluster::Cluster;
use crate::controllers::nodeclaim::delete_if_same;
use crate::events::{EventType, ObjectRef, Reason};

/// When the NodeClaim expires: its creation time plus `expireAfter`; `None` for `Never` (or a
/// NodeClaim not created yet).
pub fn expiration_time(node_claim: &NodeClaim) -> Option<Timestamp> {
    let created = node_claim.metadata.creation_timestamp.as_ref()?;
    let expire_after = node_claim.spec.expire_after.duration()?;
    Some(
        created
            .0
            .saturating_add(expire_after)
            .unwrap_or(Timestamp::MAX),
    )
}

/// What one expiration pass does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpirationPlan<'a> {
    /// The NodeClaims to delete now, by name.
    pub expired: Vec<&'a NodeClaim>,
    /// The next time a NodeClaim not yet deleting expires.
    pub next_expiration: Option<Timestamp>,
}

/// The NodeClaims that have expired at `now` and are not being deleted yet, and when the next
/// one expires.
pub fn plan<'a>(
    node_claims: impl IntoIterator<Item = &'a NodeClaim>,
    now: Timestamp,
) -> ExpirationPlan<'a> {
    let mut plan = ExpirationPlan::default();
    for node_claim in node_claims {
        if node_claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(expires) = expiration_time(node_claim) else {
            continue;
        };
        if now >= expires {
            plan.expired.push(node_claim);
        } else {
            plan.next_expiration = Some(plan.next_expiration.map_or(expires, |t| t.min(expires)));
        }
    }
    plan
}

/// The expiration controller.
#[derive(Debug)]
pub struct ExpirationController<C, P> {
    ctx: Context<C, P>,
}

impl<C: Cluster, P: CloudProvider> ExpirationController<C, P> {
    /// An expiration controller working through `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self { ctx }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for ExpirationController<C, P> {
    fn name(&self) -> &'static str {
        "nodeclaim.expiration"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let now = self.ctx.clock.now();
        let plan = plan(snapshot.node_claims(), now);
        let mut failure = None;
        for node_claim in &plan.expired {
            let name = node_claim.metadata.name.as_deref().unwrap_or_default();
            match delete_if_same(&*self.ctx.cluster, node_claim).await {
                Ok(true) => {}
                // Gone already, or replaced by a new NodeClaim of the same name: not expired.
                Ok(false) => continue,
                Err(error) => {
                    tracing::warn!(node_claim = name, error = %error, "deleting an expired NodeClaim failed");
                    failure.get_or_insert(error);
                    continue;
                }
            }
            let expire_after = node_claim.spec.expire_after.as_str();
            let node_pool = node_claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(LABEL_NODEPOOL))
                .cloned()
                .unwrap_or_default();
            tracing::info!(
                node_claim = name,
                expire_after,
                "deleting expired NodeClaim"
            );
            let mut fields = BTreeMap::from([
                ("nodeClaim".to_owned(), name.to_owned()),
                ("reason".to_owned(), "Expired".to_owned()),
            ]);
            if !node_pool.is_empty() {
                fields.insert("nodePool".to_owned(), node_pool);
            }
            self.ctx.event(
                ObjectRef::cluster_scoped("NodeClaim", name),
                EventType::Normal,
                Reason::NodeClaimDeleted,
                format!("Deleting NodeClaim: it expired (expireAfter {expire_after})"),
                fields,
            );
        }
        if let Some(error) = failure {
            return Err(error.into());
        }
        Ok(match plan.next_expiration {
            Some(next) => Requeue::After(
                Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO),
            ),
            None => Requeue::OnChange,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::{self, at};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn node_claim(name: &str, expire_after: &str, created: i64) -> NodeClaim {
        testing::node_claim(
            name,
            json!({
                "metadata": { "creationTimestamp": Time(at(created)) },
                "spec": { "expireAfter": expire_after },
            }),
        )
    }

    fn names<'a>(plan: &ExpirationPlan<'a>) -> Vec<&'a str> {
        plan.expired
            .iter()
            .map(|claim| claim.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn a_node_claim_expires_expire_after_past_its_creation() {
        let claim = node_claim("a", "1h", 100);
        assert_eq!(expiration_time(&claim), Some(at(3700)));
        assert_eq!(expiration_time(&node_claim("b", "Never", 100)), None);
    }

    #[test]
    fn the_default_expire_after_is_thirty_days() {
        let mut claim = node_claim("a", "1h", 0);
        let mut value = serde_json::to_value(&claim).unwrap();
        value["spec"].as_object_mut().unwrap().remove("expireAfter");
        claim = serde_json::from_value(value).unwrap();
        assert_eq!(expiration_time(&claim), Some(at(720 * 3600)));
    }

    #[test]
    fn expired_claims_are_deleted_and_the_next_expiry_is_the_requeue() {
        let claims = vec![
            node_claim("expired", "1h", 0),
            node_claim("exactly", "30m", 1800),
            node_claim("later", "2h", 0),
            node_claim("soon", "1h", 600),
            node_claim("never", "Never", 0),
        ];
        let plan = plan(&claims, at(3600));
        assert_eq!(names(&plan), ["expired", "exactly"]);
        assert_eq!(plan.next_expiration, Some(at(4200)));
    }

    #[test]
    fn a_claim_already_deleting_is_left_alone() {
        let mut claim = node_claim("a", "1h", 0);
        claim.metadata.deletion_timestamp = Some(Time(at(10)));
        let claims = [claim];
        let plan = plan(&claims, at(7200));
        assert!(plan.expired.is_empty());
        assert_eq!(plan.next_expiration, None);
    }
}
