"""sentence-transformers' `fit` fine-tuning a model, timed for `cargo xtask bench --train`.

    python train_peer.py --model DIR --data FILE --threads N --batch N --max-len N [--epochs N]

One epoch (by default) of MultipleNegativesRankingLoss on the `{"anchor", "positive"}` records
of FILE in file order (no shuffle), with `fit`'s defaults otherwise (AdamW, learning rate 2e-5,
weight decay 0.01, gradient clipping at 1, dropout on) and a 10% linear warm-up, on the CPU
with N threads: what `switchyard-bench train` runs. Prints a tab-separated line as it does:
`run`, engine, threads, records, tokens (each text's, truncated at MAX_LEN, special tokens
included: the tokens a batch holds without its padding), wall seconds of `fit`, CPU seconds,
and peak memory in MiB; and on stderr the tokens of its padded batches and the memory before
`fit` (torch and the model loaded).
"""

import argparse
import json
import math
import resource
import sys
import time

import torch


def rss_peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--max-len", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer import losses
    from torch.utils.data import DataLoader

    recs = [json.loads(l) for l in open(a.data, encoding="utf-8") if l.strip()]
    model = SentenceTransformer(a.model, device="cpu")
    model.max_seq_length = a.max_len
    tok = model.tokenizer
    lengths = [len(tok(t, truncation=True, max_length=a.max_len)["input_ids"])
               for r in recs for t in (r["anchor"], r["positive"])]
    tokens = sum(lengths) * a.epochs
    padded = 0
    for i in range(0, len(recs), a.batch):
        for col in (0, 1):
            batch = [lengths[2 * j + col] for j in range(i, min(i + a.batch, len(recs)))]
            padded += max(batch) * len(batch)
    examples = [InputExample(texts=[r["anchor"], r["positive"]]) for r in recs]
    loader = DataLoader(examples, batch_size=a.batch, shuffle=False)
    loss = losses.MultipleNegativesRankingLoss(model)
    steps = math.ceil(len(recs) / a.batch) * a.epochs
    base = rss_peak_mib()
    cpu0, t0 = time.process_time(), time.perf_counter()
    model.fit(train_objectives=[(loader, loss)], epochs=a.epochs, warmup_steps=math.ceil(0.1 * steps),
              optimizer_params={"lr": 2e-5}, show_progress_bar=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"run\tsentence-transformers fit\t{a.threads}\t{len(recs)}\t{tokens}\t{wall:.3f}\t{cpu:.3f}\t"
          f"{rss_peak_mib():.0f}")
    print(f"sentence-transformers: {padded * a.epochs} tokens in its padded batches, "
          f"{base:.0f} MiB before fit", file=sys.stderr)


if __name__ == "__main__":
    main()
