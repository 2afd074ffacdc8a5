"""Writes models whose weight lives in an external data file, some of them
pointing where an importer must refuse to read. Usage: make_external_data.py DIR
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper


def model_with_external(path, location, offset=0, length=None):
    w = TensorProto()
    w.name = "W"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([16, 16])
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        e = w.external_data.add()
        e.key, e.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
        "external",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 16])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main(root):
    weights = np.arange(256, dtype=np.float32).reshape(16, 16) / 256
    os.makedirs(os.path.join(root, "model", "data"), exist_ok=True)
    model_dir = os.path.join(root, "model")
    # 64 bytes of padding before the weights, to exercise the offset.
    blob = b"\0" * 64 + weights.tobytes()
    with open(os.path.join(model_dir, "weights.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(model_dir, "data", "w.bin"), "wb") as f:
        f.write(weights.tobytes())
    with open(os.path.join(root, "outside.bin"), "wb") as f:
        f.write(weights.tobytes())
    os.symlink("weights.bin", os.path.join(model_dir, "link.bin"))
    # A hard link may name a file anywhere on the file system: refused too.
    os.link(os.path.join(root, "outside.bin"), os.path.join(model_dir, "hard.bin"))
    # Reading a FIFO would block until someone writes to it.
    os.mkfifo(os.path.join(model_dir, "fifo.bin"))

    cases = {
        "ok": ("weights.bin", 64, 1024),
        "subdir": ("data/w.bin", 0, None),
        "escape": ("../outside.bin", 0, None),
        "absolute": (os.path.join(root, "outside.bin"), 0, None),
        "symlink": ("link.bin", 0, None),
        "hardlink": ("hard.bin", 0, None),
        "past_end": ("weights.bin", 512, 1024),
        "bad_length": ("weights.bin", 0, 1000),
        "missing": ("nothere.bin", 0, None),
        "fifo": ("fifo.bin", 0, None),
        "folder": ("data", 0, None),
    }
    for name, (location, offset, length) in cases.items():
        model_with_external(os.path.join(model_dir, name + ".onnx"), location,
                            offset, length)


if __name__ == "__main__":
    main(sys.argv[1])
