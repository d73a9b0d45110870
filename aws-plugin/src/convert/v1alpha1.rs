//! A v1alpha1 `AWSNodeTemplate`'s spec (or a v1alpha5 Provisioner's inline `spec.provider`,
//! which has the same fields) → a v1 EC2NodeClass spec.
//!
//! The rules are the v1beta1 change list's, as upstream's own v0.32 conversion applied them
//! (aws/karpenter-provider-aws `pkg/utils/nodeclass/nodeclass.go` and
//! `tools/karpenter-convert/pkg/convert/convert.go`), then v1's (AMI families as aliases):
//! each is one function below with a test quoting it. Unlike upstream's internal conversion,
//! the output must pass v1's validation, which allows no term mixing `id` with other fields.

use serde_json::{Map, Value, json};

use super::{Context, Notes, drop_restricted_tags, keep_old_hop_limit, v1beta1};
use crate::node_class::InvalidNodeClass;

/// The selector keys that listed ids ("aws-ids" in v1alpha5's docs, "aws::ids" in the code).
const IDS_KEYS: [&str; 2] = ["aws-ids", "aws::ids"];
/// The AMI selector key that listed image names.
const AMI_NAME_KEY: &str = "aws::name";
/// The AMI selector key that listed image owners.
const AMI_OWNERS_KEY: &str = "aws::owners";
/// The AMI family v1alpha5 used when the template named none.
pub const DEFAULT_FAMILY: &str = "AL2";
/// v1alpha1's AMI families.
const FAMILIES: [&str; 6] = [
    "AL2",
    "Bottlerocket",
    "Ubuntu",
    "Custom",
    "Windows2019",
    "Windows2022",
];
/// Upstream's karpenter-convert placeholder for the node role, for `envsubst`.
pub const ROLE_PLACEHOLDER: &str = "$KARPENTER_NODE_ROLE";
/// The fields that carry over unchanged.
const UNCHANGED: [&str; 6] = [
    "userData",
    "tags",
    "blockDeviceMappings",
    "detailedMonitoring",
    "metadataOptions",
    "context",
];

/// Converts the template's spec; `path` is where it sits in the input (`spec`, or
/// `spec.provider` for an inline provider).
pub fn node_template_spec(
    mut spec: Map<String, Value>,
    path: &str,
    context: &Context<'_>,
    notes: &mut Notes,
) -> Result<Map<String, Value>, InvalidNodeClass> {
    let field = |name: &str| format!("{path}.{name}");
    // An inline provider carried its own type meta (`extensions.karpenter.sh/v1alpha1 AWS`).
    spec.remove("apiVersion");
    spec.remove("kind");
    let mut out = Map::new();
    let launch_template = spec.remove("launchTemplate");
    if let Some(template) = &launch_template {
        launch_template_removed(template, &field("launchTemplate"), notes);
    }
    for (selector, terms) in [
        ("subnetSelector", "subnetSelectorTerms"),
        ("securityGroupSelector", "securityGroupSelectorTerms"),
    ] {
        let selector_path = field(selector);
        let Some(selector) = selector_map(spec.remove(selector), &selector_path)? else {
            return Err(InvalidNodeClass::new(
                selector_path,
                if launch_template.is_some() {
                    "missing: the launch template supplied it, and v1 has no launch templates; \
                     write the selector from the template's settings first"
                } else {
                    "missing: v1 needs at least one selector term"
                },
            ));
        };
        out.insert(
            terms.to_owned(),
            Value::Array(selector_terms(&selector, &selector_path, notes)),
        );
    }
    let family = match spec.remove("amiFamily") {
        None => DEFAULT_FAMILY.to_owned(),
        Some(Value::String(family)) if FAMILIES.contains(&family.as_str()) => family,
        Some(other) => {
            return Err(InvalidNodeClass::new(
                field("amiFamily"),
                format!("{other} is not one of {}", FAMILIES.join(", ")),
            ));
        }
    };
    let ami_selector = selector_map(spec.remove("amiSelector"), &field("amiSelector"))?;
    for key in UNCHANGED {
        if let Some(value) = spec.remove(key) {
            out.insert(key.to_owned(), value);
        }
    }
    match ami_selector {
        Some(selector) => {
            let terms = ami_selector_terms(&selector, &field("amiSelector"), notes);
            out.insert("amiSelectorTerms".to_owned(), Value::Array(terms));
            v1beta1::family_with_terms(&mut out, &family, &field("amiFamily"), notes);
        }
        None => v1beta1::family_without_terms(&mut out, &family, path, context, notes)?,
    }
    match spec.remove("instanceProfile") {
        Some(profile) => {
            out.insert("instanceProfile".to_owned(), profile);
        }
        None => default_identity(&mut out, &field("instanceProfile"), context, notes),
    }
    global_tags(&mut out, context);
    drop_restricted_tags(&mut out, &field("tags"), notes);
    keep_old_hop_limit(&mut out);
    for key in spec.keys() {
        notes.warn(
            field(key),
            "not an AWSNodeTemplate field v1 has: dropped (check its spelling)",
        );
    }
    Ok(out)
}

