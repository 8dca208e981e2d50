//! A strategy is named in one place: its own file (or folder) and the registry's line.
//! (The module layers of every crate are checked by the `layers` crate's test.)

use std::path::{Path, PathBuf};

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
        // A folder strategy's folder; a file's child modules (`atomic_sql/served.rs`).
        let own = if source.ends_with("mod.rs") {
            source.parent().expect("a folder").to_path_buf()
        } else {
            source.with_extension("")
        };
        assert!(
            source.exists(),
            "{}: no file {}",
            card.info.name,
            card.info.source
        );
        for file in &files {
            if *file == source || file.starts_with(&own) || *file == registry_file {
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

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}
