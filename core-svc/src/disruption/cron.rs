//! Budget schedules, parsed as upstream's `robfig/cron` `ParseStandard("TZ=UTC " + schedule)`
//! ([`CronSchedule`]): five fields, or one of `@yearly`, `@annually`, `@monthly`, `@weekly`,
//! `@daily`, `@midnight`, `@hourly`, and the next hit after an instant. Written here rather than
//! taken from a cron crate because its edges decide how many nodes may go: the crates at hand
//! accept more than upstream does (seconds and years fields, `L`, `W`, `#`, 7 for Sunday), which
//! would turn a budget upstream rejects (and so fails closed on) into an active one, and treat
//! `*/1` in a day field differently in the day-of-month / day-of-week rule. Apart from
//! [`budgets`](super::budgets) because it is a parser with no knowledge of NodePools.

use jiff::tz::Offset;
use jiff::{Timestamp, civil};

/// Why a budget schedule does not parse (the messages say what upstream's parser says).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// Nothing but whitespace.
    #[error("empty schedule")]
    Empty,
    /// `@` followed by something other than the supported descriptors.
    #[error(
        "unrecognized descriptor {0:?} (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
    )]
    Descriptor(String),
    /// Not five fields.
    #[error("expected exactly 5 fields (minute hour day-of-month month day-of-week), found {0}")]
    FieldCount(usize),
    /// One field is wrong.
    #[error("{field} field {text:?}: {problem}")]
    Field {
        /// Which field (`minute`, `hour`, `day-of-month`, `month`, `day-of-week`).
        field: &'static str,
        /// The field as written.
        text: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// A field's range and names.
struct Bounds {
    field: &'static str,
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const MINUTE: Bounds = Bounds {
    field: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    field: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Bounds = Bounds {
    field: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    field: "month",
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DAY_OF_WEEK: Bounds = Bounds {
    field: "day-of-week",
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// One parsed field: the values it allows (bit `n` for value `n`), and whether it was written
/// as "any" (`*` or `?`, unstepped), which matters to the day-of-month / day-of-week rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    star: bool,
}

impl Field {
    fn has(self, value: i8) -> bool {
        u32::try_from(value).is_ok_and(|value| value < 64 && self.bits & (1 << value) != 0)
    }
}

/// A budget schedule as upstream parses it (`robfig/cron` v3 `ParseStandard`), always in UTC:
/// minute, hour, day of month, month, day of week (0 or `sun` to 6 or `sat`); each a list of
/// `*`, `?`, values, names (months and weekdays, any case), ranges `a-b` and steps `/n`
/// (`a/n` meaning `a-max/n`). When both day fields are restricted a day matches either;
/// when one is `*` or `?` (unstepped) both must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CronSchedule {
    minute: Field,
    hour: Field,
    day_of_month: Field,
    month: Field,
    day_of_week: Field,
}

impl CronSchedule {
    /// Parses a schedule, refusing what upstream refuses.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let spec = text.trim();
        if spec.is_empty() {
            return Err(CronError::Empty);
        }
        if spec.starts_with('@') {
            let expanded = match spec {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                other => return Err(CronError::Descriptor(other.to_owned())),
            };
            return Self::parse_fields(expanded);
        }
        Self::parse_fields(spec)
    }

    fn parse_fields(spec: &str) -> Result<Self, CronError> {
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let [minute, hour, day_of_month, month, day_of_week] = fields.as_slice() else {
            return Err(CronError::FieldCount(fields.len()));
        };
        Ok(Self {
            minute: parse_field(minute, &MINUTE)?,
            hour: parse_field(hour, &HOUR)?,
            day_of_month: parse_field(day_of_month, &DAY_OF_MONTH)?,
            month: parse_field(month, &MONTH)?,
            day_of_week: parse_field(day_of_week, &DAY_OF_WEEK)?,
        })
    }

    /// The first hit strictly after `after` (hits fall on whole minutes, UTC); `None` when there
    /// is none within five years of it, as upstream gives up then.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        if self.never_fires() {
            return None;
        }
        let mut second = after.as_second();
        if after.subsec_nanosecond() < 0 {
            second -= 1;
        }
        let first = second.div_euclid(60).checked_mul(60)?.checked_add(60)?;
        let start = Offset::UTC.to_datetime(Timestamp::from_second(first).ok()?);
        let mut at = Cursor {
            year: start.year(),
            month: start.month(),
            day: start.day(),
            hour: start.hour(),
            minute: start.minute(),
        };
        let year_limit = at.year.checked_add(5)?;
        'wrap: loop {
            if at.year > year_limit {
                return None;
            }
            while !self.month.has(at.month) {
                at.day = 1;
                at.hour = 0;
                at.minute = 0;
                at.next_month()?;
                if at.month == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&at)? {
                at.hour = 0;
                at.minute = 0;
                at.next_day()?;
                if at.day == 1 {
                    continue 'wrap;
                }
            }
            while !self.hour.has(at.hour) {
                at.minute = 0;
                if at.next_hour()? {
                    continue 'wrap;
                }
            }
            while !self.minute.has(at.minute) {
                at.minute += 1;
                if at.minute == 60 {
                    at.minute = 0;
                    at.next_hour()?;
                    continue 'wrap;
                }
            }
            return at.timestamp();
        }
    }

    /// Whether some field allows nothing (`,` parses to an empty list, as upstream's does).
    fn never_fires(&self) -> bool {
        let days = if self.day_of_month.star || self.day_of_week.star {
            self.day_of_month.bits == 0 || self.day_of_week.bits == 0
        } else {
            self.day_of_month.bits == 0 && self.day_of_week.bits == 0
        };
        self.minute.bits == 0 || self.hour.bits == 0 || self.month.bits == 0 || days
    }

    fn day_matches(&self, at: &Cursor) -> Option<bool> {
        let weekday = civil::Date::new(at.year, at.month, at.day)
            .ok()?
            .weekday()
            .to_sunday_zero_offset();
        let by_date = self.day_of_month.has(at.day);
        let by_weekday = self.day_of_week.has(weekday);
        Some(if self.day_of_month.star || self.day_of_week.star {
            by_date && by_weekday
        } else {
            by_date || by_weekday
        })
    }
}

