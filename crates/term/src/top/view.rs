//! Drawing a [`Screen`] with ratatui: a header (mount, policy, whether it
//! answers), the tiers' bandwidth, the write buffer (route, random
//! percentage, threshold, buffered and flushed bytes with their rates, the
//! oldest unflushed write, region states), sparklines of the last samples,
//! LiU and BBOS lines when they are on, and the latest errors.
//!
//! Only drawing: every number comes from the screen (the status snapshot
//! and [`crate::top::rates`]), so the view is tested on ratatui's `TestBackend`
//! by the text it leaves in the buffer.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Sparkline, Wrap};
use ratatui::Frame;
use sluice_status::region_letter;
use sluice_status::Status;

use crate::top::rates::Rates;
use crate::top::screen::{Link, Screen};

/// Regions drawn one letter each at most; more are summed up only.
const REGION_LETTERS_MAX: usize = 64;

/// Rows of the sparklines (one sample per column).
const SPARKLINE_ROWS: u16 = 8;

/// Draws `screen` over the whole frame.
pub fn render(frame: &mut Frame, screen: &Screen) {
    let status = screen.latest.as_ref().map(|s| &s.status);
    let features = status.map_or(0, |s| {
        u16::from(s.liu.is_some()) + 2 * u16::from(s.bbos.is_some()) + u16::from(recalls_shown(s))
    });
    // A lost mount's line wraps: its error names the path and the cause.
    let header_height = if matches!(screen.link, Link::Lost { .. }) {
        3
    } else {
        2
    };
    // One more line for each tier lost or read-only.
    let unhealthy = status.map_or(0, |s| {
        u16::from(s.fast.state != "healthy") + u16::from(s.capacity.state != "healthy")
    });
    let [header, tiers, buffer, sparks, extras, errors] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Length(6 + unhealthy),
        Constraint::Length(7),
        Constraint::Length(SPARKLINE_ROWS + 2),
        Constraint::Length(if features > 0 { features + 2 } else { 0 }),
        // As many of the latest errors as fit (status keeps 32).
        Constraint::Min(3),
    ])
    .areas(frame.area());
    frame.render_widget(
        Paragraph::new(header_lines(screen)).wrap(Wrap { trim: false }),
        header,
    );
    let Some(status) = status else {
        return;
    };
    let rates = screen.rates.as_ref();
    let every = format!("{:.1} s", screen.interval.as_secs_f64());
    frame.render_widget(
        Paragraph::new(tier_lines(status, rates))
            .block(Block::bordered().title(format!(" tiers, bytes/s over the last {every} "))),
        tiers,
    );
    frame.render_widget(
        Paragraph::new(buffer_lines(status, rates))
            .block(Block::bordered().title(" write buffer ")),
        buffer,
    );
    render_sparklines(frame, screen, sparks);
    if features > 0 {
        frame.render_widget(
            Paragraph::new(feature_lines(status, rates))
                .block(Block::bordered().title(" read path and checkpoints ")),
            extras,
        );
    }
    let mut error_lines: Vec<Line> = status
        .last_errors
        .iter()
        .map(|e| Line::from(e.line()).fg(Color::Red))
        .collect();
    if error_lines.is_empty() {
        error_lines.push(Line::from("  none"));
    }
    frame.render_widget(
        Paragraph::new(error_lines).block(Block::bordered().title(format!(
            " latest errors, newest first ({} since mount) ",
            status.incidents_total
        ))),
        errors,
    );
}

fn header_lines(screen: &Screen) -> Vec<Line<'static>> {
    let policy = screen
        .latest
        .as_ref()
        .map_or_else(String::new, |s| format!("policy {}   ", s.status.policy));
    let first = Line::from(vec![
        Span::from(" sluice top ").bold().reversed(),
        Span::from(format!("  {}   ", screen.mountpoint)).bold(),
        Span::from(format!(
            "{policy}polled every {:.1} s   q quits",
            screen.interval.as_secs_f64()
        )),
    ]);
    let second = match &screen.link {
        Link::Waiting => Line::from(" waiting for the mount's first answer"),
        Link::Up => Line::from(" answering").fg(Color::Green),
        Link::Lost { error, .. } => {
            let lost = screen.lost_for().unwrap_or_default().as_secs_f64();
            let shown = if screen.latest.is_some() {
                "figures below are its last answer"
            } else {
                "it never answered"
            };
            Line::from(format!(
                " NOT ANSWERING for {lost:.0} s ({shown}; still polling): {error}"
            ))
            .style(Style::new().fg(Color::Red).bold())
        }
    };
    vec![first, second]
}

