//! Sentence embeddings.

use switchyard_dispatch::Dispatch;
use switchyard_models::{Model, Prompt, Runner, Task, prompted};

use crate::open::{open_for, strs};
use crate::{Options, Result};

/// A sentence embedder: one vector per text, pooled (and normalised) as its
/// sentence-transformers configuration says, with its default prompt (if it names one) before
/// each text, as sentence-transformers' `encode` puts it.
///
/// ```
/// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert");
/// use switchyard::{Embedder, models::scores::cosine};
///
/// let mut embedder = Embedder::open(model, "flex")?;
/// let v = embedder.embed(&["The man is eating food.", "cats sat on mats"])?;
/// assert!(cosine(&v[0], &v[0]) > 0.999);
/// # Ok::<(), switchyard::Error>(())
/// ```
pub struct Embedder {
    runner: Runner<Dispatch>,
}

impl Embedder {
    /// Opens the embedding model `model` (a checkpoint directory or a Hugging Face repository
    /// id) on the device named `device`.
    pub fn open(model: &str, device: &str) -> Result<Embedder> {
        Embedder::open_with(model, &Options::on(device)?)
    }

    /// Opens the embedding model `model` with `options`.
    pub fn open_with(model: &str, options: &Options) -> Result<Embedder> {
        let runner =
            open_for(model, options, |t| matches!(t, Task::Embed(_)), "an embedding model")?;
        Ok(Embedder { runner })
    }

    /// One embedding per text, in order, with the model's default prompt (if any) before each.
    pub fn embed<T: AsRef<str>>(&mut self, texts: &[T]) -> Result<Vec<Vec<f32>>> {
        self.embed_with_prompt(texts, Prompt::Default)
    }

    /// One embedding per text, in order, with the prompt `prompt` chooses before each (such as
    /// E5's `Prompt::Named("query")`): an error for a name the model does not have.
    ///
    /// ```
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert");
    /// use switchyard::{Embedder, Prompt};
    ///
    /// let mut embedder = Embedder::open(model, "flex")?;
    /// let mine = embedder.embed_with_prompt(&["cats"], Prompt::Text("query: "))?;
    /// assert_eq!(mine, embedder.embed(&["query: cats"])?);
    /// # Ok::<(), switchyard::Error>(())
    /// ```
    pub fn embed_with_prompt<T: AsRef<str>>(
        &mut self,
        texts: &[T],
        prompt: Prompt<'_>,
    ) -> Result<Vec<Vec<f32>>> {
        let texts = prompted(self.runner.model().prompts().text(prompt)?, texts);
        Ok(self.runner.embed(&strs(&texts)?, |_| {})?)
    }

    /// The width of an embedding.
    pub fn dim(&self) -> usize {
        self.runner.model().embedding_dim().unwrap_or(0)
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.runner.model()
    }
}
