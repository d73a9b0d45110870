use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::report::{FinalState, Stats, TimelineEvent};
use crate::series::Series;

fn points(values: &[(f64, f64)]) -> Vec<Point> {
    values.iter().map(|&(t, v)| Point(t, Some(v))).collect()
}

fn event(t: f64, type_: &str, node_claim: &str) -> TimelineEvent {
    TimelineEvent {
        t,
        type_: type_.to_owned(),
        fields: BTreeMap::from([("nodeClaim".to_owned(), json!(node_claim))]),
    }
}

/// A small roll: two nodes move from ami-old to ami-new under a budget of 1.
fn report(scenario: &str) -> Report {
    let series = Series {
        resolution: 60.0,
        nodes_by_image: BTreeMap::from([
            (
                "ami-old".to_owned(),
                points(&[(0.0, 2.0), (600.0, 1.0), (900.0, 0.0)]),
            ),
            ("ami-new".to_owned(), points(&[(540.0, 1.0), (840.0, 2.0)])),
        ]),
        nodes_by_capacity_type: BTreeMap::from([
            ("on-demand".to_owned(), points(&[(0.0, 1.0)])),
            (
                "spot".to_owned(),
                points(&[(0.0, 1.0), (540.0, 2.0), (600.0, 1.0)]),
            ),
        ]),
        nodes_by_node_pool: BTreeMap::from([
            ("general".to_owned(), points(&[(0.0, 2.0)])),
            ("batch".to_owned(), points(&[(0.0, 0.0)])),
        ]),
        cost_per_hour: points(&[(0.0, 0.192), (540.0, 0.288), (900.0, 0.192)]),
        pending_pods: points(&[(0.0, 0.0), (600.0, 3.0), (660.0, 0.0)]),
        disrupting_by_node_pool: BTreeMap::from([(
            "general".to_owned(),
            points(&[(0.0, 0.0), (480.0, 1.0), (900.0, 0.0)]),
        )]),
        disruption_budget_by_node_pool: BTreeMap::from([(
            "general".to_owned(),
            vec![Point(0.0, Some(1.0)), Point(1200.0, None)],
        )]),
    };
    Report {
        scenario: scenario.to_owned(),
        seed: 7,
        end: 1800,
        timeline: vec![
            event(300.0, "NodeClaimDrifted", "general-a"),
            event(300.0, "NodeClaimDrifted", "general-b"),
            event(480.0, "DisruptionStarted", "general-a"),
            event(700.0, "PluginUnavailable", "general-b"),
            event(700.0, "PluginUnavailable", "general-b"),
            event(700.0, "PluginUnavailable", "general-b"),
            event(880.0, "InstanceTerminated", "general-a"),
        ],
        final_state: FinalState::default(),
        stats: Stats {
            node_claims_created: 2,
            pdb_violations: 0,
            max_disrupting_by_node_pool: BTreeMap::from([("general".to_owned(), 1)]),
            cost_per_hour_at_end: 0.192,
            ..Stats::default()
        },
        series,
    }
}

/// Every text the SVG shows, checked to parse as XML.
fn texts(svg: &str) -> Vec<String> {
    let document = roxmltree::Document::parse(svg).unwrap();
    assert_eq!(document.root_element().tag_name().name(), "svg");
    document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .filter_map(|node| node.text())
        .map(|text| text.trim().to_owned())
        .collect()
}

fn contains(texts: &[String], wanted: &str) -> bool {
    texts.iter().any(|text| text.contains(wanted))
}

#[test]
fn one_run_draws_every_panel_with_its_legend() {
    let report = report("new-ami");
    let svg = svg(&[("new-ami", &report)]).unwrap();
    let texts = texts(&svg);
    for wanted in [
        NODES_BY_IMAGE,
        NODES_BY_CAPACITY_TYPE,
        NODES_BY_NODE_POOL,
        COST_PER_HOUR,
        PENDING_PODS,
        DISRUPTING,
        EVENTS,
        "ami-old",
        "ami-new",
        "on-demand",
        "spot",
        "batch",
        "general disrupting",
        "general budget (Drifted)",
        "NodeClaimDrifted (2)",
        "DisruptionStarted (1)",
        "InstanceTerminated (1)",
        "core/plugin faults (3)",
        "new-ami: seed 7, 0:30 of virtual time",
    ] {
        assert!(contains(&texts, wanted), "{wanted:?} not in {texts:?}");
    }
    // The time axis reads h:mm, at round times.
    for tick in ["0:00", "0:05", "0:10", "0:30"] {
        assert!(contains(&texts, tick), "{tick} not in {texts:?}");
    }
    // A row without events is left out.
    assert!(!contains(&texts, "NodeUnhealthy"), "{texts:?}");
}

#[test]
fn the_node_pool_panel_shows_only_with_several_node_pools() {
    let mut report = report("one-pool");
    report.series.nodes_by_node_pool.remove("batch");
    let texts = texts(&svg(&[("one-pool", &report)]).unwrap());
    assert!(!contains(&texts, NODES_BY_NODE_POOL), "{texts:?}");
    assert!(contains(&texts, NODES_BY_IMAGE), "{texts:?}");
}

