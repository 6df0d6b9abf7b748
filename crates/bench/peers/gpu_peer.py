"""PyTorch beside Switchyard's GPU benchmark, on the same ragged batches.

    python3 gpu_peer.py --ours OURS.txt [--device cuda|cpu] [--reps 5]

OURS.txt is what `switchyard-bench --gpus-only` printed (`cargo xtask bench --gpu` writes it);
its `gpu` lines name each batch (encoder shape, sequences, the length range of
`crates/bench`'s `ragged` and its token count) and each of Switchyard's times. For each batch
this script builds the same sequences with the same generator (a port of switchyard-core's
test Rng; the token counts are checked against ours), a random-weight BERT of the same shape
(transformers, SDPA attention), and times a whole call from ids on the host (one flat tensor and
the lengths, as Switchyard's bench holds them; padded on the device in one op) to mean-pooled
vectors back on the host, median of REPS after two warm-up calls:

- padded: the whole batch padded to its longest sequence, in fp32, fp16 and bf16;
- sentence-transformers' way: sorted by length, micro-batches of 32, each padded to its own
  longest, in fp32, fp16 and bf16.

It prints a line per engine with its time and the ratio of its time to Switchyard's best for
the batch (above 1: Switchyard is faster). fp16 on a CPU is skipped (PyTorch's CPU fp16
matmul is not what anyone runs).

Then, for each batch, PyTorch's own product (`F.linear`: cuBLAS on a GPU) on the encoder's four
linear layer shapes at the batch's token count, each alone with the device synchronised around
it, in fp16 and bf16 (fp32 on a CPU): the figures `switchyard-bench --matmuls` prints for
cubek's routines, set beside them, say how far the best of those is from the vendor's library.
"""

import argparse
import statistics
import time

import torch

