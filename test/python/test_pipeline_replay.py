"""partita-opt replays partita-compile: for every committed model
(test/models, examples/, test/models/hf), `partita-compile --emit nn`,
`--emit dist` and `--emit local` print exactly what partita-opt prints
running the registered pipeline with the same options
(--partita-nn-pipeline on `--emit import`'s output, --partita-plan-pipeline
and --partita-shard-pipeline on `--emit nn`'s), and rank 1's program of
`--emit exec` (tp=2) is what --partita-exec-pipeline='rank=1' on
`--emit local`'s output, then partita-translate --exec-to-proto, writes.

The stage before is printed with --mlir-print-debuginfo: the passes name
ONNX nodes (in dist.reason) from the locations, which the default printer
leaves out. Every run is a process of a few tenths of a second; they run on
a thread pool, all of them once for the module, and each test checks one
model."""

import concurrent.futures
import json
import os
import subprocess

import pytest

from conftest import BUILD, ROOT
from test_hf_models import binding, load_inputs

MODELS = ROOT / "test" / "models"
HF = MODELS / "hf"
HF_MANIFEST = json.loads((HF / "manifest.json").read_text())

# The option sets, as pipeline options; each model runs the first and two
# more in turn, so that every set meets models of each family (all sets on
# all models take twice as long). Ring attention needs self-attention over
# the whole sequence, which a KV-cache step does not have.
OPTION_SETS = [
    {"mesh": "tp=2"},
    {"mesh": "dp=2,tp=2", "overlap": "false"},
    {"mesh": "pp=2", "microbatches": "2"},
    {"mesh": "tp=2", "sp-mode": "megatron", "collective-matmul": "always",
     "dtype": "bf16"},
    {"mesh": "sp=2", "sp-mode": "ulysses", "collective-matmul": "never"},
    {"mesh": "sp=2", "sp-mode": "ring", "dtype": "fp16"},
]
KV_UNSUPPORTED = {"ring"}


def compile_flags(options):
    """partita-compile's flags for pipeline `options`."""
    flags = []
    for key, value in options.items():
        if key == "overlap":
            flags += [] if value == "true" else ["--no-overlap"]
        else:
            flags += [f"--{key}", value]
    return flags


def pipeline_options(options):
    return " ".join(f"{key}={value}" for key, value in options.items())


def models():
    """(id, path, kv, --bind flags) of every committed model."""
    out = []
    for path in sorted(MODELS.glob("*.onnx")):
        bind = (["--bind", "batch=2,seq=16"]
                if path.stem.endswith("_dynamic") else [])
        out.append((path.stem, path, path.stem.endswith("_kv"), bind))
    out.append(("examples-gpt2", ROOT / "examples" / "gpt2" / "model.onnx",
                False, []))
    for name in sorted(HF_MANIFEST):
        model, inputs = load_inputs(name)
        out.append((f"hf-{name}", HF / name,
                    HF_MANIFEST[name]["kind"] == "kv",
                    binding(model, inputs)))
    return out


MODEL_LIST = models()


def option_sets(index, kv):
    """The option sets model number `index` runs."""
    usable = [s for s in OPTION_SETS[1:]
              if not (kv and s.get("sp-mode") in KV_UNSUPPORTED)]
    chosen = [usable[(2 * index + k) % len(usable)] for k in range(2)]
    return [OPTION_SETS[0]] + chosen


def run(*args):
    done = subprocess.run([str(a) for a in args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))}:\n{done.stderr}")
    return done.stdout


def replay(index, path, kv, bind, workdir):
    """Mismatches of model number `index`, as messages (empty: none)."""
    compile_ = BUILD / "bin" / "partita-compile"
    opt = BUILD / "bin" / "partita-opt"
    problems = []
    imported = workdir / f"{index}-import.mlir"
    run(compile_, path, *bind, "--emit", "import", "--mlir-print-debuginfo",
        "-o", imported)
    nn_inputs = {}
    for options in option_sets(index, kv):
        nn_key = options.get("dtype", "fp32")
        if nn_key not in nn_inputs:
            nn = workdir / f"{index}-{nn_key}.mlir"
            run(compile_, path, *bind, "--emit", "nn",
                *(["--dtype", nn_key] if nn_key != "fp32" else []),
                "--mlir-print-debuginfo", "-o", nn)
            nn_inputs[nn_key] = nn
            replayed = run(opt, imported,
                           f"--partita-nn-pipeline=dtype={nn_key}",
                           "--mlir-print-debuginfo")
            if nn.read_text() != replayed:
                problems.append(f"--emit nn --dtype {nn_key} differs from "
                                f"partita-opt --partita-nn-pipeline")
        flags = compile_flags(options)
        text = pipeline_options(options)
        for emit, pipeline in [("dist", "partita-plan-pipeline"),
                               ("local", "partita-shard-pipeline")]:
            try:
                compiled = run(compile_, path, *bind, *flags, "--emit", emit)
                replayed = run(opt, nn_inputs[nn_key], f"--{pipeline}={text}")
            except AssertionError as failed:
                problems.append(str(failed))
                continue
            if compiled != replayed:
                problems.append(f"--emit {emit} {' '.join(flags)} differs "
                                f"from partita-opt --{pipeline}='{text}'")

    # The exec stage of rank 1 on tp=2: its pipeline, then the translation.
    local = workdir / f"{index}-local.mlir"
    run(compile_, path, *bind, "--mesh", "tp=2", "--emit", "local",
        "--mlir-print-debuginfo", "-o", local)
    planned = workdir / f"{index}-rank1.mlir"
    run(opt, local, "--partita-exec-pipeline=rank=1",
        "--mlir-print-debuginfo", "-o", planned)
    replayed = run(BUILD / "bin" / "partita-translate", "--exec-to-proto",
                   planned)
    programs = run(compile_, path, *bind, "--mesh", "tp=2", "--emit", "exec")
    if programs.split("# rank 1\n", 1)[-1] != replayed:
        problems.append("rank 1 of --emit exec --mesh tp=2 differs from "
                        "partita-opt --partita-exec-pipeline=rank=1 | "
                        "partita-translate --exec-to-proto")
    return problems


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("replay")
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        futures = {
            name: pool.submit(replay, index, path, kv, bind, workdir)
            for index, (name, path, kv, bind) in enumerate(MODEL_LIST)}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("name", [m[0] for m in MODEL_LIST])
def test_partita_opt_replays_partita_compile(replays, name):
    assert replays[name] == []
