//! Kubernetes resource quantities (`resource.Quantity`): parsing, exact arithmetic, canonical
//! text.
//!
//! # Parsing
//!
//! [`Quantity::parse`] accepts what `k8s.io/apimachinery`'s `ParseQuantity` accepts and gives the
//! same value:
//!
//! ```text
//! <quantity>        ::= <sign>? <number> <suffix>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= "" | n | u | m | k | M | G | T | P | E      (powers of 1000)
//!                     | Ki | Mi | Gi | Ti | Pi | Ei                  (powers of 1024)
//!                     | (e | E) <sign>? <digits>                     (power of ten)
//! ```
//!
//! No whitespace anywhere. A binary-suffixed value larger than 2⁶³−1 is capped at 2⁶³−1, as
//! apimachinery does; decimal forms are not capped there.
//!
//! Deliberate differences, all on inputs no real manifest contains:
//! - A number without digits (`Gi`, `.`, `+`, `m`) is an error. apimachinery's scanner reads
//!   some of them as zero and rejects others (`Pi`, `e-10`) in a later step; its documented
//!   grammar, which we follow, requires a digit.
//! - A decimal exponent beyond ±(2³¹−1) is an error, as in current apimachinery (released
//!   versions, v1.37.0 included, wrapped it modulo 2³²: `1e4294967297` read as `1e1`).
//! - Values beyond about 1.7·10³⁵ units (`1e36`) are an error; apimachinery keeps them as big
//!   decimals, whose `Value()` and `MilliValue()` then overflow `int64` anyway.
//!
//! # Representation
//!
//! The value is an `i128` count of milli-units. `i64` is not enough: apimachinery's own cap for
//! binary quantities is 2⁶³−1 *units* (`8Ei` parses to that), which is about 9.2·10²¹ millis,
//! and cluster-wide sums such as NodePool limits (`10000000Gi` in upstream's benchmark) exceed
//! `i64` millis too. `i128` holds every value up to about 1.7·10³⁵ units exactly. The range is
//! kept symmetric (`-i128::MAX ..= i128::MAX`) so negation never overflows.
//!
//! Kubernetes keeps nano precision; this type keeps milli precision. A value finer than a milli
//! rounds away from zero to the next milli, which is what apimachinery's `MilliValue()` returns
//! for it, so `millis()` equals `MilliValue()`. Two quantities that differ only below a milli
//! (`1n` and `1m`) therefore compare equal here. Negative values round away from zero too, as
//! apimachinery's `int64` path does (its big-decimal path rounds a few negative values towards
//! +∞ instead; negative resource amounts have no meaning anyway).
//!
//! # Canonical text
//!
//! [`Display`](std::fmt::Display) writes:
//! - `0` for zero;
//! - `<millis>m` when the value is not a whole number of units (`500m`, `1500m`);
//! - otherwise the shorter of the decimal-SI form (the largest of `k M G T P E` that divides the
//!   value exactly, or no suffix) and the binary-SI form (the largest of `Ki … Ei` that divides
//!   it exactly), preferring binary on a tie (`4`, `2k`, `16Gi`, `1536Mi`, `1G`). The binary form
//!   is only used up to 2⁶³−1 units, so parsing never caps what was displayed.
//!
//! So `parse(q.to_string()) == q` for every quantity; the property test below checks it. The
//! text does not remember how the value was written: `1000Mi` and `1048576000` both display as
//! `1000Mi`.

use std::fmt;
use std::ops::Neg;
use std::str::FromStr;

use thiserror::Error;

/// A Kubernetes resource quantity, held exactly as a whole number of milli-units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Quantity {
    millis: i128,
}

/// Why a string is not a quantity. Displays as `invalid quantity "<input>": <reason>`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {input:?}: {kind}")]
pub struct QuantityError {
    input: String,
    kind: QuantityErrorKind,
}

