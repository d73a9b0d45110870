//! Label keys the API treats specially, and the checks upstream's CEL rules make on label keys
//! (NodePool template labels, requirement keys).
//!
//! The checks follow the CEL rules rather than upstream's Go helpers where the two differ: a key
//! without `/` is its own domain here (`x.find("^([^/]+)")`), so `karpenter.sh` alone is a
//! restricted key, as the CRD makes it. The domain crate's `labels` module will own the shared
//! vocabulary; this is the minimal copy the API needs until the two are unified.

use super::patterns;

/// The NodePool a node belongs to.
pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
/// `spot`, `on-demand` or `reserved`.
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set by the kubelet; never by Karpenter.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// Keys under `kubernetes.io` a NodePool may set (the well-known ones).
pub const KUBERNETES_IO_ALLOWED: [&str; 11] = [
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
];

/// Karpenter's own keys a NodePool may constrain.
const KARPENTER_SH_ALLOWED: [&str; 2] = [LABEL_CAPACITY_TYPE, LABEL_NODEPOOL];

/// Kubernetes' limit on the name part of a qualified name.
pub const MAX_NAME_LENGTH: usize = 63;
/// Kubernetes' limit on the prefix (DNS subdomain) of a qualified name.
pub const MAX_PREFIX_LENGTH: usize = 253;
/// The CRD's limit on a requirement key: prefix, `/`, name.
pub const MAX_KEY_LENGTH: usize = 316;
/// Kubernetes' limit on a label value.
pub const MAX_VALUE_LENGTH: usize = 63;

/// A label domain that only its owner may use, except for the listed keys; providers add theirs
/// (AWS: `karpenter.k8s.aws`, except its well-known instance labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestrictedDomain<'a> {
    /// The domain, matched as a suffix of the key's domain (`x.endsWith(domain)`).
    pub domain: &'a str,
    /// Keys in the domain that may still be used.
    pub allowed_keys: &'a [&'a str],
}

/// Where a label key appears: the rules differ slightly between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// A NodePool's template labels or requirement keys: `karpenter.sh/nodepool` is set by
    /// Karpenter itself and may not be chosen.
    NodePool,
    /// A NodeClaim's requirement keys: the NodePool's own requirement is copied in.
    NodeClaim,
}

/// Why a label key may not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestrictedKey {
    /// The key is in a domain reserved to someone else.
    #[error("label domain {0:?} is restricted")]
    Domain(String),
    /// The key itself is reserved.
    #[error("label {0:?} is restricted")]
    Key(String),
}

/// The domain of a key as the CRD's CEL sees it: everything before the first `/`, or the whole
/// key when it has none.
pub fn cel_domain(key: &str) -> &str {
    key.split_once('/').map_or(key, |(domain, _)| domain)
}

/// Every restriction `key` breaks, in the order the CRD lists its rules.
pub fn restrictions(
    key: &str,
    key_use: KeyUse,
    extra: &[RestrictedDomain<'_>],
) -> Vec<RestrictedKey> {
    let domain = cel_domain(key);
    let mut out = Vec::new();
    if !KUBERNETES_IO_ALLOWED.contains(&key)
        && !domain.ends_with("node.kubernetes.io")
        && !domain.ends_with("node-restriction.kubernetes.io")
        && domain.ends_with("kubernetes.io")
    {
        out.push(RestrictedKey::Domain("kubernetes.io".into()));
    }
    if !domain.ends_with("kops.k8s.io") && domain.ends_with("k8s.io") {
        out.push(RestrictedKey::Domain("k8s.io".into()));
    }
    if !KARPENTER_SH_ALLOWED.contains(&key) && domain.ends_with("karpenter.sh") {
        out.push(RestrictedKey::Domain("karpenter.sh".into()));
    }
    if key_use == KeyUse::NodePool && key == LABEL_NODEPOOL {
        out.push(RestrictedKey::Key(LABEL_NODEPOOL.into()));
    }
    if key == LABEL_HOSTNAME {
        out.push(RestrictedKey::Key(LABEL_HOSTNAME.into()));
    }
    for restricted in extra {
        if !restricted.allowed_keys.contains(&key) && domain.ends_with(restricted.domain) {
            out.push(RestrictedKey::Domain(restricted.domain.into()));
        }
    }
    out
}

/// Why a string is not a qualified name (a label key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    /// The key is empty.
    #[error("key must not be empty")]
    Empty,
    /// The name part is longer than 63 characters.
    #[error("key {0:?}: name part must be no more than 63 characters")]
    NameTooLong(String),
    /// The prefix is longer than 253 characters.
    #[error("key {0:?}: prefix part must be no more than 253 characters")]
    PrefixTooLong(String),
    /// The key does not have the qualified-name shape.
    #[error(
        "key {0:?} is not a qualified name: an optional lowercase DNS subdomain and '/', then \
         alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    )]
    Malformed(String),
}

