//! The set of servers one test run, benchmark or demo shares, optionally at a
//! distance: every server behind a [`Proxy`] with a latency (a production network
//! instead of loopback), and its round trips counted per kind of server.

use crate::kind::{ServerKind, Servers, StackConfig};
use crate::proxy::{Latency, Proxy, ProxyMode};
use crate::{Error, Result};
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

/// Every kind of server the stack starts, one entry each. A kind is declared once, in
/// its own file (`redis::KIND`: its package, its variable, how many nodes, how to start
/// them); the stack's start, environment and pids, `testbed run`'s "already given"
/// check, the proxies of a [`Distance`] and of the chaos lab, and
/// [`SERVER_VARIABLES`] all iterate this list.
pub const KINDS: [&ServerKind; 5] = [
    &crate::mariadb::KIND,
    &crate::redis::KIND,
    &crate::redis_cluster::KIND,
    &crate::zookeeper::KIND,
    &crate::etcd::KIND,
];

impl ServerKind {
    /// The kind whose variable is `variable`.
    pub fn of_variable(variable: &str) -> Option<&'static ServerKind> {
        KINDS.into_iter().find(|kind| kind.variable == variable)
    }
}

/// Every variable [`Stack::env`] may export (one per kind of [`KINDS`]): the servers'
/// addresses, read by the service's flags of the same names.
pub static SERVER_VARIABLES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| KINDS.iter().map(|kind| kind.variable).collect());

impl StackConfig {
    /// A stack of nothing: add kinds with [`StackConfig::with_nodes`].
    pub fn none() -> Self {
        let nodes = KINDS.iter().map(|kind| (kind.name, 0)).collect();
        StackConfig {
            nodes,
            ..StackConfig::default()
        }
    }
}

/// Reads the stack's round-trip counters without holding the stack (cheap to clone).
#[derive(Clone, Default)]
pub struct RoundTrips {
    counters: Vec<(&'static ServerKind, Arc<AtomicU64>)>,
}

impl RoundTrips {
    /// Round trips so far by kind of server (only the kinds behind a proxy).
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let mut totals = BTreeMap::new();
        for (kind, counter) in &self.counters {
            *totals.entry(kind.name).or_insert(0) += counter.load(Ordering::Relaxed);
        }
        totals
    }

    /// Whether anything is counted (the stack runs behind proxies).
    pub fn is_counting(&self) -> bool {
        !self.counters.is_empty()
    }
}

/// Running servers; dropping the stack stops them all.
pub struct Stack {
    /// Each kind that runs, in the order of [`KINDS`].
    servers: Vec<(&'static ServerKind, Box<dyn Servers>)>,
    config: StackConfig,
    /// The proxies clients go through when the stack runs at a distance.
    network: Option<Distance>,
}

/// A proxy in front of every server of a stack, with one latency (changeable), and the
/// environment that names the proxies: clients started with [`Distance::env`] see the
/// stack at that distance. A stack can have several (e.g. loopback and 2 ms side by
/// side, for two sets of instances); each counts its own round trips.
pub struct Distance {
    links: Vec<(&'static ServerKind, Proxy)>,
    env: Vec<(&'static str, String)>,
}

impl Stack {
    /// Starts what `config` asks for. On any failure the servers already started are
    /// stopped (dropped) before the error is returned.
    pub fn start(config: &StackConfig) -> Result<Stack> {
        let mut servers = Vec::new();
        for kind in KINDS {
            let nodes = config.nodes(kind);
            if nodes > 0 {
                servers.push((kind, (kind.start)(nodes, config)?));
            }
        }
        let mut stack = Stack {
            servers,
            config: config.clone(),
            network: None,
        };
        if let Some(latency) = config.network {
            stack.network = Some(stack.distance(latency)?);
        }
        Ok(stack)
    }

    /// The running servers of type `T` (`Stack::get::<testbed::MariaDb>()`), if their
    /// kind runs.
    pub fn get<T: Servers>(&self) -> Option<&T> {
        self.servers
            .iter()
            .find_map(|(_, s)| (&**s as &dyn Any).downcast_ref())
    }

    /// [`Stack::get`], to make faults on them (restart, pause).
    pub fn get_mut<T: Servers>(&mut self) -> Option<&mut T> {
        self.servers
            .iter_mut()
            .find_map(|(_, s)| (&mut **s as &mut dyn Any).downcast_mut())
    }

    /// The independent Redis servers (none if Redis does not run).
    pub fn redis(&self) -> &[crate::Redis] {
        self.get::<Vec<crate::Redis>>().map_or(&[], Vec::as_slice)
    }

    /// [`Stack::redis`], to make faults on them.
    pub fn redis_mut(&mut self) -> &mut [crate::Redis] {
        self.get_mut::<Vec<crate::Redis>>()
            .map_or(&mut [], Vec::as_mut_slice)
    }

    /// A new set of proxies in front of every server, at `latency`.
    pub fn distance(&self, latency: Latency) -> Result<Distance> {
        Distance::in_front_of(&self.direct_env(), latency)
    }

    /// Whether the servers are behind proxies ([`StackConfig::network`]).
    pub fn at_a_distance(&self) -> bool {
        self.network.is_some()
    }

    /// The proxies of [`StackConfig::network`], if the stack runs at a distance.
    pub fn network(&self) -> Option<&Distance> {
        self.network.as_ref()
    }

    /// The environment variables every stock-locks program reads (one of
    /// [`SERVER_VARIABLES`] each, e.g. `DATABASE_URL`, `REDIS_URLS` (comma-separated),
    /// `ZK_CONNECT` and `ETCD_ENDPOINTS`), for the servers that run; through the
    /// proxies when the stack runs at a distance.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match &self.network {
            Some(distance) => distance.env(),
            None => self.direct_env(),
        }
    }

