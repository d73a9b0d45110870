//! The pod mixes the scheduler benchmarks run, deterministic for a seed: deployments of varied
//! sizes, each deployment's pods identical, as real pending batches are.
//!
//! - [`Mix::Plain`]: no constraints beyond resources.
//! - [`Mix::ZoneSpread`]: each deployment spreads over zones (maxSkew 1, DoNotSchedule).
//! - [`Mix::HostnameSpread`]: each deployment spreads over nodes (maxSkew 1, DoNotSchedule).
//! - [`Mix::HostnameAntiAffinity`]: no two pods of a deployment share a node.
//!
//! The pods go to one NodePool, `default`, either over the whole catalogue ([`Pool::Any`]) or
//! restricted as a typical production NodePool is ([`Pool::Typical`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use core_domain::hash::SplitMix64;
use core_domain::instance_type::InstanceType;
use core_domain::labels::{LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use core_domain::quantity::Quantity;
use core_domain::requirements::{Operator, Requirement, Requirements};
use core_domain::resources::ResourceList;
use core_domain::scheduler::{
    LabelSelector, NodePoolSpec, Pod, PodAffinityTerm, PreferencePolicy, SchedulingInput,
    TopologySpreadConstraint,
};

/// A benchmark workload shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Resources only.
    Plain,
    /// Zone topology spread.
    ZoneSpread,
    /// Hostname topology spread.
    HostnameSpread,
    /// Hostname anti-affinity within each deployment.
    HostnameAntiAffinity,
}

impl Mix {
    /// Every mix, in report order.
    pub const ALL: [Mix; 4] = [
        Mix::Plain,
        Mix::ZoneSpread,
        Mix::HostnameSpread,
        Mix::HostnameAntiAffinity,
    ];
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mix::Plain => "plain",
            Mix::ZoneSpread => "zone-spread",
            Mix::HostnameSpread => "hostname-spread",
            Mix::HostnameAntiAffinity => "hostname-anti-affinity",
        })
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mix::ALL
            .into_iter()
            .find(|m| m.to_string() == s)
            .ok_or_else(|| format!("unknown mix {s:?}; one of: plain, zone-spread, hostname-spread, hostname-anti-affinity"))
    }
}

/// The NodePool a benchmark's pods go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Every instance type of the catalogue, spot and on-demand.
    Any,
    /// A typical production NodePool: categories c, m and r, generation above 2, amd64,
    /// on-demand only.
    Typical,
}

impl Pool {
    /// Every NodePool, in report order.
    pub const ALL: [Pool; 2] = [Pool::Any, Pool::Typical];

    /// The NodePool `default` over `instance_types` with this pool's requirements.
    pub fn node_pool(self, instance_types: &[Arc<InstanceType>]) -> NodePoolSpec {
        let pool = NodePoolSpec::new("default", instance_types.to_vec().into());
        match self {
            Pool::Any => pool,
            Pool::Typical => pool.with_requirements(&typical_requirements()),
        }
    }
}

/// `c`, `m`, `r`, generation > 2, amd64, on-demand.
fn typical_requirements() -> Requirements {
    let generation = Requirement::new(
        aws_plugin::labels::LABEL_INSTANCE_GENERATION,
        Operator::Gt,
        &["2"],
        None,
    );
    [
        Ok(Requirement::in_values(
            aws_plugin::labels::LABEL_INSTANCE_CATEGORY,
            ["c", "m", "r"],
        )),
        generation,
        Ok(Requirement::in_values(LABEL_ARCH, ["amd64"])),
        Ok(Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"])),
    ]
    .into_iter()
    // The requirements are constants known to be valid; a mistake would show as a NodePool
    // allowing more, which the tests catch, rather than as a panic in benchmark code.
    .filter_map(Result::ok)
    .collect()
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pool::Any => "any",
            Pool::Typical => "typical",
        })
    }
}

impl FromStr for Pool {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pool::ALL
            .into_iter()
            .find(|p| p.to_string() == s)
            .ok_or_else(|| format!("unknown NodePool {s:?}; one of: any, typical"))
    }
}

