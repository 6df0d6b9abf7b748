//! A progress line on stderr for long inputs.

use std::io::IsTerminal;

/// A progress line on stderr, shown only for file input on a terminal.
pub struct Progress {
    total: usize,
    on: bool,
}

impl Progress {
    /// A line for `total` inputs, shown if they come `from_file` and stderr is a terminal.
    pub fn new(total: usize, from_file: bool) -> Self {
        Progress { total, on: from_file && std::io::stderr().is_terminal() }
    }

    /// Shows `done` of the total.
    pub fn show(&self, done: usize) {
        if self.on {
            let width = 30;
            let filled = (done * width).checked_div(self.total).unwrap_or(width);
            eprint!(
                "\r[{}{}] {done}/{}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                self.total
            );
        }
    }

    /// Ends the line.
    pub fn finish(&self) {
        if self.on {
            eprintln!();
        }
    }
}
