//! SPLADE sparse encoding.

use switchyard_dispatch::Dispatch;
use switchyard_models::{Model, Prompt, Runner, Task, prompted};

use crate::open::{open_for, strs};
use crate::{Options, Result};

/// One term of a sparse encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The token id.
    pub id: u32,
    /// The token's text, where the vocabulary has it.
    pub token: Option<String>,
    /// Its weight, above zero.
    pub weight: f32,
}

/// A SPLADE sparse encoder: each text's vocabulary terms with their weights.
///
/// ```
/// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert-splade");
/// let mut splade = switchyard::SparseEncoder::open(model, "flex")?;
/// let terms = splade.encode(&["cats sat on mats"])?;
/// assert!(terms[0].windows(2).all(|t| t[0].weight >= t[1].weight), "heaviest first");
/// # Ok::<(), switchyard::Error>(())
/// ```
pub struct SparseEncoder {
    runner: Runner<Dispatch>,
}

impl SparseEncoder {
    /// Opens the SPLADE model `model` (a checkpoint directory or a Hugging Face repository id)
    /// on the device named `device`.
    pub fn open(model: &str, device: &str) -> Result<SparseEncoder> {
        SparseEncoder::open_with(model, &Options::on(device)?)
    }

    /// Opens the SPLADE model `model` with `options`.
    pub fn open_with(model: &str, options: &Options) -> Result<SparseEncoder> {
        let fits = |t: &Task| matches!(t, Task::Sparse);
        Ok(SparseEncoder { runner: open_for(model, options, fits, "a sparse (SPLADE) encoder")? })
    }

    /// Each text's non-zero terms, heaviest first, with the model's default prompt (if any)
    /// before each text.
    pub fn encode<T: AsRef<str>>(&mut self, texts: &[T]) -> Result<Vec<Vec<Term>>> {
        self.encode_with_prompt(texts, Prompt::Default)
    }

    /// Each text's non-zero terms, heaviest first, with the prompt `prompt` chooses before each
    /// text: an error for a name the model does not have.
    pub fn encode_with_prompt<T: AsRef<str>>(
        &mut self,
        texts: &[T],
        prompt: Prompt<'_>,
    ) -> Result<Vec<Vec<Term>>> {
        let texts = prompted(self.runner.model().prompts().text(prompt)?, texts);
        let rows = self.runner.sparse(&strs(&texts)?, |_| {})?;
        let tokenizer = self.runner.model().tokenizer();
        Ok(rows
            .into_iter()
            .map(|terms| {
                terms
                    .into_iter()
                    .map(|(id, weight)| Term { id, token: tokenizer.token(id), weight })
                    .collect()
            })
            .collect())
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.runner.model()
    }
}
