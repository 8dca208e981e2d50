//! Making a copy: its files in a crate of their own, a Cargo.toml of the manifest's
//! crates at this workspace's versions, and a smoke program; then building and
//! running it, and reporting its size.

use crate::count;
use crate::manifest::{
    Ask, Backend, BackendCopy, Crates, Entry, Manifest, SettingsFrom, StrategyCopy,
};
use anyhow::{Context, Result, bail, ensure};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const BACKEND_SMOKE: &str = include_str!("../templates/backend_smoke.rs");
const STRATEGY_SMOKE: &str = include_str!("../templates/strategy_smoke.rs");

/// Makes `entry`'s copy in `dir`, builds and runs it, and reports its size.
pub fn copy(repo: &Path, manifest: &Manifest, entry: Entry<'_>, dir: &Path) -> Result<()> {
    match entry {
        Entry::Backend(backend, copy) => self::backend(repo, backend, copy, dir)?,
        Entry::Strategy(name, copy) => strategy(repo, manifest, name, copy, dir)?,
    }
    let label = format!("copy-check {}", entry.label());
    count::report(&label, &count::count(dir)?);
    Ok(())
}

/// A lock backend's copy in `dir`: `locks/src/X` to `src/X`, `locks/lua/X` to `lua/X`.
fn backend(repo: &Path, backend: Backend, copy: &BackendCopy, dir: &Path) -> Result<()> {
    let name = backend.module();
    let files = place_locks(repo, &copy.files, dir)?;
    write(
        &dir.join("src/lib.rs"),
        &lib_rs(&format!("`{}` lock", backend.name()), &files),
    )?;
    let mut manifest = package(&format!("copied-{name}-lock"));
    manifest.push_str("[workspace]\n\n[dependencies]\n");
    manifest.push_str(&dependencies(repo, &copy.crates)?);
    manifest.push_str(SMOKE_DEPENDENCIES);
    if backend == Backend::Mysql {
        // The smoke program makes a database of its own for the lock's table.
        let sqlx = Crates::from([("sqlx".into(), vec!["runtime-tokio".into(), "mysql".into()])]);
        manifest.push_str(&dependencies(repo, &sqlx)?);
    }
    write(&dir.join("Cargo.toml"), &manifest)?;
    copy_file(&repo.join("Cargo.lock"), &dir.join("Cargo.lock"))?;
    let smoke = BACKEND_SMOKE
        .replace("__CRATE__", &format!("copied_{name}_lock"))
        .replace("__CONNECT__", connect(backend));
    write(&dir.join("examples/smoke.rs"), &smoke)?;
    build_and_run(dir)
}

/// How the smoke program reaches a backend's server, from testbed's variables.
fn connect(backend: Backend) -> &'static str {
    match backend {
        Backend::Mysql => {
            r#"// A database of its own, with the table made by the DDL the backend ships.
    let server = std::env::var("DATABASE_URL")?;
    let server = server.rsplit_once('/').expect("a database URL").0.to_string();
    let name = format!("copy_check_{}", std::process::id());
    let pool = sqlx::MySqlPool::connect(&server).await?;
    let create = format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}");
    sqlx::raw_sql(&create).execute(&pool).await?;
    let lock = copied::mysql::MysqlLock::connect(&format!("{server}/{name}"), 4).await?;
    lock.create_table().await?;"#
        }
        Backend::Redis => {
            r#"let url = std::env::var("REDIS_URLS")?.split(',').next().unwrap().to_string();
    let lock = copied::redis::RedisLock::connect(&url).await?;"#
        }
        Backend::RedisSimple => {
            r#"let url = std::env::var("REDIS_URLS")?.split(',').next().unwrap().to_string();
    let lock = copied::redis_simple::SimpleRedisLock::connect(&url).await?;"#
        }
        Backend::Redlock => {
            r#"let urls: Vec<String> = std::env::var("REDIS_URLS")?.split(',').map(String::from).collect();
    let lock = copied::redlock::RedLock::new(&urls)?.with_node_timeout(Duration::from_millis(200));"#
        }
        Backend::Zookeeper => {
            r#"let connect = std::env::var("ZK_CONNECT")?;
    let session = Duration::from_secs(4);
    let lock = copied::zookeeper::ZooKeeperLock::connect(&connect, "/copy-check", session).await?;"#
        }
        Backend::Etcd => {
            r#"let endpoints: Vec<String> = std::env::var("ETCD_ENDPOINTS")?.split(',').map(String::from).collect();
    let lock = copied::etcd::EtcdLock::connect(&endpoints, "/copy-check/").await?;"#
        }
    }
}

