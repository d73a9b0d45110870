//! Durations as the Karpenter API writes them: Go `time.ParseDuration` syntax (`720h`, `1h30m`,
//! `90s`, `1.5h`, `300ms`), plus the word `Never` where upstream's `NillableDuration` allows it.
//!
//! Both types keep the string the user wrote. Upstream re-serializes a parsed duration in Go's
//! canonical form (`720h` comes back as `720h0m0s`); keeping the original string instead means a
//! manifest round-trips byte for byte and `self == oldSelf` comparisons see what the user wrote.
//! The parsed value is what behaviour (and, later, the drift hash) should look at.

use std::{borrow::Cow, fmt, str::FromStr, time::Duration};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The word that disables a [`NillableDuration`].
pub const NEVER: &str = "Never";

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("invalid duration \"\": empty")]
    Empty,
    /// A number is missing where one was expected, or a character is out of place.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number has no unit after it (only a bare `0` may omit it).
    #[error("invalid duration {0:?}: missing unit")]
    MissingUnit(String),
    /// A unit other than `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`.
    #[error("invalid duration {input:?}: unknown unit {unit:?}")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit that was not recognised.
        unit: String,
    },
    /// The value does not fit Go's `time.Duration` (about 292 years).
    #[error("invalid duration {0:?}: overflows")]
    Overflow(String),
    /// A negative duration; the API has no use for one and `std::time::Duration` cannot hold it.
    #[error("invalid duration {0:?}: negative")]
    Negative(String),
}

/// Go's `time.Duration` is an `i64` of nanoseconds: the same bound applies here, so a value we
/// accept is one upstream accepts too.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Parses Go `time.ParseDuration` syntax: an optional sign, then one or more decimal numbers, each
/// with an optional fraction and a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`); `0` alone
/// needs no unit.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_owned());
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let (negative, mut rest) = match input.as_bytes()[0] {
        b'-' => (true, &input[1..]),
        b'+' => (false, &input[1..]),
        _ => (false, input),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after_number
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after_number.len(), |(i, _)| i);
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        let overflow = || DurationError::Overflow(input.to_owned());
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        // Fractions beyond nanosecond precision are truncated, as Go does.
        let mut scale = unit_nanos;
        for digit in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
        rest = after_unit;
    }
    if negative && total != 0 {
        return Err(DurationError::Negative(input.to_owned()));
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    let sub_nanos = u32::try_from(total % 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(secs, sub_nanos))
}

/// A duration that remembers how it was written (upstream `metav1.Duration`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GoDuration {
    raw: String,
    value: Duration,
}

impl GoDuration {
    /// Parses `raw` as a Go duration.
    pub fn parse(raw: &str) -> Result<Self, DurationError> {
        Ok(Self {
            value: parse_go_duration(raw)?,
            raw: raw.to_owned(),
        })
    }

    /// The string as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The parsed value.
    pub fn duration(&self) -> Duration {
        self.value
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "GoDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

/// A duration that may be `Never` (upstream `NillableDuration`): `Never` disables whatever the
/// duration controls (expiry, consolidation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NillableDuration {
    raw: String,
    value: Option<Duration>,
}

impl NillableDuration {
    /// Parses `raw`: `Never`, or a Go duration.
    pub fn parse(raw: &str) -> Result<Self, DurationError> {
        let value = if raw == NEVER {
            None
        } else {
            Some(parse_go_duration(raw)?)
        };
        Ok(Self {
            raw: raw.to_owned(),
            value,
        })
    }

    /// A duration known to be well-formed (a default): no parsing, so no error to handle.
    pub(crate) fn known(raw: &'static str, value: Duration) -> Self {
        Self {
            raw: raw.to_owned(),
            value: Some(value),
        }
    }

    /// `Never`.
    pub fn never() -> Self {
        Self {
            raw: NEVER.to_owned(),
            value: None,
        }
    }

    /// The string as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The parsed value; `None` for `Never`.
    pub fn duration(&self) -> Option<Duration> {
        self.value
    }

    /// Whether this is `Never`.
    pub fn is_never(&self) -> bool {
        self.value.is_none()
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(parse_go_duration("720h"), Ok(secs(720 * 3600)));
        assert_eq!(parse_go_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("720h0m0s"), Ok(secs(720 * 3600)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("+5s"), Ok(secs(5)));
        assert_eq!(parse_go_duration("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("1.5h"), Ok(secs(5400)));
        assert_eq!(parse_go_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_go_duration("2\u{b5}s"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(
            parse_go_duration("1.0000000001s"),
            Ok(secs(1)),
            "sub-nanosecond digits are truncated"
        );
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse_go_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit("10".into()))
        );
        assert_eq!(
            parse_go_duration("10d"),
            Err(DurationError::UnknownUnit {
                input: "10d".into(),
                unit: "d".into()
            })
        );
        assert_eq!(
            parse_go_duration("h"),
            Err(DurationError::Invalid("h".into()))
        );
        assert_eq!(
            parse_go_duration("-"),
            Err(DurationError::Invalid("-".into()))
        );
        assert_eq!(
            parse_go_duration("."),
            Err(DurationError::Invalid(".".into()))
        );
        assert_eq!(
            parse_go_duration("1h 30m"),
            Err(DurationError::UnknownUnit {
                input: "1h 30m".into(),
                unit: "h ".into()
            })
        );
        assert_eq!(
            parse_go_duration("-5s"),
            Err(DurationError::Negative("-5s".into()))
        );
        assert_eq!(
            parse_go_duration("3000000h"),
            Err(DurationError::Overflow("3000000h".into()))
        );
        assert_eq!(
            parse_go_duration("99999999999999999999999999999999999999999s"),
            Err(DurationError::Overflow(
                "99999999999999999999999999999999999999999s".into()
            ))
        );
    }

    #[test]
    fn error_messages_name_the_input() {
        let err = parse_go_duration("10d").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid duration \"10d\": unknown unit \"d\""
        );
    }

    #[test]
    fn nillable_keeps_the_string_and_knows_never() {
        let d = NillableDuration::parse("1h30m").unwrap();
        assert_eq!(d.as_str(), "1h30m");
        assert_eq!(d.duration(), Some(secs(5400)));
        assert!(!d.is_never());
        let never = NillableDuration::parse("Never").unwrap();
        assert!(never.is_never());
        assert_eq!(never, NillableDuration::never());
        assert_eq!(serde_json::to_string(&never).unwrap(), "\"Never\"");
        assert!(NillableDuration::parse("never").is_err());
    }

    #[test]
    fn serde_round_trips_the_raw_string() {
        let d: GoDuration = serde_json::from_str("\"1h30m\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1h30m\"");
        let err = serde_json::from_str::<GoDuration>("\"30d\"").unwrap_err();
        assert!(err.to_string().contains("unknown unit \"d\""), "{err}");
    }
}
