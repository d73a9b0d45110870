//! The whole product end to end on an emulated AWS, every part a real process: `moto_server`
//! (EC2, IAM and SSM, started through aws-plugin's `tests/moto/moto_launcher.py`, which fixes moto's
//! gaps, see there), the `aws-plugin` binary on a Unix socket pointed at it, the `fake-apiserver`
//! binary serving `EC2NodeClass` (with its kubelet, scheduler and Deployment controller
//! stand-ins), and `core-svc run`. The user's side is stock kubectl; the test watches through
//! kube-rs and looks into moto with boto3 (`moto/e2e_fixtures.py`, which also makes the VPC,
//! subnets in two zones, security group, IAM role and images).
//!
//! What it proves, in order:
//!
//! 1. `kubectl apply` of an EC2NodeClass, a NodePool (one instance type, so each pod of the
//!    Deployment needs a node of its own; disruption budget `nodes: "1"`) and a Deployment of
//!    three replicas: three instances run in moto from the selected image, with the node
//!    class's security group, their Nodes register and the pods are bound and Ready;
//! 2. a pod annotated `karpenter.sh/do-not-disrupt: "true"` pins the node it lands on;
//! 3. a newer image matching the node class's `amiSelectorTerms` is registered in moto: every
//!    NodeClaim becomes `Drifted` (AMIDrift) and the unpinned ones are replaced one at a time
//!    (at every poll, never more NodeClaims disrupting than the budget allows); core-svc is
//!    killed (SIGKILL) as soon as the first replacement has been created and started again,
//!    and the roll goes on from where the annotations say it was;
//! 4. meanwhile the pinned node stays, and `core-svc explain` names the pod that holds it; the
//!    operator's grpcurl recipes (the NodeClaim and its EC2NodeClass as kubectl prints them,
//!    piped into IsDrifted; the NodePool and EC2NodeClass into GetInstanceTypes) get the
//!    plugin's AMIDrift and the NodePool's instance type;
//! 5. once the pin is gone the roll finishes: every NodeClaim runs the new image, no Node
//!    keeps the `karpenter.sh/disrupted` taint, the old instances are terminated, and the
//!    instances running in moto are exactly the NodeClaims' (no orphan either way).
//!
//! core re-checks drift on every change in the cluster and otherwise every 5 minutes (there
//! is no flag for that period; the plugin also asks for its node class to be resolved again
//! only every 5 minutes). A real cluster changes all the time (kubelets report status); this
//! one is quiet once the pods run, so after registering the image the test annotates the
//! EC2NodeClass, a change that means nothing to anyone, to have drift looked at now rather
//! than in 5 minutes. The plugin reuses a node class resolution for
//! `--node-class-cache-seconds` (60 by default); the test sets it to 0.
//!
//! core-svc runs as the install's service account (`karpenter/karpenter`) under the RBAC
//! objects `deploy/overlays/aws` renders, applied with kubectl: the fake API server enforces
//! them, and at the end the test fails on any request they refused and lists every permission
//! they grant that the run never used; only the ones named in [`GRANTED_BUT_NOT_EXERCISED`],
//! each with the code path that needs it, may stay unused.
//!
//! Run just this test (about 1-3 minutes; it needs `.ci/install-tools` for moto, boto3 and
//! kubectl, and the workspace's binaries built):
//!
//! ```sh
//! eval "$(.ci/install-tools)"
//! cargo build -p core-svc -p aws-plugin -p integration-tests --bins
//! cargo test -p integration-tests --test e2e_aws_moto
//! ```
//!
//! Polling is the only way to observe other processes; every wait is bounded and says what
//! never happened, with the tail of every process's log.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "tests: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use core_svc::controllers::disruption::annotations::{ANNOTATION_COMMAND, ANNOTATION_REPLACES};
use integration_tests::{
    ChildGuard, free_port, moto_script, run_ok, start_aws_plugin_on_moto, start_fake_apiserver,
    start_moto, tool, workspace_binary,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::NodeClaim;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// How long any one phase may take: generous, the runners are shared and slow.
const PHASE: Duration = Duration::from_secs(150);
/// Time between two looks at the cluster.
const POLL: Duration = Duration::from_millis(250);

const CLUSTER: &str = "e2e";
const DISCOVERY: &str = "e2e";
const ROLE: &str = "E2eNodeRole";
const INSTANCE_TYPE: &str = "t3.medium";
/// The NodePool's disruption budget.
const BUDGET: usize = 1;

const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// The install's namespace and service account (deploy/base).
const INSTALL_NAMESPACE: &str = "karpenter";
const SERVICE_ACCOUNT: &str = "karpenter";

/// The kinds of the rendered install that the RBAC check applies: the identity and its rules
/// (the Deployment itself would be pods this cluster has no node for).
const RBAC_KINDS: [&str; 6] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// Permissions the install grants that this run does not exercise, as
/// `ROLE VERB GROUP/RESOURCE`, each with what needs it. Exactly these may be unused: one that
/// a run starts using, or a new one no run uses, fails the test until this list says why.
const GRANTED_BUT_NOT_EXERCISED: &[(&str, &str)] = &[(
    "ClusterRole/karpenter-core delete /pods",
    "the drain deletes a pod still running once its node's terminationGracePeriod is up \
     (core-svc/src/controllers/drain.rs); this NodePool sets none",
)];

/// The rendered `deploy/overlays/aws`, only its [`RBAC_KINDS`], as one YAML stream.
fn install_rbac(kubectl: &Path) -> String {
    let overlay = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/overlays/aws");
    let rendered = run_ok(Command::new(kubectl).arg("kustomize").arg(overlay));
    let mut out = String::new();
    for document in serde_yaml::Deserializer::from_str(&rendered) {
        let value: serde_yaml::Value =
            serde::Deserialize::deserialize(document).expect("rendered YAML");
        let kind = value["kind"].as_str().unwrap_or_default();
        if RBAC_KINDS.contains(&kind) {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&value).expect("YAML"));
        }
    }
    out
}