/// A strategy's copy in `dir`: `app/src/X` to `src/X`,
/// `migrations/X` to `migrations/X`, its lock backend to the crate `locks/`.
fn strategy(
    repo: &Path,
    manifest: &Manifest,
    name: &str,
    copy: &StrategyCopy,
    dir: &Path,
) -> Result<()> {
    let crate_name = format!("copied-{name}-strategy");
    let lock = manifest.lock_of(copy)?;
    let mut schema = Vec::new();
    for file in &copy.files {
        let to = if let Some(rest) = file.strip_prefix("app/src/") {
            format!("src/{rest}")
        } else if file.starts_with("migrations/") {
            schema.push(file.clone());
            file.clone()
        } else {
            bail!("{file}: a strategy's file is under app/src or migrations");
        };
        ensure!(
            !dir.join(&to).exists(),
            "{file}: its place in the copy is taken twice"
        );
        copy_file(&repo.join(file), &dir.join(&to))?;
    }
    leave_out(dir, copy)?;
    write_module_tree(&dir.join("src"))?;
    let lib = format!(
        "//! A copy of stock-locks' `{name}` strategy, made by copy-check.\n{DENY_UNUSED}{}",
        module_lines(&dir.join("src"))?
    );
    write(&dir.join("src/lib.rs"), &lib)?;

    let mut cargo = package(&crate_name);
    let members = if lock.is_some() { ", \"locks\"" } else { "" };
    writeln!(cargo, "[workspace]\nmembers = [\".\"{members}]\n")?;
    // What only the service reads (the card, `strategies/card.rs`, not taken): off.
    cargo.push_str("[features]\nservice = []\n\n[dependencies]\n");
    cargo.push_str(&dependencies(repo, &copy.crates)?);
    if let Some(lock) = lock {
        cargo.push_str("locks = { path = \"locks\" }\n");
        locks_crate(repo, lock, &dir.join("locks"))?;
    }
    cargo.push_str(SMOKE_DEPENDENCIES);
    write(&dir.join("Cargo.toml"), &cargo)?;
    copy_file(&repo.join("Cargo.lock"), &dir.join("Cargo.lock"))?;

    let smoke = strategy_smoke(name, copy, &schema);
    write(&dir.join("examples/smoke.rs"), &smoke)?;
    build_and_run(dir)
}

/// A lock strategy's lock: its backend's copy as a library crate named `locks`
/// (`lock.rs`'s items at its root, as the service's `locks` crate has them).
fn locks_crate(repo: &Path, backend: &BackendCopy, dir: &Path) -> Result<()> {
    let files = place_locks(repo, &backend.files, dir)?;
    let mut lib = format!("{DENY_UNUSED}mod lock;\npub use lock::*;\n");
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        if stem != "lock" {
            writeln!(lib, "pub mod {stem};")?;
        }
    }
    write(&dir.join("src/lib.rs"), &lib)?;
    let mut cargo = package("locks");
    cargo.push_str("[dependencies]\n");
    cargo.push_str(&dependencies(repo, &backend.crates)?);
    write(&dir.join("Cargo.toml"), &cargo)
}

/// The `locks` crate's files in `dir` without their `locks/` prefix; returns where
/// each went.
fn place_locks(repo: &Path, files: &[String], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut placed = Vec::new();
    for file in files {
        let Some(rest) = file.strip_prefix("locks/") else {
            bail!("{file}: a lock backend's file is under locks/");
        };
        copy_file(&repo.join(file), &dir.join(rest))?;
        placed.push(PathBuf::from(rest));
    }
    Ok(placed)
}

