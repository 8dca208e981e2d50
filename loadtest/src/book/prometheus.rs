//! The metric families of a Prometheus text scrape: name, type, help and label names,
//! for the metrics reference page.
//!
//! Not `prometheus-parse` (0.2): its labels are a `HashMap`, losing the order the page lists them in, and it keeps no family's `# TYPE`.

use std::collections::BTreeMap;

/// One metric family of a scrape: its type, help and label names.
#[derive(Debug, Default, PartialEq)]
pub struct Family {
    pub kind: String,
    pub help: String,
    /// In the order they first appear; a histogram's `le` left out.
    pub labels: Vec<String>,
}

/// The families of a Prometheus text scrape, by name.
pub fn families(scrape: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().help = help.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            out.entry(name.to_string()).or_default().kind = kind.to_string();
        } else if !line.starts_with('#') && !line.is_empty() {
            let metric = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s).filter(|f| out.contains_key(*f)))
                .unwrap_or(metric);
            let Some(entry) = out.get_mut(family) else {
                continue;
            };
            if let Some(labels) = line
                .split_once('{')
                .and_then(|(_, rest)| rest.split_once('}'))
            {
                for pair in labels.0.split(',') {
                    let label = pair.split('=').next().unwrap_or_default().trim();
                    if !label.is_empty()
                        && label != "le"
                        && !entry.labels.iter().any(|l| l == label)
                    {
                        entry.labels.push(label.to_string());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The families of a scrape, with histogram series folded into their family.
    #[test]
    fn families_fold_histogram_series() {
        let scrape = "# HELP x_seconds Time.\n# TYPE x_seconds histogram\n\
                      x_seconds_bucket{strategy=\"a\",le=\"0.1\"} 1\nx_seconds_sum{strategy=\"a\"} 0.1\n\
                      # HELP y_total Count.\n# TYPE y_total counter\ny_total 3\n";
        let all = families(scrape);
        assert_eq!(
            all["x_seconds"],
            Family {
                kind: "histogram".into(),
                help: "Time.".into(),
                labels: vec!["strategy".into()]
            }
        );
        assert!(all["y_total"].labels.is_empty());
        assert_eq!(all.len(), 2);
    }
}
