//! Tokenization as sentence-transformers does it: truncation at the model's maximum length,
//! never padding (batches are ragged).
//!
//! A long text is tokenized a prefix at a time where that gives the same tokens: `tokenizers`
//! tokenizes a whole text before truncating it, so a megabyte of text would cost a megabyte's
//! work (and its tokens' memory) for the few hundred tokens a model keeps. Where the tokenizer
//! never looks across a cut (see [`Cuts`]: a space after a letter or digit, and for BERT's
//! pre-tokenizer a character it makes a word of its own), the tokens of a prefix that ends at a
//! cut are the first tokens of the whole text; once a prefix has more tokens than the model
//! keeps (or, refusing, takes), they are the answer. A pair's members (a cross-encoder's query
//! and document) are cut the same way, each on its own, and truncated here.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use tokenizers::{
    NormalizedString, Normalizer, PaddingParams, PostProcessor, PostProcessorWrapper,
    TruncationDirection, TruncationParams,
};

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
    /// Never truncates, and adds no special tokens nor trims offsets (no post-processor): how a
    /// pair's members are tokenized alone; made on first use.
    raw: OnceLock<tokenizers::Tokenizer>,
    max_len: usize,
    /// Where a long text may be cut so that its prefix tokenizes as the start of the whole
    /// text; `None` for a tokenizer that may look across any cut.
    cuts: Option<Cuts>,
}

/// A long text's first prefix holds this many bytes per token the model keeps (a token of
/// English is four to five bytes; of code or numbers fewer), and each prefix after it four
/// times the one before.
const PREFIX_BYTES_PER_TOKEN: usize = 16;
/// The fewest bytes a first prefix holds: shorter texts are tokenized whole at once.
const MIN_PREFIX_BYTES: usize = 4096;

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

    /// This encoding of `prompt` followed by a text (or of a pair whose first text starts with
    /// `prompt`, as a cross-encoder's query takes it), as the text's: the prompt's tokens count
    /// as special (framing, as `[CLS]` is), and the first text's byte ranges and word indices
    /// are its own. A token that straddles the two is the text's. A pair's second text, which
    /// starts at the first special token after the first text's, is left as it is.
    pub fn after_prompt(mut self, prompt: &str) -> Encoded {
        let cut = prompt.len();
        let mut first_word = None;
        let mut in_text = false;
        for i in 0..self.ids.len() {
            let (start, end) = self.offsets[i];
            if self.special[i] {
                if in_text {
                    break;
                }
                continue;
            }
            in_text = true;
            if end <= cut {
                (self.special[i], self.words[i], self.offsets[i]) = (true, None, (0, 0));
            } else {
                self.offsets[i] = (start.saturating_sub(cut), end - cut);
                self.words[i] = self.words[i].map(|w| w - *first_word.get_or_insert(w));
            }
        }
        self
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
        Tokenizer::new(inner, max_len)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))
    }

    /// `inner`, truncating at `max_len` tokens.
    fn new(mut inner: tokenizers::Tokenizer, max_len: usize) -> tokenizers::Result<Tokenizer> {
        truncate(&mut inner, Some(max_len), TruncationDirection::Right)?;
        let cuts = Cuts::of(&inner);
        let (left, whole, raw) = (OnceLock::new(), OnceLock::new(), OnceLock::new());
        Ok(Tokenizer { inner, left, whole, raw, max_len, cuts })
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
        let (e, _) = match pair {
            None => self.encode_prefixed(tokenizer, text, truncation, special_tokens)?,
            Some(b) => self.encode_pair_prefixed(text, b, truncation, special_tokens)?,
        };
        if truncation == Truncation::Refuse && e.len() > self.max_len {
            return Err(Error::TooLong { tokens: e.len(), max: self.max_len });
        }
        Ok(convert(&e))
    }

    /// `tokenizer`'s encoding of `text`, from prefixes of it where that gives the same answer
    /// (see the module's doc), and how many of its bytes were tokenized. With
    /// [`Truncation::Refuse`] the encoding is of a prefix already too long, when there is one.
    fn encode_prefixed(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        text: &str,
        truncation: Truncation,
        special_tokens: bool,
    ) -> Result<(tokenizers::Encoding, usize)> {
        // Truncating, a prefix with the most tokens kept holds the whole text's first ones;
        // refusing, one with more than the most is too long already.
        let need = self.max_len + usize::from(truncation == Truncation::Refuse);
        self.prefixed(tokenizer, text, truncation, special_tokens, need)
    }

    /// `tokenizer`'s encoding of `text`, from prefixes until one has at least `need` tokens,
    /// where prefixes give the same answer (not truncating from the left, which keeps the end
    /// of the text), and how many of its bytes that took.
    fn prefixed(
        &self,
        tokenizer: &tokenizers::Tokenizer,
        text: &str,
        truncation: Truncation,
        special_tokens: bool,
        need: usize,
    ) -> Result<(tokenizers::Encoding, usize)> {
        if let Some(cuts) = self.cuts.as_ref().filter(|_| truncation != Truncation::Left) {
            let mut at = self.first_prefix();
            while let Some(end) = cuts.find(text, at, self.inner.get_normalizer()) {
                let e = tokenizer.encode(&text[..end], special_tokens).map_err(tokenizer_error)?;
                if e.len() >= need {
                    return Ok((e, end));
                }
                at = end.saturating_mul(4);
            }
        }
        Ok((tokenizer.encode(text, special_tokens).map_err(tokenizer_error)?, text.len()))
    }

    /// The encoding of the pair `(a, b)` truncated as `truncation` says (refusing, not truncated,
    /// and of prefixes already too long when there are), and how many of `b`'s bytes were
    /// tokenized. Each member is tokenized alone, from prefixes where that gives the same
    /// answer, and truncated here by `tokenizers`' rule: tokens come off the longer member until
    /// both are as long, then off both, the longer keeping the odd one, and neither keeps more
    /// than `m` (the maximum length less the special tokens). `tokenizers` itself pairs every
    /// overflowing piece of one member with every piece of the other, which costs the product
    /// of their lengths: minutes for two texts of a megabyte.
    fn encode_pair_prefixed(
        &self,
        a: &str,
        b: &str,
        truncation: Truncation,
        special_tokens: bool,
    ) -> Result<(tokenizers::Encoding, usize)> {
        let (whole, raw) = (self.variant(&self.whole, None)?, self.raw()?);
        let added = whole.get_post_processor().map_or(0, |p| p.added_tokens(true));
        let m = self.max_len.saturating_sub(if special_tokens { added } else { 0 });
        // A member with more than `m` tokens keeps at most `m`, whatever the other has.
        let (mut ea, read_a) = self.prefixed(raw, a, truncation, false, m + 1)?;
        let (mut eb, mut read) = self.prefixed(raw, b, truncation, false, m + 1)?;
        let (na, nb) = if truncation == Truncation::Refuse {
            (ea.len(), eb.len())
        } else {
            // When both are longer than `m`, which is the longer decides where the odd token goes.
            if ea.len() > m && eb.len() > m {
                if read_a < a.len() {
                    ea = raw.encode(a, false).map_err(tokenizer_error)?;
                }
                if read < b.len() {
                    (eb, read) = (raw.encode(b, false).map_err(tokenizer_error)?, b.len());
                }
            }
            longest_first(ea.len(), eb.len(), m)
        };
        let direction = match truncation {
            Truncation::Left => TruncationDirection::Left,
            _ => TruncationDirection::Right,
        };
        for (e, n) in [(&mut ea, na), (&mut eb, nb)] {
            e.truncate(n, 0, direction);
            // What truncating cut off is not wanted, and would be paired piece by piece.
            drop(e.take_overflowing());
        }
        // As `tokenizers` marks a pair's second member before its post-processor runs.
        eb.set_type_ids(vec![1; eb.len()]);
        let e = whole.post_process(ea, Some(eb), special_tokens).map_err(tokenizer_error)?;
        Ok((e, read))
    }

    /// Bytes in a long text's first prefix.
    fn first_prefix(&self) -> usize {
        self.max_len.saturating_mul(PREFIX_BYTES_PER_TOKEN).max(MIN_PREFIX_BYTES)
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

    /// The tokenizer [`Tokenizer::raw`] holds.
    fn raw(&self) -> Result<&tokenizers::Tokenizer> {
        if let Some(t) = self.raw.get() {
            return Ok(t);
        }
        let mut t = self.inner.clone();
        truncate(&mut t, None, TruncationDirection::Right)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        t.with_post_processor(None::<PostProcessorWrapper>);
        Ok(self.raw.get_or_init(|| t))
    }
}

