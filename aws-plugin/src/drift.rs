//! The AWS drift rules (upstream `isNodeClassDrifted`, aws/karpenter-provider-aws `pkg/cloudprovider/drift.go`), pure: each
//! compares what an instance was launched with against what its node class resolves to now,
//! and says what differs in words an operator can act on. IsDrifted applies them in
//! upstream's order, first match wins: NodeClassDrift (static hash), AMIDrift,
//! SecurityGroupDrift, SubnetDrift, CapacityReservationDrift, PlacementGroupDrift.

use std::collections::{BTreeMap, BTreeSet};

use crate::node_class::ResolvedNodeClass;
use crate::node_class::hash::HASH_VERSION;

/// The annotation core stamps with the node class's static hash.
pub const HASH_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// The annotation core stamps with the hash's version.
pub const HASH_VERSION_ANNOTATION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

/// A drift finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// Upstream's reason (`AMIDrift`, ...).
    pub reason: &'static str,
    /// What differs: the old and the new value.
    pub message: String,
}

/// NodeClassDrift: a static field of the node class changed since the NodeClaim was launched.
///
/// The node class's hash and version are its annotations when core stamped them (what core
/// published), otherwise the plugin's own computation (someone calling with grpcurl and a bare
/// spec). As upstream, only when both versions are present and equal: a version mismatch
/// means the hashing changed, not the node class, and core re-stamps instead.
pub fn static_drift(
    node_claim_annotations: &BTreeMap<String, String>,
    node_class_annotations: &BTreeMap<String, String>,
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    let (class_hash, class_version) = match (
        node_class_annotations.get(HASH_ANNOTATION),
        node_class_annotations.get(HASH_VERSION_ANNOTATION),
    ) {
        (Some(hash), Some(version)) => (hash.as_str(), version.as_str()),
        _ => (resolved.static_hash.as_str(), HASH_VERSION),
    };
    let claim_hash = node_claim_annotations.get(HASH_ANNOTATION)?;
    let claim_version = node_claim_annotations.get(HASH_VERSION_ANNOTATION)?;
    (claim_version == class_version && claim_hash != class_hash).then(|| Drift {
        reason: "NodeClassDrift",
        message: format!(
            "EC2NodeClass {} changed a static field (userData, tags, metadataOptions, blockDeviceMappings, role, kubelet, ...): hash {claim_hash} at launch, {class_hash} now",
            resolved.name()
        ),
    })
}

/// AMIDrift: the instance runs an image that is not the one the node class now selects for
/// its architecture.
pub fn ami_drift(
    image_id: &str,
    architecture: &str,
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    let current = resolved.image_for(architecture);
    if current.is_some_and(|c| c.id == image_id) {
        return None;
    }
    let was = resolved
        .images
        .iter()
        .find(|i| i.id == image_id)
        .map_or_else(|| image_id.to_owned(), |i| format!("{} ({})", i.id, i.name));
    let now = current.map_or_else(
        || format!("no image for {architecture}"),
        |c| format!("{} ({})", c.id, c.name),
    );
    Some(Drift {
        reason: "AMIDrift",
        message: format!(
            "instance runs {was}; EC2NodeClass {} now resolves to {now} for {architecture}",
            resolved.name()
        ),
    })
}

/// SecurityGroupDrift: the instance's security groups are not exactly the selected ones.
pub fn security_group_drift(
    instance_groups: &[String],
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    let have: BTreeSet<&str> = instance_groups.iter().map(String::as_str).collect();
    let want: BTreeSet<&str> = resolved
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    (have != want).then(|| Drift {
        reason: "SecurityGroupDrift",
        message: format!(
            "instance has security groups [{}]; EC2NodeClass {} now selects [{}]",
            join(&have),
            resolved.name(),
            join(&want)
        ),
    })
}

/// SubnetDrift: the instance's subnet is no longer selected.
pub fn subnet_drift(instance_subnet: Option<&str>, resolved: &ResolvedNodeClass) -> Option<Drift> {
    let subnet = instance_subnet?;
    if resolved.subnets.iter().any(|s| s.id == subnet) {
        return None;
    }
    let selected: BTreeSet<&str> = resolved.subnets.iter().map(|s| s.id.as_str()).collect();
    Some(Drift {
        reason: "SubnetDrift",
        message: format!(
            "instance is in subnet {subnet}; EC2NodeClass {} now selects [{}]",
            resolved.name(),
            join(&selected)
        ),
    })
}

