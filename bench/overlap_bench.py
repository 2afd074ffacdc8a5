"""Communication hidden behind compute, two ways.

1. Planned (the report's timeline, under the default cluster model: an
   H100-class device, NVLink within a node): the GPT-2 shape scaled to
   hidden 4096 (32 heads), sequence 4096, one layer, on tp=8 with
   Megatron-SP, compiled three ways: synchronous collectives
   (--no-overlap), async start/wait with the latency-hiding schedule but no
   collective matmul, and with collective matmul. It prints rank 0's
   compute, communication and exposed (not hidden) communication time and
   the exposed fraction of the step, in fp32 and with --dtype bf16.

2. The bound (issue 18): on `h100-80g`, tp=8, bf16, s=4096, h in {4096,
   8192}, Megatron-SP and collective matmul, the exposed communication of
   one transformer layer against max(0, C - K) + 0.1 C, where C is the
   layer's communication time and K the compute that can run beside it.
   A layer's figures are the difference between the 2-layer and the
   1-layer model (the embedding and the LM head cancel). C and K come from
   the synchronous program's timeline (--collective-matmul never): C its
   collectives, K its matmuls (what collective matmul pipelines the
   collectives with). The bound is given twice: for the layer's totals, and
   per collective, sum of max(0, C_i - K_i) + 0.1 C, with K_i the matmul
   next to collective i (the all-gather before it, the reduce-scatter
   after it): a collective can only hide behind the matmul it feeds or is
   fed by, since one forward microbatch has no other compute beside it.
   The achieved figure is the exposed communication of the program with
   collective matmul (--collective-matmul always).

3. Measured on this machine's host backend: a smaller model (hidden 512,
   sequence 512) on tp=2 (two host ranks as threads), run with
   partita-run --repeat, synchronous against overlapped; the wall-time
   ratio is what overlap buys on the host (the communicator copies through
   memory, so expect little).

Usage: overlap_bench.py [--build-dir build] [--repeat 20] [--skip-large]
                        [--only-bound]
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"


def generate(path, layers, hidden, heads, seq, vocab, batch=1, *extra):
    subprocess.run([sys.executable, str(GEN), str(layers), str(path),
                    "--hidden", str(hidden), "--heads", str(heads),
                    "--seq", str(seq), "--vocab", str(vocab),
                    "--batch", str(batch), *extra],
                   check=True, capture_output=True)


def timeline(compiler, model, work, *flags):
    """Rank 0's report time and its trace events (compute tid 0,
    communication tid 1; microseconds)."""
    out, trace = work / "report.json", work / "trace.json"
    subprocess.run([str(compiler), str(model), "--emit", "exec", "-o",
                    "/dev/null", "--report", str(out), "--trace", str(trace),
                    *flags], check=True, capture_output=True)
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("pid", 0) == 0 and e.get("ph") == "X"]
    return json.loads(out.read_text())["ranks"][0]["time"], events


def beside(events):
    """(C, K, sum of max(0, C_i - K_i)) in seconds: the collectives, the
    matmuls, and each collective's excess over the matmul next to it."""
    comm = [e for e in events if e["tid"] == 1]
    matmuls = [e for e in events if e["tid"] == 0 and e["name"] == "matmul"]
    excess = 0.0
    for c in comm:
        # The matmul that starts as the collective ends (an all-gather
        # feeding it) or ends as it starts (a reduce-scatter of its result).
        near = [m["dur"] for m in matmuls
                if abs(m["ts"] - (c["ts"] + c["dur"])) < 0.05
                or abs(m["ts"] + m["dur"] - c["ts"]) < 0.05]
        excess += max(0.0, c["dur"] - (max(near) if near else 0.0))
    return (sum(c["dur"] for c in comm) * 1e-6,
            sum(m["dur"] for m in matmuls) * 1e-6, excess * 1e-6)


