//! The in-memory cluster keeps the API server's semantics: finalizers, optimistic concurrency,
//! status subresources, graceful pod deletion, eviction under PodDisruptionBudgets, admission.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

use std::sync::Arc;
use std::time::Duration;

use core_svc::apis::{NodeClaim, NodeClassReference, NodePool};
use core_svc::clock::{Clock, FakeClock};
use core_svc::cluster::{
    Cluster, ClusterError, ClusterExt, DeleteOptions, InMemoryCluster, Preconditions,
};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use serde_json::{Value, json};

mod common;

use common::{ec2_node_class_ref, from_json, pdb, replica_set_pod, start};

const FINALIZER: &str = "karpenter.sh/termination";

fn cluster() -> (InMemoryCluster, FakeClock) {
    let clock = FakeClock::new(start());
    (InMemoryCluster::new(Arc::new(clock.clone()), 7), clock)
}

fn node_pool(name: &str) -> NodePool {
    common::node_pool(
        name,
        json!({ "spec": { "template": { "spec": { "nodeClassRef": ec2_node_class_ref() } } } }),
    )
}

fn node_claim(name: &str) -> NodeClaim {
    common::node_claim(
        name,
        json!({
            "metadata": { "labels": { "karpenter.sh/nodepool": "default" } },
            "spec": { "nodeClassRef": ec2_node_class_ref() },
        }),
    )
}

fn node(name: &str) -> Node {
    common::node(name, json!({}))
}

/// A pod of the ReplicaSet `web` with `app: web`.
fn pod(namespace: &str, name: &str) -> Pod {
    replica_set_pod(namespace, name, "web", json!({}))
}

fn node_class(name: &str) -> DynamicObject {
    from_json(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": name },
        "spec": { "amiSelectorTerms": [{ "alias": "al2023@latest" }] },
        "status": { "conditions": [] },
    }))
}

fn node_class_ref(name: &str) -> NodeClassReference {
    NodeClassReference {
        group: "karpenter.k8s.aws".to_owned(),
        kind: "EC2NodeClass".to_owned(),
        name: name.to_owned(),
    }
}

/// Creates the PodDisruptionBudget `namespace/name` with `spec`.
async fn create_pdb(cluster: &InMemoryCluster, namespace: &str, name: &str, spec: Value) {
    cluster.create(&pdb(namespace, name, spec)).await.unwrap();
}

/// Creates the PodDisruptionBudget `default/web-pdb` over the `web` pods, with `budget`
/// (`minAvailable` or `maxUnavailable`).
async fn create_web_pdb(cluster: &InMemoryCluster, budget: Value) {
    let selector = json!({ "selector": { "matchLabels": { "app": "web" } } });
    create_pdb(
        cluster,
        "default",
        "web-pdb",
        common::merged(selector, budget),
    )
    .await;
}

/// Evicts `default/name` without preconditions.
async fn evict(cluster: &InMemoryCluster, name: &str) -> Result<(), ClusterError> {
    cluster
        .evict("default", name, &Preconditions::default())
        .await
}

/// Creates `count` pods `web-0..` in `default`, bound to `node-a` and Ready.
async fn running_pods(cluster: &InMemoryCluster, count: usize) {
    for index in 0..count {
        let name = format!("web-{index}");
        cluster.create(&pod("default", &name)).await.unwrap();
        cluster.bind_pod("default", &name, "node-a").unwrap();
        cluster.set_pod_ready("default", &name, true).unwrap();
    }
}

async fn get_pod(cluster: &InMemoryCluster, name: &str) -> Option<Pod> {
    cluster.get::<Pod>(Some("default"), name).await.unwrap()
}

fn rv<K: kube::Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

// --- create -------------------------------------------------------------------------------

#[tokio::test]
async fn given_a_new_object_when_created_then_the_server_fields_are_set() {
    let (cluster, _) = cluster();
    let created = cluster.create(&node_pool("default")).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.generation, Some(1));
    assert_eq!(meta.creation_timestamp, Some(Time(start())));
    assert_eq!(meta.uid.as_deref().map(str::len), Some(36));
    assert_eq!(meta.resource_version.as_deref(), Some("1"));
    assert_eq!(
        cluster.get::<NodePool>(None, "default").await.unwrap(),
        Some(created)
    );
}

#[tokio::test]
async fn given_a_taken_name_when_created_then_already_exists() {
    let (cluster, _) = cluster();
    cluster.create(&node("a")).await.unwrap();
    let error = cluster.create(&node("a")).await.unwrap_err();
    assert!(
        matches!(&error, ClusterError::AlreadyExists { kind, name, .. } if kind == "Node" && name == "a"),
        "{error}"
    );
}

