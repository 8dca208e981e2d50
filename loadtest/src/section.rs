//! Which setup a row was measured in: [`Section`], the row's `section`.
//!
//! In the JSON report a section is the text a reader sees (`throughput`, `sweep: 100
//! products, RTT 2 ms`), written by [`Display`](std::fmt::Display) and read back by
//! [`FromStr`]: the reports already written read as before, and the code matches
//! variants, never strings. `loadtest/report.schema.json` lists the same texts.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The setup a row was measured in.
///
/// A mode is a setting's flags (`--max-in-flight 32 ...`): `OverloadCapacity`'s text
/// is read before `Overload`'s, so no mode may be called `capacity` or begin with
/// `sell-out, `.
#[derive(Debug, Clone, PartialEq)]
pub enum Section {
    /// `loadtest demo`: every seller on one hot product, stock never the limit.
    Throughput,
    /// `loadtest demo`: the in-process lock beside the database's locks, on one
    /// instance.
    OneInstance,
    /// `loadtest demo`: the compare-and-set at 4 in flight, beside its throughput row.
    Contention,
    /// `loadtest demo`: every deduction held between read and write, stock that runs
    /// out.
    Held,
    /// `loadtest demo --far-rtt-ms`: the throughput section at this round-trip time
    /// to every server.
    Far { rtt_ms: f64 },
    /// `loadtest demo --durability-cost`: the throughput section again with MariaDB
    /// writing its redo log at COMMIT and fsyncing it once a second, not at every
    /// COMMIT.
    NoFsync,
    /// `loadtest demo`: the flash sale, one hot product at high concurrency.
    FlashSale,
    /// `loadtest demo`: the flash sale's sell-out.
    SellOut,
    /// `loadtest demo`: the split stock by number of buckets.
    Buckets,
    /// `loadtest demo`: a strategy's capacity, measured for the overload section
    /// when no other section measured it.
    OverloadCapacity,
    /// `loadtest demo`: the open loop past capacity in one mode (`no limit`,
    /// `--max-in-flight 32 --reject-hold-ms 0`, ...).
    Overload { mode: String },
    /// `loadtest demo`: the sell-out past capacity in one mode.
    OverloadSellOut { mode: String },
    /// `loadtest sweep`: a layout of `products` products, at a round-trip time with
    /// `--rtt-ms`.
    Sweep {
        products: usize,
        rtt_ms: Option<f64>,
    },
    /// `loadtest sweep --rtt-ms`: a strategy's round trips per request, counted at
    /// concurrency 1 on `path` (`sale` or `refusal`).
    RoundTrips { path: String, rtt_ms: f64 },
    /// `loadtest run`.
    Run,
    /// `loadtest run --rate`: the capacity its open loop is a multiple of.
    RunCapacity,
    /// The test suite's own runs.
    Test,
}

/// A round-trip time as people write it: `0`, `0.5`, `2`.
pub fn ms(rtt: f64) -> String {
    format!("{rtt}")
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Section::Throughput => f.write_str("throughput"),
            Section::OneInstance => f.write_str("one instance"),
            Section::Contention => f.write_str("contention"),
            Section::Held => f.write_str("held"),
            Section::Far { rtt_ms } => write!(f, "throughput, RTT {} ms", ms(*rtt_ms)),
            Section::NoFsync => f.write_str("throughput, no fsync at COMMIT"),
            Section::FlashSale => f.write_str("flash-sale"),
            Section::SellOut => f.write_str("sell-out"),
            Section::Buckets => f.write_str("buckets"),
            Section::OverloadCapacity => f.write_str("overload: capacity"),
            Section::Overload { mode } => write!(f, "overload: {mode}"),
            Section::OverloadSellOut { mode } => write!(f, "overload: sell-out, {mode}"),
            Section::Sweep { products, rtt_ms } => write!(
                f,
                "sweep: {products} product{}{}",
                if *products == 1 { "" } else { "s" },
                rtt_ms.map_or(String::new(), |rtt| format!(", RTT {} ms", ms(rtt)))
            ),
            Section::RoundTrips { path, rtt_ms } => {
                write!(f, "round trips: {path}, RTT {} ms", ms(*rtt_ms))
            }
            Section::Run => f.write_str("run"),
            Section::RunCapacity => f.write_str("run: capacity"),
            Section::Test => f.write_str("test"),
        }
    }
}

