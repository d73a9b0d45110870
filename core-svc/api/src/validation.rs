//! Validation errors, and the checks every Karpenter API group's objects share.
//!
//! The rules are the CRDs' (OpenAPI patterns, bounds, CEL), enforced again in Rust: the
//! simulator loads manifests no API server has seen, and core should not trust that every object
//! it reads was admitted by the CRDs this repository ships. Each error names the field by its
//! JSON path (`spec.template.spec.requirements[0].values`) and the rule it breaks; messages
//! follow the CRDs' CEL wording where there is one.
//!
//! One [`FieldPath`], [`ValidationError`] and [`Errors`] serve every API group. They are generic
//! over the violation type `V`, which defaults to [`Violation`]: the karpenter.sh rules plus the
//! OpenAPI ones any schema has (`maxItems`, `maxProperties`, `maxLength`, bounds, `pattern`). A
//! provider's group with rules of its own (EC2NodeClass's selector terms, say) defines its own
//! violation enum with a variant `#[error(transparent)] Common(#[from] Violation)`, so the shared
//! checks ([`Errors::pattern`], [`Errors::range`], ...) serve it unchanged, with the same
//! messages, and its own rules stay in its own crate.

use std::{collections::BTreeMap, fmt};

use k8s_openapi::api::core::v1::Taint;

use crate::{
    labels::{self, InvalidKey, InvalidValue, KeyUse, LabelPolicy, RestrictedKey},
    patterns::{self, Pattern},
};

/// The taint effects Kubernetes knows.
pub const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// A field path, `spec.template.spec.requirements[0].values`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path starting at a top-level field (`spec`).
    pub fn root(field: &str) -> Self {
        Self(field.to_owned())
    }

    /// `self.field`.
    pub fn field(&self, field: &str) -> Self {
        Self(format!("{}.{field}", self.0))
    }

    /// `self[index]`.
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// `self["key"]`, for map entries.
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key:?}]", self.0))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where deserializing JSON failed, as [`FieldPath`] spells paths: struct fields and plain
/// keys as `.name`, list items as `[i]`, and any other map key quoted, `["karpenter.sh/x"]`, so
/// a key holding `.`, `[` or `"` cannot read as a different or unfinished path. Empty for the
/// document itself.
pub fn deserialize_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                let plain = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !plain {
                    out.push_str(&format!("[{key:?}]"));
                } else {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
            }
            Segment::Unknown => out.push_str(".?"),
        }
    }
    out
}

/// One broken rule, and where. `V` is the API group's violation type; karpenter.sh's is
/// [`Violation`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {violation}")]
pub struct ValidationError<V = Violation> {
    /// The field that breaks the rule.
    pub path: FieldPath,
    /// The rule.
    pub violation: V,
}

