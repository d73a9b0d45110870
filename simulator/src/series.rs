//! The report's `series`: the fleet's figures over virtual time, for pictures
//! ([`crate::plot`]) and for tools that want more than the end state.
//!
//! Each series is a step function stored as `[t, value]` points: the value holds from its
//! point's `t` until the next point. A point is stored only when the value changed, and at most
//! one per [`RESOLUTION`] of virtual time, so a six-hour roll of hundreds of nodes keeps a few
//! hundred points per series, whatever the number of changes. Within one such slice a
//! [`Aggregate::Last`] series keeps the last value it held (node counts, cost, budgets: what
//! the fleet settled on) and an [`Aggregate::Max`] series the highest (pending pods, disrupting
//! nodes: a peak must not vanish between two samples); when the slice ended on another value
//! than the one kept, that value is stored at the start of the next slice.

use std::collections::BTreeMap;

use serde::Serialize;

/// The width of a slice of virtual time that keeps at most one point per series, in seconds.
pub const RESOLUTION: f64 = 60.0;

/// A point of a series: seconds of virtual time since the start, and the value from then on
/// (`null` only for a budget that sets no limit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point(pub f64, pub Option<f64>);

/// The series of a run, by what they count.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// [`RESOLUTION`]: the shortest time between two points of one series, in seconds.
    pub resolution: f64,
    /// Nodes (registered `Node` objects, those being deleted included) by the image their
    /// instance booted (`(unknown)` when no instance is found for the Node).
    pub nodes_by_image: BTreeMap<String, Vec<Point>>,
    /// Nodes by their `karpenter.sh/capacity-type` label (the instance's when the label is
    /// missing).
    pub nodes_by_capacity_type: BTreeMap<String, Vec<Point>>,
    /// Nodes by their `karpenter.sh/nodepool` label (`(none)` without one).
    pub nodes_by_node_pool: BTreeMap<String, Vec<Point>>,
    /// What the pending and running instances cost per hour.
    pub cost_per_hour: Vec<Point>,
    /// Pods waiting to be scheduled (highest within a slice).
    pub pending_pods: Vec<Point>,
    /// Nodes of each NodePool disrupting, as `stats.maxDisruptingByNodePool` counts them
    /// (highest within a slice).
    pub disrupting_by_node_pool: BTreeMap<String, Vec<Point>>,
    /// How many of each NodePool's nodes its disruption budgets let be disrupting at once for
    /// the `Drifted` reason (core's `disruption::budgets`: the most restrictive active budget
    /// that applies to `Drifted`, scaled to the NodePool's nodes; `0` while a budget is
    /// invalid, `null` when no budget applies). What is left to start is this less the
    /// disrupting nodes.
    pub disruption_budget_by_node_pool: BTreeMap<String, Vec<Point>>,
}

/// How a series keeps one value per slice of [`RESOLUTION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// The last value held in the slice.
    Last,
    /// The highest value held in the slice.
    Max,
}

impl Aggregate {
    fn merge(self, kept: Option<f64>, new: Option<f64>) -> Option<f64> {
        match self {
            Self::Last => new,
            // An unlimited (null) value is the highest.
            Self::Max => match (kept, new) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            },
        }
    }
}

fn slice_of(t: f64) -> u64 {
    // Times are seconds since the start, never negative; `as` saturates anyway.
    (t / RESOLUTION).floor() as u64
}

fn slice_start(slice: u64) -> f64 {
    slice as f64 * RESOLUTION
}

/// One series being recorded.
#[derive(Debug, Clone)]
pub struct Track {
    aggregate: Aggregate,
    points: Vec<Point>,
    /// The value observed last.
    current: Option<Option<f64>>,
    /// The slice still open and the point it will store.
    open: Option<(u64, Point)>,
}

impl Track {
    /// An empty series.
    pub fn new(aggregate: Aggregate) -> Self {
        Self {
            aggregate,
            points: Vec::new(),
            current: None,
            open: None,
        }
    }

