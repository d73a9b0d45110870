//! The connection to the plugin under test and what the suite learned from it so far: the
//! clients with the API's deadlines, every error status seen (for the ErrorInfo check), and the
//! NodeClaims the suite launched (so that it can delete them all, whatever fails).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use core_svc::plugin::{Capabilities, Deadlines, Vocabulary, with_deadline};
use provider_sdk::v1::cloud_provider_service_client::CloudProviderServiceClient;
use provider_sdk::v1::identity_service_client::IdentityServiceClient;
use provider_sdk::v1::{
    self, CreateRequest, CreateResponse, DeleteRequest, DeletionState, LaunchState, NodeClassKind,
};
use provider_sdk::{ERROR_DOMAIN, serve::MAX_MESSAGE_BYTES};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt as _;

use crate::Config;

/// Why the suite could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The channel could not be set up (a bad TLS file, say).
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: provider_sdk::connect::ConnectError,
    },
    /// The node class given is not one the suite can use.
    #[error("the node class given: {0}")]
    NodeClass(String),
}

/// One error status the plugin answered, and to which call.
#[derive(Debug, Clone)]
pub(crate) struct SeenError {
    pub(crate) rpc: &'static str,
    pub(crate) status: Status,
}

/// The plugin under test and what is known of it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) config: Config,
    pub(crate) identity: IdentityServiceClient<Channel>,
    pub(crate) cloud: CloudProviderServiceClient<Channel>,
    pub(crate) deadlines: Deadlines,
    /// A random suffix of every name this run makes.
    pub(crate) run_id: String,
    pub(crate) capabilities: Capabilities,
    pub(crate) vocabulary: Option<Vocabulary>,
    pub(crate) kinds: Vec<NodeClassKind>,
    /// The node class as core would send it: the object with its published status and hash
    /// annotations.
    pub(crate) node_class: Option<serde_json::Value>,
    /// The static hash and its version, when the plugin resolved one.
    pub(crate) static_hash: Option<(String, String)>,
    pub(crate) catalogue: Option<Vec<v1::InstanceType>>,
    /// Every NodeClaim name the suite sent to Create, with the provider ID it got, if any.
    pub(crate) launched: BTreeMap<String, Option<String>>,
    /// Every error status the plugin answered (not the suite's deliberately short Create).
    pub(crate) errors: Vec<SeenError>,
}

