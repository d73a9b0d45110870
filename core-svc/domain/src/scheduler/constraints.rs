//! What a pod asks of its neighbours: topology spread constraints, pod affinity and
//! anti-affinity terms, and host ports.

use std::net::IpAddr;

use crate::scheduler::selector::{LabelSelector, Namespaces};

/// A term with the weight the pod gives it (preferred node affinity, preferred pod
/// (anti-)affinity); heavier terms are kept longest when preferences are relaxed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Weighted<T> {
    /// The weight, 1 to 100 in the API.
    pub weight: i32,
    /// The term.
    pub term: T,
}

/// What the scheduler does when a spread constraint cannot be met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WhenUnsatisfiable {
    /// The pod does not schedule (the API default).
    #[default]
    DoNotSchedule,
    /// A preference: held until the pod cannot schedule, then relaxed.
    ScheduleAnyway,
}

/// Whether a spread constraint counts only nodes the pod's node affinity selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NodeInclusionPolicy {
    /// Only nodes matching the pod's nodeSelector and required node affinity count (the
    /// API default for `nodeAffinityPolicy`).
    #[default]
    Honor,
    /// Every node counts.
    Ignore,
}

/// A topology spread constraint (`spec.topologySpreadConstraints[]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    /// The largest allowed difference between the most and least loaded domains.
    pub max_skew: u32,
    /// The node label whose values are the domains (zone, hostname, capacity type, ...).
    pub topology_key: String,
    /// Required or preferred.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods count; `None` counts none (a null selector).
    pub label_selector: Option<LabelSelector>,
    /// When fewer domains than this exist, the global minimum is taken as zero.
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy`.
    pub node_affinity_policy: NodeInclusionPolicy,
    /// Pod label keys whose values are added to the selector (`matchLabelKeys`).
    pub match_label_keys: Vec<String>,
}

impl TopologySpreadConstraint {
    /// A required constraint over `topology_key` with `max_skew`, counting the pods `selector`
    /// matches.
    pub fn new(topology_key: &str, max_skew: u32, selector: LabelSelector) -> Self {
        TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.to_owned(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: Some(selector),
            min_domains: None,
            node_affinity_policy: NodeInclusionPolicy::Honor,
            match_label_keys: Vec::new(),
        }
    }

    /// This constraint as a preference (`ScheduleAnyway`).
    #[must_use]
    pub fn schedule_anyway(mut self) -> Self {
        self.when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
        self
    }

    /// This constraint with `minDomains`.
    #[must_use]
    pub fn with_min_domains(mut self, min_domains: u32) -> Self {
        self.min_domains = Some(min_domains);
        self
    }
}

/// A pod affinity or anti-affinity term: pods matching `label_selector` in `namespaces`, in
/// the same domain of `topology_key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    /// Which pods; `None` matches none.
    pub label_selector: Option<LabelSelector>,
    /// The node label whose values are the domains.
    pub topology_key: String,
    /// Where the pods are looked for.
    pub namespaces: Namespaces,
}

impl PodAffinityTerm {
    /// Pods matching `selector` in the pod's own namespace, per `topology_key`.
    pub fn new(topology_key: &str, selector: LabelSelector) -> Self {
        PodAffinityTerm {
            label_selector: Some(selector),
            topology_key: topology_key.to_owned(),
            namespaces: Namespaces::Own,
        }
    }
}

/// The required and preferred terms of a pod affinity or of a pod anti-affinity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    pub required: Vec<PodAffinityTerm>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred: Vec<Weighted<PodAffinityTerm>>,
}

impl PodAffinity {
    /// Whether there is no term at all.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

/// A host port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// TCP (the API default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// A port a container binds on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// The port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// The host IP; `None` (or an unspecified address) binds every address.
    pub ip: Option<IpAddr>,
}

impl HostPort {
    /// TCP `port` on every address.
    pub fn tcp(port: u16) -> Self {
        HostPort {
            port,
            protocol: Protocol::Tcp,
            ip: None,
        }
    }

    /// Whether two pods binding these ports cannot share a node (upstream `HostPort.Matches`):
    /// same port and protocol, and the same address or either binds every address.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        let everywhere = |ip: &Option<IpAddr>| ip.is_none_or(|ip| ip.is_unspecified());
        self.port == other.port
            && self.protocol == other.protocol
            && (everywhere(&self.ip) || everywhere(&other.ip) || self.ip == other.ip)
    }
}

/// The first of `wanted` that conflicts with a port in `taken`.
pub(super) fn conflicting_port(taken: &[HostPort], wanted: &[HostPort]) -> Option<HostPort> {
    wanted
        .iter()
        .find(|w| taken.iter().any(|t| t.conflicts_with(w)))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn given_host_ports_when_compared_then_wildcards_and_equal_addresses_conflict() {
        let any = HostPort::tcp(8080);
        let on = |a: u8| HostPort {
            ip: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, a))),
            ..any
        };
        assert!(any.conflicts_with(&any));
        assert!(
            any.conflicts_with(&on(1)),
            "a wildcard bind blocks every address"
        );
        assert!(on(1).conflicts_with(&on(1)));
        assert!(!on(1).conflicts_with(&on(2)));
        assert!(!any.conflicts_with(&HostPort::tcp(8081)));
        let udp = HostPort {
            protocol: Protocol::Udp,
            ..any
        };
        assert!(!any.conflicts_with(&udp));
        let unspecified = HostPort {
            ip: Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            ..any
        };
        assert!(
            unspecified.conflicts_with(&on(2)),
            "0.0.0.0 is every address"
        );
    }
}
