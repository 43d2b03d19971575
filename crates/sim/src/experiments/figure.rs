//! A figure as data: the systems it compares, the values it sweeps, a
//! function that builds one simulation for a (system, x), the paper's
//! values with where they come from, the claims the paper makes, and the
//! tables, plots and headline findings read from the results. One runner,
//! [`Figure::report`], turns the declaration into simulations (through
//! [`run_all`]), results looked up by (system, x) ([`Sweep::at`]), and a
//! [`Report`].
//!
//! A declaration is [`Figure::new`] (title, what the paper says,
//! parameters, systems, xs, the task of one run), [`Figure::only`] if not
//! every pair runs, then what is read from the results, each a closure
//! over the results looked up by (system, x): [`Figure::headline`] or
//! [`Figure::paper_values`] (the paper's values, keyed, with their source,
//! beside the simulator's), [`Figure::claim`] (an ordering or trend the
//! paper states, checked on the run), [`Figure::table`] (row keys,
//! [`Columns::col`], [`Columns::each`]), [`Figure::lines`] or
//! [`Figure::bars`] ([`SeriesList::over_x`], [`SeriesList::bars`]) and
//! [`Figure::note`]. A sweep beside the figure (an ablation) is a
//! [`Figure::part`] run by [`Figure::report_with`]. `docs/simulator.md`
//! shows a whole declaration.

use std::fmt::{Debug, Display};

use super::runner::{run_all, Outcome, Simulation};
use super::{bar_plot, line_plot, RunConfig};
use crate::cluster::{SimError, System};
use crate::output::{Check, Finding, Plot, Report, Series, Table, XScale};
use crate::workload::IorPattern;

/// Something read from a sweep's results: a table, a plot's series, the
/// headline findings.
pub(crate) type Fill<'a, R, T> = Box<dyn Fn(&R) -> T + 'a>;

/// The results of a sweep, one per (system, x) it ran.
pub(crate) struct Sweep<S, X, O> {
    systems: Vec<S>,
    xs: Vec<X>,
    /// x-major: `outs[xi * systems.len() + si]`; `None` where the figure
    /// does not run that pair ([`Figure::only`]).
    outs: Vec<Option<O>>,
}

impl<S: PartialEq + Debug, X: PartialEq + Debug, O> Sweep<S, X, O> {
    /// The result of `system` at `x`.
    ///
    /// # Panics
    /// If the sweep has no such system or x: a declaration asks only for
    /// what it declared, so this is a bug in the declaration.
    pub(crate) fn at(&self, system: &S, x: &X) -> &O {
        match self.get(system, x) {
            Some(out) => out,
            None => panic!("the sweep has no run of {system:?} at {x:?}"),
        }
    }

    /// The result of `system` at `x`, if the sweep ran it.
    pub(crate) fn get(&self, system: &S, x: &X) -> Option<&O> {
        let si = self.systems.iter().position(|s| s == system)?;
        let xi = self.xs.iter().position(|v| v == x)?;
        self.outs[xi * self.systems.len() + si].as_ref()
    }

    /// Every x, in the declared order.
    pub(crate) fn xs(&self) -> &[X] {
        &self.xs
    }
}

/// The paper's values, keyed (by x, or by (system, x)), with where in the
/// paper they are.
pub(crate) struct Paper<K, V = f64> {
    /// Where the values are: the seed and its figure, table or section.
    pub source: &'static str,
    /// The values, in the order the headline lists them.
    pub values: Vec<(K, V)>,
}

impl<K: PartialEq, V> Paper<K, V> {
    /// The paper's value for `key`, if it gives one.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The paper's value for `key` as a table shows it, "-" where the
    /// paper gives none.
    pub(crate) fn shown(&self, key: &K) -> String
    where
        V: Display,
    {
        self.get(key).map_or("-".into(), V::to_string)
    }
}

