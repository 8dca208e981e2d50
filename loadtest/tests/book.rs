//! The book (`book/`) cannot drift from the code or the data:
//! - its generated pages equal what `loadtest book` renders from `book/data/*.json` and
//!   from the code (`--help`, a running service's `/openapi.json`, `/strategies`,
//!   `/metrics`), and the README's strategy map equals `GET /strategies`;
//! - a figure changed by hand fails that check;
//! - every chapter is in `SUMMARY.md`, every internal link and `{{#include}}` resolves
//!   (anchors included);
//! - every registered strategy has its chapter, its `SUMMARY.md` line, its generated
//!   page and its row in the README's map (CONTRIBUTING.md's "Adding a strategy");
//! - every command the book and the README show exists, with flags its `--help` lists,
//!   scenarios and strategies the data names.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn loadtest() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loadtest"));
    command.current_dir(root());
    command
}

/// Builds testbed's binary beside stock-app's when this run did not.
fn testbed_bin() {
    let app = support::app_bin();
    if app.with_file_name("testbed").is_file() {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "testbed", "--bin", "testbed"])
        .current_dir(root())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p testbed failed");
}

/// Every markdown file of the book's chapters (not the generated pages) and the README.
fn chapters() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("book/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.push(root().join("README.md"));
    files
}

/// Every generated page.
fn generated() -> Vec<PathBuf> {
    let dir = root().join("book/src/generated");
    let pages = loadtest::book::read_tree(&dir).unwrap();
    pages.keys().map(|rel| dir.join(rel)).collect()
}

/// The committed generated pages and the README's strategy map equal what the data
/// and the code give (the service runs on a private stack).
#[test]
fn generated_pages_equal_the_data_and_the_code() {
    testbed_bin();
    let output = loadtest()
        .args(["book", "--check", "--app-bin"])
        .arg(support::app_bin())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "loadtest book --check failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One figure changed by hand in a copy of the pages: the check fails and names it.
#[test]
fn a_figure_typed_by_hand_fails_the_check() {
    testbed_bin();
    let copy = tempfile::tempdir().unwrap();
    for page in generated() {
        let rel = page
            .strip_prefix(root().join("book/src/generated"))
            .unwrap();
        let to = copy.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&page, &to).unwrap();
    }
    // The first figure of the first table row of the contended benchmark.
    let page = copy.path().join("bench/contended.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("| ours: "))
        .expect("a row of ours");
    let figure = row.split(" | ").nth(1).unwrap().to_string();
    let changed = row.replacen(&format!(" | {figure} | "), &format!(" | {}1 | ", figure), 1);
    std::fs::write(&page, text.replacen(row, &changed, 1)).unwrap();

    let output = loadtest()
        .args(["book", "--check", "--out"])
        .arg(copy.path())
        .arg("--app-bin")
        .arg(support::app_bin())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the check passed a changed figure"
    );
    assert!(
        stderr.contains("bench/contended.md: differs"),
        "the check did not name the page: {stderr}"
    );
    assert_eq!(
        stderr.matches(": differs").count(),
        1,
        "only that page differs: {stderr}"
    );
}

/// `{{#include path}}` and `{{#include path:anchor}}` in `text`.
fn includes(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for part in text.split("{{#include ").skip(1) {
        let target = part.split("}}").next().unwrap().trim();
        match target.split_once(':') {
            Some((path, anchor)) => out.push((path.to_string(), Some(anchor.to_string()))),
            None => out.push((target.to_string(), None)),
        }
    }
    out
}