/// How many tokens two members of `la` and `lb` keep within `m`, by `tokenizers`' longest-first
/// rule: the shorter whole if the longer can have the rest, else half each, the odd token to
/// the longer (to the second, when they are as long).
fn longest_first(la: usize, lb: usize, m: usize) -> (usize, usize) {
    if la + lb <= m {
        return (la, lb);
    }
    let short = la.min(lb);
    let (short, long) = if short <= m / 2 { (short, m - short) } else { (m / 2, m - m / 2) };
    if la > lb { (long, short) } else { (short, long) }
}

/// Sets `t` to truncate at `max_len` tokens from `direction` (never, for `None`): an error if
/// `max_len` leaves no token for text beside the special tokens of a pair (tokenizers' own
/// truncation subtracts those from it, and would overflow).
fn truncate(
    t: &mut tokenizers::Tokenizer,
    max_len: Option<usize>,
    direction: TruncationDirection,
) -> tokenizers::Result<()> {
    let special = t.get_post_processor().map_or(0, |p| p.added_tokens(true));
    if let Some(m) = max_len.filter(|&m| m <= special) {
        return Err(format!(
            "a maximum length of {m} tokens leaves no room for text beside the {special} \
             special tokens the tokenizer puts around a pair of texts"
        )
        .into());
    }
    let params =
        max_len.map(|max_length| TruncationParams { max_length, direction, ..Default::default() });
    t.with_truncation(params)?;
    Ok(())
}