#[tokio::test]
async fn given_an_object_with_a_resource_version_when_created_then_it_is_refused() {
    let (cluster, _) = cluster();
    let mut node = node("a");
    node.metadata.resource_version = Some("5".to_owned());
    let error = cluster.create(&node).await.unwrap_err();
    assert!(
        error.to_string().contains("metadata.resourceVersion"),
        "{error}"
    );
}

#[tokio::test]
async fn given_generate_name_when_created_then_names_are_distinct_and_repeat_with_the_seed() {
    async fn three_names() -> Vec<String> {
        let (cluster, _) = cluster();
        let mut claim = node_claim("");
        claim.metadata.name = None;
        claim.metadata.generate_name = Some("default-".to_owned());
        let mut names = Vec::new();
        for _ in 0..3 {
            names.push(cluster.create(&claim).await.unwrap().metadata.name.unwrap());
        }
        names
    }
    let names = three_names().await;
    for name in &names {
        let suffix = name.strip_prefix("default-").unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}"
        );
    }
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{names:?}");
    assert_eq!(three_names().await, names);
}

#[tokio::test]
async fn given_a_long_generate_name_then_the_name_still_fits_63_characters() {
    let (cluster, _) = cluster();
    let mut node = node("");
    node.metadata.name = None;
    node.metadata.generate_name = Some("n".repeat(70));
    let name = cluster.create(&node).await.unwrap().metadata.name.unwrap();
    assert_eq!(name.len(), 63);
    assert!(name.starts_with(&"n".repeat(58)), "{name}");
}

#[tokio::test]
async fn given_a_pod_created_with_a_status_then_it_starts_pending() {
    let (cluster, _) = cluster();
    let mut pod = pod("default", "web-0");
    pod.status = Some(from_json(json!({ "phase": "Running" })));
    let created = cluster.create(&pod).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn given_an_invalid_node_pool_when_created_then_it_is_refused_naming_the_field() {
    let (cluster, _) = cluster();
    let mut pool = node_pool("default");
    pool.spec.weight = Some(0);
    let error = cluster.create(&pool).await.unwrap_err();
    let ClusterError::Invalid { kind, name, causes } = &error else {
        panic!("{error}");
    };
    assert_eq!((kind.as_str(), name.as_str()), ("NodePool", "default"));
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec.weight");
    assert_eq!(causes[0].message, "must be greater than or equal to 1");
    assert_eq!(cluster.objects_count(), 0);
}

#[tokio::test]
async fn given_a_node_claim_when_its_spec_is_patched_then_it_is_refused_as_immutable() {
    let (cluster, _) = cluster();
    cluster.create(&node_claim("c")).await.unwrap();
    let error = cluster
        .merge_patch::<NodeClaim>(
            None,
            "c",
            &json!({ "spec": { "nodeClassRef": { "name": "other" } } }),
        )
        .await
        .unwrap_err();
    let ClusterError::Invalid { causes, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(causes[0].field, "spec");
}

#[tokio::test]
async fn given_a_node_pool_when_its_node_class_kind_changes_then_it_is_refused() {
    let (cluster, _) = cluster();
    cluster.create(&node_pool("default")).await.unwrap();
    let error = cluster
        .merge_patch::<NodePool>(
            None,
            "default",
            &json!({ "spec": { "template": { "spec": { "nodeClassRef": { "kind": "Other" } } } } }),
        )
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("spec.template.spec.nodeClassRef.kind"),
        "{error}"
    );
}

#[tokio::test]
async fn given_a_pdb_with_both_bounds_when_created_then_it_is_refused() {
    let (cluster, _) = cluster();
    let error = cluster
        .create(&pdb(
            "default",
            "web",
            json!({ "minAvailable": 1, "maxUnavailable": 1, "selector": {} }),
        ))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("minAvailable and maxUnavailable cannot be both set"),
        "{error}"
    );
}

#[tokio::test]
async fn given_the_wrong_scope_when_reading_then_it_is_invalid() {
    let (cluster, _) = cluster();
    assert!(matches!(
        cluster.get::<Pod>(None, "web-0").await,
        Err(ClusterError::Invalid { .. })
    ));
    assert!(matches!(
        cluster.get::<Node>(Some("default"), "a").await,
        Err(ClusterError::Invalid { .. })
    ));
}

// --- optimistic concurrency, status, generation -------------------------------------------------

#[tokio::test]
async fn given_a_stale_resource_version_when_replacing_then_it_conflicts() {
    let (cluster, _) = cluster();
    let first = cluster.create(&node_pool("default")).await.unwrap();
    let mut newer = first.clone();
    newer.spec.weight = Some(10);
    let newer = cluster.replace(&newer).await.unwrap();
    assert!(rv(&newer) > rv(&first));

    let mut stale = first.clone();
    stale.spec.weight = Some(20);
    let error = cluster.replace(&stale).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    let stored = cluster
        .get::<NodePool>(None, "default")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.spec.weight, Some(10));
}

