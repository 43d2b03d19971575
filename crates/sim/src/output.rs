//! Experiment reports: the data model and the writer behind
//! `sluice sim run <experiment> --out DIR`.
//!
//! An experiment builds a [`Report`] (title, headline, what the paper
//! reports, parameters, tables, plots, notes, event count) and
//! [`Report::write`] turns it into `DIR/<experiment>.md`,
//! `DIR/<experiment>.json` and one PNG per [`Plot`].
//!
//! The headline is a list of [`Finding`]s: one number of this run beside
//! the paper's number for the same thing, each labelled as whose it is
//! ("paper: 1.15×; this run: 0.98×"). An experiment fills `run` with the
//! same formatted value it puts in its table (the sim tests check that every
//! headline value is a cell of its report), so a headline cannot quote the
//! paper as the run's result.
//!
//! Plots whose x is a count that doubles (processes, threads, buffer sizes)
//! use a log₂ x axis ([`XScale::Log2`]) with a tick at each power of two.
//!
//! Everything is deterministic: the same report gives byte-identical
//! Markdown, JSON and PNG files (no timestamps, no wall-clock figures,
//! floats formatted by `serde_json`'s shortest round-trip form, pixels
//! drawn by pure-Rust code and encoded by the `png` crate with fixed
//! settings).
//!
//! Plots are rendered with `plotters` into an in-memory RGB buffer. Text is
//! drawn with `ab_glyph` from the font file [`FONT_PATH`] (Debian package
//! `fonts-dejavu-core`), read at run time; if it is missing, writing a plot
//! fails with an error naming the file and the package.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};
use serde::{Deserialize, Serialize};

/// Width of every rendered plot, in pixels.
pub const PLOT_WIDTH: u32 = 800;
/// Height of every rendered plot, in pixels.
pub const PLOT_HEIGHT: u32 = 500;
/// The font used for all plot text (title, axis labels, ticks, legend).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The Debian package that ships [`FONT_PATH`].
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// The family name the font is registered under with `plotters`.
const FONT_FAMILY: &str = "sans-serif";

/// One experiment's results, ready to be written as Markdown, JSON and PNG.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    /// Experiment name, e.g. `"ssdup-fig9"`; also the stem of the `.md` and
    /// `.json` files.
    pub experiment: String,
    /// One-line title.
    pub title: String,
    /// The run's headline numbers, each beside the paper's (shown first,
    /// under the title).
    pub headline: Vec<Finding>,
    /// What the paper reports, one paragraph (shown under the headline,
    /// labelled as the paper's).
    pub paper: String,
    /// Run parameters as name/value pairs (scale, seed, process counts...).
    pub parameters: Vec<(String, String)>,
    /// Result tables, in display order.
    pub tables: Vec<Table>,
    /// Plots, in display order; one PNG each.
    pub plots: Vec<Plot>,
    /// Observations, one paragraph each.
    pub notes: Vec<String>,
    /// Number of simulated events (deterministic).
    pub events: u64,
    /// The paper's claims checked on this run (shown under the headline;
    /// left out of the JSON when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
}

/// A claim of the paper (an ordering, a trend) and whether this run's
/// results bear it out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Check {
    /// The claim, e.g. `"SSDUP+ sends less to the SSD than SSDUP at 32-128
    /// processes"`.
    pub claim: String,
    /// Whether it holds in this run.
    pub holds: bool,
}

/// One headline number: what it is, the paper's value and this run's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Finding {
    /// What is measured, e.g. `"alone: LiU / PVFS2 read throughput"`.
    pub what: String,
    /// The paper's value, as the paper gives it (`"1.15×"`).
    pub paper: String,
    /// This run's value, formatted exactly as in the report's table
    /// (`"0.98×"`).
    pub run: String,
}

impl Finding {
    /// A finding from its three texts.
    pub fn new(what: impl Into<String>, paper: impl Into<String>, run: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            paper: paper.into(),
            run: run.into(),
        }
    }
}

/// A table of preformatted cells.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Table {
    /// Heading shown above the table.
    pub title: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells; a row shorter than the widest is padded with empty
    /// cells.
    pub rows: Vec<Vec<String>>,
}

