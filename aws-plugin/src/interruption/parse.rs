//! The EventBridge events the interruption queue carries, read into [`Notice`]s: which
//! instance, what is happening to it, when it will be gone. Upstream's parsers
//! (aws/karpenter-provider-aws `pkg/controllers/interruption/messages/`) choose by the
//! envelope's exact `version`, `source` and `detail-type`; so does this. An event of another
//! kind (the rules also forward every AWS Health event and every state change) is
//! [`Parsed::Ignored`]; a body that is not an event at all is [`Parsed::Malformed`], with
//! the reason, so it is logged and deleted rather than retried forever.

use std::time::{Duration, SystemTime};

use provider_sdk::v1::InterruptionKind;
use serde::Deserialize;

/// How long EC2 gives a spot instance after its interruption warning, and a capacity
/// reservation's instance after its interruption warning.
pub const TWO_MINUTE_WARNING: Duration = Duration::from_secs(120);

/// One instance's notice from one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The event's id; with the instance id when one event names several instances (AWS
    /// Health events do), so each notice's id is its own.
    pub event_id: String,
    /// What the event says.
    pub kind: InterruptionKind,
    /// `i-...`.
    pub instance_id: String,
    /// When EventBridge sent the event.
    pub time: Option<SystemTime>,
    /// When the instance will be gone, when the event says.
    pub deadline: Option<SystemTime>,
    /// The event's own words, for people.
    pub message: String,
}

/// What a queue message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Notices about instances (one event may name several).
    Notices(Vec<Notice>),
    /// An event that asks for nothing (another kind, a state that does not matter, another
    /// service's health event); why, for the log.
    Ignored(String),
    /// Not an EventBridge event this plugin can read; why.
    Malformed(String),
}

/// The envelope every EventBridge event has.
#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(default)]
    version: String,
    #[serde(default)]
    id: String,
    #[serde(rename = "detail-type", default)]
    detail_type: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

/// `detail` of the EC2 events that name one instance.
#[derive(Debug, Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    #[serde(default)]
    state: Option<String>,
}

