//! etcd, one node or a cluster of three, from Debian's `etcd-server` (3.4).
//!
//! Each node is an `etcd` child process with its data in its own temporary directory,
//! client and peer ports on loopback. Ready once `/health` says `true`: the node is in
//! a cluster that has a leader. A cluster is started whole (every member spawned
//! before any is waited on: a member is only healthy once a quorum is up), and again
//! on fresh ports after a port collision.

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::process::{
    ServerDir, ServerProcess, find_binary, free_port, retry_on_port_in_use, tcp_exchange,
};
use crate::{READY_TIMEOUT, Result};
use std::path::Path;

/// How many times a cluster is restarted on fresh ports after a port collision.
const CLUSTER_ATTEMPTS: usize = 5;

/// etcd as a [`crate::Stack`] starts it: one cluster of the members asked for,
/// `ETCD_ENDPOINTS`.
pub static KIND: ServerKind = ServerKind {
    name: "etcd",
    variable: "ETCD_ENDPOINTS",
    package: "etcd-server",
    default_nodes: 1,
    behind_lab_proxies: true,
    behind_a_distance: true,
    start: |nodes, _| Ok(Box::new(Etcd::start_cluster(nodes)?)),
};

impl Servers for Etcd {
    fn addresses(&self, _: &StackConfig) -> Vec<String> {
        self.nodes.iter().map(EtcdNode::endpoint).collect()
    }

    fn pids(&self) -> Vec<(String, u32)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("etcd-{}", i + 1), n.pid()))
            .collect()
    }
}

/// One etcd member.
pub struct EtcdNode {
    process: ServerProcess,
    client_port: u16,
    _dir: ServerDir,
}

impl EtcdNode {
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// `http://127.0.0.1:PORT`, this member's client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Kills the member (SIGKILL) and starts it again with its data and ports; returns
    /// once it is healthy again (back in a cluster with a leader).
    pub fn restart(&mut self) -> Result<()> {
        self.process.respawn()?;
        let port = self.client_port;
        self.process
            .wait_ready(port, READY_TIMEOUT, || healthy(port))
    }

    /// Whether this member is the cluster's leader now (`None`: it does not answer).
    pub fn is_leader(&self) -> Option<bool> {
        let body = "{}";
        let request = format!(
            "POST /v3/maintenance/status HTTP/1.0\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let answer = tcp_exchange(self.client_port, request.as_bytes(), b"")?;
        let text = String::from_utf8_lossy(&answer);
        // The gateway writes uint64s as strings: `"member_id":"123"`, `"leader":"123"`.
        let field = |name: &str| {
            let start = text.find(&format!("\"{name}\":\""))? + name.len() + 4;
            let end = start + text[start..].find('"')?;
            Some(text[start..end].to_string())
        };
        Some(field("member_id")? == field("leader")?)
    }
}

/// A private etcd: one member, or a cluster of `size` (3 survives one failure).
pub struct Etcd {
    nodes: Vec<EtcdNode>,
}

impl Etcd {
    /// One member.
    pub fn start() -> Result<Etcd> {
        Self::start_cluster(1)
    }

    /// `size` members forming one cluster. Returns when every member is healthy, that
    /// is when a leader has been elected.
    pub fn start_cluster(size: usize) -> Result<Etcd> {
        assert!(size >= 1, "a cluster needs at least one member");
        let etcd = find_binary("etcd", "etcd-server")?;
        let nodes = retry_on_port_in_use(CLUSTER_ATTEMPTS, || start_once(&etcd, size))?;
        Ok(Etcd { nodes })
    }

    /// `http://127.0.0.1:P1,http://127.0.0.1:P2,...`, what `ETCD_ENDPOINTS` holds.
    pub fn endpoints(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(EtcdNode::endpoint).collect();
        urls.join(",")
    }

    pub fn nodes(&self) -> &[EtcdNode] {
        &self.nodes
    }

    pub fn nodes_mut(&mut self) -> &mut [EtcdNode] {
        &mut self.nodes
    }
}

fn start_once(etcd: &Path, size: usize) -> Result<Vec<EtcdNode>> {
    let ports = (0..size)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<Result<Vec<(u16, u16)>>>()?;
    let name = |i: usize| {
        if size == 1 {
            "etcd".to_string()
        } else {
            format!("etcd-{}", i + 1)
        }
    };
    let cluster: Vec<String> = (0..size)
        .map(|i| format!("{}=http://127.0.0.1:{}", name(i), ports[i].1))
        .collect();
    let token = format!("testbed-{}-{}", std::process::id(), ports[0].0);
    let mut nodes = Vec::with_capacity(size);
    for (i, &(client, peer)) in ports.iter().enumerate() {
        let dir = ServerDir::new(&name(i))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args: Vec<String> = vec![
            format!("--name={}", name(i)),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={}", cluster.join(",")),
            "--initial-cluster-state=new".into(),
            format!("--initial-cluster-token={token}"),
            "--logger=zap".into(),
            "--log-outputs=stderr".into(),
        ];
        let log = dir.path().join("etcd.log");
        let process = ServerProcess::spawn(&name(i), etcd, &args, log)?;
        nodes.push(EtcdNode {
            process,
            client_port: client,
            _dir: dir,
        });
    }
    for node in &mut nodes {
        let port = node.client_port;
        node.process
            .wait_ready(port, READY_TIMEOUT, || healthy(port))?;
    }
    Ok(nodes)
}

/// `GET /health` answers `"health":"true"`: the member serves, with a leader.
fn healthy(port: u16) -> bool {
    tcp_exchange(port, b"GET /health HTTP/1.0\r\n\r\n", b"")
        .is_some_and(|answer| String::from_utf8_lossy(&answer).contains("\"health\":\"true\""))
}
