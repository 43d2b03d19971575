//! The shipped Grafana dashboard (`contrib/grafana/sluice.json`) queries
//! only metrics that exist, as they exist: every `sluice_*` name in every
//! panel's `expr` is in the one metric table (`sluice_daemon::metrics::METRICS`),
//! counters only under `rate`/`increase`, gauges never, and label matchers
//! and `by` clauses name labels (and values) the metric has. That a real
//! mount exports each of them is checked through a mount in
//! `crates/cli/tests/mount_e2e.rs`
//! (`every_metric_the_grafana_dashboard_queries_is_scraped`).

use std::collections::BTreeSet;

use serde_json::Value;
use sluice_daemon::metrics::{names_in_promql, Kind, Metric, METRICS};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../contrib/grafana/sluice.json"
);

/// Labels Prometheus adds at scrape time.
const TARGET_LABELS: &[&str] = &["job", "instance"];

fn dashboard() -> Value {
    let text = std::fs::read_to_string(DASHBOARD).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel, those inside collapsed rows too.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// (panel title, expr) of every query, the template variables' too.
fn exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (
                    title.clone(),
                    t["expr"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
        .collect();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let definition = variable["definition"].as_str().unwrap_or_default();
        out.push((
            format!("variable {}", variable["name"]),
            definition.to_string(),
        ));
    }
    out
}

fn metric(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}

/// The label matchers right after a name (`{key op "value", ...}`), as
/// (key, op, value).
fn matchers(rest: &str) -> Vec<(String, String, String)> {
    let Some(body) = rest.strip_prefix('{') else {
        return Vec::new();
    };
    let body = &body[..body.find('}').expect("unclosed label matchers")];
    body.split(',')
        .filter(|m| !m.trim().is_empty())
        .map(|m| {
            let at = m
                .find(['=', '!'])
                .unwrap_or_else(|| panic!("matcher {m:?}"));
            let (key, rest) = m.split_at(at);
            let op_len = rest.find('"').unwrap_or_else(|| panic!("matcher {m:?}"));
            let value = rest[op_len..].trim().trim_matches('"');
            (
                key.trim().into(),
                rest[..op_len].trim().into(),
                value.into(),
            )
        })
        .collect()
}

/// The labels of every `by (...)` and `without (...)` clause.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for keyword in ["by", "without"] {
        for (at, _) in expr.match_indices(keyword) {
            let before = expr[..at].chars().next_back();
            let rest = expr[at + keyword.len()..].trim_start();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || !rest.starts_with('(') {
                continue;
            }
            let list = &rest[1..rest.find(')').unwrap()];
            out.extend(list.split(',').map(|l| l.trim().to_string()));
        }
    }
    out
}

#[test]
fn the_dashboard_is_an_importable_grafana_10_or_11_dashboard() {
    let d = dashboard();
    let schema = d["schemaVersion"].as_u64().unwrap();
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    let inputs = d["__inputs"].as_array().unwrap();
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let variables: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(variables.contains(&"instance"), "{variables:?}");
    let mut ids = BTreeSet::new();
    for p in panels(&d) {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel id of {title} repeats"
        );
        assert!(
            p["gridPos"]["w"].as_u64().is_some_and(|w| w <= 24),
            "{title}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            let expr = t["expr"].as_str().unwrap();
            assert!(!names_in_promql(expr).is_empty(), "{title}: {expr}");
            // Every query follows the mount selection.
            assert!(expr.contains("instance=~\"$instance\""), "{title}: {expr}");
        }
    }
}

