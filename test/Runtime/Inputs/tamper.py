"""Tampers with a Partita artifact the way someone who knows the format would.

tamper.py ART PROTO_DIR ACTION [ARGS...] [--keep-manifest-digest]

PROTO_DIR holds program_pb2.py (protoc --python_out of proto/program.proto).
After the change every file's digest in manifest.json and the manifest's own
`manifest_sha256` are recomputed the way the writer computes them
(docs/artifact.md), so only the loader's checks of the contents can refuse
the result; --keep-manifest-digest leaves `manifest_sha256` as it was.
What was changed is printed on stdout.

Actions:
  delete RANK            delete the first kernel whose result a later
                         instruction reads
  swap RANK              swap the first two adjacent kernels of which the
                         second reads what the first writes
  clobber RANK           move a kernel j before an earlier kernel i whose
                         operand's arena bytes j's result reuses (j reads
                         nothing made from i on): i then reads bytes that
                         are no longer its operand's
  recv-to-send RANK      turn the rank's first receive into a send
  reduction RANK OP      the reduction of the rank's first all_reduce
  attribute RANK OP NAME VALUE
                         integer attribute NAME of the rank's first OP
                         kernel
  rename-attribute RANK OP NAME NEW
                         rename attribute NAME of the rank's first OP
                         kernel to NEW
  dispatch RANK FIELD VALUE
                         integer field FIELD (destinations, counts, kind,
                         token; with token, async too) of the rank's
                         first dispatch
  manifest STATEMENT     run a Python statement on `m`, the manifest
  overlap                point the second of the first two weights of equal
                         dtype and shape at the first one's data
  duplicate              name the first weight twice in its file's header
  narrow                 declare the first f32 weight f16, its data_offsets
                         unchanged
"""

import hashlib
import json
import os
import struct
import sys


