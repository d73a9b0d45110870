//! Chaos runs: the faults nobody thought of, found by search. Each run draws a random cluster
//! and fault schedule from its seed ([`generate::scenario`]), runs it with the invariants
//! checked after every step ([`crate::engine::run_checked`]), and, when one breaks, shrinks the
//! scenario to a minimal one that still breaks it ([`shrink`]), which is written out to become
//! a regression scenario (`simulator/scenarios/chaos/`).
//!
//! `simulate --chaos SEED --runs N` runs seeds `SEED..SEED+N`.

pub mod generate;

use std::time::Duration;

use serde_json::Value;

use crate::engine::{self, Quiet, RunError, SETTLE, Violation};
use crate::scenario::{self, ScenarioError};

/// The quiet end of a generated run: the settling the end-of-run invariants need, and a
/// margin.
pub const TAIL: Duration = Duration::from_secs(SETTLE.as_secs() + 15 * 60);

/// How many runs a shrink may spend, at most.
pub const SHRINK_RUNS: usize = 120;

/// Why a chaos run could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The generated (or shrunk) scenario is invalid: a bug of the generator.
    #[error("the scenario is invalid: {0}")]
    Scenario(#[from] ScenarioError),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The scenario document as YAML.
pub fn to_yaml(document: &Value) -> String {
    serde_yaml::to_string(document).unwrap_or_default()
}

/// Runs a scenario document with the invariants checked: what broke (empty when nothing did).
pub fn check(document: &Value) -> Result<Vec<Violation>, ChaosError> {
    let scenario = scenario::parse(&to_yaml(document))?;
    let (_, violations) = engine::run_checked_blocking(scenario, &mut Quiet)?;
    Ok(violations)
}

/// Whether `document` still breaks `invariant`. A document the shrink made invalid does not.
fn still_breaks(document: &Value, invariant: &str) -> bool {
    check(document).is_ok_and(|violations| violations.iter().any(|v| v.invariant == invariant))
}

/// Shrinks `document`, which breaks `invariant`, to a smaller one that still does, in at most
/// `budget` runs: fewer events (halves first, then one at a time), fewer objects (a
/// workload with its PodDisruptionBudget, a NodePool), fewer replicas, a shorter run.
pub fn shrink(document: &Value, invariant: &str, budget: usize) -> Value {
    shrink_with(document, budget, &mut |candidate| {
        still_breaks(candidate, invariant)
    })
}

/// [`shrink`] with the test given: `fails` answers whether a candidate still fails.
pub fn shrink_with(
    document: &Value,
    budget: usize,
    fails: &mut dyn FnMut(&Value) -> bool,
) -> Value {
    let mut best = document.clone();
    let mut runs = 0;
    let mut attempt = |candidate: &Value, best: &mut Value| -> bool {
        if runs >= budget {
            return false;
        }
        runs += 1;
        if fails(candidate) {
            *best = candidate.clone();
            true
        } else {
            false
        }
    };
    // Events: drop chunks, halving the chunk size down to one event.
    let mut chunk = list_len(&best, "events").div_ceil(2);
    while chunk >= 1 {
        let mut start = 0;
        while start < list_len(&best, "events") {
            let candidate = without_range(&best, "events", start, chunk);
            if !attempt(&candidate, &mut best) {
                start += chunk;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    // Objects: a workload and what names it, or a NodePool (never the last one).
    let mut at = 0;
    while at < list_len(&best, "objects") {
        let kind = best["objects"][at]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let removable = match kind.as_str() {
            "Deployment" | "DaemonSet" | "PodDisruptionBudget" => true,
            "NodePool" => count_kind(&best, "NodePool") > 1,
            _ => false,
        };
        if removable {
            let name = best["objects"][at]["metadata"]["name"].clone();
            let mut candidate = without_range(&best, "objects", at, 1);
            if kind == "Deployment" {
                candidate = without_matching(&candidate, "objects", |o| {
                    o["kind"] == "PodDisruptionBudget" && o["metadata"]["name"] == name
                });
                candidate = without_matching(&candidate, "events", |e| e["scale"]["name"] == name);
            }
            if kind == "NodePool" {
                candidate = without_matching(&candidate, "events", |e| {
                    e["apply"]["kind"] == "NodePool" && e["apply"]["metadata"]["name"] == name
                });
            }
            if attempt(&candidate, &mut best) {
                continue;
            }
        }
        at += 1;
    }
    // Replicas: halve each Deployment's while it still fails.
    for at in 0..list_len(&best, "objects") {
        while best["objects"][at]["kind"] == "Deployment" {
            let replicas = best["objects"][at]["spec"]["replicas"]
                .as_u64()
                .unwrap_or(0);
            if replicas <= 1 {
                break;
            }
            let mut candidate = best.clone();
            candidate["objects"][at]["spec"]["replicas"] = Value::from(replicas / 2);
            if !attempt(&candidate, &mut best) {
                break;
            }
        }
    }
    best
}

fn list_len(document: &Value, key: &str) -> usize {
    document[key].as_array().map_or(0, Vec::len)
}

fn count_kind(document: &Value, kind: &str) -> usize {
    document["objects"].as_array().map_or(0, |objects| {
        objects.iter().filter(|o| o["kind"] == kind).count()
    })
}

fn without_range(document: &Value, key: &str, start: usize, length: usize) -> Value {
    let mut candidate = document.clone();
    if let Some(list) = candidate[key].as_array_mut() {
        let end = (start + length).min(list.len());
        list.drain(start.min(end)..end);
    }
    candidate
}

fn without_matching(document: &Value, key: &str, matches: impl Fn(&Value) -> bool) -> Value {
    let mut candidate = document.clone();
    if let Some(list) = candidate[key].as_array_mut() {
        list.retain(|item| !matches(item));
    }
    candidate
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_generated_scenario_is_valid_and_the_same_for_the_same_seed() {
        for seed in 0..50 {
            let document = generate::scenario(seed);
            assert_eq!(document, generate::scenario(seed));
            let parsed = scenario::parse(&to_yaml(&document));
            assert!(
                parsed.is_ok(),
                "seed {seed}: {parsed:?}\n{}",
                to_yaml(&document)
            );
            let parsed = parsed.unwrap_or_else(|_| unreachable!());
            let quiet_from = parsed.events.last().map_or(Duration::ZERO, |e| e.at);
            assert!(
                parsed.duration - quiet_from >= TAIL,
                "seed {seed}: no quiet tail"
            );
        }
        assert_ne!(generate::scenario(1), generate::scenario(2));
    }

    #[test]
    fn a_shrink_keeps_only_what_the_failure_needs() {
        let document = json!({
            "events": [{"at": "1m", "a": 1}, {"at": "2m", "b": 1}, {"at": "3m", "c": 1},
                       {"at": "4m", "d": 1}, {"at": "5m", "e": 1}],
            "objects": [
                {"kind": "NodePool", "metadata": {"name": "p1"}},
                {"kind": "NodePool", "metadata": {"name": "p2"}},
                {"kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 8}},
                {"kind": "PodDisruptionBudget", "metadata": {"name": "web"}},
                {"kind": "Deployment", "metadata": {"name": "db"}, "spec": {"replicas": 8}},
            ],
        });
        // Fails while event c is there and db has at least 3 replicas.
        let mut runs = 0;
        let shrunk = shrink_with(&document, 100, &mut |candidate| {
            runs += 1;
            let has_c = candidate["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e.get("c").is_some()));
            let db = candidate["objects"].as_array().and_then(|objects| {
                objects
                    .iter()
                    .find(|o| o["metadata"]["name"] == "db")
                    .and_then(|o| o["spec"]["replicas"].as_u64())
            });
            has_c && db.is_some_and(|r| r >= 3)
        });
        assert_eq!(shrunk["events"], json!([{"at": "3m", "c": 1}]));
        let kinds: Vec<&str> = shrunk["objects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(kinds, ["p2", "db"]);
        assert_eq!(shrunk["objects"][1]["spec"]["replicas"], 4);
        assert!(runs <= 100);
        let limited = shrink_with(&document, 0, &mut |_| true);
        assert_eq!(limited, document, "no budget, no change");
    }
}
