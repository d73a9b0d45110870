//! The scheduler's input from a snapshot: the pods to place, the capacity that exists or is on
//! its way, the NodePools with their catalogues and what their NodeClaims already use, and
//! the DaemonSets. Pure: the controller fetches the catalogues, this assembles.
//!
//! Existing capacity, as upstream's scheduler sees the cluster state:
//!
//! - every Node that is not being deleted (its NodeClaim neither), with the pods bound to it
//!   that still hold resources (not terminal), DaemonSet pods as such; Nodes no NodePool
//!   launched count too, as upstream's state nodes do;
//! - every NodeClaim that is not being deleted and has no Node yet, as in-flight capacity
//!   ([`convert::in_flight_node_claim`]);
//! - the pods nominated to either, reserved on it.
//!
//! A NodePool's usage against its limits is the sum of its NodeClaims' capacity (not being
//! deleted), `nodes` counting each: the capacity in their status once launched, otherwise
//! the largest of their instance type options (upstream's `subtractMax`), otherwise what they
//! request.

use crate::cluster::SlimPod;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use core_domain::instance_type::InstanceType;
use core_domain::labels::{LABEL_INSTANCE_TYPE, LabelPolicy};
use core_domain::requirements::Operator;
use core_domain::resources::{ResourceList, ResourceName};
use core_domain::scheduler::{ExistingNode, NODES, PreferencePolicy, SchedulingInput};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};

use super::convert::{self, InvalidField};
use super::memo::{self, NodeMemo};
use super::nominations::Target;
use super::selection::{is_daemon_set_pod, is_terminal, pod_uid};
use crate::cluster::{PodsByNode, Snapshot};
use crate::controllers::nodeclaim::node_pool_of;
use crate::objects::name_of;

/// A catalogue of instance types, shared.
pub type Catalogue = Arc<[Arc<InstanceType>]>;

/// What the input is built from.
#[derive(Debug)]
pub struct Sources<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The pods to place.
    pub pods: &'a [&'a SlimPod],
    /// The snapshot's pods by node ([`Snapshot::pods_by_node`]), when the caller has them
    /// already; `None` groups them here.
    pub pods_by_node: Option<&'a PodsByNode<'a>>,
    /// Pods nominated earlier, reserved on their target instead of being placed.
    pub reserved: &'a [(&'a SlimPod, Target)],
    /// The NodePools new capacity may come from, in the order to try them, with their
    /// catalogues.
    pub node_pools: &'a [(&'a NodePool, Catalogue)],
    /// Every catalogue known, by NodePool name (stale ones included): in-flight NodeClaims'
    /// options and usage estimates come from them.
    pub catalogues: &'a HashMap<String, Catalogue>,
    /// Which labels are well known.
    pub label_policy: &'a LabelPolicy,
    /// Whether preferences count.
    pub preference_policy: PreferencePolicy,
    /// Where Nodes converted by earlier builds are kept; `None` converts every Node afresh.
    pub memo: Option<&'a NodeMemo>,
}

/// What could not enter the input, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// A pod to place (it gets a Warning event).
    Pod {
        /// `namespace/name`.
        pod: String,
        /// Its UID.
        uid: String,
        /// The field at fault.
        error: InvalidField,
    },
    /// Any other object (logged): a Node, NodeClaim, NodePool, DaemonSet or bound pod.
    Object {
        /// `Kind namespace/name`.
        object: String,
        /// The field at fault.
        error: InvalidField,
    },
}

/// The built input.
#[derive(Debug, Clone)]
pub struct Built {
    /// The scheduler's input.
    pub input: SchedulingInput,
    /// What each existing node of the input is, for nominations: a NodeClaim or a Node.
    pub targets: HashMap<String, Target>,
    /// The pods of `input.pods`, by `namespace/name`, with their UIDs.
    pub uids: HashMap<String, String>,
    /// What was left out.
    pub skipped: Vec<Skipped>,
}

