//! Kubernetes objects into the scheduler's domain types: Pods (and DaemonSet pod templates)
//! into [`Pod`], Nodes and NodeClaims into [`ExistingNode`], NodePools into [`NodePoolSpec`].
//!
//! Pure and total: anything the domain cannot represent (a quantity that does not parse, an
//! unknown operator or effect, a port out of range) is an [`InvalidField`] naming the field,
//! never a panic; the caller skips that object and says so.
//!
//! Approximations, each on a field the scheduler cannot resolve alone:
//!
//! - a pod (anti-)affinity term's `namespaceSelector` that is not empty is taken to select
//!   every namespace (namespaces are not in the snapshot); for anti-affinity, the common
//!   case, that errs on the side of keeping pods apart;
//! - pod-level `spec.resources` (beta in Kubernetes 1.34) and `nodeTaintsPolicy` are ignored,
//!   as the scheduler does not support them yet; node affinity `matchFields` are ignored, as
//!   upstream does.

use crate::cluster::{SlimContainer, SlimPod, SlimPodSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use core_domain::instance_type::InstanceType;
use core_domain::labels::{
    LABEL_INSTANCE_TYPE, LABEL_NODE_INITIALIZED, LABEL_NODEPOOL, LabelPolicy, node_class_label_key,
};
use core_domain::quantity::Quantity;
use core_domain::requirements::{NodeSelectorRequirement, Operator, Requirements};
use core_domain::resources::{
    ContainerResources, PodResources, Quantities, ResourceList, ResourceName,
};
use core_domain::scheduler::{
    ExistingNode, HostPort, LabelSelector, Limits, Namespaces, NodeInclusionPolicy, NodePoolSpec,
    Pod, PodAffinity, PodAffinityTerm, Protocol, SelectorExpression, SelectorOperator, Taint,
    TaintEffect, Toleration, TolerationOperator, TopologySpreadConstraint, Weighted,
    WhenUnsatisfiable,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as KubeLabelSelector;
use karpenter_api::nodeclaim::CONDITION_INITIALIZED;
use karpenter_api::{NodeClaim, NodePool, NodeSelectorRequirementWithMinValues, condition};

/// A field the scheduler cannot read, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    /// The field's path (`spec.containers[0].resources.requests.cpu`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidField {
    fn new(field: impl Into<String>, message: impl ToString) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// A pod as the scheduler sees it. Its labels, UID and creation time come from the metadata;
/// a pod without a UID (not from an API server) is identified by `namespace/name`.
pub fn pod(pod: &SlimPod) -> Result<Pod, InvalidField> {
    let meta = &pod.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or_default();
    let empty = SlimPodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    let mut out = pod_spec(namespace, name, spec, "spec")?;
    if let Some(uid) = &meta.uid {
        out.uid.clone_from(uid);
    }
    out.created = meta
        .creation_timestamp
        .as_ref()
        .map_or(0, |time| time.0.as_second());
    out.labels = meta.labels.clone().unwrap_or_default();
    Ok(out)
}

/// The pod a DaemonSet runs on each node, from its pod template: what it adds to every node
/// it would run on.
pub fn daemon_set_pod(daemon_set: &DaemonSet) -> Result<Pod, InvalidField> {
    let meta = &daemon_set.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or_default();
    let template = daemon_set.spec.as_ref().map(|spec| &spec.template);
    // A DaemonSet's template is read as its pods are: a handful per pass, so the copy is
    // cheap.
    let spec = template
        .and_then(|template| template.spec.clone())
        .map(SlimPodSpec::from)
        .unwrap_or_default();
    let mut out = pod_spec(namespace, name, &spec, "spec.template.spec")?;
    out.labels = template
        .and_then(|template| template.metadata.as_ref())
        .and_then(|meta| meta.labels.clone())
        .unwrap_or_default();
    Ok(out)
}

/// Refuses a pod that constrains a label Karpenter may not provision for (upstream
/// `Provisioner.Validate`: `kubernetes.io/hostname`, keys in a restricted domain that are not
/// well known): it would make a NodeClaim the API refuses.
pub fn check_restricted_labels(pod: &SlimPod, policy: &LabelPolicy) -> Result<(), InvalidField> {
    let Some(spec) = &pod.spec else {
        return Ok(());
    };
    let check = |field: String, key: &str| {
        policy
            .is_restricted_label(key)
            .map_err(|error| InvalidField::new(field, error))
    };
    for key in spec.node_selector.iter().flatten().map(|(key, _)| key) {
        check(format!("spec.nodeSelector.{key}"), key)?;
    }
    let Some(node_affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok(());
    };
    let path = "spec.affinity.nodeAffinity";
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .iter()
        .flat_map(|selector| selector.node_selector_terms.iter())
        .enumerate()
        .map(|(i, term)| {
            (
                format!(
                    "{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                ),
                term,
            )
        });
    let preferred = node_affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, term)| {
            (
                format!("{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
                &term.preference,
            )
        });
    for (term_path, term) in required.chain(preferred) {
        for (j, expression) in term.match_expressions.iter().flatten().enumerate() {
            check(
                format!("{term_path}.matchExpressions[{j}].key"),
                &expression.key,
            )?;
        }
    }
    Ok(())
}

fn pod_spec(
    namespace: &str,
    name: &str,
    spec: &SlimPodSpec,
    path: &str,
) -> Result<Pod, InvalidField> {
    let mut out = Pod::new(namespace, name);
    out.requests = pod_resources(spec, path)?.requests();
    out.node_selector = spec.node_selector.clone().unwrap_or_default();
    if let Some(affinity) = &spec.affinity {
        let path = format!("{path}.affinity");
        if let Some(node_affinity) = &affinity.node_affinity {
            let path = format!("{path}.nodeAffinity");
            if let Some(required) =
                &node_affinity.required_during_scheduling_ignored_during_execution
            {
                for (i, term) in required.node_selector_terms.iter().enumerate() {
                    out.required_node_affinity.push(node_selector_term(
                        &format!("{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"),
                        term,
                    )?);
                }
            }
            for (i, preferred) in node_affinity
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                out.preferred_node_affinity.push(Weighted {
                    weight: preferred.weight,
                    term: node_selector_term(
                        &format!(
                            "{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                        ),
                        &preferred.preference,
                    )?,
                });
            }
        }
        if let Some(affinity) = &affinity.pod_affinity {
            out.pod_affinity = pod_affinity(
                &format!("{path}.podAffinity"),
                affinity
                    .required_during_scheduling_ignored_during_execution
                    .as_deref(),
                affinity
                    .preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
            )?;
        }
        if let Some(anti_affinity) = &affinity.pod_anti_affinity {
            out.pod_anti_affinity = pod_affinity(
                &format!("{path}.podAntiAffinity"),
                anti_affinity
                    .required_during_scheduling_ignored_during_execution
                    .as_deref(),
                anti_affinity
                    .preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
            )?;
        }
    }
    for (i, kube) in spec.tolerations.iter().flatten().enumerate() {
        out.tolerations
            .push(toleration(&format!("{path}.tolerations[{i}]"), kube)?);
    }
    for (i, kube) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        out.topology_spread_constraints.push(spread(
            &format!("{path}.topologySpreadConstraints[{i}]"),
            kube,
        )?);
    }
    out.host_ports = host_ports(spec, path)?;
    Ok(out)
}

/// The pod's containers' resources, for [`PodResources::requests`].
fn pod_resources(spec: &SlimPodSpec, path: &str) -> Result<PodResources, InvalidField> {
    let container = |kube: &SlimContainer, path: String| -> Result<_, InvalidField> {
        let resources = kube.resources.as_ref();
        let empty = BTreeMap::new();
        Ok(ContainerResources {
            requests: quantities(
                &format!("{path}.resources.requests"),
                resources
                    .and_then(|r| r.requests.as_ref())
                    .unwrap_or(&empty),
            )?,
            limits: quantities(
                &format!("{path}.resources.limits"),
                resources.and_then(|r| r.limits.as_ref()).unwrap_or(&empty),
            )?,
            restart_policy_always: kube.restart_policy.as_deref() == Some("Always"),
        })
    };
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| container(c, format!("{path}.containers[{i}]")))
        .collect::<Result<_, _>>()?;
    let init_containers = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| container(c, format!("{path}.initContainers[{i}]")))
        .collect::<Result<_, _>>()?;
    let overhead = match &spec.overhead {
        Some(overhead) => quantities(&format!("{path}.overhead"), overhead)?,
        None => Quantities::new(),
    };
    Ok(PodResources {
        init_containers,
        containers,
        overhead,
    })
}

