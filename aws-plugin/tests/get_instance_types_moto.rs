//! `GetInstanceTypes` over the SDK-backed EC2 against `moto_server` (started by the test, see
//! `common`): the catalogue comes from moto's DescribeInstanceTypes, offerings and spot price
//! history, on-demand prices from the embedded table, streamed in chunks.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_plugin::ec2::sdk::SdkEc2;
use aws_plugin::iam::sdk::SdkIam;
use aws_plugin::instance_type_provider::SystemClock;
use aws_plugin::node_class::ClusterIdentity;
use aws_plugin::provider::{AwsClients, AwsCloudProvider, ProviderSettings};
use aws_plugin::ssm::sdk::SdkSsm;
use provider_sdk::v1::GetInstanceTypesRequest;
use provider_sdk::v1::cloud_provider_service_server::CloudProviderService as _;
use tokio_stream::StreamExt as _;

mod common;

use common::Moto;

/// The provider over the SDK clients built from `config`.
fn provider(config: &SdkConfig) -> AwsCloudProvider {
    let clients = AwsClients {
        ec2: Arc::new(SdkEc2::new(config)),
        iam: Arc::new(SdkIam::new(config)),
        ssm: Arc::new(SdkSsm::new(config)),
    };
    let settings = ProviderSettings {
        cluster: ClusterIdentity {
            name: "moto".to_owned(),
            region: "us-east-1".to_owned(),
            kubernetes_version: None,
        },
        ..ProviderSettings::default()
    };
    AwsCloudProvider::new(clients, settings, Arc::new(SystemClock))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_instance_types_returns_moto_s_catalogue() {
    let moto = Moto::start();
    let provider = provider(&moto.sdk_config());
    let response = provider
        .get_instance_types(tonic::Request::new(GetInstanceTypesRequest::default()))
        .await
        .unwrap();
    let mut stream = response.into_inner();
    let mut types = Vec::new();
    while let Some(chunk) = stream.next().await {
        types.extend(chunk.unwrap().instance_types);
    }
    // moto knows about 1,260 types; "many" leaves room for moto releases.
    assert!(types.len() > 1000, "{} types", types.len());
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    let zones: Vec<&str> = m5
        .offerings
        .iter()
        .filter(|o| o.is_available())
        .map(|o| o.zone.as_str())
        .collect();
    assert!(!zones.is_empty(), "{:?}", m5.offerings);
    for offering in &m5.offerings {
        assert!(
            offering.zone.starts_with("us-east-1"),
            "{offering:?} is not in us-east-1"
        );
    }
    let on_demand = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "on-demand" && o.is_available())
        .expect("an available on-demand offering");
    assert_eq!(on_demand.price, Some(0.096), "from the embedded table");
    assert_eq!(on_demand.currency, "USD");
    // No offering is priced at 0: one EC2 does not sell now has no price at all.
    for t in &types {
        for o in &t.offerings {
            assert_ne!(o.price, Some(0.0), "{} {o:?}", t.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ec2_is_unavailable_and_startup_calls_nothing() {
    // A port nothing listens on: bound, learned, released.
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let config = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(aws_sdk_ec2::config::SharedCredentialsProvider::new(
            aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "test"),
        ))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    // Construction succeeds with nothing listening: EC2 is first called by the RPC.
    let provider = provider(&config);
    let err = provider
        .get_instance_types(tonic::Request::new(GetInstanceTypesRequest::default()))
        .await
        .err()
        .expect("nothing listens");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
}
