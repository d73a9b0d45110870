//! [`Sqs`] on `aws-sdk-sqs`. Built from the plugin's `SdkConfig` (region, credentials, the
//! `AWS_ENDPOINT_URL[_SQS]` override for emulators all come through `aws-config`). Errors are
//! classified by SQS's code ([`AwsError::from_code`]).

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_sqs::Client;

use super::{AwsError, AwsFuture, QueueMessage, Sqs};
use crate::aws::classify;

/// SQS through the AWS SDK.
#[derive(Debug, Clone)]
pub struct SdkSqs {
    client: Client,
}

impl SdkSqs {
    /// A client from the plugin's AWS configuration.
    pub fn new(config: &SdkConfig) -> Self {
        Self {
            client: Client::new(config),
        }
    }
}

impl Sqs for SdkSqs {
    fn queue_url<'a>(&'a self, name: &'a str) -> AwsFuture<'a, String> {
        Box::pin(async move {
            let answer = self
                .client
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map_err(classify)?;
            answer
                .queue_url()
                .map(str::to_owned)
                .ok_or_else(|| AwsError::transport("response", "GetQueueUrl answered no URL"))
        })
    }

    fn receive<'a>(
        &'a self,
        queue_url: &'a str,
        max: i32,
        wait: Duration,
    ) -> AwsFuture<'a, Vec<QueueMessage>> {
        Box::pin(async move {
            let answer = self
                .client
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(max.clamp(1, super::MAX_MESSAGES_PER_RECEIVE))
                .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
                .send()
                .await
                .map_err(classify)?;
            Ok(answer
                .messages()
                .iter()
                .filter_map(|m| {
                    Some(QueueMessage {
                        message_id: m.message_id()?.to_owned(),
                        receipt_handle: m.receipt_handle()?.to_owned(),
                        body: m.body().unwrap_or_default().to_owned(),
                    })
                })
                .collect())
        })
    }

    fn delete<'a>(&'a self, queue_url: &'a str, receipt_handle: &'a str) -> AwsFuture<'a, ()> {
        Box::pin(async move {
            self.client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(receipt_handle)
                .send()
                .await
                .map_err(classify)?;
            Ok(())
        })
    }
}