/// A chart rendered to `DIR/<file_stem>.png`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Plot {
    /// File name without extension, e.g. `"ssdup-fig9-throughput"`.
    pub file_stem: String,
    /// Chart title.
    pub title: String,
    /// X-axis label, with its unit.
    pub x_label: String,
    /// How x is scaled ([`PlotKind::Lines`] only; bars are categories).
    pub x_scale: XScale,
    /// Y-axis label.
    pub y_label: String,
    /// Line chart or grouped bar chart.
    pub kind: PlotKind,
    /// For [`PlotKind::Bars`]: the category labels, in x order. Empty for
    /// [`PlotKind::Lines`].
    pub x_categories: Vec<String>,
    /// The data series, one legend entry each.
    pub series: Vec<Series>,
}

/// How a [`Plot`] draws its series.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotKind {
    /// Numeric x: one line with markers per series.
    Lines,
    /// Categorical x: one group per category, one bar per series.
    Bars,
}

/// The scale of a line plot's x axis.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    /// Evenly spaced values.
    Linear,
    /// log₂ of x, a tick at every power of two in range: for counts that
    /// double from one point to the next (8, 16, ..., 512 processes).
    /// Points with x ≤ 0 are not drawn.
    Log2,
}

/// A named sequence of points.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// `(x, y)` points. For [`PlotKind::Bars`], x is the category index
    /// (`0.0`, `1.0`, ...). Non-finite values are not drawn.
    pub points: Vec<(f64, f64)>,
}

/// Writing a report failed: which file, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputError {
    /// The file or directory being written.
    pub path: PathBuf,
    /// What went wrong.
    pub cause: String,
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing {}: {}", self.path.display(), self.cause)
    }
}

impl std::error::Error for OutputError {}

impl OutputError {
    fn new(path: &Path, cause: impl fmt::Display) -> Self {
        Self {
            path: path.to_path_buf(),
            cause: cause.to_string(),
        }
    }
}

impl Report {
    /// The report as GitHub Markdown: `# title`, the headline (one line
    /// per finding, "paper: …; this run: …"), the checked claims (one line
    /// each, "holds: …" or "does not hold: …"), the paper paragraph, the
    /// parameters as a list, each table with padded columns, an image link
    /// `![title](file_stem.png)` per plot, then the notes.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        md.push_str(&format!("# {}\n\n", one_line(&self.title)));
        if !self.headline.is_empty() {
            md.push_str("This run beside the paper:\n\n");
            for f in &self.headline {
                md.push_str(&format!(
                    "- {}: paper: {}; this run: **{}**\n",
                    one_line(&f.what),
                    one_line(&f.paper),
                    one_line(&f.run)
                ));
            }
            md.push('\n');
        }
        if !self.checks.is_empty() {
            md.push_str("The paper's claims, checked on this run:\n\n");
            for c in &self.checks {
                let verdict = if c.holds { "holds" } else { "does not hold" };
                md.push_str(&format!("- {verdict}: {}\n", one_line(&c.claim)));
            }
            md.push('\n');
        }
        if !self.paper.trim().is_empty() {
            md.push_str(&format!(
                "What the paper reports: {}\n\n",
                self.paper.trim()
            ));
        }
        md.push_str(&format!("Experiment: `{}`\n\n", self.experiment));
        if !self.parameters.is_empty() {
            md.push_str("## Parameters\n\n");
            for (name, value) in &self.parameters {
                md.push_str(&format!("- {}: {}\n", one_line(name), one_line(value)));
            }
            md.push('\n');
        }
        md.push_str(&format!("Simulated events: {}\n\n", self.events));
        for table in &self.tables {
            md.push_str(&format!("## {}\n\n", one_line(&table.title)));
            md.push_str(&table.to_markdown());
            md.push('\n');
        }
        if !self.plots.is_empty() {
            md.push_str("## Plots\n\n");
            for plot in &self.plots {
                md.push_str(&format!(
                    "![{}]({}.png)\n\n",
                    one_line(&plot.title).replace(['[', ']'], ""),
                    plot.file_stem
                ));
            }
        }
        if !self.notes.is_empty() {
            md.push_str("## Notes\n\n");
            for note in &self.notes {
                md.push_str(&format!("{}\n\n", note.trim()));
            }
        }
        // Exactly one trailing newline.
        while md.ends_with("\n\n") {
            md.pop();
        }
        md
    }

    /// The report as pretty-printed JSON (with a trailing newline).
    /// Non-finite floats become `null`.
    pub fn to_json(&self) -> String {
        // INVARIANT: the report holds only strings, numbers, sequences and
        // structs (no maps with non-string keys), which serde_json always
        // serializes.
        let mut json = serde_json::to_string_pretty(self).expect("report serializes to JSON");
        json.push('\n');
        json
    }

    /// Writes `DIR/<experiment>.md`, `DIR/<experiment>.json` and one
    /// `DIR/<file_stem>.png` per plot, creating `dir` (and its parents) if
    /// needed. Returns the paths written, in that order. The error names
    /// the path that could not be written.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
        check_stem(dir, &self.experiment)?;
        for plot in &self.plots {
            check_stem(dir, &plot.file_stem)?;
        }
        std::fs::create_dir_all(dir).map_err(|e| OutputError::new(dir, e))?;
        let mut written = Vec::with_capacity(2 + self.plots.len());
        let md = dir.join(format!("{}.md", self.experiment));
        write_file(&md, self.to_markdown().as_bytes())?;
        written.push(md);
        let json = dir.join(format!("{}.json", self.experiment));
        write_file(&json, self.to_json().as_bytes())?;
        written.push(json);
        for plot in &self.plots {
            let path = dir.join(format!("{}.png", plot.file_stem));
            let bytes = plot.to_png().map_err(|e| OutputError::new(&path, e))?;
            write_file(&path, &bytes)?;
            written.push(path);
        }
        Ok(written)
    }
}

