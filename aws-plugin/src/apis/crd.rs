//! The EC2NodeClass CRD generated from the types, as `deploy/crds/` holds it.
//!
//! The `apis_crds` test fails when the checked-in file differs from what the types generate, and
//! rewrites it when run with `KARPENTER_UPDATE_CRDS=1`; the file names, headers and the check are
//! `karpenter_api::crd`'s and `karpenter_api::testing`'s, shared with the karpenter.sh CRDs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::crd::{Generator, named};
use kube::CustomResourceExt;

use super::EC2NodeClass;

/// The command that regenerates the checked-in CRD.
pub const REGENERATE_COMMAND: &str =
    "KARPENTER_UPDATE_CRDS=1 cargo test -p aws-plugin --test apis_crds";

/// What generates the EC2NodeClass CRD.
pub const GENERATOR: Generator = Generator {
    source: "aws-plugin/src/apis",
    command: REGENERATE_COMMAND,
};

/// The CRDs with the file names upstream gives them (`<group>_<plural>.yaml`).
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    vec![named(EC2NodeClass::crd())]
}
