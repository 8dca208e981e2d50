//! The fault tools on real servers: pause and resume, kill and restart, and a proxy
//! that delays, blackholes and resets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use testbed::process::wait_until;
use testbed::proxy::{Proxy, ProxyMode};
use testbed::{MariaDb, Persistence, Redis, ZooKeeper};

/// Sends one Redis command over a fresh connection; `None` when no answer comes
/// within `timeout` (or the connection fails).
fn redis(port: u16, command: &str, timeout: Duration) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// A write and a `WAIT` on one connection (WAIT counts the replicas that acknowledged
/// this connection's writes); the WAIT's answer.
fn write_and_wait(port: u16, write: &str, wait: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(format!("{write}\r\n{wait}\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    let mut buf = [0u8; 512];
    while answer.matches("\r\n").count() < 2 {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        answer.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    answer.lines().nth(1).map(str::to_string)
}

/// A paused server answers nothing (but keeps its port); resumed, it answers again.
#[test]
fn pause_and_resume() {
    let server = Redis::start("redis-pause").unwrap();
    let short = Duration::from_millis(300);
    assert_eq!(
        redis(server.port(), "PING", short).as_deref(),
        Some("+PONG")
    );
    server.process_ref().pause().unwrap();
    assert_eq!(
        redis(server.port(), "PING", short),
        None,
        "a paused server answers nothing"
    );
    server.process_ref().resume().unwrap();
    assert_eq!(
        redis(server.port(), "PING", short).as_deref(),
        Some("+PONG")
    );
}

/// kill -9 and restart: Redis comes back on the same port, empty.
#[test]
fn redis_restarts_empty() {
    let mut server = Redis::start("redis-restart").unwrap();
    let (port, pid) = (server.port(), server.pid());
    let second = Duration::from_secs(1);
    assert_eq!(
        redis(port, "SET lock:1 holder", second).as_deref(),
        Some("+OK")
    );
    server.restart().unwrap();
    assert_ne!(server.pid(), pid, "a new process");
    assert_eq!(server.port(), port, "the same port");
    assert_eq!(
        redis(port, "EXISTS lock:1", second).as_deref(),
        Some(":0"),
        "nothing survived"
    );
}

/// With an append-only file fsynced before every reply, a kill -9 loses nothing
/// acknowledged, restart after restart; switched back off, the next restart is empty.
#[test]
fn redis_with_an_append_only_file_keeps_what_it_acknowledged() {
    let mut server = Redis::start("redis-aof").unwrap();
    let port = server.port();
    let second = Duration::from_secs(1);
    server.set_persistence(Persistence::AofAlways).unwrap();
    assert_eq!(redis(port, "SET sold 1", second).as_deref(), Some("+OK"));
    server.restart().unwrap();
    assert_eq!(
        redis(port, "INCR sold", second).as_deref(),
        Some(":2"),
        "kept"
    );
    server.restart().unwrap();
    assert_eq!(
        redis(port, "GET sold", second).as_deref(),
        Some("$1\r\n2"),
        "kept again"
    );
    server.set_persistence(Persistence::None).unwrap();
    server.restart().unwrap();
    assert_eq!(redis(port, "EXISTS sold", second).as_deref(), Some(":0"));
}

/// kill -9 and restart: MariaDB keeps what was committed (crash recovery).
#[test]
fn mariadb_restart_keeps_committed_data() {
    let mut db = MariaDb::start().unwrap();
    db.execute(
        "CREATE DATABASE f; CREATE TABLE f.t (id INT PRIMARY KEY); INSERT INTO f.t VALUES (7)",
    )
    .unwrap();
    let started = Instant::now();
    db.restart().unwrap();
    println!("mariadb killed and back in {:?}", started.elapsed());
    assert!(db.execute("SELECT id FROM f.t").unwrap().contains('7'));
}

/// A ZooKeeper node killed and restarted serves again.
#[test]
fn zookeeper_node_restarts() {
    let mut zk = ZooKeeper::start_standalone().unwrap();
    zk.nodes_mut()[0].restart().unwrap();
    assert_eq!(zk.nodes()[0].mode().as_deref(), Some("standalone"));
}

/// An etcd member killed and restarted is healthy again, and leads its cluster of one.
#[test]
fn etcd_member_restarts() {
    let mut etcd = testbed::Etcd::start().unwrap();
    etcd.nodes_mut()[0].restart().unwrap();
    assert_eq!(etcd.nodes()[0].is_leader(), Some(true));
}

/// The proxy passes, delays, blackholes (silence, then the held request goes through
/// when it passes again) and resets.
#[test]
fn proxy_modes() {
    let server = Redis::start("redis-proxied").unwrap();
    let proxy = Proxy::start(server.port()).unwrap();
    let port = proxy.port();
    let second = Duration::from_secs(1);
    assert_eq!(redis(port, "PING", second).as_deref(), Some("+PONG"));

    proxy.set(ProxyMode::Delay(Duration::from_millis(150)));
    let started = Instant::now();
    assert_eq!(redis(port, "PING", second).as_deref(), Some("+PONG"));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "150 ms each way, took {took:?}"
    );

    proxy.set(ProxyMode::Blackhole);
    let mut held = TcpStream::connect(("127.0.0.1", port)).unwrap();
    held.write_all(b"PING\r\n").unwrap();
    held.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(held.read(&mut buf).is_err(), "silence while blackholed");
    proxy.set(ProxyMode::Pass);
    held.set_read_timeout(Some(second)).unwrap();
    let n = held.read(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"+PONG\r\n",
        "the held request goes through afterwards"
    );

    proxy.set(ProxyMode::Reset);
    let err = held.read(&mut buf);
    assert!(
        matches!(&err, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
            || matches!(err, Ok(0)),
        "{err:?}"
    );
    assert_eq!(
        redis(port, "PING", second),
        None,
        "new connections are reset"
    );
}

/// A real failover that loses a write: with the replica's link blackholed, a key
/// written to the primary never reaches the replica; the primary is killed, Sentinel
/// promotes the replica, and the key is not there. (With the link up, it is.)
#[test]
fn sentinel_failover_loses_what_replication_held_back() {
    let mut ha = testbed::RedisHa::start("ha-failover").unwrap();
    let second = Duration::from_secs(1);
    let (primary, replica) = (ha.primary.port(), ha.replica.port());
    assert_eq!(ha.current_primary_port(), Some(primary));
    assert_eq!(ha.sentinel_addrs().len(), 3);
    // Replicated while the link is up (WAIT: one replica acknowledged it).
    assert_eq!(
        write_and_wait(primary, "SET before 1", "WAIT 1 2000").as_deref(),
        Some(":1")
    );
    ha.replication.set(ProxyMode::Blackhole);
    assert_eq!(
        write_and_wait(primary, "SET during 1", "WAIT 1 300").as_deref(),
        Some(":0"),
        "nobody acknowledged the write made during the blackhole"
    );

    ha.primary.process().kill();
    let started = Instant::now();
    let promoted = ha.wait_for_failover(Duration::from_secs(20)).unwrap();
    println!("failover in {:?}", started.elapsed());
    assert_eq!(promoted, replica);
    assert_eq!(ha.current_primary_port(), Some(replica));
    assert_eq!(
        redis(replica, "EXISTS before", second).as_deref(),
        Some(":1")
    );
    assert_eq!(
        redis(replica, "EXISTS during", second).as_deref(),
        Some(":0"),
        "the write acknowledged during the blackhole is gone"
    );
    assert_eq!(
        redis(replica, "SET after 1", second).as_deref(),
        Some("+OK"),
        "the new primary takes writes"
    );
}

/// A busy machine stalls every Sentinel past its TILT trigger (a timer 2 s late), and
/// the primary dies as they come back: each Sentinel is in TILT, acts again after the
/// testbed's short TILT period, and the failover comes within the bound. (With
/// Sentinel's default period, 30 s, none would come: by then the replica's link has
/// been down too long for any Sentinel to promote it.)
#[test]
fn sentinels_stalled_into_tilt_still_fail_over() {
    let mut ha = testbed::RedisHa::start("ha-tilt").unwrap();
    let replica = ha.replica.port();
    // The stall is the fault: it has to outlast the 2 s trigger.
    let stall = Duration::from_millis(2_500);
    for sentinel in ha.sentinel_processes() {
        sentinel.pause().unwrap();
    }
    std::thread::sleep(stall);
    for sentinel in ha.sentinel_processes() {
        sentinel.resume().unwrap();
    }
    ha.primary.process().kill();
    let started = Instant::now();
    let promoted = ha.wait_for_failover(Duration::from_secs(20)).unwrap();
    println!("failover in {:?}", started.elapsed());
    assert_eq!(promoted, replica);
    for sentinel in ha.sentinel_processes() {
        let log = sentinel.log_tail(200);
        assert!(log.contains("+tilt"), "{}: {log}", sentinel.name());
    }
}

/// A failover attempt that fails is tried again within seconds: with the replica
/// frozen, the elected Sentinel finds no replica to promote and gives up; once the
/// replica is back, the next attempt promotes it. (Sentinel waits twice
/// `failover-timeout` between attempts: 120 s at the 60 s the primary lives with,
/// 6 s once [`testbed::RedisHa::wait_for_failover`] has shortened it.)
#[test]
fn a_failed_failover_attempt_is_retried() {
    let mut ha = testbed::RedisHa::start("ha-retry").unwrap();
    let replica = ha.replica.port();
    ha.replica.process_ref().pause().unwrap();
    let logs_say = |ha: &testbed::RedisHa, event: &str| {
        ha.sentinel_processes()
            .filter(|s| s.log_tail(500).contains(event))
            .count()
    };
    let minute = Duration::from_secs(60);
    wait_until(minute, "every Sentinel to call the replica down", || {
        logs_say(&ha, "+sdown slave") == 3
    })
    .unwrap();
    ha.primary.process().kill();
    wait_until(
        minute,
        "a Sentinel to give up for want of a replica",
        || logs_say(&ha, "-failover-abort-no-good-slave") > 0,
    )
    .unwrap();
    ha.replica.process_ref().resume().unwrap();
    let promoted = ha.wait_for_failover(Duration::from_secs(20)).unwrap();
    assert_eq!(promoted, replica);
}

/// A Redis whose wall clock the test moves: jumped 30 s forward, a key with 10 s left
/// expires at once and `TIME` says 30 s later; monotonic time (and the test's clock)
/// did not move.
#[test]
fn redis_clock_jumps_forward() {
    let mut server = Redis::start("redis-clock").unwrap();
    server.with_movable_clock().unwrap();
    let second = Duration::from_secs(1);
    let port = server.port();
    let time = |port| -> u64 {
        let answer = redis(port, "TIME", second).unwrap();
        answer.lines().nth(2).unwrap().trim().parse().unwrap()
    };
    let real = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert!(time(port).abs_diff(real()) <= 1, "no offset yet");
    assert_eq!(
        redis(port, "SET lease 1 PX 10000", second).as_deref(),
        Some("+OK")
    );
    server.set_clock_offset(30_000).unwrap();
    assert!(time(port).abs_diff(real() + 30) <= 1, "30 s ahead");
    assert_eq!(
        redis(port, "EXISTS lease", second).as_deref(),
        Some(":0"),
        "expired early by the server's clock"
    );
    server.set_clock_offset(0).unwrap();
    assert!(time(port).abs_diff(real()) <= 1, "back");
}

/// A MariaDB replica follows its primary, and lag is made on demand: paused, it keeps
/// showing the old value while the primary moves on; resumed, it catches up.
#[test]
fn mariadb_replica_lags_when_paused() {
    let pair = testbed::replication::MariaDbReplicas::start().unwrap();
    pair.primary.create_database("lag").unwrap();
    pair.primary
        .execute("CREATE TABLE lag.t (id INT PRIMARY KEY, v INT); INSERT INTO lag.t VALUES (1, 10)")
        .unwrap();
    let read = |db: &MariaDb| db.execute("SELECT v FROM lag.t WHERE id = 1").unwrap();
    pair.replica
        .wait_caught_up(&pair.primary, Duration::from_secs(10))
        .unwrap();
    assert!(read(&pair.replica.server).contains("10"));
    pair.replica.pause().unwrap();
    pair.primary
        .execute("UPDATE lag.t SET v = 9 WHERE id = 1")
        .unwrap();
    assert!(read(&pair.primary).contains('9'));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        read(&pair.replica.server).contains("10"),
        "the paused replica still shows the old value"
    );
    pair.replica.resume().unwrap();
    pair.replica
        .wait_caught_up(&pair.primary, Duration::from_secs(10))
        .unwrap();
    assert!(read(&pair.replica.server).contains('9'), "caught up");
}

/// Answers `count` PINGs one after the other on one connection; each round trip's time.
fn pings(stream: &mut TcpStream, count: usize) -> Vec<Duration> {
    let mut buf = [0u8; 64];
    (0..count)
        .map(|_| {
            let started = Instant::now();
            stream.write_all(b"PING\r\n").unwrap();
            let n = stream.read(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"+PONG\r\n");
            started.elapsed()
        })
        .collect()
}

/// The link's latency is paid on every round trip, at sub-millisecond settings too
/// (tokio's timer would round a 0.25 ms hop up to 1 ms: the proxy does not use it),
/// and jitter never reorders bytes.
#[test]
fn latency_costs_every_round_trip() {
    use testbed::Latency;
    let server = Redis::start("redis-at-a-distance").unwrap();
    let proxy = Proxy::start(server.port()).unwrap();
    let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for rtt_us in [500u64, 2000] {
        let rtt = Duration::from_micros(rtt_us);
        proxy.set_latency(Latency::round_trip(rtt));
        let mut times = pings(&mut stream, 50);
        times.sort();
        assert!(times[0] >= rtt, "round trip {:?} < {rtt:?}", times[0]);
        eprintln!(
            "rtt {rtt:?}: fastest {:?}, median {:?}, slowest {:?}",
            times[0], times[25], times[49]
        );
    }
    // Jitter of ±1 ms on a 1 ms hop: pipelined commands still answer in order.
    proxy.set_latency(
        Latency::round_trip(Duration::from_millis(2)).with_jitter(Duration::from_millis(1)),
    );
    let commands: String = (0..200).map(|i| format!("ECHO {i}\r\n")).collect();
    stream.write_all(commands.as_bytes()).unwrap();
    let expected: String = (0..200)
        .map(|i| format!("${}\r\n{i}\r\n", i.to_string().len()))
        .collect();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while answer.len() < expected.len() {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the proxy closed the connection");
        answer.extend_from_slice(&buf[..n]);
    }
    assert_eq!(String::from_utf8_lossy(&answer), expected);
}

/// A round trip is a turn of the conversation: the client spoke, the server answered.
/// Five PINGs one after the other are five; three sent in one write are one.
#[test]
fn round_trips_are_counted_per_turn() {
    let server = Redis::start("redis-counted").unwrap();
    let proxy = Proxy::start(server.port()).unwrap();
    let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    pings(&mut stream, 5);
    assert_eq!(proxy.round_trips(), 5);
    stream.write_all(b"PING\r\nPING\r\nPING\r\n").unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 64];
    while answer.len() < 21 {
        let n = stream.read(&mut buf).unwrap();
        answer.extend_from_slice(&buf[..n]);
    }
    assert_eq!(answer, b"+PONG\r\n+PONG\r\n+PONG\r\n");
    assert_eq!(proxy.round_trips(), 6);
}

/// A stack at a distance exports its proxies' addresses, counts each kind's round
/// trips, and its latency can change while it runs.
#[test]
fn a_stack_at_a_distance() {
    use testbed::{Latency, Stack, StackConfig};
    let stack = Stack::start(&StackConfig {
        network: Some(Latency::round_trip(Duration::from_millis(4))),
        ..StackConfig::none().with_nodes(&testbed::redis::KIND, 2)
    })
    .unwrap();
    assert!(stack.at_a_distance());
    let env: std::collections::BTreeMap<_, _> = stack.env().into_iter().collect();
    let urls: Vec<&str> = env["REDIS_URLS"].split(',').collect();
    assert_eq!(urls.len(), 2);
    let ports: Vec<u16> = stack.redis().iter().map(Redis::port).collect();
    let network = stack.network().unwrap();
    let counter = network.round_trips();
    for url in &urls {
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        assert!(!ports.contains(&port), "{url} is a server's own port");
        let started = Instant::now();
        assert_eq!(
            redis(port, "PING", Duration::from_secs(5)).as_deref(),
            Some("+PONG")
        );
        assert!(started.elapsed() >= Duration::from_millis(4));
    }
    assert_eq!(counter.snapshot().get("redis"), Some(&2));
    network.set_latency(Some(&testbed::redis::KIND), Latency::default());
    assert_eq!(stack.direct_env().len(), 1);
    assert_ne!(stack.direct_env(), stack.env());
    let port: u16 = urls[0].rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        redis(port, "PING", Duration::from_secs(5)).as_deref(),
        Some("+PONG")
    );
    assert_eq!(counter.snapshot().get("redis"), Some(&3));
}
