//! Helpers for tests of Switchyard crates: a deterministic generator, random weights, and small
//! encoder graphs in the two shapes the project supports (post-norm BERT, pre-norm ModernBERT).
//!
//! Nothing here is used at run time; it lives in core so every backend's tests share it.

use crate::{
    Act, BatchBuf, DType, Gate, Graph, GraphBuilder, HostTensor, Op, PoolMode, Shape, Val,
};

/// A small deterministic pseudo-random generator (xorshift64*), for reproducible test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value, zero included).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) % n as u64) as usize
    }

    /// A number uniform in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// The sizes of a small test encoder.
#[derive(Clone, Copy, Debug)]
pub struct EncoderSpec {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden width.
    pub width: usize,
    /// Attention heads (`width` must divide evenly).
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Number of layers.
    pub layers: usize,
    /// Position table rows (BERT) or the longest sequence (ModernBERT, unlimited by rotary).
    pub max_pos: usize,
}

impl EncoderSpec {
    /// A tiny encoder: 2 layers, 16 wide, 2 heads, vocabulary 50.
    pub const TINY: EncoderSpec =
        EncoderSpec { vocab: 50, width: 16, heads: 2, ffn: 24, layers: 2, max_pos: 64 };
}

/// A post-norm BERT-like encoder with outputs `embedding` (mean-pooled, L2-normalised, seqs
/// rows), `cls` (first token through a tanh pooler) and `tokens` (marker rows).
pub fn bert_like(s: EncoderSpec) -> Graph {
    let (mut g, x) = bert_body(s, false);
    let d = s.width;
    let m = g.op(Shape::seqs(d), |out| Op::Pool { x, mode: PoolMode::Mean, out });
    let emb = g.op(Shape::seqs(d), |out| Op::L2Norm { x: m, eps: 1e-12, out });
    let c = g.op(Shape::seqs(d), |out| Op::Pool { x, mode: PoolMode::Cls, out });
    let c = linear(&mut g, "pooler.dense", c, d, Act::Tanh, None);
    let tok = g.op(Shape::markers(d), |out| Op::Gather { x, out });
    g.output("embedding", emb);
    g.output("cls", c);
    g.output("tokens", tok);
    g.finish().expect("the test encoder is well formed")
}

/// Token rows `width` wide gathered from a `[vocab, width]` table, pooled per sequence by
/// `mode` and L2-normalised where `normalize`: an embedder's end (a mean, normalised) or
/// SPLADE's (a max over the vocabulary), alone. One output, `y`.
pub fn pooled(vocab: usize, width: usize, mode: PoolMode, normalize: bool) -> Graph {
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[vocab, width]);
    let x = g.op(Shape::tokens(width), |out| Op::Embed { table, scale: 1.0, out });
    let mut y = g.op(Shape::seqs(width), |out| Op::Pool { x, mode, out });
    if normalize {
        y = g.op(Shape::seqs(width), |out| Op::L2Norm { x: y, eps: 1e-12, out });
    }
    g.output("y", y);
    g.finish().expect("a valid graph")
}

/// One linear layer from `k` to `n` columns over token rows gathered from a `[vocab, k]` table,
/// with the activation `act`, a bias where `bias`, and where `residual` a residual gathered from
/// a `[vocab, n]` table. One output, `y`.
pub fn linear_layer(
    vocab: usize,
    k: usize,
    n: usize,
    act: Act,
    bias: bool,
    residual: bool,
) -> Graph {
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[vocab, k]);
    let x = g.op(Shape::tokens(k), |out| Op::Embed { table, scale: 1.0, out });
    let weight = g.weight("w", &[n, k]);
    let bias = bias.then(|| g.weight("b", &[n]));
    let residual = residual.then(|| {
        let table = g.weight("r", &[vocab, n]);
        g.op(Shape::tokens(n), |out| Op::Embed { table, scale: 1.0, out })
    });
    let y = g.op(Shape::tokens(n), |out| Op::Linear { x, weight, bias, act, residual, out });
    g.output("y", y);
    g.finish().expect("a valid graph")
}

