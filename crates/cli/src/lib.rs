//! Switchyard: transformer encoders from Hugging Face checkpoints, in a few lines, on any device
//! this build has.
//!
//! One type per task, each opened from a checkpoint directory or a Hugging Face repository id
//! (`OWNER/NAME[@REVISION]`) and a device name (`flex`, `cuda:0`, `remote:HOST:PORT`, ...):
//!
//! ```
//! # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert");
//! let mut embedder = switchyard::Embedder::open(model, "flex")?;
//! let vectors = embedder.embed(&["A man is eating food.", "A man eats a meal."])?;
//! assert_eq!((vectors.len(), vectors[0].len()), (2, embedder.dim()));
//! # Ok::<(), switchyard::Error>(())
//! ```
//!
//! - [`Embedder`]: sentence embeddings (all-MiniLM, BGE, E5, GTE, ...);
//! - [`Reranker`]: a cross-encoder's ranking of documents against a query;
//! - [`Classifier`]: a sequence classifier's labels, or a token classifier's label per word;
//! - [`SparseEncoder`]: SPLADE term weights.
//!
//! [`devices`] lists the devices this build and this machine have. With the `train` feature,
//! [`train()`] fine-tunes a model and [`explain()`] attributes an output to its input tokens, on
//! any device whose backend runs on Burn ([`training`] is switchyard-train).
//!
//! Each runs texts in ragged batches sized by the bucket table, in input order. [`Options`]
//! chooses the device, the compute dtype, the buckets and flex's threads. Below the front door,
//! [`open_runner`] gives the [`Runner`] of any model, and the crates it is built on are
//! re-exported: [`core`] (graphs, batches, the `Backend` trait), [`dispatch`] (devices by name)
//! and [`models`] (checkpoints).

mod classifier;
mod devices;
mod embedder;
mod error;
mod hub;
pub mod input;
mod open;
mod reranker;
mod sparse;
#[cfg(feature = "train")]
mod train;

pub use classifier::{Classifier, Prediction, WordLabel};
pub use devices::{DeviceStatus, devices};
pub use embedder::Embedder;
pub use error::{Error, Result};
pub use hub::{describe, resolve, shadows_hub};
pub use open::{Options, open_runner};
pub use reranker::{Ranked, Reranker};
pub use sparse::{SparseEncoder, Term};
pub use switchyard_core::{Buckets, DType, DTypeChoice};
pub use switchyard_dispatch::{Device, Dispatch};
pub use switchyard_models::{Model, Prompt, Runner, Task};
#[cfg(feature = "train")]
pub use switchyard_train as training;
#[cfg(feature = "train")]
pub use train::{Explained, Question, explain, train};
pub use {switchyard_core as core, switchyard_dispatch as dispatch, switchyard_models as models};