#[tokio::test]
async fn given_a_stale_resource_version_in_a_merge_patch_then_it_conflicts() {
    let (cluster, _) = cluster();
    let created = cluster.create(&node("a")).await.unwrap();
    let stale = created.metadata.resource_version.clone().unwrap();
    cluster
        .merge_patch::<Node>(
            None,
            "a",
            &json!({ "metadata": { "labels": { "x": "1" } } }),
        )
        .await
        .unwrap();
    let error = cluster
        .merge_patch::<Node>(
            None,
            "a",
            &json!({ "metadata": { "resourceVersion": stale, "labels": { "y": "2" } } }),
        )
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
}

#[tokio::test]
async fn given_a_custom_resource_without_resource_version_when_replaced_then_it_is_refused() {
    let (cluster, _) = cluster();
    let mut pool = cluster.create(&node_pool("default")).await.unwrap();
    pool.metadata.resource_version = None;
    assert!(matches!(
        cluster.replace(&pool).await,
        Err(ClusterError::Invalid { .. })
    ));
}

#[tokio::test]
async fn given_a_status_subresource_then_replace_ignores_status_and_replace_status_the_rest() {
    let (cluster, _) = cluster();
    let created = cluster.create(&node_pool("default")).await.unwrap();

    let mut with_status = created.clone();
    with_status.spec.weight = Some(50);
    with_status.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
    with_status.status = Some(from_json(json!({ "nodes": 3 })));
    let after_status = cluster.replace_status(&with_status).await.unwrap();
    assert_eq!(after_status.status.as_ref().unwrap().nodes, Some(3));
    assert_eq!(after_status.spec.weight, None);
    assert_eq!(after_status.metadata.labels, None);
    assert_eq!(after_status.metadata.generation, Some(1));

    let mut with_spec = after_status.clone();
    with_spec.spec.weight = Some(50);
    with_spec.status = Some(from_json(json!({ "nodes": 99 })));
    let after_spec = cluster.replace(&with_spec).await.unwrap();
    assert_eq!(after_spec.spec.weight, Some(50));
    assert_eq!(after_spec.status.as_ref().unwrap().nodes, Some(3));
    assert_eq!(after_spec.metadata.generation, Some(2));

    let patched: NodePool = cluster
        .merge_patch_status::<NodePool>(
            None,
            "default",
            &json!({ "status": { "nodes": 4 }, "spec": { "weight": 1 } }),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().nodes, Some(4));
    assert_eq!(patched.spec.weight, Some(50));
}

#[tokio::test]
async fn given_a_kind_without_status_subresource_when_replacing_status_then_it_is_refused() {
    let (cluster, _) = cluster();
    let class: PriorityClass = from_json(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": { "name": "high" }, "value": 1000,
    }));
    let created = cluster.create(&class).await.unwrap();
    assert!(matches!(
        cluster.replace_status(&created).await,
        Err(ClusterError::Invalid { .. })
    ));
}

#[tokio::test]
async fn given_a_write_that_changes_nothing_then_the_resource_version_stays() {
    let (cluster, _) = cluster();
    let created = cluster.create(&node("a")).await.unwrap();
    let same = cluster.replace(&created).await.unwrap();
    assert_eq!(
        same.metadata.resource_version,
        created.metadata.resource_version
    );
    let labelled = cluster
        .merge_patch::<Node>(
            None,
            "a",
            &json!({ "metadata": { "labels": { "x": "1" } } }),
        )
        .await
        .unwrap();
    assert!(rv(&labelled) > rv(&created));
    assert_eq!(labelled.metadata.generation, Some(1), "labels are not spec");
}

#[tokio::test]
async fn given_a_changed_uid_when_replacing_then_it_conflicts() {
    let (cluster, _) = cluster();
    let mut node = cluster.create(&node("a")).await.unwrap();
    node.metadata.uid = Some("someone-else".to_owned());
    assert!(cluster.replace(&node).await.unwrap_err().is_conflict());
}

// --- deletion ---------------------------------------------------------------------------------

