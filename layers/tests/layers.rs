//! Every workspace crate's modules depend one way: no import circle, and no layer
//! reaching up. Each crate tree (a library, a binary) declares its layers here, bottom
//! first; a new top-level module must be placed in one (the check says so).

use layers::Graph;
use std::path::{Path, PathBuf};

/// A crate tree: its root file (from the workspace root) and its layers, bottom first.
struct Tree {
    root: &'static str,
    layers: &'static [&'static [&'static str]],
}

const TREES: &[Tree] = &[
    // domain: the order, domain errors, the probe (no actix);
    // strategies: the registry, each strategy and its helpers; service: the deduction
    // below HTTP (its layers: metrics, twins, fast path, admission, idempotency); http:
    // the edge (routes, the edge's errors, OpenAPI, startup, the test hooks).
    Tree {
        root: "app/src/lib.rs",
        layers: &[&["domain"], &["strategies"], &["service"], &["http"]],
    },
    Tree {
        root: "app/src/main.rs",
        layers: &[],
    },
    // The core (guard, watchdog, the backend trait), the backends on it, and Sentinel
    // support on the Redis backend.
    Tree {
        root: "locks/src/lib.rs",
        layers: &[
            &["lock"],
            &[
                "etcd",
                "mysql",
                "noop",
                "redis",
                "redis_simple",
                "redlock",
                "zookeeper",
            ],
            &["redis_sentinel", "redis_cluster"],
        ],
    },
    // Processes and proxies; a kind of server (what each server's file declares); one
    // server each; what combines servers (a replica, a Sentinel group); the stack that
    // starts them all; what the stack says of its servers (their durability).
    Tree {
        root: "testbed/src/lib.rs",
        layers: &[
            &["process", "proxy"],
            &["kind"],
            &["mariadb", "redis", "zookeeper", "etcd", "curator"],
            &["replication", "sentinel", "redis_cluster"],
            &["stack"],
            &["durability"],
        ],
    },
    Tree {
        root: "testbed/src/bin/testbed.rs",
        layers: &[],
    },
    // Sending and recording, and the sections' names; the rates read from a record;
    // the report's rows; the renderers and the servers' lab; the live page; one
    // strategy's run; the demo's stage and what a section is (`Chapter`); the sections
    // (sweep, flash sale, flood, chaos, the demo's own); what composes sections
    // (distance on the sweep, overload with the flood); the HTML page and the book's
    // pages from all of them.
    Tree {
        root: "loadtest/src/lib.rs",
        layers: &[
            &["engine", "verify", "timing", "catalogue", "cost", "section"],
            &["rate", "history"],
            &["report"],
            &[
                "html", "markdown", "lab", "baseline", "claims", "plan", "setup",
            ],
            &["live"],
            &["runner"],
            &["demo", "chapter"],
            &[
                "sweep",
                "flash",
                "flood",
                "chaos",
                "throughput",
                "one_instance",
                "held",
                "far",
                "durability",
            ],
            &["distance", "overload"],
            &["page", "book"],
        ],
    },
    // The history checker: the format; what the ledger says each attempt did; the
    // model (and the history cut into parts) and the named anomalies; the search's look
    // ahead; the search over the model; its corpus and property tests.
    Tree {
        root: "check/src/lib.rs",
        layers: &[
            &["history"],
            &["ledger"],
            &["model", "classes"],
            &["bounds"],
            &["search"],
            &["tests"],
        ],
    },
    Tree {
        root: "loadtest/src/main.rs",
        layers: &[&["cli"]],
    },
    // (The wire's `stock-wire`, three modules that use none of each other, has nothing
    // to layer.)
    // copy-check: the manifest and the size of a copy; making a copy from them.
    Tree {
        root: "copies/src/lib.rs",
        layers: &[&["manifest", "count"], &["make"]],
    },
    Tree {
        root: "copies/src/main.rs",
        layers: &[],
    },
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Whether one of `found` (circles, upward uses) names every one of `needles`.
fn names_all(found: &[String], needles: &[&str]) -> bool {
    found
        .iter()
        .any(|f| needles.iter().all(|needle| f.contains(needle)))
}

fn read(tree: &Tree) -> Graph {
    Graph::read(&workspace().join(tree.root))
}

#[test]
fn every_crate_forms_no_circle_and_its_layers_run_one_way() {
    for tree in TREES {
        let graph = read(tree);
        let circles = graph.circles();
        assert!(
            circles.is_empty(),
            "{}: import circles:\n{}",
            tree.root,
            circles.join("\n")
        );
        let upward = graph.upward(tree.layers);
        assert!(
            upward.is_empty(),
            "{}: a layer reaching up, or a module in no layer (layers: {:?}):\n{}",
            tree.root,
            tree.layers,
            upward.join("\n")
        );
        // The check sees the modules it should: every declared one, and uses between
        // them where there are several.
        for module in tree.layers.iter().flat_map(|l| l.iter()) {
            assert!(
                graph.modules.contains_key(*module),
                "{}: no module `{module}`",
                tree.root
            );
        }
        let modules = graph.modules.len();
        let edges = graph.edges().count();
        println!("{}: {modules} modules, {edges} uses", tree.root);
        assert!(
            modules <= 2 || edges >= modules / 2,
            "{}: {edges} uses among {modules} modules: the reader broke",
            tree.root
        );
    }
}

/// In every crate with uses between its modules, the check fails on a circle made by
/// one more import (the first use `a -> b`, and `b` importing `a`), and where there are
/// layers, on the bottom layer importing the top one.
#[test]
fn the_check_catches_a_deliberate_circle_and_an_upward_import_in_every_crate() {
    for tree in TREES {
        let graph = read(tree);
        let Some((from, to)) = (graph.edges())
            // Two modules neither of which contains the other (a folder's use of its
            // own children is not an edge).
            .find(|(f, t, _)| !t.is_empty() && !f.starts_with(&format!("{t}::")))
            .map(|(f, t, _)| (f.clone(), t.clone()))
        else {
            continue;
        };
        let mut broken = graph.clone();
        broken.add_source(&to, &format!("use crate::{from};"));
        assert!(
            !broken.circles().is_empty(),
            "{}: the circle {from} <-> {to} went unnoticed",
            tree.root
        );
        if let [bottom, .., top] = tree.layers {
            let mut broken = graph.clone();
            broken.add_source(bottom[0], &format!("use crate::{};", top[0]));
            assert!(
                !broken.upward(tree.layers).is_empty(),
                "{}: {} importing {} went unnoticed",
                tree.root,
                bottom[0],
                top[0]
            );
        }
    }
}

/// What counts as a use: a `super::` path in a `use` tree, a path inside a macro call;
/// and what does not: comments, doc comments and strings.
#[test]
fn uses_are_read_from_code_and_macros_not_from_comments() {
    let app = &TREES[0];
    let original = read(app);
    // A circle inside one layer, through `super::` and a `use` tree.
    let mut graph = original.clone();
    graph.add_source("strategies::txn", "use super::{pessimistic::Pessimistic};");
    let circles = graph.circles();
    assert!(
        names_all(&circles, &["strategies::pessimistic"]),
        "a circle through super:: went unnoticed: {circles:?}"
    );
    // A path in a macro's tokens.
    let mut graph = original.clone();
    graph.add_source(
        "domain::order",
        r#"fn f() { let _ = format!("{}", crate::http::routes::deduct_path()); }"#,
    );
    let upward = graph.upward(app.layers);
    assert!(
        names_all(&upward, &["domain::order -> http::routes"]),
        "a path inside format! went unnoticed: {upward:?}"
    );
    // A circle between two folders through different children: `domain::order` using
    // `strategies::txn`, which uses `domain::error`. No two modules use each other; the
    // folders do.
    let mut graph = original.clone();
    graph.add_source("domain::order", "use crate::strategies::txn;");
    let circles = graph.circles();
    assert!(
        names_all(&circles, &["domain -> strategies", "strategies -> domain"]),
        "a circle between folders went unnoticed: {circles:?}"
    );
    // Comments and strings are not code, in a macro call either.
    let mut graph = original;
    graph.add_source(
        "domain::order",
        "// use crate::http;\n/// See [`crate::http::routes`].\nfn f() -> String { format!(\"crate::http::routes {}\", \"crate::http\") }",
    );
    assert!(
        graph.upward(app.layers).is_empty(),
        "a comment or a string counted as a use: {:?}",
        graph.upward(app.layers)
    );
}
