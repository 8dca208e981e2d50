//! The app's modules depend one way: no import circle, and no layer reaching up.
//!
//! ```text
//! http        the edge: routes, the error-to-status map, OpenAPI, metrics, /ready,
//!   |         startup, configuration, the test hooks' implementation
//!   v
//! strategies  the registry, each strategy, and their helpers (transaction,
//!   |         idempotency, fencing, the lock algorithm)
//!   v
//! domain      the order and its parsing, domain errors, the probe (no actix)
//! ```
//!
//! This test reads `app/src` as text: every `crate::…` and `super::…` path (in `use`
//! trees too), and every path through a child module a file declares, resolved to the
//! deepest module file it names. It fails on a circle between module files (listing
//! the imports that make it) and on an import from a lower layer into a higher one.
//! No crate does this for a library's own modules without a full compiler front end
//! (`cargo-modules` builds rust-analyzer: minutes), and the rules of paths we use are
//! few: `crate::`, `super::`, and a child module's name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first: a module may use its own layer and those below.
const LAYERS: [&str; 3] = ["domain", "strategies", "http"];

#[test]
fn modules_form_no_circle_and_layers_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::read(&src);
    let circles = graph.circles();
    assert!(
        circles.is_empty(),
        "import circles between the app's modules:\n{}",
        circles.join("\n")
    );
    let upward = graph.upward();
    assert!(
        upward.is_empty(),
        "imports from a lower layer into a higher one ({}):\n{}",
        LAYERS.join(" < "),
        upward.join("\n")
    );
    // The check sees the modules it should: every layer, and the edges between them.
    for layer in LAYERS {
        assert!(graph.modules.contains_key(layer), "no module `{layer}`");
    }
    assert!(
        graph.edges().count() > 50,
        "too few imports found: the parser broke"
    );
}

/// The check itself fails on a circle and on an upward import (a copy of the sources
/// with one line added each time).
#[test]
fn the_check_catches_a_deliberate_circle_and_an_upward_import() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = Graph::read(&src);
    // `domain::order` using the registry: a lower layer reaching up, and a circle
    // (the strategies use the order).
    graph.add_source("domain::order", "use crate::strategies::Strategies;");
    assert!(!graph.circles().is_empty(), "a circle went unnoticed");
    assert!(
        graph
            .upward()
            .iter()
            .any(|e| e.contains("domain::order -> strategies")),
        "an upward import went unnoticed: {:?}",
        graph.upward()
    );
    // A circle inside one layer, through a `super::` path and a `use` tree.
    let mut graph = Graph::read(&src);
    graph.add_source("strategies::txn", "use super::{pessimistic::Pessimistic};");
    let circles = graph.circles();
    assert!(
        circles
            .iter()
            .any(|c| c.contains("strategies::pessimistic")),
        "a circle through super:: went unnoticed: {circles:?}"
    );
}

