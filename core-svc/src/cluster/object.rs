//! The kinds core reads and writes through the [`Cluster`](super::Cluster) port, and the facts
//! about each that change how the API server treats it.

use k8s_openapi::api::{
    apps::v1::DaemonSet, core::v1::Node, core::v1::Pod, policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use karpenter_api::{NodeClaim, NodePool};
use serde::{Serialize, de::DeserializeOwned};

use super::SlimPod;

mod sealed {
    pub trait Sealed {}
}

/// One of the kinds core reads and writes with a static type. Sealed: the in-memory cluster and
/// the kube adapter each know exactly these kinds. Node classes, whose kind only the plugin
/// knows, are `DynamicObject`s with methods of their own on [`Cluster`](super::Cluster).
pub trait ClusterObject:
    kube::Resource<DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
    + sealed::Sealed
{
    /// The kind, as in `kind:` (`NodeClaim`).
    const KIND: &'static str;
    /// Whether objects live in a namespace (Pod) or at cluster scope (Node).
    const NAMESPACED: bool;
    /// Whether `.status` is a subresource: a write of the object ignores its status and a
    /// status write ignores everything else.
    const STATUS_SUBRESOURCE: bool;
    /// Whether a CRD defines the kind. The API server clears a custom resource's status on
    /// create and refuses to replace one without a `resourceVersion`.
    const CUSTOM_RESOURCE: bool;
    /// How a [`Snapshot`](super::Snapshot) holds the kind: the object itself, but a Pod as a
    /// [`SlimPod`].
    type Cached: kube::Resource<DynamicType = ()>
        + From<Self>
        + Clone
        + Send
        + Sync
        + std::fmt::Debug
        + 'static;
}

macro_rules! cluster_object {
    ($type:ty, $kind:literal, namespaced: $namespaced:literal, status: $status:literal, custom: $custom:literal) => {
        cluster_object!($type, $kind, namespaced: $namespaced, status: $status, custom: $custom, cached: $type);
    };
    ($type:ty, $kind:literal, namespaced: $namespaced:literal, status: $status:literal, custom: $custom:literal, cached: $cached:ty) => {
        impl sealed::Sealed for $type {}
        impl ClusterObject for $type {
            type Cached = $cached;
            const KIND: &'static str = $kind;
            const NAMESPACED: bool = $namespaced;
            const STATUS_SUBRESOURCE: bool = $status;
            const CUSTOM_RESOURCE: bool = $custom;
        }
    };
}

cluster_object!(NodePool, "NodePool", namespaced: false, status: true, custom: true);
cluster_object!(NodeClaim, "NodeClaim", namespaced: false, status: true, custom: true);
cluster_object!(Node, "Node", namespaced: false, status: true, custom: false);
cluster_object!(Pod, "Pod", namespaced: true, status: true, custom: false, cached: SlimPod);
cluster_object!(PodDisruptionBudget, "PodDisruptionBudget", namespaced: true, status: true, custom: false);
cluster_object!(DaemonSet, "DaemonSet", namespaced: true, status: true, custom: false);
cluster_object!(PriorityClass, "PriorityClass", namespaced: false, status: false, custom: false);

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of<K: ClusterObject>() -> (String, &'static str) {
        (K::kind(&()).into_owned(), K::KIND)
    }

    #[test]
    fn given_each_kind_then_its_kind_constant_is_the_one_kube_knows() {
        for (from_kube, ours) in [
            kind_of::<NodePool>(),
            kind_of::<NodeClaim>(),
            kind_of::<Node>(),
            kind_of::<Pod>(),
            kind_of::<PodDisruptionBudget>(),
            kind_of::<DaemonSet>(),
            kind_of::<PriorityClass>(),
        ] {
            assert_eq!(from_kube, ours);
        }
    }

    fn scope_matches<K: ClusterObject>() -> bool
    where
        K::Scope: 'static,
    {
        let namespaced = std::any::TypeId::of::<K::Scope>()
            == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>();
        namespaced == K::NAMESPACED
    }

    #[test]
    fn given_each_kind_then_its_namespaced_constant_matches_its_kube_scope() {
        assert!(scope_matches::<NodePool>());
        assert!(scope_matches::<NodeClaim>());
        assert!(scope_matches::<Node>());
        assert!(scope_matches::<Pod>());
        assert!(scope_matches::<PodDisruptionBudget>());
        assert!(scope_matches::<DaemonSet>());
        assert!(scope_matches::<PriorityClass>());
    }
}
