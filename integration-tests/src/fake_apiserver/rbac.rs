//! Authentication by bearer token and RBAC authorization, as the API server does them, so a
//! test can run a client under the exact Roles, ClusterRoles and bindings an install ships
//! and learn both what it lacks (a request is refused with the API server's 403) and what it
//! was granted and never used.
//!
//! - **Who**: a request without an `Authorization` header is a cluster admin (the test's own
//!   kubectl and in-process clients, as before this module existed); `Bearer
//!   serviceaccount:NAMESPACE:NAME` is that service account (user
//!   `system:serviceaccount:NAMESPACE:NAME`, in the groups `system:serviceaccounts`,
//!   `system:serviceaccounts:NAMESPACE` and `system:authenticated`); any other token is
//!   `401 Unauthorized`.
//! - **What**: the request's attributes as the API server derives them (`verb` from the method,
//!   whether a name is given and `watch`; API group, resource, subresource, namespace, name).
//!   Non-resource paths (discovery, `/version`, OpenAPI, health) are open to every
//!   authenticated user, as the bootstrap `system:discovery` and `system:public-info-viewer`
//!   roles make them.
//! - **Rules**: the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings stored in the
//!   server (applied with kubectl like any object), evaluated as upstream's RBAC authorizer
//!   does (`k8s.io/kubernetes` `plugin/pkg/auth/authorizer/rbac/rbac.go`): a ClusterRoleBinding
//!   grants its ClusterRole everywhere, a RoleBinding grants its Role or ClusterRole in its
//!   namespace only; a rule matches on verb, API group, resource (`resource/subresource`, `*`)
//!   and, when it lists `resourceNames`, the request's name (a request without one, a create or
//!   a list, never matches such a rule). Aggregated ClusterRoles are not computed.
//! - **Usage**: every decision for a service account is recorded;
//!   [`super::FakeApiServer::rbac_report`] lists the refused requests and every permission (rule
//!   × verb × group × resource) granted to each service account seen, with whether any request
//!   used it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Serialize;
use serde_json::Value;

/// The token prefix that names a service account.
pub const SERVICE_ACCOUNT_TOKEN_PREFIX: &str = "serviceaccount:";

/// The bearer token of the service account `namespace/name`.
pub fn service_account_token(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_TOKEN_PREFIX}{namespace}:{name}")
}

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum User {
    /// No credentials: the test's own clients, allowed everything.
    Admin,
    /// A service account, authorized by RBAC.
    ServiceAccount { namespace: String, name: String },
}

impl User {
    /// The user from an `Authorization` header's value; `None` for a token nobody issued.
    pub(crate) fn authenticate(authorization: Option<&str>) -> Option<Self> {
        let Some(value) = authorization else {
            return Some(Self::Admin);
        };
        let token = value.strip_prefix("Bearer ")?.trim();
        let (namespace, name) = token
            .strip_prefix(SERVICE_ACCOUNT_TOKEN_PREFIX)?
            .split_once(':')?;
        (!namespace.is_empty() && !name.is_empty()).then(|| Self::ServiceAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The user name the API server would print.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Admin => "admin".to_owned(),
            Self::ServiceAccount { namespace, name } => {
                format!("system:serviceaccount:{namespace}:{name}")
            }
        }
    }
}

/// A resource request's attributes, as RBAC sees them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    pub(crate) api_group: String,
    pub(crate) resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) subresource: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
}

impl Attributes {
    /// The verb of a request: what the API server's request-info resolver derives from the
    /// method, whether the path names an object, and `watch`.
    pub(crate) fn verb(method: &str, named: bool, watch: bool) -> &'static str {
        match (method, named) {
            ("GET" | "HEAD", _) if watch => "watch",
            ("GET" | "HEAD", true) => "get",
            ("GET" | "HEAD", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "",
        }
    }

    /// `resource` or `resource/subresource`, as rules name it.
    fn full_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }

    /// The API server's message for a refusal (`pods "x" is forbidden: User ... cannot get
    /// resource "pods" in API group "" in the namespace "default"`).
    pub(crate) fn forbidden_message(&self, user: &User) -> String {
        let object = match &self.name {
            Some(name) => format!("{} {name:?}", self.full_resource()),
            None => self.full_resource(),
        };
        let subject = match &self.subresource {
            Some(sub) => format!("resource {:?} with subresource {sub:?}", self.resource),
            None => format!("resource {:?}", self.resource),
        };
        let scope = match &self.namespace {
            Some(namespace) => format!("in the namespace {namespace:?}"),
            None => "at the cluster scope".to_owned(),
        };
        format!(
            "{object} is forbidden: User {:?} cannot {} {subject} in API group {:?} {scope}",
            user.name(),
            self.verb,
            self.api_group
        )
    }
}

