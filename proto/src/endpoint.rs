//! Where a plugin listens and core connects, in the CSI form:
//! `unix:///var/run/plugin/plugin.sock` or `tcp://127.0.0.1:7070`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// A plugin endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket at an absolute path (`unix:///abs/path`).
    Unix(PathBuf),
    /// A TCP address (`tcp://host:port`, host an IP address).
    Tcp(SocketAddr),
}

/// Why a string is not an endpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseEndpointError {
    /// Neither `unix://` nor `tcp://`.
    #[error(
        "endpoint {0:?} must start with unix:// or tcp:// (for example unix:///run/plugin/plugin.sock or tcp://127.0.0.1:7070)"
    )]
    UnknownScheme(String),
    /// A Unix socket path that is not absolute.
    #[error("endpoint {0:?}: the socket path must be absolute (unix:///abs/path, three slashes)")]
    RelativeSocketPath(String),
    /// A TCP address that does not parse.
    #[error(
        "endpoint {endpoint:?}: {address:?} is not an IP address and port (for example 127.0.0.1:7070 or [::1]:7070)"
    )]
    BadTcpAddress {
        /// The whole endpoint.
        endpoint: String,
        /// The address part.
        address: String,
    },
}

impl FromStr for Endpoint {
    type Err = ParseEndpointError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(ParseEndpointError::RelativeSocketPath(s.to_owned()));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if let Some(address) = s.strip_prefix("tcp://") {
            let address = address.trim_end_matches('/');
            return address.parse().map(Endpoint::Tcp).map_err(|_| {
                ParseEndpointError::BadTcpAddress {
                    endpoint: s.to_owned(),
                    address: address.to_owned(),
                }
            });
        }
        Err(ParseEndpointError::UnknownScheme(s.to_owned()))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp(address) => write!(f, "tcp://{address}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: Result<Endpoint, ParseEndpointError>) {
        assert_eq!(input.parse::<Endpoint>(), expected);
        if let Ok(endpoint) = expected {
            assert_eq!(
                endpoint.to_string().parse::<Endpoint>(),
                Ok(endpoint),
                "display round-trips"
            );
        }
    }

    #[test]
    fn parses_the_csi_forms() {
        check(
            "unix:///run/plugin/plugin.sock",
            Ok(Endpoint::Unix("/run/plugin/plugin.sock".into())),
        );
        check(
            "tcp://127.0.0.1:7070",
            Ok(Endpoint::Tcp(
                "127.0.0.1:7070".parse().unwrap_or_else(|e| panic!("{e}")),
            )),
        );
        check(
            "tcp://[::1]:7070/",
            Ok(Endpoint::Tcp(
                "[::1]:7070".parse().unwrap_or_else(|e| panic!("{e}")),
            )),
        );
    }

    #[test]
    fn refuses_what_it_cannot_serve_with_the_reason() {
        check(
            "/run/plugin.sock",
            Err(ParseEndpointError::UnknownScheme("/run/plugin.sock".into())),
        );
        check(
            "unix://run/plugin.sock",
            Err(ParseEndpointError::RelativeSocketPath(
                "unix://run/plugin.sock".into(),
            )),
        );
        check(
            "tcp://localhost:7070",
            Err(ParseEndpointError::BadTcpAddress {
                endpoint: "tcp://localhost:7070".into(),
                address: "localhost:7070".into(),
            }),
        );
        let message = "dns:///x:1"
            .parse::<Endpoint>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("must start with unix:// or tcp://"),
            "{message}"
        );
    }
}
