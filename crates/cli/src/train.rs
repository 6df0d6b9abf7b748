//! Training and explaining through the front door: a job or an explanation on a device named at
//! runtime, on the Burn backend under it (switchyard-train).

use std::num::NonZeroUsize;

use burn_backend::Backend as BurnBackend;
use switchyard_burn::BurnVisitor;
use switchyard_core::Caps;
use switchyard_dispatch::Device;
use switchyard_models::{Model, Task};
use switchyard_train::explain::{Explanation, Target};
use switchyard_train::{Graded, Job, Progress, TrainReport, Trainer};

use crate::{Error, Result};

/// Runs `job` on `device` (flex on `threads` threads where given), reporting to `progress` as
/// it goes: [`Trainer::fit`] on the device's Burn backend under burn-autodiff.
pub fn train(
    job: &Job,
    device: &Device,
    threads: Option<NonZeroUsize>,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<TrainReport> {
    struct Fit<'a> {
        job: &'a Job,
        progress: &'a mut (dyn FnMut(&Progress) + Send),
    }
    impl BurnVisitor for Fit<'_> {
        type Out = switchyard_train::Result<TrainReport>;
        fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> Self::Out {
            Trainer::<B>::fit(device, caps, self.job, self.progress)
        }
    }
    let backend = crate::open::backend(device, threads)?;
    Ok(backend.on_burn(Fit { job, progress })??)
}

/// What to explain: the output, and the texts it is of.
#[derive(Clone, Debug, PartialEq)]
pub enum Question {
    /// A sequence classifier's label (by name or index; `None`: the predicted one) for a text
    /// with `prompt` before it.
    Label {
        /// The text.
        text: String,
        /// The label.
        label: Option<String>,
        /// The text before it, held at the input as the special tokens are (what
        /// [`crate::Classifier::predict`] puts there is the model's default prompt; empty for
        /// none).
        prompt: String,
    },
    /// A cross-encoder's score (its one logit) for a query with `prompt` before it and a
    /// document.
    Score {
        /// The query.
        query: String,
        /// The document.
        document: String,
        /// The text before the query, held at the input as the special tokens are (what
        /// [`crate::Reranker::rank`] puts there is the model's default prompt; empty for none).
        prompt: String,
    },
    /// An embedding model's similarity of two texts (by its function,
    /// [`switchyard_models::Model::similarity`]), each with `prompt` before it.
    Similarity {
        /// The first text.
        a: String,
        /// The second text.
        b: String,
        /// The text before each: what [`crate::Embedder::embed`] puts there is the model's
        /// default, `model.prompts().text(Prompt::Default)`; empty for none. It is held at the
        /// input, as the special tokens are, so the attributions are the texts' alone.
        prompt: String,
    },
}

/// An explanation with what it explains.
#[derive(Clone, Debug, PartialEq)]
pub struct Explained {
    /// The output explained, in words (`logit of "positive"`, `score`, `similarity`).
    pub target: String,
    /// The label explained, for a classifier.
    pub label: Option<String>,
    /// The attributions: one input (a text, or a query and document as one pair) or two (the
    /// texts of a similarity).
    pub explanation: Explanation,
}