struct Graph {
    /// Module path (`strategies::txn`) → the child modules it declares.
    modules: BTreeMap<String, BTreeSet<String>>,
    /// Module → modules it uses (its own path excluded), with one line that does it.
    uses: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut files = Vec::new();
        collect(src, &mut files);
        let mut modules = BTreeMap::new();
        let mut sources = Vec::new();
        for file in files {
            let module = module_path(src, &file);
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let code = strip_comments(&text);
            let children: BTreeSet<String> = code
                .lines()
                .filter_map(|l| {
                    let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
                    let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
                    Some(name.trim().to_string())
                })
                .collect();
            modules.insert(module.clone(), children);
            sources.push((module, code));
        }
        let mut graph = Graph {
            modules,
            uses: BTreeMap::new(),
        };
        for (module, code) in sources {
            graph.add_source(&module, &code);
        }
        graph
    }

    /// Adds the imports of `code`, as if written in `module`.
    fn add_source(&mut self, module: &str, code: &str) {
        if module.is_empty() {
            return; // lib.rs and main.rs: declarations and re-exports, the crate's face
        }
        let children = self.modules.get(module).cloned().unwrap_or_default();
        for line in code.lines() {
            for path in paths_in(line, &children) {
                let Some(absolute) = absolute(module, &path) else {
                    continue;
                };
                if let Some(target) = self.resolve(&absolute)
                    && target != module
                {
                    self.uses
                        .entry(module.to_string())
                        .or_default()
                        .entry(target)
                        .or_insert_with(|| line.trim().to_string());
                }
            }
        }
    }

    /// The deepest module a path goes through.
    fn resolve(&self, path: &[String]) -> Option<String> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| self.modules.contains_key(m))
    }

    fn edges(&self) -> impl Iterator<Item = (&String, &String, &String)> {
        self.uses
            .iter()
            .flat_map(|(from, to)| to.iter().map(move |(t, line)| (from, t, line)))
    }

    /// Each circle (a strongly connected set of two or more modules), with its edges.
    fn circles(&self) -> Vec<String> {
        let names: Vec<&String> = self.modules.keys().collect();
        let reach = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(m) = todo.pop() {
                for next in self.uses.get(&m).into_iter().flat_map(|t| t.keys()) {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let reachable: BTreeMap<&String, BTreeSet<String>> =
            names.iter().map(|m| (*m, reach(m))).collect();
        let mut done = BTreeSet::new();
        let mut circles = Vec::new();
        for m in &names {
            if done.contains(*m) || !reachable[m].contains(*m) {
                continue;
            }
            let members: BTreeSet<&String> = names
                .iter()
                .copied()
                .filter(|o| *o == *m || (reachable[m].contains(*o) && reachable[o].contains(*m)))
                .collect();
            let edges: Vec<String> = self
                .edges()
                .filter(|(f, t, _)| members.contains(f) && members.contains(t))
                .map(|(f, t, line)| format!("  {f} -> {t}    ({line})"))
                .collect();
            circles.push(format!(
                "circle of {}:\n{}",
                members.len(),
                edges.join("\n")
            ));
            done.extend(members.into_iter().cloned());
        }
        circles
    }

    /// Imports from a module of a lower layer into a higher layer.
    fn upward(&self) -> Vec<String> {
        let rank = |m: &str| LAYERS.iter().position(|l| m.split("::").next() == Some(l));
        self.edges()
            .filter_map(|(f, t, line)| match (rank(f), rank(t)) {
                (Some(a), Some(b)) if b > a => Some(format!("  {f} -> {t}    ({line})")),
                (Some(_), None) => Some(format!("  {f} -> {t} (outside the layers)  ({line})")),
                _ => None,
            })
            .collect()
    }
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read app/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/strategies/locks/mod.rs` → `strategies::locks`; `src/lib.rs` → ``.
fn module_path(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// Source without `//` comments (doc comments included) and string contents.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| {
            let mut out = String::new();
            let mut in_string = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '"' => in_string = !in_string,
                    '\\' if in_string => {
                        chars.next();
                    }
                    '/' if !in_string && chars.peek() == Some(&'/') => break,
                    _ if in_string => {}
                    _ => out.push(c),
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path on a line that starts at `crate::`, `super::` or a child module,
/// with `use` trees (`crate::{a, b::{c, d}}`) expanded.
fn paths_in(line: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0
            || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_' || bytes[i - 1] == ':');
        if at_word_start && (bytes[i].is_alphabetic() || bytes[i] == '_') {
            let (word, end) = word_at(&bytes, i);
            let rooted = word == "crate" || word == "super" || children.contains(&word);
            if rooted && bytes.get(end) == Some(&':') && bytes.get(end + 1) == Some(&':') {
                let (paths, next) = tree(&bytes, end + 2, vec![word]);
                found.extend(paths);
                i = next;
                continue;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

fn word_at(chars: &[char], start: usize) -> (String, usize) {
    let mut end = start;
    while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
        end += 1;
    }
    (chars[start..end].iter().collect(), end)
}

/// Reads a path (or a `{...}` tree of them) after `prefix::`.
fn tree(chars: &[char], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    if chars.get(i) == Some(&'{') {
        let mut paths = Vec::new();
        i += 1;
        loop {
            while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                i += 1;
            }
            match chars.get(i) {
                None => return (paths, i),
                Some('}') => return (paths, i + 1),
                _ => {}
            }
            let (inner, next) = tree(chars, i, prefix.clone());
            paths.extend(inner);
            // Skip an `as name` and anything else up to the next item.
            i = next;
            while chars.get(i).is_some_and(|c| *c != ',' && *c != '}') {
                i += 1;
            }
        }
    }
    let mut path = prefix;
    loop {
        let (word, end) = word_at(chars, i);
        if word.is_empty() {
            return (vec![path], i);
        }
        path.push(word);
        i = end;
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            if chars.get(i) == Some(&'{') {
                return tree(chars, i, path);
            }
        } else {
            return (vec![path], i);
        }
    }
}

/// A path as written in `module`, made absolute (`super::txn` in
/// `strategies::pessimistic` → `strategies::txn`); `None` for `self` alone.
fn absolute(module: &str, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = module.split("::").map(str::to_string).collect();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {} // a child module of `module`
    }
    let rest: Vec<String> = rest.iter().filter(|p| *p != "self").cloned().collect();
    if rest.is_empty() {
        return None;
    }
    base.extend(rest);
    Some(base)
}

/// A strategy is named in one place: its own file (or folder), and the registry's
/// line. Everything else (the service around the strategies, the load test) asks the
/// registry, so adding or renaming one touches nothing else, and nothing can forget
/// it silently. Names are looked for where code names them: string literals and
/// comments (`unsafe` the keyword is not `"unsafe"` the strategy). Three exceptions:
/// test modules and test files may name what they test; the strategies' own docs may
/// compare themselves with one another (their code may not); and the few places in
/// [`ALSO`], each with its reason.
#[test]
fn no_strategy_is_named_outside_its_own_file_or_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let settings = stock_app::Settings::for_database("mysql://localhost/unused");
    let context = stock_app::strategies::Context {
        database_url: &settings.database_url,
        shared: &settings.shared,
    };
    let registry = stock_app::strategies::all(&settings.strategies, &context);
    let mut files = Vec::new();
    collect(&root.join("app/src"), &mut files);
    collect(&root.join("loadtest/src"), &mut files);
    let registry_file = root.join("app/src/strategies/mod.rs");
    let mut found = Vec::new();
    for card in registry.cards() {
        let source = root.join(card.info.source);
        let own = if source.ends_with("mod.rs") {
            source.parent().expect("a folder").to_path_buf()
        } else {
            source.clone()
        };
        assert!(
            source.exists(),
            "{}: no file {}",
            card.info.name,
            card.info.source
        );
        for file in &files {
            if file.starts_with(&own) || *file == registry_file {
                continue;
            }
            let text = std::fs::read_to_string(file).expect("read a source file");
            let relative = file.strip_prefix(&root).unwrap_or(file).to_string_lossy();
            let prose_allowed = relative.starts_with("app/src/strategies/");
            if ALSO
                .iter()
                .any(|(f, n, _)| *f == relative && *n == card.info.name)
            {
                continue;
            }
            for (n, line) in non_test_lines(&text) {
                let (strings, comment) = said(line);
                let words = if prose_allowed {
                    strings
                } else {
                    strings + " " + &comment
                };
                if named(&words, card.info.name) {
                    let path = file.strip_prefix(&root).unwrap_or(file).display();
                    found.push(format!("  {}: {path}:{n}: {}", card.info.name, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "strategies named outside their own file or folder ({}):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The lines of `text` before its test module (`#[cfg(test)]`), numbered from 1; none
/// of a file of tests.
fn non_test_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .map(|(i, l)| (i + 1, l))
}

/// Where a strategy's name may appear outside its own place: (file, name, why).
const ALSO: [(&str, &str, &str); 5] = [
    (
        "app/src/strategies/shared.rs",
        "zookeeper",
        "the server of that name",
    ),
    (
        "app/src/strategies/distributed/mistakes.rs",
        "zookeeper",
        "the server of that name, which the persistent-node mistake uses",
    ),
    (
        "loadtest/src/cli/mod.rs",
        "zookeeper",
        "the server's version",
    ),
    (
        "loadtest/src/report.rs",
        "zookeeper",
        "the server's version",
    ),
    (
        "loadtest/src/chaos/lab.rs",
        "redlock",
        "the RedLock scenarios read the lock's key on each node",
    ),
];

/// What a line says in words: its string literals, and its comment.
fn said(line: &str) -> (String, String) {
    let mut out = String::new();
    let mut in_string = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_string = !in_string;
                out.push(' ');
            }
            '\\' if in_string => {
                chars.next();
            }
            '/' if !in_string && chars.peek() == Some(&'/') => {
                return (out, chars.collect());
            }
            _ if in_string => out.push(c),
            _ => {}
        }
    }
    (out, String::new())
}

/// Whether `name` appears in `words` as a whole name (not inside `redis-lock-min`).
fn named(words: &str, name: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    words.match_indices(name).any(|(at, _)| {
        let before = words[..at].chars().next_back();
        let after = words[at + name.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}