/// CapacityReservationDrift: the instance runs in a capacity reservation the node class no
/// longer selects (upstream `isCapacityReservationDrifted`).
pub fn capacity_reservation_drift(
    instance_reservation: Option<&str>,
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    let reservation = instance_reservation?;
    if resolved
        .capacity_reservations
        .iter()
        .any(|r| r.reservation.id == reservation)
    {
        return None;
    }
    let selected: BTreeSet<&str> = resolved
        .capacity_reservations
        .iter()
        .map(|r| r.reservation.id.as_str())
        .collect();
    Some(Drift {
        reason: "CapacityReservationDrift",
        message: format!(
            "instance runs in capacity reservation {reservation}; EC2NodeClass {} now selects [{}]",
            resolved.name(),
            join(&selected)
        ),
    })
}

/// PlacementGroupDrift: the NodeClaim's `karpenter.k8s.aws/placement-group-id` label is not
/// the group the node class resolves to now (the selector added, removed or pointed
/// elsewhere). Unlike upstream, a selector whose group is not found says nothing: the node
/// class is not ready, so no replacement could launch, and the nodes in the old group are no
/// worse for it.
pub fn placement_group_drift(
    claim_group: Option<&str>,
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    let want = resolved.placement_group.as_ref().map(|g| g.id.as_str());
    if want.is_none() && resolved.node_class.spec.placement_group_selector.is_some() {
        return None;
    }
    let have = claim_group.filter(|g| !g.is_empty());
    if have == want {
        return None;
    }
    let shown = |group: Option<&str>| {
        group.map_or_else(
            || "no placement group".to_owned(),
            |g| format!("placement group {g}"),
        )
    };
    Some(Drift {
        reason: "PlacementGroupDrift",
        message: format!(
            "instance was launched into {}; EC2NodeClass {} now selects {}",
            shown(have),
            resolved.name(),
            shown(want)
        ),
    })
}