fn tier_lines(status: &Status, rates: Option<&Rates>) -> Vec<Line<'static>> {
    let r = |f: fn(&Rates) -> f64| rates.map_or_else(|| "-".to_string(), |r| rate(f(r)));
    let space = |t: &sluice_status::TierStatus| {
        if t.total_bytes == 0 {
            "space unknown".to_string()
        } else {
            format!("{} free of {}", bytes(t.free_bytes), bytes(t.total_bytes))
        }
    };
    // One column layout for the heading and both tiers.
    let row = |name: &str, write: &str, read: &str, space: &str, device: &str| {
        Line::from(format!(
            " {name:<9} {write:>13} {read:>13}   {space:<28} {device}"
        ))
    };
    let mut lines = vec![
        row("", "write", "read", "space", "device").bold(),
        row(
            "fast",
            &r(|r| r.fast_write_bytes_per_s),
            &r(|r| r.fast_read_bytes_per_s),
            &space(&status.fast),
            &status.fast.describe,
        ),
        row(
            "capacity",
            &r(|r| r.capacity_write_bytes_per_s),
            &r(|r| r.capacity_read_bytes_per_s),
            &space(&status.capacity),
            &status.capacity.describe,
        ),
        Line::from(format!(
            " {:<9} {:>13} {:>13}   {} writes, {} reads, {} fsyncs, {} errors, {} files open",
            "mount",
            r(|r| r.mount_write_bytes_per_s),
            r(|r| r.mount_read_bytes_per_s),
            status.fuse_writes,
            status.fuse_reads,
            status.fuse_fsyncs,
            status.fuse_errors,
            status.open_files
        )),
    ];
    // A tier lost or read-only: loud, with the cause (docs/fuse.md).
    for (name, t) in [("fast", &status.fast), ("capacity", &status.capacity)] {
        if t.state != "healthy" {
            lines.push(
                Line::from(format!(
                    " !! {name} tier {}: {}",
                    t.state.to_uppercase(),
                    t.state_cause.as_deref().unwrap_or("-")
                ))
                .style(Style::new().fg(Color::Red).bold()),
            );
        }
    }
    lines
}

/// Whether the on-demand recall line is shown: once this node recalled
/// or answered a recall.
fn recalls_shown(status: &Status) -> bool {
    status.recalls + status.recalls_answered > 0
}

fn buffer_lines(status: &Status, rates: Option<&Rates>) -> Vec<Line<'static>> {
    let random = status
        .last_random_fraction
        .map_or_else(|| "-".to_string(), |p| format!("{:.1}%", p * 100.0));
    let buffered_rate = rates.map_or_else(String::new, |r| {
        let sign = if r.buffered_bytes_per_s < 0.0 {
            "-"
        } else {
            "+"
        };
        format!(" ({sign}{})", rate(r.buffered_bytes_per_s.abs()))
    });
    let oldest = status.oldest_buffered_age_s.map_or_else(
        || "nothing buffered".to_string(),
        |age| format!("oldest buffered write {age:.1} s ago"),
    );
    let count = |state: &str| status.regions.iter().filter(|r| *r == state).count();
    let mut letters: String = status
        .regions
        .iter()
        .take(REGION_LETTERS_MAX)
        .map(|r| region_letter(r))
        .collect();
    if status.regions.len() > REGION_LETTERS_MAX {
        letters.push('…');
    }
    vec![
        Line::from(format!(
            " route    {} · last stream {random} random · threshold {:.3} · {} streams, {} to fast",
            status.route, status.threshold, status.streams, status.streams_to_fast
        )),
        Line::from(format!(
            " routed   fast {} · capacity {} · forced to log {} · written through {} · {} waits for a region",
            bytes(status.fast_bytes),
            bytes(status.capacity_bytes),
            bytes(status.forced_to_log_bytes),
            bytes(status.write_through_bytes),
            status.region_waits
        )),
        Line::from(format!(
            " buffered {}{buffered_rate} · {oldest}",
            bytes(status.buffered_bytes)
        )),
        Line::from(format!(
            " flushed  {} ({}) · synced {} ({}) by close, fsync or sluice sync · {} regions flushed · {} flush errors{}",
            bytes(status.flushed_bytes),
            rates.map_or_else(|| "-".to_string(), |r| rate(r.flushed_bytes_per_s)),
            bytes(status.synced_bytes),
            rates.map_or_else(|| "-".to_string(), |r| rate(r.synced_bytes_per_s)),
            status.regions_flushed,
            status.flush_errors,
            if status.draining { " · draining" } else { "" }
        )),
        Line::from(format!(
            " regions  f {} filling · F {} full · > {} flushing · . {} empty, {} each  [{letters}]",
            count("filling"),
            count("full"),
            count("flushing"),
            count("empty"),
            bytes(status.region_bytes)
        )),
    ]
}