/// A Kubernetes quantity, exactly.
pub fn quantity(field: &str, value: &KubeQuantity) -> Result<Quantity, InvalidField> {
    Quantity::parse(&value.0).map_err(|error| InvalidField::new(field, error))
}

/// A Kubernetes resource list as exact quantities; `path` names the list.
pub fn quantities(
    path: &str,
    list: &BTreeMap<String, KubeQuantity>,
) -> Result<Quantities, InvalidField> {
    list.iter()
        .map(|(name, value)| {
            // The field's path is spelled only for an error: lists are read on every pass.
            let parsed = Quantity::parse(&value.0)
                .map_err(|error| InvalidField::new(format!("{path}.{name}"), error))?;
            Ok((ResourceName::new(name), parsed))
        })
        .collect()
}

/// A Kubernetes resource list in the scheduler's units; `path` names the list.
pub fn resource_list(
    path: &str,
    list: &BTreeMap<String, KubeQuantity>,
) -> Result<ResourceList, InvalidField> {
    let exact = quantities(path, list)?;
    ResourceList::from_quantities(&exact).map_err(|error| InvalidField::new(path, error))
}

fn node_selector_term(
    path: &str,
    term: &core::NodeSelectorTerm,
) -> Result<Requirements, InvalidField> {
    term.match_expressions
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, expression)| {
            let field = format!("{path}.matchExpressions[{i}]");
            let operator = expression
                .operator
                .parse::<Operator>()
                .map_err(|error| InvalidField::new(format!("{field}.operator"), error))?;
            NodeSelectorRequirement {
                key: expression.key.clone(),
                operator,
                values: expression.values.clone().unwrap_or_default(),
                min_values: None,
            }
            .to_requirement()
            .map_err(|error| InvalidField::new(field, error))
        })
        .collect()
}