/// A UTC minute being searched.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    year: i16,
    month: i8,
    day: i8,
    hour: i8,
    minute: i8,
}

impl Cursor {
    fn next_month(&mut self) -> Option<()> {
        if self.month == 12 {
            self.month = 1;
            self.year = self.year.checked_add(1)?;
        } else {
            self.month += 1;
        }
        Some(())
    }

    fn next_day(&mut self) -> Option<()> {
        let days = civil::Date::new(self.year, self.month, 1)
            .ok()?
            .days_in_month();
        if self.day >= days {
            self.day = 1;
            self.next_month()
        } else {
            self.day += 1;
            Some(())
        }
    }

    /// Moves to the next hour; answers whether the day changed.
    fn next_hour(&mut self) -> Option<bool> {
        if self.hour == 23 {
            self.hour = 0;
            self.next_day()?;
            Some(true)
        } else {
            self.hour += 1;
            Some(false)
        }
    }

    fn timestamp(&self) -> Option<Timestamp> {
        let at = civil::DateTime::new(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            0,
            0,
        )
        .ok()?;
        Offset::UTC.to_timestamp(at).ok()
    }
}

fn field_error(bounds: &Bounds, text: &str, problem: String) -> CronError {
    CronError::Field {
        field: bounds.field,
        text: text.to_owned(),
        problem,
    }
}

/// A comma-separated list of ranges (empty items are skipped, as upstream's `FieldsFunc` does).
fn parse_field(text: &str, bounds: &Bounds) -> Result<Field, CronError> {
    let mut field = Field {
        bits: 0,
        star: false,
    };
    for range in text.split(',').filter(|range| !range.is_empty()) {
        let parsed =
            parse_range(range, bounds).map_err(|problem| field_error(bounds, text, problem))?;
        field.bits |= parsed.bits;
        field.star |= parsed.star;
    }
    Ok(field)
}

/// `*`, `?`, `a`, `a-b`, each optionally `/step` (upstream `getRange`).
fn parse_range(expr: &str, bounds: &Bounds) -> Result<Field, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    if range_and_step.len() > 2 {
        return Err(format!("too many slashes in {expr:?}"));
    }
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut star) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max, true)
    } else {
        let start = int_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high.as_slice() {
            [_] => start,
            [_, high] => int_or_name(high, bounds)?,
            _ => return Err(format!("too many hyphens in {expr:?}")),
        };
        (start, end, false)
    };
    let step = match range_and_step.as_slice() {
        [_, step] => {
            let step = parse_int(step)?;
            if single {
                end = bounds.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
        _ => 1,
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({})",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({})",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end})"
        ));
    }
    if step == 0 {
        return Err("step of range should be a positive number".to_owned());
    }
    let mut bits = 0u64;
    let mut value = start;
    while value <= end {
        bits |= 1 << value;
        value = value.saturating_add(step);
    }
    Ok(Field { bits, star })
}

fn int_or_name(text: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some((_, value)) = bounds.names.iter().find(|(name, _)| *name == lower) {
        return Ok(*value);
    }
    parse_int(text)
}

