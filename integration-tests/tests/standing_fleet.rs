//! The standing fleet `fake-apiserver --fleet-nodes` serves (what `core-scale-bench` measures
//! core against): read back through `KubeCluster` whole, and coherent enough that the
//! disruption controller weighs every node as a consolidation candidate rather than refusing
//! it for a missing label, node class or instance type.

#![allow(clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use core_svc::clock::SystemClock;
use core_svc::cloudprovider::{FakeCloudProvider, NodeClassKind};
use core_svc::cluster::{Cluster, InMemoryCluster, KubeCluster};
use core_svc::controllers::disruption::DisruptionController;
use core_svc::controllers::{Context, Controller, Requeue, Settings};
use core_svc::events::{Events, MemoryEvents};
use integration_tests::fake_apiserver::{FakeApiServer, NodeClassResource};
use integration_tests::fleet::{self, FleetSize};

#[tokio::test]
async fn the_standing_fleet_reads_back_whole_and_every_node_is_weighed_for_consolidation() {
    let memory = InMemoryCluster::new(Arc::new(SystemClock), 3);
    let size = FleetSize {
        nodes: 6,
        pods_per_node: 4,
    };
    fleet::populate(&memory, size)
        .await
        .expect("the fleet is written");
    let server = FakeApiServer::start(
        "127.0.0.1:0".parse().expect("an address"),
        memory,
        vec![NodeClassResource {
            group: "test.karpenter.sh".to_owned(),
            version: "v1".to_owned(),
            kind: "TestNodeClass".to_owned(),
            plural: "testnodeclasses".to_owned(),
        }],
    )
    .await
    .expect("the fake API server starts");
    let config = kube::Config::new(server.url().parse().expect("a URL"));
    let client = core_svc::cluster::apiserver::client(config).expect("a client");
    let kinds = [NodeClassKind {
        group: "test.karpenter.sh".to_owned(),
        version: "v1".to_owned(),
        kind: "TestNodeClass".to_owned(),
    }];
    let cluster = Arc::new(
        KubeCluster::start(client, &kinds)
            .await
            .expect("the adapter starts"),
    );
    tokio::time::timeout(Duration::from_secs(20), cluster.wait_synced())
        .await
        .expect("the reflectors sync");

    let snapshot = cluster.snapshot().await.expect("a snapshot");
    assert_eq!(snapshot.nodes.len(), 6);
    assert_eq!(snapshot.node_claims.len(), 6);
    assert_eq!(snapshot.pods.len(), 24);
    assert_eq!(snapshot.node_classes.len(), 1);
    assert_eq!(snapshot.pdbs.len(), 1);

    let cloud = Arc::new(FakeCloudProvider::new());
    cloud.set_instance_types(fleet::instance_types());
    let events = Arc::new(MemoryEvents::default());
    let disruption = DisruptionController::new(Context {
        cluster,
        cloud,
        clock: Arc::new(SystemClock),
        events: Arc::clone(&events) as Arc<dyn Events>,
        settings: Settings::default(),
    });
    // Six nodes a quarter full: consolidation finds a command and starts validating it.
    let requeue = disruption.reconcile().await.expect("a pass");
    let refused: Vec<String> = events.all().into_iter().map(|e| e.message).collect();
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(
        requeue,
        Requeue::After(core_svc::controllers::disruption::VALIDATION_DELAY)
    );
}
