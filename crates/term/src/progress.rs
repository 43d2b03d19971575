//! Progress of long commands (issue 21): `sluice drain`, the drain inside
//! `sluice unmount` (and inside a foreground `sluice mount` stopped by a
//! signal), `sluice sim run` and `sluice xfer send` report through one
//! [`Progress`], on stderr, so stdout keeps only results.
//!
//! On a terminal it is an `indicatif` bar. Elsewhere (a log, a pipe, CI)
//! it is plain lines with the same numbers — done of total, percent, rate
//! and ETA — at most one every [`LINE_INTERVAL`] plus a last one when the
//! work ends, so a log reads well and does not fill up. `--progress off`
//! shows nothing. Invariant: [`Lines`] is pure (it is told the time), so
//! its format and throttling are tested without a clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_xfer::source::SendProgress;

/// How often a plain progress line is written, at most.
pub const LINE_INTERVAL: Duration = Duration::from_secs(2);

/// `--progress`: how progress is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, plain lines otherwise.
    #[default]
    #[value(alias = "true")]
    Auto,
    /// Plain lines, one every 2 s at most and one at the end.
    Lines,
    /// Nothing.
    #[value(alias = "false")]
    Off,
}

/// What the numbers count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes, shown in KiB, MiB, GiB.
    Bytes,
    /// Whole things, named in the plural (`runs`).
    Count(&'static str),
}

impl Unit {
    fn amount(self, n: u64) -> String {
        match self {
            Unit::Bytes => HumanBytes(n).to_string(),
            Unit::Count(_) => n.to_string(),
        }
    }

    fn rate(self, per_s: f64) -> String {
        match self {
            // INVARIANT: a rate is finite and not negative; `as` saturates.
            Unit::Bytes => format!("{}/s", HumanBytes(per_s as u64)),
            Unit::Count(name) => format!("{per_s:.1} {name}/s"),
        }
    }
}

/// The plain-line renderer: decides when a line is due and writes it.
#[derive(Debug)]
pub struct Lines {
    label: String,
    unit: Unit,
    started: Instant,
    last: Option<Instant>,
}

impl Lines {
    /// A renderer for work that started at `started`.
    pub fn new(label: &str, unit: Unit, started: Instant) -> Lines {
        Lines {
            label: label.to_string(),
            unit,
            started,
            last: None,
        }
    }

    /// The line to write at `now`, if one is due: the first update, then
    /// one every [`LINE_INTERVAL`].
    pub fn update(&mut self, now: Instant, done: u64, total: u64, note: &str) -> Option<String> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < LINE_INTERVAL)
        {
            return None;
        }
        self.last = Some(now);
        Some(self.line(now, done, total, note))
    }

    /// The last line, written whenever the work ends.
    pub fn finish(&mut self, now: Instant, done: u64, total: u64, note: &str) -> String {
        self.last = Some(now);
        self.line(now, done, total, note)
    }

    /// `LABEL: DONE of TOTAL (P%), RATE, ETA T[, NOTE]`; the rate is the
    /// average since the start, the ETA what is left at that rate.
    fn line(&self, now: Instant, done: u64, total: u64, note: &str) -> String {
        let done = done.min(total);
        let elapsed = now.saturating_duration_since(self.started).as_secs_f64();
        let percent = if total == 0 {
            100
        } else {
            // INVARIANT: done <= total, so this is at most 100.
            (u128::from(done) * 100 / u128::from(total)) as u64
        };
        let mut line = format!(
            "{}: {} of {}{} ({percent}%)",
            self.label,
            self.unit.amount(done),
            self.unit.amount(total),
            match self.unit {
                Unit::Bytes => String::new(),
                Unit::Count(name) => format!(" {name}"),
            }
        );
        if elapsed > 0.0 {
            let rate = done as f64 / elapsed;
            line.push_str(&format!(", {}", self.unit.rate(rate)));
            if rate > 0.0 && done < total {
                let eta = Duration::from_secs_f64((total - done) as f64 / rate);
                line.push_str(&format!(", ETA {}", HumanDuration(eta)));
            }
        }
        if !note.is_empty() {
            line.push_str(", ");
            line.push_str(note);
        }
        line
    }
}

enum Shown {
    Bar(ProgressBar),
    Lines(Mutex<Lines>),
    Off,
}

/// One piece of long work being shown: a bar or plain lines on stderr.
pub struct Progress {
    shown: Shown,
}

