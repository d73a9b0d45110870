//! Pictures of runs: the report's [`series`](crate::series) and notable timeline events as one
//! SVG, panels one under another on a shared axis of virtual time (`h:mm`), and an HTML page
//! around it ([`html`]).
//!
//! Panels, top to bottom: nodes by image, nodes by capacity type, nodes by NodePool (only when
//! some run has more than one), cost per hour, pending pods, disrupting nodes per NodePool
//! against its `Drifted` budget (dashed; a gap where no budget applies), and the notable
//! events as ticks, one row per kind.
//!
//! One run: the node panels are stacked areas, one colour per image (capacity type,
//! NodePool). Several runs overlaid: stacking two runs' areas would hide one under the other,
//! so every panel draws lines instead, one per run and key, each pair its own colour and
//! labelled `run: key`; single-valued panels and the event ticks take one colour per run.
//! Earlier runs are drawn first and wider, so where two runs hold the same value both show.
//!
//! The SVG's size is bounded by the series' (one point per minute at most) and by the ticks,
//! drawn once per pixel column, row and run however many events fall there.

mod html;

use std::collections::{BTreeMap, BTreeSet};

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub use html::html;

use crate::report::Report;
use crate::series::{Point, value_at};

/// Why a picture could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No run was given.
    #[error("nothing to plot: no run given")]
    NoRuns,
    /// plotters failed drawing a panel.
    #[error("cannot draw the panel {panel:?}: {message}")]
    Draw {
        /// The panel's title.
        panel: String,
        /// What plotters said.
        message: String,
    },
}

/// The panels' titles, as they appear in the SVG.
pub const NODES_BY_IMAGE: &str = "Nodes by image";
/// The capacity type panel's title.
pub const NODES_BY_CAPACITY_TYPE: &str = "Nodes by capacity type";
/// The NodePool panel's title (drawn when a run has more than one NodePool).
pub const NODES_BY_NODE_POOL: &str = "Nodes by NodePool";
/// The cost panel's title.
pub const COST_PER_HOUR: &str = "Cost per hour ($)";
/// The pending pods panel's title.
pub const PENDING_PODS: &str = "Pending pods";
/// The disruption panel's title.
pub const DISRUPTING: &str = "Disrupting nodes per NodePool (dashed: its Drifted budget)";
/// The events panel's title.
pub const EVENTS: &str = "Notable events";

/// The events panel's rows: a label and the timeline types it shows. The last three always
/// show; the others when some run has one.
pub const EVENT_ROWS: [(&str, &[&str]); 7] = [
    (
        "core/plugin faults",
        &["CoreRestarted", "PluginUnavailable", "PluginAvailable"],
    ),
    ("InterruptionReceived", &["InterruptionReceived"]),
    ("NodeUnhealthy", &["NodeUnhealthy"]),
    ("DisruptionAbandoned", &["DisruptionAbandoned"]),
    ("NodeClaimDrifted", &["NodeClaimDrifted"]),
    ("DisruptionStarted", &["DisruptionStarted"]),
    ("InstanceTerminated", &["InstanceTerminated"]),
];
const ALWAYS_SHOWN_ROWS: usize = 3;

const WIDTH: u32 = 1280;
const LEGEND_WIDTH: u32 = 300;
const TITLE_HEIGHT: u32 = 36;
const PANEL_HEIGHT: u32 = 220;
const EVENTS_BASE_HEIGHT: u32 = 70;
const EVENT_ROW_HEIGHT: u32 = 26;
const LEGEND_LINE: i32 = 16;
const LEGEND_TOP: i32 = 30;
const FONT: &str = "sans-serif";

/// Tableau's ten colours: distinct, and readable on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// A run's stroke width: the earlier runs, drawn first, wider, so that a later run drawn on
/// the same values leaves them showing on both sides.
fn width(run: usize, runs: usize) -> u32 {
    let later = runs.saturating_sub(run + 1);
    2 + 2 * u32::try_from(later).unwrap_or(0).min(4)
}

fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Round times for the time axis, at most about a dozen.
fn time_ticks(end: f64) -> Vec<f64> {
    const STEPS: [f64; 11] = [
        60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0,
    ];
    let step = STEPS
        .iter()
        .copied()
        .find(|step| end / step <= 12.0)
        .unwrap_or_else(|| (end / 12.0 / 86400.0).ceil() * 86400.0);
    (0..)
        .map(|index| f64::from(index) * step)
        .take_while(|t| *t <= end)
        .collect()
}