/// What was wrong with a quantity string.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuantityErrorKind {
    /// The string was empty.
    #[error("it is empty")]
    Empty,
    /// The number had neither integer nor fraction digits (`Gi`, `.`, `-`).
    #[error("the number has no digits")]
    NoDigits,
    /// A character that cannot appear where it does.
    #[error(
        "unexpected {found:?} at byte {at}; expected a number, then one of the suffixes \
         n u m k M G T P E Ki Mi Gi Ti Pi Ei or a decimal exponent like e3"
    )]
    UnexpectedChar {
        /// The offending character.
        found: char,
        /// Its byte offset in the input.
        at: usize,
    },
    /// The suffix is made of suffix letters but is not a known suffix (`mi`, `Ki3`, `e`).
    #[error(
        "unknown suffix {0:?}; expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei \
         or a decimal exponent like e3"
    )]
    UnknownSuffix(String),
    /// A decimal exponent beyond ±(2³¹−1), which apimachinery rejects.
    #[error("the exponent {0:?} is outside ±2147483647")]
    ExponentOutOfRange(String),
    /// A valid quantity whose magnitude does not fit this type (about 1.7·10³⁵ units).
    #[error("the value is larger than this implementation supports (about 1.7e35)")]
    TooLarge,
}

impl QuantityError {
    /// Longest input echoed back in an error; quantities come from user objects.
    const MAX_ECHO: usize = 64;

    fn new(input: &str, kind: QuantityErrorKind) -> Self {
        let input = if input.len() <= Self::MAX_ECHO {
            input.to_owned()
        } else {
            let mut end = Self::MAX_ECHO;
            while !input.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &input[..end])
        };
        Self { input, kind }
    }

    /// The input that failed to parse (truncated to 64 bytes plus `…` when longer).
    pub fn input(&self) -> &str {
        &self.input
    }

    /// What was wrong with it.
    pub fn kind(&self) -> &QuantityErrorKind {
        &self.kind
    }
}

/// Largest decimal exponent apimachinery accepts (`math.MaxInt32`).
const MAX_EXPONENT: u64 = i32::MAX as u64;

/// apimachinery's cap for binary-suffixed quantities, 2⁶³−1 units, in millis.
const BINARY_CAP_MILLIS: u128 = i64::MAX as u128 * 1000;

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// What a suffix multiplies the number by.
enum Multiplier {
    /// 10^exponent.
    Decimal(i64),
    /// 2^exponent.
    Binary(u32),
}

impl Quantity {
    /// Zero.
    pub const ZERO: Self = Self { millis: 0 };
    /// The largest representable quantity.
    pub const MAX: Self = Self { millis: i128::MAX };
    /// The smallest representable quantity (`-MAX`; the range is symmetric).
    pub const MIN: Self = Self { millis: -i128::MAX };

    /// A quantity of `millis` thousandths of a unit.
    pub const fn from_millis(millis: i64) -> Self {
        Self {
            millis: millis as i128,
        }
    }

    /// A quantity of `units` whole units.
    pub const fn from_units(units: i64) -> Self {
        Self {
            millis: units as i128 * 1000,
        }
    }

    /// A quantity of `millis` thousandths of a unit, or `None` for `i128::MIN` (outside the
    /// symmetric range).
    pub const fn checked_from_millis(millis: i128) -> Option<Self> {
        if millis == i128::MIN {
            None
        } else {
            Some(Self { millis })
        }
    }

    /// Parses a quantity exactly as apimachinery's `ParseQuantity` does (see the module docs for
    /// the grammar and the few deliberate differences).
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |kind| QuantityError::new(input, kind);
        let bytes = input.as_bytes();
        if bytes.is_empty() {
            return Err(err(QuantityErrorKind::Empty));
        }

