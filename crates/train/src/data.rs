//! Training records: JSON lines, one example a line, read and tokenized per task; and batches
//! packed from them by a token budget, ragged, without padding.
//!
//! | task | a line | loss |
//! |---|---|---|
//! | embed | `{"anchor", "positive", "negative"?}` | MultipleNegativesRanking, in-batch negatives |
//! | embed | `{"text", "text_pair", "score"}` | CoSENT |
//! | classify | `{"text", "text_pair"?, "label"}` (a label name or index; a number in `[0, 1]` for a one-label model) | cross-entropy (binary for one label) |
//! | tokens | `{"words": [...], "labels": [...]}` | cross-entropy at each word's first sub-token |

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;
use switchyard_core::BatchBuf;
use switchyard_models::{Encoded, Tokenizer};

use crate::{Error, Result};

/// What a data set teaches, from its records' fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `(anchor, positive[, negative])`: MultipleNegativesRankingLoss.
    Triplets,
    /// `(text, text_pair, score)`: CoSENT.
    Scored,
    /// `(text[, text_pair], class)`: cross-entropy.
    Classes,
    /// `(text[, text_pair], target in [0, 1])` for a one-label model: binary cross-entropy.
    Targets,
    /// `(words, labels)`: cross-entropy per word.
    Words,
}

impl Kind {
    /// The loss, in words.
    pub fn loss(self) -> &'static str {
        match self {
            Kind::Triplets => "MultipleNegativesRankingLoss",
            Kind::Scored => "CoSENTLoss",
            Kind::Classes => "cross-entropy",
            Kind::Targets => "binary cross-entropy",
            Kind::Words => "cross-entropy per word",
        }
    }
}

/// One tokenized example.
#[derive(Clone, Debug, PartialEq)]
pub enum Example {
    /// An anchor, its positive, and perhaps a hard negative.
    Triplet(Vec<Encoded>),
    /// Two texts and how similar they are.
    Scored(Encoded, Encoded, f32),
    /// A text (or pair) and its class.
    Class(Encoded, usize),
    /// A text (or pair) and its target in `[0, 1]`.
    Target(Encoded, f32),
    /// Words tokenized together, the first sub-token of each word that survived truncation,
    /// and its label.
    Words(Encoded, Vec<(u32, usize)>),
}

impl Example {
    /// The sequences it runs, in the order a batch holds them.
    pub fn sequences(&self) -> Vec<&Encoded> {
        match self {
            Example::Triplet(t) => t.iter().collect(),
            Example::Scored(a, b, _) => vec![a, b],
            Example::Class(e, _) | Example::Target(e, _) | Example::Words(e, _) => vec![e],
        }
    }

    /// Its tokens, special tokens included.
    pub fn tokens(&self) -> usize {
        self.sequences().iter().map(|e| e.ids.len()).sum()
    }
}

/// A data set: its examples, all of one kind.
#[derive(Clone, Debug)]
pub struct Data {
    /// What it teaches.
    pub kind: Kind,
    /// The examples, in file order.
    pub examples: Vec<Example>,
}

/// How to read records for a model: its tokenizer, and its labels (a classifier's, in logit
/// order; empty for an embedding model).
pub struct Reader<'a> {
    /// The model's tokenizer, truncating at its maximum length.
    pub tokenizer: &'a Tokenizer,
    /// What the model learns.
    pub task: ReadTask,
    /// A classifier's labels, in logit order.
    pub labels: &'a [String],
}

/// The kind of model the records are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadTask {
    /// An embedding model.
    Embed,
    /// A sequence classifier or cross-encoder.
    Classify,
    /// A token classifier.
    Tokens,
}