    /// The series holds `value` from `t` on (times never go back).
    pub fn observe(&mut self, t: f64, value: Option<f64>) {
        if self.current == Some(value) {
            return;
        }
        let previous = self.current.replace(value);
        let slice = slice_of(t);
        if let Some((open_slice, point)) = &mut self.open
            && *open_slice == slice
        {
            point.1 = self.aggregate.merge(point.1, value);
            return;
        }
        let mut point = Point(t, value);
        if let Some((carry_slice, end)) = self.close(previous) {
            if carry_slice == slice {
                // The slice began on the value the last one ended on.
                if self.aggregate == Aggregate::Max {
                    point = Point(slice_start(slice), self.aggregate.merge(end, value));
                }
            } else {
                self.store(Point(slice_start(carry_slice), end));
            }
        }
        self.open = Some((slice, point));
    }

    /// Stores the open slice's point; answers the next slice and the value the open slice
    /// ended on (`end`) when that is not the value stored.
    fn close(&mut self, end: Option<Option<f64>>) -> Option<(u64, Option<f64>)> {
        let (slice, point) = self.open.take()?;
        self.store(point);
        match end {
            Some(end) if end != point.1 => Some((slice + 1, end)),
            _ => None,
        }
    }

    fn store(&mut self, point: Point) {
        if self.points.last().is_some_and(|last| last.1 == point.1) {
            return;
        }
        self.points.push(point);
    }

    /// The points, the open slice closed at `end` (seconds).
    pub fn finish(mut self, end: f64) -> Vec<Point> {
        let current = self.current;
        if let Some((slice, value)) = self.close(current) {
            self.store(Point(slice_start(slice).min(end), value));
        }
        self.points
    }
}

/// A family of series by key (image, capacity type, NodePool): a key seen once is observed at
/// every sample after, at `missing` when absent.
#[derive(Debug, Clone)]
pub struct Group {
    aggregate: Aggregate,
    missing: Option<f64>,
    tracks: BTreeMap<String, Track>,
}

impl Group {
    /// An empty family; keys absent from a sample hold `missing`.
    pub fn new(aggregate: Aggregate, missing: Option<f64>) -> Self {
        Self {
            aggregate,
            missing,
            tracks: BTreeMap::new(),
        }
    }

    /// The values at `t`, by key.
    pub fn observe(&mut self, t: f64, values: &BTreeMap<String, Option<f64>>) {
        for (key, value) in values {
            if !self.tracks.contains_key(key) {
                self.tracks.insert(key.clone(), Track::new(self.aggregate));
            }
            if let Some(track) = self.tracks.get_mut(key) {
                track.observe(t, *value);
            }
        }
        for (key, track) in &mut self.tracks {
            if !values.contains_key(key) {
                track.observe(t, self.missing);
            }
        }
    }

    /// The points by key, each closed at `end`.
    pub fn finish(self, end: f64) -> BTreeMap<String, Vec<Point>> {
        self.tracks
            .into_iter()
            .map(|(key, track)| (key, track.finish(end)))
            .collect()
    }
}

/// Every series of a run, being recorded.
#[derive(Debug, Clone)]
pub struct SeriesRecorder {
    nodes_by_image: Group,
    nodes_by_capacity_type: Group,
    nodes_by_node_pool: Group,
    cost_per_hour: Track,
    pending_pods: Track,
    disrupting_by_node_pool: Group,
    disruption_budget_by_node_pool: Group,
}

impl Default for SeriesRecorder {
    fn default() -> Self {
        Self {
            nodes_by_image: Group::new(Aggregate::Last, Some(0.0)),
            nodes_by_capacity_type: Group::new(Aggregate::Last, Some(0.0)),
            nodes_by_node_pool: Group::new(Aggregate::Last, Some(0.0)),
            cost_per_hour: Track::new(Aggregate::Last),
            pending_pods: Track::new(Aggregate::Max),
            disrupting_by_node_pool: Group::new(Aggregate::Max, Some(0.0)),
            // A NodePool gone has no budget.
            disruption_budget_by_node_pool: Group::new(Aggregate::Last, None),
        }
    }
}

