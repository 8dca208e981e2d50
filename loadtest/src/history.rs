//! A run's history: what its clients saw, request by request ([`crate::engine::Fired`]'s
//! record), in the checker's format ([`stock_check::history`]), with each deduction's
//! presence in the ledger read once the system is quiet; written under `reports/` and
//! judged ([`judge`]).
//!
//! The clients are lanes: a closed loop's requests laid out, in the order they were
//! sent, on the first lane whose last request was answered by then. A lane is a
//! sequential process, as Jepsen's are; after an unknown answer its process is
//! retired and the lane's next request comes from a new one (a new `client`), because
//! an operation still possibly in flight must not look answered to the checker.

pub mod page;

use crate::engine::{Answer, Fired, Outcome};
use serde::{Deserialize, Serialize};
use sqlx::MySqlPool;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};
use stock_check::classes::{Anomaly, Class};
use stock_check::history::{DeductAnswer, Item, Record, RestockAnswer};
use stock_check::{self as check, Verdict};

/// How long the checker may search one independent part of a run's history before it
/// answers "undecided".
pub const BUDGET: Duration = check::BUDGET;

/// The checker's word on one history ([`Verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Said {
    /// One order explains every answer, and a read or a refusal could have
    /// contradicted them.
    #[serde(rename = "linearizable")]
    Linearizable,
    /// No order explains the answers, or the ledger contradicts one.
    #[serde(rename = "not linearizable")]
    NotLinearizable,
    /// A part ran out of budget.
    #[serde(rename = "undecided")]
    Undecided,
    /// Every part is linearizable, but some held no read and no refusal: nothing
    /// could have contradicted their answers.
    #[serde(rename = "unobserved")]
    Unobserved,
}

/// What the checker said of one run's history, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub verdict: Said,
    /// The operations checked (deductions, restocks, reads).
    pub operations: usize,
    /// The products of each part that failed (or, when undecided, ran out of budget;
    /// when unobserved, held no read and no refusal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<Vec<i64>>,
    /// Request ids with an attempt answered with an unknown outcome, and how many of
    /// them the ledger held once the system was quiet (a retry may be what sold one);
    /// an id sent again counts once.
    pub unknown: usize,
    pub unknown_applied: usize,
    /// Request ids the ledger holds (every epoch of the run), each counted once however
    /// often it was sent.
    #[serde(default)]
    pub recorded: usize,
    /// The anomalies found, by class (none when linearizable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anomalies: Vec<Found>,
    /// The history file, relative to the report's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Its picture ([`page`]), when it shows an anomaly, relative to the report's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
    /// How long the check took, in milliseconds.
    pub check_ms: f64,
}

/// One class of anomaly in a run: how many, and the first one's proof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Found {
    /// `oversold`, `lost update`, `false sold-out`, `stale read`, `double sale`, ...
    pub class: String,
    /// How many: anomalies found, except lost updates, counted in sales erased (a
    /// final read showing N sold units erased is N; the ledger's count when only it
    /// shows them).
    pub count: u64,
    /// What the first one shows, in words.
    pub says: String,
    /// Its proving operations: their lines in the history file (1 is the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<usize>,
}

impl Said {
    /// As the tables print it: `linearizable`, `NOT linearizable`, `undecided`,
    /// `unobserved`.
    pub fn text(self) -> &'static str {
        match self {
            Said::Linearizable => "linearizable",
            Said::NotLinearizable => "NOT linearizable",
            Said::Undecided => "undecided",
            Said::Unobserved => "unobserved",
        }
    }
}

/// The checker's word on a history ([`Said::text`]), or `-` where none was checked.
pub fn verdict_text(judged: Option<&Judged>) -> &'static str {
    judged.map_or("-", |h| h.verdict.text())
}

impl Judged {
    /// Whether one order explains every answer and something could have contradicted
    /// them (not when unobserved).
    pub fn is_linearizable(&self) -> bool {
        self.verdict == Said::Linearizable
    }

    /// Whether the history failed its check or could not be decided: a run that shows
    /// it gets its picture.
    pub fn fails(&self) -> bool {
        matches!(self.verdict, Said::NotLinearizable | Said::Undecided)
    }

