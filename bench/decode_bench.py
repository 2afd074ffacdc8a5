#!/usr/bin/env python3
"""Per-token decode latency of a serving artifact (partita-compile --max-seq)
against onnxruntime running the same export in a greedy loop with IOBinding:
the cache stays in OrtValues, each step's present bound as the next step's
past, nothing copied but the logits.

The model is a GPT-2-small-shaped decoder with past key values, exported by
optimum (bench/make_decode_model.py writes it to /tmp/decode/gpt2s_kv.onnx;
it needs the export virtual environments, never CI). Both sides run greedy
generation from the same random prompt, on one host rank and the same
number of threads, and both sides' tokens are compared.

    python3 bench/decode_bench.py [--model M] [--batch 1 8] [--prompt 128]
        [--new-tokens 64] [--threads 2] [--repeats 3]
"""

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("PARTITA_BUILD_DIR", ROOT / "build"))
sys.path.insert(0, str(BUILD / "python"))
import partita  # noqa: E402


def ort_loop(session, ids, steps):
    """Greedy generation with IOBinding: (tokens, ttft, step seconds)."""
    batch, length = ids.shape
    inputs = {i.name: i for i in session.get_inputs()}
    pasts = [n for n in inputs if n.startswith("past")]
    presents = [n.replace("past_key_values", "present") for n in pasts]
    mask = np.ones((batch, length), np.int64)
    binding = session.io_binding()

    def bind_step(token_ids, mask, positions, past_values):
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        binding.bind_cpu_input("input_ids", token_ids)
        binding.bind_cpu_input("attention_mask", mask)
        if "position_ids" in inputs:
            binding.bind_cpu_input("position_ids", positions)
        for name, value in zip(pasts, past_values):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output("logits", "cpu")
        for name in presents:
            binding.bind_output(name, "cpu")

    empty = [ort.OrtValue.ortvalue_from_numpy(
        np.zeros((batch, inputs[n].shape[1], 0, inputs[n].shape[3]),
                 np.float32)) for n in pasts]
    tokens, times = [], []
    start = time.perf_counter()
    bind_step(ids, mask, np.arange(length, dtype=np.int64)[None].repeat(
        batch, 0), empty)
    session.run_with_iobinding(binding)
    outputs = binding.get_outputs()
    token = outputs[0].numpy()[:, -1].argmax(-1)
    ttft = time.perf_counter() - start
    tokens.append(token)
    for step in range(1, steps):
        begin = time.perf_counter()
        mask = np.ones((batch, length + step), np.int64)
        position = np.full((batch, 1), length + step - 1, np.int64)
        bind_step(token[:, None].astype(np.int64), mask, position,
                  outputs[1:])
        session.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        token = outputs[0].numpy()[:, -1].argmax(-1)
        times.append(time.perf_counter() - begin)
        tokens.append(token)
    return np.stack(tokens, 1), ttft, times


def summary(ttft, steps, batch):
    steps_ms = sorted(t * 1e3 for t in steps)
    return {
        "ttft_ms": ttft * 1e3,
        "mean_ms": statistics.mean(steps_ms),
        "p50_ms": steps_ms[len(steps_ms) // 2],
        "p99_ms": steps_ms[min(len(steps_ms) - 1,
                               int(round(0.99 * (len(steps_ms) - 1))))],
        "tokens_per_s": batch * len(steps) / sum(steps),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="/tmp/decode/gpt2s_kv.onnx")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"{args.model} is missing: make it with "
                 "bench/make_decode_model.py (needs /work/venv-hf and "
                 "/work/venv-opt)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(args.model, options,
                                   providers=["CPUExecutionProvider"])
    results = []
    max_seq = args.prompt + args.new_tokens
    for batch in args.batch:
        ids = np.random.default_rng(batch).integers(
            0, 50257, size=(batch, args.prompt)).astype(np.int64)
        with tempfile.TemporaryDirectory() as tmp:
            artifact_dir = pathlib.Path(tmp) / "art"
            begin = time.perf_counter()
            subprocess.run(
                [BUILD / "bin" / "partita-compile", args.model, "-o",
                 artifact_dir, "--bind",
                 f"batch_size={batch},sequence_length={args.prompt}",
                 "--max-seq", str(max_seq)], check=True)
            compile_s = time.perf_counter() - begin
            artifact = partita.load(artifact_dir)
            # Warm both (page in the weights), then alternate the runs so
            # that the machine's drift falls on both alike.
            artifact.generate(ids, 2)
            ort_loop(session, ids, 2)
            ours, theirs = [], []
            for _ in range(args.repeats):
                tokens = artifact.generate(ids, args.new_tokens)
                t = artifact.last_timings
                ours.append(summary(t["prefill_seconds"], t["step_seconds"],
                                    batch))
                want, ttft, steps = ort_loop(session, ids, args.new_tokens)
                theirs.append(summary(ttft, steps, batch))
            match = float((tokens == want).mean())
            del artifact
        best = lambda runs: max(runs, key=lambda r: r["tokens_per_s"])
        row = {"batch": batch, "partita": best(ours),
               "onnxruntime": best(theirs), "token_match": match,
               "compile_seconds": compile_s}
        row["ratio"] = (row["partita"]["tokens_per_s"] /
                        row["onnxruntime"]["tokens_per_s"])
        results.append(row)
        print(f"batch {batch}: partita {row['partita']['mean_ms']:.1f} ms/step "
              f"(p50 {row['partita']['p50_ms']:.1f}, p99 "
              f"{row['partita']['p99_ms']:.1f}), "
              f"{row['partita']['tokens_per_s']:.1f} tokens/s, ttft "
              f"{row['partita']['ttft_ms']:.0f} ms | onnxruntime "
              f"{row['onnxruntime']['mean_ms']:.1f} ms/step (p50 "
              f"{row['onnxruntime']['p50_ms']:.1f}, p99 "
              f"{row['onnxruntime']['p99_ms']:.1f}), "
              f"{row['onnxruntime']['tokens_per_s']:.1f} tokens/s, ttft "
              f"{row['onnxruntime']['ttft_ms']:.0f} ms | ratio "
              f"{row['ratio']:.2f}, tokens equal {match:.0%}", flush=True)
    info = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor()
            or platform.machine(), "cpus": os.cpu_count(),
            "onnxruntime": ort.__version__, "threads": args.threads,
            "prompt": args.prompt, "new_tokens": args.new_tokens,
            "results": results}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
