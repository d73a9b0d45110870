//! Interruption handling's cloud side: the SQS queue that EventBridge rules feed (upstream's
//! `--interruption-queue`), read into the notices WatchInterruptions streams to core.
//!
//! - [`parse`]: the EventBridge events, each kind as AWS documents it (pure).
//! - [`InterruptionQueue`]: one long poll at a time; notices only for this cluster's
//!   instances; a message deleted only once core acknowledged every notice it carried (or at
//!   once when it carries none: malformed, another kind of event, another cluster's
//!   instance, as upstream deletes those); a spot interruption's offering marked unavailable
//!   in the insufficient-capacity cache, as upstream does, so the next launches avoid it.

pub mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use provider_sdk::v1::{InterruptionKind, InterruptionNotice};

use crate::ec2::{Ec2, Instance, ResourceQuery};
use crate::instance::{provider_id, tags};
use crate::instance_type_provider::InstanceTypeProvider;
use crate::sqs::{AwsError, MAX_MESSAGES_PER_RECEIVE, Sqs};
use core_domain::labels::{CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use parse::{Notice, Parsed};

/// How long one ReceiveMessage waits for a message (SQS's longest long poll).
pub const LONG_POLL: Duration = Duration::from_secs(20);

/// The interruption queue of one cluster.
#[derive(Debug)]
pub struct InterruptionQueue {
    sqs: Arc<dyn Sqs>,
    ec2: Arc<dyn Ec2>,
    instance_types: Arc<InstanceTypeProvider>,
    name: String,
    cluster: String,
    url: tokio::sync::OnceCell<String>,
    pending: Mutex<Pending>,
}

/// The most messages kept waiting for core's acknowledgement. Beyond, the oldest are
/// forgotten: still on the queue, they come again (a message the queue's retention expired
/// would otherwise be remembered for ever).
pub const MAX_PENDING_MESSAGES: usize = 10_000;

/// The messages whose notices core has not acknowledged yet.
#[derive(Debug, Default)]
struct Pending {
    /// By message id: its latest receipt and the notices still unacknowledged.
    messages: BTreeMap<String, (String, BTreeSet<String>)>,
    /// Each notice's message.
    message_of: BTreeMap<String, String>,
    /// Message ids, oldest first.
    order: std::collections::VecDeque<String>,
}

impl Pending {
    /// Records `message` (again: a redelivery brings a new receipt) with its notices.
    fn insert(&mut self, message: &str, receipt: &str, ids: BTreeSet<String>) {
        for id in &ids {
            self.message_of.insert(id.clone(), message.to_owned());
        }
        if self
            .messages
            .insert(message.to_owned(), (receipt.to_owned(), ids))
            .is_none()
        {
            self.order.push_back(message.to_owned());
        }
    }

    /// Forgets the oldest messages until fewer than `limit` are left.
    fn forget_oldest_beyond(&mut self, limit: usize) {
        while self.messages.len() >= limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, ids)) = self.messages.remove(&oldest) {
                for id in ids {
                    self.message_of.remove(&id);
                }
            }
        }
    }
}

