//! The NodePool template hash and hash versioning (upstream kubernetes-sigs/karpenter
//! `pkg/controllers/nodepool/hash` and `NodePool.Hash` in `pkg/apis/v1/nodepool.go`), with
//! our own hash version, re-stamping the NodeClaims of another version rather than drifting
//! them.
//!
//! Every managed NodePool carries `karpenter.sh/nodepool-hash` (its template's static hash) and
//! `karpenter.sh/nodepool-hash-version` ([`NODEPOOL_HASH_VERSION`]); the provisioner stamps the
//! same two on each NodeClaim it creates, and the drift controller calls a NodeClaim drifted
//! when the hashes differ under equal versions.
//!
//! When the NodePool's version is not ours (an upgrade changed the hashing scheme, or the
//! fleet was launched by upstream Karpenter, whose version is `v3`), comparing hashes would
//! drift every node. So before the NodePool gets our version, each of its NodeClaims with
//! another version is re-stamped: our version, and the NodePool's fresh hash unless the
//! NodeClaim is already drifted (it stays drifted; its old hash cannot be compared any more).
//! The NodePool is written last, so a pass cut short re-stamps again on the next one. The
//! caveat: a template edit made while core was down across a version change
//! is not seen as drift.
//!
//! The node class controller applies the same rule to the node class hash annotations
//! ([`HashAnnotationKeys::node_class`], [`restamps`], [`apply_restamp`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::nodeclaim::CONDITION_DRIFTED;
use karpenter_api::nodepool::{
    ANNOTATION_NODEPOOL_HASH, ANNOTATION_NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION,
};
use karpenter_api::{NodeClaim, NodeClassReference, NodePool, condition};
use serde_json::{Map, Value};

use super::{Context, Controller, ControllerError, Requeue, Snapshot};
use crate::cloudprovider::{CloudProvider, NodeClassKind};
use crate::cluster::{Cluster, ClusterError};

/// How soon a pass that lost a write race (a stale `resourceVersion`) runs again.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The label naming a NodeClaim's NodePool.
const LABEL_NODEPOOL: &str = core_domain::labels::LABEL_NODEPOOL;

/// The pair of annotations a static hash is stamped under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashAnnotationKeys {
    /// The hash, e.g. `karpenter.sh/nodepool-hash`.
    pub hash: String,
    /// The version of the hashing scheme, e.g. `karpenter.sh/nodepool-hash-version`.
    pub version: String,
}

impl HashAnnotationKeys {
    /// `karpenter.sh/nodepool-hash` and `karpenter.sh/nodepool-hash-version`.
    pub fn node_pool() -> Self {
        Self {
            hash: ANNOTATION_NODEPOOL_HASH.to_owned(),
            version: ANNOTATION_NODEPOOL_HASH_VERSION.to_owned(),
        }
    }

    /// `<group>/<lowercase kind>-hash` and `-hash-version`, as upstream names them for its
    /// node classes (`karpenter.k8s.aws/ec2nodeclass-hash`).
    pub fn node_class(group: &str, kind: &str) -> Self {
        let prefix = format!("{group}/{}", kind.to_lowercase());
        Self {
            hash: format!("{prefix}-hash"),
            version: format!("{prefix}-hash-version"),
        }
    }

    /// The hash and version `annotations` carry under these keys.
    pub fn read<'a>(&self, meta: &'a ObjectMeta) -> (Option<&'a str>, Option<&'a str>) {
        let annotation = |key: &str| {
            meta.annotations
                .as_ref()
                .and_then(|annotations| annotations.get(key))
                .map(String::as_str)
        };
        (annotation(&self.hash), annotation(&self.version))
    }
}

/// One NodeClaim to bring to the current hash version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restamp {
    /// The NodeClaim's name.
    pub node_claim: String,
    /// Its `resourceVersion` when read: the write applies only to what was decided on.
    pub resource_version: Option<String>,
    /// The version to stamp.
    pub version: String,
    /// The hash to stamp; `None` for a NodeClaim that is already drifted, which keeps its hash
    /// and so stays drifted.
    pub hash: Option<String>,
}