/// Markdown links `[text](target)` in `text`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (_, line) in loadtest::markdown::outside_code(text) {
        for part in line.split("](").skip(1) {
            if let Some(target) = part.split(')').next() {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// The ids a page offers to `#fragment` links: its headings as mdBook makes them and
/// explicit `id="..."`, its included pages' too.
fn ids(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_default();
    let mut ids = BTreeSet::new();
    let mut all = text.clone();
    for (path, _) in includes(&text) {
        all.push_str(
            &std::fs::read_to_string(page.parent().unwrap().join(path)).unwrap_or_default(),
        );
    }
    for line in all.lines() {
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#').trim();
            let slug: String = heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            ids.insert(slug);
        }
        for part in line.split("id=\"").skip(1) {
            ids.insert(part.split('"').next().unwrap().to_string());
        }
    }
    ids
}

/// Every chapter is in SUMMARY.md and every SUMMARY entry exists; every include
/// resolves, with its anchor; every internal link resolves, with its fragment.
#[test]
fn every_link_and_include_resolves() {
    let src = root().join("book/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let mut problems = Vec::new();
    for chapter in chapters() {
        let name = chapter.file_name().unwrap().to_string_lossy().to_string();
        if chapter.starts_with(&src) && name != "SUMMARY.md" && !listed.contains(&name) {
            problems.push(format!("{name}: not in SUMMARY.md"));
        }
    }
    for entry in &listed {
        if !src.join(entry).is_file() {
            problems.push(format!("SUMMARY.md: {entry} does not exist"));
        }
    }
    let mut pages: Vec<(PathBuf, PathBuf)> = chapters()
        .into_iter()
        .map(|c| {
            let base = c.parent().unwrap().to_path_buf();
            (c, base)
        })
        .collect();
    // A generated page's links resolve from the chapter that includes it (book/src).
    pages.extend(generated().into_iter().map(|g| (g, src.clone())));
    for (page, base) in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let shown = page.strip_prefix(root()).unwrap().display().to_string();
        for (path, anchor) in includes(&text) {
            let target = page.parent().unwrap().join(&path);
            let Ok(included) = std::fs::read_to_string(&target) else {
                problems.push(format!("{shown}: {{{{#include {path}}}}}: no such file"));
                continue;
            };
            if let Some(anchor) = anchor
                && !(included.contains(&format!("ANCHOR: {anchor}\n"))
                    && included.contains(&format!("ANCHOR_END: {anchor}")))
            {
                problems.push(format!("{shown}: {path} has no anchor {anchor}"));
            }
        }
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                base.join(path)
            };
            if !target.exists() {
                problems.push(format!("{shown}: link {link}: no such file"));
            } else if !fragment.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !ids(&target).contains(fragment)
            {
                problems.push(format!("{shown}: link {link}: no such anchor"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every registered strategy is in each place CONTRIBUTING.md's "Adding a strategy"
/// names beyond its file and its registry line: its chapter `book/src/<name>.md`, which
/// includes its generated page; its line in `book/src/SUMMARY.md`; that page,
/// `book/src/generated/strategies/<name>.md`; and its row in the README's strategy map
/// (`loadtest book` renders both). A strategy forgotten in one of them fails here,
/// named, without a server.
#[test]
fn every_strategy_is_in_every_place_contributing_names() {
    let src = root().join("book/src");
    let settings = stock_app::Settings::for_database("mysql://localhost/unused");
    let context = stock_app::strategies::Context {
        database_url: &settings.database_url,
        shared: &settings.shared,
    };
    let registry = stock_app::strategies::all(&settings.strategies, &context);
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let map = readme
        .split("<!-- strategy-map:")
        .nth(1)
        .and_then(|rest| rest.split("<!-- strategy-map end -->").next())
        .expect("README.md: the strategy map's markers");
    let cards = registry.cards();
    assert!(cards.len() >= 10, "registered strategies: {}", cards.len());
    let mut missing = Vec::new();
    for card in cards {
        let name = card.info.name;
        let chapter = std::fs::read_to_string(src.join(format!("{name}.md"))).unwrap_or_default();
        if chapter.is_empty() {
            missing.push(format!("{name}: no chapter book/src/{name}.md"));
        }
        if !summary.contains(&format!("[{name}]({name}.md)")) {
            missing.push(format!(
                "{name}: no line `- [{name}]({name}.md)` in book/src/SUMMARY.md"
            ));
        }
        let page = format!("generated/strategies/{name}.md");
        if !chapter.is_empty() && !chapter.contains(&format!("{{{{#include {page}}}}}")) {
            missing.push(format!("{name}: its chapter does not include {page}"));
        }
        if !src.join(&page).is_file() {
            missing.push(format!("{name}: no book/src/{page} (run `loadtest book`)"));
        }
        if !map.contains(&format!("| `{name}` |")) {
            missing.push(format!(
                "{name}: no row in README.md's strategy map (run `loadtest book`)"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The `--help` of `loadtest SUB`.
fn help(sub: &str) -> String {
    let output = loadtest().args([sub, "--help"]).output().unwrap();
    assert!(output.status.success(), "loadtest {sub} --help");
    String::from_utf8(output.stdout).unwrap()
}

/// A shown command, split into words (`# comment` dropped).
fn words(line: &str) -> Vec<String> {
    let line = line.split(" #").next().unwrap();
    line.split_whitespace().map(str::to_string).collect()
}

/// Every command the chapters and the README show (in `sh` blocks and in backticks)
/// exists: its script, its subcommand, each flag in its `--help`, each scenario and
/// strategy it names in the reference run's data.
#[test]
fn every_command_shown_exists() {
    let data = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(root().join("book/data").join(name)).unwrap())
            .unwrap()
    };
    let demo = data("demo.json");
    let strategies: BTreeSet<String> = demo["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    let chaos = data("chaos.json");
    let mut scenarios = BTreeSet::new();
    for s in chaos["faults"]["scenarios"].as_array().unwrap() {
        scenarios.insert(s["id"].as_str().unwrap().to_string());
        scenarios.insert(s["number"].to_string());
    }
    let mut commands: Vec<(String, String)> = Vec::new();
    for chapter in chapters() {
        let text = std::fs::read_to_string(&chapter).unwrap();
        let shown = chapter.file_name().unwrap().to_string_lossy().to_string();
        let mut in_sh = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            if in_sh && !line.trim().is_empty() {
                commands.push((shown.clone(), line.trim().to_string()));
            } else if !in_sh {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1
                        && (span.starts_with("./scripts/") || span.starts_with("loadtest "))
                    {
                        commands.push((shown.clone(), span.to_string()));
                    }
                }
            }
        }
    }
    assert!(commands.len() > 20, "found the commands: {commands:?}");
    let mut problems = Vec::new();
    let mut helps = std::collections::BTreeMap::new();
    for (shown, command) in &commands {
        let words = words(command);
        let Some(first) = words.first() else { continue };
        let sub = if let Some(script) = first.strip_prefix("./scripts/") {
            if !root().join("scripts").join(script).is_file() {
                problems.push(format!("{shown}: `{command}`: no script {script}"));
                continue;
            }
            match script {
                "demo" | "chaos" | "sweep" => script.to_string(),
                _ => continue,
            }
        } else if first == "loadtest" || first.ends_with("/loadtest") {
            match words.get(1) {
                Some(sub) => sub.clone(),
                None => continue,
            }
        } else {
            continue;
        };
        let help = helps.entry(sub.clone()).or_insert_with(|| help(&sub));
        for (i, word) in words.iter().enumerate() {
            let Some(flag) = word.strip_prefix("--") else {
                continue;
            };
            let flag = flag.split('=').next().unwrap();
            if !help.contains(&format!("--{flag} ")) && !help.contains(&format!("--{flag}\n")) {
                problems.push(format!(
                    "{shown}: `{command}`: loadtest {sub} has no --{flag}"
                ));
            }
            let value = words.get(i + 1).map(String::as_str).unwrap_or("");
            let names = |known: &BTreeSet<String>, what: &str, problems: &mut Vec<String>| {
                for name in value.split(',') {
                    if !known.contains(name) {
                        problems.push(format!("{shown}: `{command}`: no {what} {name}"));
                    }
                }
            };
            match flag {
                "scenario" => names(&scenarios, "scenario", &mut problems),
                "strategies" => names(&strategies, "strategy", &mut problems),
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------
// No measured figure typed by hand: a number with a unit comes from the data.

/// Units that make a number a measured figure: time, rates, shares, ratios, sizes,
/// "N things per sale", and sales lost.
const UNIT: &str = r"(?:ns|µs|us|ms|s|secs?|seconds?|milliseconds?|microseconds?|minutes?|mins?|hours?|%|percent|×|MB|MiB|GB|GiB|KiB|kB|bytes|[A-Za-z]+/s|(?:[a-z]+ )?per second|(?:a|per) second|[a-z]+(?: [a-z]+)? per (?:sale|request|transaction|answer|acquisition)|(?:sales?|updates?) (?:lost|erased|vanished|missing)|lost updates?)";

/// Numbers spelled out, and the vague ones that stand for a figure ("a few thousand").
const NUMBER_WORD: &str = r"(?:several|few|tens|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?|dozens?|half)";

/// A number (or a range of two) or a number word, then a unit.
fn figure_pattern() -> &'static regex::Regex {
    static PATTERN: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(build_figure_pattern);
    &PATTERN
}

fn build_figure_pattern() -> regex::Regex {
    let number = r"\d[\d,]*(?:\.\d+)?(?:\s*[–-]\s*\d[\d,]*(?:\.\d+)?)?";
    regex::Regex::new(&format!(
        r"(?i)(?:^|[^\w.#/-])((?:{number}|{NUMBER_WORD}\b)(?:\s+{NUMBER_WORD}\b)?(?:\s*[%×]|x\b|(?:ms|µs|ns)\b|\s+{UNIT}))(?:[^\w/]|$)"
    ))
    .unwrap()
}

/// The figures with a unit in `text`.
fn figures_in(pattern: &regex::Regex, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = pattern.captures_at(text, at) {
        let m = found.get(1).unwrap();
        out.push(m.as_str().to_string());
        at = m.end();
    }
    out
}

/// A chapter's prose, line by line: code blocks, inline code, includes, link targets
/// and HTML comments left out.
fn prose(text: &str) -> Vec<(usize, String)> {
    let code = regex::Regex::new(r"`[^`]*`").unwrap();
    let include = regex::Regex::new(r"\{\{#include [^}]*\}\}").unwrap();
    let target = regex::Regex::new(r"\]\([^)]*\)").unwrap();
    let comment = regex::Regex::new(r"<!--.*?-->").unwrap();
    let mut out = Vec::new();
    for (i, line) in loadtest::markdown::outside_code(text) {
        let line = code.replace_all(line, "``");
        let line = include.replace_all(&line, "INCLUDED");
        let line = target.replace_all(&line, "]()");
        let line = comment.replace_all(&line, "");
        out.push((i + 1, line.into_owned()));
    }
    out
}

/// The comments of the code a chapter includes (`{{#include file:anchor}}` of a
/// source file, or a whole Lua script), line by line.
fn included_comments(chapter: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(chapter).unwrap();
    let mut out = Vec::new();
    for (path, anchor) in includes(&text) {
        if path.starts_with("generated/") {
            continue;
        }
        let file = chapter.parent().unwrap().join(&path);
        let Ok(source) = std::fs::read_to_string(&file) else {
            continue;
        };
        let mut inside = anchor.is_none();
        for (i, line) in source.lines().enumerate() {
            if let Some(anchor) = &anchor {
                if line.contains(&format!("ANCHOR: {anchor}")) {
                    inside = true;
                    continue;
                }
                if line.contains(&format!("ANCHOR_END: {anchor}")) {
                    inside = false;
                }
            }
            let trimmed = line.trim_start();
            let comment = trimmed
                .strip_prefix("//")
                .or_else(|| trimmed.strip_prefix("--"));
            if let (true, Some(comment)) = (inside, comment) {
                out.push((format!("{path}:{}", i + 1), comment.to_string()));
            }
        }
    }
    out
}

/// Numbers with a unit the chapters may type: settings the reader chooses or the
/// experiment is built with, not measurements. (chapter, figure, why).
const SETTINGS: &[(&str, &str, &str)] = &[
    ("faults.md", "30 s", "the clock jump the scenario makes"),
    (
        "measuring.md",
        "2.5 s",
        "a throughput run's length in the reference run (--seconds)",
    ),
    (
        "measuring.md",
        "0.5 s",
        "a throughput round's length in the quick demo (--seconds)",
    ),
    (
        "measuring.md",
        "2 ms",
        "the round-trip time the far table adds (--far-rtt-ms)",
    ),
    (
        "measuring.md",
        "15 %",
        "the margin a claim needs (claims.rs)",
    ),
    (
        "measuring.md",
        "5 s",
        "the lock wait's default (--lock-wait-ms)",
    ),
    (
        "running.md",
        "2 ms",
        "the round-trip time the far table adds (--far-rtt-ms)",
    ),
    (
        "README.md",
        "2 ms",
        "the round-trip time the far table adds (--far-rtt-ms)",
    ),
    (
        "glossary.md",
        "half a second",
        "where a held refusal's Retry-After rounds to 0 (to the nearest second, routes.rs)",
    ),
    (
        "isolation.md",
        "1 s",
        "innodb_lock_wait_timeout as the script sets it",
    ),
    (
        "locks/src/redis.rs",
        "2 s",
        "the Redis lock's command timeout",
    ),
    (
        "locks/src/zookeeper.rs",
        "10 s",
        "how long the ZooKeeper lock retries a lost connection",
    ),
];

/// Every number with a unit typed into a chapter's prose or into a comment of the code
/// it includes, but for the settings above.
fn typed_figures() -> (Vec<String>, BTreeSet<(String, String)>) {
    let pattern = figure_pattern();
    let mut typed = Vec::new();
    let mut allowed_seen = BTreeSet::new();
    let mut pages = chapters();
    pages.push(root().join("CONTRIBUTING.md"));
    for chapter in pages {
        let name = chapter.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&chapter).unwrap();
        let mut lines: Vec<(String, String)> = prose(&text)
            .into_iter()
            .map(|(n, line)| (format!("{name}:{n}"), line))
            .collect();
        lines.extend(included_comments(&chapter));
        for (place, line) in lines {
            // A chapter by its name, an included file by its path from the root.
            let file = place
                .rsplit_once(':')
                .unwrap()
                .0
                .trim_start_matches("../../");
            for figure in figures_in(pattern, &line) {
                let allowed = SETTINGS
                    .iter()
                    .any(|(f, setting, _)| *f == file && *setting == figure);
                if allowed {
                    allowed_seen.insert((file.to_string(), figure));
                } else {
                    typed.push(format!("{place}: \"{figure}\" in: {}", line.trim()));
                }
            }
        }
    }
    (typed, allowed_seen)
}

/// The pattern finds the figures the book once typed by hand, and leaves settings,
/// counts of things and words alone.
#[test]
fn the_figure_pattern_finds_typed_figures() {
    let pattern = figure_pattern();
    for typed in [
        "It costs five statements per sale still.",
        "a few thousand sales per second here",
        "replica-lag: 1604 sales lost, fenced",
        "487 x lock_lost, 1349 ms, in an earlier run",
        "goodput 82.5 % of the offered load",
        "batched sold 8.71× the reference",
        "the first build takes several minutes",
        "1,062-1,849 sales/s",
        "held for 5ms, then 8.7x faster",
        "a few milliseconds between read and write",
    ] {
        assert!(
            !figures_in(pattern, typed).is_empty(),
            "not found in {typed:?}"
        );
    }
    for not_a_figure in [
        "one unit sold twice, two buyers, ten slices",
        "read, check and write become one statement",
        "the ones that wake their waiters",
        "RedLock: 2 of 5 nodes frozen",
        "chaos scenario 1 and step 8",
    ] {
        assert_eq!(
            figures_in(pattern, not_a_figure),
            Vec::<String>::new(),
            "{not_a_figure:?}"
        );
    }
}

/// No chapter types a measured figure: every number with a unit in the prose (and in
/// the comments of the code it includes) comes from a generated page, or is a setting
/// on the list, and every setting on the list is still used.
#[test]
fn no_figure_is_typed_in_a_chapter() {
    let (typed, seen) = typed_figures();
    assert_no_typed_figure(
        &typed,
        SETTINGS,
        &seen,
        "figures typed by hand (include a generated fact, or say it without the figure; a setting goes on SETTINGS with its reason)",
    );
}

/// Fails naming every typed figure, then every entry of `allowed` (file, figure, why)
/// that `seen` no longer met: an allow-list never outlives what it allows.
fn assert_no_typed_figure(
    typed: &[String],
    allowed: &[(&str, &str, &str)],
    seen: &BTreeSet<(String, String)>,
    what: &str,
) {
    assert!(typed.is_empty(), "{what}:\n{}", typed.join("\n"));
    let unused: Vec<String> = allowed
        .iter()
        .filter(|(file, figure, _)| !seen.contains(&(file.to_string(), figure.to_string())))
        .map(|(file, figure, why)| format!("{file}: \"{figure}\" ({why})"))
        .collect();
    assert!(
        unused.is_empty(),
        "on the allow-list, and no longer typed anywhere:\n{}",
        unused.join("\n")
    );
}

/// String fields whose numbers are measured (the chaos runner's reasons, the claims'
/// evidence): moved with the rest. Every other string names something (an id, a
/// section, a load, a colour, a version) and stays as it is, so the moved data names
/// the same pages and rows.
const TEXTS_WITH_FIGURES: &[&str] = &["why", "evidence", "explanation", "load", "says"];

/// String fields that describe the setup (a scenario, a section, a mode): left as
/// they are, and their numbers count as settings.
const SETUP_TEXTS: &[&str] = &[
    "how",
    "title",
    "section",
    "measured_in",
    "requests_rule",
    "capacity_from",
    "mode",
];

/// Fields that hold the run's settings, not its measurements (requests in flight,
/// products, distances, lengths, counts that name rows): left as they are, because
/// the pages find their rows by them. A figure equal to one of their values is a
/// setting rendered from the data, and may stay the same.
const SETTING_FIELDS: &[&str] = &[
    "after_ms",
    "buckets",
    "buckets_default",
    "buyers",
    "cell_seconds",
    "concurrencies",
    "concurrency",
    "contended_seconds",
    "cores",
    "factor",
    "generated_at",
    "hold_ms",
    "initial",
    "instances",
    "lease_ms",
    "memory_gib",
    "number",
    "order",
    "products",
    "quantity",
    "rounds",
    "rtt_ms",
    "rtts_ms",
    "scenario_number",
    "stock",
    "tasks",
    "timed_s",
    "version",
    "warm_ms",
    "workers",
    "zk_nodes",
    "zk_session_ms",
];

/// A number inside a text.
static DIGITS: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"\d+(?:\.\d+)?").unwrap());

/// A factor in [1.3, 3.3) chosen by the figure's place in the data and a seed, so two
/// figures rarely move by the same factor and a ratio or a sum of them moves too.
fn factor(place: &str, seed: u64) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for byte in place.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    1.3 + (hash % 2000) as f64 / 1000.0
}

/// `v` with every measured number in it moved by its own factor (zero stays zero; an
/// integer stays an integer, at least one more), in the strings above too.
fn perturbed(v: &serde_json::Value, place: &str, seed: u64) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                if i == 0 {
                    return v.clone();
                }
                let moved = ((i as f64 * factor(place, seed)).round() as i64).max(i + 1);
                Value::from(moved)
            } else {
                Value::from(n.as_f64().unwrap() * factor(place, seed))
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| perturbed(item, &format!("{place}/{i}"), seed))
                .collect(),
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, item)| {
                    let at = format!("{place}/{key}");
                    let item = match item {
                        // A setting's numbers (an object under a setting's name is data).
                        Value::Number(_) | Value::Array(_)
                            if SETTING_FIELDS.contains(&key.as_str())
                                && item
                                    .as_array()
                                    .is_none_or(|a| a.iter().all(Value::is_number)) =>
                        {
                            item.clone()
                        }
                        Value::String(s) if TEXTS_WITH_FIGURES.contains(&key.as_str()) => {
                            let mut k = 0;
                            let s = DIGITS.replace_all(s, |c: &regex::Captures| {
                                k += 1;
                                let x: f64 = c[0].parse().unwrap();
                                if x == 0.0 {
                                    return c[0].to_string();
                                }
                                let moved = x * factor(&format!("{at}#{k}"), seed);
                                format!("{:.0}", moved.max(x + 1.0))
                            });
                            Value::String(s.into_owned())
                        }
                        other => perturbed(other, &at, seed),
                    };
                    (key.clone(), item)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A setting's value as the pages print it: `2`, `0.5`, and as the tables round it.
fn setting_texts(x: f64) -> Vec<String> {
    let plain = if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    };
    vec![plain, loadtest::markdown::num(x)]
}

/// The figures of the run's settings in `v`: a `*_ms` setting field as "N ms", a
/// seconds setting as "N s", and every figure in the setup texts.
fn setting_figures(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    use serde_json::Value;
    let pattern = figure_pattern();
    match v {
        Value::Array(items) => items.iter().for_each(|i| setting_figures(i, out)),
        Value::Object(fields) => {
            for (key, item) in fields {
                if SETTING_FIELDS.contains(&key.as_str()) {
                    let unit = if key.ends_with("_ms") {
                        " ms"
                    } else if key.ends_with("_s") || key.ends_with("seconds") {
                        " s"
                    } else if key == "memory_gib" {
                        " GiB"
                    } else if key == "factor" {
                        "×"
                    } else {
                        setting_figures(item, out);
                        continue;
                    };
                    let values: Vec<f64> = match item {
                        Value::Array(items) => items.iter().filter_map(Value::as_f64).collect(),
                        other => other.as_f64().into_iter().collect(),
                    };
                    for x in values {
                        out.extend(setting_texts(x).into_iter().map(|t| format!("{t}{unit}")));
                    }
                } else if let (true, Some(text)) =
                    (SETUP_TEXTS.contains(&key.as_str()), item.as_str())
                {
                    out.extend(figures_in(pattern, text));
                } else {
                    setting_figures(item, out);
                }
            }
        }
        _ => {}
    }
}

/// Figures of the code's own settings a generated page prints, whatever the data:
/// (page, figure, why).
const CODE_SETTINGS: &[(&str, &str, &str)] = &[
    (
        "demo/claims.md",
        "15 %",
        "the margin a claim needs, loadtest::rate::MARGIN",
    ),
    (
        "bench/claims.md",
        "15.0 %",
        "the margin a claim needs, loadtest::claims",
    ),
    (
        "demo/overload.md",
        "20 %",
        "the client's retry budget, as Finagle's RetryBudget",
    ),
    (
        "demo/flood.md",
        "200 ms",
        "how often the flood's /health prober asks, loadtest::flood::HEALTH_EVERY",
    ),
];

/// Table columns whose numbers are settings or counts of the data's own items (which
/// moving the numbers does not change): a cell of any other column must move.
const SETTING_COLUMNS: &[&str] = &[
    "#",
    "cells",
    "as expected",
    "buckets",
    "in flight",
    "stock",
    "buyers",
];

/// A table cell that is only figures (a number, a range, a ratio, a mark).
fn numeric_cell(cell: &str) -> bool {
    let cell = cell.trim();
    cell.chars().any(|c| c.is_ascii_digit())
        && cell
            .chars()
            .all(|c| c.is_ascii_digit() || " .,–-()×%*†".contains(c))
        && cell.chars().any(|c| c.is_ascii_digit() && c != '0')
}

/// Line `n` of a page, or nothing past its end.
fn line_at<'a>(lines: &[&'a str], n: usize) -> &'a str {
    lines.get(n).copied().unwrap_or("")
}

/// The data files a generated page says it comes from (its banner).
fn sources_of(page: &str) -> Vec<&'static str> {
    const ALL: [&str; 6] = ["machine", "demo", "chaos", "sweep", "distance", "bench"];
    let banner = page.lines().next().unwrap_or("");
    if banner.contains("*.json") {
        return ALL.to_vec();
    }
    ALL.into_iter()
        .filter(|name| banner.contains(&format!("{name}.json")))
        .collect()
}

