//! `loadtest check HISTORY...`: each recorded history judged against the model of a
//! stock counter ([`loadtest::check`]): linearizable, not (on which products), or
//! undecided within the budget. Fails unless every history is linearizable.

use anyhow::{Context, anyhow, bail};
use loadtest::check::{Verdict, check as judge, history};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// History files: JSON lines, one operation each (the format of
    /// `loadtest::check::history`, written by any tool).
    #[arg(required = true)]
    pub histories: Vec<PathBuf>,
    /// How long one independent part of a history may be searched, in seconds; past
    /// it, that part's verdict is "undecided".
    #[arg(long, default_value_t = 10)]
    pub budget_secs: u64,
}

pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let budget = Duration::from_secs(args.budget_secs);
    let mut not_linearizable = 0;
    for path in &args.histories {
        let name = path.display();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        let records = history::parse(&text).map_err(|e| anyhow!("{name}: {e}"))?;
        let operations = records.iter().filter(|r| r.interval().is_some()).count();
        let verdict = judge(&records, budget).map_err(|e| anyhow!("{name}: {e}"))?;
        let said = match &verdict {
            Verdict::Linearizable => "linearizable".to_string(),
            Verdict::NotLinearizable { products } => {
                format!("NOT linearizable: no order explains the answers on products {products:?}")
            }
            Verdict::Unknown { products } => {
                format!("undecided: the budget ran out on products {products:?}")
            }
        };
        println!("{name}: {operations} operations: {said}");
        if verdict != Verdict::Linearizable {
            not_linearizable += 1;
        }
    }
    if not_linearizable > 0 {
        bail!(
            "{not_linearizable} of {} histories not shown linearizable",
            args.histories.len()
        );
    }
    Ok(())
}
