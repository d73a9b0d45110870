//! The EC2NodeClass CRD's rules (OpenAPI patterns and bounds, CEL) enforced again in Rust, for
//! the simulator and as defence in depth. Each error names the field by its JSON path
//! (`spec.amiSelectorTerms[0]`) and the rule it breaks; messages follow the CEL rules' wording,
//! shortened where the path already says which term or field is meant.
//!
//! Where upstream's CEL is weaker than its own message (`!self.all(x, has(x.id) &&
//! has(x.tags))` only fails when every term mixes `id` and `tags`, for subnets, security groups
//! and capacity reservations), the CRD and these checks admit what upstream admits, so that
//! manifests written for upstream apply unchanged, and a term that mixes is a warning
//! ([`EC2NodeClass::warnings`]), which the plugin reports in the `ValidationSucceeded`
//! condition. A mixing term selects what matches all its fields (EC2's filters are ANDed).
//!
//! The machinery is karpenter-api's: one [`FieldPath`] and `ValidationError` for every API
//! group, its shared checks (`maxItems`, `pattern`, bounds), and their messages. The rules
//! EC2NodeClass adds are this module's [`Violation`], which wraps karpenter-api's.

use std::collections::BTreeMap;

pub use karpenter_api::validation::FieldPath;
use karpenter_api::validation::Violation as CommonViolation;

use super::{
    ec2nodeclass::{
        ALIAS_FAMILIES, ALIAS_VERSION_LATEST, AMIFamily, AMISelectorTerm, BlockDeviceMapping,
        CapacityReservationSelectorTerm, EC2NodeClass, EC2NodeClassSpec, InterfaceType,
        MAX_BLOCK_DEVICE_MAPPINGS, MAX_SELECTOR_TAGS, MAX_SELECTOR_TERMS, PlacementGroupSelector,
        RESTRICTED_TAGS, SecurityGroupSelectorTerm, SubnetSelectorTerm, WINDOWS_ALIAS_FAMILIES,
    },
    kubelet::{EVICTION_SIGNALS, KubeletConfiguration, RESERVED_RESOURCES},
    patterns,
};

/// One broken EC2NodeClass rule, and where.
pub type ValidationError = karpenter_api::validation::ValidationError<Violation>;

/// Collects errors while the validator walks an object.
type Errors = karpenter_api::validation::Errors<Violation>;