/// `detail` of an AWS Health event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDetail {
    #[serde(default)]
    service: String,
    #[serde(default)]
    event_type_category: String,
    #[serde(default)]
    event_type_code: String,
    #[serde(default)]
    start_time: String,
    #[serde(default)]
    event_description: Option<Vec<HealthDescription>>,
    #[serde(default)]
    affected_entities: Vec<AffectedEntity>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDescription {
    #[serde(default)]
    latest_description: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffectedEntity {
    #[serde(default)]
    entity_value: String,
}

const SPOT_WARNING: &str = "EC2 Spot Instance Interruption Warning";
const REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
const RESERVATION_WARNING: &str = "EC2 Capacity Reservation Instance Interruption Warning";
const HEALTH: &str = "AWS Health Event";

/// Reads one queue message's body.
pub fn parse(body: &str) -> Parsed {
    let envelope: Envelope = match serde_json::from_str(body) {
        Ok(envelope) => envelope,
        Err(e) => return Parsed::Malformed(format!("not an EventBridge event: {e}")),
    };
    if envelope.version != "0" {
        return Parsed::Ignored(format!(
            "event version {:?}: only version 0 is known",
            envelope.version
        ));
    }
    if envelope.id.is_empty() {
        return Parsed::Malformed("the event has no id".to_owned());
    }
    let time = match envelope.time.as_deref().map(rfc3339) {
        None => None,
        Some(Ok(time)) => Some(time),
        Some(Err(e)) => return Parsed::Malformed(format!("time: {e}")),
    };
    match (envelope.source.as_str(), envelope.detail_type.as_str()) {
        ("aws.ec2", SPOT_WARNING) => one_instance(&envelope, time, |_| {
            Some((
                InterruptionKind::SpotInterruption,
                time.map(|t| t + TWO_MINUTE_WARNING),
            ))
        }),
        ("aws.ec2", RESERVATION_WARNING) => one_instance(&envelope, time, |_| {
            Some((
                InterruptionKind::CapacityReservationInterruption,
                time.map(|t| t + TWO_MINUTE_WARNING),
            ))
        }),
        ("aws.ec2", REBALANCE) => one_instance(&envelope, time, |_| {
            Some((InterruptionKind::RebalanceRecommendation, None))
        }),
        ("aws.ec2", STATE_CHANGE) => one_instance(&envelope, time, |detail| {
            state_change_kind(detail.state.as_deref().unwrap_or_default()).map(|kind| (kind, time))
        }),
        ("aws.health", HEALTH) => health(&envelope, time),
        (source, detail_type) => Parsed::Ignored(format!(
            "{source} {detail_type:?} is not an interruption event"
        )),
    }
}

/// "stopping" and "stopped" stop the instance; "shutting-down" and "terminated" end it
/// (upstream's accepted states, compared without case). Other states ask for nothing.
pub fn state_change_kind(state: &str) -> Option<InterruptionKind> {
    match state.to_ascii_lowercase().as_str() {
        "stopping" | "stopped" => Some(InterruptionKind::Stopping),
        "shutting-down" | "terminated" => Some(InterruptionKind::Terminating),
        _ => None,
    }
}

/// An EC2 event about `detail.instance-id`; `classify` gives its kind and deadline, or
/// `None` when it asks for nothing.
fn one_instance(
    envelope: &Envelope,
    time: Option<SystemTime>,
    classify: impl Fn(&InstanceDetail) -> Option<(InterruptionKind, Option<SystemTime>)>,
) -> Parsed {
    let detail: InstanceDetail = match serde_json::from_value(envelope.detail.clone()) {
        Ok(detail) => detail,
        Err(e) => return Parsed::Malformed(format!("{}: detail: {e}", envelope.detail_type)),
    };
    if !detail.instance_id.starts_with("i-") {
        return Parsed::Malformed(format!(
            "{}: detail.instance-id {:?} is not an instance id",
            envelope.detail_type, detail.instance_id
        ));
    }
    let Some((kind, deadline)) = classify(&detail) else {
        return Parsed::Ignored(format!(
            "{} of {}: state {:?} asks for nothing",
            envelope.detail_type,
            detail.instance_id,
            detail.state.as_deref().unwrap_or_default()
        ));
    };
    let message = match &detail.state {
        Some(state) => format!("{} ({state})", envelope.detail_type),
        None => envelope.detail_type.clone(),
    };
    Parsed::Notices(vec![Notice {
        event_id: envelope.id.clone(),
        kind,
        instance_id: detail.instance_id,
        time,
        deadline,
        message,
    }])
}

/// An AWS Health event: only EC2's scheduled changes ask for something, for every instance
/// it names, by the start of the maintenance window.
fn health(envelope: &Envelope, time: Option<SystemTime>) -> Parsed {
    let detail: HealthDetail = match serde_json::from_value(envelope.detail.clone()) {
        Ok(detail) => detail,
        Err(e) => return Parsed::Malformed(format!("{HEALTH}: detail: {e}")),
    };
    if detail.service != "EC2" || detail.event_type_category != "scheduledChange" {
        return Parsed::Ignored(format!(
            "{HEALTH} of {:?}, category {:?}: only EC2's scheduledChange asks for something",
            detail.service, detail.event_type_category
        ));
    }
    // EC2 writes the window's start as RFC 2822 ("Sat, 05 Jun 2016 15:10:09 GMT"); one that
    // does not read leaves the deadline open rather than refusing the notice.
    let deadline = rfc2822(&detail.start_time).or_else(|| rfc3339(&detail.start_time).ok());
    let description = detail
        .event_description
        .as_deref()
        .and_then(|d| d.first())
        .map(|d| d.latest_description.trim().to_owned())
        .filter(|d| !d.is_empty());
    let message = match description {
        Some(description) => format!("{HEALTH} {}: {description}", detail.event_type_code),
        None => format!("{HEALTH} {}", detail.event_type_code),
    };
    let instances: Vec<&str> = detail
        .affected_entities
        .iter()
        .map(|e| e.entity_value.as_str())
        .filter(|id| id.starts_with("i-"))
        .collect();
    if instances.is_empty() {
        return Parsed::Ignored(format!("{HEALTH}: names no instance"));
    }
    let several = instances.len() > 1;
    Parsed::Notices(
        instances
            .into_iter()
            .map(|instance| Notice {
                event_id: if several {
                    format!("{}/{instance}", envelope.id)
                } else {
                    envelope.id.clone()
                },
                kind: InterruptionKind::ScheduledChange,
                instance_id: instance.to_owned(),
                time,
                deadline,
                message: message.clone(),
            })
            .collect(),
    )
}

fn rfc3339(text: &str) -> Result<SystemTime, String> {
    text.parse::<jiff::Timestamp>()
        .map(SystemTime::from)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time: {e}"))
}

fn rfc2822(text: &str) -> Option<SystemTime> {
    jiff::fmt::rfc2822::parse(text)
        .ok()
        .map(|zoned| SystemTime::from(zoned.timestamp()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SystemTime {
        rfc3339(text).unwrap()
    }

    /// upstream's design document's example, verbatim (aws/karpenter-provider-aws
    /// `designs/interruption-handling.md`).
    const SPOT: &str = r#"{
      "version": "0",
      "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
      "detail-type": "EC2 Spot Instance Interruption Warning",
      "source": "aws.ec2",
      "account": "123456789012",
      "time": "2022-08-11T14:00:00Z",
      "region": "us-east-2",
      "resources": ["arn:aws:ec2:us-east-2:instance/i-0123456789"],
      "detail": {"instance-id": "i-0123456789", "instance-action": "terminate"}
    }"#;

    #[test]
    fn a_spot_warning_gives_two_minutes() {
        let Parsed::Notices(notices) = parse(SPOT) else {
            panic!("{:?}", parse(SPOT))
        };
        assert_eq!(
            notices,
            [Notice {
                event_id: "1e5527d7-bb36-4607-3370-4164db56a40e".to_owned(),
                kind: InterruptionKind::SpotInterruption,
                instance_id: "i-0123456789".to_owned(),
                time: Some(at("2022-08-11T14:00:00Z")),
                deadline: Some(at("2022-08-11T14:02:00Z")),
                message: SPOT_WARNING.to_owned(),
            }]
        );
    }

    /// The shape AWS documents for a rebalance recommendation: no deadline.
    #[test]
    fn a_rebalance_recommendation_has_no_deadline() {
        let body = r#"{"version": "0", "id": "5d5555d5-dd55-5555-5555-5555dd55d55d",
            "detail-type": "EC2 Instance Rebalance Recommendation", "source": "aws.ec2",
            "account": "123456789012", "time": "2020-10-26T14:14:14Z", "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"],
            "detail": {"instance-id": "i-0b662ef9931388ba0"}}"#;
        let Parsed::Notices(notices) = parse(body) else {
            panic!("{:?}", parse(body))
        };
        assert_eq!(notices[0].kind, InterruptionKind::RebalanceRecommendation);
        assert_eq!(notices[0].deadline, None);
    }

    fn state_change(state: &str) -> String {
        format!(
            r#"{{"version":"0","id":"e-1","detail-type":"EC2 Instance State-change Notification",
            "source":"aws.ec2","time":"2025-01-01T00:00:00.123456789Z",
            "detail":{{"instance-id":"i-0123456789abcdef0","state":"{state}"}}}}"#
        )
    }

    /// upstream's accepted states: stopping and stopped stop, shutting-down and terminated
    /// end; anything else (pending, running) asks for nothing.
    #[test]
    fn state_changes_by_state() {
        for (state, kind) in [
            ("stopping", InterruptionKind::Stopping),
            ("stopped", InterruptionKind::Stopping),
            ("STOPPING", InterruptionKind::Stopping),
            ("shutting-down", InterruptionKind::Terminating),
            ("terminated", InterruptionKind::Terminating),
        ] {
            let Parsed::Notices(notices) = parse(&state_change(state)) else {
                panic!("{state}")
            };
            assert_eq!(notices[0].kind, kind, "{state}");
            assert_eq!(notices[0].message, format!("{STATE_CHANGE} ({state})"));
        }
        for state in ["pending", "running", "creating"] {
            assert!(
                matches!(parse(&state_change(state)), Parsed::Ignored(_)),
                "{state}"
            );
        }
    }

    /// AWS Health: only EC2's scheduled changes, one notice per instance named, by the start
    /// of the window (RFC 2822, as EC2 writes it).
    #[test]
    fn a_scheduled_change_names_each_instance_and_its_window() {
        let body = r#"{"version":"0","id":"h-1","detail-type":"AWS Health Event",
            "source":"aws.health","time":"2025-01-01T00:00:00Z",
            "detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/x","service":"EC2",
              "eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
              "eventTypeCategory":"scheduledChange",
              "startTime":"Sat, 05 Jun 2027 15:10:09 GMT",
              "eventDescription":[{"language":"en_US","latestDescription":"retiring"}],
              "affectedEntities":[{"entityValue":"i-1"},{"entityValue":"i-2"}]}}"#;
        let Parsed::Notices(notices) = parse(body) else {
            panic!("{:?}", parse(body))
        };
        let ids: Vec<&str> = notices.iter().map(|n| n.event_id.as_str()).collect();
        assert_eq!(ids, ["h-1/i-1", "h-1/i-2"]);
        assert_eq!(notices[0].kind, InterruptionKind::ScheduledChange);
        assert_eq!(notices[0].deadline, Some(at("2027-06-05T15:10:09Z")));
        assert_eq!(
            notices[0].message,
            "AWS Health Event AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED: retiring"
        );
        let other = body.replace(r#""service":"EC2""#, r#""service":"RDS""#);
        assert!(matches!(parse(&other), Parsed::Ignored(_)));
    }

    #[test]
    fn a_capacity_reservation_warning_gives_two_minutes() {
        let body = r#"{"version":"0","id":"c-1",
            "detail-type":"EC2 Capacity Reservation Instance Interruption Warning",
            "source":"aws.ec2","time":"2025-01-01T00:00:00Z",
            "detail":{"instance-id":"i-1","instance-action":"terminate"}}"#;
        let Parsed::Notices(notices) = parse(body) else {
            panic!("{:?}", parse(body))
        };
        assert_eq!(
            notices[0].kind,
            InterruptionKind::CapacityReservationInterruption
        );
        assert_eq!(notices[0].deadline, Some(at("2025-01-01T00:02:00Z")));
    }

    /// Malformed messages are said, never a crash; JSON that is no event of ours is ignored
    /// (upstream's test sends `{"field1":"value1","field2":"value2"}`).
    #[test]
    fn malformed_and_foreign_messages() {
        for body in [
            "",
            "not json",
            r#"{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{}}"#,
            r#"{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":"vol-1"}}"#,
            r#"{"version":"0","id":"x","time":"yesterday","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":"i-1"}}"#,
            r#"{"version":"0","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":"i-1"}}"#,
        ] {
            assert!(matches!(parse(body), Parsed::Malformed(_)), "{body}");
        }
        for body in [
            r#"{"field1":"value1","field2":"value2"}"#,
            r#"{"version":"1","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":"i-1"}}"#,
            r#"{"version":"0","id":"x","detail-type":"EC2 AMI State Change","source":"aws.ec2","detail":{}}"#,
        ] {
            assert!(matches!(parse(body), Parsed::Ignored(_)), "{body}");
        }
    }
}