    /// `oversold 1, stale read 37, lost update 983`, or nothing.
    pub fn anomalies_text(&self) -> String {
        self.anomalies
            .iter()
            .map(|f| format!("{} {}", f.class, f.count))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Adds what the ledger says against the stock row: lost updates and units sold
    /// beyond the stock, each if the history did not show it (a final read showing
    /// erased sales, answers it never saw).
    pub fn add_ledger(&mut self, verdict: &crate::verify::Verdict) {
        let lost = Class::LostUpdate.name();
        if verdict.lost_updates > 0 && !self.anomalies.iter().any(|f| f.class == lost) {
            self.anomalies.push(Found {
                class: lost.into(),
                count: verdict.lost_updates as u64,
                says: format!(
                    "the ledger has {} unit(s) sold that the stock row never lost",
                    verdict.lost_updates
                ),
                lines: Vec::new(),
            });
        }
        let oversold = Class::Oversold.name();
        if verdict.beyond_stock > 0 && !self.anomalies.iter().any(|f| f.class == oversold) {
            self.anomalies.push(Found {
                class: oversold.into(),
                count: 1,
                says: format!(
                    "the ledger has {} unit(s) sold beyond the stock",
                    verdict.beyond_stock
                ),
                lines: Vec::new(),
            });
        }
    }
}

/// The request ids of the run with id prefix `prefix` that the ledger holds.
pub async fn recorded(db: &MySqlPool, prefix: &str) -> sqlx::Result<HashSet<String>> {
    // An ASCII binary column: sqlx reads it as bytes.
    let ids: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT DISTINCT request_id FROM ledger WHERE request_id LIKE ?")
            .bind(format!("{prefix}-%"))
            .fetch_all(db)
            .await?;
    Ok(ids
        .into_iter()
        .map(|id| String::from_utf8_lossy(&id).into_owned())
        .collect())
}

/// How many of a run's deductions the ledger holds (every epoch), for a run whose
/// history was not checked (`--no-history`): read from the ledger by the run's id
/// prefix.
pub async fn recorded_count(db: &MySqlPool, fired: &Fired) -> anyhow::Result<usize> {
    anyhow::ensure!(
        !fired.id_prefix.is_empty(),
        "a run without request ids cannot be found in the ledger"
    );
    Ok(recorded(db, &fired.id_prefix).await?.len())
}

/// What a deduction's answer says for the checker: sold, a duplicate, refused, a
/// definite failure (by the API's contract nothing changed: `busy`, `lock_lost`,
/// `backend_unavailable`, a 429 or another 4xx, a 500, a request that never left), or
/// unknown (no answer, `outcome_unknown`).
pub fn answer_of(answer: &Answer) -> DeductAnswer {
    match &answer.outcome {
        Outcome::Sold if answer.duplicate => DeductAnswer::Duplicate,
        Outcome::Sold => DeductAnswer::Sold,
        Outcome::SoldOut => DeductAnswer::Refused,
        outcome if outcome.is_unknown() => DeductAnswer::Unknown,
        Outcome::Unavailable(_)
        | Outcome::Overloaded
        | Outcome::ClientError
        | Outcome::ServerError
        | Outcome::Unreachable => DeductAnswer::Failed,
        Outcome::Transport => unreachable!("a transport error's outcome is unknown"),
    }
}

/// The history of one run: an `init` per product (its stock at the start), then
/// every deduction, read and restock, in the order they were sent, on the lanes
/// described above, times on CLOCK_MONOTONIC. `recorded` holds the request ids the
/// ledger has.
pub fn of_run(fired: &Fired, stock: &[(i64, i64)], recorded: &HashSet<String>) -> Vec<Record> {
    of_answers(
        &fired.record,
        &fired.beside,
        fired.clock_start_us,
        stock,
        recorded,
    )
}

/// [`of_run`] from its parts: the answers and the operations beside them, their times
/// counted from `clock_start_us` on CLOCK_MONOTONIC.
pub fn of_answers(
    answers: &[Answer],
    beside: &[crate::engine::Probe],
    clock_start_us: u64,
    stock: &[(i64, i64)],
    recorded: &HashSet<String>,
) -> Vec<Record> {
    let clock = |us: u64| clock_start_us + us;
    // (sent, when its client was free again, outcome unknown, the record)
    let mut ops: Vec<(u64, u64, bool, Record)> = Vec::new();
    for a in answers {
        let answer = answer_of(a);
        let unknown = answer == DeductAnswer::Unknown;
        ops.push((
            a.sent_us,
            a.done_us,
            unknown,
            Record::Deduct {
                client: 0,
                request_id: a.request_id.clone(),
                items: a
                    .items
                    .iter()
                    .map(|&(product_id, quantity)| Item {
                        product_id,
                        quantity,
                    })
                    .collect(),
                sent_us: clock(a.sent_us),
                answered_us: (!unknown).then_some(clock(a.done_us)),
                answer,
                recorded: Some(recorded.contains(&a.request_id)),
            },
        ));
    }
    for p in beside {
        let record = if p.restock {
            Record::Restock {
                client: 0,
                product_id: p.product,
                stock: p.stock.expect("a restock's units"),
                sent_us: clock(p.sent_us),
                answered_us: p.done_us.map(clock),
                answer: match p.done_us {
                    Some(_) => RestockAnswer::Done,
                    None => RestockAnswer::Unknown,
                },
            }
        } else {
            Record::Read {
                client: 0,
                product_id: p.product,
                sent_us: clock(p.sent_us),
                answered_us: p.done_us.map(clock),
                stock: p.stock,
            }
        };
        let done = p.done_us.unwrap_or(p.sent_us);
        ops.push((p.sent_us, done, p.restock && p.done_us.is_none(), record));
    }
    ops.sort_by_key(|(sent, done, _, _)| (*sent, *done));
    let mut records: Vec<Record> = stock
        .iter()
        .map(|&(product_id, stock)| Record::Init { product_id, stock })
        .collect();
    // Lanes free from a time, the earliest first; a new process id for each new lane
    // and for a lane whose last answer was unknown.
    let mut free: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut processes = 0u64;
    for (sent, done, unknown, mut record) in ops {
        let client = match free.peek() {
            Some(Reverse((at, client))) if *at <= sent => {
                let client = *client;
                free.pop();
                client
            }
            _ => {
                processes += 1;
                processes - 1
            }
        };
        if unknown {
            processes += 1;
            free.push(Reverse((done, processes - 1)));
        } else {
            free.push(Reverse((done, client)));
        }
        match &mut record {
            Record::Deduct { client: c, .. }
            | Record::Restock { client: c, .. }
            | Record::Read { client: c, .. } => *c = client,
            Record::Init { .. } | Record::Hold { .. } => {}
        }
        records.push(record);
    }
    records
}

/// Judges `records` off the runtime's threads (the search is CPU work) and writes them
/// to `dir/file` if a folder is given, the file named in the verdict as
/// `<folder>/<file>` (relative to the report next to the folder).
pub async fn judge_and_write(
    records: Vec<Record>,
    dir: Option<&Path>,
    file: &str,
) -> anyhow::Result<Judged> {
    let (mut judged, anomalies, records) = tokio::task::spawn_blocking(move || {
        judge_with(&records).map(|(judged, anomalies)| (judged, anomalies, records))
    })
    .await?
    .map_err(|e| anyhow::anyhow!("the run's history: {e}"))?;
    if let Some(dir) = dir {
        write(&dir.join(file), &records)?;
        let folder = dir.file_name().map(|f| f.to_string_lossy().into_owned());
        let linked = |file: &str| match &folder {
            Some(folder) => format!("{folder}/{file}"),
            None => file.to_string(),
        };
        judged.file = Some(linked(file));
        // A history that fails gets its picture beside it.
        if judged.fails() || !anomalies.is_empty() {
            let html = file.trim_end_matches(".jsonl").to_string() + ".html";
            let title = format!("{file}: {}", verdict_text(Some(&judged)));
            let page =
                tokio::task::spawn_blocking(move || page::draw(&title, &records, &anomalies))
                    .await?;
            std::fs::write(dir.join(&html), page)?;
            judged.page = Some(linked(&html));
        }
    }
    Ok(judged)
}

/// The holds of the run with request id prefix `prefix` in the instances' lock logs
/// (`--lock-log`), as `hold` records: each (key, holder) from its `acquired` to its
/// `released` or `lost` line, whichever came first.
pub fn holds(logs: &[std::path::PathBuf], prefix: &str) -> Vec<Record> {
    #[derive(Deserialize)]
    struct Line {
        key: String,
        holder: String,
        token: Option<u64>,
        event: String,
        at_us: u64,
    }
    let mut open: std::collections::BTreeMap<(String, String), usize> = Default::default();
    let mut holds: Vec<Record> = Vec::new();
    let lines = logs
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Line>(l).ok())
                .collect::<Vec<_>>()
        });
    for line in lines {
        let Some((_, request_id)) = line.holder.split_once(':') else {
            continue;
        };
        if !request_id.starts_with(prefix) {
            continue;
        }
        let at = (line.key.clone(), line.holder.clone());
        match line.event.as_str() {
            "acquired" if !open.contains_key(&at) => {
                open.insert(at, holds.len());
                holds.push(Record::Hold {
                    request_id: request_id.to_string(),
                    key: line.key,
                    token: line.token,
                    from_us: line.at_us,
                    until_us: None,
                    lost: false,
                });
            }
            "released" | "lost" => {
                if let Some(i) = open.remove(&at)
                    && let Record::Hold { until_us, lost, .. } = &mut holds[i]
                {
                    *until_us = Some(line.at_us);
                    *lost = line.event == "lost";
                }
            }
            _ => {}
        }
    }
    holds
}