impl Table {
    /// The table as a GitHub Markdown table with padded columns; columns
    /// whose cells are all numbers are right-aligned. `|` in cells is
    /// escaped and newlines become spaces.
    pub fn to_markdown(&self) -> String {
        let ncols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain(std::iter::once(self.headers.len()))
            .max()
            .unwrap_or(0);
        if ncols == 0 {
            return String::new();
        }
        let cell = |row: &[String], i: usize| -> String {
            row.get(i)
                .map(|c| one_line(c).replace('|', "\\|"))
                .unwrap_or_default()
        };
        let header: Vec<String> = (0..ncols).map(|i| cell(&self.headers, i)).collect();
        let body: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| (0..ncols).map(|i| cell(r, i)).collect())
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
        for row in &body {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..ncols)
            .map(|i| {
                let mut cells = body.iter().map(|r| r[i].as_str()).filter(|c| !c.is_empty());
                let mut any = false;
                let all = cells.all(|c| {
                    any = true;
                    is_number(c)
                });
                any && all
            })
            .collect();
        let line = |cells: &[String]| -> String {
            let mut s = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = " ".repeat(widths[i] - c.chars().count());
                if numeric[i] {
                    s.push_str(&format!(" {pad}{c} |"));
                } else {
                    s.push_str(&format!(" {c}{pad} |"));
                }
            }
            s.push('\n');
            s
        };
        let mut md = line(&header);
        md.push('|');
        for (i, w) in widths.iter().enumerate() {
            if numeric[i] {
                md.push_str(&format!(" {}: |", "-".repeat(w - 1)));
            } else {
                md.push_str(&format!(" {} |", "-".repeat(*w)));
            }
        }
        md.push('\n');
        for row in &body {
            md.push_str(&line(row));
        }
        md
    }
}