/// Where a long text may be cut so that the prefix before the cut tokenizes as the start of the
/// whole text ([`Cuts::of`] says for which tokenizers). A cut falls before a space that follows a
/// letter or digit the normalizer keeps as something other than whitespace; with BERT's
/// pre-tokenizer, also after a character it makes a word of its own ([`Isolated`]).
#[derive(Clone, Debug)]
struct Cuts {
    /// The characters of added tokens that take the whitespace after them (`rstrip`): a cut
    /// after one could change that token's text and offsets.
    rstrip: Vec<char>,
    /// The cuts BERT's pre-tokenizer allows besides spaces, if it is the tokenizer's.
    bert: Option<Isolated>,
}

/// Cuts after a character BERT's pre-tokenizer makes a word of its own, whatever follows: after
/// ASCII punctuation, and after a CJK ideograph where the normalizer puts spaces around those.
/// BERT's normalizer changes no such character by what comes after it (it maps characters one
/// at a time, and its NFD reorders only the marks after a character, never the character), so
/// these are cuts in a text without spaces too (Chinese, a run of punctuation).
#[derive(Clone, Debug)]
struct Isolated {
    /// Whether the normalizer puts spaces around CJK ideographs (BERT's `handle_chinese_chars`).
    cjk: bool,
    /// The characters of added tokens: a cut after one could fall inside one.
    added: Vec<char>,
}

impl Cuts {
    /// The cuts `t` allows, if every part of it is known never to look across them: normalizers
    /// that map one character at a time, pre-tokenizers that split at spaces (and split no
    /// further than locally), a model that sees one pre-token at a time, and added tokens
    /// without whitespace. Anything else (a pre-tokenizer that leaves the text whole, a `Split`
    /// or `Replace` on a pattern, sentencepiece's `Precompiled` normalizer, BPE with dropout)
    /// gets `None`: its texts are tokenized whole.
    fn of(t: &tokenizers::Tokenizer) -> Option<Cuts> {
        let v = serde_json::to_value(t).ok()?;
        let model = match v["model"]["type"].as_str().unwrap_or_default() {
            "WordPiece" | "WordLevel" | "Unigram" => true,
            "BPE" => v["model"]["dropout"].is_null(),
            _ => false,
        };
        let added = v["added_tokens"].as_array()?;
        let safe = model
            && (v["normalizer"].is_null() || maps_characters(&v["normalizer"]))
            && splits_at_spaces(&v["pre_tokenizer"]) == Some(true)
            && added
                .iter()
                .all(|a| a["content"].as_str().is_some_and(|c| !c.contains(char::is_whitespace)));
        if !safe {
            return None;
        }
        let chars = |keep: &dyn Fn(&serde_json::Value) -> bool| {
            let tokens = added.iter().filter(|a| keep(a));
            let mut cs: Vec<char> =
                tokens.filter_map(|a| a["content"].as_str()).flat_map(str::chars).collect();
            cs.sort_unstable();
            cs.dedup();
            cs
        };
        let rstrip = chars(&|a| a["rstrip"].as_bool() != Some(false));
        let normalizer = &v["normalizer"];
        let bert = (v["pre_tokenizer"]["type"] == "BertPreTokenizer"
            && (normalizer.is_null() || normalizer["type"] == "BertNormalizer"))
            .then(|| Isolated {
                cjk: normalizer["handle_chinese_chars"].as_bool() == Some(true),
                added: chars(&|_| true),
            });
        Some(Cuts { rstrip, bert })
    }

    /// The end of the shortest prefix of `text` at least `at` bytes long that ends at a cut, if
    /// there is one short of the whole text; `normalizer` is the tokenizer's.
    fn find(&self, text: &str, at: usize, normalizer: Option<&impl Normalizer>) -> Option<usize> {
        let from = (at.max(1)..text.len()).find(|&i| text.is_char_boundary(i))?;
        let mut prev = text[..from].chars().next_back()?;
        // Whether a letter outside ASCII stays other than whitespace, normalized, per letter.
        let mut kept: HashMap<char, bool> = HashMap::new();
        for (i, next) in text[from..].char_indices() {
            let before_space = next == ' '
                && !self.rstrip.contains(&prev)
                && (prev.is_ascii_alphanumeric()
                    || (prev.is_alphanumeric()
                        && *kept.entry(prev).or_insert_with(|| stays_visible(prev, normalizer))));
            if before_space || self.bert.as_ref().is_some_and(|b| b.cuts_after(prev)) {
                return Some(from + i);
            }
            prev = next;
        }
        None
    }
}

impl Isolated {
    /// Whether a cut may follow `prev`.
    fn cuts_after(&self, prev: char) -> bool {
        (prev.is_ascii_punctuation() || (self.cjk && is_cjk_ideograph(prev)))
            && !self.added.contains(&prev)
    }
}

/// Whether `c`, normalized alone, ends in something other than whitespace (an ASCII letter or
/// digit always does under the normalizers [`Cuts::of`] accepts).
fn stays_visible(c: char, normalizer: Option<&impl Normalizer>) -> bool {
    let mut n = NormalizedString::from(c.to_string());
    match normalizer.map(|nm| nm.normalize(&mut n)) {
        Some(Err(_)) => false,
        _ => n.get().chars().next_back().is_some_and(|c| !c.is_whitespace()),
    }
}

