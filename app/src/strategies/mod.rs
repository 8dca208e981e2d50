//! The strategies: one file each, each holding its whole algorithm.
//!
//! A strategy is one [`Strategy::deduct`], written top-down: its lock (if any), its SQL
//! (the statements themselves, in its file), its retry policy, its COMMIT. It calls a
//! few small helpers instead of being called back by a framework:
//! - [`txn`]: [`txn::check_enough`], [`txn::record`] (the `orders` row and the ledger
//!   rows, two statements), [`txn::commit`] (the `before_commit` failpoint, COMMIT,
//!   an ambiguous COMMIT); [`record_many`] for many sales in one transaction;
//! - [`retry`]: [`retry::with_retries`] (the loop with jittered backoff) and
//!   [`retry::transaction`] (ROLLBACK on every failure);
//! - [`plain`]: the plain read-check-write, `unsafe`'s, which the locks run under them;
//! - [`fencing`]: the ticket, the claim and the guarded write, and what each lock
//!   backend's token is;
//! - [`idempotency`]: the one read a refusal makes (a retry of a request that already
//!   succeeded gets its stored answer).
//!
//! The path of a request: `routes::deduct` parses the body into an
//! [`Order`](crate::domain::order::Order) (and the test-hook knobs beside it), then
//! `Service::deduct` passes it down the service's layers (`service/mod.rs` lists
//! them, each in its file: metrics, twins, sold-out marks, admission, idempotency) to
//! the strategy's `deduct`.
//!
//! **No statement the algorithm does not need.** A deduction reads nothing up front
//! for idempotency (the `orders` primary key catches twins inside the transaction),
//! a plain read that can refuse runs before BEGIN (a refusal then opens no
//! transaction), and `app/tests/api/statements.rs` holds each strategy to its count of
//! statements as MariaDB counts them.
//!
//! The lock is always taken before BEGIN and released after COMMIT: under REPEATABLE
//! READ a transaction that reads first and locks second may read a snapshot older
//! than the previous holder's commit, and a lock released before COMMIT lets the next
//! holder read what we are about to change. Both mistakes, and four more of the
//! write-ups' classics, are runnable in [`distributed::mistakes`] (test hooks only).
//!
//! # Layout
//! - [`contract`]: what a strategy is (the trait, a deduction, its answer).
//! - [`card`]: what the service asks of a strategy besides its sales: its card for the
//!   catalogue (`/strategies`) and the hooks of `/stock`, `/metrics` and `/ready`
//!   ([`card::Served`]); [`registered`]: how the registry takes its card, its
//!   command-line flags and the settings they make ([`Registered`]). Each strategy
//!   answers them in a `served.rs` beside it, which a copy leaves out.
//! - [`unsafe_control`]: `unsafe`, plain read, check, write; no lock. Must oversell.
//! - [`local_mutex`]: `local-mutex`, `unsafe`'s read-check-write under a per-product
//!   mutex inside one process.
//! - [`fence_only`]: `fence-only`, a ticket, a claim and a guarded write with no lock:
//!   the fence alone (safe; overtaken requests are refused).
//! - [`atomic_sql`]: `atomic-sql`, `UPDATE ... SET quantity = quantity - ? WHERE ... AND quantity >= ?`.
//! - [`pessimistic`]: `pessimistic`, `SELECT ... FOR UPDATE`, retried on deadlock.
//! - [`optimistic`]: `optimistic`, compare-and-set on a version column, retried.
//! - [`batched`]: `batched`, the buyers of one product queue briefly and share one
//!   transaction (request coalescing).
//! - [`bucketed`]: `bucketed`, the hot row split into K bucket rows at restock.
//! - [`redis_stock`]: `redis-stock`, a Redis counter sells; a persister writes the
//!   sales into the database in batches (a folder).
//! - [`distributed`]: `mysql-lock`, `redis-lock`, `redlock`, `zookeeper`, `etcd-lock`: one lock
//!   algorithm around `unsafe`'s read-check-write, with fenced writes, one file per
//!   lock, and the classic mistakes (a folder).
//! - [`shared`]: the settings several strategies share (Redis, ZooKeeper, the lock
//!   options), and, below the registry, how they answer what each strategy asks of
//!   them.
//! - The helpers above.
//!
pub mod atomic_sql;
pub mod batched;
pub mod bucketed;
pub mod card;
pub mod contract;
pub mod distributed;
pub mod fence_only;
pub mod fencing;
pub mod idempotency;
pub mod local_mutex;
pub mod optimistic;
pub mod pessimistic;
pub mod plain;
pub mod record_many;
pub mod redis_stock;
pub mod registered;
pub mod retry;
pub mod shared;
pub mod txn;
pub mod unsafe_control;

pub use card::{Family, StrategyInfo};
pub use contract::{
    Context, Declare, Deducted, Deduction, ItemResult, NoSettings, Started, Strategy,
};
pub use registered::{NoFlags, Registered};
use serde::Serialize;
use shared::{RedisTarget, Shared};
use std::sync::Arc;
use std::time::Duration;

