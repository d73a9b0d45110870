//! `simulate A.yaml --vs B.yaml` (or `--set PATH=VALUE`): two runs' figures side by side, the
//! ones an operator weighs a change by: how long a roll took, how much was disrupting at once,
//! what the fleet costs, how long pods waited, and whether any budget was broken.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::report::{Report, clock};
use crate::series::Point;

/// One row: what, and the value for each run.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What the row measures.
    pub label: &'static str,
    /// The value for each run, as printed.
    pub values: Vec<String>,
}

/// The rows comparing `runs` (label, report), in a fixed order.
pub fn rows(runs: &[(&str, &Report)]) -> Vec<Row> {
    let row = |label: &'static str, value: &dyn Fn(&Report) -> String| Row {
        label,
        values: runs.iter().map(|(_, report)| value(report)).collect(),
    };
    vec![
        row("drift roll", &|report| roll(report)),
        row("disruptions started", &|report| {
            by_reason(report, "DisruptionStarted")
        }),
        row("most disrupting at once", &|report| {
            listed(&report.stats.max_disrupting_by_node_pool)
        }),
        row("NodeClaims created", &|report| {
            report.stats.node_claims_created.to_string()
        }),
        row("NodeClaims deleted", &|report| {
            report.stats.node_claims_deleted.to_string()
        }),
        row("nodes at the end", &|report| {
            report.final_state.nodes.len().to_string()
        }),
        row("cost at the end", &|report| {
            format!("${:.4}/h", report.stats.cost_per_hour_at_end)
        }),
        row("spent over the run", &|report| {
            format!("${:.2}", spent(report))
        }),
        row("cost lower bound at the end", &|report| {
            report
                .stats
                .cost_lower_bound_per_hour_at_end
                .map_or_else(|| "none".to_owned(), |bound| format!("${bound:.4}/h"))
        }),
        row("most pods pending at once", &|report| {
            most(&report.series.pending_pods).to_string()
        }),
        row("longest pending pod", &|report| {
            format!("{:.0}s", report.stats.pods_pending_max_seconds)
        }),
        row("PDB violations", &|report| {
            report.stats.pdb_violations.to_string()
        }),
        row("pods lost to interruptions", &|report| {
            report.stats.pods_lost_to_interruption.to_string()
        }),
        row("orphaned instances", &|report| {
            report.stats.orphaned_instances.to_string()
        }),
    ]
}

