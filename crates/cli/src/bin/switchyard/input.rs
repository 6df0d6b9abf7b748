//! Reading inputs: plain lines, or JSON lines with a `text` field, from a file or stdin.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Reads the inputs in `path` (`-` for stdin). A line starting with `{` is a JSON object whose
/// `text` field is the input; any other line is the input itself. Empty lines are skipped.
pub fn read(path: &Path) -> Result<Vec<String>> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).context("reading stdin")?;
    } else {
        text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// Parses input lines (see [`read`]).
pub fn parse(text: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if line.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("line {}: not valid JSON", i + 1))?;
            match v.get("text").and_then(serde_json::Value::as_str) {
                Some(t) => out.push(t.to_owned()),
                None => bail!("line {}: a JSON line needs a string field `text`", i + 1),
            }
        } else {
            out.push(line.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_json_lines() {
        let got = parse("hello\n\n{\"text\": \"from json\", \"id\": 3}\r\nlast").unwrap();
        assert_eq!(got, ["hello", "from json", "last"]);
    }

    #[test]
    fn bad_json_lines_name_the_line() {
        let e = parse("ok\n{\"txt\": 1}\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("line 2: a JSON line needs a string field `text`"),
            "{e:#}"
        );
        let e = parse("{broken\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 1: not valid JSON"), "{e:#}");
    }
}
