//! Node selector requirements with `minValues` (upstream `NodeSelectorRequirementWithMinValues`):
//! what NodePools and NodeClaims constrain instances with.

pub use core_domain::requirements::Operator;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{
    labels::{self, KeyUse, LabelPolicy, LabelValueType},
    patterns,
    validation::{Errors, FieldPath, Violation, check_label_key},
};

/// The most requirements a NodePool or NodeClaim may have.
pub const MAX_REQUIREMENTS: usize = 100;
/// Bounds of `minValues`.
pub const MIN_VALUES_RANGE: (i64, i64) = (1, 50);

/// A key, an operator relating it to values, and optionally how many distinct values the
/// scheduler must keep open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key that the selector applies to.
    #[schemars(length(max = 316), regex(pattern = patterns::QUALIFIED_NAME))]
    pub key: String,
    /// The key's relationship to the values.
    #[serde(with = "operator_serde")]
    #[schemars(schema_with = "operator_schema")]
    pub operator: Operator,
    /// The values: non-empty for In and NotIn, one non-negative integer for Gt, Lt, Gte and Lte,
    /// empty for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        transform = label_value_items,
        extend("x-kubernetes-list-type" = "atomic")
    )]
    pub values: Vec<String>,
    /// The minimum number of distinct values the scheduler must keep available for the key
    /// (alpha upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

/// Puts the label-value limits on `values` where upstream's CRD has them: on the array itself,
/// where the API server ignores them (a string keyword on an array constrains nothing). The
/// values they mean to refuse are admitted, as upstream admits them, and reported as
/// warnings ([`check_requirements`]).
fn label_value_items(schema: &mut schemars::Schema) {
    schema.insert("maxLength".into(), labels::MAX_VALUE_LENGTH.into());
    schema.insert("pattern".into(), patterns::LABEL_VALUE.as_str().into());
}

/// Serde for [`Operator`], which the domain defines without serde (it depends on nothing): the
/// API's spelling is [`Operator::as_str`].
mod operator_serde {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use super::Operator;

    pub(super) fn serialize<S: Serializer>(
        op: &Operator,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(op.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Operator, D::Error> {
        let name = String::deserialize(deserializer)?;
        Operator::ALL
            .into_iter()
            .find(|op| op.as_str() == name)
            .ok_or_else(|| {
                let expected: Vec<&str> = Operator::ALL.iter().map(|op| op.as_str()).collect();
                D::Error::custom(format_args!(
                    "unknown variant `{name}`, expected one of {}",
                    expected.join(", ")
                ))
            })
    }
}

/// The schema of [`Operator`]: its names, in the API's order.
fn operator_schema(_: &mut SchemaGenerator) -> Schema {
    let names = Operator::ALL.map(Operator::as_str);
    json_schema!({ "type": "string", "enum": names })
}

/// CEL's `int(x) >= 0` on a string: an optionally signed decimal that fits an `i64`.
fn is_non_negative_int(value: &str) -> bool {
    value.parse::<i64>().is_ok_and(|v| v >= 0)
}

/// Checks a requirements list (the CRD's `maxItems`, key, value and operator rules).
pub fn check_requirements(
    errors: &mut Errors,
    path: &FieldPath,
    requirements: &[NodeSelectorRequirementWithMinValues],
    key_use: KeyUse,
    policy: &LabelPolicy,
) {
    errors.max_items(path, requirements, MAX_REQUIREMENTS);
    for (i, r) in requirements.iter().enumerate() {
        let at = path.index(i);
        check_label_key(errors, &at.field("key"), &r.key, key_use, policy);
        let values = at.field("values");
        // Upstream declares the label-value length and pattern on the `values` array, where
        // the API server ignores them (kubernetes-sigs/karpenter `pkg/apis/v1`, the
        // `+kubebuilder:validation` markers on `NodeSelectorRequirementWithMinValues`): such a
        // value is admitted, and no node can carry it as a label.
        for (j, value) in r.values.iter().enumerate() {
            if let Err(e) = labels::check_label_value(value) {
                errors.warn(values.index(j), e);
            }
        }
        if r.operator == Operator::In && r.values.is_empty() {
            errors.push(values.clone(), Violation::InWithoutValues);
        }
        if r.operator.is_bound()
            && !matches!(r.values.as_slice(), [only] if is_non_negative_int(only))
        {
            errors.push(
                values.clone(),
                Violation::NotOneInteger(r.operator.as_str()),
            );
        }
        // The vocabulary's value types: a provider's integer label compares as integers and
        // takes integers only; bounds on a well-known string label would never match a node.
        // Users' own labels are not typed.
        match policy.value_type(&r.key) {
            Some(LabelValueType::String) if r.operator.is_bound() => errors.push(
                at.field("operator"),
                Violation::BoundOnStringLabel {
                    operator: r.operator.as_str(),
                    key: r.key.clone(),
                },
            ),
            Some(LabelValueType::Integer) => {
                for (j, value) in r.values.iter().enumerate() {
                    if !r.operator.is_bound() && !is_non_negative_int(value) {
                        errors.push(
                            values.index(j),
                            Violation::NotAnInteger {
                                value: value.clone(),
                                key: r.key.clone(),
                            },
                        );
                    }
                }
            }
            Some(LabelValueType::String) | None => {}
        }
        if let Some(min_values) = r.min_values {
            errors.range(
                &at.field("minValues"),
                min_values,
                Some(MIN_VALUES_RANGE.0),
                Some(MIN_VALUES_RANGE.1),
            );
            let enough = usize::try_from(min_values).is_ok_and(|m| r.values.len() >= m);
            if r.operator == Operator::In && !enough {
                errors.push(values, Violation::FewerValuesThanMinValues(min_values));
            }
        }
    }
}