        let mut pos = 0;
        let negative = match bytes[0] {
            b'-' => {
                pos = 1;
                true
            }
            b'+' => {
                pos = 1;
                false
            }
            _ => false,
        };
        let int_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let int_digits = &input[int_start..pos];
        let mut frac_digits = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let frac_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            frac_digits = &input[frac_start..pos];
        }

        // apimachinery's scanner: any run of suffix letters, an optional sign, then digits.
        // Which of those runs are real suffixes is decided afterwards.
        let suffix_start = pos;
        while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
            pos += 1;
        }
        if pos < bytes.len() && matches!(bytes[pos], b'+' | b'-') {
            pos += 1;
        }
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < bytes.len() {
            let found = input[pos..].chars().next().unwrap_or('\u{fffd}');
            return Err(err(QuantityErrorKind::UnexpectedChar { found, at: pos }));
        }
        let suffix = &input[suffix_start..];

        // apimachinery's scanner reads a number without digits ("Gi", ".", "-") as zero, but
        // only some such inputs survive its later steps ("Pi" and "e-10" fail). The documented
        // grammar requires a digit, and so do we.
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(err(QuantityErrorKind::NoDigits));
        }

        let multiplier = interpret_suffix(suffix).map_err(err)?;
        // The digits without the point; most quantities have no fraction, and need no copy.
        let digits: std::borrow::Cow<'_, str> = if frac_digits.is_empty() {
            std::borrow::Cow::Borrowed(int_digits)
        } else {
            std::borrow::Cow::Owned([int_digits, frac_digits].concat())
        };
        let frac_len = i64::try_from(frac_digits.len()).unwrap_or(i64::MAX);
        let shifted = |exponent: i64| exponent.saturating_sub(frac_len);

        let magnitude = match multiplier {
            Multiplier::Decimal(exponent) => {
                match magnitude_millis(digits.as_bytes(), shifted(exponent), 0) {
                    Some(m) if m <= i128::MAX as u128 => m,
                    _ => return Err(err(QuantityErrorKind::TooLarge)),
                }
            }
            Multiplier::Binary(exponent) => {
                magnitude_millis(digits.as_bytes(), shifted(0), exponent)
                    .map_or(BINARY_CAP_MILLIS, |m| m.min(BINARY_CAP_MILLIS))
            }
        };
        // Both branches bound `magnitude` by i128::MAX, so the cast is exact.
        let millis = magnitude as i128;
        Ok(Self {
            millis: if negative { -millis } else { millis },
        })
    }

    /// The value in milli-units (Kubernetes' `MilliValue()`).
    pub const fn millis(self) -> i128 {
        self.millis
    }

    /// The value in whole units, rounded away from zero (Kubernetes' `Value()`: `1500m` is 2,
    /// `-1500m` is -2).
    pub const fn value(self) -> i128 {
        let units = self.millis / 1000;
        match self.millis % 1000 {
            0 => units,
            r if r > 0 => units + 1,
            _ => units - 1,
        }
    }

    /// Whether the quantity is zero.
    pub const fn is_zero(self) -> bool {
        self.millis == 0
    }

    /// Whether the quantity is below zero.
    pub const fn is_negative(self) -> bool {
        self.millis < 0
    }

    /// `self + other`, or `None` when the sum leaves the representable range.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.millis
            .checked_add(other.millis)
            .and_then(Self::checked_from_millis)
    }

    /// `self - other`, or `None` when the difference leaves the representable range.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.millis
            .checked_sub(other.millis)
            .and_then(Self::checked_from_millis)
    }

    /// `self + other`, clamped to [`Quantity::MIN`]..=[`Quantity::MAX`].
    pub fn saturating_add(self, other: Self) -> Self {
        Self::clamped(self.millis.saturating_add(other.millis))
    }

    /// `self - other`, clamped to [`Quantity::MIN`]..=[`Quantity::MAX`].
    pub fn saturating_sub(self, other: Self) -> Self {
        Self::clamped(self.millis.saturating_sub(other.millis))
    }

    fn clamped(millis: i128) -> Self {
        Self {
            millis: millis.max(-i128::MAX),
        }
    }
}

impl Neg for Quantity {
    type Output = Self;

