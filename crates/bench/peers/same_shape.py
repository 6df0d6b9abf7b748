"""Random-weight encoders of one shape, one per family, for timing what each family's own parts
cost by hand: a BERT, and a DeBERTa v3 (disentangled attention: 256 position buckets, relative
embeddings normalised, no absolute positions), a NomicBERT (rotary positions, SwiGLU without
biases), a GTE (rotary positions, GeGLU from one up-and-gate matrix, no token types), a Jina
v3 (rotary positions, a plain feed-forward) and a Gemma 3 with bidirectional attention
(EmbeddingGemma's parts: per-head query and key norms, two key-value heads for six query heads,
pre- and post-norms, a gated feed-forward, a window of 512 that these texts never pass) and a
Qwen3 (Qwen3-Embedding's parts: a causal mask, per-head query and key norms, two key-value heads
for six query heads, SwiGLU), all of deberta-v3-xsmall's sizes: 12 layers, 384 wide, 6 heads,
feed-forward 1536. Each is saved as a sentence-transformers model with
all-MiniLM-L6-v2's tokenizer and pooling (30522 ids, mean pooling, max_seq_length 256). Beside
the BERT, `switchyard-bench corpus` and `peers.py --engines st` on each give its family's price
on each engine (docs/benchmarks.md).

    python same_shape.py MINILM_DIR OUT_DIR [FAMILY ...]   # writes OUT_DIR/FAMILY; default all
"""

import os
import shutil
import sys

import torch
from transformers import (BertConfig, BertModel, DebertaV2Config, DebertaV2Model,
                          Gemma3TextConfig, Gemma3TextModel, GteConfig, GteModel,
                          JinaEmbeddingsV3Config, JinaEmbeddingsV3Model, NomicBertConfig,
                          NomicBertModel, Qwen3Config, Qwen3Model)

SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
             intermediate_size=1536, max_position_embeddings=512)

FAMILIES = {
    "bert": lambda: BertModel(BertConfig(**SHAPE)),
    "deberta": lambda: DebertaV2Model(DebertaV2Config(
        **SHAPE, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=256,
        max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, type_vocab_size=0)),
    "nomic": lambda: NomicBertModel(NomicBertConfig(**SHAPE)),
    "gte": lambda: GteModel(GteConfig(**SHAPE, type_vocab_size=0)),
    "jina": lambda: JinaEmbeddingsV3Model(JinaEmbeddingsV3Config(**SHAPE)),
    "gemma": lambda: Gemma3TextModel(Gemma3TextConfig(
        **SHAPE, num_key_value_heads=2, head_dim=64, query_pre_attn_scalar=64,
        sliding_window=512, use_bidirectional_attention=True, pad_token_id=0)),
    "qwen3": lambda: Qwen3Model(Qwen3Config(
        **SHAPE, num_key_value_heads=2, head_dim=64, pad_token_id=0)),
}


def main():
    minilm, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(FAMILIES)
    files = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
             "modules.json", "sentence_bert_config.json"]
    for name in names:
        torch.manual_seed(0)
        model = FAMILIES[name]()
        d = os.path.join(out, name)
        model.eval().save_pretrained(d, safe_serialization=True)
        for f in files:
            if os.path.exists(os.path.join(minilm, f)):
                shutil.copy(os.path.join(minilm, f), d)
        for sub in ["1_Pooling", "2_Normalize"]:
            if os.path.isdir(os.path.join(minilm, sub)):
                shutil.copytree(os.path.join(minilm, sub), os.path.join(d, sub), dirs_exist_ok=True)
        print(f"wrote {d}")


if __name__ == "__main__":
    main()
