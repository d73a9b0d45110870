//! The regular expressions the EC2NodeClass CRD carries, each next to a hand-written matcher with
//! the same semantics (Go RE2, as kube-apiserver evaluates OpenAPI `pattern`s), so the schema and
//! the Rust validation cannot disagree. Several of upstream's are unanchored (`subnet-[0-9a-z]+`
//! matches anywhere in the string); the matchers reproduce that rather than the intent.
//!
//! Only EC2NodeClass's own: the patterns every Karpenter API group shares (condition types and
//! reasons, label keys and values, quantities) are `karpenter_api::patterns`, whose [`Pattern`]
//! pairs each expression with its matcher here too.

pub use karpenter_api::patterns::Pattern;

/// `subnetSelectorTerms[].id` (unanchored).
pub const SUBNET_ID: Pattern = Pattern::new("subnet-[0-9a-z]+", is_subnet_id);
/// `securityGroupSelectorTerms[].id` (unanchored).
pub const SECURITY_GROUP_ID: Pattern = Pattern::new("sg-[0-9a-z]+", is_security_group_id);
/// `amiSelectorTerms[].id` (unanchored).
pub const AMI_ID: Pattern = Pattern::new("ami-[0-9a-z]+", is_ami_id);
/// Capacity reservation IDs.
pub const CAPACITY_RESERVATION_ID: Pattern =
    Pattern::new("^cr-[0-9a-z]+$", is_capacity_reservation_id);
/// `placementGroupSelector.id`.
pub const PLACEMENT_GROUP_ID: Pattern = Pattern::new("^pg-[0-9a-z]+$", is_placement_group_id);
/// AWS account IDs.
pub const ACCOUNT_ID: Pattern = Pattern::new("^[0-9]{12}$", is_account_id);
/// `amiSelectorTerms[].alias` (checked by CEL `matches`).
pub const ALIAS: Pattern = Pattern::new("^[a-zA-Z0-9]+@.+$", is_alias);
/// `blockDeviceMappings[].ebs.volumeSize`: Gi up to 59000, G up to 64000, Ti and T (upstream's
/// alternations for Ti and T include an empty branch, so `Ti` and `T` alone match too).
pub const VOLUME_SIZE: Pattern = Pattern::new(
    "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$",
    is_volume_size,
);

/// The values of `kubelet.kubeReserved` and `kubelet.systemReserved`: quantities.
pub const RESERVED_QUANTITY: Pattern = Pattern::new(
    karpenter_api::patterns::QUANTITY,
    karpenter_api::patterns::is_quantity,
);
/// The values of `kubelet.evictionHard` and `kubelet.evictionSoft`: a percentage (up to two
/// digits and two decimals, or 100), a quantity, or nothing (upstream's alternation has an
/// empty branch).
pub const EVICTION_THRESHOLD: Pattern = Pattern::new(
    r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$",
    is_eviction_threshold,
);

/// The matcher of [`EVICTION_THRESHOLD`].
pub fn is_eviction_threshold(s: &str) -> bool {
    s.is_empty()
        || s.strip_suffix('%').is_some_and(is_percentage)
        || karpenter_api::patterns::is_quantity(s)
}

/// `\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?`.
fn is_percentage(s: &str) -> bool {
    let (whole, fraction) = match s.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (s, None),
    };
    let digits =
        |t: &str, max: usize| (1..=max).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit());
    if whole == "100" {
        return fraction.is_none_or(|f| (1..=2).contains(&f.len()) && f.bytes().all(|b| b == b'0'));
    }
    digits(whole, 2) && fraction.is_none_or(|f| digits(f, 2))
}