/// Builds the scheduler's input (see the module documentation).
pub fn build(sources: &Sources<'_>) -> Built {
    if let Some(memo) = sources.memo {
        memo.begin_pass();
    }
    let snapshot = sources.snapshot;
    let mut skipped = Vec::new();
    let mut pods = Vec::with_capacity(sources.pods.len());
    let mut uids = HashMap::new();
    for pod in sources.pods {
        match convert::check_restricted_labels(pod, sources.label_policy)
            .and_then(|()| convert::pod(pod))
        {
            Ok(converted) => {
                uids.insert(converted.id.to_string(), converted.uid.clone());
                pods.push(converted);
            }
            Err(error) => skipped.push(Skipped::Pod {
                pod: qualified(pod),
                uid: pod_uid(pod),
                error,
            }),
        }
    }
    let (existing_nodes, targets) = existing_capacity(sources, &mut skipped);
    let usage = usage_with(snapshot, sources.catalogues, sources.memo);
    let node_pools = sources
        .node_pools
        .iter()
        .filter_map(|(pool, catalogue)| {
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            let used = usage.get(name).cloned().unwrap_or_default();
            convert::node_pool(pool, catalogue.clone(), used)
                .map_err(|error| {
                    skipped.push(Skipped::Object {
                        object: format!("NodePool {name}"),
                        error,
                    });
                })
                .ok()
        })
        .collect();
    let daemon_set_pods = snapshot
        .daemon_sets
        .iter()
        .filter_map(|daemon_set| {
            convert::daemon_set_pod(daemon_set)
                .map_err(|error| {
                    skipped.push(Skipped::Object {
                        object: format!("DaemonSet {}", qualified_meta(&daemon_set.metadata)),
                        error,
                    });
                })
                .ok()
        })
        .collect();
    Built {
        input: SchedulingInput {
            pods,
            existing_nodes,
            node_pools,
            daemon_set_pods,
            label_policy: sources.label_policy.clone(),
            preference_policy: sources.preference_policy,
        },
        targets,
        uids,
        skipped,
    }
}

fn existing_capacity(
    sources: &Sources<'_>,
    skipped: &mut Vec<Skipped>,
) -> (Vec<Arc<ExistingNode>>, HashMap<String, Target>) {
    let snapshot = sources.snapshot;
    let live_claims: Vec<&NodeClaim> = snapshot
        .node_claims()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .collect();
    // The maps are sized for the whole snapshot at once: growing would hash every key again.
    let claims = snapshot.node_claims.len();
    let mut claim_of_node: HashMap<&str, &NodeClaim> = HashMap::with_capacity(claims);
    let mut claim_of_provider_id: HashMap<&str, &NodeClaim> = HashMap::with_capacity(claims);
    for claim in snapshot.node_claims() {
        if let Some(status) = &claim.status {
            if !status.node_name.is_empty() {
                claim_of_node.insert(status.node_name.as_str(), claim);
            }
            if !status.provider_id.is_empty() {
                claim_of_provider_id.insert(status.provider_id.as_str(), claim);
            }
        }
    }
    let grouped;
    let by_node = match sources.pods_by_node {
        Some(by_node) => by_node,
        None => {
            grouped = snapshot.pods_by_node();
            &grouped
        }
    };
    let mut nodes: BTreeMap<String, Arc<ExistingNode>> = BTreeMap::new();
    let mut targets = HashMap::with_capacity(snapshot.nodes.len() + claims);
    let mut registered_claims = HashSet::with_capacity(snapshot.nodes.len());
    for node in snapshot.nodes() {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .unwrap_or_default();
        let claim = claim_of_node
            .get(name)
            .or_else(|| claim_of_provider_id.get(provider_id))
            .copied();
        if let Some(claim) = claim {
            registered_claims.insert(name_of(claim));
        }
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|claim| claim.metadata.deletion_timestamp.is_some());
        if deleting {
            continue;
        }
        let pods: Vec<&SlimPod> = by_node
            .get(name)
            .into_iter()
            .flatten()
            .copied()
            .filter(|pod| !is_terminal(pod))
            .collect();
        let Some(existing) = existing_node(sources.memo, node, claim, &pods, skipped) else {
            continue;
        };
        let target = match claim {
            Some(claim) => Target::NodeClaim(name_of(claim).to_owned()),
            None => Target::Node(name.to_owned()),
        };
        targets.insert(name.to_owned(), target);
        nodes.insert(name.to_owned(), existing);
    }
    for claim in live_claims {
        let name = name_of(claim);
        if registered_claims.contains(name) || nodes.contains_key(name) {
            continue;
        }
        let catalogue = node_pool_of(claim)
            .and_then(|pool| sources.catalogues.get(pool))
            .map_or(&[][..], |catalogue| &catalogue[..]);
        match convert::in_flight_node_claim(claim, catalogue) {
            Ok(existing) => {
                targets.insert(name.to_owned(), Target::NodeClaim(name.to_owned()));
                nodes.insert(name.to_owned(), Arc::new(existing));
            }
            Err(error) => skipped.push(Skipped::Object {
                object: format!("NodeClaim {name}"),
                error,
            }),
        }
    }
    reserve(sources, &mut nodes, &targets, skipped);
    (nodes.into_values().collect(), targets)
}

