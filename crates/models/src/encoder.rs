//! What every graph builder shares: checkpoint names under a prefix, and the encoder under
//! construction with its linear and normalisation layers.

use switchyard_core::{Act, GraphBuilder, Op, PoolMode, Shape, Val, W};

use crate::checkpoint::Checkpoint;
use crate::{Error, Result};

/// Resolves checkpoint names under a prefix, accepting old LayerNorm names (`gamma`, `beta`).
pub(crate) struct Names<'a> {
    ck: &'a Checkpoint,
    prefix: String,
}

impl<'a> Names<'a> {
    /// Finds the prefix (``, `bert.`, `roberta.`, ...) under which `probe` exists.
    pub(crate) fn detect(ck: &'a Checkpoint, probe: &str) -> Result<Names<'a>> {
        let prefixes = [
            "",
            "bert.",
            "roberta.",
            "distilbert.",
            "mpnet.",
            "electra.",
            "albert.",
            "deberta.",
            "nomic_bert.",
            "gte.",
            "new.",
        ];
        for prefix in prefixes.into_iter().chain(["model.", "encoder."]) {
            let n = Names { ck, prefix: prefix.to_owned() };
            if n.find(probe).is_some() {
                return Ok(n);
            }
        }
        Err(Error::format(format!(
            "the checkpoint has no `{probe}` (under any of the prefixes bert., roberta., \
             distilbert., mpnet., electra., albert., deberta., nomic_bert., gte., new., model., \
             encoder.); is it the architecture its config.json names?"
        )))
    }

    /// `name` under the prefix, whether or not the checkpoint has it.
    pub(crate) fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
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

    /// Declares the weight `name` in `g` with its checkpoint shape, checked against `want`; a
    /// tensor declared before (ALBERT's layers share theirs) is the same weight again.
    pub(crate) fn weight(&self, g: &mut GraphBuilder, name: &str, want: &[usize]) -> Result<W> {
        let full = self.find(name).ok_or_else(|| {
            Error::format(format!("the checkpoint has no tensor `{}{name}`", self.prefix))
        })?;
        let shape = self.ck.shape(&full).unwrap_or_default();
        if shape != want {
            return Err(Error::format(format!(
                "tensor `{full}` has shape {shape:?}; config.json implies {want:?}"
            )));
        }
        Ok(g.weight_named(&full).unwrap_or_else(|| g.weight(full, want)))
    }

    /// The checkpoint name of the tensor `name`, its shape checked to be `want`; `None` if the
    /// checkpoint has no such tensor. For weights derived from others at load.
    pub(crate) fn checked(&self, name: &str, want: &[usize]) -> Result<Option<String>> {
        let Some(full) = self.find(name) else { return Ok(None) };
        let shape = self.ck.shape(&full).unwrap_or_default();
        if shape != want {
            return Err(Error::format(format!(
                "tensor `{full}` has shape {shape:?}; config.json implies {want:?}"
            )));
        }
        Ok(Some(full))
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

/// The encoder under construction: the builder, the resolved names, and the config.
pub(crate) struct Encoder<'a> {
    pub(crate) g: GraphBuilder,
    pub(crate) names: Names<'a>,
    /// The word-embedding table (a masked-language-model decoder may be tied to it).
    pub(crate) word: W,
}

impl<'a> Encoder<'a> {
    /// Starts a graph whose first weight is the `[vocab, width]` word-embedding table `word`.
    pub(crate) fn start(names: Names<'a>, word: &str, vocab: usize, width: usize) -> Result<Self> {
        let mut g = GraphBuilder::new();
        let word = names.weight(&mut g, word, &[vocab, width])?;
        Ok(Encoder { g, names, word })
    }

    /// Names from the checkpoint's root: heads sit beside the `bert.` / `model.` prefix.
    pub(crate) fn root(&self) -> Names<'a> {
        Names { ck: self.names.ck, prefix: String::new() }
    }

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
        let root = self.root();
        linear_in(&mut self.g, &root, name, x, out, act, None)
    }

    /// LayerNorm with the layer `name`'s weight and (optional) bias.
    pub(crate) fn layer_norm(&mut self, name: &str, x: Val, eps: f32) -> Result<Val> {
        layer_norm_in(&mut self.g, &self.names, name, x, eps)
    }

    /// Like [`Encoder::layer_norm`], for a head's norm named from the checkpoint's root.
    pub(crate) fn head_layer_norm(&mut self, name: &str, x: Val, eps: f32) -> Result<Val> {
        let root = self.root();
        layer_norm_in(&mut self.g, &root, name, x, eps)
    }

    /// `x` plus the token-type embedding of each token, from the table `name` if the
    /// checkpoint has one (of whatever rows it has), else `x` itself.
    pub(crate) fn add_token_types(&mut self, name: &str, x: Val) -> Result<Val> {
        let Some(full) = self.names.find(name) else { return Ok(x) };
        let rows = self.names.ck.shape(&full).and_then(|sh| sh.first().copied()).unwrap_or(0);
        let t = self.g.shape(x);
        let table = self.names.weight(&mut self.g, name, &[rows, t.width])?;
        let ty = self.g.op(t, |out| Op::TypeEmbed { table, out });
        Ok(self.g.op(t, |out| Op::Add { a: x, b: ty, out }))
    }

    /// Each sequence's first row of `x`: what a head that reads `[CLS]` alone keeps of it.
    pub(crate) fn first_rows(&mut self, x: Val) -> Val {
        let seqs = Shape::seqs(self.g.shape(x).width);
        self.g.op(seqs, |out| Op::Pool { x, mode: PoolMode::Cls, out })
    }

    /// Declares the head weight `name` (from the checkpoint's root) if the checkpoint has it.
    pub(crate) fn head_optional(&mut self, name: &str, want: &[usize]) -> Result<Option<W>> {
        self.root().optional(&mut self.g, name, want)
    }
}

/// LayerNorm with `names`' layer `name`: its weight and (optional) bias.
fn layer_norm_in(
    g: &mut GraphBuilder,
    names: &Names<'_>,
    name: &str,
    x: Val,
    eps: f32,
) -> Result<Val> {
    let d = g.shape(x).width;
    let gamma = names.weight(g, &format!("{name}.weight"), &[d])?;
    let beta = names.optional(g, &format!("{name}.bias"), &[d])?;
    Ok(g.op(g.shape(x), |o| Op::LayerNorm { x, gamma, beta, eps, out: o }))
}

/// `act(x . W^T + b) + residual` with `names`' layer `name`.
pub(crate) fn linear_in(
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