/// `<prefix>[0-9a-z]+` somewhere in `s`.
fn contains_id(s: &str, prefix: &str) -> bool {
    s.match_indices(prefix).any(|(i, _)| {
        s[i + prefix.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// The matcher of [`SUBNET_ID`].
pub fn is_subnet_id(s: &str) -> bool {
    contains_id(s, "subnet-")
}

/// The matcher of [`SECURITY_GROUP_ID`].
pub fn is_security_group_id(s: &str) -> bool {
    contains_id(s, "sg-")
}

/// The matcher of [`AMI_ID`].
pub fn is_ami_id(s: &str) -> bool {
    contains_id(s, "ami-")
}

/// The matcher of [`CAPACITY_RESERVATION_ID`].
pub fn is_capacity_reservation_id(s: &str) -> bool {
    is_anchored_id(s, "cr-")
}

/// The matcher of [`PLACEMENT_GROUP_ID`].
pub fn is_placement_group_id(s: &str) -> bool {
    is_anchored_id(s, "pg-")
}

/// `^<prefix>[0-9a-z]+$`.
fn is_anchored_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

/// The matcher of [`ACCOUNT_ID`].
pub fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// The matcher of [`ALIAS`].
pub fn is_alias(s: &str) -> bool {
    s.split_once('@').is_some_and(|(family, version)| {
        !family.is_empty()
            && family.bytes().all(|b| b.is_ascii_alphanumeric())
            && !version.is_empty()
            && !version.contains('\n')
    })
}

/// The matcher of [`VOLUME_SIZE`].
pub fn is_volume_size(s: &str) -> bool {
    let digits = |n: &str| n.bytes().all(|b| b.is_ascii_digit());
    let no_leading_zero = |n: &str| !n.starts_with('0');
    let in_range = |n: &str, max: u32| {
        !n.is_empty() && digits(n) && no_leading_zero(n) && n.parse::<u32>().is_ok_and(|v| v <= max)
    };
    if let Some(n) = s.strip_suffix("Gi") {
        return in_range(n, 59_000);
    }
    if let Some(n) = s.strip_suffix("Ti") {
        // `[1-9]||[1-5][0-7]|58`
        let b = n.as_bytes();
        return match b {
            [] => true,
            [d] => (b'1'..=b'9').contains(d),
            [t, u] => ((b'1'..=b'5').contains(t) && (b'0'..=b'7').contains(u)) || n == "58",
            _ => false,
        };
    }
    if let Some(n) = s.strip_suffix('G') {
        return in_range(n, 64_000);
    }
    if let Some(n) = s.strip_suffix('T') {
        // `[1-9]||[1-5][0-9]|6[0-3]|64`
        return n.is_empty() || in_range(n, 64);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_thresholds() {
        for ok in [
            "", "5%", "10.5%", "99.99%", "100%", "100.0%", "100.00%", "0%", "100Mi", "1Gi", "500m",
            "1.5",
        ] {
            assert!(is_eviction_threshold(ok), "{ok}");
        }
        for bad in [
            "%", "101%", "100.5%", "100.000%", "5.123%", "123%", "5 %", "ten", "1GiB", ".%",
        ] {
            assert!(!is_eviction_threshold(bad), "{bad}");
        }
    }

    #[test]
    fn ids() {
        assert!(is_subnet_id("subnet-09fa4a0a8f233a921"));
        assert!(is_subnet_id("my-subnet-1"), "unanchored, as upstream");
        assert!(!is_subnet_id("subnet-"));
        assert!(!is_subnet_id("subnet-ABC"));
        assert!(is_security_group_id("sg-063d7acfb4b06c82c"));
        assert!(!is_security_group_id("sg_1"));
        assert!(is_ami_id("ami-123"));
        assert!(!is_ami_id("ami"));
        assert!(is_capacity_reservation_id("cr-123"));
        assert!(!is_capacity_reservation_id("cr-123 "));
        assert!(!is_capacity_reservation_id("xcr-123"));
        assert!(is_placement_group_id("pg-0123abc"));
        assert!(!is_placement_group_id("pg-"));
        assert!(!is_placement_group_id("pg-ABC"));
        assert!(!is_placement_group_id("my-pg-1"));
        assert!(is_account_id("012345678901"));
        assert!(!is_account_id("12345678901"));
    }

    #[test]
    fn aliases() {
        assert!(is_alias("al2023@latest"));
        assert!(is_alias("bottlerocket@v1.20.4"));
        assert!(!is_alias("al2023"));
        assert!(!is_alias("@latest"));
        assert!(!is_alias("al2023@"));
        assert!(!is_alias("al-2023@latest"));
    }

    #[test]
    fn volume_sizes() {
        for ok in [
            "1Gi", "20Gi", "100Gi", "9999Gi", "49999Gi", "58999Gi", "59000Gi", "64000G", "63999G",
            "1G", "1Ti", "17Ti", "58Ti", "Ti", "64T", "T", "9T",
        ] {
            assert!(is_volume_size(ok), "{ok}");
        }
        for bad in [
            "0Gi", "59001Gi", "64001G", "18Ti", "59Ti", "65T", "100", "100Mi", "01Gi", "1.5Gi", "",
        ] {
            assert!(!is_volume_size(bad), "{bad}");
        }
    }
}
