//! Well-known label and annotation keys, the normalisation of deprecated label keys, and the
//! rules for which label keys users may set, as upstream Karpenter's `pkg/apis/v1/labels.go`.
//!
//! Core only knows the Kubernetes and `karpenter.sh` labels. A cloud provider adds its own
//! restricted domains and well-known labels, with the type of each label's values (AWS:
//! `karpenter.k8s.aws` and the instance labels), which core learns from the plugin's
//! `GetPluginVocabulary` answer: no provider's label is spelled here. Upstream does that by
//! mutating package globals at `init`; here the provider's additions live in a [`LabelPolicy`]
//! value that callers pass around, so two policies (core alone in a test, a provider's in the
//! plugin) never interfere.

use std::fmt;

/// The API group of Karpenter's own objects and labels.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// The API group of annotations kept for compatibility with older Karpenter releases.
pub const COMPATIBILITY_GROUP: &str = "compatibility.karpenter.sh";
/// This project's own domain, for the keys it writes that upstream does not define: those never
/// go under `karpenter.sh`, which belongs to upstream's API.
pub const PROJECT_DOMAIN: &str = "karpenter-rs.dev";

/// The instance type of a node (`v1.LabelInstanceTypeStable`).
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// The zone of a node (`v1.LabelTopologyZone`).
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// The region of a node (`v1.LabelTopologyRegion`).
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";
/// The CPU architecture of a node (`v1.LabelArchStable`).
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
/// The operating system of a node (`v1.LabelOSStable`).
pub const LABEL_OS: &str = "kubernetes.io/os";
/// The hostname of a node, set by the kubelet (`v1.LabelHostname`).
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// The Windows build of a Windows node (`v1.LabelWindowsBuild`).
pub const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// Deprecated alias of [`LABEL_TOPOLOGY_ZONE`] (`v1.LabelFailureDomainBetaZone`).
pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// Deprecated alias of [`LABEL_TOPOLOGY_REGION`] (`v1.LabelFailureDomainBetaRegion`).
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// Deprecated alias of [`LABEL_INSTANCE_TYPE`] (`v1.LabelInstanceType`).
pub const LABEL_INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
/// Deprecated alias of [`LABEL_ARCH`].
pub const LABEL_ARCH_BETA: &str = "beta.kubernetes.io/arch";
/// Deprecated alias of [`LABEL_OS`].
pub const LABEL_OS_BETA: &str = "beta.kubernetes.io/os";

/// The NodePool a node belongs to.
pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
/// The capacity type of a node: [`CAPACITY_TYPE_SPOT`], [`CAPACITY_TYPE_ON_DEMAND`] or
/// [`CAPACITY_TYPE_RESERVED`].
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set to `true` on a Node once its NodeClaim is initialized.
pub const LABEL_NODE_INITIALIZED: &str = "karpenter.sh/initialized";
/// Set to `true` on a Node once its NodeClaim is registered.
pub const LABEL_NODE_REGISTERED: &str = "karpenter.sh/registered";
/// On a NodeClaim, tells Karpenter not to sync the NodeClaim's taints onto its Node.
pub const LABEL_DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

/// On a pod or node, blocks voluntary disruption.
pub const ANNOTATION_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// On a node or NodeClaim, blocks node repair.
pub const ANNOTATION_DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// The hash of a NodePool's template, on the NodePool and on each of its NodeClaims.
pub const ANNOTATION_NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// The version of the algorithm behind [`ANNOTATION_NODEPOOL_HASH`].
pub const ANNOTATION_NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// The time by which a deleting NodeClaim's node must have finished draining.
pub const ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: &str =
    "karpenter.sh/nodeclaim-termination-timestamp";
/// Whether the scheduler had to relax a requirement's minValues to launch the NodeClaim.
pub const ANNOTATION_NODECLAIM_MIN_VALUES_RELAXED: &str =
    "karpenter.sh/nodeclaim-min-values-relaxed";
/// The DRA drivers whose devices were allocated to pods scheduled to the NodeClaim.
pub const ANNOTATION_REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
/// The cloud provider data kept for compatibility with older Karpenter releases.
pub const ANNOTATION_PROVIDER_COMPATIBILITY: &str = "compatibility.karpenter.sh/provider";

/// The finalizer Karpenter puts on NodeClaims and Nodes it terminates.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// Spot capacity: cheapest, can be interrupted.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// On-demand capacity.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity from a reservation (for example an EC2 capacity reservation).
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// The values [`LABEL_CAPACITY_TYPE`] may take, sorted.
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
];

