//! The resources the fake API server serves, and the typed calls into the in-memory cluster.

use core_svc::cluster::{Cluster, ClusterError, ClusterObject, DeleteOptions, InMemoryCluster};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use karpenter_api::{NodeClaim, NodeClassReference, NodePool};
use kube::core::DynamicObject;
use serde_json::Value;

/// A node class kind to serve (its CRD, in effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassResource {
    /// The API group (`karpenter.k8s.aws`).
    pub group: String,
    /// The version (`v1`).
    pub version: String,
    /// The kind (`EC2NodeClass`).
    pub kind: String,
    /// The plural (`ec2nodeclasses`).
    pub plural: String,
}

impl NodeClassResource {
    /// `karpenter.k8s.aws/v1` EC2NodeClass.
    pub fn ec2_node_class() -> Self {
        Self {
            group: "karpenter.k8s.aws".to_owned(),
            version: "v1".to_owned(),
            kind: "EC2NodeClass".to_owned(),
            plural: "ec2nodeclasses".to_owned(),
        }
    }
}

/// The kinds the in-memory cluster stores with a static type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Typed {
    NodePool,
    NodeClaim,
    Node,
    Pod,
    PodDisruptionBudget,
    DaemonSet,
    PriorityClass,
}

/// Where a resource's objects live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// In the in-memory cluster, with a static type.
    Typed(Typed),
    /// In the in-memory cluster, as a node class.
    NodeClass,
    /// In the server's own store (Leases, Events, Deployments).
    Plain,
}

/// One served resource.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    /// Subresources it has (`status`, `eviction`).
    pub(crate) subresources: &'static [&'static str],
    pub(crate) backend: Backend,
}

impl Resource {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

fn resource(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    subresources: &'static [&'static str],
    backend: Backend,
) -> Resource {
    Resource {
        group: group.to_owned(),
        version: version.to_owned(),
        plural: plural.to_owned(),
        kind: kind.to_owned(),
        namespaced,
        subresources,
        backend,
    }
}

/// The RBAC API group.
pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Every resource served, the node classes last.
pub(crate) fn all(node_classes: &[NodeClassResource]) -> Vec<Resource> {
    use Backend::{Plain, Typed as T};
    let mut resources = vec![
        resource(
            "karpenter.sh",
            "v1",
            "nodepools",
            "NodePool",
            false,
            &["status"],
            T(Typed::NodePool),
        ),
        resource(
            "karpenter.sh",
            "v1",
            "nodeclaims",
            "NodeClaim",
            false,
            &["status"],
            T(Typed::NodeClaim),
        ),
        resource(
            "",
            "v1",
            "nodes",
            "Node",
            false,
            &["status"],
            T(Typed::Node),
        ),
        resource(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            &["status", "eviction"],
            T(Typed::Pod),
        ),
        resource(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["status"],
            T(Typed::PodDisruptionBudget),
        ),
        resource(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            true,
            &["status"],
            T(Typed::DaemonSet),
        ),
        // Stored as plain JSON: core never reads Deployments; the workload stand-in
        // (`workloads.rs`) turns them into the Pods core does read.
        resource(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["status"],
            Plain,
        ),
        resource(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            &[],
            T(Typed::PriorityClass),
        ),
        resource(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            Plain,
        ),
        resource("events.k8s.io", "v1", "events", "Event", true, &[], Plain),
        // What an install applies besides the kinds above, stored as sent: the namespace, the
        // service account, the metrics Service and settings, the CRDs themselves, the RBAC
        // objects (which the server also enforces, see `rbac.rs`) and the monitoring
        // component's ServiceMonitor (as if prometheus-operator's CRD were installed).
        resource(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["status"],
            Plain,
        ),
        resource(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &[],
            Plain,
        ),
        resource("", "v1", "services", "Service", true, &["status"], Plain),
        resource("", "v1", "configmaps", "ConfigMap", true, &[], Plain),
        resource(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["status"],
            Plain,
        ),
        resource(
            RBAC_GROUP,
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            Plain,
        ),
        resource(
            RBAC_GROUP,
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            Plain,
        ),
        resource(RBAC_GROUP, "v1", "roles", "Role", true, &[], Plain),
        resource(
            RBAC_GROUP,
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            Plain,
        ),
        resource(
            "monitoring.coreos.com",
            "v1",
            "servicemonitors",
            "ServiceMonitor",
            true,
            &[],
            Plain,
        ),
    ];
    resources.extend(node_classes.iter().map(|class| Resource {
        group: class.group.clone(),
        version: class.version.clone(),
        plural: class.plural.clone(),
        kind: class.kind.clone(),
        namespaced: false,
        subresources: &["status"],
        backend: Backend::NodeClass,
    }));
    resources
}