fn manifests() -> String {
    format!(
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: {ROLE}
  amiFamily: AL2023
  amiSelectorTerms: [{{name: "e2e-node-*", owner: self}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {DISCOVERY}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {DISCOVERY}}}}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements:
      - {{key: node.kubernetes.io/instance-type, operator: In, values: [{INSTANCE_TYPE}]}}
      - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 30s
    budgets: [{{nodes: "{BUDGET}"}}]
---
# Each pod needs most of a t3.medium (1930m allocatable): one per node.
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx
        resources: {{requests: {{cpu: 1200m, memory: 1Gi}}}}
"#
    )
}

const PINNED_POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  namespace: default
  annotations: {karpenter.sh/do-not-disrupt: \"true\"}
spec:
  containers:
  - name: pinned
    image: nginx
    resources: {requests: {cpu: 100m, memory: 64Mi}}
";

fn script(name: &str) -> PathBuf {
    moto_script(name)
}

/// The last `lines` lines of a log file.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(no log: {e})"));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Every process of the test, and where each logs.
struct World {
    dir: tempfile::TempDir,
    python: PathBuf,
    kubectl: PathBuf,
    aws_endpoint: String,
    kubeconfig: PathBuf,
    /// The install's service account's kubeconfig: core-svc runs as it.
    service_account_kubeconfig: PathBuf,
    socket: PathBuf,
    client: kube::Client,
    _moto: ChildGuard,
    _plugin: ChildGuard,
    _apiserver: ChildGuard,
    core: Option<ChildGuard>,
    core_starts: usize,
}

impl World {
    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// The tail of every log, for a failure's message.
    fn diagnostics(&self) -> String {
        let mut out = String::new();
        let mut names = vec!["apiserver".to_owned(), "aws-plugin".to_owned()];
        names.extend((1..=self.core_starts).map(|n| format!("core-svc-{n}")));
        names.push("moto".to_owned());
        for name in names {
            out.push_str(&format!(
                "\n--- {name} ---\n{}\n",
                tail(&self.log(&name), 40)
            ));
        }
        out
    }

    fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.env("KUBECONFIG", &self.kubeconfig);
        command
    }

    /// Runs `e2e_fixtures.py COMMAND ARGS` against moto; its JSON answer.
    fn fixtures(&self, args: &[&str]) -> Value {
        let out = run_ok(
            Command::new(&self.python)
                .arg(script("e2e_fixtures.py"))
                .arg("--endpoint")
                .arg(&self.aws_endpoint)
                .args(args),
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} printed {out:?}: {e}"))
    }

    /// The instances moto has for the cluster: id → (state, image, security groups).
    fn instances(&self) -> BTreeMap<String, (String, String, Vec<String>)> {
        let answer = self.fixtures(&["instances", "--cluster", CLUSTER]);
        answer["instances"]
            .as_array()
            .expect("a list of instances")
            .iter()
            .map(|i| {
                let text = |key: &str| i[key].as_str().unwrap_or_default().to_owned();
                let groups = i["securityGroups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                (text("id"), (text("state"), text("image"), groups))
            })
            .collect()
    }

    fn start_core(&mut self) {
        self.core_starts += 1;
        let log = self.log(&format!("core-svc-{}", self.core_starts));
        self.core = Some(ChildGuard::spawn_logging_to(
            Command::new(workspace_binary("core-svc"))
                .arg("run")
                .arg("--kubeconfig")
                .arg(&self.service_account_kubeconfig)
                .arg("--plugin-endpoint")
                .arg(format!("unix://{}", self.socket.display()))
                .arg("--metrics-address")
                .arg(format!("127.0.0.1:{}", free_port()))
                .arg("--health-probe-address")
                .arg(format!("127.0.0.1:{}", free_port()))
                // The pod's namespace, where its Role allows the Lease.
                .arg("--namespace")
                .arg(INSTALL_NAMESPACE)
                // The same name after a restart, as a restarted container of the same pod has:
                // it takes its own Lease back at once.
                .arg("--identity")
                .arg("core-e2e")
                .env("RUST_LOG", "info"),
            &log,
        ));
    }

    /// Polls `check` until it answers, for at most [`PHASE`]; fails naming `what` otherwise.
    async fn eventually<T>(&self, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + PHASE;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never happened within {PHASE:?}: {what}\n{}",
                self.diagnostics()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The three NodeClaims of [`manifests`] initialized (none named `without`) and every
    /// web pod bound and Ready: the NodeClaims, once it is so.
    async fn settled(&self, without: Option<&str>) -> Option<Vec<NodeClaim>> {
        let claims = self.node_claims().await;
        let pods = self.pods().await;
        let web: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("web-"))
            })
            .collect();
        let ready = claims.len() == 3
            && claims.iter().all(|c| condition_true(c, "Initialized"))
            && without.is_none_or(|gone| claims.iter().all(|c| name(&c.metadata) != gone))
            && web.len() == 3
            && web.iter().all(|p| node_of(p).is_some() && is_ready(p));
        ready.then_some(claims)
    }

    async fn node_claims(&self) -> Vec<NodeClaim> {
        Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default()
    }

    async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default()
    }

    async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default()
    }
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn annotation<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| karpenter_api::condition::is_true(&s.conditions, type_))
}

