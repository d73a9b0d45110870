//! IdentityService: who the plugin is, what it implements, its vocabulary, its readiness.

use std::collections::BTreeSet;
use std::time::Instant;

use core_svc::plugin::{Capabilities, validate_info, validate_vocabulary, with_deadline};
use provider_sdk::v1::plugin_capability::{self, rpc};
use provider_sdk::v1::{
    GetPluginCapabilitiesRequest, GetPluginInfoRequest, GetPluginInfoResponse,
    GetPluginVocabularyRequest, ProbeRequest,
};

use super::{Check, Recorder};
use crate::Outcome;
use crate::session::{Session, describe_message, describe_status};

pub(crate) const NAME: Check = Check {
    id: "identity.name",
    promise: "GetPluginInfo names the plugin in domain form: at most 63 characters, alphanumeric \
              at both ends, e.g. karpenter.k8s.aws",
};
pub(crate) const VENDOR_VERSION: Check = Check {
    id: "identity.vendor-version",
    promise: "GetPluginInfo gives the plugin's own version",
};
pub(crate) const API_VERSION: Check = Check {
    id: "identity.api-version",
    promise: "GetPluginInfo gives the API version it implements, 1.MINOR",
};
pub(crate) const STABLE: Check = Check {
    id: "identity.stable",
    promise: "GetPluginInfo never changes while the process runs",
};
pub(crate) const CAPABILITIES: Check = Check {
    id: "identity.capabilities",
    promise: "GetPluginCapabilities lists optional RPCs, each once, none TYPE_UNSPECIFIED",
};
pub(crate) const VOCABULARY: Check = Check {
    id: "identity.vocabulary",
    promise: "GetPluginVocabulary (required) declares prefixed label keys outside core's own \
              labels and domains, each once with a value type, and DNS-subdomain domains",
};
pub(crate) const PROBE: Check = Check {
    id: "identity.probe",
    promise: "Probe answers ready (true or absent) once the plugin has started",
};

pub(crate) const CHECKS: [Check; 7] = [
    NAME,
    VENDOR_VERSION,
    API_VERSION,
    STABLE,
    CAPABILITIES,
    VOCABULARY,
    PROBE,
];

/// A valid GetPluginInfo answer with one field taken from `answer`, so that core's check of
/// the whole answer judges that field alone.
fn only(answer: &GetPluginInfoResponse, field: &str) -> GetPluginInfoResponse {
    let mut valid = GetPluginInfoResponse {
        name: "conformance.example".into(),
        vendor_version: "0.0.0".into(),
        api_version: "1.0".into(),
        manifest: Default::default(),
    };
    match field {
        "name" => valid.name.clone_from(&answer.name),
        "vendor_version" => valid.vendor_version.clone_from(&answer.vendor_version),
        _ => valid.api_version.clone_from(&answer.api_version),
    }
    valid
}

