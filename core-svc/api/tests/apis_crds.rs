//! The karpenter.sh CRDs in `deploy/crds/` are the ones the types generate: this test fails when
//! they differ, and rewrites them when run with `KARPENTER_UPDATE_CRDS=1`. The checks are the
//! ones every API crate runs (`karpenter_api::crd_tests!`).

use karpenter_api::{NodeClaim, NodePool};

karpenter_api::crd_tests! {
    crds: karpenter_api::crd::crds(),
    generator: karpenter_api::crd::GENERATOR,
    defaults: {
        NodePool => ["nodepool-minimal.yaml", "nodepool-budgets.yaml", "nodepool-docs.yaml"],
        NodeClaim => ["nodeclaim-docs.yaml"],
    },
}
