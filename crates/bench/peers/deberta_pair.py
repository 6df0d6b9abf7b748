"""Two random-weight encoders of one shape for timing DeBERTa's disentangled attention by hand:
a DeBERTa v3 (deberta-v3-xsmall's sizes: 12 layers, 384 wide, 6 heads, 256 position buckets,
relative embeddings normalised, no absolute positions) and a BERT of the same sizes, each saved
as a sentence-transformers model with all-MiniLM-L6-v2's tokenizer and pooling (30522 ids, mean
pooling, max_seq_length 256). Their only difference in cost is attention, so `switchyard-bench
corpus` and `peers.py --engines st` on both give DeBERTa's price against BERT's on each engine
(docs/benchmarks.md).

    python deberta_pair.py MINILM_DIR OUT_DIR    # writes OUT_DIR/deberta and OUT_DIR/bert
"""

import os
import shutil
import sys

import torch
from transformers import BertConfig, BertModel, DebertaV2Config, DebertaV2Model


def main():
    minilm, out = sys.argv[1], sys.argv[2]
    shape = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                 intermediate_size=1536, max_position_embeddings=512)
    torch.manual_seed(0)
    models = {
        "deberta": DebertaV2Model(DebertaV2Config(
            **shape, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=256,
            max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
            position_biased_input=False, type_vocab_size=0)),
        "bert": BertModel(BertConfig(**shape)),
    }
    files = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
             "modules.json", "sentence_bert_config.json"]
    for name, model in models.items():
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