fn join(items: &BTreeSet<&str>) -> String {
    items.iter().copied().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::node_class::fixture::{Fixture, node_class};

    async fn resolved(class: serde_json::Value) -> std::sync::Arc<ResolvedNodeClass> {
        Fixture::new().resolver().resolve(&class).await.unwrap()
    }

    fn annotations(hash: &str, version: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (HASH_ANNOTATION.to_owned(), hash.to_owned()),
            (HASH_VERSION_ANNOTATION.to_owned(), version.to_owned()),
        ])
    }

    #[tokio::test]
    async fn static_drift_needs_both_versions_present_and_equal() {
        let r = resolved(node_class()).await;
        let class = annotations(&r.static_hash, HASH_VERSION);
        // Same hash: not drifted.
        assert_eq!(
            static_drift(&annotations(&r.static_hash, HASH_VERSION), &class, &r),
            None
        );
        // Different hash, same version: drifted, naming both hashes.
        let found = static_drift(&annotations("1", HASH_VERSION), &class, &r).unwrap();
        assert_eq!(found.reason, "NodeClassDrift");
        assert!(found.message.contains(&r.static_hash), "{}", found.message);
        // Different version (upstream's v6, or an older scheme): not drifted, core re-stamps.
        assert_eq!(static_drift(&annotations("1", "v6"), &class, &r), None);
        // No annotations on the NodeClaim: not drifted.
        assert_eq!(static_drift(&BTreeMap::new(), &class, &r), None);
        // No annotations on the node class: the plugin's own hash and version stand in.
        assert!(static_drift(&annotations("1", HASH_VERSION), &BTreeMap::new(), &r).is_some());
    }

    /// The NodeClaim's group label against what the selector resolves to now: added, changed
    /// and removed selectors drift; a selector whose group is gone says nothing.
    #[tokio::test]
    async fn placement_group_drift_follows_the_selector() {
        let fixture = Fixture::new();
        let a = fixture.cloud.ec2.add_placement_group("a", "cluster", None);
        let b = fixture.cloud.ec2.add_placement_group("b", "spread", None);
        let mut in_a = node_class();
        in_a["spec"]["placementGroupSelector"] = json!({"name": "a"});
        let in_a = fixture.resolver().resolve(&in_a).await.unwrap();
        let mut in_b = node_class();
        in_b["spec"]["placementGroupSelector"] = json!({"id": b.id});
        let in_b = fixture.resolver().resolve(&in_b).await.unwrap();
        let none = fixture.resolver().resolve(&node_class()).await.unwrap();
        let mut gone = node_class();
        gone["spec"]["placementGroupSelector"] = json!({"name": "gone"});
        let gone = fixture.resolver().resolve(&gone).await.unwrap();

        assert_eq!(placement_group_drift(Some(&a.id), &in_a), None);
        assert_eq!(placement_group_drift(None, &none), None);
        let changed = placement_group_drift(Some(&a.id), &in_b).unwrap();
        assert_eq!(changed.reason, "PlacementGroupDrift");
        assert!(
            changed.message.contains(&a.id) && changed.message.contains(&b.id),
            "{}",
            changed.message
        );
        let added = placement_group_drift(None, &in_a).unwrap();
        assert!(
            added.message.contains("no placement group"),
            "{}",
            added.message
        );
        assert!(
            placement_group_drift(Some(&a.id), &none).is_some(),
            "removed"
        );
        assert_eq!(placement_group_drift(Some(&a.id), &gone), None);
        assert!(!gone.is_ready());
    }

    /// An instance in a reservation the selectors no longer match drifts; one outside any
    /// reservation never does for this reason.
    #[tokio::test]
    async fn capacity_reservation_drift_follows_the_selectors() {
        let fixture = Fixture::new();
        let ec2 = &fixture.cloud.ec2;
        let tagged = vec![crate::ec2::Tag::new("team", "ml")];
        let kept = ec2.add_capacity_reservation("m5.large", "us-east-1a", 2, false, false, tagged);
        let gone = ec2.add_capacity_reservation("m5.large", "us-east-1a", 2, false, false, vec![]);
        let mut class = node_class();
        class["spec"]["capacityReservationSelectorTerms"] = json!([{"tags": {"team": "ml"}}]);
        let r = fixture.resolver().resolve(&class).await.unwrap();
        assert_eq!(capacity_reservation_drift(Some(&kept.id), &r), None);
        assert_eq!(capacity_reservation_drift(None, &r), None);
        let found = capacity_reservation_drift(Some(&gone.id), &r).unwrap();
        assert_eq!(found.reason, "CapacityReservationDrift");
        assert!(
            found.message.contains(&gone.id) && found.message.contains(&kept.id),
            "{}",
            found.message
        );
    }

    #[tokio::test]
    async fn ami_drift_names_the_old_and_the_new_image() {
        let r = resolved(node_class()).await;
        let current = r.image_for("amd64").unwrap().clone();
        assert_eq!(ami_drift(&current.id, "amd64", &r), None);
        let found = ami_drift("ami-old", "amd64", &r).unwrap();
        assert_eq!(found.reason, "AMIDrift");
        assert!(found.message.contains("ami-old"), "{}", found.message);
        assert!(found.message.contains(&current.id), "{}", found.message);
        // The arm64 image is not the amd64 one.
        let arm = r.image_for("arm64").unwrap();
        assert!(ami_drift(&arm.id, "amd64", &r).is_some());
    }

    #[tokio::test]
    async fn security_groups_must_match_exactly_and_subnets_be_selected() {
        let r = resolved(node_class()).await;
        let selected: Vec<String> = r.security_groups.iter().map(|g| g.id.clone()).collect();
        assert_eq!(security_group_drift(&selected, &r), None);
        let mut more = selected.clone();
        more.push("sg-extra".to_owned());
        let found = security_group_drift(&more, &r).unwrap();
        assert_eq!(found.reason, "SecurityGroupDrift");
        assert!(found.message.contains("sg-extra"), "{}", found.message);

        assert_eq!(subnet_drift(Some(&r.subnets[0].id), &r), None);
        let found = subnet_drift(Some("subnet-gone"), &r).unwrap();
        assert_eq!(found.reason, "SubnetDrift");
        assert!(found.message.contains("subnet-gone"), "{}", found.message);
    }

    #[tokio::test]
    async fn a_selector_only_change_is_not_node_class_drift() {
        let before = resolved(node_class()).await;
        let mut class = node_class();
        class["spec"]["subnetSelectorTerms"] = json!([{"id": before.subnets[0].id}]);
        let after = resolved(class).await;
        let claim = annotations(&before.static_hash, HASH_VERSION);
        let class_now = annotations(&after.static_hash, HASH_VERSION);
        assert_eq!(static_drift(&claim, &class_now, &after), None);
    }
}