/// The `amd64` value of [`LABEL_ARCH`].
pub const ARCHITECTURE_AMD64: &str = "amd64";
/// The `arm64` value of [`LABEL_ARCH`].
pub const ARCHITECTURE_ARM64: &str = "arm64";

/// The labels core itself understands and lets NodePools and pods narrow (upstream
/// `WellKnownLabels`), sorted so that lookups can binary-search and messages list them in a
/// stable order.
pub const WELL_KNOWN_LABELS: [&str; 8] = [
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_INSTANCE_TYPE,
    LABEL_WINDOWS_BUILD,
    LABEL_TOPOLOGY_REGION,
    LABEL_TOPOLOGY_ZONE,
];

/// Label domains users may not set labels in because Karpenter owns them (upstream
/// `RestrictedLabelDomains`), sorted. Subdomains are restricted too.
///
/// Upstream also restricted `kubernetes.io` and `k8s.io` (but a few subdomains) until core
/// v1.9 (kubernetes-sigs/karpenter#2586): the kubelet refuses to set most labels there, but
/// Karpenter puts a NodeClaim's labels on its Node itself, so `node-role.kubernetes.io/gpu`
/// or `example.k8s.io/x` are fine. A cloud provider adds its own domain (AWS:
/// `karpenter.k8s.aws`).
pub const RESTRICTED_LABEL_DOMAINS: [&str; 1] = [KARPENTER_GROUP];

/// Labels users may not set because they would interfere with provisioning (upstream
/// `RestrictedLabels`).
pub const RESTRICTED_LABELS: [&str; 1] = [LABEL_HOSTNAME];

/// Deprecated label keys and the well-known key each one means (upstream `NormalizedLabels`).
/// Requirements built from labels, node selectors or node affinity use the right-hand key.
pub const NORMALIZED_LABELS: [(&str, &str); 5] = [
    (LABEL_FAILURE_DOMAIN_BETA_ZONE, LABEL_TOPOLOGY_ZONE),
    (LABEL_ARCH_BETA, LABEL_ARCH),
    (LABEL_OS_BETA, LABEL_OS),
    (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
    (LABEL_FAILURE_DOMAIN_BETA_REGION, LABEL_TOPOLOGY_REGION),
];

/// The well-known key a deprecated label key stands for, or `key` itself when it is not
/// deprecated (upstream `NormalizedLabels` lookup).
pub fn normalize_label_key(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(deprecated, _)| *deprecated == key)
        .map_or(key, |(_, normalized)| normalized)
}

/// The domain of a label key: the part before the first `/`, or `""` for an unprefixed key
/// (upstream `GetLabelDomain`).
pub fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// The label key Karpenter puts on a NodeClaim to name its node class:
/// `<group>/<lowercase kind>`, for example `karpenter.k8s.aws/ec2nodeclass` (upstream
/// `NodeClassLabelKey`).
pub fn node_class_label_key(group: &str, kind: &str) -> String {
    format!("{group}/{}", kind.to_lowercase())
}

/// Whether `domain` is `parent` or one of its subdomains. Upstream before v1.x compared with a
/// bare suffix test, which also matched `notkubernetes.io`; later upstream and we require a dot.
fn is_domain_or_subdomain(domain: &str, parent: &str) -> bool {
    domain
        .strip_suffix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
}

/// The type of a label's values, which decides the operators a requirement on it may use (the
/// API's `LabelValueType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelValueType {
    /// Any label value: `In`, `NotIn`, `Exists`, `DoesNotExist`.
    String,
    /// A non-negative decimal integer: every operator, `Gt`, `Lt`, `Gte` and `Lte` included.
    Integer,
}

/// Which label keys are well known and which are restricted: core's rules plus whatever a cloud
/// provider adds.
///
/// Build it once (at startup, from the plugin's answer) and share it; lookups binary-search
/// small sorted vectors and do not allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelPolicy {
    well_known: Vec<Box<str>>,
    restricted_domains: Vec<Box<str>>,
    /// The well-known labels whose values are integers, sorted; every other label's are strings.
    integer_labels: Vec<Box<str>>,
}

impl Default for LabelPolicy {
    fn default() -> Self {
        Self::core()
    }
}

impl LabelPolicy {
    /// Core's rules alone: [`WELL_KNOWN_LABELS`] and [`RESTRICTED_LABEL_DOMAINS`].
    pub fn core() -> Self {
        Self::with_provider(std::iter::empty::<&str>(), std::iter::empty::<&str>())
    }

