//! What a sale costs the machine: CPU time of every process involved (the service's
//! instances, MariaDB, Redis, ZooKeeper, etcd, this load generator), read from
//! `/proc/<pid>/stat` around a run, and Redis's own time (`INFO cpu`: its main
//! thread; `INFO commandstats`: the microseconds spent in each command).

use std::collections::BTreeMap;

/// CPU seconds a process has used so far (user + system, from /proc).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime
    // and stime fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// A process's group name: `redis-3` → `redis`, `stock-app-held-1` → `stock-app-held`
/// (numbered processes of one kind are added up).
pub fn group(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => name,
    }
}

/// CPU seconds so far by group, for `processes` and this process (`loadtest`).
pub fn cpu_by_group(processes: &[(String, u32)]) -> BTreeMap<String, f64> {
    let mut totals = BTreeMap::new();
    let me = ("loadtest".to_string(), std::process::id());
    for (name, pid) in processes.iter().chain(std::iter::once(&me)) {
        if let Some(seconds) = cpu_seconds(*pid) {
            *totals.entry(group(name).to_string()).or_insert(0.0) += seconds;
        }
    }
    totals
}

/// What Redis has spent so far: its main thread's CPU (the one thread every command
/// runs on, so what caps it), and the microseconds per command (`INFO commandstats`;
/// a script's commands are counted under their own names **and** inside the script's
/// `evalsha`).
#[derive(Debug, Clone, Default)]
pub struct RedisTime {
    pub main_thread_us: f64,
    pub commands_us: BTreeMap<String, u64>,
}

pub async fn redis_time(url: &str) -> Option<RedisTime> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    Some(RedisTime {
        main_thread_us: (field("used_cpu_user_main_thread")? + field("used_cpu_sys_main_thread")?)
            * 1e6,
        commands_us: parse_commandstats(&info),
    })
}

/// `cmdstat_evalsha:calls=10,usec=360,usec_per_call=36.00,...` → {"evalsha": 360}.
pub fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let usec = fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec="))?
                .parse()
                .ok()?;
            Some((name.to_string(), usec))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_commandstats() {
        assert_eq!(group("redis-3"), "redis");
        assert_eq!(group("stock-app-held-1"), "stock-app-held");
        assert_eq!(group("mariadb"), "mariadb");
        let stats = parse_commandstats(
            "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=360,usec_per_call=36.00,rejected_calls=0,failed_calls=0\r\ncmdstat_get:calls=2,usec=3,usec_per_call=1.50\r\n",
        );
        assert_eq!(stats["evalsha"], 360);
        assert_eq!(stats["get"], 3);
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