/// "Remove the concept of launch templates": v1 writes its own launch templates from the
/// node class, so the template's settings must move into the class by hand.
fn launch_template_removed(template: &Value, path: &str, notes: &mut Notes) {
    notes.warn(
        path,
        format!(
            "v1 has no launch templates ({template}): Karpenter writes its own from the node \
             class. Move the template's image (amiSelectorTerms), user data, block devices and \
             metadata options into this class, and check that securityGroupSelectorTerms \
             selects the template's security groups"
        ),
    );
}

/// A selector field: an object, absent, or empty (which selects nothing, as absent).
fn selector_map(
    value: Option<Value>,
    path: &str,
) -> Result<Option<Map<String, Value>>, InvalidNodeClass> {
    match value {
        None => Ok(None),
        Some(Value::Object(map)) if map.is_empty() => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(InvalidNodeClass::new(
            path,
            "expected an object of tag keys to values",
        )),
    }
}

/// The comma-separated items of a selector value (`"subnet-1, subnet-2"`).
fn items(value: &Value) -> Vec<String> {
    value
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The selector's tag keys and values (every key but the special ones).
fn tags_of(selector: &Map<String, Value>, special: &[&str]) -> Map<String, Value> {
    selector
        .iter()
        .filter(|(key, _)| !special.contains(&key.as_str()))
        .map(|(key, value)| {
            let value = match value {
                Value::String(s) => Value::String(s.clone()),
                other => Value::String(other.to_string()),
            };
            (key.clone(), value)
        })
        .collect()
}

/// "Use ORed selector terms instead of the alpha selectors": a subnet or security group
/// selector of tags becomes one term of those tags; `aws-ids` (or `aws::ids`) becomes one term
/// per id. v1 cannot AND an id with tags, so tags beside ids are dropped, said.
pub fn selector_terms(selector: &Map<String, Value>, path: &str, notes: &mut Notes) -> Vec<Value> {
    let ids: Vec<String> = IDS_KEYS
        .iter()
        .filter_map(|key| selector.get(*key))
        .flat_map(items)
        .collect();
    let tags = tags_of(selector, &IDS_KEYS);
    if ids.is_empty() {
        return vec![json!({ "tags": tags })];
    }
    if !tags.is_empty() {
        notes.warn(
            path,
            format!(
                "v1 selects by id or by tags, not both: the tag filter {} is dropped and the \
                 ids alone select (the same, unless the tags excluded one of them)",
                Value::Object(tags)
            ),
        );
    }
    ids.into_iter().map(|id| json!({ "id": id })).collect()
}

/// The AMI selector's terms: `aws::ids` one term per id (alone: v1 allows nothing beside an
/// id); otherwise one term per owner and name (`aws::owners`, `aws::name`), each with the
/// selector's tags. Owners alone select every image of theirs (`name: "*"`), as they did.
pub fn ami_selector_terms(
    selector: &Map<String, Value>,
    path: &str,
    notes: &mut Notes,
) -> Vec<Value> {
    let special = [IDS_KEYS[0], IDS_KEYS[1], AMI_NAME_KEY, AMI_OWNERS_KEY];
    let ids: Vec<String> = IDS_KEYS
        .iter()
        .filter_map(|key| selector.get(*key))
        .flat_map(items)
        .collect();
    let names = selector.get(AMI_NAME_KEY).map(items).unwrap_or_default();
    let owners = selector.get(AMI_OWNERS_KEY).map(items).unwrap_or_default();
    let tags = tags_of(selector, &special);
    if !ids.is_empty() {
        if !(names.is_empty() && owners.is_empty() && tags.is_empty()) {
            notes.warn(
                path,
                "v1 selects an image by id alone: the name, owner and tag filters beside \
                 aws::ids are dropped, and the ids alone select (the same images, unless the \
                 filters excluded one of them)",
            );
        }
        return ids.into_iter().map(|id| json!({ "id": id })).collect();
    }
    let optional = |list: Vec<String>| -> Vec<Option<String>> {
        if list.is_empty() {
            vec![None]
        } else {
            list.into_iter().map(Some).collect()
        }
    };
    let mut terms = Vec::new();
    for owner in optional(owners) {
        for name in optional(names.clone()) {
            let mut term = Map::new();
            if !tags.is_empty() {
                term.insert("tags".to_owned(), Value::Object(tags.clone()));
            }
            match name {
                Some(name) => {
                    term.insert("name".to_owned(), name.into());
                }
                None if tags.is_empty() => {
                    term.insert("name".to_owned(), "*".into());
                }
                None => {}
            }
            if let Some(owner) = &owner {
                term.insert("owner".to_owned(), owner.as_str().into());
            }
            terms.push(Value::Object(term));
        }
    }
    terms
}

/// "`role` instead of `instanceProfile`", and global settings into the class: a template
/// without an instance profile used the global `aws.defaultInstanceProfile`. From the settings
/// when the input held them; else the profile the getting-started guide named after the
/// cluster, when the cluster is known; else upstream's role placeholder. The last two are said.
pub fn default_identity(
    spec: &mut Map<String, Value>,
    path: &str,
    context: &Context<'_>,
    notes: &mut Notes,
) {
    if let Some(profile) = context.setting("aws.defaultInstanceProfile") {
        spec.insert("instanceProfile".to_owned(), profile.into());
        return;
    }
    if let Some(cluster) = context.cluster_name.filter(|c| !c.is_empty()) {
        let profile = format!("KarpenterNodeInstanceProfile-{cluster}");
        notes.warn(
            path,
            format!(
                "unset, so v1alpha5 used the global aws.defaultInstanceProfile, which the input \
                 does not hold: set to {profile:?}, the getting-started guide's name for \
                 cluster {cluster:?}; check it (or convert with the karpenter-global-settings \
                 ConfigMap in the input), or name the node role in spec.role instead"
            ),
        );
        spec.insert("instanceProfile".to_owned(), profile.into());
        return;
    }
    notes.warn(
        path,
        format!(
            "unset, so v1alpha5 used the global aws.defaultInstanceProfile, which the input \
             does not hold: spec.role is the placeholder {ROLE_PLACEHOLDER} (substitute it, \
             e.g. with envsubst), or give --cluster-name or the karpenter-global-settings \
             ConfigMap"
        ),
    );
    spec.insert("role".to_owned(), ROLE_PLACEHOLDER.into());
}

/// "Global settings moved into the node class": the global `aws.tags` (a JSON object) tag
/// every instance; the class's own tags win where both set a key.
pub fn global_tags(spec: &mut Map<String, Value>, context: &Context<'_>) {
    let Some(Ok(Value::Object(global))) = context
        .setting("aws.tags")
        .map(serde_json::from_str::<Value>)
    else {
        return;
    };
    let tags = spec
        .entry("tags")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(tags) = tags {
        for (key, value) in global {
            tags.entry(key).or_insert(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::tests::object;
    use super::*;

    fn template(spec: Value) -> (Result<Map<String, Value>, InvalidNodeClass>, Vec<String>) {
        let mut notes = Notes::default();
        let result = node_template_spec(object(spec), "spec", &Context::default(), &mut notes);
        let warnings = notes.warnings.iter().map(|w| w.path.clone()).collect();
        (result, warnings)
    }

    /// "Use ORed selector terms": tags become one term; `aws-ids` one term per id.
    #[test]
    fn selectors_become_terms() {
        let mut notes = Notes::default();
        let tags = object(json!({"karpenter.sh/discovery": "demo", "Name": "*private*"}));
        assert_eq!(
            selector_terms(&tags, "spec.subnetSelector", &mut notes),
            [json!({"tags": {"karpenter.sh/discovery": "demo", "Name": "*private*"}})]
        );
        let ids = object(json!({"aws-ids": "subnet-1, subnet-2"}));
        assert_eq!(
            selector_terms(&ids, "spec.subnetSelector", &mut notes),
            [json!({"id": "subnet-1"}), json!({"id": "subnet-2"})]
        );
        assert!(notes.warnings.is_empty());
        let both = object(json!({"aws::ids": "sg-1", "team": "a"}));
        assert_eq!(
            selector_terms(&both, "spec.securityGroupSelector", &mut notes),
            [json!({"id": "sg-1"})]
        );
        assert_eq!(notes.warnings[0].path, "spec.securityGroupSelector");
    }

    /// `aws::owners` × `aws::name` terms with the tags; ids alone; owners alone match every
    /// name.
    #[test]
    fn ami_selectors_become_terms() {
        let mut notes = Notes::default();
        let selector = object(json!({
            "aws::owners": "self,123456789012", "aws::name": "my-ami-*", "team": "a",
        }));
        assert_eq!(
            ami_selector_terms(&selector, "spec.amiSelector", &mut notes),
            [
                json!({"name": "my-ami-*", "owner": "self", "tags": {"team": "a"}}),
                json!({"name": "my-ami-*", "owner": "123456789012", "tags": {"team": "a"}}),
            ]
        );
        let owners = object(json!({"aws::owners": "amazon"}));
        assert_eq!(
            ami_selector_terms(&owners, "spec.amiSelector", &mut notes),
            [json!({"name": "*", "owner": "amazon"})]
        );
        assert!(notes.warnings.is_empty());
        let ids = object(json!({"aws::ids": "ami-1,ami-2", "aws::owners": "self"}));
        assert_eq!(
            ami_selector_terms(&ids, "spec.amiSelector", &mut notes),
            [json!({"id": "ami-1"}), json!({"id": "ami-2"})]
        );
        assert_eq!(notes.warnings.len(), 1);
    }

    /// A template without an AMI selector followed the newest EKS-optimized image of its
    /// family (AL2 when unset): v1's alias `@latest` does the same.
    #[test]
    fn a_template_without_images_follows_its_family_alias() {
        let (spec, warnings) = template(json!({
            "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"},
            "instanceProfile": "p",
        }));
        let spec = spec.unwrap();
        assert_eq!(spec["amiSelectorTerms"], json!([{"alias": "al2@latest"}]));
        assert!(spec.get("amiFamily").is_none());
        assert_eq!(spec["instanceProfile"], "p");
        assert_eq!(spec["metadataOptions"]["httpPutResponseHopLimit"], 2);
        assert_eq!(warnings, ["spec.amiFamily"]);
    }

    /// A launch template cannot be kept; without the selectors it supplied, nothing valid can
    /// be written.
    #[test]
    fn a_launch_template_is_dropped_and_said() {
        let (spec, warnings) = template(json!({
            "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"},
            "launchTemplate": "my-template", "instanceProfile": "p",
        }));
        assert!(spec.unwrap().get("launchTemplate").is_none());
        assert!(warnings.contains(&"spec.launchTemplate".to_owned()));
        let (error, _) = template(json!({
            "subnetSelector": {"a": "b"}, "launchTemplate": "my-template",
        }));
        let error = error.unwrap_err();
        assert_eq!(error.field, "spec.securityGroupSelector");
        assert!(error.message.contains("launch template"), "{error}");
    }

    #[test]
    fn an_unknown_family_or_field_is_named() {
        let (error, _) = template(json!({
            "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"},
            "amiFamily": "Gentoo",
        }));
        assert_eq!(error.unwrap_err().field, "spec.amiFamily");
        let (_, warnings) = template(json!({
            "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"},
            "instanceProfile": "p", "amiFamily": "Bottlerocket", "subnetSelectr": {},
        }));
        assert!(
            warnings.contains(&"spec.subnetSelectr".to_owned()),
            "{warnings:?}"
        );
    }

    /// The instance profile the template left to the global setting: from the settings, else
    /// the getting-started name for the cluster, else upstream's role placeholder.
    #[test]
    fn the_default_instance_profile_moves_into_the_class() {
        let settings = BTreeMap::from([(
            "aws.defaultInstanceProfile".to_owned(),
            "NodeProfile".to_owned(),
        )]);
        let mut notes = Notes::default();
        let mut spec = Map::new();
        let context = Context {
            global_settings: Some(&settings),
            ..Context::default()
        };
        default_identity(&mut spec, "spec.instanceProfile", &context, &mut notes);
        assert_eq!(spec["instanceProfile"], "NodeProfile");
        assert!(notes.warnings.is_empty());

        let mut spec = Map::new();
        let context = Context {
            cluster_name: Some("demo"),
            ..Context::default()
        };
        default_identity(&mut spec, "spec.instanceProfile", &context, &mut notes);
        assert_eq!(spec["instanceProfile"], "KarpenterNodeInstanceProfile-demo");

        let mut spec = Map::new();
        default_identity(
            &mut spec,
            "spec.instanceProfile",
            &Context::default(),
            &mut notes,
        );
        assert_eq!(spec["role"], ROLE_PLACEHOLDER);
        assert_eq!(notes.warnings.len(), 2);
    }

    /// The global `aws.tags` tag every instance; the class's own win.
    #[test]
    fn global_tags_join_the_class_tags() {
        let settings = BTreeMap::from([(
            "aws.tags".to_owned(),
            r#"{"team": "global", "cost-center": "42"}"#.to_owned(),
        )]);
        let context = Context {
            global_settings: Some(&settings),
            ..Context::default()
        };
        let mut spec = object(json!({"tags": {"team": "own"}}));
        global_tags(&mut spec, &context);
        assert_eq!(spec["tags"], json!({"team": "own", "cost-center": "42"}));
    }
}