/// The Node with `pods` (those bound to it that still hold resources, DaemonSet pods as such),
/// taken from `memo` when neither it, its NodeClaim nor its pods changed since it was converted;
/// `None` when the Node cannot be read (recorded in `skipped`, as is a pod that cannot be read
/// and is left out).
pub fn existing_node(
    memo: Option<&NodeMemo>,
    node: &Node,
    claim: Option<&NodeClaim>,
    pods: &[&SlimPod],
    skipped: &mut Vec<Skipped>,
) -> Option<Arc<ExistingNode>> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    // The NodeClaim's slot is kept when there is none, so the pods' versions cannot stand in
    // for it.
    let versions = memo.and_then(|_| {
        let claim_version = claim.map_or(Some("-"), |claim| {
            claim.metadata.resource_version.as_deref()
        });
        let mut versions = vec![node.metadata.resource_version.as_deref()?, claim_version?];
        versions.extend(memo::versions(pods.iter().map(|pod| &pod.metadata))?);
        Some(versions)
    });
    if let (Some(memo), Some(versions)) = (memo, &versions)
        && let Some(existing) = memo.get(name, versions)
    {
        return Some(existing);
    }
    let mut existing = match convert::node(node, claim) {
        Ok(existing) => existing,
        Err(error) => {
            skipped.push(Skipped::Object {
                object: format!("Node {name}"),
                error,
            });
            return None;
        }
    };
    let mut whole = true;
    for pod in pods {
        match convert::pod(pod) {
            Ok(converted) if is_daemon_set_pod(pod) => {
                existing = existing.with_daemon_pod(converted);
            }
            Ok(converted) => existing = existing.with_pod(converted),
            Err(error) => {
                whole = false;
                skipped.push(Skipped::Object {
                    object: format!("Pod {}", qualified(pod)),
                    error,
                });
            }
        }
    }
    let existing = Arc::new(existing);
    if let (Some(memo), Some(versions), true) = (memo, &versions, whole) {
        memo.put(name, versions, &existing);
    }
    Some(existing)
}

/// Adds the nominated pods to the capacity they were nominated to.
fn reserve(
    sources: &Sources<'_>,
    nodes: &mut BTreeMap<String, Arc<ExistingNode>>,
    targets: &HashMap<String, Target>,
    skipped: &mut Vec<Skipped>,
) {
    let node_of_target: HashMap<&Target, &String> = targets
        .iter()
        .map(|(node, target)| (target, node))
        .collect();
    for (pod, target) in sources.reserved {
        let Some(node) = node_of_target.get(target).copied() else {
            continue;
        };
        match convert::pod(pod) {
            Ok(converted) => {
                if let Some(existing) = nodes.remove(node) {
                    let existing = Arc::unwrap_or_clone(existing).with_pod(converted);
                    nodes.insert(node.clone(), Arc::new(existing));
                }
            }
            Err(error) => skipped.push(Skipped::Object {
                object: format!("Pod {}", qualified(pod)),
                error,
            }),
        }
    }
}

