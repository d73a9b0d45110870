//! The interruption decisions, and the controller over the in-memory cluster and the fake
//! plugin: the stream opened (and re-opened with backoff), each notice acted on once and
//! acknowledged.

use std::time::SystemTime;

use core_domain::labels::ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP;
use serde_json::json;

use super::*;
use crate::clock::{Clock, FakeClock};
use crate::cloudprovider::FakeCloudProvider;
use crate::cluster::InMemoryCluster;
use crate::controllers::Settings;
use crate::controllers::testing::{self, at};
use crate::events::MemoryEvents;

fn claim(name: &str, provider_id: &str, patch: serde_json::Value) -> NodeClaim {
    testing::node_claim(
        name,
        testing::merged(
            json!({
                "metadata": {"labels": {LABEL_NODEPOOL: "spot", LABEL_CAPACITY_TYPE: "spot"}},
                "status": {"providerID": provider_id},
            }),
            patch,
        ),
    )
}

fn notice(
    id: &str,
    kind: InterruptionKind,
    provider_id: &str,
    deadline: Option<i64>,
) -> Interruption {
    Interruption {
        event_id: id.to_owned(),
        kind,
        provider_id: provider_id.to_owned(),
        time: None,
        deadline: deadline.map(|s| SystemTime::from(at(s))),
        message: "EC2 Spot Instance Interruption Warning".to_owned(),
    }
}

/// A warning with a deadline brings the termination deadline forward to it (never past
/// now); a sooner deadline the NodeClaim already has stands; an unknown instance is ignored.
#[test]
fn a_replacement_drains_by_the_notice_deadline() {
    let claims = [
        claim("a", "fake:///a", json!({})),
        claim(
            "b",
            "fake:///b",
            json!({"metadata": {"annotations": {ANNOTATION_NODECLAIM_TERMINATION_TIMESTAMP: at(50).to_string()}}}),
        ),
    ];
    let snapshot = testing::snapshot(claims.to_vec(), Vec::new());
    let by_id = node_claims_by_provider_id(&snapshot);
    let pools = HashMap::new();
    let spot = InterruptionKind::SpotInterruption;
    assert_eq!(
        decide(
            &notice("1", spot, "fake:///a", Some(220)),
            &by_id,
            &pools,
            at(100)
        ),
        Decision::Replace {
            node_claim: &claims[0],
            deadline: at(220),
            annotate: true
        }
    );
    assert_eq!(
        decide(
            &notice("2", spot, "fake:///a", Some(10)),
            &by_id,
            &pools,
            at(100)
        ),
        Decision::Replace {
            node_claim: &claims[0],
            deadline: at(100),
            annotate: true
        }
    );
    assert_eq!(
        decide(
            &notice("3", spot, "fake:///b", Some(220)),
            &by_id,
            &pools,
            at(40)
        ),
        Decision::Replace {
            node_claim: &claims[1],
            deadline: at(50),
            annotate: false
        }
    );
    let stopping = InterruptionKind::Stopping;
    assert_eq!(
        decide(
            &notice("4", stopping, "fake:///a", None),
            &by_id,
            &pools,
            at(100)
        ),
        Decision::Replace {
            node_claim: &claims[0],
            deadline: at(100),
            annotate: true
        }
    );
    assert_eq!(
        decide(
            &notice("5", spot, "fake:///nobody", Some(220)),
            &by_id,
            &pools,
            at(100)
        ),
        Decision::Ignore("no NodeClaim has this instance")
    );
}

/// A rebalance recommendation replaces nothing; it is drift only where the NodePool says so.
#[test]
fn a_rebalance_recommendation_is_drift_only_by_opt_in() {
    let claims = [claim("a", "fake:///a", json!({}))];
    let snapshot = testing::snapshot(claims.to_vec(), Vec::new());
    let by_id = node_claims_by_provider_id(&snapshot);
    let plain = testing::node_pool("spot", json!({}));
    let opted = testing::node_pool(
        "spot",
        json!({"metadata": {"annotations": {ANNOTATION_REBALANCE_AS_DRIFT: "true"}}}),
    );
    let rebalance = notice(
        "r",
        InterruptionKind::RebalanceRecommendation,
        "fake:///a",
        None,
    );
    for (pool, as_drift) in [(&plain, false), (&opted, true)] {
        let pools = HashMap::from([("spot", pool)]);
        assert_eq!(
            decide(&rebalance, &by_id, &pools, at(0)),
            Decision::Rebalance {
                node_claim: &claims[0],
                as_drift
            }
        );
    }
}

