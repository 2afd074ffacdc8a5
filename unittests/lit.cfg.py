# -*- Python -*-
# Runs every GoogleTest binary under the build's unittests/ folder.

import os

import lit.formats

config.name = "Partita-Unit"
config.suffixes = []
# Every GoogleTest binary of the project, the runtime's included, is built
# under the build's unittests/ folder (partita_add_unittest).
config.test_exec_root = os.path.join(config.partita_obj_root, "unittests")
config.test_source_root = config.test_exec_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
# The sanitizers' settings reach the test binaries (scripts/test --sanitize).
for name in ["ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS",
             "ASAN_SYMBOLIZER_PATH"]:
    if name in os.environ:
        config.environment[name] = os.environ[name]
