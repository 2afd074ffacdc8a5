#!/usr/bin/env python3
"""Writes fuzz/corpus/: the libFuzzer seed corpus (importer/) and one
reproducer directory per class of issue 14 (findings/), each built with the
onnx API. `--check` then replays every reproducer against the current build
and prints how each ends (before the fixes: the class it was written for).

  python3 fuzz/make_corpus.py [--check]

Re-running rewrites the same bytes (seeded, no timestamps)."""

import argparse
import json
import pathlib
import shutil
import sys

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

FUZZ = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(FUZZ))
import campaign  # noqa: E402
import mutate  # noqa: E402

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
CORPUS = FUZZ / "corpus"


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="partita-fuzz")
    m.ir_version = ir
    return m


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=f"{op.lower()}_node", **attrs)


def compile_nn(timeout=20):
    return {"run": ["partita-compile", "model.onnx", "--emit", "nn"],
            "timeout": timeout, "expect": "valid-model:model.onnx",
            "types": True}


# --- Reproducers: (directory name, issue class, summary, files, steps) -------

X23 = vi("x", F, [2, 3])


def importer_cases():
    """Classes 2, 3 and 4: models partita-compile must refuse with a
    message naming the node."""
    c = {}
    # 2: crashes.
    c["2-concat-no-inputs"] = (
        "Concat with no inputs",
        model([node("Concat", [], ["y"], axis=0)], [], [vi("y", F, [2])]))
    c["2-gather-one-input"] = (
        "Gather with only its data input",
        model([node("Gather", ["x"], ["y"], axis=0)], [X23], [vi("y", F, [2])]))
    c["2-add-no-inputs"] = (
        "Add with no inputs (reads an uninitialised value)",
        model([node("Add", [], ["y"])], [], [vi("y", F, [2, 3])]))
    c["2-concat-empty-name"] = (
        "Concat whose first input is named ''",
        model([node("Concat", ["", "x"], ["y"], axis=0)], [X23],
              [vi("y", F, [4, 3])]))
    c["2-gather-empty-name"] = (
        "Gather whose data input is named ''",
        model([node("Gather", ["", "i"], ["y"], axis=0)], [X23],
              [vi("y", F, [3])], [const("i", np.int64(0))]))
    c["2-gather-rank0-constant"] = (
        "Gather of rank-0 constant data (the constant folder over-reads)",
        model([node("Gather", ["d", "i"], ["y"], axis=0)], [],
              [vi("y", F, [])], [const("d", np.float32(1.5)),
                                 const("i", np.int64(0))]))
    c["2-concat-rank0"] = (
        "Concat of rank-0 tensors",
        model([node("Concat", ["a", "b"], ["y"], axis=0)],
              [vi("a", F, []), vi("b", F, [])], [vi("y", F, [2])]))
    c["2-slice-rank0"] = (
        "Slice of a rank-0 tensor on axis 0 (found by libFuzzer: SIGSEGV)",
        model([node("Slice", ["x", "st", "en", "ax"], ["y"])], [vi("x", F, [])],
              [vi("y", F, [])], [const("st", np.array([0])),
                                 const("en", np.array([1])),
                                 const("ax", np.array([0]))]))
    # 3: exit 1 with nothing on stderr.
    c["3-matmul-empty-name"] = (
        "MatMul whose second input is named ''",
        model([node("MatMul", ["x", ""], ["y"])], [X23], [vi("y", F, [2, 3])]))
    c["3-log-no-inputs"] = (
        "Log with its required input missing",
        model([node("Log", [], ["y"])], [], [vi("y", F, [2, 3])]))
    c["3-trilu-empty-k"] = (
        "Trilu whose k is an empty tensor",
        model([node("Trilu", ["x", "k"], ["y"])], [vi("x", F, [3, 4])],
              [vi("y", F, [3, 4])], [const("k", np.zeros([0], np.int64))]))
    # 4: accepted although invalid.
    c["4-input-2p62x8"] = (
        "an input of shape [2^62, 8] (the element count overflows int64)",
        model([node("Relu", ["x"], ["y"])], [vi("x", F, [2**62, 8])],
              [vi("y", F, [2**62, 8])]))
    c["4-input-2p40-cubed"] = (
        "an input of shape [2^40, 2^40, 2^40]",
        model([node("Relu", ["x"], ["y"])], [vi("x", F, [2**40] * 3)],
              [vi("y", F, [2**40] * 3)]))
    c["4-constant-of-shape-2p62-squared"] = (
        "ConstantOfShape of [2^62, 2^62], whose product wraps to 0",
        model([node("ConstantOfShape", ["s"], ["y"],
                    value=helper.make_tensor("v", F, [1], [1.0]))], [],
              [vi("y", F, [2**62, 2**62])],
              [const("s", np.array([2**62, 2**62], np.int64))]))
    softmax_ints = node("Softmax", ["x"], ["y"])
    softmax_ints.attribute.append(helper.make_attribute("axis", [1]))
    c["4-softmax-axis-ints"] = (
        "Softmax with axis given as INTS (silently axis 0)",
        model([softmax_ints], [X23], [vi("y", F, [2, 3])]))
    c["4-softmax-axis-float"] = (
        "Softmax with axis given as FLOAT",
        model([node("Softmax", ["x"], ["y"], axis=1.0)], [X23],
              [vi("y", F, [2, 3])]))
    cast = node("Cast", ["x"], ["y"])
    cast.attribute.append(AttributeProto(name="to", i=TensorProto.INT64))
    c["4-cast-to-without-type"] = (
        "Cast whose `to` has no attribute type (its int field is read)",
        model([cast], [X23], [vi("y", I64, [2, 3])]))
    dup = node("Concat", ["x", "x"], ["y"], axis=0)
    dup.attribute.append(helper.make_attribute("axis", 1))
    c["4-duplicate-attribute"] = (
        "Concat with `axis` given twice (the first wins)",
        model([dup], [X23], [vi("y", F, [4, 3])]))
    c["4-reduce-mean-keepdims-2"] = (
        "ReduceMean with keepdims = 2",
        model([node("ReduceMean", ["x", "a"], ["y"], keepdims=2)], [X23],
              [vi("y", F, [2, 1])], [const("a", np.array([1], np.int64))],
              opset=18))
    c["4-ir-version-99"] = (
        "ir_version 99",
        model([node("Relu", ["x"], ["y"])], [X23], [vi("y", F, [2, 3])],
              ir=99))
    c["4-ir-version-negative"] = (
        "ir_version -1",
        model([node("Relu", ["x"], ["y"])], [X23], [vi("y", F, [2, 3])],
              ir=-1))
    c["4-no-outputs"] = (
        "a graph with no outputs (compiles and runs, writing nothing)",
        model([node("Relu", ["x"], ["y"])], [X23], []))
    c["4-range-mixed-types"] = (
        "Range with int32 start and int64 limit and delta",
        model([node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", I64, [3])],
              [const("a", np.int32(0)), const("b", np.int64(3)),
               const("d", np.int64(1))]))
    # Issue 15: dimension expressions.
    deep = "(" * 100000 + "n" + ")" * 100000
    c["2-dim-expression-nested-deep"] = (
        "a dim_param nesting parentheses 100,000 deep (issue 15: the "
        "expression parser recursed until the stack overflowed)",
        model([node("Relu", ["x"], ["y"])], [vi("x", F, [2, deep])],
              [vi("y", F, [2, deep])]))
    c["4-mod-fmod-2p32"] = (
        "Mod with fmod = 2^32 (a boolean; issue 15's campaign: accepted as "
        "fmod = 1)",
        model([node("Mod", ["x", "d"], ["y"], fmod=2**32)],
              [vi("x", I64, [2, 3])], [vi("y", I64, [2, 3])],
              [const("d", np.array([2, -3, 5], np.int64))], opset=13))
    c["4-output-elem-type-undefined"] = (
        "a graph output declared a tensor of element type 0 (issue 15's "
        "campaign: accepted, onnxruntime refuses it)",
        model([node("Clip", ["x", "lo"], ["y"])], [X23], [vi("y", 0, [2, 3])],
              [const("lo", np.array(0.5, np.float32))], opset=13))
    return c


# Invalid by the ONNX spec although onnxruntime 1.32 runs them: the
# reproducer demands a refusal.
MUST_REFUSE = {"4-ir-version-negative": "ir_version -1 is accepted"}


def write_importer_case(name, summary, m, issue):
    d = CORPUS / "findings" / name
    d.mkdir(parents=True)
    onnx.save(m, d / "model.onnx")
    step = compile_nn()
    if name in MUST_REFUSE:
        step.update(expect="refused", if_accepted="accepted-invalid",
                    why=MUST_REFUSE[name])
    finding = {"issue_class": issue, "summary": summary,
               "command": "partita-compile model.onnx --emit nn",
               "steps": [step]}
    (d / "finding.json").write_text(json.dumps(finding, indent=1) + "\n")
    return m


def write(name, issue, summary, steps, files=None, links=None, fifos=None,
          command=None):
    d = CORPUS / "findings" / name
    d.mkdir(parents=True)
    for fname, data in (files or {}).items():
        if isinstance(data, onnx.ModelProto):
            onnx.save(data, d / fname)
        elif isinstance(data, np.ndarray):
            np.save(d / fname, data)
        else:
            (d / fname).write_bytes(data)
    finding = {"issue_class": issue, "summary": summary,
               "command": command or " ".join(steps[-1]["run"]),
               "steps": steps}
    if links:
        finding["links"] = links
    if fifos:
        finding["fifos"] = fifos
    (d / "finding.json").write_text(json.dumps(finding, indent=1) + "\n")


def run_step(inputs, expect, art="art", out="out", extra=(), timeout=30):
    cmd = ["partita-run", art, "--output-dir", out, "--timeout", "5"]
    for k, f in inputs.items():
        cmd += ["--input", f"{k}={f}"]
    return {"run": cmd + list(extra), "timeout": timeout, "expect": expect}


def compile_art(flags, art="art"):
    return {"run": ["partita-compile", "model.onnx", "-o", art, *flags],
            "timeout": 120, "expect": "accepted"}


def reference(inputs, save="ref"):
    return {"reference": {"model": "model.onnx", "inputs": inputs,
                          "save": save}}


def runtime_cases():
    gpt2 = {"model.onnx": "test/models/gpt2.onnx"}
    ids = np.load(FUZZ.parent / "test" / "models" / "gpt2.inputs.npz")[
        "input_ids"]
    # 2: the zero-element constant output under dp=2.
    zero = model([node("ConstantOfShape", ["s"], ["y"],
                       value=helper.make_tensor("v", F, [1], [1.0])),
                  node("Relu", ["x"], ["z"])],
                 [vi("x", F, [2, 3])], [vi("y", F, [0, 3]), vi("z", F, [2, 3])],
                 [const("s", np.array([0, 3], np.int64))])
    write("2-dp2-zero-element-constant-output", 2,
          "a zero-element constant output under --mesh dp=2 (division by "
          "zero in the exec lowering)",
          [{"run": ["partita-compile", "model.onnx", "-o", "art", "--mesh",
                    "dp=2"], "timeout": 20, "expect": "no-crash"}],
          files={"model.onnx": zero})
    # 5: vocab-parallel embedding under tp=2.
    bad = ids.copy()
    bad[0, 3] = 128
    write("5-tp2-token-id-vocab", 5,
          "--mesh tp=2: a token id equal to the vocabulary size runs to exit 0 "
          "(onnxruntime refuses it)",
          [compile_art(["--mesh", "tp=2"]), reference({"input_ids": "ids.npy"}),
           run_step({"input_ids": "ids.npy"}, "equal:ref:out")],
          files={"ids.npy": bad}, links=gpt2)
    bad = ids.copy()
    bad[1, 0] = 2**62
    write("5-tp2-token-id-2p62", 5,
          "--mesh tp=2: a token id of 2^62 runs to exit 0",
          [compile_art(["--mesh", "tp=2"]), reference({"input_ids": "ids.npy"}),
           run_step({"input_ids": "ids.npy"}, "equal:ref:out")],
          files={"ids.npy": bad}, links=gpt2)
    neg = ids.copy()
    neg[0, 5] = -1
    write("5-tp2-token-id-minus-one", 5,
          "--mesh tp=2: token id -1 must mean id 127, as in onnxruntime and "
          "the unsharded run",
          [compile_art(["--mesh", "tp=2"]), reference({"input_ids": "ids.npy"}),
           run_step({"input_ids": "ids.npy"}, "equal:ref:out")],
          files={"ids.npy": neg}, links=gpt2)
    # 5: ring attention with a mask that varies along the query dimension.
    window = CORPUS / "window.tmp.onnx"
    campaign.write_windowed_attention(window)
    wids = np.random.default_rng(2).integers(0, 32, [2, 8])
    write("5-ring-window-mask", 5,
          "--sp-mode ring with a constant [1, 1, s, s] sliding-window mask: "
          "exit 0 with wrong numbers",
          [compile_art(["--mesh", "sp=2", "--sp-mode", "ring"]),
           reference({"ids": "ids.npy"}),
           run_step({"ids": "ids.npy"}, "equal:ref:out")],
          files={"model.onnx": onnx.load(window), "ids.npy": wids})
    window.unlink()
    # 5: tampered artifacts, re-hashed.
    mlp = CORPUS / "mlp.tmp.onnx"
    campaign.write_mlp(mlp)
    x = np.random.default_rng(0).standard_normal([4, 8]).astype(np.float32)
    mlp_files = {"model.onnx": onnx.load(mlp), "x.npy": x}
    mlp.unlink()

    def tampered(name, summary, flags, spec, files, links=None, inputs=None):
        inputs = inputs or {"x": "x.npy"}
        last = run_step(inputs, "equal:out0:out")
        if spec["kind"] == "manifest":
            # The issue: the manifest is hashed with the rest, so an edited
            # one is refused whether or not the answer changes.
            last.update(expect="refused", if_accepted="wrong-answer",
                        why="an edited manifest is accepted")
        write(name, 5, summary,
              [compile_art(flags), run_step(inputs, "accepted", out="out0"),
               {"tamper": dict(spec, art="art")}, last],
              files=files, links=links,
              command=" ".join(run_step(inputs, "")["run"]) +
              "   # after the tamper step of finding.json")
    tampered("5-tamper-instruction-deleted",
             "a program with its last instruction deleted (files re-hashed) "
             "runs to exit 0", ["--mesh", "tp=2"],
             {"kind": "instruction", "op": "delete-last", "i": 0, "j": 0,
              "file": "programs/rank0.pb"}, mlp_files)
    tampered("5-tamper-instructions-swapped",
             "a program with its first two instructions swapped runs to exit 0",
             ["--mesh", "tp=2"],
             {"kind": "instruction", "op": "swap-adjacent", "i": 0, "j": 0,
              "file": "programs/rank0.pb"}, mlp_files)
    tampered("5-tamper-safetensors-overlap",
             "safetensors whose data_offsets overlap", [],
             {"kind": "safetensors", "op": "overlap", "i": 0, "j": 1,
              "file": "weights/model-00001-of-00001.safetensors"}, mlp_files)
    tampered("5-tamper-recv-became-send",
             "a pipeline stage whose receive became a send (--mesh pp=2)",
             ["--mesh", "pp=2", "--microbatches", "2"],
             {"kind": "p2p", "op": "flip-kind", "i": 0, "value": 0,
              "file": "programs/rank1.pb"},
             {"ids.npy": ids}, links=gpt2, inputs={"input_ids": "ids.npy"})
    tampered("5-tamper-manifest-outputs-empty",
             "a manifest edited to outputs: [] (runs, writes nothing)",
             ["--mesh", "tp=2"], {"kind": "manifest", "op": "outputs-empty"},
             mlp_files)
    tampered("5-tamper-manifest-swapped-coords",
             "a manifest with the coordinates of the two pipeline ranks "
             "swapped (nothing hashes the manifest)",
             ["--mesh", "pp=2", "--microbatches", "2"],
             {"kind": "manifest", "op": "swap-coords"},
             {"ids.npy": ids}, links=gpt2, inputs={"input_ids": "ids.npy"})
    tampered("5-tamper-manifest-swapped-stages",
             "a manifest with the stages of the two pipeline ranks swapped",
             ["--mesh", "pp=2", "--microbatches", "2"],
             {"kind": "manifest", "op": "swap-stages"},
             {"ids.npy": ids}, links=gpt2, inputs={"input_ids": "ids.npy"})
    # 6: FIFOs.
    relu = model([node("Relu", ["x"], ["y"])], [vi("x", F, [4, 8])],
                 [vi("y", F, [4, 8])])
    write("6-fifo-model", 6, "the model path is a FIFO with no writer",
          [{"run": ["partita-compile", "model.onnx", "--emit", "nn"],
            "timeout": 5, "expect": "refused"}],
          files={"model.bytes.onnx": relu}, fifos=["model.onnx"])
    write("6-fifo-input", 6, "an --input that is a FIFO with no writer",
          [compile_art([]), run_step({"x": "x.npy"}, "refused", timeout=5)],
          files={"model.onnx": relu}, fifos=["x.npy"])
    ext = model([node("Add", ["x", "w"], ["y"])], [vi("x", F, [4, 8])],
                [vi("y", F, [4, 8])], [const("w", np.ones([4, 8], np.float32))])
    t = ext.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"),):
        e = t.external_data.add()
        e.key, e.value = k, v
    write("6-fifo-external-data", 6,
          "an initializer whose external data file is a FIFO",
          [{"run": ["partita-compile", "model.onnx", "--emit", "nn"],
            "timeout": 5, "expect": "refused"}],
          files={"model.onnx": ext}, fifos=["w.bin"])


def write_importer_corpus(cases):
    d = CORPUS / "importer"
    d.mkdir(parents=True, exist_ok=True)
    for seed in mutate.op_seeds() + mutate._text_models(FUZZ.parent):
        name = seed.name.replace("/", "_").replace(":", "_")
        (d / f"seed-{name}.onnx").write_bytes(seed.model.SerializeToString())
    for name, m in cases.items():
        (d / f"issue14-{name}.onnx").write_bytes(m.SerializeToString())
    # The textual syntax too: the importer reads both.
    text = (FUZZ.parent / "test" / "Frontend" / "ONNX" / "basic.onnxtxt")
    (d / "text-basic.onnxtxt").write_text(text.read_text())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true")
    p.add_argument("--build", default=str(FUZZ.parent / "build"))
    args = p.parse_args()
    # Inputs libFuzzer found (libfuzzer-*) are kept; the rest is rewritten.
    shutil.rmtree(CORPUS / "findings", ignore_errors=True)
    for p in (CORPUS / "importer").glob("*"):
        if not p.name.startswith("libfuzzer-"):
            p.unlink()
    models = {}
    for name, (summary, m) in importer_cases().items():
        models[name] = write_importer_case(name, summary, m, int(name[0]))
    runtime_cases()
    write_importer_corpus(models)
    if args.check:
        tools = campaign.Tools(args.build)
        try:
            for d in campaign.corpus_findings():
                v = campaign.replay(d, tools)
                print(f"{d.name:40} {v.cls:17} {v.detail[:100]}")
        finally:
            campaign.close_workers()


if __name__ == "__main__":
    main()
