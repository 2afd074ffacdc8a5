#!/usr/bin/env python3
"""Compares two `partita-compile --emit exec` outputs up to buffer numbering.

Usage: exec-program-diff.py OLD NEW [PYTHON_PROTO_DIR]
PYTHON_PROTO_DIR holds program_pb2.py (protoc --python_out=DIR -I proto
proto/program.proto). Prints `same` when the programs equal each other after
(1) OLD's same-type ALIAS buffers (the view the old lowering gave a decided
nn.where) are folded into their target and (2) both are renumbered by first
use, with arena offsets (which follow the numbering among equal sizes)
dropped; arena_bytes, kinds, data, instructions and bindings still compare.
A dev tool for scripts/exec-regression.
"""

import sys

from google.protobuf import text_format


def split_ranks(text):
    programs, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("# rank "):
            if current:
                programs.append("".join(current))
            current = []
        else:
            current.append(line)
    programs.append("".join(current))
    return programs


def remap(pb, program, order, target=lambda i: i):
    """The program with buffers `order` (old ids) renumbered 0.., references
    resolved through `target` first."""
    new_id = {old: k for k, old in enumerate(order)}
    m = lambda i: new_id[target(i)] if i >= 0 else i
    out = pb.Program()
    out.CopyFrom(program)
    del out.buffers[:]
    by_id = {b.id: b for b in program.buffers}
    for old in order:
        b = out.buffers.add()
        b.CopyFrom(by_id[old])
        b.id = new_id[old]
        if b.kind == pb.Buffer.ALIAS:
            b.alias_of = m(b.alias_of)
    for inst in out.instructions:
        kind = inst.WhichOneof("op")
        if kind == "kernel":
            k = inst.kernel
            k.operands[:] = [m(i) for i in k.operands]
            k.results[:] = [m(i) for i in k.results]
            for step in k.epilogue:
                step.operand = m(step.operand)
            for step in k.cuda:
                if step.WhichOneof("step") == "launch":
                    step.launch.arguments[:] = [m(i) for i in step.launch.arguments]
                else:
                    mm = step.matmul
                    mm.a, mm.b, mm.d, mm.bias, mm.c = (
                        m(mm.a), m(mm.b), m(mm.d), m(mm.bias), m(mm.c))
        elif kind == "collective":
            c = inst.collective
            c.operand, c.result = m(c.operand), m(c.result)
        elif kind == "p2p":
            inst.p2p.buffer = m(inst.p2p.buffer)
    for binding in list(out.inputs) + list(out.outputs):
        binding.buffer = m(binding.buffer)
    return out


def collapse_aliases(pb, program):
    by_id = {b.id: b for b in program.buffers}
    views = {b.id: b.alias_of for b in program.buffers
             if b.kind == pb.Buffer.ALIAS and by_id[b.alias_of].type == b.type}

    def target(i):
        while i in views:
            i = views[i]
        return i
    order = [b.id for b in program.buffers if b.id not in views]
    return remap(pb, program, order, target)


def by_first_use(pb, program):
    order, seen = [], set()

    def see(i):
        if i >= 0 and i not in seen:
            seen.add(i)
            order.append(i)
    for binding in program.inputs:
        see(binding.buffer)
    for inst in program.instructions:
        kind = inst.WhichOneof("op")
        if kind == "kernel":
            for i in list(inst.kernel.operands) + list(inst.kernel.results):
                see(i)
            for step in inst.kernel.epilogue:
                see(step.operand)
        elif kind == "collective":
            see(inst.collective.operand)
            see(inst.collective.result)
        elif kind == "p2p":
            see(inst.p2p.buffer)
    for binding in program.outputs:
        see(binding.buffer)
    for b in program.buffers:
        see(b.alias_of if b.kind == pb.Buffer.ALIAS else -1)
        see(b.id)
    out = remap(pb, program, order)
    for b in out.buffers:
        b.arena_offset = 0
    return out


def main(old_path, new_path, proto_dir):
    sys.path.insert(0, proto_dir)
    import program_pb2 as pb

    def load(path):
        programs = []
        for text in split_ranks(open(path).read()):
            program = pb.Program()
            text_format.Parse(text, program)
            programs.append(program)
        return programs
    old = [collapse_aliases(pb, p) for p in load(old_path)]
    new = load(new_path)
    old = [text_format.MessageToString(by_first_use(pb, p)) for p in old]
    new = [text_format.MessageToString(by_first_use(pb, p)) for p in new]
    print("same" if old == new else "different")
    return 0 if old == new else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2],
                  sys.argv[3] if len(sys.argv) > 3 else "."))
