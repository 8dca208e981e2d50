//! `docker-compose.yml` checked against the code, without Docker (no engine runs on
//! the CI machines): the services the topology needs, their images, ports and
//! environment, parsed through stock-app's own settings parser and loadtest's own
//! command line, so a renamed flag or variable breaks this test, not a user's `up`.

use clap::{CommandFactory, Parser};
use reqwest::Url;
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use stock_app::config::Settings;

fn repo_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
}

/// The compose file with its YAML anchors and `<<` merges resolved.
fn compose() -> Value {
    let text = std::fs::read_to_string(repo_file("docker-compose.yml")).unwrap();
    let mut value: Value = serde_yaml_ng::from_str(&text).expect("docker-compose.yml is YAML");
    value.apply_merge().unwrap();
    value
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    let service = &compose["services"][name];
    assert!(
        service.is_mapping(),
        "no service {name:?} in docker-compose.yml"
    );
    service
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

/// A service's `environment` (a mapping in this file), values as strings.
fn environment(service: &Value) -> BTreeMap<String, String> {
    let Some(map) = service["environment"].as_mapping() else {
        return BTreeMap::new();
    };
    map.iter()
        .map(|(k, v)| {
            (
                str_of(k, "a variable").to_string(),
                str_of(v, "a value").to_string(),
            )
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|s| s.iter().map(|v| str_of(v, "an item").to_string()).collect())
        .unwrap_or_default()
}

/// `"8081:8080"` → (8081, 8080).
fn published(service: &Value) -> Vec<(u16, u16)> {
    strings(&service["ports"])
        .iter()
        .map(|p| {
            let (host, container) = p.split_once(':').expect("HOST:CONTAINER");
            (host.parse().unwrap(), container.parse().unwrap())
        })
        .collect()
}

/// stock-app's settings from a compose environment, parsed by stock-app's own clap
/// definition: every variable must be one stock-app reads, and every value must parse.
fn app_settings(env: &BTreeMap<String, String>) -> Settings {
    let command = Settings::command();
    let mut args = vec!["stock-app".to_string()];
    for (name, value) in env {
        if name == "RUST_LOG" {
            continue; // read by the tracing subscriber, not by the settings
        }
        let arg = command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()))
            .unwrap_or_else(|| panic!("stock-app reads no variable {name}"));
        args.push(format!("--{}", arg.get_long().unwrap()));
        args.push(value.clone());
    }
    Settings::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

const REDIS: [&str; 5] = ["redis-1", "redis-2", "redis-3", "redis-4", "redis-5"];
const ZOOKEEPER: [&str; 3] = ["zk-1", "zk-2", "zk-3"];
const APPS: [&str; 2] = ["app-a", "app-b"];
const CLUSTER: [&str; 6] = ["rc-1", "rc-2", "rc-3", "rc-4", "rc-5", "rc-6"];

/// The services are the topology of DESIGN.md: one MariaDB 10.11, five Redis 7, a
/// three-node ZooKeeper 3.8 ensemble, one etcd 3.4, two stock-app instances, the load
/// tester.
#[test]
fn the_services_are_the_designed_topology() {
    let compose = compose();
    let names: Vec<&str> = compose["services"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| str_of(k, "a service name"))
        .collect();
    let mut expected = vec!["mariadb"];
    expected.extend(REDIS);
    expected.extend(CLUSTER);
    expected.push("rc-create");
    expected.extend(ZOOKEEPER);
    expected.push("etcd");
    expected.extend(APPS);
    expected.push("loadtest");
    assert_eq!(names, expected);

    let image = |name: &str| str_of(&service(&compose, name)["image"], "image").to_string();
    assert_eq!(image("mariadb"), "mariadb:10.11");
    for redis in REDIS {
        assert_eq!(image(redis), "redis:7");
        // No persistence, as testbed starts them: a restarted node comes back empty.
        assert_eq!(
            strings(&service(&compose, redis)["command"]),
            ["redis-server", "--save", "", "--appendonly", "no"]
        );
    }
    for zk in ZOOKEEPER {
        assert_eq!(image(zk), "zookeeper:3.8");
    }
    // The Redis Cluster: only with its profile; cluster mode, the testbed's node timeout,
    // no persistence; joined by rc-create once every node runs.
    for node in CLUSTER.iter().chain(&["rc-create"]) {
        assert_eq!(image(node), "redis:7");
        assert_eq!(
            strings(&service(&compose, node)["profiles"]),
            ["cluster"],
            "{node}"
        );
    }
    for node in CLUSTER {
        let command = strings(&service(&compose, node)["command"]).join(" ");
        let timeout = testbed::redis_cluster::NODE_TIMEOUT.as_millis();
        assert_eq!(
            command,
            format!(
                "redis-server --cluster-enabled yes --cluster-node-timeout {timeout} --save  --appendonly no"
            )
        );
    }
    let create = strings(&service(&compose, "rc-create")["command"]).join(" ");
    assert!(
        create.contains("--cluster create") && create.contains("--cluster-replicas 1"),
        "{create}"
    );
    assert!(
        create.contains("for n in 1 2 3 4 5 6") && create.contains("getent hosts rc-$$n"),
        "{create}"
    );
    assert_eq!(
        strings(&service(&compose, "rc-create")["depends_on"]),
        CLUSTER
    );
    // The etcd testbed starts from Debian (3.4).
    assert_eq!(image("etcd"), "quay.io/coreos/etcd:v3.4.23");
    // Both instances and the load tester run the image the Dockerfile builds.
    for name in APPS.into_iter().chain(["loadtest"]) {
        assert_eq!(image(name), "stock-locks:latest", "{name}");
    }
    for app in APPS {
        assert_eq!(service(&compose, app)["build"].as_str(), Some("."), "{app}");
    }
}

/// The ZooKeeper nodes form one ensemble: ids 1-3, each listed in ZOO_SERVERS with
/// its quorum, election and client ports.
#[test]
fn zookeeper_is_a_three_node_ensemble() {
    let compose = compose();
    let mut ids = Vec::new();
    for zk in ZOOKEEPER {
        let env = environment(service(&compose, zk));
        ids.push(env["ZOO_MY_ID"].clone());
        let servers: Vec<&str> = env["ZOO_SERVERS"].split_whitespace().collect();
        let expected: Vec<String> = ZOOKEEPER
            .iter()
            .enumerate()
            .map(|(i, host)| format!("server.{}={host}:2888:3888;2181", i + 1))
            .collect();
        assert_eq!(servers, expected, "{zk}");
    }
    assert_eq!(ids, ["1", "2", "3"]);
}

/// Both stock-app instances get the environment DESIGN.md describes, every variable
/// one stock-app reads, every value valid, every address one of the services above.
#[test]
fn the_instances_are_wired_to_every_server() {
    let compose = compose();
    let mariadb = environment(service(&compose, "mariadb"));
    let env_a = environment(service(&compose, "app-a"));
    assert_eq!(
        env_a,
        environment(service(&compose, "app-b")),
        "both instances share one configuration"
    );
    let settings = app_settings(&env_a);

    // DATABASE_URL: the mariadb service, with the credentials and database it creates.
    let db = Url::parse(&settings.database_url).unwrap();
    assert_eq!(db.scheme(), "mysql");
    assert_eq!(db.host_str(), Some("mariadb"));
    assert_eq!(db.port_or_known_default().or(db.port()), Some(3306));
    assert_eq!(db.username(), "root");
    assert_eq!(
        db.password(),
        Some(mariadb["MARIADB_ROOT_PASSWORD"].as_str())
    );
    assert_eq!(db.path(), format!("/{}", mariadb["MARIADB_DATABASE"]));

    // REDIS_URLS: all five, in order (the first one also serves redis-lock).
    let redis: Vec<(String, u16)> = settings
        .shared
        .redis_urls
        .iter()
        .map(|u| {
            let url = Url::parse(u).unwrap();
            assert_eq!(url.scheme(), "redis");
            (
                url.host_str().unwrap().to_string(),
                url.port().unwrap_or(6379),
            )
        })
        .collect();
    let expected: Vec<(String, u16)> = REDIS.iter().map(|r| (r.to_string(), 6379)).collect();
    assert_eq!(redis, expected);

    // REDIS_CLUSTER_URLS: taken from the host's environment, empty by default (the
    // instances then use redis-1); the header's command names the cluster's nodes.
    let header = std::fs::read_to_string(repo_file("docker-compose.yml")).unwrap();
    let given = header
        .lines()
        .find_map(|l| l.strip_prefix("#   REDIS_CLUSTER_URLS="))
        .and_then(|l| l.split_whitespace().next())
        .expect("the header shows how to start the cluster profile");
    for url in given.split(',') {
        let url = Url::parse(url).unwrap();
        assert!(CLUSTER.contains(&url.host_str().unwrap()), "{url}");
        assert_eq!(url.port(), Some(6379));
    }
    assert_eq!(env_a["REDIS_CLUSTER_URLS"], "${REDIS_CLUSTER_URLS:-}");

    // ZK_CONNECT: every ensemble member at its client port.
    let zk_connect = settings
        .shared
        .zk_connect
        .as_deref()
        .expect("ZK_CONNECT is set");
    let expected: Vec<String> = ZOOKEEPER.iter().map(|z| format!("{z}:2181")).collect();
    assert_eq!(zk_connect.split(',').collect::<Vec<_>>(), expected);

    // ETCD_ENDPOINTS: the etcd service at its client port (etcd-lock's own flag).
    assert_eq!(
        settings.strategies.etcd_lock.etcd_endpoints,
        ["http://etcd:2379"]
    );

    assert!(
        settings.admin_token.is_some(),
        "ADMIN_TOKEN is set (restocking needs it)"
    );
    assert!(
        !settings.enable_test_hooks,
        "never test hooks in a deployment"
    );

    // BIND: all interfaces, on the port each instance publishes; distinct host ports.
    let bind_port: u16 = settings.bind.rsplit_once(':').unwrap().1.parse().unwrap();
    assert!(settings.bind.starts_with("0.0.0.0:"), "{}", settings.bind);
    let mut host_ports = Vec::new();
    for app in APPS {
        let ports = published(service(&compose, app));
        assert_eq!(ports.len(), 1, "{app} publishes one port");
        assert_eq!(ports[0].1, bind_port, "{app} publishes the port it binds");
        host_ports.push(ports[0].0);
        // The instances start after every server they use (MariaDB healthy).
        let depends = &service(&compose, app)["depends_on"];
        assert_eq!(
            depends["mariadb"]["condition"].as_str(),
            Some("service_healthy")
        );
        for server in REDIS.iter().chain(&ZOOKEEPER).chain(&["etcd"]) {
            assert!(depends[*server].is_mapping(), "{app} depends on {server}");
        }
    }
    host_ports.dedup();
    assert_eq!(host_ports.len(), 2, "distinct host ports");

    // The Dockerfile's image listens where BIND says.
    let dockerfile = std::fs::read_to_string(repo_file("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("EXPOSE {bind_port}")));
    assert!(dockerfile.contains(&format!("ENV BIND={}", settings.bind)));
}

/// The load tester's command is one loadtest accepts, aimed at both instances, with
/// the instances' database and admin token.
#[test]
fn the_load_tester_targets_both_instances() {
    let compose = compose();
    let loadtest = service(&compose, "loadtest");
    assert_eq!(strings(&loadtest["entrypoint"]), ["loadtest"]);
    let command = strings(&loadtest["command"]);
    assert_eq!(command[0], "run");

    // Every argument is one `loadtest run` knows, with a valid value: clap reads them
    // in order and stops at `--help` only if all before it parsed.
    let output = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(&command)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "loadtest {command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let urls = &command[command.iter().position(|a| a == "--url").unwrap() + 1];
    let app_port = published(service(&compose, "app-a"))[0].1;
    let expected: Vec<String> = APPS
        .iter()
        .map(|a| format!("http://{a}:{app_port}"))
        .collect();
    assert_eq!(urls.split(',').collect::<Vec<_>>(), expected);

    // Its environment: variables `loadtest run` reads, equal to the instances' values.
    let env = environment(loadtest);
    let app_env = environment(service(&compose, "app-a"));
    for (name, value) in &env {
        assert!(
            help.contains(&format!("[env: {name}")),
            "loadtest run reads no {name}"
        );
        assert_eq!(
            Some(value),
            app_env.get(name),
            "{name} as the instances have it"
        );
    }
    assert!(env.contains_key("DATABASE_URL") && env.contains_key("ADMIN_TOKEN"));
    // Not started by a plain `docker compose up`.
    assert!(!strings(&loadtest["profiles"]).is_empty());
}
