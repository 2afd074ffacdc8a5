#!/usr/bin/env python3
"""Checks that numbered op constraints, verifiers and tests agree.

For each dialect: every id (`matmul_c2`) in a **Constraints** list of its
ops, as the generated docs/generated/<Dialect>Dialect.md spells them out (op
classes build ids from their mnemonic, so the .td text alone does not name
them all), must appear in an `expected-error` of its invalid.mlir, and every
id its C++ or its tests name must be documented.
Usage: check-constraints.py SOURCE_ROOT
"""

import pathlib
import re
import sys

ID = re.compile(r"\b([a-z][a-z0-9_]*_c[0-9]+)\b")
DIALECTS = ["NN", "Dist", "Exec"]


def ids_in(paths, line_filter=None):
    found = set()
    for path in paths:
        for line in path.read_text().splitlines():
            if line_filter is None or line_filter(line):
                found.update(ID.findall(line))
    return found


def main(root):
    root = pathlib.Path(root)
    problems = []
    for dialect in DIALECTS:
        doc = root / "docs/generated" / f"{dialect}Dialect.md"
        lib_dir = root / "lib/Dialect" / dialect / "IR"
        invalid = root / "test/Dialect" / dialect / "invalid.mlir"
        if not doc.exists() or not invalid.exists():
            problems.append(f"{dialect}: missing {doc} or {invalid}")
            continue
        documented = ids_in([doc])
        if not documented:
            problems.append(f"{dialect}: no numbered constraints in {doc}")
            continue
        tested = ids_in([invalid], lambda l: "expected-error" in l)
        emitted = ids_in(sorted(lib_dir.glob("*.cpp")))
        for name in sorted(documented - tested):
            problems.append(f"{dialect}: {name} has no case in {invalid.name}")
        for name in sorted(emitted - documented):
            problems.append(f"{dialect}: {name} is emitted but not documented")
        for name in sorted(tested - documented):
            problems.append(f"{dialect}: {name} is tested but not documented")
        print(f"{dialect}: {len(documented)} constraints, "
              f"{len(documented & tested)} tested")
    for problem in problems:
        print("error: " + problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
