"""Compile time and memory of a large model against the floor of its I/O.

For each mesh and dtype it runs `partita-compile MODEL --mesh M [--dtype D]
-o ART` (the compiler fsyncs what it writes; a `sync` after it is counted
too) and measures:
- wall time, against the floor: reading the weights once (`cat DATA
  >/dev/null`) plus writing the artifact's weight bytes once (random bytes
  from memory, fsync, then `sync`, into the same directory), both measured
  in the same run with the page cache in the state the compile saw (warm
  where the data fits in memory: it is read once before anything is timed;
  cold where it does not, for the compile and the floor alike);
- peak memory: ru_maxrss of the finished process (what `/usr/bin/time`
  reports: file-backed pages included), and the largest RssAnon and RssFile
  seen by sampling /proc/PID/status every 5 ms (RssAnon is the compiler's
  own memory; RssFile is the mapped input and artifact pages it touched,
  which the kernel can drop at will);
- the artifact's weight bytes (weights/*.safetensors) against the model's
  (fp32 external data, halved for bf16/fp16).

A second table puts the compile without its weight I/O (`--emit exec`, every
rank planned and translated, nothing written) beside `partita-opt
--canonicalize --cse` on the model's nn IR (unsharded: those passes take no
mesh). The nn IR is printed once with its weights elided (`--emit nn
--mlir-elide-resource-strings-if-larger=64`) and kept beside the model.

Usage: compile_bench.py MODEL.onnx [--meshes "1;tp=8;dp=2,tp=4,pp=2"]
           [--dtypes fp32,bf16] [--repeat 1] [--work DIR] [--no-exec]
           [--build-dir build]
A model comes from bench/gen_gpt.py --external; "1" is one rank (no --mesh).
Prints Markdown tables (and --json FILE for the raw figures).
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import onnx
from onnx import TensorProto

ROOT = pathlib.Path(__file__).resolve().parent.parent


def mesh_args(mesh):
    return [] if mesh == "1" else ["--mesh", mesh]


def model_weight_bytes(model_path):
    """(external data files, fp32 bytes of the model's float initializers)."""
    model = onnx.load(str(model_path), load_external_data=False)
    files = set()
    floats = 0
    for init in model.graph.initializer:
        count = 1
        for dim in init.dims:
            count *= dim
        if init.data_type == TensorProto.FLOAT:
            floats += 4 * count
        if init.data_location == TensorProto.EXTERNAL:
            for entry in init.external_data:
                if entry.key == "location":
                    files.add(model_path.parent / entry.value)
    return sorted(files), floats


def status_fields(pid):
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    fields[key] = int(value.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return fields


def measured(cmd, stdout=subprocess.DEVNULL):
    """Runs cmd, sampling its memory; returns (wall s, peaks, rc, stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    peaks = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        for key, value in status_fields(proc.pid).items():
            if key in peaks:
                peaks[key] = max(peaks[key], value)
        time.sleep(0.005)
    wall = time.perf_counter() - start
    peaks["maxrss"] = usage.ru_maxrss * 1024
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return wall, peaks, os.waitstatus_to_exitcode(status), stderr


def timed(cmd, **kwargs):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, **kwargs)
    return time.perf_counter() - start


def sync():
    return timed(["sync"])


def artifact_weight_bytes(art):
    return sum(p.stat().st_size for p in (art / "weights").glob("*.safetensors"))


def write_synced(path, nbytes):
    """Writes nbytes of random bytes to path, fsyncs and syncs; returns s.

    The bytes come from one buffer in memory, so the time is the write alone
    (a copy from the model's data would add a read wherever the data does not
    fit in the page cache)."""
    chunk = os.urandom(16 << 20)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, memoryview(chunk)[:min(left, len(chunk))])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    return elapsed + sync()


def floor(data_files, write_bytes, work):
    """Reading the weights once plus writing write_bytes and syncing."""
    read = sum(timed(["cat", str(f)], stdout=subprocess.DEVNULL)
               for f in data_files)
    out = work / "floor.bin"
    write = write_synced(out, write_bytes)
    out.unlink()
    return read, write


def nn_ir(compiler, model, work):
    """The model's nn IR with its weights elided, printed once and kept."""
    path = work / (model.stem + "-nn.mlir")
    if not path.exists() or path.stat().st_mtime < model.stat().st_mtime:
        subprocess.run([compiler, str(model), "--emit", "nn",
                        "--mlir-elide-resource-strings-if-larger=64",
                        "-o", str(path)], check=True)
    return path


def best_of(rows):
    """One row per mesh and dtype: the least compile and floor times of the
    repeats (each measured beside its own floor) and the largest memory."""
    merged = {}
    for r in rows:
        key = (r["mesh"], r["dtype"])
        if key not in merged:
            merged[key] = dict(r)
            continue
        m = merged[key]
        for field in ("wall", "floor_read", "floor_write"):
            m[field] = min(m[field], r[field])
        for field in ("maxrss", "RssAnon", "RssFile", "VmRSS"):
            m[field] = max(m[field], r[field])
    return list(merged.values())


def mib(n):
    return f"{n / 2**20:.0f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=pathlib.Path)
    parser.add_argument("--meshes", default="1;tp=8;dp=2,tp=4,pp=2")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=pathlib.Path,
                        help="where artifacts are written (default: beside the model)")
    parser.add_argument("--no-exec", action="store_true",
                        help="skip the --emit exec / canonicalize+cse table")
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()

    bindir = ROOT / args.build_dir / "bin"
    compiler = str(bindir / "partita-compile")
    opt = str(bindir / "partita-opt")
    model = args.model.resolve()
    work = (args.work or model.parent).resolve()
    work.mkdir(parents=True, exist_ok=True)
    meshes = args.meshes.split(";")
    dtypes = args.dtypes.split(",")
    data_files, fp32_bytes = model_weight_bytes(model)
    if not data_files:
        sys.exit(f"{model}: no external data (generate it with gen_gpt.py --external)")

    # Warm the page cache: every timed step then starts from the same state.
    for f in data_files:
        timed(["cat", str(f)], stdout=subprocess.DEVNULL)

    rows = []
    art = work / "compile-bench.art"
    for _ in range(args.repeat):
        for dtype in dtypes:
            for mesh in meshes:
                shutil.rmtree(art, ignore_errors=True)
                cmd = [compiler, str(model), *mesh_args(mesh), "--dtype", dtype,
                       "-o", str(art)]
                wall, peaks, rc, stderr = measured(cmd)
                if rc != 0:
                    sys.exit(f"{' '.join(cmd)}: exit {rc}\n{stderr}")
                wall += sync()
                written = artifact_weight_bytes(art)
                shutil.rmtree(art)
                sync()
                read, write = floor(data_files, written, work)
                expected = fp32_bytes // (1 if dtype == "fp32" else 2)
                rows.append({"mesh": mesh, "dtype": dtype, "wall": wall,
                             "floor_read": read, "floor_write": write,
                             "artifact_bytes": written, "weight_bytes": expected,
                             **peaks})

    raw_rows = rows
    rows = best_of(rows)
    print(f"model: {model.name}, {fp32_bytes / 1e9:.2f} GB of fp32 weights; "
          f"times are the best of {args.repeat} run(s), memory the largest\n")
    print("| mesh | dtype | compile | floor (read + write) | ratio | "
          "ru_maxrss | RssAnon peak | RssFile peak | artifact / weights |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        fl = r["floor_read"] + r["floor_write"]
        print(f"| {r['mesh']} | {r['dtype']} | {r['wall']:.2f} s | "
              f"{fl:.2f} s ({r['floor_read']:.2f} + {r['floor_write']:.2f}) | "
              f"{r['wall'] / fl:.2f}x | {mib(r['maxrss'])} | {mib(r['RssAnon'])} | "
              f"{mib(r['RssFile'])} | {r['artifact_bytes'] / r['weight_bytes']:.4f} |")

    exec_rows = []
    if not args.no_exec:
        ir = nn_ir(compiler, model, work)
        for _ in range(args.repeat):
            for mesh in meshes:
                wall_exec, peaks, rc, stderr = measured(
                    [compiler, str(model), *mesh_args(mesh), "--emit", "exec",
                     "-o", os.devnull])
                if rc != 0:
                    sys.exit(f"--emit exec {mesh}: exit {rc}\n{stderr}")
                wall_opt, opt_peaks, rc, stderr = measured(
                    [opt, str(ir), "--canonicalize", "--cse", "-o", os.devnull])
                if rc != 0:
                    sys.exit(f"partita-opt: exit {rc}\n{stderr}")
                exec_rows.append({"mesh": mesh, "exec": wall_exec,
                                  "exec_maxrss": peaks["maxrss"],
                                  "canonicalize_cse": wall_opt,
                                  "opt_maxrss": opt_peaks["maxrss"]})
        best = {}
        for r in exec_rows:
            b = best.setdefault(r["mesh"], dict(r))
            b["exec"] = min(b["exec"], r["exec"])
            b["canonicalize_cse"] = min(b["canonicalize_cse"], r["canonicalize_cse"])
            b["exec_maxrss"] = max(b["exec_maxrss"], r["exec_maxrss"])
        print(f"\nnn IR: {ir.name}, {ir.stat().st_size / 1e3:.0f} kB with its weights elided\n")
        print("| mesh | --emit exec | canonicalize + cse | ratio | "
              "--emit exec ru_maxrss |")
        print("| --- | --- | --- | --- | --- |")
        for r in best.values():
            print(f"| {r['mesh']} | {r['exec']:.2f} s | {r['canonicalize_cse']:.2f} s | "
                  f"{r['exec'] / r['canonicalize_cse']:.1f}x | {mib(r['exec_maxrss'])} |")

    if args.json:
        args.json.write_text(json.dumps({"compile": raw_rows, "exec": exec_rows}, indent=1))


if __name__ == "__main__":
    main()