impl Reader<'_> {
    /// Reads `path`: one JSON object a line (blank lines skipped); an error naming the line for
    /// the first record that is not one this task reads, or of another kind than the first.
    pub fn read(&self, path: &Path) -> Result<Data> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut kind = None;
        let mut examples = Vec::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let bad = |msg: String| Error::Data { path: path.to_owned(), line: i + 1, msg };
            let line = line.map_err(|e| bad(format!("cannot be read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value =
                serde_json::from_str(&line).map_err(|e| bad(format!("not JSON: {e}")))?;
            let (k, ex) = self.record(&v).map_err(bad)?;
            match kind {
                None => kind = Some(k),
                Some(first) if first != k => {
                    return Err(bad(format!(
                        "a record for {} after records for {}; a file holds one kind",
                        k.loss(),
                        first.loss()
                    )));
                }
                Some(_) => {}
            }
            if let (Example::Triplet(t), Some(Example::Triplet(first))) = (&ex, examples.first())
                && t.len() != first.len()
            {
                return Err(bad(format!(
                    "{} texts where the first record has {}: either every record has a \
                     `negative` or none does",
                    t.len(),
                    first.len()
                )));
            }
            examples.push(ex);
        }
        let kind =
            kind.ok_or_else(|| Error::Config(format!("{} holds no records", path.display())))?;
        Ok(Data { kind, examples })
    }

    /// One record, parsed and tokenized; the message says what is wrong with it.
    fn record(&self, v: &Value) -> Result<(Kind, Example), String> {
        let obj = v.as_object().ok_or("not a JSON object")?;
        let text = |key: &str| -> Result<Option<&str>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(format!("`{key}` is not a string")),
            }
        };
        let need = |key: &str| text(key)?.ok_or_else(|| format!("no `{key}`"));
        let tok = |e: switchyard_models::Error| e.to_string();
        let t = self.tokenizer;
        match self.task {
            ReadTask::Embed if obj.contains_key("anchor") => {
                let mut texts = vec![t.encode(need("anchor")?).map_err(tok)?];
                texts.push(t.encode(need("positive")?).map_err(tok)?);
                if let Some(n) = text("negative")? {
                    texts.push(t.encode(n).map_err(tok)?);
                }
                Ok((Kind::Triplets, Example::Triplet(texts)))
            }
            ReadTask::Embed if obj.contains_key("score") => {
                let score = number(obj.get("score")).ok_or("`score` is not a number")?;
                let a = t.encode(need("text")?).map_err(tok)?;
                let b = t.encode(need("text_pair")?).map_err(tok)?;
                Ok((Kind::Scored, Example::Scored(a, b, score)))
            }
            ReadTask::Embed => {
                Err("an embedding model trains on `{\"anchor\", \"positive\", \"negative\"?}` or \
                 `{\"text\", \"text_pair\", \"score\"}` records"
                    .into())
            }
            ReadTask::Classify => {
                let input = match text("text_pair")? {
                    Some(pair) => t.encode_pair(need("text")?, pair),
                    None => t.encode(need("text")?),
                }
                .map_err(tok)?;
                let label = obj.get("label").ok_or("no `label`")?;
                if self.labels.len() == 1 {
                    let target = number(Some(label))
                        .filter(|x| (0.0..=1.0).contains(x))
                        .ok_or("a one-label model takes a `label` that is a number in [0, 1]")?;
                    Ok((Kind::Targets, Example::Target(input, target)))
                } else {
                    Ok((Kind::Classes, Example::Class(input, self.label(label)?)))
                }
            }
            ReadTask::Tokens => {
                let strings = |key: &str| -> Result<&Vec<Value>, String> {
                    obj.get(key).and_then(Value::as_array).ok_or_else(|| format!("no `{key}` list"))
                };
                let words: Vec<&str> = strings("words")?
                    .iter()
                    .map(|w| w.as_str().ok_or("`words` holds something that is not a string"))
                    .collect::<Result<_, _>>()?;
                let labels = strings("labels")?;
                if labels.len() != words.len() {
                    return Err(format!("{} words but {} labels", words.len(), labels.len()));
                }
                let labels: Vec<usize> =
                    labels.iter().map(|l| self.label(l)).collect::<Result<_, _>>()?;
                let input = t.encode_words(&words).map_err(tok)?;
                let marks: Vec<(u32, usize)> = input
                    .word_starts()
                    .into_iter()
                    .map(|(pos, _)| {
                        let word =
                            input.words[pos as usize].expect("a word's first token") as usize;
                        (pos, labels[word])
                    })
                    .collect();
                if marks.is_empty() {
                    return Err(format!(
                        "no word to learn from: {} words, none of whose first tokens fits in the \
                         model's {} tokens",
                        words.len(),
                        t.max_len()
                    ));
                }
                Ok((Kind::Words, Example::Words(input, marks)))
            }
        }
    }

    /// A label given by name or by index.
    fn label(&self, v: &Value) -> Result<usize, String> {
        let known = || self.labels.join(", ");
        match v {
            Value::String(s) => {
                self.labels.iter().position(|l| l == s).ok_or_else(|| {
                    format!("the label `{s}` is not one of the model's: {}", known())
                })
            }
            Value::Number(n) => {
                n.as_u64().map(|i| i as usize).filter(|&i| i < self.labels.len()).ok_or_else(|| {
                    format!("the label {n} is not an index below {}", self.labels.len())
                })
            }
            _ => Err("a label is a name or an index".into()),
        }
    }
}

fn number(v: Option<&Value>) -> Option<f32> {
    v.and_then(Value::as_f64).map(|x| x as f32).filter(|x| x.is_finite())
}

/// Batches of example indices, in `order`: each takes examples until the next would bring it
/// past `max_tokens` tokens or `max_examples` examples (an example alone over the budget makes
/// a batch of its own).
pub fn pack(
    order: &[usize],
    data: &Data,
    max_tokens: usize,
    max_examples: usize,
) -> Vec<Vec<usize>> {
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut tokens = 0;
    for &i in order {
        let n = data.examples[i].tokens();
        if !current.is_empty() && (tokens + n > max_tokens || current.len() == max_examples) {
            batches.push(std::mem::take(&mut current));
            tokens = 0;
        }
        tokens += n;
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// The examples' sequences as one ragged batch: for triplets and scored pairs, every example's
/// first text, then every second, then every third, so each role's rows are consecutive; markers
/// at each word's first sub-token for words.
pub fn fill(buf: &mut BatchBuf, examples: &[&Example]) -> Result<()> {
    buf.clear();
    let roles = examples.first().map_or(0, |e| e.sequences().len());
    for role in 0..roles {
        for e in examples {
            let seqs = e.sequences();
            let s = seqs
                .get(role)
                .ok_or_else(|| Error::Config("examples of different shapes in one batch".into()))?;
            let markers: Vec<u32> = match e {
                Example::Words(_, marks) => marks.iter().map(|&(p, _)| p).collect(),
                _ => Vec::new(),
            };
            buf.push(&s.ids, Some(&s.types), &markers)?;
        }
    }
    Ok(())
}

/// A deterministic shuffle of `0..n` for `seed` (Fisher-Yates on SplitMix64).
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}
