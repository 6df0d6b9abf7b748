//! Integrated gradients: how much each input token moved an output, with respect to the input
//! embeddings (Sundararajan et al., 2017).
//!
//! For an output `F` of the word embeddings `x` of the input's tokens and a baseline `x'`,
//! token `t`'s attribution is `(x_t - x'_t) . mean_k grad_t F(x' + a_k (x - x'))`, over `steps`
//! points `a_k = (k + 1/2) / steps` of the straight path from `x'` to `x` (the midpoint rule).
//! The attributions add up to `F(x) - F(x')` up to the rule's error, which shrinks as
//! `1 / steps^2` and which [`Explanation::error`] reports. The baseline replaces each token's
//! embedding by the padding token's (zeros if the vocabulary has none), except the special
//! tokens (`[CLS]`, `[SEP]`), which keep theirs and so get no attribution. Position and type
//! embeddings are the input's throughout. Every path point of a chunk runs as one sequence of a
//! single ragged batch, so a few passes cover all `steps`.

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::FloatTensor;
use switchyard_burn::generic::{dims, rows};
use switchyard_burn::{floats, read_f32};
use switchyard_core::{BatchBuf, Op, Val};
use switchyard_models::Encoded;
use switchyard_models::scores::Similarity;

use crate::loss;
use crate::{Ad, Error, Graded, Result};

/// The output explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The logit of this label, of a sequence classifier or a cross-encoder (a pair's score
    /// before its sigmoid is label 0).
    Logit(usize),
    /// The similarity of the two inputs' embeddings by this function (an embedding model's,
    /// [`switchyard_models::Model::similarity`]).
    Similarity(Similarity),
}

/// One token's share of the output's change.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenShare {
    /// The token's position in its input (special tokens included).
    pub position: usize,
    /// Its text.
    pub token: String,
    /// Its byte range in the input text (empty for special tokens).
    pub span: (usize, usize),
    /// Whether the tokenizer added it.
    pub special: bool,
    /// The word it belongs to, if any (counted within its segment).
    pub word: Option<u32>,
    /// Which text of a pair it is from: 0 for the first (and for a single text), 1 for the
    /// second; special tokens take the segment of the text they follow.
    pub segment: u32,
    /// Its attribution.
    pub attribution: f32,
}

/// An explanation of one output.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    /// The output at the input, `F(x)`.
    pub value: f32,
    /// The output at the baseline, `F(x')`.
    pub baseline: f32,
    /// Per input (one, or two for a similarity), each token's attribution.
    pub inputs: Vec<Vec<TokenShare>>,
    /// `|sum of attributions - (F(x) - F(x'))|`: the path integral's error.
    pub error: f32,
    /// Path points used.
    pub steps: usize,
}

/// One word's share: the sum of its tokens'.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WordShare {
    /// The word's index in its segment.
    pub word: u32,
    /// Which text of a pair it is from (see [`TokenShare::segment`]).
    pub segment: u32,
    /// Its byte range in that text, from its first token to its last.
    pub span: (usize, usize),
    /// Its attribution.
    pub attribution: f32,
}

impl Explanation {
    /// Per input, each word's attribution.
    pub fn words(&self) -> Vec<Vec<WordShare>> {
        self.inputs
            .iter()
            .map(|tokens| {
                let mut words: Vec<WordShare> = Vec::new();
                for t in tokens {
                    let Some(w) = t.word.filter(|_| !t.special) else { continue };
                    match words.last_mut() {
                        Some(last) if last.word == w && last.segment == t.segment => {
                            last.span.1 = last.span.1.max(t.span.1);
                            last.attribution += t.attribution;
                        }
                        _ => words.push(WordShare {
                            word: w,
                            segment: t.segment,
                            span: t.span,
                            attribution: t.attribution,
                        }),
                    }
                }
                words
            })
            .collect()
    }
}

/// The most tokens one pass of path points holds.
const PASS_TOKENS: usize = 8192;

