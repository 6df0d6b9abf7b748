//! Reading inputs as the CLI does: plain lines, or JSON lines with a `text` field, from a file
//! or stdin, a chunk at a time.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::{Error, Result};

/// An input error with its message.
fn fail<T>(msg: String) -> Result<T> {
    Err(Error::Input(msg))
}

/// The most bytes one input may have: far more than any model reads (8192 tokens are tens of
/// kilobytes of text), so that a runaway line is an error rather than gigabytes of tokenizing.
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// The most bytes one line of a file may have: room for an input at the limit written as JSON,
/// escapes included. Longer, it is an error before the rest of it is read.
const MAX_LINE_BYTES: usize = 4 * MAX_INPUT_BYTES;

/// Inputs per chunk: what the commands that stream hold in memory at once.
pub const CHUNK: usize = 1024;

/// How an input file's lines are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// JSON lines if the first non-empty line is a JSON object, else plain text.
    Auto,
    /// Each non-empty line is a JSON object whose `text` field is the input.
    Jsonl,
    /// Each non-empty line is an input, as it is.
    Text,
}

/// Inputs, a chunk at a time: texts given as arguments, or the lines of a file or stdin. Empty
/// lines are skipped, a byte-order mark at the start is dropped, and every error names its line.
pub struct Inputs {
    source: Source,
    format: Format,
    /// Whether the file is JSON lines, once its first non-empty line has said.
    jsonl: Option<bool>,
    /// Lines read so far.
    line: usize,
}

enum Source {
    Texts(Vec<String>),
    Lines { name: String, reader: Box<dyn BufRead> },
}

impl Inputs {
    /// The texts given as arguments, as one chunk.
    pub fn texts(texts: Vec<String>) -> Inputs {
        Inputs { source: Source::Texts(texts), format: Format::Text, jsonl: None, line: 0 }
    }

    /// The lines of `path` (`-` for stdin), in `format`.
    pub fn open(path: &Path, format: Format) -> Result<Inputs> {
        let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
            Box::new(BufReader::new(std::io::stdin()))
        } else {
            let file = std::fs::File::open(path).map_err(|source| {
                Error::from(switchyard_core::Error::Io { path: path.to_owned(), source })
            })?;
            Box::new(BufReader::new(file))
        };
        Ok(Inputs::lines(path.display().to_string(), reader, format))
    }

    /// The lines `reader` gives, in `format`; errors say they are in `name`.
    pub fn lines(name: String, reader: Box<dyn BufRead>, format: Format) -> Inputs {
        Inputs { source: Source::Lines { name, reader }, format, jsonl: None, line: 0 }
    }

    /// The next inputs, at most [`CHUNK`] of them from a file; `None` when there are no more.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<String>>> {
        let chunk = match &mut self.source {
            Source::Texts(texts) => {
                for (i, t) in texts.iter().enumerate() {
                    too_long(t, &format!("text {}", i + 1))?;
                }
                std::mem::take(texts)
            }
            Source::Lines { name, reader } => {
                let mut chunk = Vec::new();
                while chunk.len() < CHUNK {
                    let in_name = |e: Error| match e {
                        Error::Input(m) => Error::Input(format!("in {name}: {m}")),
                        other => other,
                    };
                    let Some(raw) = read_line(reader.as_mut(), self.line + 1).map_err(in_name)?
                    else {
                        break;
                    };
                    self.line += 1;
                    let text = parse_line(&raw, self.line, self.format, &mut self.jsonl)
                        .map_err(in_name)?;
                    chunk.extend(text);
                }
                chunk
            }
        };
        Ok((!chunk.is_empty()).then_some(chunk))
    }

    /// Whether there is nothing to read: no texts, or a file or stream at its end. Waits for a
    /// stream's first bytes or its end, not for a whole line.
    pub fn at_end(&mut self) -> Result<bool> {
        match &mut self.source {
            Source::Texts(texts) => Ok(texts.is_empty()),
            Source::Lines { name, reader } => match reader.fill_buf() {
                Ok(buffered) => Ok(buffered.is_empty()),
                Err(e) => fail(format!("in {name}: reading line {}: {e}", self.line + 1)),
            },
        }
    }

    /// Every input, in one list.
    pub fn all(mut self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk()? {
            all.extend(chunk);
        }
        Ok(all)
    }
}

/// Line `n` of `reader` without its line ending, or `None` at the end; an error past
/// [`MAX_LINE_BYTES`], before the rest of the line is read.
fn read_line(reader: &mut dyn BufRead, n: usize) -> Result<Option<Vec<u8>>> {
    let mut raw = Vec::new();
    let limit = MAX_LINE_BYTES as u64 + 1;
    let read = match reader.take(limit).read_until(b'\n', &mut raw) {
        Ok(read) => read,
        Err(e) => return fail(format!("reading line {n}: {e}")),
    };
    if read == 0 {
        return Ok(None);
    }
    if raw.last() == Some(&b'\n') {
        raw.pop();
    } else if raw.len() > MAX_LINE_BYTES {
        return fail(format!(
            "line {n} is longer than {MAX_LINE_BYTES} bytes; inputs are limited to {MAX_INPUT_BYTES}"
        ));
    }
    if raw.last() == Some(&b'\r') {
        raw.pop();
    }
    Ok(Some(raw))
}