/// What each NodePool's NodeClaims use (see the module documentation), by NodePool name.
pub fn usage_by_node_pool(
    snapshot: &Snapshot,
    catalogues: &HashMap<String, Catalogue>,
) -> HashMap<String, ResourceList> {
    usage_with(snapshot, catalogues, None)
}

/// [`usage_by_node_pool`], the launched NodeClaims' capacities taken from `memo` while they
/// are unchanged.
fn usage_with(
    snapshot: &Snapshot,
    catalogues: &HashMap<String, Catalogue>,
    memo: Option<&NodeMemo>,
) -> HashMap<String, ResourceList> {
    let mut usage: HashMap<String, ResourceList> = HashMap::new();
    let nodes = ResourceName::new(NODES);
    for claim in snapshot.node_claims() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(pool) = node_pool_of(claim) else {
            continue;
        };
        let mut capacity = claim_capacity(claim, catalogues.get(pool), memo);
        capacity.set(&nodes, capacity.get(&nodes).saturating_add(1));
        usage
            .entry(pool.to_owned())
            .or_default()
            .saturating_add_assign(&capacity);
    }
    usage
}

fn claim_capacity(
    claim: &NodeClaim,
    catalogue: Option<&Catalogue>,
    memo: Option<&NodeMemo>,
) -> ResourceList {
    if let Some(capacity) = launched_capacity(claim, memo) {
        return capacity;
    }
    let allowed: Option<HashSet<&str>> = claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == LABEL_INSTANCE_TYPE && r.operator == Operator::In)
        .map(|r| r.values.iter().map(String::as_str).collect());
    let largest = catalogue
        .into_iter()
        .flat_map(|catalogue| catalogue.iter())
        .filter(|it| {
            allowed
                .as_ref()
                .is_none_or(|names| names.contains(it.name()))
        })
        .fold(None, |largest: Option<ResourceList>, it| {
            Some(match largest {
                Some(largest) => largest.max_per_resource(it.capacity()),
                None => it.capacity().clone(),
            })
        });
    largest.unwrap_or_else(|| {
        convert::resource_list("spec.resources.requests", &claim.spec.resources.requests)
            .unwrap_or_default()
    })
}

/// The capacity in a launched NodeClaim's status, if it has one that parses; from `memo` when
/// it was parsed at the NodeClaim's `resourceVersion` already.
fn launched_capacity(claim: &NodeClaim, memo: Option<&NodeMemo>) -> Option<ResourceList> {
    let capacity = claim
        .status
        .as_ref()
        .map(|status| &status.capacity)
        .filter(|capacity| !capacity.is_empty())?;
    let name = name_of(claim);
    let version = claim.metadata.resource_version.as_deref();
    let memo = memo.zip(version);
    if let Some((memo, version)) = memo
        && let Some(kept) = memo.capacity(name, version)
    {
        return Some(kept);
    }
    let parsed = convert::resource_list("status.capacity", capacity).ok()?;
    if let Some((memo, version)) = memo {
        memo.put_capacity(name, version, &parsed);
    }
    Some(parsed)
}

fn qualified(pod: &SlimPod) -> String {
    qualified_meta(&pod.metadata)
}

