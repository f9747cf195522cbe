//! A spinner on stderr while something slow happens (compiling a
//! component, uploading one), shown only when stderr is a terminal so
//! pipes and logs stay clean.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A running spinner; cleared when finished or dropped.
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

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }
}
