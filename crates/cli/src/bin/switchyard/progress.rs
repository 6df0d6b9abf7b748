//! A progress line on stderr for long inputs.

use std::io::IsTerminal;

/// A progress line on stderr, shown only for file input on a terminal.
pub struct Progress {
    total: Option<usize>,
    on: bool,
}

impl Progress {
    /// A line for `total` inputs (a count alone if unknown, as when streaming), shown if they
    /// come `from_file` and stderr is a terminal.
    pub fn new(total: Option<usize>, from_file: bool) -> Self {
        Progress { total, on: from_file && std::io::stderr().is_terminal() }
    }

    /// Shows `done` inputs, of the total where it is known.
    pub fn show(&self, done: usize) {
        if !self.on {
            return;
        }
        match self.total {
            Some(total) => {
                let width = 30;
                let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
                eprint!("\r[{}{}] {done}/{total}", "#".repeat(filled), " ".repeat(width - filled));
            }
            None => eprint!("\r{done} inputs"),
        }
    }

    /// Ends the line.
    pub fn finish(&self) {
        if self.on {
            eprintln!();
        }
    }
}
