//! The fault grid (`book/data/chaos.json`, its `faults` part, [`ChaosReport`]): a
//! summary, one page per scenario with its cells, and the cell rows and reasons the
//! strategy pages reuse.

use crate::chaos::{Cell, ChaosReport};
use crate::markdown::{Facts, Pages, banner, linked, num, table};
use std::fmt::Write as _;
use stock_wire::chaos::Scenario;

const SOURCE: &str = "book/data/chaos.json";

/// The book chapter that shows `scenario`'s cells: the faults that decide which lock
/// to trust in "Faults and fencing" (a paused holder, the fence alone, RedLock's
/// nodes and clock, a leader killed, a failover, replication lag); the rest of the
/// grid in "More faults".
pub fn chapter(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::HolderKilled
        | Scenario::RedisRestart
        | Scenario::LockPartition
        | Scenario::AmbiguousCommit
        | Scenario::RedisFailoverWait
        | Scenario::LockDelayShortPause
        | Scenario::LockDelayLongPause
        | Scenario::RedisKilledEverySec
        | Scenario::RedisKilledAlways
        | Scenario::RedisKilledNoPersistence
        | Scenario::MistakeLockInsideTransaction
        | Scenario::MistakeReleaseBeforeCommit
        | Scenario::MistakeSetnxThenExpire
        | Scenario::MistakeGetThenDel
        | Scenario::MistakePersistentNode
        | Scenario::MistakeNoGuard
        | Scenario::RedisClusterFailover
        | Scenario::RedisClusterFailoverWait
        | Scenario::RedisClusterReshard => "faults-more.md",
        Scenario::PausePastLease
        | Scenario::FenceAlone
        | Scenario::RedlockMinorityPaused
        | Scenario::RedlockMajorityPaused
        | Scenario::ZkLeaderKilled
        | Scenario::EtcdLeaderKilled
        | Scenario::RedisFailover
        | Scenario::RedlockClockJump
        | Scenario::ReplicaLag
        | Scenario::ReplicaLagPrimaryReads => "faults.md",
    }
}

/// `scenario`'s section in its chapter: `faults.md#holder-killed`.
pub fn section_link(scenario: Scenario) -> String {
    format!("{}#{}", chapter(scenario), scenario.id())
}

/// The summary and one page per scenario.
pub fn pages(faults: &ChaosReport, pages: &mut Pages, facts: &mut Facts) {
    let cells = &faults.cells;
    let expected = cells.iter().filter(|c| c.as_expected).count();
    facts.add("chaos-cells", cells.len().to_string());
    facts.add("chaos-as-expected", expected.to_string());
    facts.add("chaos-seconds", num(faults.seconds));
    // Each scenario with its cells.
    let scenarios: Vec<(&crate::chaos::ScenarioInfo, Vec<&Cell>)> = faults
        .scenarios
        .iter()
        .map(|s| {
            (
                s,
                cells.iter().filter(|c| c.scenario.id() == s.id).collect(),
            )
        })
        .collect();
    let mut summary = banner(SOURCE);
    let _ = writeln!(
        summary,
        "*{} cells in {} s, {} as expected.*\n",
        cells.len(),
        num(faults.seconds),
        expected
    );
    let body: Vec<Vec<String>> = scenarios
        .iter()
        .map(|(s, mine)| {
            let title = match mine.first() {
                Some(c) => format!("[{}]({})", s.title, section_link(c.scenario)),
                None => s.title.clone(),
            };
            vec![
                s.number.to_string(),
                title,
                mine.len().to_string(),
                mine.iter().filter(|c| c.as_expected).count().to_string(),
            ]
        })
        .collect();
    summary.push_str(&table(&[">#", "scenario", ">cells", ">as expected"], &body));
    pages.insert("chaos/summary.md".to_string(), summary);
    for (s, mine) in &scenarios {
        let mut page = banner(SOURCE);
        let _ = writeln!(page, "<a id=\"{}\"></a>\n\n*{}*\n", s.id, s.how);
        let body: Vec<Vec<String>> = mine.iter().map(|c| cell_row(c, true)).collect();
        page.push_str(&table(HEADERS, &body));
        let labelled: Vec<(String, &Cell)> = mine
            .iter()
            .map(|c| (format!("`{}`", c.strategy), *c))
            .collect();
        page.push_str(&reasons(&labelled));
        pages.insert(format!("chaos/{}.md", s.id), page);
    }
}

/// The columns of [`cell_row`].
pub const HEADERS: &[&str] = &[
    "strategy",
    "fenced",
    "verdict",
    "history",
    "expected history",
    ">sold",
    ">lost",
    ">beyond",
    ">missing",
    ">refused",
    ">no sale for ms",
];

/// How a cell is told apart in the list of reasons under its table.
fn fencing_label(c: &Cell) -> String {
    match super::fencing_label(c.fencing) {
        "" => String::new(),
        label => format!(", {label}"),
    }
}

/// The runner's one-sentence reason for each cell, as a list under the table (in a
/// column, they made every row a page tall).
pub fn reasons(cells: &[(String, &Cell)]) -> String {
    let mut out = String::from("\n");
    for (label, c) in cells {
        let _ = writeln!(out, "- **{label}{}**: {}", fencing_label(c), c.why);
    }
    out
}

/// A cell's row under [`HEADERS`], its strategy linked to its chapter or not.
pub fn cell_row(c: &Cell, link: bool) -> Vec<String> {
    let expected: Vec<&str> = c.expected.iter().map(|v| v.id()).collect();
    vec![
        if link {
            linked(&c.strategy)
        } else {
            format!("`{}`", c.strategy)
        },
        match c.fencing {
            Some(true) => "yes".to_string(),
            Some(false) => "no".to_string(),
            None => "–".to_string(),
        },
        format!(
            "{}{}",
            c.verdict.id(),
            if c.as_expected {
                String::new()
            } else {
                format!(" (**expected {}**)", expected.join(" or "))
            }
        ),
        c.history
            .as_ref()
            .map_or("–", |h| h.verdict.text())
            .to_string(),
        c.expected_history.text().to_string(),
        c.sold.to_string(),
        c.lost_updates.to_string(),
        c.beyond_stock.to_string(),
        c.missing_acknowledged.to_string(),
        c.refused.to_string(),
        num(c.longest_gap_ms),
    ]
}
