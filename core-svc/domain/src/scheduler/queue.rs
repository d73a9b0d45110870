//! The order pods are tried in and the retry queue, as upstream's `queue.go`: largest first
//! (cpu, then memory, then oldest, then UID), and a pod that cannot be placed goes to the back
//! until a whole pass over the queue places nothing, which lets affinity and spread settle.

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::scheduler::plan::PodPlan;

/// The indices of `plans` in placement order: cpu descending, memory descending, creation
/// ascending, UID ascending, and (for identical UIDs) namespace/name.
pub(super) fn placement_order(plans: &[PodPlan<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by(|&a, &b| compare(&plans[a], &plans[b]));
    order
}

fn compare(a: &PodPlan<'_>, b: &PodPlan<'_>) -> Ordering {
    let (ra, rb) = (&a.demand.fixed, &b.demand.fixed);
    rb.cpu_millis()
        .cmp(&ra.cpu_millis())
        .then_with(|| rb.memory_bytes().cmp(&ra.memory_bytes()))
        .then_with(|| a.pod.created.cmp(&b.pod.created))
        .then_with(|| a.pod.uid.cmp(&b.pod.uid))
        .then_with(|| a.pod.id.cmp(&b.pod.id))
}

/// Pods waiting to be placed.
#[derive(Debug)]
pub(super) struct Queue {
    pods: VecDeque<usize>,
    /// For each pod, the queue length just after it was last pushed back.
    pushed_at: Vec<Option<usize>>,
}

impl Queue {
    /// A queue of `order`, for pods numbered below `count`.
    pub(super) fn new(order: Vec<usize>, count: usize) -> Self {
        Queue {
            pods: order.into(),
            pushed_at: vec![None; count],
        }
    }

    /// The next pod, or `None` when the queue is empty or the next pod was pushed back when
    /// the queue was as long as now: a full pass has placed nothing.
    pub(super) fn pop(&mut self) -> Option<usize> {
        let &next = self.pods.front()?;
        if self.pushed_at[next] == Some(self.pods.len()) {
            return None;
        }
        self.pods.pop_front()
    }

    /// Puts a pod that could not be placed at the back.
    pub(super) fn push_back(&mut self, pod: usize) {
        self.pods.push_back(pod);
        self.pushed_at[pod] = Some(self.pods.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_pods_that_never_fit_when_popping_then_one_full_pass_ends_the_queue() {
        let mut queue = Queue::new(vec![0, 1, 2], 3);
        let mut tried = Vec::new();
        while let Some(pod) = queue.pop() {
            tried.push(pod);
            queue.push_back(pod);
        }
        assert_eq!(tried, [0, 1, 2]);
    }

    #[test]
    fn given_progress_when_popping_then_pushed_back_pods_are_retried() {
        let mut queue = Queue::new(vec![0, 1, 2], 3);
        let mut tried = Vec::new();
        // Pod 0 waits for pod 2: it fits only once 2 is placed.
        let mut placed_two = false;
        while let Some(pod) = queue.pop() {
            tried.push(pod);
            match pod {
                2 => placed_two = true,
                0 if placed_two => {}
                _ => queue.push_back(pod),
            }
        }
        assert_eq!(tried, [0, 1, 2, 0, 1]);
    }
}