/// An entry of `GET /strategies`: a strategy's [`StrategyInfo`], and where it stands
/// in the registry: its place in the teaching order and its colour in every chart
/// (from [`PALETTE`] by that place), so clients never list strategies by hand.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct StrategyCard {
    #[serde(flatten)]
    pub info: StrategyInfo,
    /// 0, 1, 2, ...: the registry's order (controls first, distributed locks last).
    pub order: usize,
    /// `#rrggbb`, distinct for every strategy of the registry.
    pub colour: &'static str,
}

/// Chart colours, one per place in the registry (Tableau 20's strong and light
/// shades, the strong ten first): a new strategy takes the next free one, and a
/// test fails when the registry outgrows it.
pub const PALETTE: [&str; 20] = [
    "#7f7f7f", "#bcbd22", "#2ca02c", "#1f77b4", "#ff7f0e", "#17becf", "#8c564b", "#d62728",
    "#9467bd", "#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
    "#e6550d", "#31a354", "#756bb1", "#636363",
];

/// The registry: every strategy this service serves with its card, in the order
/// they were added (the teaching order: the control first, the distributed locks
/// last).
#[derive(Clone)]
pub struct Strategies {
    /// Each strategy with its card.
    list: Vec<(&'static StrategyInfo, Arc<dyn Strategy>)>,
    /// Every strategy's [`Strategy::mistakes`], in order.
    mistake_names: Vec<&'static str>,
}

impl Strategies {
    /// Adds `strategy`, listed with `card`.
    ///
    /// # Panics
    /// When the card names another strategy: the catalogue would route its name to
    /// the wrong algorithm.
    pub fn add(&mut self, card: &'static StrategyInfo, strategy: Arc<dyn Strategy>) {
        assert_eq!(
            card.name,
            strategy.name(),
            "a strategy listed with another's card"
        );
        self.mistake_names.extend(strategy.mistakes());
        self.list.push((card, strategy));
    }

    /// Every strategy, in the registry's order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Strategy>> {
        self.list.iter().map(|(_, strategy)| strategy)
    }

