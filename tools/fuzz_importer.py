"""Fuzzing the ONNX importer: ``python tools/fuzz_importer.py --count 5000 --seed 0
--seeds ops,detection`` prints every finding and a summary (docs/fuzzing.md).

Seed families (``--seeds``, ``FAMILIES``):

* ``ops``: the one-op models of ``tests/test_onnx_ops.py``;
* ``detection``: the data-dependent post-processing of SSD-lite and Faster
  R-CNN (box decoding, per-class NonZero/GatherND/TopK, NMS inside an If,
  the RPN's per-level TopK), cut out of the whole models with the values
  the whole models compute there for real images as inputs
  (``fuzz_detection.py`` says why: a whole detector compiles in 10-45 s,
  these parts in about a second and less from the kernel cache);
* ``whole``: the two whole detectors, for fewer mutants (1 in 41 of a run
  of all three families): most are refused in a second (a deleted node
  leaves its consumers' inputs undefined), one that compiles takes 10-45 s.

``mutants(seeds, count, seed)`` yields ``(name, model, feeds)``: copies of
the seed models with one mutation each (an attribute changed or removed, an
input rewired or dropped, an input's dtype or shape changed, an initializer
truncated, the opset changed, a node duplicated or deleted), the same ones
for the same ``seed``. With ``mutate="inputs"`` (``--mutate inputs``) the
model stays as it is and one value of an integer input changes instead
(an index, a length, an axis, a count), to one just outside a bound, far
outside one, or an extreme of int64: what a served model gets from a
request. ``Runner`` compiles and runs each mutant with shapefn
in a worker process (so that a crash or a hang is seen, not suffered) and
``classify`` judges the outcome:

* ``ok``: it compiled and ran; where onnxruntime runs the mutant too, the
  outputs must match (in shape and dtype only where a TopK leaves the order
  to the implementation);
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
ALLOWED = ("InvalidOnnxModel", "UnsupportedOnnxOp", "ValueError", "TypeError", "IndexError", "MemoryError",
           "DataDependenceError")
# What an integer input's value may become (``--mutate inputs``).
_INDEX_VALUES = (-1, -2, 7, 64, 1_000_000, -1_000_000, 2**40, -(2**40), -(2**63), 2**63 - 1)
_DTYPES = (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.DOUBLE,
           TensorProto.FLOAT16, TensorProto.UINT8)


def mutants(seeds: dict, count: int, seed: int = 0, mutate: str = "model"):
    """``count`` mutants of ``seeds`` (family -> {name -> (model, feeds)},
    as ``seed_models`` gives), reproducibly: each picks a family by its
    share (``FAMILIES``), then a seed model and a mutation uniformly; with
    ``mutate="inputs"``, the model as it is and a value of an integer input
    changed (``input_value_changed``)."""
    if mutate not in ("model", "inputs"):
        raise ValueError(f"mutate must be 'model' or 'inputs', not {mutate!r}")
    rng = random.Random(seed)
    families = sorted(seeds)
    shares = [FAMILIES[f][1] if f in FAMILIES else 1.0 for f in families]
    names = {f: sorted(seeds[f]) for f in families}
    made = 0
    while made < count:
        family = rng.choices(families, shares)[0] if len(families) > 1 else families[0]
        name = names[family][rng.randrange(len(names[family]))]
        model, feeds = seeds[family][name]
        if mutate == "inputs":
            changed = input_value_changed(model, feeds, rng)
            if changed is not None:
                made += 1
                yield f"{name}/input_value_changed/{made}", model, changed
            continue
        kind = MUTATIONS[rng.randrange(len(MUTATIONS))]
        mutant = copy.deepcopy(model)
        if _MUTATE[kind](mutant, rng):
            made += 1
            yield f"{name}/{kind}/{made}", mutant, feeds


def input_value_changed(model, feeds, rng):
    """``feeds`` with one element of one integer graph input set to one of
    ``_INDEX_VALUES`` in every feed set (the same input and position), or
    None when the model takes no non-empty integer input."""
    names = [i.name for i in model.graph.input]
    # (a Loop's trip count runs the body as often as it says, in any runtime)
    trip_counts = {n.input[0] for graph in _graphs(model.graph) for n in graph.node if n.op_type == "Loop" and n.input}
    candidates = [k for k, name in enumerate(names)
                  if name not in trip_counts
                  and all(k < len(args) and np.asarray(args[k]).dtype.kind in "iu" and np.asarray(args[k]).size
                          for args in feeds)]
    if not candidates:
        return None
    k = candidates[rng.randrange(len(candidates))]
    value = _INDEX_VALUES[rng.randrange(len(_INDEX_VALUES))]
    changed = []
    for args in feeds:
        args = list(args)
        array = np.array(args[k])
        info = np.iinfo(array.dtype)
        flat = array.reshape(-1)
        flat[rng.randrange(flat.size)] = min(max(value, info.min), info.max)
        args[k] = flat.reshape(array.shape)
        changed.append(args)
    return changed


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
    """An initializer's data cut short; or a Constant node's (the detection
    exports keep their constants in nodes)."""
    inits = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                             for a in n.attribute if a.name == "value"]
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
    """What an error message may name: nodes (subgraphs' too), ops, inputs,
    initializers, outputs."""
    g = model.graph
    found = {i.name for i in g.input} | {o.name for o in g.output}
    for graph in _graphs(g):
        found |= {n.name for n in graph.node} | {n.op_type for n in graph.node}
        found |= {i.name for i in graph.initializer}
        found |= {t for n in graph.node for t in (*n.input, *n.output)}
    return {f for f in found if f}


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


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
        stage = "compile"
        try:
            exe = shapefn.compile(shapefn.from_onnx(_parse(model_bytes)), "host")
            vm = shapefn.VirtualMachine(exe, "host")
            runs, stage = [], "run"
            for args in feeds:
                outs = vm(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                runs.append([np.asarray(o.numpy()) for o in outs])
            reply = ("ok", runs)
        except Exception as e:  # noqa: BLE001 - classified by the parent
            reply = ("error", type(e).__name__, type(e).__module__, str(e), stage)
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
        """("ok", outputs) | ("error", type, module, message, "compile" or "run") | ("crash", code) | ("hang",)."""
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

    ort.set_default_logger_severity(4)  # (its warnings about mutants would bury the findings)
    options = ort.SessionOptions()
    # (its graph optimizations accept some invalid models: a Reshape to a
    # count that differs, whose result only a fused node reads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return [session.run(None, dict(zip(names, args))) for args in feeds]
    except Exception:  # noqa: BLE001 - onnxruntime refusing the mutant is not ours to judge
        return None


def classify(name, model, feeds, outcome) -> tuple[str, str | None]:
    """``(verdict, why)``: ``("ok", None)`` or ``("refused", None)`` if
    ``outcome`` is acceptable, else ``("finding", what is wrong)``."""
    problem = judge(name, model, feeds, outcome)
    if problem is None:
        return ("refused" if outcome[0] == "error" else "ok"), None
    return "finding", problem


def judge(name, model, feeds, outcome) -> str | None:
    """None if ``outcome`` is acceptable, else what is wrong."""
    if outcome[0] == "crash":
        return f"{name}: the worker died (exit code {outcome[1]})"
    if outcome[0] == "hang":
        return f"{name}: no answer in time"
    if outcome[0] == "error":
        _, kind, module, message, _ = outcome
        if kind not in ALLOWED or module.startswith("tvm"):
            return f"{name}: {module}.{kind}: {message[:300]}"
        if not any(n in message for n in names_in(model)) and "opset" not in message:
            return f"{name}: {kind} names nothing of the model: {message[:300]}"
        return None
    want = reference(model, feeds)
    if want is None:
        return None
    problem = _differs(name, model, outcome[1], want)
    if problem and len(model.graph.node) <= _REFERENCE_MAX_NODES:
        # Where the runtimes part (an int64 product that overflows: numpy
        # and ONNX's reference wrap, onnxruntime saturates; a shape that
        # onnxruntime infers otherwise), ONNX's reference decides.
        onnx_reference = _onnx_reference(model, feeds)
        if onnx_reference is not None and _differs(name, model, outcome[1], onnx_reference) is None:
            return None
    return problem


# ONNX's reference evaluator runs in Python: minutes for a whole detector,
# whose mutants onnxruntime alone judges.
_REFERENCE_MAX_NODES = 64


def _onnx_reference(model, feeds):
    """ONNX's reference evaluator's outputs for each feed, or None."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(model)
        names = [i.name for i in model.graph.input]
        return [evaluator.run(None, dict(zip(names, args))) for args in feeds]
    except Exception:  # noqa: BLE001 - a reference that cannot run decides nothing
        return None


def _differs(name, model, got, want) -> str | None:
    """What differs between shapefn's runs ``got`` and a reference's ``want``."""
    values = not _order_unspecified(model)
    whole = name.startswith("whole/")
    for got_run, want_run in zip(got, want):
        if len(got_run) != len(want_run):
            return f"{name}: {len(got_run)} outputs, onnxruntime gives {len(want_run)}"
        for g, w in zip(got_run, want_run):
            w = np.asarray(w)
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"{name}: output {g.dtype}{list(g.shape)}, onnxruntime's {w.dtype}{list(w.shape)}"
            if values and not (_same(g, w, whole) or whole and _same(_rows_sorted(g), _rows_sorted(w), whole)):
                return f"{name}: outputs differ from onnxruntime's"
    return None


# A whole detector's outputs are compared as the model tests compare them:
# coordinates within 1e-3 (float sums in another order through ~100
# layers), and as sets of rows (scores close together may swap).
_TOLERANCE = {False: dict(rtol=1e-4, atol=1e-5), True: dict(rtol=1e-3, atol=1e-3)}


def _same(got, want, whole: bool) -> bool:
    if got.dtype.kind in "fc":
        return np.allclose(got, want, equal_nan=True, **_TOLERANCE[whole])
    return np.array_equal(got, want)


def _rows_sorted(value):
    if value.ndim == 0:
        return value
    rows = value.reshape(len(value), -1)
    return rows[np.lexsort(rows.T[::-1])] if rows.shape[1] else rows


def _order_unspecified(model) -> bool:
    """Whether a TopK of ``model`` leaves its order to the implementation
    (``sorted`` other than 1, as onnxruntime reads it; shapefn sorts): then
    only the outputs' shapes and dtypes are compared."""
    return any(n.op_type == "TopK" and any(a.name == "sorted" and a.i != 1 for a in n.attribute)
               for graph in _graphs(model.graph) for n in graph.node)


def op_seeds() -> dict:
    """The one-op models of ``tests/test_onnx_ops.py`` (name -> (model, feeds))."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import test_onnx_ops

    seeds = {}
    for group in test_onnx_ops.GROUPS:
        seeds.update(group)
    return seeds


def _detection_seeds() -> dict:
    import fuzz_detection

    return fuzz_detection.detection_seeds()


def _whole_seeds() -> dict:
    import fuzz_detection

    return fuzz_detection.whole_seeds()


# Seed families: how to make them, and the share of mutants each gets when
# chosen (a whole detector compiles in 10-45 s, a one-op model or a
# detection part in about a second, less from the kernel cache).
FAMILIES = {"ops": (op_seeds, 1.0), "detection": (_detection_seeds, 1.0), "whole": (_whole_seeds, 0.05)}


def seed_models(families=("ops",)) -> dict:
    """The seeds of ``families`` (names of ``FAMILIES``): family -> {name -> (model, feeds)}."""
    return {family: FAMILIES[family][0]() for family in families}


def main(argv=None) -> int:
    import argparse
    import collections

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", default="ops,detection",
                        help=f"comma-separated seed families, of {', '.join(FAMILIES)}")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a mutant may take")
    parser.add_argument("--mutate", choices=("model", "inputs"), default="model",
                        help="what a mutant changes: the model, or a value of an integer input")
    parser.add_argument("--verbose", action="store_true", help="print every mutant's verdict and seconds")
    args = parser.parse_args(argv)
    families = args.seeds.split(",")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown seed families {unknown}; choose from {', '.join(FAMILIES)}")
    runner, verdicts = Runner(args.timeout), collections.Counter()
    start = time.monotonic()
    for name, model, feeds in mutants(seed_models(families), args.count, args.seed, args.mutate):
        began = time.monotonic()
        verdict, why = classify(name, model, feeds, runner.run(model, feeds))
        verdicts[verdict] += 1
        if why:
            print(f"{verdict}:", why, flush=True)
        elif args.verbose:
            print(f"{verdict}: {name} ({time.monotonic() - began:.1f} s)", flush=True)
    runner.close()
    print(f"{args.count} mutants ({args.mutate}) of {args.seeds} (seed {args.seed}) in "
          f"{time.monotonic() - start:.0f} s: {dict(sorted(verdicts.items()))}")
    return 1 if verdicts["finding"] else 0


if __name__ == "__main__":
    sys.exit(main())
