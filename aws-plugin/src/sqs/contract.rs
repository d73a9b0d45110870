//! The contract every [`Sqs`] implementation keeps, as test functions over `&dyn Sqs`: the
//! in-memory queue runs them in unit tests, the SDK one against `moto_server`
//! (`tests/sqs_contract_moto.rs`, which includes this file by path).

#![allow(
    clippy::expect_used,
    reason = "test code, also where an integration test includes it by path: a failed call is a failed test"
)]

use std::collections::BTreeSet;
use std::time::Duration;

// The integration test includes this file by path and puts the port's items at its root, so
// `super::` resolves in both places.
use super::Sqs;

/// What each implementation creates before the suite runs, through its own means.
#[derive(Debug, Clone)]
pub(crate) struct Fixtures {
    /// A queue's name.
    pub(crate) queue: String,
    /// The bodies of the messages sent to it, which nothing has received yet.
    pub(crate) bodies: Vec<String>,
}

/// Runs every case.
pub(crate) async fn run_all(sqs: &dyn Sqs, f: &Fixtures) {
    let url = sqs
        .queue_url(&f.queue)
        .await
        .expect("GetQueueUrl of the fixture");
    let missing = sqs
        .queue_url("karpenter-contract-no-such-queue")
        .await
        .expect_err("no such queue");
    assert!(missing.is_not_found(), "{missing:?}");

    // Every message comes, each once, until deleted (the visibility timeout hides it).
    let mut received = Vec::new();
    for _ in 0..5 {
        let batch = sqs
            .receive(&url, 10, Duration::ZERO)
            .await
            .expect("ReceiveMessage");
        if batch.is_empty() {
            break;
        }
        received.extend(batch);
    }
    let bodies: BTreeSet<&str> = received.iter().map(|m| m.body.as_str()).collect();
    let expected: BTreeSet<&str> = f.bodies.iter().map(String::as_str).collect();
    assert_eq!(bodies, expected);
    assert_eq!(
        received.len(),
        f.bodies.len(),
        "each message once: {received:?}"
    );
    let ids: BTreeSet<&str> = received.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids.len(), received.len(), "ids are unique");

    for message in &received {
        sqs.delete(&url, &message.receipt_handle)
            .await
            .expect("DeleteMessage");
    }
    // A second delete of the same receipt is not an error.
    if let Some(first) = received.first() {
        sqs.delete(&url, &first.receipt_handle)
            .await
            .expect("DeleteMessage again");
    }
    let after = sqs
        .receive(&url, 10, Duration::ZERO)
        .await
        .expect("ReceiveMessage after deletes");
    assert!(
        after.is_empty(),
        "deleted messages never come back: {after:?}"
    );
}
