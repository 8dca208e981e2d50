//! `/ready`: is every configured backend reachable right now?
//!
//! Checked concurrently, each with a short timeout, so one dead backend makes the
//! answer slower by at most that timeout. A backend that is not configured is listed
//! as such and does not make the service unready: the strategies that need it answer
//! 503 `backend_unavailable` on their own.

use crate::http::config::Settings;
use crate::strategies::Strategies;
use crate::strategies::card::Reached;
use serde::Serialize;
use sqlx::MySqlPool;
use std::time::Duration;
use tokio::time::timeout;

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BackendStatus {
    /// `database`, then the servers the strategies share (`Shared::check`), then
    /// those a strategy alone is configured with (`Served::ready`).
    pub backend: String,
    pub configured: bool,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `GET /ready`'s 200 body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub backends: Vec<BackendStatus>,
}

pub async fn check(pool: &MySqlPool, settings: &Settings, strategies: &Strategies) -> Readiness {
    let database = timeout(CHECK_TIMEOUT, async {
        sqlx::query("SELECT 1")
            .execute(pool)
            .await
            .map(|_| "SELECT 1 answered".to_string())
            .map_err(|e| e.to_string())
    });
    // The servers a strategy alone is configured with, each once (bounded by the
    // strategy; the timeout here is the backstop).
    let own = futures::future::join_all(strategies.with_cards().map(|(card, s)| async move {
        let backstop = CHECK_TIMEOUT + Duration::from_millis(100);
        let answer = timeout(backstop, s.ready(CHECK_TIMEOUT)).await;
        let late = || {
            Some(Reached::Answered(Err(format!(
                "no answer within {backstop:?}"
            ))))
        };
        Some((card.backend, answer.unwrap_or_else(|_| late())?))
    }));
    let (database, shared, own) = tokio::join!(database, settings.shared.check(CHECK_TIMEOUT), own);
    let database = database.unwrap_or_else(|_| Err(format!("no answer within {CHECK_TIMEOUT:?}")));
    let mut backends = vec![answered("database".into(), database)];
    let mut own: Vec<_> = own.into_iter().flatten().collect();
    own.sort_by_key(|(backend, _)| *backend);
    own.dedup_by_key(|(backend, _)| *backend);
    let own = own
        .into_iter()
        .map(|(backend, reached)| (backend.to_string(), reached));
    for (backend, reached) in shared.into_iter().chain(own) {
        backends.push(match reached {
            Reached::Answered(result) => answered(backend, result),
            Reached::NotConfigured(how) => BackendStatus {
                backend,
                configured: false,
                ok: false,
                detail: Some(how.into()),
            },
        });
    }
    Readiness {
        ready: backends.iter().all(|b| !b.configured || b.ok),
        backends,
    }
}

fn answered(backend: String, result: Result<String, String>) -> BackendStatus {
    let (ok, detail) = match result {
        Ok(detail) => (true, Some(detail)),
        Err(detail) => (false, Some(detail)),
    };
    BackendStatus {
        backend,
        configured: true,
        ok,
        detail,
    }
}
