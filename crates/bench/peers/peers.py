"""Switchyard's peers on a corpus: ONNX Runtime, fp32 and int8, and sentence-transformers,
embedding all-MiniLM-L6-v2 the way `switchyard embed` does: truncation at 256 tokens (or
--max-len), batches of 32, mean pooling over the tokens, L2 normalisation.

    python peers.py --model DIR [--onnx DIR] --corpus FILE --threads N [--engines LIST] [--max-len N]
                    [--orders file,sorted]

(`--onnx` is needed by the `ort` engines only.)

Engines: `py` (Switchyard's own Python package, flex in f32, from PYTHONPATH: the binding's
overhead over the engine, which `switchyard-bench corpus` times alone), `ort` and `ort-int8` (ONNX Runtime's CPU provider on OUT/model.onnx and
model-int8.onnx from export_onnx.py, all graph optimisations on), each in file order and
sorted by length (characters, as sentence-transformers sorts; `--orders` picks one or both), and `st` (sentence-transformers
on PyTorch, which sorts by length itself), on the CPU; `st-cuda` and `st-cuda-fp16` run it on
the GPU, in fp32 and in fp16 (`model.half()`, as its users run it there). Each run is timed after its model is loaded and one
warm-up batch (on the GPU, a whole warm-up pass: its first batch of each shape loads and tunes
kernels, as `switchyard-bench corpus` warms a GPU), from the texts to normalised embeddings (tokenizing included), in wall seconds
and process CPU seconds. Prints one tab-separated line per run, as `switchyard-bench corpus`
does: `run`, engine, order, threads, texts, tokens, wall seconds, CPU seconds, and the largest
difference of its embeddings from the first run's (the same model must give the same vectors).
"""

import argparse
import json
import os
import time


def load_corpus(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def batches(items, size):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def timed(run, texts, whole_warmup=False):
    """Runs `run` on one batch (or, with `whole_warmup`, on all texts) to warm up, then on all
    texts; (embeddings, wall, cpu)."""
    run(texts if whole_warmup else texts[:32])
    w, c = time.perf_counter(), time.process_time()
    out = run(texts)
    return out, time.perf_counter() - w, time.process_time() - c


def ort_engine(model_dir, onnx_path, threads, max_len):
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(max_len)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    # A model without token types (DeBERTa v3's type_vocab_size is 0) exports without that input.
    inputs = {i.name for i in sess.get_inputs()}

    def run(texts):
        out = []
        for b in batches(texts, 32):
            enc = tok.encode_batch(b)
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            types = np.array([e.type_ids for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            (h,) = sess.run(None, {k: v for k, v in feed.items() if k in inputs})
            m = mask[:, :, None].astype(np.float32)
            v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            out.append(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12))
        return np.concatenate(out)

    return run


def st_engine(model_dir, threads, max_len, device="cpu", half=False):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_dir, device=device)
    if half:
        model.half()
    model.max_seq_length = max_len

    def run(texts):
        out = model.encode(texts, batch_size=32, convert_to_numpy=True)
        return out.astype("float32")

    return run


def py_engine(model_dir, threads, max_len):
    import switchyard

    model = switchyard.Embedder(model_dir, device="flex", threads=threads, max_seq_length=max_len)
    # The whole corpus in one call, as `switchyard-bench corpus` runs the engine.
    return lambda texts: model.encode(texts, batch_size=max(len(texts), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--onnx")
    p.add_argument("--corpus", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--engines", default="ort,ort-int8,st")
    p.add_argument("--max-len", type=int, default=256)
    # ORT's and the Python package's orders to run (sentence-transformers always sorts).
    p.add_argument("--orders", default="file,sorted")
    a = p.parse_args()
    orders = a.orders.split(",")
    if not orders or any(o not in ("file", "sorted") for o in orders):
        p.error(f"--orders {a.orders}: expected file, sorted or both, comma-separated")
    # The tokenizer's own threads follow the run's.
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    import numpy as np
    from tokenizers import Tokenizer

    texts = load_corpus(a.corpus)
    counter = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    counter.enable_truncation(a.max_len)
    # all-MiniLM-L6-v2's tokenizer.json pads to 128 tokens: count real tokens only.
    counter.no_padding()
    tokens = sum(len(e.ids) for e in counter.encode_batch(texts))
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    first = None
    for engine in a.engines.split(","):
        if engine in ("st", "st-cuda", "st-cuda-fp16"):
            device = "cpu" if engine == "st" else "cuda"
            st = st_engine(a.model, a.threads, a.max_len, device, engine.endswith("fp16"))
            runs = [("sorted by the engine", st, None)]
        elif engine == "py":
            run = py_engine(a.model, a.threads, a.max_len)
            runs = [(o, run, order if o == "sorted" else None) for o in orders]
        else:
            if a.onnx is None:
                p.error(f"--onnx is needed for the {engine} engine")
            name = "model.onnx" if engine == "ort" else "model-int8.onnx"
            run = ort_engine(a.model, os.path.join(a.onnx, name), a.threads, a.max_len)
            runs = [(o, run, order if o == "sorted" else None) for o in orders]
        for label, run, perm in runs:
            inputs = texts if perm is None else [texts[i] for i in perm]
            emb, wall, cpu = timed(run, inputs, whole_warmup=engine.startswith("st-cuda"))
            if perm is not None:
                back = np.empty_like(emb)
                back[perm] = emb
                emb = back
            if first is None:
                first = emb
            diff = float(np.abs(emb - first).max())
            name = "switchyard python" if engine == "py" else engine
            fields = [name, label, a.threads, len(texts), tokens, wall, cpu, diff]
            print("\t".join(["run"] + [str(f) for f in fields]), flush=True)


if __name__ == "__main__":
    main()
