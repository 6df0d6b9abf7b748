//! The rules that turn a model's outputs into what users read: similarities, probabilities,
//! labels, rankings and sparse terms. One implementation, shared by the CLI, the library front
//! door and the server.

/// The cosine similarity of two vectors (0 if either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = norm(a) * norm(b);
    if n > 0.0 { dot / n } else { 0.0 }
}

/// How an embedding model's vectors are compared: sentence-transformers' `similarity_fn_name`
/// (`config_sentence_transformers.json`), cosine where a model names none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Similarity {
    /// The cosine of the angle between them.
    #[default]
    Cosine,
    /// Their dot product.
    Dot,
    /// Minus their Euclidean distance.
    Euclidean,
    /// Minus their Manhattan (L1) distance.
    Manhattan,
}

impl Similarity {
    /// Every function, in sentence-transformers' order.
    pub const ALL: [Similarity; 4] =
        [Similarity::Cosine, Similarity::Dot, Similarity::Euclidean, Similarity::Manhattan];

    /// The function sentence-transformers calls `name`, if it is one of these.
    pub fn named(name: &str) -> Option<Similarity> {
        Similarity::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Its name in sentence-transformers (`cosine`, `dot`, `euclidean`, `manhattan`).
    pub fn name(self) -> &'static str {
        match self {
            Similarity::Cosine => "cosine",
            Similarity::Dot => "dot",
            Similarity::Euclidean => "euclidean",
            Similarity::Manhattan => "manhattan",
        }
    }

    /// The similarity of `a` and `b` (higher is more similar).
    pub fn of(self, a: &[f32], b: &[f32]) -> f32 {
        let pairs = || a.iter().zip(b);
        match self {
            Similarity::Cosine => cosine(a, b),
            Similarity::Dot => pairs().map(|(x, y)| x * y).sum(),
            Similarity::Euclidean => -pairs().map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt(),
            Similarity::Manhattan => -pairs().map(|(x, y)| (x - y).abs()).sum::<f32>(),
        }
    }
}

/// What a one-label cross-encoder's score is of its logit: sentence-transformers'
/// `activation_fn`, the sigmoid where a model names none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoreFn {
    /// The logistic function: scores in (0, 1).
    #[default]
    Sigmoid,
    /// The logit itself (`torch.nn.Identity`, as the ms-marco cross-encoders name it).
    Identity,
    /// The hyperbolic tangent: scores in (-1, 1).
    Tanh,
}

impl ScoreFn {
    /// The function of `torch.nn` named by the class path `path` (such as
    /// `torch.nn.modules.activation.Sigmoid`), if it is one of these.
    pub fn of_torch(path: &str) -> Option<ScoreFn> {
        match path.rsplit('.').next()? {
            "Sigmoid" => Some(ScoreFn::Sigmoid),
            "Identity" => Some(ScoreFn::Identity),
            "Tanh" => Some(ScoreFn::Tanh),
            _ => None,
        }
    }

    /// The score of `logit`.
    pub fn apply(self, logit: f32) -> f32 {
        match self {
            ScoreFn::Sigmoid => sigmoid(logit),
            ScoreFn::Identity => logit,
            ScoreFn::Tanh => logit.tanh(),
        }
    }
}

/// The logistic function.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Softmax of `x`, with the maximum subtracted first.
pub fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

/// How a sequence classifier's logits become its labels' scores, as transformers'
/// text-classification pipeline chooses from `config.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassScores {
    /// The softmax over the labels: one label is true (a single-label classifier).
    Softmax,
    /// The sigmoid of each logit: each label is true or not by itself (a multi-label
    /// classifier, or one label).
    Sigmoid,
    /// The logits themselves (a regression model's values).
    Raw,
}

impl ClassScores {
    /// transformers' choice: `problem_type` `regression` the logits, `multi_label_classification`
    /// or one label the sigmoid, else the softmax.
    pub fn of(problem_type: Option<&str>, labels: usize) -> ClassScores {
        match problem_type {
            Some("regression") => ClassScores::Raw,
            Some("multi_label_classification") => ClassScores::Sigmoid,
            _ if labels == 1 => ClassScores::Sigmoid,
            _ => ClassScores::Softmax,
        }
    }

    /// The labels' scores from their logits.
    pub fn apply(self, logits: &[f32]) -> Vec<f32> {
        match self {
            ClassScores::Softmax => softmax(logits),
            ClassScores::Sigmoid => logits.iter().map(|&x| sigmoid(x)).collect(),
            ClassScores::Raw => logits.to_vec(),
        }
    }
}

