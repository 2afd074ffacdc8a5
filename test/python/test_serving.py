"""Serving (--max-seq): a prefill and a decode program in one artifact, the
KV cache resident on its ranks, and greedy generation in the runtime, token
for token and logit for logit against a greedy loop over the same export in
onnxruntime (test/models/hf's optimum KV-cache fixtures)."""

import json
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from conftest import BUILD, ROOT, check_bf16_steps, check_greedy_generation
from conftest import serving_prompt as prompt

HF = ROOT / "test" / "models" / "hf"
COMPILE = BUILD / "bin" / "partita-compile"
RUN = BUILD / "bin" / "partita-run"
# Prompts of 6 tokens, the second left-padded by 2, in a prefill compiled
# for 8: the runtime pads both rows further, as Hugging Face would.
PROMPT = 8
MAX_SEQ = 48
NEW_TOKENS = 32


def positions(mask):
    """Hugging Face's position ids: cumsum(mask) - 1, 1 where masked."""
    p = np.cumsum(mask, -1) - 1
    p[mask == 0] = 1
    return p


def ort_greedy(path, ids, mask, steps, step_path=None):
    """Greedy generation with onnxruntime over the export, the cache fed
    back as the next step's past: (tokens [batch, steps], logits [steps,
    batch, vocab]). With `step_path`, `path` computes the prompt and
    `step_path` the steps (optimum's pair); a merged decoder is fed
    use_cache_branch."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sessions = [ort.InferenceSession(str(p), options,
                                     providers=["CPUExecutionProvider"])
                for p in (path, step_path or path)]
    batch = ids.shape[0]
    feeds = {"input_ids": ids, "attention_mask": mask}
    results = {}
    tokens, logits = [], []
    for step in range(steps):
        session = sessions[min(step, 1)]
        names = [i.name for i in session.get_inputs()]
        if "position_ids" in names:
            feeds["position_ids"] = positions(mask)[:, -feeds[
                "input_ids"].shape[1]:]
        if "use_cache_branch" in names:
            feeds["use_cache_branch"] = np.array([step > 0])
        for past in session.get_inputs():
            if past.name.startswith("past"):
                present = past.name.replace("past_key_values", "present")
                feeds[past.name] = results.get(present, np.zeros(
                    (batch, past.shape[1], 0, past.shape[3]), np.float32))
        outputs = [o.name for o in session.get_outputs()]
        results = dict(zip(outputs, session.run(None, feeds)))
        last = results["logits"][:, -1]
        token = last.argmax(-1).astype(np.int64)
        tokens.append(token)
        logits.append(last)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
        feeds = {"input_ids": token[:, None], "attention_mask": mask}
    return np.stack(tokens, 1), np.stack(logits)


_REFERENCE = {}


def export(name):
    """The fixture's export: optimum's, or where optimum has none (Mixtral)
    torch.onnx's of the same step (test/models/hf/make_hf.py)."""
    if name == "mixtral_kv":
        return HF / "mixtral_kv.legacy.onnx"
    return HF / f"{name}.optimum.onnx"


def reference(name):
    if name not in _REFERENCE:
        ids, mask = prompt()
        _REFERENCE[name] = ort_greedy(export(name), ids, mask, NEW_TOKENS)
    return _REFERENCE[name]


def compile_serving(directory, name, *flags, max_seq=MAX_SEQ, model=None):
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "art"
    subprocess.run(
        [COMPILE, model or export(name), "-o", out, "--bind",
         f"batch_size=2,sequence_length={PROMPT}", "--max-seq", str(max_seq),
         *flags], check=True, capture_output=True, text=True)
    return out


def compile_reported(directory, name, *flags):
    """compile_serving with --report: (artifact, the report's serving)."""
    report = directory / "report.json"
    artifact = compile_serving(directory, name, *flags, "--report", report)
    return artifact, json.loads(report.read_text())


