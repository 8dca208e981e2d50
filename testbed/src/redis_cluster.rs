//! A Redis Cluster ([`RedisCluster`]): three masters and three replicas from Debian's
//! `redis-server`, the 16,384 slots spread over the masters by `redis-cli --cluster
//! create`, each master followed by one replica. `testbed up/run --redis-cluster`
//! starts one and exports its nodes as `REDIS_CLUSTER_URLS`.
//!
//! - Each node also listens on a **bus port** (gossip, failover votes), by default its
//!   port + 10,000: a free port above 55,535 would make the node exit at start, so the
//!   bus port is picked free and given (`--cluster-port`).
//! - `--cluster-node-timeout 2000`: a master that stops answering is replaced by its
//!   replica within a few seconds ([`RedisCluster::wait_for_promotion`]).
//! - Clients follow the addresses the nodes announce (`CLUSTER SLOTS`), not the ones
//!   they were given: a proxy in front of a node is bypassed, so the cluster is never
//!   put behind a stack's distance or the chaos lab's proxies.
//! - **Links a test can hold back.** Each node announces itself to its peers at
//!   `127.0.0.2` (same ports), where two [`Proxy`]s forward to it: one for its cluster
//!   bus, one for the replication link a replica opens to it. Clients are given its
//!   hostname, `127.0.0.1` (`cluster-preferred-endpoint-type hostname`), and reach it
//!   directly. Blackhole a master's [`RedisCluster::replication`] proxy and every
//!   write it acknowledges from then on stays on the master only, while the bus keeps
//!   gossiping: kill it then, and its replica is promoted without those writes (as
//!   [`crate::RedisHa`] does for Sentinel).
//! - Ready only when every node sees every slot covered (`cluster_state:ok`) and every
//!   master has a replica whose link is up: a failover test can start at once.
//!
//! Faults: kill or pause a master ([`RedisCluster::node_mut`], then its process) and
//! wait for its replica to take over; move a slot to another master under load
//! ([`RedisCluster::move_slot`], with the `MIGRATING` / `IMPORTING` window that clients
//! meet as `ASK` and `TRYAGAIN`).
//!
//! ```no_run
//! let mut cluster = testbed::RedisCluster::start("example", 6).unwrap();
//! let slot = cluster.slot_of("{stock:42}").unwrap();
//! let master = cluster.master_of(slot).unwrap();
//! cluster.node_mut(master).unwrap().process().kill();
//! let promoted = cluster.wait_for_promotion(master, std::time::Duration::from_secs(15)).unwrap();
//! ```

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::process::{find_binary, free_port, retry_on_port_in_use, run_to_end, wait_until};
use crate::proxy::Proxy;
use crate::redis::{Redis, info};
use crate::{Error, READY_TIMEOUT, Result};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// A Redis Cluster as a [`crate::Stack`] starts it: none by default (`--redis-cluster`
/// asks for one), six nodes when asked, `REDIS_CLUSTER_URLS`.
pub static KIND: ServerKind = ServerKind {
    name: "redis-cluster",
    variable: "REDIS_CLUSTER_URLS",
    package: "redis-server",
    default_nodes: 0,
    behind_lab_proxies: false,
    behind_a_distance: false,
    start: |nodes, _| Ok(Box::new(RedisCluster::start("redis-cluster", nodes)?)),
};

/// How long a node may go unanswered before the others count it failed.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(2000);

/// The address each node announces to its peers (its proxies listen there).
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The cluster's nodes; dropping it stops them all.
pub struct RedisCluster {
    nodes: Vec<Redis>,
    /// Per node (same order): the proxy its replicas reach it through, and its bus's.
    links: Vec<(Proxy, Proxy)>,
}

/// One node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its node id (what `CLUSTER SETSLOT ... NODE` and a replica's master field name).
    pub id: String,
    /// Its client port (on 127.0.0.1).
    pub port: u16,
    /// `None` for a master; the master's id for a replica.
    pub master_id: Option<String>,
    /// Flagged failed (`fail`) or suspected (`fail?`) by the node asked.
    pub failing: bool,
    /// The slot ranges it serves (a master), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Servers for RedisCluster {
    fn addresses(&self, _: &StackConfig) -> Vec<String> {
        self.urls()
    }

    fn pids(&self) -> Vec<(String, u32)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("redis-cluster-{}", i + 1), r.pid()))
            .collect()
    }
}