/// A NodePool's or NodeClaim's requirements; `path` names the list.
pub fn requirements(
    path: &str,
    list: &[NodeSelectorRequirementWithMinValues],
) -> Result<Requirements, InvalidField> {
    list.iter()
        .enumerate()
        .map(|(i, requirement)| {
            let field = format!("{path}[{i}]");
            let min_values = requirement
                .min_values
                .map(u32::try_from)
                .transpose()
                .map_err(|error| InvalidField::new(format!("{field}.minValues"), error))?;
            NodeSelectorRequirement {
                key: requirement.key.clone(),
                operator: requirement.operator,
                values: requirement.values.clone(),
                min_values,
            }
            .to_requirement()
            .map_err(|error| InvalidField::new(field, error))
        })
        .collect()
}

fn pod_affinity(
    path: &str,
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
) -> Result<PodAffinity, InvalidField> {
    let required_path = format!("{path}.requiredDuringSchedulingIgnoredDuringExecution");
    let preferred_path = format!("{path}.preferredDuringSchedulingIgnoredDuringExecution");
    Ok(PodAffinity {
        required: required
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, term)| pod_affinity_term(&format!("{required_path}[{i}]"), term))
            .collect::<Result<_, _>>()?,
        preferred: preferred
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, weighted)| {
                Ok(Weighted {
                    weight: weighted.weight,
                    term: pod_affinity_term(
                        &format!("{preferred_path}[{i}].podAffinityTerm"),
                        &weighted.pod_affinity_term,
                    )?,
                })
            })
            .collect::<Result<_, _>>()?,
    })
}

fn pod_affinity_term(
    path: &str,
    term: &core::PodAffinityTerm,
) -> Result<PodAffinityTerm, InvalidField> {
    let listed: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
    let namespaces = match (&term.namespace_selector, listed.is_empty()) {
        (Some(_), _) => Namespaces::All,
        (None, false) => Namespaces::Listed(listed),
        (None, true) => Namespaces::Own,
    };
    Ok(PodAffinityTerm {
        label_selector: term
            .label_selector
            .as_ref()
            .map(|selector| label_selector(&format!("{path}.labelSelector"), selector))
            .transpose()?,
        topology_key: term.topology_key.clone(),
        namespaces,
    })
}

