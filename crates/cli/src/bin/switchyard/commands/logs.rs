//! The logs of the commands that serve: to stderr, at RUST_LOG's level.

use anyhow::Result;

/// Logs to stderr, as text or JSON lines, at RUST_LOG's level, else at `default` (such as
/// `info`).
pub fn install(json: bool, default: &str) -> Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let installed = if json { builder.json().try_init() } else { builder.try_init() };
    installed.map_err(|e| anyhow::anyhow!("starting the logs: {e}"))
}

/// Logs a panic as one line (what panicked, where) instead of a message and a backtrace: a
/// server whose connection tasks panic on a client's bytes closes that connection and goes on,
/// and its log must not grow by a backtrace per connection.
pub fn panics_in_one_line() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        let at =
            info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        tracing::error!("a task panicked{at}: {}", one_line(&what));
    }));
}

/// `s` on one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_message_is_put_on_one_line() {
        assert_eq!(super::one_line("frame\n  decode failed:\r\n bad"), "frame decode failed: bad");
    }
}