MASK = (1 << 64) - 1
SHAPES = {
    "MiniLM shape": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "bge-base shape": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


class Rng:
    """switchyard_core::testkit::Rng: xorshift64*."""

    def __init__(self, seed):
        self.x = ((seed * 0x9E3779B97F4A7C15) & MASK) | 1

    def next(self):
        x = self.x
        x ^= x >> 12
        x ^= (x << 25) & MASK
        x ^= x >> 27
        self.x = x
        return (x * 0x2545F4914F6CDD1D) & MASK

    def below(self, n):
        return (self.next() >> 11) % n


def ragged(seqs, lo, hi, vocab=30522):
    """crates/bench's `ragged`: `seqs` sequences of `lo` to `hi` random ids (each draws its
    length, its ids, and a marker bit per token, as `push_random_seq` does)."""
    r, out = Rng(7), []
    for _ in range(seqs):
        n = lo + r.below(hi - lo + 1)
        out.append([r.below(vocab) for _ in range(n)])
        for _ in range(n):
            r.below(2)
    return out


def prepared(seqs):
    """The batch as Switchyard's bench hands it over: every id in one flat tensor, and the lengths."""
    return torch.tensor([t for s in seqs for t in s]), torch.tensor([len(s) for s in seqs])


def call(model, batch, device):
    """Ids on the host, padded on the device in one op, to mean-pooled vectors on the host."""
    flat, lens = batch
    n = int(lens.max())
    flat, lens = flat.to(device), lens.to(device)
    mask = torch.arange(n, device=device)[None, :] < lens[:, None]
    ids = torch.zeros(mask.shape, dtype=torch.long, device=device).masked_scatter_(mask, flat)
    mask = mask.long()
    with torch.inference_mode():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        return ((h * m).sum(1) / m.sum(1)).float().cpu()


def st_way(model, parts, device):
    """sentence-transformers' way: `parts` are the micro-batches of 32, sorted by length."""
    return torch.cat([call(model, p, device) for p in parts])


def micro_batches(seqs):
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    return [prepared([seqs[i] for i in order[k: k + 32]]) for k in range(0, len(order), 32)]


def timed(f, reps, device):
    def once():
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t
    once()
    once()
    return statistics.median(once() for _ in range(reps))


def linears(shape, m, device, reps):
    """`F.linear` on each linear layer shape of `shape`'s encoder (the query, key and value
    projections joined; the output projection; the FFN's two) at `m` rows, with a bias, each
    alone with the device synchronised around it: a line per dtype, ms (TFLOP/s) a shape and
    the layer's sum, as `switchyard-bench --matmuls` prints cubek's routines."""
    config = SHAPES[shape]
    d, ffn = config["hidden_size"], config["intermediate_size"]
    shapes = [(d, 3 * d), (d, d), (d, ffn), (ffn, d)]
    header = "".join(f" {f'{k}->{n}':>16}" for k, n in shapes)
    print(f"  PyTorch's product alone (F.linear), {m} rows, ms (TFLOP/s):")
    print(f"    {'dtype':<26}{header} {'a layer':>9}")
    dtypes = (torch.float32,) if device == "cpu" else (torch.float16, torch.bfloat16)
    for dtype in dtypes:
        torch.manual_seed(0)
        cells, layer = "", 0.0
        for k, n in shapes:
            x = torch.randn(m, k, device=device, dtype=dtype)
            w = torch.randn(n, k, device=device, dtype=dtype)
            b = torch.randn(n, device=device, dtype=dtype)
            with torch.inference_mode():
                t = timed(lambda: torch.nn.functional.linear(x, w, b), reps, device)
            layer += t
            cell = f"{t * 1e3:.3f} ({2 * m * k * n / t / 1e12:.0f})"
            cells += f" {cell:>16}"
        name = str(dtype).replace("torch.", "")
        print(f"    {name:<26}{cells} {layer * 1e3:>7.3f}ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    from transformers import BertConfig, BertModel

    batches = {}
    for line in open(a.ours, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        if len(f) != 8 or f[0] != "gpu":
            continue
        _, shape, seqs, lo, hi, tokens, who, ms = f
        key = (shape, int(seqs), int(lo), int(hi), int(tokens))
        batches.setdefault(key, []).append((who, float(ms)))
    if not batches:
        raise SystemExit(f"{a.ours} has no `gpu` lines: run `switchyard-bench --gpus-only` on a GPU first")
    print(f"PyTorch {torch.__version__} on {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else "")
          + f"; median of {a.reps}")
    for (shape, nseq, lo, hi, tokens), ours in batches.items():
        seqs = ragged(nseq, lo, hi)
        assert sum(map(len, seqs)) == tokens, "the generator differs from crates/bench's"
        # cuBLAS's products are there to measure cubek against, not Switchyard's own: the
        # ratios are to the best row without them, and the best with them is shown beside.
        own = [r for r in ours if "cublas" not in r[0]] or ours
        vendor = [r for r in ours if r not in own]
        best_who, best = min(own, key=lambda r: r[1])
        padded = nseq * max(map(len, seqs))
        print(f"\n{shape}, {nseq} seqs, {tokens} tokens ({padded} when padded to the longest)")
        print(f"  {'':<44} {'time':>9} {'x ours':>8}")
        print(f"  {'Switchyard, ' + best_who:<44} {best:>7.2f}ms {1.0:>8.2f}")
        if vendor:
            who, t = min(vendor, key=lambda r: r[1])
            print(f"  {'Switchyard, ' + who:<44} {t:>7.2f}ms {t / best:>8.2f}")
        config = BertConfig(vocab_size=30522, max_position_embeddings=512, attn_implementation="sdpa",
                            **SHAPES[shape])
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            if dtype == torch.float16 and a.device == "cpu":
                continue
            torch.manual_seed(0)
            model = BertModel(config).eval().to(a.device, dtype)
            name = str(dtype).replace("torch.", "")
            ways = (("padded", call, prepared(seqs)), ("sentence-transformers' way", st_way, micro_batches(seqs)))
            for way, f, batch in ways:
                t = timed(lambda: f(model, batch, a.device), a.reps, a.device) * 1e3
                print(f"  {'PyTorch ' + name + ', ' + way:<44} {t:>7.2f}ms {t / best:>8.2f}")
            del model
        linears(shape, tokens, a.device, a.reps)
    print("\n(x ours: the engine's time over Switchyard's best for the batch; above 1, Switchyard is faster)")


if __name__ == "__main__":
    main()
