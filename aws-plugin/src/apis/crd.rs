//! The CRDs of the AWS install, as `deploy/crds/` holds them: the EC2NodeClass CRD generated
//! from the types, and core's karpenter.sh CRDs with this provider's label domain restricted
//! as its vocabulary says (the `karpenter.k8s.aws` keys it declares are allowed, no others),
//! as upstream's provider CRDs do.
//!
//! The `apis_crds` test fails when the checked-in files differ from what the types generate,
//! and rewrites them when run with `KARPENTER_UPDATE_CRDS=1`; the file names, headers and the
//! check are `karpenter_api::crd`'s and `karpenter_api::testing`'s.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::crd::{Generator, named, with_provider_domain};
use karpenter_api::labels::DomainRule;
use kube::CustomResourceExt;

use super::EC2NodeClass;
use crate::labels::{AWS_GROUP, VOCABULARY};

/// The command that regenerates the checked-in CRD.
pub const REGENERATE_COMMAND: &str =
    "KARPENTER_UPDATE_CRDS=1 cargo test -p aws-plugin --test apis_crds";

/// What generates the EC2NodeClass CRD.
pub const GENERATOR: Generator = Generator {
    source: "aws-plugin/src/apis",
    command: REGENERATE_COMMAND,
};

/// What generates the karpenter.sh CRDs of the AWS install: core's types and this plugin's
/// vocabulary.
pub const CORE_GENERATOR: Generator = Generator {
    source: "core-svc/api/src and aws-plugin/src/labels.rs",
    command: REGENERATE_COMMAND,
};

/// The CRDs with the file names upstream gives them (`<group>_<plural>.yaml`).
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    vec![named(EC2NodeClass::crd())]
}

/// The rule the install's CRDs put on the `karpenter.k8s.aws` label domain: the vocabulary's
/// keys there are allowed (the same keys core's validation allows at run time, from the
/// vocabulary the plugin declares), any other is refused.
pub fn label_domain_rule() -> DomainRule<'static> {
    DomainRule::provider(AWS_GROUP, VOCABULARY.iter().map(|label| label.key))
}

/// Core's karpenter.sh CRDs as the AWS install ships them, with [`label_domain_rule`].
pub fn core_crds() -> Result<Vec<(String, CustomResourceDefinition)>, serde_json::Error> {
    with_provider_domain(karpenter_api::crd::crds(), &label_domain_rule())
}
