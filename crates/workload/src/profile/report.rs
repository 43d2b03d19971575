//! The profiler's output: the report on stdout (latencies, the curve, the
//! recommended config keys), its JSON form, and the plots.

use super::*;
use sluice_policy::cost::CostModel;

/// Seconds, at least a nanosecond, so a rate is always finite.
pub(super) fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64().max(1e-9)
}

pub(super) fn progress(message: std::fmt::Arguments<'_>) {
    eprintln!("sluice profile: {message}");
}

/// Decimal megabytes per second, the unit of the paper's B.
pub(super) fn mb_per_s(bytes_per_s: f64) -> f64 {
    bytes_per_s / 1e6
}

/// A latency in the unit that keeps three digits: µs below 1 ms, else ms.
pub(super) fn format_latency(latency: Duration) -> String {
    let micros = latency.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.1} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

pub(super) fn print_report(
    out: &mut impl std::io::Write,
    args: &ProfileArgs,
    backend: &str,
    measurement: &Measurement,
    recommendation: &Recommendation,
) -> std::io::Result<()> {
    let peak = measurement.peak_bytes_per_s;
    let t80 = measurement.latency(0.8);
    writeln!(
        out,
        "sluice profile of {} ({backend}): region {}, seed {}",
        args.dir.display(),
        ByteSize(args.region),
        args.seed
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "B   (sequential read, {} in 4MiB requests)  {:.1} MB/s",
        ByteSize(measurement.sequential_bytes),
        mb_per_s(peak)
    )?;
    writeln!(
        out,
        "t80 ({} 1-byte random reads in {})  {}   (p50 {}, p95 {}, max {})",
        measurement.latencies.len(),
        ByteSize(args.region),
        format_latency(t80),
        format_latency(measurement.latency(0.5)),
        format_latency(measurement.latency(0.95)),
        format_latency(measurement.latency(1.0)),
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "random reads by request size ({} each; gain = next size's MB/s over this one's):",
        args.per_size
    )?;
    writeln!(
        out,
        "  {:>8}  {:>9}  {:>7}  {:>11}  {:>6}",
        "size", "MB/s", "% of B", "ms/request", "gain"
    )?;
    for (i, point) in measurement.curve.iter().enumerate() {
        let gain = measurement.curve.get(i + 1).map_or(String::new(), |next| {
            format!(
                "{:+.0}%",
                (next.bytes_per_s / point.bytes_per_s - 1.0) * 100.0
            )
        });
        writeln!(
            out,
            "  {:>8}  {:>9.1}  {:>6.1}%  {:>11.2}  {:>6}",
            ByteSize(point.request_bytes).to_string(),
            mb_per_s(point.bytes_per_s),
            point.bytes_per_s / peak * 100.0,
            point.request_bytes as f64 / point.bytes_per_s * 1e3,
            gain
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "head    = B × t80 = {:.1} MB/s × {} = {:.3} MB ({}) -> {} (nearest power of two, at least {})",
        mb_per_s(peak),
        format_latency(t80),
        recommendation.head_exact_bytes / 1e6,
        human_bytes(recommendation.head_exact_bytes as u64),
        ByteSize(recommendation.head_bytes),
        ByteSize(HEAD_MIN_BYTES)
    )?;
    writeln!(
        out,
        "body    = knee of the curve (first size whose doubling gains < {:.0}%) -> {}",
        (KNEE_GAIN - 1.0) * 100.0,
        ByteSize(recommendation.body_bytes)
    )?;
    writeln!(
        out,
        "segment = head + body = {}",
        ByteSize(recommendation.segment_bytes())
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "Suggested config: LiU's segments, and the positioning time the `cost` placement \
         policy charges a write that does not continue its file's previous one (the \
         median 1-byte random read, p50; docs/policy.md):"
    )?;
    writeln!(out, "[liu]")?;
    writeln!(out, "head = \"{}\"", ByteSize(recommendation.head_bytes))?;
    writeln!(out, "body = \"{}\"", ByteSize(recommendation.body_bytes))?;
    writeln!(out, "[policy]")?;
    writeln!(out, "cost_seek = \"{}\"", cost_seek(measurement))?;
    let model = cost_model(measurement);
    let bound = model.seek_bound().as_micros();
    if model.may_buffer() {
        writeln!(
            out,
            "# above (1 + cost_hysteresis) x cost_fast_request = {bound} us: `cost` may \
             buffer writes here (docs/policy.md)"
        )
    } else {
        writeln!(
            out,
            "# at most (1 + cost_hysteresis) x cost_fast_request = {bound} us: `cost` never \
             buffers a write here, and the mount serves files by FUSE passthrough \
             (docs/fuse.md)"
        )
    }
}

/// The `cost` model with the measured `cost_seek` and the other keys at
/// their defaults (what a config with only the suggestion gets).
fn cost_model(measurement: &Measurement) -> CostModel {
    CostModel {
        capacity_seek: cost_seek(measurement).0,
        ..CostModel::default()
    }
}

/// `policy.cost_seek` from the measurement: the median positioning time,
/// to the microsecond.
pub(super) fn cost_seek(measurement: &Measurement) -> Span {
    let micros = measurement.latency(0.5).as_micros().max(1);
    Span(Duration::from_micros(
        u64::try_from(micros).unwrap_or(u64::MAX),
    ))
}

pub(super) fn json_report(
    args: &ProfileArgs,
    backend: &str,
    measurement: &Measurement,
    recommendation: &Recommendation,
    warnings: &[String],
) -> serde_json::Value {
    let peak = measurement.peak_bytes_per_s;
    let ms = |fraction: f64| measurement.latency(fraction).as_secs_f64() * 1e3;
    let curve: Vec<serde_json::Value> = measurement
        .curve
        .iter()
        .map(|point| {
            json!({
                "request_bytes": point.request_bytes,
                "reads": point.reads,
                "mb_per_s": mb_per_s(point.bytes_per_s),
                "percent_of_peak": point.bytes_per_s / peak * 100.0,
            })
        })
        .collect();
    json!({
        "dir": args.dir.display().to_string(),
        "device": args.device.name(),
        "backend": backend,
        "region_bytes": args.region,
        "seed": args.seed,
        "sequential": {
            "bytes_read": measurement.sequential_bytes,
            "request_bytes": SEQUENTIAL_REQUEST_BYTES,
            "peak_mb_per_s": mb_per_s(peak),
        },
        "latency": {
            "samples": measurement.latencies.len(),
            "p50_ms": ms(0.5),
            "p80_ms": ms(0.8),
            "p95_ms": ms(0.95),
            "max_ms": ms(1.0),
        },
        "throughput": curve,
        "recommendation": {
            "head_exact_bytes": recommendation.head_exact_bytes,
            "head_bytes": recommendation.head_bytes,
            "body_bytes": recommendation.body_bytes,
            "segment_bytes": recommendation.segment_bytes(),
            "head": ByteSize(recommendation.head_bytes).to_string(),
            "body": ByteSize(recommendation.body_bytes).to_string(),
            "cost_seek": cost_seek(measurement).to_string(),
            "cost_may_buffer": cost_model(measurement).may_buffer(),
        },
        "warnings": warnings,
    })
}

pub(super) fn writeln_json(
    out: &mut impl std::io::Write,
    value: &serde_json::Value,
) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")
}

