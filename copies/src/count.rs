//! A copy's size, all-in: what a reader takes. Every `.rs`, `.lua` and `.sql` file of
//! the copy (the copied files, the `mod.rs` and `lib.rs` written for them, a `locks`
//! crate inside) but the smoke program and build output. Reported, not held to a
//! budget: a copy is held to the crates it needs, and its explanations stay.

use anyhow::Result;
use std::path::Path;

/// One file's lines, and how many of them are code (not blank, not a comment).
pub struct Counted {
    pub file: String,
    pub lines: usize,
    pub code: usize,
}

/// Every counted file of the copy in `dir`, sorted by path.
pub fn count(dir: &Path) -> Result<Vec<Counted>> {
    let mut counted = Vec::new();
    visit(dir, dir, &mut counted)?;
    counted.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(counted)
}

fn visit(root: &Path, dir: &Path, counted: &mut Vec<Counted>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if name != "target" && name != "examples" {
                visit(root, &path, counted)?;
            }
            continue;
        }
        let counts = path
            .extension()
            .is_some_and(|e| e == "rs" || e == "lua" || e == "sql");
        if counts {
            let text = std::fs::read_to_string(&path)?;
            let code = text.lines().filter(|l| is_code(l)).count();
            let file = path.strip_prefix(root)?.display().to_string();
            let lines = text.lines().count();
            counted.push(Counted { file, lines, code });
        }
    }
    Ok(())
}

/// Not blank, not a comment (`//`, `//!`, `///` in Rust; `--` in Lua and SQL).
fn is_code(line: &str) -> bool {
    let line = line.trim_start();
    !(line.is_empty() || line.starts_with("//") || line.starts_with("--"))
}

/// Prints each file's lines and the total, labelled.
pub fn report(label: &str, counted: &[Counted]) {
    for c in counted {
        println!("{label}: {:6}  {}", c.lines, c.file);
    }
    let lines: usize = counted.iter().map(|c| c.lines).sum();
    let code: usize = counted.iter().map(|c| c.code).sum();
    println!("{label}: all-in {lines} lines ({code} code, the rest docs, comments and blanks)");
}
