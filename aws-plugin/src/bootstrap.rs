//! The EC2 user data that makes a launched instance join the cluster, per AMI family, as
//! upstream Karpenter's AWS provider writes it (`pkg/providers/amifamily/bootstrap`):
//!
//! - AL2023: a MIME multi-part archive of the node class's `userData` parts and Karpenter's
//!   nodeadm `NodeConfig` (`nodeadm.rs`).
//! - AL2: a MIME multi-part archive of the `userData` parts and a script calling
//!   `/etc/eks/bootstrap.sh` (`eks.rs`).
//! - Bottlerocket: the `userData` TOML with Karpenter's `settings.kubernetes` merged in
//!   (`bottlerocket.rs`).
//! - Windows: a `<powershell>` block running the `userData` then `Start-EKSBootstrap.ps1`
//!   (`windows.rs`).
//! - Custom: the `userData` as written.
//!
//! The same input always gives the same bytes (maps sorted, taints sorted), because launch
//! templates are keyed by a hash of the user data.
//!
//! Differences from upstream, on purpose: an empty taint list adds no `--register-with-taints`
//! flag (upstream passes `""`); the cluster CA argument is left out rather than written empty
//! when there is none; values are quoted for the shell or PowerShell they land in (identical
//! output for valid label, taint and cluster values); Bottlerocket keeps the user's
//! `settings.kubernetes` keys Karpenter does not know (upstream keeps only its typed subset) and
//! writes tables with sorted keys; MIME parts keep all their headers; a non-MIME AL2023
//! `userData` is typed `NodeConfig` by a line-based test for a YAML mapping rather than by a YAML
//! parser (the same answer for configs and scripts alike). As upstream, AL2023 taints go in
//! the kubelet config's `registerWithTaints`, not in a flag. Instance store RAID0
//! (`--local-disks raid0`, nodeadm's `localStorage`) is not written yet: [`Bootstrap`] does not
//! carry the node class's `instanceStorePolicy`.

mod bottlerocket;
mod eks;
mod mime;
mod nodeadm;
mod windows;
mod yaml;

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Taint;

use crate::apis::KubeletConfiguration;
use crate::apis::ec2nodeclass::AMIFamily;

/// How nodes reach the cluster: from the plugin's flags (`--cluster-name`, `--cluster-endpoint`,
/// `--cluster-ca-bundle`, `--cluster-cidr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterSettings {
    /// The EKS cluster name.
    pub name: String,
    /// The API server endpoint, `https://...`.
    pub endpoint: String,
    /// The cluster CA bundle: base64 of the PEM, as EKS gives it.
    pub ca_bundle: Option<String>,
    /// The service CIDR; nodeadm (AL2023) needs it.
    pub cidr: Option<String>,
}

/// What one launch's user data is made from.
#[derive(Debug, Clone)]
pub struct Bootstrap<'a> {
    /// The AMI family, which decides the format.
    pub family: AMIFamily,
    /// The cluster the node joins.
    pub cluster: &'a ClusterSettings,
    /// The EC2NodeClass `spec.userData`, verbatim.
    pub user_data: Option<&'a str>,
    /// The node class's kubelet settings.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// `maxPods` to pass when the node class sets none (the ENI-limited value); `None` leaves
    /// kubelet's default.
    pub max_pods: Option<i64>,
    /// Node labels to register with.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints to register with (the NodeClaim's taints and startup taints).
    pub taints: &'a [Taint],
}

/// Why the user data could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// `spec.userData` starts like a MIME archive but is not a valid multi-part one.
    #[error("spec.userData is not a valid MIME multi-part archive (amiFamily {family}): {reason}")]
    InvalidMime {
        /// The AMI family whose user data it is.
        family: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// A line of `spec.userData` would be read as a boundary of the archive Karpenter writes.
    #[error(
        "spec.userData has a line starting with `--//`, the boundary of the MIME archive Karpenter merges it into"
    )]
    BoundaryInUserData,
    /// `spec.userData` is not TOML Bottlerocket settings can be merged into.
    #[error("spec.userData is not valid TOML for amiFamily Bottlerocket: {reason}")]
    InvalidToml {
        /// What was wrong.
        reason: String,
    },
    /// The cluster CA bundle is not base64.
    #[error("the cluster CA bundle (--cluster-ca-bundle) is not valid base64: {0}")]
    InvalidCaBundle(#[source] base64::DecodeError),
    /// nodeadm needs the service CIDR and none was configured.
    #[error("amiFamily AL2023 needs the cluster's service CIDR: set --cluster-cidr")]
    MissingClusterCidr,
    /// `spec.kubelet` could not be turned into kubelet configuration.
    #[error("spec.kubelet cannot be written as kubelet configuration: {0}")]
    Kubelet(#[source] serde_json::Error),
}

/// The instance's user data, base64-encoded as EC2 wants it in a launch template.
pub fn user_data(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    Ok(STANDARD.encode(render(input)?))
}

/// The user data before base64.
fn render(input: &Bootstrap<'_>) -> Result<String, BootstrapError> {
    match input.family {
        AMIFamily::Al2023 => nodeadm::script(input),
        AMIFamily::Al2 => eks::script(input),
        AMIFamily::Bottlerocket => bottlerocket::settings(input),
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            Ok(windows::script(input))
        }
        AMIFamily::Custom => Ok(input.user_data.unwrap_or_default().to_owned()),
    }
}

