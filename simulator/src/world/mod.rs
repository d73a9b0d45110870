//! The rest of the cluster, as stand-ins: what the kube-scheduler, the kubelets, the cloud
//! node lifecycle controller, the pod garbage collector and the Deployment and DaemonSet
//! controllers would do. Core's controllers never see them; they see what they write.
//!
//! - [`kubelet`]: Nodes join `registrationDelay` after their instance runs, become Ready, run
//!   their pods and finish their graceful terminations; startup taints go once Ready; a Node
//!   whose instance is gone is deleted; pods of a Node that no longer exists are deleted.
//! - [`node_lifecycle`]: NotReady Nodes get the `not-ready` / `unreachable` taints, and their
//!   pods are evicted once their toleration runs out.
//! - [`workloads`]: Deployments keep their replicas (rolling a changed template), DaemonSets
//!   one pod per matching Node.
//! - [`scheduler`]: pending pods are bound to Ready nodes where they fit, by the domain's own
//!   fit logic (resources, selectors, affinity, taints, topology spread), each to the Node the
//!   default profile's score plugins rate highest ([`scoring`]) or, as a scenario option, the
//!   first; the others get `PodScheduled=False` with reason `Unschedulable`, which is what the
//!   provisioner reads.
//!
//! Each stand-in writes only when something changes, so a quiet cluster stays quiet and core's
//! controllers run only on their own schedule.

pub mod kubelet;
pub mod node_lifecycle;
pub mod scheduler;
pub mod scoring;
pub mod workloads;

use core_svc::cluster::SlimPod;
use std::sync::Arc;
use std::time::Duration;

use core_domain::labels::LabelPolicy;
use core_svc::cluster::{Cluster, ClusterError, InMemoryCluster, Snapshot};
use core_svc::controllers::provisioning::memo::NodeMemo;
// The stand-ins judge pods and Nodes by the same rules as core's controllers.
pub use core_svc::controllers::provisioning::selection::is_daemon_set_pod;
pub use core_svc::objects::{is_node_ready, is_pod_ready, is_terminal, is_terminating, name_of};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;

use crate::budgets;
use crate::cloud::SimCloud;

/// How long a `registrationFailures` event's broken bootstrap lasts.
pub const REGISTRATION_FAILURES_FOR: Duration = Duration::from_secs(10 * 60);

/// Everything the stand-ins need.
#[derive(Debug)]
pub struct World {
    cluster: Arc<InMemoryCluster>,
    cloud: SimCloud,
    timing: kubelet::Timing,
    label_policy: LabelPolicy,
    deployments: workloads::Deployments,
    /// The kube-scheduler's Nodes, converted by earlier cycles.
    scheduled_nodes: NodeMemo,
    /// How the kube-scheduler chooses among the Nodes a pod fits.
    kube_scheduler: scoring::KubeScheduler,
    /// Instances whose kubelet never joins.
    registrations: kubelet::FailingRegistrations,
    /// Set when the last step changed nothing: the cluster's revision and the cloud's
    /// fingerprint it saw, and when a kubelet acts next by the clock. While all three hold,
    /// a step would change nothing again and is skipped.
    fixpoint: Option<Fixpoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fixpoint {
    revision: u64,
    cloud: [usize; 4],
    next_due: Option<Timestamp>,
}

impl World {
    /// The stand-ins of a cluster over `cloud`.
    pub fn new(
        cluster: Arc<InMemoryCluster>,
        cloud: SimCloud,
        launch_delay: Duration,
        registration_delay: Duration,
        label_policy: LabelPolicy,
    ) -> Self {
        Self {
            cluster,
            cloud,
            timing: kubelet::Timing {
                launch_delay,
                registration_delay,
            },
            label_policy,
            deployments: workloads::Deployments::default(),
            scheduled_nodes: NodeMemo::new(),
            kube_scheduler: scoring::KubeScheduler::default(),
            registrations: kubelet::FailingRegistrations::default(),
            fixpoint: None,
        }
    }

    /// This world with the kube-scheduler choosing as `profile` says.
    #[must_use]
    pub fn with_kube_scheduler(mut self, profile: scoring::KubeScheduler) -> Self {
        self.kube_scheduler = profile;
        self
    }

    /// Of the instances due to join the cluster in the next [`REGISTRATION_FAILURES_FOR`], the
    /// first `count` never do (a broken bootstrap, fixed by then).
    pub fn fail_registrations(&mut self, count: usize, now: Timestamp) {
        self.fixpoint = None;
        self.registrations.pending = self.registrations.pending.saturating_add(count);
        self.registrations.until = now.checked_add(REGISTRATION_FAILURES_FOR).ok();
    }

