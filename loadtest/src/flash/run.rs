//! The flash sale: one hot product at high concurrency, a sell-out, the split stock by
//! number of buckets, and what limits each strategy there.

use crate::catalogue::Catalogue;
use crate::chapter::{Chapter, Read};
use crate::demo::Stage;
use crate::flash::{FlashOptions, FlashPart, FlashSale};
use crate::markdown::rows::time_split_page;
use crate::markdown::{Facts, Pages};
use crate::plan::first_product;
use crate::report::{Columns, Report, Row, print_table, section};
use crate::section::Section;
use stock_wire::Trait;

/// The flash-sale section; its measurements beyond rows once it ran.
#[derive(Default)]
pub struct Flash {
    sale: Option<FlashSale>,
}

impl Chapter for Flash {
    type Stage = Stage;
    type Part = FlashPart;
    const KEY: Option<&'static str> = Some(super::KEY);

    fn title(&self, _stage: &Stage) -> String {
        "the flash sale: one hot product at high concurrency, a sell-out, buckets".into()
    }

    async fn run(&mut self, stage: &Stage, _before: &[Row]) -> anyhow::Result<Vec<Row>> {
        let args = &stage.args;
        let runner = stage.runner_on(&stage.plain);
        let chosen = Catalogue(
            stage
                .catalogue
                .0
                .iter()
                .filter(|c| stage.wanted(&c.name))
                .cloned()
                .collect(),
        );
        // The CPU of the instances, MariaDB and the first Redis is measured per sale.
        let mut processes: Vec<(String, u32)> = stage
            .plain
            .iter()
            .map(|i| (i.process.name().to_string(), i.process.pid()))
            .collect();
        processes.extend(
            stage
                .stack
                .pids()
                .into_iter()
                .filter(|(name, _)| name == "mariadb" || name == "redis-1"),
        );
        let options = FlashOptions {
            seconds: stage.seconds,
            rounds: args.rounds,
            other_rounds: if args.full { args.rounds } else { 1 },
            concurrency: args.flash_concurrency,
            rate: args.flash_rate,
            ..FlashOptions::default()
        };
        let sale = crate::flash::run(&runner, &chosen, options, &processes, |n| {
            first_product(4, n)
        })
        .await?;
        let rows = sale.rows.clone();
        self.sale = Some(sale);
        Ok(rows)
    }

    fn print(&self, stage: &Stage, rows: &[Row]) {
        let Some(sale) = &self.sale else { return };
        print_table(
            &format!(
                "Flash sale: one hot product, {} in flight over 2 instances, {} s per strategy (stock never the limit)",
                stage.args.flash_concurrency, stage.seconds
            ),
            &section(rows, &Section::FlashSale),
            Columns::Throughput,
        );
        print_limits(stage, sale);
        print_sell_outs(sale);
        let splits = stage
            .catalogue
            .first_with(Trait::SplitsStock)
            .map(|c| c.name.as_str());
        for (k, r) in &sale.buckets {
            println!(
                "{} with {k:>3} bucket(s): {} sales/s",
                splits.unwrap_or("?"),
                r.text()
            );
        }
    }

    fn report(&self, report: &mut Report) {
        if let Some(sale) = &self.sale {
            report.claims.extend(sale.claims());
            report.parts.push(sale.part());
        }
    }

    fn draws(section: &Section) -> bool {
        matches!(
            section,
            Section::FlashSale | Section::SellOut | Section::Buckets
        )
    }

    fn html(report: &Read<'_, FlashPart>) -> String {
        report.part.map_or(String::new(), |part| {
            super::html::html(part, report.results, report.strategies)
        })
    }

    /// Its pages (the throughput table, the sell-out), and where the time goes.
    fn pages(report: &Read<'_, FlashPart>, pages: &mut Pages, facts: &mut Facts) {
        if let Some(part) = report.part {
            super::page::pages(part, report.results, pages, facts);
        }
        let rows = report.section(&Section::FlashSale);
        if let Some(page) = time_split_page(crate::demo::SOURCE, &rows, "the flash sale") {
            pages.insert(format!("demo/time-split-{}.md", Section::FlashSale), page);
        }
    }
}

/// What limits each strategy in the flash sale: its sales beside the reference's, the
/// statements and transactions per sale, the CPU per process.
fn print_limits(stage: &Stage, sale: &FlashSale) {
    let reference = stage.reference();
    for l in &sale.limits {
        let cpu: Vec<String> = l
            .cpu_percent
            .iter()
            .map(|(name, p)| format!("{name} {p:.0}%"))
            .collect();
        println!(
            "  {:<12} {} sales/s{}, {:.2} statements/sale, {:.1} sales/transaction; CPU: {}",
            l.strategy,
            l.sales.text(),
            l.ratio()
                .map_or(String::new(), |r| format!(" ({} {reference})", r.text())),
            l.statements_per_sale,
            l.sales_per_transaction,
            cpu.join(", ")
        );
    }
    println!(
        "  (statements/sale: MariaDB's Questions over the run per sale; CPU: percent of one core per process)"
    );
}

/// Each sell-out: what was sold and refused, and whether it came out exact.
fn print_sell_outs(sale: &FlashSale) {
    let sell_rows = sale.rows.iter().filter(|r| r.section == Section::SellOut);
    for (s, row) in sale.sell_outs.iter().zip(sell_rows) {
        println!(
            "sell-out {:<12} stock {}{} / {} buyers: {} sold, {} refused ({} by the sold-out fast path), {} other, {:.0} answers/s, overtaken per instance {:?}: {}; history {}",
            s.strategy,
            s.stock,
            s.restock_text(),
            s.buyers,
            s.sold,
            s.refused,
            s.refused_by_fast_path,
            s.other,
            s.answers_per_second,
            s.overtaken,
            if s.exact { "exact" } else { "NOT EXACT" },
            row.history_text(),
        );
    }
}
