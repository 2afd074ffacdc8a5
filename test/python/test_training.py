"""Training equals torch's own training (issue 35): each fixture of
test/models/train/ is compiled with --train and run for 5 steps by
partita-run --train-steps on its batches; the losses of SGD (momentum and
weight decay) and AdamW, the step-0 gradient of every parameter and
--clip-grad-norm's run equal torch's, on one rank and sharded over dp and
tp. The references come from torch (make_train.py), never from Partita."""

import json
import subprocess

import numpy as np
import pytest

from conftest import BUILD, ROOT

TRAIN = ROOT / "test" / "models" / "train"
MANIFEST = json.loads((TRAIN / "manifest.json").read_text())
NAMES = sorted(MANIFEST["models"])
OPTIMIZERS = MANIFEST["optimizers"]
# Each mesh with its sequence mode: Megatron-SP, Ulysses and ring.
MESHES = [None, "dp=2", "tp=2", "dp=2,tp=2", "tp=2/megatron",
          "sp=2/ulysses", "sp=2/ring"]


def mesh_flags(mesh):
    if not mesh:
        return []
    axes, _, mode = mesh.partition("/")
    return ["--mesh", axes, *(["--sp-mode", mode] if mode else [])]


def reference(name):
    return np.load(TRAIN / f"{name}.train.npz")


def write_batches(directory, name):
    """The fixture's batches as --data expects them: one .npz per batch."""
    data = reference(name)
    directory.mkdir(parents=True, exist_ok=True)
    for step in range(5):
        np.savez(directory / f"batch{step}.npz",
                 **{key.split("/", 1)[1]: data[key] for key in data.files
                    if key.startswith(f"batch{step}/")})
    return directory


def compile_step(tmp_path, name, *flags, mesh=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    art = tmp_path / "art"
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(TRAIN / f"{name}.onnx"),
         "--train", "--loss", MANIFEST["loss"], *flags, *mesh_flags(mesh),
         "-o", str(art)],
        capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    return art


def run_steps(tmp_path, art, steps, data, *flags):
    out = tmp_path / "out"
    run = subprocess.run(
        [str(BUILD / "bin" / "partita-run"), str(art), "--train-steps",
         str(steps), "--data", str(data), "--output-dir", str(out), *flags],
        capture_output=True, text=True, timeout=300)
    return run, out


def train(tmp_path, name, steps, *flags, mesh=None):
    art = compile_step(tmp_path, name, *flags, mesh=mesh)
    run, out = run_steps(tmp_path, art, steps,
                         write_batches(tmp_path / "data", name))
    assert run.returncode == 0, run.stderr
    return run, out


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name", NAMES)
def test_losses_match_torch(tmp_path, name, optimizer, mesh):
    run, out = train(tmp_path, name, 5, "--optimizer",
                     OPTIMIZERS[optimizer]["flag"], mesh=mesh)
    losses = np.load(out / "loss.npy")
    assert losses.dtype == np.float32 and losses.shape == (5,)
    np.testing.assert_allclose(losses, reference(name)[f"{optimizer}/loss"],
                               rtol=1e-4)
    # One line per step, as docs/training.md shows it.
    lines = [line for line in run.stdout.splitlines()
             if line.startswith("step ")]
    assert len(lines) == 5 and lines[0].startswith("step 1/5 loss ")
    assert "tokens/s)" in lines[0]


@pytest.mark.parametrize("mesh", [None, "dp=2,tp=2"])
@pytest.mark.parametrize("name", NAMES)
def test_decomposed_attention_trains_alike(tmp_path, name, mesh):
    """--no-raise: attention as its matmuls, mask and softmax, each op's
    own rule instead of the flash backward."""
    _, out = train(tmp_path, name, 5, "--no-raise", "--optimizer",
                   OPTIMIZERS["adamw"]["flag"], mesh=mesh)
    np.testing.assert_allclose(np.load(out / "loss.npy"),
                               reference(name)["adamw/loss"], rtol=1e-4)


