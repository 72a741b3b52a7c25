//! Progress for loading and synthesis: a bar when stderr is a terminal,
//! a few plain lines (0%, 25%, ..., 100%) when it is not.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress display over a fraction from 0 to 1.
pub struct Progress {
    label: String,
    bar: Option<ProgressBar>,
    next_quarter: u32,
}

impl Progress {
    /// A bar (terminal) or plain lines (otherwise) labelled `label`.
    pub fn new(label: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(1000);
            b.set_style(
                ProgressStyle::with_template("{msg:>14} [{bar:40}] {percent:>3}% {elapsed}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_message(label.to_string());
            b
        });
        Progress {
            label: label.to_string(),
            bar,
            next_quarter: 0,
        }
    }

    /// Report the fraction done.
    pub fn set(&mut self, f: f32) {
        let f = f.clamp(0.0, 1.0);
        match &self.bar {
            Some(b) => b.set_position((f * 1000.0) as u64),
            None => {
                while self.next_quarter <= 4 && f * 4.0 >= self.next_quarter as f32 {
                    eprintln!("{}: {:>3}%", self.label, self.next_quarter * 25);
                    self.next_quarter += 1;
                }
            }
        }
    }

    /// Done: clear the bar (or print 100% if not yet printed).
    pub fn finish(&mut self) {
        self.set(1.0);
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
