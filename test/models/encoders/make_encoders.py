"""Writes the encoder fixtures of test/models/encoders/.

Small configurations of transformers' ViT, Whisper encoder and CLIP text and
vision models with seeded random weights, exported by torch.onnx's legacy
exporter (opset 17) and its dynamo exporter (its own opset), and
onnxruntime's outputs on fixed inputs. Run by hand in a virtual environment
with torch, transformers, onnxscript, onnx and onnxruntime from PyPI (the
versions manifest.json records); never in CI:

    /work/venv-genai/bin/python test/models/encoders/make_encoders.py
"""

import json
import pathlib
import warnings

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def models():
    import torch
    from transformers import (CLIPTextConfig, CLIPTextModel, CLIPVisionConfig,
                              CLIPVisionModel, ViTConfig, ViTModel,
                              WhisperConfig)
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    torch.manual_seed(0)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4)
    return {
        # 16 patches of 4x4 and the class token: 17 positions.
        "vit": (ViTModel(ViTConfig(**common, image_size=16, patch_size=4,
                                   num_channels=3), add_pooling_layer=False),
                {"pixel_values": torch.randn(2, 3, 16, 16)}),
        # Two Conv1d (kernel 3; stride 1, then 2) over 16 frames of 8 mels.
        "whisper_encoder": (WhisperEncoder(WhisperConfig(
            d_model=32, encoder_layers=2, encoder_attention_heads=4,
            encoder_ffn_dim=64, num_mel_bins=8, max_source_positions=8)),
            {"input_features": torch.randn(2, 8, 16)}),
        # Causal attention; the pooler takes the position of the largest
        # token id (ArgMax).
        "clip_text": (CLIPTextModel(CLIPTextConfig(
            **common, vocab_size=128, max_position_embeddings=16,
            eos_token_id=2)),
            {"input_ids": torch.randint(3, 128, (2, 8))}),
        "clip_vision": (CLIPVisionModel(CLIPVisionConfig(
            **common, image_size=16, patch_size=4)),
            {"pixel_values": torch.randn(2, 3, 16, 16)}),
    }


def main():
    import onnx
    import onnxruntime as ort
    import torch
    import transformers
    warnings.simplefilter("ignore")
    manifest = {"torch": torch.__version__,
                "transformers": transformers.__version__,
                "onnxruntime": ort.__version__, "files": {}}
    for name, (model, inputs) in models().items():
        model.eval()
        np.savez(HERE / f"{name}.inputs.npz",
                 **{k: v.numpy() for k, v in inputs.items()})
        for exporter in ("legacy", "dynamo"):
            path = HERE / f"{name}.{exporter}.onnx"
            extra = {"opset_version": 17} if exporter == "legacy" else {}
            torch.onnx.export(model, (), str(path), kwargs=inputs,
                              input_names=list(inputs),
                              dynamo=exporter == "dynamo",
                              do_constant_folding=True, **extra)
            # One file: the dynamo exporter may write external data.
            m = onnx.load(str(path))
            for stale in HERE.glob(f"{path.name}.data"):
                stale.unlink()
            onnx.save(m, str(path))
            session = ort.InferenceSession(str(path),
                                           providers=["CPUExecutionProvider"])
            feeds = {i.name: inputs[i.name].numpy()
                     for i in session.get_inputs()}
            outputs = dict(zip([o.name for o in session.get_outputs()],
                               session.run(None, feeds)))
            np.savez(HERE / f"{name}.{exporter}.outputs.npz", **outputs)
            manifest["files"][path.name] = {
                "model": name, "inputs": f"{name}.inputs.npz",
                "opset": [o.version for o in m.opset_import if not o.domain],
                "ops": sorted({n.op_type for n in m.graph.node})}
            print(path.name, manifest["files"][path.name]["ops"])
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
