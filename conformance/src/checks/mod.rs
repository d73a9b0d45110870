//! The checks, one module per part of the API in the order an author meets them. Each module
//! makes its calls and records one outcome per check it owns; a check whose prerequisite
//! failed is skipped, naming the prerequisite.

mod catalogue;
mod create;
mod drift;
mod finally;
mod identity;
mod lifecycle;
mod node_class;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use provider_sdk::ERROR_DOMAIN;
use provider_sdk::v1::ErrorReason;
use tonic::{Code, Status};
use tonic_types::StatusExt as _;

use crate::session::{Session, describe_message, describe_status};
use crate::{CheckResult, Config, Outcome, Report, SessionError};

/// One check: an id and the promise of the API it tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// The id, `<part>.<what>`, e.g. `create.idempotent`.
    pub id: &'static str,
    /// What the API promises.
    pub promise: &'static str,
}

/// Every check, in the order they run.
pub const ALL: &[Check] = &{
    const N: usize = identity::CHECKS.len()
        + node_class::CHECKS.len()
        + catalogue::CHECKS.len()
        + create::CHECKS.len()
        + lifecycle::CHECKS.len()
        + drift::CHECKS.len()
        + finally::CHECKS.len();
    let parts: [&[Check]; 7] = [
        &identity::CHECKS,
        &node_class::CHECKS,
        &catalogue::CHECKS,
        &create::CHECKS,
        &drift::CHECKS,
        &lifecycle::CHECKS,
        &finally::CHECKS,
    ];
    let mut all = [identity::NAME; N];
    let mut at = 0;
    let mut part = 0;
    while part < parts.len() {
        let mut i = 0;
        while i < parts[part].len() {
            all[at] = parts[part][i];
            at += 1;
            i += 1;
        }
        part += 1;
    }
    all
};

/// Collects outcomes in order, each with the time since the previous one.
#[derive(Debug)]
pub(crate) struct Recorder {
    results: Vec<CheckResult>,
    last: Instant,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            results: Vec::with_capacity(ALL.len()),
            last: Instant::now(),
        }
    }

    pub(crate) fn record(&mut self, check: Check, outcome: Outcome) {
        let now = Instant::now();
        let duration: Duration = now - self.last;
        self.last = now;
        tracing::debug!(check = check.id, ?outcome, "check done");
        self.results.push(CheckResult {
            id: check.id,
            promise: check.promise,
            outcome,
            duration,
        });
    }

    /// Records every check in `checks` as skipped for `why`.
    pub(crate) fn skip(&mut self, checks: &[Check], why: &str) {
        for check in checks {
            self.record(*check, Outcome::skip(why));
        }
    }
}

/// The outcome of calling an optional RPC: it must answer UNIMPLEMENTED exactly when it is not
/// announced. `result` is what the call answered.
pub(crate) fn capability_outcome<T>(
    rpc: &str,
    announced: bool,
    result: &Result<T, Status>,
    sent: &str,
) -> Outcome {
    let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
    match (announced, code) {
        (true, Code::Unimplemented) => Outcome::fail(
            sent,
            "status Unimplemented",
            format!("{rpc} is announced in GetPluginCapabilities, so it must be implemented"),
        ),
        (false, Code::Unimplemented) | (true, _) => Outcome::Pass,
        (false, code) => Outcome::fail(
            sent,
            format!("status {code:?}"),
            format!(
                "UNIMPLEMENTED: {rpc} is not announced in GetPluginCapabilities (announce it, or \
                 answer UNIMPLEMENTED)"
            ),
        ),
    }
}

/// The outcome of a call that must fail with `code` and an ErrorInfo of `reason` whose
/// metadata `metadata` accepts (it says what is missing otherwise).
pub(crate) fn expect_error<T: std::fmt::Debug>(
    sent: &str,
    result: &Result<T, Status>,
    code: Code,
    reason: ErrorReason,
    metadata: impl Fn(&HashMap<String, String>) -> Result<(), String>,
) -> Outcome {
    let expected = format!(
        "status {code:?} with ErrorInfo reason {}",
        reason.as_str_name()
    );
    match result {
        Ok(answer) => Outcome::fail(sent, describe_message(answer), expected),
        Err(status) if status.code() != code => {
            Outcome::fail(sent, describe_status(status), expected)
        }
        Err(status) => match status.get_details_error_info() {
            Some(info) if info.reason == reason.as_str_name() && info.domain == ERROR_DOMAIN => {
                match metadata(&info.metadata) {
                    Ok(()) => Outcome::Pass,
                    Err(missing) => Outcome::fail(
                        sent,
                        describe_status(status),
                        format!("{expected}, its metadata {missing}"),
                    ),
                }
            }
            _ => Outcome::fail(sent, describe_status(status), expected),
        },
    }
}

/// Metadata `key` must be set and satisfy `valid`.
pub(crate) fn metadata_key(
    key: &'static str,
    valid: impl Fn(&str) -> bool,
    what: &'static str,
) -> impl Fn(&HashMap<String, String>) -> Result<(), String> {
    move |metadata| match metadata.get(key) {
        Some(value) if valid(value) => Ok(()),
        _ => Err(format!("with `{key}`: {what}")),
    }
}

/// Runs every check against the plugin `config` names.
pub(crate) async fn run(config: Config) -> Result<Report, SessionError> {
    let endpoint = config.endpoint.to_string();
    let mut session = Session::new(config)?;
    let mut recorder = Recorder::new();

    let plugin = identity::run(&mut session, &mut recorder).await;
    node_class::run(&mut session, &mut recorder).await?;
    catalogue::run(&mut session, &mut recorder).await;
    let launched = create::run(&mut session, &mut recorder).await;
    drift::run(&mut session, &mut recorder, launched.as_ref()).await;
    lifecycle::run(&mut session, &mut recorder, launched.as_ref()).await;
    finally::run(&mut session, &mut recorder).await;

    Ok(Report {
        plugin: plugin.unwrap_or(endpoint),
        checks: recorder.results,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_check_has_a_unique_id_and_a_promise() {
        let ids: BTreeSet<&str> = ALL.iter().map(|check| check.id).collect();
        assert_eq!(ids.len(), ALL.len(), "ids are unique");
        assert!(ALL.len() >= 40, "{} checks", ALL.len());
        for check in ALL {
            assert!(!check.promise.is_empty(), "{}", check.id);
            assert!(check.id.contains('.'), "{}", check.id);
        }
    }

    fn status(code: Code) -> Result<(), Status> {
        Err(Status::new(code, "answered"))
    }

    #[test]
    fn an_optional_rpc_is_implemented_exactly_when_announced() {
        assert_eq!(
            capability_outcome("Get", true, &Ok(()), "Get"),
            Outcome::Pass
        );
        assert_eq!(
            capability_outcome("Get", false, &status(Code::Unimplemented), "Get"),
            Outcome::Pass
        );
        assert_eq!(
            capability_outcome("Get", true, &status(Code::NotFound), "Get"),
            Outcome::Pass
        );
        assert!(capability_outcome("Get", true, &status(Code::Unimplemented), "Get").is_fail());
        assert!(capability_outcome("Get", false, &Ok(()), "Get").is_fail());
    }
}
