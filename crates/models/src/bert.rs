//! Graph builder for BERT-shaped encoders: BERT, RoBERTa / XLM-R and DistilBERT.
//!
//! All three are post-norm: embeddings (word + position [+ type]) then LayerNorm, and per layer
//! `x = LN(x + attn(x))`, `x = LN(x + ffn(x))`. They differ in weight names, in RoBERTa's
//! position offset and in DistilBERT's lack of token types.

use switchyard_core::{Act, GraphBuilder, Op, Shape, Val, W};

use crate::checkpoint::Checkpoint;
use crate::config::{Arch, EncoderConfig};
use crate::{Error, Result};

/// Resolves checkpoint names under a prefix, accepting old LayerNorm names (`gamma`, `beta`).
pub(crate) struct Names<'a> {
    ck: &'a Checkpoint,
    prefix: String,
}

impl<'a> Names<'a> {
    /// Finds the prefix (``, `bert.`, `roberta.`, ...) under which `probe` exists.
    pub(crate) fn detect(ck: &'a Checkpoint, probe: &str) -> Result<Names<'a>> {
        for prefix in ["", "bert.", "roberta.", "distilbert.", "model.", "encoder."] {
            let n = Names { ck, prefix: prefix.to_owned() };
            if n.find(probe).is_some() {
                return Ok(n);
            }
        }
        Err(Error::Format(format!(
            "the checkpoint has no `{probe}` (under any of the prefixes bert., roberta., \
             distilbert., model.); is it the architecture its config.json names?"
        )))
    }

    /// The checkpoint name of `name`, if present (also as `gamma` / `beta` for a LayerNorm).
    pub(crate) fn find(&self, name: &str) -> Option<String> {
        let full = format!("{}{name}", self.prefix);
        if self.ck.has(&full) {
            return Some(full);
        }
        let legacy = full
            .strip_suffix(".weight")
            .map(|s| format!("{s}.gamma"))
            .or_else(|| full.strip_suffix(".bias").map(|s| format!("{s}.beta")))?;
        self.ck.has(&legacy).then_some(legacy)
    }

    /// Declares the weight `name` in `g` with its checkpoint shape, checked against `want`.
    pub(crate) fn weight(&self, g: &mut GraphBuilder, name: &str, want: &[usize]) -> Result<W> {
        let full = self.find(name).ok_or_else(|| {
            Error::Format(format!("the checkpoint has no tensor `{}{name}`", self.prefix))
        })?;
        let shape = self.ck.shape(&full).unwrap_or_default();
        if shape != want {
            return Err(Error::Format(format!(
                "tensor `{full}` has shape {shape:?}; config.json implies {want:?}"
            )));
        }
        Ok(g.weight(full, want))
    }

    /// Like [`Names::weight`], or `None` if the tensor is absent.
    pub(crate) fn optional(
        &self,
        g: &mut GraphBuilder,
        name: &str,
        want: &[usize],
    ) -> Result<Option<W>> {
        match self.find(name) {
            Some(_) => self.weight(g, name, want).map(Some),
            None => Ok(None),
        }
    }
}

/// Per-family weight names, relative to the prefix.
struct Scheme {
    word: &'static str,
    position: &'static str,
    token_type: Option<&'static str>,
    emb_norm: &'static str,
    layer: &'static str,
    q: &'static str,
    k: &'static str,
    v: &'static str,
    o: &'static str,
    attn_norm: &'static str,
    ffn_in: &'static str,
    ffn_out: &'static str,
    out_norm: &'static str,
}

const BERT: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: Some("embeddings.token_type_embeddings"),
    emb_norm: "embeddings.LayerNorm",
    layer: "encoder.layer",
    q: "attention.self.query",
    k: "attention.self.key",
    v: "attention.self.value",
    o: "attention.output.dense",
    attn_norm: "attention.output.LayerNorm",
    ffn_in: "intermediate.dense",
    ffn_out: "output.dense",
    out_norm: "output.LayerNorm",
};

const DISTILBERT: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: None,
    emb_norm: "embeddings.LayerNorm",
    layer: "transformer.layer",
    q: "attention.q_lin",
    k: "attention.k_lin",
    v: "attention.v_lin",
    o: "attention.out_lin",
    attn_norm: "sa_layer_norm",
    ffn_in: "ffn.lin1",
    ffn_out: "ffn.lin2",
    out_norm: "output_layer_norm",
};

/// The encoder under construction: the builder, the resolved names, and the config.
pub(crate) struct Encoder<'a> {
    pub(crate) g: GraphBuilder,
    pub(crate) names: Names<'a>,
}

