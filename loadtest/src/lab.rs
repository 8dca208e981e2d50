//! `stock-app` instances as child processes: started, health-checked, killed,
//! respawned. Used by `loadtest demo`, `loadtest sweep` and by the chaos runner, which needs real
//! processes to SIGSTOP and kill -9.

use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testbed::process::{ServerProcess, free_port};

/// A `stock-app` child process and its address.
pub struct Instance {
    pub process: ServerProcess,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Its lock log (`--lock-log`), when it runs with test hooks: every distributed
    /// lock's hold, on CLOCK_MONOTONIC.
    pub lock_log: Option<PathBuf>,
}

/// A stopped instance's files go with it (its log, its lock log), unless a test is
/// failing: then they are what tells why.
impl Drop for Instance {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let _ = std::fs::remove_file(self.process.log_path());
        if let Some(path) = &self.lock_log {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Instance {
    /// Its name and peak resident memory so far, for the report.
    pub fn info(&self) -> crate::report::InstanceInfo {
        crate::report::InstanceInfo {
            name: self.process.name().to_string(),
            peak_rss_kib: peak_rss_kib(self.process.pid()),
        }
    }

    /// Starts `app_bin --bind 127.0.0.1:<free port> <args>` with the stack's variables
    /// (`servers`: `DATABASE_URL`, `REDIS_URLS`, `ZK_CONNECT`, `ETCD_ENDPOINTS`, what
    /// `testbed::Stack::env` gives) in its environment, and waits until `/health`
    /// answers. Every server flag reads its variable, so a strategy with a server of
    /// its own gets it here with nothing to add; `args` override (a proxied address).
    /// Call it from a long-lived thread (the process dies with the thread that
    /// spawned it).
    pub async fn start(
        client: &reqwest::Client,
        app_bin: &Path,
        name: &str,
        servers: &[(&str, String)],
        args: &[String],
    ) -> anyhow::Result<Instance> {
        let port = free_port()?;
        let log = std::env::temp_dir().join(format!("stock-locks-{name}-{port}.log"));
        let mut all = vec!["--bind".to_string(), format!("127.0.0.1:{port}")];
        all.extend_from_slice(args);
        // With test hooks, a lock log of its own (kept across a respawn: appended to).
        let lock_log = args
            .iter()
            .any(|a| a == "--enable-test-hooks")
            .then(|| std::env::temp_dir().join(format!("stock-locks-{name}-{port}.locks.jsonl")));
        if let Some(path) = &lock_log {
            let _ = std::fs::remove_file(path);
            all.extend(["--lock-log".to_string(), path.display().to_string()]);
        }
        let mut env: Vec<(String, String)> = servers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        // A Redis Cluster only when given (the service reads an empty list as none):
        // under `testbed run --redis-cluster`, the Redis lock would otherwise move to
        // the cluster this program inherited.
        let cluster = testbed::redis_cluster::KIND.variable;
        if !servers.iter().any(|(k, _)| *k == cluster) {
            env.push((cluster.to_string(), String::new()));
        }
        let process = ServerProcess::spawn_with_env(name, app_bin, &all, &env, log);
        let process = process.with_context(|| {
            format!(
                "starting {} (build it: cargo build --release -p stock-app)",
                app_bin.display()
            )
        })?;
        let mut instance = Instance {
            process,
            base: format!("http://127.0.0.1:{port}"),
            lock_log,
        };
        instance.wait_healthy(client).await?;
        Ok(instance)
    }

    /// Kills the instance (if it runs) and starts it again on the same port.
    pub async fn respawn(&mut self, client: &reqwest::Client) -> anyhow::Result<()> {
        self.process.respawn()?;
        self.wait_healthy(client).await
    }

    async fn wait_healthy(&mut self, client: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(response) = client.get(format!("{}/health", self.base)).send().await
                && response.status().is_success()
            {
                return Ok(());
            }
            if !self.process.is_running() || Instant::now() > deadline {
                bail!(
                    "{} did not come up; its log:\n{}",
                    self.process.name(),
                    self.process.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The `stock-app` binary: `explicit` if given, else next to the running program (the
/// binaries of one cargo build share a directory; a test binary lives one level down,
/// in `deps/`).
pub fn app_bin(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent();
    while let Some(d) = dir {
        let candidate = d.join("stock-app");
        if candidate.is_file() {
            return Ok(candidate);
        }
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
        dir = d.parent();
    }
    bail!(
        "no stock-app binary next to {} (build it: cargo build -p stock-app)",
        exe.display()
    )
}

/// Peak resident memory of a process (VmHWM in /proc), KiB; 0 if unreadable.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Raises this process's open-file limit to its hard limit (the instances started
/// after inherit it: a flood's connections are a file each, on both ends) and says
/// what it is now.
pub fn raise_open_files() -> u64 {
    // SAFETY: getrlimit and setrlimit read and write the one struct they are given.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
        limit.rlim_cur as u64
    }
}

/// The processes a run's cost is measured on: these instances and the servers.
pub fn processes(instances: &[Instance], servers: &[(String, u32)]) -> Vec<(String, u32)> {
    instances
        .iter()
        .map(|i| (i.process.name().to_string(), i.process.pid()))
        .chain(servers.iter().cloned())
        .collect()
}

/// How long the load generator keeps an idle connection: under the service's
/// keep-alive (actix closes an idle connection after 5 s). A connection both sides
/// consider open, closed by the server just as the client sends on it, fails with no
/// answer at all (a transport error the service never saw): the client must give it
/// up first.
pub const CLIENT_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The load generator's HTTP client: `max_idle` connections kept per instance, each
/// for at most [`CLIENT_IDLE`].
pub fn http_client(max_idle: usize) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(max_idle)
        .pool_idle_timeout(CLIENT_IDLE)
        .build()
}

/// The admin token every instance a subcommand starts accepts.
pub const ADMIN_TOKEN: &str = "demo-admin-token";

/// Starts `stock-app` as `name` on the servers of `env`, with `--hold-ms hold_ms`.
pub async fn start_instance(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    hold_ms: u64,
) -> anyhow::Result<Instance> {
    start_instance_with(
        client,
        app_bin,
        env,
        name,
        &["--hold-ms", &hold_ms.to_string()],
    )
    .await
}

/// [`start_instance`] with flags of its own (`--max-in-flight 32`, ...).
pub async fn start_instance_with(
    client: &reqwest::Client,
    app_bin: &Path,
    env: &BTreeMap<&str, String>,
    name: &str,
    flags: &[&str],
) -> anyhow::Result<Instance> {
    let mut args: Vec<String> = vec!["--admin-token".into(), ADMIN_TOKEN.into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    let servers: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
    Instance::start(client, app_bin, name, &servers, &args).await
}

/// A latency of `rtt_ms` round trip (what a proxy in front of a server adds).
pub fn round_trip(rtt_ms: f64) -> testbed::Latency {
    testbed::Latency::round_trip(Duration::from_secs_f64(rtt_ms / 1000.0))
}