/// A section's text that names no section.
#[derive(Debug)]
pub struct UnknownSection(String);

impl fmt::Display for UnknownSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a section: {:?}", self.0)
    }
}

impl std::error::Error for UnknownSection {}

impl FromStr for Section {
    type Err = UnknownSection;

    fn from_str(text: &str) -> Result<Section, UnknownSection> {
        let unknown = || UnknownSection(text.to_string());
        let rtt = |rest: &str| -> Result<f64, UnknownSection> {
            let value = rest.strip_suffix(" ms").ok_or_else(unknown)?;
            value.parse().map_err(|_| unknown())
        };
        Ok(match text {
            "throughput" => Section::Throughput,
            "one instance" => Section::OneInstance,
            "contention" => Section::Contention,
            "held" => Section::Held,
            "throughput, no fsync at COMMIT" => Section::NoFsync,
            "flash-sale" => Section::FlashSale,
            "sell-out" => Section::SellOut,
            "buckets" => Section::Buckets,
            "overload: capacity" => Section::OverloadCapacity,
            "run" => Section::Run,
            "run: capacity" => Section::RunCapacity,
            "test" => Section::Test,
            _ => {
                if let Some(rest) = text.strip_prefix("throughput, RTT ") {
                    Section::Far { rtt_ms: rtt(rest)? }
                } else if let Some(mode) = text.strip_prefix("overload: sell-out, ") {
                    Section::OverloadSellOut { mode: mode.into() }
                } else if let Some(mode) = text.strip_prefix("overload: ") {
                    Section::Overload { mode: mode.into() }
                } else if let Some(rest) = text.strip_prefix("sweep: ") {
                    let (layout, rtt_ms) = match rest.split_once(", RTT ") {
                        Some((layout, at)) => (layout, Some(rtt(at)?)),
                        None => (rest, None),
                    };
                    let count = layout
                        .strip_suffix(" products")
                        .or_else(|| layout.strip_suffix(" product"))
                        .ok_or_else(unknown)?;
                    Section::Sweep {
                        products: count.parse().map_err(|_| unknown())?,
                        rtt_ms,
                    }
                } else if let Some(rest) = text.strip_prefix("round trips: ") {
                    let (path, at) = rest.split_once(", RTT ").ok_or_else(unknown)?;
                    Section::RoundTrips {
                        path: path.into(),
                        rtt_ms: rtt(at)?,
                    }
                } else {
                    return Err(unknown());
                }
            }
        })
    }
}

impl Serialize for Section {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Section {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Section, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of section reads back as itself from its text.
    #[test]
    fn every_section_reads_back_from_its_text() {
        let mode = "--max-in-flight 32 --reject-hold-ms 0".to_string();
        let sections = [
            Section::Throughput,
            Section::OneInstance,
            Section::Contention,
            Section::Held,
            Section::Far { rtt_ms: 2.0 },
            Section::Far { rtt_ms: 0.5 },
            Section::NoFsync,
            Section::FlashSale,
            Section::SellOut,
            Section::Buckets,
            Section::OverloadCapacity,
            Section::Overload { mode: mode.clone() },
            Section::OverloadSellOut { mode },
            Section::Sweep {
                products: 1,
                rtt_ms: None,
            },
            Section::Sweep {
                products: 100,
                rtt_ms: Some(2.0),
            },
            Section::RoundTrips {
                path: "sale".into(),
                rtt_ms: 0.5,
            },
            Section::Run,
            Section::RunCapacity,
            Section::Test,
        ];
        for section in sections {
            let text = section.to_string();
            assert_eq!(text.parse::<Section>().unwrap(), section, "{text}");
            let json = serde_json::to_string(&section).unwrap();
            assert_eq!(json, format!("{text:?}"));
        }
        assert_eq!(
            Section::Far { rtt_ms: 2.0 }.to_string(),
            "throughput, RTT 2 ms"
        );
        assert_eq!(
            Section::Sweep {
                products: 1,
                rtt_ms: None
            }
            .to_string(),
            "sweep: 1 product"
        );
    }

    /// A text that names no section is refused with the text in the error.
    #[test]
    fn an_unknown_text_is_refused() {
        for text in [
            "",
            "thruput",
            "sweep: many products",
            "throughput, RTT x ms",
        ] {
            let error = text.parse::<Section>().unwrap_err();
            assert!(error.to_string().contains(&format!("{text:?}")));
        }
    }
}