    /// [`Stack::env`] with the servers' own addresses, whatever the network.
    pub fn direct_env(&self) -> Vec<(&'static str, String)> {
        self.servers
            .iter()
            .map(|(kind, s)| (kind.variable, s.addresses(&self.config).join(",")))
            .collect()
    }

    /// Every server's name and process id.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.servers.iter().flat_map(|(_, s)| s.pids()).collect()
    }
}

impl Distance {
    /// Proxies in front of every server the variables name (any of
    /// [`SERVER_VARIABLES`]: comma-separated addresses whose port follows the last
    /// `:` of the host part), at `latency`; [`Distance::env`] names the proxies
    /// instead. Servers of a stack, or servers given to `testbed run`.
    pub fn in_front_of(vars: &[(&'static str, String)], latency: Latency) -> Result<Distance> {
        let mut links = Vec::new();
        let mut env = Vec::new();
        for (name, value) in vars {
            let Some(kind) = ServerKind::of_variable(name) else {
                continue;
            };
            if !kind.behind_a_distance {
                env.push((*name, value.clone()));
                continue;
            }
            let mut proxied = Vec::new();
            for address in value.split(',') {
                let (before, port, after) = split_port(address).ok_or_else(|| Error::Io {
                    context: format!("{name}: no port in {address:?}"),
                    source: std::io::ErrorKind::InvalidInput.into(),
                })?;
                let proxy = Proxy::start(port)?;
                proxy.set_latency(latency);
                proxied.push(format!("{before}{}{after}", proxy.port()));
                links.push((kind, proxy));
            }
            env.push((*name, proxied.join(",")));
        }
        Ok(Distance { links, env })
    }

    /// [`Stack::env`] naming this set's proxies.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.env.clone()
    }

    /// Sets the latency to every server of `kind` (`None`: every kind).
    pub fn set_latency(&self, kind: Option<&ServerKind>, latency: Latency) {
        for (k, proxy) in &self.links {
            if kind.is_none_or(|kind| kind == *k) {
                proxy.set_latency(latency);
            }
        }
    }

    /// The proxies in front of the servers of `kind`, in the order of its addresses.
    pub fn proxies(&self, kind: &ServerKind) -> Vec<&Proxy> {
        self.links
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, proxy)| proxy)
            .collect()
    }

    /// Sets every proxy of this set to `mode` (a partition: [`ProxyMode::Blackhole`]).
    pub fn set_mode(&self, mode: ProxyMode) {
        for (_, proxy) in &self.links {
            proxy.set(mode);
        }
    }

    /// The latency to the first server (they all have the same unless
    /// [`Distance::set_latency`] was given a kind).
    pub fn latency(&self) -> Latency {
        self.links
            .first()
            .map(|(_, p)| p.latency())
            .unwrap_or_default()
    }

    /// This set's round-trip counters.
    pub fn round_trips(&self) -> RoundTrips {
        RoundTrips {
            counters: self
                .links
                .iter()
                .map(|(kind, proxy)| (*kind, proxy.round_trip_counter()))
                .collect(),
        }
    }
}

/// `mysql://root@127.0.0.1:3306/db` → (`mysql://root@127.0.0.1:`, 3306, `/db`): the
/// port is the digits after the last `:` before the path.
fn split_port(address: &str) -> Option<(&str, u16, &str)> {
    let rest_at = address.find("://").map_or(0, |i| i + 3);
    let path_at = address[rest_at..]
        .find('/')
        .map_or(address.len(), |i| rest_at + i);
    let colon = address[..path_at].rfind(':')?;
    let port = address[colon + 1..path_at].parse().ok()?;
    Some((&address[..=colon], port, &address[path_at..]))
}

#[cfg(test)]
mod tests {
    use super::split_port;

    #[test]
    fn ports_are_found_in_every_variable_s_form() {
        assert_eq!(
            split_port("mysql://root@127.0.0.1:3306/stocklocks"),
            Some(("mysql://root@127.0.0.1:", 3306, "/stocklocks"))
        );
        assert_eq!(
            split_port("redis://127.0.0.1:6379"),
            Some(("redis://127.0.0.1:", 6379, ""))
        );
        assert_eq!(split_port("127.0.0.1:2181"), Some(("127.0.0.1:", 2181, "")));
        assert_eq!(
            split_port("http://127.0.0.1:2379"),
            Some(("http://127.0.0.1:", 2379, ""))
        );
        assert_eq!(split_port("redis://127.0.0.1"), None);
    }

    #[test]
    fn round_trip_times_are_read_as_the_command_lines_give_them() {
        use crate::Latency;
        assert_eq!(Latency::parse_ms("0.5"), Ok(0.5));
        assert_eq!(Latency::parse_ms("2"), Ok(2.0));
        for bad in ["-1", "NaN", "inf", "two", "10001"] {
            assert!(Latency::parse_ms(bad).is_err(), "{bad}");
        }
        let latency = Latency::round_trip(std::time::Duration::from_millis(2));
        assert_eq!(latency.one_way, std::time::Duration::from_millis(1));
    }
}