def generate(directory, artifact, steps=NEW_TOKENS):
    ids, mask = prompt()
    np.save(directory / "ids.npy", ids)
    np.save(directory / "mask.npy", mask)
    result = subprocess.run(
        [RUN, artifact, "--generate", str(steps), "--input",
         f"input_ids={directory / 'ids.npy'}", "--input",
         f"attention_mask={directory / 'mask.npy'}", "--dump-logits",
         "--output-dir", directory / "out"],
        check=True, capture_output=True, text=True)
    return (np.load(directory / "out" / "tokens.npy"),
            np.load(directory / "out" / "logits.npy"), result.stdout)


MESHES = [
    [],
    ["--mesh", "tp=2"],
    ["--mesh", "tp=4"],
    ["--mesh", "dp=2"],
    ["--mesh", "pp=2", "--microbatches", "2"],
]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: " ".join(m) or "1")
@pytest.mark.parametrize("name", ["gpt2_kv", "llama_kv", "qwen2_kv"])
def test_generation_matches_onnxruntime(tmp_path, name, mesh):
    artifact = compile_serving(tmp_path, name, *mesh)
    tokens, logits, stdout = generate(tmp_path, artifact)
    want_tokens, want_logits = reference(name)
    check_greedy_generation(tokens, logits, want_tokens, want_logits)
    for line in ("time to first token", "per-token latency", "tokens/s",
                 "kv cache"):
        assert line in stdout


@pytest.mark.parametrize("mesh", MESHES + [
    ["--mesh", "ep=2"], ["--mesh", "ep=2,tp=2"], ["--mesh", "dp=2,ep=2"]],
    ids=lambda m: " ".join(m) or "1")
def test_mixture_of_experts_generates_like_onnxruntime(tmp_path, mesh):
    # Mixtral (transformers' batched experts raised to nn.moe) with its
    # experts over ep, beside tp and dp. Where dp x ep divides the batch of
    # 2 (ep=2 alone, and beside tp) the prefill's and every decode step's
    # tokens are dispatched to their experts' ranks; over dp=2 x ep=2 each
    # ep group computes its experts for all of its tokens and all-reduces.
    artifact, report = compile_reported(tmp_path, "mixtral_kv", *mesh)
    if "ep=" in " ".join(mesh):
        dispatched = "dp=" not in " ".join(mesh)
        for program, ranks in (("prefill", report["ranks"]),
                               ("decode",
                                report["serving"]["decode"]["ranks"])):
            kinds = {c["kind"] for c in ranks[0]["collectives"]}
            assert ("dispatch" in kinds) == dispatched, (program, kinds)
    tokens, logits, _ = generate(tmp_path, artifact)
    want_tokens, want_logits = reference("mixtral_kv")
    check_greedy_generation(tokens, logits, want_tokens, want_logits)


def legacy_export(tmp_path, name, form):
    """What partita-compile reads of optimum's legacy export
    (test/models/hf/<name>.optimum-legacy): its directory, which holds the
    pair and the merged decoder; a directory of the pair alone; or the
    merged file."""
    source = HF / f"{name}.optimum-legacy"
    if form == "directory":
        return source
    if form == "merged":
        return source / "decoder_model_merged.onnx"
    pair = tmp_path / "pair"
    pair.mkdir()
    for file in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
        (pair / file).write_bytes((source / file).read_bytes())
    return pair


@pytest.mark.parametrize("mesh", [[], ["--mesh", "tp=2"]],
                         ids=lambda m: " ".join(m) or "1")
@pytest.mark.parametrize("form", ["directory", "merged", "pair"])
@pytest.mark.parametrize("name", ["gpt2_kv", "llama_kv"])
def test_legacy_optimum_exports_generate_like_onnxruntime(tmp_path, name,
                                                          form, mesh):
    """optimum's pair (the prompt through decoder_model.onnx, the steps
    through decoder_with_past_model.onnx) and its merged decoder, run in
    onnxruntime as optimum runs them, against one artifact compiled from
    the with-past graph."""
    ids, mask = prompt()
    source = HF / f"{name}.optimum-legacy"
    if form == "merged":
        want_tokens, want_logits = ort_greedy(
            source / "decoder_model_merged.onnx", ids, mask, NEW_TOKENS)
    else:
        want_tokens, want_logits = ort_greedy(
            source / "decoder_model.onnx", ids, mask, NEW_TOKENS,
            step_path=source / "decoder_with_past_model.onnx")
    artifact = compile_serving(tmp_path, name, *mesh,
                               model=legacy_export(tmp_path, name, form))
    tokens, logits, _ = generate(tmp_path, artifact)
    check_greedy_generation(tokens, logits, want_tokens, want_logits)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert "use_cache_branch" not in {t["name"] for t in manifest["inputs"]}