/// Every generated page rendered from the reference data and from three copies with
/// every measured number moved (each by its own factor, so ratios move too): a number
/// with a unit, or a table cell of numbers, that comes out the same in all four was
/// typed into the renderer, not taken from the data, unless it is one of the run's
/// settings (a setting field or setup text of the page's own data file).
#[test]
fn every_figure_of_a_generated_page_moves_with_the_data() {
    let files = loadtest::book::Data::read_json(&root().join("book/data")).unwrap();
    let data = loadtest::book::Data::from_json(&files).unwrap();
    let moved = |seed: u64| {
        let files = files
            .iter()
            .map(|(name, v)| (*name, perturbed(v, name, seed)))
            .collect();
        loadtest::book::Data::from_json(&files).unwrap()
    };
    let mut settings: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
    for (name, v) in &files {
        setting_figures(v, settings.entry(*name).or_default());
    }
    let before = loadtest::book::figures(&data);
    let afters = [1, 2, 3].map(|seed| loadtest::book::figures(&moved(seed)));
    let mut unmoved = Unmoved::default();
    for (page, text) in &before {
        let others: Vec<Vec<&str>> = afters
            .iter()
            .filter_map(|a| a.get(page))
            .map(|t| t.lines().collect())
            .collect();
        if others.len() < afters.len() {
            unmoved
                .constant
                .push(format!("{page}: not rendered from the moved data"));
            continue;
        }
        let is_setting = |figure: &str| {
            sources_of(text)
                .iter()
                .any(|name| settings.get(name).is_some_and(|s| s.contains(figure)))
                || CODE_SETTINGS
                    .iter()
                    .any(|(p, f, _)| p == page && *f == figure)
        };
        let lines: Vec<&str> = text.lines().collect();
        let mut header: Vec<String> = Vec::new();
        for (n, line) in lines.iter().enumerate() {
            check_line_figures(page, n, line, &others, &is_setting, &mut unmoved);
            // The inline facts: a value under its anchor moves, but for the counts of
            // the data's own items and the date.
            if page == "facts.md" && n > 0 && !line.starts_with("ANCHOR") {
                let anchor = lines[n - 1].trim_start_matches("ANCHOR: ");
                let counts = [
                    "chaos-cells",
                    "chaos-as-expected",
                    "strategy-count",
                    "run-date",
                ];
                if !counts.contains(&anchor)
                    && numeric_cell(line)
                    && others.iter().all(|o| line_at(o, n) == *line)
                {
                    unmoved
                        .constant
                        .push(format!("facts.md: {anchor} = {line} did not move"));
                }
                unmoved.cells += 1;
                continue;
            }
            // A table: its header is the row above the rule; its numeric cells move.
            if line.starts_with("|---") && n > 0 {
                header = lines[n - 1]
                    .split('|')
                    .map(|h| h.trim().to_string())
                    .collect();
                continue;
            }
            if !line.starts_with('|') || header.is_empty() {
                continue;
            }
            check_table_row(page, n, line, &header, &others, &is_setting, &mut unmoved);
        }
    }
    let Unmoved {
        compared,
        cells,
        constant,
    } = unmoved;
    assert!(compared > 100, "only {compared} figures compared");
    assert!(cells > 500, "only {cells} table cells compared");
    assert!(
        constant.is_empty(),
        "figures that did not move with the data (typed into a page's code, loadtest/src/book/ or a section's page.rs, or a constant of the run that belongs in the data):\n{}",
        constant.join("\n")
    );
}

