//! `google.protobuf.Duration` read safely from a peer's message: prost-types' conversion and
//! `Display` negate the seconds, which overflows on `i64::MIN` (a panic in debug builds, a
//! wrapped value in release), so the documented range is checked first.

use std::time::Duration;

/// The range `google.protobuf.Duration` documents: about 10,000 years either way.
pub const MAX_SECONDS: i64 = 315_576_000_000;

/// `d` as a `Duration`; the problem otherwise (`-5s is negative`, or a value outside the
/// type's documented range), for the caller to put after the field's name.
pub fn from_proto(d: prost_types::Duration) -> Result<Duration, String> {
    let prost_types::Duration { seconds, nanos } = d;
    let in_range = (-MAX_SECONDS..=MAX_SECONDS).contains(&seconds)
        && (-999_999_999..=999_999_999).contains(&nanos)
        && !(seconds > 0 && nanos < 0 || seconds < 0 && nanos > 0);
    if !in_range {
        return Err(format!(
            "{{seconds: {seconds}, nanos: {nanos}}} is outside google.protobuf.Duration's range"
        ));
    }
    // In range, prost's conversion and display are exact.
    Duration::try_from(d).map_err(|_| format!("{d} is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_range_durations_convert_and_the_rest_is_refused_without_a_panic() {
        let d = |seconds, nanos| prost_types::Duration { seconds, nanos };
        assert_eq!(from_proto(d(90, 5)), Ok(Duration::new(90, 5)));
        assert_eq!(from_proto(d(-5, 0)), Err("-5s is negative".to_owned()));
        for (seconds, nanos) in [(i64::MIN, -1), (i64::MAX, 0), (1, -1), (0, 1_000_000_000)] {
            assert!(
                from_proto(d(seconds, nanos)).is_err_and(|e| e.contains("range")),
                "{seconds} {nanos}"
            );
        }
    }
}