/// The RBAC objects stored in the server, as JSON.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    pub(crate) roles: Vec<Value>,
    pub(crate) role_bindings: Vec<Value>,
    pub(crate) cluster_roles: Vec<Value>,
    pub(crate) cluster_role_bindings: Vec<Value>,
}

/// One rule granted to a user, and where it applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Grant {
    /// `Role/NAMESPACE/NAME` or `ClusterRole/NAME`.
    pub(crate) role: String,
    /// The rule's index in the role.
    pub(crate) rule: usize,
    /// The binding's namespace for a RoleBinding; `None` (everywhere) for a ClusterRoleBinding.
    pub(crate) namespace: Option<String>,
    pub(crate) verbs: Vec<String>,
    pub(crate) api_groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) resource_names: Vec<String>,
}

fn parse<T: serde::de::DeserializeOwned>(objects: &[Value]) -> Vec<T> {
    // An object the server stored is well-formed JSON of its kind; one that is not grants
    // nothing (as a real API server would have refused it).
    objects
        .iter()
        .filter_map(|object| serde_json::from_value(object.clone()).ok())
        .collect()
}

fn subject_is(subject: &k8s_openapi::api::rbac::v1::Subject, user: &User) -> bool {
    let User::ServiceAccount { namespace, name } = user else {
        return false;
    };
    match subject.kind.as_str() {
        "ServiceAccount" => {
            subject.name == *name && subject.namespace.as_deref() == Some(namespace.as_str())
        }
        "User" => subject.name == user.name(),
        "Group" => [
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_owned(),
        ]
        .contains(&subject.name),
        _ => false,
    }
}

fn grants_of(role: String, namespace: Option<&str>, rules: &[PolicyRule]) -> Vec<Grant> {
    rules
        .iter()
        .enumerate()
        .map(|(rule, policy)| Grant {
            role: role.clone(),
            rule,
            namespace: namespace.map(str::to_owned),
            verbs: policy.verbs.clone(),
            api_groups: policy.api_groups.clone().unwrap_or_default(),
            resources: policy.resources.clone().unwrap_or_default(),
            resource_names: policy.resource_names.clone().unwrap_or_default(),
        })
        .collect()
}

/// Every rule `objects` grant `user`, with its scope.
pub(crate) fn grants(objects: &Objects, user: &User) -> Vec<Grant> {
    let cluster_roles: BTreeMap<String, ClusterRole> = parse::<ClusterRole>(&objects.cluster_roles)
        .into_iter()
        .map(|role| (role.metadata.name.clone().unwrap_or_default(), role))
        .collect();
    let roles: BTreeMap<(String, String), Role> = parse::<Role>(&objects.roles)
        .into_iter()
        .map(|role| {
            (
                (
                    role.metadata.namespace.clone().unwrap_or_default(),
                    role.metadata.name.clone().unwrap_or_default(),
                ),
                role,
            )
        })
        .collect();
    let mut out = Vec::new();
    for binding in parse::<ClusterRoleBinding>(&objects.cluster_role_bindings) {
        let bound = binding
            .subjects
            .iter()
            .flatten()
            .any(|s| subject_is(s, user));
        if let (true, Some(role)) = (bound, cluster_roles.get(&binding.role_ref.name)) {
            out.extend(grants_of(
                format!("ClusterRole/{}", binding.role_ref.name),
                None,
                role.rules.as_deref().unwrap_or_default(),
            ));
        }
    }
    for binding in parse::<RoleBinding>(&objects.role_bindings) {
        if !binding
            .subjects
            .iter()
            .flatten()
            .any(|s| subject_is(s, user))
        {
            continue;
        }
        let namespace = binding.metadata.namespace.clone().unwrap_or_default();
        let (name, rules) = match binding.role_ref.kind.as_str() {
            "ClusterRole" => (
                format!("ClusterRole/{}", binding.role_ref.name),
                cluster_roles
                    .get(&binding.role_ref.name)
                    .and_then(|role| role.rules.clone()),
            ),
            _ => (
                format!("Role/{namespace}/{}", binding.role_ref.name),
                roles
                    .get(&(namespace.clone(), binding.role_ref.name.clone()))
                    .and_then(|role| role.rules.clone()),
            ),
        };
        out.extend(grants_of(
            name,
            Some(&namespace),
            rules.as_deref().unwrap_or_default(),
        ));
    }
    out.sort();
    out.dedup();
    out
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

/// Whether `grant` allows the request `attributes` (upstream's `RuleAllows` and scope check).
pub(crate) fn allows(grant: &Grant, attributes: &Attributes) -> bool {
    if let Some(scope) = &grant.namespace
        && attributes.namespace.as_deref() != Some(scope.as_str())
    {
        return false;
    }
    let resource = attributes.full_resource();
    let resource_listed = grant.resources.iter().any(|item| {
        item == "*"
            || *item == resource
            || (attributes.subresource.is_none() && *item == attributes.resource)
            || attributes
                .subresource
                .as_ref()
                .is_some_and(|sub| *item == format!("*/{sub}"))
    });
    listed(&grant.verbs, &attributes.verb)
        && listed(&grant.api_groups, &attributes.api_group)
        && resource_listed
        && (grant.resource_names.is_empty()
            || attributes
                .name
                .as_ref()
                .is_some_and(|name| grant.resource_names.contains(name)))
}

/// One permission a rule grants: a verb on a resource of a group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Permission {
    /// `ClusterRole/NAME` or `Role/NAMESPACE/NAME`.
    pub role: String,
    /// The rule's index in the role.
    pub rule: usize,
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
}

