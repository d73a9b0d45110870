//! The IAM and SSM contract suites (`src/iam/contract.rs`, `src/ssm/contract.rs`) against the
//! SDK implementations talking to moto, which serves every service on one port; the test
//! starts it (see `tests/common/mod.rs`) on 127.0.0.1 with a free port and kills it when done;
//! without it the test fails, it never skips.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup call is a failed test"
)]

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_plugin::iam::sdk::SdkIam;
// The contract modules refer to the ports' items through `super::`, which is this crate's
// root.
use aws_plugin::iam::{AwsError, Iam, Tag};
use aws_plugin::ssm::Ssm;
use aws_plugin::ssm::sdk::SdkSsm;
use aws_sdk_ssm::config::{Credentials, SharedCredentialsProvider};

#[path = "../src/iam/contract.rs"]
mod iam_contract;

#[path = "../src/ssm/contract.rs"]
mod ssm_contract;

mod common;

use common::Moto;

/// A public parameter moto ships (a snapshot of AWS's), as the provider resolves the
/// `al2023@latest` image alias.
const AL2023_X86_64: &str = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64";

/// A role EC2 may assume: IAM needs a trust policy to create one; nothing reads it.
const ASSUME_ROLE_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;

async fn iam_fixtures(client: &aws_sdk_iam::Client) -> iam_contract::Fixtures {
    let role = client
        .create_role()
        .role_name("KarpenterNodeRole-contract")
        .assume_role_policy_document(ASSUME_ROLE_POLICY)
        .send()
        .await
        .expect("CreateRole");
    iam_contract::Fixtures {
        role: role.role().expect("a role").role_name().to_owned(),
    }
}

async fn ssm_fixtures(client: &aws_sdk_ssm::Client) -> ssm_contract::Fixtures {
    let name = "/karpenter-test/image";
    let value = "ami-0123456789abcdef0";
    client
        .put_parameter()
        .name(name)
        .value(value)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("PutParameter");
    ssm_contract::Fixtures {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_iam_and_ssm_keep_the_contract_against_moto() {
    let moto = Moto::start();
    let config = moto.sdk_config();

    let fixtures = iam_fixtures(&aws_sdk_iam::Client::new(&config)).await;
    iam_contract::run_all(&SdkIam::new(&config), &fixtures).await;

    let fixtures = ssm_fixtures(&aws_sdk_ssm::Client::new(&config)).await;
    let ssm = SdkSsm::new(&config);
    ssm_contract::run_all(&ssm, &fixtures).await;

    let image = ssm
        .get_parameter(AL2023_X86_64)
        .await
        .expect("a public parameter")
        .expect("moto ships the Amazon Linux parameters");
    assert!(image.starts_with("ami-"), "{image}");
}

/// A configuration for a port nothing listens on (bound, learned, released), without retries.
fn unreachable_config() -> SdkConfig {
    let port = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "test",
        )))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_a_transport_error_not_an_absence() {
    let config = unreachable_config();
    let err = SdkIam::new(&config)
        .get_instance_profile("any")
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, AwsError::Transport { .. }), "{err:?}");
    let err = SdkSsm::new(&config)
        .get_parameter("/any")
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, AwsError::Transport { .. }), "{err:?}");
    let err = SdkIam::new(&config)
        .create_instance_profile("any", "/", &[Tag::new("k", "v")])
        .await
        .expect_err("nothing listens");
    assert!(matches!(err, AwsError::Transport { .. }), "{err:?}");
}
