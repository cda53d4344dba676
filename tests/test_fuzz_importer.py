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

# About 2 minutes with an empty kernel cache (compiling the detection parts'
# kernels dominates: 113 s on a loaded 2-core machine, 45 s with the cache
# filled); the full run is docs/fuzzing.md's.
pytestmark = pytest.mark.model
SUBSET = {"ops": (1000, 11), "detection": (500, 12)}  # family -> (mutants, seed)


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
INPUTS_SUBSET = {"ops": (300, 13), "detection": (150, 14)}


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
    assert "ok" in verdicts and "refused" in verdicts  # (the subset exercises both)


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
