"""The in-tree fuzzer (fuzz/, issue 14) as tests.

- A bounded, deterministic campaign (fixed seed and case counts, no
  wall-clock stopping): mutated models through partita-compile, option
  combinations and cluster files, the Python and C APIs with hostile
  arguments, tampered artifacts and hostile inputs through partita-run. It fails on any crash,
  hang, empty diagnostic, accepted-invalid model or wrong answer, and lists
  the reproducers it wrote.
- Every committed reproducer under fuzz/corpus/findings (one directory per
  class of the issue): each must now be refused with a message or give the
  right answer.
- The libFuzzer importer target over the committed corpus (-runs=0), when
  build-fuzz/ exists (scripts/fuzz configures it; it is brought up to date
  here first).

`scripts/fuzz --seconds N` runs the same campaign for as long as asked."""

import os
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT

sys.path.insert(0, str(ROOT / "fuzz"))
import campaign  # noqa: E402

SEED = "scripts-test"
STRUCTURED_CASES = 450
RUNTIME_CASES = 180
OPTION_CASES = 150
API_CASES = 80
TRAINING_CASES = 60


@pytest.fixture(scope="module")
def tools():
    yield campaign.Tools(BUILD)
    campaign.close_workers()


def test_bounded_campaign(tmp_path, tools):
    findings, seconds = campaign.campaign(
        BUILD, ["structured", "options", "api", "training", "runtime"],
        tmp_path, seed=SEED, cases=STRUCTURED_CASES,
        runtime_cases=RUNTIME_CASES, option_cases=OPTION_CASES,
        api_cases=API_CASES, training_cases=TRAINING_CASES, jobs=2)
    assert findings.cases == (STRUCTURED_CASES + OPTION_CASES + API_CASES +
                              TRAINING_CASES + RUNTIME_CASES)
    assert findings.oracle_errors == 0, "the oracle failed (see stderr)"
    written = "\n".join(f"  {p}" for p in findings.written[:60])
    assert findings.total() == 0, (
        f"{findings.summary()}\nin {seconds:.0f} s; reproducers (replay with "
        f"python3 fuzz/campaign.py --replay DIR):\n{written}")


@pytest.mark.parametrize("finding", campaign.corpus_findings(),
                         ids=lambda p: p.name)
def test_committed_reproducer(finding, tools):
    verdict = campaign.replay(finding, tools)
    assert verdict.cls == "fine", (
        f"{finding.name}: {verdict.cls}: {verdict.detail}\n"
        + (verdict.res.err[-1500:] if verdict.res else ""))


def build_fuzz_target(target):
    """Brings `target` of build-fuzz/ up to date; skips where build-fuzz/
    is not configured. Returns the build directory."""
    build = campaign.fuzz_build_dir()
    if not (build / "build.ninja").exists():
        pytest.skip(f"{build} is not configured (scripts/fuzz does it)")
    subprocess.run(["ninja", "-C", str(build), "--quiet",
                    f"-j{os.environ.get('PARTITA_JOBS', '2')}", target],
                   check=True)
    return build


def test_libfuzzer_corpus():
    build_fuzz_target("partita-fuzz-importer")
    failed = campaign.libfuzzer_regression()
    assert not failed, "\n".join(
        [f"{name}: {report.splitlines()[0]}" for name, report in failed] +
        ["", "last report:", failed[-1][1][-2000:]])


def test_options_fuzzer_corpus():
    # The declared options' fuzzer (fuzz/options) over its corpus: every
    # value is refused with a message or accepted, never a crash.
    build = build_fuzz_target("partita-fuzz-options")
    corpus = ROOT / "fuzz" / "corpus" / "options"
    result = subprocess.run(
        [str(build / "bin" / "partita-fuzz-options"), "-runs=0", str(corpus)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
