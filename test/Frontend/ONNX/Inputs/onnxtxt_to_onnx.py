"""Converts ONNX textual syntax to a binary model with the onnx package's
parser: libonnx-dev's parser (what partita-compile reads .onnxtxt with)
predates quoted dimensions such as float["past + seq", 4].

Usage: onnxtxt_to_onnx.py IN.onnxtxt OUT.onnx
"""

import sys

import onnx
import onnx.parser

with open(sys.argv[1]) as f:
    model = onnx.parser.parse_model(f.read())
onnx.save(model, sys.argv[2])
