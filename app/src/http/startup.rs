//! Building the service: pool, migrations, listener, routes.

use crate::domain::probe::Probe;
use crate::http::config::Settings;
use crate::http::hooks::Hooks;
use crate::http::openapi;
use crate::http::routes;
use crate::http::state::AppState;
use crate::service::admission::Admission;
use crate::service::sold_out::SoldOut;
use crate::service::{Limits, Pools, Service};
use crate::strategies;
use actix_web::dev::{Server, ServerHandle};
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use std::sync::Arc;
use std::time::Duration;

/// Connections the kernel queues for the service before it accepts them (capped by
/// `net.core.somaxconn`). A flood connects thousands at once: with the standard
/// library's 128, the rest are dropped and their clients, `/health`'s prober among
/// them, retry the connection a second later.
const LISTEN_BACKLOG: u32 = 4096;

/// Applies the migrations under a lock of our own. sqlx takes `GET_LOCK(name, -1)` and
/// ignores the answer; MariaDB answers NULL to a negative timeout (no lock at all), so
/// two instances starting at once on a fresh database both applied the migrations and
/// one died on a duplicate `_sqlx_migrations` row (5 times in 5 tries). A named lock
/// with a real timeout, on the connection the migrator then uses, serializes them.
async fn migrate(pool: &MySqlPool) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await.context("connecting to migrate")?;
    let locked: Option<i64> =
        sqlx::query_scalar("SELECT GET_LOCK(CONCAT('stock-locks:migrate:', DATABASE()), 60)")
            .fetch_one(&mut *conn)
            .await
            .context("taking the migration lock")?;
    if locked != Some(1) {
        anyhow::bail!("another instance held the migration lock for 60 s");
    }
    let applied = sqlx::migrate!("../migrations").run(&mut *conn).await;
    let _ = sqlx::query("SELECT RELEASE_LOCK(CONCAT('stock-locks:migrate:', DATABASE()))")
        .execute(&mut *conn)
        .await;
    applied.context("applying the migrations")
}

/// The deduction service of `settings`: connects to the database (never waiting on
/// Redis or ZooKeeper), applies the migrations, builds the strategies. Its failpoints
/// go to `hooks` (the test hooks, or [`crate::domain::probe::NoProbe`]). What
/// [`Application::build`] serves; a test may call it without HTTP.
pub async fn service(settings: &Settings, hooks: Arc<dyn Probe>) -> anyhow::Result<Service> {
    let lock_wait = format!(
        "SET SESSION innodb_lock_wait_timeout = {}",
        settings.lock_wait_timeout_secs
    );
    let pool = MySqlPoolOptions::new()
        .max_connections(settings.db_pool_size)
        .acquire_timeout(Duration::from_millis(settings.db_acquire_timeout_ms))
        .after_connect(move |conn, _meta| {
            let lock_wait = lock_wait.clone();
            Box::pin(async move {
                sqlx::query(&lock_wait).execute(conn).await?;
                Ok(())
            })
        })
        .connect(&settings.database_url)
        .await
        .context("connecting to DATABASE_URL")?;
    migrate(&pool).await?;
    // Connected on first use: startup never waits on the replica.
    let reads = match &settings.read_replica_url {
        Some(url) => MySqlPoolOptions::new()
            .max_connections(settings.db_pool_size)
            .acquire_timeout(Duration::from_millis(settings.db_acquire_timeout_ms))
            .connect_lazy(url)
            .context("READ_REPLICA_URL")?,
        None => pool.clone(),
    };
    let sold_out = MySqlPoolOptions::new()
        .max_connections(crate::service::SOLD_OUT_POOL_SIZE)
        .acquire_timeout(Duration::from_millis(settings.db_acquire_timeout_ms))
        .connect_lazy_with((*pool.connect_options()).clone());
    let strategies = strategies::all(
        &settings.strategies,
        &strategies::Context {
            database_url: &settings.database_url,
            shared: &settings.shared,
        },
    );
    let limits = Limits {
        admission: Admission::new(settings.max_in_flight, settings.adaptive_limit)
            .with_reject_hold(settings.reject_hold()),
        sold_out: SoldOut::new(Duration::from_millis(settings.sold_out_cache_ms)),
    };
    let pools = Pools {
        main: pool,
        reads,
        sold_out,
    };
    Ok(Service::new(pools, strategies, limits, hooks))
}

/// A built service, bound to its port, not yet serving.
pub struct Application {
    port: u16,
    server: Server,
    state: web::Data<AppState>,
    /// The strategies' background work ([`crate::strategies::Strategy::start`]).
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl Application {
    /// Connects to the database, applies the migrations, binds `settings.bind` (port 0
    /// picks a free one, read it back with [`Application::port`]) and builds the server.
    /// Never waits on Redis or ZooKeeper.
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        let hooks = Hooks::new(settings.enable_test_hooks, settings.hold_ms)
            .with_lock_log(settings.lock_log.as_deref())
            .context("opening --lock-log")?;
        let hooks = Arc::new(hooks);
        let service = service(&settings, hooks.clone()).await?;
        let state = web::Data::new(AppState {
            service,
            hooks,
            openapi: openapi::json(),
            settings,
        });
        let shared = state.clone();
        let mut server = HttpServer::new(move || {
            App::new()
                .app_data(shared.clone())
                .app_data(routes::json_config())
                .app_data(routes::path_config())
                .app_data(routes::query_config())
                .wrap(from_fn(routes::request_context))
                .configure(routes::configure)
                .default_service(web::to(routes::not_found))
        })
        .backlog(LISTEN_BACKLOG);
        if let Some(workers) = state.settings.workers {
            server = server.workers(workers);
        }
        let server = server
            .bind(&state.settings.bind)
            .with_context(|| format!("binding {}", state.settings.bind))?;
        let port = server.addrs().first().context("no address bound")?.port();
        let background = state.service.start();
        Ok(Application {
            port,
            server: server.run(),
            state,
            background,
        })
    }

    /// The port the service listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The shared state (the pool, for tests that read the database directly).
    pub fn state(&self) -> web::Data<AppState> {
        self.state.clone()
    }

    /// A handle to stop the server gracefully.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until the server is stopped (SIGINT/SIGTERM, or [`ServerHandle::stop`]),
    /// then closes the database pool so the server sees clean disconnects.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        for task in &self.background {
            task.abort();
        }
        self.state.service.close().await;
        result
    }
}