/// The rules, with the message each prints: the ones every API group shares, and
/// EC2NodeClass's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A rule every API group's schema has (`maxItems`, `maxProperties`, `maxLength`, bounds,
    /// `pattern`), with karpenter-api's message.
    #[error(transparent)]
    Common(#[from] CommonViolation),
    /// A required list or string is empty (the EC2NodeClass CRD's wording, which is not
    /// karpenter.sh's "may not be empty").
    #[error("{0} cannot be empty")]
    Empty(&'static str),
    /// A list must not be empty (`minItems`).
    #[error("must have at least one item")]
    NoItems,
    /// A selector term sets none of its selectors.
    #[error("expected at least one, got none, [{}]", quoted(.0, ", "))]
    NoSelector(&'static [&'static str]),
    /// A selector term combines a field that must stand alone with others.
    #[error("'{0}' is mutually exclusive with other fields")]
    MutuallyExclusive(&'static str),
    /// An alias term is not the only AMI selector term.
    #[error("'alias' is mutually exclusive with other amiSelectorTerms")]
    AliasNotAlone,
    /// An alias is not `family@version`.
    #[error("'alias' is improperly formatted, must match the format 'family@version'")]
    AliasFormat,
    /// An alias names an unknown family.
    #[error(
        "family is not supported, must be one of the following: {}",
        quoted(&ALIAS_FAMILIES, ", ")
    )]
    AliasFamily,
    /// A Windows alias pins a version.
    #[error("windows families may only specify version 'latest'")]
    WindowsAliasVersion,
    /// `amiFamily` contradicts the alias.
    #[error(
        "if set, amiFamily must be '{0}' or 'Custom' when using {article} {0} alias",
        article = if .0.starts_with('A') { "an" } else { "a" }
    )]
    AmiFamilyMismatch(&'static str),
    /// Neither `amiFamily` nor an alias.
    #[error("must specify amiFamily if amiSelectorTerms does not contain an alias")]
    AmiFamilyRequired,
    /// Both or neither of `role` and `instanceProfile`.
    #[error("must specify exactly one of ['role', 'instanceProfile']")]
    RoleXorInstanceProfile,
    /// A selector term's tags have an empty key or value.
    #[error("empty tag keys or values aren't supported")]
    EmptySelectorTag,
    /// `spec.tags` has an empty key.
    #[error("empty tag keys aren't supported")]
    EmptyTagKey,
    /// `spec.tags` sets a tag Karpenter owns.
    #[error("tag contains a restricted tag matching {0}")]
    RestrictedTag(String),
    /// A kubelet map has a key outside its allowed set.
    #[error("valid keys for {field} are [{}]", quoted(.allowed, ","))]
    InvalidKubeletKey {
        /// The map.
        field: &'static str,
        /// Its allowed keys.
        allowed: &'static [&'static str],
    },
    /// A reserved resource is negative.
    #[error("{0} value cannot be a negative resource quantity")]
    NegativeReserved(&'static str),
    /// The image GC thresholds are inverted.
    #[error("imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent")]
    ImageGcThresholds,
    /// A soft eviction threshold without a grace period.
    #[error("evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod")]
    EvictionSoftWithoutGracePeriod,
    /// A grace period without a soft eviction threshold.
    #[error("evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft")]
    GracePeriodWithoutEvictionSoft,
    /// More than one root volume.
    #[error("must have only one blockDeviceMappings with rootVolume")]
    MultipleRootVolumes,
    /// An EBS volume with neither snapshot nor size.
    #[error("snapshotID or volumeSize must be defined")]
    SnapshotOrVolumeSize,
    /// An initialization rate without a snapshot to initialize from.
    #[error("snapshotID must be set when volumeInitializationRate is set")]
    InitializationRateWithoutSnapshot,
    /// `networkInterfaces` without the primary interface.
    #[error("networkInterfaces must include a primary interface with interfaceType='interface'")]
    NoPrimaryInterface,
    /// Two interfaces at one place, or two EFA devices on one card.
    #[error(
        "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and \
         can have at most one efa device per network card"
    )]
    InterfacesCollide,
    /// `connectionTracking` without any timeout.
    #[error("at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set")]
    NoConnectionTrackingTimeout,
    /// `placementGroupSelector` with both `name` and `id`.
    #[error("'name' and 'id' are mutually exclusive")]
    PlacementGroupNameAndId,
}

/// Each item in single quotes, joined by `separator`: how upstream's messages and CEL rules quote
/// lists.
pub(super) fn quoted(items: &[&str], separator: &str) -> String {
    items
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(separator)
}

/// Checks a list of selector terms: not empty, at most [`MAX_SELECTOR_TERMS`].
fn check_terms<T>(errors: &mut Errors, path: &FieldPath, terms: &[T], name: &'static str) {
    if terms.is_empty() {
        errors.push(path.clone(), Violation::Empty(name));
    }
    errors.max_items(path, terms, MAX_SELECTOR_TERMS);
}

/// Checks a selector term's tags: at most [`MAX_SELECTOR_TAGS`], no empty key or value.
fn check_selector_tags(
    errors: &mut Errors,
    path: &FieldPath,
    tags: Option<&BTreeMap<String, String>>,
) {
    let Some(tags) = tags else { return };
    errors.max_entries(path, tags.len(), MAX_SELECTOR_TAGS);
    if tags.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
        errors.push(path.clone(), Violation::EmptySelectorTag);
    }
}

impl EC2NodeClass {
    /// Checks the EC2NodeClass against the rules its CRD enforces on creation.
    pub fn validate(&self) -> Result<(), Vec<ValidationError>> {
        let mut errors = Errors::default();
        self.spec.check(&mut errors, &FieldPath::root("spec"));
        errors.into_result()
    }

    /// What the CRD admits, as upstream's does, although its own message refuses it: a
    /// selector term that mixes `id` (or a security group's `name`) with other fields while
    /// other terms do not.
    pub fn warnings(&self) -> Vec<ValidationError> {
        let mut errors = Errors::default();
        self.spec.check(&mut errors, &FieldPath::root("spec"));
        errors.into_warnings()
    }
}

