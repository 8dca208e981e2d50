//! One tracing subscriber for the whole process.

use tracing_subscriber::EnvFilter;

/// Installs a `fmt` subscriber filtered by `RUST_LOG` (default `info` for the service,
/// `warn` for its dependencies). Safe to call twice: the second call does nothing.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        // Colours only on a terminal: a log file gets plain text (and no time is
        // spent on escape codes nobody sees).
        .with_ansi(std::io::stderr().is_terminal())
        // Logs go to stderr; stdout carries only the "listening on" line scripts read.
        .with_writer(std::io::stderr)
        .try_init();
}