impl Plot {
    /// Renders the plot as a [`PLOT_WIDTH`]×[`PLOT_HEIGHT`] RGB PNG.
    /// Deterministic: the same plot gives the same bytes. Fails if the font
    /// file [`FONT_PATH`] cannot be loaded or drawing fails.
    pub fn to_png(&self) -> Result<Vec<u8>, String> {
        load_font()?;
        let mut rgb = vec![0u8; PLOT_WIDTH as usize * PLOT_HEIGHT as usize * 3];
        {
            let root =
                BitMapBackend::with_buffer(&mut rgb, (PLOT_WIDTH, PLOT_HEIGHT)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            match self.kind {
                PlotKind::Lines => self.draw_lines(&root),
                PlotKind::Bars => self.draw_bars(&root),
            }
            .map_err(|e| format!("drawing plot {:?}: {e}", self.file_stem))?;
            root.present().map_err(|e| e.to_string())?;
        }
        encode_png(&rgb, PLOT_WIDTH, PLOT_HEIGHT)
    }

    /// Finite points of every series.
    fn finite_points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite())
    }

    /// Y range from 0 (or below, for negative data) up to the largest value
    /// plus headroom at the top for the legend box.
    fn y_range(&self) -> std::ops::Range<f64> {
        let (lo, hi) = self
            .finite_points()
            .fold((0.0f64, 0.0f64), |(lo, hi), (_, y)| (lo.min(y), hi.max(y)));
        let hi = if hi > lo { hi } else { lo + 1.0 };
        // Legend rows are ~22 px each in a plot area of roughly 370 px.
        let legend_px = if self.series.is_empty() {
            0.0
        } else {
            22.0 * self.series.len() as f64 + 16.0
        };
        let reserve = (legend_px / 370.0).min(0.5);
        let top = lo + (hi - lo) * 1.04 / (1.0 - reserve);
        lo..top
    }

    fn draw_lines(&self, root: &Area<'_>) -> Result<(), DrawError> {
        match self.x_scale {
            XScale::Linear => {
                let (x0, x1) = padded(self.finite_points().map(|(x, _)| x));
                self.draw_line_chart(root, RangedCoordf64::from(x0..x1))
            }
            XScale::Log2 => {
                let (x0, x1) = padded(
                    self.finite_points()
                        .filter(|(x, _)| *x > 0.0)
                        .map(|(x, _)| x.log2()),
                );
                self.draw_line_chart(
                    root,
                    Log2Axis {
                        inner: (x0..x1).into(),
                    },
                )
            }
        }
    }

    /// The line chart on the x axis `x_axis` (linear or log₂).
    fn draw_line_chart<X>(&self, root: &Area<'_>, x_axis: X) -> Result<(), DrawError>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let log2 = self.x_scale == XScale::Log2;
        let mut chart = ChartBuilder::on(root)
            .caption(one_line(&self.title), (FONT_FAMILY, 24))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x_axis, self.y_range())?;
        chart
            .configure_mesh()
            .x_desc(one_line(&self.x_label))
            .y_desc(one_line(&self.y_label))
            .axis_desc_style((FONT_FAMILY, 16))
            .label_style((FONT_FAMILY, 13))
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .bold_line_style(RGBColor(200, 200, 200))
            .light_line_style(RGBColor(238, 238, 238))
            .max_light_lines(4)
            .draw()?;
        for (i, series) in self.series.iter().enumerate() {
            let color = color(i);
            let points: Vec<(f64, f64)> = series
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log2 || *x > 0.0))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(one_line(&series.name))
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (20, 0)], color.stroke_width(2))
                        + Marker::new((10, 0), i, color)
                });
            chart.draw_series(points.into_iter().map(|p| Marker::new(p, i, color)))?;
        }
        draw_legend(&mut chart)
    }

    fn draw_bars(&self, root: &Area<'_>) -> Result<(), DrawError> {
        let max_index = self
            .finite_points()
            .map(|(x, _)| x.round())
            .filter(|x| *x >= 0.0)
            .fold(-1.0f64, f64::max);
        let ncat = self
            .x_categories
            .len()
            .max((max_index + 1.0) as usize)
            .max(1);
        let categories: Vec<String> = (0..ncat)
            .map(|i| {
                self.x_categories
                    .get(i)
                    .map(|c| one_line(c))
                    .unwrap_or_else(|| i.to_string())
            })
            .collect();
        let x_range = CategoryAxis {
            n: ncat,
            inner: (-0.5..ncat as f64 - 0.5).into(),
        };
        let label = move |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() < 1e-9 && i >= 0.0 {
                categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut chart = ChartBuilder::on(root)
            .caption(one_line(&self.title), (FONT_FAMILY, 24))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x_range, self.y_range())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(ncat)
            .x_desc(one_line(&self.x_label))
            .y_desc(one_line(&self.y_label))
            .axis_desc_style((FONT_FAMILY, 16))
            .label_style((FONT_FAMILY, 13))
            .x_label_formatter(&label)
            .y_label_formatter(&|v| tick(*v))
            .bold_line_style(RGBColor(200, 200, 200))
            .light_line_style(RGBColor(238, 238, 238))
            .max_light_lines(4)
            .draw()?;
        let nseries = self.series.len().max(1);
        let group = 0.8;
        let width = group / nseries as f64;
        for (j, series) in self.series.iter().enumerate() {
            let color = color(j);
            let bars: Vec<Rectangle<(f64, f64)>> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| {
                    let left = x.round() - group / 2.0 + width * j as f64;
                    // A small gap between neighbouring bars of a group.
                    let gap = width * 0.06;
                    Rectangle::new([(left + gap, 0.0), (left + width - gap, y)], color.filled())
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(one_line(&series.name))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
        }
        draw_legend(&mut chart)
    }
}

