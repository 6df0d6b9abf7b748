//! The op graph: a model's forward pass as a list of ops over 2-D values.
//!
//! Every value is a matrix of `rows x width`, where `rows` is a row *kind* ([`Rows`]): one row per
//! token, per sequence or per marker. A graph never knows how many rows a batch has; a backend
//! learns that from the [`crate::Batch`] at run time and from the [`crate::Bucket`] at lower time.
//!
//! The batch itself is the graph's implicit input: token ids, token types, positions (counted
//! from each sequence's start) and marker positions are read by the ops that need them.
//!
//! Numerics are part of each op's contract, so every backend computes the same function; the
//! reference interpreter ([`crate::reference`]) is the executable form of these documents.

mod builder;
mod ids;
mod op;
mod validate;

use serde::{Deserialize, Serialize};

pub use builder::GraphBuilder;
pub use ids::{Rows, Shape, Val, W};
pub use op::{Act, Disentangled, Gate, Op, PoolMode, PositionBias, Reach, RelativeBias};

use crate::{Error, Result};

/// A weight the graph expects: its checkpoint name and shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightSpec {
    /// The tensor's name in the checkpoint.
    pub name: String,
    /// Its dimensions, outermost first.
    pub shape: Vec<usize>,
}

/// A named result of a graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// The name under which [`crate::Outputs`] returns it.
    pub name: String,
    /// The value returned.
    pub val: Val,
}

/// The limits a batch must respect to run through a graph, derived from its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Token ids must be below this (the word embedding's row count).
    pub vocab: u32,
    /// Token types must be below this (the type embedding's row count, else 1).
    pub types: u32,
    /// A sequence may have at most this many tokens (from the position table, if any).
    pub max_len: u32,
}

impl Limits {
    /// No limits at all.
    pub const NONE: Limits = Limits { vocab: u32::MAX, types: u32::MAX, max_len: u32::MAX };
}

/// Where training zeroes activations at random; inference ignores it.
///
/// Each element of the value is zeroed with probability `p` and the others are scaled by
/// `1 / (1 - p)` (PyTorch's `nn.Dropout`). The value is the result of the op that writes it,
/// with two exceptions that follow where Hugging Face's models drop: for a [`Op::Linear`] with a
/// residual, its result before the residual is added; for [`Op::Attention`], its attention
/// probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dropout {
    /// The value dropped (see above for what that means for its op).
    pub val: Val,
    /// The probability of zeroing each element, in `(0, 1)`.
    pub p: f32,
}

/// A model's forward pass: values, the ops that compute them in order, and named outputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// The shape of every value; a [`Val`] indexes this.
    pub vals: Vec<Shape>,
    /// The ops, in execution order; each defines exactly one value, after its inputs.
    pub ops: Vec<Op>,
    /// The named results.
    pub outputs: Vec<Output>,
    /// The weight tensors the ops reference by [`W`], with the shapes they must have.
    pub weights: Vec<WeightSpec>,
    /// Where training drops activations, at most once per value (empty for a graph built for
    /// inference only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropout: Vec<Dropout>,
}

impl Graph {
    /// The shape of a value. Panics if `v` is out of range; call [`Graph::validate`] first.
    pub fn shape(&self, v: Val) -> Shape {
        self.vals[v.idx()]
    }

    /// The dropout probability training applies at `v` (0 where it applies none).
    pub fn dropout_at(&self, v: Val) -> f32 {
        self.dropout.iter().find(|d| d.val == v).map_or(0.0, |d| d.p)
    }

    /// The value an output name refers to.
    pub fn output(&self, name: &str) -> Option<Val> {
        self.outputs.iter().find(|o| o.name == name).map(|o| o.val)
    }

