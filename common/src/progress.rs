//! Progress for loading and synthesis: a bar when stderr is a terminal;
//! when it is not, plain lines at 25%, 50%, ... once the work has taken
//! more than a second (quick loads print nothing).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress display over a fraction from 0 to 1.
pub struct Progress {
    label: String,
    bar: Option<ProgressBar>,
    next_quarter: u32,
    start: std::time::Instant,
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
            next_quarter: 1,
            start: std::time::Instant::now(),
        }
    }

    /// Report the fraction done.
    pub fn set(&mut self, f: f32) {
        let f = f.clamp(0.0, 1.0);
        match &self.bar {
            Some(b) => b.set_position((f * 1000.0) as u64),
            None => {
                if self.start.elapsed().as_secs_f32() < 1.0 {
                    return;
                }
                let mut reached = None;
                while self.next_quarter <= 4 && f * 4.0 >= self.next_quarter as f32 {
                    reached = Some(self.next_quarter * 25);
                    self.next_quarter += 1;
                }
                if let Some(pct) = reached {
                    eprintln!(
                        "{}: {pct:>3}% ({:.1} s)",
                        self.label,
                        self.start.elapsed().as_secs_f32()
                    );
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
