//! Shared by the tests that run against moto: starting it on 127.0.0.1 with a free port, an
//! SDK configuration pointing at it, and killing it when done. moto runs through
//! `tests/moto/moto_launcher.py`, which fixes the emulator's gaps aws-plugin meets (see there),
//! in the Python that has moto: `TOOLS_PYTHON`, else `python3` beside `MOTO_SERVER`, else
//! `python3` on `PATH` (`.ci/install-tools` installs moto and prints these); without it the
//! tests fail, they never skip.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup call is a failed test"
)]

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};

/// The Python that has moto.
fn python_with_moto() -> PathBuf {
    let non_empty = |name: &str| std::env::var_os(name).filter(|p| !p.is_empty());
    if let Some(path) = non_empty("TOOLS_PYTHON") {
        return PathBuf::from(path);
    }
    if let Some(beside) = non_empty("MOTO_SERVER")
        .map(PathBuf::from)
        .and_then(|server| Some(server.parent()?.join("python3")))
        .filter(|python| python.is_file())
    {
        return beside;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no Python with moto: set TOOLS_PYTHON, or run `.ci/install-tools` and `source` the environment it prints"
            )
        })
}

/// The launcher of moto with its gaps fixed.
fn moto_launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/moto/moto_launcher.py")
}

/// A running moto server, killed on drop.
#[derive(Debug)]
pub(crate) struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    /// Starts moto through the launcher and waits until it listens.
    pub(crate) fn start() -> Self {
        // Bind port 0 to learn a free port, then hand it to moto: a race with other processes
        // is possible but harmless here (moto would fail to bind and the wait below reports it).
        let port = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let program = python_with_moto();
        let child = Command::new(&program)
            .arg(moto_launcher())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {}: {e} (run .ci/install-tools)",
                    program.display()
                )
            });
        let mut moto = Self { child, port };
        moto.wait_until_listening(Duration::from_secs(60));
        moto
    }

    fn wait_until_listening(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port).into();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "moto_server exited before listening on port {}: {status}",
                    self.port
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on port {} within {timeout:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Built explicitly, so nothing from the test process's environment (profiles, endpoint
    /// variables, real credentials) can reach it.
    pub(crate) fn sdk_config(&self) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(format!("http://127.0.0.1:{}", self.port))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "testing", "testing", None, None, "moto",
            )))
            .build()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