/// Draws the series legend in the top-right corner (the y range leaves room
/// for it above the data).
fn draw_legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<(), DrawError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .margin(8)
        .legend_area_size(26)
        .label_font((FONT_FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
}

/// The drawing area of a plot being rendered.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
/// A drawing error of the bitmap backend.
type DrawError = DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;

/// Categorical x axis for bar charts: category `i` is centred on `i`, the
/// axis spans `-0.5..n-0.5` and has one tick per category.
struct CategoryAxis {
    n: usize,
    inner: RangedCoordf64,
}

impl Ranged for CategoryAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }
    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        (0..self.n).map(|i| i as f64).collect()
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// A log₂ x axis: `inner` spans log₂ of the values, and the key points
/// (ticks and grid lines) are the powers of two inside it.
struct Log2Axis {
    inner: RangedCoordf64,
}

impl Ranged for Log2Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(&value.log2(), limit)
    }
    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        log2_ticks(self.inner.range())
    }
    fn range(&self) -> std::ops::Range<f64> {
        let r = self.inner.range();
        r.start.exp2()..r.end.exp2()
    }
}

/// The powers of two whose log₂ lies in `log_range`, in order.
fn log2_ticks(log_range: std::ops::Range<f64>) -> Vec<f64> {
    let first = log_range.start.ceil() as i32;
    let last = log_range.end.floor() as i32;
    (first..=last).map(|k| f64::from(k).exp2()).collect()
}

/// The span of `values` with 3 % padding on each side; `0..1` if there are
/// none, `v-1..v+1` if they are all `v`.
fn padded(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if lo > hi {
        (0.0, 1.0)
    } else if lo == hi {
        (lo - 1.0, hi + 1.0)
    } else {
        let pad = (hi - lo) * 0.03;
        (lo - pad, hi + pad)
    }
}

/// Series colours (Okabe–Ito, readable by colour-blind viewers), cycled.
fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 0, 0),
        RGBColor(240, 228, 66),
    ];
    COLORS[i % COLORS.len()]
}

/// A point marker whose shape depends on the series index: circle,
/// triangle, square, diamond, cycled.
struct Marker<C> {
    pos: C,
    shape: usize,
    color: RGBColor,
}

impl<C> Marker<C> {
    fn new(pos: C, shape: usize, color: RGBColor) -> Self {
        Self { pos, shape, color }
    }
}

impl<'a, C> PointCollection<'a, C> for &'a Marker<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.pos)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for Marker<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _parent_dim: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = points.next() else {
            return Ok(());
        };
        let style = self.color.filled();
        let r = 5;
        match self.shape % 4 {
            0 => backend.draw_circle((x, y), 4, &style, true),
            1 => backend.fill_polygon(
                vec![(x, y - r), (x + r, y + r - 1), (x - r, y + r - 1)],
                &style,
            ),
            2 => backend.draw_rect((x - 4, y - 4), (x + 4, y + 4), &style, true),
            _ => backend.fill_polygon(vec![(x, y - r), (x + r, y), (x, y + r), (x - r, y)], &style),
        }
    }
}

/// Loads [`FONT_PATH`] into `plotters` once per process.
fn load_font() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_PATH).map_err(|e| {
                format!(
                    "cannot read the plot font {FONT_PATH} ({e}); \
                     install it with `apt-get install {FONT_PACKAGE}`"
                )
            })?;
            // The font must live for the rest of the process (plotters keeps
            // a `'static` reference); this runs at most once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes).map_err(|_| {
                format!(
                    "the plot font {FONT_PATH} is not a valid TrueType font; \
                     reinstall it with `apt-get install --reinstall {FONT_PACKAGE}`"
                )
            })
        })
        .clone()
}

/// Encodes an RGB8 buffer as PNG with fixed settings (deterministic).
fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| format!("encoding PNG: {e}"))?;
        writer
            .write_image_data(rgb)
            .map_err(|e| format!("encoding PNG: {e}"))?;
        writer.finish().map_err(|e| format!("encoding PNG: {e}"))?;
    }
    Ok(out)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    std::fs::write(path, bytes).map_err(|e| OutputError::new(path, e))
}