impl Progress {
    /// Start showing work called `label`, `total` long (it may change),
    /// that began at `started` (rates and ETAs count from there).
    pub fn new(
        mode: ProgressMode,
        label: &str,
        unit: Unit,
        total: u64,
        started: Instant,
    ) -> Progress {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let shown = match mode {
            ProgressMode::Off => Shown::Off,
            ProgressMode::Auto if terminal => {
                let numbers = match unit {
                    Unit::Bytes => {
                        "{binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}"
                            .to_string()
                    }
                    Unit::Count(name) => format!("{{pos}}/{{len}} {name} ETA {{eta}}"),
                };
                let template = format!("{{prefix}} [{{wide_bar}}] {numbers} {{msg}}");
                // INVARIANT: the template is a constant that parses.
                let style = ProgressStyle::with_template(&template)
                    .expect("progress template")
                    .progress_chars("=> ");
                let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                    .with_style(style)
                    .with_prefix(label.to_string())
                    .with_elapsed(started.elapsed());
                bar.enable_steady_tick(Duration::from_millis(250));
                Shown::Bar(bar)
            }
            ProgressMode::Auto | ProgressMode::Lines => {
                Shown::Lines(Mutex::new(Lines::new(label, unit, started)))
            }
        };
        Progress { shown }
    }

    /// `done` of `total` now; `note` says more (`files 3/10`).
    pub fn update(&self, done: u64, total: u64, note: &str) {
        match &self.shown {
            Shown::Bar(bar) => {
                bar.set_length(total);
                bar.set_position(done.min(total));
                bar.set_message(note.to_string());
            }
            Shown::Lines(lines) => {
                let line = lock(lines).update(Instant::now(), done, total, note);
                if let Some(line) = line {
                    eprintln!("{line}");
                }
            }
            Shown::Off => {}
        }
    }

    /// A message for the user, above the bar (or as a line of its own);
    /// shown even with `--progress off`.
    pub fn say(&self, message: &str) {
        match &self.shown {
            Shown::Bar(bar) => bar.println(message),
            Shown::Lines(_) | Shown::Off => eprintln!("{message}"),
        }
    }

    /// The work ended at `done` of `total`: the last line, or the bar left
    /// in place at its end.
    pub fn finish(&self, done: u64, total: u64, note: &str) {
        match &self.shown {
            Shown::Bar(bar) => {
                bar.set_length(total);
                bar.set_position(done.min(total));
                bar.finish_with_message(note.to_string());
            }
            Shown::Lines(lines) => {
                let line = lock(lines).finish(Instant::now(), done, total, note);
                eprintln!("{line}");
            }
            Shown::Off => {}
        }
    }

