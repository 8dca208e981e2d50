//! The testbed against real server binaries: they start, answer, and leave nothing
//! behind, however their owner ends.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testbed::{Etcd, MariaDb, Redis, Stack, StackConfig, ZooKeeper};

/// Whether a process is gone (no /proc entry) or a zombie awaiting its reaper.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses: "123 (redis) Z ...".
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

fn wait_all_dead(pids: &[(String, u32)], within: Duration) -> Vec<(String, u32)> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<_> = pids
            .iter()
            .filter(|(_, pid)| !is_dead(*pid))
            .cloned()
            .collect();
        if alive.is_empty() || Instant::now() > deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The whole default stack (MariaDB, 5 Redis, ZooKeeper) starts and is ready; each
/// server answers its own protocol; dropping the stack stops every process.
#[test]
fn default_stack_starts_answers_and_stops() {
    let started = Instant::now();
    let stack = Stack::start(&StackConfig::default()).expect("stack starts");
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "stack of {} servers ready in {seconds:.2} s",
        stack.pids().len()
    );

    let env: std::collections::HashMap<_, _> = stack.env().into_iter().collect();
    assert!(env["DATABASE_URL"].ends_with("/stocklocks"), "{env:?}");
    assert_eq!(env["REDIS_URLS"].split(',').count(), 5);
    assert!(env["ZK_CONNECT"].starts_with("127.0.0.1:"));

    let db = stack.get::<MariaDb>().unwrap();
    let answer = db
        .execute("SELECT @@character_set_server, DATABASE() IS NULL")
        .unwrap();
    assert!(answer.contains("utf8mb4"), "{answer}");
    let databases = db.execute("SHOW DATABASES").unwrap();
    assert!(databases.contains("stocklocks"), "{databases}");
    let zk = stack.get::<ZooKeeper>().unwrap();
    assert_eq!(zk.nodes()[0].mode().as_deref(), Some("standalone"));
    let ports: std::collections::HashSet<u16> = stack.redis().iter().map(Redis::port).collect();
    assert_eq!(ports.len(), 5, "five independent servers");

    let pids = stack.pids();
    assert_eq!(pids.len(), 8, "mariadb, 5 redis, zookeeper, etcd");
    assert!(env["ETCD_ENDPOINTS"].starts_with("http://127.0.0.1:"));
    let dirs: Vec<_> = stack.redis().iter().map(|r| r.url()).collect();
    drop(stack);
    let alive = wait_all_dead(&pids, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "still running after drop: {alive:?} (of {dirs:?})"
    );
}

