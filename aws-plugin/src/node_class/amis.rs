//! `amiSelectorTerms` to images: aliases through the SSM public parameters EKS publishes,
//! `ssmParameter` terms through SSM, the other terms through DescribeImages. Terms are ORed,
//! the fields of one term ANDed; of what they match, launches use the newest image for each
//! architecture (node upgrades need the latest image, never a random one).

use std::collections::BTreeMap;

use crate::apis::ec2nodeclass::{AMIFamily, AMISelectorTerm, Alias};
use crate::aws_error::AwsError;
use crate::ec2::{Ec2, Image, ImageQuery, TagFilter};
use crate::ssm::Ssm;

/// An image a node class selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// `ami-...`.
    pub id: String,
    /// The image's name.
    pub name: String,
    /// The Kubernetes architecture (`amd64`, `arm64`).
    pub architecture: String,
    /// ISO 8601; orders images by age.
    pub creation_date: String,
    /// Past its EC2 deprecation time.
    pub deprecated: bool,
}

/// What the terms resolved to: the images, newest first, and why some term matched nothing
/// usable (reported in the `AMIsReady` condition when no image is left).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageResolution {
    /// Every available image the terms match, newest first (ties by id).
    pub images: Vec<ResolvedImage>,
    /// Problems worth telling the user, in term order.
    pub problems: Vec<String>,
}

/// EC2's architecture name as the `kubernetes.io/arch` label spells it; `None` for
/// architectures no Kubernetes node runs (`i386`, the Mac ones).
pub fn kubernetes_architecture(ec2_architecture: &str) -> Option<&'static str> {
    match ec2_architecture {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

/// The SSM parameters that name the image of an alias for each EC2 architecture, as EKS
/// publishes them (upstream's `amifamily` resolvers). Windows images exist for x86_64 only.
pub fn alias_parameters(alias: Alias<'_>, kubernetes_version: &str) -> Vec<(&'static str, String)> {
    let k = kubernetes_version;
    let latest = alias.version == crate::apis::ec2nodeclass::ALIAS_VERSION_LATEST;
    let v = alias.version;
    let windows = |release: &str| {
        vec![(
            "x86_64",
            format!(
                "/aws/service/ami-windows-latest/Windows_Server-{release}-English-Core-EKS_Optimized-{k}/image_id"
            ),
        )]
    };
    match alias.family {
        AMIFamily::Al2023 => ["x86_64", "arm64"]
            .into_iter()
            .map(|arch| {
                let release = if latest {
                    "recommended".to_owned()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-standard-{k}-{v}")
                };
                (
                    arch,
                    format!(
                        "/aws/service/eks/optimized-ami/{k}/amazon-linux-2023/{arch}/standard/{release}/image_id"
                    ),
                )
            })
            .collect(),
        AMIFamily::Al2 => [("x86_64", ""), ("arm64", "-arm64")]
            .into_iter()
            .map(|(arch, suffix)| {
                let release = if latest {
                    "recommended".to_owned()
                } else {
                    format!("amazon-eks{suffix}-node-{k}-{v}")
                };
                (
                    arch,
                    format!(
                        "/aws/service/eks/optimized-ami/{k}/amazon-linux-2{suffix}/{release}/image_id"
                    ),
                )
            })
            .collect(),
        AMIFamily::Bottlerocket => ["x86_64", "arm64"]
            .into_iter()
            .map(|arch| {
                let release = if latest { "latest" } else { v.trim_start_matches('v') };
                (
                    arch,
                    format!("/aws/service/bottlerocket/aws-k8s-{k}/{arch}/{release}/image_id"),
                )
            })
            .collect(),
        AMIFamily::Windows2019 => windows("2019"),
        AMIFamily::Windows2022 => windows("2022"),
        AMIFamily::Windows2025 => windows("2025"),
        AMIFamily::Custom => Vec::new(),
    }
}

/// Resolves `terms`. `kubernetes_version` is needed by aliases only; `now` (ISO 8601 UTC)
/// decides which images are past their deprecation time. Throttling and transport errors
/// fail the whole resolution (the caller answers UNAVAILABLE and keeps the last status);
/// other AWS errors of one term become a problem and the other terms still count.
pub async fn resolve_images(
    ec2: &dyn Ec2,
    ssm: &dyn Ssm,
    terms: &[AMISelectorTerm],
    kubernetes_version: Option<&str>,
    now: &str,
) -> Result<ImageResolution, AwsError> {
    let mut problems = Vec::new();
    let mut queries: Vec<(String, ImageQuery)> = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let what = format!("amiSelectorTerms[{i}]");
        if let Some(alias_text) = term.alias.as_deref() {
            let Some(alias) = parse_alias(alias_text) else {
                problems.push(format!(
                    "{what}: alias {alias_text:?} is not family@version"
                ));
                continue;
            };
            let Some(version) = kubernetes_version else {
                problems.push(format!(
                    "{what}: alias {alias_text} needs the cluster's Kubernetes version: start the plugin with --kubernetes-version"
                ));
                continue;
            };
            let mut ids = Vec::new();
            for (arch, parameter) in alias_parameters(alias, version) {
                match ssm.get_parameter(&parameter).await {
                    Ok(Some(id)) => ids.push(id),
                    Ok(None) => {
                        tracing::debug!(
                            alias = alias_text,
                            arch,
                            parameter,
                            "no image for architecture"
                        );
                    }
                    Err(e) if retryable(&e) => return Err(e),
                    Err(e) => problems.push(format!("{what}: SSM {parameter}: {e}")),
                }
            }
            if ids.is_empty() {
                problems.push(format!(
                    "{what}: alias {alias_text} has no published image for Kubernetes {version}"
                ));
                continue;
            }
            queries.push((
                what,
                ImageQuery {
                    ids,
                    ..ImageQuery::default()
                },
            ));
        } else if let Some(parameter) = term.ssm_parameter.as_deref() {
            match ssm.get_parameter(parameter).await {
                Ok(Some(id)) => queries.push((
                    what,
                    ImageQuery {
                        ids: vec![id],
                        ..ImageQuery::default()
                    },
                )),
                Ok(None) => problems.push(format!("{what}: SSM parameter {parameter} not found")),
                Err(e) if retryable(&e) => return Err(e),
                Err(e) => problems.push(format!("{what}: SSM {parameter}: {e}")),
            }
        } else {
            queries.push((what, query_of(term)));
        }
    }

    let mut by_id: BTreeMap<String, ResolvedImage> = BTreeMap::new();
    for (what, query) in &queries {
        let found = match ec2.describe_images(query).await {
            Ok(found) => found,
            Err(e) if retryable(&e) => return Err(e),
            Err(e) => {
                problems.push(format!("{what}: {e}"));
                continue;
            }
        };
        for image in found {
            if let Some(resolved) = usable(&image, now) {
                by_id.entry(resolved.id.clone()).or_insert(resolved);
            }
        }
    }
    let mut images: Vec<ResolvedImage> = by_id.into_values().collect();
    images.sort_by(|a, b| {
        b.creation_date
            .cmp(&a.creation_date)
            .then_with(|| a.id.cmp(&b.id))
    });
    if images.is_empty() && problems.is_empty() {
        problems.push("no available image matches amiSelectorTerms".to_owned());
    }
    Ok(ImageResolution { images, problems })
}

