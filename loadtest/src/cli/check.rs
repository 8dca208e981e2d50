//! `loadtest check HISTORY...`: each recorded history judged against the model of a
//! stock counter ([`stock_check`]): linearizable, not (on which products), undecided
//! within the budget, or unobserved (linearizable, but some part held no read and no
//! refusal that could have contradicted its answers).
//!
//! # Exit status
//!
//! The worst of the histories: 1 when one is not linearizable, else 2 when one was
//! undecided, could not be read or its page (`--pages`) could not be written, else 3
//! when one was unobserved, else 0.
//!
//! A closed output (`loadtest check ... | head`) ends the check quietly: the histories
//! not yet judged are left, and the status is that of those judged until then.

use anyhow::{Context, anyhow};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use stock_check::classes::Anomaly;
use stock_check::{Verdict, check as judge, history};

/// Anomalies shown per class (each with its proving lines); the rest are counted.
const SHOWN: usize = 3;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// History files: JSON lines, one operation each (the format of
    /// `stock_check::history`, written by any tool).
    #[arg(required = true)]
    pub histories: Vec<PathBuf>,
    /// How long one independent part of a history may be searched, in seconds.
    ///
    /// Past it, that part's verdict is "undecided".
    #[arg(long, default_value_t = stock_check::BUDGET.as_secs())]
    pub budget_secs: u64,
    /// Also draw each history that fails or shows an anomaly, as `<file>.html` beside it.
    ///
    /// The page is self-contained: lanes of clients and lock holders, the proof
    /// outlined.
    #[arg(long)]
    pub pages: bool,
}

/// Where a history stands, the best first: the worst of a run's is its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    /// One order explains every answer, and something could have contradicted them.
    Linearizable,
    /// Linearizable, but some part held no read and no refusal.
    Unobserved,
    /// Undecided within the budget, not readable, or its page not written.
    Undecided,
    /// No order explains the answers, or the ledger contradicts one.
    NotLinearizable,
}

impl Standing {
    /// The exit status it gives (see the module's doc).
    fn code(self) -> i32 {
        match self {
            Standing::Linearizable => 0,
            Standing::NotLinearizable => 1,
            Standing::Undecided => 2,
            Standing::Unobserved => 3,
        }
    }
}

/// Checks every history, one after the other (one that cannot be read is named and
/// the rest still checked), and exits with the worst one's status.
///
/// # Errors
///
/// An output that failed otherwise than by being closed.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let budget = Duration::from_secs(args.budget_secs);
    let mut out = std::io::stdout().lock();
    let mut standings = Vec::new();
    for path in &args.histories {
        let (standing, written) = check_one(&mut out, path, budget, args.pages)?;
        standings.push(standing);
        if let Err(e) = written.and_then(|()| out.flush()) {
            if e.kind() == ErrorKind::BrokenPipe {
                std::process::exit(worst(&standings).code());
            }
            return Err(e).context("writing the verdicts");
        }
    }
    let count = |s: Standing| standings.iter().filter(|&&t| t == s).count();
    let worst = worst(&standings);
    if worst != Standing::Linearizable {
        eprintln!(
            "loadtest check: {} of {} histories not linearizable, {} undecided or unreadable, {} unobserved",
            count(Standing::NotLinearizable),
            standings.len(),
            count(Standing::Undecided),
            count(Standing::Unobserved),
        );
        std::process::exit(worst.code());
    }
    Ok(())
}

fn worst(standings: &[Standing]) -> Standing {
    standings
        .iter()
        .copied()
        .max()
        .unwrap_or(Standing::Linearizable)
}

/// Judges the history at `path`, draws its page if asked, and writes its verdict to
/// `out`: where it stands, and whether the writing went through.
fn check_one(
    out: &mut impl Write,
    path: &Path,
    budget: Duration,
    pages: bool,
) -> anyhow::Result<(Standing, std::io::Result<()>)> {
    let name = path.display();
    let (records, verdict, anomalies) = match judged(path, budget) {
        Ok(judged) => judged,
        Err(e) => {
            let written = writeln!(out, "{name}: not checked: {e:#}");
            return Ok((Standing::Undecided, written));
        }
    };
    let (mut standing, said) = said(&verdict);
    if pages && (standing >= Standing::Undecided || !anomalies.is_empty()) {
        let title = path
            .file_name()
            .map_or(name.to_string(), |f| f.to_string_lossy().into());
        let page = loadtest::history::page::draw(&title, &records, &anomalies);
        let page_path = path.with_extension("html");
        // A page not written is a failure of the check, not of the history: it says
        // so, and the history counts at least as undecided.
        if let Err(e) = std::fs::write(&page_path, page) {
            eprintln!(
                "loadtest check: {}: page not written: {e}",
                page_path.display()
            );
            standing = standing.max(Standing::Undecided);
        }
    }
    let operations = records.iter().filter(|r| r.interval().is_some()).count();
    let written = writeln!(out, "{name}: {operations} operations: {said}")
        .and_then(|()| write_anomalies(out, &anomalies));
    Ok((standing, written))
}

/// Where `verdict` stands, in words.
fn said(verdict: &Verdict) -> (Standing, String) {
    match verdict {
        Verdict::Linearizable => (Standing::Linearizable, "linearizable".to_string()),
        Verdict::NotLinearizable { products } => (
            Standing::NotLinearizable,
            format!("NOT linearizable: no order explains the answers on products {products:?}"),
        ),
        Verdict::Unknown { products } => (
            Standing::Undecided,
            format!("undecided: the budget ran out on products {products:?}"),
        ),
        Verdict::Unobserved { products } => (
            Standing::Unobserved,
            format!(
                "unobserved: linearizable, but no read and no refusal on products {products:?} \
                 could have contradicted their answers"
            ),
        ),
    }
}

/// Per class: how many, and the first few with their proving lines.
fn write_anomalies(out: &mut impl Write, anomalies: &[Anomaly]) -> std::io::Result<()> {
    let mut classes: Vec<_> = anomalies.iter().map(|a| a.class).collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let of: Vec<&Anomaly> = anomalies.iter().filter(|a| a.class == class).collect();
        writeln!(out, "  {} x {}", class.name(), of.len())?;
        for anomaly in of.iter().take(SHOWN) {
            let lines: Vec<String> = anomaly.ops.iter().map(|i| (i + 1).to_string()).collect();
            writeln!(out, "    {} (lines {})", anomaly.says, lines.join(", "))?;
        }
    }
    Ok(())
}

/// One history's records, its verdict and its anomalies.
type Judged = (Vec<history::Record>, Verdict, Vec<Anomaly>);

fn judged(path: &Path, budget: Duration) -> anyhow::Result<Judged> {
    let text = std::fs::read_to_string(path).context("reading it")?;
    let records = history::parse(&text).map_err(|e| anyhow!(e))?;
    let verdict = judge(&records, budget).map_err(|e| anyhow!(e))?;
    let anomalies = stock_check::anomalies(&records, &verdict);
    Ok((records, verdict, anomalies))
}
