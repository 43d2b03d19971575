//! Report output: Markdown tables, JSON, and the files `Report::write`
//! produces (Markdown, JSON, PNG plots).

use std::path::{Path, PathBuf};

use sluice_sim::output::{
    Check, Finding, OutputError, Plot, PlotKind, Report, Series, Table, XScale, PLOT_HEIGHT,
    PLOT_WIDTH,
};

const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

fn lines_plot() -> Plot {
    Plot {
        file_stem: "demo-throughput".into(),
        title: "Write throughput vs. processes".into(),
        x_label: "processes".into(),
        x_scale: XScale::Log2,
        y_label: "throughput (MB/s)".into(),
        kind: PlotKind::Lines,
        x_categories: vec![],
        series: vec![
            Series {
                name: "HDD only".into(),
                points: vec![(16.0, 310.5), (32.0, 290.0), (64.0, 240.25), (128.0, 180.0)],
            },
            Series {
                name: "SSDUP".into(),
                points: vec![(16.0, 620.0), (32.0, 700.0), (64.0, 710.0), (128.0, 690.0)],
            },
            Series {
                name: "SSD only".into(),
                points: vec![(16.0, 800.0), (32.0, 810.0), (64.0, 805.0), (128.0, 790.0)],
            },
        ],
    }
}

fn bars_plot() -> Plot {
    Plot {
        file_stem: "demo-random".into(),
        title: "Data sent to SSD by pattern".into(),
        x_label: "access pattern".into(),
        x_scale: XScale::Linear,
        y_label: "share of data on SSD (%)".into(),
        kind: PlotKind::Bars,
        x_categories: vec!["sequential".into(), "strided".into(), "random".into()],
        series: vec![
            Series {
                name: "paper".into(),
                points: vec![(0.0, 0.0), (1.0, 45.0), (2.0, 100.0)],
            },
            Series {
                name: "simulated".into(),
                points: vec![(0.0, 1.5), (1.0, 43.75), (2.0, 98.0)],
            },
        ],
    }
}

fn report() -> Report {
    Report {
        experiment: "demo-fig".into(),
        title: "Demo figure".into(),
        headline: vec![Finding::new("SSDUP / HDD only", "2×", "2.00×")],
        paper: "The paper reports that SSDUP doubles throughput.".into(),
        parameters: vec![
            ("scale".into(), "0.01".into()),
            ("seed".into(), "42".into()),
        ],
        tables: vec![Table {
            title: "Throughput".into(),
            headers: vec!["system".into(), "MB/s".into(), "note".into()],
            rows: vec![
                vec!["HDD only".into(), "310.5".into(), "a|b".into()],
                vec!["SSDUP".into(), "620".into(), "".into()],
            ],
        }],
        plots: vec![lines_plot(), bars_plot()],
        notes: vec!["First observation.".into(), "Second observation.".into()],
        events: 123_456_789,
        checks: Vec::new(),
    }
}

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("output-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Width and height from a PNG's IHDR chunk (bytes 16..24, big-endian).
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 24, "PNG too short");
    assert_eq!(&bytes[..8], PNG_SIGNATURE, "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk is IHDR");
    let w = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let h = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    (w, h)
}

#[test]
fn markdown_table_is_aligned_and_escaped() {
    let table = &report().tables[0];
    let md = table.to_markdown();
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(
        lines,
        [
            "| system   |  MB/s | note |",
            "| -------- | ----: | ---- |",
            "| HDD only | 310.5 | a\\|b |",
            "| SSDUP    |   620 |      |",
        ]
    );
    // Every line has the same width and the same number of unescaped pipes.
    let width = lines[0].chars().count();
    for line in &lines {
        assert_eq!(line.chars().count(), width, "{line}");
        assert_eq!(line.replace("\\|", "").matches('|').count(), 4, "{line}");
    }
}

#[test]
fn markdown_has_all_sections() {
    let md = report().to_markdown();
    assert!(
        md.starts_with(
            "# Demo figure\n\nThis run beside the paper:\n\n\
             - SSDUP / HDD only: paper: 2×; this run: **2.00×**\n\n\
             What the paper reports: The paper reports"
        ),
        "{md}"
    );
    assert!(md.contains("- scale: 0.01\n- seed: 42\n"), "{md}");
    assert!(md.contains("123456789"), "{md}");
    assert!(md.contains("## Throughput\n\n| system"), "{md}");
    assert!(md.contains("![Write throughput vs. processes](demo-throughput.png)"));
    assert!(md.contains("![Data sent to SSD by pattern](demo-random.png)"));
    assert!(md.contains("First observation.\n\nSecond observation.\n"));
    assert!(md.ends_with(".\n") && !md.ends_with("\n\n"));
}

/// Checked claims show under the headline, one verdict per line; a report
/// without any shows no such section and its JSON no `checks` key (the
/// reports of experiments that declare no claims are unchanged).
#[test]
fn checked_claims_show_under_the_headline_and_only_when_there_are_some() {
    let mut r = report();
    assert!(!r.to_markdown().contains("claims"));
    assert!(!r.to_json().contains("checks"));
    r.checks = vec![
        Check {
            claim: "SSDUP+ above OrangeFS".into(),
            holds: true,
        },
        Check {
            claim: "SSDUP below SSDUP+".into(),
            holds: false,
        },
    ];
    let md = r.to_markdown();
    assert!(
        md.contains(
            "**2.00×**\n\nThe paper's claims, checked on this run:\n\n\
             - holds: SSDUP+ above OrangeFS\n\
             - does not hold: SSDUP below SSDUP+\n\nWhat the paper reports"
        ),
        "{md}"
    );
    let back: Report = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(back, r);
}