    /// Core's rules plus a provider's vocabulary: its restricted domains and its labels with
    /// the type of their values (for AWS, `karpenter.k8s.aws` and the instance labels). Empty
    /// domains are ignored: an empty domain would otherwise restrict every unprefixed key.
    pub fn with_vocabulary<D, L, K>(restricted_domains: D, labels: L) -> Self
    where
        D: IntoIterator,
        D::Item: AsRef<str>,
        L: IntoIterator<Item = (K, LabelValueType)>,
        K: AsRef<str>,
    {
        let labels: Vec<(K, LabelValueType)> = labels.into_iter().collect();
        let mut policy = Self::with_provider(restricted_domains, labels.iter().map(|(k, _)| k));
        policy.integer_labels = labels
            .iter()
            .filter(|(_, value_type)| *value_type == LabelValueType::Integer)
            .map(|(key, _)| key.as_ref().into())
            .collect();
        policy.integer_labels.sort_unstable();
        policy.integer_labels.dedup();
        policy
    }

    /// Core's rules plus a provider's extra restricted domains and well-known labels, every
    /// value a string (see [`with_vocabulary`](Self::with_vocabulary)). Empty domains are
    /// ignored: an empty domain would otherwise restrict every unprefixed key.
    pub fn with_provider<D, L>(restricted_domains: D, well_known_labels: L) -> Self
    where
        D: IntoIterator,
        D::Item: AsRef<str>,
        L: IntoIterator,
        L::Item: AsRef<str>,
    {
        let mut well_known: Vec<Box<str>> = WELL_KNOWN_LABELS.iter().map(|&l| l.into()).collect();
        well_known.extend(well_known_labels.into_iter().map(|l| l.as_ref().into()));
        well_known.sort_unstable();
        well_known.dedup();

        let mut domains: Vec<Box<str>> =
            RESTRICTED_LABEL_DOMAINS.iter().map(|&d| d.into()).collect();
        domains.extend(
            restricted_domains
                .into_iter()
                .map(|d| Box::<str>::from(d.as_ref().trim_matches('.')))
                .filter(|d| !d.is_empty()),
        );
        domains.sort_unstable();
        domains.dedup();

        Self {
            well_known,
            restricted_domains: domains,
            integer_labels: Vec::new(),
        }
    }

    /// The type of a well-known label's values: integers for a provider label declared so,
    /// strings for core's and the provider's others; `None` for any other key (users' own
    /// labels, whose values core does not type).
    pub fn value_type(&self, key: &str) -> Option<LabelValueType> {
        if !self.is_well_known(key) {
            return None;
        }
        let integer = self
            .integer_labels
            .binary_search_by(|known| (**known).cmp(key))
            .is_ok();
        Some(if integer {
            LabelValueType::Integer
        } else {
            LabelValueType::String
        })
    }

    /// The well-known label `key` is most likely a misspelling of: the closest one in the same
    /// domain, at most a quarter of its length (and at least 2 edits) away. For messages only.
    pub fn closest_well_known(&self, key: &str) -> Option<&str> {
        let domain = label_domain(key);
        let allowed = (key.len() / 4).max(2);
        self.well_known_labels()
            .filter(|known| label_domain(known) == domain)
            .map(|known| (strsim::levenshtein(known, key), known))
            .filter(|(distance, _)| *distance <= allowed)
            .min()
            .map(|(_, known)| known)
    }

    /// Whether Karpenter understands `key` and lets NodePools and pods narrow it.
    pub fn is_well_known(&self, key: &str) -> bool {
        self.well_known
            .binary_search_by(|known| (**known).cmp(key))
            .is_ok()
    }

    /// The well-known labels, sorted.
    pub fn well_known_labels(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.well_known.iter().map(|l| &**l)
    }

    /// The restricted label domains, sorted.
    pub fn restricted_domains(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.restricted_domains.iter().map(|d| &**d)
    }

    /// The restricted domain `key` falls in, if any, after the exceptions.
    fn restricted_domain_of(&self, key: &str) -> Option<&str> {
        let domain = label_domain(key);
        if domain.is_empty() {
            return None;
        }
        self.restricted_domains()
            .find(|restricted| is_domain_or_subdomain(domain, restricted))
    }

    /// Whether Karpenter must not write `key` onto a node itself (upstream
    /// `IsRestrictedNodeLabel`): well-known labels (the cloud provider or the scheduler sets
    /// them), labels in a restricted domain, and the restricted labels.
    pub fn is_restricted_node_label(&self, key: &str) -> bool {
        self.is_well_known(key)
            || self.restricted_domain_of(key).is_some()
            || RESTRICTED_LABELS.contains(&key)
    }

