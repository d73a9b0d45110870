//! The human timeline's folding: an event identical to one already printed (the same type and
//! fields, only the time differs, e.g. the same `DisruptionBlocked` every five minutes) is not
//! printed again; one line says how many times it came back and until when, printed once
//! something else happens to the same object, or at the end. The JSON report keeps every event.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::report::{TimelineEvent, clock};

/// The fields that say which object an event is about, most specific first.
const SUBJECT_FIELDS: [&str; 4] = ["pod", "nodeClaim", "node", "nodePool"];

/// The most folds kept open at once; past it, the oldest half is closed (their counts printed),
/// so a long run's memory does not grow with every distinct event it printed.
const MAX_OPEN: usize = 4096;

/// An event without its time: what makes two events the same.
type Key = (String, BTreeMap<String, Value>);

/// How often an event printed once came back.
#[derive(Debug, Clone)]
struct Repeats {
    /// When it was printed.
    first: f64,
    /// When it came back last.
    last: f64,
    /// How many times it came back.
    count: u64,
    /// The object it is about (see [`SUBJECT_FIELDS`]).
    subject: Option<String>,
    /// When it was opened, to close the oldest first.
    opened: u64,
}

/// Folds a timeline as it streams (see the module documentation).
#[derive(Debug, Default)]
pub struct Folder {
    open: HashMap<Key, Repeats>,
    opened: u64,
}

impl Folder {
    /// A folder with nothing printed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lines to print for `event`, in order: the counts of the folds it closes (earlier
    /// events about the same object), then the event itself, unless it repeats one printed.
    pub fn push(&mut self, event: &TimelineEvent) -> Vec<String> {
        let key = key_of(event);
        if let Some(repeats) = self.open.get_mut(&key) {
            repeats.last = event.t;
            repeats.count += 1;
            return Vec::new();
        }
        let subject = subject_of(event);
        let mut lines = match &subject {
            Some(subject) => self.close(|repeats| repeats.subject.as_deref() == Some(subject)),
            None => Vec::new(),
        };
        if self.open.len() >= MAX_OPEN {
            let mut ages: Vec<u64> = self.open.values().map(|repeats| repeats.opened).collect();
            ages.sort_unstable();
            let cutoff = ages.get(ages.len() / 2).copied().unwrap_or(u64::MAX);
            lines.extend(self.close(|repeats| repeats.opened < cutoff));
        }
        lines.push(event.line());
        self.opened += 1;
        self.open.insert(
            key,
            Repeats {
                first: event.t,
                last: event.t,
                count: 0,
                subject,
                opened: self.opened,
            },
        );
        lines
    }

    /// The counts of every fold still open, in the order their events were printed: the end of
    /// the timeline.
    pub fn finish(&mut self) -> Vec<String> {
        self.close(|_| true)
    }

    /// Closes the folds `which` picks, in the order they were opened; the lines for those that
    /// repeated.
    fn close(&mut self, which: impl Fn(&Repeats) -> bool) -> Vec<String> {
        let mut closed: Vec<(Key, Repeats)> = Vec::new();
        self.open.retain(|key, repeats| {
            if which(repeats) {
                closed.push((key.clone(), repeats.clone()));
                false
            } else {
                true
            }
        });
        closed.sort_by_key(|(_, repeats)| repeats.opened);
        closed
            .into_iter()
            .filter(|(_, repeats)| repeats.count > 0)
            .map(|((type_, fields), repeats)| repeated_line(&type_, &fields, &repeats))
            .collect()
    }
}

/// What makes two events the same: the type and the fields, the message without the instants
/// it was observed at (a `DisruptionBlocked` says "at 2026-01-01 01:28:17 UTC: ..." for the
/// pass that saw it; the next pass's repeat differs only there).
fn key_of(event: &TimelineEvent) -> Key {
    let mut fields = event.fields.clone();
    if let Some(Value::String(message)) = fields.get_mut("message") {
        *message = without_observation_times(message);
    }
    (event.type_.clone(), fields)
}