/// A post-norm BERT-like cross-encoder whose one output, `logits` (3 per sequence), reads only
/// the first token's final row; with `cls_only` its last layer runs on that row alone
/// (attention with one query per sequence), as Switchyard builds such a model.
pub fn bert_classifier(s: EncoderSpec, cls_only: bool) -> Graph {
    let (mut g, mut x) = bert_body(s, cls_only);
    if !cls_only {
        x = g.op(Shape::seqs(s.width), |out| Op::Pool { x, mode: PoolMode::Cls, out });
    }
    let c = linear(&mut g, "pooler.dense", x, s.width, Act::Tanh, None);
    let logits = linear(&mut g, "classifier", c, 3, Act::Identity, None);
    g.output("logits", logits);
    g.finish().expect("the test encoder is well formed")
}

/// The embeddings and layers of [`bert_like`]: the final token rows, or with `cls_only` each
/// sequence's first row, its last layer computed for that row alone.
fn bert_body(s: EncoderSpec, cls_only: bool) -> (GraphBuilder, Val) {
    let mut g = GraphBuilder::new();
    let d = s.width;
    let t = Shape::tokens(d);
    let word = g.weight("embeddings.word_embeddings.weight", &[s.vocab, d]);
    let pos = g.weight("embeddings.position_embeddings.weight", &[s.max_pos, d]);
    let ty = g.weight("embeddings.token_type_embeddings.weight", &[2, d]);
    let e = g.op(t, |out| Op::Embed { table: word, scale: 1.0, out });
    let p = g.op(t, |out| Op::PosEmbed { table: pos, offset: 0, out });
    let y = g.op(t, |out| Op::TypeEmbed { table: ty, out });
    let e = g.op(t, |out| Op::Add { a: e, b: p, out });
    let e = g.op(t, |out| Op::Add { a: e, b: y, out });
    let mut x = layer_norm(&mut g, "embeddings.LayerNorm", e, true);
    for l in 0..s.layers {
        let pre = format!("encoder.layer.{l}");
        // Keys and values from every token; queries, and all that follows, from the rows kept.
        let kv = x;
        if cls_only && l + 1 == s.layers {
            x = g.op(Shape::seqs(d), |out| Op::Pool { x: kv, mode: PoolMode::Cls, out });
        }
        let q = linear(&mut g, &format!("{pre}.attention.self.query"), x, d, Act::Identity, None);
        let k = linear(&mut g, &format!("{pre}.attention.self.key"), kv, d, Act::Identity, None);
        let v = linear(&mut g, &format!("{pre}.attention.self.value"), kv, d, Act::Identity, None);
        let hd = d / s.heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let a = g.op(g.shape(x), |out| Op::Attention {
            q,
            k,
            v,
            heads: s.heads,
            kv_heads: s.heads,
            head_dim: hd,
            scale,
            window: None,
            causal: false,
            position_bias: None,
            out,
        });
        let h =
            linear(&mut g, &format!("{pre}.attention.output.dense"), a, d, Act::Identity, Some(x));
        x = layer_norm(&mut g, &format!("{pre}.attention.output.LayerNorm"), h, true);
        let f = linear(&mut g, &format!("{pre}.intermediate.dense"), x, s.ffn, Act::Gelu, None);
        let h = linear(&mut g, &format!("{pre}.output.dense"), f, d, Act::Identity, Some(x));
        x = layer_norm(&mut g, &format!("{pre}.output.LayerNorm"), h, true);
    }
    (g, x)
}

/// A pre-norm ModernBERT-like encoder: fused QKV, rotary, GeGLU, no biases, local attention
/// (window 2) on every layer but each third, and a final norm. Output `embedding`: CLS rows.
pub fn modernbert_like(s: EncoderSpec) -> Graph {
    modernbert_graph(s, false)
}

