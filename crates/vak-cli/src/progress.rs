//! A progress line on stderr for long work, as cargo and git draw one: only
//! when stderr is a terminal, redrawn in place, erased when the work ends;
//! nothing at all when stderr is piped or a file, so logs stay clean.
//!
//! Hand-rolled rather than `indicatif` (four crates more, with `console`):
//! one line of counts needs no more than this. Its text is vak's own words
//! and numbers, never input.

use std::io::Write as _;
use std::time::{Duration, Instant};

/// How often the line is redrawn at most: a terminal need not be written
/// thousands of times a second.
const REDRAW: Duration = Duration::from_millis(100);

/// One progress line. Dropped, it erases itself.
pub(crate) struct Progress {
    label: &'static str,
    on: bool,
    drawn: Option<Instant>,
}

impl Progress {
    /// A line saying `label`, drawn only when stderr is a terminal.
    pub(crate) fn new(label: &'static str) -> Self {
        Progress {
            label,
            on: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            drawn: None,
        }
    }

    /// A line that says `label` and no count, drawn at once: work whose
    /// steps vak cannot count, said while it runs.
    pub(crate) fn status(label: &'static str) -> Self {
        let mut progress = Progress::new(label);
        progress.draw(&format!("{label}…"));
        progress
    }

    /// `done` of `total` (or of an unknown number) steps are done. The
    /// first step and the last are always drawn; those between, at most
    /// every [`REDRAW`].
    pub(crate) fn step(&mut self, done: usize, total: Option<usize>) {
        let due = self.drawn.is_none_or(|at| at.elapsed() >= REDRAW);
        if !self.on || !(due || Some(done) == total) {
            return;
        }
        let line = match total {
            Some(total) => format!("{}: {done}/{total}", self.label),
            None => format!("{}: {done}", self.label),
        };
        self.draw(&line);
    }

    fn draw(&mut self, line: &str) {
        if !self.on {
            return;
        }
        // `\r` back to the line's start, `ESC [ K` erases what a longer
        // line left behind.
        let _ = write!(std::io::stderr().lock(), "\r{line}\x1b[K");
        self.drawn = Some(Instant::now());
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.on && self.drawn.is_some() {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
        }
    }
}