impl Session {
    pub(crate) fn new(config: Config) -> Result<Self, SessionError> {
        let channel = provider_sdk::connect::connect(&config.endpoint, config.tls.as_ref())
            .map_err(|source| SessionError::Connect {
                endpoint: config.endpoint.to_string(),
                source,
            })?;
        Ok(Session {
            identity: IdentityServiceClient::new(channel.clone()),
            cloud: CloudProviderServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES),
            deadlines: Deadlines::DEFAULT,
            run_id: run_id(),
            capabilities: Capabilities::default(),
            vocabulary: None,
            kinds: Vec::new(),
            node_class: None,
            static_hash: None,
            catalogue: None,
            launched: BTreeMap::new(),
            errors: Vec::new(),
            config,
        })
    }

    /// A NodeClaim name of this run: `<prefix>-<run>-<what>`.
    pub(crate) fn name(&self, what: &str) -> String {
        format!("{}-{}-{what}", self.config.name_prefix, self.run_id)
    }

    /// Notes the outcome of a call: an error is kept for the ErrorInfo and deadline checks.
    pub(crate) fn note<T>(&mut self, rpc: &'static str, result: &Result<T, Status>) {
        if let Err(status) = result {
            self.errors.push(SeenError {
                rpc,
                status: status.clone(),
            });
        }
    }

    /// Create until the launch is no longer PENDING (at most the settle timeout): the final
    /// answer, or the first error. Records the name for cleanup first.
    pub(crate) async fn create(
        &mut self,
        request: CreateRequest,
    ) -> Result<CreateResponse, CreateError> {
        let name = self.will_launch(&request);
        let (result, errors) = self.launcher().launch(request).await;
        self.launch_done(&name, &result, errors);
        result
    }

    /// Remembers the NodeClaim `request` names, for cleanup, before it is sent.
    pub(crate) fn will_launch(&mut self, request: &CreateRequest) -> String {
        let name = request
            .node_claim
            .as_ref()
            .map(|claim| claim.name.clone())
            .unwrap_or_default();
        if !name.is_empty() {
            self.launched.entry(name.clone()).or_default();
        }
        name
    }

    /// Notes what a launch of `name` gave.
    pub(crate) fn launch_done(
        &mut self,
        name: &str,
        result: &Result<CreateResponse, CreateError>,
        errors: Vec<Status>,
    ) {
        for status in errors {
            self.note::<()>("Create", &Err(status));
        }
        if let Ok(answer) = result
            && let Some(provider_id) = answer
                .node_claim
                .as_ref()
                .and_then(|claim| claim.status.as_ref())
                .map(|status| status.provider_id.clone())
                .filter(|id| !id.is_empty())
            && !name.is_empty()
        {
            self.launched.insert(name.to_owned(), Some(provider_id));
        }
    }

    /// What launches without the session, for calls made in parallel.
    pub(crate) fn launcher(&self) -> Launcher {
        Launcher {
            cloud: self.cloud.clone(),
            deadline: self.deadlines.create,
            settle_timeout: self.config.settle_timeout,
            poll_interval: self.config.poll_interval,
        }
    }

    /// Every instance List gives, page by page (`page_size` each), or the first error.
    pub(crate) async fn list_all(&mut self, page_size: i32) -> Result<ListAll, Status> {
        let mut all = ListAll::default();
        let mut token = String::new();
        loop {
            let result = self
                .cloud
                .list(with_deadline(
                    v1::ListRequest {
                        page_size,
                        page_token: token.clone(),
                    },
                    self.deadlines.default,
                ))
                .await
                .map(tonic::Response::into_inner);
            self.note("List", &result);
            let page = result?;
            all.largest_page = all.largest_page.max(page.node_claims.len());
            all.pages += 1;
            all.node_claims.extend(page.node_claims);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            if all.pages >= MAX_LIST_PAGES {
                return Err(Status::internal(format!(
                    "the suite stopped after {MAX_LIST_PAGES} pages: the plugin pages in circles"
                )));
            }
            token = page.next_page_token;
        }
    }

    /// Delete until the answer is GONE or NOT_FOUND (at most the settle timeout): every
    /// answer on the way, or the first other error.
    pub(crate) async fn delete_until_gone(
        &mut self,
        request: DeleteRequest,
    ) -> Result<Vec<DeletionState>, DeleteError> {
        let started = Instant::now();
        let mut states = Vec::new();
        loop {
            let result = self
                .cloud
                .delete(with_deadline(request.clone(), self.deadlines.delete))
                .await
                .map(tonic::Response::into_inner);
            self.note("Delete", &result);
            match result {
                Ok(answer) => {
                    states.push(answer.state());
                    match answer.state() {
                        DeletionState::Gone => break,
                        DeletionState::Terminating
                            if started.elapsed() < self.config.settle_timeout =>
                        {
                            tokio::time::sleep(self.config.poll_interval).await;
                        }
                        DeletionState::Terminating => return Err(DeleteError::StillThere(states)),
                        DeletionState::Unspecified => return Err(DeleteError::Unspecified),
                    }
                }
                Err(status) if status.code() == Code::NotFound => break,
                Err(status) => return Err(DeleteError::Status(status)),
            }
        }
        self.launched.remove(&request.node_claim_name);
        Ok(states)
    }
}

/// The most List pages the suite reads.
const MAX_LIST_PAGES: usize = 10_000;

/// A whole listing.
#[derive(Debug, Default)]
pub(crate) struct ListAll {
    pub(crate) node_claims: Vec<v1::NodeClaim>,
    pub(crate) pages: usize,
    pub(crate) largest_page: usize,
}

impl ListAll {
    /// How many listed instances carry the NodeClaim name `name`.
    pub(crate) fn named(&self, name: &str) -> usize {
        self.node_claims.iter().filter(|c| c.name == name).count()
    }
}

/// Launches with Create, outside the session.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    cloud: CloudProviderServiceClient<Channel>,
    deadline: Duration,
    settle_timeout: Duration,
    poll_interval: Duration,
}

