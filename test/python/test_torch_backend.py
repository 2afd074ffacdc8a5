"""partita.torch_backend: a graph Partita compiles runs through the artifact
and equals eager within 1e-4; one it cannot compile (an op Partita does not
know, an unsupported dtype, another input shape) runs eagerly with a
warning naming the reason.

Written with unittest so that it also runs where pytest is not installed:
Debian's /usr/bin/python3 has torch (python3-torch) but neither pytest nor
onnx, and test/Embedding/torch-backend.test runs this file there. Under
pytest (scripts/test, whose Python usually has no torch) it is skipped with
the reason.
"""

import os
import pathlib
import sys
import unittest
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("PARTITA_BUILD_DIR", ROOT / "build"))

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    try:
        import partita  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(BUILD / "python"))
    import partita
    from partita.torch_backend import backend, partita_backend

    class Block(torch.nn.Module):
        """Linear + GELU + LayerNorm, as in a transformer MLP."""

        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 16)
            self.norm = torch.nn.LayerNorm(16)

        def forward(self, x):
            return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))

    class TwoOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x, y):
            h = self.proj(x)
            return h * y, torch.tanh(h)

    class Arctangent(torch.nn.Module):
        """Atan: an ONNX op Partita does not import."""

        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.atan(self.proj(x))


def _partita_warnings(caught):
    return [str(w.message) for w in caught
            if str(w.message).startswith("partita:")]


@unittest.skipIf(torch is None, "torch is not installed for this Python "
                 "(test/Embedding/torch-backend.test runs it with Debian's)")
class TorchBackendTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def compiled(self, module, *inputs, **options):
        """The backend applied as dynamo would: to the FX graph."""
        gm = torch.fx.symbolic_trace(module)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = partita_backend(gm, list(inputs), **options)
        return fn, _partita_warnings(caught)

    def assertClose(self, actual, expected):
        self.assertEqual(actual.shape, expected.shape)
        self.assertEqual(actual.dtype, expected.dtype)
        self.assertTrue(torch.allclose(actual, expected, rtol=1e-4, atol=1e-4),
                        f"max difference {(actual - expected).abs().max()}")

    def test_block_runs_through_partita(self):
        module = Block().eval()
        x = torch.randn(2, 4, 16)
        fn, warned = self.compiled(module, x)
        self.assertEqual(warned, [])
        self.assertIsInstance(fn.artifact, partita.Artifact)
        self.assertEqual(fn.artifact.report["mesh"]["world_size"], 1)
        with torch.no_grad():
            self.assertClose(fn(x), module(x))
            # Another input of the same shape: the same compiled artifact.
            x2 = torch.randn(2, 4, 16)
            self.assertClose(fn(x2), module(x2))

    def test_configured_backend_tp2(self):
        module = Block().eval()
        x = torch.randn(2, 4, 16)
        fn = backend(mesh={"tp": 2})(torch.fx.symbolic_trace(module), [x])
        self.assertEqual(fn.artifact.report["mesh"]["world_size"], 2)
        with torch.no_grad():
            self.assertClose(fn(x), module(x))

    def test_tuple_outputs_and_two_inputs(self):
        module = TwoOutputs().eval()
        x, y = torch.randn(3, 8), torch.randn(3, 8)
        fn, warned = self.compiled(module, x, y)
        self.assertEqual(warned, [])
        with torch.no_grad():
            got, want = fn(x, y), module(x, y)
        self.assertIsInstance(got, tuple)
        for a, b in zip(got, want):
            self.assertClose(a, b)

    def test_unsupported_op_falls_back(self):
        module = Arctangent().eval()
        x = torch.randn(2, 8)
        fn, warned = self.compiled(module, x)
        self.assertEqual(len(warned), 1, warned)
        self.assertIn("running the graph eagerly", warned[0])
        self.assertIn("CompileError", warned[0])
        self.assertIn("Atan", warned[0])
        with torch.no_grad():
            self.assertClose(fn(x), module(x))

    def test_unsupported_dtype_falls_back(self):
        module = Block().double().eval()
        x = torch.randn(2, 4, 16, dtype=torch.float64)
        fn, warned = self.compiled(module, x)
        self.assertEqual(len(warned), 1, warned)
        self.assertIn("unsupported dtype torch.float64", warned[0])
        with torch.no_grad():
            self.assertClose(fn(x), module(x))

    def test_other_shape_runs_eagerly(self):
        module = Block().eval()
        fn, _ = self.compiled(module, torch.randn(2, 4, 16))
        x = torch.randn(3, 4, 16)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad():
                self.assertClose(fn(x), module(x))
        self.assertTrue(any("differ from the example" in w
                            for w in _partita_warnings(caught)))

    @unittest.skipUnless(torch is not None and hasattr(torch, "compile"),
                         "torch.compile needs torch 2")
    def test_torch_compile(self):
        module = Block().eval()
        x = torch.randn(2, 4, 16)
        fast = torch.compile(module, backend=partita_backend)
        with torch.no_grad():
            self.assertClose(fast(x), module(x))


def _has_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@unittest.skipUnless(torch is not None and hasattr(torch, "compile") and
                     _has_transformers(),
                     "needs torch 2 and transformers (a venv of your own: "
                     "pip install torch transformers onnxscript)")
class TorchCompileModelsTest(unittest.TestCase):
    """Hugging Face decoders through torch.compile: the dynamo exporter at
    its own opset, compiled by Partita with no eager fallback, equal to
    eager within 1e-4 on one rank and tp=2."""

    def models(self):
        from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig,
                                  LlamaForCausalLM, Qwen3Config,
                                  Qwen3ForCausalLM)
        torch.manual_seed(0)
        common = dict(vocab_size=128, num_hidden_layers=2,
                      num_attention_heads=4)
        return {
            "gpt2": GPT2LMHeadModel(GPT2Config(
                n_layer=2, n_embd=32, n_head=4, vocab_size=128,
                n_positions=64)),
            "llama": LlamaForCausalLM(LlamaConfig(
                **common, hidden_size=32, intermediate_size=64,
                num_key_value_heads=2)),
            "qwen3": Qwen3ForCausalLM(Qwen3Config(
                **common, hidden_size=32, intermediate_size=64,
                num_key_value_heads=2, head_dim=8)),
        }

    def test_decoders_compile_without_fallback(self):
        ids = torch.randint(0, 128, (2, 8))
        for name, model in self.models().items():
            model.eval()
            for mesh in (None, {"tp": 2}):
                with self.subTest(model=name, mesh=mesh):
                    torch._dynamo.reset()
                    compiled = torch.compile(
                        lambda x: model(input_ids=x, use_cache=False).logits,
                        backend=backend(mesh=mesh) if mesh else
                        partita_backend)
                    with warnings.catch_warnings(record=True) as caught, \
                            torch.no_grad():
                        warnings.simplefilter("always")
                        got = compiled(ids)
                        want = model(input_ids=ids, use_cache=False).logits
                    self.assertEqual(_partita_warnings(caught), [])
                    torch.testing.assert_close(got, want, rtol=1e-4,
                                               atol=1e-5)


if __name__ == "__main__":
    unittest.main()
