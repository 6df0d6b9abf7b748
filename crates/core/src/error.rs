//! The one error type of switchyard-core and of every backend behind the [`crate::Backend`] trait.

use std::path::PathBuf;

/// Everything that can go wrong between a checkpoint, a graph, a batch and a device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A batch is inconsistent; the message names the first problem found.
    #[error("bad batch: {0}")]
    BadBatch(String),
    /// No bucket of a stage is large enough for a batch.
    #[error(
        "no bucket in stage `{stage}` holds a batch of {tokens} tokens, {seqs} sequences and \
         {markers} markers (largest: {largest}); split the batch or add a larger bucket"
    )]
    NoBucket {
        /// The stage whose buckets were searched.
        stage: String,
        /// Tokens in the batch.
        tokens: usize,
        /// Sequences in the batch.
        seqs: usize,
        /// Markers in the batch.
        markers: usize,
        /// The largest bucket of the stage, as `tokens,seqs,markers`, or `none`.
        largest: String,
    },
    /// A graph is malformed: widths, weight indices or weight shapes disagree.
    #[error("invalid graph: {0}")]
    Graph(String),
    /// A backend cannot run an op, a dtype or a shape.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The device failed, went away, or was handed something it does not own.
    #[error("device error: {0}")]
    Device(String),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file or a tensor is not in the expected format.
    #[error("format error: {0}")]
    Format(String),
    /// A bucket table does not parse; `line` counts from 1.
    #[error("bucket table, line {line}: {msg}")]
    Buckets {
        /// The 1-based line of the table.
        line: usize,
        /// What is wrong on it.
        msg: String,
    },
}

/// The result type of switchyard-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
