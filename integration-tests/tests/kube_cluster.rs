//! `KubeCluster`, core's cluster port over kube-rs, against the fake API server: the same
//! contract the in-memory cluster keeps, over HTTP, plus what only a watch-fed adapter can get
//! wrong (catching up with other writers, relisting after 410 Gone without losing objects).

#![allow(clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use core_svc::clock::SystemClock;
use core_svc::cloudprovider::NodeClassKind;
use core_svc::cluster::{Cluster, InMemoryCluster, KubeCluster, contract};
use integration_tests::fake_apiserver::{FakeApiServer, NodeClassResource};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

async fn start() -> (FakeApiServer, InMemoryCluster, KubeCluster) {
    let memory = InMemoryCluster::new(Arc::new(SystemClock), 11);
    let server = FakeApiServer::start(
        "127.0.0.1:0".parse().expect("an address"),
        memory.clone(),
        vec![NodeClassResource::ec2_node_class()],
    )
    .await
    .expect("the fake API server starts");
    let config = kube::Config::new(server.url().parse().expect("a URL"));
    let client = core_svc::cluster::apiserver::client(config).expect("a client");
    let kinds = [NodeClassKind {
        group: "karpenter.k8s.aws".to_owned(),
        version: "v1".to_owned(),
        kind: "EC2NodeClass".to_owned(),
    }];
    let cluster = KubeCluster::start(client, &kinds)
        .await
        .expect("the adapter starts");
    tokio::time::timeout(Duration::from_secs(20), cluster.wait_synced())
        .await
        .expect("the reflectors sync");
    (server, memory, cluster)
}

/// Waits until `check` holds for a snapshot, for what the watch must deliver.
async fn eventually(
    cluster: &KubeCluster,
    what: &str,
    check: impl Fn(&core_svc::cluster::Snapshot) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut changes = cluster.subscribe();
    loop {
        let snapshot = cluster.snapshot().await.expect("snapshot");
        if check(&snapshot) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        // Each change wakes the check; the deadline bounds the wait.
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_cluster_keeps_the_contract_over_http() {
    let (_server, _memory, cluster) = start().await;
    contract::run_all(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_another_writer_then_the_watch_brings_its_changes() {
    let (server, memory, cluster) = start().await;
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "written-in-process"},
    }))
    .expect("a node");
    let before = cluster.revision();
    memory.create(&node).await.expect("create in process");
    server.sync().await;
    eventually(&cluster, "the node appears", |s| {
        s.node("written-in-process").is_some()
    })
    .await;
    assert_ne!(cluster.revision(), before);
    memory
        .delete::<Node>(None, "written-in-process", Default::default())
        .await
        .expect("delete in process");
    server.sync().await;
    eventually(&cluster, "the node goes", |s| {
        s.node("written-in-process").is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_history_is_compacted_then_the_adapter_relists_and_loses_nothing() {
    let (server, memory, cluster) = start().await;
    for name in ["kept-a", "kept-b"] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        }))
        .expect("a node");
        memory.create(&node).await.expect("create");
    }
    server.sync().await;
    eventually(&cluster, "both nodes", |s| {
        s.node("kept-a").is_some() && s.node("kept-b").is_some()
    })
    .await;
    // Every watch from now on resumes from a version the server no longer has: 410 Gone.
    server.compact();
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "after-compaction"},
    }))
    .expect("a node");
    memory.create(&node).await.expect("create");
    server.sync().await;
    // Whatever the watch does meanwhile, the nodes it had never disappear.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let snapshot = cluster.snapshot().await.expect("snapshot");
        assert!(
            snapshot.node("kept-a").is_some() && snapshot.node("kept-b").is_some(),
            "a relist made nodes look deleted"
        );
        if snapshot.node("after-compaction").is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the adapter never caught up after 410 Gone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_budget_refuses_then_the_eviction_is_sent_once_and_answered_blocked() {
    let (server, _memory, cluster) = start().await;
    let before = server.evictions();
    contract::eviction_honours_budgets(&cluster).await;
    // One refused eviction, one refused by the UID precondition, one admitted: three POSTs,
    // none of them repeated by the client.
    assert_eq!(server.evictions() - before, 3);
}

