//! A v1beta1 `EC2NodeClass`'s spec → v1, by upstream's conversion webhook
//! (aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass_conversion.go`), and the AMI family
//! rules both older APIs share: a family without image selectors becomes its `alias`; the
//! Ubuntu family, which v1 dropped, an AL2 class (the same user data) with Ubuntu's images.

use serde_json::{Map, Value, json};

use super::{Context, Notes, drop_restricted_tags, keep_old_hop_limit};
use crate::node_class::InvalidNodeClass;

/// v1beta1's AMI families.
const FAMILIES: [&str; 7] = [
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Ubuntu",
    "Custom",
    "Windows2019",
    "Windows2022",
];
/// The fields that carry over unchanged.
const UNCHANGED: [&str; 12] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "role",
    "instanceProfile",
    "tags",
    "userData",
    "blockDeviceMappings",
    "instanceStorePolicy",
    "detailedMonitoring",
    "associatePublicIPAddress",
    "metadataOptions",
    "context",
];
/// The family v1 dropped.
const UBUNTU: &str = "Ubuntu";
/// Where v1beta1 found Ubuntu's images: Canonical's SSM parameters for Ubuntu 20.04, per
/// Kubernetes version and architecture (upstream's `pkg/providers/amifamily/ubuntu.go`).
const UBUNTU_PARAMETER: &str =
    "/aws/service/canonical/ubuntu/eks/20.04/{version}/stable/current/{arch}/hvm/ebs-gp2/ami-id";
/// Stands for the Kubernetes version when the plugin does not know it.
pub const KUBERNETES_VERSION_PLACEHOLDER: &str = "$KUBERNETES_VERSION";

/// Converts a v1beta1 spec.
pub fn node_class_spec(
    mut spec: Map<String, Value>,
    context: &Context<'_>,
    notes: &mut Notes,
) -> Result<Map<String, Value>, InvalidNodeClass> {
    let family = match spec.remove("amiFamily") {
        Some(Value::String(family)) if FAMILIES.contains(&family.as_str()) => family,
        Some(other) => {
            return Err(InvalidNodeClass::new(
                "spec.amiFamily",
                format!("{other} is not one of {}", FAMILIES.join(", ")),
            ));
        }
        None => {
            return Err(InvalidNodeClass::new(
                "spec.amiFamily",
                "missing: v1beta1 required it",
            ));
        }
    };
    let terms = match spec.remove("amiSelectorTerms") {
        None => Vec::new(),
        Some(Value::Array(terms)) => terms,
        Some(_) => {
            return Err(InvalidNodeClass::new(
                "spec.amiSelectorTerms",
                "expected a list of terms",
            ));
        }
    };
    let mut out = Map::new();
    for key in UNCHANGED {
        if let Some(value) = spec.remove(key) {
            out.insert(key.to_owned(), value);
        }
    }
    if terms.is_empty() {
        family_without_terms(&mut out, &family, "spec", context, notes)?;
    } else {
        out.insert("amiSelectorTerms".to_owned(), Value::Array(terms));
        family_with_terms(&mut out, &family, "spec.amiFamily", notes);
    }
    drop_restricted_tags(&mut out, "spec.tags", notes);
    keep_old_hop_limit(&mut out);
    for key in spec.keys() {
        notes.warn(
            format!("spec.{key}"),
            "not a v1beta1 EC2NodeClass field v1 has: dropped (check its spelling)",
        );
    }
    Ok(out)
}

/// A family with image selectors keeps both (v1 needs the family to bootstrap images it does
/// not know); Ubuntu, gone from v1, becomes AL2, whose user data Ubuntu's images take.
pub fn family_with_terms(
    spec: &mut Map<String, Value>,
    family: &str,
    family_path: &str,
    notes: &mut Notes,
) {
    if family == UBUNTU {
        ubuntu_as_al2(spec, family_path, notes);
    } else {
        spec.insert("amiFamily".to_owned(), family.into());
    }
}

