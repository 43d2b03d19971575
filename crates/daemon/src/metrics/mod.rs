//! A mount's Prometheus metrics. Every metric is declared once, in
//! [`METRICS`] (`sluice_status::metrics`: name, kind, help, label, and how
//! its samples are read from a [`Status`]); [`encode`] hands a
//! [`StatusCollector`] holding the snapshot taken at the scrape to the
//! Prometheus project's client (`prometheus-client`), which writes the
//! OpenMetrics text; [`http`] serves it at `GET /metrics`.
//!
//! Values are never counted here: the [`Status`] snapshot (the one that
//! `sluice status` shows) is their only source.
//!
//! Names: prometheus-client declares a counter family without `_total` and
//! appends it to the samples, so the table's counter names (which end in
//! `_total`, as scraped and as dashboards query them) lose that suffix in
//! the `# HELP`/`# TYPE` lines only.

pub mod http;

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::status::Status;
pub use sluice_status::metrics::{Kind, Labels, Metric, Value, METRICS};

/// The content type of [`encode`]'s text (OpenMetrics 1.0, which
/// Prometheus negotiates since 2.5).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A collector for one scrape: the snapshot taken for it, encoded through
/// [`METRICS`].
#[derive(Debug)]
pub struct StatusCollector(pub Status);

impl Collector for StatusCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for metric in METRICS {
            encode_metric(metric, &self.0, &mut encoder)?;
        }
        Ok(())
    }
}

/// The family name prometheus-client declares: a counter's without the
/// `_total` it appends to the samples.
pub fn family_name(metric: &Metric) -> &'static str {
    match metric.kind {
        // A counter without `_total` would be scraped as `NAME_total`: the
        // table test keeps every counter's name ending in it.
        Kind::Counter => metric.name.strip_suffix("_total").unwrap_or(metric.name),
        Kind::Gauge => metric.name,
    }
}

fn encode_metric(metric: &Metric, status: &Status, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let Some(values) = (metric.read)(status) else {
        return Ok(());
    };
    let metric_type = match metric.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    };
    let mut samples =
        encoder.encode_descriptor(family_name(metric), metric.help, None, metric_type)?;
    match metric.labels {
        None => {
            debug_assert_eq!(values.len(), 1, "{}", metric.name);
            for value in values {
                encode_value(&mut samples, metric.kind, value)?;
            }
        }
        Some(labels) => {
            debug_assert_eq!(values.len(), labels.values.len(), "{}", metric.name);
            for (label_value, value) in labels.values.iter().zip(values) {
                let set = [(labels.key, *label_value)];
                encode_value(&mut samples.encode_family(&set)?, metric.kind, value)?;
            }
        }
    }
    Ok(())
}

fn encode_value(encoder: &mut MetricEncoder, kind: Kind, value: Value) -> fmt::Result {
    match (kind, value) {
        (Kind::Counter, Value::Int(v)) => encoder.encode_counter::<NoLabelSet, _, u64>(&v, None),
        (Kind::Counter, Value::Real(v)) => encoder.encode_counter::<NoLabelSet, _, f64>(&v, None),
        (Kind::Gauge, Value::Int(v)) => encoder.encode_gauge(&v),
        (Kind::Gauge, Value::Real(v)) => encoder.encode_gauge(&v),
    }
}

/// The exposition of one snapshot: OpenMetrics text, `# EOF` last.
pub fn encode(status: Status) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusCollector(status)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The sluice metric names a PromQL expression names, with their byte
/// offsets: each `sluice_` that starts a word outside a quoted string, with
/// the name characters (`[a-z0-9_]`) after it. The Grafana dashboard's
/// tests check them against [`METRICS`] and against a real mount's scrape.
pub fn names_in_promql(expr: &str) -> Vec<(usize, &str)> {
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let name = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_';
    let mut names = Vec::new();
    let (mut i, mut quoted) = (0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                quoted = !quoted;
                i += 1;
            }
            b'\\' if quoted => i += 2,
            _ if !quoted
                && bytes[i..].starts_with(b"sluice_")
                && (i == 0 || !word(bytes[i - 1])) =>
            {
                let len = bytes[i..].iter().take_while(|b| name(b)).count();
                names.push((i, &expr[i..i + len]));
                i += len;
            }
            _ => i += 1,
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use sluice_status::metrics::every_metric_applies as everything_on;

    /// The sample lines of an exposition: (name, labels, value).
    fn samples(text: &str) -> Vec<(String, String, String)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap();
                let (name, labels) = series.split_once('{').unwrap_or((series, ""));
                (
                    name.into(),
                    labels.trim_end_matches('}').into(),
                    value.into(),
                )
            })
            .collect()
    }

    #[test]
    fn every_metric_is_scraped_under_its_declared_name_type_and_labels() {
        let text = encode(everything_on()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let scraped = samples(&text);
        let names: BTreeSet<&str> = scraped.iter().map(|(n, _, _)| n.as_str()).collect();
        let declared: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
        assert_eq!(
            names, declared,
            "scraped names differ from the table:\n{text}"
        );
        for m in METRICS {
            let family = family_name(m);
            // Once each: a name declared twice would be scraped twice.
            assert_eq!(
                text.matches(&format!("# HELP {family} {}\n", m.help))
                    .count(),
                1,
                "{}",
                m.name
            );
            assert_eq!(
                text.matches(&format!("# TYPE {family} {}\n", m.kind.name()))
                    .count(),
                1,
                "{}",
                m.name
            );
            let labels: Vec<&str> = scraped
                .iter()
                .filter(|(n, _, _)| n == m.name)
                .map(|(_, l, _)| l.as_str())
                .collect();
            let expected: Vec<String> = match m.labels {
                None => vec![String::new()],
                Some(l) => l
                    .values
                    .iter()
                    .map(|v| format!("{}=\"{v}\"", l.key))
                    .collect(),
            };
            assert_eq!(labels, expected, "{}", m.name);
        }
    }

    #[test]
    fn values_come_from_the_snapshot() {
        let text = encode(everything_on()).unwrap();
        for line in [
            "sluice_routed_fast_bytes_total 100000\n",
            "sluice_buffered_bytes 4096\n",
            "sluice_regions{state=\"full\"} 2\n",
            "sluice_regions{state=\"flushing\"} 0\n",
            "sluice_stream_random_fraction 0.25\n",
            "sluice_route_fast 1\n",
            "sluice_liu_lifts_total 3\n",
            "sluice_liu_locality_total{bucket=\"1.0\"} 11\n",
            "sluice_ckpt_checkpoints_total{placement=\"staged\"} 6\n",
            "sluice_ckpt_throttle_seconds_total 1.5\n",
            "sluice_ckpt_remote_waits_total{result=\"served\"} 3\n",
        ] {
            assert!(text.contains(line), "{line:?} missing:\n{text}");
        }
    }

    #[test]
    fn what_does_not_apply_is_not_exported() {
        let text = encode(Status::default()).unwrap();
        assert!(text.contains("sluice_buffered_bytes 0\n"), "{text}");
        for absent in [
            "sluice_liu_",
            "sluice_ckpt_",
            "sluice_stream_random_fraction",
        ] {
            assert!(!text.contains(absent), "{absent} exported:\n{text}");
        }
    }

    #[test]
    fn names_in_promql_finds_whole_names_only() {
        let expr = r#"sum by (state) (rate(sluice_a_total{job=~"sluice_x"}[5m])) / my_sluice_b + sluice_c"#;
        let names: Vec<&str> = names_in_promql(expr).into_iter().map(|(_, n)| n).collect();
        assert_eq!(names, ["sluice_a_total", "sluice_c"]);
    }
}
