//! Buckets: the padded shapes plans are built for, and the per-stage table that lists them.
//!
//! The table is data, so an operator can change it without code. Its text format has one bucket
//! per line, `STAGE TOKENS SEQS MARKERS`, separated by whitespace; `#` starts a comment. Within a
//! stage, buckets are listed smallest first: each at least as large as the one before in every
//! dimension and larger in one, so "the smallest bucket that holds a batch" is well defined.
//!
//! ```text
//! # stage   tokens  seqs  markers
//! default      256     8      256
//! default     2048    64     2048
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The bucket table compiled into every build, used when none is given.
pub const DEFAULT_BUCKETS: &str = include_str!("default_buckets.txt");

/// The most tokens, sequences or markers a bucket may hold: 4Mi rows, far beyond any batch
/// that fits a device (all-MiniLM-L6-v2's activations alone take 6 KB a token), so that a
/// mistyped size is an error rather than an attempt to plan terabytes.
pub const MAX_BUCKET_ROWS: usize = 1 << 22;

/// The stage a lane uses unless told otherwise.
pub const DEFAULT_STAGE: &str = "default";

/// A padded shape: room for at most `tokens` tokens, `seqs` sequences and `markers` markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bucket {
    /// Token capacity.
    pub tokens: usize,
    /// Sequence capacity.
    pub seqs: usize,
    /// Marker capacity.
    pub markers: usize,
}

impl Bucket {
    /// A bucket of the given capacities.
    pub const fn new(tokens: usize, seqs: usize, markers: usize) -> Self {
        Bucket { tokens, seqs, markers }
    }

    /// Whether a batch of these sizes fits.
    pub const fn holds(&self, tokens: usize, seqs: usize, markers: usize) -> bool {
        tokens <= self.tokens && seqs <= self.seqs && markers <= self.markers
    }

    /// Rows of the given kind this bucket has room for.
    pub const fn rows(&self, rows: crate::Rows) -> usize {
        match rows {
            crate::Rows::Tokens => self.tokens,
            crate::Rows::Seqs => self.seqs,
            crate::Rows::Markers => self.markers,
        }
    }

    /// Checks that a batch fits: what every backend's `run` checks before touching its plan.
    pub fn admit(&self, batch: &crate::Batch<'_>) -> Result<()> {
        if self.holds(batch.tokens(), batch.seqs(), batch.markers()) {
            return Ok(());
        }
        Err(Error::BadBatch(format!(
            "a batch of {},{},{} does not fit the plan's bucket {self}",
            batch.tokens(),
            batch.seqs(),
            batch.markers()
        )))
    }

    /// Checks that a batch could fill this bucket: at least one token and one sequence, no more
    /// sequences than tokens, and no size beyond [`MAX_BUCKET_ROWS`].
    pub fn check(&self) -> Result<(), String> {
        let b = self;
        if b.tokens == 0 || b.seqs == 0 {
            return Err(format!("bucket {b} has no room; tokens and seqs must be at least 1"));
        }
        if b.seqs > b.tokens {
            return Err(format!(
                "bucket {b} has room for more sequences than tokens; every sequence has a token"
            ));
        }
        if b.tokens.max(b.markers) > MAX_BUCKET_ROWS {
            return Err(format!(
                "bucket {b} is too large; a bucket holds at most {MAX_BUCKET_ROWS} tokens and \
                 markers"
            ));
        }
        Ok(())
    }

    /// Whether `self` is at least `other` in every dimension.
    const fn covers(&self, other: &Bucket) -> bool {
        self.holds(other.tokens, other.seqs, other.markers)
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{},{}", self.tokens, self.seqs, self.markers)
    }
}

impl std::str::FromStr for Bucket {
    type Err = Error;

    /// Parses `TOKENS,SEQS,MARKERS` (as printed by `Display`).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Format(format!("bucket `{s}`: expected TOKENS,SEQS,MARKERS"));
        let mut it = s.split(',').map(|p| p.trim().parse::<usize>().map_err(|_| bad()));
        let b = Bucket::new(
            it.next().ok_or_else(bad)??,
            it.next().ok_or_else(bad)??,
            it.next().ok_or_else(bad)??,
        );
        if it.next().is_some() {
            return Err(bad());
        }
        b.check().map_err(Error::Format)?;
        Ok(b)
    }
}

