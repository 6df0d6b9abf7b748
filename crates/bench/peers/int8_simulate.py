"""What a scheme of int8 quantization costs all-MiniLM-L6-v2 in accuracy, before writing a kernel
for it: each linear layer's weight quantized per output column and its input per row, both
dequantized in f64, in sentence-transformers' model; the cosine of each embedding to the f32 one,
on the sentences of Switchyard's MiniLM test.

    python int8_simulate.py MODEL_DIR [FIXTURE_JSON]

(the bench's Python environment has what it needs: `cargo xtask bench --peers` makes it.)

Quantizing and summing integers exactly, as flex's kernels do, gives what this gives, up to f32
rounding: flex's measured worst cosines (crates/models/tests/minilm.rs, f32 attention) were
these to four places. Schemes:

- symmetric rows: each row rounded to 1/127 of its largest magnitude (plain AVX2 until
  2026-12-04);
- zero-point rows: each row over its own range in 255 steps (every kernel since);
- zero-point rows with weights of 63 (plain AVX2's kernel since, whose i16 pairs would saturate
  with weights of 127);
- zero-point rows of 127 steps with weights of 127 (the other way to keep `vpmaddubsw` exact).
"""

import json
import pathlib
import sys

import torch
from sentence_transformers import SentenceTransformer


def weights(w, top):
    """Each output column (a row of the [n, k] weight) to a multiple of 1/top of its largest
    magnitude."""
    s = w.abs().amax(dim=1, keepdim=True) / top
    s[s == 0] = 1
    return (w / s).round().clamp(-top, top) * s


def symmetric_rows(x):
    s = x.abs().amax(dim=-1, keepdim=True) / 127
    s[s == 0] = 1
    return (x / s).round().clamp(-127, 127) * s


def zero_point_rows(steps):
    def q(x):
        lo = x.amin(dim=-1, keepdim=True).clamp(max=0)
        hi = x.amax(dim=-1, keepdim=True).clamp(min=0)
        s = (hi - lo) / steps
        s[s == 0] = 1
        z = (-lo / s).round().clamp(0, steps)
        return (x / s).round().clamp(-z, steps - z) * s

    return q


SCHEMES = [
    ("symmetric rows, weights of 127", symmetric_rows, 127),
    ("zero-point rows, weights of 127", zero_point_rows(255), 127),
    ("zero-point rows, weights of 63", zero_point_rows(255), 63),
    ("zero-point rows of 127 steps, weights of 127", zero_point_rows(127), 127),
]


def quantized(model_dir, rows, top):
    """The model with every linear layer quantized as the scheme says."""
    model = SentenceTransformer(model_dir, device="cpu")
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.weight.data = weights(layer.weight.data.double(), top).float()

            def forward(x, layer=layer):
                x = rows(x.double()).float()
                return torch.nn.functional.linear(x, layer.weight, layer.bias)

            layer.forward = forward
    return model


def main():
    model_dir = sys.argv[1]
    here = pathlib.Path(__file__).resolve().parents[3]
    fixture = sys.argv[2] if len(sys.argv) > 2 else here / "crates/models/tests/fixtures/minilm.json"
    sentences = json.loads(pathlib.Path(fixture).read_text(encoding="utf-8"))["sentences"]
    encode = lambda m: m.encode(sentences, convert_to_tensor=True, normalize_embeddings=True)
    want = encode(SentenceTransformer(model_dir, device="cpu")).double()
    for name, rows, top in SCHEMES:
        got = encode(quantized(model_dir, rows, top)).double()
        cos = (got * want).sum(-1)
        print(f"{name}: worst {cos.min():.4f}, best {cos.max():.4f}")


if __name__ == "__main__":
    main()