fn instance_id(claim: &NodeClaim) -> Option<String> {
    let provider_id = &claim.status.as_ref()?.provider_id;
    provider_id
        .rsplit('/')
        .next()
        .filter(|id| id.starts_with("i-"))
        .map(str::to_owned)
}

fn taints(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| t.key.clone())
        .collect()
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The NodeClaims disrupting now, as Karpenter's budgets count them: those with a Node that
/// is a command's candidate (before it is tainted too), being deleted, or whose Node carries
/// the `karpenter.sh/disrupted` taint or is being deleted. A NodeClaim whose Node is gone
/// (drained) or whose instance is terminating (`InstanceTerminating`) no longer counts: it
/// is no node of the pool any more, and the next command may start meanwhile.
fn disrupting(claims: &[NodeClaim], nodes: &[Node]) -> BTreeSet<String> {
    let nodes: BTreeMap<String, &Node> = nodes
        .iter()
        .map(|node| (name(&node.metadata), node))
        .collect();
    claims
        .iter()
        .filter(|claim| !condition_true(claim, "InstanceTerminating"))
        .filter(|claim| {
            let Some(node) = claim.status.as_ref().and_then(|s| nodes.get(&s.node_name)) else {
                return false;
            };
            claim.metadata.deletion_timestamp.is_some()
                || annotation(claim, ANNOTATION_COMMAND).is_some()
                || node.metadata.deletion_timestamp.is_some()
                || taints(node).iter().any(|t| t == DISRUPTED_TAINT)
        })
        .map(|claim| name(&claim.metadata))
        .collect()
}

