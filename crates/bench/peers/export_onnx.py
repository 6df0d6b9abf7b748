"""all-MiniLM-L6-v2 exported for ONNX Runtime: fp32, and its int8 dynamic quantization.

    python export_onnx.py MODEL_DIR OUT_DIR

Writes OUT_DIR/model.onnx (the transformer's last hidden state from token ids, attention mask
and token types, opset 17, batch and length dynamic; pooling is left to the caller, as
sentence-transformers' ONNX backend does) and OUT_DIR/model-int8.onnx (ONNX Runtime's dynamic
quantization, int8 weights per channel and activations quantized at run time).
"""

import pathlib
import sys

import torch
import transformers
from onnxruntime.quantization import QuantType, quantize_dynamic


class Hidden(torch.nn.Module):
    """The model with keyword arguments: transformers 5's BertModel refuses positional ones."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return out.last_hidden_state


def main():
    model_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    ids = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "batch", 1: "length"}
    fp32 = out_dir / "model.onnx"
    def export(dynamo):
        with torch.no_grad():
            torch.onnx.export(
                Hidden(model),
                (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                str(fp32),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["last_hidden_state"],
                dynamic_axes={
                    "input_ids": axes,
                    "attention_mask": axes,
                    "token_type_ids": axes,
                    "last_hidden_state": axes,
                },
                opset_version=17,
                dynamo=dynamo,
            )

    # The TorchScript exporter, which torch deprecates; where a torch no longer has it, its
    # dynamo exporter (which needs onnxscript).
    try:
        export(False)
    except Exception as e:  # noqa: BLE001 - any failure of the old exporter is a reason to try the new
        print(f"export_onnx.py: the TorchScript exporter failed ({e}); trying dynamo=True", file=sys.stderr)
        export(True)
    quantize_dynamic(
        str(fp32), str(out_dir / "model-int8.onnx"), weight_type=QuantType.QInt8, per_channel=True
    )
    print(f"export_onnx.py: {fp32} and model-int8.onnx in {out_dir}")


if __name__ == "__main__":
    main()
