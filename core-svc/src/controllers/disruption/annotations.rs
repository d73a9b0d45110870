//! The annotations a disruption command writes on its NodeClaims (and, through registration,
//! their Nodes), so that a restarted core finds every command again; and their migration from
//! the names earlier versions wrote.
//!
//! Upstream keeps its orchestration queue in memory and defines no such annotations
//! (kubernetes-sigs/karpenter pkg/apis/v1/labels.go), so these are this project's own and live
//! under its domain, [`PROJECT_DOMAIN`], never under upstream's `karpenter.sh`. Earlier
//! versions wrote them as `karpenter.sh/disruption-*` ([`LEGACY_COMMAND_ANNOTATIONS`]). An
//! object carrying an old name is read as if it carried the new one ([`get`], [`has_any`]),
//! and the disruption pass moves the old names to the new ones before anything else
//! ([`legacy_renames`]), so a core upgraded in the middle of a command carries it on.
//!
//! [`PROJECT_DOMAIN`]: core_domain::labels::PROJECT_DOMAIN

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::cluster::Snapshot;

/// On a replacement: the NodeClaims it replaces (the command's candidates), comma-separated,
/// sorted.
pub const ANNOTATION_REPLACES: &str = "karpenter-rs.dev/disruption-replaces";
/// On a candidate: the command's candidates, comma-separated, sorted (so the command is found
/// even when every replacement is gone).
pub const ANNOTATION_COMMAND: &str = "karpenter-rs.dev/disruption-command";
/// On both: the command's disruption reason (`Drifted`, `Empty`, `Underutilized`).
pub const ANNOTATION_REASON: &str = "karpenter-rs.dev/disruption-reason";
/// On both: when the command started (RFC 3339), for its timeout.
pub const ANNOTATION_STARTED_AT: &str = "karpenter-rs.dev/disruption-started-at";
/// On both: the names of the replacements the command creates, comma-separated, to notice a
/// missing one (the names are chosen before the creates).
pub const ANNOTATION_REPLACEMENTS: &str = "karpenter-rs.dev/disruption-replacements";

/// On a candidate being drained before its deletion: when the drain began (RFC 3339).
pub const ANNOTATION_DRAIN_STARTED_AT: &str = "karpenter-rs.dev/disruption-drain-started-at";
/// On a candidate being drained before its deletion: how long the drain may last, in whole
/// seconds (`60s`), fixed when it began.
pub const ANNOTATION_DRAIN_TIMEOUT: &str = "karpenter-rs.dev/disruption-drain-timeout";

/// Every annotation a command writes, on NodeClaims (and, through registration, their Nodes).
pub const COMMAND_ANNOTATIONS: [&str; 7] = [
    ANNOTATION_REPLACES,
    ANNOTATION_COMMAND,
    ANNOTATION_REASON,
    ANNOTATION_STARTED_AT,
    ANNOTATION_REPLACEMENTS,
    ANNOTATION_DRAIN_STARTED_AT,
    ANNOTATION_DRAIN_TIMEOUT,
];

/// The names earlier versions gave [`COMMAND_ANNOTATIONS`], in the same order: read, and moved
/// to the new names, never written.
pub const LEGACY_COMMAND_ANNOTATIONS: [&str; 7] = [
    "karpenter.sh/disruption-replaces",
    "karpenter.sh/disruption-command",
    "karpenter.sh/disruption-reason",
    "karpenter.sh/disruption-started-at",
    "karpenter.sh/disruption-replacements",
    "karpenter.sh/disruption-drain-started-at",
    "karpenter.sh/disruption-drain-timeout",
];

/// The name earlier versions gave the command annotation `key`.
fn legacy_name(key: &str) -> Option<&'static str> {
    COMMAND_ANNOTATIONS
        .iter()
        .zip(LEGACY_COMMAND_ANNOTATIONS)
        .find_map(|(new, old)| (*new == key).then_some(old))
}

/// The value of the command annotation `key` (one of [`COMMAND_ANNOTATIONS`]) in
/// `annotations`: under its name or, when that is absent, under the name earlier versions gave
/// it.
pub fn get<'a>(annotations: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    let annotations = annotations?;
    annotations
        .get(key)
        .or_else(|| legacy_name(key).and_then(|old| annotations.get(old)))
        .map(String::as_str)
}

/// Whether `annotations` carry any command annotation, under either name.
pub fn has_any(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|annotations| {
        COMMAND_ANNOTATIONS
            .iter()
            .chain(&LEGACY_COMMAND_ANNOTATIONS)
            .any(|key| annotations.contains_key(*key))
    })
}

/// The merge patch removing every command annotation, under either name, from a NodeClaim or
/// a Node.
pub fn strip_patch() -> Value {
    let annotations: Map<String, Value> = COMMAND_ANNOTATIONS
        .iter()
        .chain(&LEGACY_COMMAND_ANNOTATIONS)
        .map(|key| ((*key).to_owned(), Value::Null))
        .collect();
    json!({ "metadata": { "annotations": annotations } })
}