    fn neg(self) -> Self {
        // The range is symmetric, so this cannot overflow.
        Self {
            millis: -self.millis,
        }
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            return f.write_str("0");
        }
        let sign = if self.millis < 0 { "-" } else { "" };
        let magnitude = self.millis.unsigned_abs();
        if !magnitude.is_multiple_of(1000) {
            return write!(f, "{sign}{magnitude}m");
        }
        let units = magnitude / 1000;
        let (dec_mantissa, dec_suffix) = decimal_form(units);
        let decimal = format!("{dec_mantissa}{dec_suffix}");
        let binary = binary_form(units).map(|(m, s)| format!("{m}{s}"));
        match binary {
            Some(binary) if binary.len() <= decimal.len() => write!(f, "{sign}{binary}"),
            _ => write!(f, "{sign}{decimal}"),
        }
    }
}

/// `units` as mantissa and the largest decimal suffix (up to `E`) that divides it.
fn decimal_form(units: u128) -> (u128, &'static str) {
    let mut mantissa = units;
    let mut suffix = "";
    for name in ["k", "M", "G", "T", "P", "E"] {
        if !mantissa.is_multiple_of(1000) {
            break;
        }
        mantissa /= 1000;
        suffix = name;
    }
    (mantissa, suffix)
}

/// `units` as mantissa and the largest binary suffix that divides it, if any does and the value
/// is below apimachinery's binary cap (above it, parsing the text back would cap it).
fn binary_form(units: u128) -> Option<(u128, &'static str)> {
    if units > i64::MAX as u128 {
        return None;
    }
    let mut mantissa = units;
    let mut suffix = None;
    for (name, _) in BINARY_SUFFIXES {
        if !mantissa.is_multiple_of(1024) {
            break;
        }
        mantissa /= 1024;
        suffix = Some(name);
    }
    suffix.map(|s| (mantissa, s))
}

/// Reads a suffix the way apimachinery's `interpret` does, with its ±MaxInt32 exponent bound.
fn interpret_suffix(suffix: &str) -> Result<Multiplier, QuantityErrorKind> {
    if let Some(&(_, exp)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok(Multiplier::Decimal(i64::from(exp)));
    }
    if let Some(&(_, exp)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Ok(Multiplier::Binary(exp));
    }
    let unknown = || QuantityErrorKind::UnknownSuffix(suffix.to_owned());
    let Some(rest) = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
    else {
        return Err(unknown());
    };
    // Go's strconv.ParseInt: an optional sign, then at least one decimal digit.
    let (negative, digits) = match rest.as_bytes().first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    let significant = digits.trim_start_matches('0');
    let magnitude = if significant.len() > 10 {
        None
    } else {
        significant
            .parse::<u64>()
            .ok()
            .or(significant.is_empty().then_some(0))
    };
    match magnitude {
        Some(m) if m <= MAX_EXPONENT => {
            // m <= i32::MAX, so it fits i64 either way round.
            let m = m as i64;
            Ok(Multiplier::Decimal(if negative { -m } else { m }))
        }
        _ => Err(QuantityErrorKind::ExponentOutOfRange(
            suffix[1..].to_owned(),
        )),
    }
}

/// `ceil(digits × 10^exp10 × 2^exp2 × 1000)` for an ASCII digit string, or `None` when it does
/// not fit `u128`.
///
/// Works on decimal digits rather than a fixed-width integer because the digit string is
/// unbounded (`0.000…001Ki`, `1.000…0001`) and every digit can matter for the rounding.
fn magnitude_millis(digits: &[u8], exp10: i64, exp2: u32) -> Option<u128> {
    let significant = match digits.iter().position(|&d| d != b'0') {
        Some(start) => &digits[start..],
        None => return Some(0),
    };
    let trailing_zeros = significant.iter().rev().take_while(|&&d| d == b'0').count();
    let significant = &significant[..significant.len() - trailing_zeros];
    // Scale to millis here; trailing zeros only shift the decimal point.
    let tz = i64::try_from(trailing_zeros).ok()?;
    let point = exp10.checked_add(3)?.checked_add(tz)?;

    let mut n: Vec<u8> = significant.iter().map(|d| d - b'0').collect();
    if exp2 > 0 {
        multiply_by_power_of_two(&mut n, exp2);
    }

    // 10^39 > u128::MAX, so 40 or more integer digits never fit.
    let len = i64::try_from(n.len()).ok()?;
    let int_len = len.checked_add(point)?;
    if int_len > 39 {
        return None;
    }
    if point >= 0 {
        let int = digits_to_u128(&n)?;
        let scale = 10u128.checked_pow(u32::try_from(point).ok()?)?;
        return int.checked_mul(scale);
    }
    if int_len <= 0 {
        // Everything is fraction, and it is not zero (n has a non-zero leading digit).
        return Some(1);
    }
    // 0 < int_len <= 39 here, so the casts are exact.
    let (int, frac) = n.split_at(int_len as usize);
    let int = digits_to_u128(int)?;
    if frac.iter().any(|&d| d != 0) {
        int.checked_add(1)
    } else {
        Some(int)
    }
}