/// Go's `strconv.Atoi`, refusing negatives.
fn parse_int(text: &str) -> Result<u32, String> {
    let value: i64 = text
        .parse()
        .map_err(|_| format!("failed to parse int from {text:?}"))?;
    if value < 0 {
        return Err(format!("negative number ({value}) not allowed: {text:?}"));
    }
    // Anything this large is out of every field's range.
    Ok(u32::try_from(value).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn next(schedule: &str, after: &str) -> Option<String> {
        CronSchedule::parse(schedule)
            .unwrap()
            .next_after(at(after))
            .map(|hit| hit.to_string())
    }

    #[test]
    fn cron_finds_the_next_hit_strictly_after() {
        // 2025-03-01 is a Saturday.
        assert_eq!(
            next("0 9 * * mon-fri", "2025-03-01T12:00:00Z").as_deref(),
            Some("2025-03-03T09:00:00Z")
        );
        assert_eq!(
            next("0 9 * * 1-5", "2025-03-03T09:00:00Z").as_deref(),
            Some("2025-03-04T09:00:00Z"),
            "a hit exactly at the instant is not after it"
        );
        assert_eq!(
            next("0 9 * * 1-5", "2025-03-03T08:59:59.5Z").as_deref(),
            Some("2025-03-03T09:00:00Z")
        );
        assert_eq!(
            next("*/15 * * * *", "2025-03-01T12:07:00Z").as_deref(),
            Some("2025-03-01T12:15:00Z")
        );
        assert_eq!(
            next("30 23 31 12 *", "2025-03-01T00:00:00Z").as_deref(),
            Some("2025-12-31T23:30:00Z")
        );
        assert_eq!(
            next("59 23 * * *", "2025-12-31T23:59:00Z").as_deref(),
            Some("2026-01-01T23:59:00Z"),
            "rolls over the year"
        );
    }

    #[test]
    fn cron_descriptors_are_upstreams() {
        let after = "2025-03-01T12:00:00Z";
        assert_eq!(
            next("@hourly", after).as_deref(),
            Some("2025-03-01T13:00:00Z")
        );
        assert_eq!(
            next("@daily", after).as_deref(),
            Some("2025-03-02T00:00:00Z")
        );
        assert_eq!(
            next("@midnight", after).as_deref(),
            Some("2025-03-02T00:00:00Z")
        );
        assert_eq!(
            next("@weekly", after).as_deref(),
            Some("2025-03-02T00:00:00Z"),
            "Sunday"
        );
        assert_eq!(
            next("@monthly", after).as_deref(),
            Some("2025-04-01T00:00:00Z")
        );
        assert_eq!(
            next("@yearly", after).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            next("@annually", after).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            next("  @daily ", after).as_deref(),
            Some("2025-03-02T00:00:00Z")
        );
    }

    #[test]
    fn cron_day_fields_or_unless_one_is_any() {
        let after = "2025-03-01T12:00:00Z";
        // The 15th, or a Monday: Monday 3rd comes first.
        assert_eq!(
            next("0 0 15 * mon", after).as_deref(),
            Some("2025-03-03T00:00:00Z")
        );
        // `?` and `*/1` count as "any": Mondays only.
        assert_eq!(
            next("0 0 ? * mon", after).as_deref(),
            Some("2025-03-03T00:00:00Z")
        );
        assert_eq!(
            next("0 0 */1 * 4", after).as_deref(),
            Some("2025-03-06T00:00:00Z")
        );
        // A stepped day of month is a restriction: odd days or Thursdays.
        assert_eq!(
            next("0 0 */2 * 4", after).as_deref(),
            Some("2025-03-03T00:00:00Z")
        );
        // Leap day, then a date that never comes.
        assert_eq!(
            next("0 0 29 2 *", after).as_deref(),
            Some("2028-02-29T00:00:00Z")
        );
        assert_eq!(next("0 0 30 2 *", after), None);
        // An empty list (`,`) allows nothing, so the schedule never fires.
        assert_eq!(next(", * * * *", after), None);
        assert_eq!(next("0 0 , * *", after), None);
        assert_eq!(
            next("0 0 , * 1", after).as_deref(),
            Some("2025-03-03T00:00:00Z")
        );
    }

    #[test]
    fn cron_accepts_upstreams_syntax() {
        for schedule in [
            "* * * * *",
            "0 0 * * SUN",
            "0 0 1 JAN,jul *",
            "5/15 * * * *",
            "0-30/10 9-17 * * 1-5",
            "1,,2 * * * *",
            "0 0 * * ?",
            "? ? ? ? ?",
            "+5 * * * *",
            "*-5 * * * *",
            "0\t9  *  * *",
        ] {
            assert!(CronSchedule::parse(schedule).is_ok(), "{schedule:?}");
        }
    }

    #[test]
    fn cron_refuses_what_upstream_refuses() {
        let cases = [
            ("", CronError::Empty),
            ("@every 1h", CronError::Descriptor("@every 1h".into())),
            ("@dailyx", CronError::Descriptor("@dailyx".into())),
            ("@Daily", CronError::Descriptor("@Daily".into())),
            ("0 0 9 * * 1", CronError::FieldCount(6)),
            ("0 9 * *", CronError::FieldCount(4)),
        ];
        for (schedule, error) in cases {
            assert_eq!(CronSchedule::parse(schedule), Err(error), "{schedule:?}");
        }
        for schedule in [
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "5-1 * * * *",
            "*/0 * * * *",
            "1/2/3 * * * *",
            "1-2-3 * * * *",
            "a * * * *",
            "* * L * *",
            "* * * * 1#2",
            "*/-1 * * * *",
        ] {
            assert!(
                matches!(CronSchedule::parse(schedule), Err(CronError::Field { .. })),
                "{schedule:?}"
            );
        }
    }
}