/// Virtual time as `h:mm`.
fn clock(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    format!("{}:{:02}", seconds / 3600, seconds / 60 % 60)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Area,
    Line,
    Dashed,
}

/// One thing drawn in a panel, with its legend entry.
#[derive(Debug, Clone)]
struct Trace {
    label: String,
    colour: RGBColor,
    style: Style,
    /// Its stroke width.
    width: u32,
    /// Polylines (a gap between two where the series is null).
    segments: Vec<Vec<(f64, f64)>>,
}

#[derive(Debug, Clone)]
struct Panel {
    title: &'static str,
    money: bool,
    traces: Vec<Trace>,
}

/// A step function's polylines: each value held until the next point (or `end`), nulls left
/// as gaps.
fn step_segments(points: &[Point], end: f64) -> Vec<Vec<(f64, f64)>> {
    let mut segments = Vec::new();
    let mut current = Vec::new();
    for (index, point) in points.iter().enumerate() {
        let until = points
            .get(index + 1)
            .map_or(end, |next| next.0)
            .max(point.0);
        match point.1 {
            Some(value) => {
                current.push((point.0, value));
                current.push((until, value));
            }
            None if !current.is_empty() => segments.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    segments
}

/// A family's keys stacked: each key's upper edge (the sum of it and the keys before it) as a
/// step function over every time any key changes.
fn stacked(group: &BTreeMap<String, Vec<Point>>) -> Vec<(String, Vec<Point>)> {
    let mut times: Vec<f64> = group.values().flatten().map(|point| point.0).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut below = vec![0.0; times.len()];
    group
        .iter()
        .map(|(key, points)| {
            let edge = times
                .iter()
                .zip(below.iter_mut())
                .map(|(&t, sum)| {
                    *sum += value_at(points, t).unwrap_or(0.0);
                    Point(t, Some(*sum))
                })
                .collect();
            (key.clone(), edge)
        })
        .collect()
}

/// Every key of a family over all runs, in order, for one colour per key.
fn keys<'a>(
    runs: &[(&str, &'a Report)],
    family: impl Fn(&'a Report) -> &'a BTreeMap<String, Vec<Point>>,
) -> Vec<&'a str> {
    let keys: BTreeSet<&str> = runs
        .iter()
        .flat_map(|(_, report)| family(report).keys().map(String::as_str))
        .collect();
    keys.into_iter().collect()
}

/// A panel of a family of counts: stacked areas for one run, lines per run and key for several.
fn family_panel<'a>(
    title: &'static str,
    runs: &[(&str, &'a Report)],
    end: f64,
    family: impl Fn(&'a Report) -> &'a BTreeMap<String, Vec<Point>> + Copy,
) -> Panel {
    let mut traces = Vec::new();
    if let [(_, report)] = runs {
        let layers = stacked(family(report));
        // The top layer first: each is filled down to zero, the ones below drawn over it.
        for (index, (key, edge)) in layers.iter().enumerate().rev() {
            traces.push(Trace {
                label: key.clone(),
                colour: colour(index),
                style: Style::Area,
                width: 1,
                segments: step_segments(edge, end),
            });
        }
    } else {
        let keys = keys(runs, family);
        let mut pair = 0;
        for (run_index, (run, report)) in runs.iter().enumerate() {
            for key in &keys {
                if let Some(points) = family(report).get(*key) {
                    traces.push(Trace {
                        label: format!("{run}: {key}"),
                        colour: colour(pair),
                        style: Style::Line,
                        width: width(run_index, runs.len()),
                        segments: step_segments(points, end),
                    });
                    pair += 1;
                }
            }
        }
    }
    Panel {
        title,
        money: false,
        traces,
    }
}

/// A panel of one value per run.
fn value_panel<'a>(
    title: &'static str,
    money: bool,
    runs: &[(&str, &'a Report)],
    end: f64,
    value: impl Fn(&'a Report) -> &'a [Point],
) -> Panel {
    let traces = runs
        .iter()
        .enumerate()
        .map(|(index, (run, report))| Trace {
            label: (*run).to_owned(),
            colour: colour(index),
            style: Style::Line,
            width: width(index, runs.len()),
            segments: step_segments(value(report), end),
        })
        .collect();
    Panel {
        title,
        money,
        traces,
    }
}

/// Disrupting nodes per NodePool, and each NodePool's budget dashed in the same colour.
fn disruption_panel(runs: &[(&str, &Report)], end: f64) -> Panel {
    let pools = keys(runs, |report| &report.series.disrupting_by_node_pool);
    let several = runs.len() > 1;
    let mut traces = Vec::new();
    let mut pair = 0;
    for (run_index, (run, report)) in runs.iter().enumerate() {
        let series = &report.series;
        let width = width(run_index, runs.len());
        for pool in &pools {
            let name = if several {
                format!("{run}: {pool}")
            } else {
                (*pool).to_owned()
            };
            let disrupting = series.disrupting_by_node_pool.get(*pool);
            let budget = series.disruption_budget_by_node_pool.get(*pool);
            if disrupting.is_none() && budget.is_none() {
                continue;
            }
            if let Some(points) = disrupting {
                traces.push(Trace {
                    label: format!("{name} disrupting"),
                    colour: colour(pair),
                    style: Style::Line,
                    width,
                    segments: step_segments(points, end),
                });
            }
            if let Some(points) = budget {
                traces.push(Trace {
                    label: format!("{name} budget (Drifted)"),
                    colour: colour(pair),
                    style: Style::Dashed,
                    width,
                    segments: step_segments(points, end),
                });
            }
            pair += 1;
        }
    }
    Panel {
        title: DISRUPTING,
        money: false,
        traces,
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn failed<E: std::fmt::Display>(panel: &str) -> impl Fn(E) -> PlotError + '_ {
    move |error| PlotError::Draw {
        panel: panel.to_owned(),
        message: error.to_string(),
    }
}

/// The runs as one SVG document: each run a label (its legend name) and its report. The time
/// axis runs to the longest run's end.
pub fn svg(runs: &[(&str, &Report)]) -> Result<String, PlotError> {
    if runs.is_empty() {
        return Err(PlotError::NoRuns);
    }
    let end = runs
        .iter()
        .map(|(_, report)| report.end as f64)
        .fold(60.0, f64::max);
    let mut panels = vec![
        family_panel(NODES_BY_IMAGE, runs, end, |r| &r.series.nodes_by_image),
        family_panel(NODES_BY_CAPACITY_TYPE, runs, end, |r| {
            &r.series.nodes_by_capacity_type
        }),
    ];
    if runs
        .iter()
        .any(|(_, report)| report.series.nodes_by_node_pool.len() > 1)
    {
        panels.push(family_panel(NODES_BY_NODE_POOL, runs, end, |r| {
            &r.series.nodes_by_node_pool
        }));
    }
    panels.push(value_panel(COST_PER_HOUR, true, runs, end, |r| {
        &r.series.cost_per_hour
    }));
    panels.push(value_panel(PENDING_PODS, false, runs, end, |r| {
        &r.series.pending_pods
    }));
    panels.push(disruption_panel(runs, end));
    let rows = event_rows(runs);
    let events_height = EVENTS_BASE_HEIGHT + EVENT_ROW_HEIGHT * rows.len() as u32;
    let height = TITLE_HEIGHT + PANEL_HEIGHT * panels.len() as u32 + events_height;

    let mut document = String::new();
    {
        let root = SVGBackend::with_string(&mut document, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(failed("background"))?;
        let (title_area, mut rest) = root.split_vertically(TITLE_HEIGHT);
        draw_title(&title_area, runs)?;
        for panel in &panels {
            let (area, below) = rest.split_vertically(PANEL_HEIGHT);
            draw_panel(&area, panel, end)?;
            rest = below;
        }
        draw_events(&rest, runs, &rows, end)?;
        root.present().map_err(failed("document"))?;
    }
    Ok(document)
}

fn draw_title(area: &Area<'_>, runs: &[(&str, &Report)]) -> Result<(), PlotError> {
    let text = match runs {
        [(_, report)] => format!(
            "{}: seed {}, {} of virtual time",
            report.scenario,
            report.seed,
            clock(report.end as f64)
        ),
        _ => "Runs compared:".to_owned(),
    };
    area.draw(&Text::new(text, (12, 10), (FONT, 18).into_font()))
        .map_err(failed("title"))?;
    if runs.len() > 1 {
        let mut x = 160;
        for (index, (run, _)) in runs.iter().enumerate() {
            area.draw(&Rectangle::new(
                [(x, 12), (x + 14, 26)],
                colour(index).filled(),
            ))
            .map_err(failed("title"))?;
            area.draw(&Text::new(
                (*run).to_owned(),
                (x + 20, 12),
                (FONT, 14).into_font(),
            ))
            .map_err(failed("title"))?;
            x += 40 + 8 * run.chars().count() as i32;
        }
    }
    Ok(())
}

fn draw_panel(area: &Area<'_>, panel: &Panel, end: f64) -> Result<(), PlotError> {
    let error = failed(panel.title);
    let (plot_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let highest = panel
        .traces
        .iter()
        .flat_map(|trace| trace.segments.iter().flatten())
        .map(|point| point.1)
        .fold(0.0, f64::max);
    let y_max = if highest > 0.0 { highest * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(panel.title, (FONT, 16))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..y_max)
        .map_err(&error)?;
    let money = panel.money;
    let y_label = move |y: &f64| {
        if money {
            format!("{y:.2}")
        } else if y.fract().abs() > 1e-9 {
            format!("{y:.1}")
        } else {
            format!("{y:.0}")
        }
    };
    chart
        .configure_mesh()
        .x_labels(0)
        .disable_x_mesh()
        .y_labels(5)
        .y_label_formatter(&y_label)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(&error)?;
    draw_time_axis(&plot_area, &mut chart, end, y_max, panel.title)?;
    for trace in &panel.traces {
        for segment in &trace.segments {
            match trace.style {
                Style::Area => chart
                    .draw_series(
                        AreaSeries::new(segment.iter().copied(), 0.0, trace.colour.filled())
                            .border_style(trace.colour.stroke_width(1)),
                    )
                    .map(|_| ()),
                Style::Line => chart
                    .draw_series(LineSeries::new(
                        segment.iter().copied(),
                        trace.colour.stroke_width(trace.width),
                    ))
                    .map(|_| ()),
                Style::Dashed => chart
                    .draw_series(DashedLineSeries::new(
                        segment.iter().copied(),
                        6,
                        4,
                        trace.colour.stroke_width(trace.width),
                    ))
                    .map(|_| ()),
            }
            .map_err(&error)?;
        }
    }
    let entries: Vec<(&str, RGBColor, Style)> = panel
        .traces
        .iter()
        .map(|trace| (trace.label.as_str(), trace.colour, trace.style))
        .collect();
    draw_legend(&legend_area, &entries, panel.title)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The time axis at round times (plotters would pick round numbers of seconds): a light
/// vertical line and an `h:mm` label under the plot for each.
fn draw_time_axis(
    area: &Area<'_>,
    chart: &mut Chart<'_, '_>,
    end: f64,
    top: f64,
    panel: &str,
) -> Result<(), PlotError> {
    let error = failed(panel);
    let ticks = time_ticks(end);
    let grid = RGBColor(0xdd, 0xdd, 0xdd);
    chart
        .draw_series(
            ticks
                .iter()
                .map(|&t| PathElement::new(vec![(t, 0.0), (t, top)], grid.stroke_width(1))),
        )
        .map_err(&error)?;
    let (base_x, base_y) = area.get_base_pixel();
    let style = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for &t in &ticks {
        let (x, y) = chart.backend_coord(&(t, 0.0));
        area.draw(&Text::new(
            clock(t),
            (x - base_x, y - base_y + 6),
            style.clone(),
        ))
        .map_err(&error)?;
    }
    Ok(())
}

/// The legend beside a panel: as many entries as fit, then how many more there are.
fn draw_legend(
    area: &Area<'_>,
    entries: &[(&str, RGBColor, Style)],
    panel: &str,
) -> Result<(), PlotError> {
    let error = failed(panel);
    let room = (area.dim_in_pixel().1 as i32 - LEGEND_TOP) / LEGEND_LINE;
    let room = usize::try_from(room).unwrap_or(0).max(1);
    let shown = if entries.len() > room {
        room - 1
    } else {
        entries.len()
    };
    let font = (FONT, 12).into_font();
    for (index, (label, colour, style)) in entries.iter().take(shown).enumerate() {
        let y = LEGEND_TOP + LEGEND_LINE * index as i32;
        let middle = y + 6;
        match style {
            Style::Area => area
                .draw(&Rectangle::new(
                    [(6, middle - 5), (26, middle + 5)],
                    colour.filled(),
                ))
                .map_err(&error)?,
            Style::Line => area
                .draw(&PathElement::new(
                    vec![(6, middle), (26, middle)],
                    colour.stroke_width(2),
                ))
                .map_err(&error)?,
            Style::Dashed => {
                for x in [6, 18] {
                    area.draw(&PathElement::new(
                        vec![(x, middle), (x + 6, middle)],
                        colour.stroke_width(2),
                    ))
                    .map_err(&error)?;
                }
            }
        }
        area.draw(&Text::new((*label).to_owned(), (32, y), font.clone()))
            .map_err(&error)?;
    }
    if shown < entries.len() {
        let y = LEGEND_TOP + LEGEND_LINE * shown as i32;
        let more = format!("… and {} more", entries.len() - shown);
        area.draw(&Text::new(more, (32, y), font)).map_err(&error)?;
    }
    Ok(())
}

/// The events panel's rows: the always-shown ones and those some run has an event of.
fn event_rows(runs: &[(&str, &Report)]) -> Vec<(&'static str, &'static [&'static str])> {
    let first_always = EVENT_ROWS.len() - ALWAYS_SHOWN_ROWS;
    EVENT_ROWS
        .iter()
        .enumerate()
        .filter(|(index, (_, types))| {
            *index >= first_always
                || runs.iter().any(|(_, report)| {
                    report
                        .timeline
                        .iter()
                        .any(|event| types.contains(&event.type_.as_str()))
                })
        })
        .map(|(_, row)| *row)
        .collect()
}

fn draw_events(
    area: &Area<'_>,
    runs: &[(&str, &Report)],
    rows: &[(&'static str, &'static [&'static str])],
    end: f64,
) -> Result<(), PlotError> {
    let error = failed(EVENTS);
    let (plot_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let row_count = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(EVENTS, (FONT, 16))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..row_count)
        .map_err(&error)?;
    chart
        .configure_mesh()
        .x_labels(0)
        .disable_x_mesh()
        .y_labels(0)
        .disable_y_mesh()
        .draw()
        .map_err(&error)?;
    draw_time_axis(&plot_area, &mut chart, end, row_count, EVENTS)?;
    let width = f64::from(chart.plotting_area().dim_in_pixel().0.max(1));
    let band = 0.7 / runs.len().max(1) as f64;
    let mut counts: Vec<Vec<usize>> = vec![vec![0; runs.len()]; rows.len()];
    for (run_index, (_, report)) in runs.iter().enumerate() {
        // One tick per pixel column: more would draw the same line again.
        let mut columns: BTreeSet<(usize, i64)> = BTreeSet::new();
        for event in &report.timeline {
            let Some(row) = rows
                .iter()
                .position(|(_, types)| types.contains(&event.type_.as_str()))
            else {
                continue;
            };
            if let Some(count) = counts.get_mut(row).and_then(|c| c.get_mut(run_index)) {
                *count += 1;
            }
            columns.insert((row, (event.t / end * width).round() as i64));
        }
        let colour = colour(run_index);
        chart
            .draw_series(columns.into_iter().map(|(row, column)| {
                let t = column as f64 / width * end;
                let base = row_count - 1.0 - row as f64 + 0.15 + band * run_index as f64;
                PathElement::new(vec![(t, base), (t, base + band)], colour.stroke_width(2))
            }))
            .map_err(&error)?;
    }
    // Each row's name and counts beside it, at its height.
    let (_, legend_y) = legend_area.get_base_pixel();
    let font = (FONT, 12).into_font();
    for (row, (label, _)) in rows.iter().enumerate() {
        let centre = row_count - 0.5 - row as f64;
        let (_, y) = chart.backend_coord(&(0.0, centre));
        let counted: Vec<String> = counts
            .get(row)
            .map(|c| c.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let text = format!("{label} ({})", counted.join(" / "));
        legend_area
            .draw(&Text::new(text, (8, y - legend_y - 6), font.clone()))
            .map_err(&error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
