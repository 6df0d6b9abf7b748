//! Outputs: the named matrices a batch produces, reused from one run to the next.

use crate::{Batch, Graph, Rows};

/// One output matrix: `rows x width` values in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    /// The graph output's name.
    pub name: String,
    /// What each row stands for.
    pub kind: Rows,
    /// Number of rows the last batch produced.
    pub rows: usize,
    /// Columns per row.
    pub width: usize,
    /// `rows * width` values.
    pub data: Vec<f32>,
}

impl Mat {
    /// Row `r`.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.width..(r + 1) * self.width]
    }

    /// Iterates the rows in order.
    pub fn iter_rows(&self) -> impl ExactSizeIterator<Item = &[f32]> {
        // `max(1)` keeps `chunks_exact` valid for zero-width outputs, which have no data.
        self.data.chunks_exact(self.width.max(1)).take(self.rows)
    }
}

/// What a batch produced: one [`Mat`] per graph output, in the graph's output order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outputs {
    mats: Vec<Mat>,
}

impl Outputs {
    /// Empty outputs, shaped by the first run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Shapes the outputs for `graph` and `batch`, keeping memory from earlier runs, and
    /// returns the matrices for a backend to fill. Allocates only when the graph changed or the
    /// batch is larger than any before.
    pub fn prepare(&mut self, graph: &Graph, batch: &Batch<'_>) -> &mut [Mat] {
        let same = self.mats.len() == graph.outputs.len()
            && self.mats.iter().zip(&graph.outputs).all(|(m, o)| m.name == o.name);
        if !same {
            self.mats = graph
                .outputs
                .iter()
                .map(|o| Mat {
                    name: o.name.clone(),
                    kind: graph.shape(o.val).rows,
                    rows: 0,
                    width: 0,
                    data: Vec::new(),
                })
                .collect();
        }
        for (m, o) in self.mats.iter_mut().zip(&graph.outputs) {
            let shape = graph.shape(o.val);
            m.kind = shape.rows;
            m.width = shape.width;
            m.rows = batch.rows(shape.rows);
            m.data.resize(m.rows * m.width, 0.0);
        }
        &mut self.mats
    }

    /// The output of this name.
    pub fn get(&self, name: &str) -> Option<&Mat> {
        self.mats.iter().find(|m| m.name == name)
    }

    /// Applies `f` to every value of every output (for tests and post-processing).
    pub fn map_values(&mut self, mut f: impl FnMut(f32) -> f32) {
        self.mats.iter_mut().flat_map(|m| m.data.iter_mut()).for_each(|x| *x = f(*x));
    }

    /// All outputs, in the graph's order.
    pub fn mats(&self) -> &[Mat] {
        &self.mats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchBuf, GraphBuilder, Op, PoolMode, Shape};

    #[test]
    fn prepare_shapes_by_row_kind_and_reuses_memory() {
        let mut g = GraphBuilder::new();
        let t = g.weight("emb", &[10, 3]);
        let x = g.op(Shape::tokens(3), |out| Op::Embed { table: t, scale: 1.0, out });
        let p = g.op(Shape::seqs(3), |out| Op::Pool { x, mode: PoolMode::Mean, out });
        g.output("tokens", x);
        g.output("pooled", p);
        let g = g.finish().unwrap();

        let mut buf = BatchBuf::new();
        buf.push(&[1, 2, 3], None, &[]).unwrap();
        buf.push(&[4, 5], None, &[]).unwrap();
        let mut out = Outputs::new();
        out.prepare(&g, &buf.batch());
        let tok = out.get("tokens").unwrap();
        assert_eq!((tok.kind, tok.rows, tok.width, tok.data.len()), (Rows::Tokens, 5, 3, 15));
        assert_eq!(out.get("pooled").unwrap().rows, 2);
        assert_eq!(out.get("pooled").unwrap().iter_rows().count(), 2);
        let ptr = out.get("tokens").unwrap().data.as_ptr();

        buf.clear();
        buf.push(&[1], None, &[]).unwrap();
        out.prepare(&g, &buf.batch());
        assert_eq!(out.get("tokens").unwrap().rows, 1);
        assert_eq!(out.get("tokens").unwrap().data.as_ptr(), ptr, "a smaller batch reuses memory");
        assert!(out.get("missing").is_none());
    }
}