    /// Whether users may put `key` in a NodePool's labels or requirements (upstream
    /// `IsRestrictedLabel`): well-known labels are allowed; labels in a restricted domain and
    /// the restricted labels are refused with the reason.
    pub fn is_restricted_label(&self, key: &str) -> Result<(), RestrictedLabelError> {
        if self.is_well_known(key) {
            return Ok(());
        }
        let reason = if RESTRICTED_LABELS.contains(&key) {
            RestrictionReason::RestrictedLabel
        } else if let Some(domain) = self.restricted_domain_of(key) {
            RestrictionReason::RestrictedDomain(domain.to_owned())
        } else {
            return Ok(());
        };
        Err(self.error(key, reason))
    }

    /// Whether users may put `key` in a NodePool template's labels or requirements: as
    /// [`is_restricted_label`](Self::is_restricted_label), and [`LABEL_NODEPOOL`] is refused too
    /// because Karpenter sets it to the NodePool's name (upstream NodePool validation and CEL).
    pub fn validate_nodepool_label_key(&self, key: &str) -> Result<(), RestrictedLabelError> {
        if key == LABEL_NODEPOOL {
            return Err(self.error(key, RestrictionReason::SetByKarpenter));
        }
        self.is_restricted_label(key)
    }

    fn error(&self, key: &str, reason: RestrictionReason) -> RestrictedLabelError {
        RestrictedLabelError {
            key: key.to_owned(),
            did_you_mean: match reason {
                RestrictionReason::RestrictedDomain(_) => {
                    self.closest_well_known(key).map(str::to_owned)
                }
                _ => None,
            },
            reason,
            well_known_labels: self.well_known_labels().map(str::to_owned).collect(),
            restricted_domains: self.restricted_domains().map(str::to_owned).collect(),
        }
    }
}

/// Why a label key is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestrictionReason {
    /// The key's domain is, or is a subdomain of, this restricted domain.
    RestrictedDomain(String),
    /// The key is one of [`RESTRICTED_LABELS`].
    RestrictedLabel,
    /// Karpenter sets the key itself ([`LABEL_NODEPOOL`] in a NodePool template).
    SetByKarpenter,
}

impl fmt::Display for RestrictionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RestrictedDomain(domain) => write!(f, "the label domain {domain} is restricted"),
            Self::RestrictedLabel => {
                f.write_str("it might interfere with the internal provisioning logic")
            }
            Self::SetByKarpenter => f.write_str("Karpenter sets it to the NodePool's name"),
        }
    }
}

/// A label key users may not set, with the reason and the alternatives (the message follows
/// upstream's `IsRestrictedLabel`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "using label {key} is not allowed: {reason}; {}specify a well known label: {}, or a custom \
     label that does not use a restricted domain: {}",
    .did_you_mean.as_ref().map(|known| format!("did you mean {known}? ")).unwrap_or_default(),
    go_list(.well_known_labels),
    go_list(.restricted_domains)
)]
pub struct RestrictedLabelError {
    /// The refused key.
    pub key: String,
    /// The well-known label the key is most likely a misspelling of, when one is close.
    pub did_you_mean: Option<String>,
    /// Why it is refused.
    pub reason: RestrictionReason,
    /// The well-known labels of the policy that refused it, sorted.
    pub well_known_labels: Vec<String>,
    /// The restricted domains of the policy that refused it, sorted.
    pub restricted_domains: Vec<String>,
}

