"""Activation memory and collective traffic per rank of sequence parallelism
on generated GPT graphs (bench/gen_gpt.py), against tensor parallelism alone
and against one rank.

For each sequence length it compiles the model on one rank and with
`--mesh tp=T`, `--mesh tp=T --sp-mode megatron`, `--mesh sp=N --sp-mode
ulysses` and `--mesh sp=N --sp-mode ring`, and reads rank 0 of the report
(`--report`): `peak_activation_bytes` (the arena of the buffer plan) and the
collectives. Nothing is run: both are known at compile time. It also
recomputes, from rank 0's `--emit exec` program, the largest set of
activations live at one instruction (the same lifetimes and 64-byte rounding
as the plan): the least any arena could be, so that a ratio of arenas can be
told apart from the slack of the plan's placement.

The baseline of a `megatron` row is tensor parallelism on the same tp (what
Megatron-SP changes); that of every other row is one rank. The expected
traffic is computed from the model's dimensions (b batch, s sequence,
h hidden, V vocabulary, L layers; S = b·s·h·4 bytes, one activation), per
rank and forward, under the report's ring convention (all_reduce 2(n-1)/n
of its buffer, all_gather and reduce_scatter (n-1)/n of the whole buffer,
all_to_all (n-1)/n of the rank's input, collective_permute all of it):

- tp=T: 2L+1 all-reduces of S (one after attention and one after the MLP
  of every layer, one after the vocab-parallel embedding), one all-gather of
  the logits (b·s·V·4);
- megatron: each of those all-reduces becomes a reduce-scatter and an
  all-gather of S, with the same bytes;
- ulysses: 4 all-to-alls per layer (q, k, v to heads, the output back),
  each of the rank's S/N;
- ring: per layer N-1 steps, each rotating a key and a value block
  (b·(s/N)·h·4) and the block's positions ((s/N)·8, causal only); with
  `--window W` (every layer a sliding window of W keys) only up to the
  last step whose key blocks some rank's rows see within their window
  (computed here from the layout the report names, contiguous or zigzag);
- every sp row: one all-gather of the logits.

`--run` also runs the first model's one-rank artifact and that of the given
mode with partita-run and checks that their logits agree.
Usage: sequence_parallel_bench.py [--seqs 256,1024,2048] [--layers 4]
           [--hidden 256] [--heads 8] [--vocab 512] [--batch 1] [--window W]
           [--tp 2,4] [--sp 2,4] [--run "tp=2 megatron"] [--build-dir build]
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"
ARENA_ALIGNMENT = 64  # --partita-plan-buffers rounds every activation up to this.
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "BOOL": 1}


def modes(tps, sps):
    """(label, ranks, compiler flags, baseline label) in table order."""
    rows = [("1 rank", 1, [], None)]
    for t in tps:
        rows.append((f"tp={t}", t, ["--mesh", f"tp={t}"], "1 rank"))
        rows.append((f"tp={t} megatron", t, ["--mesh", f"tp={t}", "--sp-mode", "megatron"],
                     f"tp={t}"))
    for kind in ("ulysses", "ring"):
        for n in sps:
            rows.append((f"sp={n} {kind}", n, ["--mesh", f"sp={n}", "--sp-mode", kind],
                         "1 rank"))
    return rows


def ring_rotations(seq, n, window, zigzag):
    """How many times ring attention rotates its key blocks: N - 1, or with
    a sliding window up to the last step t at which some rank i's rows see
    a key of block (i - t) mod N within their window."""
    if not window:
        return n - 1
    order = list(range(seq))
    if zigzag:
        chunk, per = seq // (2 * n), seq // n
        order = [(r if o < chunk else 2 * n - 1 - r) * chunk + o % chunk
                 for r, o in (divmod(i, per) for i in range(seq))]
    blocks = [order[p * (seq // n):(p + 1) * (seq // n)] for p in range(n)]
    last = 0
    for t in range(1, n):
        if any(0 <= q - k < window for i in range(n) for q in blocks[i]
               for k in blocks[(i - t) % n]):
            last = t
    return last


def expected(label, dims):
    """{kind: (count, bytes)} a rank sends per forward, from the dimensions."""
    b, s, h, vocab, layers = (dims[k] for k in ("batch", "seq", "hidden", "vocab", "layers"))
    act, logits = b * s * h * 4, b * s * vocab * 4
    if label == "1 rank":
        return {}
    mesh, _, kind = label.partition(" ")
    n = int(mesh.split("=")[1])
    gather_logits = (n - 1) * logits // n
    if mesh.startswith("tp") and not kind:
        return {"all_reduce": (2 * layers + 1, (2 * layers + 1) * 2 * (n - 1) * act // n),
                "all_gather": (1, gather_logits)}
    if kind == "megatron":
        pairs = 2 * layers + 1
        return {"reduce_scatter": (pairs, pairs * (n - 1) * act // n),
                "all_gather": (pairs + 1, pairs * (n - 1) * act // n + gather_logits)}
    if kind == "ulysses":
        return {"all_to_all": (4 * layers, 4 * layers * (n - 1) * (act // n) // n),
                "all_gather": (1, gather_logits)}
    if kind == "ring":
        steps = layers * ring_rotations(s, n, dims["window"], dims["zigzag"])
        block, positions = b * (s // n) * h * 4, (s // n) * 8
        return {"collective_permute": (3 * steps, steps * (2 * block + positions)),
                "all_gather": (1, gather_logits)}
    raise ValueError(label)


def generate(seq, args, path):
    subprocess.run([sys.executable, str(GEN), str(args.layers), path,
                    "--hidden", str(args.hidden), "--heads", str(args.heads),
                    "--seq", str(seq), "--vocab", str(args.vocab),
                    "--batch", str(args.batch), "--window", str(args.window)],
                   check=True, capture_output=True)


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        # The first line of a diagnostic says what failed.
        error = (proc.stderr.strip().splitlines() or ["no message"])[0]
        return None, error
    return proc.stdout, None


def largest_live_set(program):
    """The largest sum of activation sizes live at one instruction of the
    text-format exec program of rank 0, with the plan's lifetimes: from the
    instruction that writes a buffer to the last that reads it or a view of
    it."""
    program = program.split("\n# rank 1\n")[0]
    sizes, alias_of = {}, {}
    for block in re.findall(r"^buffers \{\n(.*?)^\}", program, re.S | re.M):
        ident = re.search(r"^  id: (\d+)$", block, re.M)
        ident = int(ident.group(1)) if ident else 0  # proto3 text omits zeros.
        kind = re.search(r"^  kind: (\w+)$", block, re.M).group(1)
        if kind == "ALIAS":
            alias_of[ident] = int(re.search(r"alias_of: (\d+)", block).group(1))
        elif kind == "ACTIVATION":
            size = DTYPE_BYTES[re.search(r"dtype: (\w+)", block).group(1)]
            for extent in re.findall(r"shape: (\d+)", block):
                size *= int(extent)
            sizes[ident] = max(ARENA_ALIGNMENT, -(-size // ARENA_ALIGNMENT) * ARENA_ALIGNMENT)

    def root(ident):
        while ident in alias_of:
            ident = alias_of[ident]
        return ident

    first, last = {}, {}
    for index, block in enumerate(re.findall(r"^instructions \{\n(.*?)^\}", program,
                                             re.S | re.M)):
        reads = [int(v) for v in re.findall(r"operands?: (-?\d+)", block)]
        writes = [int(v) for v in re.findall(r"results?: (\d+)", block)]
        if "collective {" in block:  # Singular fields: an omitted one is buffer 0.
            reads, writes = reads or [0], writes or [0]
        for ident in writes:
            first.setdefault(root(ident), index)
            last[root(ident)] = max(last.get(root(ident), index), index)
        for ident in reads:
            if ident >= 0:
                last[root(ident)] = index
    events = sorted([(first[i], 0, sizes[i]) for i in sizes if i in first] +
                    [(last[i], 1, -sizes[i]) for i in sizes if i in first])
    live = peak = 0
    for _, _, delta in events:  # Ends sort after starts at one instruction.
        live += delta
        peak = max(peak, live)
    return peak


def compile_row(compiler, model, flags, work):
    art, report = os.path.join(work, "art"), os.path.join(work, "report.json")
    _, error = run([compiler, model, *flags, "-o", art, "--report", report])
    if error:
        return None, error
    with open(report) as f:
        data = json.load(f)
    program, error = run([compiler, model, *flags, "--emit", "exec"])
    if error:
        return None, error
    rank0 = data["ranks"][0]
    collectives = {c["kind"]: (c["count"], c["bytes"]) for c in rank0["collectives"]}
    return {"peak": rank0["peak_activation_bytes"],
            "live": largest_live_set(program),
            "collectives": collectives,
            "sent": sum(c["bytes"] for c in rank0["collectives"]),
            "same_on_all_ranks": all(r["peak_activation_bytes"] == rank0["peak_activation_bytes"]
                                     and r["collectives"] == rank0["collectives"]
                                     for r in data["ranks"]),
            "sequence_parallel": data.get("sequence_parallel"),
            "art": art}, None


def mib(n):
    return f"{n / 2**20:.3f}"


def partita_run(runner, art, ids_path, out, args):
    stdout, error = run([runner, art, "--input", f"input_ids={ids_path}",
                         "--output-dir", out, "--repeat", str(args.repeat), "--warmup", "1"])
    if error:
        sys.exit(f"partita-run {art}: {error}")
    latency = float(re.search(r"latency: mean ([0-9.]+) ms", stdout).group(1))
    return latency, np.load(os.path.join(out, "logits.npy"))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seqs", default="256,1024,2048")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--window", type=int, default=0,
                        help="a sliding window of this many keys (0: causal)")
    parser.add_argument("--tp", default="2,4", help="tensor-parallel sizes")
    parser.add_argument("--sp", default="2,4", help="sequence-parallel sizes")
    parser.add_argument("--run", metavar="MODE",
                        help='run the first model in this mode (a row label, e.g. '
                        '"tp=2 megatron") and on one rank, and compare their logits')
    parser.add_argument("--repeat", type=int, default=5, help="timed runs for --run")
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    args = parser.parse_args()

    seqs = [int(s) for s in args.seqs.split(",")]
    rows = modes([int(t) for t in args.tp.split(",")], [int(n) for n in args.sp.split(",")])
    bin_dir = pathlib.Path(args.build_dir) / "bin"
    compiler, runner = str(bin_dir / "partita-compile"), str(bin_dir / "partita-run")
    if args.run and args.run not in [label for label, *_ in rows]:
        sys.exit(f"--run {args.run!r}: not one of {[label for label, *_ in rows]}")

    print(f"layers {args.layers}, hidden {args.hidden}, heads {args.heads}, "
          f"vocabulary {args.vocab}, batch {args.batch}, window "
          f"{args.window or 'none'}; rank 0 of each report\n")
    print("| seq | mode | ranks | peak activation (MiB) | vs baseline | largest live set (MiB) "
          "| vs baseline | sent per rank (MiB) | collectives (count) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    checks, failures, notes = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seq in seqs:
            model = os.path.join(tmp, f"gpt_s{seq}.onnx")
            generate(seq, args, model)
            dims = {"batch": args.batch, "seq": seq, "hidden": args.hidden,
                    "vocab": args.vocab, "layers": args.layers,
                    "window": args.window, "zigzag": False}
            results = {}
            for row, (label, ranks, flags, baseline) in enumerate(rows):
                work = os.path.join(tmp, f"s{seq}_{row}")
                os.makedirs(work)
                result, error = compile_row(compiler, model, flags, work)
                command = " ".join(["partita-compile", f"gpt_s{seq}.onnx", *flags])
                if error:
                    failures.append(f"{command}: {error}")
                    print(f"| {seq} | {label} | {ranks} | fails | | | | | |", flush=True)
                    continue
                results[label] = result
                base = results.get(baseline) if baseline else result

                def ratio(key):
                    return f"{result[key] / base[key]:.3f}" if base else "–"

                kinds = ", ".join(f"{kind} ({count})"
                                  for kind, (count, _) in result["collectives"].items()) or "–"
                print(f"| {seq} | {label} | {ranks} | {mib(result['peak'])} | {ratio('peak')} "
                      f"| {mib(result['live'])} | {ratio('live')} | {mib(result['sent'])} "
                      f"| {kinds} |", flush=True)
                if not result["same_on_all_ranks"]:
                    notes.append(f"{command}: ranks differ in memory or collectives")
                plan = result["sequence_parallel"]
                if plan and plan.get("mode") == "ring" and seq == seqs[0]:
                    notes.append(f"{command}: imbalance {plan.get('imbalance')}, "
                                 f"contiguous {plan.get('contiguous_imbalance'):.3f}")
                dims["zigzag"] = bool(plan and plan.get("zigzag"))
                want = expected(label, dims)
                got = result["collectives"]
                for kind in sorted(set(want) | set(got)):
                    checks.append((seq, label, kind, got.get(kind, (0, 0)),
                                   want.get(kind, (0, 0))))
                if label.endswith("megatron"):
                    # Megatron-SP's reduce-scatters and all-gathers (the logits'
                    # all-gather aside) against the all-reduces they replace.
                    plain = results.get(label.split()[0])
                    if plain:
                        n = ranks
                        logits = (n - 1) * args.batch * seq * args.vocab * 4 // n
                        scatter = got.get("reduce_scatter", (0, 0))
                        pair = scatter[1] + got.get("all_gather", (0, 0))[1] - logits
                        checks.append((seq, label, "rs + ag vs all_reduce", (scatter[0], pair),
                                       plain["collectives"].get("all_reduce", (0, 0))))
            if args.run and seq == seqs[0] and args.run in results and "1 rank" in results:
                ids = np.random.default_rng(0).integers(0, args.vocab, (args.batch, seq),
                                                        dtype=np.int64)
                ids_path = os.path.join(tmp, "ids.npy")
                np.save(ids_path, ids)
                ran = {}
                for label in ("1 rank", args.run):
                    out = os.path.join(tmp, f"out_{len(ran)}")
                    ran[label] = partita_run(runner, results[label]["art"], ids_path, out, args)
                diff = float(np.abs(ran[args.run][1] - ran["1 rank"][1]).max())
                notes.append(f"partita-run, seq {seq}: 1 rank {ran['1 rank'][0]:.1f} ms, "
                             f"{args.run} {ran[args.run][0]:.1f} ms (mean of {args.repeat}); "
                             f"max abs diff of the logits {diff:.2g}")
            for result in results.values():
                shutil.rmtree(os.path.dirname(result["art"]))
            os.remove(model)

    print("\nTraffic per rank and forward, measured (report) against expected "
          "(the model's dimensions):\n")
    print("| seq | mode | collective | count | expected | bytes | expected | |")
    print("|---:|---|---|---:|---:|---:|---:|---|")
    mismatches = 0
    for seq, label, kind, (count, sent), (want_count, want_sent) in checks:
        ok = count == want_count and sent == want_sent
        mismatches += not ok
        print(f"| {seq} | {label} | {kind} | {count} | {want_count} | {sent} | {want_sent} "
              f"| {'ok' if ok else 'MISMATCH'} |")
    for note in notes:
        print(f"- {note}")
    for failure in failures:
        print(f"- fails: {failure}")
    if mismatches or failures:
        sys.exit(f"{mismatches} mismatches, {len(failures)} failed compiles")


if __name__ == "__main__":
    main()