struct Fixture {
    cluster: Arc<InMemoryCluster>,
    cloud: Arc<FakeCloudProvider>,
    events: Arc<MemoryEvents>,
    clock: Arc<FakeClock>,
    inbox: Arc<InterruptionInbox>,
    controller: InterruptionController<InMemoryCluster, FakeCloudProvider>,
}

fn fixture() -> Fixture {
    let clock = Arc::new(FakeClock::new(at(1000)));
    let cluster = Arc::new(InMemoryCluster::new(
        Arc::clone(&clock) as Arc<dyn Clock>,
        7,
    ));
    let cloud = Arc::new(FakeCloudProvider::new());
    let events = Arc::new(MemoryEvents::new());
    let ctx = Context {
        cluster: Arc::clone(&cluster),
        cloud: Arc::clone(&cloud),
        clock: Arc::clone(&clock) as Arc<dyn Clock>,
        events: Arc::clone(&events) as _,
        settings: Settings::default(),
    };
    let inbox = Arc::new(InterruptionInbox::new());
    let controller = InterruptionController::new(ctx, Arc::clone(&inbox));
    Fixture {
        cluster,
        cloud,
        events,
        clock,
        inbox,
        controller,
    }
}

/// Lets the reader task forward what the fake sent.
async fn settle(inbox: &InterruptionInbox, received: u64) {
    for _ in 0..100 {
        if inbox.received() >= received {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// The whole path: the stream opened, a spot warning for a NodeClaim's instance deletes it
/// with the deadline written, Events say why, the notice is acknowledged; the same notice
/// sent again is only acknowledged again.
#[tokio::test]
async fn a_spot_warning_deletes_the_node_claim_and_is_acknowledged() {
    let f = fixture();
    let created = f
        .cluster
        .create(&claim("spot-1", "fake:///i-1", json!({})))
        .await
        .unwrap();
    f.cluster
        .replace_status(&patched_status(created, "fake:///i-1"))
        .await
        .unwrap();
    assert_eq!(f.controller.reconcile().await.unwrap(), Requeue::OnChange);
    assert_eq!(f.inbox.stream(), StreamState::Open);

    let warning = notice(
        "e-1",
        InterruptionKind::SpotInterruption,
        "fake:///i-1",
        Some(1120),
    );
    assert_eq!(f.cloud.interrupt(vec![warning.clone()]), 1);
    settle(&f.inbox, 1).await;
    assert!(f.inbox.has_work());
    f.controller.reconcile().await.unwrap();

    let snapshot = f.cluster.snapshot().await.unwrap();
    let deleted = snapshot.node_claims().find(|c| name_of(*c) == "spot-1");
    // The in-memory cluster keeps it while its finalizer holds; either way it is deleting.
    if let Some(deleted) = deleted {
        assert!(deleted.metadata.deletion_timestamp.is_some());
        assert_eq!(annotated_termination_deadline(deleted), Some(at(1120)));
    }
    let reasons: Vec<Reason> = f.events.drain().into_iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::InterruptionReceived,
            Reason::SpotInterrupted,
            Reason::TerminatingOnInterruption
        ]
    );
    assert_eq!(f.cloud.acknowledged(), ["e-1"]);

    f.cloud.interrupt(vec![warning]);
    settle(&f.inbox, 2).await;
    f.controller.reconcile().await.unwrap();
    assert!(f.events.drain().is_empty(), "acted on once");
    assert_eq!(f.cloud.acknowledged(), ["e-1", "e-1"]);
}

fn patched_status(claim: NodeClaim, provider_id: &str) -> NodeClaim {
    testing::patched(&claim, json!({"status": {"providerID": provider_id}}))
}

/// A stream that breaks is re-opened after a backoff on the controller's clock, never read as
/// "no interruptions"; a plugin without interruptions is not asked again.
#[tokio::test]
async fn a_broken_stream_is_reopened_with_backoff() {
    let f = fixture();
    f.controller.reconcile().await.unwrap();
    f.cloud
        .break_interruption_streams(Some(CloudProviderError::Unavailable("gone".into())));
    for _ in 0..100 {
        if f.inbox.stream() == StreamState::Closed {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(f.inbox.has_work());
    assert_eq!(
        f.controller.reconcile().await.unwrap(),
        Requeue::After(Duration::from_secs(1))
    );
    assert_eq!(f.inbox.stream(), StreamState::Closed);
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.controller.reconcile().await.unwrap(), Requeue::OnChange);
    assert_eq!(f.inbox.stream(), StreamState::Open);

    let unsupported = fixture();
    unsupported
        .cloud
        .set_unsupported(crate::cloudprovider::Rpc::WatchInterruptions);
    unsupported.controller.reconcile().await.unwrap();
    assert_eq!(unsupported.inbox.stream(), StreamState::Unsupported);
    assert!(!unsupported.inbox.has_work());
}