fn node_named(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
    }))
    .expect("a node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_limit_then_pages_come_from_one_state_and_an_expired_continue_is_410() {
    let (server, memory, cluster) = start().await;
    for index in 0..5 {
        memory
            .create(&node_named(&format!("paged-{index}")))
            .await
            .expect("create");
    }
    server.sync().await;
    let config = kube::Config::new(server.url().parse().expect("a URL"));
    let client = core_svc::cluster::apiserver::client(config).expect("a client");
    let nodes: kube::Api<Node> = kube::Api::all(client);
    let names = |list: &kube::core::ObjectList<Node>| -> Vec<String> {
        list.items
            .iter()
            .filter_map(|node| node.metadata.name.clone())
            .collect()
    };

    let first = nodes
        .list(&kube::api::ListParams::default().limit(2))
        .await
        .expect("the first page");
    assert_eq!(names(&first), ["paged-0", "paged-1"]);
    let token = first.metadata.continue_.clone().expect("a continue token");
    // A change between pages is not seen by the list's later pages: they are cut from the
    // first page's state, at its resourceVersion.
    memory
        .delete::<Node>(None, "paged-2", Default::default())
        .await
        .expect("delete");
    memory.create(&node_named("paged-9")).await.expect("create");
    server.sync().await;
    let mut seen = names(&first);
    let mut token = Some(token);
    while let Some(next) = token {
        let page = nodes
            .list(
                &kube::api::ListParams::default()
                    .limit(2)
                    .continue_token(&next),
            )
            .await
            .expect("a next page");
        assert_eq!(
            page.metadata.resource_version,
            first.metadata.resource_version
        );
        seen.extend(names(&page));
        token = page.metadata.continue_.filter(|token| !token.is_empty());
    }
    assert_eq!(
        seen,
        ["paged-0", "paged-1", "paged-2", "paged-3", "paged-4"]
    );

    // Once the server no longer keeps that state, the token is refused with 410 Expired.
    let first = nodes
        .list(&kube::api::ListParams::default().limit(2))
        .await
        .expect("a first page");
    let token = first.metadata.continue_.expect("a continue token");
    server.compact();
    match nodes
        .list(
            &kube::api::ListParams::default()
                .limit(2)
                .continue_token(&token),
        )
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("an expired continue answered {other:?}"),
    }
    // The adapter, which pages its lists, still holds every node.
    eventually(&cluster, "every node, paged", |s| {
        s.node("paged-9").is_some() && s.node("paged-2").is_none() && s.node("paged-4").is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_more_objects_than_a_page_then_the_adapter_lists_them_all() {
    let memory = InMemoryCluster::new(Arc::new(SystemClock), 11);
    let count = core_svc::cluster::apiserver::LIST_PAGE_SIZE as usize * 2 + 1;
    for index in 0..count {
        memory
            .create(&node_named(&format!("fleet-{index:04}")))
            .await
            .expect("create");
    }
    let server = FakeApiServer::start(
        "127.0.0.1:0".parse().expect("an address"),
        memory.clone(),
        Vec::new(),
    )
    .await
    .expect("the fake API server starts");
    let config = kube::Config::new(server.url().parse().expect("a URL"));
    let client = core_svc::cluster::apiserver::client(config).expect("a client");
    let cluster = KubeCluster::start(client, &[])
        .await
        .expect("the adapter starts");
    tokio::time::timeout(Duration::from_secs(20), cluster.wait_synced())
        .await
        .expect("the reflectors sync");
    let snapshot = cluster.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.nodes.len(), count);
    // Three pages of nodes: the first and two continued.
    assert!(server.continued_lists() >= 2, "the adapter did not page");
    assert!(snapshot.node("fleet-0000").is_some() && snapshot.node("fleet-1000").is_some());
}
