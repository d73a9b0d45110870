//! An in-memory IAM for the simulator and unit tests. Deterministic: ARNs are built from a
//! fixed account id; roles exist only once added with [`MemoryIam::add_role`], as in IAM an
//! instance profile can only take a role that exists. Errors carry IAM's codes and messages.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use super::{AwsError, AwsFuture, Iam, InstanceProfile, Tag};
use crate::memory_cloud::{CallCounts, lock_state};

/// The account the in-memory IAM pretends to be (the same as the in-memory EC2's, and
/// moto's default).
pub const ACCOUNT_ID: &str = "123456789012";

/// IAM allows one role per instance profile.
const ROLES_PER_PROFILE: usize = 1;

/// The in-memory IAM. Cheap to share behind an `Arc`; every call locks one mutex.
#[derive(Debug, Default)]
pub struct MemoryIam {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    roles: BTreeSet<String>,
    profiles: BTreeMap<String, InstanceProfile>,
    calls: CallCounts,
}

impl State {
    fn profile_mut(&mut self, name: &str) -> Result<&mut InstanceProfile, AwsError> {
        self.profiles
            .get_mut(name)
            .ok_or_else(|| no_such_profile(name))
    }

    fn create(
        &mut self,
        name: &str,
        path: &str,
        tags: &[Tag],
    ) -> Result<InstanceProfile, AwsError> {
        validate_name(name)?;
        validate_path(path)?;
        if self.profiles.contains_key(name) {
            return Err(AwsError::from_code(
                "EntityAlreadyExists",
                format!("Instance Profile {name} already exists."),
            ));
        }
        let profile = InstanceProfile {
            name: name.to_owned(),
            arn: format!("arn:aws:iam::{ACCOUNT_ID}:instance-profile{path}{name}"),
            path: path.to_owned(),
            roles: Vec::new(),
            tags: tags.to_vec(),
        };
        self.profiles.insert(name.to_owned(), profile.clone());
        Ok(profile)
    }

    fn add_role(&mut self, profile: &str, role: &str) -> Result<(), AwsError> {
        // Profile first, then role: the order IAM (and moto) report a missing one in.
        self.profile_mut(profile)?;
        if !self.roles.contains(role) {
            return Err(AwsError::from_code(
                "NoSuchEntity",
                format!("The role with name {role} cannot be found."),
            ));
        }
        let profile = self.profile_mut(profile)?;
        if profile.roles.len() >= ROLES_PER_PROFILE {
            return Err(AwsError::from_code(
                "LimitExceeded",
                "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1",
            ));
        }
        profile.roles.push(role.to_owned());
        Ok(())
    }

    fn remove_role(&mut self, profile: &str, role: &str) -> Result<(), AwsError> {
        let found = self.profile_mut(profile)?;
        let Some(index) = found.roles.iter().position(|r| r == role) else {
            return Err(AwsError::from_code(
                "NoSuchEntity",
                format!("The role with name {role} cannot be found in instance profile {profile}."),
            ));
        };
        found.roles.remove(index);
        Ok(())
    }

    fn delete(&mut self, name: &str) -> Result<(), AwsError> {
        if !self.profile_mut(name)?.roles.is_empty() {
            return Err(AwsError::from_code(
                "DeleteConflict",
                "Cannot delete entity, must remove roles from instance profile first.",
            ));
        }
        self.profiles.remove(name);
        Ok(())
    }
}

fn no_such_profile(name: &str) -> AwsError {
    AwsError::from_code(
        "NoSuchEntity",
        format!("Instance Profile {name} cannot be found."),
    )
}

/// IAM's constraint on instance profile names: 1 to 128 of `[\w+=,.@-]`.
fn validate_name(name: &str) -> Result<(), AwsError> {
    let valid = (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c));
    if valid {
        Ok(())
    } else {
        Err(AwsError::from_code(
            "ValidationError",
            format!(
                "1 validation error detected: Value '{name}' at 'instanceProfileName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]+"
            ),
        ))
    }
}

/// IAM's constraint on paths: `/`, or `/` printable ASCII `/`, at most 512 characters.
fn validate_path(path: &str) -> Result<(), AwsError> {
    let printable = |c: char| ('\u{21}'..='\u{7e}').contains(&c);
    let valid = path.len() <= 512
        && (path == "/"
            || (path.len() >= 3
                && path.starts_with('/')
                && path.ends_with('/')
                && path.chars().all(printable)));
    if valid {
        Ok(())
    } else {
        Err(AwsError::from_code(
            "ValidationError",
            format!(
                "1 validation error detected: Value '{path}' at 'path' failed to satisfy constraint: Member must satisfy regular expression pattern: (\\u002F)|(\\u002F[\\u0021-\\u007E]+\\u002F)"
            ),
        ))
    }
}

impl MemoryIam {
    /// An IAM with no roles and no instance profiles.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_state(&self.state)
    }

    /// Creates the role `name` (no policies: the port never reads them), so instance profiles
    /// can take it.
    pub fn add_role(&self, name: &str) {
        self.state().roles.insert(name.to_owned());
    }

    /// How many times the IAM action `action` (`GetInstanceProfile`,
    /// `CreateInstanceProfile`, `AddRoleToInstanceProfile`, `RemoveRoleFromInstanceProfile`,
    /// `DeleteInstanceProfile`) was called, failed calls included.
    pub fn calls(&self, action: &str) -> u64 {
        self.state().calls.of(action)
    }
}