/// Writes `records` as JSON lines (making the folder).
pub fn write(path: &Path, records: &[Record]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let out = std::io::BufWriter::new(std::fs::File::create(path)?);
    check::history::write(out, records)
}

/// Every part's operations in the longest order the search found (all of them where
/// it found one), each with the stock of its part's products after it: for the page.
fn ordered(records: &[Record]) -> Vec<(usize, Vec<(i64, i64)>)> {
    let Ok(parts) = check::model::partition(records) else {
        return Vec::new();
    };
    let mut ordered = Vec::new();
    for part in &parts {
        let mut state = part.init.clone();
        for op in check::search::longest_order(part, BUDGET) {
            let Some(after) = check::model::step(&state, &part.ops[op]) else {
                break;
            };
            state = after;
            let stock = part
                .products
                .iter()
                .copied()
                .zip(state.stock.iter().copied())
                .collect();
            ordered.push((part.records[op], stock));
        }
    }
    ordered
}

/// Checks `records` (each part for at most [`BUDGET`]).
pub fn judge(records: &[Record]) -> Result<Judged, String> {
    judge_with(records).map(|(judged, _)| judged)
}

/// [`judge`], with every anomaly found.
pub fn judge_with(records: &[Record]) -> Result<(Judged, Vec<Anomaly>), String> {
    let started = Instant::now();
    let verdict = check::check(records, BUDGET)?;
    let every = check::anomalies(records, &verdict);
    let mut anomalies: Vec<Found> = Vec::new();
    for anomaly in every.iter().cloned() {
        let class = anomaly.class.name();
        match anomalies.iter_mut().find(|f| f.class == class) {
            Some(found) => found.count += anomaly.count,
            None => anomalies.push(Found {
                class: class.into(),
                count: anomaly.count,
                says: anomaly.says,
                lines: anomaly.ops.iter().map(|i| i + 1).collect(),
            }),
        }
    }
    let (verdict, products) = match verdict {
        Verdict::Linearizable => (Said::Linearizable, Vec::new()),
        Verdict::NotLinearizable { products } => (Said::NotLinearizable, products),
        Verdict::Unknown { products } => (Said::Undecided, products),
        Verdict::Unobserved { products } => (Said::Unobserved, products),
    };
    let unknown = records
        .iter()
        .filter(|r| matches!(r, Record::Deduct { answer, .. } if *answer == DeductAnswer::Unknown));
    let judged = Judged {
        verdict,
        operations: records.iter().filter(|r| r.interval().is_some()).count(),
        products,
        unknown: distinct_ids(unknown.clone()),
        unknown_applied: recorded_ids(unknown),
        recorded: recorded_ids(records.iter()),
        anomalies,
        file: None,
        page: None,
        check_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    Ok((judged, every))
}

/// How many request ids among `records`' deductions: an id sent again counts once.
fn distinct_ids<'a>(records: impl Iterator<Item = &'a Record>) -> usize {
    let ids = records.filter_map(|r| match r {
        Record::Deduct { request_id, .. } => Some(request_id.as_str()),
        _ => None,
    });
    ids.collect::<HashSet<&str>>().len()
}

