"""Fuzzing the ONNX importer: ``python tools/fuzz_importer.py --count 5000 --seed 0``
prints every finding and a summary.

``mutants(seeds, count, seed)`` yields ``(name, model, feeds)``: copies of
the seed models with one mutation each (an attribute changed or removed, an
input rewired or dropped, an input's dtype or shape changed, an initializer
truncated, the opset changed, a node duplicated or deleted). ``Runner``
compiles and runs each mutant with shapefn in a worker process (so that a
crash or a hang is seen, not suffered) and classifies the outcome:

* ``ok``: it compiled and ran; where onnxruntime runs the mutant too, the
  outputs must match;
* ``refused``: a shapefn exception (``InvalidOnnxModel``,
  ``UnsupportedOnnxOp``, ``ValueError``, ``TypeError``) whose message names
  a node, an op, an input or an initializer of the model;
* anything else is a finding: a crash, a hang, another exception, an error
  message naming nothing of the model, or outputs that differ from
  onnxruntime's.
"""
from __future__ import annotations

import copy
import os
import pickle
import random
import select
import struct
import subprocess
import sys
import time

import numpy as np
from onnx import TensorProto

MUTATIONS = ("attribute_changed", "attribute_removed", "input_rewired", "input_dropped", "dtype_changed",
             "shape_changed", "initializer_truncated", "opset_changed", "node_duplicated", "node_deleted")
ALLOWED = ("InvalidOnnxModel", "UnsupportedOnnxOp", "ValueError", "TypeError", "DataDependenceError")
_DTYPES = (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.DOUBLE,
           TensorProto.FLOAT16, TensorProto.UINT8)


def mutants(seeds: dict, count: int, seed: int = 0):
    """``count`` mutants of ``seeds`` (name -> (model, feeds)), reproducibly."""
    rng = random.Random(seed)
    names = sorted(seeds)
    made = 0
    while made < count:
        name = names[rng.randrange(len(names))]
        model, feeds = seeds[name]
        kind = MUTATIONS[rng.randrange(len(MUTATIONS))]
        mutant = copy.deepcopy(model)
        if _MUTATE[kind](mutant, rng):
            made += 1
            yield f"{name}/{kind}/{made}", mutant, feeds


def _node(model, rng):
    nodes = model.graph.node
    return nodes[rng.randrange(len(nodes))] if len(nodes) else None


def _attribute_changed(model, rng) -> bool:
    node = _node(model, rng)
    if node is None or not node.attribute:
        return False
    attr = node.attribute[rng.randrange(len(node.attribute))]
    if attr.type == attr.INT:
        attr.i = rng.choice([-1, 0, 1, 2, 3, 7, attr.i + 1, attr.i - 1, -(2**31), 2**40])
    elif attr.type == attr.FLOAT:
        attr.f = rng.choice([0.0, -1.0, 1e30, float("nan"), attr.f * 2])
    elif attr.type == attr.INTS:
        values = list(attr.ints)
        choice = rng.randrange(3)
        if choice == 0 and values:
            values.pop(rng.randrange(len(values)))
        elif choice == 1:
            values.append(rng.choice([0, 1, -1, 5]))
        else:
            values = [rng.choice([-3, -1, 0, 1, 2, 9]) for _ in values]
        del attr.ints[:]
        attr.ints.extend(values)
    elif attr.type == attr.STRING:
        attr.s = rng.choice([b"", b"nonsense", attr.s.upper()])
    else:
        return False
    return True


def _one_deleted(field: str):
    """A mutation deleting one entry of a random node's ``field``."""
    def mutate(model, rng) -> bool:
        node = _node(model, rng)
        entries = getattr(node, field) if node is not None else []
        if not entries:
            return False
        del entries[rng.randrange(len(entries))]
        return True

    return mutate


_attribute_removed = _one_deleted("attribute")
_input_dropped = _one_deleted("input")


def _available(model) -> list[str]:
    names = [i.name for i in model.graph.input] + [i.name for i in model.graph.initializer]
    return names + [o for n in model.graph.node for o in n.output]


def _input_rewired(model, rng) -> bool:
    node = _node(model, rng)
    if node is None or not node.input:
        return False
    node.input[rng.randrange(len(node.input))] = rng.choice(_available(model) + ["missing_tensor"])
    return True


def _dtype_changed(model, rng) -> bool:
    values = list(model.graph.input) + list(model.graph.output)
    if not values:
        return False
    value = values[rng.randrange(len(values))]
    value.type.tensor_type.elem_type = rng.choice(_DTYPES)
    return True


def _shape_changed(model, rng) -> bool:
    inputs = [i for i in model.graph.input if i.type.tensor_type.shape.dim]
    if not inputs:
        return False
    dims = inputs[rng.randrange(len(inputs))].type.tensor_type.shape.dim
    choice = rng.randrange(3)
    if choice == 0:
        dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 2, 7])
    elif choice == 1:
        dims.add().dim_value = 1
    else:
        del dims[rng.randrange(len(dims))]
    return True


def _initializer_truncated(model, rng) -> bool:
    inits = model.graph.initializer
    if not inits:
        return False
    init = inits[rng.randrange(len(inits))]
    if init.raw_data:
        init.raw_data = init.raw_data[: rng.randrange(len(init.raw_data))]
    else:
        for field in ("float_data", "int64_data", "int32_data", "double_data"):
            data = getattr(init, field)
            if len(data):
                del data[rng.randrange(len(data)):]
                return True
        if init.dims:
            init.dims[0] += 1
    return True


def _opset_changed(model, rng) -> bool:
    model.opset_import[0].version = rng.choice([1, 6, 9, 10, 13, 17, 21, 99])
    return True