/// The figures of one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Nodes by image.
    pub nodes_by_image: BTreeMap<String, u64>,
    /// Nodes by capacity type.
    pub nodes_by_capacity_type: BTreeMap<String, u64>,
    /// Nodes by NodePool.
    pub nodes_by_node_pool: BTreeMap<String, u64>,
    /// Cost per hour of the live instances.
    pub cost_per_hour: f64,
    /// Pods waiting to be scheduled.
    pub pending_pods: u64,
    /// Disrupting nodes by NodePool (every NodePool present, 0 when none).
    pub disrupting_by_node_pool: BTreeMap<String, u64>,
    /// The `Drifted` budget's limit by NodePool (`None`: unlimited).
    pub disruption_budget_by_node_pool: BTreeMap<String, Option<u64>>,
}

fn counts(map: &BTreeMap<String, u64>) -> BTreeMap<String, Option<f64>> {
    map.iter()
        .map(|(key, count)| (key.clone(), Some(*count as f64)))
        .collect()
}

impl SeriesRecorder {
    /// Records a sample taken `t` seconds after the start.
    pub fn observe(&mut self, t: f64, sample: &Sample) {
        self.nodes_by_image
            .observe(t, &counts(&sample.nodes_by_image));
        self.nodes_by_capacity_type
            .observe(t, &counts(&sample.nodes_by_capacity_type));
        self.nodes_by_node_pool
            .observe(t, &counts(&sample.nodes_by_node_pool));
        // Rounded as the report's cost: float noise in a sum is no change.
        let cost = (sample.cost_per_hour * 10_000.0).round() / 10_000.0;
        self.cost_per_hour.observe(t, Some(cost));
        self.pending_pods
            .observe(t, Some(sample.pending_pods as f64));
        self.disrupting_by_node_pool
            .observe(t, &counts(&sample.disrupting_by_node_pool));
        let budgets = sample
            .disruption_budget_by_node_pool
            .iter()
            .map(|(key, limit)| (key.clone(), limit.map(|limit| limit as f64)))
            .collect();
        self.disruption_budget_by_node_pool.observe(t, &budgets);
    }

    /// The series, each closed at `end` seconds.
    pub fn finish(self, end: f64) -> Series {
        Series {
            resolution: RESOLUTION,
            nodes_by_image: self.nodes_by_image.finish(end),
            nodes_by_capacity_type: self.nodes_by_capacity_type.finish(end),
            nodes_by_node_pool: self.nodes_by_node_pool.finish(end),
            cost_per_hour: self.cost_per_hour.finish(end),
            pending_pods: self.pending_pods.finish(end),
            disrupting_by_node_pool: self.disrupting_by_node_pool.finish(end),
            disruption_budget_by_node_pool: self.disruption_budget_by_node_pool.finish(end),
        }
    }
}

