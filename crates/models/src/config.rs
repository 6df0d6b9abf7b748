//! `config.json`: the architecture and its sizes.

use serde_json::Value;
use switchyard_core::Act;

use crate::{Error, Result};

/// The encoder families Switchyard builds graphs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// BERT and its descendants with BERT's weight names (MiniLM, BGE, E5, GTE).
    Bert,
    /// RoBERTa and XLM-RoBERTa: BERT's shape, positions offset past the padding index.
    Roberta,
    /// DistilBERT: BERT's shape with its own weight names and no token types.
    DistilBert,
}

/// The sizes of a BERT-like encoder, from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    /// Which family.
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Feed-forward activation.
    pub act: Act,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Rows of the position table.
    pub max_positions: usize,
    /// First position index (RoBERTa: padding index + 1).
    pub position_offset: usize,
}

const SUPPORTED: &str = "bert, roberta, xlm-roberta, distilbert";

fn get_usize(c: &Value, key: &str) -> Result<usize> {
    c.get(key).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(|| {
        Error::Format(format!("config.json: `{key}` is missing or not a whole number"))
    })
}

fn get_f32(c: &Value, key: &str, default: f32) -> Result<f32> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| Error::Format(format!("config.json: `{key}` is not a number"))),
    }
}

/// Maps a Hugging Face activation name to ours.
pub fn activation(name: &str) -> Result<Act> {
    match name {
        "gelu" => Ok(Act::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Act::GeluTanh),
        "relu" => Ok(Act::Relu),
        "silu" | "swish" => Ok(Act::Silu),
        "tanh" => Ok(Act::Tanh),
        other => Err(Error::Unsupported(format!(
            "activation `{other}`; supported: gelu, gelu_new, gelu_pytorch_tanh, relu, silu, tanh"
        ))),
    }
}

impl EncoderConfig {
    /// Reads the encoder's sizes from a parsed `config.json`.
    pub fn from_json(c: &Value) -> Result<EncoderConfig> {
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        match model_type {
            "bert" | "roberta" | "xlm-roberta" => {
                let arch = if model_type == "bert" { Arch::Bert } else { Arch::Roberta };
                let act =
                    activation(c.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu"))?;
                if let Some(p) = c.get("position_embedding_type").and_then(Value::as_str)
                    && p != "absolute"
                {
                    return Err(Error::Unsupported(format!(
                        "position_embedding_type `{p}`; only absolute positions are supported"
                    )));
                }
                let pad = c.get("pad_token_id").and_then(Value::as_u64).unwrap_or(1) as usize;
                Ok(EncoderConfig {
                    arch,
                    vocab: get_usize(c, "vocab_size")?,
                    hidden: get_usize(c, "hidden_size")?,
                    layers: get_usize(c, "num_hidden_layers")?,
                    heads: get_usize(c, "num_attention_heads")?,
                    ffn: get_usize(c, "intermediate_size")?,
                    act,
                    eps: get_f32(c, "layer_norm_eps", 1e-12)?,
                    max_positions: get_usize(c, "max_position_embeddings")?,
                    position_offset: if arch == Arch::Roberta { pad + 1 } else { 0 },
                })
            }
            "distilbert" => Ok(EncoderConfig {
                arch: Arch::DistilBert,
                vocab: get_usize(c, "vocab_size")?,
                hidden: get_usize(c, "dim")?,
                layers: get_usize(c, "n_layers")?,
                heads: get_usize(c, "n_heads")?,
                ffn: get_usize(c, "hidden_dim")?,
                act: activation(c.get("activation").and_then(Value::as_str).unwrap_or("gelu"))?,
                eps: 1e-12,
                max_positions: get_usize(c, "max_position_embeddings")?,
                position_offset: 0,
            }),
            "" => Err(Error::Format(format!(
                "config.json has no `model_type`; supported model types: {SUPPORTED}"
            ))),
            other => Err(Error::Unsupported(format!(
                "model type `{other}`; supported model types: {SUPPORTED}"
            ))),
        }
    }

    /// Columns per attention head; an error if the heads do not divide the width.
    pub fn head_dim(&self) -> Result<usize> {
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return Err(Error::Format(format!(
                "config.json: {} heads do not divide the hidden size {}",
                self.heads, self.hidden
            )));
        }
        Ok(self.hidden / self.heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bert_roberta_and_distilbert() {
        let bert = serde_json::json!({"model_type": "bert", "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 64});
        let c = EncoderConfig::from_json(&bert).unwrap();
        assert_eq!((c.arch, c.head_dim().unwrap(), c.position_offset), (Arch::Bert, 8, 0));

        let mut roberta = bert.clone();
        roberta["model_type"] = "xlm-roberta".into();
        roberta["pad_token_id"] = 1.into();
        roberta["hidden_act"] = "gelu_new".into();
        let c = EncoderConfig::from_json(&roberta).unwrap();
        assert_eq!((c.arch, c.position_offset, c.act), (Arch::Roberta, 2, Act::GeluTanh));

        let distil = serde_json::json!({"model_type": "distilbert", "vocab_size": 100, "dim": 32,
            "n_layers": 2, "n_heads": 4, "hidden_dim": 64, "activation": "relu",
            "max_position_embeddings": 64});
        let c = EncoderConfig::from_json(&distil).unwrap();
        assert_eq!((c.arch, c.act, c.ffn), (Arch::DistilBert, Act::Relu, 64));
    }

    #[test]
    fn unknown_or_broken_configs_say_what_is_supported() {
        let e = EncoderConfig::from_json(&serde_json::json!({"model_type": "gpt2"})).unwrap_err();
        assert!(e.to_string().contains("model type `gpt2`; supported model types: bert"), "{e}");
        let e = EncoderConfig::from_json(&serde_json::json!({"model_type": "bert"})).unwrap_err();
        assert!(e.to_string().contains("`vocab_size` is missing"), "{e}");
        let e = activation("mish").unwrap_err();
        assert!(e.to_string().contains("activation `mish`"), "{e}");
    }
}
