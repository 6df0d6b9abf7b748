//! Building a graph op by op.

use super::{Dropout, Graph, Op, Output, Shape, Val, W, WeightSpec};
use crate::Result;

/// Builds a [`Graph`] op by op, allocating values as it goes.
#[derive(Clone, Debug, Default)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a weight tensor the graph will read.
    pub fn weight(&mut self, name: impl Into<String>, shape: &[usize]) -> W {
        self.graph.weights.push(WeightSpec { name: name.into(), shape: shape.to_vec() });
        W(u32::try_from(self.graph.weights.len() - 1).expect("fewer than 2^32 weights"))
    }

    /// The weight declared so far under `name`, if one was.
    pub fn weight_named(&self, name: &str) -> Option<W> {
        let i = self.graph.weights.iter().position(|w| w.name == name)?;
        Some(W(u32::try_from(i).expect("fewer than 2^32 weights")))
    }

    /// Declares a new value of the given shape.
    pub fn val(&mut self, shape: Shape) -> Val {
        self.graph.vals.push(shape);
        Val(u32::try_from(self.graph.vals.len() - 1).expect("fewer than 2^32 values"))
    }

    /// The shape of a value declared so far.
    pub fn shape(&self, v: Val) -> Shape {
        self.graph.vals[v.idx()]
    }

    /// Appends an op whose `out` was declared with [`GraphBuilder::val`]; returns `out`.
    pub fn push(&mut self, op: Op) -> Val {
        let out = op.out();
        self.graph.ops.push(op);
        out
    }

    /// Declares `out` with `shape` and appends the op `make(out)`.
    pub fn op(&mut self, shape: Shape, make: impl FnOnce(Val) -> Op) -> Val {
        let out = self.val(shape);
        self.push(make(out))
    }

    /// Marks `val` for dropout with probability `p` in training ([`Dropout`]); a `p` of 0
    /// marks nothing.
    pub fn dropout(&mut self, val: Val, p: f32) {
        if p != 0.0 {
            self.graph.dropout.push(Dropout { val, p });
        }
    }

    /// Names a value as a graph output.
    pub fn output(&mut self, name: impl Into<String>, val: Val) {
        self.graph.outputs.push(Output { name: name.into(), val });
    }

    /// The graph, validated.
    pub fn finish(self) -> Result<Graph> {
        self.graph.validate()?;
        Ok(self.graph)
    }
}