def bound(build, work):
    compiler = build / "bin" / "partita-compile"
    flags = ["--mesh", "tp=8", "--sp-mode", "megatron", "--dtype", "bf16",
             "--cluster", "h100-80g"]
    print("| h (tp=8, bf16, s=4096, h100-80g) | C (ms) | K (ms) | bound: "
          "totals (ms) | bound: per collective (ms) | achieved (ms) | "
          "achieved / C |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for hidden in (4096, 8192):
        figures = {}
        for layers in (1, 2):
            model = work / f"bound_h{hidden}_l{layers}.onnx"
            # Sparse weights: --emit exec reads shapes, never weight bytes.
            generate(model, layers, hidden, hidden // 128, 4096, 512, 1,
                     "--sparse")
            _, sync = timeline(compiler, model, work, *flags,
                               "--collective-matmul", "never")
            time, _ = timeline(compiler, model, work, *flags,
                               "--collective-matmul", "always")
            figures[layers] = beside(sync) + (
                time["exposed_communication_seconds"],)
        c, k, excess, exposed = (b - a for a, b in zip(figures[1], figures[2]))
        totals = max(0.0, c - k) + 0.1 * c
        each = excess + 0.1 * c
        print(f"| {hidden} | {c * 1e3:.3f} | {k * 1e3:.3f} | "
              f"{totals * 1e3:.3f} | {each * 1e3:.3f} | {exposed * 1e3:.3f} | "
              f"{exposed / c:.3f} |")


def report(compiler, model, work, *flags):
    out = work / "report.json"
    subprocess.run([str(compiler), str(model), "--emit", "exec", "-o",
                    "/dev/null", "--report", str(out), *flags],
                   check=True, capture_output=True)
    return json.loads(out.read_text())


def planned(build, work):
    model = work / "gpt_h4096_s4096.onnx"
    generate(model, 1, 4096, 32, 4096, 512)
    compiler = build / "bin" / "partita-compile"
    rows = []
    for dtype in ["fp32", "bf16"]:
        for label, flags in [
                ("synchronous (--no-overlap)", ["--no-overlap"]),
                ("async + schedule", ["--collective-matmul", "never"]),
                ("async + schedule + collective matmul",
                 ["--collective-matmul", "always"])]:
            r = report(compiler, model, work, "--mesh", "tp=8", "--sp-mode",
                       "megatron", "--dtype", dtype, *flags)
            t = r["ranks"][0]["time"]
            rows.append((f"{dtype}: {label}", t))
    print("| program (tp=8, Megatron-SP, h=4096, s=4096, 1 layer) | compute (ms) "
          "| communication (ms) | exposed (ms) | step (ms) | exposed / step |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t['compute_seconds'] * 1e3:.3f} | "
              f"{t['communication_seconds'] * 1e3:.3f} | "
              f"{t['exposed_communication_seconds'] * 1e3:.3f} | "
              f"{t['step_seconds'] * 1e3:.3f} | {t['exposed_fraction']:.3f} |")


def measured(build, work, repeat):
    model = work / "gpt_h512_s512.onnx"
    generate(model, 2, 512, 8, 512, 512)
    ids = work / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(0, 512, (1, 512),
                                                    dtype=np.int64))
    compiler = build / "bin" / "partita-compile"
    runner = build / "bin" / "partita-run"
    rows = []
    for label, flags in [("synchronous", ["--no-overlap"]),
                         ("overlapped", ["--collective-matmul", "always"])]:
        art = work / label
        subprocess.run([str(compiler), str(model), "--mesh", "tp=2",
                        "--sp-mode", "megatron", "-o", str(art), *flags],
                       check=True, capture_output=True)
        run = subprocess.run([str(runner), str(art), "--input",
                              f"input_ids={ids}", "--repeat", str(repeat),
                              "--warmup", "3"],
                             check=True, capture_output=True, text=True)
        m = re.search(r"latency: mean ([0-9.]+) ms, min ([0-9.]+) ms",
                      run.stdout)
        rows.append((label, float(m.group(1)), float(m.group(2))))
    print()
    print("| host, tp=2 (2 ranks), h=512, s=512, 2 layers | mean (ms) | "
          "min (ms) |")
    print("|---|---:|---:|")
    for label, mean, best in rows:
        print(f"| {label} | {mean:.2f} | {best:.2f} |")
    print(f"\noverlapped / synchronous (min): {rows[1][2] / rows[0][2]:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-large", action="store_true",
                        help="only the host measurement")
    parser.add_argument("--only-bound", action="store_true",
                        help="only the bound of the h100-80g layer")
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        if args.only_bound:
            bound(build, work)
            return
        if not args.skip_large:
            planned(build, work)
            print()
            bound(build, work)
            print()
        measured(build, work, args.repeat)


if __name__ == "__main__":
    main()
