//! What the lab sets up for each fault scenario, what a cell's verdict says of its
//! history, and the matrix of cells. The scenarios and the verdicts themselves are
//! the wire's (`stock_wire::chaos`): the strategies declare their cells in them.

use crate::catalogue::Catalogue;
use crate::history::Said;

use stock_wire::Trait;
pub use stock_wire::{CellVerdict, Scenario};

/// What the lab must set up for a scenario besides the two instances.
pub trait Setup {
    /// A three-node ZooKeeper ensemble or etcd cluster of its own.
    fn needs_ensemble(self) -> bool;
    /// The instances read from a MariaDB replica.
    fn reads_from_replica(self) -> bool;
    /// A read replica of the lab's MariaDB, lagged.
    fn lags_replica(self) -> bool;
    /// The instances run with Chubby's lock-delay.
    fn lock_delay(self) -> bool;
    /// A Redis primary, replica and Sentinels of their own.
    fn needs_sentinel(self) -> bool;
    /// A Redis Cluster of their own, both instances on it.
    fn needs_cluster(self) -> bool;
}

impl Setup for Scenario {
    fn needs_ensemble(self) -> bool {
        matches!(self, Scenario::ZkLeaderKilled | Scenario::EtcdLeaderKilled)
    }

    /// The scenarios whose instances read from the replica.
    fn reads_from_replica(self) -> bool {
        self == Scenario::ReplicaLag
    }

    /// The scenarios that lag a read replica of the lab's MariaDB.
    fn lags_replica(self) -> bool {
        matches!(
            self,
            Scenario::ReplicaLag | Scenario::ReplicaLagPrimaryReads
        )
    }

    /// The scenarios whose instances run with Chubby's lock-delay.
    fn lock_delay(self) -> bool {
        matches!(
            self,
            Scenario::LockDelayShortPause | Scenario::LockDelayLongPause
        )
    }

    /// The scenarios run on a Redis primary, replica and Sentinels of their own, with
    /// both instances reaching their Redis lock through the Sentinels.
    fn needs_sentinel(self) -> bool {
        matches!(self, Scenario::RedisFailover | Scenario::RedisFailoverWait)
    }

    /// The scenarios run on a Redis Cluster of their own, both instances on it.
    fn needs_cluster(self) -> bool {
        self.number() == 15
    }
}

/// What a cell's ledger verdict says of its history.
pub trait History {
    /// The checker's verdict a history gets along with this ledger verdict.
    fn history(self) -> Said;
    /// The history verdict a cell expecting `expected` expects, `observed` seen.
    fn expected_history(expected: &[CellVerdict], observed: CellVerdict) -> Said;
}

impl History for CellVerdict {
    /// The checker's verdict a history gets along with this ledger verdict: a cell
    /// that lost nothing answered as a single correct stock counter would, and one
    /// that erased or missed sales did not (its reads of the stock, or the ledger's
    /// record of its answers, show them).
    fn history(self) -> Said {
        if self.is_loss() {
            Said::NotLinearizable
        } else {
            Said::Linearizable
        }
    }

    /// The history verdict a cell expects: that of its expected ledger verdicts, when
    /// they agree; where they do not (a cell that may or may not lose), that of the
    /// ledger verdict `observed`, for the history must agree with the ledger.
    fn expected_history(expected: &[CellVerdict], observed: CellVerdict) -> Said {
        let mut said = expected.iter().map(|v| v.history());
        match said.next() {
            Some(first) if said.all(|s| s == first) => first,
            _ => observed.history(),
        }
    }
}

/// Whether the checker said of a history what the cell expects of it. Undecided (out
/// of budget) confirms nothing, so it is not as expected.
pub fn history_as_expected(expected: Said, seen: Said) -> bool {
    match seen {
        Said::Linearizable | Said::NotLinearizable => seen == expected,
        // Every cell's history ends with a read of the stock: one that observed
        // nothing lost its final read, and proves nothing either way.
        Said::Undecided | Said::Unobserved => false,
    }
}

/// One cell of the matrix: a scenario, a strategy, fencing on or off (`None`: the
/// strategy has no fencing switch), as the strategy declares it (`GET /strategies`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSpec {
    pub scenario: Scenario,
    pub strategy: String,
    pub fencing: Option<bool>,
    pub expect: Vec<CellVerdict>,
    /// Only with `--all`.
    pub extra: bool,
    /// The strategy's traits.
    pub traits: Vec<Trait>,
}

impl CellSpec {
    /// Whether the strategy declares `t`.
    pub fn has(&self, t: Trait) -> bool {
        self.traits.contains(&t)
    }
}

/// The whole matrix: every cell every strategy of `catalogue` declares, by scenario
/// (in [`Scenario::ALL`]'s order), then strategy (the catalogue's), unfenced first.
/// `extra` cells run only with `--all`.
pub fn matrix(catalogue: &Catalogue) -> Vec<CellSpec> {
    let mut cells = Vec::new();
    for card in &catalogue.0 {
        for cell in &card.chaos {
            cells.push(CellSpec {
                scenario: cell.scenario,
                strategy: card.name.clone(),
                fencing: cell.fencing,
                expect: cell.expect.to_vec(),
                extra: cell.extra,
                traits: card.traits.clone(),
            });
        }
    }
    let place = |s: Scenario| Scenario::ALL.iter().position(|x| *x == s);
    cells.sort_by_key(|c| (place(c.scenario), catalogue.rank(&c.strategy), c.fencing));
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario is one the report's JSON schema allows.
    #[test]
    fn the_schema_lists_every_scenario() {
        let schema = include_str!("../../report.schema.json");
        for scenario in Scenario::ALL {
            assert!(
                schema.contains(&format!("\"{}\"", scenario.id())),
                "report.schema.json does not list {}",
                scenario.id()
            );
        }
    }

    /// A cell that loses nothing expects a linearizable history, one that erases or
    /// misses sales a history that is not; a cell that may do either expects what
    /// its ledger showed.
    #[test]
    fn the_expected_history_follows_the_ledger_verdicts() {
        use CellVerdict::*;
        let expect = CellVerdict::expected_history;
        assert_eq!(
            expect(&[Safe, Refused, Unavailable], Safe),
            Said::Linearizable
        );
        assert_eq!(expect(&[Safe], Erased), Said::Linearizable);
        assert_eq!(expect(&[Erased], Erased), Said::NotLinearizable);
        assert_eq!(expect(&[Erased], Safe), Said::NotLinearizable);
        let may_lose = [Safe, Refused, Unavailable, Missing];
        assert_eq!(expect(&may_lose, Missing), Said::NotLinearizable);
        assert_eq!(expect(&may_lose, Unavailable), Said::Linearizable);
        assert!(!history_as_expected(Said::Linearizable, Said::Undecided));
        assert!(history_as_expected(
            Said::NotLinearizable,
            Said::NotLinearizable
        ));
    }
}