#[test]
fn json_round_trips_the_numbers() {
    let r = report();
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(v["experiment"], "demo-fig");
    assert_eq!(v["events"].as_u64(), Some(123_456_789));
    assert_eq!(v["parameters"][1][0], "seed");
    assert_eq!(v["parameters"][1][1], "42");
    assert_eq!(v["tables"][0]["rows"][0][2], "a|b");
    assert_eq!(v["plots"][0]["kind"], "Lines");
    assert_eq!(v["plots"][1]["kind"], "Bars");
    assert_eq!(v["plots"][1]["x_categories"][2], "random");
    for (i, plot) in r.plots.iter().enumerate() {
        for (j, series) in plot.series.iter().enumerate() {
            let points = &v["plots"][i]["series"][j]["points"];
            assert_eq!(v["plots"][i]["series"][j]["name"], series.name.as_str());
            for (k, &(x, y)) in series.points.iter().enumerate() {
                assert_eq!(points[k][0].as_f64(), Some(x));
                assert_eq!(points[k][1].as_f64(), Some(y));
            }
        }
    }
    // And the whole report deserializes back to itself.
    let back: Report = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(back, r);
}

#[test]
fn same_report_gives_identical_text() {
    assert_eq!(report().to_markdown(), report().to_markdown());
    assert_eq!(report().to_json(), report().to_json());
}

#[test]
fn write_creates_the_directory_and_all_files() {
    let dir = scratch("write").join("nested/deeper");
    let r = report();
    let written = r.write(&dir).unwrap();
    assert_eq!(
        written,
        [
            dir.join("demo-fig.md"),
            dir.join("demo-fig.json"),
            dir.join("demo-throughput.png"),
            dir.join("demo-random.png"),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(&written[0]).unwrap(),
        r.to_markdown()
    );
    assert_eq!(std::fs::read_to_string(&written[1]).unwrap(), r.to_json());
    for png in &written[2..] {
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(png_size(&bytes), (PLOT_WIDTH, PLOT_HEIGHT), "{png:?}");
        assert!(bytes.ends_with(b"IEND\xaeB`\x82"), "{png:?} ends with IEND");
    }
}

#[test]
fn writing_twice_gives_identical_bytes() {
    let (a, b) = (scratch("twice-a"), scratch("twice-b"));
    let r = report();
    let first = r.write(&a).unwrap();
    let second = r.write(&b).unwrap();
    for (x, y) in first.iter().zip(&second) {
        assert_eq!(
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            "{x:?} vs {y:?}"
        );
    }
}

#[test]
fn both_plot_kinds_render() {
    for plot in [lines_plot(), bars_plot()] {
        let a = plot.to_png().unwrap();
        assert_eq!(png_size(&a), (PLOT_WIDTH, PLOT_HEIGHT));
        // Deterministic rendering.
        assert_eq!(a, plot.to_png().unwrap(), "{}", plot.file_stem);
    }
    // A log₂ x axis draws a different picture from a linear one.
    let linear = Plot {
        x_scale: XScale::Linear,
        ..lines_plot()
    };
    assert_ne!(lines_plot().to_png().unwrap(), linear.to_png().unwrap());
    // The two kinds draw different pictures.
    assert_ne!(
        lines_plot().to_png().unwrap(),
        bars_plot().to_png().unwrap()
    );
}

#[test]
fn degenerate_plots_render() {
    let mut empty = lines_plot();
    empty.series.clear();
    let mut one_point = lines_plot();
    one_point.series = vec![Series {
        name: "one".into(),
        points: vec![(3.0, 0.0), (f64::NAN, 1.0)],
    }];
    let mut bars_no_categories = bars_plot();
    bars_no_categories.x_categories.clear();
    let mut negative = lines_plot();
    negative.series[0].points[0].1 = -50.0;
    // A log₂ axis cannot place x ≤ 0: such points are left out.
    let mut log_with_zero = lines_plot();
    log_with_zero.series[0].points[0].0 = 0.0;
    log_with_zero.series[1].points[0].0 = -4.0;
    for plot in [
        empty,
        one_point,
        bars_no_categories,
        negative,
        log_with_zero,
    ] {
        let png = plot.to_png().unwrap();
        assert_eq!(png_size(&png), (PLOT_WIDTH, PLOT_HEIGHT));
    }
}

#[test]
fn unwritable_directory_names_the_path() {
    let base = scratch("unwritable");
    std::fs::create_dir_all(&base).unwrap();
    let file = base.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let dir = file.join("out");
    let err: OutputError = report().write(&dir).unwrap_err();
    assert!(err.path.starts_with(&file), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("writing {}", dir.display())),
        "{msg}"
    );
    assert!(
        msg.len() > format!("writing {}: ", dir.display()).len(),
        "{msg}"
    );
    // It is a std error, usable with `?` into Box<dyn Error>.
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert_eq!(boxed.to_string(), msg);
}

#[test]
fn a_stem_with_a_slash_is_rejected_before_writing() {
    let dir = scratch("bad-stem");
    let mut r = report();
    r.plots[0].file_stem = "../escape".into();
    let err = r.write(&dir).unwrap_err();
    assert!(err.to_string().contains("escape"), "{err}");
    assert!(!dir.exists(), "nothing written");
}
