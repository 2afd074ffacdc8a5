"""The keyword arguments of compile() and plan() come from the compiler's
option declarations (partita/Options/CompilerOptions.def): each is checked
against its kind, and named when refused."""

import pytest

import partita
from conftest import ROOT

MODELS = ROOT / "test" / "models"

GPT2 = MODELS / "gpt2.onnx"


def test_options_lists_the_declarations():
    options = partita.options()
    assert options["sp_mode"]["flag"] == "sp-mode"
    assert options["sp_mode"]["choices"] == ["none", "megatron", "ulysses",
                                             "ring"]
    assert options["microbatches"]["kind"] == "integer"
    assert options["microbatches"]["min"] == 1
    assert options["microbatches"]["default"] == "1"
    assert options["overlap"]["default"] == "true"
    # The command line's own outputs are no keyword of the API.
    assert "emit" not in options and "report" not in options


@pytest.mark.parametrize("keyword, value, message", [
    ("microbatches", 2.5, "microbatches expects an integer, got 2.5"),
    ("microbatches", True, "microbatches expects an integer, got True"),
    ("microbatches", None, "microbatches: a value is required, got None"),
    ("overlap", 1, "overlap expects True or False, got 1"),
    ("target", 3, "target expects a string, got 3"),
    ("bind", {"batch": 2.0}, "bind: 'batch' expects an integer, got 2.0"),
    ("device_memory", "lots", None),
    ("bogus", 1, "unexpected keyword argument 'bogus'"),
])
def test_wrong_types_name_the_keyword(keyword, value, message):
    if message is None:  # a string where bytes belong is refused as text
        with pytest.raises(TypeError, match="device_memory expects a number"):
            partita.compile(GPT2, mesh="auto", **{keyword: value})
        return
    with pytest.raises(TypeError, match=message):
        partita.compile(GPT2, **{keyword: value})


@pytest.mark.parametrize("keyword, value, message", [
    ("microbatches", 0, "--microbatches must be positive, got 0"),
    ("virtual_stages", 1 << 20, "--virtual-stages must be at most 1024"),
    ("max_seq", -1, "--max-seq must be 0 or more, got -1"),
    ("sp_mode", "zigzag", "--sp-mode expects none, megatron, ulysses or ring"),
])
def test_values_out_of_range_are_compile_errors(keyword, value, message):
    with pytest.raises(partita.CompileError, match=message):
        partita.compile(GPT2, **{keyword: value})


def test_none_is_the_default_where_there_is_one():
    art = partita.compile(GPT2, mesh=None, devices=None, max_seq=None,
                          cuda_arch=None, cluster=None, sp_mode=None)
    assert art.report["mesh"]["world_size"] == 1


def test_a_refused_value_is_an_option_error():
    # Refused before anything compiles, by the compiler's one parser: a
    # CompileError (as before) that is also a ValueError.
    with pytest.raises(partita.OptionError) as caught:
        partita.compile(GPT2, mesh="tp=x")
    assert isinstance(caught.value, partita.CompileError)
    assert isinstance(caught.value, ValueError)
    assert "--mesh tp=x: 'tp=x' is not of the form axis=size" in str(caught.value)
    with pytest.raises(partita.OptionError, match="--devices must be 0 or more"):
        partita.plan(GPT2, devices=-1)
    # A model the compiler refuses is no option error.
    with pytest.raises(partita.CompileError) as caught:
        partita.compile(GPT2, mesh={"tp": 3})
    assert not isinstance(caught.value, partita.OptionError)


def test_deep_cluster_json_is_refused_not_a_crash():
    # 50,000 levels overflowed the JSON parser's stack and killed the
    # interpreter; past 256 the text is refused before it is parsed.
    deep = '{"preset":' + "[" * 50000 + "]" * 50000 + "}"
    with pytest.raises(partita.CompileError, match="JSON nested deeper than 256"):
        partita.plan(GPT2, devices=2, cluster=deep)


def test_run_refuses_integers_its_inputs_cannot_hold():
    # A uint64 id of 2^64-1 wrapped to -1 as int64 and ran (onnxruntime
    # refuses it); integers are cast only where they fit.
    import numpy as np
    art = partita.compile(GPT2)
    ids = np.full((2, 16), np.iinfo(np.uint64).max, dtype=np.uint64)
    with pytest.raises(partita.RunError,
                       match="input 'input_ids': 18446744073709551615 does "
                             "not fit int64"):
        art.run({"input_ids": ids})
    # uint64 ids that fit run as int64 ones do.
    ok = np.zeros((2, 16), dtype=np.uint64)
    assert art.run({"input_ids": ok})["logits"].shape == (2, 16, 128)


def test_generate_counts_are_integers():
    import numpy as np
    art = partita.compile(
        MODELS / "hf" / "gpt2_kv.optimum.onnx", max_seq=48,
        bind={"batch_size": 2, "sequence_length": 8})
    ids = np.ones((2, 8), dtype=np.int64)
    with pytest.raises(TypeError, match="max_new_tokens expects an integer, "
                                        "got 4.9"):
        art.generate(ids, 4.9)
    with pytest.raises(partita.RunError, match="is beyond int64"):
        art.generate(ids, 1 << 64)
    with pytest.raises(partita.RunError, match="does not fit int64"):
        art.generate(np.full((2, 8), np.iinfo(np.uint64).max, np.uint64), 2)
    assert art.generate(ids, 2).shape == (2, 2)
