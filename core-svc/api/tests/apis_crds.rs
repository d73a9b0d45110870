//! The karpenter.sh CRDs as core's types generate them, before a cloud provider restricts its
//! label domain in them: their schemas are structural and their defaults are serde's. The
//! files in `deploy/crds/` are these CRDs as the AWS install ships them (with the
//! `karpenter.k8s.aws` domain rule), checked by aws-plugin's `apis_crds` test.

use karpenter_api::crd::{crds, with_provider_domain};
use karpenter_api::labels::DomainRule;
use karpenter_api::testing::{
    Fixtures, assert_schema_defaults_match_serde, assert_structural, crd_of, openapi_schema,
};
use karpenter_api::{NodeClaim, NodePool};
use serde_json::Value;

#[test]
fn schemas_are_structural() {
    assert_structural(&crds());
}

#[test]
fn schema_defaults_match_serde_defaults() {
    let fixtures = Fixtures::new(env!("CARGO_MANIFEST_DIR"));
    for fixture in [
        "nodepool-minimal.yaml",
        "nodepool-budgets.yaml",
        "nodepool-docs.yaml",
    ] {
        assert_schema_defaults_match_serde::<NodePool>(
            &crd_of::<NodePool>(),
            fixtures.yaml(fixture),
            fixture,
        );
    }
    assert_schema_defaults_match_serde::<NodeClaim>(
        &crd_of::<NodeClaim>(),
        fixtures.yaml("nodeclaim-docs.yaml"),
        "nodeclaim-docs.yaml",
    );
}

/// Every rule list of `node` (recursively) as (its path, its messages).
fn rule_lists(path: &str, node: &Value, out: &mut Vec<(String, Vec<String>)>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                let messages = rules
                    .iter()
                    .filter_map(|r| r["message"].as_str().map(str::to_owned))
                    .collect();
                out.push((path.to_owned(), messages));
            }
            for (key, child) in map {
                rule_lists(&format!("{path}.{key}"), child, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                rule_lists(path, item, out);
            }
        }
        _ => {}
    }
}

/// Where core restricts `karpenter.sh` (NodePool template labels and requirement keys,
/// NodeClaim requirement keys), a provider's rule follows core's, in the same form; nothing
/// else changes.
#[test]
fn a_provider_domain_rule_follows_core_s_own_wherever_core_restricts_its_domain() {
    let rule = DomainRule::provider(
        "example.cloud",
        ["example.cloud/size", "example.com/other", "team"],
    );
    assert_eq!(&*rule.allowed_keys, ["example.cloud/size"]);
    let core = crds();
    let with_provider = with_provider_domain(crds(), &rule).expect("serializable CRDs");
    let core_domain = "label domain \"karpenter.sh\" is restricted";
    let provider_domain = "label domain \"example.cloud\" is restricted";
    let mut changed = 0;
    for ((name, before), (_, after)) in core.iter().zip(&with_provider) {
        let (mut before_lists, mut after_lists) = (Vec::new(), Vec::new());
        rule_lists(name, &openapi_schema(before), &mut before_lists);
        rule_lists(name, &openapi_schema(after), &mut after_lists);
        assert_eq!(before_lists.len(), after_lists.len(), "{name}");
        for ((path, before), (_, after)) in before_lists.iter().zip(&after_lists) {
            if before.iter().any(|m| m == core_domain) {
                let mut expected = before.clone();
                expected.push(provider_domain.to_owned());
                assert_eq!(after, &expected, "{path}");
                changed += 1;
            } else {
                assert_eq!(after, before, "{path}");
            }
        }
    }
    assert_eq!(
        changed, 3,
        "NodePool labels and requirement keys, NodeClaim requirement keys"
    );
    let json = serde_json::to_string(&with_provider).expect("serializable");
    assert!(json.contains(
        r#"self.all(x, x in [\"example.cloud/size\"] || !x.find(\"^([^/]+)\").endsWith(\"example.cloud\"))"#
    ));
    assert!(json.contains(
        r#"self in [\"example.cloud/size\"] || !self.find(\"^([^/]+)\").endsWith(\"example.cloud\")"#
    ));
}
