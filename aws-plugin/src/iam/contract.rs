//! The contract every [`Iam`] implementation keeps, as test functions over `&dyn Iam`: the
//! in-memory IAM runs them in unit tests, the SDK one against `moto_server`
//! (`tests/iam_ssm_contract_moto.rs`, which includes this file by path). Only what both must
//! guarantee is asserted. moto 5.2.1 leaves open, so the contract does not test:
//!
//! - removing a role the profile does not have (moto fails with an internal error);
//! - name and path validation (moto accepts anything; the in-memory IAM checks as IAM does);
//! - the order of tags (compared as sets: IAM promises none).

#![allow(
    clippy::expect_used,
    reason = "test code, also where an integration test includes it by path: a failed call is a failed test"
)]

// The integration test includes this file by path and puts the port's items at its root, so
// `super::` resolves in both places.
use super::{AwsError, Iam, Tag};

/// What each implementation creates before the suite runs, through its own means.
#[derive(Debug, Clone)]
pub(crate) struct Fixtures {
    /// A role that exists and is in no instance profile.
    pub(crate) role: String,
}

const PROFILE: &str = "contract-profile";
const PATH: &str = "/karpenter/";

fn tags() -> Vec<Tag> {
    vec![
        Tag::new("karpenter.sh/discovery", "contract"),
        Tag::new("karpenter.k8s.aws/ec2nodeclass", "default"),
    ]
}

fn sorted(mut tags: Vec<Tag>) -> Vec<Tag> {
    tags.sort();
    tags
}

/// Runs every case in order: each one builds on the profile the one before left behind.
pub(crate) async fn run_all(iam: &dyn Iam, f: &Fixtures) {
    missing(iam).await;
    create(iam).await;
    roles(iam, f).await;
    delete(iam, f).await;
}

async fn missing(iam: &dyn Iam) {
    let none = iam
        .get_instance_profile(PROFILE)
        .await
        .expect("get of a missing profile is an answer, not an error");
    assert_eq!(none, None);

    let err = iam
        .delete_instance_profile(PROFILE)
        .await
        .expect_err("deleting a missing profile");
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(err.code(), "NoSuchEntity");
    assert!(!err.message().is_empty());
}

async fn create(iam: &dyn Iam) {
    let created = iam
        .create_instance_profile(PROFILE, PATH, &tags())
        .await
        .expect("create_instance_profile");
    assert_eq!(created.name, PROFILE);
    assert_eq!(created.path, PATH);
    assert!(created.roles.is_empty(), "{created:?}");
    assert!(created.arn.starts_with("arn:aws:iam::"), "{}", created.arn);
    assert!(
        created
            .arn
            .ends_with(&format!(":instance-profile{PATH}{PROFILE}")),
        "{}",
        created.arn
    );
    assert_eq!(sorted(created.tags.clone()), sorted(tags()));

    let got = iam
        .get_instance_profile(PROFILE)
        .await
        .expect("get_instance_profile")
        .expect("the profile just created");
    assert_eq!(got.name, created.name);
    assert_eq!(got.arn, created.arn);
    assert_eq!(got.path, PATH);
    assert!(got.roles.is_empty(), "{got:?}");
    assert_eq!(sorted(got.tags), sorted(tags()));

    let again = iam
        .create_instance_profile(PROFILE, PATH, &[])
        .await
        .expect_err("a name already taken");
    assert!(matches!(again, AwsError::AlreadyExists { .. }), "{again:?}");
    assert_eq!(again.code(), "EntityAlreadyExists");
}

async fn roles(iam: &dyn Iam, f: &Fixtures) {
    let no_profile = iam
        .add_role_to_instance_profile("no-such-profile", &f.role)
        .await
        .expect_err("a missing profile");
    assert!(no_profile.is_not_found(), "{no_profile:?}");
    assert_eq!(no_profile.code(), "NoSuchEntity");

    let no_role = iam
        .add_role_to_instance_profile(PROFILE, "no-such-role")
        .await
        .expect_err("a missing role");
    assert!(no_role.is_not_found(), "{no_role:?}");

    iam.add_role_to_instance_profile(PROFILE, &f.role)
        .await
        .expect("add_role_to_instance_profile");
    let got = iam
        .get_instance_profile(PROFILE)
        .await
        .expect("get")
        .expect("the profile");
    assert_eq!(got.roles, std::slice::from_ref(&f.role));

    // One role per profile, even the same one again.
    let full = iam
        .add_role_to_instance_profile(PROFILE, &f.role)
        .await
        .expect_err("a profile that has a role");
    assert_eq!(full.code(), "LimitExceeded", "{full:?}");

    let no_profile = iam
        .remove_role_from_instance_profile("no-such-profile", &f.role)
        .await
        .expect_err("removing from a missing profile");
    assert!(no_profile.is_not_found(), "{no_profile:?}");
}

async fn delete(iam: &dyn Iam, f: &Fixtures) {
    let conflict = iam
        .delete_instance_profile(PROFILE)
        .await
        .expect_err("deleting a profile that has a role");
    assert_eq!(conflict.code(), "DeleteConflict", "{conflict:?}");
    assert!(
        iam.get_instance_profile(PROFILE)
            .await
            .expect("get")
            .is_some(),
        "a failed delete leaves the profile"
    );

    iam.remove_role_from_instance_profile(PROFILE, &f.role)
        .await
        .expect("remove_role_from_instance_profile");
    let got = iam
        .get_instance_profile(PROFILE)
        .await
        .expect("get")
        .expect("the profile");
    assert!(got.roles.is_empty(), "{got:?}");

    iam.delete_instance_profile(PROFILE)
        .await
        .expect("delete_instance_profile");
    assert_eq!(iam.get_instance_profile(PROFILE).await.expect("get"), None);
}