/// The NodeClaims among `node_claims` whose version under `keys` is not `version`, each with
/// what to stamp (upstream `updateNodeClaimHash`). A NodeClaim with any `Drifted` condition
/// keeps its hash.
pub fn restamps<'a>(
    node_claims: impl IntoIterator<Item = &'a NodeClaim>,
    keys: &HashAnnotationKeys,
    hash: &str,
    version: &str,
) -> Vec<Restamp> {
    node_claims
        .into_iter()
        .filter(|node_claim| keys.read(&node_claim.metadata).1 != Some(version))
        .map(|node_claim| {
            let drifted = node_claim
                .status
                .as_ref()
                .and_then(|status| condition::find(&status.conditions, CONDITION_DRIFTED))
                .is_some();
            Restamp {
                node_claim: node_claim.metadata.name.clone().unwrap_or_default(),
                resource_version: node_claim.metadata.resource_version.clone(),
                version: version.to_owned(),
                hash: (!drifted).then(|| hash.to_owned()),
            }
        })
        .collect()
}

/// The merge patch stamping `hash` (when given) and `version` under `keys`, optimistic when
/// `resource_version` is given.
pub fn stamp_patch(
    keys: &HashAnnotationKeys,
    hash: Option<&str>,
    version: &str,
    resource_version: Option<&str>,
) -> Value {
    let mut annotations = Map::new();
    if let Some(hash) = hash {
        annotations.insert(keys.hash.clone(), Value::String(hash.to_owned()));
    }
    annotations.insert(keys.version.clone(), Value::String(version.to_owned()));
    let mut metadata = Map::new();
    metadata.insert("annotations".to_owned(), Value::Object(annotations));
    if let Some(resource_version) = resource_version {
        metadata.insert(
            "resourceVersion".to_owned(),
            Value::String(resource_version.to_owned()),
        );
    }
    let mut patch = Map::new();
    patch.insert("metadata".to_owned(), Value::Object(metadata));
    Value::Object(patch)
}