/// Explains `question` for `model` (loaded already) on `device`, with `steps` points of the
/// integrated-gradients path.
pub fn explain(
    model: &Model,
    device: &Device,
    threads: Option<NonZeroUsize>,
    question: &Question,
    steps: usize,
) -> Result<Explained> {
    let t = model.tokenizer();
    let labels = model.task().labels();
    // A text with its prompt, the prompt's tokens held as the special tokens are.
    let prompted = |prompt: &str, text: &str| -> Result<switchyard_models::Encoded> {
        Ok(t.encode(&[prompt, text].concat())?.after_prompt(prompt))
    };
    let (inputs, aim) = match (question, model.task()) {
        (Question::Label { text, label, prompt }, Task::Classify { .. }) if labels.len() > 1 => {
            let index = label.as_deref().map(|l| label_index(labels, l)).transpose()?;
            (vec![prompted(prompt, text)?], Aim::Label(index))
        }
        (Question::Score { query, document, prompt }, Task::Classify { .. })
            if labels.len() == 1 =>
        {
            let pair = t.encode_pair(&[prompt.as_str(), query].concat(), document)?;
            (vec![pair.after_prompt(prompt)], Aim::Score)
        }
        (Question::Similarity { a, b, prompt }, Task::Embed(_)) => {
            (vec![prompted(prompt, a)?, prompted(prompt, b)?], Aim::Similarity)
        }
        (q, task) => {
            let wants = match q {
                Question::Label { .. } => "a sequence classifier with two or more labels",
                Question::Score { .. } => "a cross-encoder (a sequence classifier with one label)",
                Question::Similarity { .. } => "an embedding model",
            };
            return Err(Error::WrongTask(format!(
                "explaining this needs {wants}; the model is {}",
                task.describe()
            )));
        }
    };
    struct Work<'a> {
        model: &'a Model,
        inputs: &'a [switchyard_models::Encoded],
        aim: Aim,
        steps: usize,
        pad: Option<u32>,
    }
    impl BurnVisitor for Work<'_> {
        type Out = switchyard_train::Result<(Explanation, Target)>;
        fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> Self::Out {
            let graded = Graded::<B>::of_model(device, caps, self.model)?;
            let refs: Vec<&switchyard_models::Encoded> = self.inputs.iter().collect();
            let target = match self.aim {
                Aim::Label(Some(i)) => Target::Logit(i),
                Aim::Label(None) => Target::Logit(predicted(&graded, &refs)?),
                Aim::Score => Target::Logit(0),
                Aim::Similarity => Target::Similarity(self.model.similarity()),
            };
            let e = switchyard_train::explain::integrated_gradients(
                &graded, &refs, target, self.steps, self.pad,
            )?;
            Ok((e, target))
        }
    }
    let backend = crate::open::backend(device, threads)?;
    let work = Work { model, inputs: &inputs, aim, steps, pad: pad_id(model) };
    let (explanation, target) = backend.on_burn(work)??;
    let (target, label) = match target {
        Target::Logit(i) if matches!(aim, Aim::Label(_)) => {
            (format!("logit of `{}`", labels[i]), Some(labels[i].clone()))
        }
        Target::Logit(_) => ("score (logit)".to_owned(), None),
        Target::Similarity(s) => (format!("{} similarity", s.name()), None),
    };
    Ok(Explained { target, label, explanation })
}

/// What an explanation is of, before the model is on its device.
#[derive(Clone, Copy)]
enum Aim {
    /// A classifier's label (`None`: the predicted one).
    Label(Option<usize>),
    /// A cross-encoder's one logit.
    Score,
    /// An embedder's similarity of two texts.
    Similarity,
}

/// The label a classifier predicts for its one input.
fn predicted<B: BurnBackend>(
    graded: &Graded<B>,
    inputs: &[&switchyard_models::Encoded],
) -> switchyard_train::Result<usize> {
    let mut buf = switchyard_core::BatchBuf::new();
    for e in inputs {
        buf.push(&e.ids, Some(&e.types), &[])?;
    }
    let out = graded.infer(&buf.batch(), Vec::new())?;
    let logits =
        out.into_iter().next().flatten().map(switchyard_burn::read_f32::<B>).transpose()?;
    let logits = logits.unwrap_or_default();
    Ok(switchyard_train::metrics::argmax_rows(&logits, logits.len()).first().copied().unwrap_or(0))
}

/// A label given by name or index.
fn label_index(labels: &[String], label: &str) -> Result<usize> {
    if let Some(i) = labels.iter().position(|l| l == label) {
        return Ok(i);
    }
    match label.parse::<usize>() {
        Ok(i) if i < labels.len() => Ok(i),
        _ => Err(Error::WrongTask(format!(
            "the label `{label}` is not one of the model's: {}",
            labels.join(", ")
        ))),
    }
}

/// The padding token's id, the baseline of an explanation: `config.json`'s `pad_token_id`, else
/// the tokenizer's `[PAD]` or `<pad>`.
fn pad_id(model: &Model) -> Option<u32> {
    let config = model.checkpoint().config();
    let vocab = model.config().vocab;
    config
        .get("pad_token_id")
        .and_then(serde_json::Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
        .or_else(|| ["[PAD]", "<pad>"].iter().find_map(|t| model.tokenizer().id(t)))
        .filter(|&i| (i as usize) < vocab)
}