#[tokio::test]
async fn given_finalizers_when_deleted_then_the_object_waits_until_the_last_one_goes() {
    let (cluster, clock) = cluster();
    let claim = cluster.create(&node_claim("c")).await.unwrap();
    let claim = cluster.add_finalizer(&claim, FINALIZER).await.unwrap();
    let claim = cluster
        .add_finalizer(&claim, "example.com/other")
        .await
        .unwrap();
    clock.advance(Duration::from_secs(60));

    cluster
        .delete::<NodeClaim>(None, "c", DeleteOptions::default())
        .await
        .unwrap();
    let deleting = cluster.get::<NodeClaim>(None, "c").await.unwrap().unwrap();
    assert_eq!(
        deleting.metadata.deletion_timestamp,
        Some(Time(clock.now()))
    );
    assert!(rv(&deleting) > rv(&claim));

    let one_left = cluster
        .remove_finalizer(&deleting, "example.com/other")
        .await
        .unwrap();
    assert!(cluster.get::<NodeClaim>(None, "c").await.unwrap().is_some());
    cluster
        .remove_finalizer(&one_left, FINALIZER)
        .await
        .unwrap();
    assert_eq!(cluster.get::<NodeClaim>(None, "c").await.unwrap(), None);
    assert_eq!(cluster.objects_count(), 0);
}

#[tokio::test]
async fn given_a_deleting_object_when_deleted_again_then_the_deletion_timestamp_stays() {
    let (cluster, clock) = cluster();
    let node = cluster.create(&node("a")).await.unwrap();
    cluster.add_finalizer(&node, FINALIZER).await.unwrap();
    cluster
        .delete::<Node>(None, "a", DeleteOptions::default())
        .await
        .unwrap();
    let first = cluster.get::<Node>(None, "a").await.unwrap().unwrap();
    clock.advance(Duration::from_secs(300));
    cluster
        .delete::<Node>(None, "a", DeleteOptions::default())
        .await
        .unwrap();
    let second = cluster.get::<Node>(None, "a").await.unwrap().unwrap();
    assert_eq!(second.metadata.deletion_timestamp, Some(Time(start())));
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
}

#[tokio::test]
async fn given_a_deleting_object_when_a_finalizer_is_added_then_it_is_refused() {
    let (cluster, _) = cluster();
    let node = cluster.create(&node("a")).await.unwrap();
    cluster.add_finalizer(&node, FINALIZER).await.unwrap();
    cluster
        .delete::<Node>(None, "a", DeleteOptions::default())
        .await
        .unwrap();
    let deleting = cluster.get::<Node>(None, "a").await.unwrap().unwrap();
    let error = cluster
        .add_finalizer(&deleting, "example.com/late")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("metadata.finalizers"), "{error}");
}

#[tokio::test]
async fn given_an_object_without_finalizers_when_deleted_then_it_is_gone() {
    let (cluster, _) = cluster();
    cluster.create(&node("a")).await.unwrap();
    cluster
        .delete::<Node>(None, "a", DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(cluster.get::<Node>(None, "a").await.unwrap(), None);
    assert!(
        cluster
            .delete::<Node>(None, "a", DeleteOptions::default())
            .await
            .unwrap_err()
            .is_not_found()
    );
}

#[tokio::test]
async fn given_a_uid_precondition_for_another_object_when_deleting_then_it_conflicts() {
    let (cluster, _) = cluster();
    cluster.create(&node("a")).await.unwrap();
    let error = cluster
        .delete::<Node>(None, "a", DeleteOptions::default().with_uid("not-this-one"))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert!(cluster.get::<Node>(None, "a").await.unwrap().is_some());
}

#[tokio::test]
async fn given_a_bound_pod_when_deleted_then_it_stays_until_the_kubelet_finishes() {
    let (cluster, _) = cluster();
    let mut with_grace = pod("default", "web-0");
    with_grace
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(45);
    cluster.create(&with_grace).await.unwrap();
    cluster.bind_pod("default", "web-0", "node-a").unwrap();

    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::default())
        .await
        .unwrap();
    let terminating = get_pod(&cluster, "web-0").await.unwrap();
    assert_eq!(
        terminating.metadata.deletion_timestamp,
        Some(Time("2025-03-01T12:00:45Z".parse().unwrap()))
    );
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(45));

    cluster.finish_pod_termination("default", "web-0").unwrap();
    assert_eq!(get_pod(&cluster, "web-0").await, None);
}

#[tokio::test]
async fn given_a_bound_pod_without_its_own_grace_period_when_deleted_then_it_gets_30_seconds() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::default())
        .await
        .unwrap();
    let terminating = get_pod(&cluster, "web-0").await.unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
}

#[tokio::test]
async fn given_a_terminating_pod_when_deleted_with_a_shorter_grace_then_the_deadline_moves_forward_only()
 {
    let (cluster, clock) = cluster();
    running_pods(&cluster, 1).await;
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::grace_period(60))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(10));
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::grace_period(120))
        .await
        .unwrap();
    let unchanged = get_pod(&cluster, "web-0").await.unwrap();
    assert_eq!(
        unchanged.metadata.deletion_timestamp,
        Some(Time("2025-03-01T12:01:00Z".parse().unwrap()))
    );
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::grace_period(20))
        .await
        .unwrap();
    let shortened = get_pod(&cluster, "web-0").await.unwrap();
    assert_eq!(
        shortened.metadata.deletion_timestamp,
        Some(Time("2025-03-01T12:00:20Z".parse().unwrap()))
    );
    assert_eq!(shortened.metadata.deletion_grace_period_seconds, Some(20));
}

