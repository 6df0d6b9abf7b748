//! Reranking documents against a query with a cross-encoder.

use switchyard_dispatch::Dispatch;
use switchyard_models::scores::ranking;
use switchyard_models::{Model, Prompt, Runner, Task};

use crate::open::{open_for, strs};
use crate::{Options, Result};

/// A document's place in a ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    /// The document's index in the input.
    pub index: usize,
    /// Its relevance, as sentence-transformers' `CrossEncoder` scores it: the model's
    /// `activation_fn` of the logit, the sigmoid unless the model names another
    /// ([`Model::score_fn`]).
    pub score: f32,
    /// The cross-encoder's raw logit.
    pub logit: f32,
}

/// A cross-encoder reranker: a sequence classifier with one label, run on (query, document)
/// pairs, with its default prompt (if it names one) before the query, as sentence-transformers'
/// `CrossEncoder.predict` puts it.
///
/// ```
/// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert-cross-encoder");
/// let mut reranker = switchyard::Reranker::open(model, "flex")?;
/// let ranked = reranker.rank("what do cats do?", &["cats sat on mats", "the sea", "zzz"])?;
/// assert_eq!(ranked.len(), 3);
/// assert!(ranked.windows(2).all(|w| w[0].score >= w[1].score), "best first");
/// # Ok::<(), switchyard::Error>(())
/// ```
pub struct Reranker {
    runner: Runner<Dispatch>,
}

impl Reranker {
    /// Opens the cross-encoder `model` (a checkpoint directory or a Hugging Face repository id)
    /// on the device named `device`.
    pub fn open(model: &str, device: &str) -> Result<Reranker> {
        Reranker::open_with(model, &Options::on(device)?)
    }

    /// Opens the cross-encoder `model` with `options`.
    pub fn open_with(model: &str, options: &Options) -> Result<Reranker> {
        let one_label = |t: &Task| matches!(t, Task::Classify { labels } if labels.len() == 1);
        let what = "a cross-encoder (a sequence classifier with one label)";
        Ok(Reranker { runner: open_for(model, options, one_label, what)? })
    }

    /// `docs` ranked against `query`, most relevant first, with the model's default prompt (if
    /// any) before the query.
    pub fn rank<T: AsRef<str>>(&mut self, query: &str, docs: &[T]) -> Result<Vec<Ranked>> {
        self.rank_with_prompt(query, docs, Prompt::Default)
    }

    /// `docs` ranked against `query`, most relevant first, with the prompt `prompt` chooses
    /// before the query: an error for a name the model does not have.
    pub fn rank_with_prompt<T: AsRef<str>>(
        &mut self,
        query: &str,
        docs: &[T],
        prompt: Prompt<'_>,
    ) -> Result<Vec<Ranked>> {
        let query = [self.runner.model().prompts().text(prompt)?, query].concat();
        let rows = self.runner.classify_pairs(&query, &strs(docs)?, |_| {})?;
        let logits: Vec<f32> = rows.iter().map(|r| r.first().copied().unwrap_or(0.0)).collect();
        let score = self.runner.model().score_fn();
        Ok(ranking(&logits)
            .into_iter()
            .map(|index| Ranked { index, score: score.apply(logits[index]), logit: logits[index] })
            .collect())
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.runner.model()
    }
}
