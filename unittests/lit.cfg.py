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