/// A file stem must be a plain, non-empty file name.
fn check_stem(dir: &Path, stem: &str) -> Result<(), OutputError> {
    if stem.is_empty() || stem.contains(['/', '\\']) || stem == "." || stem == ".." {
        return Err(OutputError::new(
            &dir.join(stem),
            format!("{stem:?} is not a plain file name"),
        ));
    }
    Ok(())
}

/// Collapses line breaks so a value stays on one Markdown line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a table cell reads as a number (optionally with a trailing `%`
/// or `x`, e.g. `"12.5"`, `"-3"`, `"40%"`, `"2.1x"`).
fn is_number(cell: &str) -> bool {
    let c = cell
        .strip_suffix('%')
        .or_else(|| cell.strip_suffix('x'))
        .or_else(|| cell.strip_suffix('×'))
        .unwrap_or(cell)
        .trim();
    !c.is_empty() && c.parse::<f64>().is_ok()
}

/// Axis tick label: integers without decimals, other values with up to
/// four significant decimals and trailing zeros trimmed.
fn tick(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if v.abs() >= 1e6 || v.abs() < 1e-3 {
        return format!("{v:.2e}");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(-2.5), "-2.5");
        assert_eq!(tick(1500.0), "1500");
        assert_eq!(tick(2.0e7), "2.00e7");
    }

    #[test]
    fn log2_ticks_are_the_powers_of_two_in_range() {
        let (lo, hi) = padded([8.0f64, 16.0, 512.0].into_iter().map(f64::log2));
        assert_eq!(
            log2_ticks(lo..hi),
            [8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0]
        );
        // A range between two powers has none.
        assert!(log2_ticks(2.2..2.8).is_empty());
        let axis = Log2Axis {
            inner: (lo..hi).into(),
        };
        // Equal ratios are equal distances: 8→16 as long as 256→512.
        let px = |v: f64| axis.map(&v, (0, 1000));
        assert!(((px(16.0) - px(8.0)) - (px(512.0) - px(256.0))).abs() <= 1);
        assert!(
            px(16.0) - px(8.0) > 100,
            "one doubling is a seventh of the axis"
        );
        let range = axis.range();
        assert!(range.start < 8.0 && range.end > 512.0, "{range:?}");
    }

    #[test]
    fn numbers_are_recognised() {
        assert!(is_number("12.5"));
        assert!(is_number("-3"));
        assert!(is_number("40%"));
        assert!(is_number("2.1x"));
        assert!(!is_number("SSD"));
        assert!(!is_number(""));
        assert!(!is_number("%"));
    }

    #[test]
    fn one_line_collapses_breaks() {
        assert_eq!(one_line(" a\nb \r\n c "), "a b c");
    }

    #[test]
    fn numeric_columns_are_right_aligned() {
        let t = Table {
            title: "t".into(),
            headers: vec!["name".into(), "MB/s".into()],
            rows: vec![
                vec!["ssd".into(), "1200.5".into()],
                vec!["hdd".into(), "80".into()],
            ],
        };
        assert_eq!(
            t.to_markdown(),
            "| name |   MB/s |\n| ---- | -----: |\n| ssd  | 1200.5 |\n| hdd  |     80 |\n"
        );
    }

    #[test]
    fn short_rows_are_padded() {
        let t = Table {
            title: "t".into(),
            headers: vec!["a".into()],
            rows: vec![vec!["x".into(), "y".into()], vec![]],
        };
        assert_eq!(
            t.to_markdown(),
            "| a   |     |\n| --- | --- |\n| x   | y   |\n|     |     |\n"
        );
    }

    #[test]
    fn bad_stems_are_rejected() {
        let dir = Path::new("/tmp/out");
        assert!(check_stem(dir, "fig9").is_ok());
        for bad in ["", "a/b", "..", "."] {
            let err = check_stem(dir, bad).unwrap_err();
            assert!(err.to_string().starts_with("writing /tmp/out"), "{err}");
        }
    }

    #[test]
    fn png_encoding_is_deterministic() {
        let rgb: Vec<u8> = (0..4 * 3 * 3).map(|i| (i * 7) as u8).collect();
        let a = encode_png(&rgb, 4, 3).unwrap();
        let b = encode_png(&rgb, 4, 3).unwrap();
        assert_eq!(a, b);
        assert_eq!(&a[..8], b"\x89PNG\r\n\x1a\n");
    }
}
