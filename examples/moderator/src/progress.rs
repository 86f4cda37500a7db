//! Progress bars for anything that takes more than a second. The library hands them out
//! through [`Progress`], so tests and non-terminal runs get hidden ones.

use indicatif::{ProgressBar, ProgressStyle};

/// Hands out progress bars, drawn on stderr or hidden.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    visible: bool,
}

impl Progress {
    /// Bars drawn on stderr (indicatif hides them itself when stderr is not a terminal).
    #[must_use]
    pub fn stderr() -> Self {
        Progress { visible: true }
    }

    /// Bars that draw nothing.
    #[must_use]
    pub fn hidden() -> Self {
        Progress { visible: false }
    }

    /// A bar of `len` steps labelled `what`.
    #[must_use]
    pub fn bar(&self, len: u64, what: &str) -> ProgressBar {
        if !self.visible {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len).with_message(what.to_owned());
        if let Ok(style) =
            ProgressStyle::with_template("{msg:<28} [{bar:30}] {pos}/{len} ({elapsed})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    }
}
