//! A tiny parser for the Prometheus / OpenMetrics text exposition format, enough to assert on
//! gate64's `/metrics` in tests. Comments (`# HELP`, `# TYPE`, `# EOF`) and timestamps are
//! ignored; label values may contain `\"`, `\\` and `\n` escapes.

use std::collections::BTreeMap;
use std::fmt;

/// One sample: metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name as exposed, e.g. `gate64_drops_total`.
    pub name: String,
    /// Label pairs, sorted by name.
    pub labels: BTreeMap<String, String>,
    /// The value (`NaN`, `+Inf` and `-Inf` included).
    pub value: f64,
}

/// All samples of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    samples: Vec<Sample>,
}

impl Metrics {
    /// Parses exposition text; lines that do not parse are skipped.
    pub fn parse(text: &str) -> Metrics {
        Metrics {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// Every sample, in exposition order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Samples named `name` whose labels include all of `labels` (other labels may exist).
    pub fn series<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the single sample matching `name` and `labels`; `None` if there is no
    /// match or more than one.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut it = self.series(name, labels);
        let first = it.next()?;
        it.next().is_none().then_some(first.value)
    }

    /// The sum over all samples matching `name` and `labels` (0 when none match).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name, labels).map(|s| s.value).sum()
    }

    /// Whether any sample is named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// `(label value, sample value)` for every sample of `name`, keyed by `label`, with
    /// non-zero values only, sorted by label value. Handy for `gate64_drops_total{reason}`.
    pub fn nonzero_by(&self, name: &str, label: &str) -> Vec<(String, f64)> {
        let mut by: BTreeMap<String, f64> = BTreeMap::new();
        for s in self.series(name, &[]) {
            if s.value != 0.0 {
                let key = s.labels.get(label).cloned().unwrap_or_default();
                *by.entry(key).or_default() += s.value;
            }
        }
        by.into_iter().collect()
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.labels.is_empty() {
            let pairs: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            write!(f, "{{{}}}", pairs.join(","))?;
        }
        write!(f, " {}", self.value)
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(body)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` (the opening brace already consumed); returns the labels and the
/// text after the closing brace.
fn parse_labels(mut s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = s.split_once('=')?;
        let mut chars = after.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.insert(key.trim().to_owned(), value);
        s = &after[1 + end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP gate64_clients Remote clients.
# TYPE gate64_clients gauge
gate64_clients{transport="teredo"} 1
# TYPE gate64_drops_total counter
gate64_drops_total{reason="truncated"} 12
gate64_drops_total{reason="malformed"} 0
gate64_drops_total{reason="spoofed_source"} 3.0
gate64_bytes_total{side="corpnet",direction="tx"} 4096
gate64_bytes_total{side="corpnet",direction="rx"} 100 1700000000000
gate64_teredo_qualifications_total 2
gate64_build_info{version="0.1.0 \"x\""} 1
# EOF
"#;

    #[test]
    fn parses_labels_and_values() {
        let m = Metrics::parse(TEXT);
        assert_eq!(m.samples().len(), 8);
        assert_eq!(
            m.get("gate64_clients", &[("transport", "teredo")]),
            Some(1.0)
        );
        assert_eq!(
            m.get(
                "gate64_bytes_total",
                &[("side", "corpnet"), ("direction", "tx")]
            ),
            Some(4096.0)
        );
        assert_eq!(
            m.get("gate64_bytes_total", &[("side", "corpnet")]),
            None,
            "two matches"
        );
        assert_eq!(m.sum("gate64_bytes_total", &[("side", "corpnet")]), 4196.0);
        assert_eq!(m.get("gate64_teredo_qualifications_total", &[]), Some(2.0));
        assert_eq!(
            m.get("gate64_build_info", &[("version", "0.1.0 \"x\"")]),
            Some(1.0)
        );
        assert!(m.has("gate64_drops_total"));
        assert!(!m.has("gate64_nope"));
    }

    #[test]
    fn nonzero_by_reason() {
        let m = Metrics::parse(TEXT);
        assert_eq!(
            m.nonzero_by("gate64_drops_total", "reason"),
            vec![
                ("spoofed_source".to_owned(), 3.0),
                ("truncated".to_owned(), 12.0)
            ]
        );
    }

    #[test]
    fn display_round_trips() {
        let m = Metrics::parse(TEXT);
        let s = m.series("gate64_clients", &[]).next().unwrap();
        assert_eq!(s.to_string(), "gate64_clients{transport=\"teredo\"} 1");
        assert_eq!(Metrics::parse(&s.to_string()).samples()[0], *s);
    }
}