/// Pod sizes (cpu, memory) a deployment may have: the spread of real web, worker and batch pods.
const SIZES: [(&str, &str); 8] = [
    ("100m", "128Mi"),
    ("250m", "512Mi"),
    ("500m", "1Gi"),
    ("1", "2Gi"),
    ("1500m", "3Gi"),
    ("2", "4Gi"),
    ("4", "8Gi"),
    ("1", "8Gi"),
];

/// `pods` pending pods of `mix`, in deployments of 10 to 100 replicas whose sizes and replica
/// counts derive from `seed`.
pub fn pods(mix: Mix, pods: usize, seed: u64) -> Vec<Pod> {
    let mut random = SplitMix64::new(seed);
    let mut out = Vec::with_capacity(pods);
    let mut deployment = 0;
    while out.len() < pods {
        let replicas = (10 + random.next_u64() % 91) as usize;
        let (cpu, memory) = SIZES[(random.next_u64() % SIZES.len() as u64) as usize];
        let requests = requests(cpu, memory);
        let app = format!("app-{deployment}");
        let selector = LabelSelector::matching([("app", app.as_str())]);
        for replica in 0..replicas.min(pods - out.len()) {
            let mut pod = Pod::new("default", &format!("{app}-{replica}"))
                .with_label("app", &app)
                .with_requests(requests.clone())
                .with_created(out.len() as i64);
            pod = match mix {
                Mix::Plain => pod,
                Mix::ZoneSpread => pod.with_spread(TopologySpreadConstraint::new(
                    LABEL_TOPOLOGY_ZONE,
                    1,
                    selector.clone(),
                )),
                Mix::HostnameSpread => pod.with_spread(TopologySpreadConstraint::new(
                    LABEL_HOSTNAME,
                    1,
                    selector.clone(),
                )),
                Mix::HostnameAntiAffinity => {
                    pod.with_anti_affinity(PodAffinityTerm::new(LABEL_HOSTNAME, selector.clone()))
                }
            };
            out.push(pod);
        }
        deployment += 1;
    }
    out
}

fn requests(cpu: &str, memory: &str) -> ResourceList {
    // The sizes above are constants known to parse; a typo would show as zero requests, which
    // the tests catch, rather than as a panic in benchmark code.
    let quantity = |s: &str| Quantity::parse(s).unwrap_or_default();
    ResourceList::from_quantities([("cpu", quantity(cpu)), ("memory", quantity(memory))])
        .unwrap_or_default()
}

/// A scheduling input: `pods` onto one unconstrained NodePool `default` over `instance_types`,
/// no existing nodes, AWS's well-known labels.
pub fn input(pods: Vec<Pod>, instance_types: &[Arc<InstanceType>]) -> SchedulingInput {
    input_for(pods, instance_types, Pool::Any)
}

/// [`input`] with the NodePool `pool`.
pub fn input_for(
    pods: Vec<Pod>,
    instance_types: &[Arc<InstanceType>],
    pool: Pool,
) -> SchedulingInput {
    SchedulingInput {
        pods,
        existing_nodes: Vec::new(),
        node_pools: vec![pool.node_pool(instance_types)],
        daemon_set_pods: Vec::new(),
        label_policy: aws_plugin::labels::label_policy(),
        preference_policy: PreferencePolicy::Respect,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_have_the_asked_size_and_are_deterministic() {
        for mix in Mix::ALL {
            let a = pods(mix, 1000, 42);
            assert_eq!(a.len(), 1000);
            assert_eq!(a, pods(mix, 1000, 42));
            assert_ne!(a, pods(mix, 1000, 43));
            assert_eq!(mix.to_string().parse::<Mix>(), Ok(mix));
        }
        for pool in Pool::ALL {
            assert_eq!(pool.to_string().parse::<Pool>(), Ok(pool));
        }
        assert_eq!(
            Pool::Typical.node_pool(&[]).requirements.len(),
            4,
            "every typical requirement is valid"
        );
        let plain = pods(Mix::Plain, 10, 1);
        assert!(
            plain
                .iter()
                .all(|p| p.requests.cpu_millis() > 0 && p.requests.memory_bytes() > 0)
        );
    }
}
