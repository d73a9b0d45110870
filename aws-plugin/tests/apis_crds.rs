//! The CRDs in `deploy/crds/` are the ones the types generate: the EC2NodeClass CRD from the
//! plugin's types, and core's karpenter.sh CRDs with the `karpenter.k8s.aws` label domain
//! restricted as the plugin's vocabulary says. These tests fail when a file differs, and rewrite
//! them when run with `KARPENTER_UPDATE_CRDS=1`. The EC2NodeClass checks are the ones every API
//! crate runs (`karpenter_api::crd_tests!`), on the plugin's own CRD and fixtures.

use aws_plugin::apis::{EC2NodeClass, crd};
use aws_plugin::labels::VOCABULARY;
use karpenter_api::testing::{assert_structural, check_or_update, deploy_crds_dir};

karpenter_api::crd_tests! {
    crds: crd::crds(),
    generator: crd::GENERATOR,
    defaults: {
        EC2NodeClass => [
            "ec2nodeclass-minimal.yaml",
            "ec2nodeclass-alias.yaml",
            "ec2nodeclass-docs.yaml",
        ],
    },
}

#[test]
fn checked_in_core_crds_carry_the_aws_label_domain() {
    let crds = crd::core_crds().expect("serializable CRDs");
    assert_structural(&crds);
    check_or_update(&crds, &deploy_crds_dir(), &crd::CORE_GENERATOR);
}

/// The CRDs allow in `karpenter.k8s.aws` exactly the vocabulary's keys there, which core's
/// run-time validation allows from the same vocabulary.
#[test]
fn the_aws_label_domain_allows_the_vocabulary_s_keys() {
    let rule = crd::label_domain_rule();
    let in_domain: Vec<&str> = VOCABULARY
        .iter()
        .map(|label| label.key)
        .filter(|key| key.starts_with("karpenter.k8s.aws/"))
        .collect();
    assert_eq!(&*rule.allowed_keys, in_domain.as_slice());
    assert!(
        rule.allowed_keys
            .contains(&"karpenter.k8s.aws/instance-family")
    );
}
