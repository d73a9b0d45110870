//! Why a pod could not be placed, as typed causes per NodePool, and the sentence a person
//! reads: one clause per NodePool that refused it, in the order NodePools are tried.

use std::fmt;

use crate::requirements::{MinValuesError, Requirement, Requirements};
use crate::resources::{ResourceList, ResourceName};
use crate::scheduler::constraints::{HostPort, Protocol};
use crate::scheduler::taints::Taint;
use crate::scheduler::topology::Violation;

/// Where one of the pod's requirements comes from, to name it the way the pod spec does.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Origin {
    /// `nodeSelector: {key: value}`.
    NodeSelector(String, String),
    /// A node affinity term's requirement.
    NodeAffinity(Requirement),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::NodeSelector(key, value) => write!(f, "nodeSelector {key}={value}"),
            Origin::NodeAffinity(requirement) => write!(f, "node affinity {requirement}"),
        }
    }
}

/// Why no instance type of a NodePool can hold the pod.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Mismatch {
    /// No type satisfies this requirement of the pod.
    Requirement(Origin),
    /// Each requirement is satisfiable, but no type satisfies them all.
    Requirements(Requirements),
    /// No type has room for the requests (plus the DaemonSet overhead).
    Resources {
        requests: ResourceList,
        daemon_overhead: ResourceList,
    },
    /// The types that satisfy the requirements have no room for the requests.
    ResourcesWithRequirements {
        requirements: Requirements,
        requests: ResourceList,
        daemon_overhead: ResourceList,
    },
}

/// Why one NodePool cannot launch a NodeClaim for the pod.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Refusal {
    /// The pod does not tolerate this taint of the template.
    Taint(Taint),
    /// A DaemonSet on the NodePool's nodes binds this host port too.
    HostPort(HostPort),
    /// A pod requirement conflicts with the NodePool's requirement on the same key.
    Conflict {
        origin: Origin,
        allowed: Requirement,
    },
    /// A pod requirement uses a label the NodePool does not define.
    UndefinedLabel {
        origin: Origin,
        key: String,
        hint: Option<String>,
    },
    /// The NodePool's limit on this resource leaves no instance type that fits.
    Limit { resource: ResourceName, limit: i64 },
    /// No instance type fits.
    NoInstanceType(Mismatch),
    /// A topology rule would break.
    Topology(Violation),
    /// The instance types that fit do not cover the requirements' minValues.
    MinValues(MinValuesError),
    /// The NodePool offers no instance type compatible with its own requirements.
    NoCompatibleTypes,
}

impl Refusal {
    /// The clause for `pool`.
    pub(super) fn describe(&self, pool: &str) -> String {
        match self {
            Refusal::Taint(taint) => {
                format!("incompatible with NodePool {pool}: taint {taint} not tolerated")
            }
            Refusal::HostPort(port) => format!(
                "incompatible with NodePool {pool}: host port {}/{} is taken by a DaemonSet",
                port.port,
                protocol(port.protocol)
            ),
            Refusal::Conflict { origin, allowed } => {
                format!(
                    "incompatible with NodePool {pool}: {origin} but the NodePool requires {allowed}"
                )
            }
            Refusal::UndefinedLabel { origin, key, hint } => {
                let hint = hint
                    .as_ref()
                    .map_or_else(String::new, |h| format!(" (typo of {h}?)"));
                format!(
                    "incompatible with NodePool {pool}: {origin} needs label {key}, which neither the NodePool nor its instance types define{hint}"
                )
            }
            Refusal::Limit { resource, limit } => {
                let limit = ResourceList::new()
                    .with(resource.clone(), *limit)
                    .quantity(resource);
                format!("NodePool {pool} {resource} limit {limit} reached")
            }
            Refusal::NoInstanceType(mismatch) => describe_mismatch(mismatch, pool),
            Refusal::Topology(violation) => violation.to_string(),
            Refusal::MinValues(error) => format!("NodePool {pool}: {error}"),
            Refusal::NoCompatibleTypes => {
                format!("NodePool {pool} has no instance type compatible with its requirements")
            }
        }
    }
}