@pytest.mark.parametrize("mesh", MESHES + ["sp=4/ring", "dp=2,sp=2/ring"])
@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_torch(tmp_path, name, mesh):
    _, out = train(tmp_path, name, 1, "--optimizer", "sgd:lr=0",
                   "--output-gradients", mesh=mesh)
    data = reference(name)
    names = [key[len("grad/"):] for key in data.files
             if key.startswith("grad/")]
    for parameter in names:
        got = np.load(out / f"{parameter}.grad.npy")
        # atol: gradients that are zero in exact arithmetic (a key bias
        # under softmax) are rounding noise of 1e-10 on both sides.
        np.testing.assert_allclose(got, data[f"grad/{parameter}"], rtol=1e-4,
                                   atol=1e-6, err_msg=parameter)


@pytest.mark.parametrize("mesh", [None, "dp=2,tp=2"])
@pytest.mark.parametrize("name", NAMES)
def test_clip_grad_norm_matches_torch(tmp_path, name, mesh):
    clip = OPTIMIZERS["clip"]
    _, out = train(tmp_path, name, 5, "--optimizer",
                   OPTIMIZERS[clip["optimizer"]]["flag"], "--clip-grad-norm",
                   str(clip["clip_grad_norm"]), mesh=mesh)
    np.testing.assert_allclose(np.load(out / "loss.npy"),
                               reference(name)["clip/loss"], rtol=1e-4)


@pytest.mark.parametrize("mesh", [None, "dp=2", "tp=2", "sp=2/ring"])
def test_labels_out_of_range_are_refused_on_every_mesh(tmp_path, mesh):
    """torch raises IndexError for a label outside [0, classes) other than
    -100; every mesh refuses the step with the same message."""
    data = write_batches(tmp_path / "data", "gpt2")
    batch = dict(np.load(data / "batch0.npz"))
    batch["labels"][1, 3] = 128
    np.savez(data / "batch0.npz", **batch)
    art = compile_step(tmp_path, "gpt2", "--optimizer", "sgd:lr=0.1",
                       mesh=mesh)
    run, _ = run_steps(tmp_path, art, 1, data)
    assert run.returncode == 1
    assert ("label 128 at element 19 is outside [0, 128) and not -100"
            in run.stderr)


@pytest.mark.parametrize("mesh", [None, "dp=2,tp=2"])
def test_all_labels_ignored_gives_nan_as_torch(tmp_path, mesh):
    """Every label -100: torch's mean over no positions is 0/0, NaN, on
    every mesh and every step."""
    data = write_batches(tmp_path / "data", "gpt2")
    for step in range(5):
        batch = dict(np.load(data / f"batch{step}.npz"))
        batch["labels"][:] = -100
        np.savez(data / f"batch{step}.npz", **batch)
    art = compile_step(tmp_path, "gpt2", "--optimizer", "sgd:lr=0.1",
                       mesh=mesh)
    run, out = run_steps(tmp_path, art, 2, data)
    assert run.returncode == 0, run.stderr
    assert np.isnan(np.load(out / "loss.npy")).all()


