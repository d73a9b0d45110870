//! The label-key rules the karpenter.sh CRDs state in CEL (NodePool template labels,
//! requirement keys), enforced again in Rust with the CRDs' semantics and messages, and the
//! Kubernetes syntax of label keys and values.
//!
//! The vocabulary is the domain's ([`core_domain::labels`]): the keys, the well-known and
//! deprecated labels, the restricted domains and their exceptions, and a cloud provider's
//! additions as a [`LabelPolicy`]. What stays here is how the CRDs phrase the rules, which is not
//! how upstream's Go helpers (and so the domain's [`LabelPolicy::is_restricted_label`]) phrase
//! them, and a CRD is what the API server enforces:
//!
//! - a key's domain is everything before the first `/`, or the whole key when it has none
//!   (`x.find("^([^/]+)")`), so `karpenter.sh` alone is a restricted key;
//! - domains match with `endsWith`, not at a dot;
//! - each domain lists the keys it still allows, in upstream's order.
//!
//! [`DOMAIN_RULES`] spells core's list with the domain's constants (the generated CRDs are
//! upstream's byte for byte); the tests check it holds exactly the domain's restricted domains
//! and well-known labels. A cloud provider's domain gets a rule of the same shape, made from
//! its vocabulary ([`DomainRule::provider`]), which its install's CRDs carry
//! ([`crate::crd::with_provider_domain`]) and [`restrictions`] applies from the same
//! vocabulary. The CEL in [`crate::schema`] and the Rust checks in [`restrictions`] are both
//! generated from these rules.

use core_domain::labels::{KARPENTER_GROUP, RESTRICTED_LABEL_DOMAINS, RESTRICTED_LABELS};
pub use core_domain::labels::{
    LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_NODEPOOL, LabelPolicy, LabelValueType,
};

use crate::patterns;

/// Karpenter's own keys a NodePool may constrain: the domain's well-known labels in
/// `karpenter.sh`.
pub const KARPENTER_SH_ALLOWED: [&str; 2] = [LABEL_CAPACITY_TYPE, LABEL_NODEPOOL];

/// One restricted label domain as the CRDs' CEL states it: a key whose domain ends with
/// `domain` is refused, unless it is one of `allowed_keys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRule<'a> {
    /// The restricted domain.
    pub domain: &'a str,
    /// Keys in the domain that may still be used.
    pub allowed_keys: std::borrow::Cow<'a, [&'a str]>,
}

/// Core's restricted domains ([`RESTRICTED_LABEL_DOMAINS`] with their well-known labels), in
/// the order the CRDs list their rules. Upstream restricted `kubernetes.io` and `k8s.io` too
/// until core v1.9 (kubernetes-sigs/karpenter#2586).
pub const DOMAIN_RULES: [DomainRule<'static>; 1] = [DomainRule {
    domain: KARPENTER_GROUP,
    allowed_keys: std::borrow::Cow::Borrowed(&KARPENTER_SH_ALLOWED),
}];

impl<'a> DomainRule<'a> {
    /// A cloud provider's rule: its restricted `domain` allows the keys of its vocabulary
    /// (`well_known`, as the plugin declares it) that are in the domain, and nothing else, as
    /// upstream's provider CRDs do (aws/karpenter-provider-aws `hack/validation/labels.sh`).
    pub fn provider(domain: &'a str, well_known: impl IntoIterator<Item = &'a str>) -> Self {
        let allowed: Vec<&'a str> = well_known
            .into_iter()
            .filter(|key| cel_domain(key).ends_with(domain))
            .collect();
        DomainRule {
            domain,
            allowed_keys: std::borrow::Cow::Owned(allowed),
        }
    }

    /// Whether the rule refuses `key`, whose CEL domain is `domain`.
    fn refuses(&self, key: &str, domain: &str) -> bool {
        !self.allowed_keys.contains(&key) && domain.ends_with(self.domain)
    }
}

/// Kubernetes' limit on the name part of a qualified name.
pub const MAX_NAME_LENGTH: usize = 63;
/// Kubernetes' limit on the prefix (DNS subdomain) of a qualified name.
pub const MAX_PREFIX_LENGTH: usize = 253;
/// The CRD's limit on a requirement key: prefix, `/`, name.
pub const MAX_KEY_LENGTH: usize = 316;
/// Kubernetes' limit on a label value.
pub const MAX_VALUE_LENGTH: usize = 63;

/// Where a label key appears: the rules differ slightly between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// A NodePool's template labels or requirement keys: `karpenter.sh/nodepool` is set by
    /// Karpenter itself and may not be chosen.
    NodePool,
    /// A NodeClaim's requirement keys: the NodePool's own requirement is copied in.
    NodeClaim,
}

impl KeyUse {
    /// The keys refused outright, in the order the CRDs list their rules: the domain's
    /// [`RESTRICTED_LABELS`], after [`LABEL_NODEPOOL`] where Karpenter sets it.
    pub fn restricted_keys(self) -> impl Iterator<Item = &'static str> {
        let nodepool = (self == Self::NodePool).then_some(LABEL_NODEPOOL);
        nodepool.into_iter().chain(RESTRICTED_LABELS)
    }
}

