//! `sluice top MOUNTPOINT`: a live terminal view of a running mount
//! (issue 21; docs/top.md).
//!
//! - [`rates`]: rates from consecutive status snapshots, the sparklines'
//!   history (pure);
//! - [`screen`]: what the view knows — newest snapshot, rates, history,
//!   whether the mount answers (pure, fed each poll's outcome);
//! - [`view`]: drawing a screen with ratatui (tested on `TestBackend`);
//! - [`run`]: the terminal and the loop — a poller thread asks the mount's
//!   control socket for `status` (the answer `sluice status --json`
//!   prints) every interval; the main thread draws and reads keys.
//!
//! The poller is a thread of its own so that a mount that hangs (a FUSE
//! request stuck in a dead mount) cannot freeze the keys: `q` still quits.
//! The terminal is restored on every way out: `q`, Esc, Ctrl-C, an error,
//! and a panic (ratatui's panic hook restores it before the message).

pub mod rates;
pub mod screen;
pub mod view;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use sluice_status::{control_request, Status};

use crate::top::rates::HISTORY_DEFAULT;
use crate::top::screen::Screen;

/// Shortest poll interval: the status snapshot takes the engine's lock,
/// and a person cannot read faster.
pub const INTERVAL_MIN: Duration = Duration::from_millis(100);

/// Longest poll interval `sluice top --interval` takes.
pub const INTERVAL_MAX: Duration = Duration::from_secs(3600);

/// `--interval`'s value: seconds from [`INTERVAL_MIN`] to [`INTERVAL_MAX`];
/// the error names the range.
pub fn parse_interval_s(s: &str) -> Result<f64, String> {
    let min = INTERVAL_MIN.as_secs_f64();
    let max = INTERVAL_MAX.as_secs_f64();
    match s.parse::<f64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from {min} to {max}"
        )),
    }
}

/// How often the keys are checked between polls (and the screen redrawn).
const KEY_POLL: Duration = Duration::from_millis(100);

/// One status snapshot of the mount at `mountpoint`.
pub fn fetch(mountpoint: &Path) -> Result<Status, String> {
    let answer = control_request(mountpoint, "status").map_err(|e| e.to_string())?;
    serde_json::from_str(&answer)
        .map_err(|e| format!("the mount answered something unreadable: {e}"))
}

/// Runs the view until the user quits (`q`, Esc, Ctrl-C). A path that is
/// not a sluice mount, and a standard output that is not a terminal, are
/// errors before the screen is touched; a mount that goes away later is
/// shown on the screen, which keeps polling.
pub fn run(mountpoint: &Path, interval: Duration) -> Result<(), String> {
    if interval < INTERVAL_MIN {
        return Err(format!(
            "--interval {:?} is too short: at least {:?}",
            interval, INTERVAL_MIN
        ));
    }
    let first = fetch(mountpoint)?;
    if !std::io::stdout().is_terminal() {
        return Err(
            "sluice top needs a terminal; for scripts, `sluice status --json MOUNTPOINT` prints the same snapshot"
                .to_string(),
        );
    }
    let started = Instant::now();
    let mut screen = Screen::new(mountpoint.display().to_string(), interval, HISTORY_DEFAULT);
    screen.handle_sample(Duration::ZERO, Ok(first));
    let samples = spawn_poller(mountpoint, interval, started);
    let mut terminal = match ratatui::try_init() {
        Ok(terminal) => terminal,
        Err(e) => {
            ratatui::restore();
            return Err(format!("setting up the terminal: {e}"));
        }
    };
    let result = event_loop(&mut terminal, &mut screen, &samples);
    // Dropping the terminal shows the cursor again; restore leaves raw
    // mode and the alternate screen.
    drop(terminal);
    ratatui::restore();
    result
}

/// Polls the mount every `interval` on a thread of its own and sends each
/// outcome with its time; ends when the receiver is gone.
fn spawn_poller(
    mountpoint: &Path,
    interval: Duration,
    started: Instant,
) -> mpsc::Receiver<(Duration, Result<Status, String>)> {
    let (send, receive) = mpsc::channel();
    let mountpoint = mountpoint.to_path_buf();
    std::thread::spawn(move || loop {
        std::thread::sleep(interval);
        let outcome = fetch(&mountpoint);
        if send.send((started.elapsed(), outcome)).is_err() {
            return;
        }
    });
    receive
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    screen: &mut Screen,
    samples: &mpsc::Receiver<(Duration, Result<Status, String>)>,
) -> Result<(), String> {
    loop {
        while let Ok((at, outcome)) = samples.try_recv() {
            screen.handle_sample(at, outcome);
        }
        terminal
            .draw(|frame| view::render(frame, screen))
            .map_err(|e| format!("drawing: {e}"))?;
        if event::poll(KEY_POLL).map_err(|e| format!("reading keys: {e}"))? {
            if let Event::Key(key) = event::read().map_err(|e| format!("reading keys: {e}"))? {
                let quit = key.kind == KeyEventKind::Press
                    && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                        || (key.code == KeyCode::Char('c')
                            && key.modifiers.contains(KeyModifiers::CONTROL)));
                if quit {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_seconds_within_its_range() {
        assert_eq!(parse_interval_s("1"), Ok(1.0));
        assert_eq!(parse_interval_s("0.1"), Ok(0.1));
        assert_eq!(parse_interval_s("3600"), Ok(3600.0));
        for refused in ["0.05", "3601", "-1", "soon", "NaN"] {
            assert_eq!(
                parse_interval_s(refused),
                Err(format!(
                    "{refused:?} is not a number of seconds from 0.1 to 3600"
                )),
            );
        }
    }
}
