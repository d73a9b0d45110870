//! A command as its annotations record it: writing them on the candidates and replacements
//! when it starts, and reading every command in flight back from a snapshot ([`in_flight`]),
//! so that nothing about a command lives only in memory.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED};
use karpenter_api::{ConditionStatus, DisruptionReason, NodeClaim, NodePool, condition};
use kube::core::DynamicObject;
use serde_json::{Map, Value, json};

use super::{
    ANNOTATION_COMMAND, ANNOTATION_REASON, ANNOTATION_REPLACEMENTS, ANNOTATION_REPLACES,
    ANNOTATION_STARTED_AT,
};
use crate::cluster::Snapshot;
use crate::controllers::disruption::Command;
use crate::controllers::disruption::annotations as command_keys;
use crate::controllers::nodeclaim::node_pool_of;
use crate::controllers::provisioning::nodeclaims;
use crate::objects::name_of;
use core_domain::hash::Fnv1a;
use core_domain::scheduler::PlannedNodeClaim;

/// Kubernetes' `generateName` alphabet: no vowels, no look-alike digits.
pub(super) const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The API spelling of a disruption reason.
pub fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => "Underutilized",
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
    }
}

pub(super) fn parse_reason(text: &str) -> Option<DisruptionReason> {
    match text {
        "Underutilized" => Some(DisruptionReason::Underutilized),
        "Empty" => Some(DisruptionReason::Empty),
        "Drifted" => Some(DisruptionReason::Drifted),
        _ => None,
    }
}

/// A replacement of a command in flight, as the snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// The NodeClaim's name.
    pub name: String,
    /// `Initialized=True`.
    pub initialized: bool,
    /// Being deleted.
    pub deleting: bool,
    /// What its `Launched` condition says when it is not True (`reason: message`).
    pub launch_problem: Option<String>,
}

/// A command in flight, recovered from the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// Its reason; `None` when the annotation is unreadable.
    pub reason: Option<DisruptionReason>,
    /// The candidates' NodeClaim names, sorted.
    pub candidates: Vec<String>,
    /// The replacements found, by name.
    pub replacements: Vec<Replacement>,
    /// The replacements it creates, by name, sorted.
    pub expected_replacements: Vec<String>,
    /// When it started; `None` when unreadable.
    pub started_at: Option<Timestamp>,
}

impl InFlight {
    /// Whether `node_claim` is one of its candidates or replacements.
    pub fn involves(&self, node_claim: &str) -> bool {
        self.node_claims().any(|name| name == node_claim)
    }

    /// The NodeClaims it involves: its candidates, then its replacements.
    pub fn node_claims(&self) -> impl Iterator<Item = &str> + '_ {
        self.candidates
            .iter()
            .map(String::as_str)
            .chain(self.replacements.iter().map(|r| r.name.as_str()))
    }

    /// Its candidates that still exist and are not being deleted.
    pub fn live_candidates<'s>(&self, snapshot: &'s Snapshot) -> Vec<&'s NodeClaim> {
        self.candidates
            .iter()
            .filter_map(|name| snapshot.node_claim(name))
            .filter(|claim| claim.metadata.deletion_timestamp.is_none())
            .collect()
    }
}

/// A command annotation of `claim`, under its name or the one earlier versions wrote.
pub(super) fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    command_keys::get(claim.metadata.annotations.as_ref(), key)
}

pub(super) fn claim_condition<'c>(
    claim: &'c NodeClaim,
    type_: &str,
) -> Option<&'c karpenter_api::Condition> {
    claim
        .status
        .as_ref()
        .and_then(|status| condition::find(&status.conditions, type_))
}

