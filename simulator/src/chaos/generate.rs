//! A random cluster and a random fault schedule, drawn from a seed, as a scenario document
//! (the YAML form `simulator/SCENARIO.md` fixes, as JSON), so that what failed can be written
//! out, shrunk and run again as any scenario is.
//!
//! The cluster is one every pod of can run in: pods small enough for the instance types the
//! NodePools allow, limits far above what they need, spread constraints the zones can meet.
//! Faults fall in the first part of the run; its last [`super::TAIL`] is quiet, for the
//! end-of-run invariants.

use std::time::Duration;

use core_domain::hash::SplitMix64;
use serde_json::{Value, json};

use super::TAIL;

/// The length of a generated run.
pub const DURATION: Duration = Duration::from_secs(3 * 3600);

const INSTANCE_TYPES: [&str; 10] = [
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "c5.large",
    "c5.xlarge",
    "c5.2xlarge",
    "r5.large",
    "r5.xlarge",
    "m6i.large",
    "c6i.large",
];
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const POOLS: [&str; 3] = ["alpha", "beta", "gamma"];
const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMORIES: [&str; 5] = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"];

/// The seeded draws.
struct Draw(SplitMix64);

impl Draw {
    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.0.next_u64() % n).unwrap_or(0)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `count` distinct items of `items`, in their order.
    fn subset<'a>(&mut self, items: &[&'a str], count: usize) -> Vec<&'a str> {
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < count.min(items.len()) {
            let at = self.below(items.len());
            if !chosen.contains(&at) {
                chosen.push(at);
            }
        }
        chosen.sort_unstable();
        chosen.into_iter().map(|at| items[at]).collect()
    }

    /// A time in minutes, as the scenario writes it.
    fn minutes(&mut self, low: usize, high: usize) -> String {
        format!("{}m", self.between(low, high))
    }
}

/// What the schedule knows of the cluster it disturbs.
struct Cluster {
    pools: Vec<Value>,
    deployments: Vec<(String, usize)>,
    instance_types: Vec<&'static str>,
    zones: Vec<&'static str>,
}

/// The scenario document of chaos run `seed`.
pub fn scenario(seed: u64) -> Value {
    let mut draw = Draw(SplitMix64::new(seed ^ 0x00c4_a05c_4a05_c4a0));
    let zones = ZONES[..draw.between(2, 3)].to_vec();
    let type_count = draw.between(4, 8);
    let instance_types = draw.subset(&INSTANCE_TYPES, type_count);
    let mut objects = vec![node_class()];
    let pool_count = draw.between(1, 3);
    let pools: Vec<Value> = POOLS[..pool_count]
        .iter()
        .map(|name| node_pool(&mut draw, name, &instance_types))
        .collect();
    objects.extend(pools.iter().cloned());
    let mut deployments = Vec::new();
    for i in 0..draw.between(2, 5) {
        let name = format!("app-{i}");
        let replicas = draw.between(1, 12);
        let (deployment, pdb) = deployment(&mut draw, &name, replicas, &pools);
        objects.push(deployment);
        objects.extend(pdb);
        deployments.push((name, replicas));
    }
    if draw.chance(40) {
        objects.push(daemon_set());
    }
    let cluster = Cluster {
        pools,
        deployments,
        instance_types: instance_types.clone(),
        zones: zones.clone(),
    };
    let events = faults(&mut draw, &cluster);
    let mut gates = serde_json::Map::new();
    if draw.chance(60) {
        gates.insert("NodeRepair".to_owned(), json!(true));
    }
    if draw.chance(30) {
        gates.insert("SpotToSpotConsolidation".to_owned(), json!(true));
    }
    json!({
        "name": format!("chaos-{seed}"),
        "seed": seed,
        "duration": format!("{}m", DURATION.as_secs() / 60),
        "options": {"featureGates": gates},
        "cloud": {
            "instanceTypes": instance_types,
            "zones": zones,
            "launchDelay": format!("{}s", draw.between(10, 60)),
            "registrationDelay": format!("{}s", draw.between(10, 60)),
            "images": [{"id": "ami-0a1", "name": "al2023-k8s-1.33-v20260101",
                        "created": "2025-12-01T00:00:00Z", "tags": {"team": "platform"}}],
            "subnets": zones.iter().enumerate().map(|(i, zone)| json!({
                "id": format!("subnet-{i}"), "zone": zone, "tags": {"discovery": "chaos"}
            })).collect::<Vec<_>>(),
            "securityGroups": [{"id": "sg-1", "name": "nodes", "tags": {"discovery": "chaos"}}],
        },
        "objects": objects,
        "events": events,
    })
}

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"tags": {"team": "platform"}}],
            "subnetSelectorTerms": [{"tags": {"discovery": "chaos"}}],
            "securityGroupSelectorTerms": [{"tags": {"discovery": "chaos"}}],
        },
    })
}

