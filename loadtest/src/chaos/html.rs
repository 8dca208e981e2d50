//! The fault grid's part of the HTML report.

use super::*;
use crate::catalogue::Catalogue;
use crate::html::escape;
use std::fmt::Write;

/// A cell's short label for the grid (the colour says the verdict): the number
/// behind it, prefixed with the fencing mode (`on:` / `off:`) where it has one.
fn cell_label(c: &Cell) -> String {
    use CellVerdict::*;
    let detail = match c.verdict {
        Missing if c.double_deducted > 0 => format!("{} double", c.double_deducted),
        Missing => format!("{} missing", c.missing_acknowledged),
        Erased => format!("{} erased", c.lost_updates),
        Refused => format!("{} refused", c.refused),
        Unavailable => format!("no sale {:.0} ms", c.blocked_ms.unwrap_or(c.fault_ms)),
        Safe => match c.blocked_ms {
            Some(b) if b >= 50.0 => format!("safe, waited {b:.0} ms"),
            _ => "safe".to_string(),
        },
    };
    match c.fencing {
        Some(true) => format!("on: {detail}"),
        Some(false) => format!("off: {detail}"),
        None => detail,
    }
}

/// The legend: each verdict in its colour, with what it means.
fn legend() -> String {
    let mut html = String::from("<p>");
    for v in CellVerdict::ALL {
        let _ = write!(
            html,
            "<span class=\"v {id}\" style=\"display:inline\">{id}</span> {} ",
            escape(v.meaning()),
            id = v.id()
        );
    }
    html.push_str(
        "(red: the stock or the ledger is wrong). A red outline marks a cell that did not give an expected verdict, \
         or whose history did not get the checker's verdict expected of it.</p>",
    );
    html
}

/// The "Faults" section: the grid, the lesson, and one sentence per cell.
pub(super) fn faults_section(f: &ChaosReport, strategies: &Catalogue) -> String {
    let mut html = faults_intro(f);
    html.push_str(&grid(f, strategies));
    html.push_str(FENCING_LESSON);
    for s in &f.scenarios {
        html.push_str(&scenario_table(f, s));
    }
    html.push_str(
        "<p><b>blocked</b>: from the fault to the first sale of a request sent after it; <b>max gap</b>: the longest time \
         without a sale; <b>recovery</b>: from the heal to the next sale; <b>failed</b>: transport errors, \
         <code>backend_unavailable</code>, <code>outcome_unknown</code> (requests to a frozen, dead or cut-off instance). \
         Unknown outcomes were retried with the same <code>request_id</code> after the run.</p>",
    );
    html
}

/// The section's heading and how the cells ran (load, fault, leases), with the legend.
fn faults_intro(f: &ChaosReport) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<h2 id=\"faults\">Faults: who stays safe when holders pause, servers crash and sessions expire{distance}</h2>\
         <p>Each cell ran under concurrent load (one product; one buyer on instance A, {w} on instance B, each with a request always in flight) while the fault was made \
         deterministically: a failpoint handshake first tells the runner a request of instance A is exactly between its read \
         and its write, holding its lock; only then is A frozen, killed or cut off. Leases {lease} ms, ZooKeeper sessions \
         {session} ms, ZooKeeper {nodes} node(s); the whole grid took {secs:.0} s.</p>\
         {legend}",
        distance = f.timing.rtt_ms.map_or(String::new(), |rtt| format!(
            " (RTT {rtt} ms to every server)"
        )),
        w = f.timing.workers,
        lease = f.timing.lease_ms,
        session = f.timing.zk_session_ms,
        nodes = f.zk_nodes,
        secs = f.seconds,
        legend = legend(),
    );
    html
}

