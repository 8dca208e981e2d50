//! `copy-check [--strategy] NAME DIR`: builds the copy NAME (a lock backend, or a
//! strategy: `--strategy` for `redlock` and `zookeeper`, which are both) in DIR and
//! runs it against a real server. `copy-check --all DIR`: every copy, a backend in
//! DIR/NAME, a strategy in DIR/strategy-NAME. Needs the servers' variables: run it under `testbed run --`
//! (`./scripts/copy-check` does).

use anyhow::{Result, ensure};
use clap::Parser;
use copies::make;
use copies::manifest::{Entry, Manifest};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(about = "Builds each copy copies.toml lists and runs it against a real server")]
struct Cli {
    /// Every copy of copies.toml, each in DIR/NAME (a strategy in DIR/strategy-NAME).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["strategy", "name", "dir"])]
    all: Option<PathBuf>,
    /// NAME is a strategy, not a lock backend (`redlock` and `zookeeper` are both).
    #[arg(long)]
    strategy: bool,
    /// A lock backend or a strategy of copies.toml.
    #[arg(required_unless_present = "all")]
    name: Option<String>,
    /// An empty (or new) folder for the copy.
    #[arg(required_unless_present = "all")]
    dir: Option<PathBuf>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = Manifest::read(&repo)?;
    if let Some(all) = &cli.all {
        let entries = manifest.all();
        let labels: Vec<String> = entries.iter().map(Entry::label).collect();
        println!("copy-check: {}", labels.join(" "));
        for entry in entries {
            check(&repo, &manifest, entry, &all.join(entry.label()))?;
        }
        return Ok(());
    }
    let (Some(name), Some(dir)) = (&cli.name, &cli.dir) else {
        unreachable!("clap requires NAME and DIR without --all");
    };
    check(&repo, &manifest, manifest.find(name, cli.strategy)?, dir)
}

/// Makes one copy in `dir`, builds and runs it, and reports its size.
fn check(repo: &Path, manifest: &Manifest, entry: Entry<'_>, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let taken = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .any(|e| e.file_name() != "target");
    ensure!(!taken, "copy-check: {} is not empty", dir.display());
    make::copy(repo, manifest, entry, dir)
}
