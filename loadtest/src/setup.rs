//! The setup a comparison ran on, as one line: the cores everything shares and what
//! each server keeps of a write it acknowledged.
//!
//! Figures side by side are only fair when the servers behind them keep their
//! promises alike: a database that confirms a COMMIT before its redo log is on disk
//! beats a lock service that fsyncs every write for a reason that has nothing to do
//! with locking. So every report states how each server was set when the run ended
//! (the testbed says it: `Stack::durability`), and every comparison page of the book
//! opens with it ([`line`]).

use crate::report::Machine;

/// The setup as one line of a page: the cores and each server's durability, or
/// `None` when the report did not record them (a report older than this line).
pub fn line(machine: &Machine) -> Option<String> {
    if machine.durability.is_empty() {
        return None;
    }
    fn name(server: &str) -> &str {
        match server {
            "mariadb" => "MariaDB",
            "redis" => "Redis",
            "zookeeper" => "ZooKeeper",
            other => other,
        }
    }
    // The database first, then the lock services as the book meets them.
    let order = ["mariadb", "redis", "zookeeper", "etcd"];
    let rank = |server: &str| {
        order
            .iter()
            .position(|o| *o == server)
            .unwrap_or(order.len())
    };
    let mut kept: Vec<(&String, &String)> = machine.durability.iter().collect();
    kept.sort_by_key(|(server, _)| rank(server));
    let servers: Vec<String> = kept
        .into_iter()
        // The words only: the setting's name in brackets is the report's to keep.
        .map(|(server, text)| {
            let words = text.split(" (").next().unwrap_or(text);
            format!("{} {words}", name(server))
        })
        .collect();
    Some(format!(
        "*Setup: {} cores shared by the servers, the instances and the load generator; {}.*",
        machine.cores,
        servers.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line names the cores and every server's durability; a report without
    /// them has no line.
    #[test]
    fn the_line_names_cores_and_every_server() {
        let mut machine = Machine {
            cores: 2,
            ..Machine::default()
        };
        assert_eq!(line(&machine), None);
        machine
            .durability
            .insert("mariadb".into(), testbed::durability::mariadb(1));
        machine
            .durability
            .insert("redis".into(), "keeps nothing on disk".into());
        let text = line(&machine).unwrap();
        assert!(text.starts_with("*Setup: 2 cores"), "{text}");
        assert!(
            text.contains("MariaDB fsyncs its redo log at every COMMIT"),
            "{text}"
        );
        assert!(text.contains("Redis keeps nothing on disk"), "{text}");
    }
}