@pytest.mark.parametrize("flags,message", [
    (["--loss", "cross_entropy:logits"], "--loss needs --train"),
    (["--train", "--optimizer", "sgd:lr=1"],
     "--train needs --loss cross_entropy:OUTPUT|mse:OUTPUT"),
    (["--train", "--loss", "hinge:logits", "--optimizer", "sgd:lr=1"],
     "unknown loss 'hinge'"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer",
      "adamw:lr=1,momentum=0.9"], "adamw has no key 'momentum'"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "lamb:lr=1"],
     "unknown optimizer 'lamb'"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd"],
     "gives no learning rate"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer",
      "sgd:lr=nan"], "lr='nan' is not a finite number"),
    (["--train", "--loss", "cross_entropy:nope", "--optimizer", "sgd:lr=1"],
     "nope"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd:lr=1",
      "--mesh", "pp=2"], "pipeline-parallel training is not supported yet"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd:lr=1",
      "--mesh", "ep=2"], "splits the experts of a mixture of experts "
     "(nn.moe), and the model has none"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd:lr=1",
      "--freeze", "("], "--freeze '(' is not a regular expression"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd:lr=1",
      "--clip-grad-norm", "-1"], "--clip-grad-norm must be 0 or more"),
    (["--train", "--loss", "cross_entropy:logits", "--optimizer", "sgd:lr=1",
      "--dtype", "bf16"], "--train trains fp32 parameters"),
    (["--grad-bucket-bytes", "1024"], "--grad-bucket-bytes needs --train"),
])
def test_training_flags_are_checked(tmp_path, flags, message):
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(TRAIN / "gpt2.onnx"),
         *flags, "-o", str(tmp_path / "art")],
        capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 1
    assert message in compiled.stderr
    assert not (tmp_path / "art").exists()


def test_freeze_keeps_weights_as_they_are(tmp_path):
    """A frozen initializer is a weight of the program, not a parameter:
    it gets no update and no gradient output."""
    art = compile_step(tmp_path, "gpt2", "--optimizer", "sgd:lr=0.1",
                       "--output-gradients", "--freeze", r"\.ln_")
    manifest = json.loads((art / "manifest.json").read_text())
    names = {p["name"] for p in manifest["training"]["parameters"]}
    assert len(names) == 28 - 10
    assert not any(".ln_" in name for name in names)
    assert {o["name"] for o in manifest["outputs"]} == (
        {"loss"} | {name + ".grad" for name in names})


def test_run_errors(tmp_path):
    art = compile_step(tmp_path, "gpt2", "--optimizer", "sgd:lr=0.1")
    data = write_batches(tmp_path / "data", "gpt2")
    run = subprocess.run(
        [str(BUILD / "bin" / "partita-run"), str(art), "--input",
         f"input_ids={tmp_path}/x.npy"], capture_output=True, text=True)
    assert run.returncode == 1 and "is a training artifact" in run.stderr
    for flags, message in [
        (["--train-steps", "2"], "--train-steps needs --data DIR"),
        (["--data", str(data)], "--data needs --train-steps N"),
        (["--train-steps", "0", "--data", str(data)],
         "--train-steps takes a positive number"),
        (["--train-steps", "1", "--data", str(tmp_path / "none")],
         "No such file or directory"),
        (["--train-steps", "1", "--data", str(data), "--lr-schedule",
          "cosine:warmup=2"], "needs total=M"),
        (["--train-steps", "1", "--data", str(data), "--lr-schedule",
          "step:total=3"], "expected constant, cosine"),
    ]:
        run = subprocess.run(
            [str(BUILD / "bin" / "partita-run"), str(art), *flags],
            capture_output=True, text=True, timeout=120)
        assert run.returncode == 1, flags
        assert message in run.stderr, (flags, run.stderr)
    # A batch without labels, and one with an array the step does not take.
    batch = dict(np.load(data / "batch0.npz"))
    labels = batch.pop("labels")
    np.savez(data / "batch0.npz", **batch)
    run, _ = run_steps(tmp_path, art, 1, data)
    assert run.returncode == 1 and "has no array 'labels'" in run.stderr
    np.savez(data / "batch0.npz", labels=labels, extra=labels, **batch)
    run, _ = run_steps(tmp_path, art, 1, data)
    assert run.returncode == 1 and "holds 'extra'" in run.stderr