/// The merge patch moving the old names among `annotations` to the new ones (a value already
/// under the new name wins); `None` when there is no old name. Pure.
pub fn rename_patch(annotations: Option<&BTreeMap<String, String>>) -> Option<Value> {
    let annotations = annotations?;
    let mut patch = Map::new();
    for (new, old) in COMMAND_ANNOTATIONS.iter().zip(LEGACY_COMMAND_ANNOTATIONS) {
        let Some(value) = annotations.get(old) else {
            continue;
        };
        patch.insert(old.to_owned(), Value::Null);
        if !annotations.contains_key(*new) {
            patch.insert((*new).to_owned(), Value::String(value.clone()));
        }
    }
    (!patch.is_empty()).then(|| json!({ "metadata": { "annotations": patch } }))
}

/// An object whose command annotations still carry the names earlier versions wrote.
#[derive(Debug, Clone, PartialEq)]
pub enum LegacyRename {
    /// A NodeClaim, and the merge patch that renames its annotations.
    NodeClaim {
        /// The NodeClaim.
        name: String,
        /// The merge patch.
        patch: Value,
    },
    /// A Node (registration copied its NodeClaim's annotations), and its merge patch.
    Node {
        /// The Node.
        name: String,
        /// The merge patch.
        patch: Value,
    },
}

/// Every NodeClaim and Node, deleting or not, whose command annotations carry an old name,
/// NodeClaims first, each sorted by name. Pure.
pub fn legacy_renames(snapshot: &Snapshot) -> Vec<LegacyRename> {
    let claims = snapshot.node_claims().filter_map(|claim| {
        let patch = rename_patch(claim.metadata.annotations.as_ref())?;
        Some(LegacyRename::NodeClaim {
            name: claim.metadata.name.clone().unwrap_or_default(),
            patch,
        })
    });
    let nodes = snapshot.nodes().filter_map(|node| {
        let patch = rename_patch(node.metadata.annotations.as_ref())?;
        Some(LegacyRename::Node {
            name: node.metadata.name.clone().unwrap_or_default(),
            patch,
        })
    });
    claims.chain(nodes).collect()
}

#[cfg(test)]
mod tests {
    use core_domain::labels::PROJECT_DOMAIN;

    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn the_new_names_are_the_old_ones_under_the_projects_domain() {
        for (new, old) in COMMAND_ANNOTATIONS.iter().zip(LEGACY_COMMAND_ANNOTATIONS) {
            let (domain, name) = new.split_once('/').unwrap();
            assert_eq!(domain, PROJECT_DOMAIN);
            assert_eq!(old, format!("karpenter.sh/{name}"));
            assert!(name.starts_with("disruption-"), "{new}");
        }
    }

    #[test]
    fn an_old_name_is_read_as_the_new_one_and_the_new_one_wins() {
        let old = annotations(&[("karpenter.sh/disruption-command", "a,b")]);
        assert_eq!(get(Some(&old), ANNOTATION_COMMAND), Some("a,b"));
        assert!(has_any(Some(&old)));
        assert_eq!(get(Some(&old), ANNOTATION_REPLACES), None);

        let both = annotations(&[
            ("karpenter.sh/disruption-command", "old"),
            (ANNOTATION_COMMAND, "new"),
        ]);
        assert_eq!(get(Some(&both), ANNOTATION_COMMAND), Some("new"));

        let unrelated = annotations(&[("karpenter.sh/do-not-disrupt", "true")]);
        assert!(!has_any(Some(&unrelated)));
        assert!(!has_any(None));
        assert_eq!(get(None, ANNOTATION_COMMAND), None);
    }

    #[test]
    fn the_rename_patch_moves_each_old_name_once_and_keeps_a_newer_value() {
        let found = annotations(&[
            ("karpenter.sh/disruption-command", "a"),
            ("karpenter.sh/disruption-drain-timeout", "60s"),
            ("karpenter.sh/disruption-reason", "Empty"),
            (ANNOTATION_REASON, "Drifted"),
            ("karpenter.sh/do-not-disrupt", "true"),
        ]);
        assert_eq!(
            rename_patch(Some(&found)),
            Some(json!({ "metadata": { "annotations": {
                "karpenter.sh/disruption-command": null,
                ANNOTATION_COMMAND: "a",
                "karpenter.sh/disruption-drain-timeout": null,
                ANNOTATION_DRAIN_TIMEOUT: "60s",
                "karpenter.sh/disruption-reason": null,
            } } }))
        );
        let migrated = annotations(&[(ANNOTATION_COMMAND, "a")]);
        assert_eq!(rename_patch(Some(&migrated)), None, "nothing left to move");
        assert_eq!(rename_patch(None), None);
    }

    #[test]
    fn the_strip_patch_removes_both_names() {
        let patch = strip_patch();
        let removed = patch["metadata"]["annotations"].as_object().unwrap();
        for key in COMMAND_ANNOTATIONS
            .iter()
            .chain(&LEGACY_COMMAND_ANNOTATIONS)
        {
            assert_eq!(removed.get(*key), Some(&Value::Null), "{key}");
        }
        assert_eq!(removed.len(), 14);
    }
}
