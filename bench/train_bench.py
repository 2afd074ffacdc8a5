"""One training step (forward, backward, AdamW) of a GPT-2-small shaped
model (12 layers, hidden 768, 12 heads, vocabulary 50257, batch 4,
sequence 256) on host ranks against torch's eager CPU training step of the
same model with the same threads, and tp=2 against one rank. Prints a
Markdown table: mean step time, tokens per second, peak resident memory,
and the first step's loss of each (they start from the same weights and
batch, so they agree).

The model is transformers' GPT2LMHeadModel with random weights (seed 0,
every dropout 0), exported by torch.onnx with do_constant_folding=False,
as docs/training.md asks. Needs torch and transformers (run it with a
venv's python, e.g. /work/venv-train/bin/python).
Usage: train_bench.py [--threads 2] [--steps 3] [--layers 12] [--seq 256]
"""

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
LR = 1e-4
ADAMW = f"adamw:lr={LR},beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01"


def build_model(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=args.layers, n_embd=768, n_head=12,
                        vocab_size=50257, n_positions=1024, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config).eval()


class Logits:
    def __init__(self, model):
        self.model = model

    def __call__(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def export(model, path, batch, seq):
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    ids = torch.zeros((batch, seq), dtype=torch.int64)
    torch.onnx.export(Wrapper(model), (ids,), str(path), opset_version=17,
                      input_names=["input_ids"], output_names=["logits"],
                      do_constant_folding=False)


def batch_of(batch, seq):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50257, (batch, seq), dtype=np.int64)
    labels = np.concatenate([ids[:, 1:], np.full((batch, 1), -100)], axis=1)
    return ids, labels.astype(np.int64)


def torch_step(args, ids, labels):
    """In a child process, so that its peak memory is its own."""
    code = f"""
import json, resource, sys, time, torch
sys.path.insert(0, {str(ROOT / 'bench')!r})
from train_bench import build_model
import numpy as np
torch.set_num_threads({args.threads})
class A: pass
a = A(); a.layers = {args.layers}
model = build_model(a).train()
opt = torch.optim.AdamW(model.parameters(), lr={LR}, betas=(0.9, 0.999),
                        eps=1e-8, weight_decay=0.01)
ids = torch.from_numpy(np.load(sys.argv[1]))
labels = torch.from_numpy(np.load(sys.argv[2]))
times, losses = [], []
for step in range({args.steps} + 1):
    start = time.perf_counter()
    logits = model(input_ids=ids, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - start)
    losses.append(loss.item())
print(json.dumps({{"times": times[1:], "loss0": losses[0],
                   "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""
    out = subprocess.run([sys.executable, "-c", code, str(ids), str(labels)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def partita_step(args, model, work, mesh, data):
    art = work / f"art-{mesh or 'one'}"
    subprocess.run([str(BIN / "partita-compile"), str(model), "--train",
                    "--loss", "cross_entropy:logits", "--optimizer", ADAMW,
                    *(["--mesh", mesh] if mesh else []), "-o", str(art)],
                   check=True)
    ranks = 2 if mesh else 1
    out = subprocess.run(
        ["/usr/bin/time", "-v", str(BIN / "partita-run"), str(art),
         "--train-steps", str(args.steps + 1), "--data", str(data),
         "--threads", str(max(1, args.threads // ranks)),
         "--output-dir", str(work / "out")],
        check=True, capture_output=True, text=True)
    times = [float(m) / 1000 for m in
             re.findall(r"loss \S+\s+\(([0-9.]+) ms", out.stdout)]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                        out.stderr).group(1))
    loss0 = float(np.load(work / "out" / "loss.npy")[0])
    return {"times": times[1:], "loss0": loss0, "rss": rss}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        model = build_model(args)
        export(model, work / "gpt2.onnx", args.batch, args.seq)
        ids, labels = batch_of(args.batch, args.seq)
        np.save(work / "ids.npy", ids)
        np.save(work / "labels.npy", labels)
        (work / "data").mkdir()
        np.savez(work / "data" / "batch0.npz", input_ids=ids, labels=labels)
        tokens = args.batch * args.seq
        rows = [("torch eager", torch_step(args, work / "ids.npy",
                                           work / "labels.npy"))]
        for mesh in [None, "tp=2"]:
            rows.append((f"Partita, {mesh or '1 rank'}",
                         partita_step(args, work / "gpt2.onnx", work, mesh,
                                      work / "data")))
        base = np.mean(rows[0][1]["times"])
        print(f"{args.layers} layers, batch {args.batch}, sequence "
              f"{args.seq}, {args.threads} threads, AdamW, "
              f"{args.steps} timed steps after one warm-up\n")
        print("| run | step (s) | tokens/s | vs torch | peak RSS (GB) | "
              "step-0 loss |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in rows:
            step = float(np.mean(r["times"]))
            print(f"| {name} | {step:.2f} | {tokens / step:.0f} | "
                  f"{base / step:.2f} | {r['rss'] / 1e6:.2f} | "
                  f"{r['loss0']:.5f} |")


if __name__ == "__main__":
    main()