/// What comparing the pages found: the figures and the table cells compared, and
/// those that did not move with the data.
#[derive(Default)]
struct Unmoved {
    compared: usize,
    cells: usize,
    constant: Vec<String>,
}

/// Compares the figures of line `n` of `page` with the same line of each moved
/// rendering (`others`), noting in `unmoved` those that came out the same in all of
/// them without being a setting.
fn check_line_figures(
    page: &str,
    n: usize,
    line: &str,
    others: &[Vec<&str>],
    is_setting: &dyn Fn(&str) -> bool,
    unmoved: &mut Unmoved,
) {
    let pattern = figure_pattern();
    let mut theirs: Vec<Vec<String>> = others
        .iter()
        .map(|o| figures_in(pattern, line_at(o, n)))
        .collect();
    for figure in figures_in(pattern, line) {
        // Zero is never moved (a figure of nothing).
        if !figure.chars().any(|c| c.is_ascii_digit() && c != '0') {
            continue;
        }
        unmoved.compared += 1;
        let mut everywhere = true;
        for found in theirs.iter_mut() {
            match found.iter().position(|f| *f == figure) {
                Some(i) => {
                    found.remove(i);
                }
                None => everywhere = false,
            }
        }
        if everywhere && !is_setting(&figure) {
            let line: String = line.chars().take(160).collect();
            unmoved
                .constant
                .push(format!("{page}:{}: \"{figure}\" in: {line}", n + 1));
        }
    }
}