impl EC2NodeClassSpec {
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        let subnets = path.field("subnetSelectorTerms");
        check_terms(
            errors,
            &subnets,
            &self.subnet_selector_terms,
            "subnetSelectorTerms",
        );
        check_each(
            errors,
            &subnets,
            &self.subnet_selector_terms,
            SubnetSelectorTerm::check,
        );

        let groups = path.field("securityGroupSelectorTerms");
        check_terms(
            errors,
            &groups,
            &self.security_group_selector_terms,
            "securityGroupSelectorTerms",
        );
        check_each(
            errors,
            &groups,
            &self.security_group_selector_terms,
            SecurityGroupSelectorTerm::check,
        );

        let reservations = path.field("capacityReservationSelectorTerms");
        errors.max_items(
            &reservations,
            &self.capacity_reservation_selector_terms,
            MAX_SELECTOR_TERMS,
        );
        check_each(
            errors,
            &reservations,
            &self.capacity_reservation_selector_terms,
            CapacityReservationSelectorTerm::check,
        );

        self.check_amis(errors, path);

        if self.role.is_some() == self.instance_profile.is_some() {
            errors.push(path.clone(), Violation::RoleXorInstanceProfile);
        }
        if self.role.as_deref() == Some("") {
            errors.push(path.field("role"), Violation::Empty("role"));
        }
        if self.instance_profile.as_deref() == Some("") {
            errors.push(
                path.field("instanceProfile"),
                Violation::Empty("instanceProfile"),
            );
        }

        let tags = path.field("tags");
        for key in self.tags.keys() {
            if key.is_empty() {
                errors.push(tags.clone(), Violation::EmptyTagKey);
            }
            for (restricted, prefix) in RESTRICTED_TAGS {
                let hit = if prefix {
                    key.starts_with(restricted)
                } else {
                    key == restricted
                };
                if hit {
                    let shown = if prefix {
                        format!("{restricted}/")
                    } else {
                        restricted.to_owned()
                    };
                    errors.push(tags.key(key), Violation::RestrictedTag(shown));
                }
            }
        }

        if let Some(kubelet) = &self.kubelet {
            kubelet.check(errors, &path.field("kubelet"));
        }

        let devices = path.field("blockDeviceMappings");
        errors.max_items(
            &devices,
            &self.block_device_mappings,
            MAX_BLOCK_DEVICE_MAPPINGS,
        );
        if self
            .block_device_mappings
            .iter()
            .filter(|m| m.root_volume)
            .count()
            > 1
        {
            errors.push(devices.clone(), Violation::MultipleRootVolumes);
        }
        for (i, mapping) in self.block_device_mappings.iter().enumerate() {
            mapping.check(errors, &devices.index(i));
        }