fn render_sparklines(frame: &mut Frame, screen: &Screen, area: Rect) {
    let h = &screen.history;
    let columns = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(area);
    let series = [
        ("fast write", &h.fast_write, true, Color::Cyan),
        ("capacity write", &h.capacity_write, true, Color::Yellow),
        ("buffered", &h.buffered, false, Color::Magenta),
    ];
    for ((name, values, per_s, color), column) in series.into_iter().zip(columns.iter()) {
        let now = values.back().copied().unwrap_or(0);
        let max = values.iter().copied().max().unwrap_or(0);
        let show = |v: u64| if per_s { rate(v as f64) } else { bytes(v) };
        // The newest samples, as many as the column has cells for.
        let width = usize::from(column.width.saturating_sub(2));
        let data: Vec<u64> = values
            .iter()
            .skip(values.len().saturating_sub(width))
            .copied()
            .collect();
        frame.render_widget(
            Sparkline::default()
                .block(Block::bordered().title(format!(
                    " {name} {} (max {}) ",
                    show(now),
                    show(max)
                )))
                .data(&data)
                .max(max.max(1))
                .style(Style::new().fg(color)),
            *column,
        );
    }
}

fn feature_lines(status: &Status, rates: Option<&Rates>) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let errors = |n: u64, last: &Option<String>| match last {
        Some(e) if n > 0 => format!("{n} errors (last: {e})"),
        _ => format!("{n} errors"),
    };
    if let Some(l) = &status.liu {
        lines.push(Line::from(format!(
            " LiU   {} segments buffered, {} ghosts · {} heads lifted ({} lifts, {} de-lifts) · {} buffer hits ({}/s) · {} read from heads · {}",
            l.buffered_segments,
            l.ghost_segments,
            l.lifted_segments,
            l.lifts,
            l.delifts,
            l.buffer_hits,
            rates.map_or_else(|| "-".to_string(), |r| format!("{:.0}", r.liu_buffer_hits_per_s)),
            bytes(l.head_bytes_read),
            errors(l.errors, &l.last_error)
        )));
    }
    if let Some(b) = &status.bbos {
        let write_cap = if b.write_rate == 0 {
            "no write cap".to_string()
        } else {
            format!("write cap {}", rate(b.write_rate as f64))
        };
        lines.push(Line::from(format!(
            " BBOS  {} ({} eviction), {} jobs, {} writers · staged {} ({}) · cached {} ({}) of S {} · {} checkpoints ({} cold to capacity, {} spilled)",
            b.scheme,
            b.eviction,
            b.jobs,
            b.writers,
            b.staged_files,
            bytes(b.staged_bytes),
            b.cached_files,
            bytes(b.cached_bytes),
            bytes(b.capacity_bytes),
            b.stats.checkpoints,
            b.stats.cold_direct,
            b.stats.spills
        )));
        lines.push(Line::from(format!(
            "       demoting {} (cap {}) · DWSF {} of DWPP {} (pattern {}) · {write_cap} · restarts {} hits / {} misses · {}",
            rates.map_or_else(|| "-".to_string(), |r| rate(r.demoted_bytes_per_s)),
            rate(b.demote_rate as f64),
            bytes(b.dwsf_bytes),
            bytes(b.dwpp_bytes),
            b.pattern,
            b.stats.restart_hits,
            b.stats.restart_misses,
            errors(b.stats.demotion_errors + b.stats.catalog_errors, &b.stats.last_error)
        )));
    }
    if recalls_shown(status) {
        // The mean wait of a recall: on-demand's cost to the node asking.
        let mean_ms = status.recall_wait_s * 1000.0 / status.recalls.max(1) as f64;
        lines.push(Line::from(format!(
            " recall {} files from other nodes ({} timed out), {mean_ms:.0} ms each on average · {} answered for other nodes",
            status.recalls, status.recall_timeouts, status.recalls_answered
        )));
    }
    lines
}

