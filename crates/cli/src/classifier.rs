//! Sequence and token classification.

use switchyard_dispatch::Dispatch;
use switchyard_models::scores::{best, softmax};
use switchyard_models::{Marking, Model, Prompt, Runner, Task, prompted};

use crate::open::{open_for, strs};
use crate::{Options, Result};

/// A sequence classifier's verdict on one text.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The most likely label.
    pub label: String,
    /// Its score, as transformers' text-classification pipeline gives it: the softmax over the
    /// labels; the sigmoid of its logit for a one-label or multi-label model (`problem_type`);
    /// the logit itself for a regression model.
    pub score: f32,
    /// Every label's logit, in the model's label order.
    pub logits: Vec<f32>,
}

/// A token classifier's label for one word of a text.
#[derive(Clone, Debug, PartialEq)]
pub struct WordLabel {
    /// The word's byte range in the text.
    pub span: (usize, usize),
    /// The word.
    pub text: String,
    /// The most likely label.
    pub label: String,
    /// Its probability.
    pub score: f32,
}

/// A classifier: a sequence classifier ([`Classifier::predict`]) or a token classifier
/// ([`Classifier::label_words`]).
///
/// ```
/// # let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny");
/// # let (model, ner) = (format!("{dir}/bert-classifier"), format!("{dir}/bert-token-classifier"));
/// use switchyard::Classifier;
///
/// let mut sentiment = Classifier::open(&model, "flex")?;
/// let p = sentiment.predict(&["cats sat on mats"])?;
/// assert!(sentiment.labels().contains(&p[0].label));
///
/// let mut tagger = Classifier::open(&ner, "flex")?;
/// let words = tagger.label_words(&["cats sat on mats"])?;
/// assert_eq!(words[0].iter().map(|w| w.text.as_str()).collect::<Vec<_>>(), ["cats", "sat", "on", "mats"]);
/// # Ok::<(), switchyard::Error>(())
/// ```
pub struct Classifier {
    runner: Runner<Dispatch>,
}

impl Classifier {
    /// Opens the sequence or token classifier `model` (a checkpoint directory or a Hugging Face
    /// repository id) on the device named `device`.
    pub fn open(model: &str, device: &str) -> Result<Classifier> {
        Classifier::open_with(model, &Options::on(device)?)
    }

    /// Opens the classifier `model` with `options`.
    pub fn open_with(model: &str, options: &Options) -> Result<Classifier> {
        let fits = |t: &Task| matches!(t, Task::Classify { .. } | Task::ClassifyTokens { .. });
        Ok(Classifier { runner: open_for(model, options, fits, "a classifier")? })
    }

    /// The labels, in the order of the model's logits.
    pub fn labels(&self) -> &[String] {
        self.runner.model().task().labels()
    }

    /// Each text's most likely label (for a sequence classifier), with the model's default
    /// prompt (if any) before each text, as sentence-transformers' `CrossEncoder.predict` puts it.
    pub fn predict<T: AsRef<str>>(&mut self, texts: &[T]) -> Result<Vec<Prediction>> {
        self.predict_with_prompt(texts, Prompt::Default)
    }

    /// Each text's most likely label (for a sequence classifier), with the prompt `prompt`
    /// chooses before each text: an error for a name the model does not have.
    pub fn predict_with_prompt<T: AsRef<str>>(
        &mut self,
        texts: &[T],
        prompt: Prompt<'_>,
    ) -> Result<Vec<Prediction>> {
        let texts = prompted(self.runner.model().prompts().text(prompt)?, texts);
        let rows = self.runner.classify(&strs(&texts)?, |_| {})?;
        let (labels, scores) = (self.labels(), self.runner.model().class_scores());
        Ok(rows
            .into_iter()
            .map(|logits| {
                let (i, score) = best(&scores.apply(&logits));
                Prediction { label: labels.get(i).cloned().unwrap_or_default(), score, logits }
            })
            .collect())
    }

    /// Each text's words with their most likely labels, read at each word's first sub-token
    /// (for a token classifier).
    pub fn label_words<T: AsRef<str>>(&mut self, texts: &[T]) -> Result<Vec<Vec<WordLabel>>> {
        let texts = strs(texts)?;
        let rows = self.runner.classify_tokens(&texts, Marking::FirstSubToken, |_| {})?;
        let labels = self.labels();
        Ok(texts
            .iter()
            .zip(rows)
            .map(|(text, words)| {
                words
                    .into_iter()
                    .map(|w| {
                        let (i, score) = best(&softmax(&w.logits));
                        WordLabel {
                            span: w.span,
                            text: text.get(w.span.0..w.span.1).unwrap_or_default().to_owned(),
                            label: labels.get(i).cloned().unwrap_or_default(),
                            score,
                        }
                    })
                    .collect()
            })
            .collect())
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.runner.model()
    }
}