def canonical_digest(manifest):
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path):
    with open(path, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


class Artifact:
    def __init__(self, path, proto_dir):
        self.path = path
        sys.path.insert(0, proto_dir)
        import program_pb2  # noqa: E402 (generated at test time)
        self.pb = program_pb2
        with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
            self.manifest = json.load(f)

    def program(self, rank):
        p = self.pb.Program()
        with open(self.program_path(rank), "rb") as f:
            p.ParseFromString(f.read())
        return p

    def program_path(self, rank):
        return os.path.join(self.path, self.manifest["ranks"][rank]["program"])

    def save_program(self, rank, program):
        with open(self.program_path(rank), "wb") as f:
            f.write(program.SerializeToString())

    def save(self, keep_manifest_digest):
        m = self.manifest
        for relative in m["files"]:
            m["files"][relative] = file_digest(os.path.join(self.path,
                                                            relative))
        if not keep_manifest_digest:
            m["manifest_sha256"] = canonical_digest(m)
        with open(os.path.join(self.path, "manifest.json"), "w",
                  encoding="utf-8") as f:
            json.dump(m, f, indent=2)


def kernel_io(instruction):
    """(reads, writes) buffer ids of a kernel instruction."""
    k = instruction.kernel
    reads = list(k.operands) + [s.operand for s in k.epilogue
                                if s.operand >= 0]
    return set(reads), set(k.results)


def roots(program):
    """Buffer id -> the buffer that owns its memory (views resolved)."""
    result = {}
    for b in program.buffers:
        r = b.id
        while program.buffers[r].kind == program.buffers[r].ALIAS:
            r = program.buffers[r].alias_of
        result[b.id] = r
    return result


def kernels(program):
    return [i for i, x in enumerate(program.instructions)
            if x.WhichOneof("op") == "kernel"]


def describe(program, index):
    x = program.instructions[index]
    kind = x.kernel.op if x.WhichOneof("op") == "kernel" else x.WhichOneof(
        "op")
    return "instruction %d (%s at %s)" % (index, kind, x.location)


def delete(art, rank):
    p = art.program(rank)
    root = roots(p)
    for i in kernels(p):
        _, writes = kernel_io(p.instructions[i])
        written = {root[w] for w in writes}
        later = [j for j in kernels(p) if j > i and
                 {root[r] for r in kernel_io(p.instructions[j])[0]} & written]
        if later:
            print("deleted", describe(p, i))
            del p.instructions[i]
            art.save_program(rank, p)
            return
    sys.exit("no kernel to delete")


def swap_pair(art, rank, p, i):
    print("swapped", describe(p, i), "and", describe(p, i + 1))
    a, b = p.instructions[i], p.instructions[i + 1]
    a_copy = type(a)()
    a_copy.CopyFrom(a)
    a.CopyFrom(b)
    b.CopyFrom(a_copy)
    art.save_program(rank, p)


def swap(art, rank):
    p = art.program(rank)
    root = roots(p)
    ks = kernels(p)
    for i, j in zip(ks, ks[1:]):
        if j != i + 1:
            continue
        _, writes = kernel_io(p.instructions[i])
        reads, _ = kernel_io(p.instructions[j])
        if {root[w] for w in writes} & {root[r] for r in reads}:
            return swap_pair(art, rank, p, i)
    sys.exit("no pair to swap")


def arena_range(program, root_id):
    b = program.buffers[root_id]
    if b.kind != b.ACTIVATION:
        return None
    size = {1: 4, 2: 2, 3: 2, 4: 8, 5: 4, 6: 1, 7: 1}[b.type.dtype]
    for d in b.type.shape:
        size *= d
    return (b.arena_offset, b.arena_offset + size)


def clobber(art, rank):
    p = art.program(rank)
    root = roots(p)
    ks = kernels(p)
    for position, j in enumerate(ks):
        reads_j, writes_j = kernel_io(p.instructions[j])
        for i in reversed(ks[:position]):
            # j may move before i if nothing from i on produces what j reads.
            between = set()
            for k in range(i, j):
                x = p.instructions[k]
                if x.WhichOneof("op") == "kernel":
                    between |= {root[w] for w in kernel_io(x)[1]}
                else:
                    between = None
                    break
            if between is None or between & {root[r] for r in reads_j}:
                break
            reads_i, _ = kernel_io(p.instructions[i])
            for r in {root[x] for x in reads_i}:
                ra = arena_range(p, r)
                for w in {root[x] for x in writes_j}:
                    wa = arena_range(p, w)
                    if ra and wa and ra[0] < wa[1] and wa[0] < ra[1]:
                        print("moved", describe(p, j), "before",
                              describe(p, i))
                        moved = type(p.instructions[j])()
                        moved.CopyFrom(p.instructions[j])
                        del p.instructions[j]
                        p.instructions.insert(i, moved)
                        art.save_program(rank, p)
                        return
    sys.exit("no kernel whose move overwrites an operand")


def recv_to_send(art, rank):
    p = art.program(rank)
    for i, x in enumerate(p.instructions):
        if x.WhichOneof("op") == "p2p" and x.p2p.kind == x.p2p.RECV:
            x.p2p.kind = x.p2p.SEND
            print("turned", describe(p, i), "into a send to rank", x.p2p.peer)
            art.save_program(rank, p)
            return
    sys.exit("no receive")


def reduction(art, rank, op):
    p = art.program(rank)
    for i, x in enumerate(p.instructions):
        if (x.WhichOneof("op") == "collective" and
                x.collective.kind == x.collective.ALL_REDUCE):
            x.collective.reduction = op
            print("made", describe(p, i), "reduce with", op)
            art.save_program(rank, p)
            return
    sys.exit("no all_reduce")


def attribute(art, rank, op, name, value):
    p = art.program(rank)
    for i, x in enumerate(p.instructions):
        if x.WhichOneof("op") == "kernel" and x.kernel.op == op:
            x.kernel.attributes[name].i = int(value)
            print("set", name, "=", value, "on", describe(p, i))
            art.save_program(rank, p)
            return
    sys.exit("no %s kernel" % op)


def dispatch(art, rank, field, value):
    p = art.program(rank)
    for i, x in enumerate(p.instructions):
        if x.WhichOneof("op") == "collective" and x.collective.kind == 6:
            setattr(x.collective, field, int(value))
            if field == "token":
                setattr(x.collective, "async", True)
            print("set", field, "=", value, "on", describe(p, i))
            art.save_program(rank, p)
            return
    sys.exit("no dispatch")


def rename_attribute(art, rank, op, name, new):
    p = art.program(rank)
    for i, x in enumerate(p.instructions):
        if x.WhichOneof("op") == "kernel" and x.kernel.op == op:
            attrs = x.kernel.attributes
            attrs[new].CopyFrom(attrs[name])
            del attrs[name]
            print("renamed", name, "to", new, "on", describe(p, i))
            art.save_program(rank, p)
            return
    sys.exit("no %s kernel" % op)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    return data[8:8 + length].decode("utf-8"), data[8 + length:]


def write_safetensors(path, header_text, body):
    header = header_text.encode("utf-8")
    header += b" " * ((64 - (8 + len(header)) % 64) % 64)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + body)


