//! The report, rendered for people (text), for tools (JSON) and for CI dashboards (JUnit XML,
//! one test case per check, through `quick-junit`).

use std::fmt::Write as _;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report as JunitReport, TestCase, TestCaseStatus, TestSuite};

use crate::{Outcome, Report};

/// Serializes a duration as seconds.
pub(crate) fn seconds<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

/// One line per check, the failures with what was sent, received and expected, and a total.
pub fn text(report: &Report) -> String {
    let mut out = format!("conformance of {}\n", report.plugin);
    for check in &report.checks {
        match &check.outcome {
            Outcome::Pass => {
                let _ = writeln!(out, "PASS {}", check.id);
            }
            Outcome::Skip { why } => {
                let _ = writeln!(out, "SKIP {}: {why}", check.id);
            }
            Outcome::Fail(failure) => {
                let _ = writeln!(out, "FAIL {}: {}", check.id, check.promise);
                let _ = writeln!(out, "     sent:     {}", failure.sent);
                let _ = writeln!(out, "     received: {}", failure.received);
                let _ = writeln!(out, "     expected: {}", failure.expected);
            }
        }
    }
    let (pass, skip, fail) = report.counts();
    let _ = writeln!(
        out,
        "{} checks: {pass} passed, {skip} skipped, {fail} failed",
        report.checks.len()
    );
    out
}

/// The report as JSON: `{plugin, checks: [{id, promise, outcome, seconds, ...}]}`.
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The report as JUnit XML: one suite, one test case per check.
pub fn junit(report: &Report) -> Result<String, quick_junit::SerializeError> {
    let mut junit = JunitReport::new("provider-conformance");
    let mut suite = TestSuite::new(report.plugin.as_str());
    for check in &report.checks {
        let status = match &check.outcome {
            Outcome::Pass => TestCaseStatus::success(),
            Outcome::Skip { why } => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(why.as_str());
                status
            }
            Outcome::Fail(failure) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(check.promise);
                status.set_description(format!(
                    "sent:     {}\nreceived: {}\nexpected: {}",
                    failure.sent, failure.received, failure.expected
                ));
                status
            }
        };
        let mut case = TestCase::new(check.id, status);
        case.set_time(check.duration);
        suite.add_test_case(case);
    }
    junit.add_test_suite(suite);
    junit.to_string()
}
