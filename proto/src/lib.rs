//! The cloud provider plugin API, `karpenter.cloudprovider.v1`, for Rust: core's client and the
//! provider SDK in one crate.
//!
//! - [`v1`]: the generated messages, clients and server traits (tonic + prost, compiled from
//!   `proto/` by `protox`, so no system `protoc` is needed).
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptor set, with the proto comments, for server
//!   reflection.
//! - [`serve`]: the one call that serves a plugin on a Unix socket or TCP (TLS or mTLS), with
//!   `grpc.health.v1` and server reflection (v1 and v1alpha), until SIGTERM.
//! - [`connect`]: a channel to a plugin at the same kind of endpoint.
//! - [`status`]: building and reading the API's machine-readable errors.
//! - [`logging`]: structured `tracing` logs, text or JSON.
//! - [`duration`]: a peer's `google.protobuf.Duration` read without overflow.
//! - [`chunk`]: splitting an instance type catalogue into stream chunks under a size limit.
//! - `testing` (feature `testing`, for this crate's own dev-dependency only): the private
//!   connection wrapper driven from the fuzz tests.
//!
//! A plugin implements [`v1::identity_service_server::IdentityService`] and
//! [`v1::cloud_provider_service_server::CloudProviderService`] and hands both to
//! [`serve::serve_until_signal`].

mod authority;
pub mod chunk;
pub mod connect;
pub mod duration;
pub mod endpoint;
pub mod json;
pub mod logging;
pub mod serve;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use endpoint::Endpoint;

/// The generated code of `karpenter.cloudprovider.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("karpenter.cloudprovider.v1");
}

impl v1::Requirement {
    /// `key In values`, without minValues.
    pub fn in_values<V: AsRef<str>>(key: &str, values: impl IntoIterator<Item = V>) -> Self {
        Self {
            key: key.to_owned(),
            operator: v1::Operator::In as i32,
            values: values
                .into_iter()
                .map(|value| value.as_ref().to_owned())
                .collect(),
            min_values: None,
        }
    }
}

impl v1::Offering {
    /// An offering in `zone` of `capacity_type` at `price` per hour in `currency`, available
    /// or not.
    pub fn priced(
        zone: &str,
        capacity_type: &str,
        price: f64,
        currency: &str,
        available: bool,
    ) -> Self {
        Self {
            zone: zone.to_owned(),
            capacity_type: capacity_type.to_owned(),
            price: Some(price),
            currency: currency.to_owned(),
            availability: v1::Availability::from_bool(available) as i32,
            ..Self::default()
        }
    }

    /// Whether it says it can be launched now.
    pub fn is_available(&self) -> bool {
        self.availability() == v1::Availability::Available
    }
}

impl v1::Availability {
    /// `Available` or `Unavailable`.
    pub fn from_bool(available: bool) -> Self {
        if available {
            Self::Available
        } else {
            Self::Unavailable
        }
    }
}

impl v1::Operator {
    /// The operator Kubernetes spells `name` (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`,
    /// `Lt`, and Karpenter's `Gte`, `Lte`); `None` for any other.
    pub fn from_kubernetes(name: &str) -> Option<Self> {
        Some(match name {
            "In" => Self::In,
            "NotIn" => Self::NotIn,
            "Exists" => Self::Exists,
            "DoesNotExist" => Self::DoesNotExist,
            "Gt" => Self::Gt,
            "Lt" => Self::Lt,
            "Gte" => Self::Gte,
            "Lte" => Self::Lte,
            _ => return None,
        })
    }
}

impl v1::TaintEffect {
    /// The effect Kubernetes spells `name` (`NoSchedule`, `PreferNoSchedule`, `NoExecute`);
    /// `None` for any other.
    pub fn from_kubernetes(name: &str) -> Option<Self> {
        Some(match name {
            "NoSchedule" => Self::NoSchedule,
            "PreferNoSchedule" => Self::PreferNoSchedule,
            "NoExecute" => Self::NoExecute,
            _ => return None,
        })
    }
}

/// The stream a plugin's `get_instance_types` returns: chunks of the catalogue (see
/// [`chunk::chunk_instance_types`]), or an error that voids the whole answer.
pub type InstanceTypeStream = tonic::codegen::BoxStream<v1::GetInstanceTypesResponse>;