impl InterruptionQueue {
    /// The queue `name` of `cluster`, read with `sqs`; instances looked up with `ec2`;
    /// interrupted spot offerings marked on `instance_types`. Calls nothing yet.
    pub fn new(
        sqs: Arc<dyn Sqs>,
        ec2: Arc<dyn Ec2>,
        instance_types: Arc<InstanceTypeProvider>,
        name: &str,
        cluster: &str,
    ) -> Self {
        Self {
            sqs,
            ec2,
            instance_types,
            name: name.to_owned(),
            cluster: cluster.to_owned(),
            url: tokio::sync::OnceCell::new(),
            pending: Mutex::default(),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn url(&self) -> Result<&str, AwsError> {
        self.url
            .get_or_try_init(|| self.sqs.queue_url(&self.name))
            .await
            .map(String::as_str)
    }

    /// One long poll: the notices it brought about this cluster's instances (none when the
    /// poll ended empty).
    pub async fn poll(&self) -> Result<Vec<InterruptionNotice>, AwsError> {
        let url = self.url().await?.to_owned();
        let messages = self
            .sqs
            .receive(&url, MAX_MESSAGES_PER_RECEIVE, LONG_POLL)
            .await?;
        let mut out = Vec::new();
        for message in messages {
            let notices = match parse::parse(&message.body) {
                Parsed::Notices(notices) => notices,
                Parsed::Ignored(why) => {
                    tracing::debug!(message_id = %message.message_id, why, "interruption queue: nothing to do");
                    self.delete(&url, &message.receipt_handle).await;
                    continue;
                }
                Parsed::Malformed(why) => {
                    tracing::warn!(message_id = %message.message_id, why, "interruption queue: unreadable message deleted");
                    self.delete(&url, &message.receipt_handle).await;
                    continue;
                }
            };
            let ours = match self.ours(&notices).await {
                Ok(ours) => ours,
                // Kept on the queue: it comes again after the visibility timeout, and the
                // notices already gathered are not lost with it.
                Err(e) => {
                    tracing::warn!(message_id = %message.message_id, error = %e, "interruption queue: cannot look the instances up; the message comes back");
                    continue;
                }
            };
            let notices: Vec<(Notice, &Instance)> = notices
                .into_iter()
                .filter_map(|n| {
                    let instance = ours.get(&n.instance_id)?;
                    Some((n, instance))
                })
                .collect();
            if notices.is_empty() {
                tracing::debug!(message_id = %message.message_id, "interruption queue: not this cluster's instances");
                self.delete(&url, &message.receipt_handle).await;
                continue;
            }
            {
                let mut pending = self.pending();
                pending.forget_oldest_beyond(MAX_PENDING_MESSAGES);
                let ids: BTreeSet<String> =
                    notices.iter().map(|(n, _)| n.event_id.clone()).collect();
                pending.insert(&message.message_id, &message.receipt_handle, ids);
            }
            for (notice, instance) in notices {
                self.avoid_interrupted_offering(notice.kind, instance);
                let zone = instance.zone.as_deref().unwrap_or_default();
                out.push(InterruptionNotice {
                    event_id: notice.event_id,
                    kind: notice.kind as i32,
                    provider_id: provider_id(zone, &instance.id),
                    time: notice.time.map(timestamp),
                    deadline: notice.deadline.map(timestamp),
                    message: notice.message,
                });
            }
        }
        Ok(out)
    }

    /// The instances among the notices' that carry this cluster's tag, by id. EC2 refuses a
    /// whole DescribeInstances when one id is unknown: then each is asked for alone, so one
    /// long-gone instance does not hide the others of a health event.
    async fn ours(&self, notices: &[Notice]) -> Result<BTreeMap<String, Instance>, AwsError> {
        let ids: BTreeSet<&str> = notices.iter().map(|n| n.instance_id.as_str()).collect();
        let found = match self
            .ec2
            .describe_instances(&ResourceQuery::ids(ids.clone()))
            .await
        {
            Ok(found) => found,
            Err(e) if e.is_not_found() && ids.len() > 1 => {
                let mut found = Vec::new();
                for id in ids {
                    match self.ec2.describe_instances(&ResourceQuery::ids([id])).await {
                        Ok(one) => found.extend(one),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
                found
            }
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(found
            .into_iter()
            .filter(|i| tags::belongs_to(&i.tags, &self.cluster))
            .map(|i| (i.id.clone(), i))
            .collect())
    }

    /// A spot interruption says the spot offering of the instance's type and zone is short:
    /// marked unavailable for the insufficient-capacity TTL, as upstream does. A reservation
    /// interrupted says the same of its reserved offering.
    fn avoid_interrupted_offering(&self, kind: InterruptionKind, instance: &Instance) {
        let capacity_type = match kind {
            InterruptionKind::SpotInterruption => CAPACITY_TYPE_SPOT,
            InterruptionKind::CapacityReservationInterruption => CAPACITY_TYPE_RESERVED,
            _ => return,
        };
        if let Some(zone) = &instance.zone {
            self.instance_types
                .mark_unavailable(&instance.instance_type, zone, capacity_type);
        }
    }

    /// Core acted on these notices: a message whose every notice is acknowledged is deleted.
    /// Ids never sent, or acknowledged before, are ignored. A message whose deletion fails is
    /// kept, so the same acknowledgement, sent again, deletes it; the others are deleted all
    /// the same, and the first failure is answered.
    pub async fn acknowledge(&self, event_ids: &[String]) -> Result<(), AwsError> {
        let done: Vec<(String, String, BTreeSet<String>)> = {
            let mut pending = self.pending();
            let mut done = Vec::new();
            let mut acknowledged: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for id in event_ids {
                let Some(message) = pending.message_of.get(id).cloned() else {
                    continue;
                };
                acknowledged
                    .entry(message.clone())
                    .or_default()
                    .insert(id.clone());
                let finished = pending.messages.get_mut(&message).is_some_and(|(_, left)| {
                    left.remove(id);
                    left.is_empty()
                });
                if finished && let Some((receipt, _)) = pending.messages.remove(&message) {
                    let ids = acknowledged.remove(&message).unwrap_or_default();
                    pending.message_of.retain(|_, of| *of != message);
                    done.push((message, receipt, ids));
                }
            }
            done
        };
        if done.is_empty() {
            return Ok(());
        }
        let url = self.url().await?.to_owned();
        let mut failure = None;
        for (message, receipt, ids) in done {
            if let Err(e) = self.sqs.delete(&url, &receipt).await {
                tracing::warn!(message_id = %message, error = %e, "interruption queue: delete failed; kept for the next acknowledgement");
                self.pending().insert(&message, &receipt, ids);
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    async fn delete(&self, url: &str, receipt: &str) {
        if let Err(e) = self.sqs.delete(url, receipt).await {
            tracing::warn!(error = %e, "interruption queue: delete failed; the message comes back");
        }
    }
}

fn timestamp(time: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(time)
}

#[cfg(test)]
mod tests;