/// Formats a list the way Go's `%v` prints a `[]string` (`[a b c]`), which upstream's messages
/// use and users grep for.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider's vocabulary, shaped as AWS's is: its own domain, a label there, an integer
    /// label, and a label in a domain it does not restrict.
    fn provider_policy() -> LabelPolicy {
        LabelPolicy::with_vocabulary(
            ["example.cloud"],
            [
                ("example.cloud/instance-family", LabelValueType::String),
                ("example.cloud/instance-cpu", LabelValueType::Integer),
                ("topology.k8s.example/zone-id", LabelValueType::String),
            ],
        )
    }

    #[test]
    fn constant_lists_are_sorted_and_unique_so_lookups_may_binary_search() {
        fn assert_sorted_unique(list: &[&str]) {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
        assert_sorted_unique(&WELL_KNOWN_LABELS);
        assert_sorted_unique(&RESTRICTED_LABEL_DOMAINS);
        assert_sorted_unique(&CAPACITY_TYPES);
    }

    #[test]
    fn deprecated_keys_normalise_to_the_stable_keys() {
        for (deprecated, stable) in [
            (
                "failure-domain.beta.kubernetes.io/zone",
                "topology.kubernetes.io/zone",
            ),
            (
                "failure-domain.beta.kubernetes.io/region",
                "topology.kubernetes.io/region",
            ),
            ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
            ("beta.kubernetes.io/os", "kubernetes.io/os"),
            (
                "beta.kubernetes.io/instance-type",
                "node.kubernetes.io/instance-type",
            ),
        ] {
            assert_eq!(normalize_label_key(deprecated), stable);
            assert_eq!(normalize_label_key(stable), stable);
        }
        assert_eq!(normalize_label_key("example.com/team"), "example.com/team");
        assert_eq!(normalize_label_key(""), "");
    }

    #[test]
    fn label_domain_is_the_prefix_before_the_first_slash() {
        assert_eq!(label_domain("karpenter.sh/nodepool"), "karpenter.sh");
        assert_eq!(label_domain("a/b/c"), "a");
        assert_eq!(label_domain("team"), "");
        assert_eq!(label_domain("/x"), "");
    }

    #[test]
    fn node_class_label_key_lowercases_the_kind() {
        assert_eq!(
            node_class_label_key("karpenter.k8s.aws", "EC2NodeClass"),
            "karpenter.k8s.aws/ec2nodeclass"
        );
    }

    #[test]
    fn is_restricted_label_follows_upstream_rules() {
        let core = LabelPolicy::core();
        let provider = provider_policy();
        // (key, allowed by core, allowed with the provider's vocabulary)
        let table = [
            ("topology.kubernetes.io/zone", true, true),
            ("karpenter.sh/capacity-type", true, true),
            ("karpenter.sh/nodepool", true, true),
            ("node.kubernetes.io/instance-type", true, true),
            ("node.kubernetes.io/windows-build", true, true),
            ("kubernetes.io/arch", true, true),
            ("kubernetes.io/hostname", false, false),
            ("kubernetes.io/custom", true, true),
            ("node-role.kubernetes.io/gpu", true, true),
            ("sub.kubernetes.io/custom", true, true),
            ("k8s.io/custom", true, true),
            ("example.k8s.io/x", true, true),
            ("karpenter.sh/custom", false, false),
            ("karpenter.sh/do-not-sync-taints", false, false),
            ("node.kubernetes.io/custom", true, true),
            ("x.node.kubernetes.io/custom", true, true),
            ("node-restriction.kubernetes.io/custom", true, true),
            ("kops.k8s.io/instancegroup", true, true),
            ("notkubernetes.io/custom", true, true),
            ("example.com/team", true, true),
            ("team", true, true),
            ("example.cloud/instance-family", true, true),
            ("example.cloud/custom", true, false),
            ("topology.k8s.example/zone-id", true, true),
        ];
        for (key, core_allows, provider_allows) in table {
            assert_eq!(
                core.is_restricted_label(key).is_ok(),
                core_allows,
                "core {key}"
            );
            assert_eq!(
                provider.is_restricted_label(key).is_ok(),
                provider_allows,
                "provider {key}"
            );
        }
    }

    #[test]
    fn restricted_label_error_says_why_and_what_to_use_instead() {
        let err = LabelPolicy::core()
            .is_restricted_label("karpenter.sh/custom")
            .unwrap_err();
        assert_eq!(
            err.reason,
            RestrictionReason::RestrictedDomain("karpenter.sh".into())
        );
        assert_eq!(
            err.to_string(),
            "using label karpenter.sh/custom is not allowed: the label domain karpenter.sh is \
             restricted; specify a well known label: [karpenter.sh/capacity-type \
             karpenter.sh/nodepool kubernetes.io/arch kubernetes.io/os \
             node.kubernetes.io/instance-type node.kubernetes.io/windows-build \
             topology.kubernetes.io/region topology.kubernetes.io/zone], or a custom label that \
             does not use a restricted domain: [karpenter.sh]"
        );

        let hostname = LabelPolicy::core()
            .is_restricted_label(LABEL_HOSTNAME)
            .unwrap_err();
        assert_eq!(hostname.reason, RestrictionReason::RestrictedLabel);
        assert!(
            hostname.to_string().starts_with(
                "using label kubernetes.io/hostname is not allowed: it might interfere"
            )
        );

        let subdomain = provider_policy()
            .is_restricted_label("sub.example.cloud/x")
            .unwrap_err();
        assert_eq!(
            subdomain.reason,
            RestrictionReason::RestrictedDomain("example.cloud".into())
        );
        assert!(
            subdomain
                .to_string()
                .contains("[example.cloud karpenter.sh]")
        );
    }

    #[test]
    fn a_misspelt_key_of_a_restricted_domain_is_told_the_label_it_most_likely_means() {
        let typo = provider_policy()
            .is_restricted_label("example.cloud/instance-familly")
            .unwrap_err();
        assert_eq!(
            typo.did_you_mean.as_deref(),
            Some("example.cloud/instance-family")
        );
        assert!(
            typo.to_string().contains(
                "is restricted; did you mean example.cloud/instance-family? specify a well known"
            ),
            "{typo}"
        );
        // Nothing close: no guess.
        let far = provider_policy()
            .is_restricted_label("example.cloud/gpu-count")
            .unwrap_err();
        assert_eq!(far.did_you_mean, None);
        assert!(!far.to_string().contains("did you mean"));
        // Only a label of the key's own domain is suggested.
        assert_eq!(
            provider_policy().closest_well_known("other.cloud/instance-family"),
            None
        );
    }

    #[test]
    fn value_types_come_from_the_vocabulary_and_only_well_known_labels_have_one() {
        let policy = provider_policy();
        assert_eq!(
            policy.value_type("example.cloud/instance-cpu"),
            Some(LabelValueType::Integer)
        );
        assert_eq!(
            policy.value_type("example.cloud/instance-family"),
            Some(LabelValueType::String)
        );
        assert_eq!(policy.value_type(LABEL_ARCH), Some(LabelValueType::String));
        assert_eq!(policy.value_type("team"), None);
        assert_eq!(
            LabelPolicy::core().value_type("example.cloud/instance-cpu"),
            None
        );
    }

    #[test]
    fn nodepool_templates_may_not_set_the_nodepool_label() {
        let core = LabelPolicy::core();
        assert!(core.is_restricted_label(LABEL_NODEPOOL).is_ok());
        let err = core
            .validate_nodepool_label_key(LABEL_NODEPOOL)
            .unwrap_err();
        assert_eq!(err.reason, RestrictionReason::SetByKarpenter);
        assert!(
            err.to_string()
                .contains("Karpenter sets it to the NodePool's name")
        );
        assert!(core.validate_nodepool_label_key("example.com/team").is_ok());
        assert!(core.validate_nodepool_label_key(LABEL_HOSTNAME).is_err());
        assert!(
            core.validate_nodepool_label_key(LABEL_TOPOLOGY_ZONE)
                .is_ok()
        );
    }

    #[test]
    fn restricted_node_labels_include_well_known_ones_which_the_provider_sets() {
        let core = LabelPolicy::core();
        for key in WELL_KNOWN_LABELS {
            assert!(core.is_restricted_node_label(key), "{key}");
        }
        assert!(core.is_restricted_node_label(LABEL_HOSTNAME));
        assert!(core.is_restricted_node_label("karpenter.sh/custom"));
        assert!(!core.is_restricted_node_label("example.com/team"));
        assert!(!core.is_restricted_node_label("node.kubernetes.io/custom"));
        assert!(!core.is_restricted_node_label("example.cloud/instance-family"));
        assert!(provider_policy().is_restricted_node_label("example.cloud/instance-family"));
    }

    #[test]
    fn provider_policy_merges_sorts_and_ignores_empty_domains() {
        let policy = LabelPolicy::with_provider(
            ["", ".example.com", "karpenter.sh"],
            ["example.com/size", LABEL_ARCH],
        );
        assert_eq!(
            policy.restricted_domains().collect::<Vec<_>>(),
            ["example.com", "karpenter.sh"]
        );
        assert_eq!(
            policy.well_known_labels().len(),
            WELL_KNOWN_LABELS.len() + 1
        );
        assert!(policy.is_well_known("example.com/size"));
        assert!(policy.is_restricted_label("example.com/other").is_err());
        assert!(policy.is_restricted_label("team").is_ok());
        assert!(policy.is_restricted_label("example.com/size").is_ok());
        assert_eq!(LabelPolicy::default(), LabelPolicy::core());
        assert!(!LabelPolicy::core().is_well_known("example.cloud/instance-family"));
        assert!(provider_policy().is_well_known("example.cloud/instance-family"));
        assert!(provider_policy().is_well_known("topology.k8s.example/zone-id"));
    }
}