/// One call on a typed or node class resource.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    Get,
    Create(Value),
    Replace(Value),
    ReplaceStatus(Value),
    MergePatch(&'a Value),
    MergePatchStatus(&'a Value),
    Delete(DeleteOptions),
}

/// What a call answers: the object, or nothing (a delete that removed it).
pub(crate) type Answer = Result<Option<Value>, ClusterError>;

/// Runs `op` on the object `namespace/name` of `resource` in `cluster`.
pub(crate) async fn call(
    cluster: &InMemoryCluster,
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
    op: Op<'_>,
) -> Answer {
    match &resource.backend {
        Backend::Typed(typed) => match typed {
            Typed::NodePool => typed_call::<NodePool>(cluster, namespace, name, op).await,
            Typed::NodeClaim => typed_call::<NodeClaim>(cluster, namespace, name, op).await,
            Typed::Node => typed_call::<Node>(cluster, namespace, name, op).await,
            Typed::Pod => typed_call::<Pod>(cluster, namespace, name, op).await,
            Typed::PodDisruptionBudget => {
                typed_call::<PodDisruptionBudget>(cluster, namespace, name, op).await
            }
            Typed::DaemonSet => typed_call::<DaemonSet>(cluster, namespace, name, op).await,
            Typed::PriorityClass => typed_call::<PriorityClass>(cluster, namespace, name, op).await,
        },
        Backend::NodeClass => node_class_call(cluster, resource, name, op).await,
        Backend::Plain => Err(ClusterError::Unavailable(format!(
            "{} is not stored in the cluster",
            resource.kind
        ))),
    }
}

fn to_value<T: serde::Serialize>(kind: &str, object: &T) -> Result<Value, ClusterError> {
    serde_json::to_value(object).map_err(|e| ClusterError::invalid(kind, "", "", e.to_string()))
}

fn from_value<T: serde::de::DeserializeOwned>(kind: &str, value: Value) -> Result<T, ClusterError> {
    serde_json::from_value(value).map_err(|e| ClusterError::invalid(kind, "", "", e.to_string()))
}

async fn typed_call<K: ClusterObject>(
    cluster: &InMemoryCluster,
    namespace: Option<&str>,
    name: &str,
    op: Op<'_>,
) -> Answer {
    let kind = K::KIND;
    let object: K = match op {
        Op::Get => match cluster.get::<K>(namespace, name).await? {
            Some(object) => object,
            None => {
                return Err(ClusterError::NotFound {
                    kind: kind.to_owned(),
                    namespace: namespace.map(str::to_owned),
                    name: name.to_owned(),
                });
            }
        },
        Op::Create(value) => cluster.create(&from_value::<K>(kind, value)?).await?,
        Op::Replace(value) => cluster.replace(&from_value::<K>(kind, value)?).await?,
        Op::ReplaceStatus(value) => {
            cluster
                .replace_status(&from_value::<K>(kind, value)?)
                .await?
        }
        Op::MergePatch(patch) => cluster.merge_patch::<K>(namespace, name, patch).await?,
        Op::MergePatchStatus(patch) => {
            cluster
                .merge_patch_status::<K>(namespace, name, patch)
                .await?
        }
        Op::Delete(options) => {
            cluster.delete::<K>(namespace, name, options).await?;
            return match cluster.get::<K>(namespace, name).await? {
                Some(still_there) => Ok(Some(with_types::<K>(to_value(kind, &still_there)?))),
                None => Ok(None),
            };
        }
    };
    Ok(Some(with_types::<K>(to_value(kind, &object)?)))
}

/// The object with its `apiVersion` and `kind`, which every answer of the API server carries.
fn with_types<K: ClusterObject>(mut value: Value) -> Value {
    if let Value::Object(map) = &mut value {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(K::api_version(&()).into_owned()),
        );
        map.insert("kind".to_owned(), Value::String(K::KIND.to_owned()));
    }
    value
}

async fn node_class_call(
    cluster: &InMemoryCluster,
    resource: &Resource,
    name: &str,
    op: Op<'_>,
) -> Answer {
    let reference = NodeClassReference {
        group: resource.group.clone(),
        kind: resource.kind.clone(),
        name: name.to_owned(),
    };
    let not_found = || ClusterError::NotFound {
        kind: resource.kind.clone(),
        namespace: None,
        name: name.to_owned(),
    };
    let object = match op {
        Op::Get => cluster
            .get_node_class(&reference)
            .await?
            .ok_or_else(not_found)?,
        Op::Create(value) => {
            let object: DynamicObject = from_value(&resource.kind, value)?;
            cluster.create_node_class(&object).await?
        }
        Op::Replace(_) | Op::ReplaceStatus(_) => {
            // The port writes node classes by merge patch only, so the in-memory cluster has
            // no replace for them; say so rather than approximate one.
            return Err(ClusterError::invalid(
                &resource.kind,
                name,
                "",
                "this fake API server writes node classes by patch only (use kubectl apply or a merge patch)",
            ));
        }
        Op::MergePatch(patch) => cluster.merge_patch_node_class(&reference, patch).await?,
        Op::MergePatchStatus(patch) => {
            cluster
                .merge_patch_node_class_status(&reference, patch)
                .await?
        }
        Op::Delete(options) => {
            cluster.delete_node_class(&reference, options).await?;
            return cluster
                .get_node_class(&reference)
                .await?
                .map(|object| to_value(&resource.kind, &object))
                .transpose();
        }
    };
    Ok(Some(to_value(&resource.kind, &object)?))
}
