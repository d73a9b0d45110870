//! The EC2NodeClass static hash: which fields make every node launched from the class out of
//! date when they change (upstream `EC2NodeClass.Hash`, aws/karpenter-provider-aws `pkg/apis/v1`).

use crate::apis::EC2NodeClass;

/// The version of the hashing scheme below. Ours, not upstream's (`v6`): a fleet launched by
/// upstream Karpenter carries `v6` and is re-stamped on adoption instead of drifting.
/// Bump it when a field enters or leaves the hash, a hashed field's default or type changes,
/// or the canonical form of `karpenter_api::hash` changes.
///
/// - `rs-v2`: `kubelet` is v1.14's closed object, so a class with kubelet fields it does not
///   type hashes without them now (those fields never reached a node's configuration again);
///   `connectionTracking`, `placementGroupSelector` and `cpuOptions` entered the spec (a class
///   without them hashes as before).
pub const HASH_VERSION: &str = "rs-v2";

/// The spec fields resolved dynamically (drift for them is computed from what they select,
/// not from their text) or hashed in another form.
const NOT_HASHED: [&str; 7] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "ipPrefixCount",
    // The resolved family is hashed instead, so `amiFamily: AL2023` written out next to an
    // `al2023@latest` alias, or left out, hashes the same.
    "amiFamily",
    // Re-serialised from its parsed form below, so spelling differences do not count.
    "kubelet",
];

/// The static hash of `node_class`: its spec after defaulting (userData, tags,
/// metadataOptions, blockDeviceMappings including volumeSize, role/instanceProfile,
/// detailedMonitoring, associatePublicIPAddress, instanceStorePolicy, context, ...), the
/// resolved AMI family and the kubelet settings; selector terms excluded.
pub fn static_hash(node_class: &EC2NodeClass) -> String {
    let mut spec = match serde_json::to_value(&node_class.spec) {
        Ok(serde_json::Value::Object(spec)) => spec,
        // The spec is plain data with string keys; this cannot fail, and an empty hash
        // would mean "no static drift" rather than a wrong one.
        _ => return String::new(),
    };
    for field in NOT_HASHED {
        spec.remove(field);
    }
    if let Some(family) = node_class.ami_family() {
        spec.insert("amiFamily".to_owned(), family.as_str().into());
    }
    if let Some(kubelet) = &node_class.spec.kubelet
        && let Ok(kubelet) = serde_json::to_value(kubelet)
    {
        spec.insert("kubelet".to_owned(), kubelet);
    }
    karpenter_api::hash::static_hash(&serde_json::Value::Object(spec))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::node_class::fixture;
    use crate::node_class::parse::parse_node_class;

    fn node_class(patch: serde_json::Value) -> EC2NodeClass {
        let mut value = fixture::node_class();
        let spec_patch = json!({
            "userData": "echo hi",
            "tags": {"team": "a"},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}],
        });
        for patch in [spec_patch, patch] {
            if let (Some(spec), Some(patch)) = (value["spec"].as_object_mut(), patch.as_object()) {
                for (k, v) in patch {
                    spec.insert(k.clone(), v.clone());
                }
            }
        }
        parse_node_class(&value).unwrap()
    }

    #[test]
    fn selector_changes_do_not_change_the_hash() {
        let base = static_hash(&node_class(json!({})));
        for patch in [
            json!({"amiSelectorTerms": [{"alias": "al2023@v20240807"}]}),
            json!({"subnetSelectorTerms": [{"id": "subnet-1"}]}),
            json!({"securityGroupSelectorTerms": [{"name": "nodes"}]}),
            json!({"amiFamily": "AL2023"}),
        ] {
            assert_eq!(static_hash(&node_class(patch.clone())), base, "{patch}");
        }
    }

    #[test]
    fn static_changes_change_the_hash() {
        let base = static_hash(&node_class(json!({})));
        for patch in [
            json!({"userData": "echo bye"}),
            json!({"tags": {"team": "b"}}),
            json!({"metadataOptions": {"httpTokens": "optional"}}),
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "40Gi", "volumeType": "gp3"}}]}),
            json!({"detailedMonitoring": true}),
            json!({"associatePublicIPAddress": true}),
            json!({"connectionTracking": {"tcpEstablishedTimeout": 300}}),
            // Hashed as upstream does (no `hash:"ignore"` on either).
            json!({"placementGroupSelector": {"name": "nodes"}}),
            json!({"cpuOptions": {"nestedVirtualization": "enabled"}}),
            json!({"kubelet": {"maxPods": 20}}),
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}),
        ] {
            assert_ne!(static_hash(&node_class(patch.clone())), base, "{patch}");
        }
    }

    #[test]
    fn an_explicit_default_hashes_like_an_omitted_field() {
        let defaults = json!({"metadataOptions": {"httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1,
            "httpTokens": "required"}});
        assert_eq!(
            static_hash(&node_class(defaults)),
            static_hash(&node_class(json!({})))
        );
    }
}
