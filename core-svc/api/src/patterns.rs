//! The regular expressions the CRDs carry, each next to a hand-written matcher with the same
//! semantics (Go RE2, as kube-apiserver evaluates OpenAPI `pattern`s), so the schema and the Rust
//! validation cannot disagree. Hand-written because the crate has no regex dependency; the tests
//! pin each matcher against the cases that tell the expression's corners apart.
//!
//! An expression Rust checks is a [`Pattern`], which carries its matcher, so no check can pair
//! an expression with another's matcher; one only the schema carries is a plain string.

use std::fmt;

/// A CRD `pattern` and the matcher that implements it. It displays as the expression, which is
/// what schemas and error messages show.
#[derive(Debug, Clone, Copy)]
pub struct Pattern {
    regex: &'static str,
    matcher: fn(&str) -> bool,
}

impl Pattern {
    /// Pairs an expression with its matcher.
    pub const fn new(regex: &'static str, matcher: fn(&str) -> bool) -> Self {
        Self { regex, matcher }
    }

    /// The expression, as the CRD carries it.
    pub const fn as_str(self) -> &'static str {
        self.regex
    }

    /// Whether `s` matches the expression.
    pub fn matches(self, s: &str) -> bool {
        (self.matcher)(s)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.regex)
    }
}

/// `spec.disruption.budgets[].nodes`: a percentage (0–100) or a count.
pub const BUDGET_NODES: Pattern = Pattern::new("^((100|[0-9]{1,2})%|[0-9]+)$", is_budget_nodes);

/// `spec.disruption.budgets[].schedule`: a cron macro or five fields. Upstream's alternation is
/// anchored on one side each (`^(@…)|(…)$`); the matcher reproduces that, not the intent.
pub const BUDGET_SCHEDULE: Pattern = Pattern::new(
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$",
    is_budget_schedule,
);

/// `spec.disruption.budgets[].duration`: minutes and hours only (cron has no seconds), with the
/// `0s` Go's `Duration.String()` appends.
pub const BUDGET_DURATION: Pattern = Pattern::new(
    "^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$",
    is_budget_duration,
);

/// `consolidateAfter` and `expireAfter`: whole seconds, minutes, hours, or `Never`.
pub const DURATION_OR_NEVER: Pattern =
    Pattern::new("^(([0-9]+(s|m|h))+|Never)$", is_duration_or_never);

/// `terminationGracePeriod`: whole seconds, minutes, hours.
pub const DURATION: Pattern = Pattern::new("^([0-9]+(s|m|h))+$", is_duration);

/// A label value: empty, or up to 63 alphanumerics, `-`, `_`, `.`, starting and ending with an
/// alphanumeric (the length is a separate `maxLength`).
pub const LABEL_VALUE: Pattern = Pattern::new(
    "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
    is_label_value,
);

/// A label key (requirement keys, taint keys): an optional DNS-subdomain prefix and `/`, then a
/// name. Upstream uses the same expression for taint values.
pub const QUALIFIED_NAME: Pattern = Pattern::new(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$",
    is_qualified_name,
);

/// `nodeClassRef.group`: no `/` (a group, not an apiVersion).
pub const GROUP: Pattern = Pattern::new("^[^/]*$", is_group);

/// `status.conditions[].type`.
pub const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// `status.conditions[].reason`: empty or CamelCase-ish.
pub const CONDITION_REASON: &str = "^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$";

/// A resource quantity, as Kubernetes' own schemas spell it.
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The matcher of [`QUANTITY`]: an optionally signed decimal (`1`, `1.`, `.5`, `1.5`), then
/// optionally a binary suffix (`Ki` to `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` to `E`) or
/// an exponent (`e3`, `E-2`, whose mantissa may itself have a fraction: `e1.5`).
pub fn is_quantity(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let Some(rest) = decimal(unsigned) else {
        return false;
    };
    match rest {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        _ => rest
            .strip_prefix(['e', 'E'])
            .map(|exponent| exponent.strip_prefix(['+', '-']).unwrap_or(exponent))
            .and_then(decimal)
            .is_some_and(str::is_empty),
    }
}

/// What follows the quantity regex's number (`[0-9]+(\.[0-9]*)?|\.[0-9]+`) at the start of
/// `s`, or `None` when `s` does not start with one.
fn decimal(s: &str) -> Option<&str> {
    let digits = |t: &str| t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let whole = digits(s);
    let rest = &s[whole..];
    match rest.strip_prefix('.') {
        Some(fraction) => {
            let decimals = digits(fraction);
            (whole > 0 || decimals > 0).then(|| &fraction[decimals..])
        }
        None => (whole > 0).then_some(rest),
    }
}

/// The matcher of [`BUDGET_NODES`].
pub fn is_budget_nodes(s: &str) -> bool {
    match s.strip_suffix('%') {
        Some(pct) => pct == "100" || (all_digits(pct) && pct.len() <= 2),
        None => all_digits(s),
    }
}

/// Whitespace as RE2's `\s` sees it.
fn is_re2_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\x0c' | '\r' | ' ')
}

/// The matcher of [`BUDGET_SCHEDULE`].
pub fn is_budget_schedule(s: &str) -> bool {
    const MACROS: [&str; 7] = [
        "annually", "yearly", "monthly", "weekly", "daily", "midnight", "hourly",
    ];
    if let Some(rest) = s.strip_prefix('@')
        && MACROS.iter().any(|m| rest.starts_with(m))
    {
        return true;
    }
    // `(.+)\s(.+)\s(.+)\s(.+)\s(.+)$`, unanchored at the start: five non-empty runs of
    // non-newline characters separated by single whitespace characters, ending the input.
    // Simulated as an NFA: bit 2k = inside run k, bit 2k+1 = just after separator k+1.
    let mut states: u16 = 0;
    for c in s.chars() {
        let mut next: u16 = 0;
        if c != '\n' {
            next |= 1; // a match may start anywhere
        }
        for k in 0..5u16 {
            let in_run = states & (1 << (2 * k)) != 0;
            let after_sep = k > 0 && states & (1 << (2 * k - 1)) != 0;
            if (in_run || after_sep) && c != '\n' {
                next |= 1 << (2 * k);
            }
            if in_run && k < 4 && is_re2_space(c) {
                next |= 1 << (2 * k + 1);
            }
        }
        states = next;
    }
    states & (1 << 8) != 0
}