/// The value of `key` in a list of keyed values (a sweep's workloads, the
/// paper's rows).
///
/// # Panics
/// If no entry has that key: a declaration looks up only what it listed,
/// so this is a bug in the declaration.
pub(crate) fn keyed<'v, K: PartialEq + Debug, V>(entries: &'v [(K, V)], key: &K) -> &'v V {
    match entries.iter().find(|(k, _)| k == key) {
        Some((_, v)) => v,
        None => panic!("no entry for {key:?}"),
    }
}

/// What a series or column of a system is called in the report.
pub(crate) trait Named {
    /// Its name, as the paper writes it.
    fn name(&self) -> String;
}

impl Named for System {
    fn name(&self) -> String {
        System::name(*self).into()
    }
}

impl Named for IorPattern {
    fn name(&self) -> String {
        IorPattern::name(*self).into()
    }
}

impl Named for &str {
    fn name(&self) -> String {
        self.to_string()
    }
}

/// A table's columns: each a header and how a row's cell reads.
pub(crate) struct Columns<'a, K, R> {
    columns: Vec<(String, CellFn<'a, K, R>)>,
}

/// How one cell reads: from the results and the row's key.
type CellFn<'a, K, R> = Box<dyn Fn(&R, &K) -> String + 'a>;

impl<'a, K, R> Columns<'a, K, R> {
    /// One more column called `header` whose cell in the row of key `k`
    /// is `cell(results, k)`.
    pub(crate) fn col(
        mut self,
        header: impl Into<String>,
        cell: impl Fn(&R, &K) -> String + 'a,
    ) -> Self {
        self.columns.push((header.into(), Box::new(cell)));
        self
    }

    /// One column per item of `items`, in order: called `header(item)`,
    /// its cell in the row of key `k` is `cell(results, k, item)`.
    pub(crate) fn each<I: Copy + 'a>(
        self,
        items: impl IntoIterator<Item = I>,
        header: impl Fn(I) -> String,
        cell: impl Fn(&R, &K, I) -> String + Copy + 'a,
    ) -> Self {
        items.into_iter().fold(self, |t, item| {
            t.col(header(item), move |r, k| cell(r, k, item))
        })
    }
}

/// A plot's series.
pub(crate) struct SeriesList<'a, R> {
    series: Vec<Fill<'a, R, Series>>,
}

impl<'a, S, X, O> SeriesList<'a, Sweep<S, X, O>>
where
    S: PartialEq + Debug + Clone + 'a,
    X: PartialEq + Debug + 'a,
    O: 'a,
{
    /// One series per system of `systems`, named `name(system)`, with a
    /// point per x the system ran at: `(x_coord(index of x, x),
    /// y(result))`.
    pub(crate) fn per_system(
        mut self,
        systems: &[S],
        name: impl Fn(&S) -> String,
        x_coord: impl Fn(usize, &X) -> f64 + Copy + 'a,
        y: impl Fn(&O) -> f64 + Copy + 'a,
    ) -> Self {
        for s in systems {
            let (name, s) = (name(s), s.clone());
            self.series.push(Box::new(move |r: &Sweep<S, X, O>| Series {
                name: name.clone(),
                points: r
                    .xs()
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| Some((x_coord(i, x), y(r.get(&s, x)?))))
                    .collect(),
            }));
        }
        self
    }

    /// One series per system of `systems`, named as the paper names it,
    /// with a point `(x, y(result))` per x.
    pub(crate) fn over_x(self, systems: &[S], y: impl Fn(&O) -> f64 + Copy + 'a) -> Self
    where
        S: Named,
        X: Copy + Into<f64>,
    {
        self.per_system(systems, S::name, |_, &x| x.into(), y)
    }

    /// A series called `name` with a point `(i, y(results, key))` per key
    /// of `keys`, `i` its index: a bar chart's series over `keys` as
    /// categories.
    pub(crate) fn bars<K: 'a>(
        self,
        name: impl Into<String>,
        keys: Vec<K>,
        y: impl Fn(&Sweep<S, X, O>, &K) -> f64 + 'a,
    ) -> Self {
        let points = keys.into_iter().enumerate().collect();
        self.line(name, points, move |r, (i, k)| (*i as f64, y(r, k)))
    }

    /// A series called `name` with one point per key of `keys`.
    pub(crate) fn line<K: 'a>(
        self,
        name: impl Into<String>,
        keys: Vec<K>,
        point: impl Fn(&Sweep<S, X, O>, &K) -> (f64, f64) + 'a,
    ) -> Self {
        self.points(name, move |r| keys.iter().map(|k| point(r, k)).collect())
    }

    /// A series called `name` whose points `points` reads from the
    /// results (a trace over time, say).
    pub(crate) fn points(
        mut self,
        name: impl Into<String>,
        points: impl Fn(&Sweep<S, X, O>) -> Vec<(f64, f64)> + 'a,
    ) -> Self {
        let name = name.into();
        self.series.push(Box::new(move |r| Series {
            name: name.clone(),
            points: points(r),
        }));
        self
    }
}