/// The rows as a table, a header naming the runs.
pub fn table(runs: &[(&str, &Report)]) -> Vec<String> {
    let rows = rows(runs);
    let label_width = rows.iter().map(|row| row.label.len()).max().unwrap_or(0);
    let widths: Vec<usize> = runs
        .iter()
        .enumerate()
        .map(|(column, (name, _))| {
            rows.iter()
                .filter_map(|row| row.values.get(column))
                .map(String::len)
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |first: &str, cells: &mut dyn Iterator<Item = &str>| {
        let mut line = format!("{first:<label_width$}");
        for (cell, width) in cells.zip(&widths) {
            let _ = write!(line, "  {cell:<width$}");
        }
        line.trim_end().to_owned()
    };
    let mut lines = vec![line("", &mut runs.iter().map(|(name, _)| *name))];
    lines.extend(
        rows.iter()
            .map(|row| line(row.label, &mut row.values.iter().map(String::as_str))),
    );
    lines
}

/// From the first `NodeClaimDrifted` to the deletion of the last NodeClaim that drifted, or
/// how many drifted NodeClaims were still there at the end.
fn roll(report: &Report) -> String {
    let mut drifted: BTreeSet<&str> = BTreeSet::new();
    let mut first = None;
    for event in report.events_of("NodeClaimDrifted") {
        if let Some(claim) = event.field("nodeClaim") {
            drifted.insert(claim);
            first.get_or_insert(event.t);
        }
    }
    let Some(first) = first else {
        return "no drift".to_owned();
    };
    let mut last_deleted = first;
    let mut deleted = 0usize;
    for event in report.events_of("NodeClaimDeleted") {
        if event
            .field("nodeClaim")
            .is_some_and(|claim| drifted.contains(claim))
        {
            deleted += 1;
            last_deleted = last_deleted.max(event.t);
        }
    }
    if deleted < drifted.len() {
        format!(
            "unfinished: {} of {} drifted left",
            drifted.len() - deleted,
            drifted.len()
        )
    } else {
        format!(
            "{} ({} nodes, {} to {})",
            clock(last_deleted - first).trim_start(),
            drifted.len(),
            clock(first).trim_start(),
            clock(last_deleted).trim_start()
        )
    }
}

/// What the instances cost over the run, in dollars: the cost per hour held from each point of
/// its series to the next, and the last to the end.
fn spent(report: &Report) -> f64 {
    let points = &report.series.cost_per_hour;
    let end = report.end as f64;
    points
        .iter()
        .enumerate()
        .map(|(position, point)| {
            let until = points.get(position + 1).map_or(end, |next| next.0);
            point.1.unwrap_or(0.0) * (until - point.0).max(0.0) / 3600.0
        })
        .sum()
}

/// The highest value of a series (0 when empty).
fn most(points: &[Point]) -> u64 {
    points
        .iter()
        .filter_map(|point| point.1)
        .fold(0.0_f64, f64::max) as u64
}

/// How many events of `type_` there were per `reason`, as `Drifted 12, Empty 3`.
fn by_reason(report: &Report, type_: &str) -> String {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for event in report.events_of(type_) {
        *counts
            .entry(event.field("reason").unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    listed(&counts)
}

fn listed(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(key, count)| format!("{key} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{FinalState, Stats, TimelineEvent};
    use crate::series::Series;
    use serde_json::json;

    fn event(t: f64, type_: &str, fields: serde_json::Value) -> TimelineEvent {
        let serde_json::Value::Object(fields) = fields else {
            panic!("an object");
        };
        TimelineEvent {
            t,
            type_: type_.to_owned(),
            fields: fields.into_iter().collect(),
        }
    }

    fn report(timeline: Vec<TimelineEvent>, cost: f64) -> Report {
        Report {
            scenario: "s".to_owned(),
            seed: 0,
            end: 7200,
            timeline,
            final_state: FinalState::default(),
            stats: Stats {
                cost_per_hour_at_end: cost,
                max_disrupting_by_node_pool: BTreeMap::from([("default".to_owned(), 2)]),
                ..Stats::default()
            },
            series: Series {
                cost_per_hour: vec![Point(0.0, Some(cost)), Point(3600.0, Some(2.0 * cost))],
                pending_pods: vec![
                    Point(0.0, Some(3.0)),
                    Point(60.0, Some(12.0)),
                    Point(120.0, None),
                ],
                ..Series::default()
            },
        }
    }

    fn drift(t: f64, claim: &str) -> TimelineEvent {
        event(
            t,
            "NodeClaimDrifted",
            json!({"nodeClaim": claim, "reason": "AMIDrift"}),
        )
    }

    fn deleted(t: f64, claim: &str) -> TimelineEvent {
        event(t, "NodeClaimDeleted", json!({"nodeClaim": claim}))
    }

    #[test]
    fn the_roll_runs_from_the_first_drift_to_the_last_drifted_nodeclaim_gone() {
        let done = report(
            vec![
                drift(600.0, "a"),
                drift(600.0, "b"),
                deleted(900.0, "a"),
                deleted(100.0, "old"),
                deleted(2400.0, "b"),
            ],
            1.0,
        );
        assert_eq!(roll(&done), "0:30:00 (2 nodes, 0:10:00 to 0:40:00)");
        let unfinished = report(vec![drift(600.0, "a"), drift(600.0, "b")], 1.0);
        assert_eq!(roll(&unfinished), "unfinished: 2 of 2 drifted left");
        assert_eq!(roll(&report(Vec::new(), 1.0)), "no drift");
    }

    #[test]
    fn what_was_spent_adds_up_the_cost_held_between_points() {
        // $1/h for the first hour, $2/h for the second (the run ends at 2 h).
        let run = report(Vec::new(), 1.0);
        assert!((spent(&run) - 3.0).abs() < 1e-9, "{}", spent(&run));
        assert_eq!(most(&run.series.pending_pods), 12);
    }

    #[test]
    fn the_table_has_a_column_per_run() {
        let a = report(
            vec![event(
                60.0,
                "DisruptionStarted",
                json!({"reason": "Drifted"}),
            )],
            1.5,
        );
        let b = report(Vec::new(), 0.75);
        let lines = table(&[("budget 10%", &a), ("budget 50%", &b)]);
        assert!(lines[0].contains("budget 10%") && lines[0].contains("budget 50%"));
        let cost = lines
            .iter()
            .find(|line| line.starts_with("cost at the end"))
            .expect("a cost row");
        assert!(
            cost.contains("$1.5000/h") && cost.contains("$0.7500/h"),
            "{cost}"
        );
        let started = lines
            .iter()
            .find(|line| line.starts_with("disruptions started"))
            .expect("a disruptions row");
        assert!(
            started.contains("Drifted 1") && started.contains("none"),
            "{started}"
        );
        let widths: BTreeSet<usize> = lines
            .iter()
            .map(|line| line.find("budget 50%").unwrap_or(0))
            .collect();
        assert!(!widths.is_empty());
    }
}