/// Removes the `pub mod` line of each module the copy leaves out (`without`) from its
/// folder's `mod.rs`.
fn leave_out(dir: &Path, copy: &StrategyCopy) -> Result<()> {
    if copy.without.is_empty() {
        return Ok(());
    }
    let folder = copy.path.replace("::", "/");
    let mod_rs = dir.join("src").join(folder).join("mod.rs");
    let text = std::fs::read_to_string(&mod_rs)
        .with_context(|| format!("`without` needs a folder: {}", mod_rs.display()))?;
    for module in &copy.without {
        ensure!(
            text.lines()
                .any(|line| line.trim() == format!("pub mod {module};")),
            "without: no `pub mod {module};` line in {}",
            mod_rs.display()
        );
    }
    let mut kept = String::new();
    for line in text.lines() {
        let dropped = copy
            .without
            .iter()
            .any(|m| line.trim() == format!("pub mod {m};"));
        if !dropped {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    write(&mod_rs, &kept)
}

/// The smoke program of a strategy's copy, with what it asks of the shared settings
/// answered from the environment testbed exports.
fn strategy_smoke(name: &str, copy: &StrategyCopy, schema: &[String]) -> String {
    let path = &copy.path;
    let mut adapter = String::new();
    for ask in &copy.asks {
        adapter.push_str(&answer(*ask, path));
    }
    let shared = if adapter.is_empty() {
        "copied::strategies::contract::NoSettings {}"
    } else {
        adapter.insert_str(
            0,
            "/// The servers testbed exported, as the strategy asks for them.\nstruct FromEnv;\n\n",
        );
        "FromEnv"
    };
    let idempotent = copy
        .files
        .iter()
        .any(|f| f == "app/src/strategies/idempotency.rs");
    let (run, use_idempotency) = if idempotent {
        (
            "idempotency::once(&d, strategy.deduct(&d)).await",
            "use copied::strategies::idempotency;",
        )
    } else {
        ("strategy.deduct(&d).await", "")
    };
    let schema: String = schema
        .iter()
        .map(|f| format!("sqlx::raw_sql(include_str!(\"../{f}\")).execute(&pool).await?;\n    "))
        .collect();
    let build = match copy.settings {
        SettingsFrom::EtcdEndpoints => BUILD_WITH_ETCD,
        SettingsFrom::Default => BUILD_FROM_DEFAULT,
    };
    STRATEGY_SMOKE
        .replace("__BUILD_FN__", build)
        .replace("__NAME__", name)
        .replace(
            "__CRATE__",
            &format!("copied_{}_strategy", name.replace('-', "_")),
        )
        .replace("__USE_IDEMPOTENCY__", use_idempotency)
        .replace("__ADAPTER__", &adapter)
        .replace("__RUN__", run)
        .replace("__SCHEMA__", schema.trim_end())
        .replace("__PATH__", path)
        .replace("__TYPE__", &copy.type_name)
        .replace("__SHARED__", shared)
}

/// `etcd-lock`: its settings' defaults, with testbed's etcd as its servers.
const BUILD_WITH_ETCD: &str =
    "/// The strategy, built from its settings' defaults and testbed's etcd.
fn build<T, S>(database_url: &str, shared: &S) -> Arc<dyn Strategy>
where
    T: Declare<S, Settings = copied::strategies::distributed::etcd_lock::EtcdLockSettings>,
{
    let endpoints = std::env::var(\"ETCD_ENDPOINTS\").expect(\"testbed exports ETCD_ENDPOINTS\");
    let settings = copied::strategies::distributed::etcd_lock::EtcdLockSettings {
        endpoints: endpoints.split(',').map(str::to_string).collect(),
        ..Default::default()
    };
    T::build(&settings, &Context { database_url, shared })
}";

/// Any other: built from its settings' `Default`.
const BUILD_FROM_DEFAULT: &str = "/// The strategy, built from its settings' defaults.
fn build<T: Declare<S>, S>(database_url: &str, shared: &S) -> Arc<dyn Strategy>
where
    T::Settings: Default,
{
    T::build(&T::Settings::default(), &Context { database_url, shared })
}";

/// An implementation of what `ask` names for the smoke program's `FromEnv`.
fn answer(ask: Ask, path: &str) -> String {
    const FIRST_REDIS: &str = "std::env::var(\"REDIS_URLS\").ok()?.split(',').next()?.to_string()";
    let (trait_path, body) = match ask {
        Ask::RedisEndpoint => (
            format!("{path}::RedisEndpoint"),
            format!(
                "    fn redis_endpoint(&self) -> Option<copied::{path}::connection::Endpoint> {{
        Some(copied::{path}::connection::Endpoint::url({FIRST_REDIS}))
    }}"
            ),
        ),
        Ask::LockShared => (
            "strategies::distributed::algorithm::LockShared".to_string(),
            "    fn lock_options(&self) -> locks::LockOptions {
        locks::LockOptions::default()
    }
    fn lock_wait(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn fencing(&self) -> bool {
        true
    }"
            .to_string(),
        ),
        Ask::RedisLockShared => (
            format!("{path}::RedisLockShared"),
            format!(
                "    fn redis_lock(&self) -> Option<copied::strategies::distributed::algorithm::Connect> {{
        Some(copied::{path}::one_server({FIRST_REDIS}))
    }}"
            ),
        ),
        Ask::RedlockShared => (
            format!("{path}::RedLockShared"),
            "    fn redis_urls(&self) -> Vec<String> {
        let urls = std::env::var(\"REDIS_URLS\").unwrap_or_default();
        urls.split(',').map(String::from).collect()
    }"
            .to_string(),
        ),
        Ask::ZookeeperShared => (
            format!("{path}::ZooKeeperShared"),
            "    fn zk_connect(&self) -> Option<String> {
        std::env::var(\"ZK_CONNECT\").ok()
    }
    fn zk_root(&self) -> String {
        \"/copy-check\".to_string()
    }
    fn zk_session(&self) -> Duration {
        Duration::from_secs(6)
    }"
            .to_string(),
        ),
    };
    format!("impl copied::{trait_path} for FromEnv {{\n{body}\n}}\n\n")
}