/// Compares the numeric cells of table row `n` of `page` (but those of the setting
/// columns, named by `header`) with the same row of each moved rendering, noting in
/// `unmoved` those that came out the same in all of them without being a setting.
fn check_table_row(
    page: &str,
    n: usize,
    line: &str,
    header: &[String],
    others: &[Vec<&str>],
    is_setting: &dyn Fn(&str) -> bool,
    unmoved: &mut Unmoved,
) {
    let mine: Vec<&str> = line.split('|').collect();
    for (i, cell) in mine.iter().enumerate() {
        let column = header.get(i).map_or("", String::as_str);
        if !numeric_cell(cell) || SETTING_COLUMNS.contains(&column) {
            continue;
        }
        unmoved.cells += 1;
        let same = others
            .iter()
            .all(|o| line_at(o, n).split('|').nth(i).is_some_and(|c| c == *cell));
        if same && !is_setting(cell.trim()) {
            let shown: String = line.chars().take(120).collect();
            unmoved.constant.push(format!(
                "{page}:{}: cell \"{}\" of column \"{column}\" in: {shown}",
                n + 1,
                cell.trim()
            ));
        }
    }
}

/// Figures typed into the code that writes the data's texts (a chaos cell's reason, a
/// claim's evidence, a strategy's card): settings of the experiment, each with why.
const CODE_FIGURES: &[(&str, &str, &str)] = &[
    (
        "loadtest/src/overload/mod.rs",
        "20 %",
        "the client's retry budget",
    ),
    (
        "loadtest/src/overload/mod.rs",
        "90 %",
        "the overload goal's goodput share",
    ),
    (
        "loadtest/src/overload/mod.rs",
        "3×",
        "the overload goal's p99 multiple",
    ),
    (
        "loadtest/src/overload/mod.rs",
        "3x",
        "the overload goal's p99 multiple",
    ),
    ("wire/src/chaos.rs", "3x", "a freeze of three leases"),
    (
        "wire/src/chaos.rs",
        "2x",
        "a pause within lease + lock-delay",
    ),
    (
        "app/src/strategies/redis_stock/persister.rs",
        "500 ms",
        "the persister's retry pause",
    ),
    (
        "loadtest/src/overload/page.rs",
        "20 %",
        "the client's retry budget",
    ),
    (
        "loadtest/src/distance/page.rs",
        "0 ms",
        "the RTT sweep's loopback pass, named",
    ),
    (
        "loadtest/src/chaos/faults/redlock_clock_jump.rs",
        "30 s",
        "the clock jump the scenario makes",
    ),
    ("wire/src/chaos.rs", "300 ms", "the mistakes' pause"),
    (
        "wire/src/chaos.rs",
        "200 ms",
        "the scenario's pause and WAIT timeout",
    ),
    (
        "wire/src/chaos.rs",
        "30 s",
        "the clock jump the scenario makes",
    ),
    (
        "wire/src/chaos.rs",
        "20 ms",
        "the pause between a reshard's batches of keys",
    ),
    (
        "loadtest/src/overload/mod.rs",
        "90%",
        "the overload goal's goodput share",
    ),
    (
        "loadtest/src/overload/mod.rs",
        "50 ms",
        "the overload goal's /health bound",
    ),
    (
        "loadtest/src/report.rs",
        "200 per second",
        "HTTP 200 answers, per second",
    ),
    (
        "loadtest/src/sweep/mod.rs",
        "99%",
        "the sweep's mark for rows mostly sales",
    ),
];