    /// Run `work` while a second thread shows `sample()`, its (done,
    /// total), every 100 ms (nothing while total is 0), then finish at the
    /// last sample, `done` or `failed` as `work`'s result says.
    pub fn watch<T, E>(
        &self,
        sample: impl Fn() -> (u64, u64) + Sync,
        work: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let finished = AtomicBool::new(false);
        let result = std::thread::scope(|scope| {
            scope.spawn(|| {
                while !finished.load(Ordering::Relaxed) {
                    let (done, total) = sample();
                    if total > 0 {
                        self.update(done, total, "");
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            let result = work();
            finished.store(true, Ordering::Relaxed);
            result
        });
        let (done, total) = sample();
        self.finish(done, total, if result.is_ok() { "done" } else { "failed" });
        result
    }
}

/// `sluice xfer send`'s progress observer: bytes in place of the total,
/// with files in place and objects sent as the note; `None` with
/// `--progress off`, so the transfer does not report at all.
pub fn xfer_send(mode: ProgressMode) -> Option<sluice_xfer::source::ProgressFn> {
    if mode == ProgressMode::Off {
        return None;
    }
    let progress = Progress::new(mode, "xfer", Unit::Bytes, 0, Instant::now());
    Some(std::sync::Arc::new(move |now: &SendProgress| {
        let note = xfer_note(now);
        if now.ended {
            progress.finish(now.bytes_done, now.bytes_total, &note);
        } else {
            progress.update(now.bytes_done, now.bytes_total, &note);
        }
    }))
}

fn xfer_note(now: &SendProgress) -> String {
    format!(
        "files {}/{}, {} objects",
        now.files_done, now.files_total, now.objects
    )
}

impl Drop for Progress {
    fn drop(&mut self) {
        // A bar dropped unfinished (an error) leaves its last state on
        // screen instead of vanishing.
        if let Shown::Bar(bar) = &self.shown {
            if !bar.is_finished() {
                bar.abandon();
            }
        }
    }
}

use sluice_env::lock;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn watched_work_is_sampled_while_it_runs_and_its_result_returned() {
        use std::sync::atomic::AtomicU64;
        let samples = AtomicU64::new(0);
        let progress = Progress::new(
            ProgressMode::Off,
            "w",
            Unit::Count("runs"),
            0,
            Instant::now(),
        );
        let sample = || (samples.fetch_add(1, Ordering::Relaxed), 10);
        let work = || {
            std::thread::sleep(Duration::from_millis(350));
            Ok::<_, String>(42)
        };
        assert_eq!(progress.watch(sample, work), Ok(42));
        // While it ran, and once more at the end.
        assert!(samples.load(Ordering::Relaxed) >= 3);
        let failed = progress.watch(|| (0, 0), || Err::<(), _>("no".to_string()));
        assert_eq!(failed, Err("no".to_string()));
    }

    #[test]
    fn a_line_gives_done_total_percent_rate_and_eta() {
        let t0 = Instant::now();
        let mut lines = Lines::new("draining /mnt", Unit::Bytes, t0);
        let line = lines
            .update(t0 + Duration::from_secs(4), 40 * MIB, 120 * MIB, "")
            .unwrap();
        assert_eq!(
            line,
            "draining /mnt: 40.00 MiB of 120.00 MiB (33%), 10.00 MiB/s, ETA 8 seconds"
        );
        let mut runs = Lines::new("sim ssdup-fig9", Unit::Count("runs"), t0);
        let line = runs
            .update(t0 + Duration::from_secs(10), 5, 20, "ssdup+ 64 processes")
            .unwrap();
        assert_eq!(
            line,
            "sim ssdup-fig9: 5 of 20 runs (25%), 0.5 runs/s, ETA 30 seconds, ssdup+ 64 processes"
        );
    }

    #[test]
    fn lines_are_throttled_to_one_per_interval_and_the_last_always_shows() {
        let t0 = Instant::now();
        let mut lines = Lines::new("xfer", Unit::Bytes, t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        // The first update shows at once, so a log says the work started.
        assert!(lines.update(at(0), 0, 100, "").is_some());
        assert!(lines.update(at(500), 10, 100, "").is_none());
        assert!(lines.update(at(1999), 20, 100, "").is_none());
        assert!(lines.update(at(2000), 30, 100, "").is_some());
        assert!(lines.update(at(2100), 40, 100, "").is_none());
        // The end is shown even right after a line, and throttles the next.
        let last = lines.finish(at(2200), 100, 100, "");
        assert!(last.contains("100 B of 100 B (100%)"), "{last}");
        assert!(!last.contains("ETA"), "nothing left, no ETA: {last}");
        assert!(lines.update(at(3000), 100, 100, "").is_none());
    }

    #[test]
    fn a_transfer_shows_files_and_objects_and_nothing_when_off() {
        let now = SendProgress {
            bytes_done: 3 * MIB,
            bytes_total: 8 * MIB,
            files_done: 2,
            files_total: 5,
            objects: 3,
            ended: false,
        };
        assert_eq!(xfer_note(&now), "files 2/5, 3 objects");
        assert!(xfer_send(ProgressMode::Off).is_none());
        let lines = xfer_send(ProgressMode::Lines).expect("an observer");
        lines(&now);
        lines(&SendProgress { ended: true, ..now });
    }

    #[test]
    fn edge_numbers_stay_sane() {
        let t0 = Instant::now();
        let mut lines = Lines::new("drain", Unit::Bytes, t0);
        // Nothing to do: 100%, and no rate at time zero (no division by 0).
        assert_eq!(lines.finish(t0, 0, 0, ""), "drain: 0 B of 0 B (100%)");
        // More done than the total (the total grew late): capped.
        let line = lines.finish(t0 + Duration::from_secs(1), 150, 100, "");
        assert!(line.contains("100 B of 100 B (100%)"), "{line}");
        // Nothing done yet: a rate of 0 and no ETA.
        let line = lines.finish(t0 + Duration::from_secs(1), 0, 100, "");
        assert_eq!(line, "drain: 0 B of 100 B (0%), 0 B/s");
        // A clock that went backwards reads as time zero.
        let mut late = Lines::new("drain", Unit::Bytes, t0 + Duration::from_secs(5));
        assert_eq!(late.finish(t0, 1, 2, ""), "drain: 1 B of 2 B (50%)");
    }
}