/// Splits `s` into `(digits, unit)` pairs; `None` if it is not a sequence of them.
fn duration_parts(s: &str) -> Option<Vec<(&str, char)>> {
    let mut parts = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        let (digits, after) = rest.split_at(n);
        let unit = after.chars().next()?;
        parts.push((digits, unit));
        rest = &after[unit.len_utf8()..];
    }
    Some(parts)
}

/// The matcher of [`DURATION`].
pub fn is_duration(s: &str) -> bool {
    duration_parts(s)
        .is_some_and(|p| !p.is_empty() && p.iter().all(|(_, u)| matches!(u, 's' | 'm' | 'h')))
}

/// The matcher of [`DURATION_OR_NEVER`].
pub fn is_duration_or_never(s: &str) -> bool {
    s == "Never" || is_duration(s)
}

/// The matcher of [`BUDGET_DURATION`].
pub fn is_budget_duration(s: &str) -> bool {
    let body = s.strip_suffix("0s").unwrap_or(s);
    let Some(parts) = duration_parts(body) else {
        return false;
    };
    matches!(parts.as_slice(), [(_, 'h' | 'm')] | [(_, 'h'), (_, 'm')])
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: non-empty, alphanumeric at both ends.
fn is_label_name(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    is_alnum(first)
        && is_alnum(last)
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// The matcher of [`LABEL_VALUE`].
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

/// A lower-case RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label(s: &str) -> bool {
    let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    lower_alnum(first) && lower_alnum(last) && s.chars().all(|c| lower_alnum(c) || c == '-')
}

/// A lower-case RFC 1123 subdomain, without its length limit: dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(is_dns_label)
}

/// Matches [`QUALIFIED_NAME`] (no length limits; those are separate).
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// The matcher of [`GROUP`].
pub fn is_group(s: &str) -> bool {
    !s.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_nodes() {
        for ok in ["0", "10", "123456", "0%", "9%", "10%", "99%", "100%"] {
            assert!(is_budget_nodes(ok), "{ok}");
        }
        for bad in [
            "", "%", "101%", "100.0%", "1000%", "-1", "10 %", "ten", "5%%",
        ] {
            assert!(!is_budget_nodes(bad), "{bad}");
        }
    }

    #[test]
    fn budget_schedule() {
        for ok in [
            "@daily",
            "@hourly",
            "@annually",
            "0 9 * * mon-fri",
            "*/5 * * * *",
            "0 0 1 1 *",
            // What the expression lets through beyond the intent: a macro prefix, more fields,
            // fields with spaces inside.
            "@dailyish",
            "a b c d e f",
            "x  y z w v",
            // `\s` matches a newline, `.` does not.
            "0 9 * *\n*",
        ] {
            assert!(is_budget_schedule(ok), "{ok}");
        }
        for bad in [
            "",
            "@every 5m",
            "@reboot",
            "0 9 * *",
            "* * * * ",
            "daily",
            "0 9\n* *",
            "a\n\nb c d e",
        ] {
            assert!(!is_budget_schedule(bad), "{bad:?}");
        }
    }

    #[test]
    fn budget_duration() {
        for ok in ["10m", "8h", "1h30m", "8h0m0s", "30m0s", "0h"] {
            assert!(is_budget_duration(ok), "{ok}");
        }
        for bad in [
            "", "30s", "1h30m10s", "1m1h", "1d", "h", "1.5h", "10m0", "0s",
        ] {
            assert!(!is_budget_duration(bad), "{bad}");
        }
    }

    #[test]
    fn durations() {
        for ok in ["0s", "720h", "1h30m", "1h1h", "90s"] {
            assert!(is_duration(ok), "{ok}");
            assert!(is_duration_or_never(ok), "{ok}");
        }
        assert!(is_duration_or_never("Never"));
        for bad in ["", "Never", "1d", "1.5h", "300ms", "1h 30m", "h", "-1h"] {
            assert!(!is_duration(bad), "{bad}");
        }
        for bad in ["never", "NEVER", "1d", "300ms"] {
            assert!(!is_duration_or_never(bad), "{bad}");
        }
    }

    #[test]
    fn quantities() {
        for ok in [
            "1", "+1", "-1", "1.", ".5", "1.5", "100m", "1Gi", "1.5Gi", "2e3", "2E-3", "1e1.5",
            "5Ei", "3n", "0",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "", ".", "+", "1 Gi", "1gi", "1GiB", "Gi", "1e", "e3", "1..5", "1%", "--1", "1Ki2",
        ] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "my-team", "v1.2_3", "A9"] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", ".", "_x", "é"] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "billing-team",
            "karpenter.sh/capacity-type",
            "node.kubernetes.io/instance-type",
            "example.com/Special_Taint.1",
            "a-b.c/D",
        ] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "", "/a", "a/", "A.com/a", "a..b/c", "-a.com/b", "a/b/c", "a b", "a.com/-b",
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    #[test]
    fn groups() {
        assert!(is_group("karpenter.k8s.aws"));
        assert!(is_group(""));
        assert!(!is_group("karpenter.k8s.aws/v1"));
    }
}