/// A classifier's probabilities from its logits whatever its `problem_type` says (TEI's rule):
/// with one label, the sigmoid of its logit (as sentence-transformers scores a cross-encoder);
/// with several, their softmax.
pub fn probabilities(logits: &[f32]) -> Vec<f32> {
    ClassScores::of(None, logits.len()).apply(logits)
}

/// The index and value of the largest probability (the first, on a tie); `(0, 0.0)` for none.
pub fn best(probs: &[f32]) -> (usize, f32) {
    let mut top = (0, 0.0);
    for (i, &p) in probs.iter().enumerate() {
        if i == 0 || p > top.1 {
            top = (i, p);
        }
    }
    top
}

/// The indices of `scores`, best first; equal scores keep their input order.
pub fn ranking(scores: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order
}

/// A SPLADE row's non-zero terms as `(token id, weight)`, heaviest first (ties by id).
pub fn sparse_terms(row: &[f32]) -> Vec<(u32, f32)> {
    let mut terms: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .filter(|&(_, &w)| w > 0.0)
        .map(|(i, &w)| (u32::try_from(i).unwrap_or(u32::MAX), w))
        .collect();
    terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_similarity_is_sentence_transformers_function_of_its_name() {
        let (a, b) = ([1.0, 2.0, -2.0], [4.0, 0.0, 1.0]);
        // a·b = 2, |a| = 3, |b| = √17, a - b = (-3, 2, -3).
        let want = [2.0 / (3.0 * 17f32.sqrt()), 2.0, -22f32.sqrt(), -8.0];
        for (s, want) in Similarity::ALL.into_iter().zip(want) {
            assert!((s.of(&a, &b) - want).abs() < 1e-6, "{s:?}");
            assert_eq!(Similarity::named(s.name()), Some(s));
        }
        assert_eq!(Similarity::named("maxsim"), None);
        assert_eq!(Similarity::default(), Similarity::Cosine);
    }

    #[test]
    fn cosine_of_parallel_orthogonal_and_zero_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), 0.0);
        assert!((cosine(&[1.0, 0.0], &[-1.0, 0.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }

    #[test]
    fn class_scores_follow_the_problem_type_as_transformers_pipeline_does() {
        let logits = [2.0, -1.0, 0.5];
        let of = |t: Option<&str>, n: usize| ClassScores::of(t, n);
        assert_eq!(of(None, 3).apply(&logits), softmax(&logits));
        assert_eq!(of(Some("single_label_classification"), 3), ClassScores::Softmax);
        let each: Vec<f32> = logits.iter().map(|&x| sigmoid(x)).collect();
        assert_eq!(of(Some("multi_label_classification"), 3).apply(&logits), each);
        assert_eq!(of(None, 1), ClassScores::Sigmoid);
        assert_eq!(of(Some("regression"), 1).apply(&[3.5]), [3.5]);
        assert_eq!(of(Some("something else"), 3), ClassScores::Softmax);
    }

    #[test]
    fn one_label_is_a_sigmoid_several_a_softmax() {
        assert_eq!(probabilities(&[0.0]), [0.5]);
        let p = probabilities(&[1.0, 1.0, 1.0 + 2f32.ln()]);
        assert!((p[2] - 0.5).abs() < 1e-6 && (p[0] - 0.25).abs() < 1e-6, "{p:?}");
        // Large logits do not overflow: the maximum is subtracted first.
        let p = probabilities(&[1000.0, 999.0]);
        assert!(p.iter().all(|x| x.is_finite()) && (p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn best_takes_the_first_of_equals_and_survives_no_labels() {
        assert_eq!(best(&[0.2, 0.5, 0.5, 0.1]), (1, 0.5));
        assert_eq!(best(&[]), (0, 0.0));
    }

    #[test]
    fn rankings_are_best_first_and_stable() {
        assert_eq!(ranking(&[0.1, 0.9, 0.5, 0.9]), [1, 3, 2, 0]);
        assert!(ranking(&[]).is_empty());
    }

    #[test]
    fn sparse_terms_drop_zeros_and_sort_heaviest_first() {
        assert_eq!(sparse_terms(&[0.0, 0.5, 0.0, 1.5, 0.5]), [(3, 1.5), (1, 0.5), (4, 0.5)]);
    }
}