/// Returns the plugin's `name vendor_version` when GetPluginInfo answered.
pub(crate) async fn run(session: &mut Session, recorder: &mut Recorder) -> Option<String> {
    let deadline = session.deadlines.default;
    let result = session
        .identity
        .get_plugin_info(with_deadline(GetPluginInfoRequest {}, deadline))
        .await
        .map(tonic::Response::into_inner);
    session.note("GetPluginInfo", &result);
    let sent = "GetPluginInfo {}";
    let plugin = match result {
        Ok(answer) => {
            for (check, field) in [
                (NAME, "name"),
                (VENDOR_VERSION, "vendor_version"),
                (API_VERSION, "api_version"),
            ] {
                let outcome = match validate_info(only(&answer, field)) {
                    Ok(_) => Outcome::Pass,
                    Err(error) => Outcome::fail(sent, describe_message(&answer), error.to_string()),
                };
                recorder.record(check, outcome);
            }
            let again = session
                .identity
                .get_plugin_info(with_deadline(GetPluginInfoRequest {}, deadline))
                .await
                .map(tonic::Response::into_inner);
            session.note("GetPluginInfo", &again);
            recorder.record(
                STABLE,
                match again {
                    Ok(again) if again == answer => Outcome::Pass,
                    Ok(again) => Outcome::fail(
                        "GetPluginInfo {}, twice",
                        format!(
                            "first {}, then {}",
                            describe_message(&answer),
                            describe_message(&again)
                        ),
                        "the same answer both times",
                    ),
                    Err(status) => Outcome::fail(
                        "GetPluginInfo {}, twice",
                        describe_status(&status),
                        "the same answer both times",
                    ),
                },
            );
            Some(format!("{} {}", answer.name, answer.vendor_version))
        }
        Err(status) => {
            for check in [NAME, VENDOR_VERSION, API_VERSION, STABLE] {
                recorder.record(
                    check,
                    Outcome::fail(
                        sent,
                        describe_status(&status),
                        "OK with the plugin's identity",
                    ),
                );
            }
            None
        }
    };

    let result = session
        .identity
        .get_plugin_capabilities(with_deadline(GetPluginCapabilitiesRequest {}, deadline))
        .await
        .map(tonic::Response::into_inner);
    session.note("GetPluginCapabilities", &result);
    let sent = "GetPluginCapabilities {}";
    let outcome = match result {
        Ok(answer) => {
            session.capabilities = Capabilities::from_announced(&answer.capabilities);
            let mut seen = BTreeSet::new();
            let problem = answer.capabilities.iter().enumerate().find_map(|(i, c)| {
                match &c.r#type {
                    Some(plugin_capability::Type::Rpc(r)) => match rpc::Type::try_from(r.r#type) {
                        Ok(rpc::Type::Unspecified) => {
                            Some(format!("capabilities[{i}] is TYPE_UNSPECIFIED"))
                        }
                        _ if !seen.insert(r.r#type) => {
                            Some(format!("capabilities[{i}] ({}) appears twice", r.r#type))
                        }
                        // An unknown value may be from a newer minor version: allowed.
                        _ => None,
                    },
                    None => Some(format!("capabilities[{i}] has no type set")),
                }
            });
            match problem {
                None => Outcome::Pass,
                Some(problem) => Outcome::fail(
                    sent,
                    describe_message(&answer),
                    format!("every capability set, once, never TYPE_UNSPECIFIED; {problem}"),
                ),
            }
        }
        Err(status) => Outcome::fail(sent, describe_status(&status), "OK with the capabilities"),
    };
    recorder.record(CAPABILITIES, outcome);

    let result = session
        .identity
        .get_plugin_vocabulary(with_deadline(GetPluginVocabularyRequest {}, deadline))
        .await
        .map(tonic::Response::into_inner);
    session.note("GetPluginVocabulary", &result);
    let sent = "GetPluginVocabulary {}";
    let outcome = match result {
        Ok(answer) => match validate_vocabulary(answer.clone()) {
            Ok(vocabulary) => {
                session.vocabulary = Some(vocabulary);
                Outcome::Pass
            }
            Err(error) => Outcome::fail(sent, describe_message(&answer), error.to_string()),
        },
        Err(status) => Outcome::fail(
            sent,
            describe_status(&status),
            "OK with the vocabulary (required; empty for a plugin with no labels of its own)",
        ),
    };
    recorder.record(VOCABULARY, outcome);

    recorder.record(PROBE, probe_until_ready(session).await);
    plugin
}

async fn probe_until_ready(session: &mut Session) -> Outcome {
    let started = Instant::now();
    loop {
        let result = session
            .identity
            .probe(with_deadline(ProbeRequest {}, session.deadlines.default))
            .await
            .map(tonic::Response::into_inner);
        session.note("Probe", &result);
        let received = match result {
            Ok(answer) if answer.ready != Some(false) => return Outcome::Pass,
            Ok(answer) => describe_message(&answer),
            Err(status) => describe_status(&status),
        };
        if started.elapsed() >= session.config.ready_timeout {
            return Outcome::fail(
                format!("Probe {{}}, for {:?}", session.config.ready_timeout),
                received,
                "ready: true or absent",
            );
        }
        tokio::time::sleep(session.config.poll_interval).await;
    }
}