/// Writes one [`Restamp`]. `Ok(false)` when the NodeClaim changed since it was read (retry on
/// the next pass); a NodeClaim that is gone needs nothing.
pub async fn apply_restamp<C: Cluster>(
    cluster: &C,
    keys: &HashAnnotationKeys,
    restamp: &Restamp,
) -> Result<bool, ClusterError> {
    let patch = stamp_patch(
        keys,
        restamp.hash.as_deref(),
        &restamp.version,
        restamp.resource_version.as_deref(),
    );
    match cluster
        .merge_patch::<NodeClaim>(None, &restamp.node_claim, &patch)
        .await
    {
        Ok(_) => {
            tracing::info!(
                node_claim = %restamp.node_claim,
                annotation = %keys.version,
                version = %restamp.version,
                hash = ?restamp.hash,
                "re-stamped a NodeClaim after a hash version change"
            );
            Ok(true)
        }
        Err(error) if error.is_not_found() => Ok(true),
        Err(error) if error.is_conflict() => {
            tracing::debug!(node_claim = %restamp.node_claim, %error, "re-stamp lost a race; retrying");
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// Whether `reference` names a node class of one of `supported` (upstream `IsManaged`).
pub fn is_managed(reference: &NodeClassReference, supported: &[NodeClassKind]) -> bool {
    supported
        .iter()
        .any(|kind| kind.group == reference.group && kind.kind == reference.kind)
}

/// What the hash controller writes for one NodePool: first the re-stamps, then the NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePoolStamp {
    /// The NodePool's name.
    pub node_pool: String,
    /// Its `resourceVersion` when read.
    pub resource_version: Option<String>,
    /// Its template hash.
    pub hash: String,
    /// [`NODEPOOL_HASH_VERSION`].
    pub version: String,
    /// Its NodeClaims to re-stamp first (only when the NodePool's version is not ours).
    pub restamps: Vec<Restamp>,
}

/// The writes that bring every managed NodePool and its NodeClaims to the current hash and
/// version; NodePools already there are left out.
pub fn plan(snapshot: &Snapshot, supported: &[NodeClassKind]) -> Vec<NodePoolStamp> {
    let keys = HashAnnotationKeys::node_pool();
    snapshot
        .node_pools()
        .filter(|node_pool| is_managed(&node_pool.spec.template.spec.node_class_ref, supported))
        .filter_map(|node_pool| plan_node_pool(node_pool, &snapshot.node_claims, &keys))
        .collect()
}

fn plan_node_pool(
    node_pool: &NodePool,
    node_claims: &[Arc<NodeClaim>],
    keys: &HashAnnotationKeys,
) -> Option<NodePoolStamp> {
    let name = node_pool.metadata.name.clone().unwrap_or_default();
    let hash = node_pool.static_hash();
    let (stamped_hash, stamped_version) = keys.read(&node_pool.metadata);
    let restamps = if stamped_version == Some(NODEPOOL_HASH_VERSION) {
        Vec::new()
    } else {
        let owned = node_claims.iter().map(AsRef::as_ref).filter(|node_claim| {
            node_claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(LABEL_NODEPOOL))
                == Some(&name)
        });
        restamps(owned, keys, &hash, NODEPOOL_HASH_VERSION)
    };
    let up_to_date =
        stamped_hash == Some(hash.as_str()) && stamped_version == Some(NODEPOOL_HASH_VERSION);
    (!up_to_date || !restamps.is_empty()).then(|| NodePoolStamp {
        node_pool: name,
        resource_version: node_pool.metadata.resource_version.clone(),
        hash,
        version: NODEPOOL_HASH_VERSION.to_owned(),
        restamps,
    })
}

/// Keeps the NodePool hash annotations current (upstream controller `nodepool.hash`).
#[derive(Debug)]
pub struct HashController<C, P> {
    ctx: Context<C, P>,
}

impl<C: Cluster, P: CloudProvider> HashController<C, P> {
    /// A controller on `ctx`.
    pub fn new(ctx: Context<C, P>) -> Self {
        Self { ctx }
    }

    /// Writes one NodePool's stamp; `Ok(false)` when a write lost a race.
    async fn apply(&self, stamp: &NodePoolStamp) -> Result<bool, ClusterError> {
        let keys = HashAnnotationKeys::node_pool();
        for restamp in &stamp.restamps {
            if !apply_restamp(self.ctx.cluster.as_ref(), &keys, restamp).await? {
                // The NodePool keeps its old version so that the next pass re-stamps again.
                return Ok(false);
            }
        }
        let patch = stamp_patch(
            &keys,
            Some(&stamp.hash),
            &stamp.version,
            stamp.resource_version.as_deref(),
        );
        match self
            .ctx
            .cluster
            .merge_patch::<NodePool>(None, &stamp.node_pool, &patch)
            .await
        {
            Ok(_) => {
                tracing::debug!(node_pool = %stamp.node_pool, hash = %stamp.hash, version = %stamp.version, "stamped the NodePool hash");
                Ok(true)
            }
            Err(error) if error.is_not_found() => Ok(true),
            Err(error) if error.is_conflict() => Ok(false),
            Err(error) => Err(error),
        }
    }
}

impl<C: Cluster, P: CloudProvider> Controller for HashController<C, P> {
    fn name(&self) -> &'static str {
        "nodepool.hash"
    }

    async fn reconcile(&self) -> Result<Requeue, ControllerError> {
        let snapshot = self.ctx.cluster.snapshot().await?;
        let stamps = plan(&snapshot, self.ctx.cloud.supported_node_classes());
        let mut requeue = Requeue::OnChange;
        for stamp in &stamps {
            if !self.apply(stamp).await? {
                requeue = Requeue::After(CONFLICT_RETRY);
            }
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use karpenter_api::{ConditionStatus, NodeClaimStatus};
    use serde_json::json;

    use super::*;
    use crate::controllers::testing::{self, kinds};

    fn node_pool(name: &str, annotations: Value) -> NodePool {
        testing::node_pool(
            name,
            json!({
                "metadata": { "resourceVersion": "7", "annotations": annotations },
                "spec": { "template": { "metadata": { "labels": { "team": "a" } } } },
            }),
        )
    }

    fn node_claim(name: &str, pool: &str, annotations: Value, drifted: bool) -> NodeClaim {
        let mut node_claim = testing::node_claim(
            name,
            json!({ "metadata": {
                "resourceVersion": "3",
                "labels": { "karpenter.sh/nodepool": pool },
                "annotations": annotations,
            } }),
        );
        if drifted {
            let mut status = NodeClaimStatus::default();
            condition::set(
                &mut status.conditions,
                CONDITION_DRIFTED,
                ConditionStatus::True,
                "NodePoolDrifted",
                "",
                Time(jiff::Timestamp::UNIX_EPOCH),
            );
            node_claim.status = Some(status);
        }
        node_claim
    }

    fn snapshot(node_pools: Vec<NodePool>, node_claims: Vec<NodeClaim>) -> Snapshot {
        let mut snapshot = Snapshot {
            node_pools: crate::cluster::shared(node_pools),
            node_claims: crate::cluster::shared(node_claims),
            ..Snapshot::default()
        };
        snapshot.sort();
        snapshot
    }

    #[test]
    fn node_class_keys_use_the_group_and_the_lowercase_kind() {
        assert_eq!(
            HashAnnotationKeys::node_class("karpenter.k8s.aws", "EC2NodeClass"),
            HashAnnotationKeys {
                hash: "karpenter.k8s.aws/ec2nodeclass-hash".into(),
                version: "karpenter.k8s.aws/ec2nodeclass-hash-version".into(),
            }
        );
    }

    #[test]
    fn given_an_unstamped_node_pool_then_it_is_stamped_and_its_unversioned_claims_too() {
        let pool = node_pool("default", json!({}));
        let hash = pool.static_hash();
        let plan = plan(
            &snapshot(
                vec![pool],
                vec![node_claim("a", "default", json!({}), false)],
            ),
            &kinds(),
        );
        assert_eq!(
            plan,
            vec![NodePoolStamp {
                node_pool: "default".into(),
                resource_version: Some("7".into()),
                hash: hash.clone(),
                version: NODEPOOL_HASH_VERSION.into(),
                restamps: vec![Restamp {
                    node_claim: "a".into(),
                    resource_version: Some("3".into()),
                    version: NODEPOOL_HASH_VERSION.into(),
                    hash: Some(hash),
                }],
            }]
        );
    }

    #[test]
    fn given_a_stamped_node_pool_then_nothing_is_written() {
        let mut pool = node_pool("default", json!({}));
        let hash = pool.static_hash();
        pool.metadata.annotations = Some(BTreeMap::from([
            (ANNOTATION_NODEPOOL_HASH.to_owned(), hash),
            (
                ANNOTATION_NODEPOOL_HASH_VERSION.to_owned(),
                NODEPOOL_HASH_VERSION.to_owned(),
            ),
        ]));
        let claim = node_claim(
            "a",
            "default",
            json!({ ANNOTATION_NODEPOOL_HASH: "1", ANNOTATION_NODEPOOL_HASH_VERSION: "v3" }),
            false,
        );
        assert_eq!(plan(&snapshot(vec![pool], vec![claim]), &kinds()), vec![]);
    }

    #[test]
    fn given_a_template_change_then_only_the_node_pool_hash_moves() {
        let pool = node_pool(
            "default",
            json!({ ANNOTATION_NODEPOOL_HASH: "1", ANNOTATION_NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION }),
        );
        let claim = node_claim(
            "a",
            "default",
            json!({ ANNOTATION_NODEPOOL_HASH: "1", ANNOTATION_NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION }),
            false,
        );
        let plan = plan(&snapshot(vec![pool.clone()], vec![claim]), &kinds());
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].hash, pool.static_hash());
        assert!(plan[0].restamps.is_empty(), "the NodeClaim must drift");
    }

    #[test]
    fn given_a_version_change_then_drifted_claims_keep_their_hash_and_other_pools_claims_are_left_alone()
     {
        let pool = node_pool(
            "default",
            json!({ ANNOTATION_NODEPOOL_HASH: "1", ANNOTATION_NODEPOOL_HASH_VERSION: "v3" }),
        );
        let hash = pool.static_hash();
        let old = json!({ ANNOTATION_NODEPOOL_HASH: "1", ANNOTATION_NODEPOOL_HASH_VERSION: "v3" });
        let plan = plan(
            &snapshot(
                vec![pool],
                vec![
                    node_claim("clean", "default", old.clone(), false),
                    node_claim("drifted", "default", old.clone(), true),
                    node_claim("elsewhere", "other", old, false),
                ],
            ),
            &kinds(),
        );
        let restamps: Vec<(&str, Option<&str>)> = plan[0]
            .restamps
            .iter()
            .map(|r| (r.node_claim.as_str(), r.hash.as_deref()))
            .collect();
        assert_eq!(
            restamps,
            vec![("clean", Some(hash.as_str())), ("drifted", None)]
        );
    }

    #[test]
    fn given_a_node_pool_of_another_provider_then_it_is_not_touched() {
        let mut pool = node_pool("default", json!({}));
        pool.spec.template.spec.node_class_ref.kind = "KWOKNodeClass".into();
        assert_eq!(plan(&snapshot(vec![pool], vec![]), &kinds()), vec![]);
    }

    #[test]
    fn the_stamp_patch_is_optimistic_and_leaves_the_hash_out_when_told() {
        let keys = HashAnnotationKeys::node_pool();
        assert_eq!(
            stamp_patch(&keys, None, "rs-v1", Some("9")),
            json!({ "metadata": {
                "resourceVersion": "9",
                "annotations": { ANNOTATION_NODEPOOL_HASH_VERSION: "rs-v1" },
            } })
        );
    }
}
