//! Structured logs for plugins and core alike: `tracing` to stderr, as text for people or as
//! one JSON object per line for log pipelines, filtered by `RUST_LOG` (default `info`).

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "log format {other:?} is neither \"text\" nor \"json\""
            )),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up logging: {0}")]
pub struct LoggingError(String);

/// Installs the global subscriber. `RUST_LOG` selects what is logged (default `info`); an
/// invalid `RUST_LOG` is an error naming it rather than silently logging nothing.
pub fn init(format: LogFormat) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::try_new(&directives)
            .map_err(|e| LoggingError(format!("RUST_LOG={directives:?} is invalid: {e}")))?,
        _ => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| LoggingError(e.to_string()))
}
