//! Reading inputs: plain lines, or JSON lines with a `text` field, from a file or stdin.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The most bytes one input may have: far more than any model reads (8192 tokens are tens of
/// kilobytes of text), so that a runaway line is an error rather than gigabytes of tokenizing.
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// How an input file's lines are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON lines if the first non-empty line is a JSON object, else plain text.
    Auto,
    /// Each non-empty line is a JSON object whose `text` field is the input.
    Jsonl,
    /// Each non-empty line is an input, as it is.
    Text,
}

/// Reads the inputs in `path` (`-` for stdin) in `format`. Empty lines are skipped, and a
/// byte-order mark at the start is dropped.
pub fn read(path: &Path, format: Format) -> Result<Vec<String>> {
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut bytes).context("reading stdin")?;
    } else {
        bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    }
    parse(&bytes, format).with_context(|| format!("in {}", path.display()))
}

/// Parses input lines (see [`read`]); every error names its line.
pub fn parse(bytes: &[u8], format: Format) -> Result<Vec<String>> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let lines = bytes.split(|&b| b == b'\n').enumerate().map(|(i, raw)| {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = std::str::from_utf8(raw).with_context(|| format!("line {}: not UTF-8", i + 1));
        (i + 1, line)
    });
    let mut out = Vec::new();
    let mut jsonl = None;
    for (n, line) in lines {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let jsonl = *jsonl.get_or_insert(match format {
            Format::Auto => {
                line.trim_start().starts_with('{')
                    && serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object())
            }
            Format::Jsonl => true,
            Format::Text => false,
        });
        let text = if jsonl {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("line {n}: not valid JSON (the file is JSON lines)"))?;
            match v.get("text").and_then(serde_json::Value::as_str) {
                Some(t) => t.to_owned(),
                None => bail!("line {n}: a JSON line needs a string field `text`"),
            }
        } else {
            line.to_owned()
        };
        if text.len() > MAX_INPUT_BYTES {
            bail!(
                "line {n}: an input of {} bytes; inputs are limited to {MAX_INPUT_BYTES}",
                text.len()
            );
        }
        out.push(text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(text: &str) -> Result<Vec<String>> {
        parse(text.as_bytes(), Format::Auto)
    }

    #[test]
    fn a_file_is_json_lines_or_plain_text_as_its_first_line_says() {
        let got = auto("{\"text\": \"from json\", \"id\": 3}\r\n\n{\"text\": \"b\"}").unwrap();
        assert_eq!(got, ["from json", "b"]);
        // In plain text a line that starts with `{` is an input like any other.
        let got = auto("hello\n\n{not json}\r\n{\"text\": \"x\"}\nlast").unwrap();
        assert_eq!(got, ["hello", "{not json}", "{\"text\": \"x\"}", "last"]);
        let got = parse(b"{\"text\": \"x\"}", Format::Text).unwrap();
        assert_eq!(got, ["{\"text\": \"x\"}"]);
        assert_eq!(parse(b"{\"text\": \"x\"}", Format::Jsonl).unwrap(), ["x"]);
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        assert_eq!(auto("\u{feff}{\"text\": \"a\"}\n").unwrap(), ["a"]);
        assert_eq!(auto("\u{feff}plain\n").unwrap(), ["plain"]);
    }

    #[test]
    fn errors_name_the_line() {
        let e = auto("{\"text\": \"ok\"}\n{\"txt\": 1}\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 2: a JSON line needs a string field `text`"));
        let e = auto("{\"text\": \"ok\"}\n\n{broken\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 3: not valid JSON"), "{e:#}");
        let e = parse(b"{broken\n", Format::Jsonl).unwrap_err();
        assert!(format!("{e:#}").contains("line 1: not valid JSON"), "{e:#}");
        let e = parse(b"fine\nbad \xff byte\n", Format::Auto).unwrap_err();
        assert!(format!("{e:#}").contains("line 2: not UTF-8"), "{e:#}");
    }

    #[test]
    fn an_input_over_the_limit_is_an_error() {
        let long = "a".repeat(MAX_INPUT_BYTES + 1);
        let e = auto(&format!("short\n{long}\n")).unwrap_err();
        assert!(format!("{e:#}").contains("line 2: an input of 1048577 bytes"), "{e:#}");
        assert_eq!(auto(&"b".repeat(MAX_INPUT_BYTES)).unwrap().len(), 1);
    }
}
