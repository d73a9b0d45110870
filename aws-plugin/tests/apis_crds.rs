//! The EC2NodeClass CRD in `deploy/crds/` is the one the types generate: this test fails when it
//! differs, and rewrites it when run with `KARPENTER_UPDATE_CRDS=1`. The checks are the ones
//! every API crate runs (`karpenter_api::crd_tests!`), on the plugin's own CRD and fixtures.

use aws_plugin::apis::{EC2NodeClass, crd};

karpenter_api::crd_tests! {
    crds: crd::crds(),
    generator: crd::GENERATOR,
    defaults: {
        EC2NodeClass => [
            "ec2nodeclass-minimal.yaml",
            "ec2nodeclass-alias.yaml",
            "ec2nodeclass-docs.yaml",
            "ec2nodeclass-kubelet-extra.yaml",
        ],
    },
}
