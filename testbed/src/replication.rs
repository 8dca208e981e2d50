//! MariaDB read replicas, and replication lag on demand.
//!
//! A primary ([`Role::Primary`]) writes a binary log; a [`Replica`] follows it by GTID
//! from the first event, so everything created on the primary (databases, migrations,
//! rows) appears on the replica. Lag is made deterministically: [`Replica::pause`]
//! stops the replica's SQL thread (it keeps fetching the log, applies nothing), so its
//! reads show the primary as it was; [`Replica::resume`] applies the backlog.
//! [`MariaDbReplicas`] is a primary and a replica together.
//!
//! ```no_run
//! let pair = testbed::replication::MariaDbReplicas::start().unwrap();
//! pair.primary.create_database("shop").unwrap();
//! pair.replica.wait_caught_up(&pair.primary, std::time::Duration::from_secs(10)).unwrap();
//! let reads = pair.replica.server.url("shop");
//! pair.replica.pause().unwrap();      // reads on `reads` are stale from here
//! pair.replica.resume().unwrap();
//! ```

use crate::mariadb::Role;
use crate::{Error, MariaDb, Result};
use std::time::Duration;

/// A server replicating from a primary.
pub struct Replica {
    pub server: MariaDb,
}

impl Replica {
    /// Starts a replica of `primary` (which must run as [`Role::Primary`]), connected
    /// as root over loopback TCP, and waits until it has applied what the primary has
    /// logged so far.
    pub fn follow(primary: &MariaDb) -> Result<Replica> {
        let (server, _) = MariaDb::start_as(None, Role::Replica)?;
        server.execute(&format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
             MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE",
            primary.port()
        ))?;
        let replica = Replica { server };
        replica.wait_caught_up(primary, crate::READY_TIMEOUT)?;
        Ok(replica)
    }

    /// Waits until the replica has applied everything `primary` has logged so far.
    pub fn wait_caught_up(&self, primary: &MariaDb, timeout: Duration) -> Result<()> {
        let position = primary.execute("SELECT @@gtid_binlog_pos")?;
        let position = position.lines().nth(1).unwrap_or("").trim().to_string();
        let answer = self.server.execute(&format!(
            "SELECT MASTER_GTID_WAIT('{position}', {})",
            timeout.as_secs_f64()
        ))?;
        if answer.lines().nth(1).map(str::trim) == Some("0") {
            Ok(())
        } else {
            Err(Error::Command {
                what: format!("the replica catching up to {position}"),
                output: format!(
                    "{answer}\n{}",
                    self.server
                        .execute("SHOW SLAVE STATUS\\G")
                        .unwrap_or_default()
                ),
            })
        }
    }

    /// Stops applying: the replica keeps receiving the primary's log but its data
    /// stays as it is now (replication lag that grows until [`Replica::resume`]).
    pub fn pause(&self) -> Result<()> {
        self.server.execute("STOP SLAVE SQL_THREAD").map(|_| ())
    }

    /// Applies the backlog and follows the primary again.
    pub fn resume(&self) -> Result<()> {
        self.server.execute("START SLAVE SQL_THREAD").map(|_| ())
    }
}

/// A primary and one replica; dropping it stops both.
pub struct MariaDbReplicas {
    pub primary: MariaDb,
    pub replica: Replica,
}

impl MariaDbReplicas {
    pub fn start() -> Result<MariaDbReplicas> {
        let (primary, _) = MariaDb::start_as(None, Role::Primary)?;
        let replica = Replica::follow(&primary)?;
        Ok(MariaDbReplicas { primary, replica })
    }
}