/// Buckets per named stage, each stage's list smallest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    stages: BTreeMap<String, Vec<Bucket>>,
}

impl Default for Buckets {
    fn default() -> Self {
        DEFAULT_BUCKETS.parse().expect("the compiled-in bucket table parses")
    }
}

impl Buckets {
    /// A table with one stage.
    pub fn single(stage: &str, buckets: &[Bucket]) -> Result<Self> {
        let mut t = Buckets { stages: BTreeMap::new() };
        for (i, &b) in buckets.iter().enumerate() {
            t.push(stage, b).map_err(|msg| Error::Buckets { line: i + 1, msg })?;
        }
        Ok(t)
    }

    /// Reads a table from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| Error::Io { path: path.into(), source })?;
        text.parse()
    }

    /// The buckets of a stage, smallest first; empty if the stage is unknown.
    pub fn stage(&self, stage: &str) -> &[Bucket] {
        self.stages.get(stage).map_or(&[], Vec::as_slice)
    }

    /// The stage names, sorted.
    pub fn stages(&self) -> impl Iterator<Item = &str> {
        self.stages.keys().map(String::as_str)
    }

    /// The index within `stage` of the smallest bucket that holds a batch of these sizes.
    pub fn pick(&self, stage: &str, tokens: usize, seqs: usize, markers: usize) -> Result<usize> {
        let list = self.stage(stage);
        list.iter().position(|b| b.holds(tokens, seqs, markers)).ok_or_else(|| Error::NoBucket {
            stage: stage.to_owned(),
            tokens,
            seqs,
            markers,
            largest: list.last().map_or_else(|| "none".to_owned(), Bucket::to_string),
        })
    }

    fn push(&mut self, stage: &str, b: Bucket) -> Result<(), String> {
        b.check()?;
        let list = self.stages.entry(stage.to_owned()).or_default();
        if let Some(prev) = list.last()
            && (!b.covers(prev) || b == *prev)
        {
            return Err(format!(
                "bucket {b} of stage `{stage}` is not larger than the one before it ({prev}); \
                 list each stage smallest first"
            ));
        }
        list.push(b);
        Ok(())
    }
}

impl std::str::FromStr for Buckets {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let mut t = Buckets { stages: BTreeMap::new() };
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            let [stage, tokens, seqs, markers] = fields[..] else {
                return Err(Error::Buckets {
                    line,
                    msg: format!(
                        "expected `STAGE TOKENS SEQS MARKERS`, got {} fields: `{content}`",
                        fields.len()
                    ),
                });
            };
            let num = |what: &str, s: &str| {
                s.parse::<usize>().map_err(|_| Error::Buckets {
                    line,
                    msg: format!("{what} must be a whole number, got `{s}`"),
                })
            };
            let b =
                Bucket::new(num("tokens", tokens)?, num("seqs", seqs)?, num("markers", markers)?);
            t.push(stage, b).map_err(|msg| Error::Buckets { line, msg })?;
        }
        if t.stages.is_empty() {
            return Err(Error::Buckets { line: 1, msg: "the table lists no buckets".into() });
        }
        Ok(t)
    }
}

