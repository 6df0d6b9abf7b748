//! Tokenization as sentence-transformers does it: truncation at the model's maximum length,
//! never padding (batches are ragged).

use std::path::Path;
use std::sync::OnceLock;

use tokenizers::{PaddingParams, TruncationDirection, TruncationParams};

use crate::{Error, Result};

/// A `tokenizer.json` with its own padding removed and truncation set to our maximum length.
#[derive(Clone)]
pub struct Tokenizer {
    /// Keeps the first `max_len` tokens.
    inner: tokenizers::Tokenizer,
    /// Keeps the last `max_len` tokens; made on first use.
    left: OnceLock<tokenizers::Tokenizer>,
    /// Never truncates; made on first use.
    whole: OnceLock<tokenizers::Tokenizer>,
    max_len: usize,
}

/// What happens to an input longer than the model's maximum length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Truncation {
    /// Keep the first tokens, as sentence-transformers does.
    #[default]
    Right,
    /// Keep the last tokens.
    Left,
    /// Refuse the input with [`Error::TooLong`].
    Refuse,
}

/// One tokenized input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids, special tokens included.
    pub ids: Vec<u32>,
    /// Token types (segment ids).
    pub types: Vec<u32>,
    /// Each token's text, for display.
    pub tokens: Vec<String>,
    /// For each token, the index of the word it belongs to (`None` for special tokens).
    pub words: Vec<Option<u32>>,
    /// For each token, its byte range in the input text (empty for special tokens).
    pub offsets: Vec<(usize, usize)>,
    /// For each token, whether the tokenizer added it (`[CLS]`, `[SEP]`, ...).
    pub special: Vec<bool>,
}

impl Encoded {
    /// The positions of each word's first sub-token, and of each such word the byte range in the
    /// text from its first to its last sub-token.
    pub fn word_starts(&self) -> Vec<(u32, (usize, usize))> {
        let mut out: Vec<(u32, (usize, usize))> = Vec::new();
        let mut last = None;
        for (i, (w, &(start, end))) in self.words.iter().zip(&self.offsets).enumerate() {
            match *w {
                Some(w) if last == Some(w) => {
                    if let Some((_, span)) = out.last_mut() {
                        span.1 = span.1.max(end);
                    }
                }
                Some(_) => out.push((i as u32, (start, end))),
                None => {}
            }
            last = *w;
        }
        out
    }

    /// The positions of every token that is not a special token, with its byte range.
    pub fn text_tokens(&self) -> Vec<(u32, (usize, usize))> {
        self.words
            .iter()
            .zip(&self.offsets)
            .enumerate()
            .filter(|(_, (w, _))| w.is_some())
            .map(|(i, (_, &span))| (i as u32, span))
            .collect()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` from `dir`, truncating at `max_len` tokens and never padding.
    pub fn load(dir: &Path, max_len: usize) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !crate::checkpoint::is_file(&path)? {
            return Err(Error::format(format!(
                "{} has no tokenizer.json; Switchyard needs the fast tokenizer file",
                dir.display()
            )));
        }
        let mut inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        // Some shipped files pad to a fixed length or truncate shorter than the model allows;
        // sentence-transformers overrides both, and so do we.
        inner.with_padding(None::<PaddingParams>);
        truncate(&mut inner, Some(max_len), TruncationDirection::Right)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner, left: OnceLock::new(), whole: OnceLock::new(), max_len })
    }

    /// The maximum sequence length, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Truncates at `max_len` tokens from now on.
    pub(crate) fn set_max_len(&mut self, max_len: usize) -> Result<()> {
        truncate(&mut self.inner, Some(max_len), TruncationDirection::Right)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        self.left = OnceLock::new();
        self.max_len = max_len;
        Ok(())
    }

    /// The token with the largest id the tokenizer can give (added tokens included), if any.
    pub fn largest_id(&self) -> Option<(String, u32)> {
        self.inner.get_vocab(true).into_iter().max_by_key(|&(_, id)| id)
    }

    /// The id of `token`, if the vocabulary (or the added tokens) has it.
    pub fn id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of token `id`, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Tokenizes one text.
    pub fn encode(&self, text: &str) -> Result<Encoded> {
        self.encode_with(text, None, Truncation::Right, true)
    }

    /// Tokenizes a pair (a query and a document for a cross-encoder), with its token types.
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<Encoded> {
        self.encode_with(a, Some(b), Truncation::Right, true)
    }

    /// Tokenizes a text, or a pair when `pair` is given, truncated as `truncation` says, with
    /// the special tokens or without them.
    pub fn encode_with(
        &self,
        text: &str,
        pair: Option<&str>,
        truncation: Truncation,
        special_tokens: bool,
    ) -> Result<Encoded> {
        let tokenizer = match truncation {
            Truncation::Right => &self.inner,
            Truncation::Left => self.variant(&self.left, Some(self.max_len))?,
            Truncation::Refuse => self.variant(&self.whole, None)?,
        };
        let e = match pair {
            None => tokenizer.encode(text, special_tokens),
            Some(b) => tokenizer.encode((text, b), special_tokens),
        }
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
        if truncation == Truncation::Refuse && e.len() > self.max_len {
            return Err(Error::TooLong { tokens: e.len(), max: self.max_len });
        }
        Ok(convert(&e))
    }

    /// Tokenizes words split beforehand (a token classifier's training input, where labels
    /// are given per word): [`Encoded::words`] gives each token's index in `words`, and
    /// [`Encoded::offsets`] are within its word. Truncated at the maximum length.
    pub fn encode_words(&self, words: &[&str]) -> Result<Encoded> {
        let e = self.inner.encode(words, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(convert(&e))
    }

    /// The text of `ids`, without the special tokens if `skip_special` is set.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The tokenizer in `cell`, made on first use from ours truncating at `max_len` from the
    /// left (or never, for `None`).
    fn variant<'a>(
        &'a self,
        cell: &'a OnceLock<tokenizers::Tokenizer>,
        max_len: Option<usize>,
    ) -> Result<&'a tokenizers::Tokenizer> {
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let mut t = self.inner.clone();
        truncate(&mut t, max_len, TruncationDirection::Left)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(cell.get_or_init(|| t))
    }
}

/// Sets `t` to truncate at `max_len` tokens from `direction` (never, for `None`).
fn truncate(
    t: &mut tokenizers::Tokenizer,
    max_len: Option<usize>,
    direction: TruncationDirection,
) -> tokenizers::Result<()> {
    let params =
        max_len.map(|max_length| TruncationParams { max_length, direction, ..Default::default() });
    t.with_truncation(params)?;
    Ok(())
}

fn convert(e: &tokenizers::Encoding) -> Encoded {
    Encoded {
        ids: e.get_ids().to_vec(),
        types: e.get_type_ids().to_vec(),
        tokens: e.get_tokens().to_vec(),
        words: e.get_word_ids().to_vec(),
        offsets: e.get_offsets().to_vec(),
        special: e.get_special_tokens_mask().iter().map(|&m| m == 1).collect(),
    }
}