#[tokio::test]
async fn given_a_bound_pod_when_force_deleted_then_it_is_gone_at_once() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::grace_period(0))
        .await
        .unwrap();
    assert_eq!(get_pod(&cluster, "web-0").await, None);
}

#[tokio::test]
async fn given_an_unbound_pod_when_deleted_then_it_is_gone_at_once() {
    let (cluster, _) = cluster();
    cluster.create(&pod("default", "web-0")).await.unwrap();
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(get_pod(&cluster, "web-0").await, None);
}

#[tokio::test]
async fn given_a_pod_that_is_not_terminating_when_the_kubelet_finishes_then_it_is_invalid() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    assert!(matches!(
        cluster.finish_pod_termination("default", "web-0"),
        Err(ClusterError::Invalid { .. })
    ));
}

#[tokio::test]
async fn given_a_bound_pod_when_its_node_name_is_patched_then_it_is_refused() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    let error = cluster
        .merge_patch::<Pod>(
            Some("default"),
            "web-0",
            &json!({ "spec": { "nodeName": "node-b" } }),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("spec.nodeName"), "{error}");
    assert!(
        cluster
            .bind_pod("default", "web-0", "node-b")
            .unwrap_err()
            .is_conflict()
    );
}

// --- eviction ---------------------------------------------------------------------------------

#[tokio::test]
async fn given_max_unavailable_zero_when_evicting_then_too_many_requests_names_the_pdb() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 2).await;
    create_web_pdb(&cluster, json!({ "maxUnavailable": 0 })).await;
    let error = evict(&cluster, "web-0").await.unwrap_err();
    let ClusterError::TooManyRequests {
        pod,
        budget,
        reason,
    } = &error
    else {
        panic!("{error}");
    };
    assert_eq!(
        (pod.as_str(), budget.as_str()),
        ("default/web-0", "web-pdb")
    );
    assert!(
        reason.contains("The disruption budget web-pdb needs 2 healthy pods and has 2 currently"),
        "{reason}"
    );
    assert!(
        get_pod(&cluster, "web-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
}

#[tokio::test]
async fn given_min_available_2_and_3_healthy_pods_then_one_eviction_is_allowed_and_the_next_refused()
 {
    let (cluster, _) = cluster();
    running_pods(&cluster, 3).await;
    create_web_pdb(&cluster, json!({ "minAvailable": 2 })).await;
    let before = cluster.snapshot().await.unwrap();
    let status = before
        .pdb("default", "web-pdb")
        .unwrap()
        .status
        .clone()
        .unwrap();
    assert_eq!(
        (
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed,
            status.expected_pods
        ),
        (3, 2, 1, 3)
    );

    evict(&cluster, "web-0").await.unwrap();
    let evicted = get_pod(&cluster, "web-0").await.unwrap();
    assert!(evicted.metadata.deletion_timestamp.is_some());
    let conditions = evicted.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );

    let error = evict(&cluster, "web-1").await.unwrap_err();
    assert!(
        matches!(error, ClusterError::TooManyRequests { .. }),
        "{error}"
    );
    // The next snapshot's status follows the eviction (derived statuses are kept between
    // snapshots only while no pod or budget changed).
    let after = cluster.snapshot().await.unwrap();
    let status = after
        .pdb("default", "web-pdb")
        .unwrap()
        .status
        .clone()
        .unwrap();
    assert_eq!((status.current_healthy, status.disruptions_allowed), (2, 0));

    // Once the evicted pod is gone and a replacement is Ready, the budget opens again.
    cluster.finish_pod_termination("default", "web-0").unwrap();
    cluster.create(&pod("default", "web-3")).await.unwrap();
    cluster.bind_pod("default", "web-3", "node-b").unwrap();
    cluster.set_pod_ready("default", "web-3", true).unwrap();
    evict(&cluster, "web-1").await.unwrap();
}

#[tokio::test]
async fn given_max_unavailable_1_when_one_evicted_pod_is_still_terminating_then_the_next_eviction_is_refused()
 {
    let (cluster, _) = cluster();
    running_pods(&cluster, 4).await;
    create_web_pdb(&cluster, json!({ "maxUnavailable": 1 })).await;
    evict(&cluster, "web-0").await.unwrap();
    // web-0 is terminating but still one of the four replicas: the budget is spent. (Counting
    // only running pods as expected would let every other pod go, one eviction at a time.)
    for next in ["web-1", "web-2", "web-3"] {
        let error = evict(&cluster, next).await.unwrap_err();
        assert!(
            matches!(error, ClusterError::TooManyRequests { .. }),
            "{next}: {error}"
        );
    }
}