    /// Creates or replaces a Deployment (its template may change: the pods roll).
    pub fn apply_deployment(&mut self, deployment: Deployment) {
        self.fixpoint = None;
        self.deployments.apply(deployment);
    }

    /// Sets a Deployment's replicas; false when there is no such Deployment.
    pub fn scale_deployment(&mut self, namespace: &str, name: &str, replicas: i32) -> bool {
        self.fixpoint = None;
        self.deployments.scale(namespace, name, replicas)
    }

    /// Deletes a Deployment; its pods go with it. False when there is no such Deployment.
    pub fn delete_deployment(&mut self, namespace: &str, name: &str) -> bool {
        self.fixpoint = None;
        self.deployments.delete(namespace, name)
    }

    /// What controls `pod`, for PodDisruptionBudgets: a Deployment with its replicas, another
    /// controller, or none.
    pub fn controller_of(&self, pod: &SlimPod) -> budgets::Controller {
        if let Some((key, replicas)) = self.deployments.owner_of(pod) {
            return budgets::Controller::Scaled { key, replicas };
        }
        let controlled = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.controller == Some(true));
        if controlled {
            budgets::Controller::Other
        } else {
            budgets::Controller::None
        }
    }

    /// One step of every stand-in at `now`.
    pub async fn step(&mut self, now: Timestamp) -> Result<(), ClusterError> {
        let revision = self.cluster.revision();
        let cloud = self.cloud.instances_fingerprint();
        if let Some(fixpoint) = self.fixpoint
            && fixpoint.revision == revision
            && fixpoint.cloud == cloud
            && fixpoint.next_due.is_none_or(|due| now < due)
        {
            return Ok(());
        }
        self.fixpoint = None;
        let snapshot = self.cluster.snapshot().await?;
        let instances = self.cloud.instances().await;
        kubelet::step(
            &self.cluster,
            &snapshot,
            &instances,
            self.timing,
            &mut self.registrations,
            now,
        )
        .await;
        node_lifecycle::step(&self.cluster, &snapshot, now).await;
        self.deployments.reconcile(&self.cluster, &snapshot).await;
        workloads::daemon_sets(&self.cluster, &snapshot).await;
        let snapshot = self.cluster.snapshot().await?;
        scheduler::step(
            &self.cluster,
            &self.scheduled_nodes,
            &snapshot,
            &self.label_policy,
            self.kube_scheduler,
            now,
        )
        .await;
        if self.cluster.revision() == revision && self.cloud.instances_fingerprint() == cloud {
            self.fixpoint = Some(Fixpoint {
                revision,
                cloud,
                next_due: kubelet::next_due(
                    &snapshot,
                    &instances,
                    self.timing,
                    &self.registrations.failed,
                    now,
                )
                .into_iter()
                .chain(node_lifecycle::next_due(&snapshot, now))
                .min(),
            });
        }
        Ok(())
    }
}

impl World {
    /// The first time after `now` at which a stand-in acts by the clock alone (see
    /// [`kubelet::next_due`]), given the cluster as `snapshot` holds it.
    pub async fn next_due(&self, snapshot: &Snapshot, now: Timestamp) -> Option<Timestamp> {
        if let Some(fixpoint) = self.fixpoint
            && fixpoint.revision == self.cluster.revision()
            && fixpoint.cloud == self.cloud.instances_fingerprint()
        {
            return fixpoint.next_due.filter(|due| now < *due);
        }
        let instances = self.cloud.instances().await;
        kubelet::next_due(
            snapshot,
            &instances,
            self.timing,
            &self.registrations.failed,
            now,
        )
        .into_iter()
        .chain(node_lifecycle::next_due(snapshot, now))
        .min()
    }
}

/// Logs a failed stand-in write. Conflicts and vanished objects are races with core's
/// controllers, settled on the next step; anything else is worth a warning.
fn note<T>(result: Result<T, ClusterError>, what: impl FnOnce() -> String) {
    match result {
        Ok(_) => {}
        Err(error) if error.is_conflict() || error.is_not_found() => {
            tracing::debug!(%error, "{}", what());
        }
        Err(error) => tracing::warn!(%error, "{}", what()),
    }
}

fn namespace_of(pod: &SlimPod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The node a pod is bound to.
pub fn bound_node(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|name| !name.is_empty())
}

/// The pod's phase.
pub fn phase(pod: &SlimPod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
}
