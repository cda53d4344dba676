"""The importer fuzzed (tools/fuzz_importer.py, docs/fuzzing.md) on a fixed
subset in bounded time: mutants of the one-op models and of the detection
parts (tools/fuzz_detection.py), each compiled and run in a worker process
and judged against onnxruntime. Any finding fails the test, a refusal at
run time naming no node of the model included."""
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import fuzz_importer  # noqa: E402

# (compiling the detection parts' kernels dominates with an empty kernel
# cache); the full run is docs/fuzzing.md's.
pytestmark = pytest.mark.model
SUBSET = {"ops": (600, 11), "detection": (250, 12)}  # family -> (mutants, seed)


@pytest.fixture(scope="module")
def seeds():
    return fuzz_importer.seed_models(tuple(SUBSET))


@pytest.fixture(scope="module")
def runner():
    runner = fuzz_importer.Runner(timeout_s=300)
    yield runner
    runner.close()


# Integer inputs given other values (indices, lengths, axes, counts): what a
# served model gets from a request (family -> (mutants, seed)).
INPUTS_SUBSET = {"ops": (300, 13), "detection": (80, 14)}


@pytest.mark.parametrize("family, mutate", [*((f, "model") for f in SUBSET), *((f, "inputs") for f in INPUTS_SUBSET)])
def test_mutants_compile_and_match_onnxruntime_or_are_refused_naming_the_node(seeds, runner, family, mutate):
    count, seed = (SUBSET if mutate == "model" else INPUTS_SUBSET)[family]
    findings, verdicts = [], []
    for name, model, feeds in fuzz_importer.mutants({family: seeds[family]}, count, seed, mutate):
        verdict, why = fuzz_importer.classify(name, model, feeds, runner.run(model, feeds))
        verdicts.append(verdict)
        if verdict == "finding":
            findings.append(why)
    assert findings == []
    assert "ok" in verdicts
    # (the subset exercises both outcomes, but for the one-op models' integer
    # inputs: values of elementwise ops and reductions, whose mutants all run)
    assert "refused" in verdicts or (family, mutate) == ("ops", "inputs")


def test_the_judge_finds_what_is_wrong(seeds, runner):
    """The fuzz test can fail: a seed model's outputs changed, an error naming
    nothing, a TVM error and a crash are each a finding."""
    name, (model, feeds) = next(iter(sorted(seeds["detection"].items())))
    outcome = runner.run(model, feeds)
    assert fuzz_importer.classify(name, model, feeds, outcome) == ("ok", None)
    runs = [[out + 1 if out.dtype.kind == "f" else out for out in run] for run in outcome[1]]
    assert fuzz_importer.classify(name, model, feeds, ("ok", runs))[0] == "finding"
    assert fuzz_importer.classify(name, model, feeds, ("ok", [[o[:0] for o in run] for run in runs]))[0] == "finding"
    for bad in [("error", "ValueError", "builtins", "negative dimension -1", "compile"),
                ("error", "InternalError", "tvm.error", f"{model.graph.node[0].name}: Check failed", "compile"),
                ("error", "ValueError", "builtins", "kernel 'k' failed: ValueError: Mismatched x1.shape[1]", "run"),
                ("crash", -11), ("hang",)]:
        assert fuzz_importer.classify(name, model, feeds, bad)[0] == "finding", bad
    named = ("error", "ValueError", "builtins", f"ONNX node '{model.graph.node[0].name}': refused", "compile")
    assert fuzz_importer.classify(name, model, feeds, named) == ("refused", None)
    assert np.asarray(outcome[1][0][0]).size > 0  # (the seed's outputs are not empty: the +1 changed something)


def test_onnx_reference_decides_where_the_runtimes_part():
    """An int64 product that overflows: numpy and ONNX's reference wrap,
    onnxruntime saturates. The wrapped result is no finding, another is."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("ReduceProd", ["x"], ["y"], keepdims=0)], "t",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = [[np.array([2**63 - 1, 6, 2, 8], np.int64)]]
    wrapped = np.prod(feeds[0][0])
    assert fuzz_importer.classify("prod", model, feeds, ("ok", [[wrapped]])) == ("ok", None)
    assert fuzz_importer.classify("prod", model, feeds, ("ok", [[wrapped + 1]]))[0] == "finding"


def test_a_loops_trip_count_is_not_mutated(seeds):
    """A trip count from a request runs the body as often as it says in any
    runtime: the inputs mode leaves it alone."""
    import random

    name, (model, feeds) = next((n, s) for n, s in sorted(seeds["ops"].items()) if n.startswith("Loop-counted"))
    for seed in range(20):
        changed = fuzz_importer.input_value_changed(model, feeds, random.Random(seed))
        assert changed is None or all(np.array_equal(a[1], b[1]) for a, b in zip(changed, feeds))