    /// Every strategy with its card, in the registry's order.
    pub fn with_cards(&self) -> impl Iterator<Item = (&'static StrategyInfo, &Arc<dyn Strategy>)> {
        self.list.iter().map(|(card, strategy)| (*card, strategy))
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Strategy>> {
        self.iter().find(|s| s.name() == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.iter().map(|s| s.name()).collect()
    }

    /// Every classic mistake the strategies can be made to make (gathered as they are
    /// added: a deduction reads it, it is not rebuilt per request).
    pub fn mistake_names(&self) -> &[&'static str] {
        &self.mistake_names
    }

    /// The strategy that makes `mistake`.
    pub fn maker_of(&self, mistake: &str) -> Option<&Arc<dyn Strategy>> {
        self.iter().find(|s| s.mistakes().contains(&mistake))
    }

    /// `GET /strategies`: every strategy in the registry's order, with its colour.
    pub fn cards(&self) -> Vec<StrategyCard> {
        self.list
            .iter()
            .enumerate()
            .map(|(order, (card, _))| StrategyCard {
                info: (*card).clone(),
                order,
                colour: PALETTE[order % PALETTE.len()],
            })
            .collect()
    }
}

/// Declares the registry: one line per strategy, `settings_field: Type`, in the
/// teaching order. From it come the service's strategy settings ([`Settings`], every
/// strategy's own flags) and [`all`], the strategies it serves, in that order.
macro_rules! registry {
    ($($field:ident: $strategy:ty),* $(,)?) => {
        registry!(@with ($) $($field: $strategy),*);
    };
    (@with ($d:tt) $($field:ident: $strategy:ty),*) => {
        /// Every registry line's field, in order (the strategy `unsafe` is the line
        /// `unsafe_control`): what [`name_of`] maps to a served name.
        pub const FIELDS: &[&str] = &[$(stringify!($field)),*];

        /// Calls `callback!` with every registry line's field, in order: how a test
        /// runs once per strategy without listing them
        /// (`stock_app::for_each_strategy!(my_tests)`).
        #[macro_export]
        macro_rules! for_each_strategy {
            ($d callback:ident) => { $d callback! { $($field),* } };
        }

        /// Every strategy's own flags, each declared beside it ([`Registered`]).
        #[derive(clap::Args, Debug, Clone)]
        #[group(skip)]
        pub struct Settings {
            $(
                #[command(flatten)]
                pub $field: <$strategy as Registered>::Flags,
            )*
        }

        /// Every strategy this build serves. Called once, outside the HTTP server's
        /// per-worker factory, so state inside a strategy (the local mutexes) is
        /// shared by every worker.
        pub fn all(settings: &Settings, context: &Context<'_, shared::Shared>) -> Strategies {
            let mut strategies = Strategies {
                list: Vec::new(),
                mistake_names: Vec::new(),
            };
            $(
                let own = <$strategy as Registered>::settings(&settings.$field);
                let strategy = <$strategy as Declare<shared::Shared>>::build(&own, context);
                strategies.add(<$strategy as Registered>::card(), strategy);
            )*
            strategies
        }
    };
}

registry! {
    unsafe_control: unsafe_control::Unsafe,
    local_mutex: local_mutex::LocalMutex,
    fence_only: fence_only::FenceOnly,
    atomic_sql: atomic_sql::AtomicSql,
    pessimistic: pessimistic::Pessimistic,
    optimistic: optimistic::Optimistic,
    batched: batched::Batched,
    bucketed: bucketed::Bucketed,
    redis_stock: redis_stock::RedisStock,
    mysql_lock: distributed::mysql_lock::MysqlLock,
    redis_lock: distributed::mistakes::Mistaken<distributed::redis_lock::RedisLock>,
    redlock: distributed::redlock::RedLock,
    zookeeper: distributed::mistakes::Mistaken<distributed::zookeeper::ZooKeeper>,
    etcd_lock: distributed::etcd_lock::EtcdLock,
}

/// The name `POST /deduct/{name}` serves for the registry line `field` ([`FIELDS`]),
/// with every setting at its default.
pub fn name_of(field: &str) -> Option<&'static str> {
    use clap::{Args, FromArgMatches};
    let command = Shared::augment_args(Settings::augment_args(clap::Command::new("names")));
    let matches = command.get_matches_from(["names"]);
    let settings = Settings::from_arg_matches(&matches).expect("the defaults parse");
    let shared = Shared::from_arg_matches(&matches).expect("the defaults parse");
    let context = Context {
        database_url: "mysql://localhost/unused",
        shared: &shared,
    };
    let index = FIELDS.iter().position(|f| *f == field)?;
    Some(all(&settings, &context).cards()[index].info.name)
}

// What each strategy asks of the settings they share, answered by them (a copy of a
// strategy answers it its own way).

/// `redis-stock`'s Redis is the single Redis the strategies share, or the Redis
/// Cluster when one is configured.
impl redis_stock::RedisEndpoint for Shared {
    fn redis_endpoint(&self) -> Option<redis_stock::connection::Endpoint> {
        Some(match self.redis_target()? {
            RedisTarget::Cluster(nodes) => redis_stock::cluster::endpoint(
                nodes,
                redis_stock::cluster::Layout {
                    partitions: self.redis_stock_partitions,
                    shards: self.redis_stock_shards,
                    min_replicas: self.redis_stock_min_replicas,
                    replica_timeout: Duration::from_millis(self.redis_stock_replica_timeout_ms),
                },
            ),
            RedisTarget::One(endpoint) => redis_stock::sentinel::endpoint(endpoint),
        })
    }
}

impl distributed::algorithm::LockShared for Shared {
    fn lock_options(&self) -> locks::LockOptions {
        Shared::lock_options(self)
    }
    fn lock_wait(&self) -> std::time::Duration {
        Shared::lock_wait(self)
    }
    fn fencing(&self) -> bool {
        self.fencing
    }
}

/// `redis-lock`'s Redis is the single Redis too, followed across failovers, or the
/// Redis Cluster when one is configured; its locks granted once
/// `--redis-lock-min-replicas` replicas have them.
impl distributed::redis_lock::RedisLockShared for Shared {
    fn redis_lock(&self) -> Option<distributed::algorithm::Connect> {
        use distributed::algorithm::{connector, unavailable};
        let replicas = (
            self.redis_lock_min_replicas,
            std::time::Duration::from_millis(self.redis_lock_replica_timeout_ms),
        );
        let config = (self.redis_target()?, replicas);
        Some(connector(config, async |(target, (n, timeout))| {
            let lock = match target {
                RedisTarget::Cluster(nodes) => {
                    locks::redis::RedisLock::connect_cluster(&nodes).await
                }
                RedisTarget::One(endpoint) => locks::redis::RedisLock::connect_to(&endpoint).await,
            };
            let lock = lock
                .map_err(unavailable("redis"))?
                .with_min_replicas(n, timeout);
            Ok(Box::new(lock) as Box<dyn locks::LockBackend>)
        }))
    }
}

/// `redlock`'s nodes are every one of `REDIS_URLS`.
impl distributed::redlock::RedLockShared for Shared {
    fn redis_urls(&self) -> Vec<String> {
        self.redis_urls.clone()
    }
}

impl distributed::zookeeper::ZooKeeperShared for Shared {
    fn zk_connect(&self) -> Option<String> {
        self.zk_connect.clone()
    }
    fn zk_root(&self) -> String {
        self.zk_root.clone()
    }
    fn zk_session(&self) -> std::time::Duration {
        Shared::zk_session(self)
    }
}
