//! Every lock backend is in each place CONTRIBUTING.md's "Adding a lock backend"
//! lists, and every kind of server the testbed starts is in each place its section
//! lists: a backend forgotten somewhere fails here, named, not when someone copies it
//! or starts the servers by hand. Reads the files; needs no server.
//!
//! It stays a check of files on purpose: the places are a Cargo manifest (read with
//! the `toml` crate), `lib.rs`'s feature gates, the suite's `subjects!` list, a shell
//! script, `.env.sample` and a compose file, which no Rust type spans.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The backends: the features of `locks/Cargo.toml` (one per backend) but `default`.
fn backends() -> Vec<String> {
    let manifest: toml::Table = read("locks/Cargo.toml").parse().expect("locks/Cargo.toml");
    let features = manifest["features"]
        .as_table()
        .expect("locks/Cargo.toml has [features]");
    features
        .keys()
        .filter(|name| *name != "default")
        .cloned()
        .collect()
}

/// Each backend: its `pub mod` behind its feature in `locks/src/lib.rs` and its entry
/// in the shared lock suite's `subjects!` (`locks/tests/suite.rs`). Its copy is
/// `copies.toml`'s (the `copies` crate's test holds every feature to an entry there).
#[test]
fn every_backend_is_in_every_place_contributing_names() {
    let (lib, suite) = (read("locks/src/lib.rs"), read("locks/tests/suite.rs"));
    let subjects = suite
        .split("\nsubjects! {")
        .nth(1)
        .expect("locks/tests/suite.rs: the subjects! list");
    let backends = backends();
    assert!(backends.len() >= 5, "features of locks: {backends:?}");
    let mut missing = Vec::new();
    for backend in &backends {
        if !lib.contains(&format!("#[cfg(feature = \"{backend}\")]\npub mod ")) {
            missing.push(format!(
                "{backend}: no `pub mod` behind its feature in locks/src/lib.rs"
            ));
        }
        if !subjects.contains(&format!("\n    {backend}: ")) {
            missing.push(format!(
                "{backend}: no entry in subjects! (locks/tests/suite.rs)"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Each kind of server the testbed starts (`testbed::KINDS`): its Debian package in
/// `scripts/install-deps`, its variable in `.env.sample` and in the services'
/// environment of `docker-compose.yml`.
#[test]
fn every_server_kind_is_in_every_place_contributing_names() {
    let (install_deps, env_sample, compose) = (
        read("scripts/install-deps"),
        read(".env.sample"),
        read("docker-compose.yml"),
    );
    let mut missing = Vec::new();
    for kind in testbed::KINDS {
        if !install_deps.contains(&format!("missing+=({})", kind.package)) {
            missing.push(format!(
                "{}: package {} not in scripts/install-deps",
                kind.name, kind.package
            ));
        }
        if !env_sample.contains(&format!("{}=", kind.variable)) {
            missing.push(format!(
                "{}: {} not in .env.sample",
                kind.name, kind.variable
            ));
        }
        if !compose.contains(&format!("    {}: \"", kind.variable)) {
            missing.push(format!(
                "{}: {} not in docker-compose.yml",
                kind.name, kind.variable
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
