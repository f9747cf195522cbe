//! A spinner on stderr while something slow happens (compiling a
//! component, uploading one), or a bar while something countable does
//! (a replay), shown only when stderr is a terminal so pipes and logs
//! stay clean.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A running spinner (or counting bar); cleared when dropped.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// Starts a spinner saying `message`, if stderr is a terminal.
    pub fn start(message: impl Into<String>) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            bar.set_style(style);
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(100));
        Self(Some(bar))
    }
}

impl Spinner {
    /// Starts a bar counting toward a total instead, drawn from
    /// `template` (indicatif's, with `{bar}`, `{pos}`, `{len}`), if stderr
    /// is a terminal; [`show`](Self::show) moves it.
    pub fn counting(template: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        Self(Some(bar))
    }

    /// Shows `done` of `total` on a counting bar.
    pub fn show(&self, done: u64, total: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(total);
            bar.set_position(done);
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }
}