impl Encoder<'_> {
    /// `act(x . W^T + b) + residual` with the layer `name`'s weight and (optional) bias.
    pub(crate) fn linear(
        &mut self,
        name: &str,
        x: Val,
        out: usize,
        act: Act,
        residual: Option<Val>,
    ) -> Result<Val> {
        linear_in(&mut self.g, &self.names, name, x, out, act, residual)
    }

    /// Like [`Encoder::linear`], for a head's layer named from the checkpoint's root (heads sit
    /// beside the `bert.` / `roberta.` prefix, not under it).
    pub(crate) fn head_linear(&mut self, name: &str, x: Val, out: usize, act: Act) -> Result<Val> {
        let root = Names { ck: self.names.ck, prefix: String::new() };
        linear_in(&mut self.g, &root, name, x, out, act, None)
    }

    /// LayerNorm with the layer `name`'s weight and (optional) bias.
    pub(crate) fn layer_norm(&mut self, name: &str, x: Val, eps: f32) -> Result<Val> {
        let d = self.g.shape(x).width;
        let gamma = self.names.weight(&mut self.g, &format!("{name}.weight"), &[d])?;
        let beta = self.names.optional(&mut self.g, &format!("{name}.bias"), &[d])?;
        Ok(self.g.op(self.g.shape(x), |o| Op::LayerNorm { x, gamma, beta, eps, out: o }))
    }
}

/// `act(x . W^T + b) + residual` with `names`' layer `name`.
fn linear_in(
    g: &mut GraphBuilder,
    names: &Names<'_>,
    name: &str,
    x: Val,
    out: usize,
    act: Act,
    residual: Option<Val>,
) -> Result<Val> {
    let k = g.shape(x).width;
    let weight = names.weight(g, &format!("{name}.weight"), &[out, k])?;
    let bias = names.optional(g, &format!("{name}.bias"), &[out])?;
    let shape = Shape { rows: g.shape(x).rows, width: out };
    Ok(g.op(shape, |o| Op::Linear { x, weight, bias, act, residual, out: o }))
}

/// Builds the encoder body; returns it with the final token rows.
pub(crate) fn build(ck: &Checkpoint, cfg: EncoderConfig) -> Result<(Encoder<'_>, Val)> {
    let s = if cfg.arch == Arch::DistilBert { &DISTILBERT } else { &BERT };
    let names = Names::detect(ck, &format!("{}.weight", s.word))?;
    let d = cfg.hidden;
    let hd = cfg.head_dim()?;
    let mut e = Encoder { g: GraphBuilder::new(), names };
    let t = Shape::tokens(d);

    let word = e.names.weight(&mut e.g, &format!("{}.weight", s.word), &[cfg.vocab, d])?;
    let pos =
        e.names.weight(&mut e.g, &format!("{}.weight", s.position), &[cfg.max_positions, d])?;
    let mut x = e.g.op(t, |out| Op::Embed { table: word, out });
    let p = e.g.op(t, |out| Op::PosEmbed { table: pos, offset: cfg.position_offset, out });
    x = e.g.op(t, |out| Op::Add { a: x, b: p, out });
    if let Some(tt) = s.token_type {
        let name = format!("{tt}.weight");
        if let Some(full) = e.names.find(&name) {
            let rows = ck.shape(&full).and_then(|sh| sh.first().copied()).unwrap_or(0);
            let table = e.names.weight(&mut e.g, &name, &[rows, d])?;
            let ty = e.g.op(t, |out| Op::TypeEmbed { table, out });
            x = e.g.op(t, |out| Op::Add { a: x, b: ty, out });
        }
    }
    x = e.layer_norm(s.emb_norm, x, cfg.eps)?;
    for l in 0..cfg.layers {
        let pre = format!("{}.{l}", s.layer);
        let q = e.linear(&format!("{pre}.{}", s.q), x, d, Act::Identity, None)?;
        let k = e.linear(&format!("{pre}.{}", s.k), x, d, Act::Identity, None)?;
        let v = e.linear(&format!("{pre}.{}", s.v), x, d, Act::Identity, None)?;
        let scale = 1.0 / (hd as f32).sqrt();
        let a = e.g.op(t, |out| Op::Attention {
            q,
            k,
            v,
            heads: cfg.heads,
            head_dim: hd,
            scale,
            window: None,
            out,
        });
        let h = e.linear(&format!("{pre}.{}", s.o), a, d, Act::Identity, Some(x))?;
        x = e.layer_norm(&format!("{pre}.{}", s.attn_norm), h, cfg.eps)?;
        let f = e.linear(&format!("{pre}.{}", s.ffn_in), x, cfg.ffn, cfg.act, None)?;
        let h = e.linear(&format!("{pre}.{}", s.ffn_out), f, d, Act::Identity, Some(x))?;
        x = e.layer_norm(&format!("{pre}.{}", s.out_norm), h, cfg.eps)?;
    }
    Ok((e, x))
}