#[test]
fn two_runs_are_overlaid_with_both_names_in_the_legends() {
    let first = report("new-ami");
    let mut second = report("new-ami");
    second
        .series
        .nodes_by_image
        .insert("ami-other".to_owned(), points(&[(0.0, 1.0)]));
    let texts = texts(&svg(&[("before", &first), ("after", &second)]).unwrap());
    for wanted in [
        "before",
        "after",
        "before: ami-old",
        "after: ami-old",
        "after: ami-other",
        "before: spot",
        "after: on-demand",
        "before: general disrupting",
        "after: general budget (Drifted)",
        "NodeClaimDrifted (2 / 2)",
    ] {
        assert!(contains(&texts, wanted), "{wanted:?} not in {texts:?}");
    }
    assert!(!contains(&texts, "before: ami-other"), "{texts:?}");
}

#[test]
fn no_run_is_an_error() {
    assert!(matches!(svg(&[]), Err(PlotError::NoRuns)));
    assert!(matches!(html(&[]), Err(PlotError::NoRuns)));
}

#[test]
fn a_legend_longer_than_its_panel_says_how_many_it_leaves_out() {
    let mut report = report("many-images");
    for index in 0..40 {
        report
            .series
            .nodes_by_image
            .insert(format!("ami-{index:03}"), points(&[(0.0, 1.0)]));
    }
    let texts = texts(&svg(&[("many", &report)]).unwrap());
    assert!(contains(&texts, "… and 32 more"), "{texts:?}");
    // The top of the stack first, as drawn.
    assert!(contains(&texts, "ami-old"), "{texts:?}");
}

#[test]
fn many_events_at_one_time_draw_one_tick() {
    let mut report = report("storm");
    report.timeline = (0..5000)
        .map(|i| event(600.0, "InstanceTerminated", &format!("c-{i}")))
        .collect();
    let one = svg(&[("storm", &report)]).unwrap();
    report.timeline.truncate(1);
    let single = svg(&[("storm", &report)]).unwrap();
    // Only the row's count differs.
    assert!(
        one.len().abs_diff(single.len()) < 10,
        "{} vs {}",
        one.len(),
        single.len()
    );
}

#[test]
fn stacked_layers_add_up_over_every_change() {
    let group = BTreeMap::from([
        ("a".to_owned(), points(&[(0.0, 2.0), (60.0, 1.0)])),
        ("b".to_owned(), points(&[(30.0, 3.0)])),
    ]);
    let layers = stacked(&group);
    assert_eq!(layers[0].0, "a");
    assert_eq!(layers[0].1, points(&[(0.0, 2.0), (30.0, 2.0), (60.0, 1.0)]));
    assert_eq!(layers[1].1, points(&[(0.0, 2.0), (30.0, 5.0), (60.0, 4.0)]));
}

#[test]
fn a_null_value_leaves_a_gap() {
    let segments = step_segments(
        &[
            Point(0.0, Some(1.0)),
            Point(60.0, None),
            Point(120.0, Some(2.0)),
        ],
        180.0,
    );
    assert_eq!(
        segments,
        vec![
            vec![(0.0, 1.0), (60.0, 1.0)],
            vec![(120.0, 2.0), (180.0, 2.0)],
        ]
    );
}

/// Every `src` and `href` attribute value in the page.
fn references(page: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attribute in ["src=", "href="] {
        for (at, _) in page.match_indices(attribute) {
            let rest = &page[at + attribute.len()..];
            let value: String = rest
                .trim_start_matches(['"', '\''])
                .chars()
                .take_while(|c| !matches!(c, '"' | '\'' | ' ' | '>'))
                .collect();
            found.push(value);
        }
    }
    found
}

#[test]
fn the_page_is_self_contained_with_the_picture_the_stats_and_the_timeline() {
    let report = report("new-ami <&>");
    let page = html(&[("run", &report)]).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains("<h1>new-ami &lt;&amp;&gt;</h1>"), "{page}");
    assert!(page.contains("<svg"), "{page}");
    assert!(page.contains("</svg>"), "{page}");
    for stat in [
        "nodeClaimsCreated",
        "pdbViolations",
        "maxDisruptingByNodePool",
        "costPerHourAtEnd",
        "general: 1",
        "0.192",
    ] {
        assert!(page.contains(stat), "{stat} not in the page");
    }
    let timeline = &page[page.find("<h2>Timeline").unwrap()..];
    // Three identical PluginUnavailable: listed once, then counted.
    assert_eq!(
        timeline.matches("PluginUnavailable").count(),
        2,
        "{timeline}"
    );
    assert!(
        timeline.contains("0:11:40  PluginUnavailable") && timeline.contains("2 more times)"),
        "{timeline}"
    );
    // Two drifts of different NodeClaims are two.
    assert_eq!(
        timeline.matches("NodeClaimDrifted").count(),
        2,
        "{timeline}"
    );
    let references = references(&page);
    assert!(
        references.iter().all(|r| !r.starts_with("http://")
            && !r.starts_with("https://")
            && !r.starts_with("//")),
        "{references:?}"
    );
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("<link"), "{page}");
    assert!(!page.contains("url("), "{page}");
}

#[test]
fn the_page_compares_runs_side_by_side() {
    let first = report("new-ami");
    let mut second = report("new-ami");
    second.stats.pdb_violations = 4;
    let page = html(&[("before", &first), ("after", &second)]).unwrap();
    assert!(page.contains("<th>before</th><th>after</th>"), "{page}");
    assert!(
        page.contains("<tr><th>pdbViolations</th><td>0</td><td>4</td></tr>"),
        "{page}"
    );
    assert!(page.contains("Timeline: before"), "{page}");
    assert!(page.contains("Timeline: after"), "{page}");
}
