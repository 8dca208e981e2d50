//! The checker's page (`generated/checking.md`): every run of the reference demo and
//! every chaos cell by the checker's verdict, the runs whose history shows an anomaly,
//! and each named class with the first real example the reference run gave of it.

use super::Data;
use crate::history::{Judged, Said, verdict_text};
use crate::markdown::{Pages, banner, table};
use stock_check::classes::Class;

const SOURCE: &str = "book/data/demo.json and book/data/chaos.json";

/// `checking.md`, when the reference run's reports hold histories.
pub fn pages(data: &Data, pages: &mut Pages) {
    // (where, strategy, its history's verdict)
    let mut runs: Vec<(String, String, &Judged)> = Vec::new();
    if let Some(demo) = &data.demo {
        for row in &demo.results {
            if let Some(judged) = &row.history {
                runs.push((
                    format!("demo, {}", row.section),
                    row.strategy.clone(),
                    judged,
                ));
            }
        }
    }
    if let Some(chaos) = &data.chaos {
        for cell in &chaos.parts.faults.cells {
            if let Some(judged) = &cell.history {
                let name = crate::chaos::cell_name(&cell.strategy, cell.fencing);
                runs.push((format!("chaos, {}", cell.scenario.id()), name, judged));
            }
        }
    }
    if runs.is_empty() {
        return;
    }
    let mut page = banner(SOURCE);
    let count = |said: Said| runs.iter().filter(|r| r.2.verdict == said).count();
    let longest = runs
        .iter()
        .max_by(|a, b| a.2.check_ms.total_cmp(&b.2.check_ms))
        .expect("a run");
    // Unobserved histories named only where there are some.
    let unobserved = match count(Said::Unobserved) {
        0 => String::new(),
        n => format!(", {n} unobserved (no read and no refusal could contradict their answers)"),
    };
    page.push_str(&format!(
        "{} histories checked: {} linearizable, {} not, {} undecided{unobserved}. The longest check took {:.0} ms ({} operations: {}, {}).\n\n",
        runs.len(),
        count(Said::Linearizable),
        count(Said::NotLinearizable),
        count(Said::Undecided),
        longest.2.check_ms,
        longest.2.operations,
        longest.0,
        longest.1,
    ));
    let shown: Vec<Vec<String>> = runs
        .iter()
        .filter(|r| !r.2.anomalies.is_empty() || !r.2.is_linearizable())
        .map(|(at, strategy, judged)| {
            vec![
                at.clone(),
                strategy.clone(),
                verdict_text(Some(judged)).to_string(),
                judged.anomalies_text(),
            ]
        })
        .collect();
    page.push_str("The runs whose history shows an anomaly or is not plainly linearizable (every other one is linearizable and shows none):\n\n");
    page.push_str(&table(
        &["run", "strategy", "history", "anomalies (count)"],
        &shown,
    ));
    page.push_str("\nEach class, and the first example the reference run gave of it:\n\n");
    let examples: Vec<Vec<String>> = Class::ALL
        .iter()
        .map(|class| {
            let first = runs.iter().find_map(|(at, strategy, judged)| {
                let found = judged.anomalies.iter().find(|f| f.class == class.name())?;
                Some(format!("{at}, {strategy}: {}", found.says))
            });
            vec![
                class.name().to_string(),
                first.unwrap_or_else(|| "not seen in the reference run".to_string()),
            ]
        })
        .collect();
    page.push_str(&table(&["class", "first seen"], &examples));
    pages.insert("checking.md".to_string(), page);
}