fn permissions(grant: &Grant) -> Vec<Permission> {
    let mut out = Vec::new();
    for verb in &grant.verbs {
        for group in &grant.api_groups {
            for resource in &grant.resources {
                out.push(Permission {
                    role: grant.role.clone(),
                    rule: grant.rule,
                    verb: verb.clone(),
                    api_group: group.clone(),
                    resource: resource.clone(),
                    resource_names: grant.resource_names.clone(),
                });
            }
        }
    }
    out
}

/// Whether `permission` (one verb, group, resource of `grant`) is what allowed `attributes`.
fn permission_allows(permission: &Permission, attributes: &Attributes) -> bool {
    let one = Grant {
        role: permission.role.clone(),
        rule: permission.rule,
        namespace: None,
        verbs: vec![permission.verb.clone()],
        api_groups: vec![permission.api_group.clone()],
        resources: vec![permission.resource.clone()],
        resource_names: permission.resource_names.clone(),
    };
    allows(&one, attributes)
}

/// What the server decided for the service accounts, for [`Rbac::report`].
#[derive(Debug, Default)]
pub(crate) struct Rbac {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// Allowed requests, by user.
    allowed: BTreeMap<User, BTreeSet<Attributes>>,
    /// Refused requests, by user.
    denied: BTreeMap<User, BTreeSet<Attributes>>,
}

/// What one service account was granted, used and refused.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    /// `system:serviceaccount:NAMESPACE:NAME`.
    pub user: String,
    /// Every permission its bindings grant, and whether a request used it.
    pub permissions: Vec<(Permission, bool)>,
    /// The requests refused.
    pub denied: Vec<String>,
}

impl Rbac {
    /// Authorizes `attributes` for `user` under `objects`, and records the decision.
    pub(crate) fn authorize(
        &self,
        objects: &Objects,
        user: &User,
        attributes: &Attributes,
    ) -> bool {
        if *user == User::Admin {
            return true;
        }
        let allowed = grants(objects, user)
            .iter()
            .any(|grant| allows(grant, attributes));
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let book = if allowed {
            &mut seen.allowed
        } else {
            &mut seen.denied
        };
        book.entry(user.clone())
            .or_default()
            .insert(attributes.clone());
        allowed
    }

