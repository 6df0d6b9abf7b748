//! [`Args`]: a subcommand's `--name VALUE` options, with a usage line for what is missing or
//! malformed (an error and exit status 2, not a panic).

use std::fmt::Display;
use std::io::Write;
use std::str::FromStr;

/// The command line of one subcommand and its usage line.
pub(crate) struct Args<'a> {
    args: &'a [String],
    usage: &'static str,
}

impl<'a> Args<'a> {
    /// `args`, whose subcommand's synopsis is `usage`.
    pub(crate) fn new(args: &'a [String], usage: &'static str) -> Self {
        Args { args, usage }
    }

    /// The value of `--name`, if given.
    pub(crate) fn opt(&self, name: &str) -> Option<String> {
        let i = self.args.iter().position(|a| a == name)?;
        let value = self.args.get(i + 1).filter(|v| !v.starts_with("--"));
        Some(value.unwrap_or_else(|| self.fail(format!("{name} takes a value"))).clone())
    }

    /// Whether the switch `--name` is given.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.args.iter().any(|a| a == name)
    }

    /// The value of `--name`, which must be given.
    pub(crate) fn need(&self, name: &str) -> String {
        self.opt(name).unwrap_or_else(|| self.fail(format!("{name} is needed")))
    }

    /// The value of `--name` parsed, if given.
    pub(crate) fn parsed<T: FromStr<Err: Display>>(&self, name: &str) -> Option<T> {
        let v = self.opt(name)?;
        Some(v.parse().unwrap_or_else(|e| self.fail(format!("{name} {v}: {e}"))))
    }

    /// The value of `--name` parsed, which must be given.
    pub(crate) fn need_parsed<T: FromStr<Err: Display>>(&self, name: &str) -> T {
        self.parsed(name).unwrap_or_else(|| self.fail(format!("{name} is needed")))
    }

    /// Ends the program with `message` and the usage line.
    pub(crate) fn fail(&self, message: impl Display) -> ! {
        let usage = self.usage;
        // Nothing is left to report a failed write to.
        let _ = writeln!(
            std::io::stderr(),
            "switchyard-bench: {message}\nusage: switchyard-bench {usage}"
        );
        std::process::exit(2)
    }
}
