//! ZooKeeper, standalone or as an ensemble, started with `QuorumPeerMain` directly.

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::process::{
    ServerDir, ServerProcess, find_binary, free_port, retry_on_port_in_use, tcp_exchange,
};
use crate::{Error, READY_TIMEOUT, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The jars of Debian's `zookeeper` package that the server needs.
const CLASSPATH: [&str; 3] = [
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
];

/// `tickTime` in milliseconds. The minimum session timeout is 2 ticks, so sessions can
/// expire in ~1 s: session-expiry tests take 1-2 s instead of 4+ s with the default.
pub const TICK_MS: u32 = 500;

/// How many times an ensemble is restarted on fresh ports after a port collision.
const ENSEMBLE_ATTEMPTS: usize = 5;

/// ZooKeeper as a [`crate::Stack`] starts it: one ensemble of the nodes asked for,
/// `ZK_CONNECT`.
pub static KIND: ServerKind = ServerKind {
    name: "zookeeper",
    variable: "ZK_CONNECT",
    package: "zookeeper",
    default_nodes: 1,
    behind_lab_proxies: true,
    behind_a_distance: true,
    start: |nodes, _| Ok(Box::new(ZooKeeper::start_ensemble(nodes)?)),
};

impl Servers for ZooKeeper {
    fn addresses(&self, _: &StackConfig) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect()
    }

    fn pids(&self) -> Vec<(String, u32)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("zookeeper-{}", i + 1), n.pid()))
            .collect()
    }
}

/// One ZooKeeper server.
pub struct ZkNode {
    process: ServerProcess,
    client_port: u16,
    _dir: ServerDir,
}

impl ZkNode {
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Kills the node (SIGKILL) and starts it again with its data and ports; returns
    /// once it serves requests again (rejoined a quorum).
    pub fn restart(&mut self) -> Result<()> {
        self.process.respawn()?;
        let port = self.client_port;
        self.process
            .wait_ready(port, READY_TIMEOUT, || srvr_mode(port).is_some())
    }

    /// The node's role from the `srvr` command: `standalone`, `leader` or `follower`;
    /// `None` while it serves no requests (no quorum, or down).
    pub fn mode(&self) -> Option<String> {
        srvr_mode(self.client_port)
    }
}

/// A private ZooKeeper: one standalone server or an ensemble of N (3 for a quorum that
/// survives one failure). Not started through `zkServer.sh`, which forces log
/// directories and JMX; the JVM gets a small heap and the serial collector.
pub struct ZooKeeper {
    nodes: Vec<ZkNode>,
}

impl ZooKeeper {
    /// One standalone server.
    pub fn start_standalone() -> Result<ZooKeeper> {
        Self::start_ensemble(1)
    }

    /// `size` servers forming one ensemble (1 = standalone). Returns when every node
    /// serves requests, that is when a leader has been elected.
    pub fn start_ensemble(size: usize) -> Result<ZooKeeper> {
        assert!(size >= 1, "an ensemble needs at least one server");
        let java = find_binary("java", "default-jre-headless")?;
        for jar in CLASSPATH {
            if !Path::new(jar).is_file() {
                return Err(Error::MissingBinary {
                    what: jar.to_string(),
                    package: "zookeeper",
                });
            }
        }
        let nodes = retry_on_port_in_use(ENSEMBLE_ATTEMPTS, || start_once(&java, size))?;
        Ok(ZooKeeper { nodes })
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`, the form ZooKeeper clients take.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn nodes(&self) -> &[ZkNode] {
        &self.nodes
    }

    pub fn nodes_mut(&mut self) -> &mut [ZkNode] {
        &mut self.nodes
    }
}

struct Ports {
    client: u16,
    peer: u16,
    election: u16,
}

fn start_once(java: &Path, size: usize) -> Result<Vec<ZkNode>> {
    let ports = (0..size)
        .map(|_| {
            Ok(Ports {
                client: free_port()?,
                peer: free_port()?,
                election: free_port()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Spawn every node first: an ensemble member only becomes ready once a quorum
    // of its peers is up.
    let mut nodes = Vec::with_capacity(size);
    for (i, p) in ports.iter().enumerate() {
        let id = i + 1;
        let name = if size == 1 {
            "zookeeper".to_string()
        } else {
            format!("zookeeper-{id}")
        };
        let dir = ServerDir::new(&name)?;
        let cfg = write_config(dir.path(), id, p.client, (size > 1).then_some(&ports[..]))?;
        let args = vec![
            "-Xms32m".into(),
            "-Xmx256m".into(),
            "-XX:+UseSerialGC".into(),
            "-cp".into(),
            CLASSPATH.join(":"),
            format!(
                "-Dlog4j.configuration=file:{}",
                dir.path().join("log4j.properties").display()
            ),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain".into(),
            cfg.display().to_string(),
        ];
        let process = ServerProcess::spawn(&name, java, &args, dir.path().join("zookeeper.log"))?;
        nodes.push(ZkNode {
            process,
            client_port: p.client,
            _dir: dir,
        });
    }
    for node in &mut nodes {
        let port = node.client_port;
        node.process
            .wait_ready(port, READY_TIMEOUT, || srvr_mode(port).is_some())?;
    }
    Ok(nodes)
}

fn write_config(
    dir: &Path,
    id: usize,
    client_port: u16,
    ensemble: Option<&[Ports]>,
) -> Result<PathBuf> {
    let data = dir.join("data");
    fs::create_dir_all(&data).map_err(Error::io("zookeeper: creating its data directory"))?;
    let mut cfg = format!(
        "tickTime={TICK_MS}\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n4lw.commands.whitelist=*\nadmin.enableServer=false\n",
        data.display()
    );
    if let Some(ports) = ensemble {
        for (i, p) in ports.iter().enumerate() {
            cfg.push_str(&format!(
                "server.{}=127.0.0.1:{}:{}\n",
                i + 1,
                p.peer,
                p.election
            ));
        }
        fs::write(data.join("myid"), id.to_string())
            .map_err(Error::io("zookeeper: writing myid"))?;
    }
    let log4j = "log4j.rootLogger=INFO, CONSOLE\n\
                 log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
                 log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
                 log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] %-5p [%t] %c{1}: %m%n\n";
    fs::write(dir.join("log4j.properties"), log4j)
        .map_err(Error::io("zookeeper: writing log4j.properties"))?;
    let path = dir.join("zoo.cfg");
    fs::write(&path, cfg).map_err(Error::io("zookeeper: writing zoo.cfg"))?;
    Ok(path)
}

/// Sends the `srvr` four-letter command and returns the `Mode:` it reports.
fn srvr_mode(port: u16) -> Option<String> {
    let answer = tcp_exchange(port, b"srvr", b"Node count")?;
    let text = String::from_utf8_lossy(&answer);
    text.lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_string())
}