/// Every (system, x), system-major: the rows of a table with a row per
/// run.
pub(crate) fn pairs<S: Clone, X: Clone>(systems: &[S], xs: &[X]) -> Vec<(S, X)> {
    systems
        .iter()
        .flat_map(|s| xs.iter().map(move |x| (s.clone(), x.clone())))
        .collect()
}

/// What the paper claims of its results, checkable on the simulator's
/// (an ordering such as "SSDUP+ sends less to the SSD than SSDUP at every
/// process count").
pub(crate) struct Claim<'a, R> {
    /// The claim in words.
    pub what: &'static str,
    /// Whether the simulator's results bear it out.
    pub holds: Fill<'a, R, bool>,
}

/// Which (system, x) pairs a figure runs.
type RunsFn<'a, S, X> = Box<dyn Fn(&S, &X) -> bool + 'a>;

/// How a figure builds the simulation of one system at one x.
type TaskFn<'a, S, X, T> = Box<dyn Fn(&S, &X) -> Result<T, SimError> + 'a>;

/// A plot's frame and its series.
type PlotFill<'a, R> = (Plot, SeriesList<'a, R>);

/// The results of a figure's sweep.
type Results<S, X, T> = Sweep<S, X, <T as Simulation>::Out>;

/// A figure of the common shape: systems × xs, one simulation each,
/// read into a report. Built with [`Figure::new`] and the methods that add
/// its headline, claims, tables, plots and notes.
pub(crate) struct Figure<'a, S, X, T: Simulation> {
    title: &'a str,
    paper: &'a str,
    parameters: Vec<(String, String)>,
    systems: Vec<S>,
    xs: Vec<X>,
    task: TaskFn<'a, S, X, T>,
    /// Which (system, x) pairs run: all unless [`Figure::only`] says.
    runs: RunsFn<'a, S, X>,
    headline: Vec<Fill<'a, Results<S, X, T>, Vec<Finding>>>,
    claims: Vec<Claim<'a, Results<S, X, T>>>,
    tables: Vec<Fill<'a, Results<S, X, T>, Table>>,
    /// Each plot's frame (title, axes, kind; `file_stem` is the part
    /// after the experiment's name) and its series.
    plots: Vec<PlotFill<'a, Results<S, X, T>>>,
    notes: Vec<Fill<'a, Results<S, X, T>, String>>,
    /// Where the paper's values in the headline are from.
    sources: Vec<&'static str>,
}

