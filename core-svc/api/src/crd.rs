//! The CRDs generated from the types, as `deploy/crds/` holds them, and what every API group's
//! CRD files share: their names and the header naming their generator.
//!
//! `deploy/crds/` is checked in so the manifests can be reviewed and applied without building;
//! each API crate's `apis_crds` test fails when its files differ from what its types generate,
//! and rewrites them when run with `KARPENTER_UPDATE_CRDS=1` (the harness is
//! `testing::check_or_update`, behind the `testing` feature).
//!
//! Every API crate declares its CRDs the same way: one `#[kube(...)]` attribute per concern
//! (identity, description, names, subresources, printer columns), as upstream has one
//! kubebuilder marker per concern, and each printer column on one line in kube's JSON form, as
//! upstream's `+kubebuilder:printcolumn` markers are. The typed `printcolumn(...)` form would
//! repeat `name = ..`, `type_ = ..` in one attribute, which clippy's `duplicated_attributes`
//! reports.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{NodeClaim, NodePool};

/// The environment variable that makes the `apis_crds` tests rewrite the files instead of
/// comparing them.
pub const UPDATE_ENV: &str = "KARPENTER_UPDATE_CRDS";

/// The command that regenerates the checked-in karpenter.sh CRDs.
pub const REGENERATE_COMMAND: &str =
    "KARPENTER_UPDATE_CRDS=1 cargo test -p karpenter-api --test apis_crds";

/// Where a set of checked-in CRDs comes from, as the first line of each file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generator {
    /// The directory of the types, from the workspace root.
    pub source: &'static str,
    /// The command that regenerates the files.
    pub command: &'static str,
}

impl Generator {
    /// The comment line each generated file starts with.
    pub fn header(&self) -> String {
        format!(
            "# Generated from {} by `{}`; do not edit.\n",
            self.source, self.command
        )
    }
}

/// What generates the karpenter.sh CRDs.
pub const GENERATOR: Generator = Generator {
    source: "core-svc/api/src",
    command: REGENERATE_COMMAND,
};

/// The karpenter.sh CRDs with the file names upstream gives them (`<group>_<plural>.yaml`).
pub fn crds() -> Vec<(String, CustomResourceDefinition)> {
    [NodePool::crd(), NodeClaim::crd()]
        .into_iter()
        .map(named)
        .collect()
}

/// A CRD with its file name.
pub fn named(crd: CustomResourceDefinition) -> (String, CustomResourceDefinition) {
    (file_name(&crd), crd)
}

/// `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}