    /// Checks that `tensors` match the weights this graph expects, in count, order and shape.
    pub fn check_weights(&self, tensors: &[crate::HostTensor<'_>]) -> Result<()> {
        if tensors.len() != self.weights.len() {
            return Err(Error::Format(format!(
                "the graph expects {} weight tensors, got {}",
                self.weights.len(),
                tensors.len()
            )));
        }
        for (i, (t, spec)) in tensors.iter().zip(&self.weights).enumerate() {
            t.check()?;
            if t.shape != spec.shape.as_slice() {
                return Err(Error::Format(format!(
                    "weight {i} `{}` has shape {:?}, expected {:?}",
                    spec.name, t.shape, spec.shape
                )));
            }
        }
        Ok(())
    }

    /// Validates the graph and checks that `uploaded` weights (a count) are the ones it reads:
    /// what every backend's `lower` starts with.
    pub fn check_lowerable(&self, uploaded: usize) -> Result<()> {
        self.validate()?;
        if uploaded != self.weights.len() {
            return Err(Error::Graph(format!(
                "the graph expects {} weights but {} were uploaded",
                self.weights.len(),
                uploaded
            )));
        }
        Ok(())
    }

    /// For each weight, `(plain, linear)`: whether some op reads it as it is, and whether a
    /// linear layer reads it as its weight matrix (a form a backend may store apart, packed or
    /// transposed).
    pub fn weight_reads(&self) -> Vec<(bool, bool)> {
        let mut reads = vec![(false, false); self.weights.len()];
        for op in &self.ops {
            for (i, w) in op.weights().into_iter().enumerate() {
                let Some(r) = w.and_then(|w| reads.get_mut(w.idx())) else { continue };
                if matches!(op, Op::Linear { .. }) && i == 0 {
                    r.1 = true;
                } else {
                    r.0 = true;
                }
            }
        }
        reads
    }

    /// Linear layers that can run as one product over their weight matrices side by side (a
    /// layer's query, key and value projections): groups of at least two layers reading the same
    /// input with the same activation, no residual, and all a bias or none, whose weights and
    /// biases no other op reads and whose results training does not drop. Each group lists its
    /// ops' indices in graph order; its first op is the first place every member's input is
    /// ready.
    pub fn shared_input_linears(&self) -> Vec<Vec<usize>> {
        let mut reads = vec![0usize; self.weights.len()];
        for w in self.ops.iter().flat_map(Op::weights).flatten() {
            if let Some(n) = reads.get_mut(w.idx()) {
                *n += 1;
            }
        }
        let alone = |w: W| reads.get(w.idx()) == Some(&1);
        let mut groups: Vec<((Val, Act, bool), Vec<usize>)> = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let Op::Linear { x, weight, bias, act, residual: None, out } = *op else { continue };
            if !alone(weight) || !bias.is_none_or(alone) || self.dropout_at(out) > 0.0 {
                continue;
            }
            let key = (x, act, bias.is_some());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, ops)) => ops.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        groups.into_iter().map(|(_, ops)| ops).filter(|ops| ops.len() > 1).collect()
    }

    /// The limits a batch must respect for this graph: vocabulary, token types, sequence length.
    pub fn limits(&self) -> Limits {
        let mut l = Limits { vocab: u32::MAX, types: 1, max_len: u32::MAX };
        let rows_of = |w: W| {
            let r = self.weights.get(w.idx()).and_then(|s| s.shape.first()).copied();
            u32::try_from(r.unwrap_or(0)).unwrap_or(u32::MAX)
        };
        for op in &self.ops {
            match *op {
                Op::Embed { table, .. } => l.vocab = l.vocab.min(rows_of(table)),
                Op::TypeEmbed { table, .. } => l.types = rows_of(table),
                Op::PosEmbed { table, offset, .. } => {
                    let offset = u32::try_from(offset).unwrap_or(u32::MAX);
                    l.max_len = l.max_len.min(rows_of(table).saturating_sub(offset));
                }
                // The other ops read no ids, types or positions.
                Op::Add { .. }
                | Op::Mul { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::Linear { .. }
                | Op::Glu { .. }
                | Op::Slice { .. }
                | Op::Rope { .. }
                | Op::Attention { .. }
                | Op::Activation { .. }
                | Op::Pool { .. }
                | Op::Gather { .. }
                | Op::L2Norm { .. } => {}
            }
        }
        l
    }

    /// For each value, the index of the last op that reads it, or `None` if none does.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.vals.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for v in op.inputs().into_iter().flatten() {
                last[v.idx()] = Some(i);
            }
        }
        last
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A one-layer post-norm encoder block with a pooled, normalised output.
    pub(crate) fn block() -> Graph {
        let mut g = GraphBuilder::new();
        let (d, heads) = (8, 2);
        let emb = g.weight("emb", &[20, d]);
        let pos = g.weight("pos", &[16, d]);
        let ln_g = g.weight("ln.g", &[d]);
        let ln_b = g.weight("ln.b", &[d]);
        let wq = g.weight("q", &[d, d]);
        let wo = g.weight("o", &[d, d]);
        let t = Shape::tokens(d);
        let e = g.op(t, |out| Op::Embed { table: emb, scale: 1.0, out });
        let p = g.op(t, |out| Op::PosEmbed { table: pos, offset: 2, out });
        let x = g.op(t, |out| Op::Add { a: e, b: p, out });
        let x = g.op(t, |out| Op::LayerNorm { x, gamma: ln_g, beta: Some(ln_b), eps: 1e-12, out });
        let q = g.op(t, |out| Op::Linear {
            x,
            weight: wq,
            bias: None,
            act: Act::Identity,
            residual: None,
            out,
        });
        let q = g.op(t, |out| Op::Rope {
            x: q,
            heads,
            head_dim: 4,
            theta: 1e4,
            position_scale: 1.0,
            out,
        });
        let a = g.op(t, |out| Op::Attention {
            q,
            k: q,
            v: x,
            heads,
            kv_heads: heads,
            head_dim: 4,
            scale: 0.5,
            window: Some(3),
            causal: false,
            position_bias: None,
            out,
        });
        let y = g.op(t, |out| Op::Linear {
            x: a,
            weight: wo,
            bias: None,
            act: Act::Gelu,
            residual: Some(x),
            out,
        });
        let s = g.op(Shape::seqs(d), |out| Op::Pool { x: y, mode: PoolMode::Mean, out });
        let s = g.op(Shape::seqs(d), |out| Op::L2Norm { x: s, eps: 1e-12, out });
        g.output("embedding", s);
        g.finish().unwrap()
    }

    #[test]
    fn weight_reads_tell_linear_weights_from_plain_ones() {
        let reads = block().weight_reads();
        let plain = (true, false);
        assert_eq!(reads, [plain, plain, plain, plain, (false, true), (false, true)]);
        // A table tied to a linear layer (as a masked-LM decoder is) is read both ways.
        let mut g = GraphBuilder::new();
        let (emb, bias) = (g.weight("emb", &[20, 8]), g.weight("bias", &[20]));
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
        let act = Act::Identity;
        let y = g.op(Shape::tokens(20), |out| Op::Linear {
            x,
            weight: emb,
            bias: Some(bias),
            act,
            residual: None,
            out,
        });
        g.output("logits", y);
        assert_eq!(g.finish().unwrap().weight_reads(), [(true, true), plain]);
    }

    /// A layer's query, key and value projections of `x` (each with a bias if `biased`), the
    /// query's of `xq` instead: the three results.
    fn projections(g: &mut GraphBuilder, x: Val, xq: Val, biased: bool) -> [Val; 3] {
        let d = g.shape(x).width;
        ["q", "k", "v"].map(|name| {
            let weight = g.weight(format!("{name}.weight"), &[d, d]);
            let bias = biased.then(|| g.weight(format!("{name}.bias"), &[d]));
            let input = if name == "q" { xq } else { x };
            let (act, residual) = (Act::Identity, None);
            g.op(g.shape(input), |out| Op::Linear { x: input, weight, bias, act, residual, out })
        })
    }

    /// An embedding of 8 columns, its projections (as [`projections`] makes them) read by one
    /// attention op, and the graph's output.
    fn attention_over(
        biased: bool,
        cls_query: bool,
        edit: impl FnOnce(&mut GraphBuilder, [Val; 3]),
    ) -> Graph {
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[20, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
        let xq = if cls_query {
            g.op(Shape::seqs(8), |out| Op::Pool { x, mode: PoolMode::Cls, out })
        } else {
            x
        };
        let [q, k, v] = projections(&mut g, x, xq, biased);
        edit(&mut g, [q, k, v]);
        let (heads, head_dim, scale, window) = (2, 4, 0.5, None);
        let a = g.op(g.shape(q), |out| Op::Attention {
            q,
            k,
            v,
            heads,
            kv_heads: heads,
            head_dim,
            scale,
            window,
            causal: false,
            position_bias: None,
            out,
        });
        g.output("a", a);
        g.finish().unwrap()
    }

    #[test]
    fn a_layers_projections_of_one_input_are_one_group() {
        // Ops: 0 embedding, 1 to 3 the projections.
        assert_eq!(attention_over(true, false, |_, _| {}).shared_input_linears(), [vec![1, 2, 3]]);
        assert_eq!(attention_over(false, false, |_, _| {}).shared_input_linears(), [vec![1, 2, 3]]);
        // A query from the first rows alone (a cross-encoder's last layer): keys and values.
        assert_eq!(attention_over(true, true, |_, _| {}).shared_input_linears(), [vec![3, 4]]);
        // The block's layers read different inputs: no group.
        assert!(block().shared_input_linears().is_empty());
    }

    #[test]
    fn layers_that_cannot_share_a_product_are_left_out_of_groups() {
        // The value projection's weight read again (tied) by another op.
        let tied = attention_over(true, false, |g, [_, _, v]| {
            let weight = W(5);
            let (act, residual) = (Act::Identity, None);
            g.op(Shape::tokens(8), |out| Op::Linear {
                x: v,
                weight,
                bias: None,
                act,
                residual,
                out,
            });
        });
        assert_eq!(tied.weights[5].name, "v.weight");
        assert_eq!(tied.shared_input_linears(), [vec![1, 2]]);
        // Results training drops.
        let dropped = attention_over(false, false, |g, [q, _, _]| g.dropout(q, 0.1));
        assert_eq!(dropped.shared_input_linears(), [vec![2, 3]]);
        // One layer with a bias and two without; one with an activation.
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[20, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
        let linear = |g: &mut GraphBuilder, name: &str, bias: bool, act: Act| {
            let weight = g.weight(name, &[8, 8]);
            let bias = bias.then(|| g.weight(format!("{name}.bias"), &[8]));
            let y = g.op(Shape::tokens(8), |out| Op::Linear {
                x,
                weight,
                bias,
                act,
                residual: None,
                out,
            });
            g.output(name, y);
        };
        linear(&mut g, "a", true, Act::Identity);
        linear(&mut g, "b", false, Act::Identity);
        linear(&mut g, "c", false, Act::Gelu);
        linear(&mut g, "d", false, Act::Identity);
        linear(&mut g, "e", false, Act::Gelu);
        assert_eq!(g.finish().unwrap().shared_input_linears(), [vec![2, 4], vec![3, 5]]);
    }

    #[test]
    fn a_well_formed_graph_validates_and_reports_limits() {
        let g = block();
        g.validate().unwrap();
        assert_eq!(g.limits(), Limits { vocab: 20, types: 1, max_len: 14 });
        assert_eq!(g.output("embedding"), Some(Val(9)));
        assert_eq!(g.output("nope"), None);
    }

    #[test]
    fn dropout_marks_are_kept_by_value_and_a_zero_marks_nothing() {
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[20, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
        let y = g.op(Shape::tokens(8), |out| Op::Activation { x, act: Act::Tanh, out });
        g.dropout(x, 0.25);
        g.dropout(y, 0.0);
        g.output("y", y);
        let g = g.finish().unwrap();
        assert_eq!(g.dropout, [Dropout { val: x, p: 0.25 }]);
        assert_eq!((g.dropout_at(x), g.dropout_at(y)), (0.25, 0.0));
        let back: Graph = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(back, g);
        // A graph serialised before dropout existed still reads.
        let old = serde_json::to_string(&block()).unwrap();
        assert!(!old.contains("dropout"), "{old}");
        assert_eq!(serde_json::from_str::<Graph>(&old).unwrap(), block());
    }

    #[test]
    fn graphs_round_trip_through_serde() {
        let g = block();
        let json = serde_json::to_string(&g).unwrap();
        let back: Graph = serde_json::from_str(&json).unwrap();
        assert_eq!(back, g);
    }

    #[test]
    fn check_weights_compares_count_and_shapes() {
        let g = block();
        let bytes: Vec<Vec<u8>> =
            g.weights.iter().map(|w| vec![0; w.shape.iter().product::<usize>() * 4]).collect();
        let ts: Vec<crate::HostTensor<'_>> = g
            .weights
            .iter()
            .zip(&bytes)
            .map(|(w, b)| crate::HostTensor { dtype: crate::DType::F32, shape: &w.shape, bytes: b })
            .collect();
        g.check_weights(&ts).unwrap();
        let e = g.check_weights(&ts[..3]).unwrap_err();
        assert!(e.to_string().contains("expects 6 weight tensors, got 3"), "{e}");
        let mut bad = ts.clone();
        bad[0] = crate::HostTensor { dtype: crate::DType::F32, shape: &[8, 8], bytes: &bytes[4] };
        let e = g.check_weights(&bad).unwrap_err();
        assert!(e.to_string().contains("weight 0 `emb` has shape [8, 8], expected [20, 8]"), "{e}");
    }
}
