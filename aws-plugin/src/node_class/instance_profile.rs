//! The instance profile nodes run with: the one `spec.instanceProfile` names, or one the
//! plugin creates for `spec.role` (upstream's instance profile provider).

use crate::apis::EC2NodeClass;
use crate::aws_error::AwsError;
use crate::ec2::Tag;
use crate::iam::Iam;
use crate::instance::tags::TAG_EKS_CLUSTER_NAME;

use super::ClusterIdentity;
use super::amis::retryable;

/// The IAM path of the profiles the plugin creates, so that an IAM policy can scope the
/// plugin's rights to them.
pub const PROFILE_PATH: &str = "/karpenter/";

/// The name of the profile the plugin creates for a node class: stable across restarts, one
/// per cluster, region and node class, within IAM's 128 characters.
pub fn profile_name(cluster: &ClusterIdentity, node_class: &str) -> String {
    let hash = karpenter_api::hash::static_hash(&serde_json::Value::String(format!(
        "{}{}",
        cluster.region, node_class
    )));
    let mut name = format!("{}_{hash}", cluster.name);
    if name.len() > 128 {
        // Keep the hash, which makes it unique; cut the cluster name.
        let keep = 128 - hash.len() - 1;
        let cut = cluster
            .name
            .char_indices()
            .take_while(|(i, _)| *i < keep)
            .last()
            .map_or(0, |(i, c)| i + c.len_utf8());
        name = format!("{}_{hash}", &cluster.name[..cut]);
    }
    name
}

/// The role's name from `spec.role`, which may be a name or an ARN (`arn:aws:iam::1:role/p/Name`).
fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// The profile's name, or (as the inner `Err`) why there is none, for the
/// `InstanceProfileReady` condition. Throttling and transport errors are the outer error:
/// the whole resolution is retried later.
pub async fn resolve(
    iam: &dyn Iam,
    cluster: &ClusterIdentity,
    node_class: &EC2NodeClass,
) -> Result<Result<String, String>, AwsError> {
    let outcome = if let Some(profile) = &node_class.spec.instance_profile {
        iam.get_instance_profile(profile).await.map(|found| {
            found
                .map(|_| profile.clone())
                .ok_or_else(|| format!("instance profile {profile} not found"))
        })
    } else if let Some(role) = &node_class.spec.role {
        ensure_for_role(iam, cluster, node_class, role_name(role)).await
    } else {
        Ok(Err("neither role nor instanceProfile is set".to_owned()))
    };
    match outcome {
        Err(e) if retryable(&e) => Err(e),
        Err(e) => Ok(Err(e.to_string())),
        Ok(outcome) => Ok(outcome),
    }
}

/// Finds or creates the profile for `role` and makes `role` its only role.
async fn ensure_for_role(
    iam: &dyn Iam,
    cluster: &ClusterIdentity,
    node_class: &EC2NodeClass,
    role: &str,
) -> Result<Result<String, String>, AwsError> {
    let node_class_name = super::parse::name_of(node_class);
    let name = profile_name(cluster, node_class_name);
    let profile = match iam.get_instance_profile(&name).await? {
        Some(profile) => profile,
        None => {
            let mut tags: Vec<Tag> = node_class
                .spec
                .tags
                .iter()
                .map(|(k, v)| Tag::new(k.clone(), v.clone()))
                .collect();
            // Upstream's tags, which deploy/iam/aws-plugin-policy.json requires on a create.
            tags.extend([
                Tag::new(format!("kubernetes.io/cluster/{}", cluster.name), "owned"),
                Tag::new("karpenter.sh/managed-by", cluster.name.clone()),
                Tag::new(TAG_EKS_CLUSTER_NAME, cluster.name.clone()),
                Tag::new("karpenter.k8s.aws/ec2nodeclass", node_class_name),
                Tag::new("topology.kubernetes.io/region", cluster.region.clone()),
            ]);
            match iam
                .create_instance_profile(&name, PROFILE_PATH, &tags)
                .await
            {
                Ok(profile) => profile,
                // Created meanwhile by another resolution: use it.
                Err(AwsError::AlreadyExists { .. }) => match iam.get_instance_profile(&name).await?
                {
                    Some(profile) => profile,
                    None => {
                        return Ok(Err(format!(
                            "instance profile {name} vanished while being created"
                        )));
                    }
                },
                Err(e) => return Err(e),
            }
        }
    };
    if profile.roles.iter().any(|r| r == role) {
        return Ok(Ok(name));
    }
    // A profile holds one role: the old one goes when the node class names another.
    for old in &profile.roles {
        iam.remove_role_from_instance_profile(&name, old).await?;
    }
    match iam.add_role_to_instance_profile(&name, role).await {
        Ok(()) => Ok(Ok(name)),
        Err(AwsError::NotFound { .. }) => Ok(Err(format!("role {role} not found"))),
        Err(e) => Err(e),
    }
}