/// Explains `target` for `inputs` (one tokenized input; two for a [`Target::Similarity`]) of
/// `graded`, with `steps` path points; `pad` is the padding token's id, if the vocabulary has
/// one.
pub fn integrated_gradients<B: BurnBackend>(
    graded: &Graded<B>,
    inputs: &[&Encoded],
    target: Target,
    steps: usize,
    pad: Option<u32>,
) -> Result<Explanation> {
    let _span = tracing::info_span!("explain", steps).entered();
    let want = if matches!(target, Target::Similarity(_)) { 2 } else { 1 };
    if inputs.len() != want {
        return Err(Error::Config(format!(
            "{target:?} explains {want} inputs, not {}",
            inputs.len()
        )));
    }
    if steps == 0 {
        return Err(Error::Config("integrated gradients needs at least one step".into()));
    }
    let graph = graded.graph();
    let (word, table, scale) = graph
        .ops
        .iter()
        .find_map(|op| match *op {
            Op::Embed { table, scale, out } => Some((out, table, scale)),
            _ => None,
        })
        .ok_or_else(|| Error::Config("the graph has no word embedding to attribute to".into()))?;
    let table = graded.param_of(table).cloned().ok_or_else(|| {
        Error::Config("the word embeddings are derived from other weights, not a parameter".into())
    })?;
    let device = graded.device().clone();
    // Each input's embeddings at the input and at the baseline, [len, width].
    let mut ends = Vec::new();
    for e in inputs {
        let ids: Vec<i64> = e.ids.iter().map(|&i| i64::from(i)).collect();
        let x = B::float_select(table.clone(), 0, switchyard_burn::ints::<B>(ids, &device));
        let x = B::float_mul_scalar(x, scale.into());
        let base_ids: Vec<i64> = e
            .ids
            .iter()
            .zip(&e.special)
            .map(|(&i, &s)| i64::from(if s { i } else { pad.unwrap_or(i) }))
            .collect();
        let mut x0 =
            B::float_select(table.clone(), 0, switchyard_burn::ints::<B>(base_ids, &device));
        if pad.is_none() {
            // Zeros where the tokens are not special.
            let keep: Vec<f32> = e.special.iter().map(|&s| f32::from(u8::from(s))).collect();
            x0 = B::float_mul(x0, floats::<B>(keep, &[e.ids.len(), 1], &device));
        }
        let x0 = B::float_mul_scalar(x0, scale.into());
        ends.push((x, x0));
    }
    let value = path_value(graded, inputs, &ends, word, target, &[1.0])?;
    let baseline = path_value(graded, inputs, &ends, word, target, &[0.0])?;
    // Path points in chunks that fit a pass; gradients summed per input token.
    let tokens: usize = inputs.iter().map(|e| e.ids.len()).sum();
    let per_pass = (PASS_TOKENS / tokens.max(1)).max(1);
    let alphas: Vec<f32> = (0..steps).map(|k| (k as f32 + 0.5) / steps as f32).collect();
    let mut sums: Vec<Option<FloatTensor<B>>> = vec![None; inputs.len()];
    for chunk in alphas.chunks(per_pass) {
        let (buf, feed) = path_batch::<B>(inputs, &ends, chunk)?;
        let pass = graded.forward(&buf.batch(), false, vec![(word, feed)])?;
        let f = objective::<Ad<B>>(&pass.outputs, target, chunk.len())?;
        let grads = pass.backward(f);
        let g = grads.fed.into_iter().next().flatten().ok_or_else(|| {
            Error::Config("the output does not depend on the word embeddings".into())
        })?;
        // Rows: input 0's copies, then input 1's; each copy one sequence.
        let mut at = 0;
        for (i, e) in inputs.iter().enumerate() {
            let len = e.ids.len();
            for _ in chunk {
                let part = rows::<B>(g.clone(), at, at + len);
                sums[i] = Some(match sums[i].take() {
                    Some(s) => B::float_add(s, part),
                    None => part,
                });
                at += len;
            }
        }
    }
    let mut shares = Vec::with_capacity(inputs.len());
    let mut total = 0.0f32;
    for ((e, (x, x0)), sum) in inputs.iter().zip(&ends).zip(sums) {
        let sum = sum.expect("every input has gradient rows");
        let per_token = B::float_sum_dim(B::float_mul(B::float_sub(x.clone(), x0.clone()), sum), 1);
        let per_token = B::float_div_scalar(per_token, (steps as f64).into());
        let a = read_f32::<B>(per_token)?;
        total += a.iter().sum::<f32>();
        let segments = segments(&e.special);
        shares.push(
            (0..e.ids.len())
                .map(|p| TokenShare {
                    position: p,
                    token: e.tokens[p].clone(),
                    span: e.offsets[p],
                    special: e.special[p],
                    word: e.words[p],
                    segment: segments[p],
                    attribution: a[p],
                })
                .collect(),
        );
    }
    let error = (total - (value - baseline)).abs();
    Ok(Explanation { value, baseline, inputs: shares, error, steps })
}