/// [`modernbert_like`] with its last layer computed for each sequence's first row alone, as a
/// model whose output reads only `[CLS]` runs it (attention with one query per sequence).
pub fn modernbert_cls_like(s: EncoderSpec) -> Graph {
    modernbert_graph(s, true)
}

fn modernbert_graph(s: EncoderSpec, cls_only: bool) -> Graph {
    let mut g = GraphBuilder::new();
    let d = s.width;
    let t = Shape::tokens(d);
    let hd = d / s.heads;
    let word = g.weight("embeddings.tok_embeddings.weight", &[s.vocab, d]);
    let e = g.op(t, |out| Op::Embed { table: word, scale: 1.0, out });
    let mut x = layer_norm(&mut g, "embeddings.norm", e, false);
    for l in 0..s.layers {
        let pre = format!("layers.{l}");
        let h = if l == 0 { x } else { layer_norm(&mut g, &format!("{pre}.attn_norm"), x, false) };
        let qkv = linear(&mut g, &format!("{pre}.attn.Wqkv"), h, 3 * d, Act::Identity, None);
        let global = l % 3 == 0;
        let theta = if global { 160_000.0 } else { 10_000.0 };
        let mut qk = [Val(0); 2];
        for (i, slot) in qk.iter_mut().enumerate() {
            let part = g.op(t, |out| Op::Slice { x: qkv, start: i * d, out });
            *slot = g.op(t, |out| Op::Rope {
                x: part,
                heads: s.heads,
                head_dim: hd,
                theta,
                position_scale: 1.0,
                out,
            });
        }
        let v = g.op(t, |out| Op::Slice { x: qkv, start: 2 * d, out });
        let mut q = qk[0];
        if cls_only && l + 1 == s.layers {
            let cls = PoolMode::Cls;
            q = g.op(Shape::seqs(d), |out| Op::Pool { x: q, mode: cls, out });
            x = g.op(Shape::seqs(d), |out| Op::Pool { x, mode: cls, out });
        }
        let a = g.op(g.shape(x), |out| Op::Attention {
            q,
            k: qk[1],
            v,
            heads: s.heads,
            kv_heads: s.heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: if global { None } else { Some(2) },
            causal: false,
            position_bias: None,
            out,
        });
        x = linear(&mut g, &format!("{pre}.attn.Wo"), a, d, Act::Identity, Some(x));
        let h = layer_norm(&mut g, &format!("{pre}.mlp_norm"), x, false);
        let wi = linear(&mut g, &format!("{pre}.mlp.Wi"), h, 2 * s.ffn, Act::Identity, None);
        let gate = Shape { rows: g.shape(x).rows, width: s.ffn };
        let gl = g.op(gate, |out| Op::Glu { x: wi, act: Act::Gelu, gate: Gate::First, out });
        x = linear(&mut g, &format!("{pre}.mlp.Wo"), gl, d, Act::Identity, Some(x));
    }
    let x = layer_norm(&mut g, "final_norm", x, false);
    let c = match cls_only {
        true => x,
        false => g.op(Shape::seqs(d), |out| Op::Pool { x, mode: PoolMode::Cls, out }),
    };
    g.output("embedding", c);
    g.finish().expect("the test encoder is well formed")
}

fn layer_norm(g: &mut GraphBuilder, name: &str, x: Val, bias: bool) -> Val {
    let d = g.shape(x).width;
    let gamma = g.weight(format!("{name}.weight"), &[d]);
    let beta = bias.then(|| g.weight(format!("{name}.bias"), &[d]));
    g.op(g.shape(x), |out| Op::LayerNorm { x, gamma, beta, eps: 1e-5, out })
}

