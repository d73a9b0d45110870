//! Discovery and OpenAPI: the group list, each group-version's resource list (with the
//! short names kubectl accepts) and the OpenAPI v2 and v3 documents kubectl reads before it
//! validates or applies.

use axum::response::Response;
use serde_json::{Value, json};

use super::status::{not_found, respond};
use crate::fake_apiserver::resources::Resource;

/// The OpenAPI v3 index kubectl reads before it validates or applies: one document per
/// group-version.
pub(super) fn openapi_index(resources: &[Resource]) -> Value {
    let mut paths = serde_json::Map::new();
    for resource in resources {
        let path = if resource.group.is_empty() {
            format!("api/{}", resource.version)
        } else {
            format!("apis/{}/{}", resource.group, resource.version)
        };
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}")}),
        );
    }
    json!({"paths": paths})
}

/// The OpenAPI v2 document kubectl falls back to: every kind, as [`openapi_schemas`] has it.
pub(super) fn swagger(resources: &[Resource]) -> Value {
    let mut definitions = serde_json::Map::new();
    for resource in resources {
        let document = openapi_schemas(resources, &resource.group, &resource.version);
        if let Some(Value::Object(schemas)) = document.pointer("/components/schemas") {
            definitions.extend(schemas.clone());
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "fake-apiserver", "version": "v1.33.0"},
        "paths": {},
        "definitions": definitions,
    })
}

/// A group-version's OpenAPI v3 document: each kind an object that keeps unknown fields (the
/// server's own admission checks what it stores), tagged with its group, version and kind.
pub(super) fn openapi_schemas(resources: &[Resource], group: &str, version: &str) -> Value {
    let mut schemas = serde_json::Map::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        let name = if group.is_empty() {
            format!("io.k8s.api.core.{version}.{}", resource.kind)
        } else {
            format!("{group}.{version}.{}", resource.kind)
        };
        schemas.insert(
            name,
            json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [
                    {"group": group, "version": version, "kind": resource.kind}
                ],
            }),
        );
    }
    // Every write takes `fieldValidation` (it is ignored: admission checks what is stored):
    // kubectl looks for it on the kind's operations to validate on the server's side instead
    // of downloading the protobuf OpenAPI v2 document.
    let mut paths = serde_json::Map::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let collection = if resource.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", resource.plural)
        } else {
            format!("{prefix}/{}", resource.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": resource.kind});
        let operation = json!({
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "x-kubernetes-group-version-kind": gvk,
        });
        paths.insert(collection.clone(), json!({"post": operation}));
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({"put": operation, "patch": operation}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "fake-apiserver", "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

pub(super) fn group_list(resources: &[Resource]) -> Value {
    let mut groups: Vec<(String, String)> = resources
        .iter()
        .filter(|resource| !resource.group.is_empty())
        .map(|resource| (resource.group.clone(), resource.version.clone()))
        .collect();
    groups.dedup();
    groups.sort();
    groups.dedup();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, version)| {
            let gv = format!("{group}/{version}");
            json!({
                "name": group,
                "versions": [{"groupVersion": gv, "version": version}],
                "preferredVersion": {"groupVersion": gv, "version": version},
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// The short names kubectl accepts for a resource (`kubectl get deploy`), as the API server
/// and the CRDs declare them.
pub(super) fn short_names(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &["po"],
        ("", "nodes") => &["no"],
        ("apps", "deployments") => &["deploy"],
        ("apps", "daemonsets") => &["ds"],
        ("policy", "poddisruptionbudgets") => &["pdb"],
        ("scheduling.k8s.io", "priorityclasses") => &["pc"],
        ("events.k8s.io", "events") => &["ev"],
        ("karpenter.k8s.aws", "ec2nodeclasses") => &["ec2nc", "ec2ncs"],
        _ => &[],
    }
}

pub(super) fn resource_list(resources: &[Resource], group: &str, version: &str) -> Response {
    let mut entries = Vec::new();
    for resource in resources
        .iter()
        .filter(|resource| resource.group == group && resource.version == version)
    {
        entries.push(json!({
            "name": resource.plural,
            "singularName": resource.kind.to_lowercase(),
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            "shortNames": short_names(&resource.group, &resource.plural),
        }));
        for sub in resource.subresources {
            let (kind, verbs) = if *sub == "eviction" {
                ("Eviction", json!(["create"]))
            } else {
                (resource.kind.as_str(), json!(["get", "patch", "update"]))
            };
            entries.push(json!({
                "name": format!("{}/{sub}", resource.plural),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": kind,
                "verbs": verbs,
            }));
        }
    }
    if entries.is_empty() {
        return not_found(&format!("no resources in {group}/{version}"));
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    respond(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}),
    )
}
