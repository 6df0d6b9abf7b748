//! Training losses on device tensors, as sentence-transformers and transformers define them.
//!
//! Each takes the model's output rows (`[rows, width]` tensors of any Burn backend, burn-autodiff
//! included) and targets from the host, and returns a one-element tensor: the mean over the
//! batch, as PyTorch's losses reduce by default.

use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend as BurnBackend, Shape, TensorMetadata};
use switchyard_burn::generic::{dims, rows};
use switchyard_burn::{floats, read_f32};

use crate::{Error, Result};

/// The scale sentence-transformers' MultipleNegativesRankingLoss and CoSENTLoss apply to cosine
/// similarities by default.
pub const SIMILARITY_SCALE: f32 = 20.0;

/// Cross-entropy of `logits` (`[n, classes]`) against one class index per row, averaged over the
/// rows (PyTorch's `CrossEntropyLoss`).
pub fn cross_entropy<B: BurnBackend>(
    logits: FloatTensor<B>,
    labels: &[usize],
) -> Result<FloatTensor<B>> {
    let [n, classes] = dims::<B>(&logits);
    if labels.len() != n || n == 0 {
        return Err(Error::Config(format!("{} labels for {n} rows of logits", labels.len())));
    }
    if let Some(&bad) = labels.iter().find(|&&l| l >= classes) {
        return Err(Error::Config(format!("label {bad} for logits of {classes} classes")));
    }
    let device = logits.device();
    let mut onehot = vec![0.0f32; n * classes];
    for (r, &l) in labels.iter().enumerate() {
        onehot[r * classes + l] = 1.0;
    }
    let onehot = floats::<B>(onehot, &[n, classes], &device);
    let picked = B::float_sum(B::float_mul(B::log_softmax(logits, 1), onehot));
    Ok(B::float_mul_scalar(picked, (-1.0 / n as f64).into()))
}

/// Binary cross-entropy of one logit per row against a target in `[0, 1]`, averaged
/// (PyTorch's `BCEWithLogitsLoss`): `max(x, 0) - x t + log(1 + exp(-|x|))`.
pub fn bce_with_logits<B: BurnBackend>(
    logits: FloatTensor<B>,
    targets: &[f32],
) -> Result<FloatTensor<B>> {
    let [n, width] = dims::<B>(&logits);
    if width != 1 || targets.len() != n || n == 0 {
        return Err(Error::Config(format!(
            "{} targets for {n} rows of {width} logits; binary cross-entropy takes one logit a row",
            targets.len()
        )));
    }
    if let Some(t) = targets.iter().find(|t| !(0.0..=1.0).contains(*t)) {
        return Err(Error::Config(format!("the target {t} is not in [0, 1]")));
    }
    let device = logits.device();
    let t = floats::<B>(targets.to_vec(), &[n, 1], &device);
    let softplus = B::float_log1p(B::float_exp(B::float_neg(B::float_abs(logits.clone()))));
    let loss =
        B::float_add(B::float_sub(B::relu(logits.clone()), B::float_mul(logits, t)), softplus);
    Ok(B::float_mul_scalar(B::float_sum(loss), (1.0 / n as f64).into()))
}

/// Rows scaled to unit length, as `torch.nn.functional.normalize` (norm at least `1e-12`).
pub fn normalize<B: BurnBackend>(x: FloatTensor<B>) -> FloatTensor<B> {
    switchyard_burn::generic::l2_norm::<B>(x, 1e-12)
}

/// MultipleNegativesRankingLoss: anchor `i` of `anchors` (`[n, d]`) should be closer, by cosine
/// similarity times `scale`, to candidate `i` of `candidates` (`[m, d]`, `m >= n`: the positives,
/// then any hard negatives) than to every other candidate of the batch.
pub fn multiple_negatives_ranking<B: BurnBackend>(
    anchors: FloatTensor<B>,
    candidates: FloatTensor<B>,
    scale: f32,
) -> Result<FloatTensor<B>> {
    let ([n, d], [m, d2]) = (dims::<B>(&anchors), dims::<B>(&candidates));
    if d != d2 || m < n || n == 0 {
        return Err(Error::Config(format!(
            "{n} anchors of width {d} against {m} candidates of width {d2}"
        )));
    }
    let sims =
        B::float_matmul(normalize::<B>(anchors), B::float_transpose(normalize::<B>(candidates)));
    let labels: Vec<usize> = (0..n).collect();
    cross_entropy::<B>(B::float_mul_scalar(sims, f64::from(scale).into()), &labels)
}

/// CoSENT: for every two pairs `i`, `j` of the batch with `score[i] < score[j]`, the cosine of
/// pair `i` (`a[i]`, `b[i]`) times `scale` should be below pair `j`'s:
/// `log(1 + sum exp(s_i - s_j))` over those `i`, `j`.
pub fn cosent<B: BurnBackend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    scores: &[f32],
    scale: f32,
) -> Result<FloatTensor<B>> {
    let ([n, d], [n2, d2]) = (dims::<B>(&a), dims::<B>(&b));
    if (n, d) != (n2, d2) || scores.len() != n || n == 0 {
        return Err(Error::Config(format!(
            "CoSENT takes as many pairs as scores: {n} and {n2} rows, {} scores",
            scores.len()
        )));
    }
    let device = a.device();
    let cos = B::float_sum_dim(B::float_mul(normalize::<B>(a), normalize::<B>(b)), 1);
    let s = B::float_mul_scalar(cos, f64::from(scale).into());
    // diff[i, j] = s_i - s_j, kept where score_i < score_j.
    let diff = B::float_sub(s.clone(), B::float_reshape(s, Shape::from(vec![1, n])));
    let mut keep = vec![0.0f32; n * n + 1];
    for i in 0..n {
        for j in 0..n {
            if scores[i] >= scores[j] {
                keep[1 + i * n + j] = -1e12;
            }
        }
    }
    let flat = B::float_reshape(diff, Shape::from(vec![n * n]));
    let zero = B::float_zeros(Shape::from(vec![1]), &device, flat.dtype().into());
    let x =
        B::float_add(B::float_cat(vec![zero, flat], 0), floats::<B>(keep, &[n * n + 1], &device));
    Ok(logsumexp::<B>(x))
}

/// `log(sum(exp(x)))` of a 1-D tensor, stably, as a one-element tensor.
fn logsumexp<B: BurnBackend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let max = B::float_detach(B::float_max(x.clone()));
    let sum = B::float_sum(B::float_exp(B::float_sub(x, max.clone())));
    B::float_add(B::float_log(sum), max)
}

/// The pairwise cosine of rows `i` of `a` and `b` (`[n, d]` each), on the host.
pub fn pair_cosines<B: BurnBackend>(a: FloatTensor<B>, b: FloatTensor<B>) -> Result<Vec<f32>> {
    let cos = B::float_sum_dim(B::float_mul(normalize::<B>(a), normalize::<B>(b)), 1);
    Ok(read_f32::<B>(cos)?)
}

/// Rows `start .. end` of a `[rows, width]` tensor.
pub fn take_rows<B: BurnBackend>(t: &FloatTensor<B>, start: usize, end: usize) -> FloatTensor<B> {
    rows::<B>(t.clone(), start, end)
}

/// A one-element tensor's value.
pub fn scalar<B: BurnBackend>(t: FloatTensor<B>) -> Result<f32> {
    let v = read_f32::<B>(t)?;
    v.first().copied().ok_or_else(|| Error::Config("an empty loss".into()))
}