/// A linear layer named `name`; ModernBERT's (`.W` in the name) have no bias.
fn linear(g: &mut GraphBuilder, name: &str, x: Val, n: usize, act: Act, res: Option<Val>) -> Val {
    let k = g.shape(x).width;
    let weight = g.weight(format!("{name}.weight"), &[n, k]);
    let bias = (!name.contains(".W")).then(|| g.weight(format!("{name}.bias"), &[n]));
    let shape = Shape { rows: g.shape(x).rows, width: n };
    g.op(shape, |out| Op::Linear { x, weight, bias, act, residual: res, out })
}

/// Random f32 weights for a graph, owned, in the graph's order.
#[derive(Clone, Debug)]
pub struct RandomWeights {
    shapes: Vec<Vec<usize>>,
    bytes: Vec<Vec<u8>>,
}

impl RandomWeights {
    /// Host tensors over these weights.
    pub fn tensors(&self) -> Vec<HostTensor<'_>> {
        self.shapes
            .iter()
            .zip(&self.bytes)
            .map(|(shape, bytes)| HostTensor { dtype: DType::F32, shape, bytes })
            .collect()
    }
}

/// Random f32 weights for `graph`, scaled by how the graph reads each tensor: embedding tables
/// uniform in `[-2, 2]` (so single ops see inputs of unit size, where activations bend), linear
/// weights by `1 / sqrt(fan_in)` (so activations stay near unit size through many layers), norm
/// scales near 1, and biases and shifts small.
pub fn random_weights(graph: &Graph, seed: u64) -> RandomWeights {
    #[derive(Clone, Copy)]
    enum Role {
        Table,
        Matrix,
        Scale,
        Shift,
    }
    let mut roles = vec![Role::Shift; graph.weights.len()];
    for op in &graph.ops {
        let [a, b] = op.weights();
        let first = match op {
            Op::Embed { .. } | Op::TypeEmbed { .. } | Op::PosEmbed { .. } => Role::Table,
            Op::Linear { .. } => Role::Matrix,
            _ => Role::Scale,
        };
        if let Some(a) = a {
            roles[a.idx()] = first;
        }
        if let Some(b) = b {
            roles[b.idx()] = Role::Shift;
        }
    }
    let mut r = Rng::new(seed);
    let bytes = graph
        .weights
        .iter()
        .zip(&roles)
        .map(|(w, role)| {
            let n: usize = w.shape.iter().product();
            let fan_in = w.shape.last().copied().unwrap_or(1).max(1) as f32;
            (0..n)
                .flat_map(|_| {
                    let u = r.unit();
                    let v = match role {
                        Role::Table => 2.0 * u,
                        Role::Matrix => u / fan_in.sqrt(),
                        Role::Scale => 1.0 + 0.1 * u,
                        Role::Shift => 0.1 * u,
                    };
                    v.to_le_bytes()
                })
                .collect()
        })
        .collect();
    RandomWeights { shapes: graph.weights.iter().map(|w| w.shape.clone()).collect(), bytes }
}

/// Pushes a random sequence of `len` tokens (ids below `vocab`, types 0 or 1 when `types`, and
/// each token a marker with probability one half) into `buf`.
pub fn push_random_seq(buf: &mut BatchBuf, r: &mut Rng, len: usize, vocab: usize, types: bool) {
    let ids: Vec<u32> = (0..len).map(|_| r.below(vocab) as u32).collect();
    let ty: Vec<u32> = (0..len).map(|i| u32::from(types && i >= len / 2)).collect();
    let markers: Vec<u32> = (0..len as u32).filter(|_| r.below(2) == 0).collect();
    buf.push(&ids, Some(&ty), &markers).expect("a small test batch");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let u = a.unit();
            assert!((-1.0..1.0).contains(&u));
            assert!(a.below(7) < 7);
            b.unit();
            b.below(7);
        }
        assert_ne!(Rng::new(0).next_u64(), Rng::new(1).next_u64());
    }

    #[test]
    fn encoders_validate_and_weights_fit() {
        for g in [bert_like(EncoderSpec::TINY), modernbert_like(EncoderSpec::TINY)] {
            g.check_weights(&random_weights(&g, 1).tensors()).unwrap();
        }
    }
}
