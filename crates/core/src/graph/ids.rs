//! Indices and shapes: values, weights, row kinds.

use serde::{Deserialize, Serialize};

/// A value (an activation matrix) of a graph, by index into [`Graph::vals`](super::Graph::vals).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Val(pub u32);

/// A weight tensor, by index into [`Graph::weights`](super::Graph::weights) (the checkpoint's tensor list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct W(pub u32);

impl Val {
    /// The index as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

impl W {
    /// The index as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

/// What one row of a value stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Rows {
    /// One row per token of the batch.
    Tokens,
    /// One row per sequence of the batch.
    Seqs,
    /// One row per marker: a chosen token position, such as each word's first sub-token.
    Markers,
}

impl Rows {
    /// The lower-case name used in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Rows::Tokens => "tokens",
            Rows::Seqs => "seqs",
            Rows::Markers => "markers",
        }
    }
}

/// The shape of a value: its row kind and its width (columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// What each row stands for.
    pub rows: Rows,
    /// Columns per row.
    pub width: usize,
}

impl Shape {
    /// A shape of `width` columns, one row per token.
    pub const fn tokens(width: usize) -> Self {
        Shape { rows: Rows::Tokens, width }
    }
    /// A shape of `width` columns, one row per sequence.
    pub const fn seqs(width: usize) -> Self {
        Shape { rows: Rows::Seqs, width }
    }
    /// A shape of `width` columns, one row per marker.
    pub const fn markers(width: usize) -> Self {
        Shape { rows: Rows::Markers, width }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} x {}]", self.rows.name(), self.width)
    }
}
