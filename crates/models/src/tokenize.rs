//! Tokenization as sentence-transformers does it: truncation at the model's maximum length,
//! never padding (batches are ragged).

use std::path::Path;

use tokenizers::{PaddingParams, TruncationParams};

use crate::{Error, Result};

/// A `tokenizer.json` with its own padding removed and truncation set to our maximum length.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    max_len: usize,
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
        inner
            .with_truncation(Some(TruncationParams { max_length: max_len, ..Default::default() }))
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner, max_len })
    }

    /// The maximum sequence length, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Truncates at `max_len` tokens from now on.
    pub(crate) fn set_max_len(&mut self, max_len: usize) -> Result<()> {
        self.inner
            .with_truncation(Some(TruncationParams { max_length: max_len, ..Default::default() }))
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        self.max_len = max_len;
        Ok(())
    }

    /// The text of token `id`, if the vocabulary has it.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Tokenizes one text.
    pub fn encode(&self, text: &str) -> Result<Encoded> {
        let e = self.inner.encode(text, true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(convert(&e))
    }

    /// Tokenizes a pair (a query and a document for a cross-encoder), with its token types.
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<Encoded> {
        let e = self.inner.encode((a, b), true).map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(convert(&e))
    }
}

fn convert(e: &tokenizers::Encoding) -> Encoded {
    Encoded {
        ids: e.get_ids().to_vec(),
        types: e.get_type_ids().to_vec(),
        tokens: e.get_tokens().to_vec(),
        words: e.get_word_ids().to_vec(),
        offsets: e.get_offsets().to_vec(),
    }
}