/// No figure is typed into a string of the code that writes the data or the pages
/// (`loadtest/src`, the strategies' cards and logs, the wire's scenarios): a number
/// with a unit in a string
/// literal outside the tests is a setting on the list above, or comes from a `{}`.
#[test]
fn no_figure_is_typed_into_the_code_that_writes_the_data() {
    let pattern = figure_pattern();
    let literal = regex::Regex::new(r#"(?s)"((?:[^"\\]|\\.)*)""#).unwrap();
    let mut files = Vec::new();
    for dir in ["loadtest/src", "app/src/strategies", "wire/src"] {
        let tree = loadtest::book::read_tree(&root().join(dir)).unwrap();
        files.extend(
            tree.into_iter()
                .filter(|(rel, _)| rel.ends_with(".rs"))
                .map(|(rel, code)| (format!("{dir}/{rel}"), code)),
        );
    }
    let (mut typed, mut seen) = (Vec::<String>::new(), BTreeSet::new());
    for (file, code) in files {
        // The code before its tests, comment lines blanked (line numbers kept) and the
        // quote character as a char literal taken out, so that a string literal spread
        // over several lines (`\` continuations) is matched whole.
        let mut kept = String::new();
        for line in code.lines() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if !line.trim_start().starts_with("//") {
                kept.push_str(&line.replace("'\"'", "' '").replace("'\\\"'", "' '"));
            }
            kept.push('\n');
        }
        for text in literal.captures_iter(&kept) {
            let n = kept[..text.get(0).unwrap().start()].matches('\n').count();
            // Digits only: a number word in code ("one answer per sale") names a
            // design, not a measurement.
            let found = figures_in(pattern, &text[1]);
            for figure in found
                .into_iter()
                .filter(|f| f.starts_with(|c: char| c.is_ascii_digit()))
            {
                if CODE_FIGURES
                    .iter()
                    .any(|(f, fig, _)| *f == file && *fig == figure)
                {
                    seen.insert((file.clone(), figure));
                } else {
                    typed.push(format!("{file}:{}: \"{figure}\"", n + 1));
                }
            }
        }
    }
    assert_no_typed_figure(
        &typed,
        CODE_FIGURES,
        &seen,
        "figures typed into strings of the code (take them from the run, or list the setting with its reason)",
    );
}

