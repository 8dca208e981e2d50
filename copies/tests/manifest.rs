//! `copies.toml` agrees with the repository: what it lists exists, what it depends on
//! is a workspace dependency, and every lock backend the `locks` crate builds has a
//! copy. Reads files only; the copies themselves are built and run by
//! `./scripts/copy-check --all DIR` (CI does, against real servers).

use copies::make::dependencies;
use copies::manifest::{Entry, Manifest};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifest() -> Manifest {
    Manifest::read(&repo()).expect("copies.toml parses")
}

#[test]
fn every_listed_file_exists_and_every_crate_is_a_workspace_dependency() {
    let repo = repo();
    let manifest = manifest();
    let mut wrong = Vec::new();
    for entry in manifest.all() {
        let (files, crates) = match entry {
            Entry::Backend(_, copy) => (&copy.files, &copy.crates),
            Entry::Strategy(_, copy) => (&copy.files, &copy.crates),
        };
        for file in files.iter().filter(|f| !repo.join(f).is_file()) {
            wrong.push(format!("{}: {file} does not exist", entry.label()));
        }
        if let Err(e) = dependencies(&repo, crates) {
            wrong.push(format!("{}: {e}", entry.label()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A strategy's own file (`path`'s module, a file or a folder's `mod.rs`) is among
/// its files, a lock strategy's lock is a backend of the manifest, and what it leaves
/// out (`without`) is a module of its folder it does not take.
#[test]
fn every_strategy_takes_its_own_module_and_leaves_out_only_what_it_has() {
    let repo = repo();
    let manifest = manifest();
    let mut wrong = Vec::new();
    for (name, copy) in &manifest.strategy {
        let module = format!("app/src/{}", copy.path.replace("::", "/"));
        let own = [format!("{module}.rs"), format!("{module}/mod.rs")];
        if !own.iter().any(|f| copy.files.contains(f)) {
            wrong.push(format!(
                "{name}: its module ({module}) is not among its files"
            ));
        }
        if let Err(e) = manifest.lock_of(copy) {
            wrong.push(format!("{name}: {e}"));
        }
        for left in &copy.without {
            let file = format!("{module}/{left}.rs");
            if !repo.join(&file).is_file() || copy.files.contains(&file) {
                wrong.push(format!(
                    "{name}: without {left}: {file} must exist and not be taken"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Each feature of `locks/Cargo.toml` but `default` is a lock backend with a copy.
#[test]
fn every_lock_backend_has_a_copy() {
    let text = std::fs::read_to_string(repo().join("locks/Cargo.toml")).unwrap();
    let cargo: toml::Table = toml::from_str(&text).unwrap();
    let features = cargo["features"].as_table().expect("locks has [features]");
    let manifest = manifest();
    let copied: Vec<&str> = manifest.backend.keys().map(|b| b.module()).collect();
    let missing: Vec<&String> = features
        .keys()
        .filter(|f| *f != "default" && !copied.contains(&f.as_str()))
        .collect();
    assert!(features.len() > 5, "features of locks: {features:?}");
    assert!(
        missing.is_empty(),
        "lock backends without a copy in copies.toml: {missing:?}"
    );
}

/// Every file that opens a "Copying this file" section has an entry that takes it,
/// so no promised copy goes unchecked.
#[test]
fn every_file_that_offers_a_copy_has_an_entry() {
    let repo = repo();
    let manifest = manifest();
    let taken: Vec<&String> = manifest
        .all()
        .into_iter()
        .flat_map(|entry| match entry {
            Entry::Backend(_, copy) => copy.files.iter(),
            Entry::Strategy(_, copy) => copy.files.iter(),
        })
        .collect();
    let mut offered = Vec::new();
    for dir in ["locks/src", "app/src/strategies"] {
        collect_rust(&repo.join(dir), &mut offered);
    }
    let mut missing = Vec::new();
    for file in offered {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file
            .strip_prefix(&repo)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if text.contains("\n//! # Copying this file\n") && !taken.contains(&&relative) {
            missing.push(relative);
        }
    }
    assert!(
        missing.is_empty(),
        "sections without an entry in copies.toml: {missing:?}"
    );
}

fn collect_rust(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}
