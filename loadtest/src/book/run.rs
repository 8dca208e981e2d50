//! Where and when the reference run was measured (`book/data/machine.json`).

use crate::markdown::banner;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `book/data/machine.json`: written by `scripts/book-data` itself (a shell heredoc,
/// no Rust type writes it), so this is the book's typed view of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Machine {
    /// The run every data file names ([`super::one_run`]); absent from data older
    /// than that rule.
    #[serde(default)]
    pub run: Option<String>,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// The short hash measured.
    pub commit: String,
    pub cores: u64,
    pub cpu: String,
    pub memory_gib: u64,
    pub os: String,
    pub kernel: String,
    pub rustc: String,
    /// Server name → version.
    pub servers: BTreeMap<String, String>,
}

/// `run.md`: the one sentence the book states its reference run in.
pub fn page(m: &Machine) -> String {
    let servers: Vec<String> = m.servers.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "{}Every measured figure in this book comes from one reference run: **{}**, commit \
         `{}`, on {} cores ({}), {} GiB, {}, kernel {}; rustc {}; {}. Every data file names \
         the run it came from (`{}`), and the test suite fails when one names another. \
         `./scripts/book-data` re-measures the whole run. Your machine will give other \
         numbers, the same shapes.\n",
        banner("book/data/machine.json"),
        m.date,
        m.commit,
        m.cores,
        m.cpu,
        m.memory_gib,
        m.os,
        m.kernel,
        m.rustc,
        servers.join(", "),
        m.run.as_deref().unwrap_or("no run named"),
    )
}