fn label_selector(path: &str, selector: &KubeLabelSelector) -> Result<LabelSelector, InvalidField> {
    let match_expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, expression)| {
            let operator = match expression.operator.as_str() {
                "In" => SelectorOperator::In,
                "NotIn" => SelectorOperator::NotIn,
                "Exists" => SelectorOperator::Exists,
                "DoesNotExist" => SelectorOperator::DoesNotExist,
                other => {
                    return Err(InvalidField::new(
                        format!("{path}.matchExpressions[{i}].operator"),
                        format!("unknown operator {other:?}"),
                    ));
                }
            };
            Ok(SelectorExpression {
                key: expression.key.clone(),
                operator,
                values: expression.values.clone().unwrap_or_default(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(LabelSelector {
        match_labels: selector.match_labels.clone().unwrap_or_default(),
        match_expressions,
    })
}

fn taint_effect(field: &str, effect: &str) -> Result<TaintEffect, InvalidField> {
    match effect {
        "NoSchedule" => Ok(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(TaintEffect::NoExecute),
        other => Err(InvalidField::new(
            field,
            format!("unknown taint effect {other:?}"),
        )),
    }
}

/// A taint; `path` names it.
pub fn taint(path: &str, taint: &core::Taint) -> Result<Taint, InvalidField> {
    Ok(Taint::new(
        &taint.key,
        taint.value.as_deref().unwrap_or_default(),
        taint_effect(&format!("{path}.effect"), &taint.effect)?,
    ))
}

fn taints(path: &str, list: &[core::Taint]) -> Result<Vec<Taint>, InvalidField> {
    list.iter()
        .enumerate()
        .map(|(i, kube)| taint(&format!("{path}[{i}]"), kube))
        .collect()
}

fn toleration(path: &str, kube: &core::Toleration) -> Result<Toleration, InvalidField> {
    let operator = match kube.operator.as_deref() {
        None | Some("" | "Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(other) => {
            return Err(InvalidField::new(
                format!("{path}.operator"),
                format!("unknown toleration operator {other:?}"),
            ));
        }
    };
    let effect = match kube.effect.as_deref() {
        None | Some("") => None,
        Some(effect) => Some(taint_effect(&format!("{path}.effect"), effect)?),
    };
    Ok(Toleration {
        key: kube.key.clone().unwrap_or_default(),
        operator,
        value: kube.value.clone().unwrap_or_default(),
        effect,
    })
}

fn spread(
    path: &str,
    kube: &core::TopologySpreadConstraint,
) -> Result<TopologySpreadConstraint, InvalidField> {
    let max_skew = u32::try_from(kube.max_skew)
        .ok()
        .filter(|skew| *skew > 0)
        .ok_or_else(|| InvalidField::new(format!("{path}.maxSkew"), "must be greater than 0"))?;
    let when_unsatisfiable = match kube.when_unsatisfiable.as_str() {
        "" | "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        other => {
            return Err(InvalidField::new(
                format!("{path}.whenUnsatisfiable"),
                format!("unknown value {other:?}"),
            ));
        }
    };
    let min_domains = kube
        .min_domains
        .map(|min| u32::try_from(min).ok().filter(|min| *min > 0))
        .map(|min| {
            min.ok_or_else(|| {
                InvalidField::new(format!("{path}.minDomains"), "must be greater than 0")
            })
        })
        .transpose()?;
    let node_affinity_policy = match kube.node_affinity_policy.as_deref() {
        None | Some("" | "Honor") => NodeInclusionPolicy::Honor,
        Some("Ignore") => NodeInclusionPolicy::Ignore,
        Some(other) => {
            return Err(InvalidField::new(
                format!("{path}.nodeAffinityPolicy"),
                format!("unknown value {other:?}"),
            ));
        }
    };
    Ok(TopologySpreadConstraint {
        max_skew,
        topology_key: kube.topology_key.clone(),
        when_unsatisfiable,
        label_selector: kube
            .label_selector
            .as_ref()
            .map(|selector| label_selector(&format!("{path}.labelSelector"), selector))
            .transpose()?,
        min_domains,
        node_affinity_policy,
        match_label_keys: kube.match_label_keys.clone().unwrap_or_default(),
    })
}

/// The host ports of the app containers and of the sidecars (init containers that keep
/// running), which hold their ports for the pod's life.
fn host_ports(spec: &SlimPodSpec, path: &str) -> Result<Vec<HostPort>, InvalidField> {
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{path}.containers[{i}]"), c));
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (format!("{path}.initContainers[{i}]"), c));
    let mut ports = Vec::new();
    for (container_path, container) in containers.chain(sidecars) {
        for (j, kube) in container.ports.iter().flatten().enumerate() {
            let Some(port) = kube.host_port.filter(|port| *port != 0) else {
                continue;
            };
            let field = format!("{container_path}.ports[{j}]");
            let port = u16::try_from(port)
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| {
                    InvalidField::new(
                        format!("{field}.hostPort"),
                        format!("{port} is not a port number"),
                    )
                })?;
            let protocol = match kube.protocol.as_deref() {
                None | Some("" | "TCP") => Protocol::Tcp,
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                Some(other) => {
                    return Err(InvalidField::new(
                        format!("{field}.protocol"),
                        format!("unknown protocol {other:?}"),
                    ));
                }
            };
            let ip = match kube.host_ip.as_deref() {
                None | Some("") => None,
                Some(ip) => Some(
                    ip.parse::<IpAddr>()
                        .map_err(|error| InvalidField::new(format!("{field}.hostIP"), error))?,
                ),
            };
            ports.push(HostPort { port, protocol, ip });
        }
    }
    Ok(ports)
}

/// A Node as existing capacity, without its pods (the caller adds them): its labels,
/// allocatable and taints; the startup taints and initialisation come from its NodeClaim
/// (`claim`), and a Node without one that no NodePool labelled is initialised.
pub fn node(node: &core::Node, claim: Option<&NodeClaim>) -> Result<ExistingNode, InvalidField> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let allocatable = resource_list(
        "status.allocatable",
        node.status
            .as_ref()
            .and_then(|status| status.allocatable.as_ref())
            .unwrap_or(&empty),
    )?;
    let mut existing = ExistingNode::new(
        name,
        labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        allocatable,
    );
    existing.taints = taints(
        "spec.taints",
        node.spec
            .as_ref()
            .and_then(|spec| spec.taints.as_deref())
            .unwrap_or_default(),
    )?;
    let labelled_initialized =
        labels.get(LABEL_NODE_INITIALIZED).map(String::as_str) == Some("true");
    existing.initialized = match claim {
        Some(claim) => {
            existing.startup_taints =
                taints("NodeClaim spec.startupTaints", &claim.spec.startup_taints)?;
            labelled_initialized || is_initialized(claim)
        }
        None => labelled_initialized || !labels.contains_key(LABEL_NODEPOOL),
    };
    Ok(existing)
}