#[tokio::test]
async fn given_max_unavailable_as_a_percentage_then_it_is_rounded_up() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 3).await;
    create_web_pdb(&cluster, json!({ "maxUnavailable": "50%" })).await;
    let budget = cluster
        .get::<PodDisruptionBudget>(Some("default"), "web-pdb")
        .await
        .unwrap()
        .unwrap();
    let status = budget.status.unwrap();
    // 50% of 3 rounds up to 2 unavailable: 1 must stay healthy, 2 may go.
    assert_eq!((status.desired_healthy, status.disruptions_allowed), (1, 2));
}

#[tokio::test]
async fn given_a_pod_matched_by_two_pdbs_when_evicting_then_it_is_refused() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 3).await;
    for name in ["a", "b"] {
        create_pdb(
            &cluster,
            "default",
            name,
            json!({ "maxUnavailable": 1, "selector": { "matchLabels": { "app": "web" } } }),
        )
        .await;
    }
    let error = evict(&cluster, "web-0").await.unwrap_err();
    assert_eq!(
        error,
        ClusterError::MultipleDisruptionBudgets {
            pod: "default/web-0".to_owned(),
            budgets: vec!["a".to_owned(), "b".to_owned()],
        }
    );
}

#[tokio::test]
async fn given_a_pdb_in_another_namespace_or_not_selecting_the_pod_then_eviction_proceeds() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    create_pdb(
        &cluster,
        "other",
        "all",
        json!({ "maxUnavailable": 0, "selector": {} }),
    )
    .await;
    create_pdb(
        &cluster,
        "default",
        "db",
        json!({ "maxUnavailable": 0, "selector": { "matchLabels": { "app": "db" } } }),
    )
    .await;
    create_pdb(
        &cluster,
        "default",
        "no-selector",
        json!({ "maxUnavailable": 0 }),
    )
    .await;
    evict(&cluster, "web-0").await.unwrap();
}

#[tokio::test]
async fn given_an_unready_pod_under_a_met_budget_then_it_may_be_evicted() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 3).await;
    cluster.set_pod_ready("default", "web-2", false).unwrap();
    create_web_pdb(&cluster, json!({ "minAvailable": 2 })).await;
    // 2 healthy of 2 desired: no disruption allowed, but the unhealthy pod does not count.
    evict(&cluster, "web-0").await.unwrap_err();
    evict(&cluster, "web-2").await.unwrap();
}

#[tokio::test]
async fn given_an_unready_pod_under_a_broken_budget_then_only_always_allow_lets_it_go() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 2).await;
    cluster.set_pod_ready("default", "web-1", false).unwrap();
    create_web_pdb(&cluster, json!({ "minAvailable": 2 })).await;
    let error = evict(&cluster, "web-1").await.unwrap_err();
    assert!(
        matches!(error, ClusterError::TooManyRequests { .. }),
        "{error}"
    );

    let budget = cluster
        .get::<PodDisruptionBudget>(Some("default"), "web-pdb")
        .await
        .unwrap()
        .unwrap();
    cluster
        .merge_patch::<PodDisruptionBudget>(
            Some("default"),
            "web-pdb",
            &json!({
                "metadata": { "resourceVersion": budget.metadata.resource_version },
                "spec": { "unhealthyPodEvictionPolicy": "AlwaysAllow" },
            }),
        )
        .await
        .unwrap();
    evict(&cluster, "web-1").await.unwrap();
}

#[tokio::test]
async fn given_a_pending_pod_then_eviction_ignores_budgets_and_removes_it() {
    let (cluster, _) = cluster();
    cluster.create(&pod("default", "web-0")).await.unwrap();
    create_pdb(
        &cluster,
        "default",
        "all",
        json!({ "maxUnavailable": 0, "selector": {} }),
    )
    .await;
    evict(&cluster, "web-0").await.unwrap();
    assert_eq!(get_pod(&cluster, "web-0").await, None);
}

#[tokio::test]
async fn given_a_uid_precondition_for_a_recreated_pod_when_evicting_then_it_conflicts() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 1).await;
    let error = cluster
        .evict("default", "web-0", &Preconditions::uid("an-older-pod"))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert!(evict(&cluster, "gone").await.unwrap_err().is_not_found());
}

// --- snapshot ---------------------------------------------------------------------------------

