//! `loadtest check HISTORY...`: each recorded history judged against the model of a
//! stock counter ([`stock_check`]): linearizable, not (on which products), or
//! undecided within the budget. Exits 0 when every history is linearizable, 1 when
//! one is not, 2 when one was undecided or could not be read.

use anyhow::{Context, anyhow};
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
    /// How long one independent part of a history may be searched, in seconds; past
    /// it, that part's verdict is "undecided".
    #[arg(long, default_value_t = stock_check::BUDGET.as_secs())]
    pub budget_secs: u64,
    /// Also draw each history that shows an anomaly: `<file>.html` beside it (a
    /// self-contained page: lanes of clients and lock holders, the proof outlined).
    #[arg(long)]
    pub pages: bool,
}

/// Checks every history, one after the other (one that cannot be read is named and
/// the rest still checked); exits 1 if any is not linearizable, else 2 if any was
/// undecided or unreadable, else 0.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let budget = Duration::from_secs(args.budget_secs);
    let (mut failed, mut open) = (0, 0);
    for path in &args.histories {
        let name = path.display();
        match judged(path, budget) {
            Ok((records, verdict, anomalies)) => {
                let operations = records.iter().filter(|r| r.interval().is_some()).count();
                if args.pages && (verdict != Verdict::Linearizable || !anomalies.is_empty()) {
                    let title = path
                        .file_name()
                        .map_or(name.to_string(), |f| f.to_string_lossy().into());
                    let page = loadtest::history::page::draw(&title, &records, &anomalies);
                    std::fs::write(path.with_extension("html"), page)?;
                }
                let said = match &verdict {
                    Verdict::Linearizable => "linearizable".to_string(),
                    Verdict::NotLinearizable { products } => {
                        failed += 1;
                        format!(
                            "NOT linearizable: no order explains the answers on products {products:?}"
                        )
                    }
                    Verdict::Unknown { products } => {
                        open += 1;
                        format!("undecided: the budget ran out on products {products:?}")
                    }
                    Verdict::Unobserved { products } => format!(
                        "unobserved: linearizable, but no read and no refusal on products \
                         {products:?} could have contradicted their answers"
                    ),
                };
                println!("{name}: {operations} operations: {said}");
                // Per class: how many, and the first few with their proving lines.
                let mut classes: Vec<_> = anomalies.iter().map(|a| a.class).collect();
                classes.sort();
                classes.dedup();
                for class in classes {
                    let of: Vec<&Anomaly> = anomalies.iter().filter(|a| a.class == class).collect();
                    println!("  {} x {}", class.name(), of.len());
                    for anomaly in of.iter().take(SHOWN) {
                        let lines: Vec<String> =
                            anomaly.ops.iter().map(|i| (i + 1).to_string()).collect();
                        println!("    {} (lines {})", anomaly.says, lines.join(", "));
                    }
                }
            }
            Err(e) => {
                open += 1;
                println!("{name}: not checked: {e:#}");
            }
        }
    }
    let total = args.histories.len();
    if failed + open > 0 {
        eprintln!(
            "loadtest check: {failed} of {total} histories not linearizable, {open} undecided or unreadable"
        );
        std::process::exit(if failed > 0 { 1 } else { 2 });
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