impl RedisCluster {
    /// Starts `nodes` servers (an even number, at least six: half masters, each with
    /// one replica), creates the cluster and waits until it is ready (see the module).
    pub fn start(name: &str, nodes: usize) -> Result<RedisCluster> {
        if nodes < 6 || !nodes.is_multiple_of(2) {
            return Err(Error::Command {
                what: format!("a Redis Cluster of {nodes} nodes"),
                output: "needs an even number, at least 6 (3 masters, 3 replicas)".into(),
            });
        }
        let (mut started, mut links) = (Vec::new(), Vec::new());
        for i in 1..=nodes {
            let node_name = format!("{name}-{}", i);
            let (node, link) = retry_on_port_in_use(5, || {
                let (port, bus) = (free_port()?, free_port()?);
                let proxy = |port: u16| {
                    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                    Proxy::start_at(SocketAddr::from((PEER_IP, port)), upstream)
                };
                let link = (proxy(port)?, proxy(bus)?);
                let extra = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &NODE_TIMEOUT.as_millis().to_string(),
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-announce-ip",
                    &PEER_IP.to_string(),
                    "--cluster-announce-hostname",
                    "127.0.0.1",
                    "--cluster-preferred-endpoint-type",
                    "hostname",
                ]
                .map(String::from);
                let (node, _) = Redis::start_with(&node_name, Some(port), &extra)?;
                if node.port() != port {
                    // Its proxies listen for another port: start over.
                    return Err(Error::PortInUse {
                        server: node_name.clone(),
                        port,
                    });
                }
                Ok((node, link))
            })?;
            started.push(node);
            links.push(link);
        }
        let cluster = RedisCluster {
            nodes: started,
            links,
        };
        let mut args = vec!["--cluster".to_string(), "create".into()];
        args.extend(
            cluster
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port())),
        );
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        run_to_end(name, &redis_cli()?, &args)?;
        cluster.wait_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Waits until every running node sees all slots covered and agrees on the
    /// nodes, and every master has a replica whose link is up.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        wait_until(timeout, "the Redis Cluster to be ready", || self.is_ready())
    }

    fn is_ready(&self) -> bool {
        let live: Vec<u16> = self
            .nodes
            .iter()
            .map(Redis::port)
            .filter(|p| crate::redis::ping(*p))
            .collect();
        let every_ok = live.iter().all(|p| {
            let state = self.command(*p, &["CLUSTER", "INFO"]).unwrap_or_default();
            state.contains("cluster_state:ok") && state.contains("cluster_slots_ok:16384")
        });
        let Ok(nodes) = self.topology() else {
            return false;
        };
        let masters: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.master_id.is_none() && !n.slots.is_empty())
            .collect();
        let every_master_followed = masters.iter().all(|m| {
            nodes.iter().any(|r| {
                r.master_id.as_deref() == Some(m.id.as_str())
                    && live.contains(&r.port)
                    && info(r.port, "replication").contains("master_link_status:up")
            })
        });
        every_ok && !masters.is_empty() && every_master_followed
    }

    /// `redis://127.0.0.1:PORT/` of every node, as `REDIS_CLUSTER_URLS` lists them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("{}/", n.url())).collect()
    }

    /// Every node, in the order started.
    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// The proxy the replicas of the node on `port` replicate through: blackhole it
    /// ([`crate::proxy::ProxyMode::Blackhole`]) to hold its replication back.
    pub fn replication(&self, port: u16) -> Option<&Proxy> {
        let i = self.nodes.iter().position(|n| n.port() == port)?;
        Some(&self.links[i].0)
    }

    /// Whether the node on `port` has `key` (`EXISTS`; on a replica too, `READONLY`).
    pub fn has_key(&self, port: u16, key: &str) -> Result<bool> {
        let request = format!("READONLY\r\nEXISTS {key}\r\nPING\r\n");
        let answer = crate::process::tcp_exchange(port, request.as_bytes(), b"+PONG\r\n");
        let answer = String::from_utf8_lossy(&answer.unwrap_or_default()).into_owned();
        match answer.lines().find(|l| l.starts_with(':')) {
            Some(count) => Ok(count != ":0"),
            None => Err(Error::Command {
                what: format!("EXISTS {key} on port {port}"),
                output: answer,
            }),
        }
    }

    /// The node on `port`, to make faults on it (kill, pause, restart).
    pub fn node_mut(&mut self, port: u16) -> Option<&mut Redis> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// Runs `redis-cli -p PORT ARGS...` and returns what it printed.
    pub fn command(&self, port: u16, args: &[&str]) -> Result<String> {
        let mut all = vec!["-p".to_string(), port.to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        run_to_end("redis-cli", &redis_cli()?, &all)
    }

    /// The cluster as the first node that answers describes it (`CLUSTER NODES`).
    pub fn topology(&self) -> Result<Vec<Node>> {
        let mut last = None;
        for node in &self.nodes {
            match self.command(node.port(), &["CLUSTER", "NODES"]) {
                Ok(text) if !text.trim().is_empty() => return Ok(parse_nodes(&text)),
                Ok(text) => {
                    last = Some(Error::Command {
                        what: "CLUSTER NODES".into(),
                        output: text,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Command {
            what: "CLUSTER NODES".into(),
            output: "no node".into(),
        }))
    }

    /// The slot `key` hashes to (`CLUSTER KEYSLOT`: its hash tag's, if it has one).
    pub fn slot_of(&self, key: &str) -> Result<u16> {
        let port = self.nodes[0].port();
        let answer = self.command(port, &["CLUSTER", "KEYSLOT", key])?;
        answer.trim().parse().map_err(|_| Error::Command {
            what: format!("CLUSTER KEYSLOT {key}"),
            output: answer,
        })
    }

    /// The port of the master serving `slot` now.
    pub fn master_of(&self, slot: u16) -> Result<u16> {
        let nodes = self.topology()?;
        nodes
            .iter()
            .find(|n| !n.failing && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|n| n.port)
            .ok_or_else(|| Error::Command {
                what: format!("the master of slot {slot}"),
                output: format!("{nodes:?}"),
            })
    }

    /// The port of a replica of the master on `master` (the first listed).
    pub fn replica_of(&self, master: u16) -> Result<u16> {
        let nodes = self.topology()?;
        let id = nodes
            .iter()
            .find(|n| n.port == master)
            .map(|n| n.id.clone());
        nodes
            .iter()
            .find(|n| id.is_some() && n.master_id == id)
            .map(|n| n.port)
            .ok_or_else(|| Error::Command {
                what: format!("a replica of the master on port {master}"),
                output: format!("{nodes:?}"),
            })
    }

    /// After the master on `old` failed: waits until one of its replicas is a master
    /// serving slots, and every other running node sees the cluster whole again;
    /// returns the new master's port.
    pub fn wait_for_promotion(&self, old: u16, timeout: Duration) -> Result<u16> {
        let replica = self.replica_of(old)?;
        wait_until(timeout, "a replica to take over the failed master", || {
            let others: Vec<u16> = self
                .nodes
                .iter()
                .map(Redis::port)
                .filter(|p| *p != old && crate::redis::ping(*p))
                .collect();
            info(replica, "replication").contains("role:master")
                && others.iter().all(|p| {
                    self.command(*p, &["CLUSTER", "INFO"])
                        .unwrap_or_default()
                        .contains("cluster_state:ok")
                })
        })?;
        Ok(replica)
    }

    /// Moves `slot` to the master on `to`, as `redis-cli --cluster reshard` does, one
    /// step at a time: `IMPORTING` on the target, `MIGRATING` on the source, its keys
    /// `MIGRATE`d in batches of `batch` (clients asking for a key already moved are
    /// sent on with `ASK`; a multi-key script over keys on both sides gets
    /// `TRYAGAIN`), `pause` between batches, then the slot given to the target on
    /// every master. Returns the number of keys moved.
    pub fn move_slot(&self, slot: u16, to: u16, batch: usize, pause: Duration) -> Result<usize> {
        let from = self.master_of(slot)?;
        if from == to {
            return Ok(0);
        }
        let nodes = self.topology()?;
        let id = |port: u16| -> Result<String> {
            (nodes.iter().find(|n| n.port == port).map(|n| n.id.clone())).ok_or_else(|| {
                Error::Command {
                    what: format!("the node on port {port}"),
                    output: format!("{nodes:?}"),
                }
            })
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let slot_text = slot.to_string();
        self.command(
            to,
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from_id],
        )?;
        self.command(
            from,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to_id],
        )?;
        let mut moved = 0;
        loop {
            let count = batch.max(1).to_string();
            let keys = self.command(from, &["CLUSTER", "GETKEYSINSLOT", &slot_text, &count])?;
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let answer = self.command(from, &args)?;
            if !answer.contains("OK") && !answer.contains("NOKEY") {
                return Err(Error::Command {
                    what: format!("MIGRATE slot {slot} to port {to}"),
                    output: answer,
                });
            }
            moved += keys.len();
            std::thread::sleep(pause);
        }
        // The target first, then the source, then every other master (as redis-cli).
        let masters: Vec<u16> = nodes
            .iter()
            .filter(|n| n.master_id.is_none() && !n.failing && n.port != to && n.port != from)
            .map(|n| n.port)
            .collect();
        for port in [to, from].into_iter().chain(masters) {
            self.command(port, &["CLUSTER", "SETSLOT", &slot_text, "NODE", &to_id])?;
        }
        Ok(moved)
    }
}

fn redis_cli() -> Result<std::path::PathBuf> {
    find_binary("redis-cli", "redis-tools")
}

/// `CLUSTER NODES` lines: `id host:port@bus flags master_id ping pong epoch link slots...`
/// (a slot being moved is listed as `[slot->-id]`, which is not a range and is skipped).
fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split('@').next()?;
            let port = address.rsplit(':').next()?.parse().ok()?;
            let flags = fields[2];
            let slots = (fields[8..].iter())
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(Node {
                id: fields[0].to_string(),
                port,
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                failing: flags.split(',').any(|f| f == "fail" || f == "fail?"),
                slots,
            })
        })
        .collect()
}