/// `n` bytes in binary units (`512 B`, `1.5 MiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `bytes_per_s` in binary units per second.
pub fn rate(bytes_per_s: f64) -> String {
    format!("{}/s", bytes(bytes_per_s.max(0.0).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use sluice_status::{CkptStats, CkptStatusView, IncidentView, LiuStatusView, TierStatus};
    use std::time::Duration;

    const MIB: u64 = 1024 * 1024;

    /// The screen's text, one line per row.
    fn draw(screen: &Screen, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| render(f, screen)).unwrap();
        let buffer = terminal.backend().buffer();
        let mut text = String::new();
        for y in 0..height {
            for x in 0..width {
                text.push_str(buffer[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }

    fn status(fast_bytes: u64, flushed_bytes: u64, buffered_bytes: u64) -> Status {
        Status {
            mountpoint: "/mnt/sluice".into(),
            fast: TierStatus {
                describe: "posix /nvme/fast".into(),
                total_bytes: 100 * 1024 * MIB,
                free_bytes: 40 * 1024 * MIB,
                ..TierStatus::default()
            },
            capacity: TierStatus {
                describe: "emulated hdd over posix /data".into(),
                total_bytes: 0,
                free_bytes: 0,
                ..TierStatus::default()
            },
            policy: "ssdup+".into(),
            route: "fast".into(),
            last_random_fraction: Some(0.4567),
            threshold: 0.35,
            streams: 12,
            streams_to_fast: 7,
            regions: vec![
                "filling".into(),
                "full".into(),
                "empty".into(),
                "flushing".into(),
            ],
            region_used_bytes: vec![MIB, 64 * MIB, 0, 64 * MIB],
            region_bytes: 64 * MIB,
            fast_bytes,
            flushed_bytes,
            buffered_bytes,
            oldest_buffered_age_s: Some(4.25),
            fuse_write_bytes: fast_bytes,
            fuse_writes: 10,
            ..Status::default()
        }
    }

    fn running() -> Screen {
        let mut screen = Screen::new("/mnt/sluice", Duration::from_secs(1), 60);
        screen.handle_sample(Duration::from_secs(10), Ok(status(10 * MIB, 0, 10 * MIB)));
        let mut later = status(30 * MIB, 4 * MIB, 26 * MIB);
        later.last_errors = vec![IncidentView {
            at: "2026-11-24T10:00:00Z".into(),
            op: "write".into(),
            path: Some("out/ckpt.0".into()),
            tier: Some("fast".into()),
            errno: Some(28),
            errno_name: Some("ENOSPC".into()),
            message: "fast tier full".into(),
        }];
        later.incidents_total = 3;
        screen.handle_sample(Duration::from_secs(12), Ok(later));
        screen
    }

    #[test]
    fn the_screen_shows_bandwidth_routing_buffer_and_errors() {
        let text = draw(&running(), 160, 50);
        for expected in [
            "/mnt/sluice",
            "policy ssdup+",
            "answering",
            // 20 MiB to the log in 2 s; the flusher read 4 MiB of it back
            // and wrote it to the capacity tier.
            " fast         10.0 MiB/s     2.0 MiB/s   40.0 GiB free of 100.0 GiB   posix /nvme/fast",
            " capacity      2.0 MiB/s         0 B/s   space unknown                emulated hdd",
            " mount        10.0 MiB/s         0 B/s   10 writes, 0 reads, 0 fsyncs, 0 errors",
            "route    fast · last stream 45.7% random · threshold 0.350 · 12 streams, 7 to fast",
            "buffered 26.0 MiB (+8.0 MiB/s) · oldest buffered write 4.2 s ago",
            "flushed  4.0 MiB (2.0 MiB/s)",
            "f 1 filling · F 1 full · > 1 flushing · . 1 empty, 64.0 MiB each  [fF.>]",
            "fast write 10.0 MiB/s (max 10.0 MiB/s)",
            "buffered 26.0 MiB (max 26.0 MiB)",
            "latest errors, newest first (3 since mount)",
            "write out/ckpt.0 [fast tier, ENOSPC] fast tier full",
        ] {
            assert!(text.contains(expected), "no {expected:?} in\n{text}");
        }
        assert!(!text.contains("LiU"), "LiU is off:\n{text}");
        assert!(!text.contains("BBOS"), "BBOS is off:\n{text}");
    }

    #[test]
    fn liu_and_bbos_lines_appear_when_they_are_on() {
        let mut screen = running();
        let latest = &mut screen.latest.as_mut().unwrap().status;
        latest.liu = Some(LiuStatusView {
            buffered_segments: 5,
            lifted_segments: 2,
            buffer_hits: 40,
            ..LiuStatusView::default()
        });
        latest.bbos = Some(CkptStatusView {
            scheme: "BBOS".into(),
            eviction: "cold-first".into(),
            jobs: 2,
            staged_files: 3,
            staged_bytes: 3 * MIB,
            stats: CkptStats {
                restart_hits: 4,
                restart_misses: 1,
                ..CkptStats::default()
            },
            ..CkptStatusView::default()
        });
        let text = draw(&screen, 160, 50);
        assert!(
            text.contains(" LiU   5 segments buffered, 0 ghosts · 2 heads lifted"),
            "{text}"
        );
        assert!(
            text.contains(
                " BBOS  BBOS (cold-first eviction), 2 jobs, 0 writers · staged 3 (3.0 MiB)"
            ),
            "{text}"
        );
        // The end of the longest line: nothing is cut at 160 columns.
        assert!(
            text.contains("restarts 4 hits / 1 misses · 0 errors"),
            "{text}"
        );
        assert!(!text.contains(" recall "), "no recall line yet: {text}");
    }

    /// Issue 34: on-demand's recalls get a line once there are any: how
    /// many, how many timed out, their mean wait, and those answered.
    #[test]
    fn the_recall_line_appears_once_a_file_was_recalled() {
        let mut screen = running();
        let latest = &mut screen.latest.as_mut().unwrap().status;
        latest.recalls = 4;
        latest.recall_timeouts = 1;
        latest.recall_wait_s = 0.5;
        latest.recalls_answered = 2;
        let text = draw(&screen, 160, 50);
        assert!(
            text.contains(
                " recall 4 files from other nodes (1 timed out), 125 ms each on average · 2 answered for other nodes"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_mount_that_stopped_answering_says_so_and_keeps_its_last_figures() {
        let mut screen = running();
        screen.handle_sample(
            Duration::from_secs(13),
            Err("/mnt/sluice is not a sluice mount".into()),
        );
        screen.handle_sample(Duration::from_secs(20), Err("still gone".into()));
        let text = draw(&screen, 160, 50);
        assert!(
            text.contains(
                "NOT ANSWERING for 7 s (figures below are its last answer; still polling): still gone"
            ),
            "{text}"
        );
        assert!(text.contains("buffered 26.0 MiB"), "{text}");
        // No rate across the outage.
        assert!(
            text.contains(" fast                  -             -"),
            "{text}"
        );
    }

    #[test]
    fn a_lost_capacity_tier_is_shown_with_its_cause() {
        let mut screen = running();
        let latest = screen.latest.as_mut().unwrap();
        latest.status.capacity.state = "lost".into();
        latest.status.capacity.state_cause = Some("/data no longer exists".into());
        let text = draw(&screen, 120, 40);
        assert!(
            text.contains("!! capacity tier LOST: /data no longer exists"),
            "{text}"
        );
    }

    #[test]
    fn small_and_empty_screens_draw_without_panicking() {
        let waiting = Screen::new("/mnt/sluice", Duration::from_secs(1), 60);
        assert!(draw(&waiting, 80, 24).contains("waiting for the mount's first answer"));
        draw(&running(), 80, 24);
        draw(&running(), 20, 5);
        draw(&running(), 1, 1);
    }

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * MIB), "3.0 MiB");
        assert_eq!(rate(-5.0), "0 B/s");
        assert_eq!(rate(2.0 * MIB as f64), "2.0 MiB/s");
    }
}