    /// Per service account seen: its permissions under `objects` with whether any allowed
    /// request used each, and the requests refused.
    pub(crate) fn report(&self, objects: &Objects) -> Vec<Usage> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let users: BTreeSet<&User> = seen.allowed.keys().chain(seen.denied.keys()).collect();
        users
            .into_iter()
            .map(|user| {
                let allowed = seen.allowed.get(user);
                let permissions = grants(objects, user)
                    .iter()
                    .flat_map(|grant| {
                        permissions(grant).into_iter().map(move |permission| {
                            let used = allowed.is_some_and(|requests| {
                                requests.iter().any(|request| {
                                    allows(grant, request)
                                        && permission_allows(&permission, request)
                                })
                            });
                            (permission, used)
                        })
                    })
                    .collect();
                let denied = seen
                    .denied
                    .get(user)
                    .into_iter()
                    .flatten()
                    .map(|attributes| attributes.forbidden_message(user))
                    .collect();
                Usage {
                    user: user.name(),
                    permissions,
                    denied,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sa() -> User {
        User::ServiceAccount {
            namespace: "karpenter".into(),
            name: "karpenter".into(),
        }
    }

    fn request(verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> Attributes {
        Attributes {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: namespace.map(str::to_owned),
            name: None,
        }
    }

    fn objects() -> Objects {
        let subject =
            json!([{"kind": "ServiceAccount", "name": "karpenter", "namespace": "karpenter"}]);
        Objects {
            cluster_roles: vec![json!({
                "metadata": {"name": "core"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
                    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                ],
            })],
            cluster_role_bindings: vec![json!({
                "metadata": {"name": "core"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "core"},
                "subjects": subject,
            })],
            roles: vec![json!({
                "metadata": {"name": "lease", "namespace": "karpenter"},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"], "resourceNames": ["leader"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                ],
            })],
            role_bindings: vec![json!({
                "metadata": {"name": "lease", "namespace": "karpenter"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                "subjects": subject,
            })],
        }
    }

    #[test]
    fn tokens_name_service_accounts_and_no_header_is_the_admin() {
        assert_eq!(User::authenticate(None), Some(User::Admin));
        let token = format!("Bearer {}", service_account_token("karpenter", "karpenter"));
        assert_eq!(User::authenticate(Some(&token)), Some(sa()));
        assert_eq!(User::authenticate(Some("Bearer nonsense")), None);
        assert_eq!(User::authenticate(Some("Basic abc")), None);
    }

    #[test]
    fn verbs_come_from_the_method_the_name_and_watch() {
        assert_eq!(Attributes::verb("GET", false, true), "watch");
        assert_eq!(Attributes::verb("GET", true, false), "get");
        assert_eq!(Attributes::verb("GET", false, false), "list");
        assert_eq!(Attributes::verb("DELETE", false, false), "deletecollection");
        assert_eq!(Attributes::verb("PATCH", true, false), "patch");
    }

    #[test]
    fn a_cluster_role_binding_grants_everywhere_and_a_role_binding_in_its_namespace() {
        let rbac = Rbac::default();
        let objects = objects();
        assert!(rbac.authorize(&objects, &sa(), &request("list", "", "pods", None)));
        assert!(rbac.authorize(&objects, &sa(), &request("watch", "", "pods", Some("a"))));
        assert!(!rbac.authorize(&objects, &sa(), &request("delete", "", "pods", Some("a"))));
        // The Role's create holds in its namespace only.
        let create = request("create", "coordination.k8s.io", "leases", Some("karpenter"));
        assert!(rbac.authorize(&objects, &sa(), &create));
        let elsewhere = request("create", "coordination.k8s.io", "leases", Some("default"));
        assert!(!rbac.authorize(&objects, &sa(), &elsewhere));
        // Another service account is bound to nothing.
        let other = User::ServiceAccount {
            namespace: "karpenter".into(),
            name: "other".into(),
        };
        assert!(!rbac.authorize(&objects, &other, &request("list", "", "pods", None)));
        assert!(rbac.authorize(
            &objects,
            &User::Admin,
            &request("delete", "", "nodes", None)
        ));
    }

    #[test]
    fn resource_names_and_subresources_match_as_upstream() {
        let rbac = Rbac::default();
        let objects = objects();
        let mut update = request("update", "coordination.k8s.io", "leases", Some("karpenter"));
        assert!(
            !rbac.authorize(&objects, &sa(), &update),
            "no name: no match"
        );
        update.name = Some("leader".into());
        assert!(rbac.authorize(&objects, &sa(), &update));
        update.name = Some("someone-else".into());
        assert!(!rbac.authorize(&objects, &sa(), &update));
        let mut evict = request("create", "", "pods", Some("default"));
        evict.subresource = Some("eviction".into());
        evict.name = Some("web-1".into());
        assert!(rbac.authorize(&objects, &sa(), &evict));
        // A rule on pods does not grant their status.
        let mut status = request("list", "", "pods", None);
        status.subresource = Some("status".into());
        assert!(!rbac.authorize(&objects, &sa(), &status));
    }

    #[test]
    fn the_report_lists_refusals_and_each_permission_with_its_use() {
        let rbac = Rbac::default();
        let objects = objects();
        rbac.authorize(&objects, &sa(), &request("list", "", "pods", None));
        rbac.authorize(&objects, &sa(), &request("delete", "", "nodes", None));
        let report = rbac.report(&objects);
        assert_eq!(report.len(), 1);
        let usage = &report[0];
        assert_eq!(usage.user, "system:serviceaccount:karpenter:karpenter");
        assert_eq!(
            usage.denied,
            vec![
                "nodes is forbidden: User \"system:serviceaccount:karpenter:karpenter\" cannot \
                 delete resource \"nodes\" in API group \"\" at the cluster scope"
                    .to_owned()
            ]
        );
        let used: Vec<String> = usage
            .permissions
            .iter()
            .filter(|(_, used)| *used)
            .map(|(p, _)| format!("{} {}", p.verb, p.resource))
            .collect();
        assert_eq!(used, vec!["list pods".to_owned()]);
        assert_eq!(
            usage.permissions.len(),
            6,
            "2 + 1 + 2 + 1 permissions granted"
        );
    }
}