/// Three ZooKeeper servers form one ensemble: one leader, two followers.
#[test]
fn zookeeper_ensemble_reaches_quorum() {
    let started = Instant::now();
    let zk = ZooKeeper::start_ensemble(3).expect("ensemble starts");
    println!(
        "3-node ensemble serving in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let mut modes: Vec<String> = zk
        .nodes()
        .iter()
        .map(|n| n.mode().expect("serving"))
        .collect();
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    assert_eq!(zk.connect_string().split(',').count(), 3);
}

/// Three etcd members form one cluster with exactly one leader, and every member
/// answers on its own endpoint.
#[test]
fn etcd_cluster_elects_one_leader() {
    let started = Instant::now();
    let etcd = Etcd::start_cluster(3).expect("cluster starts");
    println!(
        "3-member etcd cluster healthy in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let leaders: Vec<bool> = etcd
        .nodes()
        .iter()
        .map(|n| n.is_leader().expect("answers"))
        .collect();
    assert_eq!(leaders.iter().filter(|l| **l).count(), 1, "{leaders:?}");
    assert_eq!(etcd.endpoints().split(',').count(), 3);
}

/// A port that is taken is not fatal: the server is started again on another one.
#[test]
fn a_busy_port_is_retried() {
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = squatter.local_addr().unwrap().port();

    let (redis, attempts) =
        Redis::start_preferring("redis-busy", Some(busy)).expect("redis starts");
    assert_ne!(redis.port(), busy);
    assert_eq!(attempts, 2, "the busy port, then a free one");

    let (db, attempts) = MariaDb::start_preferring(Some(busy)).expect("mariadb starts");
    assert_ne!(db.port(), busy);
    assert_eq!(attempts, 2, "the busy port, then a free one");
    drop(squatter);
}

/// Killing the owner with SIGKILL (no destructor runs) still takes every server down:
/// they were started with PR_SET_PDEATHSIG. Checked on `testbed up`'s own servers.
#[test]
fn servers_die_with_a_sigkilled_owner() {
    let mut owner = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["up", "--redis", "2"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    for line in BufReader::new(owner.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(list) = line.strip_prefix("# pids: ") {
            for entry in list.split(' ') {
                let (name, pid) = entry.split_once('=').unwrap();
                pids.push((name.to_string(), pid.parse::<u32>().unwrap()));
            }
            break;
        }
    }
    assert_eq!(pids.len(), 5, "mariadb, 2 redis, zookeeper, etcd: {pids:?}");
    assert!(pids.iter().all(|(_, pid)| !is_dead(*pid)));
    let owner_pid = owner.id();

    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(owner_pid as i32, libc::SIGKILL) };
    owner.wait().unwrap();
    let alive = wait_all_dead(&pids, Duration::from_secs(10));
    assert!(
        alive.is_empty(),
        "servers outlived their SIGKILLed owner: {alive:?}"
    );

    // No destructor ran, so the servers' temporary directories were left behind;
    // the next server started anywhere removes them.
    let _next = Redis::start("redis-cleanup").unwrap();
    let leftovers = dirs_owned_by(owner_pid);
    assert!(
        leftovers.is_empty(),
        "stale directories not cleaned: {leftovers:?}"
    );
}

fn dirs_owned_by(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("stock-locks-testbed-")
        })
        .filter(|p| {
            std::fs::read_to_string(p.join("owner.pid")).is_ok_and(|o| o.trim() == pid.to_string())
        })
        .collect()
}

/// A missing server binary is reported with the package that provides it.
#[test]
fn a_missing_binary_names_its_package() {
    let err =
        testbed::process::find_binary("no-such-server-binary", "no-such-package").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no-such-server-binary") && text.contains("no-such-package"),
        "{text}"
    );
}

/// `testbed run -- CMD` hands CMD the servers' addresses, passes its exit code
/// through, and stops the servers afterwards (their ports stop answering).
#[test]
fn run_exports_the_stack_and_passes_the_exit_code() {
    let output = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["run", "--redis", "2", "--zookeeper-nodes", "0", "--"])
        .args([
            "sh",
            "-c",
            r#"echo "$DATABASE_URL|$REDIS_URLS|${ZK_CONNECT:-none}"; exit 7"#,
        ])
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URLS")
        .env_remove("ZK_CONNECT")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7), "CMD's exit code");
    let line = String::from_utf8(output.stdout).unwrap();
    let parts: Vec<&str> = line.trim().split('|').collect();
    assert!(
        parts[0].starts_with("mysql://root@127.0.0.1:") && parts[0].ends_with("/stocklocks"),
        "{line}"
    );
    assert_eq!(parts[1].split(',').count(), 2, "{line}");
    assert_eq!(parts[2], "none", "no ZooKeeper was asked for");
    let port: u16 = parts[0]
        .rsplit_once(':')
        .unwrap()
        .1
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "MariaDB still answers after `testbed run` returned"
    );
}

/// Servers given through the environment are used instead of started.
#[test]
fn run_uses_servers_given_in_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args([
            "run",
            "--",
            "sh",
            "-c",
            r#"echo "$DATABASE_URL|$REDIS_URLS|$ZK_CONNECT|$ETCD_ENDPOINTS""#,
        ])
        .env("DATABASE_URL", "mysql://given/db")
        .env("REDIS_URLS", "redis://given")
        .env("ZK_CONNECT", "given:2181")
        .env("ETCD_ENDPOINTS", "http://given:2379")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        "mysql://given/db|redis://given|given:2181|http://given:2379"
    );
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("0 server(s)")
    );
}
