//! Label selectors and namespace scopes: which pods a topology spread constraint counts and
//! which pods a pod (anti-)affinity term is about, with Kubernetes' matching rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How a selector expression compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOperator {
    /// The label is present with one of the values.
    In,
    /// The label is absent, or present with none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One expression of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorExpression {
    /// The label key.
    pub key: String,
    /// The comparison.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn`.
    pub values: Vec<String>,
}

impl SelectorExpression {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A Kubernetes label selector: every `match_labels` entry and every expression must hold. The
/// empty selector matches every pod; where the API allows a null selector (matching none), the
/// constraint holds an `Option<LabelSelector>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LabelSelector {
    /// Labels that must be present with these values.
    pub match_labels: BTreeMap<String, String>,
    /// Expressions that must all hold.
    pub match_expressions: Vec<SelectorExpression>,
}

impl LabelSelector {
    /// The selector of pods labelled with all of `labels`.
    pub fn matching<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        LabelSelector {
            match_labels: labels
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// This selector with one more expression.
    #[must_use]
    pub fn with_expression(
        mut self,
        key: &str,
        operator: SelectorOperator,
        values: &[&str],
    ) -> Self {
        self.match_expressions.push(SelectorExpression {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        });
        self
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }
}

/// The namespaces a pod (anti-)affinity term looks in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Namespaces {
    /// The pod's own namespace (no `namespaces` and no `namespaceSelector`).
    #[default]
    Own,
    /// These namespaces: the term's `namespaces` plus those its `namespaceSelector` selects,
    /// resolved by the caller, which knows the namespaces' labels. An empty set means the
    /// pod's own namespace, as in the API.
    Listed(BTreeSet<String>),
    /// Every namespace (an empty `namespaceSelector`).
    All,
}

/// [`Namespaces`] resolved against the owning pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum NamespaceSet {
    /// Only these.
    Listed(BTreeSet<Arc<str>>),
    /// Every namespace.
    All,
}

impl NamespaceSet {
    /// `namespaces` as seen from a pod in `own`.
    pub(super) fn resolve(namespaces: &Namespaces, own: &str) -> Self {
        match namespaces {
            Namespaces::All => NamespaceSet::All,
            Namespaces::Listed(listed) if !listed.is_empty() => {
                NamespaceSet::Listed(listed.iter().map(|n| Arc::from(n.as_str())).collect())
            }
            Namespaces::Own | Namespaces::Listed(_) => {
                NamespaceSet::Listed(BTreeSet::from([Arc::from(own)]))
            }
        }
    }

    /// Whether `namespace` is in the set.
    pub(super) fn contains(&self, namespace: &str) -> bool {
        match self {
            NamespaceSet::All => true,
            NamespaceSet::Listed(listed) => listed.contains(namespace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn given_match_labels_and_expressions_when_matching_then_all_must_hold() {
        let selector = LabelSelector::matching([("app", "web")])
            .with_expression("tier", SelectorOperator::In, &["front", "edge"])
            .with_expression("canary", SelectorOperator::DoesNotExist, &[]);
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(
            !selector.matches(&labels(&[("app", "web")])),
            "In needs the label"
        );
        assert!(!selector.matches(&labels(&[
            ("app", "web"),
            ("tier", "edge"),
            ("canary", "1")
        ])));
        assert!(!selector.matches(&labels(&[("app", "db"), ("tier", "edge")])));
    }

    #[test]
    fn given_not_in_and_exists_when_matching_then_absence_is_handled_as_kubernetes_does() {
        let not_in =
            LabelSelector::default().with_expression("env", SelectorOperator::NotIn, &["prod"]);
        assert!(
            not_in.matches(&labels(&[])),
            "NotIn matches an absent label"
        );
        assert!(not_in.matches(&labels(&[("env", "dev")])));
        assert!(!not_in.matches(&labels(&[("env", "prod")])));
        let exists = LabelSelector::default().with_expression("env", SelectorOperator::Exists, &[]);
        assert!(!exists.matches(&labels(&[])));
        assert!(
            LabelSelector::default().matches(&labels(&[])),
            "the empty selector matches all"
        );
    }

    #[test]
    fn given_namespace_scopes_when_resolved_then_empty_lists_mean_the_own_namespace() {
        let own = NamespaceSet::resolve(&Namespaces::Own, "team-a");
        assert!(own.contains("team-a") && !own.contains("team-b"));
        let empty = NamespaceSet::resolve(&Namespaces::Listed(BTreeSet::new()), "team-a");
        assert_eq!(empty, own);
        let listed = NamespaceSet::resolve(
            &Namespaces::Listed(BTreeSet::from(["team-b".to_owned()])),
            "team-a",
        );
        assert!(listed.contains("team-b") && !listed.contains("team-a"));
        assert!(NamespaceSet::resolve(&Namespaces::All, "x").contains("anything"));
    }
}
