//! The EC2NodeClass CRD generated from the types, as `deploy/crds/` holds it.
//!
//! The `apis_crds` test fails when the checked-in file differs from what the types generate, and
//! rewrites it when run with `KARPENTER_UPDATE_CRDS=1`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::EC2NodeClass;

/// The command that regenerates the checked-in CRD.
pub const REGENERATE_COMMAND: &str =
    "KARPENTER_UPDATE_CRDS=1 cargo test -p aws-plugin --test apis_crds";

/// The CRDs with the file names upstream gives them (`<group>_<plural>.yaml`).
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    let crd = EC2NodeClass::crd();
    vec![(file_name(&crd), crd)]
}

/// `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}