/// `message` with every "at YYYY-MM-DD HH:MM:SS UTC: " taken out.
fn without_observation_times(message: &str) -> String {
    const PREFIX: &str = "at ";
    const SUFFIX: &str = " UTC: ";
    // "YYYY-MM-DD HH:MM:SS": digits but at these places.
    const SHAPE: &[u8] = b"0000-00-00 00:00:00";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(found) = rest.find(PREFIX) {
        let after = &rest[found + PREFIX.len()..];
        let stamp = after.as_bytes().get(..SHAPE.len());
        let is_instant = stamp.is_some_and(|stamp| {
            stamp.iter().zip(SHAPE).all(|(byte, shape)| match shape {
                b'0' => byte.is_ascii_digit(),
                other => byte == other,
            })
        }) && after
            .get(SHAPE.len()..)
            .is_some_and(|tail| tail.starts_with(SUFFIX));
        if is_instant {
            out.push_str(&rest[..found]);
            rest = &after[SHAPE.len() + SUFFIX.len()..];
        } else {
            out.push_str(&rest[..found + PREFIX.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn subject_of(event: &TimelineEvent) -> Option<String> {
    SUBJECT_FIELDS
        .iter()
        .find_map(|key| event.field(key).map(|value| format!("{key}={value}")))
}

/// The line that closes a fold: the event as the timeline prints it, at its last time and
/// without its message, and how many times it came back since it was printed.
fn repeated_line(type_: &str, fields: &BTreeMap<String, Value>, repeats: &Repeats) -> String {
    let mut fields = fields.clone();
    fields.remove("message");
    let last = TimelineEvent {
        t: repeats.last,
        type_: type_.to_owned(),
        fields,
    };
    let times = if repeats.count == 1 { "time" } else { "times" };
    format!(
        "{}  (the same as at {}, {} more {times})",
        last.line(),
        clock(repeats.first).trim_start(),
        repeats.count
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(t: f64, type_: &str, fields: Value) -> TimelineEvent {
        let Value::Object(fields) = fields else {
            panic!("fields are an object");
        };
        TimelineEvent {
            t,
            type_: type_.to_owned(),
            fields: fields.into_iter().collect(),
        }
    }

    fn blocked(t: f64, node_claim: &str, message: &str) -> TimelineEvent {
        event(
            t,
            "DisruptionBlocked",
            json!({"nodeClaim": node_claim, "message": message}),
        )
    }

    fn all(folder: &mut Folder, events: &[TimelineEvent]) -> Vec<String> {
        let mut lines: Vec<String> = events.iter().flat_map(|e| folder.push(e)).collect();
        lines.extend(folder.finish());
        lines
    }

    #[test]
    fn repeats_are_counted_until_something_else_happens_to_the_object() {
        let mut folder = Folder::new();
        let lines = all(
            &mut folder,
            &[
                blocked(60.0, "a", "budget"),
                blocked(60.0, "b", "budget"),
                blocked(360.0, "a", "budget"),
                blocked(360.0, "b", "budget"),
                blocked(660.0, "a", "budget"),
                event(700.0, "DisruptionStarted", json!({"nodeClaim": "a"})),
                blocked(960.0, "b", "budget"),
            ],
        );
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].contains("DisruptionBlocked") && lines[0].contains("nodeClaim=a"));
        assert!(lines[1].contains("nodeClaim=b"));
        assert!(
            lines[2].starts_with("  0:11:00")
                && lines[2].contains("nodeClaim=a")
                && lines[2].contains("(the same as at 0:01:00, 2 more times)"),
            "a's count comes before what happened to it next: {}",
            lines[2]
        );
        assert!(lines[3].contains("DisruptionStarted"));
        assert!(
            lines[4].starts_with("  0:16:00") && lines[4].contains("2 more times"),
            "b's count at the end: {}",
            lines[4]
        );
    }

    #[test]
    fn a_different_message_is_a_different_event() {
        let mut folder = Folder::new();
        let lines = all(
            &mut folder,
            &[
                blocked(60.0, "a", "budget"),
                blocked(120.0, "a", "budget"),
                blocked(180.0, "a", "pdb"),
                blocked(240.0, "a", "budget"),
            ],
        );
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[1].contains("1 more time)"), "{}", lines[1]);
        assert!(lines[2].contains("pdb"));
        assert!(
            lines[3].contains("budget") && lines[3].starts_with("  0:04:00"),
            "the budget came back after the PDB: printed again, {}",
            lines[3]
        );
    }

    #[test]
    fn the_instant_a_pass_observed_something_does_not_make_it_new() {
        let mut folder = Folder::new();
        let lines = all(
            &mut folder,
            &[
                blocked(
                    60.0,
                    "a",
                    "not consolidated: at 2026-01-01 00:01:00 UTC: no cheaper type",
                ),
                blocked(
                    360.0,
                    "a",
                    "not consolidated: at 2026-01-01 00:06:00 UTC: no cheaper type",
                ),
                blocked(660.0, "a", "budget active until 2026-01-01 01:20:00 UTC"),
                blocked(960.0, "a", "budget active until 2026-01-01 02:20:00 UTC"),
            ],
        );
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[1].contains("1 more time)"), "{}", lines[1]);
        assert_eq!(
            without_observation_times(
                "at 2026-01-01 00:01:00 UTC: x; at noon; at 2026-01-01 00:01:00 UTC"
            ),
            "x; at noon; at 2026-01-01 00:01:00 UTC"
        );
    }

    #[test]
    fn events_seen_once_print_as_they_are() {
        let mut folder = Folder::new();
        let events = [
            event(1.0, "NodeClaimCreated", json!({"nodeClaim": "a"})),
            event(2.0, "NodeClaimLaunched", json!({"nodeClaim": "a"})),
            event(3.0, "PodEvicted", json!({"pod": "default/web-1"})),
        ];
        let lines = all(&mut folder, &events);
        let expected: Vec<String> = events.iter().map(TimelineEvent::line).collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn open_folds_stay_bounded() {
        let mut folder = Folder::new();
        for i in 0..(MAX_OPEN * 3) {
            folder.push(&event(
                i as f64,
                "Nominated",
                json!({"pod": format!("default/p-{i}")}),
            ));
        }
        assert!(folder.open.len() <= MAX_OPEN);
    }
}
