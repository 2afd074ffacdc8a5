# -*- Python -*-
# lit configuration for Partita's regression tests.

import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "Partita"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.partita_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%partita_src_root", config.partita_src_root))
config.substitutions.append(("%partita_obj_root", config.partita_obj_root))

llvm_config.with_system_environment(
    ["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "PYENV_ROOT", "PYENV_VERSION"])
# The sanitizers' settings (scripts/test --sanitize sets them), for every
# tool a test runs. lit passes most of them by default; naming them here
# keeps that true whatever lit's default list becomes.
llvm_config.with_system_environment(
    ["ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "ASAN_SYMBOLIZER_PATH"])

# A build with PARTITA_SANITIZE=ON: %sanitizer_env is what an interpreter
# needs to import the sanitized Python extension (`env %sanitizer_env
# python3 ...`): the runtimes preloaded, and no leak check of the
# interpreter's own objects. %sanitizer_flags are the compiler flags of a
# program a test builds against libpartita. Both are empty in other builds.
if config.partita_sanitizer_preload:
    config.available_features.add("sanitize")
    config.substitutions.append(
        ("%sanitizer_env", "LD_PRELOAD=" + config.partita_sanitizer_preload +
         " LSAN_OPTIONS=detect_leaks=0"))
else:
    config.substitutions.append(("%sanitizer_env", ""))
config.substitutions.append(("%sanitizer_flags", config.partita_sanitize_flags))
llvm_config.use_default_substitutions()

# %python is the interpreter scripts/setup installed the requirements into
# (onnx, onnxruntime, numpy), not the one running lit.
python = os.environ.get("PARTITA_PYTHON") or shutil.which("python3")
config.substitutions.insert(0, ("%python", python))

# FileCheck always runs with -enable-var-scope (STYLE.md). The default
# substitutions already name FileCheck, so pass the flag through its
# environment variable.
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

# Tests that build fatbins need the CUDA toolkit's nvcc (no GPU).
if config.partita_nvcc and os.access(config.partita_nvcc, os.X_OK):
    config.available_features.add("nvcc")
    config.substitutions.append(("%nvcc", config.partita_nvcc))
# Fatbins built by tests are cached per build tree, not in the user's home.
config.environment["PARTITA_CACHE_DIR"] = os.path.join(
    config.partita_obj_root, "partita-cache")

tool_dirs = [config.partita_tools_dir, config.llvm_tools_dir]
tools = [
    ToolSubst("partita-opt", unresolved="fatal"),
    ToolSubst("partita-translate", unresolved="fatal"),
    ToolSubst("partita-compile", unresolved="fatal"),
    ToolSubst("partita-run", unresolved="fatal"),
    ToolSubst("split-file", unresolved="fatal"),
    ToolSubst("partita-example-cpp", unresolved="fatal"),
]
llvm_config.add_tool_substitutions(tools, tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.partita_tools_dir, append_path=True)
