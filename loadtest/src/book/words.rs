//! How long the book is to read: words per part and per chapter, as a reader meets
//! them (`loadtest book --words`).
//!
//! A chapter's words are its prose and tables with the generated pages it includes
//! put in (they are read like the rest); code blocks, code it includes from the
//! sources, HTML comments and link targets are left out (a reader skims code, and a
//! target is not read). The parts are SUMMARY.md's `# ` titles; the chapters before
//! the first one (the introduction) count as a part of their own.

use std::path::Path;

/// One chapter as counted: its part, its file and its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub part: String,
    pub file: String,
    pub words: usize,
}

/// Every chapter of `SUMMARY.md` under `src`, in its order, with its part and words.
pub fn count(src: &Path) -> anyhow::Result<Vec<Counted>> {
    let summary = std::fs::read_to_string(src.join("SUMMARY.md"))?;
    let mut part = "(before the first part)".to_string();
    let mut out = Vec::new();
    for line in summary.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            if title.trim() != "Summary" {
                part = title.trim().to_string();
            }
            continue;
        }
        let Some(file) = link_target(line) else {
            continue;
        };
        let text = std::fs::read_to_string(src.join(&file))?;
        let words = words(&expand(&text, src));
        out.push(Counted {
            part: part.clone(),
            file,
            words,
        });
    }
    Ok(out)
}

/// The file a SUMMARY line links (`- [Title](file.md)`), if it links one.
fn link_target(line: &str) -> Option<String> {
    let start = line.find("](")? + 2;
    let end = start + line[start..].find(')')?;
    let target = &line[start..end];
    target.ends_with(".md").then(|| target.to_string())
}

/// `text` with every generated page it includes put in its place (an anchor's part
/// only); other includes (source code) dropped.
fn expand(text: &str, src: &Path) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{#include ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "{{#include ".len()..];
        let Some(end) = after.find("}}") else {
            break;
        };
        let target = after[..end].trim();
        if target.starts_with("generated/") {
            let (path, anchor) = match target.split_once(':') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target, None),
            };
            let page = std::fs::read_to_string(src.join(path)).unwrap_or_default();
            out.push_str(&anchored(&page, anchor));
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The part of `page` between `ANCHOR: name` and `ANCHOR_END: name` (all of it
/// without an anchor).
fn anchored(page: &str, anchor: Option<&str>) -> String {
    let Some(name) = anchor else {
        return page.to_string();
    };
    // mdBook's markers: `ANCHOR: name` and `ANCHOR_END: name`, the name a word of
    // its own (`redis-lock` is not `redis-lock1replica`).
    let marks = |line: &str, marker: &str| {
        line.split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|word| word == name)
    };
    page.lines()
        .skip_while(|l| !marks(l, "ANCHOR: "))
        .skip(1)
        .take_while(|l| !marks(l, "ANCHOR_END: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The words a reader reads in markdown: code blocks, HTML comments and link targets
/// left out, table rules and punctuation not counted.
fn words(markdown: &str) -> usize {
    let text = without_comments(markdown);
    crate::markdown::outside_code(&text)
        .map(|(_, line)| {
            drop_link_targets(line)
                .split_whitespace()
                .filter(|w| w.chars().any(char::is_alphanumeric))
                .count()
        })
        .sum()
}

/// `text` without its HTML comments (`<!-- ... -->`, over lines too).
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// `[text](target)` as `[text]`: a link's target is not read.
fn drop_link_targets(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..=at]);
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => rest = &after[end + 1..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prose and tables count; code, comments, link targets and table rules do not.
    #[test]
    fn only_what_a_reader_reads_counts() {
        let text = "One two [three](far/away.md#four).\n\n<!-- not this -->\n```rust\nlet x = 1;\n```\n| a b | c |\n|---|---:|\n<!-- nor\nthis -->five";
        assert_eq!(words(text), 7, "one two three, a b c, five");
    }

    /// A generated page is put in where it is included; source code is not.
    #[test]
    fn generated_pages_count_where_included() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("generated")).unwrap();
        std::fs::write(
            dir.path().join("generated/facts.md"),
            "x\n<!-- ANCHOR: a -->\nalpha beta\n<!-- ANCHOR_END: a -->\ny\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("SUMMARY.md"),
            "# Summary\n\n[Intro](intro.md)\n\n# The core\n\n- [One](one.md)\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("intro.md"), "Hello there.\n").unwrap();
        std::fs::write(
            dir.path().join("one.md"),
            "Words {{#include generated/facts.md:a}} and {{#include ../../src/lib.rs:x}} end.\n",
        )
        .unwrap();
        let counted = count(dir.path()).unwrap();
        assert_eq!(counted.len(), 2);
        assert_eq!(counted[0].words, 2);
        assert_eq!(counted[1].part, "The core");
        assert_eq!(counted[1].words, 5, "{counted:?}");
    }
}