/// Looks at NodeClaims and Nodes at every poll of the roll: never more disrupting than the
/// budget; remembers what it saw.
#[derive(Debug, Default)]
struct Roll {
    drifted: BTreeSet<String>,
    disrupted: BTreeSet<String>,
    most_at_once: usize,
    polls: usize,
}

impl Roll {
    async fn observe(&mut self, world: &World) -> (Vec<NodeClaim>, Vec<Node>) {
        let claims = world.node_claims().await;
        let nodes = world.nodes().await;
        let now = disrupting(&claims, &nodes);
        assert!(
            now.len() <= BUDGET,
            "{} NodeClaims disrupting at once ({now:?}), the budget allows {BUDGET}\n{}",
            now.len(),
            world.diagnostics()
        );
        self.polls += 1;
        self.most_at_once = self.most_at_once.max(now.len());
        self.disrupted.extend(now);
        self.drifted.extend(
            claims
                .iter()
                .filter(|c| condition_true(c, "Drifted"))
                .map(|c| name(&c.metadata)),
        );
        (claims, nodes)
    }
}

/// moto (with the VPC, role and image of `setup`), the fake API server with the install's
/// RBAC applied, and aws-plugin (with `plugin_args`): everything but core, which the test starts.
async fn start_world(plugin_args: &[&str]) -> (World, Value) {
    // Found first: a missing tool fails the test before anything starts.
    let python = tool("python3", "TOOLS_PYTHON");
    let kubectl = tool("kubectl", "KUBECTL");
    let dir = tempfile::tempdir().expect("a temporary directory");

    // moto, through the launcher that gives fleet instances their template's security groups.
    let (moto, aws_endpoint) = start_moto(dir.path());

    let service_account_kubeconfig = dir.path().join("service-account.kubeconfig");
    let (apiserver, kubeconfig) = start_fake_apiserver(
        dir.path(),
        "karpenter.k8s.aws/v1/EC2NodeClass/ec2nodeclasses",
        &[
            "--registration-delay-seconds",
            "1",
            "--service-account-kubeconfig",
            &format!(
                "{INSTALL_NAMESPACE}/{SERVICE_ACCOUNT}={}",
                service_account_kubeconfig.display()
            ),
        ],
    );

    let socket = dir.path().join("plugin.sock");
    let plugin = start_aws_plugin_on_moto(
        &socket,
        &aws_endpoint,
        CLUSTER,
        plugin_args,
        &dir.path().join("aws-plugin.log"),
    );

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("a config");
    let client = core_svc::cluster::apiserver::client(config).expect("a client");
    let world = World {
        dir,
        python,
        kubectl,
        aws_endpoint,
        kubeconfig,
        service_account_kubeconfig,
        socket,
        client,
        _moto: moto,
        _plugin: plugin,
        _apiserver: apiserver,
        core: None,
        core_starts: 0,
    };
    let fixtures = world.fixtures(&[
        "setup",
        "--discovery",
        DISCOVERY,
        "--role",
        ROLE,
        "--image-name",
        "e2e-node-1",
    ]);
    // The install's identity and rules, as the operator applies them.
    let rbac_file = world.dir.path().join("install-rbac.yaml");
    std::fs::write(&rbac_file, install_rbac(&world.kubectl)).expect("write the RBAC");
    let applied = run_ok(world.kubectl().arg("apply").arg("-f").arg(&rbac_file));
    assert!(
        applied.contains("clusterrole.rbac.authorization.k8s.io/karpenter-core created"),
        "{applied}"
    );
    (world, fixtures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ami_rolls_every_node_one_budget_at_a_time_through_a_core_restart() {
    let (mut world, fixtures) =
        // A newly registered image must be seen by the very next call.
        start_world(&["--node-class-cache-seconds", "0"]).await;
    let old_image = fixtures["image"].as_str().expect("an image").to_owned();
    let security_group = fixtures["securityGroup"]
        .as_str()
        .expect("a security group")
        .to_owned();
    world.start_core();

    // 1. The user applies a node class, a NodePool and a Deployment.
    let manifests_file = world.dir.path().join("manifests.yaml");
    std::fs::write(&manifests_file, manifests()).expect("write the manifests");
    let applied = run_ok(world.kubectl().arg("apply").arg("-f").arg(&manifests_file));
    assert!(applied.contains("deployment.apps/web created"), "{applied}");

    let initial = world
        .eventually(
            "three NodeClaims launched and initialized, every web pod bound and Ready",
            async || world.settled(None).await,
        )
        .await;
    // The NodePool's status, as kubectl reads it: Ready, with its nodes counted (the fake
    // API server serves no server-side tables, so the printer columns' paths are asked for).
    world
        .eventually("the NodePool Ready with its 3 nodes", async || {
            let status = run_ok(world.kubectl().args([
                "get",
                "nodepool",
                "default",
                "-o",
                "jsonpath={.status.nodes}/{.status.conditions[?(@.type==\"Ready\")].status}",
            ]));
            (status.trim() == "3/True").then_some(())
        })
        .await;
    let initial_names: BTreeSet<String> = initial.iter().map(|c| name(&c.metadata)).collect();
    let initial_instances: BTreeSet<String> = initial.iter().filter_map(instance_id).collect();
    assert_eq!(initial_instances.len(), 3, "{initial:?}");
    let instances = world.instances();
    for id in &initial_instances {
        let (state, image, groups) = instances
            .get(id)
            .unwrap_or_else(|| panic!("moto has no instance {id}: {instances:?}"));
        assert!(state == "running" || state == "pending", "{id}: {state}");
        assert_eq!(image, &old_image, "{id}");
        assert_eq!(
            groups,
            std::slice::from_ref(&security_group),
            "{id}: the template's group"
        );
    }
    let nodes = world.nodes().await;
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert!(
        nodes
            .iter()
            .all(|n| taints(n).iter().all(|t| t != "karpenter.sh/unregistered")),
        "core registered every node: {nodes:?}"
    );
    let deployment = Api::<Deployment>::namespaced(world.client.clone(), "default")
        .get("web")
        .await
        .expect("the Deployment");
    assert_eq!(
        deployment.status.and_then(|s| s.ready_replicas),
        Some(3),
        "the Deployment's status"
    );

    // 2. A do-not-disrupt pod pins the node it lands on.
    let pinned_file = world.dir.path().join("pinned.yaml");
    std::fs::write(&pinned_file, PINNED_POD).expect("write the pod");
    run_ok(world.kubectl().arg("apply").arg("-f").arg(&pinned_file));
    let pinned_node = world
        .eventually("the pinned pod bound and Ready", async || {
            let pod = Api::<Pod>::namespaced(world.client.clone(), "default")
                .get("pinned")
                .await
                .ok()?;
            is_ready(&pod).then(|| node_of(&pod)).flatten()
        })
        .await;
    let pinned_claim = initial
        .iter()
        .find(|c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.node_name == pinned_node)
        })
        .map(|c| name(&c.metadata))
        .unwrap_or_else(|| panic!("no NodeClaim of node {pinned_node}: {initial:?}"));

    // 3. A newer image matches the selector; the no-op annotation has drift looked at now.
    let published = world.fixtures(&[
        "publish-image",
        "--name",
        "e2e-node-2",
        "--after",
        fixtures["imageCreationDate"].as_str().expect("a date"),
    ]);
    let new_image = published["image"].as_str().expect("an image").to_owned();
    run_ok(world.kubectl().args([
        "annotate",
        "ec2nodeclass",
        "default",
        &format!("e2e.karpenter.sh/image-published={new_image}"),
    ]));

    let mut roll = Roll::default();
    world
        .eventually("the first replacement created", async || {
            let (claims, _) = roll.observe(&world).await;
            claims
                .iter()
                .any(|c| annotation(c, ANNOTATION_REPLACES).is_some())
                .then_some(())
        })
        .await;
    // core dies mid-roll (SIGKILL: nothing is cleaned up) and comes back.
    drop(world.core.take());
    world.start_core();

    // 4. The unpinned nodes are replaced; the pinned one stays, and explain says why.
    let unpinned: BTreeSet<String> = initial_names
        .iter()
        .filter(|n| **n != pinned_claim)
        .cloned()
        .collect();
    world
        .eventually(
            "the unpinned NodeClaims replaced, the pinned one left alone",
            async || {
                let (claims, _) = roll.observe(&world).await;
                let names: BTreeSet<String> = claims.iter().map(|c| name(&c.metadata)).collect();
                let settled = unpinned.iter().all(|n| !names.contains(n))
                    && names.contains(&pinned_claim)
                    && claims.iter().all(|c| condition_true(c, "Initialized"))
                    && roll.drifted.contains(&pinned_claim);
                settled.then_some(())
            },
        )
        .await;
    assert!(
        !roll.disrupted.contains(&pinned_claim),
        "the pinned NodeClaim was disrupted\n{}",
        world.diagnostics()
    );
    let explained = run_ok(
        Command::new(workspace_binary("core-svc"))
            .arg("explain")
            .arg(&pinned_node)
            .arg("-o")
            .arg("json")
            .arg("--kubeconfig")
            .arg(&world.kubeconfig)
            .arg("--plugin-endpoint")
            .arg(format!("unix://{}", world.socket.display())),
    );
    let report: Value = serde_json::from_str(&explained).expect("JSON");
    assert_eq!(report["node"], pinned_node.as_str(), "{report}");
    assert_eq!(report["candidate"], false, "{report}");
    let blocked = report["blocked"].as_str().unwrap_or_default();
    assert!(
        blocked.contains("pinned") && blocked.contains("do-not-disrupt"),
        "{report}"
    );
    assert_eq!(report["pluginDrift"]["answer"], "drifted", "{report}");

    // The operator's recipe (docs/operations.md): kubectl's output, as printed, piped into
    // grpcurl's IsDrifted against the plugin's socket; the plugin names the drift.
    let printed = |args: &[&str]| -> Value {
        serde_json::from_str(&run_ok(world.kubectl().args(args).args(["-o", "json"])))
            .expect("kubectl's JSON")
    };
    let request = serde_json::json!({
        "nodeClaimObject": printed(&["get", "nodeclaim", &pinned_claim]),
        "nodeClass": printed(&["get", "ec2nodeclass", "default"]),
    });
    let answer = grpcurl_with_input(
        &world.socket,
        "karpenter.cloudprovider.v1.CloudProviderService/IsDrifted",
        &request.to_string(),
    );
    let answer: Value = serde_json::from_str(&answer).expect("grpcurl's JSON");
    assert_eq!(answer["reason"], "AMIDrift", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&new_image),
        "{answer}"
    );
    // The same for the catalogue a NodePool gets: its NodePool and node class as printed.
    let request = serde_json::json!({
        "nodePool": printed(&["get", "nodepool", "default"]),
        "nodeClass": printed(&["get", "ec2nodeclass", "default"]),
    });
    let chunks = grpcurl_with_input(
        &world.socket,
        "karpenter.cloudprovider.v1.CloudProviderService/GetInstanceTypes",
        &request.to_string(),
    );
    let offered: BTreeSet<String> = serde_json::Deserializer::from_str(&chunks)
        .into_iter::<Value>()
        .map(|chunk| chunk.expect("a streamed chunk"))
        .flat_map(|chunk| {
            chunk["instanceTypes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|it| it["name"].as_str().map(str::to_owned))
        .collect();
    assert!(offered.contains(INSTANCE_TYPE), "{offered:?}");

    // 5. The pin goes; the roll finishes.
    run_ok(
        world
            .kubectl()
            .args(["delete", "pod", "pinned", "--timeout", "60s"]),
    );
    let finished = world
        .eventually(
            "every NodeClaim on the new image, no disrupted taint, every web pod Ready",
            async || {
                let (claims, nodes) = roll.observe(&world).await;
                let pods = world.pods().await;
                let done = claims.len() == 3
                    && claims.iter().all(|c| {
                        c.status.as_ref().is_some_and(|s| s.image_id == new_image)
                            && condition_true(c, "Initialized")
                            && c.metadata.deletion_timestamp.is_none()
                    })
                    && nodes.len() == 3
                    && nodes
                        .iter()
                        .all(|n| taints(n).iter().all(|t| t != DISRUPTED_TAINT))
                    && pods.len() == 3
                    && pods.iter().all(|p| node_of(p).is_some() && is_ready(p));
                done.then_some(claims)
            },
        )
        .await;
    assert!(
        initial_names
            .iter()
            .all(|n| roll.drifted.contains(n) && roll.disrupted.contains(n)),
        "every old NodeClaim was seen Drifted, then disrupting: {roll:?}"
    );
    assert_eq!(roll.most_at_once, BUDGET, "{roll:?}");

    // No orphan either way: the instances running are exactly the NodeClaims'; the old ones
    // are terminated. Termination is asynchronous in EC2, so wait for it.
    let claimed: BTreeSet<String> = finished.iter().filter_map(instance_id).collect();
    assert_eq!(claimed.len(), 3, "{finished:?}");
    world
        .eventually(
            "moto's running instances exactly the NodeClaims', the old ones terminated",
            async || {
                let instances = world.instances();
                let running: BTreeSet<String> = instances
                    .iter()
                    .filter(|(_, (state, _, _))| state == "running" || state == "pending")
                    .map(|(id, _)| id.clone())
                    .collect();
                let old_gone = initial_instances.iter().all(|id| {
                    instances.get(id).is_none_or(|(state, _, _)| {
                        state == "terminated" || state == "shutting-down"
                    })
                });
                (running == claimed && old_gone).then_some(instances)
            },
        )
        .await
        .iter()
        .filter(|(id, _)| claimed.contains(*id))
        .for_each(|(id, (_, image, groups))| {
            assert_eq!(image, &new_image, "{id}");
            assert_eq!(groups, std::slice::from_ref(&security_group), "{id}");
        });

    // 6. The install's RBAC was enough, and nothing more than the run needed.
    check_rbac(&world).await;
}

/// Runs grpcurl against the plugin at `socket`, the request on standard input (`-d @`), and
/// answers what it printed.
fn grpcurl_with_input(socket: &Path, method: &str, input: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new(tool("grpcurl", "GRPCURL"))
        .args(["-plaintext", "-unix", "-d", "@"])
        .arg(socket)
        .arg(method)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("grpcurl starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write the request");
    let output = child.wait_with_output().expect("grpcurl ends");
    assert!(
        output.status.success(),
        "grpcurl {method} failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Fails on any request of core-svc's that RBAC refused, and on any granted permission the run
/// never used that [`GRANTED_BUT_NOT_EXERCISED`] does not explain; prints the whole table.
async fn check_rbac(world: &World) {
    let request = http::Request::get("/debug/rbac")
        .body(Vec::new())
        .expect("a request");
    let text = world
        .client
        .request_text(request)
        .await
        .expect("the RBAC report");
    let report: Value = serde_json::from_str(&text).expect("JSON");
    let user = format!("system:serviceaccount:{INSTALL_NAMESPACE}:{SERVICE_ACCOUNT}");
    let usage = report
        .as_array()
        .into_iter()
        .flatten()
        .find(|u| u["user"] == user.as_str())
        .unwrap_or_else(|| panic!("no request of {user} reached the server: {report}"));
    let denied: Vec<&str> = usage["denied"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut table = String::new();
    let mut unused = BTreeSet::new();
    for entry in usage["permissions"].as_array().into_iter().flatten() {
        let (permission, used) = (&entry[0], entry[1].as_bool().unwrap_or(false));
        let line = format!(
            "{} {} {}/{}",
            permission["role"].as_str().unwrap_or_default(),
            permission["verb"].as_str().unwrap_or_default(),
            permission["apiGroup"].as_str().unwrap_or_default(),
            permission["resource"].as_str().unwrap_or_default(),
        );
        table.push_str(&format!(
            "{} {line}\n",
            if used { "used  " } else { "UNUSED" }
        ));
        if !used {
            unused.insert(line);
        }
    }
    #[allow(
        clippy::print_stdout,
        reason = "the table is the test's report (--nocapture)"
    )]
    {
        println!("RBAC of {user}:\n{table}");
    }
    assert!(
        denied.is_empty(),
        "the install's RBAC refused core-svc: {denied:#?}\n{}",
        world.diagnostics()
    );
    let explained: BTreeSet<String> = GRANTED_BUT_NOT_EXERCISED
        .iter()
        .map(|(permission, _why)| (*permission).to_owned())
        .collect();
    assert_eq!(
        unused, explained,
        "granted permissions the run never used (left) differ from those explained (right):\n{table}"
    );
}

/// Interruption handling end to end: a spot interruption warning put on moto's SQS queue, as
/// EventBridge would, reaches core through aws-plugin's WatchInterruptions stream; core deletes
/// the instance's NodeClaim (drained by the warning's deadline) and the provisioner replaces its
/// capacity; the instance is terminated; the message is deleted from the queue once core has
/// acknowledged the notice; the Events say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_warning_on_the_queue_replaces_the_node_and_is_deleted_once_acted_on() {
    let (mut world, _) = start_world(&["--interruption-queue", CLUSTER]).await;
    world.fixtures(&["create-queue", "--name", CLUSTER]);
    world.start_core();
    let manifests_file = world.dir.path().join("manifests.yaml");
    std::fs::write(&manifests_file, manifests()).expect("write the manifests");
    run_ok(world.kubectl().arg("apply").arg("-f").arg(&manifests_file));
    let initial = world
        .eventually(
            "three NodeClaims initialized, every web pod Ready",
            async || world.settled(None).await,
        )
        .await;
    let victim = name(&initial[0].metadata);
    let instance = instance_id(&initial[0]).expect("the victim's instance");

    let sent = world.fixtures(&["spot-warning", "--queue", CLUSTER, "--instance", &instance]);
    assert!(sent["messageId"].is_string(), "{sent}");

    world
        .eventually("the interrupted NodeClaim gone and replaced", async || {
            world.settled(Some(&victim)).await
        })
        .await;
    world
        .eventually("the instance terminated", async || {
            let instances = world.instances();
            let (state, _, _) = instances.get(&instance)?;
            (state == "terminated" || state == "shutting-down").then_some(())
        })
        .await;
    world
        .eventually("the message deleted from the queue", async || {
            let depth = world.fixtures(&["queue-depth", "--queue", CLUSTER]);
            (depth["messages"] == 0).then_some(())
        })
        .await;
    // core writes events.k8s.io/v1 Events, which the fake serves under that group only.
    let events = run_ok(world.kubectl().args([
        "get",
        "events.v1.events.k8s.io",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]));
    for reason in [
        "InterruptionReceived",
        "SpotInterrupted",
        "TerminatingOnInterruption",
    ] {
        assert!(
            events.lines().any(|l| l == reason),
            "{reason} in {events}{}",
            world.diagnostics()
        );
    }
}
