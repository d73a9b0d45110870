//! Running the `aws-plugin` binary and external tools from a test: finding a tool through its
//! environment variable or `PATH` (a missing tool fails the test, it never skips it), and the
//! plugin as a child process killed on drop, its log kept in a file.
//!
//! Included by path (`#[path = "common/process.rs"]`) by the tests that start processes only,
//! so the tests that do not are not warned about unused helpers.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed setup call is a failed test"
)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The path of an external tool: `$env_var` if set, otherwise `name` on `PATH`.
pub(crate) fn tool(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: set {env_var}, or run `.ci/install-tools` and `source` the environment it prints"
            )
        })
}

/// A running plugin, killed on drop. Its stdout and stderr go to a file rather than a pipe:
/// nobody reads a pipe while the test runs, and a full one would block the plugin's logging.
#[derive(Debug)]
pub(crate) struct PluginProcess {
    child: Child,
    log: PathBuf,
}

impl PluginProcess {
    /// Spawns `command` with its output in `log`, and waits until `socket` exists.
    pub(crate) fn start(command: &mut Command, socket: &Path, log: &Path) -> Self {
        let out = File::create(log).expect("creating the plugin's log file");
        let err = out.try_clone().expect("a second handle on the log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
        let mut process = Self {
            child,
            log: log.to_owned(),
        };
        process.wait_for_socket(socket, Duration::from_secs(30));
        process
    }

    /// Polls: the socket appearing is all another process lets us observe.
    fn wait_for_socket(&mut self, socket: &Path, timeout: Duration) {
        let start = Instant::now();
        while !socket.exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the plugin exited with {status} before creating {}:\n{}",
                    socket.display(),
                    self.log()
                );
            }
            assert!(
                start.elapsed() < timeout,
                "{} did not appear within {timeout:?}:\n{}",
                socket.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the plugin wrote so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // The plugin's side of a failed step is in its log; the harness shows what the
            // test printed only when the test fails, which is exactly now.
            #[allow(clippy::print_stderr, reason = "the failed test's diagnostics")]
            {
                eprintln!("aws-plugin log:\n{}", self.log());
            }
        }
    }
}