/// The newest image for `architecture` (Kubernetes spelling): a deprecated one only when no
/// other is left, as upstream.
pub fn newest_for<'a>(
    images: &'a [ResolvedImage],
    architecture: &str,
) -> Option<&'a ResolvedImage> {
    let mut candidates = images.iter().filter(|i| i.architecture == architecture);
    let first = candidates.clone().next();
    candidates.find(|i| !i.deprecated).or(first)
}

fn parse_alias(alias: &str) -> Option<Alias<'_>> {
    let (_, version) = alias.split_once('@')?;
    Some(Alias {
        family: AMIFamily::from_alias(alias)?,
        version,
    })
}

/// A non-alias, non-SSM term as a DescribeImages query. A name without an owner looks in
/// the account's own images and Amazon's, as upstream does, so a common name pattern cannot
/// pick up a stranger's public image.
fn query_of(term: &AMISelectorTerm) -> ImageQuery {
    let mut query = ImageQuery::default();
    if let Some(id) = &term.id {
        query.ids.push(id.clone());
    }
    if let Some(name) = &term.name {
        query.names.push(name.clone());
    }
    match (&term.owner, &term.name) {
        (Some(owner), _) => query.owners.push(owner.clone()),
        (None, Some(_)) => query.owners = vec!["self".to_owned(), "amazon".to_owned()],
        (None, None) => {}
    }
    if let Some(tags) = &term.tags {
        query.tags = tag_filters(tags);
    }
    query
}

/// Selector tags as EC2 filters; the value `*` means "any value".
pub fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<TagFilter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                TagFilter::exists(k.clone())
            } else {
                TagFilter::equals(k.clone(), v.clone())
            }
        })
        .collect()
}

fn usable(image: &Image, now: &str) -> Option<ResolvedImage> {
    if image.state != "available" {
        return None;
    }
    let architecture = kubernetes_architecture(&image.architecture)?;
    Some(ResolvedImage {
        id: image.id.clone(),
        name: image.name.clone(),
        architecture: architecture.to_owned(),
        creation_date: image.creation_date.clone(),
        deprecated: image.deprecation_time.as_deref().is_some_and(|t| t <= now),
    })
}

/// Errors that say nothing about the node class: retry later rather than report them.
pub(crate) fn retryable(error: &AwsError) -> bool {
    matches!(
        error,
        AwsError::Throttled { .. } | AwsError::Transport { .. }
    )
}