        errors.range(
            &path
                .field("metadataOptions")
                .field("httpPutResponseHopLimit"),
            self.metadata_options.http_put_response_hop_limit,
            Some(1),
            Some(64),
        );
        if let Some(count) = self.ip_prefix_count {
            errors.range(&path.field("ipPrefixCount"), count.into(), Some(0), None);
        }
        self.check_network_interfaces(errors, &path.field("networkInterfaces"));
        if let Some(selector) = &self.placement_group_selector {
            selector.check(errors, &path.field("placementGroupSelector"));
        }
        if let Some(tracking) = &self.connection_tracking {
            let at = path.field("connectionTracking");
            let timeouts = [
                (
                    "tcpEstablishedTimeout",
                    tracking.tcp_established_timeout,
                    60,
                    432_000,
                ),
                ("udpStreamTimeout", tracking.udp_stream_timeout, 60, 180),
                ("udpTimeout", tracking.udp_timeout, 30, 60),
            ];
            if timeouts.iter().all(|(_, value, _, _)| value.is_none()) {
                errors.push(at.clone(), Violation::NoConnectionTrackingTimeout);
            }
            for (field, value, min, max) in timeouts {
                if let Some(value) = value {
                    errors.range(&at.field(field), value.into(), Some(min), Some(max));
                }
            }
        }
    }

    /// Upstream's rules on `networkInterfaces`: at most 150, non-negative indices, the primary
    /// interface present, no two at one place, at most one EFA device per card.
    fn check_network_interfaces(&self, errors: &mut Errors, path: &FieldPath) {
        let interfaces = &self.network_interfaces;
        if interfaces.is_empty() {
            return;
        }
        errors.max_items(path, interfaces, 150);
        for (i, ni) in interfaces.iter().enumerate() {
            let at = path.index(i);
            let card = ni.network_card_index.into();
            errors.range(&at.field("networkCardIndex"), card, Some(0), None);
            errors.range(
                &at.field("deviceIndex"),
                ni.device_index.into(),
                Some(0),
                None,
            );
        }
        let primary = interfaces.iter().any(|ni| {
            ni.network_card_index == 0
                && ni.device_index == 0
                && ni.interface_type == InterfaceType::Interface
        });
        if !primary {
            errors.push(path.clone(), Violation::NoPrimaryInterface);
        }
        let collides = interfaces.iter().any(|x| {
            let same_place = interfaces
                .iter()
                .filter(|y| {
                    x.network_card_index == y.network_card_index && x.device_index == y.device_index
                })
                .count();
            let efa_on_card = interfaces
                .iter()
                .filter(|y| {
                    x.network_card_index == y.network_card_index
                        && y.interface_type == InterfaceType::EfaOnly
                })
                .count();
            same_place != 1 || (x.interface_type == InterfaceType::EfaOnly && efa_on_card != 1)
        });
        if collides {
            errors.push(path.clone(), Violation::InterfacesCollide);
        }
    }

    fn check_amis(&self, errors: &mut Errors, path: &FieldPath) {
        let amis = path.field("amiSelectorTerms");
        let terms = &self.ami_selector_terms;
        if terms.is_empty() {
            errors.push(amis.clone(), Violation::NoItems);
        }
        errors.max_items(&amis, terms, MAX_SELECTOR_TERMS);
        for (i, term) in terms.iter().enumerate() {
            term.check(errors, amis.index(i));
        }
        let alias = terms.iter().find_map(|t| t.alias.as_deref());
        if alias.is_some() && terms.len() != 1 {
            errors.push(amis, Violation::AliasNotAlone);
        }
        let family_path = path.field("amiFamily");
        match (self.ami_family, alias.and_then(AMIFamily::from_alias)) {
            (None, None) if alias.is_none() => {
                errors.push(family_path, Violation::AmiFamilyRequired);
            }
            (Some(family), Some(aliased)) if family != AMIFamily::Custom && family != aliased => {
                errors.push(family_path, Violation::AmiFamilyMismatch(aliased.as_str()));
            }
            _ => {}
        }
    }
}

/// The fields a selector term sets together with others although upstream's message says they
/// are exclusive, in the order of upstream's rules.
type Mixing = Vec<&'static str>;

/// Checks each selector term of the list at `path` with `check`, then upstream's mutual
/// exclusions over the list ([`exclusive_fields`]).
fn check_each<T>(
    errors: &mut Errors,
    path: &FieldPath,
    terms: &[T],
    check: fn(&T, &mut Errors, FieldPath) -> Mixing,
) {
    let mixing: Vec<Mixing> = terms
        .iter()
        .enumerate()
        .map(|(i, term)| check(term, errors, path.index(i)))
        .collect();
    exclusive_fields(errors, path, &mixing);
}

/// Upstream's `!self.all(x, <term mixes field>)` for each field: an error on every term when
/// all the terms mix it, a warning on each that does when only some do.
fn exclusive_fields(errors: &mut Errors, path: &FieldPath, mixing: &[Mixing]) {
    let mut fields: Vec<&'static str> = mixing.iter().flatten().copied().collect();
    fields.sort_unstable();
    fields.dedup();
    for field in fields {
        let every = mixing.iter().all(|m| m.contains(&field));
        for (i, _) in mixing
            .iter()
            .enumerate()
            .filter(|(_, m)| m.contains(&field))
        {
            if every {
                errors.push(path.index(i), Violation::MutuallyExclusive(field));
            } else {
                errors.warn(path.index(i), Violation::MutuallyExclusive(field));
            }
        }
    }
}

impl PlacementGroupSelector {
    /// Upstream's rules: exactly one of `name` (not empty) and `id` (`pg-...`).
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        match (&self.name, &self.id) {
            (None, None) => errors.push(path.clone(), Violation::NoSelector(&["name", "id"])),
            (Some(_), Some(_)) => errors.push(path.clone(), Violation::PlacementGroupNameAndId),
            _ => {}
        }
        if self.name.as_deref() == Some("") {
            errors.push(path.field("name"), Violation::Empty("name"));
        }
        errors.pattern(
            &path.field("id"),
            self.id.as_deref(),
            patterns::PLACEMENT_GROUP_ID,
        );
    }
}

