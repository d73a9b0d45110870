//! Taints and tolerations: which nodes repel which pods, with Kubernetes' matching rules.

use std::fmt;

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    /// New pods are not scheduled onto the node.
    NoSchedule,
    /// The scheduler avoids the node if it can; Karpenter treats it as `NoSchedule` until it
    /// relaxes a pod's preferences.
    PreferNoSchedule,
    /// New pods are not scheduled and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The effect as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A taint on a node, or in a NodePool's template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value; may be empty.
    pub value: String,
    /// The effect.
    pub effect: TaintEffect,
}

impl Taint {
    /// The taint `key=value:effect`.
    pub fn new(key: &str, value: &str, effect: TaintEffect) -> Self {
        Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect,
        }
    }

    /// Whether this is one of the taints a node carries only while it starts (not ready,
    /// unreachable, not yet initialised by the cloud provider, not yet registered), which
    /// upstream ignores on nodes that are not initialised yet.
    pub(super) fn is_ephemeral(&self) -> bool {
        const EPHEMERAL: [(&str, TaintEffect); 4] = [
            ("node.kubernetes.io/not-ready", TaintEffect::NoSchedule),
            ("node.kubernetes.io/unreachable", TaintEffect::NoSchedule),
            (
                "node.cloudprovider.kubernetes.io/uninitialized",
                TaintEffect::NoSchedule,
            ),
            ("karpenter.sh/unregistered", TaintEffect::NoExecute),
        ];
        EPHEMERAL
            .iter()
            .any(|(key, effect)| self.key == *key && self.effect == *effect)
    }
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubectl prints taints.
impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// How a toleration compares a taint's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TolerationOperator {
    /// The values must be equal (the Kubernetes default).
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// A pod's toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    /// The taint key; empty with [`TolerationOperator::Exists`] tolerates every key.
    pub key: String,
    /// How the value is compared.
    pub operator: TolerationOperator,
    /// The value compared with [`TolerationOperator::Equal`].
    pub value: String,
    /// The effect tolerated; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Tolerates `key=value` with `effect` (every effect if `None`).
    pub fn equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: key.to_owned(),
            operator: TolerationOperator::Equal,
            value: value.to_owned(),
            effect,
        }
    }

    /// Tolerates `key` with any value and `effect` (every effect if `None`); an empty key
    /// tolerates every taint.
    pub fn exists(key: &str, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: key.to_owned(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        }
    }

    /// Whether this toleration tolerates `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|effect| effect != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first of `taints` that `tolerations` do not tolerate; `PreferNoSchedule` taints pass
/// when `tolerate_prefer_no_schedule` (a relaxed preference).
pub(super) fn first_untolerated<'a>(
    taints: impl IntoIterator<Item = &'a Taint>,
    tolerations: &[Toleration],
    tolerate_prefer_no_schedule: bool,
) -> Option<&'a Taint> {
    taints.into_iter().find(|taint| {
        let relaxed = tolerate_prefer_no_schedule && taint.effect == TaintEffect::PreferNoSchedule;
        !relaxed && !tolerations.iter().any(|t| t.tolerates(taint))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> Taint {
        Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)
    }

    #[test]
    fn given_taints_when_displayed_then_they_read_like_kubectl() {
        assert_eq!(gpu().to_string(), "dedicated=gpu:NoSchedule");
        assert_eq!(
            Taint::new("spot", "", TaintEffect::PreferNoSchedule).to_string(),
            "spot:PreferNoSchedule"
        );
    }

    #[test]
    fn given_tolerations_when_matching_then_kubernetes_rules_apply() {
        let taint = gpu();
        assert!(
            Toleration::equal("dedicated", "gpu", Some(TaintEffect::NoSchedule)).tolerates(&taint)
        );
        assert!(Toleration::equal("dedicated", "gpu", None).tolerates(&taint));
        assert!(!Toleration::equal("dedicated", "cpu", None).tolerates(&taint));
        assert!(
            !Toleration::equal("dedicated", "gpu", Some(TaintEffect::NoExecute)).tolerates(&taint)
        );
        assert!(Toleration::exists("dedicated", None).tolerates(&taint));
        assert!(!Toleration::exists("other", None).tolerates(&taint));
        assert!(
            Toleration::exists("", None).tolerates(&taint),
            "empty key with Exists tolerates all"
        );
        assert!(!Toleration::exists("", Some(TaintEffect::NoExecute)).tolerates(&taint));
    }

    #[test]
    fn given_prefer_no_schedule_when_relaxed_then_only_that_effect_is_excused() {
        let soft = Taint::new("spot", "", TaintEffect::PreferNoSchedule);
        let taints = [soft.clone(), gpu()];
        assert_eq!(first_untolerated(&taints, &[], false), Some(&soft));
        assert_eq!(first_untolerated(&taints, &[], true), Some(&taints[1]));
        let tolerations = [Toleration::exists("dedicated", None)];
        assert_eq!(first_untolerated(&taints, &tolerations, true), None);
    }

    #[test]
    fn given_start_up_taints_when_checked_then_only_the_known_ephemeral_ones_are_ephemeral() {
        assert!(
            Taint::new("node.kubernetes.io/not-ready", "", TaintEffect::NoSchedule).is_ephemeral()
        );
        assert!(
            !Taint::new("node.kubernetes.io/not-ready", "", TaintEffect::NoExecute).is_ephemeral()
        );
        assert!(!gpu().is_ephemeral());
    }
}