impl Launcher {
    /// Create until the launch is no longer PENDING: the final answer or the first error, and
    /// every error status on the way.
    pub(crate) async fn launch(
        mut self,
        request: CreateRequest,
    ) -> (Result<CreateResponse, CreateError>, Vec<Status>) {
        let started = Instant::now();
        let mut errors = Vec::new();
        loop {
            let result = self
                .cloud
                .create(with_deadline(request.clone(), self.deadline))
                .await
                .map(tonic::Response::into_inner);
            let answer = match result {
                Ok(answer) => answer,
                // Another Create of the same name is still running (perhaps one cut off by its
                // deadline, which the plugin finishes): core retries, and so does the suite.
                Err(status)
                    if status.code() == Code::Aborted
                        && provider_sdk::status::error_reason(&status)
                            == Some(v1::ErrorReason::CreateInProgress)
                        && started.elapsed() < self.settle_timeout =>
                {
                    errors.push(status);
                    tokio::time::sleep(self.poll_interval).await;
                    continue;
                }
                Err(status) => {
                    errors.push(status.clone());
                    return (Err(CreateError::Status(status)), errors);
                }
            };
            match answer.state() {
                LaunchState::Pending if started.elapsed() < self.settle_timeout => {
                    let wait = answer
                        .retry_after
                        .and_then(|d| provider_sdk::duration::from_proto(d).ok())
                        .unwrap_or(Duration::from_secs(5))
                        .clamp(
                            self.poll_interval,
                            Duration::from_secs(60).max(self.poll_interval),
                        );
                    tokio::time::sleep(wait).await;
                }
                LaunchState::Pending => {
                    return (Err(CreateError::StillPending(self.settle_timeout)), errors);
                }
                LaunchState::Unspecified => {
                    return (Err(CreateError::Unspecified(Box::new(answer))), errors);
                }
                LaunchState::Launched => return (Ok(answer), errors),
            }
        }
    }
}

/// Why a Create did not launch.
#[derive(Debug)]
pub(crate) enum CreateError {
    Status(Status),
    StillPending(Duration),
    Unspecified(Box<CreateResponse>),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::Status(status) => f.write_str(&describe_status(status)),
            CreateError::StillPending(after) => {
                write!(f, "still LAUNCH_STATE_PENDING after {after:?}")
            }
            CreateError::Unspecified(answer) => write!(
                f,
                "state LAUNCH_STATE_UNSPECIFIED: {}",
                describe_message(answer)
            ),
        }
    }
}

/// Why a Delete did not finish.
#[derive(Debug)]
pub(crate) enum DeleteError {
    Status(Status),
    StillThere(Vec<DeletionState>),
    Unspecified,
}

impl std::fmt::Display for DeleteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeleteError::Status(status) => f.write_str(&describe_status(status)),
            DeleteError::StillThere(states) => write!(
                f,
                "still TERMINATING after {} answers: {states:?}",
                states.len()
            ),
            DeleteError::Unspecified => f.write_str("state DELETION_STATE_UNSPECIFIED"),
        }
    }
}

/// A status as an author needs to read it: code, message and its ErrorInfo.
pub(crate) fn describe_status(status: &Status) -> String {
    let error_info = match status.get_details_error_info() {
        Some(info) => {
            let metadata: BTreeMap<_, _> = info.metadata.iter().collect();
            format!(
                "ErrorInfo {{ reason: {:?}, domain: {:?}, metadata: {metadata:?} }}",
                info.reason, info.domain
            )
        }
        None => "no ErrorInfo".to_owned(),
    };
    format!(
        "status {:?}, message {:?}, {error_info}",
        status.code(),
        status.message()
    )
}

/// A message for a report, cut to a readable length.
pub(crate) fn describe_message(message: &impl Debug) -> String {
    const MOST: usize = 1_500;
    let text = format!("{message:?}");
    match text.char_indices().nth(MOST) {
        Some((cut, _)) => format!("{}… ({} characters in all)", &text[..cut], text.len()),
        None => text,
    }
}

/// Whether `status` carries an ErrorInfo of the API's domain with a reason the API defines.
pub(crate) fn error_info_problem(status: &Status) -> Option<String> {
    let Some(info) = status.get_details_error_info() else {
        return Some("no google.rpc.ErrorInfo in the status details".to_owned());
    };
    if info.domain != ERROR_DOMAIN {
        return Some(format!(
            "ErrorInfo domain {:?}, not {ERROR_DOMAIN:?}",
            info.domain
        ));
    }
    match v1::ErrorReason::from_str_name(&info.reason) {
        Some(v1::ErrorReason::Unspecified) | None => Some(format!(
            "ErrorInfo reason {:?} is not an ErrorReason value name",
            info.reason
        )),
        Some(_) => None,
    }
}

/// A short random suffix: the process ID and the clock, hashed.
fn run_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    format!("{:05x}", hasher.finish() & 0xf_ffff)
}
