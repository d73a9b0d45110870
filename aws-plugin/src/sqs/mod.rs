//! The narrow SQS port: the interruption queue that EventBridge rules feed (upstream's
//! `--interruption-queue`), read by [`crate::interruption`]. Exactly the calls the plugin
//! makes: `GetQueueUrl`, `ReceiveMessage` (long polling), `DeleteMessage`. Two
//! implementations: `sdk::SdkSqs` on `aws-sdk-sqs` (feature `aws`) and [`memory::MemorySqs`],
//! deterministic on an injected clock, for the simulator and unit tests. One contract suite
//! (`contract.rs`) runs against both (the SDK one against `moto_server`).

pub mod memory;
#[cfg(feature = "aws")]
pub mod sdk;

#[cfg(test)]
pub(crate) mod contract;

use std::time::Duration;

pub use crate::aws_error::{AwsError, AwsFuture};

/// The most messages one ReceiveMessage returns (SQS's own limit).
pub const MAX_MESSAGES_PER_RECEIVE: i32 = 10;

/// One received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMessage {
    /// SQS's id of the message.
    pub message_id: String,
    /// The handle that deletes this receipt of it.
    pub receipt_handle: String,
    /// The body: for the interruption queue, an EventBridge event as JSON.
    pub body: String,
}

/// The SQS calls the plugin needs.
pub trait Sqs: Send + Sync + std::fmt::Debug {
    /// GetQueueUrl: the URL of the queue named `name` (`NotFound` when there is none).
    fn queue_url<'a>(&'a self, name: &'a str) -> AwsFuture<'a, String>;

    /// ReceiveMessage: up to `max` (1 to [`MAX_MESSAGES_PER_RECEIVE`]) messages, waiting up to
    /// `wait` (at most 20 s) for the first. A received message is hidden from other receives
    /// for the queue's visibility timeout, then is received again unless deleted.
    fn receive<'a>(
        &'a self,
        queue_url: &'a str,
        max: i32,
        wait: Duration,
    ) -> AwsFuture<'a, Vec<QueueMessage>>;

    /// DeleteMessage by the handle of a receipt. Deleting a message already deleted is not an
    /// error.
    fn delete<'a>(&'a self, queue_url: &'a str, receipt_handle: &'a str) -> AwsFuture<'a, ()>;
}