/// The stream a plugin's `watch_interruptions` returns: batches of notices as they come, or
/// an error that ends it (core re-opens it).
pub type InterruptionStream = tonic::codegen::BoxStream<v1::WatchInterruptionsResponse>;

/// The encoded `FileDescriptorSet` of the API and its imports, with source info (comments).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("cloudprovider_v1_descriptor");

/// The API version this crate implements, as a plugin reports it in `GetPluginInfo`.
pub const API_VERSION: &str = "1.0";

/// The `google.rpc.ErrorInfo` domain of this API's errors.
pub const ERROR_DOMAIN: &str = "cloudprovider.karpenter.v1";

/// Fully qualified service names, as health checks and reflection list them.
pub mod service_names {
    /// `karpenter.cloudprovider.v1.IdentityService`.
    pub const IDENTITY: &str = "karpenter.cloudprovider.v1.IdentityService";
    /// `karpenter.cloudprovider.v1.CloudProviderService`.
    pub const CLOUD_PROVIDER: &str = "karpenter.cloudprovider.v1.CloudProviderService";
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    #[test]
    fn kubernetes_spellings_name_the_apis_operators_and_effects() {
        for (name, operator) in [
            ("In", v1::Operator::In),
            ("NotIn", v1::Operator::NotIn),
            ("Exists", v1::Operator::Exists),
            ("DoesNotExist", v1::Operator::DoesNotExist),
            ("Gt", v1::Operator::Gt),
            ("Lt", v1::Operator::Lt),
            ("Gte", v1::Operator::Gte),
            ("Lte", v1::Operator::Lte),
        ] {
            assert_eq!(v1::Operator::from_kubernetes(name), Some(operator));
        }
        assert_eq!(v1::Operator::from_kubernetes("OPERATOR_IN"), None);
        assert_eq!(
            v1::TaintEffect::from_kubernetes("PreferNoSchedule"),
            Some(v1::TaintEffect::PreferNoSchedule)
        );
        assert_eq!(v1::TaintEffect::from_kubernetes("noschedule"), None);
    }

    #[test]
    fn in_values_is_an_in_requirement_without_min_values() {
        let requirement = v1::Requirement::in_values("zone", ["a", "b"]);
        assert_eq!(requirement.key, "zone");
        assert_eq!(requirement.operator(), v1::Operator::In);
        assert_eq!(requirement.values, ["a", "b"]);
        assert_eq!(requirement.min_values, None);
    }

    #[test]
    fn descriptor_set_decodes_and_keeps_comments() {
        let set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let file = set
            .file
            .iter()
            .find(|f| f.name() == "karpenter/cloudprovider/v1/cloudprovider.proto")
            .expect("cloudprovider.proto is in the descriptor set");
        let source_info = file
            .source_code_info
            .as_ref()
            .expect("source info kept, or grpcurl describe prints no docs");
        assert!(
            source_info.location.iter().any(|l| l
                .leading_comments()
                .contains("Tells whether a launched NodeClaim")),
            "IsDrifted's documentation is not in the descriptor set"
        );
        // The imports travel too, so reflection can answer for google.protobuf.Struct.
        assert!(
            set.file
                .iter()
                .any(|f| f.name() == "google/protobuf/struct.proto")
        );
    }

    #[test]
    fn service_names_match_generated_code() {
        type Identity = v1::identity_service_server::IdentityServiceServer<Never>;
        type Cloud = v1::cloud_provider_service_server::CloudProviderServiceServer<Never>;
        assert_eq!(
            <Identity as tonic::server::NamedService>::NAME,
            service_names::IDENTITY
        );
        assert_eq!(
            <Cloud as tonic::server::NamedService>::NAME,
            service_names::CLOUD_PROVIDER
        );
    }

    /// A type that implements both services only so the generated server types can be named.
    struct Never;

    #[tonic::async_trait]
    impl v1::identity_service_server::IdentityService for Never {}

    #[tonic::async_trait]
    impl v1::cloud_provider_service_server::CloudProviderService for Never {}
}