impl SubnetSelectorTerm {
    fn check(&self, errors: &mut Errors, path: FieldPath) -> Mixing {
        if self.tags.is_none() && self.id.is_none() {
            errors.push(path.clone(), Violation::NoSelector(&["tags", "id"]));
        }
        errors.pattern(&path.field("id"), self.id.as_deref(), patterns::SUBNET_ID);
        check_selector_tags(errors, &path.field("tags"), self.tags.as_ref());
        let mut mixing = Mixing::new();
        if self.id.is_some() && self.tags.is_some() {
            mixing.push("id");
        }
        mixing
    }
}

impl SecurityGroupSelectorTerm {
    fn check(&self, errors: &mut Errors, path: FieldPath) -> Mixing {
        let (tags, id, name) = (self.tags.is_some(), self.id.is_some(), self.name.is_some());
        if !(tags || id || name) {
            errors.push(path.clone(), Violation::NoSelector(&["tags", "id", "name"]));
        }
        errors.pattern(
            &path.field("id"),
            self.id.as_deref(),
            patterns::SECURITY_GROUP_ID,
        );
        check_selector_tags(errors, &path.field("tags"), self.tags.as_ref());
        let mut mixing = Mixing::new();
        if id && (tags || name) {
            mixing.push("id");
        }
        if name && (tags || id) {
            mixing.push("name");
        }
        mixing
    }
}

impl CapacityReservationSelectorTerm {
    fn check(&self, errors: &mut Errors, path: FieldPath) -> Mixing {
        let (tags, id, criteria) = (
            self.tags.is_some(),
            self.id.is_some(),
            self.instance_match_criteria.is_some(),
        );
        if !(tags || id || criteria) {
            errors.push(
                path.clone(),
                Violation::NoSelector(&["tags", "id", "instanceMatchCriteria"]),
            );
        }
        let mut mixing = Mixing::new();
        if id && (tags || criteria || self.owner_id.is_some()) {
            mixing.push("id");
        }
        let id = self.id.as_deref();
        errors.pattern(&path.field("id"), id, patterns::CAPACITY_RESERVATION_ID);
        let owner = self.owner_id.as_deref();
        errors.pattern(&path.field("ownerID"), owner, patterns::ACCOUNT_ID);
        check_selector_tags(errors, &path.field("tags"), self.tags.as_ref());
        mixing
    }
}

impl AMISelectorTerm {
    fn check(&self, errors: &mut Errors, path: FieldPath) {
        let (alias, tags, id, name, owner, ssm) = (
            self.alias.is_some(),
            self.tags.is_some(),
            self.id.is_some(),
            self.name.is_some(),
            self.owner.is_some(),
            self.ssm_parameter.is_some(),
        );
        if !(tags || id || name || alias || ssm) {
            errors.push(
                path.clone(),
                Violation::NoSelector(&["tags", "id", "name", "alias", "ssmParameter"]),
            );
        }
        if id && (alias || tags || name || owner) {
            errors.push(path.clone(), Violation::MutuallyExclusive("id"));
        }
        if alias && (id || tags || name || owner) {
            errors.push(path.clone(), Violation::MutuallyExclusive("alias"));
        }
        if let Some(value) = &self.alias {
            check_alias(errors, path.field("alias"), value);
        }
        errors.pattern(&path.field("id"), self.id.as_deref(), patterns::AMI_ID);
        check_selector_tags(errors, &path.field("tags"), self.tags.as_ref());
    }
}

fn check_alias(errors: &mut Errors, path: FieldPath, alias: &str) {
    const MAX_ALIAS_LENGTH: usize = super::ec2nodeclass::MAX_ALIAS_LENGTH;
    if alias.len() > MAX_ALIAS_LENGTH {
        errors.push(path.clone(), CommonViolation::TooLong(MAX_ALIAS_LENGTH));
    }
    if !patterns::ALIAS.matches(alias) {
        errors.push(path.clone(), Violation::AliasFormat);
    }
    // CEL's `split('@')[0]` and `[1]`: the text before the first '@', and between it and the
    // next one.
    let mut parts = alias.split('@');
    let family = parts.next().unwrap_or_default();
    let version = parts.next();
    if !ALIAS_FAMILIES.contains(&family) {
        errors.push(path.clone(), Violation::AliasFamily);
    }
    if WINDOWS_ALIAS_FAMILIES.contains(&family) && version != Some(ALIAS_VERSION_LATEST) {
        errors.push(path, Violation::WindowsAliasVersion);
    }
}