/// What is wrong with one query: a name that is not a sluice metric, a
/// counter outside `rate`/`increase` or a gauge under one, a label the
/// metric does not have, a value its label never takes, a grouping by a
/// label no metric of the query has.
fn problems(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut labels_here: BTreeSet<&str> = TARGET_LABELS.iter().copied().collect();
    for (at, name) in names_in_promql(expr) {
        let Some(m) = metric(name) else {
            out.push(format!("{name} is not a sluice metric"));
            continue;
        };
        let before = expr[..at].trim_end();
        let in_rate = ["rate(", "increase("].iter().any(|f| before.ends_with(f));
        match m.kind {
            Kind::Counter if !in_rate => out.push(format!("counter {name} outside rate()")),
            Kind::Gauge if in_rate => out.push(format!("gauge {name} under rate()")),
            _ => {}
        }
        if let Some(l) = m.labels {
            labels_here.insert(l.key);
        }
        for (key, op, value) in matchers(&expr[at + name.len()..]) {
            if TARGET_LABELS.contains(&key.as_str()) {
                continue;
            }
            match m.labels.filter(|l| l.key == key) {
                None => out.push(format!("{name} has no label {key}")),
                Some(l) if op == "=" && !l.values.contains(&value.as_str()) => {
                    out.push(format!("{name}{{{key}}} is never {value:?}"))
                }
                Some(_) => {}
            }
        }
    }
    for label in grouping_labels(expr) {
        if !labels_here.contains(label.as_str()) {
            out.push(format!("no metric here has the label {label}"));
        }
    }
    out
}

#[test]
fn every_metric_the_dashboard_queries_exists_with_its_type_and_labels() {
    for (title, expr) in exprs(&dashboard()) {
        let problems = problems(&expr);
        assert!(problems.is_empty(), "{title}: {expr}: {problems:?}");
    }
}

/// The panels issue 21 asks for are there.
#[test]
fn the_dashboard_shows_routing_buffering_flushing_errors_liu_and_bbos() {
    let d = dashboard();
    let used: BTreeSet<String> = exprs(&d)
        .iter()
        .flat_map(|(_, e)| names_in_promql(e).into_iter().map(|(_, n)| n.to_string()))
        .collect();
    for name in [
        "sluice_routed_fast_bytes_total",
        "sluice_routed_capacity_bytes_total",
        "sluice_buffered_bytes",
        "sluice_flushed_bytes_total",
        "sluice_regions",
        "sluice_flush_errors_total",
        "sluice_fast_errors_total",
        "sluice_ckpt_errors_total",
        "sluice_stream_random_fraction",
        "sluice_threshold",
        "sluice_liu_lifted_segments",
        "sluice_liu_buffer_hits_total",
        "sluice_ckpt_copy_bytes",
        "sluice_ckpt_restart_opens_total",
    ] {
        assert!(used.contains(name), "the dashboard does not show {name}");
    }
    assert!(
        exprs(&d)
            .iter()
            .any(|(_, e)| e.contains("what=\"catalogue\"")),
        "no panel shows catalogue errors"
    );
}

/// The checks catch what they are meant to.
#[test]
fn the_checks_refuse_bad_queries() {
    let sel = r#"instance=~"$instance""#;
    assert_eq!(
        problems(&format!(
            "sum by (instance, op) (rate(sluice_fuse_requests_total{{{sel}}}[5m]))"
        )),
        Vec::<String>::new()
    );
    for (expr, problem) in [
        (
            format!("rate(sluice_routed_fast_bytes{{{sel}}}[5m])"),
            "sluice_routed_fast_bytes is not a sluice metric",
        ),
        (
            format!("sluice_flushed_bytes_total{{{sel}}}"),
            "counter sluice_flushed_bytes_total outside rate()",
        ),
        (
            format!("rate(sluice_buffered_bytes{{{sel}}}[5m])"),
            "gauge sluice_buffered_bytes under rate()",
        ),
        (
            format!(r#"sluice_regions{{{sel},tier="fast"}}"#),
            "sluice_regions has no label tier",
        ),
        (
            format!(r#"sluice_regions{{{sel},state="busy"}}"#),
            r#"sluice_regions{state} is never "busy""#,
        ),
        (
            format!("sum by (state) (sluice_buffered_bytes{{{sel}}})"),
            "no metric here has the label state",
        ),
    ] {
        assert_eq!(problems(&expr), [problem], "{expr}");
    }
}