/// The rules, with the message each prints: karpenter.sh's, and the OpenAPI ones every API
/// group's schema has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A required string is empty (`self != ''`).
    #[error("{0} may not be empty")]
    Empty(&'static str),
    /// A list is longer than the CRD allows (`maxItems`).
    #[error("must have at most {0} items")]
    TooManyItems(usize),
    /// A map has more entries than the CRD allows (`maxProperties`).
    #[error("must have at most {0} entries")]
    TooManyEntries(usize),
    /// A string is longer than the CRD allows (`maxLength`).
    #[error("must be no more than {0} characters")]
    TooLong(usize),
    /// A number is below the CRD's `minimum`.
    #[error("must be greater than or equal to {0}")]
    BelowMinimum(i64),
    /// A number is above the CRD's `maximum`.
    #[error("must be less than or equal to {0}")]
    AboveMaximum(i64),
    /// A string does not match the CRD's `pattern`.
    #[error("{value:?} does not match {pattern}")]
    Pattern {
        /// The string.
        value: String,
        /// The expression it should match.
        pattern: &'static str,
    },
    /// A value outside the CRD's `enum`.
    #[error("{value:?} is not one of {allowed:?}")]
    NotOneOf {
        /// The value.
        value: String,
        /// What is allowed.
        allowed: &'static [&'static str],
    },
    /// A `listType=set` list repeats an item.
    #[error("duplicate value {0:?}")]
    Duplicate(String),
    /// A label key is not a qualified name.
    #[error(transparent)]
    InvalidKey(#[from] InvalidKey),
    /// A label value is malformed.
    #[error(transparent)]
    InvalidValue(#[from] InvalidValue),
    /// A label key is reserved.
    #[error(transparent)]
    RestrictedKey(#[from] RestrictedKey),
    /// Two taints share key and effect.
    #[error("duplicate taint Key/Effect pair {key}={effect}")]
    DuplicateTaint {
        /// The key.
        key: String,
        /// The effect.
        effect: String,
    },
    /// `In` with no values.
    #[error("In requires at least one value")]
    InWithoutValues,
    /// `Gt`, `Lt`, `Gte`, `Lte` without exactly one non-negative integer.
    #[error("{0} requires a single non-negative integer value")]
    NotOneInteger(&'static str),
    /// `Gt`, `Lt`, `Gte`, `Lte` on a label whose values are not integers.
    #[error("{operator} compares integers, and the values of {key} are strings")]
    BoundOnStringLabel {
        /// The operator.
        operator: &'static str,
        /// The label key.
        key: String,
    },
    /// A value that is not a non-negative integer for a label whose values are.
    #[error("{value:?} is not a non-negative integer, and the values of {key} are")]
    NotAnInteger {
        /// The value.
        value: String,
        /// The label key.
        key: String,
    },
    /// `In` with fewer values than `minValues`.
    #[error("In with minValues {0} requires at least {0} values")]
    FewerValuesThanMinValues(i64),
    /// A budget has a schedule without a duration, or the reverse.
    #[error("'schedule' must be set with 'duration'")]
    ScheduleWithoutDuration,
    /// A field that may not change after creation changed.
    #[error("{0} is immutable")]
    Immutable(&'static str),
    /// `replicas` added to or removed from an existing NodePool.
    #[error(
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) \
         provisioning modes"
    )]
    StaticDynamicTransition,
    /// A static NodePool limits something other than `nodes`.
    #[error("only 'limits.nodes' is supported on static NodePools")]
    StaticLimits,
    /// A static NodePool has a weight.
    #[error("'weight' is not supported on static NodePools")]
    StaticWeight,
}

/// Collects errors while a validator walks an object, and warnings: what upstream's CRD admits
/// although it cannot work as written (a rule upstream declares where the API server ignores
/// it, a CEL rule weaker than its own message). Manifests written for upstream must apply
/// unchanged, so those are admitted and reported at run time instead. `V` is the API group's
/// violation type; the shared checks need only that a [`Violation`] converts into it.
#[derive(Debug)]
pub struct Errors<V = Violation> {
    errors: Vec<ValidationError<V>>,
    warnings: Vec<ValidationError<V>>,
}

// Not derived: the derive would require `V: Default`, which no violation type is.
impl<V> Default for Errors<V> {
    fn default() -> Self {
        Self {
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl<V> Errors<V> {
    /// Records that `path` breaks `violation`.
    pub fn push(&mut self, path: FieldPath, violation: impl Into<V>) {
        self.errors.push(ValidationError {
            path,
            violation: violation.into(),
        });
    }

    /// Records that `path` breaks `violation`, which upstream's CRD admits: a warning.
    pub fn warn(&mut self, path: FieldPath, violation: impl Into<V>) {
        self.warnings.push(ValidationError {
            path,
            violation: violation.into(),
        });
    }

    /// `Ok` if no error was recorded (warnings aside).
    pub fn into_result(self) -> Result<(), Vec<ValidationError<V>>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }

    /// The warnings recorded.
    pub fn into_warnings(self) -> Vec<ValidationError<V>> {
        self.warnings
    }

    /// The errors and the warnings recorded.
    pub fn into_parts(self) -> (Vec<ValidationError<V>>, Vec<ValidationError<V>>) {
        (self.errors, self.warnings)
    }
}

impl<V: From<Violation>> Errors<V> {
    /// Checks a `maxItems`.
    pub fn max_items<T>(&mut self, path: &FieldPath, items: &[T], max: usize) {
        if items.len() > max {
            self.push(path.clone(), Violation::TooManyItems(max));
        }
    }

    /// Checks a `maxProperties`, given how many entries the map has.
    pub fn max_entries(&mut self, path: &FieldPath, entries: usize, max: usize) {
        if entries > max {
            self.push(path.clone(), Violation::TooManyEntries(max));
        }
    }

    /// Checks a string against a `pattern`. An optional field may pass `None`: an absent field
    /// breaks no pattern, as in OpenAPI.
    pub fn pattern<'a>(
        &mut self,
        path: &FieldPath,
        value: impl Into<Option<&'a str>>,
        pattern: Pattern,
    ) {
        if let Some(value) = value.into()
            && !pattern.matches(value)
        {
            self.push(
                path.clone(),
                Violation::Pattern {
                    value: value.to_owned(),
                    pattern: pattern.as_str(),
                },
            );
        }
    }

    /// Checks a number's `minimum` and `maximum`.
    pub fn range(&mut self, path: &FieldPath, value: i64, min: Option<i64>, max: Option<i64>) {
        if let Some(min) = min
            && value < min
        {
            self.push(path.clone(), Violation::BelowMinimum(min));
        }
        if let Some(max) = max
            && value > max
        {
            self.push(path.clone(), Violation::AboveMaximum(max));
        }
    }

    /// Checks a required string is not empty (karpenter.sh's `self != ''` wording).
    pub fn not_empty(&mut self, path: &FieldPath, value: &str, name: &'static str) {
        if value.is_empty() {
            self.push(path.clone(), Violation::Empty(name));
        }
    }
}

/// Checks a label key: qualified name, length, and the restricted domains and keys (`policy`
/// adds the cloud provider's domains and well-known labels to karpenter.sh's).
pub fn check_label_key(
    errors: &mut Errors,
    path: &FieldPath,
    key: &str,
    key_use: KeyUse,
    policy: &LabelPolicy,
) {
    if key.len() > labels::MAX_KEY_LENGTH {
        errors.push(path.clone(), Violation::TooLong(labels::MAX_KEY_LENGTH));
    }
    if let Err(e) = labels::check_qualified_name(key) {
        errors.push(path.clone(), e);
    }
    for restricted in labels::restrictions(key, key_use, policy) {
        errors.push(path.clone(), restricted);
    }
}

/// Checks template labels: at most 100, valid keys and values, no restricted keys.
pub fn check_labels(
    errors: &mut Errors,
    path: &FieldPath,
    labels_: &BTreeMap<String, String>,
    policy: &LabelPolicy,
) {
    const MAX_LABELS: usize = 100;
    errors.max_entries(path, labels_.len(), MAX_LABELS);
    for (key, value) in labels_ {
        let entry = path.key(key);
        check_label_key(errors, &entry, key, KeyUse::NodePool, policy);
        if let Err(e) = labels::check_label_value(value) {
            errors.push(entry, e);
        }
    }
}

/// Checks `taints` and `startupTaints` together: upstream rejects a key/effect pair that appears
/// twice across both lists.
pub fn check_taints(errors: &mut Errors, lists: &[(FieldPath, &[Taint])]) {
    let mut seen = std::collections::BTreeSet::new();
    for (path, taints) in lists {
        for (i, taint) in taints.iter().enumerate() {
            let at = path.index(i);
            if taint.key.is_empty() {
                errors.push(at.field("key"), Violation::Empty("key"));
            } else {
                errors.pattern(
                    &at.field("key"),
                    taint.key.as_str(),
                    patterns::QUALIFIED_NAME,
                );
            }
            // An empty value is no value: the pattern applies to the ones given.
            let value = taint.value.as_deref().filter(|v| !v.is_empty());
            errors.pattern(&at.field("value"), value, patterns::QUALIFIED_NAME);
            if !TAINT_EFFECTS.contains(&taint.effect.as_str()) {
                errors.push(
                    at.field("effect"),
                    Violation::NotOneOf {
                        value: taint.effect.clone(),
                        allowed: &TAINT_EFFECTS,
                    },
                );
            }
            if !seen.insert((taint.key.as_str(), taint.effect.as_str())) {
                errors.push(
                    at,
                    Violation::DuplicateTaint {
                        key: taint.key.clone(),
                        effect: taint.effect.clone(),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_json_paths() {
        let p = FieldPath::root("spec")
            .field("template")
            .field("metadata")
            .field("labels")
            .key("karpenter.sh/foo");
        assert_eq!(
            p.as_str(),
            r#"spec.template.metadata.labels["karpenter.sh/foo"]"#
        );
        assert_eq!(
            FieldPath::root("spec").field("a").index(3).as_str(),
            "spec.a[3]"
        );
    }

    #[test]
    fn deserialize_paths_quote_keys_that_are_not_plain() {
        let path_of = |json: &str| {
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            let error = serde_path_to_error::deserialize::<
                _,
                BTreeMap<String, Vec<BTreeMap<String, u8>>>,
            >(value)
            .unwrap_err();
            deserialize_path(error.path())
        };
        assert_eq!(path_of(r#"{"spec": [{"maxPods": -1}]}"#), "spec[0].maxPods");
        assert_eq!(
            path_of(r#"{"tags": [{"a.b\"": -1}]}"#),
            r#"tags[0]["a.b\""]"#
        );
        assert_eq!(path_of(r#"{"a:b": [{"x": -1}]}"#), r#"["a:b"][0].x"#);
    }

    #[test]
    fn errors_print_path_then_rule() {
        let mut errors: Errors = Errors::default();
        errors.push(
            FieldPath::root("spec")
                .field("disruption")
                .field("budgets")
                .index(1),
            Violation::ScheduleWithoutDuration,
        );
        let errs = errors.into_result().unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "spec.disruption.budgets[1]: 'schedule' must be set with 'duration'"
        );
    }
}