/// The value a step function given by `points` holds at `t` (`None` before its first point).
pub fn value_at(points: &[Point], t: f64) -> Option<f64> {
    let after = points.partition_point(|point| point.0 <= t);
    after
        .checked_sub(1)
        .and_then(|index| points.get(index))
        .and_then(|point| point.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(aggregate: Aggregate, samples: &[(f64, f64)], end: f64) -> Vec<Point> {
        let mut track = Track::new(aggregate);
        for &(t, value) in samples {
            track.observe(t, Some(value));
        }
        track.finish(end)
    }

    #[test]
    fn a_point_is_stored_only_when_the_value_changes() {
        let points = track(
            Aggregate::Last,
            &[
                (0.0, 3.0),
                (100.0, 3.0),
                (200.0, 3.0),
                (300.0, 4.0),
                (400.0, 4.0),
            ],
            600.0,
        );
        assert_eq!(points, vec![Point(0.0, Some(3.0)), Point(300.0, Some(4.0))]);
    }

    #[test]
    fn a_max_series_keeps_the_peak_of_a_minute_and_the_value_it_ended_on() {
        // Pending pods jump to 50 and back to 0 within the second minute.
        let points = track(
            Aggregate::Max,
            &[(0.0, 0.0), (70.0, 50.0), (80.0, 10.0), (90.0, 0.0)],
            600.0,
        );
        assert_eq!(
            points,
            vec![
                Point(0.0, Some(0.0)),
                Point(70.0, Some(50.0)),
                Point(120.0, Some(0.0)),
            ]
        );
        assert_eq!(value_at(&points, 100.0), Some(50.0));
        assert_eq!(value_at(&points, 500.0), Some(0.0));
    }

    #[test]
    fn a_last_series_keeps_what_the_minute_settled_on() {
        let points = track(
            Aggregate::Last,
            &[(0.0, 1.0), (65.0, 2.0), (70.0, 3.0), (75.0, 5.0)],
            600.0,
        );
        assert_eq!(points, vec![Point(0.0, Some(1.0)), Point(65.0, Some(5.0))]);
    }

    #[test]
    fn a_change_in_the_minute_after_a_peak_starts_that_minute_from_where_the_peak_ended() {
        // 4 at t=10, back to 1 at t=20; in the next minute 2 at t=90: the second minute holds
        // 1 from its start, then 2, so its highest is 2 from its start.
        let points = track(
            Aggregate::Max,
            &[(0.0, 0.0), (10.0, 4.0), (20.0, 1.0), (90.0, 2.0)],
            600.0,
        );
        assert_eq!(points, vec![Point(0.0, Some(4.0)), Point(60.0, Some(2.0))]);
    }

    #[test]
    fn a_series_keeps_at_most_one_point_per_minute_however_often_it_changes() {
        // Six hours of a value changing every second.
        let samples: Vec<(f64, f64)> = (0..6 * 3600)
            .map(|second| (f64::from(second), f64::from(second % 7)))
            .collect();
        for aggregate in [Aggregate::Last, Aggregate::Max] {
            let points = track(aggregate, &samples, 6.0 * 3600.0);
            assert!(
                points.len() <= 6 * 60 + 1,
                "{aggregate:?}: {}",
                points.len()
            );
            let mut slices: Vec<u64> = points.iter().map(|p| slice_of(p.0)).collect();
            slices.dedup();
            assert_eq!(
                slices.len(),
                points.len(),
                "{aggregate:?}: two points in a minute"
            );
            assert!(
                points
                    .windows(2)
                    .all(|w| w[0].1 != w[1].1 && w[0].0 < w[1].0)
            );
        }
    }

    #[test]
    fn the_value_a_run_ends_on_is_stored_even_within_its_last_minute() {
        let points = track(
            Aggregate::Max,
            &[(0.0, 0.0), (3590.0, 9.0), (3595.0, 0.0)],
            3600.0,
        );
        assert_eq!(
            points,
            vec![
                Point(0.0, Some(0.0)),
                Point(3590.0, Some(9.0)),
                Point(3600.0, Some(0.0)),
            ]
        );
    }

    #[test]
    fn a_key_that_disappears_holds_the_group_s_missing_value() {
        let mut group = Group::new(Aggregate::Last, Some(0.0));
        group.observe(0.0, &BTreeMap::from([("ami-old".to_owned(), Some(3.0))]));
        group.observe(
            600.0,
            &BTreeMap::from([
                ("ami-old".to_owned(), Some(1.0)),
                ("ami-new".to_owned(), Some(2.0)),
            ]),
        );
        group.observe(1200.0, &BTreeMap::from([("ami-new".to_owned(), Some(3.0))]));
        let series = group.finish(1800.0);
        assert_eq!(
            series["ami-old"],
            vec![
                Point(0.0, Some(3.0)),
                Point(600.0, Some(1.0)),
                Point(1200.0, Some(0.0)),
            ]
        );
        assert_eq!(
            series["ami-new"],
            vec![Point(600.0, Some(2.0)), Point(1200.0, Some(3.0))]
        );
    }

    #[test]
    fn a_budget_without_limit_is_null_in_json() {
        let mut recorder = SeriesRecorder::default();
        recorder.observe(
            0.0,
            &Sample {
                disruption_budget_by_node_pool: BTreeMap::from([
                    ("a".to_owned(), Some(2)),
                    ("b".to_owned(), None),
                ]),
                ..Sample::default()
            },
        );
        let series = recorder.finish(60.0);
        let json = serde_json::to_value(&series).unwrap_or_default();
        assert_eq!(
            json["disruptionBudgetByNodePool"]["a"],
            serde_json::json!([[0.0, 2.0]])
        );
        assert_eq!(
            json["disruptionBudgetByNodePool"]["b"],
            serde_json::json!([[0.0, null]])
        );
        assert_eq!(json["resolution"], serde_json::json!(60.0));
        assert_eq!(json["pendingPods"], serde_json::json!([[0.0, 0.0]]));
    }
}
