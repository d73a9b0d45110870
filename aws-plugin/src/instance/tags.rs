//! The tags the plugin puts on what it launches (instances, their volumes, the fleet, the
//! launch templates) and the filters that find those instances again, as upstream's
//! `getTags`: the node class's `spec.tags` first, then the plugin's own on top, so a user tag
//! never replaces one the plugin relies on.

use std::collections::BTreeMap;

use crate::ec2::{Tag, TagFilter};

/// The NodeClaim an instance was launched for: the idempotency key of Create and the name
/// Get and List report.
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
/// The NodePool of the NodeClaim; List reports only instances carrying it.
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
/// The EC2NodeClass the instance was launched from.
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The cluster the instance belongs to: the tag that makes an instance the plugin's to list
/// and terminate (upstream's List filters on it).
pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";

/// `kubernetes.io/cluster/<cluster>`, which EKS and the cloud controller read (value `owned`).
pub fn cluster_owned_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// The filter matching instances of `cluster`.
pub fn cluster_filter(cluster: &str) -> TagFilter {
    TagFilter::equals(TAG_EKS_CLUSTER_NAME, cluster)
}

/// Whether `tags` mark a resource as belonging to `cluster`.
pub fn belongs_to(tags: &[Tag], cluster: &str) -> bool {
    cluster_filter(cluster).matches(tags)
}

/// The tags shared by every launch of a NodePool from a node class: the node class's
/// `spec.tags`, then the cluster, NodePool and node class tags over them. Sorted by key, so
/// equal inputs give equal launch templates.
pub fn launch_tags(
    cluster: &str,
    node_pool: &str,
    node_class: &str,
    user_tags: &BTreeMap<String, String>,
) -> Vec<Tag> {
    let mut tags = user_tags.clone();
    tags.insert(cluster_owned_key(cluster), "owned".to_owned());
    tags.insert(TAG_EKS_CLUSTER_NAME.to_owned(), cluster.to_owned());
    tags.insert(TAG_NODEPOOL.to_owned(), node_pool.to_owned());
    tags.insert(TAG_NODECLASS.to_owned(), node_class.to_owned());
    tags.into_iter().map(|(k, v)| Tag::new(k, v)).collect()
}

/// The tags of one launch: the launch tags plus the NodeClaim's name, sorted by key.
pub fn instance_tags(launch_tags: &[Tag], node_claim: &str) -> Vec<Tag> {
    let mut tags: BTreeMap<&str, &str> = launch_tags
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_str()))
        .collect();
    tags.insert(TAG_NODECLAIM, node_claim);
    tags.into_iter().map(|(k, v)| Tag::new(k, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugins_tags_win_over_the_users() {
        let user = BTreeMap::from([
            ("team".to_owned(), "a".to_owned()),
            (TAG_NODEPOOL.to_owned(), "spoofed".to_owned()),
            ("kubernetes.io/cluster/demo".to_owned(), "shared".to_owned()),
        ]);
        let launch = launch_tags("demo", "default", "nodes", &user);
        let value = |key: &str| {
            launch
                .iter()
                .find(|t| t.key == key)
                .map(|t| t.value.as_str())
        };
        assert_eq!(value("team"), Some("a"));
        assert_eq!(value(TAG_NODEPOOL), Some("default"));
        assert_eq!(value("kubernetes.io/cluster/demo"), Some("owned"));
        assert_eq!(value(TAG_EKS_CLUSTER_NAME), Some("demo"));
        assert_eq!(value(TAG_NODECLASS), Some("nodes"));
        assert_eq!(value(TAG_NODECLAIM), None, "per launch, not per template");
        assert!(launch.windows(2).all(|w| w[0].key < w[1].key), "sorted");

        let instance = instance_tags(&launch, "claim-1");
        assert!(instance.contains(&Tag::new(TAG_NODECLAIM, "claim-1")));
        assert_eq!(instance.len(), launch.len() + 1);
        assert!(belongs_to(&instance, "demo"));
        assert!(!belongs_to(&instance, "other"));
    }
}