#[tokio::test]
async fn given_objects_created_in_any_order_then_the_snapshot_is_sorted_and_looks_them_up() {
    let (cluster, _) = cluster();
    for name in ["c", "a", "b"] {
        cluster.create(&node(name)).await.unwrap();
        cluster.create(&node_pool(name)).await.unwrap();
    }
    for (namespace, name) in [
        ("kube-system", "dns"),
        ("default", "web-1"),
        ("default", "web-0"),
    ] {
        cluster.create(&pod(namespace, name)).await.unwrap();
    }
    cluster.bind_pod("default", "web-1", "b").unwrap();
    cluster.bind_pod("kube-system", "dns", "b").unwrap();
    cluster.create_node_class(&node_class("z")).await.unwrap();
    cluster.create_node_class(&node_class("m")).await.unwrap();

    let snapshot = cluster.snapshot().await.unwrap();
    let names =
        |list: Vec<Option<String>>| list.into_iter().map(Option::unwrap).collect::<Vec<_>>();
    assert_eq!(
        names(
            snapshot
                .nodes
                .iter()
                .map(|n| n.metadata.name.clone())
                .collect()
        ),
        ["a", "b", "c"]
    );
    assert_eq!(
        names(
            snapshot
                .node_pools
                .iter()
                .map(|n| n.metadata.name.clone())
                .collect()
        ),
        ["a", "b", "c"]
    );
    let pods: Vec<_> = snapshot
        .pods
        .iter()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap(),
                p.metadata.name.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pods,
        [
            ("default".to_owned(), "web-0".to_owned()),
            ("default".to_owned(), "web-1".to_owned()),
            ("kube-system".to_owned(), "dns".to_owned()),
        ]
    );
    assert!(snapshot.node("b").is_some());
    assert!(snapshot.node("d").is_none());
    assert!(snapshot.node_pool("c").is_some());
    assert!(snapshot.pod("kube-system", "dns").is_some());
    assert!(snapshot.pod("default", "dns").is_none());
    let on_b: Vec<_> = snapshot
        .pods_on_node("b")
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(on_b, ["web-1", "dns"]);
    assert_eq!(snapshot.pods_by_node()["b"].len(), 2);
    assert!(snapshot.node_class_for(&node_class_ref("m")).is_some());
    assert!(
        snapshot
            .node_class("karpenter.k8s.aws", "EC2NodeClass", "z")
            .is_some()
    );
    assert!(
        snapshot
            .node_class("karpenter.k8s.aws", "Other", "z")
            .is_none()
    );

    let mut shuffled = snapshot.clone();
    shuffled.nodes.reverse();
    shuffled.pods.reverse();
    shuffled.sort();
    assert_eq!(shuffled.nodes, snapshot.nodes);
    assert_eq!(shuffled.pods, snapshot.pods);
}

#[tokio::test]
async fn given_a_snapshot_then_later_writes_do_not_change_it() {
    let (cluster, _) = cluster();
    cluster.create(&node("a")).await.unwrap();
    let snapshot = cluster.snapshot().await.unwrap();
    cluster.create(&node("b")).await.unwrap();
    cluster
        .merge_patch::<Node>(
            None,
            "a",
            &json!({ "metadata": { "labels": { "x": "1" } } }),
        )
        .await
        .unwrap();
    assert_eq!(snapshot.nodes.len(), 1);
    assert_eq!(snapshot.nodes[0].metadata.labels, None);
}

// --- node classes, helpers, outages -----------------------------------------------------------

#[tokio::test]
async fn given_a_node_class_then_status_and_metadata_are_written_apart() {
    let (cluster, _) = cluster();
    let created = cluster
        .create_node_class(&node_class("default"))
        .await
        .unwrap();
    assert_eq!(
        created.data.get("status"),
        None,
        "status is cleared on create"
    );
    assert_eq!(
        created.data["spec"]["amiSelectorTerms"][0]["alias"],
        "al2023@latest"
    );

    let reference = node_class_ref("default");
    let with_status = cluster
        .merge_patch_node_class_status(
            &reference,
            &json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] }, "spec": {} }),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(with_status.metadata.generation, Some(1));

    let patched = cluster
        .merge_patch_node_class(
            &reference,
            &json!({ "metadata": { "finalizers": ["karpenter.k8s.aws/termination"] }, "spec": { "role": "nodes" } }),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    assert_eq!(patched.data["status"]["conditions"][0]["type"], "Ready");

    cluster
        .delete_node_class(&reference, DeleteOptions::default())
        .await
        .unwrap();
    let deleting = cluster.get_node_class(&reference).await.unwrap().unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    cluster
        .merge_patch_node_class(&reference, &json!({ "metadata": { "finalizers": null } }))
        .await
        .unwrap();
    assert_eq!(cluster.get_node_class(&reference).await.unwrap(), None);
}