/// Checks `key` is a qualified name (Kubernetes `IsQualifiedName`).
pub fn check_qualified_name(key: &str) -> Result<(), InvalidKey> {
    if key.is_empty() {
        return Err(InvalidKey::Empty);
    }
    if !patterns::is_qualified_name(key) {
        return Err(InvalidKey::Malformed(key.to_owned()));
    }
    let (prefix, name) = key.split_once('/').unwrap_or(("", key));
    if prefix.len() > MAX_PREFIX_LENGTH {
        return Err(InvalidKey::PrefixTooLong(key.to_owned()));
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(InvalidKey::NameTooLong(key.to_owned()));
    }
    Ok(())
}

/// Why a string is not a label value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    /// Longer than 63 characters.
    #[error("value {0:?} must be no more than 63 characters")]
    TooLong(String),
    /// Not the label-value shape.
    #[error(
        "value {0:?} must be empty or consist of alphanumerics, '-', '_' or '.', starting and \
         ending with an alphanumeric"
    )]
    Malformed(String),
}

/// Checks `value` is a label value (Kubernetes `IsValidLabelValue`).
pub fn check_label_value(value: &str) -> Result<(), InvalidValue> {
    if value.len() > MAX_VALUE_LENGTH {
        return Err(InvalidValue::TooLong(value.to_owned()));
    }
    if !patterns::is_label_value(value) {
        return Err(InvalidValue::Malformed(value.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(key: &str, key_use: KeyUse) -> Vec<String> {
        restrictions(key, key_use, &[])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn karpenter_sh_allows_capacity_type_and_nodepool_only_in_nodeclaims() {
        assert!(messages(LABEL_CAPACITY_TYPE, KeyUse::NodePool).is_empty());
        assert_eq!(
            messages(LABEL_NODEPOOL, KeyUse::NodePool),
            ["label \"karpenter.sh/nodepool\" is restricted"]
        );
        assert!(messages(LABEL_NODEPOOL, KeyUse::NodeClaim).is_empty());
        assert_eq!(
            messages("karpenter.sh/foo", KeyUse::NodeClaim),
            ["label domain \"karpenter.sh\" is restricted"]
        );
        assert_eq!(
            messages("sub.karpenter.sh/foo", KeyUse::NodePool),
            ["label domain \"karpenter.sh\" is restricted"]
        );
        assert_eq!(
            messages("karpenter.sh", KeyUse::NodePool),
            ["label domain \"karpenter.sh\" is restricted"],
            "a key without '/' is its own domain"
        );
    }

    #[test]
    fn kubernetes_io_allows_well_known_and_node_domains() {
        for ok in [
            "topology.kubernetes.io/zone",
            "kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "node-restriction.kubernetes.io/team",
            "kops.k8s.io/instancegroup",
            "example.com/team",
        ] {
            assert!(messages(ok, KeyUse::NodePool).is_empty(), "{ok}");
        }
        assert_eq!(
            messages("kubernetes.io/foo", KeyUse::NodePool),
            ["label domain \"kubernetes.io\" is restricted"]
        );
        assert_eq!(
            messages("x.k8s.io/foo", KeyUse::NodePool),
            ["label domain \"k8s.io\" is restricted"]
        );
        assert_eq!(
            messages(LABEL_HOSTNAME, KeyUse::NodeClaim),
            [
                "label domain \"kubernetes.io\" is restricted",
                "label \"kubernetes.io/hostname\" is restricted"
            ]
        );
    }

    #[test]
    fn extra_domains_have_exceptions() {
        let aws = RestrictedDomain {
            domain: "karpenter.k8s.aws",
            allowed_keys: &["karpenter.k8s.aws/instance-family"],
        };
        assert!(
            restrictions(
                "karpenter.k8s.aws/instance-family",
                KeyUse::NodePool,
                &[aws]
            )
            .is_empty()
        );
        assert_eq!(
            restrictions("karpenter.k8s.aws/ec2nodeclass", KeyUse::NodePool, &[aws]),
            [RestrictedKey::Domain("karpenter.k8s.aws".into())]
        );
    }

    #[test]
    fn qualified_names_have_length_limits() {
        assert_eq!(check_qualified_name(""), Err(InvalidKey::Empty));
        assert!(check_qualified_name(&"a".repeat(63)).is_ok());
        assert!(matches!(
            check_qualified_name(&"a".repeat(64)),
            Err(InvalidKey::NameTooLong(_))
        ));
        let long_prefix = format!("{}.com/a", "a".repeat(250));
        assert!(matches!(
            check_qualified_name(&long_prefix),
            Err(InvalidKey::PrefixTooLong(_))
        ));
        assert!(matches!(
            check_qualified_name("Example.com/a"),
            Err(InvalidKey::Malformed(_))
        ));
    }

    #[test]
    fn label_values() {
        assert!(check_label_value("").is_ok());
        assert!(check_label_value(&"a".repeat(63)).is_ok());
        assert!(matches!(
            check_label_value(&"a".repeat(64)),
            Err(InvalidValue::TooLong(_))
        ));
        assert!(matches!(
            check_label_value("-a"),
            Err(InvalidValue::Malformed(_))
        ));
    }
}
