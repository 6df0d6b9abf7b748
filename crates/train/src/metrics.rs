//! Evaluation metrics, as scipy and scikit-learn define them.

/// Spearman's rank correlation of `a` and `b` (ties get their average rank, as
/// `scipy.stats.spearmanr`); `None` for fewer than two values or a constant input.
pub fn spearman(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 {
        return None;
    }
    pearson(&ranks(a), &ranks(b))
}

/// Average ranks, from 1.
fn ranks(x: &[f32]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

fn pearson(a: &[f64], b: &[f64]) -> Option<f64> {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma) * (x - ma)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb) * (y - mb)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// The share of `predicted` equal to `gold`.
pub fn accuracy(predicted: &[usize], gold: &[usize]) -> f64 {
    if gold.is_empty() {
        return 0.0;
    }
    predicted.iter().zip(gold).filter(|(p, g)| p == g).count() as f64 / gold.len() as f64
}

/// The unweighted mean of each class's F1 over the classes that occur in `gold` or
/// `predicted` (scikit-learn's `f1_score(average="macro")`; a class with no true positive has
/// F1 0).
pub fn macro_f1(predicted: &[usize], gold: &[usize]) -> f64 {
    let classes = predicted.iter().chain(gold).copied().max().map_or(0, |m| m + 1);
    let (mut tp, mut fp, mut fneg) =
        (vec![0usize; classes], vec![0usize; classes], vec![0usize; classes]);
    for (&p, &g) in predicted.iter().zip(gold) {
        if p == g {
            tp[p] += 1;
        } else {
            fp[p] += 1;
            fneg[g] += 1;
        }
    }
    let present: Vec<usize> = (0..classes).filter(|&c| tp[c] + fp[c] + fneg[c] > 0).collect();
    if present.is_empty() {
        return 0.0;
    }
    let f1 = |c: usize| {
        let denom = 2 * tp[c] + fp[c] + fneg[c];
        if denom == 0 { 0.0 } else { 2.0 * tp[c] as f64 / denom as f64 }
    };
    present.iter().map(|&c| f1(c)).sum::<f64>() / present.len() as f64
}

/// The index of each row's largest value.
pub fn argmax_rows(values: &[f32], width: usize) -> Vec<usize> {
    values
        .chunks_exact(width.max(1))
        .map(|r| r.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_matches_scipy_with_ties() {
        // scipy.stats.spearmanr([1, 2, 2, 3, 5], [2, 1, 4, 4, 5]).statistic
        let r = spearman(&[1.0, 2.0, 2.0, 3.0, 5.0], &[2.0, 1.0, 4.0, 4.0, 5.0]).unwrap();
        assert!((r - 0.763_157_894_736_842_1).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
    }

    #[test]
    fn macro_f1_matches_scikit_learn() {
        // sklearn.metrics.f1_score([0, 1, 2, 0, 1, 2], [0, 2, 1, 0, 0, 1], average="macro")
        let f = macro_f1(&[0, 2, 1, 0, 0, 1], &[0, 1, 2, 0, 1, 2]);
        assert!((f - 0.266_666_666_666_666_6).abs() < 1e-12, "{f}");
        assert_eq!(accuracy(&[0, 2, 1, 0, 0, 1], &[0, 1, 2, 0, 1, 2]), 2.0 / 6.0);
        assert_eq!(macro_f1(&[1, 1], &[1, 1]), 1.0);
        assert_eq!(argmax_rows(&[0.1, 0.9, 0.5, -1.0, -2.0, -0.5], 3), [1, 2]);
    }
}