impl Bootstrap<'_> {
    /// The node class's `userData`, when it has any.
    fn custom_user_data(&self) -> Option<&str> {
        self.user_data.filter(|data| !data.is_empty())
    }

    /// The CA bundle, when there is one.
    fn ca_bundle(&self) -> Option<&str> {
        self.cluster
            .ca_bundle
            .as_deref()
            .filter(|ca| !ca.is_empty())
    }

    /// The `maxPods` the node gets: the node class's, else the ENI-limited one.
    fn max_pods(&self) -> Option<i64> {
        self.kubelet
            .and_then(|kubelet| kubelet.max_pods)
            .map(i64::from)
            .or(self.max_pods)
    }

    fn cluster_dns(&self) -> &[String] {
        self.kubelet.map_or(&[], |kubelet| &kubelet.cluster_dns)
    }

    /// The taints in a stable order, so the order callers gather them in does not change the
    /// user data (and so the launch template).
    fn sorted_taints(&self) -> Vec<&Taint> {
        let mut taints: Vec<&Taint> = self.taints.iter().collect();
        taints.sort_by(|a, b| {
            (&a.key, taint_value(a), &a.effect).cmp(&(&b.key, taint_value(b), &b.effect))
        });
        taints.dedup_by(|a, b| {
            a.key == b.key && taint_value(a) == taint_value(b) && a.effect == b.effect
        });
        taints
    }

    /// `--node-labels="k=v,..."`, keys sorted.
    fn node_label_arg(&self) -> Option<String> {
        if self.labels.is_empty() {
            return None;
        }
        let labels = self
            .labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        Some(format!("--node-labels={}", go_quote(&labels)))
    }

    /// `--register-with-taints="k=v:Effect,..."`.
    fn node_taint_arg(&self) -> Option<String> {
        let taints = self.sorted_taints();
        if taints.is_empty() {
            return None;
        }
        let taints = taints
            .iter()
            .map(|taint| match taint_value(taint) {
                "" => format!("{}:{}", taint.key, taint.effect),
                value => format!("{}={value}:{}", taint.key, taint.effect),
            })
            .collect::<Vec<_>>()
            .join(",");
        Some(format!("--register-with-taints={}", go_quote(&taints)))
    }

    /// The kubelet flags AL2's `bootstrap.sh` and Windows' `Start-EKSBootstrap.ps1` pass on, in
    /// upstream's order.
    fn kubelet_extra_args(&self) -> Vec<String> {
        let mut args: Vec<String> = [self.node_label_arg(), self.node_taint_arg()]
            .into_iter()
            .flatten()
            .collect();
        if let Some(max_pods) = self.max_pods() {
            args.push(format!("--max-pods={max_pods}"));
        }
        let Some(kubelet) = self.kubelet else {
            return args;
        };
        if let Some(pods_per_core) = kubelet.pods_per_core {
            args.push(format!("--pods-per-core={pods_per_core}"));
        }
        let maps = [
            ("--system-reserved", &kubelet.system_reserved, "="),
            ("--kube-reserved", &kubelet.kube_reserved, "="),
            ("--eviction-hard", &kubelet.eviction_hard, "<"),
            ("--eviction-soft", &kubelet.eviction_soft, "<"),
            (
                "--eviction-soft-grace-period",
                &kubelet.eviction_soft_grace_period,
                "=",
            ),
        ];
        for (flag, map, separator) in maps {
            if !map.is_empty() {
                let joined = map
                    .iter()
                    .map(|(key, value)| format!("{key}{separator}{value}"))
                    .collect::<Vec<_>>()
                    .join(",");
                args.push(format!("{flag}={}", go_quote(&joined)));
            }
        }
        if let Some(seconds) = kubelet.eviction_max_pod_grace_period {
            args.push(format!("--eviction-max-pod-grace-period={seconds}"));
        }
        if let Some(percent) = kubelet.image_gc_high_threshold_percent {
            args.push(format!("--image-gc-high-threshold={percent}"));
        }
        if let Some(percent) = kubelet.image_gc_low_threshold_percent {
            args.push(format!("--image-gc-low-threshold={percent}"));
        }
        if let Some(enforced) = kubelet.cpu_cfs_quota {
            args.push(format!("--cpu-cfs-quota={enforced}"));
        }
        args
    }
}

fn taint_value(taint: &Taint) -> &str {
    taint.value.as_deref().unwrap_or_default()
}

/// A double-quoted string as Go's `%q` writes it, which is how upstream quotes flag values.
fn go_quote(text: &str) -> String {
    double_quoted_with(text, |c| match c {
        '\u{7}' => Some("\\a".into()),
        '\u{8}' => Some("\\b".into()),
        '\u{c}' => Some("\\f".into()),
        '\n' => Some("\\n".into()),
        '\r' => Some("\\r".into()),
        '\t' => Some("\\t".into()),
        '\u{b}' => Some("\\v".into()),
        c if c.is_ascii_control() => Some(format!("\\x{:02x}", u32::from(c))),
        c if c.is_control() => Some(format!("\\u{:04x}", u32::from(c))),
        _ => None,
    })
}

/// `text` between double quotes, with `"` and `\` escaped by a backslash and every other
/// character written as `escape` says (`None`: as it is). Go's `%q` and YAML's and TOML's
/// double-quoted strings differ only in `escape`.
fn double_quoted_with(text: &str, escape: impl Fn(char) -> Option<String>) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c => match escape(c) {
                Some(escaped) => quoted.push_str(&escaped),
                None => quoted.push(c),
            },
        }
    }
    quoted.push('"');
    quoted
}

/// A POSIX shell single-quoted word: nothing inside is expanded.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A PowerShell single-quoted (verbatim) string. PowerShell also ends such strings at the
/// typographic single quotes, so those are doubled too.
fn powershell_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        if matches!(c, '\'' | '\u{2018}' | '\u{2019}' | '\u{201a}' | '\u{201b}') {
            quoted.push(c);
        }
        quoted.push(c);
    }
    quoted.push('\'');
    quoted
}

#[cfg(test)]
mod tests;