impl<'a, S, X, T> Figure<'a, S, X, T>
where
    S: PartialEq + Debug + 'a,
    X: PartialEq + Debug + 'a,
    T: Simulation,
    T::Out: 'a,
{
    /// A figure titled `title` comparing `systems` over `xs`, a run of
    /// each built by `task`; `paper` says in words what the paper reports,
    /// `parameters` are the report's parameter lines.
    pub(crate) fn new(
        title: &'a str,
        paper: &'a str,
        parameters: Vec<(String, String)>,
        systems: Vec<S>,
        xs: Vec<X>,
        task: impl Fn(&S, &X) -> Result<T, SimError> + 'a,
    ) -> Self {
        Figure {
            title,
            paper,
            parameters,
            systems,
            xs,
            task: Box::new(task),
            runs: Box::new(|_, _| true),
            headline: Vec::new(),
            claims: Vec::new(),
            tables: Vec::new(),
            plots: Vec::new(),
            notes: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// A sweep beside a figure ([`Figure::report_with`]): `systems` over
    /// `xs`, a run of each built by `task`, read into tables (and plots,
    /// notes) that follow the figure's.
    pub(crate) fn part(
        systems: Vec<S>,
        xs: Vec<X>,
        task: impl Fn(&S, &X) -> Result<T, SimError> + 'a,
    ) -> Self {
        Figure::new("", "", Vec::new(), systems, xs, task)
    }

    /// Runs only the (system, x) pairs `runs` accepts, for a sweep that is
    /// not a full grid (a system the paper runs at some xs only, an
    /// ablation at one x); [`Sweep::get`] reads what may not have run.
    pub(crate) fn only(mut self, runs: impl Fn(&S, &X) -> bool + 'a) -> Self {
        self.runs = Box::new(runs);
        self
    }

    /// Headline findings read from the results, after those already
    /// added.
    pub(crate) fn headline(
        mut self,
        findings: impl Fn(&Results<S, X, T>) -> Vec<Finding> + 'a,
    ) -> Self {
        self.headline.push(Box::new(findings));
        self
    }

    /// One headline finding per value of `paper`, in the paper's order
    /// (and the paper's source in the parameters): `what` names it, the
    /// paper's value is shown as it is, `sim` reads the simulator's side.
    pub(crate) fn paper_values<K, V: Display>(
        self,
        paper: &'a Paper<K, V>,
        what: impl Fn(&K) -> String + 'a,
        sim: impl Fn(&Results<S, X, T>, &K) -> String + 'a,
    ) -> Self {
        self.paper_findings(paper, |_| true, what, V::to_string, sim)
    }

    /// One headline finding per value of `paper` whose key `pick` accepts,
    /// in the paper's order (and the paper's source in the parameters):
    /// `what` names it, `shown` formats the paper's value, `sim` reads the
    /// simulator's side from the results.
    pub(crate) fn paper_findings<K, V>(
        self,
        paper: &'a Paper<K, V>,
        pick: impl Fn(&K) -> bool + 'a,
        what: impl Fn(&K) -> String + 'a,
        shown: impl Fn(&V) -> String + 'a,
        sim: impl Fn(&Results<S, X, T>, &K) -> String + 'a,
    ) -> Self {
        self.paper_headline(paper, move |r, k, v| {
            if pick(k) {
                vec![Finding::new(what(k), shown(v), sim(r, k))]
            } else {
                Vec::new()
            }
        })
    }

    /// The findings `findings` reads for each value of `paper`, in the
    /// paper's order (and the paper's source in the parameters): for a
    /// value the paper gives more than one finding of.
    pub(crate) fn paper_headline<K, V>(
        mut self,
        paper: &'a Paper<K, V>,
        findings: impl Fn(&Results<S, X, T>, &K, &V) -> Vec<Finding> + 'a,
    ) -> Self {
        self.cite(paper);
        self.headline(move |r| {
            paper
                .values
                .iter()
                .flat_map(|(k, v)| findings(r, k, v))
                .collect()
        })
    }

    /// Names `paper`'s source in the parameters, for paper values a table
    /// shows but the headline does not.
    pub(crate) fn cite<K, V>(&mut self, paper: &Paper<K, V>) {
        if !self.sources.contains(&paper.source) {
            self.sources.push(paper.source);
        }
    }

    /// A claim of the paper, checked on the results.
    pub(crate) fn claim(
        mut self,
        what: &'static str,
        holds: impl Fn(&Results<S, X, T>) -> bool + 'a,
    ) -> Self {
        self.claims.push(Claim {
            what,
            holds: Box::new(holds),
        });
        self
    }

    /// A table titled `title` with one row per key of `rows`, in that
    /// order, and the columns `columns` adds.
    pub(crate) fn table<K: 'a>(
        mut self,
        title: impl Into<String>,
        rows: Vec<K>,
        columns: impl FnOnce(Columns<'a, K, Results<S, X, T>>) -> Columns<'a, K, Results<S, X, T>>,
    ) -> Self {
        let title = title.into();
        let columns = columns(Columns {
            columns: Vec::new(),
        })
        .columns;
        self.tables.push(Box::new(move |r| Table {
            title: title.clone(),
            headers: columns.iter().map(|(h, _)| h.clone()).collect(),
            rows: rows
                .iter()
                .map(|k| columns.iter().map(|(_, cell)| cell(r, k)).collect())
                .collect(),
        }));
        self
    }

    /// A plot drawn in `frame` (its `file_stem` the part after the
    /// experiment's name), with the series `series` adds.
    pub(crate) fn plot(
        mut self,
        frame: Plot,
        series: impl FnOnce(SeriesList<'a, Results<S, X, T>>) -> SeriesList<'a, Results<S, X, T>>,
    ) -> Self {
        let series = series(SeriesList { series: Vec::new() });
        self.plots.push((frame, series));
        self
    }

    /// A line plot on a linear x axis (`frame` is its file stem, title,
    /// x label and y label), with the series `series` adds.
    pub(crate) fn lines(
        self,
        frame: [&str; 4],
        series: impl FnOnce(SeriesList<'a, Results<S, X, T>>) -> SeriesList<'a, Results<S, X, T>>,
    ) -> Self {
        let [stem, title, x, y] = frame;
        self.plot(line_plot(stem, title, x, y, Vec::new()), series)
    }

    /// [`Figure::lines`] on a log₂ x axis (processes, threads, sizes).
    pub(crate) fn log2_lines(
        self,
        frame: [&str; 4],
        series: impl FnOnce(SeriesList<'a, Results<S, X, T>>) -> SeriesList<'a, Results<S, X, T>>,
    ) -> Self {
        let mut figure = self.lines(frame, series);
        if let Some((plot, _)) = figure.plots.last_mut() {
            plot.x_scale = XScale::Log2;
        }
        figure
    }

    /// A grouped bar chart over `categories` (`frame` as in
    /// [`Figure::lines`]), with the series `series` adds.
    pub(crate) fn bars<C: ToString>(
        self,
        frame: [&str; 4],
        categories: impl IntoIterator<Item = C>,
        series: impl FnOnce(SeriesList<'a, Results<S, X, T>>) -> SeriesList<'a, Results<S, X, T>>,
    ) -> Self {
        let [stem, title, x, y] = frame;
        let categories = categories.into_iter().map(|c| c.to_string()).collect();
        self.plot(bar_plot(stem, title, x, y, categories, Vec::new()), series)
    }

    /// A note under the tables.
    pub(crate) fn note(self, note: impl Into<String>) -> Self {
        let note = note.into();
        self.note_from(move |_| note.clone())
    }

    /// A note read from the results.
    pub(crate) fn note_from(mut self, note: impl Fn(&Results<S, X, T>) -> String + 'a) -> Self {
        self.notes.push(Box::new(note));
        self
    }

    /// Runs every (system, x) and reads the report of experiment `name`
    /// from the results: the headline, the claims checked, the parameters
    /// (and where the paper's values are from), the tables, the plots (a
    /// plot's file is `<name>-<its file_stem>`, or `<name>` for an empty
    /// stem) and the notes.
    pub(crate) fn report(mut self, name: &str, rc: &RunConfig) -> Result<Report, SimError> {
        let sweep = self.run(rc)?;
        Ok(self.read(name, &sweep))
    }

    /// [`Figure::report`], followed by a second sweep beside the figure
    /// (an ablation, a sensitivity sweep; [`Figure::part`]) that `part`
    /// declares, reading this figure's results if it needs them: the
    /// part runs after the figure, its tables, plots and notes follow the
    /// figure's and its events are added.
    pub(crate) fn report_with<S2, X2, T2>(
        mut self,
        name: &str,
        rc: &RunConfig,
        part: impl FnOnce(&Results<S, X, T>) -> Figure<'a, S2, X2, T2>,
    ) -> Result<Report, SimError>
    where
        S2: PartialEq + Debug + 'a,
        X2: PartialEq + Debug + 'a,
        T2: Simulation,
        T2::Out: 'a,
    {
        let sweep = self.run(rc)?;
        let part = part(&sweep).report(name, rc)?;
        let mut report = self.read(name, &sweep);
        report.tables.extend(part.tables);
        report.plots.extend(part.plots);
        report.notes.extend(part.notes);
        report.events += part.events;
        Ok(report)
    }

    /// Runs every (system, x), x-major; the figure keeps only what reads
    /// the results.
    fn run(&mut self, rc: &RunConfig) -> Result<Results<S, X, T>, SimError> {
        let mut tasks = Vec::with_capacity(self.xs.len() * self.systems.len());
        let mut ran = Vec::with_capacity(tasks.capacity());
        for x in &self.xs {
            for s in &self.systems {
                ran.push((self.runs)(s, x));
                if (self.runs)(s, x) {
                    tasks.push((self.task)(s, x)?);
                }
            }
        }
        let mut outs = run_all(&tasks, rc)?.into_iter();
        Ok(Sweep {
            outs: ran
                .into_iter()
                .map(|r| if r { outs.next() } else { None })
                .collect(),
            systems: std::mem::take(&mut self.systems),
            xs: std::mem::take(&mut self.xs),
        })
    }

    /// The report of experiment `name`, read from `sweep`.
    fn read(self, name: &str, sweep: &Results<S, X, T>) -> Report {
        let mut parameters = self.parameters;
        if !self.sources.is_empty() {
            parameters.push(("paper's values".into(), self.sources.join("; ")));
        }
        Report {
            experiment: name.into(),
            title: self.title.into(),
            headline: self.headline.iter().flat_map(|f| f(sweep)).collect(),
            paper: self.paper.into(),
            parameters,
            tables: self.tables.iter().map(|t| t(sweep)).collect(),
            plots: self
                .plots
                .iter()
                .map(|(frame, series)| Plot {
                    file_stem: match frame.file_stem.as_str() {
                        "" => name.into(),
                        stem => format!("{name}-{stem}"),
                    },
                    series: series.series.iter().map(|s| s(sweep)).collect(),
                    ..frame.clone()
                })
                .collect(),
            notes: self.notes.iter().map(|n| n(sweep)).collect(),
            events: sweep.outs.iter().flatten().map(Outcome::events).sum(),
            checks: self
                .claims
                .iter()
                .map(|c| Check {
                    claim: c.what.into(),
                    holds: (c.holds)(sweep),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::line_plot;

    /// A simulation that squares its input.
    struct Square(u32);

    struct Squared(u32);

    impl Outcome for Squared {
        fn events(&self) -> u64 {
            1
        }
    }

    impl Simulation for Square {
        type Out = Squared;

        fn run(&self) -> Result<Squared, SimError> {
            Ok(Squared(self.0 * self.0))
        }
    }

    /// Systems "a" and "b" over x = 2 and 3: a squares x, b squares 10x.
    fn demo<'a>() -> Figure<'a, &'static str, u32, Square> {
        Figure::new(
            "T",
            "P",
            Vec::new(),
            vec!["a", "b"],
            vec![2u32, 3],
            |&s, &x| Ok(Square(if s == "a" { x } else { 10 * x })),
        )
    }

    #[test]
    fn results_are_read_by_system_and_x_into_the_declared_report() {
        let paper = Paper {
            source: "seed 000 Fig. 0",
            values: vec![(("b", 3), 90.0)],
        };
        let report = demo()
            .paper_findings(
                &paper,
                |_| true,
                |(s, x)| format!("{s} at {x}"),
                |v| format!("{v}"),
                |r, (s, x)| r.at(s, x).0.to_string(),
            )
            .claim("b above a at every x", |r| {
                r.xs().iter().all(|x| r.at(&"b", x).0 > r.at(&"a", x).0)
            })
            .claim("a above b at some x", |r| {
                r.xs().iter().any(|x| r.at(&"a", x).0 > r.at(&"b", x).0)
            })
            .table("t", vec![3u32, 2], |t| {
                t.col("x", |_, x: &u32| x.to_string())
                    .col("a", |r, x| r.at(&"a", x).0.to_string())
                    .col("b", |r, x| r.at(&"b", x).0.to_string())
            })
            .plot(line_plot("lines", "L", "x", "y", Vec::new()), |s| {
                s.per_system(
                    &["b"],
                    |s| s.to_string(),
                    |_, &x| f64::from(x),
                    |o| f64::from(o.0),
                )
            })
            .note_from(|r| format!("a at 2: {}", r.at(&"a", &2).0))
            .report("demo-fig0", &RunConfig::new(1.0, 1))
            .unwrap();
        assert_eq!(report.experiment, "demo-fig0");
        assert_eq!(report.headline, vec![Finding::new("b at 3", "90", "900")]);
        assert_eq!(
            report.checks,
            vec![
                Check {
                    claim: "b above a at every x".into(),
                    holds: true
                },
                Check {
                    claim: "a above b at some x".into(),
                    holds: false
                },
            ]
        );
        assert_eq!(
            report.parameters,
            vec![("paper's values".to_string(), "seed 000 Fig. 0".to_string())]
        );
        assert_eq!(report.tables[0].headers, ["x", "a", "b"]);
        assert_eq!(
            report.tables[0].rows,
            [["3", "9", "900"], ["2", "4", "400"]]
        );
        assert_eq!(report.plots[0].file_stem, "demo-fig0-lines");
        assert_eq!(report.plots[0].series[0].name, "b");
        assert_eq!(
            report.plots[0].series[0].points,
            [(2.0, 400.0), (3.0, 900.0)]
        );
        assert_eq!(report.notes, ["a at 2: 4"]);
        assert_eq!(report.events, 4);
    }

    #[test]
    fn only_the_accepted_pairs_run_and_a_part_reads_the_figure() {
        let report = demo()
            .only(|&s, &x| s == "a" || x == 3)
            .table("t", vec![2u32, 3], |t| {
                t.col("b", |r, x| {
                    r.get(&"b", x).map_or("-".into(), |o| o.0.to_string())
                })
            })
            .lines(["", "L", "x", "y"], |s| {
                s.over_x(&["b"], |o| f64::from(o.0))
            })
            .report_with("demo-fig1", &RunConfig::new(1.0, 1), |r| {
                let a3 = r.at(&"a", &3).0;
                Figure::part(vec!["c"], vec![1u32], |_, &x| Ok(Square(x))).table(
                    "part",
                    vec![1u32],
                    move |t| t.col("a at 3", move |_, _| a3.to_string()),
                )
            })
            .unwrap();
        assert_eq!(report.tables[0].rows, [["-"], ["900"]]);
        assert_eq!(report.tables[1].rows, [["9"]]);
        assert_eq!(report.plots[0].file_stem, "demo-fig1");
        assert_eq!(report.plots[0].series[0].points, [(3.0, 900.0)]);
        // a at 2 and 3, b at 3, and the part's one run.
        assert_eq!(report.events, 4);
    }

    #[test]
    #[should_panic(expected = "no run of")]
    fn asking_for_an_undeclared_run_is_a_bug() {
        let sweep = Sweep {
            systems: vec!["a"],
            xs: vec![1u32],
            outs: vec![Some(Squared(1))],
        };
        let _ = sweep.at(&"b", &1);
    }
}