/// Whether a NodeClaim's `Initialized` condition is True.
pub fn is_initialized(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|status| condition::is_true(&status.conditions, CONDITION_INITIALIZED))
}

/// A NodeClaim whose Node has not registered yet, as capacity on its way: it satisfies its
/// requirements and labels; its allocatable is its status's once launched, otherwise the
/// smallest of the `catalogue` types its instance-type requirement allows (every launch
/// outcome has at least that).
pub fn in_flight_node_claim(
    claim: &NodeClaim,
    catalogue: &[Arc<InstanceType>],
) -> Result<ExistingNode, InvalidField> {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let mut node_requirements = requirements("spec.requirements", &claim.spec.requirements)?;
    node_requirements.add_all(&Requirements::from_labels(
        claim.metadata.labels.iter().flatten(),
    ));
    let allowed = node_requirements.get(LABEL_INSTANCE_TYPE);
    let options: Vec<Arc<InstanceType>> = catalogue
        .iter()
        .filter(|it| allowed.is_none_or(|r| r.has(it.name())))
        .cloned()
        .collect();
    let launched = claim
        .status
        .as_ref()
        .map(|status| &status.allocatable)
        .filter(|allocatable| !allocatable.is_empty())
        .map(|allocatable| resource_list("status.allocatable", allocatable))
        .transpose()?;
    let mut existing = ExistingNode::in_flight(name, node_requirements, &options);
    if let Some(allocatable) = launched {
        existing.allocatable = allocatable;
    }
    existing.startup_taints = taints("spec.startupTaints", &claim.spec.startup_taints)?;
    existing.taints = taints("spec.taints", &claim.spec.taints)?;
    existing
        .taints
        .extend(existing.startup_taints.iter().cloned());
    Ok(existing)
}

/// A NodePool's limits in the scheduler's units; a listed zero stays a limit of zero.
pub fn limits(path: &str, list: &BTreeMap<String, KubeQuantity>) -> Result<Limits, InvalidField> {
    let mut limits = Limits::none();
    for (name, value) in list {
        let field = format!("{path}.{name}");
        let exact = quantity(&field, value)?;
        let amount = ResourceList::from_quantities([(name.as_str(), exact)])
            .map_err(|error| InvalidField::new(&field, error))?;
        let resource = ResourceName::new(name);
        limits = limits.with(resource.clone(), amount.get(&resource));
    }
    Ok(limits)
}

