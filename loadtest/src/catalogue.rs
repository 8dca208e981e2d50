//! The strategies as the service describes them (`GET /strategies`): order, family,
//! colour and explanation come from there, so the report, the sweep and the fault
//! grid never list strategies by hand. A strategy added to the service's registry
//! shows up here, in its own colour, with nothing to change in `loadtest`.

use plotters::style::RGBColor;
use serde::{Deserialize, Serialize};
use stock_wire::{ChaosCell, Family, Trait};

/// One entry of `GET /strategies`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub name: String,
    pub family: Family,
    pub description: String,
    pub when_to_use: String,
    pub explanation: String,
    pub backend: String,
    pub safe_across_instances: bool,
    pub fencing: String,
    /// Its place in the service's teaching order.
    pub order: usize,
    /// `#rrggbb`: its colour in every chart.
    pub colour: String,
    /// Its file (a folder's `mod.rs` for a strategy of several files).
    #[serde(default)]
    pub source: String,
    /// What the load test may ask it for.
    #[serde(default)]
    pub traits: Vec<Trait>,
    /// The fault experiments it declares.
    #[serde(default, deserialize_with = "known_cells")]
    pub chaos: Vec<ChaosCell>,
}

/// The cells of a card, leaving out any this version cannot read (said once): a
/// report written before a verdict was renamed (`lost`, since split into `erased`
/// and `missing`) still loads, and its other figures still render. A live service
/// and this `loadtest` are built from the same `stock-wire`, so its cards always
/// read whole.
fn known_cells<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ChaosCell>, D::Error> {
    let raw: Vec<serde_json::Value> = Deserialize::deserialize(d)?;
    let mut cells = Vec::with_capacity(raw.len());
    for value in raw {
        match ChaosCell::deserialize(&value) {
            Ok(cell) => cells.push(cell),
            Err(e) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| {
                    eprintln!("loadtest: declared fault cells this version cannot read are left out (first: {e}: {value})");
                });
            }
        }
    }
    Ok(cells)
}

impl Card {
    /// Whether the strategy declares `t`.
    pub fn has(&self, t: Trait) -> bool {
        self.traits.contains(&t)
    }
}

/// Every strategy a service serves, in its order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Catalogue(pub Vec<Card>);

/// The colour of a name the catalogue does not know (e.g. the baseline row).
const OTHER: RGBColor = RGBColor(0, 0, 0);

impl Catalogue {
    /// Asks the service at `base` (`http://host:port`).
    pub async fn fetch(client: &reqwest::Client, base: &str) -> anyhow::Result<Catalogue> {
        let cards: Vec<Card> = client
            .get(format!("{base}/strategies"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(Catalogue(cards))
    }

    /// The strategies that declare `t`, in order.
    pub fn with(&self, t: Trait) -> Vec<&Card> {
        self.0.iter().filter(|c| c.has(t)).collect()
    }

    /// The first strategy that declares `t` (e.g. the conditional-update reference
    /// the others are compared with).
    pub fn first_with(&self, t: Trait) -> Option<&Card> {
        self.0.iter().find(|c| c.has(t))
    }

    /// Whether `strategy` declares `t`.
    pub fn has(&self, strategy: &str, t: Trait) -> bool {
        self.get(strategy).is_some_and(|c| c.has(t))
    }

    pub fn get(&self, name: &str) -> Option<&Card> {
        self.0.iter().find(|c| c.name == name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|c| c.name.as_str())
    }

    /// Each name with whether the strategy is safe across instances (what a run's
    /// expectation follows from).
    pub fn safety(&self) -> Vec<(String, bool)> {
        self.0
            .iter()
            .map(|c| (c.name.clone(), c.safe_across_instances))
            .collect()
    }

    /// `name`'s chart colour.
    pub fn colour(&self, name: &str) -> RGBColor {
        self.get(name)
            .and_then(|c| parse_hex(&c.colour))
            .unwrap_or(OTHER)
    }

    /// Where `name` sorts: its order, names the catalogue does not know last.
    pub fn rank(&self, name: &str) -> usize {
        self.get(name).map_or(usize::MAX, |c| c.order)
    }

    /// `names`, sorted by the catalogue's order (unknown names last, as given).
    pub fn sorted<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_by_key(|n| self.rank(n));
        names
    }
}

fn parse_hex(colour: &str) -> Option<RGBColor> {
    let hex = colour.strip_prefix('#').filter(|h| h.len() == 6)?;
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
    Some(RGBColor(byte(0)?, byte(2)?, byte(4)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(name: &str, order: usize, colour: &str) -> Card {
        Card {
            name: name.into(),
            family: Family::Control,
            description: String::new(),
            when_to_use: String::new(),
            explanation: String::new(),
            backend: "database".into(),
            safe_across_instances: true,
            fencing: "none".into(),
            order,
            colour: colour.into(),
            source: String::new(),
            traits: Vec::new(),
            chaos: Vec::new(),
        }
    }

    /// Colours and order come from the cards; unknown names are black and last.
    #[test]
    fn colours_and_order_come_from_the_cards() {
        let c = Catalogue(vec![card("b", 0, "#1f77b4"), card("a", 1, "#ff7f0e")]);
        assert_eq!(c.colour("b"), RGBColor(0x1f, 0x77, 0xb4));
        assert_eq!(c.colour("a"), RGBColor(0xff, 0x7f, 0x0e));
        assert_eq!(c.colour("baseline"), OTHER);
        assert_eq!(c.sorted(["x", "a", "b"]), vec!["b", "a", "x"]);
    }
}
