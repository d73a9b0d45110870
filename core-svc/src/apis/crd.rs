//! The CRDs generated from the types, as `deploy/crds/` holds them.
//!
//! `deploy/crds/` is checked in so the manifests can be reviewed and applied without building;
//! the `apis_crds` test fails when the files differ from what the types generate, and rewrites
//! them when run with `KARPENTER_UPDATE_CRDS=1`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{NodeClaim, NodePool};

/// The command that regenerates the checked-in CRDs.
pub const REGENERATE_COMMAND: &str =
    "KARPENTER_UPDATE_CRDS=1 cargo test -p core-svc --test apis_crds";

/// The CRDs with the file names upstream gives them (`<group>_<plural>.yaml`).
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    [NodePool::crd(), NodeClaim::crd()]
        .into_iter()
        .map(|crd| (file_name(&crd), crd))
        .collect()
}

/// `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}
