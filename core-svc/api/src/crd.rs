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

use core_domain::labels::KARPENTER_GROUP;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::labels::{DomainRule, RestrictedKey};
use crate::{NodeClaim, NodePool, schema};

/// The environment variable that makes the `apis_crds` tests rewrite the files instead of
/// comparing them.
pub const UPDATE_ENV: &str = "KARPENTER_UPDATE_CRDS";

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

/// The karpenter.sh CRDs with the file names upstream gives them (`<group>_<plural>.yaml`),
/// before a cloud provider restricts its label domain in them ([`with_provider_domain`]):
/// `deploy/crds/` holds them as the AWS install ships them, checked by aws-plugin's
/// `apis_crds` test.
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

/// `crds` as a cloud provider's install ships them: wherever a CRD restricts Karpenter's own
/// label domain (template labels, requirement keys), `rule` restricts the provider's too, after
/// core's rules, as upstream's provider CRDs do (aws/karpenter-provider-aws
/// `hack/validation/labels.sh` and `requirements.sh` add theirs to core's generated CRDs).
/// CRDs without such a place are returned as they are.
pub fn with_provider_domain(
    crds: Vec<(String, CustomResourceDefinition)>,
    rule: &DomainRule<'_>,
) -> Result<Vec<(String, CustomResourceDefinition)>, serde_json::Error> {
    let core_message = RestrictedKey::Domain(KARPENTER_GROUP.into()).to_string();
    crds.into_iter()
        .map(|(name, crd)| {
            let mut json = serde_json::to_value(&crd)?;
            add_after_core_domain(&mut json, &core_message, rule);
            Ok((name, serde_json::from_value(json)?))
        })
        .collect()
}

/// Appends `rule` to every `x-kubernetes-validations` list under `node` that holds the rule
/// with `core_message`, in the same form (over a map's keys `x`, or over the string `self`).
fn add_after_core_domain(node: &mut Value, core_message: &str, rule: &DomainRule<'_>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get_mut("x-kubernetes-validations") {
                let core = rules.iter().find_map(|r| {
                    (r.get("message").and_then(Value::as_str) == Some(core_message))
                        .then(|| r.get("rule").and_then(Value::as_str))
                        .flatten()
                });
                if let Some(core) = core {
                    let over_keys = schema::is_for_all_keys(core);
                    let var = if over_keys { "x" } else { "self" };
                    let (cel, message) = schema::domain_rule(var, rule);
                    let cel = if over_keys {
                        schema::for_all_keys(&cel)
                    } else {
                        cel
                    };
                    rules.push(json!({ "message": message, "rule": cel }));
                }
            }
            for child in map.values_mut() {
                add_after_core_domain(child, core_message, rule);
            }
        }
        Value::Array(items) => {
            for item in items {
                add_after_core_domain(item, core_message, rule);
            }
        }
        _ => {}
    }
}