/// A family without image selectors followed the newest EKS-optimized image of the family:
/// v1 says so with the alias `<family>@latest` and no `amiFamily`. Ubuntu's images come from
/// Canonical's parameters, as v1beta1 found them. `Custom` has nothing to follow.
/// `spec_path` is where the spec sits in the input.
pub fn family_without_terms(
    spec: &mut Map<String, Value>,
    family: &str,
    spec_path: &str,
    context: &Context<'_>,
    notes: &mut Notes,
) -> Result<(), InvalidNodeClass> {
    let family_path = format!("{spec_path}.amiFamily");
    match family {
        "Custom" => Err(InvalidNodeClass::new(
            family_path,
            "Custom needs image selectors, and there are none (the old API refused this too)",
        )),
        UBUNTU => {
            let version = context
                .kubernetes_version
                .unwrap_or(KUBERNETES_VERSION_PLACEHOLDER);
            let terms: Vec<Value> = ["amd64", "arm64"]
                .iter()
                .map(|arch| {
                    let parameter = UBUNTU_PARAMETER
                        .replace("{version}", version)
                        .replace("{arch}", arch);
                    json!({ "ssmParameter": parameter })
                })
                .collect();
            spec.insert("amiSelectorTerms".to_owned(), Value::Array(terms));
            ubuntu_as_al2(spec, &family_path, notes);
            if context.kubernetes_version.is_none() {
                notes.warn(
                    family_path,
                    format!(
                        "the plugin does not know the cluster's Kubernetes version: the image \
                         parameters hold the placeholder {KUBERNETES_VERSION_PLACEHOLDER} \
                         (substitute it, e.g. with envsubst)"
                    ),
                );
            }
            Ok(())
        }
        _ => {
            let alias = format!("{}@latest", family.to_lowercase());
            spec.insert(
                "amiSelectorTerms".to_owned(),
                json!([{ "alias": alias.clone() }]),
            );
            notes.warn(
                family_path,
                format!(
                    "{family} without image selectors followed the newest EKS-optimized image; \
                     the alias {alias} does the same. Pin a version (for example \
                     {}@v20240807) to roll new images out when you choose",
                    family.to_lowercase()
                ),
            );
            Ok(())
        }
    }
}

