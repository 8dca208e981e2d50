//! The history format: one JSON object per line, each an operation as a client saw
//! it (sent, answered, what the answer said) or the stock a product starts with.
//!
//! ```text
//! {"type":"init","product_id":1,"stock":3}
//! {"type":"deduct","client":0,"request_id":"a","items":[{"product_id":1,"quantity":1}],"sent_us":10,"answered_us":42,"answer":"sold"}
//! {"type":"restock","client":1,"product_id":1,"stock":5,"sent_us":50,"answered_us":61,"answer":"done"}
//! {"type":"read","client":2,"product_id":1,"sent_us":70,"answered_us":75,"stock":5}
//! ```
//!
//! Times are microseconds on one monotonic clock shared by every client. An answer
//! that never came (a timeout, a broken connection, `outcome_unknown`) has no
//! `answered_us`: the operation may have taken effect at any time after it was sent,
//! or never. A deduction may say whether its request id was in the ledger once the
//! system was quiet (`"recorded":true|false`): a word about the id, the same on every
//! attempt of it, that settles its unknown outcomes ([`super::ledger`]).

use serde::{Deserialize, Serialize};

/// One product and how many of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub product_id: i64,
    pub quantity: i64,
}

/// What a deduction was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeductAnswer {
    /// Sold: every item deducted.
    Sold,
    /// The stored answer of an earlier sale with this request id: nothing deducted.
    Duplicate,
    /// `insufficient_stock`: nothing deducted.
    Refused,
    /// A failure that by the API's contract changed nothing (busy, lock lost, a
    /// backend unavailable before anything was written, bad input).
    Failed,
    /// No answer, or `outcome_unknown`: sold or not, nobody knows.
    Unknown,
}

/// What a restock was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestockAnswer {
    Done,
    Unknown,
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    /// The stock a product has before the first operation.
    Init { product_id: i64, stock: i64 },
    /// `POST /deduct/{strategy}`.
    Deduct {
        client: u64,
        request_id: String,
        items: Vec<Item>,
        sent_us: u64,
        answered_us: Option<u64>,
        answer: DeductAnswer,
        /// Whether the request id was in the ledger once the system was quiet (absent:
        /// not looked). One of the id's attempts sold it if found; none did if not
        /// (as etcd's robustness tests patch theirs from the log). Two attempts of one
        /// id saying otherwise are refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recorded: Option<bool>,
    },
    /// A restock: the product's stock set to `stock`.
    Restock {
        client: u64,
        product_id: i64,
        stock: i64,
        sent_us: u64,
        answered_us: Option<u64>,
        answer: RestockAnswer,
    },
    /// `GET /stock/{product_id}`, answered with `stock` (none: no answer).
    Read {
        client: u64,
        product_id: i64,
        sent_us: u64,
        answered_us: Option<u64>,
        stock: Option<i64>,
    },
    /// A distributed lock as the deduction `request_id` held it (the instances' lock
    /// logs): from after its acquire returned until before its release was sent, or
    /// until it learned it had lost the lock (`lost`); no `until_us`: never released
    /// (its process died). Not an operation on the stock: checked for two holders of
    /// one key at once.
    Hold {
        request_id: String,
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
        from_us: u64,
        until_us: Option<u64>,
        #[serde(default)]
        lost: bool,
    },
}

impl Record {
    /// When the operation was sent, and answered (`None` for `init`).
    pub fn interval(&self) -> Option<(u64, Option<u64>)> {
        match self {
            Record::Deduct {
                sent_us,
                answered_us,
                ..
            }
            | Record::Restock {
                sent_us,
                answered_us,
                ..
            }
            | Record::Read {
                sent_us,
                answered_us,
                ..
            } => Some((*sent_us, *answered_us)),
            Record::Init { .. } | Record::Hold { .. } => None,
        }
    }

    /// Whether its outcome is unknown: it may take effect any time after it was sent.
    /// (Settled by the ledger or not, it has no answer time.)
    pub fn open(&self) -> bool {
        matches!(
            self,
            Record::Deduct {
                answer: DeductAnswer::Unknown,
                ..
            } | Record::Restock {
                answer: RestockAnswer::Unknown,
                ..
            }
        )
    }
}

/// Reads a history, one record per line (blank lines skipped), naming the line of the
/// first that does not parse.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// Writes `records` as JSON lines, one record each, in the format [`parse`] reads.
pub fn write(mut out: impl std::io::Write, records: &[Record]) -> std::io::Result<()> {
    for record in records {
        serde_json::to_writer(&mut out, record)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