/// How many request ids among `records` the ledger holds. `recorded` is said of a
/// request id, not of an attempt: an id sent again counts once.
fn recorded_ids<'a>(records: impl Iterator<Item = &'a Record>) -> usize {
    distinct_ids(records.filter(|r| {
        matches!(
            r,
            Record::Deduct {
                recorded: Some(true),
                ..
            }
        )
    }))
}

/// A section's name as a file name's part: lower case, letters and digits, the rest
/// one `-` (`flash c=256` -> `flash-c-256`).
pub fn slug(section: &str) -> String {
    let mut slug = String::new();
    for c in section.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_end_matches('-').to_string()
}

/// The folder a command's histories go to, emptied: next to its JSON report
/// (`reports/demo.json` -> `reports/demo.history/`).
pub fn folder(json: Option<&Path>, name: &str) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    let json_path = match json {
        Some(path) => path.to_path_buf(),
        None => Path::new("reports").join(format!("{name}.json")),
    };
    let dir = json_path.with_extension("history");
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("emptying {}", dir.display()))?
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: &str, outcome: Outcome, sent_us: u64, done_us: u64) -> Answer {
        Answer {
            outcome,
            request_id: id.into(),
            items: vec![(7, 1)],
            duplicate: false,
            attempts: 1,
            micros: done_us - sent_us,
            instance: 0,
            sent_us,
            batch_size: None,
            retries: 0,
            done_us,
            error: None,
        }
    }

    /// Requests laid on lanes: a lane is reused once its last answer came, and after
    /// an unknown answer it goes on as a new process; times are the clock's, the
    /// unknown one without an answer, each settled by the ledger.
    #[test]
    fn a_run_becomes_a_history_of_sequential_clients() {
        let answers = vec![
            answer("a", Outcome::Sold, 0, 10),
            answer("b", Outcome::Transport, 5, 15),
            answer("c", Outcome::SoldOut, 12, 20),
            answer("d", Outcome::Unavailable("busy".into()), 16, 30),
        ];
        let mut fired = Fired::from_answers(answers, Duration::from_millis(1), 2);
        fired.clock_start_us = 1_000;
        let recorded: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let history = of_run(&fired, &[(7, 2)], &recorded);
        assert_eq!(
            history[0],
            Record::Init {
                product_id: 7,
                stock: 2
            }
        );
        type Seen<'a> = (u64, &'a str, Option<u64>, DeductAnswer, Option<bool>);
        let seen: Vec<Seen> = (history[1..].iter())
            .map(|r| match r {
                Record::Deduct {
                    client,
                    request_id,
                    answered_us,
                    answer,
                    recorded,
                    ..
                } => (
                    *client,
                    request_id.as_str(),
                    *answered_us,
                    *answer,
                    *recorded,
                ),
                other => panic!("not a deduction: {other:?}"),
            })
            .collect();
        use DeductAnswer::*;
        assert_eq!(
            seen,
            [
                (0, "a", Some(1_010), Sold, Some(true)),
                (1, "b", None, Unknown, Some(true)),
                (0, "c", Some(1_020), Refused, Some(false)),
                (2, "d", Some(1_030), Failed, Some(false)),
            ]
        );
        // Settled by the ledger, the unknown sale took the last unit: the refusal
        // after it is explained. Not in the ledger, it took nothing: the refusal was
        // a false sold-out.
        let judged = judge(&history).unwrap();
        assert!(judged.is_linearizable(), "{judged:?}");
        assert_eq!((judged.unknown, judged.unknown_applied), (1, 1));
        let without_b = of_run(&fired, &[(7, 2)], &["a".to_string()].into());
        assert_eq!(judge(&without_b).unwrap().verdict, Said::NotLinearizable);
    }

    /// A request sent, never answered, sent again and answered sold: the ledger holds
    /// its id once. The retry sold it; the unknown attempt sold nothing more. The
    /// counts are of request ids, as the checker reads `recorded`.
    #[test]
    fn a_retried_id_is_counted_once() {
        let deduct = |sent_us, answered_us, answer| Record::Deduct {
            client: 0,
            request_id: "a".to_string(),
            items: vec![Item {
                product_id: 1,
                quantity: 1,
            }],
            sent_us,
            answered_us,
            answer,
            recorded: Some(true),
        };
        let history = [
            Record::Init {
                product_id: 1,
                stock: 1,
            },
            deduct(0, None, DeductAnswer::Unknown),
            deduct(10, Some(20), DeductAnswer::Sold),
            Record::Read {
                client: 0,
                product_id: 1,
                sent_us: 30,
                answered_us: Some(40),
                stock: Some(0),
            },
        ];
        let judged = judge(&history).unwrap();
        assert_eq!(judged.verdict, Said::Linearizable, "{judged:?}");
        assert_eq!(
            (judged.unknown, judged.unknown_applied, judged.recorded),
            (1, 1, 1)
        );
    }

    #[test]
    fn a_section_becomes_a_file_name() {
        assert_eq!(slug("flash c=256"), "flash-c-256");
        assert_eq!(slug("One instance"), "one-instance");
    }
}