fn qualified_meta(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use core_domain::labels::LABEL_NODEPOOL;
    use core_domain::scheduler::solve;
    use serde_json::{Value, json};

    use super::*;
    use crate::cloudprovider::fake::instance_type;
    use crate::cluster::SlimPod as Pod;
    use crate::controllers::testing;

    fn pending(name: &str, cpu: &str) -> Pod {
        Pod::from(testing::pod(
            name,
            json!({
                "metadata": { "uid": format!("uid-{name}") },
                "spec": { "containers": [{ "name": "c", "image": "c",
                    "resources": { "requests": { "cpu": cpu } } }] },
            }),
        ))
    }

    fn bound(name: &str, cpu: &str, node: &str) -> Pod {
        let mut pod = pending(name, cpu);
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_owned());
        }
        pod
    }

    fn node_pool(limits: Value) -> NodePool {
        testing::node_pool(
            "default",
            json!({ "metadata": { "uid": "pool-uid" }, "spec": { "limits": limits } }),
        )
    }

    fn claim(name: &str, types: &[&str], node: Option<&str>) -> NodeClaim {
        let mut value = json!({
            "metadata": { "labels": { LABEL_NODEPOOL: "default" } },
            "spec": {
                "requirements": [{ "key": LABEL_INSTANCE_TYPE, "operator": "In", "values": types }],
            },
        });
        if let Some(node) = node {
            value["status"] = json!({ "nodeName": node, "capacity": { "cpu": "4", "memory": "4Gi", "pods": "5" } });
        }
        testing::node_claim(name, value)
    }

    fn node(name: &str, cpu: &str) -> k8s_openapi::api::core::v1::Node {
        testing::node(
            name,
            json!({
                "metadata": { "labels": { "kubernetes.io/hostname": name } },
                "status": { "allocatable": { "cpu": cpu, "memory": "4Gi", "pods": "10" } },
            }),
        )
    }

    fn catalogue() -> Catalogue {
        Arc::from(vec![
            Arc::new(instance_type("small-instance-type", 2, 2, 5, "amd64")),
            Arc::new(instance_type("default-instance-type", 4, 4, 5, "amd64")),
        ])
    }

    struct Fixture {
        snapshot: Snapshot,
        pool: NodePool,
        catalogues: HashMap<String, Catalogue>,
        policy: LabelPolicy,
    }

    impl Fixture {
        fn new(snapshot: Snapshot, limits: Value) -> Self {
            let mut snapshot = snapshot;
            snapshot.sort();
            Self {
                snapshot,
                pool: node_pool(limits),
                catalogues: HashMap::from([("default".to_owned(), catalogue())]),
                policy: LabelPolicy::core(),
            }
        }

        fn build(&self, pods: &[&Pod], reserved: &[(&Pod, Target)]) -> Built {
            self.build_with(pods, reserved, None)
        }

        fn build_with(
            &self,
            pods: &[&Pod],
            reserved: &[(&Pod, Target)],
            memo: Option<&NodeMemo>,
        ) -> Built {
            let node_pools = [(&self.pool, catalogue())];
            build(&Sources {
                snapshot: &self.snapshot,
                pods,
                pods_by_node: None,
                reserved,
                node_pools: &node_pools,
                catalogues: &self.catalogues,
                label_policy: &self.policy,
                preference_policy: PreferencePolicy::Respect,
                memo,
            })
        }
    }

    fn versioned<T: kube::Resource>(mut object: T, version: &str) -> T {
        object.meta_mut().resource_version = Some(version.to_owned());
        object
    }

    #[test]
    fn given_a_memo_then_a_node_is_converted_again_only_when_it_or_its_pods_changed() {
        let memo = NodeMemo::new();
        let snapshot = |node_version: &str, pods: Vec<Pod>| Snapshot {
            nodes: vec![
                Arc::new(versioned(node("node-1", "4"), node_version)),
                Arc::new(versioned(node("node-2", "4"), "2")),
            ],
            pods: pods.into_iter().map(Arc::new).collect(),
            ..Snapshot::default()
        };
        let requested = |built: &Built| -> Vec<i64> {
            built
                .input
                .existing_nodes
                .iter()
                .map(|node| node.requested.cpu_millis())
                .collect()
        };
        let web = |cpu: &str, version: &str| versioned(bound("web-1", cpu, "node-1"), version);

        let first = Fixture::new(snapshot("1", vec![web("1", "3")]), json!({}));
        assert_eq!(
            requested(&first.build_with(&[], &[], Some(&memo))),
            [1000, 0]
        );
        assert_eq!(memo.len(), 2);

        // The snapshot is the memo's: the nodes come back from it, as they were.
        assert_eq!(
            requested(&first.build_with(&[], &[], Some(&memo))),
            requested(&first.build(&[], &[]))
        );

        // A pod's new version is seen, and so is a new pod on the node.
        let resized = Fixture::new(snapshot("1", vec![web("2", "4")]), json!({}));
        assert_eq!(
            requested(&resized.build_with(&[], &[], Some(&memo))),
            [2000, 0]
        );
        let joined = Fixture::new(
            snapshot(
                "1",
                vec![web("2", "4"), versioned(bound("web-2", "1", "node-2"), "5")],
            ),
            json!({}),
        );
        assert_eq!(
            requested(&joined.build_with(&[], &[], Some(&memo))),
            [2000, 1000]
        );

        // A Node's own change is seen (its new allocatable).
        let mut bigger = versioned(node("node-1", "8"), "6");
        bigger.metadata.labels = Some(BTreeMap::from([("size".to_owned(), "big".to_owned())]));
        let grown = Fixture::new(
            Snapshot {
                nodes: vec![Arc::new(bigger)],
                pods: vec![Arc::new(web("2", "4"))],
                ..Snapshot::default()
            },
            json!({}),
        );
        let built = grown.build_with(&[], &[], Some(&memo));
        assert_eq!(built.input.existing_nodes[0].allocatable.cpu_millis(), 8000);
        assert_eq!(
            built.input.existing_nodes[0]
                .requirements
                .get("size")
                .map(|r| r.to_string()),
            Some("size In [big]".to_owned())
        );
        // node-2 was not in that build: it is dropped when the next begins.
        grown.build_with(&[], &[], Some(&memo));
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn given_objects_without_versions_then_nothing_is_memoized() {
        let memo = NodeMemo::new();
        let fixture = Fixture::new(
            Snapshot {
                nodes: vec![Arc::new(node("node-1", "4"))],
                ..Snapshot::default()
            },
            json!({}),
        );
        fixture.build_with(&[], &[], Some(&memo));
        assert!(memo.is_empty());
    }

    #[test]
    fn given_nodes_and_node_claims_then_live_ones_are_capacity_with_their_pods() {
        let mut deleting = node("node-gone", "4");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2025-01-01T00:00:00Z".parse().unwrap(),
            ));
        let fixture = Fixture::new(
            Snapshot {
                nodes: vec![Arc::new(node("node-1", "4")), Arc::new(deleting)],
                node_claims: vec![
                    Arc::new(claim(
                        "default-registered",
                        &["default-instance-type"],
                        Some("node-1"),
                    )),
                    Arc::new(claim(
                        "default-launching",
                        &["small-instance-type", "default-instance-type"],
                        None,
                    )),
                ],
                pods: vec![Arc::new(bound("web-1", "1", "node-1"))],
                ..Snapshot::default()
            },
            json!({}),
        );
        let built = fixture.build(&[], &[]);
        let names: Vec<&str> = built
            .input
            .existing_nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(names, ["default-launching", "node-1"]);
        let node_1 = &built.input.existing_nodes[1];
        assert_eq!(node_1.requested.cpu_millis(), 1000);
        assert_eq!(
            built.targets["node-1"],
            Target::NodeClaim("default-registered".to_owned()),
            "a registered NodeClaim's node nominates to the NodeClaim"
        );
        assert_eq!(
            built.input.existing_nodes[0].allocatable,
            *catalogue()[0].allocatable(),
            "the launching NodeClaim may turn out as its smallest option"
        );
    }

    #[test]
    fn given_a_nominated_pod_then_its_requests_are_reserved_on_its_node_claim() {
        let fixture = Fixture::new(
            Snapshot {
                node_claims: vec![Arc::new(claim(
                    "default-launching",
                    &["small-instance-type"],
                    None,
                ))],
                ..Snapshot::default()
            },
            json!({}),
        );
        let nominated = pending("nominated", "1500m");
        let newcomer = pending("newcomer", "1");
        let built = fixture.build(
            &[&newcomer],
            &[(&nominated, Target::NodeClaim("default-launching".into()))],
        );
        assert_eq!(built.input.existing_nodes[0].requested.cpu_millis(), 1500);
        let results = solve(&built.input).unwrap();
        assert!(
            results.existing_placements.is_empty(),
            "1 CPU does not fit next to the reserved 1.5 on a 1.9 CPU node"
        );
        assert_eq!(results.new_node_claims.len(), 1);
    }

    #[test]
    fn given_node_claims_then_usage_counts_capacity_or_the_largest_option_and_nodes() {
        let fixture = Fixture::new(
            Snapshot {
                node_claims: vec![
                    Arc::new(claim(
                        "default-registered",
                        &["default-instance-type"],
                        Some("node-1"),
                    )),
                    Arc::new(claim(
                        "default-launching",
                        &["small-instance-type", "default-instance-type"],
                        None,
                    )),
                ],
                ..Snapshot::default()
            },
            json!({}),
        );
        let usage = usage_by_node_pool(&fixture.snapshot, &fixture.catalogues);
        let used = &usage["default"];
        assert_eq!(
            used.cpu_millis(),
            8000,
            "4 launched + 4 for the largest option"
        );
        assert_eq!(used.get(&ResourceName::new(NODES)), 2);
    }

    #[test]
    fn given_a_memo_then_a_node_claims_capacity_is_parsed_again_only_when_it_changed() {
        let memo = NodeMemo::new();
        let usage = |cpu: &str, version: &str| {
            let mut launched = claim(
                "default-registered",
                &["default-instance-type"],
                Some("node-1"),
            );
            launched.metadata.resource_version = Some(version.to_owned());
            if let Some(status) = launched.status.as_mut() {
                status.capacity.insert(
                    "cpu".to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.to_owned()),
                );
            }
            let fixture = Fixture::new(
                Snapshot {
                    node_claims: vec![Arc::new(launched)],
                    ..Snapshot::default()
                },
                json!({}),
            );
            memo.begin_pass();
            let memoized = usage_with(&fixture.snapshot, &fixture.catalogues, Some(&memo));
            assert_eq!(
                memoized,
                usage_by_node_pool(&fixture.snapshot, &fixture.catalogues)
            );
            memoized["default"].cpu_millis()
        };
        assert_eq!(usage("4", "1"), 4000);
        assert_eq!(memo.capacities(), 1);
        assert_eq!(usage("4", "1"), 4000, "kept");
        assert_eq!(usage("8", "2"), 8000, "a new version is parsed again");
        assert_eq!(memo.capacities(), 1);
    }

    #[test]
    fn given_limits_then_the_scheduler_is_capped_by_the_usage() {
        let fixture = Fixture::new(
            Snapshot {
                nodes: vec![Arc::new(node("node-1", "1"))],
                node_claims: vec![Arc::new(claim(
                    "default-registered",
                    &["default-instance-type"],
                    Some("node-1"),
                ))],
                ..Snapshot::default()
            },
            json!({ "cpu": "6" }),
        );
        let big = pending("big", "3");
        let other = pending("other", "3");
        let built = fixture.build(&[&big, &other], &[]);
        let results = solve(&built.input).unwrap();
        assert_eq!(
            results.new_node_claims.len(),
            0,
            "4 of 6 CPUs used: no 4-CPU node fits"
        );
        assert_eq!(results.unschedulable.len(), 2);
    }

    #[test]
    fn given_an_invalid_pod_then_it_is_skipped_with_its_field() {
        let fixture = Fixture::new(Snapshot::default(), json!({}));
        let bad = pending("bad", "a lot");
        let good = pending("good", "1");
        let built = fixture.build(&[&bad, &good], &[]);
        let names: Vec<String> = built.input.pods.iter().map(|p| p.id.to_string()).collect();
        assert_eq!(names, ["default/good"]);
        assert_eq!(built.uids["default/good"], "uid-good");
        match &built.skipped[..] {
            [Skipped::Pod { pod, uid, error }] => {
                assert_eq!(pod, "default/bad");
                assert_eq!(uid, "uid-bad");
                assert_eq!(error.field, "spec.containers[0].resources.requests.cpu");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
