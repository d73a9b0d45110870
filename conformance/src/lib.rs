//! The conformance suite of the cloud provider plugin API (`karpenter.cloudprovider.v1`): it
//! points at any running plugin, whatever its language, and checks that it keeps every promise
//! the proto documents, one named check each, in the order an author meets them (identity, node
//! classes, instance types, Create, Get and List, IsDrifted, Delete, repair policies). The
//! model is CSI's `csi-sanity`.
//!
//! Every failure says what was sent, what came back and what the API says should have. Where
//! core runs its own check on an answer (the handshake, the catalogue, the client's reading of
//! Create, Get, List and ResolveNodeClass), the suite runs that very function, so a plugin that
//! passes is a plugin core accepts. The suite deletes every instance it launched.
//!
//! - [`run`] runs the suite against a [`Config`]; [`checks::ALL`] lists every check.
//! - [`report`] renders the result as text, JSON or JUnit XML.

pub mod checks;
pub mod report;
mod session;
pub mod targets;

use std::time::Duration;

use provider_sdk::Endpoint;
use provider_sdk::tls::ClientTls;
use serde::Serialize;

pub use checks::{ALL, Check};
pub use session::SessionError;

/// What to test and how patiently.
#[derive(Debug, Clone)]
pub struct Config {
    /// The plugin's endpoint.
    pub endpoint: Endpoint,
    /// TLS towards a `tcp://` endpoint.
    pub tls: Option<ClientTls>,
    /// A valid node class object of one of the plugin's kinds (JSON), as a user would apply
    /// it; `None` uses `{apiVersion, kind, metadata: {name: conformance}, spec: {}}` of the
    /// plugin's default kind.
    pub node_class: Option<serde_json::Value>,
    /// How long to wait for the plugin to say it is ready.
    pub ready_timeout: Duration,
    /// How long a launch (Create answering PENDING) or a termination (Delete answering
    /// TERMINATING) may take.
    pub settle_timeout: Duration,
    /// How often to ask again while waiting.
    pub poll_interval: Duration,
    /// The start of every NodeClaim name the suite makes; a random suffix follows, so two runs
    /// against one cloud account never share a name.
    pub name_prefix: String,
}

impl Config {
    /// The defaults for `endpoint`: 60 s to be ready, 5 minutes to launch or terminate,
    /// polling every 2 s, names starting `conformance-`.
    pub fn new(endpoint: Endpoint) -> Self {
        Config {
            endpoint,
            tls: None,
            node_class: None,
            ready_timeout: Duration::from_secs(60),
            settle_timeout: Duration::from_secs(300),
            poll_interval: Duration::from_secs(2),
            name_prefix: "conformance".to_owned(),
        }
    }
}

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    /// The plugin did what the API says.
    Pass,
    /// The check does not apply (an optional RPC the plugin does not announce, a catalogue
    /// with one zone) or could not run because an earlier step failed; says which.
    Skip {
        /// Why.
        why: String,
    },
    /// The plugin did not do what the API says.
    Fail(Failure),
}

/// What went wrong, in the three parts an author needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The request, or the sequence of requests.
    pub sent: String,
    /// What the plugin answered.
    pub received: String,
    /// What the API says it should have answered.
    pub expected: String,
}

impl Outcome {
    /// A failure.
    pub fn fail(
        sent: impl Into<String>,
        received: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        Outcome::Fail(Failure {
            sent: sent.into(),
            received: received.into(),
            expected: expected.into(),
        })
    }

    /// A skip.
    pub fn skip(why: impl Into<String>) -> Self {
        Outcome::Skip { why: why.into() }
    }

    /// Whether it failed.
    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    /// The check's id, e.g. `create.idempotent`.
    pub id: &'static str,
    /// What the API promises, which the check tests.
    pub promise: &'static str,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// How long it took (the calls of checks that share one answer count once, in the first).
    #[serde(rename = "seconds", serialize_with = "report::seconds")]
    pub duration: Duration,
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The plugin as it named itself (`name vendor_version`), or the endpoint when it did not.
    pub plugin: String,
    /// Every check, in the order it ran (the order of [`ALL`]).
    pub checks: Vec<CheckResult>,
}

impl Report {
    /// How many checks passed, were skipped and failed.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.checks
            .iter()
            .fold((0, 0, 0), |(pass, skip, fail), check| match check.outcome {
                Outcome::Pass => (pass + 1, skip, fail),
                Outcome::Skip { .. } => (pass, skip + 1, fail),
                Outcome::Fail(_) => (pass, skip, fail + 1),
            })
    }

    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.counts().2 == 0
    }

    /// The result of the check `id`.
    pub fn get(&self, id: &str) -> Option<&CheckResult> {
        self.checks.iter().find(|check| check.id == id)
    }
}

/// Runs every check against the plugin `config` names. Errors only when the suite cannot run
/// at all (the endpoint is malformed, the node class file names a kind the plugin does not
/// manage); a plugin that answers wrongly, or not at all, gives a report of failed checks.
pub async fn run(config: Config) -> Result<Report, SessionError> {
    checks::run(config).await
}