/// Multiplies a big-endian decimal digit vector by 2^exp (exp <= 60) in place.
fn multiply_by_power_of_two(n: &mut Vec<u8>, exp: u32) {
    let factor: u128 = 1 << exp;
    let mut carry: u128 = 0;
    for d in n.iter_mut().rev() {
        let v = u128::from(*d) * factor + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    let mut head = Vec::new();
    while carry > 0 {
        head.push((carry % 10) as u8);
        carry /= 10;
    }
    head.reverse();
    n.splice(0..0, head);
}

fn digits_to_u128(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u128::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Input → millis. Values marked "corpus" are apimachinery v1.37.0's ParseQuantity results
    /// (testdata/quantity_decode_corpus.json), converted from nanos by rounding away from zero.
    #[test]
    fn parses_real_world_and_corner_quantities() {
        let table: &[(&str, i128)] = &[
            ("100m", 100),
            ("0.5", 500),
            ("1.5Gi", 1_610_612_736_000),
            ("2k", 2_000_000),
            ("1e3", 1_000_000),
            ("129e6", 129_000_000_000),
            ("12E6", 12_000_000_000),
            ("+1", 1000),
            ("-1", -1000),
            (".5", 500),
            ("5.", 5000),
            ("0", 0),
            ("-0", 0),
            ("000", 0),
            ("0.0Ei", 0),
            ("0e9", 0),
            ("4", 4000),
            ("250m", 250),
            ("1500m", 1500),
            ("16Gi", 17_179_869_184_000),
            ("512Mi", 536_870_912_000),
            ("100Mi", 104_857_600_000),
            ("1Ki", 1_024_000),
            ("1Ti", 1_099_511_627_776_000),
            ("1Pi", 1_125_899_906_842_624_000),
            ("1Ei", 1_152_921_504_606_846_976_000),
            ("1n", 1),
            ("1u", 1),
            ("999u", 1),
            ("1001u", 2),
            ("5n", 1),
            ("1M", 1_000_000_000),
            ("1G", 1_000_000_000_000),
            ("1T", 1_000_000_000_000_000),
            ("1P", 1_000_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000_000),
            ("12E", 12_000_000_000_000_000_000_000), // not capped: decimal
            ("1E-3", 1),
            ("1e-3", 1),
            ("1.3E+6", 1_300_000_000),
            ("1.2e3", 1_200_000),
            ("0.5e-2", 5),
            ("1.", 1000),
            ("1.G", 1_000_000_000_000),
            (".001", 1),
            (".0001k", 100),
            ("100.035k", 100_035_000),
            ("10.035M", 10_035_000_000),
            ("0.0005Ki", 512),
            ("0.5Mi", 524_288_000),
            ("100.035Ki", 102_435_840),
            ("-1.5", -1500),
            ("-0.0001", -1), // rounds away from zero
            ("-100m", -100),
            ("01", 1000),
            // Capped at 2^63-1 units because the suffix is binary.
            ("8Ei", 9_223_372_036_854_775_807_000),
            ("9Ei", 9_223_372_036_854_775_807_000),
            ("9223372036854775807Ki", 9_223_372_036_854_775_807_000),
            ("-9Ei", -9_223_372_036_854_775_807_000),
            (
                "100000000000000000000000000000000000000000000000000Ki",
                9_223_372_036_854_775_807_000,
            ),
            ("7Ei", 8_070_450_532_247_928_832_000), // corpus: 8070450532247928832e0
            // corpus rows
            ("0.0009765625", 1),                                // 976563e-9
            ("0.0009765625m", 1),                               // 977e-9
            ("0.0009765625Ki", 1000),                           // 1e0
            ("0.0000000001Ki", 1),                              // 103e-9
            ("0.0000000001Gi", 108),                            // 107374183e-9
            ("1.0000000001", 1001),                             // 1000000001e-9
            ("1.0000000001n", 1),                               // 2e-9
            ("1.0000000001Ki", 1_024_001),                      // 1024000000103e-9
            ("123.456789012", 123_457),                         // 123456789012e-9
            ("123.456789012m", 124),                            // 12345679e-8
            ("123.456789012Ki", 126_419_752),                   // 126419751948288e-9
            ("123.456789012Gi", 132_560_717_818_929),           // 132560717818928037888e-9
            ("123.456789012Ei", 9_223_372_036_854_775_807_000), // capped
            ("123.456789012e-10", 1),                           // 13e-9
            ("123.456789012e+21", 123_456_789_012_000_000_000_000_000), // 123456789012e12
            ("1e-1000", 1),                                     // 1e-9
            ("5e-2147483647", 1),
            ("0.000000001E", 1_000_000_000_000), // 1e9
            ("1e21", 1_000_000_000_000_000_000_000_000),
            ("1e35", 100_000_000_000_000_000_000_000_000_000_000_000_000),
            // The fraction tail beyond nano still rounds up, as apimachinery's RoundUp does.
            ("0.0000000000000000000000000000001", 1),
            ("1.0000000000000000000000000000000000000000000001", 1001),
        ];
        for &(input, millis) in table {
            assert_eq!(q(input).millis(), millis, "{input}");
        }
    }

    #[test]
    fn rejects_what_apimachinery_rejects_with_a_reason() {
        use QuantityErrorKind as K;
        let table: &[(&str, QuantityErrorKind)] = &[
            ("", K::Empty),
            ("1.2.3", K::UnexpectedChar { found: '.', at: 3 }),
            ("1.1.M", K::UnexpectedChar { found: '.', at: 3 }),
            ("1+1.0M", K::UnexpectedChar { found: '.', at: 3 }),
            ("1 Gi", K::UnexpectedChar { found: ' ', at: 1 }),
            (" 1", K::UnexpectedChar { found: ' ', at: 0 }),
            ("1 ", K::UnexpectedChar { found: ' ', at: 1 }),
            ("1x", K::UnexpectedChar { found: 'x', at: 1 }),
            ("aoeu", K::UnexpectedChar { found: 'a', at: 0 }),
            ("1µ", K::UnexpectedChar { found: 'µ', at: 1 }),
            ("0.1mi", K::UnknownSuffix("mi".into())),
            ("0.1am", K::UnexpectedChar { found: 'a', at: 3 }),
            (".5i", K::UnknownSuffix("i".into())),
            ("1i", K::UnknownSuffix("i".into())),
            ("-3.01i", K::UnknownSuffix("i".into())),
            ("-3.01e-", K::UnknownSuffix("e-".into())),
            ("1e", K::UnknownSuffix("e".into())),
            ("1Ki3", K::UnknownSuffix("Ki3".into())),
            ("1KI", K::UnexpectedChar { found: 'I', at: 2 }),
            ("1K", K::UnknownSuffix("K".into())),
            ("1e4294967297", K::ExponentOutOfRange("4294967297".into())),
            ("1e2147483648", K::ExponentOutOfRange("2147483648".into())),
            ("1E-2147483648", K::ExponentOutOfRange("-2147483648".into())),
            (
                "0e99999999999999999999",
                K::ExponentOutOfRange("99999999999999999999".into()),
            ),
            ("Gi", K::NoDigits),
            (".", K::NoDigits),
            ("+", K::NoDigits),
            ("-", K::NoDigits),
            ("m", K::NoDigits),
            ("1e36", K::TooLarge),
            ("1e2147483647", K::TooLarge),
        ];
        for (input, kind) in table {
            let err = Quantity::parse(input).expect_err(input);
            assert_eq!(err.kind(), kind, "{input}");
            assert_eq!(err.input(), *input);
        }
    }

    #[test]
    fn error_messages_name_the_input_and_the_problem() {
        let err = Quantity::parse("1 Gi").expect_err("space");
        assert_eq!(
            err.to_string(),
            "invalid quantity \"1 Gi\": unexpected ' ' at byte 1; expected a number, then one \
             of the suffixes n u m k M G T P E Ki Mi Gi Ti Pi Ei or a decimal exponent like e3"
        );
        let long = "9".repeat(200) + "x";
        let err = Quantity::parse(&long).expect_err("long");
        assert!(
            err.input().ends_with('…') && err.input().len() < 80,
            "{}",
            err.input()
        );
    }

    #[test]
    fn value_rounds_away_from_zero_like_kubernetes() {
        assert_eq!(q("1500m").value(), 2);
        assert_eq!(q("1").value(), 1);
        assert_eq!(q("1m").value(), 1);
        assert_eq!(q("-1500m").value(), -2);
        assert_eq!(q("0").value(), 0);
        assert_eq!(q("1.5Gi").value(), 1_610_612_736);
    }

    #[test]
    fn displays_canonically() {
        let table: &[(&str, &str)] = &[
            ("0", "0"),
            ("0Gi", "0"),
            ("500m", "500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("4", "4"),
            ("4000m", "4"),
            ("16Gi", "16Gi"),
            ("17179869184", "16Gi"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("1000M", "1G"),
            ("2k", "2k"),
            ("1e3", "1k"),
            ("129e6", "129M"),
            ("1024", "1Ki"),
            ("1000Ki", "1024k"),
            ("1000Mi", "1000Mi"),
            ("2G", "2G"),
            ("1536", "1536"),
            ("-1", "-1"),
            ("-16Gi", "-16Gi"),
            ("-100m", "-100m"),
            ("1n", "1m"),
            ("8Ei", "9223372036854775807"),
            ("1e21", "1000E"),
            ("16Ei", "9223372036854775807"),
            ("18446744073709551616", "18446744073709551616"),
        ];
        for &(input, shown) in table {
            assert_eq!(q(input).to_string(), shown, "{input}");
        }
        assert_eq!(Quantity::MAX.to_string(), format!("{}m", i128::MAX));
        assert_eq!(Quantity::MIN.to_string(), format!("-{}m", i128::MAX));
    }

    #[test]
    fn arithmetic_is_exact_and_checked() {
        assert_eq!(q("1.5").checked_add(q("500m")), Some(q("2")));
        assert_eq!(q("1").checked_sub(q("1500m")), Some(q("-500m")));
        assert_eq!(Quantity::MAX.checked_add(q("1m")), None);
        assert_eq!(Quantity::MIN.checked_sub(q("1m")), None);
        assert_eq!(Quantity::MAX.saturating_add(q("1")), Quantity::MAX);
        assert_eq!(Quantity::MIN.saturating_sub(q("1")), Quantity::MIN);
        assert_eq!(-Quantity::MIN, Quantity::MAX);
        assert_eq!(Quantity::checked_from_millis(i128::MIN), None);
        assert!(q("100m") < q("1") && q("1Gi") > q("1G"));
        assert!(q("10000T") > q("100Gi"));
        assert_eq!(Quantity::from_units(3), q("3"));
        assert_eq!(Quantity::from_millis(-250), q("-250m"));
        assert!(Quantity::default().is_zero());
        assert!(q("-1m").is_negative());
        assert_eq!("2Gi".parse::<Quantity>(), Ok(q("2048Mi")));
    }

    /// An independent reference for `<int>.<frac><suffix>` with small numbers: exact rational
    /// arithmetic in i128, rounded up to millis, binary values capped at 2^63-1 units.
    fn reference_millis(int: u64, frac: &str, multiplier: (i32, u32)) -> i128 {
        let (exp10, exp2) = multiplier;
        let frac_len = u32::try_from(frac.len()).expect("short fraction");
        let frac_value: i128 = if frac.is_empty() {
            0
        } else {
            frac.parse().expect("digits")
        };
        let n = i128::from(int) * 10i128.pow(frac_len) + frac_value;
        let mut num = n * 1000 * (1i128 << exp2);
        let mut den = 10i128.pow(frac_len);
        if exp10 >= 0 {
            num *= 10i128.pow(exp10.unsigned_abs());
        } else {
            den *= 10i128.pow(exp10.unsigned_abs());
        }
        let millis = (num + den - 1) / den;
        if exp2 > 0 {
            // apimachinery's cap for binary suffixes.
            millis.min(i128::from(i64::MAX) * 1000)
        } else {
            millis
        }
    }

    fn suffix_strategy() -> impl Strategy<Value = (&'static str, (i32, u32))> {
        prop_oneof![
            Just(("", (0, 0))),
            Just(("n", (-9, 0))),
            Just(("u", (-6, 0))),
            Just(("m", (-3, 0))),
            Just(("k", (3, 0))),
            Just(("M", (6, 0))),
            Just(("G", (9, 0))),
            Just(("T", (12, 0))),
            Just(("Ki", (0, 10))),
            Just(("Mi", (0, 20))),
            Just(("Gi", (0, 30))),
            Just(("Ti", (0, 40))),
            Just(("Pi", (0, 50))),
            Just(("e-7", (-7, 0))),
            Just(("e4", (4, 0))),
            Just(("E+2", (2, 0))),
        ]
    }

    proptest! {
        #[test]
        fn display_round_trips(millis in any::<i128>().prop_filter("symmetric", |m| *m != i128::MIN)) {
            let quantity = Quantity::checked_from_millis(millis).expect("in range");
            let text = quantity.to_string();
            prop_assert_eq!(Quantity::parse(&text), Ok(quantity), "{}", text);
        }

        #[test]
        fn display_round_trips_for_typical_values(
            units in 0i64..1_000_000,
            shift in prop_oneof![Just(0u32), Just(10), Just(20), Just(30), Just(3), Just(9)],
            negative in any::<bool>(),
        ) {
            let base = i128::from(units) << shift;
            let millis = if negative { -base * 1000 } else { base * 1000 };
            let quantity = Quantity::checked_from_millis(millis).expect("in range");
            prop_assert_eq!(Quantity::parse(&quantity.to_string()), Ok(quantity));
        }

        #[test]
        fn parse_matches_exact_rational_reference(
            int in 0u64..1_000_000,
            frac in "[0-9]{0,9}",
            (suffix, multiplier) in suffix_strategy(),
            with_point in any::<bool>(),
        ) {
            let text = if with_point || !frac.is_empty() {
                format!("{int}.{frac}{suffix}")
            } else {
                format!("{int}{suffix}")
            };
            let expected = reference_millis(int, &frac, multiplier);
            prop_assert_eq!(q(&text).millis(), expected, "{}", &text);
            prop_assert_eq!(q(&format!("-{text}")).millis(), -expected);
        }

        #[test]
        fn arithmetic_matches_i128(a in -(1i128 << 100)..(1i128 << 100), b in -(1i128 << 100)..(1i128 << 100)) {
            let qa = Quantity::checked_from_millis(a).expect("in range");
            let qb = Quantity::checked_from_millis(b).expect("in range");
            prop_assert_eq!(qa.checked_add(qb).map(Quantity::millis), Some(a + b));
            prop_assert_eq!(qa.checked_sub(qb).map(Quantity::millis), Some(a - b));
            prop_assert_eq!(qa.cmp(&qb), a.cmp(&b));
        }

        #[test]
        fn parse_never_panics(s in "[-+]?[0-9.]{0,6}[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,4}") {
            let _ = Quantity::parse(&s);
        }
    }
}