/// The input on line `n` (`None` for an empty line), the file's format decided by its first
/// non-empty line where `format` is auto.
fn parse_line(
    raw: &[u8],
    n: usize,
    format: Format,
    jsonl: &mut Option<bool>,
) -> Result<Option<String>> {
    let raw = if n == 1 { raw.strip_prefix("\u{feff}".as_bytes()).unwrap_or(raw) } else { raw };
    let Ok(line) = std::str::from_utf8(raw) else {
        return fail(format!("line {n}: not UTF-8"));
    };
    if line.trim().is_empty() {
        return Ok(None);
    }
    let is_jsonl = *jsonl.get_or_insert(match format {
        Format::Auto => {
            line.trim_start().starts_with('{')
                && serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object())
        }
        Format::Jsonl => true,
        Format::Text => false,
    });
    let text = if is_jsonl {
        let v: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return fail(format!("line {n}: not valid JSON (the file is JSON lines): {e}"));
            }
        };
        match v.get("text").and_then(serde_json::Value::as_str) {
            Some(t) => t.to_owned(),
            None => return fail(format!("line {n}: a JSON line needs a string field `text`")),
        }
    } else {
        line.to_owned()
    };
    too_long(&text, &format!("line {n}"))?;
    Ok(Some(text))
}

/// An error naming `place` if `text` is longer than [`MAX_INPUT_BYTES`].
pub(crate) fn too_long(text: &str, place: &str) -> Result<()> {
    if text.len() > MAX_INPUT_BYTES {
        let n = text.len();
        return fail(format!(
            "{place}: an input of {n} bytes; inputs are limited to {MAX_INPUT_BYTES}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8], format: Format) -> Result<Vec<String>> {
        let reader = Box::new(std::io::Cursor::new(bytes.to_vec()));
        Inputs::lines("test".into(), reader, format).all()
    }

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
        assert!(e.to_string().contains("line 2: a JSON line needs a string field `text`"));
        let e = auto("{\"text\": \"ok\"}\n\n{broken\n").unwrap_err();
        assert!(e.to_string().contains("line 3: not valid JSON"), "{e:#}");
        let e = parse(b"{broken\n", Format::Jsonl).unwrap_err();
        assert!(e.to_string().contains("in test: line 1: not valid JSON"), "{e:#}");
        let e = parse(b"fine\nbad \xff byte\n", Format::Auto).unwrap_err();
        assert!(e.to_string().contains("line 2: not UTF-8"), "{e:#}");
    }

    #[test]
    fn inputs_over_the_limit_are_errors() {
        let long = "a".repeat(MAX_INPUT_BYTES + 1);
        let e = auto(&format!("short\n{long}\n")).unwrap_err();
        assert!(e.to_string().contains("line 2: an input of 1048577 bytes"), "{e:#}");
        assert_eq!(auto(&"b".repeat(MAX_INPUT_BYTES)).unwrap().len(), 1);
        // A line far past the limit is refused before it is read whole.
        let e = auto(&"c".repeat(MAX_LINE_BYTES + 10)).unwrap_err();
        assert!(e.to_string().contains("line 1 is longer than"), "{e:#}");
        let e = Inputs::texts(vec!["ok".into(), long]).all().unwrap_err();
        assert!(e.to_string().contains("text 2: an input of 1048577 bytes"), "{e:#}");
    }

    /// A stream that gives `data`, then fails.
    struct Failing(std::io::Cursor<Vec<u8>>);

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::Error::other("the disk went away")),
                n => Ok(n),
            }
        }
    }

    fn failing(data: &str) -> Inputs {
        let reader = BufReader::new(Failing(std::io::Cursor::new(data.as_bytes().to_vec())));
        Inputs::lines("in.txt".into(), Box::new(reader), Format::Auto)
    }

    #[test]
    fn read_errors_name_the_stream_and_the_line() {
        // Before any line: asking whether there is input at all.
        let e = failing("").at_end().unwrap_err().to_string();
        assert_eq!(e, "in in.txt: reading line 1: the disk went away");
        // After a line that was read whole.
        let mut inputs = failing("one\n");
        assert!(!inputs.at_end().unwrap());
        let e = inputs.next_chunk().unwrap_err().to_string();
        assert_eq!(e, "in in.txt: reading line 2: the disk went away");
    }

    #[test]
    fn a_file_comes_a_chunk_at_a_time() {
        let text: String = (0..CHUNK * 2 + 3).map(|i| format!("line {i}\n")).collect();
        let mut inputs =
            Inputs::lines("t".into(), Box::new(std::io::Cursor::new(text)), Format::Auto);
        let sizes: Vec<usize> =
            std::iter::from_fn(|| inputs.next_chunk().unwrap()).map(|c| c.len()).collect();
        assert_eq!(sizes, [CHUNK, CHUNK, 3]);
    }
}