/// Why a label key may not be used, in the CRDs' words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestrictedKey {
    /// The key is in a domain reserved to someone else.
    #[error("label domain {0:?} is restricted")]
    Domain(String),
    /// The key itself is reserved.
    #[error("label {0:?} is restricted")]
    Key(String),
    /// The key is in a domain the cloud provider owns, and its vocabulary has no such label.
    #[error(
        "label domain {domain:?} is restricted{}",
        .did_you_mean.as_ref().map(|known| format!("; did you mean {known}?")).unwrap_or_default()
    )]
    ProviderDomain {
        /// The provider's domain.
        domain: String,
        /// The provider's label the key most likely misspells, when one is close.
        did_you_mean: Option<String>,
    },
}

/// The domain of a key as the CRD's CEL sees it: everything before the first `/`, or the whole
/// key when it has none. Not [`core_domain::labels::label_domain`], which gives `""` for a key
/// without `/`: the CRDs restrict `karpenter.sh` as a key, and so must this.
pub fn cel_domain(key: &str) -> &str {
    key.split_once('/').map_or(key, |(domain, _)| domain)
}

/// Every restriction `key` breaks, in the order the CRD lists its rules, then the cloud
/// provider's: a provider domain in `policy` refuses the keys in it that are not well known.
pub fn restrictions(key: &str, key_use: KeyUse, policy: &LabelPolicy) -> Vec<RestrictedKey> {
    let domain = cel_domain(key);
    let mut out: Vec<RestrictedKey> = DOMAIN_RULES
        .iter()
        .filter(|rule| rule.refuses(key, domain))
        .map(|rule| RestrictedKey::Domain(rule.domain.into()))
        .collect();
    out.extend(
        key_use
            .restricted_keys()
            .filter(|restricted| *restricted == key)
            .map(|restricted| RestrictedKey::Key(restricted.into())),
    );
    // Core's domains have their CEL rules above; the rest of the policy's are the provider's.
    let provider_domains = policy
        .restricted_domains()
        .filter(|d| !RESTRICTED_LABEL_DOMAINS.contains(d));
    for restricted in provider_domains {
        if !policy.is_well_known(key) && domain.ends_with(restricted) {
            out.push(RestrictedKey::ProviderDomain {
                domain: restricted.into(),
                did_you_mean: policy.closest_well_known(key).map(str::to_owned),
            });
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
    if !patterns::QUALIFIED_NAME.matches(key) {
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
    if !patterns::LABEL_VALUE.matches(value) {
        return Err(InvalidValue::Malformed(value.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(key: &str, key_use: KeyUse) -> Vec<String> {
        restrictions(key, key_use, &LabelPolicy::core())
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

    /// Upstream core v1.9 (kubernetes-sigs/karpenter#2586) lifted the `kubernetes.io` and
    /// `k8s.io` restrictions: only the hostname label stays refused there.
    #[test]
    fn kubernetes_io_and_k8s_io_are_open_but_the_hostname() {
        for ok in [
            "topology.kubernetes.io/zone",
            "kubernetes.io/arch",
            "node.kubernetes.io/anything",
            "node-role.kubernetes.io/gpu",
            "kubernetes.io/foo",
            "example.k8s.io/x",
            "kops.k8s.io/instancegroup",
            "example.com/team",
        ] {
            assert!(messages(ok, KeyUse::NodePool).is_empty(), "{ok}");
        }
        assert_eq!(
            messages(LABEL_HOSTNAME, KeyUse::NodeClaim),
            ["label \"kubernetes.io/hostname\" is restricted"]
        );
    }

    #[test]
    fn extra_domains_have_exceptions() {
        let aws = LabelPolicy::with_provider(
            ["karpenter.k8s.aws"],
            ["karpenter.k8s.aws/instance-family"],
        );
        assert!(
            restrictions("karpenter.k8s.aws/instance-family", KeyUse::NodePool, &aws).is_empty()
        );
        assert_eq!(
            restrictions("karpenter.k8s.aws/ec2nodeclass", KeyUse::NodePool, &aws),
            [RestrictedKey::ProviderDomain {
                domain: "karpenter.k8s.aws".into(),
                did_you_mean: None,
            }]
        );
        // A misspelling of a label the provider declares is told which one it likely means.
        let typo = restrictions("karpenter.k8s.aws/instance-familly", KeyUse::NodePool, &aws);
        assert_eq!(
            typo.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "label domain \"karpenter.k8s.aws\" is restricted; did you mean \
                 karpenter.k8s.aws/instance-family?"
            ]
        );
    }

    /// The CRDs' lists are the domain's, in another order: the same restricted domains, and
    /// as allowed keys exactly the well-known labels in each domain plus their deprecated
    /// aliases.
    #[test]
    fn domain_rules_are_the_domains_lists() {
        use std::collections::BTreeSet;

        use core_domain::labels::{NORMALIZED_LABELS, WELL_KNOWN_LABELS};

        fn set<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeSet<&'a str> {
            items.into_iter().collect()
        }
        assert_eq!(
            set(DOMAIN_RULES.iter().map(|r| r.domain)),
            set(RESTRICTED_LABEL_DOMAINS)
        );
        for rule in DOMAIN_RULES {
            let in_domain = |key: &&str| cel_domain(key).ends_with(rule.domain);
            let well_known = WELL_KNOWN_LABELS.into_iter().filter(in_domain);
            let deprecated = NORMALIZED_LABELS
                .into_iter()
                .map(|(deprecated, _)| deprecated)
                .filter(in_domain);
            assert_eq!(
                set(rule.allowed_keys.iter().copied()),
                set(well_known.chain(deprecated)),
                "{}",
                rule.domain
            );
        }
        assert_eq!(RESTRICTED_LABELS, [LABEL_HOSTNAME]);
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
