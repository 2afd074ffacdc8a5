"""Expert parallelism on host ranks: a mixture-of-experts layer of
Mixtral's shape ratio (hidden 1024, 8 experts, top 2, FFN 3584, SwiGLU) as
onnxruntime's fused com.microsoft.MoE, run three ways in one process each:
on one rank; over ep=2 with the tokens dispatched to their experts
(dist.dispatch, the batch split over ep); and over ep=2 with the tokens
whole on both ranks and the experts' outputs all-reduced (the form for a
batch that ep does not divide: one token fewer). Prints a Markdown table
of latency, the report's bytes per rank, and the dispatch line of
partita-run. Every run is checked against onnxruntime.
Usage: moe_dispatch_bench.py [--repeat 3] [--tokens 2048]
"""

import argparse
import pathlib
import re
import sys
import tempfile

import numpy as np
import onnx

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "test" / "python"))
from test_moe_import import moe_model  # noqa: E402

from e2e_bench import onnxruntime  # noqa: E402
from moe_bench import partita  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    hidden, inter, experts, k = 1024, 3584, 8, 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, tokens, mesh, threads in (
                ("1 rank", args.tokens, None, 2),
                ("ep=2, tokens dispatched", args.tokens, "ep=2", 1),
                ("ep=2, outputs all-reduced", args.tokens - 1, "ep=2", 1)):
            model, feeds, _ = moe_model(
                tokens=tokens, hidden=hidden, inter=inter, experts=experts,
                k=k, activation="swiglu", fusion=1, normalize=1,
                attrs=dict(activation_alpha=1.702, activation_beta=1.0))
            case = tmp / str(len(rows))
            case.mkdir()
            path = case / "moe.onnx"
            onnx.save(model, str(path), save_as_external_data=True,
                      location="moe.data")
            _, want = onnxruntime(path, feeds, 2, 1)
            work = case / "work"
            work.mkdir()
            ms, got, report, out = partita(
                path, feeds, work, threads, args.repeat,
                *(["--mesh", mesh] if mesh else []))
            collectives = report["ranks"][0]["collectives"]
            dispatch = re.search(r"^dispatch: .*$", out, re.M)
            dispatch = dispatch.group(0) if dispatch else ""
            error = np.abs(got - want).max() / np.abs(want).max()
            assert error < 1e-4, (name, error)
            sent = sum(c["bytes"] for c in collectives)
            kinds = ", ".join(f"{c['kind']} x{c['count']}"
                              for c in collectives) or "none"
            rows.append((name, tokens, ms, kinds, sent, dispatch, error))
    print("| run | tokens | Partita (ms) | collectives (rank 0) | "
          "estimated bytes sent per rank | max rel. error |")
    print("|---|---|---|---|---|---|")
    for name, tokens, ms, kinds, sent, _, error in rows:
        print(f"| {name} | {tokens} | {ms:.1f} | {kinds} | {sent:,} | "
              f"{error:.1e} |")
    for name, *_, dispatch, _ in rows:
        if dispatch:
            print(f"\n{name}: `{dispatch}`")


if __name__ == "__main__":
    main()
