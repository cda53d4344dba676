#!/usr/bin/env python3
"""Make a "graph-only" copy of an ONNX model by dropping the data of its large float weights.

Usage:
    python strip.py FULL.onnx OUT.graph.onnx [--min-elements 64]

Every FLOAT initializer (top-level graph and any If/Loop/Scan subgraph) with more than
``--min-elements`` elements loses its data but keeps its name, dims and data_type.
Everything else -- integer tensors, small float tensors, Constant nodes, anything that
encodes shapes, indices, anchors or thresholds -- is copied verbatim.

Marking convention (shared with materialize.py)
-----------------------------------------------
A stripped tensor is an ordinary embedded TensorProto (data_location DEFAULT) with
    * all value fields empty (no raw_data, no float_data), and
    * doc_string == "stripped: refill with materialize.py".
The model also gets a metadata_props entry ``weights_stripped = <count>``.

Why this and not external data pointing at a missing file: the graph-only file still loads
with a plain ``onnx.load(path)`` (no flags, no companion file), shape inference works, and
nothing depends on relative paths.  At the same time it cannot be run by mistake:
``onnx.checker.check_model`` rejects it ("should contain one and only one value field") and
onnxruntime refuses to create a session ("data field count (0) does not match expected
count from shape").  materialize.py turns it back into a valid, runnable model.
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto

from materialize import MARKER, META_KEY, iter_graphs  # noqa: E402,F401  (this folder's; the marking convention)


def strip_model(model, min_elements=64):
    """Strip large float initializers of ``model`` in place; return how many were stripped."""
    count = 0
    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type != TensorProto.FLOAT or int(np.prod(t.dims, dtype=np.int64)) <= min_elements:
                continue
            if t.data_location == TensorProto.EXTERNAL:
                raise ValueError(f"{t.name}: load the model with its external data first")
            t.ClearField("raw_data")
            t.ClearField("float_data")
            t.doc_string = MARKER
            count += 1
    for p in list(model.metadata_props):
        if p.key == META_KEY:
            model.metadata_props.remove(p)
    model.metadata_props.add(key=META_KEY, value=str(count))
    return count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("full", help="input ONNX model with weights")
    ap.add_argument("out", help="output graph-only ONNX file")
    ap.add_argument("--min-elements", type=int, default=64,
                    help="strip FLOAT initializers with more than this many elements (default 64)")
    args = ap.parse_args(argv)
    model = onnx.load(args.full)
    n = strip_model(model, args.min_elements)
    onnx.save(model, args.out)
    print(f"stripped {n} initializers -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