def _node_duplicated(model, rng) -> bool:
    node = _node(model, rng)
    if node is None:
        return False
    model.graph.node.insert(rng.randrange(len(model.graph.node) + 1), copy.deepcopy(node))
    return True


def _node_deleted(model, rng) -> bool:
    if not model.graph.node:
        return False
    del model.graph.node[rng.randrange(len(model.graph.node))]
    return True


_MUTATE = {"attribute_changed": _attribute_changed, "attribute_removed": _attribute_removed,
           "input_rewired": _input_rewired, "input_dropped": _input_dropped, "dtype_changed": _dtype_changed,
           "shape_changed": _shape_changed, "initializer_truncated": _initializer_truncated,
           "opset_changed": _opset_changed, "node_duplicated": _node_duplicated, "node_deleted": _node_deleted}


def names_in(model) -> set[str]:
    """What an error message may name: nodes, ops, inputs, initializers, outputs."""
    g = model.graph
    found = {n.name for n in g.node} | {n.op_type for n in g.node} | {i.name for i in g.input}
    found |= {i.name for i in g.initializer} | {o.name for o in g.output}
    found |= {t for n in g.node for t in (*n.input, *n.output)}
    return {f for f in found if f}


# ----- the worker: compiles and runs one model per request -------------------

def _send(stream, obj) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    return pickle.loads(stream.read(struct.unpack("<Q", header)[0]))  # noqa: S301 - our own worker


def worker() -> None:
    """Serves requests on stdin: (model bytes, feeds) -> outcome."""
    import shapefn

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # (nothing but replies on the pipe)
    while True:
        try:
            model_bytes, feeds = _receive(stdin)
        except EOFError:
            return
        try:
            exe = shapefn.compile(shapefn.from_onnx(_parse(model_bytes)), "host")
            vm = shapefn.VirtualMachine(exe, "host")
            runs = []
            for args in feeds:
                outs = vm(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                runs.append([np.asarray(o.numpy()) for o in outs])
            reply = ("ok", runs)
        except Exception as e:  # noqa: BLE001 - classified by the parent
            reply = ("error", type(e).__name__, type(e).__module__, str(e))
        _send(stdout, reply)


def _parse(data: bytes):
    import onnx

    return onnx.load_from_string(data)


class Runner:
    """A worker process, restarted after a crash or a hang."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self.process = None

    def _start(self):
        here = os.path.dirname(os.path.abspath(__file__))
        serve = f"import sys; sys.path.insert(0, {here!r}); import fuzz_importer; fuzz_importer.worker()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", serve],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def run(self, model, feeds):
        """("ok", outputs) | ("error", type, module, message) | ("crash", code) | ("hang",)."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        try:
            _send(self.process.stdin, (model.SerializeToString(), feeds))
        except BrokenPipeError:
            return self._died()
        deadline = time.monotonic() + self.timeout_s
        out = self.process.stdout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.process.kill()
                self.process.wait()
                self.process = None
                return ("hang",)
            ready, _, _ = select.select([out], [], [], remaining)
            if ready:
                try:
                    return _receive(out)
                except (EOFError, pickle.UnpicklingError):
                    return self._died()

    def _died(self):
        code = self.process.wait()
        self.process = None
        return ("crash", code)

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
            self.process = None


def reference(model, feeds):
    """onnxruntime's outputs for each feed, or None where it refuses."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return [session.run(None, dict(zip(names, args))) for args in feeds]
    except Exception:  # noqa: BLE001 - onnxruntime refusing the mutant is not ours to judge
        return None


def judge(name, model, feeds, outcome) -> str | None:
    """None if ``outcome`` is acceptable, else what is wrong."""
    if outcome[0] == "crash":
        return f"{name}: the worker died (exit code {outcome[1]})"
    if outcome[0] == "hang":
        return f"{name}: no answer in time"
    if outcome[0] == "error":
        _, kind, module, message = outcome
        if kind not in ALLOWED or module.startswith("tvm"):
            return f"{name}: {module}.{kind}: {message[:300]}"
        if not any(n in message for n in names_in(model)) and "opset" not in message:
            return f"{name}: {kind} names nothing of the model: {message[:300]}"
        return None
    want = reference(model, feeds)
    if want is None:
        return None
    for got_run, want_run in zip(outcome[1], want):
        if len(got_run) != len(want_run):
            return f"{name}: {len(got_run)} outputs, onnxruntime gives {len(want_run)}"
        for g, w in zip(got_run, want_run):
            w = np.asarray(w)
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"{name}: output {g.dtype}{list(g.shape)}, onnxruntime's {w.dtype}{list(w.shape)}"
            if g.dtype.kind in "fc":
                if not np.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True):
                    return f"{name}: outputs differ from onnxruntime's"
            elif not np.array_equal(g, w):
                return f"{name}: outputs differ from onnxruntime's"
    return None


def seed_models() -> dict:
    """The one-op models of ``tests/test_onnx_ops.py`` (name -> (model, feeds))."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import test_onnx_ops

    seeds = {}
    for group in test_onnx_ops.GROUPS:
        seeds.update(group)
    return seeds


def main(argv=None) -> int:
    import argparse
    import collections

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a mutant may take")
    args = parser.parse_args(argv)
    runner, outcomes, findings = Runner(args.timeout), collections.Counter(), []
    start = time.monotonic()
    for name, model, feeds in mutants(seed_models(), args.count, args.seed):
        outcome = runner.run(model, feeds)
        outcomes[outcome[0]] += 1
        problem = judge(name, model, feeds, outcome)
        if problem:
            findings.append(problem)
            print("finding:", problem, flush=True)
    runner.close()
    print(f"{args.count} mutants (seed {args.seed}) in {time.monotonic() - start:.0f} s: "
          f"{dict(outcomes)}; {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