def overlap(art):
    path = os.path.join(art.path, art.manifest["weights"][0])
    text, body = read_safetensors(path)
    header = json.loads(text)
    seen = {}
    for name in sorted(k for k in header if k != "__metadata__"):
        key = (header[name]["dtype"], tuple(header[name]["shape"]))
        if key in seen:
            first = seen[key]
            header[name]["data_offsets"] = header[first]["data_offsets"]
            print("pointed", name, "at the data of", first)
            write_safetensors(path, json.dumps(header), body)
            return
        seen[key] = name
    sys.exit("no two weights of one dtype and shape")


def duplicate(art):
    path = os.path.join(art.path, art.manifest["weights"][0])
    text, body = read_safetensors(path)
    header = json.loads(text)
    name = sorted(k for k in header if k != "__metadata__")[0]
    # JSON objects keep the last of two equal keys: the second entry, with
    # another tensor's offsets, is what a reader that misses it would use.
    other = sorted(k for k in header if k not in ("__metadata__", name))[0]
    entry = dict(header[name], data_offsets=header[other]["data_offsets"],
                 shape=header[other]["shape"], dtype=header[other]["dtype"])
    text = text.rstrip()
    text = text[:-1] + ", " + json.dumps(name) + ": " + json.dumps(entry) + "}"
    print("named", name, "twice")
    write_safetensors(path, text, body)


def narrow(art):
    path = os.path.join(art.path, art.manifest["weights"][0])
    text, body = read_safetensors(path)
    header = json.loads(text)
    name = sorted(k for k in header
                  if k != "__metadata__" and header[k]["dtype"] == "F32")[0]
    header[name]["dtype"] = "F16"
    print("declared", name, "F16")
    write_safetensors(path, json.dumps(header), body)


def main(argv):
    keep = "--keep-manifest-digest" in argv
    argv = [a for a in argv if a != "--keep-manifest-digest"]
    path, proto_dir, action, args = argv[1], argv[2], argv[3], argv[4:]
    art = Artifact(path, proto_dir)
    if action == "delete":
        delete(art, int(args[0]))
    elif action == "swap":
        swap(art, int(args[0]))
    elif action == "clobber":
        clobber(art, int(args[0]))
    elif action == "recv-to-send":
        recv_to_send(art, int(args[0]))
    elif action == "reduction":
        reduction(art, int(args[0]), args[1])
    elif action == "attribute":
        attribute(art, int(args[0]), args[1], args[2], args[3])
    elif action == "dispatch":
        dispatch(art, int(args[0]), args[1], args[2])
    elif action == "rename-attribute":
        rename_attribute(art, int(args[0]), args[1], args[2], args[3])
    elif action == "manifest":
        exec(args[0], {"m": art.manifest})  # noqa: S102 (test tool)
        print("edited the manifest:", args[0])
    elif action == "overlap":
        overlap(art)
    elif action == "duplicate":
        duplicate(art)
    elif action == "narrow":
        narrow(art)
    elif action == "rehash":
        pass
    else:
        sys.exit("unknown action " + action)
    art.save(keep)


if __name__ == "__main__":
    main(sys.argv)