fn describe_mismatch(mismatch: &Mismatch, pool: &str) -> String {
    let with_overhead = |requests: &ResourceList, overhead: &ResourceList| {
        if overhead.is_zero() {
            format!("{requests}")
        } else {
            format!("{requests} plus daemonset overhead {overhead}")
        }
    };
    match mismatch {
        Mismatch::Requirement(origin) => {
            format!("no instance type satisfies {origin} in NodePool {pool}")
        }
        Mismatch::Requirements(requirements) => {
            format!("no instance type satisfies {requirements} in NodePool {pool}")
        }
        Mismatch::Resources {
            requests,
            daemon_overhead,
        } => format!(
            "no instance type in NodePool {pool} has room for {}",
            with_overhead(requests, daemon_overhead)
        ),
        Mismatch::ResourcesWithRequirements {
            requirements,
            requests,
            daemon_overhead,
        } => format!(
            "no instance type satisfying {requirements} in NodePool {pool} has room for {}",
            with_overhead(requests, daemon_overhead)
        ),
    }
}

fn protocol(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// Why a pod stays unschedulable.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Unschedulable {
    /// There is no NodePool at all.
    NoNodePool,
    /// Each NodePool's refusal, in the order they were tried.
    Refused(Vec<(String, Refusal)>),
    /// Its NodeClaim was planned but cannot keep minValues within the most instance types a
    /// NodeClaim lists.
    Truncated { pool: String, error: MinValuesError },
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unschedulable::NoNodePool => f.write_str("no NodePool can launch nodes"),
            Unschedulable::Refused(refusals) => {
                let mut clauses: Vec<String> = Vec::with_capacity(refusals.len());
                for (pool, refusal) in refusals {
                    let clause = refusal.describe(pool);
                    if !clauses.contains(&clause) {
                        clauses.push(clause);
                    }
                }
                f.write_str(&clauses.join("; "))
            }
            Unschedulable::Truncated { pool, error } => write!(
                f,
                "NodePool {pool} cannot keep minValues within the {} cheapest instance types: {error}",
                crate::instance_type::MAX_INSTANCE_TYPES
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::taints::TaintEffect;

    #[test]
    fn given_each_refusal_when_described_then_the_sentence_names_the_node_pool() {
        let taint = Refusal::Taint(Taint::new("dedicated", "gpu", TaintEffect::NoSchedule));
        assert_eq!(
            taint.describe("default"),
            "incompatible with NodePool default: taint dedicated=gpu:NoSchedule not tolerated"
        );
        let limit = Refusal::Limit {
            resource: ResourceName::CPU,
            limit: 100_000,
        };
        assert_eq!(
            limit.describe("default"),
            "NodePool default cpu limit 100 reached"
        );
        let selector = Refusal::NoInstanceType(Mismatch::Requirement(Origin::NodeSelector(
            "karpenter.k8s.aws/instance-family".into(),
            "p5".into(),
        )));
        assert_eq!(
            selector.describe("default"),
            "no instance type satisfies nodeSelector karpenter.k8s.aws/instance-family=p5 in NodePool default"
        );
        let conflict = Refusal::Conflict {
            origin: Origin::NodeSelector("karpenter.sh/capacity-type".into(), "spot".into()),
            allowed: Requirement::in_values("karpenter.sh/capacity-type", ["on-demand"]),
        };
        assert_eq!(
            conflict.describe("od"),
            "incompatible with NodePool od: nodeSelector karpenter.sh/capacity-type=spot but the NodePool requires karpenter.sh/capacity-type In [on-demand]"
        );
    }

    #[test]
    fn given_several_node_pools_when_combined_then_each_says_why_once() {
        let taint = Refusal::Taint(Taint::new("dedicated", "gpu", TaintEffect::NoSchedule));
        let limit = Refusal::Limit {
            resource: ResourceName::new("nodes"),
            limit: 3,
        };
        let reason = Unschedulable::Refused(vec![
            ("gpu".into(), taint),
            ("default".into(), limit.clone()),
            ("default".into(), limit),
        ]);
        assert_eq!(
            reason.to_string(),
            "incompatible with NodePool gpu: taint dedicated=gpu:NoSchedule not tolerated; NodePool default nodes limit 3 reached"
        );
    }
}