@pytest.mark.parametrize("form", ["directory", "merged"])
def test_legacy_optimum_forward_pass_is_the_no_past_graph(tmp_path, form):
    """Without --max-seq the merged decoder (and an export directory) is
    its no-past branch: the prompt's logits and cache as decoder_model.onnx
    computes them, with neither pasts nor use_cache_branch as inputs."""
    import partita
    ids, mask = prompt()
    feeds = {"input_ids": ids, "attention_mask": mask,
             "position_ids": positions(mask)}
    session = ort.InferenceSession(
        str(HF / "llama_kv.optimum-legacy" / "decoder_model.onnx"),
        providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()],
                    session.run(None, feeds)))
    artifact = partita.compile(legacy_export(tmp_path, "llama_kv", form),
                               {"tp": 2}, bind={"batch_size": 2,
                                                "sequence_length": 6})
    assert {t["name"] for t in artifact.manifest["inputs"]} == set(feeds)
    got = artifact.run(feeds)
    assert set(got) == set(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5,
                                   err_msg=key)


def merged_decoder(then_outputs=1, branches=("then_branch", "else_branch"),
                   ifs=1):
    """A small merged decoder: If(use_cache_branch) choosing between two
    Identity branches."""
    from onnx import TensorProto, helper
    def branch(outputs):
        return helper.make_graph(
            [helper.make_node("Identity", ["x"], [f"b{i}"])
             for i in range(outputs)], "branch", [],
            [helper.make_tensor_value_info(f"b{i}", TensorProto.FLOAT, [2])
             for i in range(outputs)])
    nodes = []
    for n in range(ifs):
        graphs = {"then_branch": branch(then_outputs),
                  "else_branch": branch(1)}
        nodes.append(helper.make_node(
            "If", ["use_cache_branch"], [f"y{n}"], name=f"if{n}",
            **{k: v for k, v in graphs.items() if k in branches}))
    graph = helper.make_graph(
        nodes, "merged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL,
                                       [1])],
        [helper.make_tensor_value_info(f"y{n}", TensorProto.FLOAT, [2])
         for n in range(ifs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_merged_decoder_branches_without_past():
    """The branch a merged decoder's If selects is imported in its place."""
    import partita
    artifact = partita.compile(merged_decoder())
    assert [t["name"] for t in artifact.manifest["inputs"]] == ["x"]
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(artifact.run({"x": x})["y0"], x)


@pytest.mark.parametrize("model,flags,message", [
    (dict(ifs=2), [], "has one If on 'use_cache_branch'; this graph has "
                      "more"),
    (dict(branches=("else_branch",)), ["--max-seq", "8"],
     "the If on 'use_cache_branch' has no then_branch"),
    (dict(then_outputs=2), ["--max-seq", "8"],
     "has 1 outputs but its then_branch 2"),
], ids=["two-ifs", "no-then", "outputs"])
def test_merged_decoder_errors(tmp_path, model, flags, message):
    path = tmp_path / "merged.onnx"
    path.write_bytes(merged_decoder(**model).SerializeToString())
    result = subprocess.run([COMPILE, path, "-o", tmp_path / "art", *flags],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_directory_without_a_model(tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "config.json").write_text("{}")
    for flags, listed in (([], "model.onnx or decoder_model.onnx or "
                               "decoder_model_merged.onnx"),
                          (["--max-seq", "8"],
                           "model.onnx or decoder_model_merged.onnx or "
                           "decoder_with_past_model.onnx")):
        result = subprocess.run([COMPILE, tmp_path / "export", "-o",
                                 tmp_path / "art", *flags],
                                capture_output=True, text=True)
        assert result.returncode != 0
        assert "is a directory without a model Partita reads" in \
            result.stderr, result.stderr
        assert listed in result.stderr


@pytest.mark.parametrize("mesh", [None, {"tp": 2}], ids=["1", "tp=2"])
@pytest.mark.parametrize("name", ["gpt2_kv", "llama_kv"])
def test_bf16_generation(tmp_path, name, mesh):
    """bf16 keeps 8 bits of mantissa (rtol 2e-2 of the logits' scale). The
    small fixtures' logits are close together (top-2 margins down to 0.003,
    under bf16's error), so the steps are teacher-forced with the fp32
    reference's tokens; the greedy token must match wherever the margin
    exceeds twice the tolerance."""
    import partita
    artifact = partita.compile(HF / f"{name}.optimum.onnx", mesh,
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ, dtype="bf16")
    assert {c["dtype"] for c in artifact.manifest["serving"]["cache"]} == \
        {"bf16"}
    ids, mask = prompt()
    want_tokens, want_logits = reference(name)
    check_bf16_steps(artifact, ids, mask, want_tokens, want_logits,
                     min_clear=8)
    # Untouched by teacher forcing: the runtime's own loop runs in bf16.
    tokens = artifact.generate(ids, 8, attention_mask=mask)
    assert tokens.shape == (2, 8) and tokens.min() >= 0 and tokens.max() < 128


def trained_prompt(name):
    """A trained fixture's prompts: text of the language it learned (two
    rows of 6 tokens, the second left-padded by 2)."""
    inputs = np.load(HF / f"{name}.inputs.npz")
    return inputs["prompt.input_ids"], inputs["prompt.attention_mask"]


TRAINED_CASES = [
    (name, mesh)
    for name in ("gpt2_trained_kv", "llama_trained_kv", "qwen2_trained_kv")
    for mesh in (None, {"tp": 2}, {"pp": 2})] + [
    ("llama_trained_kv", {"tp": 4})]  # 2 kv heads: one per rank.


@pytest.mark.parametrize(
    "name,mesh", TRAINED_CASES,
    ids=[f"{n}-{','.join(f'{k}={v}' for k, v in (m or {}).items()) or '1'}"
         for n, m in TRAINED_CASES])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_trained_model_generates_onnxruntime_tokens(tmp_path, dtype, name,
                                                    mesh):
    """Trained models (make_trained_kv.py: a GPT-2, and a Llama and a Qwen2
    with 2 kv heads for 4 query heads), exported by optimum 1.16 (1.19 for
    Qwen2), whose greedy choices lead by 4 to 9 logits out of a scale of 16
    to 19, as a served model's do: their 32 tokens equal onnxruntime's fp32
    greedy loop in fp32 (logits at rtol 1e-4) and in bf16 too (logits
    within 2e-2 of their scale), every step. optimum 1.16 declares each
    present 'past_sequence_length + 1', wrong for the prompt: the compile
    warns and uses the graph's shapes."""
    import partita
    ids, mask = trained_prompt(name)
    model = HF / f"{name}.optimum.onnx"
    want_tokens, want_logits = ort_greedy(model, ids, mask, NEW_TOKENS)
    top2 = np.sort(want_logits, -1)[..., -2:]
    scale = float(np.abs(want_logits).max())
    # Every choice clear by five times bf16's tolerance on each logit.
    assert (top2[..., 1] - top2[..., 0]).min() > 0.1 * scale
    artifact = partita.compile(model, mesh,
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ, dtype=dtype)
    tokens, logits = artifact.generate(ids, NEW_TOKENS, attention_mask=mask,
                                       return_logits=True)
    np.testing.assert_array_equal(tokens, want_tokens)
    if dtype == "fp32":
        # Near-zero logits are sums of terms of this scale.
        np.testing.assert_allclose(logits, want_logits, rtol=1e-4,
                                   atol=1e-5 * scale)
    else:
        np.testing.assert_allclose(logits, want_logits, rtol=2e-2,
                                   atol=2e-2 * scale)


def test_cache_is_sharded_and_weights_stored_once(tmp_path):
    """At tp=2 each rank holds half the heads of every cache; the decode
    program reads the prefill's weights, which are stored once."""
    one, report1 = compile_reported(tmp_path / "one", "gpt2_kv")
    two, report2 = compile_reported(tmp_path / "two", "gpt2_kv", "--mesh",
                                    "tp=2")
    m2 = json.loads((two / "manifest.json").read_text())
    assert [c["sharding"]["dims"][1] for c in m2["serving"]["cache"]] == \
        [["tp"]] * 4
    assert all(r["decode_program"].endswith(".decode.pb") for r in m2["ranks"])
    # Cache names are neither inputs nor outputs of the artifact.
    names = {t["name"] for t in m2["inputs"] + m2["outputs"]}
    assert not names & {c["name"] for c in m2["serving"]["cache"]}
    r1, r2 = report1["serving"], report2["serving"]
    # [2, 4, 48, 8] f32, four tensors; half the heads on each tp rank.
    assert r1["kv_cache_bytes"] == [4 * 2 * 4 * MAX_SEQ * 8 * 4]
    assert r2["kv_cache_bytes"] == [r1["kv_cache_bytes"][0] // 2] * 2
    single = tmp_path / "single"
    subprocess.run([COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", single,
                    "--bind", "batch_size=2,sequence_length=1,"
                    "past_sequence_length=7"], check=True)
    weights = lambda art: sum(p.stat().st_size
                              for p in (art / "weights").iterdir())
    assert weights(one) == weights(single)


def load_programs(tmp_path, artifact):
    """Each rank's programs of an artifact: {path: Program}, parsed with the
    Python module protoc writes from proto/program.proto."""
    import importlib
    import sys
    subprocess.run(["protoc", f"--proto_path={ROOT / 'proto'}",
                    f"--python_out={tmp_path}", "program.proto"], check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        program_pb2 = importlib.import_module("program_pb2")
    finally:
        sys.path.remove(str(tmp_path))
    programs = {}
    for path in sorted((artifact / "programs").iterdir()):
        program = program_pb2.Program()
        program.ParseFromString(path.read_bytes())
        programs[path.name] = program
    return programs


@pytest.mark.parametrize("mesh", ["pp=2", "pp=2,tp=2"])
def test_pipeline_microbatches_write_the_cache_in_place(tmp_path, mesh):
    """A pipeline stage that runs two microbatches reads and writes each
    microbatch's rows of its KV cache where they lie (views at the rows'
    offsets): no instruction but kv_cache_write touches a cache's bytes,
    and that one writes its rows of the cache the runtime binds as the
    input and the output, so no cache byte is copied in either program.
    Generation still equals onnxruntime's."""
    artifact = compile_serving(tmp_path, "gpt2_kv", "--mesh", mesh,
                               "--microbatches", "2")
    cache = {c["name"] for c in json.loads(
        (artifact / "manifest.json").read_text())["serving"]["cache"]}
    writes = 0
    for name, program in load_programs(tmp_path, artifact).items():
        buffers = program.buffers

        def place(i):
            """(root buffer, byte offset) of buffer i."""
            offset = 0
            while buffers[i].kind == buffers[i].ALIAS:
                offset += buffers[i].alias_offset
                i = buffers[i].alias_of
            return i, offset

        named = {b.buffer: b.name
                 for b in list(program.inputs) + list(program.outputs)
                 if b.name in cache}
        bound = set(named)
        assert bound, name
        for instruction in program.instructions:
            kernel = instruction.kernel
            if instruction.WhichOneof("op") != "kernel":
                continue
            touched = {place(i)[0] for i in kernel.results}
            if kernel.op == "kv_cache_write":
                cache_in, cache_out = place(kernel.operands[0]), \
                    place(kernel.results[0])
                # Its rows of a cache's input, written at the same rows of
                # the same cache's output (one memory when resident).
                assert cache_in[0] in bound and cache_out[0] in bound, name
                assert named[cache_in[0]] == named[cache_out[0]], name
                assert cache_in[1] == cache_out[1], name
                writes += 1
                continue
            touched |= {place(i)[0] for i in kernel.operands}
            if kernel.op in ("attention", "attention_partial"):
                touched -= bound  # Reading the written cache is no copy.
            assert not touched & bound, (name, kernel.op)
    # Each rank's stage has 2 caches (a layer's key and value), written
    # once per microbatch by its prefill and its decode program.
    ranks = 4 if "tp" in mesh else 2
    assert writes == 2 * 2 * 2 * ranks
    tokens, logits, _ = generate(tmp_path, artifact)
    want_tokens, want_logits = reference("gpt2_kv")
    check_greedy_generation(tokens, logits, want_tokens, want_logits)


def test_gqa_cache_holds_one_kv_head_per_rank(tmp_path):
    """llama_kv has 2 kv heads: at tp=4 each rank holds the one its query
    heads use (half the cache, not all of it), and generation still equals
    onnxruntime's, also with dp=2 or a pipeline of two microbatches around
    it."""
    _, total = compile_reported(tmp_path / "one", "llama_kv")
    four, report = compile_reported(tmp_path / "four", "llama_kv", "--mesh",
                                    "tp=4")
    assert report["serving"]["kv_cache_bytes"] == \
        [total["serving"]["kv_cache_bytes"][0] // 2] * 4
    cache = json.loads((four / "manifest.json").read_text())["serving"]["cache"]
    assert {tuple(c["shape"]) for c in cache} == {(2, 4, MAX_SEQ, 8)}
    assert all(c["sharding"]["dims"][1] == ["tp"] for c in cache)
    remarks = [r for r in report["remarks"] if "each rank holds the one" in r]
    assert len(remarks) == 4, report["remarks"]
    want_tokens, want_logits = reference("llama_kv")
    dp_tp = compile_serving(tmp_path / "dptp", "llama_kv", "--mesh",
                            "dp=2,tp=4")
    pp_tp = compile_serving(tmp_path / "pptp", "llama_kv", "--mesh",
                            "pp=2,tp=4", "--microbatches", "2")
    for artifact in (four, dp_tp, pp_tp):
        tokens, logits, _ = generate(artifact.parent, artifact)
        check_greedy_generation(tokens, logits, want_tokens, want_logits)


def test_python_generate_and_step_api(tmp_path):
    import partita
    artifact = partita.compile(HF / "llama_kv.optimum.onnx", {"tp": 2},
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ)
    ids, mask = prompt()
    want_tokens, want_logits = reference("llama_kv")
    tokens, logits = artifact.generate(ids, 16, attention_mask=mask,
                                       return_logits=True)
    check_greedy_generation(tokens, logits, want_tokens[:, :16],
                            want_logits[:16])
    assert len(artifact.last_timings["step_seconds"]) == 15
    # The step API, sampling in the caller: the same logits.
    step_logits = [artifact.prefill(ids, attention_mask=mask)]
    assert artifact.cache_position == PROMPT
    for _ in range(4):
        step_logits.append(artifact.step(step_logits[-1].argmax(-1)))
    assert artifact.cache_position == PROMPT + 4
    np.testing.assert_allclose(np.stack(step_logits), want_logits[:5],
                               rtol=1e-4, atol=1e-5)
    # A second generation starts from a fresh cache.
    again = artifact.generate(ids, 16, attention_mask=mask)
    np.testing.assert_array_equal(again, tokens)


@pytest.mark.parametrize("mesh", [None, {"tp": 2}])
def test_generation_takes_the_ids_a_plain_run_takes(mesh):
    """One rule for token ids, a plain run's (the embedding Gather's, as
    onnxruntime applies it): -vocab to vocab - 1, negative ids counting
    from the end, in a prompt and in a step; int32 ids are cast as for
    `run`. --generate refused -1 and int32 (issue 34)."""
    import partita
    artifact = partita.compile(HF / "gpt2_kv.optimum.onnx", mesh,
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ)
    ids, mask = prompt()
    ids = ids.copy()
    ids[0, -1], ids[1, -2] = -1, -128
    want, want_logits = ort_greedy(HF / "gpt2_kv.optimum.onnx", ids, mask, 4)
    tokens, logits = artifact.generate(ids.astype(np.int32), 4,
                                       attention_mask=mask,
                                       return_logits=True)
    check_greedy_generation(tokens, logits, want, want_logits)
    artifact.prefill(ids, attention_mask=mask)
    artifact.step(np.array([-1, 5]))
    with pytest.raises(partita.RunError, match="token id 128"):
        artifact.step(np.array([128, 5]))


def test_python_serving_errors(tmp_path):
    import partita
    artifact = partita.compile(HF / "gpt2_kv.optimum.onnx",
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=16)
    ids, mask = prompt()
    with pytest.raises(partita.RunError, match="before"):
        artifact.step(np.array([1, 2]))
    with pytest.raises(partita.RunError, match="cache"):
        artifact.generate(ids, 10, attention_mask=mask)  # 8 + 9 > 16
    with pytest.raises(partita.RunError):
        artifact.generate(np.ones((2, PROMPT + 1), np.int64), 2)
    with pytest.raises(partita.RunError):
        artifact.generate(np.ones((3, 4), np.int64), 2)
    # Token ids outside the vocabulary: refused alike on every mesh.
    with pytest.raises(partita.RunError, match="outside the vocabulary"):
        artifact.generate(np.full((2, 4), 128, np.int64), 2)
    artifact.prefill(ids, attention_mask=mask)
    with pytest.raises(partita.RunError, match="token id -129"):
        artifact.step(np.array([1, -129]))
    for _ in range(16 - PROMPT):
        artifact.step(np.array([1, 2]))
    with pytest.raises(partita.RunError, match="cache"):
        artifact.step(np.array([1, 2]))
    plain = partita.compile(HF / "gpt2_kv.optimum.onnx",
                            bind={"batch_size": 2, "sequence_length": 1,
                                  "past_sequence_length": 7})
    with pytest.raises(partita.RunError, match="max_seq"):
        plain.generate(ids, 2)
    # 'no' is not False.
    with pytest.raises(TypeError, match="return_logits expects True or"):
        artifact.generate(ids, 2, return_logits="no")


@pytest.mark.parametrize("flags,message", [
    (["--max-seq", "16"], "no past key or value inputs"),
    (["--max-seq", "16", "--mesh", "sp=2"], "sequence parallelism"),
    (["--max-seq", "-1"], "--max-seq must be 0 or more"),
], ids=["no-cache", "sp", "negative"])
def test_compile_errors(tmp_path, flags, message):
    model = HF / ("gpt2.optimum.onnx" if "past key" in message
                  else "gpt2_kv.optimum.onnx")
    result = subprocess.run(
        [COMPILE, model, "-o", tmp_path / "art", "--bind",
         "batch_size=2,sequence_length=8", *flags],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "art").exists()


def test_pasts_with_two_length_symbols_are_refused(tmp_path):
    import onnx
    model = onnx.load(str(HF / "gpt2_kv.optimum.onnx"))
    past = next(i for i in model.graph.input
                if i.name == "past_key_values.1.key")
    past.type.tensor_type.shape.dim[2].dim_param = "other_length"
    path = tmp_path / "two_lengths.onnx"
    onnx.save(model, str(path))
    result = subprocess.run(
        [COMPILE, path, "-o", tmp_path / "art", "--bind",
         "batch_size=2,sequence_length=8", "--max-seq", "16"],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert ("the past inputs' lengths are named both 'past_sequence_length' "
            "and 'other_length'") in result.stderr, result.stderr


def test_compile_errors_on_lengths(tmp_path):
    def compile_with(bind, max_seq):
        return subprocess.run(
            [COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", tmp_path / "art",
             "--bind", bind, "--max-seq", str(max_seq)],
            capture_output=True, text=True)
    short = compile_with("batch_size=2,sequence_length=8", 4)
    assert short.returncode != 0
    assert "more than the cache holds" in short.stderr
    bound = compile_with("batch_size=2,sequence_length=8,"
                         "past_sequence_length=3", 16)
    assert bound.returncode != 0
    assert "do not --bind it" in bound.stderr


def test_run_errors(tmp_path):
    plain = tmp_path / "plain"
    subprocess.run([COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", plain,
                    "--bind", "batch_size=2,sequence_length=1,"
                    "past_sequence_length=7"], check=True)
    ids, _ = prompt()
    np.save(tmp_path / "ids.npy", ids)
    result = subprocess.run(
        [RUN, plain, "--generate", "4", "--input",
         f"input_ids={tmp_path / 'ids.npy'}", "--output-dir", tmp_path / "o"],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert "--max-seq" in result.stderr
    serving = compile_serving(tmp_path, "gpt2_kv")
    np.save(tmp_path / "prompt.npy", ids)
    for args, message in [(["--generate", "0"], "--generate"),
                          (["--generate", "4"], "input_ids"),
                          # The slots a count near 2^63 needs, counted
                          # without overflow (it said -9223372036854775802).
                          (["--generate", "9223372036854775807", "--input",
                            f"input_ids={tmp_path / 'prompt.npy'}"],
                           "need more than 9223372036854775807 cache slots")]:
        result = subprocess.run([RUN, serving, *args, "--output-dir",
                                 tmp_path / "o"], capture_output=True,
                                text=True)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr


def test_decode_objectives_plan_the_decode_step():
    import partita
    bind = {"batch_size": 2, "sequence_length": PROMPT}
    plan = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                        max_seq=MAX_SEQ, objective="decode-latency")
    # One token per sequence, the cache at max-seq.
    assert plan.shape["sequence"] == 1
    assert plan.best is not None and plan.best["tokens_per_second"] > 0
    prefill = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                           max_seq=MAX_SEQ)
    assert prefill.shape["sequence"] == PROMPT
    assert prefill.shape["kv_cache_bytes"] == plan.shape["kv_cache_bytes"]
    with pytest.raises(partita.CompileError, match="needs --max-seq"):
        partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                     objective="decode-throughput")


def test_decode_throughput_serves_the_largest_batch_that_fits():
    """decode-throughput costs each candidate at the largest batch its
    memory holds (cache included), in steps of dp x microbatches: one step
    more no longer fits, as decode-latency planning that batch says."""
    import partita
    bind = {"batch_size": 2, "sequence_length": PROMPT}
    budget = 2 * 2**30
    def plan(objective, batch=2):
        return partita.plan(HF / "llama_kv.optimum.onnx", 2,
                            bind=dict(bind, batch_size=batch),
                            max_seq=200000, objective=objective,
                            device_memory=budget)
    serving = plan("decode-throughput")
    feasible = [c for c in serving if c["feasible"]]
    assert len(feasible) >= 3
    reserve = serving.report["reserve_bytes"]
    for c in feasible:
        unit = c["mesh"].get("dp", 1) * c["microbatches"]
        assert c["batch"] % unit == 0 and 2 < c["batch"] < 1024
        assert c["memory_bytes"] + reserve <= budget
        assert c["tokens_per_second"] == pytest.approx(
            c["batch"] / c["step_seconds"])
    rates = [c["tokens_per_second"] for c in feasible]
    assert rates == sorted(rates, reverse=True)
    best = serving.best
    unit = best["mesh"].get("dp", 1) * best["microbatches"]
    def same(plan_):
        return next(c for c in plan_ if c["mesh"] == best["mesh"] and
                    c["microbatches"] == best["microbatches"] and
                    c["virtual_stages"] == best["virtual_stages"])
    assert same(plan("decode-latency", best["batch"]))["feasible"]
    over = same(plan("decode-latency", best["batch"] + unit))
    assert not over["feasible"] and over["reason"].startswith("memory:")
    assert "batch   tokens/s" in str(serving)
    # With room for more than the cap, every candidate serves 1024.
    roomy = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                         max_seq=MAX_SEQ, objective="decode-throughput")
    assert {c["batch"] for c in roomy if c["feasible"]} == {1024}
    # The other objectives cost the model's batch.
    latency = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                           max_seq=MAX_SEQ, objective="decode-latency")
    assert {c["batch"] for c in latency if c["feasible"]} == {2}