fn node_pool(draw: &mut Draw, name: &str, instance_types: &[&str]) -> Value {
    let capacity: Vec<&str> = match draw.below(3) {
        0 => vec!["on-demand"],
        1 => vec!["spot"],
        _ => vec!["spot", "on-demand"],
    };
    let budget_choices = [
        json!({"nodes": "10%"}),
        json!({"nodes": "1"}),
        json!({"nodes": "2"}),
        json!({"nodes": "30%"}),
        json!({"nodes": "0", "reasons": ["Underutilized"]}),
        json!({"nodes": "0", "schedule": "0 * * * *", "duration": "20m"}),
    ];
    let budgets: Vec<Value> = (0..draw.between(1, 2))
        .map(|_| draw.pick(&budget_choices).clone())
        .collect();
    let policy = if draw.chance(70) {
        "WhenEmptyOrUnderutilized"
    } else {
        "WhenEmpty"
    };
    let consolidate_after = draw.pick(&["0s", "30s", "5m", "10m"]).to_owned();
    let expire_after = if draw.chance(30) { "2h" } else { "Never" };
    // Without a grace period a drain may wait on a PodDisruptionBudget for ever, by design.
    let grace = if draw.chance(70) {
        json!(draw.pick(&["30m", "1h"]))
    } else {
        Value::Null
    };
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "limits": {"cpu": "1000"},
            "disruption": {
                "consolidationPolicy": policy,
                "consolidateAfter": consolidate_after,
                "budgets": budgets,
            },
            "template": {
                "metadata": {"labels": {"team": name}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "expireAfter": expire_after,
                    "terminationGracePeriod": grace,
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": instance_types},
                    ],
                },
            },
        },
    });
    if let Some(spec) = pool["spec"]["template"]["spec"].as_object_mut()
        && grace.is_null()
    {
        spec.remove("terminationGracePeriod");
    }
    pool
}

fn deployment(
    draw: &mut Draw,
    name: &str,
    replicas: usize,
    pools: &[Value],
) -> (Value, Option<Value>) {
    let mut annotations = serde_json::Map::new();
    if draw.chance(15) {
        annotations.insert("karpenter.sh/do-not-disrupt".to_owned(), json!("true"));
    }
    let mut spec = json!({
        "containers": [{
            "name": "app",
            "image": "registry.invalid/app",
            "resources": {"requests": {"cpu": draw.pick(&CPUS), "memory": draw.pick(&MEMORIES)}},
        }],
    });
    if draw.chance(30) {
        let pool = draw.pick(pools);
        let pool_name = pool["metadata"]["name"].clone();
        spec["nodeSelector"] = json!({"karpenter.sh/nodepool": pool_name});
    }
    let mut spread = Vec::new();
    if draw.chance(25) {
        spread.push(json!({
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": name}},
        }));
    }
    if draw.chance(20) {
        spread.push(json!({
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": name}},
        }));
    }
    if !spread.is_empty() {
        spec["topologySpreadConstraints"] = Value::Array(spread);
    }
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": spec,
            },
        },
    });
    let pdb = draw.chance(50).then(|| {
        let limit = if draw.chance(50) {
            json!({"maxUnavailable": 1})
        } else {
            json!({"minAvailable": "50%"})
        };
        let mut spec = json!({"selector": {"matchLabels": {"app": name}}});
        if let (Some(spec), Some(limit)) = (spec.as_object_mut(), limit.as_object()) {
            spec.extend(limit.clone());
        }
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        })
    });
    (deployment, pdb)
}

fn daemon_set() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "registry.invalid/agent",
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}],
                },
            },
        },
    })
}

/// Capacity errors from `at`, cleared 5 to 25 minutes later (by `last` at the latest): the
/// event setting them, the clearing one pushed onto `events`.
fn capacity_errors(
    draw: &mut Draw,
    events: &mut Vec<(usize, Value)>,
    errors: Vec<Value>,
    at: usize,
    last: usize,
) -> Value {
    let clear = (at + draw.between(5, 25)).min(last);
    events.push((clear, json!({"cloud": {"capacityErrors": []}})));
    json!({"cloud": {"capacityErrors": errors}})
}

