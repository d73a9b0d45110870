//! One self-contained HTML page of runs: no script, stylesheet, font or image fetched from
//! anywhere. The scenario, the summary stats in a table (a column per run), the SVG inline,
//! and each run's timeline as a list, folded as `simulate` prints it (`crate::fold`): an event
//! identical to one listed before is counted, not listed again.

use std::fmt::Write as _;

use serde_json::Value;

use super::{PlotError, svg};
use crate::fold::Folder;
use crate::report::{Report, clock};

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin-bottom:1.5em}\
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left;vertical-align:top}\
th{background:#f4f4f4}\
ol.timeline{font-family:monospace;font-size:12px;list-style:none;padding-left:0}\
ol.timeline li{white-space:pre}\
.count{color:#a33}\
.plot{overflow-x:auto}";

/// Text for HTML element content and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A stat's value as the table shows it: maps as `key: value` pairs, `null` as `none`.
fn stat_text(value: &Value) -> String {
    match value {
        Value::Null => "none".to_owned(),
        Value::String(text) => text.clone(),
        Value::Object(map) if map.is_empty() => "-".to_owned(),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}: {}", stat_text(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// The runs as one HTML page, each run a label and its report.
pub fn html(runs: &[(&str, &Report)]) -> Result<String, PlotError> {
    let picture = svg(runs)?;
    let mut names: Vec<&str> = runs
        .iter()
        .map(|(_, report)| report.scenario.as_str())
        .collect();
    names.dedup();
    let title = escape(&names.join(", "));
    let mut page = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>simulate: {title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>{title}</h1>\n"
    );
    page.push_str("<h2>Summary</h2>\n<table class=\"stats\">\n<tr><th></th>");
    for (run, _) in runs {
        let _ = write!(page, "<th>{}</th>", escape(run));
    }
    page.push_str("</tr>\n");
    let stats: Vec<serde_json::Map<String, Value>> = runs
        .iter()
        .map(|(_, report)| match serde_json::to_value(&report.stats) {
            Ok(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        })
        .collect();
    let mut rows: Vec<(String, Vec<String>)> = vec![
        (
            "seed".to_owned(),
            runs.iter().map(|(_, r)| r.seed.to_string()).collect(),
        ),
        (
            "virtual time".to_owned(),
            runs.iter()
                .map(|(_, r)| clock(r.end as f64).trim_start().to_owned())
                .collect(),
        ),
        (
            "timeline events".to_owned(),
            runs.iter()
                .map(|(_, r)| r.timeline.len().to_string())
                .collect(),
        ),
        (
            "nodes at the end".to_owned(),
            runs.iter()
                .map(|(_, r)| r.final_state.nodes.len().to_string())
                .collect(),
        ),
    ];
    let keys = stats
        .first()
        .map(|map| map.keys().cloned().collect::<Vec<_>>());
    for key in keys.unwrap_or_default() {
        let values = stats
            .iter()
            .map(|map| map.get(&key).map_or_else(|| "-".to_owned(), stat_text))
            .collect();
        rows.push((key, values));
    }
    for (name, values) in rows {
        let _ = write!(page, "<tr><th>{}</th>", escape(&name));
        for value in values {
            let _ = write!(page, "<td>{}</td>", escape(&value));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n<h2>Over time</h2>\n<div class=\"plot\">\n");
    // plotters writes no XML declaration; one would be out of place inside HTML.
    let picture = picture
        .strip_prefix("<?xml")
        .and_then(|rest| rest.split_once("?>").map(|(_, svg)| svg))
        .unwrap_or(&picture);
    page.push_str(picture.trim());
    page.push_str("\n</div>\n");
    for (run, report) in runs {
        let _ = write!(
            page,
            "<h2>Timeline: {} ({} events)</h2>\n<ol class=\"timeline\">\n",
            escape(run),
            report.timeline.len()
        );
        // Folded as the printed timeline is (`crate::fold`): the JSON report keeps them all.
        let mut folder = Folder::new();
        let mut lines: Vec<String> = report
            .timeline
            .iter()
            .flat_map(|event| folder.push(event))
            .collect();
        lines.extend(folder.finish());
        for line in lines {
            let _ = writeln!(page, "<li>{}</li>", escape(line.trim_start()));
        }
        page.push_str("</ol>\n");
    }
    page.push_str("</body>\n</html>\n");
    Ok(page)
}
