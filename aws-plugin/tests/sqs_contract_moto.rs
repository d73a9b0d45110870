//! The SQS contract suite (`src/sqs/contract.rs`) against the SDK implementation talking to
//! moto, which the test starts (see `tests/common/mod.rs`); without it the test fails, it
//! never skips.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup call is a failed test"
)]

use aws_plugin::sqs::Sqs;
use aws_plugin::sqs::sdk::SdkSqs;

#[path = "../src/sqs/contract.rs"]
mod sqs_contract;

mod common;

use common::Moto;

async fn send(client: &aws_sdk_sqs::Client, url: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("SendMessage");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_sqs_keeps_the_contract_against_moto() {
    let moto = Moto::start();
    let config = moto.sdk_config();
    let client = aws_sdk_sqs::Client::new(&config);
    let queue = "karpenter-contract";
    let url = client
        .create_queue()
        .queue_name(queue)
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a URL")
        .to_owned();
    let bodies = vec![
        r#"{"version":"0","id":"a"}"#.to_owned(),
        r#"{"version":"0","id":"b"}"#.to_owned(),
        "c".to_owned(),
    ];
    for body in &bodies {
        send(&client, &url, body).await;
    }
    let fixtures = sqs_contract::Fixtures {
        queue: queue.to_owned(),
        bodies,
    };
    sqs_contract::run_all(&SdkSqs::new(&config), &fixtures).await;
}