def test_lr_schedule(tmp_path):
    """A schedule scales the compiled rate: linear warm-up over 2 steps of
    SGD without momentum halves the first step, which a constant schedule
    of half the rate reproduces."""
    data = write_batches(tmp_path / "data", "gpt2")
    half = compile_step(tmp_path / "half", "gpt2", "--optimizer",
                        "sgd:lr=0.05")
    run, out = run_steps(tmp_path / "half", half, 2, data)
    assert run.returncode == 0, run.stderr
    full = compile_step(tmp_path / "full", "gpt2", "--optimizer", "sgd:lr=0.1")
    run, warm = run_steps(tmp_path / "full", full, 2, data, "--lr-schedule",
                          "linear:warmup=2,total=10")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(warm / "loss.npy")[:2],
                               np.load(out / "loss.npy")[:2], rtol=1e-6)


def read_checkpoint(path):
    import partita
    return partita.read_checkpoint(path)


@pytest.mark.parametrize("mesh", [None, "dp=2,tp=2", "sp=2/ring"])
@pytest.mark.parametrize("name", NAMES)
def test_parameters_after_adamw_match_torch(tmp_path, name, mesh):
    """--save after 5 AdamW steps, read back as global tensors. AdamW
    divides each gradient by its running magnitude, so an element whose
    gradient is small (an embedding row a batch barely uses) moves by a
    full step on a gradient known to a few digits: each element must agree
    within 1% of one step (lr 0.01, so atol 1e-4) or rtol 1e-4. Elements
    whose gradient is zero in exact arithmetic (a key bias under softmax:
    |torch's step-0 gradient| < 1e-6, rounding noise on both sides) move
    by AdamW's normalized noise, differently in any two programs, and are
    not compared."""
    art = compile_step(tmp_path, name, "--optimizer",
                       OPTIMIZERS["adamw"]["flag"], mesh=mesh)
    run, _ = run_steps(tmp_path, art, 5, write_batches(tmp_path / "data", name),
                       "--save", str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    trained = read_checkpoint(tmp_path / "ckpt")
    data = reference(name)
    names = [key[len("adamw/param/"):] for key in data.files
             if key.startswith("adamw/param/")]
    assert sorted(n for n in trained if "/" not in n) == sorted(names)
    for parameter in names:
        want = data[f"adamw/param/{parameter}"]
        signal = np.abs(data[f"grad/{parameter}"]) > 1e-6
        np.testing.assert_allclose(trained[parameter][signal], want[signal],
                                   rtol=1e-4, atol=1e-4, err_msg=parameter)
        for state in ("exp_avg", "exp_avg_sq"):
            assert trained[f"{parameter}/{state}"].shape == want.shape


@pytest.mark.parametrize("mesh", [None, "dp=2,tp=2"])
def test_checkpoint_resumes_bit_for_bit(tmp_path, mesh):
    data = write_batches(tmp_path / "data", "gpt2")
    art = compile_step(tmp_path, "gpt2", "--optimizer",
                       OPTIMIZERS["adamw"]["flag"], mesh=mesh)
    run, whole = run_steps(tmp_path / "whole", art, 5, data)
    assert run.returncode == 0, run.stderr
    run, first = run_steps(tmp_path / "first", art, 3, data, "--save",
                           str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    run, rest = run_steps(tmp_path / "rest", art, 5, data, "--load",
                          str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0].startswith("step 4/5 loss ")
    resumed = np.concatenate([np.load(first / "loss.npy"),
                              np.load(rest / "loss.npy")])
    np.testing.assert_array_equal(resumed, np.load(whole / "loss.npy"))


def test_checkpoint_refusals(tmp_path):
    data = write_batches(tmp_path / "data", "gpt2")
    art = compile_step(tmp_path / "one", "gpt2", "--optimizer", "sgd:lr=0.1")
    run, _ = run_steps(tmp_path, art, 1, data, "--save",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    # Saving over an existing directory.
    run, _ = run_steps(tmp_path, art, 1, data, "--save",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 1 and "exists" in run.stderr
    # Nothing left to run.
    run, _ = run_steps(tmp_path, art, 1, data, "--load",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 1 and "none is left" in run.stderr
    # Another mesh.
    other = compile_step(tmp_path / "dp", "gpt2", "--optimizer", "sgd:lr=0.1",
                         mesh="dp=2")
    run, _ = run_steps(tmp_path, other, 2, data, "--load",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 1
    assert "onto another mesh is not supported yet" in run.stderr
    # Another optimizer.
    adamw = compile_step(tmp_path / "adamw", "gpt2", "--optimizer",
                         "adamw:lr=0.1")
    run, _ = run_steps(tmp_path, adamw, 2, data, "--load",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 1 and "holds sgd state" in run.stderr
    # A changed file.
    shard = tmp_path / "ckpt" / "rank0.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    run, _ = run_steps(tmp_path, art, 2, data, "--load",
                       str(tmp_path / "ckpt"))
    assert run.returncode == 1 and "does not match its hash" in run.stderr
    import partita
    with pytest.raises(partita.CheckpointError, match="does not match"):
        partita.read_checkpoint(tmp_path / "ckpt")


def test_fused_parameter_keeps_its_onnx_shape(tmp_path):
    """GPT-2's fused query/key/value parameter is held as its segments
    ([32, 3, 32], split over tp by the last dimension); the checkpoint
    records the initializer's shape, read_checkpoint gives it back, and a
    checkpoint.json whose onnx_shape cannot hold the tensor is refused."""
    import partita
    art = compile_step(tmp_path, "gpt2", "--optimizer",
                       OPTIMIZERS["adamw"]["flag"], mesh="tp=2")
    manifest = json.loads((art / "manifest.json").read_text())
    name = "model.transformer.h.0.attn.c_attn.weight"
    spec = next(p for p in manifest["training"]["parameters"]
                if p["name"] == name)
    assert spec["shape"] == [32, 3, 32] and spec["onnx_shape"] == [32, 96]
    assert spec["sharding"]["dims"] == [[], [], ["tp"]]
    run, _ = run_steps(tmp_path, art, 1, write_batches(tmp_path / "data",
                                                       "gpt2"),
                       "--save", str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    trained = partita.read_checkpoint(tmp_path / "ckpt")
    assert trained[name].shape == (32, 96)
    assert trained[f"{name}/exp_avg"].shape == (32, 96)
    assert trained[name.replace("weight", "bias")].shape == (96,)
    path = tmp_path / "ckpt" / "checkpoint.json"
    checkpoint = json.loads(path.read_text())
    for entry in checkpoint["parameters"]:
        if entry["name"] == name:
            entry["onnx_shape"] = [32, 95]
    path.write_text(json.dumps(checkpoint))
    with pytest.raises(partita.CheckpointError, match="does not hold"):
        partita.read_checkpoint(tmp_path / "ckpt")


def test_export_onnx_serves_the_trained_model(tmp_path):
    """The trained weights back in the ONNX model: onnxruntime on the
    export equals onnxruntime on the model with torch's trained weights
    put in by hand."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    import partita
    art = compile_step(tmp_path, "gpt2", "--optimizer",
                       OPTIMIZERS["adamw"]["flag"], mesh="dp=2,tp=2")
    run, _ = run_steps(tmp_path, art, 5, write_batches(tmp_path / "data",
                                                       "gpt2"),
                       "--save", str(tmp_path / "ckpt"))
    assert run.returncode == 0, run.stderr
    partita.export_onnx(tmp_path / "ckpt", TRAIN / "gpt2.onnx",
                        tmp_path / "trained.onnx")
    assert (tmp_path / "trained.onnx.data").exists()
    data = reference("gpt2")
    model = onnx.load(TRAIN / "gpt2.onnx")
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(
            data[f"adamw/param/{init.name}"], init.name))
    onnx.save(model, tmp_path / "torch.onnx")
    feeds = {key.split("/", 1)[1]: data[key] for key in data.files
             if key.startswith("batch0/") and not key.endswith("labels")}
    got = ort.InferenceSession(str(tmp_path / "trained.onnx"),
                               providers=["CPUExecutionProvider"]).run(
                                   None, feeds)[0]
    want = ort.InferenceSession(str(tmp_path / "torch.onnx"),
                                providers=["CPUExecutionProvider"]).run(
                                    None, feeds)[0]
    # The key biases' noise moves the scores by a constant per row, which
    # softmax removes: the logits agree closely.
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def batches(name):
    data = reference(name)
    return [{key.split("/", 1)[1]: data[key] for key in data.files
             if key.startswith(f"batch{step}/")} for step in range(5)]


@pytest.mark.parametrize("mesh", [None, {"dp": 2, "tp": 2}])
def test_python_train_step_matches_torch(tmp_path, mesh):
    """Artifact.train_step: the same steps from Python, and a checkpoint
    saved there, read back, and loaded to continue."""
    import partita
    art = partita.compile(str(TRAIN / "llama.onnx"), train=True,
                          loss=MANIFEST["loss"],
                          optimizer=OPTIMIZERS["sgd"]["flag"], mesh=mesh)
    losses = [art.train_step(batch) for batch in batches("llama")]
    np.testing.assert_allclose(losses, reference("llama")["sgd/loss"],
                               rtol=1e-4)
    assert art.training_steps == 5
    art.save_checkpoint(tmp_path / "ckpt")
    trained = partita.read_checkpoint(tmp_path / "ckpt")
    assert "model.lm_head.weight/momentum_buffer" in trained
    again = partita.compile(str(TRAIN / "llama.onnx"), train=True,
                            loss=MANIFEST["loss"],
                            optimizer=OPTIMIZERS["sgd"]["flag"], mesh=mesh)
    again.load_checkpoint(tmp_path / "ckpt")
    assert again.training_steps == 5
    batch = batches("llama")[0]
    assert again.train_step(batch) == art.train_step(batch)


def test_python_train_step_errors(tmp_path):
    import partita
    art = partita.compile(str(TRAIN / "gpt2.onnx"), train=True,
                          loss=MANIFEST["loss"], optimizer="sgd:lr=0.1")
    batch = batches("gpt2")[0]
    with pytest.raises(partita.RunError, match="runs one step at a time"):
        art.run({"input_ids": batch["input_ids"]})
    with pytest.raises(partita.RunError, match="missing batch input 'labels'"):
        art.train_step({k: v for k, v in batch.items() if k != "labels"})
    with pytest.raises(partita.RunError, match="no batch input 'lr'"):
        art.train_step({**batch, "lr": np.float32(1)})
    with pytest.raises(ValueError, match="lr must be a finite number"):
        art.train_step(batch, lr=float("nan"))
    with pytest.raises(ValueError, match="lr must be a finite number"):
        art.train_step(batch, lr=-1.0)
    bad = dict(batch, labels=np.full_like(batch["labels"], 500))
    with pytest.raises(partita.RunError, match="label 500 at element 0"):
        art.train_step(bad)
    assert art.training_steps == 0
    with pytest.raises(partita.RunError, match="exists"):
        (tmp_path / "there").mkdir()
        art.save_checkpoint(tmp_path / "there")
    inference = partita.compile(str(TRAIN / "gpt2.onnx"))
    with pytest.raises(partita.RunError, match="has no training step"):
        inference.train_step(batch)


def test_c_api_train_step(tmp_path):
    """partita_session_train_step through ctypes, as a C caller makes it."""
    import ctypes
    import sys
    sys.path.insert(0, str(ROOT / "fuzz"))
    from api import I64, P, SIZE, Tensor

    art = compile_step(tmp_path, "gpt2", "--optimizer",
                       OPTIMIZERS["sgd"]["flag"], mesh="dp=2")
    lib = ctypes.CDLL(str(BUILD / "lib" / "libpartita.so"))
    lib.partita_session_load_path.argtypes = [ctypes.c_char_p, P,
                                              ctypes.POINTER(P)]
    lib.partita_session_load_path.restype = P
    lib.partita_session_train_step.argtypes = [
        P, ctypes.POINTER(Tensor), SIZE, ctypes.c_double,
        ctypes.POINTER(ctypes.c_float)]
    lib.partita_session_train_step.restype = P
    lib.partita_session_training_steps.argtypes = [P]
    lib.partita_session_training_steps.restype = I64
    lib.partita_status_message.argtypes = [P]
    lib.partita_status_message.restype = ctypes.c_char_p
    lib.partita_session_destroy.argtypes = [P]
    session = P()
    assert not lib.partita_session_load_path(str(art).encode(), None,
                                             ctypes.byref(session))
    losses = []
    for batch in batches("gpt2"):
        arrays = [np.ascontiguousarray(batch[name])
                  for name in ("input_ids", "attention_mask", "labels")]
        shapes = [(ctypes.c_int64 * a.ndim)(*a.shape) for a in arrays]
        tensors = (Tensor * 3)(*[
            Tensor(name.encode(), 3, a.ndim, shape, a.ctypes.data)
            for name, a, shape in zip(("input_ids", "attention_mask",
                                       "labels"), arrays, shapes)])
        loss = ctypes.c_float()
        status = lib.partita_session_train_step(session, tensors, 3,
                                                float("nan"),
                                                ctypes.byref(loss))
        assert not status, lib.partita_status_message(status)
        losses.append(loss.value)
    assert lib.partita_session_training_steps(session) == 5
    status = lib.partita_session_train_step(session, tensors, 3, -1.0,
                                            ctypes.byref(loss))
    assert b"lr must be a finite number" in lib.partita_status_message(status)
    lib.partita_session_destroy(session)
    np.testing.assert_allclose(losses, reference("gpt2")["sgd/loss"],
                               rtol=1e-4)


def report_collectives(tmp_path, name, mesh, *flags):
    """Rank 0's collectives in the report of a step: (kind, axes) ->
    (count, payload bytes)."""
    report = tmp_path / "report.json"
    compile_step(tmp_path, name, "--optimizer", "adamw:lr=1e-3",
                 "--report", str(report), *flags, mesh=mesh)
    rank = json.loads(report.read_text())["ranks"][0]
    return {(c["kind"], tuple(c["axes"])): (c["count"], c["payload"])
            for c in rank["collectives"]}


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "gpt_neox"])
def test_data_parallel_reduces_each_gradient_once(tmp_path, name):
    # The closed form: 2(n-1)/n x the gradients' bytes (the payload, at
    # n=2), plus the loss's two scalars. Rows of an embedding that no
    # position of the batch reads have a zero gradient on every rank, and
    # are not reduced (GPT-2's and BERT's 64 positions, 16 read). GPT-NeoX
    # adds attention and MLP to the same residual, so the two output
    # biases of a layer have one gradient, reduced once for both. Without
    # buckets, so that each reduction is counted.
    collectives = report_collectives(tmp_path, name, "dp=2",
                                     "--grad-bucket-bytes", "0")
    assert set(collectives) == {("all_reduce", ("dp",))}
    count, payload = collectives[("all_reduce", ("dp",))]
    model = MANIFEST["models"][name]
    gradient_bytes = 4 * model["parameter_elements"]
    unread = shared = 0
    if name in ("gpt2", "bert"):
        unread = (64 - model["sequence"]) * 32 * 4
    if name == "gpt_neox":
        shared = 2
    assert count == model["parameters"] - shared + 2
    assert payload == gradient_bytes - unread - shared * 32 * 4 + 8


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_tensor_parallel_layer_reduces_twice_each_way(tmp_path, name):
    # At tp=2: per layer two all-reduces of b*s*h in the forward and two
    # in the backward (Megatron's), plus the vocabulary-parallel
    # embedding's and the LM head's input gradient; the loss moves scalars
    # per position (max, sum of exponentials) and the loss itself. GPT-2's
    # fused query/key/value parameter is held as its segments, so that
    # each rank holds its heads of all three and nothing is gathered.
    model = MANIFEST["models"][name]
    bsh = model["batch"] * model["sequence"] * 32 * 4
    collectives = report_collectives(tmp_path, name, "tp=2",
                                     "--grad-bucket-bytes", "0")
    assert set(collectives) == {("all_reduce", ("tp",))}
    count, payload = collectives[("all_reduce", ("tp",))]
    layers = 2
    positions = model["batch"] * model["sequence"] * 4
    big = 4 * layers + 2
    assert count == big + 5 + 1
    assert payload == big * bsh + 5 * positions + 4


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_gradients_are_reduced_in_buckets(tmp_path, name):
    # The same bytes as one reduction per gradient, in fewer collectives:
    # at the default 25 MiB, one bucket of every gradient and one of the
    # loss's two scalars; at 4 KiB, a bucket closes before it would pass
    # 4,096 bytes (a gradient larger than that is reduced alone). GPT-2's
    # position embedding gradient is reduced at the 16 rows the batch
    # reads and then spread over the table inside the backward, before the
    # tied token embedding's gradient is complete: that use closes the
    # bucket, and the token embedding's gradient is reduced alone.
    single = report_collectives(tmp_path / "single", name, "dp=2",
                                "--grad-bucket-bytes", "0")
    default = report_collectives(tmp_path / "default", name, "dp=2")
    small = report_collectives(tmp_path / "small", name, "dp=2",
                               "--grad-bucket-bytes", "4096")
    key = ("all_reduce", ("dp",))
    count, payload = single[key]
    assert default[key] == ({"gpt2": 3, "llama": 2}[name], payload)
    assert small[key][1] == payload
    assert 2 < small[key][0] < count


@pytest.mark.parametrize("mesh", ["dp=2", "dp=2,tp=2"])
def test_bucket_size_leaves_training_unchanged(tmp_path, mesh):
    # Buckets sum each element over the same ranks: the losses of 5 AdamW
    # steps equal torch's whatever the bucket size.
    for size in ("0", "256"):
        _, out = train(tmp_path / size, "llama", 5, "--optimizer",
                       OPTIMIZERS["adamw"]["flag"], "--grad-bucket-bytes",
                       size, mesh=mesh)
        np.testing.assert_allclose(np.load(out / "loss.npy"),
                                   reference("llama")["adamw/loss"],
                                   rtol=1e-4)


@pytest.mark.parametrize("mesh", ["ep=2", "dp=2,ep=2"])
def test_mixture_of_experts_trains_over_ep(tmp_path, mesh):
    """The Mixtral fixture's experts split over ep (each rank holds,
    updates and computes half of them, on every token of its dp share)
    train equal to torch: AdamW's losses over 5 steps and every
    parameter's step-0 gradient; each rank holds less than the whole
    model's parameters."""
    report = tmp_path / "report.json"
    _, out = train(tmp_path / "adamw", "mixtral", 5, "--optimizer",
                   OPTIMIZERS["adamw"]["flag"], "--report", str(report),
                   mesh=mesh)
    np.testing.assert_allclose(np.load(out / "loss.npy"),
                               reference("mixtral")["adamw/loss"], rtol=1e-4)
    whole = MANIFEST["models"]["mixtral"]["parameter_elements"] * 4
    for rank in json.loads(report.read_text())["ranks"]:
        assert rank["weight_bytes"] < whole, (rank["weight_bytes"], whole)
    _, out = train(tmp_path / "grad", "mixtral", 1, "--optimizer", "sgd:lr=0",
                   "--output-gradients", mesh=mesh)
    data = reference("mixtral")
    for key in data.files:
        if key.startswith("grad/"):
            parameter = key[len("grad/"):]
            np.testing.assert_allclose(
                np.load(out / f"{parameter}.grad.npy"), data[key], rtol=1e-4,
                atol=1e-6, err_msg=parameter)