impl Iam for MemoryIam {
    fn get_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, Option<InstanceProfile>> {
        let mut state = self.state();
        state.calls.record("GetInstanceProfile");
        let answer = state.profiles.get(name).cloned();
        Box::pin(async move { Ok(answer) })
    }

    fn create_instance_profile<'a>(
        &'a self,
        name: &'a str,
        path: &'a str,
        tags: &'a [Tag],
    ) -> AwsFuture<'a, InstanceProfile> {
        let mut state = self.state();
        state.calls.record("CreateInstanceProfile");
        let answer = state.create(name, path, tags);
        Box::pin(async move { answer })
    }

    fn add_role_to_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()> {
        let mut state = self.state();
        state.calls.record("AddRoleToInstanceProfile");
        let answer = state.add_role(profile, role);
        Box::pin(async move { answer })
    }

    fn remove_role_from_instance_profile<'a>(
        &'a self,
        profile: &'a str,
        role: &'a str,
    ) -> AwsFuture<'a, ()> {
        let mut state = self.state();
        state.calls.record("RemoveRoleFromInstanceProfile");
        let answer = state.remove_role(profile, role);
        Box::pin(async move { answer })
    }

    fn delete_instance_profile<'a>(&'a self, name: &'a str) -> AwsFuture<'a, ()> {
        let mut state = self.state();
        state.calls.record("DeleteInstanceProfile");
        let answer = state.delete(name);
        Box::pin(async move { answer })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::iam::contract;

    const ROLE: &str = "KarpenterNodeRole-contract";

    fn memory() -> MemoryIam {
        let iam = MemoryIam::new();
        iam.add_role(ROLE);
        iam
    }

    fn fixtures() -> contract::Fixtures {
        contract::Fixtures {
            role: ROLE.to_owned(),
        }
    }

    #[tokio::test]
    async fn contract_suite() {
        contract::run_all(&memory(), &fixtures()).await;
    }

    #[tokio::test]
    async fn contract_suite_behind_arc_dyn() {
        let shared: Arc<dyn Iam> = Arc::new(memory());
        contract::run_all(shared.as_ref(), &fixtures()).await;
    }

    #[tokio::test]
    async fn arns_are_deterministic() {
        let iam = memory();
        let root = iam
            .create_instance_profile("root", "/", &[])
            .await
            .expect("create at /");
        assert_eq!(root.arn, "arn:aws:iam::123456789012:instance-profile/root");
        let nested = iam
            .create_instance_profile("nested", "/karpenter/us-east-1/", &[])
            .await
            .expect("create at a nested path");
        assert_eq!(
            nested.arn,
            "arn:aws:iam::123456789012:instance-profile/karpenter/us-east-1/nested"
        );
    }

    #[tokio::test]
    async fn names_and_paths_are_validated_as_iam_does() {
        let iam = memory();
        for (name, path) in [
            ("", "/"),
            ("has space", "/"),
            ("has/slash", "/"),
            (&"x".repeat(129), "/"),
            ("ok", ""),
            ("ok", "karpenter/"),
            ("ok", "/karpenter"),
            ("ok", "//"),
            ("ok", "/a b/"),
        ] {
            let err = iam
                .create_instance_profile(name, path, &[])
                .await
                .expect_err("invalid");
            assert!(
                matches!(err, AwsError::InvalidParameter { .. }),
                "{name:?} {path:?}: {err:?}"
            );
            assert_eq!(err.code(), "ValidationError");
        }
        for (name, path) in [
            ("a", "/"),
            ("a_b+c=d,e.f@g-h", "/"),
            (&"x".repeat(128), "/k/a/r/"),
        ] {
            iam.create_instance_profile(name, path, &[])
                .await
                .unwrap_or_else(|e| panic!("{name:?} {path:?}: {e:?}"));
        }
        assert_eq!(iam.calls("CreateInstanceProfile"), 12);
    }

    #[tokio::test]
    async fn a_role_must_exist_and_be_attached_to_be_removed() {
        let iam = memory();
        iam.create_instance_profile("p", "/", &[])
            .await
            .expect("create");
        let unknown = iam
            .add_role_to_instance_profile("p", "no-such-role")
            .await
            .expect_err("an unknown role");
        assert!(unknown.is_not_found(), "{unknown:?}");
        let not_attached = iam
            .remove_role_from_instance_profile("p", ROLE)
            .await
            .expect_err("a role the profile does not have");
        assert!(not_attached.is_not_found(), "{not_attached:?}");

        iam.add_role("later");
        iam.add_role_to_instance_profile("p", "later")
            .await
            .expect("a role added after the profile");
        let profile = iam
            .get_instance_profile("p")
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(profile.roles, ["later"]);
    }

    #[tokio::test]
    async fn calls_are_counted_per_action() {
        let iam = memory();
        assert_eq!(iam.calls("GetInstanceProfile"), 0);
        let _ = iam.get_instance_profile("p").await;
        let _ = iam.get_instance_profile("p").await;
        let _ = iam.delete_instance_profile("p").await;
        assert_eq!(iam.calls("GetInstanceProfile"), 2);
        assert_eq!(iam.calls("DeleteInstanceProfile"), 1);
        assert_eq!(iam.calls("CreateInstanceProfile"), 0);
    }
}