/// Ubuntu → AL2 (upstream's webhook does the same): the user data is the same format, but
/// the default root volume is Ubuntu's `/dev/sda1`, which the class then names.
fn ubuntu_as_al2(spec: &mut Map<String, Value>, family_path: &str, notes: &mut Notes) {
    spec.insert("amiFamily".to_owned(), "AL2".into());
    if !spec.contains_key("blockDeviceMappings") {
        spec.insert(
            "blockDeviceMappings".to_owned(),
            json!([{
                "deviceName": "/dev/sda1",
                "rootVolume": true,
                "ebs": {"encrypted": true, "volumeType": "gp3", "volumeSize": "20Gi"},
            }]),
        );
    }
    notes.warn(
        family_path,
        "v1 has no Ubuntu family: the class bootstraps its Ubuntu images as AL2 (the same user \
         data format) with Ubuntu's root volume (/dev/sda1). Canonical's EKS images for \
         Kubernetes 1.29 and later are Ubuntu 22.04: check the image selectors, or move to \
         AL2023 or Bottlerocket",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::object;
    use super::*;

    fn converted(spec: Value, context: &Context<'_>) -> (Map<String, Value>, Vec<String>) {
        let mut notes = Notes::default();
        let spec = node_class_spec(object(spec), context, &mut notes).unwrap();
        (spec, notes.warnings.into_iter().map(|w| w.path).collect())
    }

    fn spec(extra: Value) -> Value {
        let mut spec = json!({
            "role": "KarpenterNodeRole-demo",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        });
        for (key, value) in object(extra) {
            spec[key] = value;
        }
        spec
    }

    /// "If no amiSelectorTerms are specified, we can create an alias and don't need to
    /// specify amiFamily. Otherwise, we'll carry over the amiSelectorTerms and amiFamily."
    #[test]
    fn a_family_becomes_an_alias_unless_images_are_selected() {
        let (out, warnings) = converted(spec(json!({"amiFamily": "AL2023"})), &Context::default());
        assert_eq!(out["amiSelectorTerms"], json!([{"alias": "al2023@latest"}]));
        assert!(out.get("amiFamily").is_none());
        assert_eq!(warnings, ["spec.amiFamily"]);

        let terms = json!([{"tags": {"team": "a"}}]);
        let (out, warnings) = converted(
            spec(json!({"amiFamily": "Bottlerocket", "amiSelectorTerms": terms})),
            &Context::default(),
        );
        assert_eq!(out["amiSelectorTerms"], terms);
        assert_eq!(out["amiFamily"], "Bottlerocket");
        assert!(warnings.is_empty());
    }

    /// "If AMISelectorTerms were specified, we can continue to use them to discover Ubuntu
    /// AMIs and use the AL2 AMI family for bootstrapping ... We'll set the
    /// BlockDeviceMappings to Ubuntu's default if no user specified BlockDeviceMappings are
    /// present." Without selectors, the images v1beta1 found: Canonical's parameters.
    #[test]
    fn ubuntu_becomes_al2_with_ubuntu_images() {
        let context = Context {
            kubernetes_version: Some("1.28"),
            ..Context::default()
        };
        let (out, warnings) = converted(spec(json!({"amiFamily": "Ubuntu"})), &context);
        assert_eq!(out["amiFamily"], "AL2");
        assert_eq!(
            out["amiSelectorTerms"][0]["ssmParameter"],
            "/aws/service/canonical/ubuntu/eks/20.04/1.28/stable/current/amd64/hvm/ebs-gp2/ami-id"
        );
        assert_eq!(out["blockDeviceMappings"][0]["deviceName"], "/dev/sda1");
        assert_eq!(warnings, ["spec.amiFamily"]);

        let (out, warnings) = converted(
            spec(json!({"amiFamily": "Ubuntu", "blockDeviceMappings": [],
                        "amiSelectorTerms": [{"id": "ami-1"}]})),
            &Context::default(),
        );
        assert_eq!(out["amiFamily"], "AL2");
        assert_eq!(out["blockDeviceMappings"], json!([]));
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn custom_without_images_and_a_missing_family_are_refused() {
        let mut notes = Notes::default();
        let error = node_class_spec(
            object(spec(json!({"amiFamily": "Custom"}))),
            &Context::default(),
            &mut notes,
        )
        .unwrap_err();
        assert_eq!(error.field, "spec.amiFamily");
        let error =
            node_class_spec(object(spec(json!({}))), &Context::default(), &mut notes).unwrap_err();
        assert!(error.message.contains("missing"), "{error}");
    }

    /// Everything else carries over; v1's hop limit default (1) does not replace v1beta1's (2).
    #[test]
    fn the_other_fields_carry_over() {
        let (out, warnings) = converted(
            spec(json!({
                "amiFamily": "AL2", "amiSelectorTerms": [{"name": "my-ami", "owner": "self"}],
                "userData": "echo hi", "tags": {"team": "a"}, "detailedMonitoring": true,
                "associatePublicIPAddress": false, "instanceStorePolicy": "RAID0",
                "metadataOptions": {"httpTokens": "optional"}, "unknownField": 1,
            })),
            &Context::default(),
        );
        assert_eq!(out["userData"], "echo hi");
        assert_eq!(out["instanceStorePolicy"], "RAID0");
        assert_eq!(
            out["metadataOptions"],
            json!({"httpTokens": "optional", "httpPutResponseHopLimit": 2})
        );
        assert_eq!(warnings, ["spec.unknownField"]);
    }
}