impl fmt::Display for Buckets {
    /// Writes the table in the text format it parses from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# stage tokens seqs markers")?;
        for (stage, list) in &self.stages {
            for b in list {
                writeln!(f, "{stage} {} {} {}", b.tokens, b.seqs, b.markers)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_checks_every_dimension() {
        let b = Bucket::new(128, 4, 16);
        assert!(b.holds(128, 4, 16));
        assert!(b.holds(0, 0, 0));
        assert!(!b.holds(129, 1, 0));
        assert!(!b.holds(1, 5, 0));
        assert!(!b.holds(1, 1, 17));
    }

    #[test]
    fn buckets_that_no_batch_could_fill_are_refused_where_parsed() {
        assert_eq!("256, 8,0".parse::<Bucket>().unwrap(), Bucket::new(256, 8, 0));
        let limit = MAX_BUCKET_ROWS;
        for (text, why) in [
            ("0,1,0", "has no room"),
            ("256,0,0", "has no room"),
            ("256,4294967296,0", "more sequences than tokens"),
            (&format!("{},1,0", limit + 1), "too large"),
            (&format!("{limit},1,{}", limit + 1), "too large"),
            ("18446744073709551616,1,0", "expected TOKENS,SEQS,MARKERS"),
        ] {
            let e = text.parse::<Bucket>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            let table = format!("s {}", text.replace(',', " "));
            assert!(table.parse::<Buckets>().is_err(), "the table `{table}` parsed");
        }
        format!("{limit},1,{limit}").parse::<Bucket>().unwrap();
    }

    #[test]
    fn default_table_parses_and_round_trips() {
        let t = Buckets::default();
        assert!(!t.stage(DEFAULT_STAGE).is_empty());
        let again: Buckets = t.to_string().parse().unwrap();
        assert_eq!(again, t);
    }

    #[test]
    fn picks_the_smallest_bucket_that_holds() {
        let t: Buckets = "s 16 2 0\ns 64 4 8\n# comment\ns 256 16 64 # trailing\n".parse().unwrap();
        assert_eq!(t.pick("s", 10, 2, 0).unwrap(), 0);
        assert_eq!(t.pick("s", 10, 2, 1).unwrap(), 1);
        assert_eq!(t.pick("s", 17, 1, 0).unwrap(), 1);
        assert_eq!(t.pick("s", 256, 16, 64).unwrap(), 2);
        let e = t.pick("s", 257, 1, 0).unwrap_err();
        assert!(matches!(e, Error::NoBucket { ref largest, .. } if largest == "256,16,64"), "{e}");
        let e = t.pick("other", 1, 1, 0).unwrap_err();
        assert!(e.to_string().contains("stage `other`") && e.to_string().contains("none"));
    }

    #[test]
    fn parse_errors_name_the_line() {
        let cases = [
            ("s 16 2\n", 1, "got 3 fields"),
            ("# head\ns 16 2 x\n", 2, "markers must be a whole number"),
            ("s 16 2 0\n\ns 8 2 0\n", 3, "not larger than the one before"),
            ("s 16 2 0\ns 16 2 0\n", 2, "not larger"),
            ("s 16 2 0\ns 32 1 0\n", 2, "not larger"),
            ("s 0 0 0\n", 1, "no room"),
            ("s 4 8 0\n", 1, "more sequences than tokens"),
            ("# nothing\n", 1, "lists no buckets"),
        ];
        for (text, line, msg) in cases {
            match text.parse::<Buckets>() {
                Err(Error::Buckets { line: l, msg: m }) => {
                    assert_eq!(l, line, "{text:?}: {m}");
                    assert!(m.contains(msg), "{text:?}: {m}");
                }
                other => panic!("{text:?}: expected a bucket error, got {other:?}"),
            }
        }
    }

    #[test]
    fn stages_are_independent() {
        let t: Buckets = "a 64 4 0\nb 16 1 16\na 128 8 0\n".parse().unwrap();
        assert_eq!(t.stages().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(t.stage("a"), [Bucket::new(64, 4, 0), Bucket::new(128, 8, 0)]);
        assert_eq!(t.stage("b"), [Bucket::new(16, 1, 16)]);
    }

    #[test]
    fn bucket_parses_from_triple() {
        assert_eq!("512, 8,0".parse::<Bucket>().unwrap(), Bucket::new(512, 8, 0));
        assert!("512,8".parse::<Bucket>().is_err());
        assert!("512,8,0,1".parse::<Bucket>().is_err());
    }

    #[test]
    fn reads_from_file_with_path_in_errors() {
        let e = Buckets::from_file(std::path::Path::new("/nonexistent/buckets.txt")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/buckets.txt"), "{e}");
    }
}
