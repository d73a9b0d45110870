//! `core-svc run` end to end, every part a real process: the `fake-apiserver` binary (the wire
//! protocol over core's in-memory cluster, with kubelet and scheduler stand-ins), the example
//! Python plugin (a cloud in memory), and two `core-svc run` replicas competing for the leader
//! Lease. Objects are applied through kube-rs, as any client would.
//!
//! Polling is the only way to observe other processes; every wait is bounded and says what
//! never happened.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use integration_tests::{
    ChildGuard, free_port, run_ok, start_fake_apiserver, start_python_plugin, workspace_binary,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

/// Generous: the runners are shared and slow.
const WAIT: Duration = Duration::from_secs(120);

struct Core {
    identity: String,
    probes: u16,
    log: PathBuf,
    process: ChildGuard,
}

fn start_core(dir: &Path, kubeconfig: &Path, socket: &Path, identity: &str) -> Core {
    start_core_with(dir, kubeconfig, socket, identity, &[])
}

fn start_core_with(
    dir: &Path,
    kubeconfig: &Path,
    socket: &Path,
    identity: &str,
    extra: &[&str],
) -> Core {
    let probes = free_port();
    let log = dir.join(format!("{identity}.log"));
    let process = ChildGuard::spawn_logging_to(
        Command::new(workspace_binary("core-svc"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--plugin-endpoint")
            .arg(format!("unix://{}", socket.display()))
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--health-probe-address")
            .arg(format!("127.0.0.1:{probes}"))
            .arg("--namespace")
            .arg("kube-system")
            .arg("--identity")
            .arg(identity)
            .args(extra)
            .env("RUST_LOG", "info"),
        &log,
    );
    Core {
        identity: identity.to_owned(),
        probes,
        log,
        process,
    }
}

fn logs(cores: &[&Core]) -> String {
    cores
        .iter()
        .map(|core| {
            format!(
                "--- {} ---\n{}",
                core.identity,
                std::fs::read_to_string(&core.log).unwrap_or_default()
            )
        })
        .collect()
}

/// The HTTP status of GET `path` on 127.0.0.1:`port` (0 when nothing answers).
fn http_status(port: u16, path: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

async fn eventually<T>(
    what: &str,
    cores: &[&Core],
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}\n{}",
            logs(cores)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Every `events.k8s.io/v1` Event (what core writes).
async fn events(client: &kube::Client) -> Vec<DynamicObject> {
    Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    )
    .list(&ListParams::default())
    .await
    .expect("events")
    .items
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

fn pod(name: &str, annotations: Value) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                     "annotations": annotations},
        "spec": {"containers": [{"name": "web", "image": "nginx",
                  "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]},
    }))
}

/// `fake-apiserver` serving the example plugin's node class, and the example Python plugin:
/// what every test here runs core-svc against. The processes stop when it is dropped.
struct World {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    socket: PathBuf,
    _apiserver: ChildGuard,
    _plugin: ChildGuard,
}

impl World {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (apiserver, kubeconfig) = start_fake_apiserver(
            dir.path(),
            "example.dev/v1/ExampleNodeClass/examplenodeclasses",
            &[],
        );
        let socket = dir.path().join("plugin.sock");
        let plugin = start_python_plugin(&socket);
        Self {
            dir,
            kubeconfig,
            socket,
            _apiserver: apiserver,
            _plugin: plugin,
        }
    }

    /// A client of the fake API server, after creating the `ExampleNodeClass` and the
    /// NodePool `default` that uses it.
    async fn client_with_node_pool(&self) -> kube::Client {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("the kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("a config");
        let client = core_svc::cluster::apiserver::client(config).expect("a client");
        let post = PostParams::default();
        let class = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.dev", "v1", "ExampleNodeClass"),
            "examplenodeclasses",
        );
        Api::<DynamicObject>::all_with(client.clone(), &class)
            .create(
                &post,
                &object(
                    json!({"apiVersion": "example.dev/v1", "kind": "ExampleNodeClass",
                               "metadata": {"name": "default"}, "spec": {}}),
                ),
            )
            .await
            .expect("the node class");
        Api::<karpenter_api::NodePool>::all(client.clone())
            .create(
                &post,
                &object(json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                    "metadata": {"name": "default"},
                    "spec": {"template": {"spec": {
                        "nodeClassRef": {"group": "example.dev", "kind": "ExampleNodeClass", "name": "default"},
                        "requirements": [],
                    }}},
                })),
            )
            .await
            .expect("the NodePool");
        client
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_svc_run_provisions_for_pending_pods_with_one_leader_and_explains_a_blocked_node() {
    let world = World::start();
    let (dir, kubeconfig, socket) = (world.dir.path(), &world.kubeconfig, &world.socket);
    let core_a = start_core(dir, kubeconfig, socket, "core-a");
    let core_b = start_core(dir, kubeconfig, socket, "core-b");
    let both = [&core_a, &core_b];

    let client = world.client_with_node_pool().await;
    let post = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["web-1", "web-2", "web-3"] {
        pods.create(&post, &pod(name, json!({})))
            .await
            .expect("a pod");
    }

    // Both replicas serve probes; both turn ready (plugin ready, caches synced).
    for core in both {
        eventually("both replicas ready", &both, async || {
            (http_status(core.probes, "/readyz") == 200).then_some(())
        })
        .await;
        assert_eq!(http_status(core.probes, "/healthz"), 200);
    }

    // Pending pods -> NodeClaims launched by the plugin -> Nodes registered -> pods bound.
    eventually("every pod bound to a registered node", &both, async || {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some()
            })
            .then_some(())
    })
    .await;
    let claims = Api::<karpenter_api::NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("NodeClaims");
    assert!(!claims.items.is_empty());
    for claim in &claims.items {
        let status = claim
            .status
            .as_ref()
            .expect("a launched NodeClaim has a status");
        assert!(status.provider_id.starts_with("example://"), "{status:?}");
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("Nodes");
    assert!(
        nodes.items.iter().all(|node| node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_none_or(|taints| taints.iter().all(|t| t.key != "karpenter.sh/unregistered"))),
        "core registered every node (removed the unregistered taint)"
    );

    // One leader: the Lease names it, and every event was reported by it alone.
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get("karpenter-leader-election")
        .await
        .expect("the leader Lease");
    let leader = lease
        .spec
        .and_then(|spec| spec.holder_identity)
        .expect("a holder");
    assert!(leader == "core-a" || leader == "core-b", "{leader}");
    let events = events(&client).await;
    assert!(!events.is_empty(), "the leader reports what it does");
    for event in &events {
        assert_eq!(
            event.data["reportingInstance"], leader,
            "only the leader acts: {}",
            event.data
        );
    }

    // A node held by a do-not-disrupt pod: explain names the pod as the blocker.
    pods.create(
        &post,
        &pod("pinned", json!({"karpenter.sh/do-not-disrupt": "true"})),
    )
    .await
    .expect("the pinned pod");
    let node = eventually("the pinned pod bound", &both, async || {
        pods.get("pinned").await.ok()?.spec?.node_name
    })
    .await;
    // Explained once its NodeClaim is initialized (before, that is what holds it back).
    eventually(
        "the pinned pod's NodeClaim initialized",
        &both,
        async || {
            let claims = Api::<karpenter_api::NodeClaim>::all(client.clone())
                .list(&ListParams::default())
                .await
                .ok()?;
            claims
                .items
                .iter()
                .filter(|claim| claim.status.as_ref().is_some_and(|s| s.node_name == node))
                .any(|claim| {
                    claim.status.as_ref().is_some_and(|s| {
                        karpenter_api::condition::is_true(&s.conditions, "Initialized")
                    })
                })
                .then_some(())
        },
    )
    .await;
    let explained = run_ok(
        Command::new(workspace_binary("core-svc"))
            .arg("explain")
            .arg(&node)
            .arg("-o")
            .arg("json")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--plugin-endpoint")
            .arg(format!("unix://{}", socket.display())),
    );
    let report: Value = serde_json::from_str(&explained).expect("JSON");
    assert_eq!(report["node"], node.as_str(), "{report}");
    assert_eq!(report["candidate"], false, "{report}");
    let blocked = report["blocked"].as_str().unwrap_or_default();
    assert!(
        blocked.contains("pinned") && blocked.contains("do-not-disrupt"),
        "{report}"
    );
    assert_eq!(report["pluginDrift"]["answer"], "notDrifted", "{report}");

    // The leader stops (SIGTERM): it releases the Lease and the standby takes over.
    let (stopping, standby) = if leader == "core-a" {
        (core_a, core_b)
    } else {
        (core_b, core_a)
    };
    let stopped_log = std::fs::read_to_string(&stopping.log).unwrap_or_default();
    let output = stopping.process.terminate();
    assert!(output.status.success(), "{stopped_log}");
    eventually("the standby leads", &[&standby], async || {
        let lease = Api::<Lease>::namespaced(client.clone(), "kube-system")
            .get("karpenter-leader-election")
            .await
            .ok()?;
        (lease.spec?.holder_identity? == standby.identity).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_a_single_replica_keeps_running_and_provisions() {
    let world = World::start();
    let (dir, kubeconfig, socket) = (world.dir.path(), &world.kubeconfig, &world.socket);
    let mut core = start_core_with(
        dir,
        kubeconfig,
        socket,
        "solo",
        &["--disable-leader-election"],
    );
    let client = world.client_with_node_pool().await;
    let post = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&post, &pod("web-1", json!({})))
        .await
        .expect("a pod");
    let solo = [&core];
    eventually("the pod bound", &solo, async || {
        pods.get("web-1").await.ok()?.spec?.node_name.map(drop)
    })
    .await;
    assert!(core.process.is_running(), "{}", logs(&[&core]));
    let lease = Api::<Lease>::namespaced(client, "kube-system")
        .get_opt("karpenter-leader-election")
        .await
        .expect("a read");
    assert!(lease.is_none(), "no Lease without leader election");
}

/// Node repair end to end, through the plugin's repair policies (the Python plugin's:
/// `Ready=False` for ten minutes): a node whose kubelet has reported NotReady for an hour is
/// deleted forcefully with its NodeClaim, and `NodeUnhealthy` says why. One node
/// of one is within upstream's cap (ceil(20 % of 1) = 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_ready_past_its_toleration_is_repaired() {
    let world = World::start();
    let (dir, kubeconfig, socket) = (world.dir.path(), &world.kubeconfig, &world.socket);
    let core = start_core_with(
        dir,
        kubeconfig,
        socket,
        "repair",
        &["--disable-leader-election"],
    );
    let client = world.client_with_node_pool().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web-1", json!({})))
        .await
        .expect("a pod");
    let solo = [&core];
    let first = eventually("the pod bound", &solo, async || {
        pods.get("web-1").await.ok()?.spec?.node_name
    })
    .await;
    // The kubelet has reported NotReady for an hour.
    let an_hour_ago = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(1))
        .expect("an hour ago");
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            &first,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "lastHeartbeatTime": an_hour_ago.to_string(),
                "lastTransitionTime": an_hour_ago.to_string(),
            }]}})),
        )
        .await
        .expect("the node's status");
    // A bare pod is not recreated: the node's going, with its NodeClaim, is what shows.
    eventually("the unhealthy node deleted", &solo, async || {
        match nodes.get_opt(&first).await.ok()? {
            None => Some(()),
            Some(node) => node.metadata.deletion_timestamp.map(drop),
        }
    })
    .await;
    let events = events(&client).await;
    assert!(
        events.iter().any(|e| e.data["reason"] == "NodeUnhealthy"),
        "{}",
        logs(&[&core])
    );
}