/// Each token's segment: the number of texts before it, a text ending where special tokens
/// follow text tokens (`[CLS] a a [SEP] b [SEP]`: 0 0 0 0 1 1).
fn segments(special: &[bool]) -> Vec<u32> {
    let (mut done, mut in_text) = (0u32, false);
    special
        .iter()
        .map(|&s| {
            if s {
                if in_text {
                    in_text = false;
                    done += 1;
                }
                done.saturating_sub(1)
            } else {
                in_text = true;
                done
            }
        })
        .collect()
}

/// The batch of path points `alphas` (each input's copies one after another, input by input)
/// and the word embeddings fed for it: `x' + a (x - x')` per copy.
fn path_batch<B: BurnBackend>(
    inputs: &[&Encoded],
    ends: &[(FloatTensor<B>, FloatTensor<B>)],
    alphas: &[f32],
) -> Result<(BatchBuf, FloatTensor<B>)> {
    let mut buf = BatchBuf::new();
    let mut parts = Vec::new();
    for (e, (x, x0)) in inputs.iter().zip(ends) {
        for &a in alphas {
            buf.push(&e.ids, Some(&e.types), &[])?;
            let step =
                B::float_mul_scalar(B::float_sub(x.clone(), x0.clone()), f64::from(a).into());
            parts.push(B::float_add(x0.clone(), step));
        }
    }
    Ok((buf, B::float_cat(parts, 0)))
}

/// `F` at the path points `alphas`, summed over them, without a tape.
fn path_value<B: BurnBackend>(
    graded: &Graded<B>,
    inputs: &[&Encoded],
    ends: &[(FloatTensor<B>, FloatTensor<B>)],
    word: Val,
    target: Target,
    alphas: &[f32],
) -> Result<f32> {
    let (buf, feed) = path_batch::<B>(inputs, ends, alphas)?;
    let out = graded.infer(&buf.batch(), vec![(word, feed)])?;
    loss::scalar::<B>(objective::<B>(&out, target, alphas.len())?)
}

/// The target summed over `copies` copies of the inputs: the first output's rows.
fn objective<B: BurnBackend>(
    outputs: &[Option<FloatTensor<B>>],
    target: Target,
    copies: usize,
) -> Result<FloatTensor<B>> {
    let out = outputs
        .first()
        .cloned()
        .flatten()
        .ok_or_else(|| Error::Config("the graph gives no output rows".into()))?;
    let [n, width] = dims::<B>(&out);
    match target {
        Target::Logit(label) => {
            if label >= width {
                return Err(Error::Config(format!("label {label} of a model with {width} labels")));
            }
            let col = switchyard_burn::generic::cols::<B>(out, label, label + 1);
            Ok(B::float_sum(col))
        }
        Target::Similarity(similarity) => {
            if n != 2 * copies {
                return Err(Error::Config(format!("{n} embeddings for {copies} pairs")));
            }
            let (a, b) = (rows::<B>(out.clone(), 0, copies), rows::<B>(out, copies, 2 * copies));
            let dot = |a, b| B::float_sum_dim(B::float_mul(a, b), 1);
            let per_pair = match similarity {
                Similarity::Cosine => dot(loss::normalize::<B>(a), loss::normalize::<B>(b)),
                Similarity::Dot => dot(a, b),
                Similarity::Euclidean => {
                    let d = B::float_sub(a, b);
                    B::float_neg(B::float_sqrt(dot(d.clone(), d)))
                }
                Similarity::Manhattan => {
                    B::float_neg(B::float_sum_dim(B::float_abs(B::float_sub(a, b)), 1))
                }
            };
            Ok(B::float_sum(per_pair))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn segments_count_the_texts_before_each_token() {
        let (t, f) = (true, false);
        assert_eq!(super::segments(&[t, f, f, t, f, t]), [0, 0, 0, 0, 1, 1]);
        assert_eq!(super::segments(&[t, f, t, t, f, t]), [0, 0, 0, 0, 1, 1]);
        assert_eq!(super::segments(&[f, f]), [0, 0]);
    }
}