/// The grid: one row per scenario, one column per strategy that ran a cell, each cell
/// its verdict's colour and label (its sentence on hover).
fn grid(f: &ChaosReport, strategies: &Catalogue) -> String {
    let mut html = String::new();
    let columns: Vec<&str> = strategies
        .names()
        .filter(|s| f.cells.iter().any(|c| c.strategy == *s))
        .collect();
    html.push_str("<table class=\"grid\"><tr><th>scenario</th>");
    for col in &columns {
        let _ = write!(html, "<th>{}</th>", escape(col));
    }
    html.push_str("</tr>");
    for s in &f.scenarios {
        let _ = write!(
            html,
            "<tr><td><b>{}.</b> {}</td>",
            s.number,
            escape(&s.title)
        );
        for col in &columns {
            html.push_str("<td>");
            for c in f
                .cells
                .iter()
                .filter(|c| c.scenario.id() == s.id && c.strategy == *col)
            {
                let _ = write!(
                    html,
                    "<span class=\"v {}{}\" title=\"{}\">{}</span>",
                    c.verdict.id(),
                    if c.as_expected { "" } else { " surprise" },
                    escape(&c.why),
                    escape(&cell_label(c))
                );
            }
            html.push_str("</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

/// The fencing lesson the grid teaches, under it.
const FENCING_LESSON: &str = "<div class=\"lesson\"><p><b>The fencing lesson.</b> A lease lock cannot stop a holder that stops: a GC pause, \
    a SIGSTOP, a partition. When it wakes it does not know its lease ran out, and a write computed from what it read \
    before erases the sales the next holder made (the red cells, fencing off). No lock fixes this by being a better \
    lock: against a paused or cut-off holder RedLock's majority and ZooKeeper's consensus lose updates here like one Redis. What fixes it is a \
    check made by the resource: the write carries the lock's token and the database refuses a token older than the \
    newest it has seen (the blue cells, fencing on). That check is a compare-and-set, so it is safe even with no lock \
    at all (<code>fence-only</code>); what the lock adds is efficiency: it queues buyers so that almost none are \
    refused. Strategies that let the database lock (<code>atomic-sql</code>, <code>pessimistic</code>) or compare \
    (<code>optimistic</code>) never needed a fence: a frozen holder makes the others wait on its row lock, or, holding none (<code>optimistic</code>), only fails its own compare-and-set. \
    The same goes for a lock lost in a Redis failover or to a clock jump on a RedLock node. What a fence cannot \
    fix is the read: it checks who holds the lock, not how old the data is, so a holder that reads from a lagging \
    replica loses updates fenced or not (replica lag), while <code>optimistic</code>'s compare-and-set refuses \
    the stale read and only stops selling.</p></div>";

/// One scenario's heading, how its fault is made, and a table of its cells: their
/// numbers and why each came out as it did.
fn scenario_table(f: &ChaosReport, s: &ScenarioInfo) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<h3 id=\"fault-{id}\">{n}. {title}</h3><p>{how}</p><table class=\"why\"><tr><th>strategy</th><th>verdict</th><th>history</th>\
         <th>expected history</th><th>sold</th><th>refused</th><th>busy</th><th>failed</th><th>lost</th><th>double</th><th>missing</th>\
         <th>blocked ms</th><th>max gap ms</th><th>recovery ms</th><th>why</th></tr>",
        id = s.id,
        n = s.number,
        title = escape(&s.title),
        how = escape(&s.how),
    );
    for c in f.cells.iter().filter(|c| c.scenario.id() == s.id) {
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"{}{}\">{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td></tr>",
            escape(&cell_name(&c.strategy, c.fencing)),
            c.verdict.id(),
            if c.as_expected { "" } else { " surprise" },
            c.verdict.id(),
            crate::html::history_cell(c.history.as_ref()),
            c.expected_history.text(),
            c.succeeded,
            c.refused,
            c.busy,
            c.failed,
            c.lost_updates,
            c.double_deducted,
            c.missing_acknowledged,
            fmt_opt_ms(c.blocked_ms),
            c.longest_gap_ms,
            fmt_opt_ms(c.recovery_ms),
            escape(&c.why),
        );
    }
    html.push_str("</table>");
    html
}