/// Every command in flight: the candidates and replacements grouped by the candidate list
/// their annotations name, kept while one of those candidates still exists. Sorted by
/// candidates.
pub fn in_flight(snapshot: &Snapshot) -> Vec<InFlight> {
    let mut commands: BTreeMap<&str, InFlight> = BTreeMap::new();
    for claim in snapshot.node_claims() {
        let (key, is_replacement) = match (
            annotation(claim, ANNOTATION_REPLACES),
            annotation(claim, ANNOTATION_COMMAND),
        ) {
            (Some(key), _) => (key, true),
            (None, Some(key)) => (key, false),
            (None, None) => continue,
        };
        let command = commands.entry(key).or_insert_with(|| InFlight {
            reason: None,
            candidates: split_names(key),
            replacements: Vec::new(),
            expected_replacements: Vec::new(),
            started_at: None,
        });
        if command.reason.is_none() {
            command.reason = annotation(claim, ANNOTATION_REASON).and_then(parse_reason);
        }
        let started = annotation(claim, ANNOTATION_STARTED_AT).and_then(|at| at.parse().ok());
        command.started_at = match (command.started_at, started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(names) = annotation(claim, ANNOTATION_REPLACEMENTS) {
            command.expected_replacements.extend(split_names(names));
            command.expected_replacements.sort();
            command.expected_replacements.dedup();
        }
        if !is_replacement {
            continue;
        }
        let launch_problem = claim_condition(claim, CONDITION_LAUNCHED)
            .filter(|launched| launched.status != ConditionStatus::True)
            .map(|launched| {
                let reason = launched.reason.as_deref().unwrap_or("NotLaunched");
                match launched.message.as_deref() {
                    Some(message) if !message.is_empty() => format!("{reason}: {message}"),
                    _ => reason.to_owned(),
                }
            });
        command.replacements.push(Replacement {
            name: name_of(claim).to_owned(),
            initialized: claim_condition(claim, CONDITION_INITIALIZED)
                .is_some_and(|c| c.status == ConditionStatus::True),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            launch_problem,
        });
    }
    commands
        .into_values()
        .filter(|command| {
            command
                .candidates
                .iter()
                .any(|name| snapshot.node_claim(name).is_some())
        })
        .collect()
}

pub(super) fn split_names(list: &str) -> Vec<String> {
    let mut names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The annotations a command writes on its candidates and replacements (besides
/// [`ANNOTATION_REPLACES`] / [`ANNOTATION_COMMAND`]).
pub(super) fn command_annotations(
    command: &Command,
    started_at: Timestamp,
) -> [(&'static str, String); 3] {
    [
        (ANNOTATION_REASON, reason_name(command.reason).to_owned()),
        (ANNOTATION_STARTED_AT, started_at.to_string()),
        (
            ANNOTATION_REPLACEMENTS,
            replacement_names(command, started_at).join(","),
        ),
    ]
}

/// The names of `command`'s replacements when started at `started_at`: `<nodepool>-` and five
/// characters of `generateName`'s alphabet from a hash of the command, so they are known (and
/// written on the candidates) before anything is created. Pure.
pub fn replacement_names(command: &Command, started_at: Timestamp) -> Vec<String> {
    let seed = format!("{}|{started_at}", command.candidates.join(","));
    command
        .replacements
        .iter()
        .enumerate()
        .map(|(index, planned)| {
            // FNV-1a: stable across runs and platforms.
            let mut hash = Fnv1a::new()
                .write(seed.bytes().chain(index.to_string().bytes()))
                .finish();
            let radix = NAME_ALPHABET.len() as u64;
            let suffix: String = (0..5)
                .map(|_| {
                    let digit = usize::try_from(hash % radix).unwrap_or(0);
                    hash /= radix;
                    char::from(NAME_ALPHABET.get(digit).copied().unwrap_or(b'x'))
                })
                .collect();
            format!("{}-{suffix}", planned.node_pool)
        })
        .collect()
}

/// The merge patch marking a candidate as part of `command`.
pub fn candidate_patch(command: &Command, started_at: Timestamp) -> Value {
    let mut annotations = Map::new();
    annotations.insert(
        ANNOTATION_COMMAND.to_owned(),
        Value::String(command.candidates.join(",")),
    );
    for (key, value) in command_annotations(command, started_at) {
        annotations.insert(key.to_owned(), Value::String(value));
    }
    json!({ "metadata": { "annotations": annotations } })
}

/// The replacement NodeClaim object `name` for `planned`, a NodeClaim of `pool`, in `command`
/// started at `started_at`. Pure.
pub fn replacement_object(
    name: &str,
    planned: &PlannedNodeClaim,
    pool: &NodePool,
    node_class: Option<&DynamicObject>,
    command: &Command,
    started_at: Timestamp,
) -> NodeClaim {
    let mut object = nodeclaims::node_claim(planned, pool, node_class);
    object.metadata.name = Some(name.to_owned());
    object.metadata.generate_name = None;
    let annotations = object
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_REPLACES.to_owned(), command.candidates.join(","));
    for (key, value) in command_annotations(command, started_at) {
        annotations.insert(key.to_owned(), value);
    }
    object
}

/// The NodePools of the NodeClaims named, comma-separated, sorted.
pub fn node_pools_of(snapshot: &Snapshot, node_claims: &[String]) -> String {
    let pools: BTreeSet<&str> = node_claims
        .iter()
        .filter_map(|name| snapshot.node_claim(name))
        .filter_map(node_pool_of)
        .collect();
    pools.into_iter().collect::<Vec<_>>().join(",")
}
