//! The book (`book/`) cannot drift from the code or the data:
//! - its generated pages equal what `loadtest book` renders from `book/data/*.json` and
//!   from the code (`--help`, a running service's `/openapi.json`, `/strategies`,
//!   `/metrics`), and the README's strategy map equals `GET /strategies`;
//! - a figure changed by hand fails that check;
//! - every chapter is in `SUMMARY.md`, every internal link and `{{#include}}` resolves
//!   (anchors included);
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
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
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