/// Every generated `lib.rs` refuses a listed crate its code does not use: the list
/// is what a copier adds to their Cargo.toml, no more.
const DENY_UNUSED: &str = "#![deny(unused_crate_dependencies)]\n";

/// The smoke program's own needs (a runtime and a main), not the copy's.
const SMOKE_DEPENDENCIES: &str = "
[dev-dependencies]
# The smoke program's own needs (a runtime and a main).
tokio = { version = \"1\", features = [\"macros\", \"rt-multi-thread\"] }
";

fn package(name: &str) -> String {
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n"
    )
}

/// `crates` as `[dependencies]` lines, each at the version this workspace's
/// `[workspace.dependencies]` gives it, default features off where the workspace
/// turns them off (so the listed features must be the whole need).
pub fn dependencies(repo: &Path, crates: &Crates) -> Result<String> {
    let text =
        std::fs::read_to_string(repo.join("Cargo.toml")).context("the workspace's Cargo.toml")?;
    let workspace: toml::Table = toml::from_str(&text).context("parsing Cargo.toml")?;
    let deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(toml::Value::as_table)
        .context("Cargo.toml has no [workspace.dependencies]")?;
    let mut lines = String::new();
    for (name, features) in crates {
        let Some(spec) = deps.get(name) else {
            bail!("{name} is not a workspace dependency (Cargo.toml's [workspace.dependencies])");
        };
        let version = match spec {
            toml::Value::String(version) => Some(version.as_str()),
            toml::Value::Table(table) => table.get("version").and_then(toml::Value::as_str),
            _ => None,
        };
        let Some(version) = version else {
            bail!("{name}: the workspace gives it no version");
        };
        let no_defaults =
            spec.get("default-features").and_then(toml::Value::as_bool) == Some(false);
        write!(lines, "{name} = {{ version = \"{version}\"")?;
        if no_defaults {
            lines.push_str(", default-features = false");
        }
        if !features.is_empty() {
            let quoted: Vec<String> = features.iter().map(|f| format!("\"{f}\"")).collect();
            write!(lines, ", features = [{}]", quoted.join(", "))?;
        }
        lines.push_str(" }\n");
    }
    Ok(lines)
}

/// A `mod.rs` of `pub mod` lines for each folder under `src` that has none.
fn write_module_tree(src: &Path) -> Result<()> {
    for entry in walk_dirs(src)? {
        if entry == src || entry.join("mod.rs").exists() {
            continue;
        }
        let lines = module_lines(&entry)?;
        if !lines.is_empty() {
            write(&entry.join("mod.rs"), &lines)?;
        }
    }
    Ok(())
}

/// The `pub mod` lines for a folder: its `.rs` files and the folders holding Rust.
fn module_lines(dir: &Path) -> Result<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let stem = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            if !walk_rust(&path)?.is_empty() {
                names.push(stem);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "mod" && stem != "lib" {
            names.push(stem);
        }
    }
    names.sort();
    Ok(names.iter().map(|n| format!("pub mod {n};\n")).collect())
}

/// Every folder under `dir`, `dir` first.
fn walk_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(walk_dirs(&path)?);
        }
    }
    Ok(found)
}

/// Every `.rs` file under `dir`.
fn walk_rust(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for folder in walk_dirs(dir)? {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    Ok(found)
}

fn lib_rs(what: &str, files: &[PathBuf]) -> String {
    let mut lib = format!("//! A copy of stock-locks' {what}, made by copy-check.\n{DENY_UNUSED}");
    for file in files {
        if file.starts_with("src") && file.extension().is_some_and(|e| e == "rs") {
            let stem = file.file_stem().unwrap_or_default().to_string_lossy();
            lib.push_str(&format!("pub mod {stem};\n"));
        }
    }
    lib
}

fn build_and_run(dir: &Path) -> Result<()> {
    eprintln!("copy-check: building the copy in {}", dir.display());
    cargo(dir, &["build", "--quiet", "--lib"])?;
    cargo(dir, &["run", "--quiet", "--example", "smoke"])
}

fn cargo(dir: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .status()
        .context("running cargo")?;
    ensure!(
        status.success(),
        "cargo {} failed in {}",
        args.join(" "),
        dir.display()
    );
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
