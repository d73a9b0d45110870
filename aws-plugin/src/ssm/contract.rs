//! The contract every [`Ssm`] implementation keeps, as test functions over `&dyn Ssm`: the
//! in-memory SSM runs them in unit tests, the SDK one against `moto_server`
//! (`tests/iam_ssm_contract_moto.rs`, which includes this file by path). AWS's public
//! parameters (`/aws/service/...`) are not part of it: moto ships a snapshot of them, the
//! in-memory SSM has only what it is given, so the moto test checks them on its own.

#![allow(
    clippy::expect_used,
    reason = "test code, also where an integration test includes it by path: a failed call is a failed test"
)]

// The integration test includes this file by path and puts the port's items at its root, so
// `super::` resolves in both places.
use super::Ssm;

/// What each implementation creates before the suite runs, through its own means.
#[derive(Debug, Clone)]
pub(crate) struct Fixtures {
    /// A `String` parameter that exists.
    pub(crate) name: String,
    /// Its value.
    pub(crate) value: String,
}

/// Runs every case.
pub(crate) async fn run_all(ssm: &dyn Ssm, f: &Fixtures) {
    let value = ssm
        .get_parameter(&f.name)
        .await
        .expect("get_parameter of the fixture");
    assert_eq!(value.as_deref(), Some(f.value.as_str()));

    let missing = ssm
        .get_parameter("/karpenter-test/no-such-parameter")
        .await
        .expect("a missing parameter is an answer, not an error");
    assert_eq!(missing, None);

    // Names are case-sensitive: the fixture in other letters is another (missing) name.
    let other_case = ssm
        .get_parameter(&f.name.to_uppercase())
        .await
        .expect("get_parameter of another name");
    assert_eq!(other_case, None);
}