/// A NodePool as the scheduler sees it, offering `instance_types`, with `usage` (what its
/// NodeClaims already have) against its limits. Startup taints are left out, as upstream
/// leaves them out of scheduling. Its labels carry the node class label its NodeClaims get
/// (`karpenter.k8s.aws/ec2nodeclass: <name>`), so that a pod selecting a node class lands on
/// the NodePools of that class (upstream `NewNodeClaimTemplate`).
pub fn node_pool(
    pool: &NodePool,
    instance_types: Arc<[Arc<InstanceType>]>,
    usage: ResourceList,
) -> Result<NodePoolSpec, InvalidField> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let template = &pool.spec.template;
    let mut spec = NodePoolSpec::new(name, instance_types);
    spec.weight = pool.spec.weight.unwrap_or(0);
    spec.requirements = requirements(
        "spec.template.spec.requirements",
        &template.spec.requirements,
    )?;
    spec.labels = template.metadata.labels.clone();
    let reference = &template.spec.node_class_ref;
    spec.labels.insert(
        node_class_label_key(&reference.group, &reference.kind),
        reference.name.clone(),
    );
    spec.taints = taints("spec.template.spec.taints", &template.spec.taints)?;
    spec.limits = limits("spec.limits", &pool.spec.limits)?;
    spec.usage = usage;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use core_domain::labels::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
    use core_domain::scheduler::NODES;
    use serde_json::{Value, json};

    use super::*;
    use crate::cloudprovider::fake::instance_type;
    use crate::controllers::testing::{self, from_json, merged};

    fn kube_pod(spec: Value) -> SlimPod {
        testing::pod(
            "web-1",
            json!({
                "metadata": {
                    "namespace": "shop", "uid": "uid-1",
                    "labels": { "app": "web" },
                    "creationTimestamp": "2025-01-01T00:00:10Z",
                },
                "spec": spec,
            }),
        )
        .into()
    }

    const GIB: i64 = 1 << 30;

    #[test]
    fn given_a_pod_with_every_constraint_then_each_is_converted() {
        let kube = kube_pod(json!({
            "containers": [
                { "name": "app", "image": "app",
                  "resources": { "requests": { "cpu": "500m", "memory": "1Gi" } },
                  "ports": [{ "containerPort": 80, "hostPort": 8080 }] },
                { "name": "log", "image": "log", "resources": { "limits": { "cpu": "250m" } } },
            ],
            "initContainers": [
                { "name": "init", "image": "init", "resources": { "requests": { "cpu": "2" } } },
            ],
            "nodeSelector": { "team": "shop" },
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
                        { "matchExpressions": [{ "key": LABEL_TOPOLOGY_ZONE, "operator": "In", "values": ["z1", "z2"] }] },
                    ]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        { "weight": 10, "preference": { "matchExpressions": [{ "key": "gpu", "operator": "DoesNotExist" }] } },
                    ],
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        { "topologyKey": LABEL_HOSTNAME, "labelSelector": { "matchLabels": { "app": "web" } } },
                    ],
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        { "weight": 5, "podAffinityTerm": { "topologyKey": LABEL_TOPOLOGY_ZONE, "namespaces": ["other"],
                          "labelSelector": { "matchExpressions": [{ "key": "app", "operator": "Exists" }] } } },
                    ],
                },
            },
            "tolerations": [{ "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" }, { "operator": "Exists" }],
            "topologySpreadConstraints": [
                { "maxSkew": 1, "topologyKey": LABEL_TOPOLOGY_ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                  "labelSelector": { "matchLabels": { "app": "web" } }, "minDomains": 3, "nodeAffinityPolicy": "Ignore" },
            ],
        }));
        let pod = pod(&kube).unwrap();
        assert_eq!(pod.id.to_string(), "shop/web-1");
        assert_eq!(pod.uid, "uid-1");
        assert_eq!(pod.created, 1_735_689_610);
        assert_eq!(pod.labels["app"], "web");
        assert_eq!(
            pod.requests,
            ResourceList::new().with("cpu", 2000).with("memory", GIB),
            "the init container's peak wins over 750m of containers"
        );
        assert_eq!(pod.node_selector["team"], "shop");
        assert_eq!(pod.required_node_affinity.len(), 1);
        assert_eq!(
            pod.required_node_affinity[0].to_string(),
            "topology.kubernetes.io/zone In [z1 z2]"
        );
        assert_eq!(pod.preferred_node_affinity[0].weight, 10);
        assert_eq!(
            pod.pod_anti_affinity.required[0].topology_key,
            LABEL_HOSTNAME
        );
        assert_eq!(
            pod.pod_anti_affinity.preferred[0].term.namespaces,
            Namespaces::Listed(BTreeSet::from(["other".to_owned()]))
        );
        assert_eq!(
            pod.tolerations[0],
            Toleration::exists("dedicated", Some(TaintEffect::NoSchedule))
        );
        assert_eq!(pod.tolerations[1], Toleration::exists("", None));
        let spread = &pod.topology_spread_constraints[0];
        assert_eq!(spread.when_unsatisfiable, WhenUnsatisfiable::ScheduleAnyway);
        assert_eq!(spread.min_domains, Some(3));
        assert_eq!(spread.node_affinity_policy, NodeInclusionPolicy::Ignore);
        assert_eq!(pod.host_ports, [HostPort::tcp(8080)]);
    }

    #[test]
    fn given_a_quantity_that_does_not_parse_then_the_error_names_the_field() {
        let kube = kube_pod(json!({ "containers": [
            { "name": "app", "image": "app" },
            { "name": "bad", "image": "app", "resources": { "requests": { "memory": "lots" } } },
        ]}));
        let error = pod(&kube).unwrap_err();
        assert_eq!(error.field, "spec.containers[1].resources.requests.memory");
    }

    #[test]
    fn given_invalid_operators_effects_and_ports_then_each_names_its_field() {
        let cases = [
            (
                json!({ "containers": [], "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{ "matchExpressions": [{ "key": "a", "operator": "Near", "values": ["x"] }] }] } } } }),
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
            ),
            (
                json!({ "containers": [], "tolerations": [{ "key": "a", "effect": "Sometimes" }] }),
                "spec.tolerations[0].effect",
            ),
            (
                json!({ "containers": [{ "name": "a", "image": "a", "ports": [{ "containerPort": 1, "hostPort": 70000 }] }] }),
                "spec.containers[0].ports[0].hostPort",
            ),
            (
                json!({ "containers": [], "topologySpreadConstraints": [{ "maxSkew": 0, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule" }] }),
                "spec.topologySpreadConstraints[0].maxSkew",
            ),
        ];
        for (spec, field) in cases {
            assert_eq!(pod(&kube_pod(spec)).unwrap_err().field, field);
        }
    }

    #[test]
    fn given_a_pod_selecting_a_restricted_label_then_it_is_refused_with_the_key() {
        let policy = LabelPolicy::core();
        let pinned =
            kube_pod(json!({ "containers": [], "nodeSelector": { LABEL_HOSTNAME: "node-1" } }));
        let error = check_restricted_labels(&pinned, &policy).unwrap_err();
        assert_eq!(error.field, "spec.nodeSelector.kubernetes.io/hostname");
        let fine = kube_pod(
            json!({ "containers": [], "nodeSelector": { LABEL_NODEPOOL: "default", "team": "a" } }),
        );
        assert_eq!(check_restricted_labels(&fine, &policy), Ok(()));
    }

    #[test]
    fn given_a_daemon_set_then_its_template_is_the_pod() {
        let daemon_set: DaemonSet = from_json(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": { "namespace": "kube-system", "name": "agent" },
            "spec": {
                "selector": { "matchLabels": { "app": "agent" } },
                "template": {
                    "metadata": { "labels": { "app": "agent" } },
                    "spec": { "containers": [{ "name": "agent", "image": "agent",
                        "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } } }] },
                },
            },
        }));
        let pod = daemon_set_pod(&daemon_set).unwrap();
        assert_eq!(pod.id.to_string(), "kube-system/agent");
        assert_eq!(pod.labels["app"], "agent");
        assert_eq!(
            pod.requests,
            ResourceList::new()
                .with("cpu", 100)
                .with("memory", 128 << 20)
        );
    }

    fn node_claim(value: Value) -> NodeClaim {
        testing::node_claim(
            "default-abc",
            merged(
                json!({
                    "metadata": { "labels": { LABEL_NODEPOOL: "default" } },
                    "spec": {
                        "requirements": [
                            { "key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["small-instance-type", "default-instance-type"] },
                        ],
                        "startupTaints": [{ "key": "agent-not-ready", "effect": "NoSchedule" }],
                    },
                }),
                value,
            ),
        )
    }

    #[test]
    fn given_a_node_claim_not_launched_then_its_allocatable_is_the_smallest_option() {
        let catalogue = vec![
            Arc::new(instance_type("default-instance-type", 4, 4, 5, "amd64")),
            Arc::new(instance_type("small-instance-type", 2, 2, 5, "amd64")),
            Arc::new(instance_type("arm-instance-type", 16, 128, 5, "arm64")),
        ];
        let existing = in_flight_node_claim(&node_claim(json!({})), &catalogue).unwrap();
        assert_eq!(existing.name, "default-abc");
        assert!(!existing.initialized);
        assert_eq!(existing.allocatable, *catalogue[1].allocatable());
        assert_eq!(
            existing
                .requirements
                .get(LABEL_NODEPOOL)
                .map(ToString::to_string),
            Some("karpenter.sh/nodepool In [default]".to_owned())
        );
        assert_eq!(existing.startup_taints.len(), 1);
        assert_eq!(existing.taints, existing.startup_taints);
    }

    #[test]
    fn given_a_launched_node_claim_then_its_status_allocatable_is_used() {
        let claim = node_claim(
            json!({ "status": { "allocatable": { "cpu": "3", "memory": "3Gi", "pods": "5" } } }),
        );
        let existing = in_flight_node_claim(&claim, &[]).unwrap();
        assert_eq!(
            existing.allocatable,
            ResourceList::new()
                .with("cpu", 3000)
                .with("memory", 3 * GIB)
                .with("pods", 5)
        );
    }

    #[test]
    fn given_nodes_then_initialisation_follows_the_node_claim_or_the_label() {
        let kube = testing::node(
            "node-1",
            json!({
                "metadata": { "labels": { LABEL_NODEPOOL: "default", LABEL_HOSTNAME: "node-1" } },
                "spec": { "taints": [{ "key": "agent-not-ready", "effect": "NoSchedule" }] },
                "status": { "allocatable": { "cpu": "4", "memory": "4Gi", "pods": "10" } },
            }),
        );
        let claim = node_claim(json!({}));
        let existing = node(&kube, Some(&claim)).unwrap();
        assert!(!existing.initialized);
        assert_eq!(existing.startup_taints.len(), 1);
        assert_eq!(existing.allocatable.cpu_millis(), 4000);
        assert!(
            !node(&kube, None).unwrap().initialized,
            "a NodePool's node waits for its initialized label"
        );
        let mut unmanaged = kube.clone();
        unmanaged.metadata.labels = None;
        assert!(node(&unmanaged, None).unwrap().initialized);
    }

    #[test]
    fn given_a_node_pool_then_requirements_taints_weight_and_limits_are_converted() {
        let pool = testing::node_pool(
            "default",
            json!({ "spec": {
                "weight": 20,
                "limits": { "cpu": "10", "memory": "0", NODES: "3" },
                "template": {
                    "metadata": { "labels": { "team": "a" } },
                    "spec": {
                        "requirements": [{ "key": LABEL_TOPOLOGY_ZONE, "operator": "In", "values": ["z1"], "minValues": 1 }],
                        "taints": [{ "key": "dedicated", "value": "a", "effect": "NoSchedule" }],
                        "startupTaints": [{ "key": "agent-not-ready", "effect": "NoSchedule" }],
                    },
                },
            } }),
        );
        let spec = node_pool(&pool, Arc::from(Vec::new()), ResourceList::new()).unwrap();
        assert_eq!(spec.name, "default");
        assert_eq!(spec.weight, 20);
        assert_eq!(
            spec.requirements
                .get(LABEL_TOPOLOGY_ZONE)
                .and_then(|r| r.min_values()),
            Some(1)
        );
        assert_eq!(spec.labels["team"], "a");
        let reference = &pool.spec.template.spec.node_class_ref;
        assert_eq!(
            spec.labels[&node_class_label_key(&reference.group, &reference.kind)],
            reference.name,
            "a pod may select the node class"
        );
        assert_eq!(
            spec.taints,
            [Taint::new("dedicated", "a", TaintEffect::NoSchedule)]
        );
        let limits: Vec<(String, i64)> = spec
            .limits
            .iter()
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        assert_eq!(
            limits,
            [
                ("cpu".to_owned(), 10_000),
                ("memory".to_owned(), 0),
                (NODES.to_owned(), 3)
            ],
            "a zero limit is kept"
        );
    }
}