/// The fault schedule: 3 to 14 faults in the run's first part, each at a whole minute.
fn faults(draw: &mut Draw, cluster: &Cluster) -> Vec<Value> {
    let last = usize::try_from((DURATION.saturating_sub(TAIL)).as_secs() / 60).unwrap_or(60);
    let mut events: Vec<(usize, Value)> = Vec::new();
    let mut images = 0;
    let mut edits = 0;
    for _ in 0..draw.between(3, 14) {
        let at = draw.between(5, last.saturating_sub(30));
        let pool = draw.pick(&cluster.pools)["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let fault = match draw.below(18) {
            0 => json!({"pluginOutage": {"for": draw.minutes(1, 10)}}),
            1 => json!({"slowPlugin": {"for": draw.minutes(1, 5)}}),
            2 => json!({"conflicts": {"for": draw.minutes(2, 10)}}),
            3 => json!({"restartCore": {}}),
            4 => {
                let errors: Vec<Value> = (0..draw.between(1, 4))
                    .map(|_| {
                        json!({
                            "instanceType": draw.pick(&cluster.instance_types),
                            "zone": draw.pick(&cluster.zones),
                        })
                    })
                    .collect();
                capacity_errors(draw, &mut events, errors, at, last)
            }
            5 => {
                images += 1;
                json!({"cloud": {"publishImage": {
                    "id": format!("ami-0b{images}"),
                    "name": format!("al2023-k8s-1.33-v2026010{images}"),
                    "created": format!("2025-12-{:02}T00:00:00Z", 10 + images),
                    "tags": {"team": "platform"},
                }}})
            }
            6 => {
                edits += 1;
                let mut edited = draw.pick(&cluster.pools).clone();
                edited["spec"]["template"]["metadata"]["labels"]["revision"] =
                    json!(edits.to_string());
                json!({"apply": edited})
            }
            7 => {
                let (name, _) = draw.pick(&cluster.deployments).clone();
                json!({"scale": {"kind": "Deployment", "namespace": "default", "name": name,
                                  "replicas": draw.between(0, 15)}})
            }
            8 => json!({"deleteNodes": {"nodePool": pool, "count": 1}}),
            9 => {
                let kind = draw.pick(&[
                    "SpotInterruption",
                    "RebalanceRecommendation",
                    "ScheduledChange",
                    "Stopping",
                    "Terminating",
                ]);
                let mut interrupt =
                    json!({"kind": kind, "nodePool": pool, "count": draw.between(1, 2)});
                if *kind == "ScheduledChange" {
                    interrupt["after"] = json!(draw.minutes(5, 30));
                }
                json!({"cloud": {"interrupt": interrupt}})
            }
            10 => json!({"nodeCondition": {"nodePool": pool, "count": 1, "type": "Ready",
                                           "status": draw.pick(&["False", "Unknown"])}}),
            11 => json!({"cloud": {"registrationFailures": draw.between(1, 2)}}),
            12 => {
                // A zone without capacity for a while.
                let zone = draw.pick(&cluster.zones);
                let errors: Vec<Value> = cluster
                    .instance_types
                    .iter()
                    .map(|t| json!({"instanceType": t, "zone": zone}))
                    .collect();
                capacity_errors(draw, &mut events, errors, at, last)
            }
            13 => {
                // A requirement edit: one instance type less (requirement drift), or the
                // capacity types changed.
                edits += 1;
                let mut edited = draw.pick(&cluster.pools).clone();
                let requirements = &mut edited["spec"]["template"]["spec"]["requirements"];
                if draw.chance(50) {
                    if let Some(values) = requirements[1]["values"].as_array_mut()
                        && values.len() > 1
                    {
                        let at = draw.below(values.len());
                        values.remove(at);
                    }
                } else {
                    requirements[0]["values"] =
                        json!(draw.pick(&[vec!["on-demand"], vec!["spot", "on-demand"]]));
                }
                json!({"apply": edited})
            }
            14 => {
                // A budget edit.
                edits += 1;
                let mut edited = draw.pick(&cluster.pools).clone();
                edited["spec"]["disruption"]["budgets"] =
                    json!([{"nodes": draw.pick(&["0", "1", "50%", "100%"])}]);
                json!({"apply": edited})
            }
            15 => json!({"cloud": {"interrupt": {"kind": "SpotInterruption", "nodePool": pool,
                                                 "count": draw.between(2, 4)}}}),
            16 => json!({"cloud": {"launchFailures": draw.between(1, 3)}}),
            _ => {
                let (name, replicas) = draw.pick(&cluster.deployments).clone();
                json!({"scale": {"kind": "Deployment", "namespace": "default", "name": name,
                                  "replicas": replicas + draw.between(1, 8)}})
            }
        };
        events.push((at, fault));
    }
    events.sort_by_key(|(at, _)| *at);
    events
        .into_iter()
        .map(|(at, mut event)| {
            if let Some(map) = event.as_object_mut() {
                map.insert("at".to_owned(), json!(format!("{at}m")));
            }
            event
        })
        .collect()
}
