//! The interruption queue over the in-memory SQS and EC2: notices only for the cluster's
//! instances, messages deleted only once acknowledged, interrupted spot offerings avoided.

use std::sync::Arc;

use super::*;
use crate::ec2::memory::MemoryEc2;
use crate::ec2::memory::hooks::RunningInstance;
use crate::ec2::{CapacityType, Tag};
use crate::instance_type_provider::SystemClock;
use crate::sqs::memory::MemorySqs;

const QUEUE: &str = "demo";

struct Fixture {
    sqs: Arc<MemorySqs>,
    ec2: Arc<MemoryEc2>,
    instance_types: Arc<InstanceTypeProvider>,
    queue: InterruptionQueue,
}

fn fixture() -> Fixture {
    let sqs = Arc::new(MemorySqs::new());
    sqs.create_queue(QUEUE);
    let ec2 = Arc::new(MemoryEc2::new("us-east-1").unwrap());
    let instance_types = Arc::new(InstanceTypeProvider::new(
        ec2.clone(),
        "us-east-1",
        Arc::new(SystemClock),
    ));
    let queue = InterruptionQueue::new(
        sqs.clone(),
        ec2.clone(),
        instance_types.clone(),
        QUEUE,
        "demo",
    );
    Fixture {
        sqs,
        ec2,
        instance_types,
        queue,
    }
}

fn run(ec2: &MemoryEc2, id: &str, cluster: &str, capacity_type: CapacityType) {
    ec2.register_running_instance(RunningInstance {
        id: id.to_owned(),
        instance_type: "m5.large".to_owned(),
        zone: "us-east-1a".to_owned(),
        capacity_type,
        image_id: None,
        subnet_id: None,
        security_group_ids: Vec::new(),
        tags: vec![Tag::new(tags::TAG_EKS_CLUSTER_NAME, cluster)],
        launch_time: None,
    })
    .unwrap();
}

fn spot_warning(event: &str, instance: &str) -> String {
    format!(
        r#"{{"version":"0","id":"{event}","detail-type":"EC2 Spot Instance Interruption Warning",
        "source":"aws.ec2","time":"2026-01-01T00:00:00Z",
        "detail":{{"instance-id":"{instance}","instance-action":"terminate"}}}}"#
    )
}

/// A warning for the cluster's spot instance is a notice with its provider ID and the
/// two-minute deadline; its offering is avoided; its message stays until acknowledged.
#[tokio::test]
async fn a_spot_warning_becomes_a_notice_deleted_once_acknowledged() {
    let f = fixture();
    run(&f.ec2, "i-0000000000000001", "demo", CapacityType::Spot);
    f.sqs
        .send(QUEUE, &spot_warning("e-1", "i-0000000000000001"))
        .unwrap();

    let notices = f.queue.poll().await.unwrap();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].event_id, "e-1");
    assert_eq!(notices[0].kind, InterruptionKind::SpotInterruption as i32);
    assert_eq!(
        notices[0].provider_id,
        "aws:///us-east-1a/i-0000000000000001"
    );
    assert_eq!(
        notices[0].deadline.map(|d| d.seconds),
        notices[0].time.map(|t| t.seconds + 120)
    );
    assert!(
        f.instance_types
            .is_unavailable("m5.large", "us-east-1a", CAPACITY_TYPE_SPOT)
    );
    assert_eq!(f.sqs.messages(QUEUE).len(), 1, "kept until acknowledged");

    f.queue.acknowledge(&["e-1".to_owned()]).await.unwrap();
    assert!(f.sqs.messages(QUEUE).is_empty());
    // Acknowledging again, or an id never sent, is nothing.
    f.queue
        .acknowledge(&["e-1".to_owned(), "never".to_owned()])
        .await
        .unwrap();
}

/// Another cluster's instances, unknown instances, malformed and foreign messages are
/// deleted at once, with no notice.
#[tokio::test]
async fn what_is_not_this_clusters_is_deleted_unseen() {
    let f = fixture();
    run(&f.ec2, "i-0000000000000002", "other", CapacityType::Spot);
    for body in [
        spot_warning("e-2", "i-0000000000000002"),
        spot_warning("e-3", "i-00000000000000ff"),
        "not json".to_owned(),
        r#"{"version":"0","id":"x","detail-type":"EC2 AMI State Change","source":"aws.ec2","detail":{}}"#.to_owned(),
    ] {
        f.sqs.send(QUEUE, &body).unwrap();
    }
    assert!(f.queue.poll().await.unwrap().is_empty());
    assert!(f.sqs.messages(QUEUE).is_empty());
    assert!(
        !f.instance_types
            .is_unavailable("m5.large", "us-east-1a", CAPACITY_TYPE_SPOT)
    );
}

/// A health event naming two instances is deleted when both notices are acknowledged.
#[tokio::test]
async fn a_message_of_several_notices_waits_for_all() {
    let f = fixture();
    run(&f.ec2, "i-0000000000000003", "demo", CapacityType::OnDemand);
    run(&f.ec2, "i-0000000000000004", "demo", CapacityType::OnDemand);
    let body = r#"{"version":"0","id":"h","detail-type":"AWS Health Event","source":"aws.health",
        "time":"2026-01-01T00:00:00Z","detail":{"service":"EC2","eventTypeCategory":"scheduledChange",
        "eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","startTime":"Fri, 02 Jan 2026 00:00:00 GMT",
        "affectedEntities":[{"entityValue":"i-0000000000000003"},{"entityValue":"i-0000000000000004"}]}}"#;
    f.sqs.send(QUEUE, body).unwrap();
    let notices = f.queue.poll().await.unwrap();
    let ids: Vec<&str> = notices.iter().map(|n| n.event_id.as_str()).collect();
    assert_eq!(ids, ["h/i-0000000000000003", "h/i-0000000000000004"]);
    f.queue.acknowledge(&[ids[0].to_owned()]).await.unwrap();
    assert_eq!(f.sqs.messages(QUEUE).len(), 1);
    f.queue.acknowledge(&[ids[1].to_owned()]).await.unwrap();
    assert!(f.sqs.messages(QUEUE).is_empty());
}

/// A queue that does not exist is an error, not "no interruptions".
#[tokio::test]
async fn a_missing_queue_is_an_error() {
    let f = fixture();
    let queue = InterruptionQueue::new(
        f.sqs.clone(),
        f.ec2.clone(),
        f.instance_types.clone(),
        "nope",
        "demo",
    );
    assert!(queue.poll().await.unwrap_err().is_not_found());
}