/// `base` without a trailing `.png`, then `-{suffix}.png`.
pub(super) fn plot_path(base: &Path, suffix: &str) -> PathBuf {
    let stem = if base.extension().is_some_and(|ext| ext == "png") {
        base.with_extension("")
    } else {
        base.to_path_buf()
    };
    let mut name = stem.into_os_string();
    name.push(format!("-{suffix}.png"));
    PathBuf::from(name)
}

/// The latency CDF and the throughput curve as PNGs, drawn by the
/// simulator's plot code.
pub(super) fn write_plots(
    base: &Path,
    measurement: &Measurement,
    args: &ProfileArgs,
) -> Result<Vec<PathBuf>, String> {
    // 51 quantiles (every 2%) draw the CDF without a marker per sample.
    let cdf: Vec<(f64, f64)> = (0..=50)
        .map(|i| {
            let fraction = f64::from(i) / 50.0;
            let latency = percentile(&measurement.latencies, fraction.max(1e-9));
            (latency.as_secs_f64() * 1e3, fraction)
        })
        .collect();
    let latency = Plot {
        file_stem: "latency".to_string(),
        title: format!(
            "Latency of 1-byte random reads in {} ({})",
            ByteSize(args.region),
            args.device.name()
        ),
        x_label: "latency (ms)".to_string(),
        x_scale: XScale::Linear,
        y_label: "fraction of reads".to_string(),
        kind: PlotKind::Lines,
        x_categories: Vec::new(),
        series: vec![Series {
            name: format!("{} reads", measurement.latencies.len()),
            points: cdf,
        }],
    };
    let throughput = Plot {
        file_stem: "throughput".to_string(),
        title: format!(
            "Random-read throughput by request size ({})",
            args.device.name()
        ),
        x_label: "request size".to_string(),
        x_scale: XScale::Linear,
        y_label: "throughput (MB/s)".to_string(),
        kind: PlotKind::Bars,
        x_categories: measurement
            .curve
            .iter()
            .map(|point| ByteSize(point.request_bytes).to_string())
            .collect(),
        series: vec![Series {
            name: format!("{} reads per size", args.per_size),
            points: measurement
                .curve
                .iter()
                .enumerate()
                .map(|(i, point)| (i as f64, mb_per_s(point.bytes_per_s)))
                .collect(),
        }],
    };
    let mut written = Vec::new();
    for plot in [latency, throughput] {
        let path = plot_path(base, &plot.file_stem);
        let bytes = plot
            .to_png()
            .map_err(|e| format!("plotting {}: {e}", path.display()))?;
        std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