#[tokio::test]
async fn given_a_node_class_without_kind_when_created_then_it_is_refused() {
    let (cluster, _) = cluster();
    let mut class = node_class("default");
    class.types = None;
    assert!(matches!(
        cluster.create_node_class(&class).await,
        Err(ClusterError::Invalid { .. })
    ));
}

#[tokio::test]
async fn given_a_stale_object_when_adding_a_finalizer_then_it_conflicts_and_the_fresh_one_works() {
    let (cluster, _) = cluster();
    let stale = cluster.create(&node_claim("c")).await.unwrap();
    let fresh = cluster
        .add_finalizer(&stale, "example.com/first")
        .await
        .unwrap();
    assert!(
        cluster
            .add_finalizer(&stale, FINALIZER)
            .await
            .unwrap_err()
            .is_conflict()
    );
    let both = cluster.add_finalizer(&fresh, FINALIZER).await.unwrap();
    assert_eq!(
        both.metadata.finalizers.as_deref().unwrap(),
        ["example.com/first", FINALIZER]
    );
    let again = cluster.add_finalizer(&both, FINALIZER).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        both.metadata.resource_version
    );
}

#[tokio::test]
async fn given_a_node_when_tainted_then_the_taint_is_added_once_and_can_be_removed() {
    let (cluster, _) = cluster();
    let created = cluster.create(&node("a")).await.unwrap();
    let taint = Taint {
        key: "karpenter.sh/disrupted".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Default::default()
    };
    let tainted = cluster.add_node_taint(&created, &taint).await.unwrap();
    let again = cluster.add_node_taint(&tainted, &taint).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        tainted.metadata.resource_version
    );
    assert_eq!(
        again.spec.as_ref().unwrap().taints.as_deref().unwrap(),
        [taint]
    );
    assert!(
        cluster
            .add_node_taint(
                &created,
                &Taint {
                    key: "other".to_owned(),
                    ..tainted.spec.clone().unwrap().taints.unwrap()[0].clone()
                }
            )
            .await
            .unwrap_err()
            .is_conflict(),
        "a stale node conflicts"
    );
    let untainted = cluster
        .remove_node_taint(&again, "karpenter.sh/disrupted", "NoSchedule")
        .await
        .unwrap();
    assert_eq!(untainted.spec.and_then(|spec| spec.taints), None);
}

#[tokio::test]
async fn given_an_outage_then_calls_fail_as_unavailable_and_change_nothing() {
    let (cluster, _) = cluster();
    cluster.fail_next(2);
    assert!(matches!(
        cluster.create(&node("a")).await,
        Err(ClusterError::Unavailable(_))
    ));
    assert!(matches!(
        cluster.snapshot().await,
        Err(ClusterError::Unavailable(_))
    ));
    cluster.create(&node("a")).await.unwrap();

    cluster.set_unavailable(true);
    assert!(matches!(
        cluster.get::<Node>(None, "a").await,
        Err(ClusterError::Unavailable(_))
    ));
    assert_eq!(cluster.objects_count(), 1);
    cluster.set_unavailable(false);
    assert!(cluster.get::<Node>(None, "a").await.unwrap().is_some());
}

/// What a controller looks like: generic over the port, its work spawned on the runtime (which
/// needs every future of the port to be Send).
async fn finalize_every_claim<C: Cluster + Clone + 'static>(cluster: C) -> usize {
    tokio::spawn(async move {
        let snapshot = cluster.snapshot().await.unwrap();
        for claim in snapshot.node_claims() {
            cluster.add_finalizer(claim, FINALIZER).await.unwrap();
        }
        snapshot.node_claims.len()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn given_a_controller_generic_over_the_port_then_it_runs_spawned_on_the_in_memory_cluster() {
    let (cluster, _) = cluster();
    cluster.create(&node_claim("a")).await.unwrap();
    cluster.create(&node_claim("b")).await.unwrap();
    assert_eq!(finalize_every_claim(cluster.clone()).await, 2);
    let snapshot = cluster.snapshot().await.unwrap();
    for claim in &snapshot.node_claims {
        assert_eq!(claim.metadata.finalizers.as_deref().unwrap(), [FINALIZER]);
    }
}

#[tokio::test]
async fn given_a_pdb_when_written_then_the_answer_carries_its_computed_status() {
    let (cluster, _) = cluster();
    running_pods(&cluster, 2).await;
    let created = cluster
        .create(&pdb(
            "default",
            "web",
            json!({ "minAvailable": 1, "selector": {} }),
        ))
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().disruptions_allowed, 1);
}

#[tokio::test]
async fn given_clones_of_a_cluster_then_they_share_state() {
    let (cluster, _) = cluster();
    let other = cluster.clone();
    other.create(&node("a")).await.unwrap();
    assert_eq!(cluster.objects_count(), 1);
}