impl KubeletConfiguration {
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        for (field, value) in [
            ("maxPods", self.max_pods),
            ("podsPerCore", self.pods_per_core),
        ] {
            if let Some(v) = value {
                errors.range(&path.field(field), v.into(), Some(0), None);
            }
        }
        let thresholds = [
            (
                "imageGCHighThresholdPercent",
                self.image_gc_high_threshold_percent,
            ),
            (
                "imageGCLowThresholdPercent",
                self.image_gc_low_threshold_percent,
            ),
        ];
        for (field, value) in thresholds {
            if let Some(v) = value {
                errors.range(&path.field(field), v.into(), Some(0), Some(100));
            }
        }
        if let (Some(high), Some(low)) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        ) && high <= low
        {
            errors.push(path.clone(), Violation::ImageGcThresholds);
        }
        for (field, map) in [
            ("systemReserved", &self.system_reserved),
            ("kubeReserved", &self.kube_reserved),
        ] {
            let at = path.field(field);
            for (key, value) in map {
                if !RESERVED_RESOURCES.contains(&key.as_str()) {
                    errors.push(
                        at.key(key),
                        Violation::InvalidKubeletKey {
                            field,
                            allowed: &RESERVED_RESOURCES,
                        },
                    );
                }
                if value.starts_with('-') {
                    errors.push(at.key(key), Violation::NegativeReserved(field));
                }
                errors.pattern(&at.key(key), value.as_str(), patterns::RESERVED_QUANTITY);
            }
        }
        for (field, keys) in [
            (
                "evictionHard",
                self.eviction_hard.keys().collect::<Vec<_>>(),
            ),
            ("evictionSoft", self.eviction_soft.keys().collect()),
            (
                "evictionSoftGracePeriod",
                self.eviction_soft_grace_period.keys().collect(),
            ),
        ] {
            for key in keys {
                if !EVICTION_SIGNALS.contains(&key.as_str()) {
                    errors.push(
                        path.field(field).key(key),
                        Violation::InvalidKubeletKey {
                            field,
                            allowed: &EVICTION_SIGNALS,
                        },
                    );
                }
            }
        }
        for (field, thresholds) in [
            ("evictionHard", &self.eviction_hard),
            ("evictionSoft", &self.eviction_soft),
        ] {
            for (signal, threshold) in thresholds {
                errors.pattern(
                    &path.field(field).key(signal),
                    threshold.as_str(),
                    patterns::EVICTION_THRESHOLD,
                );
            }
        }
        for key in self.eviction_soft.keys() {
            if !self.eviction_soft_grace_period.contains_key(key) {
                errors.push(
                    path.field("evictionSoft").key(key),
                    Violation::EvictionSoftWithoutGracePeriod,
                );
            }
        }
        for key in self.eviction_soft_grace_period.keys() {
            if !self.eviction_soft.contains_key(key) {
                errors.push(
                    path.field("evictionSoftGracePeriod").key(key),
                    Violation::GracePeriodWithoutEvictionSoft,
                );
            }
        }
    }
}

impl BlockDeviceMapping {
    fn check(&self, errors: &mut Errors, path: &FieldPath) {
        let Some(ebs) = &self.ebs else { return };
        let at = path.field("ebs");
        if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
            errors.push(at.clone(), Violation::SnapshotOrVolumeSize);
        }
        if let Some(rate) = ebs.volume_initialization_rate {
            if ebs.snapshot_id.as_deref().is_none_or(str::is_empty) {
                errors.push(at.clone(), Violation::InitializationRateWithoutSnapshot);
            }
            errors.range(
                &at.field("volumeInitializationRate"),
                rate.into(),
                Some(100),
                Some(300),
            );
        }
        let size = ebs.volume_size.as_ref().map(|q| q.0.as_str());
        errors.pattern(&at.field("volumeSize"), size, patterns::VOLUME_SIZE);
    }
}