/// The CJK ideographs BERT's normalizer puts spaces around (`handle_chinese_chars`): the same
/// ranges as the `tokenizers` crate's.
fn is_cjk_ideograph(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// Whether a normalizer maps one character at a time (a `Replace` of one non-whitespace
/// character by a non-empty string without whitespace included).
fn maps_characters(n: &serde_json::Value) -> bool {
    match n["type"].as_str().unwrap_or_default() {
        "BertNormalizer" | "NFC" | "NFD" | "NFKC" | "NFKD" | "Lowercase" | "StripAccents"
        | "Strip" | "Prepend" => true,
        "Replace" => {
            let from = n["pattern"]["String"].as_str().unwrap_or_default();
            let to = n["content"].as_str().unwrap_or(" ");
            from.chars().count() == 1
                && !from.contains(char::is_whitespace)
                && !to.is_empty()
                && !to.contains(char::is_whitespace)
        }
        "Sequence" => n["normalizers"].as_array().is_some_and(|ns| ns.iter().all(maps_characters)),
        _ => false,
    }
}

/// For a pre-tokenizer that splits only at whitespace and between characters of different
/// kinds, whether it splits at spaces (`Punctuation` and `Digits` alone do not); `None` for
/// one that may look further.
fn splits_at_spaces(p: &serde_json::Value) -> Option<bool> {
    match p["type"].as_str().unwrap_or_default() {
        "BertPreTokenizer" | "Whitespace" | "WhitespaceSplit" => Some(true),
        "Punctuation" | "Digits" => Some(false),
        "ByteLevel" => (p["use_regex"].as_bool() == Some(true)).then_some(true),
        "Metaspace" => (p["split"].as_bool() == Some(true)).then_some(true),
        "Sequence" => {
            let parts = p["pretokenizers"].as_array()?;
            let splits = parts.iter().map(splits_at_spaces).collect::<Option<Vec<bool>>>()?;
            Some(splits.contains(&true))
        }
        _ => None,
    }
}

fn tokenizer_error(e: tokenizers::Error) -> Error {
    Error::Tokenizer(e.to_string())
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use switchyard_core::testkit::Rng;

    use super::*;

    /// The model's maximum length in these tests: small, so that texts of a few kilobytes are
    /// long.
    const MAX: usize = 48;

    /// Letters, digits and a few pieces of the words below, for models that spell what their
    /// vocabulary lacks.
    fn pieces() -> Vec<String> {
        let mut v: Vec<String> = ('a'..='z').chain('0'..='9').map(String::from).collect();
        v.extend(
            ["the", "man", "eat", "food", "caf", "new", "york", "中", "文", ".", ",", "!"]
                .map(String::from),
        );
        v
    }

    fn build(spec: Value) -> Tokenizer {
        let mut full = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
        });
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        let inner: tokenizers::Tokenizer = full.to_string().parse().unwrap();
        Tokenizer::new(inner, MAX).unwrap()
    }

    fn added(content: &str, id: u32, lstrip: bool) -> Value {
        json!({"id": id, "content": content, "single_word": false, "lstrip": lstrip,
               "rstrip": false, "normalized": false, "special": true})
    }

    /// BERT's: its normalizer, pre-tokenizer, WordPiece with `##` pieces and `[CLS] .. [SEP]`.
    fn wordpiece() -> Tokenizer {
        let mut vocab: Vec<String> =
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"].map(String::from).to_vec();
        vocab.extend(pieces());
        vocab.extend(["##s", "##ing", "##e", "##1", "##3"].map(String::from));
        let vocab: serde_json::Map<String, Value> =
            vocab.into_iter().enumerate().map(|(i, t)| (t, json!(i))).collect();
        build(json!({
            "added_tokens": [added("[MASK]", 4, false)],
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                           "handle_chinese_chars": true, "strip_accents": true, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 20, "vocab": vocab},
        }))
    }

    /// RoBERTa's: byte-level BPE with a few merges, `<s> .. </s>` and an lstrip `<mask>`.
    fn byte_level(use_regex: bool) -> Tokenizer {
        let mut vocab: Vec<String> =
            ["<s>", "<pad>", "</s>", "<unk>", "<mask>"].map(String::from).to_vec();
        let mut alphabet: Vec<char> =
            tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet().into_iter().collect();
        alphabet.sort_unstable();
        vocab.extend(alphabet.iter().map(char::to_string));
        let merges = [
            ("t", "h"),
            ("th", "e"),
            ("Ġ", "the"),
            ("e", "a"),
            ("ea", "t"),
            ("Ġ", "eat"),
            ("i", "n"),
            ("in", "g"),
            ("Ġ", "n"),
            ("Ġn", "e"),
            ("Ġne", "w"),
            ("f", "o"),
            ("fo", "o"),
        ];
        vocab.extend(merges.iter().map(|(a, b)| format!("{a}{b}")));
        let vocab: serde_json::Map<String, Value> =
            vocab.into_iter().enumerate().map(|(i, t)| (t, json!(i))).collect();
        let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                                "trim_offsets": true, "use_regex": use_regex});
        build(json!({
            "added_tokens": [added("<s>", 0, false), added("</s>", 2, false), added("<mask>", 4, true)],
            "pre_tokenizer": byte_level,
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                               "trim_offsets": true, "add_prefix_space": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges.map(|(a, b)| format!("{a} {b}"))},
        }))
    }

    /// sentencepiece's way: NFKC, `Metaspace` and a Unigram model.
    fn unigram(split: bool) -> Tokenizer {
        let mut vocab = vec![json!(["<unk>", 0.0]), json!(["▁", -2.0])];
        for (i, p) in pieces().into_iter().enumerate() {
            vocab.push(json!([format!("▁{p}"), -3.0 - i as f64 / 10.0]));
            vocab.push(json!([p, -5.0 - i as f64 / 10.0]));
        }
        build(json!({
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                {"type": "Replace", "pattern": {"String": "’"}, "content": "'"}]},
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                              "split": split},
            "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": false},
        }))
    }

    /// Whole words, lowercased, split at whitespace and punctuation.
    fn word_level() -> Tokenizer {
        let vocab: serde_json::Map<String, Value> = std::iter::once("[UNK]".to_owned())
            .chain(pieces())
            .enumerate()
            .map(|(i, t)| (t, json!(i)))
            .collect();
        build(json!({
            "normalizer": {"type": "Lowercase"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"},
                              {"type": "Digits", "individual_digits": true}]},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
        }))
    }

    /// A long text of `bytes` or so, from `seed`: words, subwords, digits, punctuation, runs of
    /// whitespace of every kind, accents, combining marks, CJK, emoji and added tokens.
    fn text(seed: u64, bytes: usize) -> String {
        const BITS: [&str; 34] = [
            "the",
            "man",
            "eating",
            "food",
            "foods",
            "Café",
            "new",
            "york",
            "NEW",
            "e\u{301}",
            "13",
            "2024",
            "x1",
            ".",
            ",",
            "!",
            "?!",
            "中文",
            "中",
            "🙂",
            "[MASK]",
            "<mask>",
            "<s>",
            "’s",
            "\u{a0}",
            "\u{3000}",
            "\u{200b}",
            "\t",
            "\n",
            "  ",
            "   ",
            "\r\n",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "\u{0}",
        ];
        pieces_joined(&BITS, seed, bytes, true)
    }

    /// `bytes` or so of `bits` drawn from `seed`, with `spaces` mostly one space between them
    /// (as in prose; sometimes none), else none at all.
    fn pieces_joined(bits: &[&str], seed: u64, bytes: usize, spaces: bool) -> String {
        let mut r = Rng::new(seed);
        let mut s = String::new();
        while s.len() < bytes {
            s.push_str(bits[r.below(bits.len())]);
            if spaces && r.below(4) != 0 {
                s.push(' ');
            }
        }
        s
    }

    /// A long text of `bytes` or so in scripts other than Latin's: Cyrillic, Greek (with a final
    /// sigma), Arabic with its marks and digits, Devanagari, Hangul, CJK ideographs (outside the
    /// basic plane too), kana and their punctuation, runs of ASCII punctuation, marks after
    /// punctuation, letters NFKC spells with a space or several letters, and an added token;
    /// with `spaces`, mostly one space between pieces, else none at all.
    fn script_text(seed: u64, bytes: usize, spaces: bool) -> String {
        const BITS: [&str; 34] = [
            "съешь",
            "же",
            "ещё",
            "ΟΔΟΣ",
            "σοφός",
            "كِتَابٌ",
            "\u{64b}",
            "١٢٣",
            "नमस्ते",
            "है",
            "한국어",
            "中文字符",
            "测试",
            "𠀀𠀁",
            "ひらがな",
            "カタカナ",
            "。",
            "，",
            "「",
            "」",
            "!!",
            "?!.",
            "...",
            "—",
            "=\u{338}",
            "!\u{301}",
            "\u{fc5e}",
            "\u{345}",
            "ǅ",
            "ﬁ",
            "Ⅻ",
            "①",
            "[MASK]",
            "中\u{301}",
        ];
        pieces_joined(&BITS, seed, bytes, spaces)
    }

    fn whole(t: &Tokenizer, text: &str, truncation: Truncation) -> tokenizers::Encoding {
        let tokenizer = match truncation {
            Truncation::Refuse => t.variant(&t.whole, None).unwrap(),
            _ => &t.inner,
        };
        tokenizer.encode(text, true).unwrap()
    }

    /// Tokenizing prefixes of `texts` gives every field of the whole text's encoding,
    /// truncating, and refusing the prefix's tokens are the whole text's first ones; returns
    /// how many of them took a prefix (each twice, once a way).
    fn prefixes_match(name: &str, t: &Tokenizer, texts: &[String]) -> usize {
        assert!(t.cuts.is_some(), "{name} should take prefixes");
        let mut cut = 0;
        for (i, text) in texts.iter().enumerate() {
            for truncation in [Truncation::Right, Truncation::Refuse] {
                let tokenizer = match truncation {
                    Truncation::Refuse => t.variant(&t.whole, None).unwrap(),
                    _ => &t.inner,
                };
                let (got, read) = t.encode_prefixed(tokenizer, text, truncation, true).unwrap();
                cut += usize::from(read < text.len());
                let (got, want) = (convert(&got), convert(&whole(t, text, truncation)));
                match truncation {
                    // A prefix's last token is a special token, or its last word's.
                    Truncation::Refuse => {
                        let max = t.max_len;
                        assert!(got.ids.len() > max && want.ids.len() > max, "{name}, text {i}");
                        let n = got.ids.len() - 1;
                        let same = |j: usize| {
                            (got.ids[j], got.offsets[j], got.words[j])
                                == (want.ids[j], want.offsets[j], want.words[j])
                        };
                        let differs = (0..n).find(|&j| !same(j));
                        assert_eq!(differs, None, "{name}, text {i}: first token that differs");
                        let refused = t.encode_with(text, None, truncation, true);
                        assert!(matches!(refused, Err(Error::TooLong { .. })), "{name}, text {i}");
                    }
                    _ => {
                        assert_eq!(got, want, "{name}, text {i}: {text:?}");
                        assert_eq!(t.encode(text).unwrap(), want, "{name}, text {i}");
                    }
                }
            }
        }
        cut
    }

    /// Tokenizing pairs of a query and a prefix of each of `texts` gives every field of the
    /// whole pair's encoding, for queries from a few tokens to more than the model takes;
    /// refusing refuses, and truncating from the left gives the whole pair's encoding too.
    /// Returns how many pairs took a prefix.
    fn pair_prefixes_match(name: &str, t: &Tokenizer, texts: &[String]) -> usize {
        // At 256 tokens (a BERT pair's 253 and a 4096-byte first prefix): an odd number to
        // share, and few enough overflowing pieces for `tokenizers` to pair in the whole
        // encodings (it makes every piece of one member with every piece of the other).
        let t = &Tokenizer::new(t.inner.clone(), 256).unwrap();
        let mut cut = 0;
        for (i, doc) in texts.iter().enumerate() {
            // A query longer than the first prefix is the case where the longer member's
            // share of an odd number of tokens would change sides.
            let query = match i % 3 {
                0 => "the man eating food".to_owned(),
                1 => text(1000 + i as u64, 10 * i),
                _ => text(1000 + i as u64, 6_000),
            };
            let (got, read) = t.encode_pair_prefixed(&query, doc, Truncation::Right, true).unwrap();
            cut += usize::from(read < doc.len());
            let want = t.inner.encode((query.as_str(), doc.as_str()), true).unwrap();
            assert_eq!(convert(&got), convert(&want), "{name}, text {i}, query {query:?}");
            let whole = t.variant(&t.whole, None).unwrap();
            let too_long = whole.encode((query.as_str(), doc.as_str()), true).unwrap().len() > 256;
            let refused = t.encode_with(&query, Some(doc), Truncation::Refuse, true);
            let was_refused = matches!(refused, Err(Error::TooLong { .. }));
            assert_eq!(was_refused, too_long, "{name}, text {i}: refused");
            // Keeping the ends of both members, which takes no prefixes.
            let left = t.variant(&t.left, Some(256)).unwrap();
            let want = left.encode((query.as_str(), doc.as_str()), true).unwrap();
            let got = t.encode_with(&query, Some(doc), Truncation::Left, true).unwrap();
            assert_eq!(got, convert(&want), "{name}, text {i}: from the left");
        }
        cut
    }

    /// A tokenizer of each family that takes prefixes, by name.
    fn families() -> [(&'static str, Tokenizer); 4] {
        [
            ("wordpiece", wordpiece()),
            ("byte-level BPE", byte_level(true)),
            ("unigram", unigram(true)),
            ("word level", word_level()),
        ]
    }

    #[test]
    fn a_maximum_length_must_leave_room_beside_a_pairs_special_tokens() {
        // BERT's processing puts three special tokens around a pair: four tokens hold a text.
        let mut t = wordpiece();
        let e = t.set_max_len(3).unwrap_err().to_string();
        assert!(e.contains("a maximum length of 3 tokens leaves no room") && e.contains("the 3 "));
        assert_eq!(t.max_len(), MAX, "a refused length changes nothing");
        t.set_max_len(4).unwrap();
        assert_eq!(t.encode("the man eats food").unwrap().ids.len(), 4);
        assert_eq!(t.encode_pair("the man", "eats food").unwrap().ids.len(), 4);
    }

    #[test]
    fn a_prompts_tokens_become_framing_and_the_texts_keep_their_own_spans() {
        let t = wordpiece();
        let (prompt, text) = ("new, ", "the man eats");
        let alone = t.encode(text).unwrap();
        let e = t.encode(&[prompt, text].concat()).unwrap().after_prompt(prompt);
        // [CLS] new , the man eat ##s [SEP]: the prompt's two tokens join the special ones.
        assert_eq!(e.tokens, ["[CLS]", "new", ",", "the", "man", "eat", "##s", "[SEP]"]);
        assert_eq!(e.special, [true, true, true, false, false, false, false, true]);
        // The text's tokens are as it alone gives them: spans in it, words counted from 0.
        let texts =
            |e: &Encoded| e.text_tokens().into_iter().map(|(_, span)| span).collect::<Vec<_>>();
        assert_eq!(texts(&e), texts(&alone));
        let words = |e: &Encoded| e.words.iter().flatten().copied().collect::<Vec<_>>();
        assert_eq!(words(&e), words(&alone));
        let spans = |e: &Encoded| e.word_starts().into_iter().map(|(_, s)| s).collect::<Vec<_>>();
        assert_eq!(spans(&e), spans(&alone));
        // No prompt: nothing changes.
        assert_eq!(t.encode(text).unwrap().after_prompt(""), alone);
        // A token across the boundary is the text's, from its first byte.
        let e = t.encode("new man").unwrap().after_prompt("ne");
        assert_eq!(e.special, [true, false, false, true]);
        assert_eq!(e.offsets[1..3], [(0, 1), (2, 5)]);
        assert_eq!(e.words[1..3], [Some(0), Some(1)]);
        // A pair: the prompt goes before the first text, and the second keeps its own spans.
        let (query, doc) = ("the man", "man eats");
        let alone = t.encode_pair(query, doc).unwrap();
        let e = t.encode_pair(&[prompt, query].concat(), doc).unwrap().after_prompt(prompt);
        assert_eq!(e.special, [true, true, true, false, false, true, false, false, false, true]);
        assert_eq!((texts(&e), words(&e)), (texts(&alone), words(&alone)));
    }

    #[test]
    fn prefixes_give_the_whole_texts_tokens_in_every_family() {
        let texts: Vec<String> =
            (0..40).map(|seed| text(seed, 1000 + 1500 * seed as usize)).collect();
        for (name, t) in families() {
            // Every text past the first prefix's 4096 bytes took one (the rest are whole).
            assert_eq!(prefixes_match(name, &t, &texts), 2 * (40 - 3), "{name}: prefixes taken");
            // As a pair's document too (the first twenty texts, for time): at least every one
            // of the seventeen past 4096 bytes whose query is short (twelve).
            let pairs = pair_prefixes_match(name, &t, &texts[..20]);
            assert!(pairs >= 12, "{name}: {pairs} pairs took prefixes");
        }
    }

    #[test]
    fn prefixes_give_the_whole_texts_tokens_on_minilm() {
        let dir = crate::fetched_model_dir("all-MiniLM-L6-v2").unwrap();
        let t = Tokenizer::load(&dir, 256).unwrap();
        // The repository's docs from every kilobyte or so of their first halves: prose, tables,
        // code and non-ASCII text, each at least 8 KB long.
        let docs = [include_str!("../../../docs/backends.md"), include_str!("../../../README.md")];
        let texts: Vec<String> = docs
            .iter()
            .flat_map(|d| {
                (0..d.len() / 2)
                    .step_by(997)
                    .filter(|&i| d.is_char_boundary(i))
                    .map(|i| d[i..].to_owned())
            })
            .collect();
        assert_eq!(prefixes_match("all-MiniLM-L6-v2", &t, &texts), 2 * texts.len());
        let pairs = pair_prefixes_match("all-MiniLM-L6-v2", &t, &texts);
        assert!(3 * pairs >= 2 * texts.len(), "{pairs} of {} pairs took prefixes", texts.len());
    }

    #[test]
    fn prefixes_give_the_whole_texts_tokens_in_other_scripts() {
        let texts = |base: u64, spaces: bool| -> Vec<String> {
            (0..16).map(|i| script_text(base + i, 5_000 + 2_000 * i as usize, spaces)).collect()
        };
        let (spaced, unspaced) = (texts(0, true), texts(100, false));
        for (name, t) in families() {
            // Every text is past the first prefix's 4096 bytes, and has letters before spaces.
            assert_eq!(prefixes_match(name, &t, &spaced), 2 * 16, "{name}: spaced");
            // Without spaces only BERT's pre-tokenizer has cuts: after punctuation and
            // ideographs, which it makes words of their own.
            let want = if name == "wordpiece" { 2 * 16 } else { 0 };
            assert_eq!(prefixes_match(name, &t, &unspaced), want, "{name}: no spaces");
            let pairs = pair_prefixes_match(name, &t, &unspaced[..9]);
            assert!(name != "wordpiece" || pairs >= 6, "{name}: {pairs} pairs took prefixes");
        }
    }

    #[test]
    fn a_cut_follows_a_letter_only_where_normalizing_leaves_it_visible() {
        let bert = wordpiece();
        let n = bert.inner.get_normalizer();
        assert!(stays_visible('д', n) && stays_visible('é', n) && stays_visible('1', n));
        assert!(!stays_visible('中', n), "BERT's normalizer puts spaces around an ideograph");
        assert!(!stays_visible('\u{64b}', n), "and strips an Arabic mark");
        assert!(stays_visible('中', unigram(true).inner.get_normalizer()), "NFKC keeps it");
        // With BERT's normalizer and another pre-tokenizer, an ideograph before a space is no
        // cut; a Cyrillic letter is.
        let t = with(&bert, "pre_tokenizer", json!({"type": "WhitespaceSplit"}));
        let cuts = t.cuts.as_ref().unwrap();
        assert!(cuts.bert.is_none());
        assert_eq!(cuts.find(&"中 ".repeat(3_000), 4096, n), None);
        assert_eq!(cuts.find(&"д ".repeat(3_000), 4096, n), Some(4097));
    }

    #[test]
    fn no_cut_follows_an_added_token_that_takes_the_space_after_it() {
        // `zz9` takes the spaces after it into its text and offsets. [CLS], 45 words, `zz9` and
        // [SEP] are 48 tokens, all kept, and the first space past 4096 bytes after a letter or
        // digit is the one after `zz9`: a cut there would end the token before its space.
        let mut tokens = serde_json::to_value(&wordpiece().inner).unwrap()["added_tokens"].clone();
        tokens.as_array_mut().unwrap().push(json!({"id": 1000, "content": "zz9",
            "single_word": false, "lstrip": false, "rstrip": true, "normalized": false,
            "special": false}));
        let t = with(&wordpiece(), "added_tokens", tokens);
        let text = "the ".repeat(45) + &" ".repeat(4_000) + "zz9" + &" the".repeat(100);
        let (e, read) = t.encode_prefixed(&t.inner, &text, Truncation::Right, true).unwrap();
        assert!(read > 4_183 && read < text.len(), "{read} bytes tokenized");
        assert_eq!(convert(&e), convert(&whole(&t, &text, Truncation::Right)));
        assert_eq!(e.get_tokens()[46].trim_end(), "zz9", "`zz9` is kept");
    }

    #[test]
    fn prefixes_give_the_whole_texts_tokens_on_minilm_in_other_scripts() {
        let dir = crate::fetched_model_dir("all-MiniLM-L6-v2").unwrap();
        let t = Tokenizer::load(&dir, 256).unwrap();
        let texts: Vec<String> =
            (0..16).map(|i| script_text(200 + i, 8_000 + 3_000 * i as usize, i % 2 == 0)).collect();
        assert_eq!(prefixes_match("all-MiniLM-L6-v2", &t, &texts), 2 * texts.len());
        let pairs = pair_prefixes_match("all-MiniLM-L6-v2", &t, &texts);
        assert!(3 * pairs >= 2 * texts.len(), "{pairs} of {} pairs took prefixes", texts.len());
    }

    /// Changes `t`'s configuration at `key` to `value`.
    fn with(t: &Tokenizer, key: &str, value: Value) -> Tokenizer {
        let mut v = serde_json::to_value(&t.inner).unwrap();
        v[key] = value;
        build(v)
    }

    #[test]
    fn tokenizers_that_look_across_spaces_tokenize_whole_texts() {
        let split = json!({"type": "Split", "pattern": {"Regex": "\\w+ \\w+"},
                           "behavior": "Isolated", "invert": false});
        let collapse = json!({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "});
        let erase = json!({"type": "Replace", "pattern": {"String": "e"}, "content": ""});
        let punctuation = json!({"type": "Punctuation", "behavior": "Isolated"});
        let digits = json!({"type": "Digits", "individual_digits": true});
        let mut spaced = serde_json::to_value(&wordpiece().inner).unwrap()["added_tokens"].clone();
        spaced.as_array_mut().unwrap().push(added("new york", 5, false));
        let mut dropout = serde_json::to_value(&byte_level(true).inner).unwrap()["model"].clone();
        dropout["dropout"] = json!(0.1);
        let whole = [
            ("byte level without its regex", byte_level(false)),
            ("metaspace without splitting", unigram(false)),
            ("no pre-tokenizer", with(&wordpiece(), "pre_tokenizer", Value::Null)),
            ("punctuation alone", with(&wordpiece(), "pre_tokenizer", punctuation)),
            ("digits alone", with(&wordpiece(), "pre_tokenizer", digits)),
            ("a replace by nothing", with(&wordpiece(), "normalizer", erase)),
            ("a split on a pattern", with(&wordpiece(), "pre_tokenizer", split)),
            ("a replace on a pattern", with(&wordpiece(), "normalizer", collapse)),
            ("an added token with a space", with(&wordpiece(), "added_tokens", spaced)),
            ("BPE with dropout", with(&byte_level(true), "model", dropout)),
        ];
        let text = text(7, 20_000);
        for (name, t) in whole {
            assert!(t.cuts.is_none(), "{name} cannot take prefixes");
            let (e, read) = t.encode_prefixed(&t.inner, &text, Truncation::Right, true).unwrap();
            assert_eq!((read, e.len()), (text.len(), MAX), "{name}");
        }
        // Keeping the end of a text takes the whole text too, even where prefixes work.
        let t = wordpiece();
        let left = t.variant(&t.left, Some(MAX)).unwrap();
        let (e, read) = t.encode_prefixed(left, &text, Truncation::Left, true).unwrap();
        assert_eq!((read, e.len()), (text.len(), MAX));
    }

    #[test]
    fn a_long_text_is_tokenized_a_short_prefix_at_a_time() {
        let t = wordpiece();
        // Ten megabytes of prose take the first prefix alone.
        let prose = text(3, 10_000_000);
        let (e, read) = t.encode_prefixed(&t.inner, &prose, Truncation::Right, true).unwrap();
        assert!(read <= MIN_PREFIX_BYTES + 64 && e.len() == MAX, "{read} bytes tokenized");
        // A text whose first forty kilobytes hold no token takes a second prefix, four times
        // the first one's length.
        let blank = " ".repeat(40_000) + &text(4, 1_000_000);
        let (e, read) = t.encode_prefixed(&t.inner, &blank, Truncation::Right, true).unwrap();
        assert!((160_000..170_000).contains(&read), "{read} bytes tokenized");
        assert_eq!(convert(&e), convert(&whole(&t, &blank, Truncation::Right)));
    }
}