/// A script of the learner's path, run from the repository's root against the run's
/// shared servers (`testbed run` exports them): its output, or a failure with it.
fn script(name: &str, args: &[&str], env: &[(&str, String)]) -> String {
    assert!(
        std::env::var("DATABASE_URL").is_ok(),
        "run under `testbed run` (DATABASE_URL)"
    );
    let output = Command::new(root().join("scripts").join(name))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(root())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "scripts/{name} {args:?} failed:\n{text}"
    );
    text
}

/// The hand-made race of "Why stock oversells" runs as the book shows it: `unsafe`
/// sells one unit to both buyers, `atomic-sql` refuses the second; each verdict read
/// from the database by the script.
#[test]
fn the_race_by_hand_oversells_only_without_a_lock() {
    let product = 800_000 + (std::process::id() % 100_000);
    let env = [
        ("STOCK_APP_BIN", support::app_bin().display().to_string()),
        ("RACE_PRODUCT", product.to_string()),
    ];
    let unsafe_run = script("race", &[], &env);
    assert!(
        unsafe_run.contains("ledger sum: 2") && unsafe_run.contains("oversold"),
        "{unsafe_run}"
    );
    let safe_run = script("race", &["atomic-sql"], &env);
    assert!(
        safe_run.contains("ledger sum: 1") && safe_run.contains("no oversell"),
        "{safe_run}"
    );
}

/// `scripts/isolation` sees what InnoDB documents: the snapshot fixed by the first
/// plain read, locking reads of the latest row, gap locks under REPEATABLE READ only.
#[test]
fn the_isolation_script_sees_what_innodb_documents() {
    let db = format!("isolation_test_{}", std::process::id());
    let out = script("isolation", &[], &[("ISOLATION_DB", db)]);
    assert!(
        out.contains("every observation is what InnoDB documents") && !out.contains("  FAIL "),
        "{out}"
    );
}
